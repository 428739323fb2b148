"""The report's vocabulary: sections made of tables, figures, notes, collapsible and titled groups.

Every page (the report, the compare page) and every section (kernel-level, draft loop, tensor parallel)
is built from these; `perfsuite.report.page` renders them. Figures go through `figure_block`, which
turns into a note when plotly is missing; section builders go through `guard`, which turns an
unexpected failure into a note.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd
from markupsafe import Markup

from perfsuite.report import formatting as fmt
from perfsuite.report.plots import missing_plot_note, plots_available

if TYPE_CHECKING:
    import plotly.graph_objects as go

FIGURE_CONFIG = {"displaylogo": False, "responsive": True}
REPORT_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 30, "t": 80, "b": 50}}
"""The look of the report's own figures (`fig.update_layout(**REPORT_LAYOUT)`)."""


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
class Details:
    """A collapsible block around other blocks."""

    summary: str
    blocks: list[Block]
    kind: str = "details"


@dataclass
class Subsection:
    """Blocks under a heading of their own, inside a section."""

    title: str
    blocks: list[Block]
    kind: str = "subsection"


Block = Table | Figure | Note | Details | Subsection


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
    section_id: str, title: str, frame: pd.DataFrame | None, build: Callable[[pd.DataFrame], Section | None]
) -> list[Section]:
    """The section `build` makes of `frame` as a list: empty without rows (or when `build` gives None), a
    note in its place when it breaks (a broken section must not cost the whole report)."""
    if frame is None or frame.empty:
        return []
    try:
        made = build(frame)
    except Exception as exc:
        return [Section(section_id, title, [Note(f"{title}: not drawn ({type(exc).__name__}: {exc})")])]
    return [] if made is None else [made]


def figure_block(name: str, title: str, build: Callable[[], go.Figure | dict], caption: str = "") -> Block:
    """The figure `build` returns (object, or plain dict of well-formed data and layout) as a div without
    plotly.js, with the id `fig-{name}`; without plotly, a note naming `title` in its place (`build` is
    then never called). The figure is drawn as built: its builder sets its look."""
    if plots_available() is not None:
        return Note(missing_plot_note(title))
    import plotly.graph_objects as go
    import plotly.io

    fig = build()
    html = plotly.io.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"fig-{name}",
        config=FIGURE_CONFIG,
        validate=isinstance(fig, go.Figure),
    )
    return Figure(name, Markup(html), caption)


def frame_table(frame: pd.DataFrame, caption: str = "") -> Table:
    """A plain table of a frame's cells as compact text (`formatting.number`)."""
    columns = [[fmt.number(v) for v in frame[c].tolist()] for c in frame.columns]
    rows = [list(r) for r in zip(*columns, strict=True)] if columns else []
    return Table([str(c) for c in frame.columns], rows, caption)
