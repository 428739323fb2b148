"""The kernel-level figures: latency and bandwidth against vocab, speedup heatmaps, peak temporary memory
and full_softmax's top-1 mismatch, each with the notes and tables that go with it.

Each builder returns blocks; a missing combination or an all-NaN column gives a note. Line and heatmap
figures are built as plain data and layout (plotly's per-trace validation costs seconds on large sweeps).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import REPORT_LAYOUT, Block, Note, Table, figure_block, guard
from perfsuite.report.kernel_context import (
    BASELINE,
    DTYPE_ORDER,
    FACET_ORDER,
    UNSTABLE,
    UNSTABLE_MARK,
    Context,
    case_label,
    dim_text,
    facet_rank,
    ordered,
    varying_keys,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

MAX_FACET_COLUMNS = 5  # batch sizes per latency / bandwidth figure
MAX_SLICES = 4  # figures per (path, topk, l2) combination
MAX_HEATMAP_ROWS = 8
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def _grid(
    rows: Sequence[object], cols: Sequence[object], title: str, *, height: int = 250, **subplots: object
) -> go.Figure:
    """The empty subplot grid (layout only) that `_facet_lines` and the heatmaps fill with plain traces."""
    from plotly.subplots import make_subplots

    spacing = {"vertical_spacing": min(0.12, 0.35 / max(len(rows), 1))}
    fig = make_subplots(rows=len(rows), cols=len(cols), **spacing | subplots)
    fig.update_layout(
        template="plotly_white",
        title=title,
        height=150 + height * len(rows),
        margin={"l": 60, "r": 40, "t": 90, "b": 50},
        legend={"title": None, "x": 1.04},
        hovermode="closest",
    )
    fig.update_annotations(font_size=12)
    return fig


def _axes(n: int) -> tuple[str, str]:
    """Trace axis references of the n-th subplot (row-major, from 1)."""
    return ("x", "y") if n == 1 else (f"x{n}", f"y{n}")


def _plain(fig: go.Figure, traces: list[dict]) -> dict:
    return {"data": traces, "layout": fig.to_dict()["layout"]}


@dataclass
class _Facets:
    """How a long frame maps onto a grid of line plots: rows, columns, colour and dash."""

    x: str
    y: str
    row: str | None
    col: str | None
    color: str
    dash: str | None
    hover: list[str]
    errors: tuple[str, str] | None = None  # columns of the upper and lower error bar lengths
    flag: str | None = None  # a column counting unstable rows behind each point: drawn as an open marker


def _facet_lines(ctx: Context, data: pd.DataFrame, spec: _Facets, title: str, **axes: object) -> dict:
    """Lines of `spec.y` against `spec.x` per colour (x dash) in a row x column grid, not validated.

    px builds and validates one trace object per line and panel; with ~150 lines per figure that is seconds.
    """
    rows = ordered(data[spec.row], FACET_ORDER) if spec.row else [None]
    cols = ordered(data[spec.col], FACET_ORDER) if spec.col else [None]
    fig = _grid(
        rows,
        cols,
        title,
        shared_xaxes=True,
        column_titles=[dim_text(spec.col, c) for c in cols] if spec.col else None,
        row_titles=[str(r) for r in rows] if spec.row and len(rows) > 1 else None,
        horizontal_spacing=min(0.06, 0.3 / max(len(cols), 1)),
    )
    fig.update_xaxes(**{k[2:]: v for k, v in axes.items() if k.startswith("x_")})
    fig.update_yaxes(**{k[2:]: v for k, v in axes.items() if k.startswith("y_")})
    for c in range(1, len(cols) + 1):
        fig.update_xaxes(title_text=spec.x, row=len(rows), col=c)
    fig.update_yaxes(title_text=axes.get("label", spec.y), col=1)
    dashes = {d: DASHES[i % len(DASHES)] for i, d in enumerate(ordered(data[spec.dash]))} if spec.dash else {}
    traces: list[dict] = []
    shown: set[str] = set()
    keys = [k for k in (spec.row, spec.col) if k]
    panels = data.groupby(keys, sort=False) if keys else [((), data)]
    index = {(r, c): i * len(cols) + j + 1 for i, r in enumerate(rows) for j, c in enumerate(cols)}
    for key, panel in panels:
        key = key if isinstance(key, tuple) else (key,)
        row = key[0] if spec.row else None
        col = key[-1] if spec.col else None
        xaxis, yaxis = _axes(index[(row, col)])
        traces += _panel_lines(ctx, panel, spec, xaxis, yaxis, dashes, shown)
    return _plain(fig, traces)


def _panel_lines(
    ctx: Context, panel: pd.DataFrame, spec: _Facets, xaxis: str, yaxis: str, dashes: dict, shown: set[str]
) -> list[dict]:
    traces = []
    groups = [spec.color, *([spec.dash] if spec.dash else [])]
    order = {v: i for i, v in enumerate(ctx.variants)}
    for key, line in sorted(panel.groupby(groups), key=lambda g: (order.get(g[0][0], 99), str(g[0]))):
        line = line.sort_values(spec.x)
        name = " · ".join(map(str, key))
        hover = "<br>".join(f"{h}: %{{customdata[{i}]}}" for i, h in enumerate(spec.hover))
        trace = {
            "type": "scatter",
            "mode": "lines+markers",
            "x": line[spec.x].to_numpy(),
            "y": line[spec.y].to_numpy(),
            "xaxis": xaxis,
            "yaxis": yaxis,
            "name": name,
            "legendgroup": name,
            "showlegend": name not in shown,
            "line": {
                "color": ctx.colors.get(key[0], "#444"),
                "dash": dashes.get(key[-1], "solid"),
                "width": 2,
            },
            "marker": _markers(line, spec.flag),
            "customdata": [[fmt.number(v) for v in r] for r in line[spec.hover].itertuples(index=False)],
            "hovertemplate": f"{hover}<br>{spec.y}: %{{y:.4g}}<extra>{name}</extra>",
        }
        if spec.errors:
            plus, minus = (line[c].to_numpy() for c in spec.errors)
            trace["error_y"] = {
                "type": "data",
                "array": plus,
                "arrayminus": minus,
                "thickness": 1,
                "width": 3,
            }
        shown.add(name)
        traces.append(trace)
    return traces


def _markers(line: pd.DataFrame, flag: str | None) -> dict:
    """Filled markers; open ones (a larger ring) where `flag` counts unstable rows behind the point."""
    if not flag or not (line[flag] > 0).any():
        return {"size": 6}
    unstable = (line[flag] > 0).to_numpy()
    return {
        "size": np.where(unstable, 9, 6).tolist(),
        "symbol": np.where(unstable, "circle-open", "circle").tolist(),
        "line": {"width": 2},
    }


def _pick(values: Iterable[object], n: int) -> list:
    """At most `n` of the sorted values, evenly spread, first and last included."""
    values = sorted(set(values))
    if len(values) <= n:
        return values
    idx = sorted({round(i * (len(values) - 1) / (n - 1)) for i in range(n)})
    return [values[i] for i in idx]


def _slices(frame: pd.DataFrame, keys: Sequence[str]) -> tuple[list[tuple[str, pd.DataFrame]], str]:
    """Split by the keys that vary: the largest `MAX_SLICES` pieces first, and a note on what was left out."""
    varying = varying_keys(frame, keys)
    if not varying:
        return [("", frame)], ""
    groups = sorted(frame.groupby(varying, sort=False), key=lambda g: -len(g[1]))
    kept = [(case_label(varying, g if isinstance(g, tuple) else (g,)), f) for g, f in groups]
    if len(kept) <= MAX_SLICES:
        return kept, ""
    left = ", ".join(label for label, _ in kept[MAX_SLICES:])
    return kept[:MAX_SLICES], f"Not drawn (fewest cases): {left}."


def _over_logits(frame: pd.DataFrame, values: dict[str, str], keys: Sequence[str]) -> pd.DataFrame:
    """Median of each value over the logits distributions of a case (timing barely depends on them)."""
    agg = {column: (column, how) for column, how in values.items()}
    agg["logits"] = ("logits", lambda s: ", ".join(sorted(set(s))))
    return frame.groupby(list(keys), dropna=False, sort=True).agg(**agg).reset_index()


def _line_figures(
    ctx: Context, name: str, y: str, y_label: str, caption: str, *, log_y: bool, errors: bool = False
) -> list[Block]:
    """`y` against vocab per variant, a figure per (path, topk, L2) slice; batch in columns, dtype in rows."""
    data = ctx.ok[ctx.ok[y].notna() & ctx.ok["vocab"].notna() & ctx.ok["batch"].notna()]
    if data.empty:
        return [Note(f"{y_label}: no values in '{y}', figure skipped.")]
    keys = [ctx.unit, "path", "topk", "l2", "dtype", "batch", "vocab", "variant"]
    values = {y: "median", "samples": "median", "timing": "first", UNSTABLE: "sum"}
    if errors:
        values |= {"p20_us": "median", "p80_us": "median"}
    hover = [
        "variant",
        ctx.unit,
        "path",
        "dtype",
        "batch",
        "vocab",
        "topk",
        "l2",
        "logits",
        "samples",
        "timing",
        "unstable",
    ]
    if "launch" in data:  # the Triton variants' plan (older results files lack the column)
        values["launch"] = "first"
        hover.append("launch")
    spec = _Facets(
        x="vocab",
        y=y,
        row="dtype" if data["dtype"].nunique() > 1 else None,
        col="batch",
        color="variant",
        dash=ctx.unit if ctx.several_devices else None,
        hover=hover + (["p20_us", "p80_us"] if errors else []),
        errors=("err_plus", "err_minus") if errors else None,
        flag=UNSTABLE,
    )
    blocks: list[Block] = []
    slices, note = _slices(data, ["path", "topk", "l2"])
    for i, (label, part) in enumerate(slices):
        part = part[part["batch"].isin(_pick(part["batch"], MAX_FACET_COLUMNS))]
        agg = _over_logits(part, values, keys)
        rows = part.groupby(keys, dropna=False, sort=True).size().to_numpy()
        flags = zip(agg[UNSTABLE], rows, strict=True)
        agg["unstable"] = [f"{n} of {m} logits" if n else "no" for n, m in flags]
        if errors:
            agg["err_plus"] = (agg["p80_us"] - agg[y]).clip(lower=0)
            agg["err_minus"] = (agg[y] - agg["p20_us"]).clip(lower=0)
        title = f"{y_label}{' · ' + label if label else ''}"
        axes = {"x_type": "log", "x_dtick": "D2", "y_type": "log" if log_y else "linear", "label": y_label}
        axes |= {"y_dtick": "D2"} if log_y else {}
        build = partial(_facet_lines, ctx, agg, spec, title, **axes)
        blocks.append(figure_block(f"{name}-{i}", title, build, caption))
    if note:
        blocks.append(Note(note))
    return blocks


def latency_figures(ctx: Context) -> list[Block]:
    """Median time per call against vocab, with p20-p80 error bars."""
    caption = (
        "Median time per call (markers) with the 20th-80th percentile as error bars, against the vocabulary "
        "size. Columns: batch size; rows: logits dtype; line style: device (and run, where runs of one "
        "device are kept apart). Each point: the median over logits distributions. Open rings: unstable (the "
        "samples' p20-p80 spread above 25 % of the median for at least one logits distribution; the hover "
        "says how many): do not rank variants on those points."
    )
    return _line_figures(ctx, "latency", "median_us", "latency (µs)", caption, log_y=True, errors=True)


def _bandwidth_metric(ok: pd.DataFrame) -> tuple[str, str] | None:
    """pct_peak, else pct_copy, else gbps: the first that covers every device, else the best covered."""
    choices = [("pct_peak", "% of datasheet peak"), ("pct_copy", "% of measured copy"), ("gbps", "GB/s")]
    present = [(c, label) for c, label in choices if ok[c].notna().any()]
    if not present:
        return None
    devices = set(ok["device"])
    for column, label in present:
        if set(ok.loc[ok[column].notna(), "device"]) == devices:
            return column, label
    return max(present, key=lambda c: ok[c[0]].notna().sum())


def bandwidth_figures(ctx: Context) -> list[Block]:
    """Achieved bandwidth against vocab, in the best-covered metric."""
    metric = _bandwidth_metric(ctx.ok)
    if metric is None:
        return [Note("Bandwidth: no pct_peak, pct_copy or gbps values, figure skipped.")]
    column, label = metric
    caption = f"Achieved bandwidth by each variant's bytes model, as {label} ('{column}'), against vocab."
    if column != "pct_peak":
        caption += (
            " The datasheet peak is unknown for some device (e.g. a CPU): this is what every device has."
        )
    missing = ctx.ok[ctx.ok[column].isna()]
    blocks = _line_figures(ctx, "bandwidth", column, f"bandwidth ({label})", caption, log_y=False)
    if len(missing):
        blocks.append(Note(f"{len(missing)} ok cases have no '{column}' value and are not drawn."))
    return blocks


def speedup_figures(ctx: Context) -> list[Block]:
    """A heatmap of the speedup over full_softmax per variant."""
    data = ctx.ok[ctx.ok["speedup_vs_full"].notna() & (ctx.ok["variant"] != BASELINE)]
    data = data[data["batch"].notna() & data["vocab"].notna()]
    if data.empty:
        return [Note("Speedup: no variant has a full_softmax baseline to compare with, figures skipped.")]
    blocks: list[Block] = []
    for variant in [v for v in ctx.variants if v in set(data["variant"])]:
        blocks += guard(f"speedup {variant}", lambda v=variant: _speedup_heatmap(data, v, ctx.unit))
    return blocks


def speedup_cells(part: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One speedup per case (`keys`) over its logits distributions: the median speedup, the medians of the
    paired p20 and p80 (NaN where not paired), how it was measured and how many rows are unstable."""
    data = part.assign(
        _p20=pd.to_numeric(part["speedup_p20"], errors="coerce"),
        _p80=pd.to_numeric(part["speedup_p80"], errors="coerce"),
        _method=part["speedup_method"].astype(object).fillna("medians").astype(str),
    )
    return data.groupby(list(keys), dropna=False, sort=True).agg(
        speedup=("speedup_vs_full", "median"),
        p20=("_p20", "median"),
        p80=("_p80", "median"),
        method=("_method", lambda m: ", ".join(sorted(set(m)))),
        unstable=(UNSTABLE, "sum"),
        rows=("variant", "size"),
    )


