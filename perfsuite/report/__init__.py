"""Reports of a run (`results.run.Run`): the HTML report (`html`), the text summary (`summary`), the compare
page (`compare_page`), all made of `blocks` rendered by `page`. Importable without plotly."""

from __future__ import annotations

from perfsuite.report.blocks import plots_available
from perfsuite.report.html import build_report

__all__ = ["build_report", "plots_available"]
