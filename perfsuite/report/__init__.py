"""Reports from result rows: load result files back (`load`) and write the HTML report (`html`).

Importable without plotly: `plots_available()` is None when the figures can be drawn, else the reason and
how to install it; the report is then written with every table and a note in place of each figure.
"""

from __future__ import annotations

from perfsuite.report.html import build_report, plots_available
from perfsuite.report.load import coerce, load_many, load_results

__all__ = ["build_report", "coerce", "load_many", "load_results", "plots_available"]