def band_text(cell: pd.Series | object) -> str:
    """How a speedup was measured: "paired, p20-p80 1.03-1.25×" or "ratio of medians"."""
    method = str(getattr(cell, "method", ""))
    p20, p80 = getattr(cell, "p20", math.nan), getattr(cell, "p80", math.nan)
    if "paired" in method and not (fmt.is_nan(float(p20)) or fmt.is_nan(float(p80))):
        return f"paired, p20-p80 {p20:.2f}-{p80:.2f}×" + (" (mixed)" if "medians" in method else "")
    return "ratio of medians"


def _speedup_heatmap(data: pd.DataFrame, variant: str, unit: str) -> list[Block]:
    part = data[data["variant"] == variant]
    row_keys = [unit, *varying_keys(part, ["path", "topk", "l2"])]
    all_rows = list(part[row_keys].drop_duplicates().itertuples(index=False, name=None))
    all_rows.sort(key=lambda r: [facet_rank(v) for v in r])
    rows = all_rows[:MAX_HEATMAP_ROWS]
    dtypes = ordered(part["dtype"], DTYPE_ORDER)
    titles = [f"{case_label(row_keys, r)} · {d}" for r in rows for d in dtypes]
    cells = speedup_cells(part, [*row_keys, "dtype", "batch", "vocab"])
    panels = cells.index.droplevel(["batch", "vocab"])
    traces, limit = [], 1.0
    for r, row in enumerate(rows):
        for c, dtype in enumerate(dtypes):
            key = (*row, dtype)
            if key not in panels:
                continue
            grid = cells.loc[key]
            values = grid["speedup"].unstack("vocab").sort_index().sort_index(axis=1)
            limit = max(limit, float(np.nanmax(np.abs(np.log2(values.to_numpy(dtype=float))))))
            name, axes = titles[r * len(dtypes) + c], _axes(r * len(dtypes) + c + 1)
            traces.append(_heatmap_trace(values, grid, name, axes))
    title = f"speedup of {variant} over full_softmax"
    build = partial(_heatmap_grid, rows, dtypes, titles, traces, min(math.ceil(limit), 4), title)
    blocks = [figure_block(f"speedup-{variant}", title, build, _speedup_caption(variant, part))]
    if len(all_rows) > len(rows):
        blocks.append(Note(f"speedup {variant}: {len(all_rows) - len(rows)} device/path rows not drawn."))
    return blocks


