"""The pages' vocabulary: sections of tables, figures, notes, collapsible and titled groups (`page` renders
them). A builder that fails becomes a note (`guard`), and so does a figure without plotly (`figure_block`):
plotly is optional, `plots_available` says why it cannot draw and how to install it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

import pandas as pd
from markupsafe import Markup

from perfsuite.report import formatting as fmt

if TYPE_CHECKING:
    import plotly.graph_objects as go

PLOTLY_PARTS = ("express", "graph_objects", "io", "offline", "subplots")  # plotly itself is imported first
GET_PLOTLY = (
    "`pip install plotly`, or offline: `scripts/fetch_wheels.sh` on a machine with network, copy its `.whl/` "
    "folder here, then `pip install --no-index --find-links .whl plotly`"
)
REPORT_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 30, "t": 80, "b": 50}}
"""The look of the report's own figures (`fig.update_layout(**REPORT_LAYOUT)`)."""


@cache
def plots_available() -> str | None:
    """None when plotly can draw the figures; else why not and how to get it (one line, for a terminal)."""
    try:
        for module in ("plotly", *(f"plotly.{m}" for m in PLOTLY_PARTS)):  # plotly first: the usual miss
            importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "plotly":
            return f"plotly is not installed: {GET_PLOTLY}"
        return f"plotly cannot be imported ({type(exc).__name__}: {exc}): {GET_PLOTLY}"
    return None


@dataclass
class Cell:
    """A table cell: text, an optional CSS class (win, loss, even, differs, invalid, error) and a tooltip."""

    text: str
    cls: str = ""
    title: str = ""


@dataclass
class Table:
    """Rows of cells (a plain string is a cell without class or tooltip) under a header and a caption."""

    columns: list[str]
    rows: list[list[Cell | str]]
    caption: str = ""
    kind: str = "table"
    css: str = ""


@dataclass
class Figure:
    """A plotly figure as a div (without plotly.js: the page inlines it once), with a caption."""

    name: str
    html: Markup
    caption: str = ""
    kind: str = "figure"


@dataclass
class Note:
    """One line of text: a finding, a reason something is missing, a figure that could not be drawn."""

    text: str
    kind: str = "note"


@dataclass
class Group:
    """Blocks under a heading of their own (`kind` "subsection"), or collapsed under a line ("details")."""

    title: str
    blocks: list[Block]
    kind: str = "subsection"


Block = Table | Figure | Note | Group


@dataclass
class Section:
    """A titled part of a page (an entry of its navigation): an introduction, then blocks."""

    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    intro: str = ""


def guard(name: str, build: Callable[[], Block | list[Block]]) -> list[Block]:
    """Run a block builder; an unexpected failure becomes a note rather than a crashed report."""
    try:
        blocks = build()
    except Exception as err:  # a report with one figure missing beats no report
        return [Note(f"{name}: not drawn ({type(err).__name__}: {err})")]
    return blocks if isinstance(blocks, list) else [blocks]


def guarded_section(
    section_id: str, title: str, build: Callable[..., Section | None], frame: pd.DataFrame | None, *_: object
) -> list[Section]:
    """The section `build` makes of `frame` as a list: empty without rows (or when `build` gives None), a
    note in its place when it breaks (a broken section must not cost the whole report). Bound to a section
    (`partial`), a case kind's `kind_sections(frame, samples)` (`core.kinds`; the samples unused)."""
    made = guard(title, lambda: [] if frame is None or frame.empty else build(frame) or [])
    return [m if isinstance(m, Section) else Section(section_id, title, [m]) for m in made]


def figure_block(name: str, title: str, build: Callable[[], go.Figure | dict], caption: str = "") -> Block:
    """The figure `build` returns (a figure, or a plain dict of data and layout) as a div `fig-{name}`
    without plotly.js; without plotly, a note naming `title` in its place."""
    if plots_available() is not None:
        return Note(f"{title}: plot not drawn, plotly is missing (see the note at the top).")
    import plotly.graph_objects as go
    import plotly.io

    fig = build()
    config, div = {"displaylogo": False, "responsive": True}, f"fig-{name}"
    html = plotly.io.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div, config=config,
                             validate=isinstance(fig, go.Figure))  # fmt: skip
    return Figure(name, Markup(html), caption)


def frame_table(frame: pd.DataFrame, caption: str = "", css: str = "") -> Table:
    """A plain table of a frame's cells as compact text (`formatting.number`)."""
    rows = [[fmt.number(v) for v in row] for row in frame.itertuples(index=False)]
    return Table([str(c) for c in frame.columns], rows, caption, css=css)
