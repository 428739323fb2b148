"""The tensor-parallel section of the report, all-gather-then-select against merge-partials: a comparison
table and a figure per tp (plotly only to draw a figure; without it a note in its place).

    perfsuite tp-page ROWS.jsonl... [--out tp.html]   (the table; with --out a standalone page)
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import Block, Note, Section, Table, figure_block, guarded_section
from perfsuite.variants import tensor_parallel

if TYPE_CHECKING:
    import plotly.graph_objects as go

SECTION_ID = "tp"
TITLE = "Tensor parallel: all-gather then select vs merge partials"
PAGE_TITLE = "perfsuite: tensor-parallel selection"
REPORT_AGAIN = "`perfsuite tp-page ROWS... --out FILE.html`"
SHAPE = ["dtype", "vocab", "batch", "topk"]
SPEEDUP_CAPTION = "speedup: fastest all-gather variant's median / fastest merge-partials variant's"
COLORS = ("#636efa", "#ab63fa", "#00cc96", "#ef553b")


def kind_sections(frame: pd.DataFrame, samples: pd.DataFrame | None = None) -> list[Section]:
    """This case kind's part of the report (`core.kinds`): the section of its rows, none without rows."""
    return guarded_section(SECTION_ID, TITLE, frame, section)


def section(frame: pd.DataFrame) -> Section:
    """The report's tensor-parallel section: the comparison table, then a figure per tp."""
    rows = tp_rows(frame)
    if rows.empty:
        return Section(SECTION_ID, TITLE, [Note("No tensor-parallel rows were measured.")])
    table = comparison(rows)
    cells = [[fmt.grouped(v) for v in row] for row in table.itertuples(index=False)]
    blocks: list[Block] = [Table([str(c) for c in table.columns], cells, SPEEDUP_CAPTION)]
    for tp in sorted(int(tp) for tp in rows["tp"].dropna().unique()):
        blocks.append(figure_block(f"tp-{tp}", _figure_title(tp), partial(figure, rows, tp)))
    return Section(SECTION_ID, TITLE, blocks)


def tp_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured rows of tensor-parallel variants."""
    if "tp" not in frame or "variant" not in frame:
        return frame.iloc[0:0]
    rows = frame[frame["variant"].isin(tensor_parallel.names()) & (frame["status"] == "ok")].copy()
    for column in ("tp", "vocab", "batch", "topk", "median_us", "comm_bytes_model"):
        rows[column] = pd.to_numeric(rows[column], errors="coerce") if column in rows else float("nan")
    return rows


def comparison(rows: pd.DataFrame) -> pd.DataFrame:
    """Per tp and shape: the faster all-gather and merge-partials variants, speedup and bytes ratio."""
    keys = ["tp", *SHAPE]
    wide = rows.pivot_table(index=keys, columns="variant", values="median_us", aggfunc="median")
    comm = rows.pivot_table(index=keys, columns="variant", values="comm_bytes_model", aggfunc="first")
    out = pd.DataFrame({f"{n} us": wide[n] for n in tensor_parallel.names() if n in wide}, index=wide.index)
    gathered = [n for n in wide if n.startswith("allgather_")]
    sharded = [n for n in wide if n.startswith("sharded_")]
    if gathered and sharded:
        out["speedup"] = wide[gathered].min(axis=1) / wide[sharded].min(axis=1)
        out["all-gather bytes/rank"] = comm[gathered].max(axis=1)
        out["partials bytes/rank"] = comm[sharded].min(axis=1)
    return out.reset_index()


def _figure_title(tp: int) -> str:
    return f"tp = {tp}: all-gather then select vs merge partials"


def _label(row: pd.Series) -> str:
    return f"{row['dtype']} V{row['vocab']} B{row['batch']} k{row['topk']}"


def figure(rows: pd.DataFrame, tp: int) -> go.Figure:
    """Time per call and interconnect bytes per rank, per shape and variant, at one tp (needs plotly)."""
    from plotly.subplots import make_subplots

    part = rows[rows["tp"] == tp].sort_values(SHAPE)
    labels = list(dict.fromkeys(part.apply(_label, axis=1)))
    titles = ("time per call (us, max over ranks)", "interconnect bytes per rank (model)")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=titles)
    for i, name in enumerate(n for n in tensor_parallel.names() if n in set(part["variant"])):
        mine = part[part["variant"] == name]
        x = list(mine.apply(_label, axis=1))
        style = {"name": name, "legendgroup": name, "marker_color": COLORS[i % len(COLORS)]}
        fig.add_bar(x=x, y=mine["median_us"], **style, row=1, col=1)
        fig.add_bar(x=x, y=mine["comm_bytes_model"], **style, showlegend=False, row=2, col=1)
    fig.update_xaxes(categoryorder="array", categoryarray=labels)
    fig.update_yaxes(type="log")
    fig.update_layout(title=_figure_title(tp), barmode="group", template="plotly_white", height=620)
    return fig