def _heatmap_grid(
    rows: list[tuple], dtypes: list, titles: list[str], traces: list[dict], limit: int, title: str
) -> dict:
    """The heatmaps' figure: a panel per (row, dtype), one log2 colour scale centred at 1× up to 2**limit."""
    fig = _grid(rows, dtypes, title, height=230, subplot_titles=titles)
    ticks = list(range(-limit, limit + 1))
    colorbar = {"title": {"text": "speedup"}, "tickvals": ticks, "ticktext": [f"{2.0**t:g}×" for t in ticks]}
    fig.update_layout(coloraxis={"colorscale": "RdBu", "cmin": -limit, "cmax": limit, "colorbar": colorbar})
    fig.update_xaxes(type="category", title_text="vocab", title_standoff=4)
    fig.update_yaxes(type="category", title_text="batch", title_standoff=4)
    return _plain(fig, traces)


def _heatmap_trace(grid: pd.DataFrame, cells: pd.DataFrame, name: str, axes: tuple[str, str]) -> dict:
    """A heatmap of `grid` (speedups, batch x vocab); each cell's text: the speedup, a mark when unstable,
    and the paired p20-p80 band below it; the hover says how it was measured."""
    values = grid.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log2(values)
    text, hover = [], []
    for batch in grid.index:
        text.append([])
        hover.append([])
        for vocab in grid.columns:
            cell = cells.loc[(batch, vocab)] if (batch, vocab) in cells.index else None
            if cell is None or fmt.is_nan(float(cell["speedup"])):
                text[-1].append("")
                hover[-1].append("")
                continue
            mark = f" {UNSTABLE_MARK}" if cell["unstable"] else ""
            paired = "paired" in str(cell["method"]) and not fmt.is_nan(float(cell["p20"]))
            band = f"<br>{cell['p20']:.2f}-{cell['p80']:.2f}" if paired else ""
            text[-1].append(f"{fmt.speedup(cell['speedup'])}{mark}{band}")
            unstable = f"<br>unstable: {int(cell['unstable'])} of {int(cell['rows'])} logits" if mark else ""
            hover[-1].append(f"{fmt.speedup(cell['speedup'])} ({band_text(cell)}){unstable}")
    return {
        "type": "heatmap",
        "x": [fmt.number(v) for v in grid.columns],
        "y": [fmt.number(v) for v in grid.index],
        "z": np.where(np.isfinite(z), z, np.nan),
        "text": text,
        "customdata": hover,
        "texttemplate": "%{text}",
        "coloraxis": "coloraxis",
        "name": name,
        "xaxis": axes[0],
        "yaxis": axes[1],
        "hovertemplate": "batch %{y}<br>vocab %{x}<br>speedup %{customdata}<extra>%{fullData.name}</extra>",
    }


