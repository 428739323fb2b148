"""Reports of a run (`results.run.Run`): the HTML report (`html`), the markdown summary, the compare page.

Every page is built from one vocabulary of blocks (`blocks`: sections, tables, figures, notes), numbers
written by `formatting`, and rendered by `page`. The report's sections: `kernel_sections` (with
`kernel_figures` and `kernel_context`), `tp_section`, `draft_section`, `edge_case_section`; the compare
page: `compare_page`.

Importable without plotly: `plots_available()` is None when the figures can be drawn, else the reason and
how to install it; the report is then written with every table and a note in place of each figure.
"""

from __future__ import annotations

from perfsuite.report.html import build_report
from perfsuite.report.plots import plots_available

__all__ = ["build_report", "plots_available"]
