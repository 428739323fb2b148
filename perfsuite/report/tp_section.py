"""The tensor-parallel section of the report (and of `perfsuite tp-page`): all-gather then select
(`tensor_parallel.ALLGATHER_PREFIX`) against merge partials (the others), a table and a figure per tp."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import pandas as pd

from perfsuite.core import kinds
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
FIGURE_TITLE = "tp = {}: all-gather then select vs merge partials"
COLORS = ("#636efa", "#ab63fa", "#00cc96", "#ef553b")


def section(frame: pd.DataFrame) -> Section:
    """The report's tensor-parallel section: the comparison table, then a figure per tp."""
    rows = tp_rows(frame)
    if rows.empty:
        return Section(SECTION_ID, TITLE, [Note("No tensor-parallel rows were measured.")])
    table = comparison(rows)
    cells = [[fmt.grouped(v) for v in row] for row in table.itertuples(index=False)]
    blocks: list[Block] = [Table([str(c) for c in table.columns], cells, SPEEDUP_CAPTION)]
    for tp in sorted(int(tp) for tp in rows["tp"].dropna().unique()):
        blocks.append(figure_block(f"tp-{tp}", FIGURE_TITLE.format(tp), partial(figure, rows, tp)))
    return Section(SECTION_ID, TITLE, blocks)


def tp_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured rows of the tensor-parallel kind (its variants, or tp > 1)."""
    if "variant" not in frame or frame.empty:
        return frame.iloc[0:0]
    rows = kinds.rows_of(kinds.get("tensor_parallel"), frame)
    rows = rows[rows["status"] == "ok"]
    return rows if "comm_bytes_model" in rows else rows.assign(comm_bytes_model=float("nan"))


def _variants(rows: pd.DataFrame) -> list[str]:
    """The variants of `rows`: the registered ones first, in the registry's order (the baseline first)."""
    rank = {v: i for i, v in enumerate(tensor_parallel.names())}
    return sorted(set(rows["variant"]), key=lambda v: (rank.get(v, len(rank)), v))


def comparison(rows: pd.DataFrame) -> pd.DataFrame:
    """Per tp and shape: each variant's median, the faster all-gather variant's over the faster
    merge-partials one's (speedup) and the interconnect bytes per rank of each side."""
    keys = ["tp", *SHAPE]
    wide = rows.pivot_table(index=keys, columns="variant", values="median_us", aggfunc="median")
    comm = rows.pivot_table(index=keys, columns="variant", values="comm_bytes_model", aggfunc="first")
    out = pd.DataFrame({f"{n} us": wide[n] for n in _variants(rows) if n in wide}, index=wide.index)
    gathered = [n for n in wide if n.startswith(tensor_parallel.ALLGATHER_PREFIX)]
    partials = [n for n in wide if n not in gathered]
    if gathered and partials:
        out["speedup"] = wide[gathered].min(axis=1) / wide[partials].min(axis=1)
        out["all-gather bytes/rank"] = comm.reindex(columns=gathered).max(axis=1)
        out["partials bytes/rank"] = comm.reindex(columns=partials).min(axis=1)
    return out.reset_index()


def figure(rows: pd.DataFrame, tp: int) -> go.Figure:
    """Time per call and interconnect bytes per rank, per shape and variant, at one tp (needs plotly)."""
    from plotly.subplots import make_subplots

    part = rows[rows["tp"] == tp].sort_values(SHAPE)
    label = part["dtype"].astype(str) + " V" + part["vocab"].map(fmt.number)
    label += " B" + part["batch"].map(fmt.number) + " k" + part["topk"].map(fmt.number)
    part = part.assign(_label=label)
    titles = ("time per call (us, max over ranks)", "interconnect bytes per rank (model)")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=titles)
    for i, name in enumerate(_variants(part)):
        mine = part[part["variant"] == name]
        style = {"name": name, "legendgroup": name, "marker_color": COLORS[i % len(COLORS)]}
        fig.add_bar(x=mine["_label"], y=mine["median_us"], **style, row=1, col=1)
        fig.add_bar(x=mine["_label"], y=mine["comm_bytes_model"], **style, showlegend=False, row=2, col=1)
    fig.update_xaxes(categoryorder="array", categoryarray=list(dict.fromkeys(part["_label"])))
    fig.update_yaxes(type="log")
    fig.update_layout(title=FIGURE_TITLE.format(tp), barmode="group", template="plotly_white", height=620)
    return fig


kind_sections = partial(guarded_section, SECTION_ID, TITLE, section)
"""This case kind's part of the report (`core.kinds`): the section of its rows, none without rows."""