def _speedup_caption(variant: str, part: pd.DataFrame) -> str:
    methods = part["speedup_method"].astype(object).fillna("medians").astype(str)
    paired = int(methods.eq("paired").sum())
    how = (
        f"{paired} of {len(part)} rows paired: {variant} and full_softmax were sampled in turn, the speedup "
        "is the median of the per-round ratios and the second line of a cell its p20-p80 band"
        if paired
        else "every speedup is the ratio of full_softmax's median to the variant's (no paired rounds)"
    )
    if 0 < paired < len(part):
        how += "; the other rows (no band): the ratio of the two medians"
    return (
        f"Cells: full_softmax's time over {variant}'s for the same device (and run), path, dtype and "
        f"shape, the median over logits distributions; {how}. {UNSTABLE_MARK}: a case behind the cell is "
        "unstable. Blue: faster than full_softmax; red: slower; the colour scale is logarithmic and "
        "centred at 1×."
    )


def memory_figure(ctx: Context) -> list[Block]:
    """Peak temporary bytes per logit, measured against the model, and the table at the largest shape."""
    data = ctx.ok[ctx.ok["batch"].notna() & ctx.ok["vocab"].notna()]
    if data[["peak_temp_bytes", "model_temp_bytes"]].isna().all().all():
        return [Note("Memory: no peak_temp_bytes or model_temp_bytes values, figure skipped.")]
    keys = [ctx.unit, "variant", "dtype", "batch", "vocab"]
    agg = data.groupby(keys, dropna=False)[["peak_temp_bytes", "model_temp_bytes"]].max().reset_index()
    agg["elements"] = (agg["batch"] * agg["vocab"]).astype(float)
    long = agg.melt([*keys, "elements"], ["peak_temp_bytes", "model_temp_bytes"], "source", "bytes")
    long = long[long["bytes"].notna()].copy()
    long["source"] = long["source"].map({"peak_temp_bytes": "measured", "model_temp_bytes": "model"})
    long["bytes per logit"] = long["bytes"] / long["elements"]
    long["MiB"] = long["bytes"] / 2**20
    spec = _Facets(
        x="elements",
        y="bytes per logit",
        row=ctx.unit if ctx.several_devices else None,
        col="dtype" if long["dtype"].nunique() > 1 else None,
        color="variant",
        dash="source",
        hover=["variant", "source", ctx.unit, "dtype", "batch", "vocab", "MiB"],
    )
    title = "peak temporary memory per logit: measured (solid) vs the variant's model (dashed)"
    axes = {"x_type": "log", "x_dtick": "D2", "label": "temporary bytes per logit"}
    build = partial(_facet_lines, ctx, long, spec, title, **axes)
    caption = (
        "Largest temporary a call allocates beyond its input, divided by batch × vocab (x axis; worst case "
        "over paths, k and logits). 2 bytes/logit is a bf16 [B, V] copy, 4 an fp32 one; 0: no [B, V] "
        "temporary."
    )
    return [figure_block("memory", title, build, caption), _memory_table(agg, ctx.unit)]


