"""Whether the figures can be drawn (plotly importable), and what a page says in their place when not.

plotly is optional: without it every table is still written and each figure becomes a note.
"""

from __future__ import annotations

import importlib
from functools import cache

PLOTLY_MODULES = (
    "plotly",
    "plotly.express",
    "plotly.graph_objects",
    "plotly.io",
    "plotly.offline",
    "plotly.subplots",
)
GET_PLOTLY = (
    "`pip install plotly`, or offline: `scripts/fetch_wheels.sh` on a machine with network, copy its `.whl/` "
    "folder here, then `pip install --no-index --find-links .whl plotly`"
)


@cache
def plots_available() -> str | None:
    """None when plotly can draw the figures; else why not and how to get it (one line, for a terminal)."""
    try:
        for module in PLOTLY_MODULES:  # plotly itself first: its absence is the common case
            importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "plotly":
            return f"plotly is not installed: {GET_PLOTLY}"
        return f"plotly cannot be imported ({type(exc).__name__}: {exc}): {GET_PLOTLY}"
    return None


def missing_plots_banner(report_again: str) -> str:
    """The note at the top of a page drawn without plotly: why, and the command that redraws it."""
    return f"The plots are missing. {plots_available()}; then re-render with {report_again}."


def missing_plot_note(title: str) -> str:
    """The note standing in for one figure when plotly is missing."""
    return f"{title}: plot not drawn, plotly is missing (see the note at the top)."