def _memory_table(agg: pd.DataFrame, unit: str) -> Table:
    rows = []
    for (device, variant, dtype), part in agg.groupby([unit, "variant", "dtype"], sort=True):
        big = part.loc[part["elements"].idxmax()]
        measured, model = big["peak_temp_bytes"], big["model_temp_bytes"]
        ratio = measured / model if model and not fmt.is_nan(model) else math.nan
        sizes = [fmt.number(big["batch"]), fmt.number(big["vocab"])]
        rows.append(
            [device, variant, dtype, *sizes, fmt.mebibytes(measured), fmt.mebibytes(model), fmt.number(ratio)]
        )
    columns = [unit, "variant", "dtype", "batch", "vocab", "measured", "model", "measured / model"]
    return Table(columns, rows, "Peak temporary memory at the largest batch × vocab per variant and dtype.")


def mismatch_figure(ctx: Context) -> list[Block]:
    """Headline: how often full_softmax's top token is not the float64 reference's, per dtype and logits."""
    base = ctx.frame[(ctx.frame["variant"] == BASELINE) & ctx.frame["top1_mismatch_f64"].notna()]
    if base.empty:
        return [Note("Top-1 mismatch: full_softmax has no top1_mismatch_f64 values, figure skipped.")]
    keys = [ctx.unit, "dtype", "logits"]
    agg = base.groupby(keys).apply(_weighted_mismatch, include_groups=False).reset_index()
    agg["percent"] = 100 * agg["mismatch"]
    title = "How often full_softmax picks a different top token than the float64 reference"
    caption = (
        "Share of finite rows whose first full_softmax token is neither the float64 reference's token nor an "
        "equal-logit tie of it (rows pooled over shapes and paths; the worst single case in the hover). In "
        "bf16/fp16 the softmax rounds near-equal probabilities to equal ones, creating ties the logits did "
        "not have; `max` then returns the lowest index among them."
    )
    worst = agg.loc[agg["mismatch"].idxmax()]
    headline = Note(
        f"Worst: {fmt.percent(worst['mismatch'])} of rows for {worst['dtype']} logits '{worst['logits']}' "
        f"on {worst[ctx.unit]}."
    )
    build = partial(_mismatch_bars, agg, title, ctx.unit if ctx.several_devices else None)
    return [headline, figure_block("top1-mismatch", title, build, caption)]


def _mismatch_bars(agg: pd.DataFrame, title: str, facet: str | None) -> go.Figure:
    import plotly.express as px

    fig = px.bar(
        agg,
        x="logits",
        y="percent",
        color="dtype",
        barmode="group",
        facet_col=facet,
        text=agg["percent"].map(lambda v: f"{v:.3g}"),
        hover_data=[facet or "device", "dtype", "logits", "cases", "rows", "worst_case"],
        labels={"percent": "rows with a different top token (%)", "logits": "logits distribution"},
        category_orders={"dtype": ordered(agg["dtype"], DTYPE_ORDER)},
        title=title,
    )
    fig.update_layout(height=440, legend={"title": {"text": "dtype"}})
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_layout(**REPORT_LAYOUT)
    return fig


def _weighted_mismatch(part: pd.DataFrame) -> pd.Series:
    weights = part["finite_rows"].fillna(0)
    share = part["top1_mismatch_f64"]
    mismatch = float((share * weights).sum() / weights.sum()) if weights.sum() > 0 else float(share.mean())
    return pd.Series(
        {
            "mismatch": mismatch,
            "cases": len(part),
            "rows": int(weights.sum()),
            "worst_case": float(share.max()),
        }
    )
