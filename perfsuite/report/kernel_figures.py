"""The kernel-level figures: latency and bandwidth against vocab, the timed samples' distributions, speedup
heatmaps, peak temporary memory and the baseline's top-1 mismatch. Line, heatmap and box figures are plain
data and layout (plotly's per-trace validation costs seconds on large sweeps); a builder without data gives
a note."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report import kernel_context as kc
from perfsuite.report.blocks import REPORT_LAYOUT, Block, Note, Table, figure_block, guard
from perfsuite.report.kernel_context import UNSTABLE, UNSTABLE_MARK, Context, case_label, dim_text, ordered

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from perfsuite.report.kernel_context import Summary

MAX_FACET_COLUMNS = 5  # batch sizes per latency / bandwidth figure
MAX_SLICES = 4  # figures per (path, topk, l2) combination
MAX_HEATMAP_ROWS = 8
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
MAX_SHAPES = 6  # distributions drawn (panels), over every device and run together
MAX_SAMPLES = 200  # samples drawn per case; a case with more is thinned evenly (`thin`)
MAX_COLUMNS = 3
SHAPE_KEYS = ("path", "dtype", "batch", "vocab", "topk", "l2", "logits")
FIGURE_TITLE = "distribution of the timed samples"


def grid(
    rows: Sequence[object], cols: Sequence[object], title: str, *, height: int = 250, **subplots: object
) -> go.Figure:
    """The empty subplot grid (layout only) that the lines, heatmaps and boxes fill with plain traces."""
    from plotly.subplots import make_subplots

    spacing = {"vertical_spacing": min(0.12, 0.35 / max(len(rows), 1))}
    fig = make_subplots(rows=len(rows), cols=len(cols), **spacing | subplots)
    margin, legend = {"l": 60, "r": 40, "t": 90, "b": 50}, {"title": None, "x": 1.04}
    fig.update_layout(template="plotly_white", title=title, height=150 + height * len(rows), margin=margin,
                      legend=legend, hovermode="closest")  # fmt: skip
    fig.update_annotations(font_size=12)
    return fig


def axes(n: int) -> tuple[str, str]:
    """Trace axis references of the n-th subplot (row-major, from 1)."""
    return ("x", "y") if n == 1 else (f"x{n}", f"y{n}")


def plain(fig: go.Figure, traces: list[dict]) -> dict:
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
    flag: str | None = None  # a column counting unstable rows behind each point: drawn as a larger open ring


def _facet_lines(ctx: Context, data: pd.DataFrame, spec: _Facets, title: str, **layout: object) -> dict:
    """Lines of `spec.y` against `spec.x` per colour (x dash) in a row x column grid, not validated."""
    rows = ordered(data[spec.row]) if spec.row else [None]
    cols = ordered(data[spec.col]) if spec.col else [None]
    fig = grid(
        rows, cols, title, shared_xaxes=True, horizontal_spacing=min(0.06, 0.3 / max(len(cols), 1)),
        column_titles=[dim_text(spec.col, c) for c in cols] if spec.col else None,
        row_titles=[str(r) for r in rows] if spec.row and len(rows) > 1 else None,
    )  # fmt: skip
    fig.update_xaxes(**{k[2:]: v for k, v in layout.items() if k.startswith("x_")})
    fig.update_yaxes(**{k[2:]: v for k, v in layout.items() if k.startswith("y_")})
    for c in range(1, len(cols) + 1):
        fig.update_xaxes(title_text=spec.x, row=len(rows), col=c)
    fig.update_yaxes(title_text=layout.get("label", spec.y), col=1)
    dashes = {d: DASHES[i % len(DASHES)] for i, d in enumerate(ordered(data[spec.dash]))} if spec.dash else {}
    traces: list[dict] = []
    shown: set[str] = set()
    keys, groups = [k for k in (spec.row, spec.col) if k], [spec.color, *([spec.dash] if spec.dash else [])]
    index = {(r, c): i * len(cols) + j + 1 for i, r in enumerate(rows) for j, c in enumerate(cols)}
    order = {v: i for i, v in enumerate(ctx.variants)}
    hover = "<br>".join(f"{h}: %{{customdata[{i}]}}" for i, h in enumerate(spec.hover))
    for key, panel in data.groupby(keys, sort=False) if keys else [((), data)]:
        key = key if isinstance(key, tuple) else (key,)
        where = axes(index[(key[0] if spec.row else None, key[-1] if spec.col else None)])
        for key, line in sorted(panel.groupby(groups), key=lambda g: (order.get(g[0][0], 99), str(g[0]))):
            line, name = line.sort_values(spec.x), " · ".join(map(str, key))
            unstable = (line[spec.flag] > 0).to_numpy() if spec.flag else np.zeros(len(line), dtype=bool)
            marker: dict = {"size": 6}
            if unstable.any():
                symbols = np.where(unstable, "circle-open", "circle").tolist()
                marker = {"size": np.where(unstable, 9, 6).tolist(), "symbol": symbols, "line": {"width": 2}}
            trace = {
                "type": "scatter", "mode": "lines+markers", "x": line[spec.x].to_numpy(),
                "y": line[spec.y].to_numpy(), "xaxis": where[0], "yaxis": where[1], "name": name,
                "legendgroup": name, "showlegend": name not in shown, "marker": marker,
                "line": {"color": ctx.colors.get(key[0], "#444"), "dash": dashes.get(key[-1], "solid"),
                         "width": 2},
                "customdata": [[fmt.number(v) for v in r] for r in line[spec.hover].itertuples(index=False)],
                "hovertemplate": f"{hover}<br>{spec.y}: %{{y:.4g}}<extra>{name}</extra>",
            }  # fmt: skip
            if spec.errors:
                plus, minus = (line[c].to_numpy() for c in spec.errors)
                bars = {"array": plus, "arrayminus": minus, "thickness": 1, "width": 3}
                trace["error_y"] = {"type": "data", **bars}
            shown.add(name)
            traces.append(trace)
    return plain(fig, traces)


def spread(values: Sequence[object], n: int) -> list:
    """At most `n` of `values`, evenly spread, first and last included."""
    if len(values) <= n or n == 1:
        return list(values[-n:])
    return [values[i] for i in sorted({round(i * (len(values) - 1) / max(n - 1, 1)) for i in range(n)})]


HOVER = ["path", "dtype", "batch", "vocab", "topk", "l2", "logits", "samples", "timing", "unstable", "launch"]
BAND = ["p20_us", "p80_us"]
NO_PEAK = " The datasheet peak is unknown for some device (e.g. a CPU): this is what every device has."


def _line_figures(
    ctx: Context, name: str, y: str, y_label: str, caption: str, *, log_y: bool, errors: bool = False
) -> list[Block]:
    """`y` against vocab per variant, a figure per (path, topk, L2) slice; batch in columns, dtype in rows.
    Each point: the median over the case's logits distributions (timing barely depends on them)."""
    data = ctx.ok[ctx.ok[y].notna() & ctx.ok["vocab"].notna() & ctx.ok["batch"].notna()]
    if data.empty:
        return [Note(f"{y_label}: no values in '{y}', figure skipped.")]
    keys = [ctx.unit, "path", "topk", "l2", "dtype", "batch", "vocab", "variant"]
    values = {y: "median", "samples": "median", "timing": "first", UNSTABLE: "sum", "launch": "first"}
    values |= {c: "median" for c in BAND} if errors else {}
    values = {c: (c, how) for c, how in values.items()}
    values["logits"] = ("logits", lambda s: ", ".join(sorted(set(s))))
    hover = ["variant", ctx.unit, *HOVER, *(BAND if errors else [])]
    spec = _Facets(
        "vocab", y, "dtype" if data["dtype"].nunique() > 1 else None, "batch", "variant",
        ctx.unit if ctx.several_devices else None, hover, ("err_plus", "err_minus") if errors else None,
        UNSTABLE,
    )  # fmt: skip
    layout = {"x_type": "log", "x_dtick": "D2", "y_type": "log" if log_y else "linear", "label": y_label}
    layout |= {"y_dtick": "D2"} if log_y else {}
    blocks: list[Block] = []
    varying = kc.varying_keys(data, ["path", "topk", "l2"])  # the largest MAX_SLICES slices are drawn
    groups = sorted(data.groupby(varying, sort=False), key=lambda g: -len(g[1])) if varying else [((), data)]
    slices = [(case_label(varying, g if isinstance(g, tuple) else (g,)), f) for g, f in groups]
    for i, (label, part) in enumerate(slices[:MAX_SLICES]):
        part = part[part["batch"].isin(spread(sorted(set(part["batch"])), MAX_FACET_COLUMNS))]
        grouped = part.groupby(keys, dropna=False, sort=True)
        agg = grouped.agg(**values).reset_index()
        flags = zip(agg[UNSTABLE], grouped.size().to_numpy(), strict=True)
        agg["unstable"] = [f"{n} of {m} logits" if n else "no" for n, m in flags]
        if errors:
            agg["err_plus"] = (agg["p80_us"] - agg[y]).clip(lower=0)
            agg["err_minus"] = (agg[y] - agg["p20_us"]).clip(lower=0)
        title = f"{y_label}{' · ' + label if label else ''}"
        build = partial(_facet_lines, ctx, agg, spec, title, **layout)
        blocks.append(figure_block(f"{name}-{i}", title, build, caption))
    left = ", ".join(label for label, _ in slices[MAX_SLICES:])
    return [*blocks, *([Note(f"Not drawn (fewest cases): {left}.")] if left else [])]


def latency_figures(ctx: Context) -> list[Block]:
    """Median time per call against vocab, with p20-p80 error bars."""
    caption = (
        "Median time per call (markers) with the 20th-80th percentile as error bars, against the vocabulary "
        "size. Columns: batch size; rows: logits dtype; line style: device (and run, where runs of one "
        "device are kept apart). Each point: the median over logits distributions. Open rings: unstable (the "
        f"samples' {kc.SPREAD_ABOVE} for at least one logits distribution; the hover says how many): do not "
        "rank variants on those points."
    )
    return _line_figures(ctx, "latency", "median_us", "latency (µs)", caption, log_y=True, errors=True)


def bandwidth_figures(ctx: Context) -> list[Block]:
    """Achieved bandwidth against vocab, in pct_peak, else pct_copy, else gbps: the first that covers every
    device, else the best covered."""
    ok = ctx.ok
    choices = {"pct_peak": "% of datasheet peak", "pct_copy": "% of measured copy", "gbps": "GB/s"}
    present = [c for c in choices if ok[c].notna().any()]
    if not present:
        return [Note("Bandwidth: no pct_peak, pct_copy or gbps values, figure skipped.")]
    every = [c for c in present if set(ok.loc[ok[c].notna(), "device"]) == set(ok["device"])]
    column = every[0] if every else max(present, key=lambda c: ok[c].notna().sum())
    caption = f"Achieved bandwidth by each variant's bytes model, as {choices[column]} ('{column}'), "
    caption += "against vocab." + ("" if column == "pct_peak" else NO_PEAK)
    blocks = _line_figures(ctx, "bandwidth", column, f"bandwidth ({choices[column]})", caption, log_y=False)
    missing = int(ok[column].isna().sum())
    note = Note(f"{missing} ok cases have no '{column}' value and are not drawn.")
    return [*blocks, note] if missing else blocks


def speedup_figures(s: Summary) -> list[Block]:
    """A heatmap per variant of its speedup over the baseline, per case (`Summary.per_variant`)."""
    base = s.roles.baseline
    cells = s.per_variant.reset_index()
    cells = cells[cells["speedup"].notna() & (cells["variant"] != base)]
    if cells.empty:
        return [Note(f"Speedup: no variant has a {base} baseline to compare with, figures skipped.")]
    blocks: list[Block] = []
    for variant in [v for v in s.variants if v in set(cells["variant"])]:
        part = cells[cells["variant"] == variant]
        blocks += guard(f"speedup {variant}", lambda v=variant, p=part: _speedup_heatmap(s, p, v))
    return blocks


def band_text(cell: pd.Series | object) -> str:
    """How a speedup was measured: "paired, p20-p80 1.03-1.25×" or "ratio of medians"."""
    method = str(getattr(cell, "method", ""))
    p20, p80 = getattr(cell, "p20", math.nan), getattr(cell, "p80", math.nan)
    if "paired" in method and not (fmt.is_nan(float(p20)) or fmt.is_nan(float(p80))):
        return f"paired, p20-p80 {p20:.2f}-{p80:.2f}×" + (" (mixed)" if "medians" in method else "")
    return "ratio of medians"


def _speedup_heatmap(s: Summary, part: pd.DataFrame, variant: str) -> list[Block]:
    row_keys = [s.unit, *kc.varying_keys(part, ["path", "topk", "l2"])]
    all_rows = part[row_keys].drop_duplicates().itertuples(index=False, name=None)
    all_rows = sorted(all_rows, key=lambda r: [kc.facet_rank(v) for v in r])
    rows, dtypes = all_rows[:MAX_HEATMAP_ROWS], ordered(part["dtype"], kc.DTYPE_ORDER)
    titles = [f"{case_label(row_keys, r)} · {d}" for r in rows for d in dtypes]
    cells = part.set_index([*row_keys, "dtype", "batch", "vocab"])
    cells = cells[~cells.index.duplicated()].sort_index()  # lookups by key; sorted, they stay fast
    panels, traces, limit = cells.index.droplevel(["batch", "vocab"]), [], 1.0
    for n, (row, dtype) in enumerate((r, d) for r in rows for d in dtypes):
        if (*row, dtype) in panels:
            panel = cells.loc[(*row, dtype)]
            values = panel["speedup"].unstack("vocab").sort_index().sort_index(axis=1)
            limit = max(limit, float(np.nanmax(np.abs(np.log2(values.to_numpy(dtype=float))))))
            traces.append(_heatmap_trace(values, panel, titles[n], axes(n + 1)))
    title, limit = f"speedup of {variant} over {s.roles.baseline}", min(math.ceil(limit), 4)

    def build() -> dict:
        """A panel per (row, dtype), one log2 colour scale centred at 1× up to 2**limit."""
        fig = grid(rows, dtypes, title, height=230, subplot_titles=titles)
        ticks = list(range(-limit, limit + 1))
        bar = {"title": {"text": "speedup"}, "tickvals": ticks, "ticktext": [f"{2.0**t:g}×" for t in ticks]}
        fig.update_layout(coloraxis={"colorscale": "RdBu", "cmin": -limit, "cmax": limit, "colorbar": bar})
        fig.update_xaxes(type="category", title_text="vocab", title_standoff=4)
        fig.update_yaxes(type="category", title_text="batch", title_standoff=4)
        return plain(fig, traces)

    blocks = [figure_block(f"speedup-{variant}", title, build, _speedup_caption(s, variant))]
    if len(all_rows) > len(rows):
        blocks.append(Note(f"speedup {variant}: {len(all_rows) - len(rows)} device/path rows not drawn."))
    return blocks


def _heatmap_trace(values: pd.DataFrame, cells: pd.DataFrame, name: str, where: tuple[str, str]) -> dict:
    """A heatmap of `values` (speedups, batch x vocab); each cell's text: the speedup, a mark when unstable,
    and the paired p20-p80 band below it; the hover says how it was measured."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log2(values.to_numpy(dtype=float))
    text = [["" for _ in values.columns] for _ in values.index]
    hover = [["" for _ in values.columns] for _ in values.index]
    for (i, batch), (j, vocab) in itertools.product(enumerate(values.index), enumerate(values.columns)):
        cell = cells.loc[(batch, vocab)] if (batch, vocab) in cells.index else None
        if cell is not None and not fmt.is_nan(float(cell["speedup"])):
            mark = f" {UNSTABLE_MARK}" if cell["unstable"] else ""
            paired = "paired" in str(cell["method"]) and not fmt.is_nan(float(cell["p20"]))
            band = f"<br>{cell['p20']:.2f}-{cell['p80']:.2f}" if paired else ""
            text[i][j] = f"{fmt.speedup(cell['speedup'])}{mark}{band}"
            unstable = f"<br>unstable: {int(cell['unstable'])} of {int(cell['rows'])} logits" if mark else ""
            hover[i][j] = f"{fmt.speedup(cell['speedup'])} ({band_text(cell)}){unstable}"
    return {
        "type": "heatmap", "x": [fmt.number(v) for v in values.columns],
        "y": [fmt.number(v) for v in values.index], "z": np.where(np.isfinite(z), z, np.nan), "text": text,
        "customdata": hover, "texttemplate": "%{text}",
        "coloraxis": "coloraxis", "name": name, "xaxis": where[0], "yaxis": where[1],
        "hovertemplate": "batch %{y}<br>vocab %{x}<br>speedup %{customdata}<extra>%{fullData.name}</extra>",
    }  # fmt: skip


def _speedup_caption(s: Summary, variant: str) -> str:
    base, ok = s.roles.baseline, s.ok
    rows = ok[(ok["variant"] == variant) & ok["speedup_vs_full"].notna()]
    paired = int(rows["speedup_method"].eq("paired").sum())
    how = (
        f"{paired} of {len(rows)} rows paired: {variant} and {base} were sampled in turn, the speedup is the "
        "median of the per-round ratios and the second line of a cell its p20-p80 band"
        if paired
        else f"every speedup is the ratio of {base}'s median to the variant's (no paired rounds)"
    )
    how += "; the other rows (no band): the ratio of the two medians" if 0 < paired < len(rows) else ""
    return (
        f"Cells: {base}'s time over {variant}'s for the same device (and run), path, dtype and shape, the "
        f"median over logits distributions; {how}. {UNSTABLE_MARK}: a case behind the cell is unstable. "
        f"Blue: faster than {base}; red: slower; the colour scale is logarithmic and centred at 1×."
    )


def memory_figure(ctx: Context) -> list[Block]:
    """Peak temporary bytes per logit, measured against the model, and the table at the largest shape."""
    data = ctx.ok[ctx.ok["batch"].notna() & ctx.ok["vocab"].notna()]
    sources = {"peak_temp_bytes": "measured", "model_temp_bytes": "model"}
    if data[list(sources)].isna().all().all():
        return [Note("Memory: no peak_temp_bytes or model_temp_bytes values, figure skipped.")]
    keys = [ctx.unit, "variant", "dtype", "batch", "vocab"]
    agg = data.groupby(keys, dropna=False)[list(sources)].max().reset_index()
    agg["elements"] = (agg["batch"] * agg["vocab"]).astype(float)
    long = agg.melt([*keys, "elements"], list(sources), "source", "bytes").dropna(subset=["bytes"])
    long["source"], long["bytes per logit"] = long["source"].map(sources), long["bytes"] / long["elements"]
    long["MiB"] = long["bytes"] / 2**20
    spec = _Facets(
        "elements", "bytes per logit", ctx.unit if ctx.several_devices else None,
        "dtype" if long["dtype"].nunique() > 1 else None, "variant", "source",
        ["variant", "source", ctx.unit, "dtype", "batch", "vocab", "MiB"],
    )  # fmt: skip
    title = "peak temporary memory per logit: measured (solid) vs the variant's model (dashed)"
    layout = {"x_type": "log", "x_dtick": "D2", "label": "temporary bytes per logit"}
    caption = (
        "Largest temporary a call allocates beyond its input, divided by batch × vocab (x axis; worst case "
        "over paths, k and logits). 2 bytes/logit is a bf16 [B, V] copy, 4 an fp32 one; 0: no [B, V] "
        "temporary."
    )
    build = partial(_facet_lines, ctx, long, spec, title, **layout)
    biggest = agg.loc[agg.groupby([ctx.unit, "variant", "dtype"])["elements"].idxmax()]
    biggest["ratio"] = biggest["peak_temp_bytes"] / biggest["model_temp_bytes"].replace(0, math.nan)
    rows = [
        [rec[ctx.unit], rec["variant"], rec["dtype"], fmt.number(rec["batch"]), fmt.number(rec["vocab"]),
         *map(fmt.mebibytes, (rec["peak_temp_bytes"], rec["model_temp_bytes"])), fmt.number(rec["ratio"])]
        for rec in biggest.to_dict("records")
    ]  # fmt: skip
    columns = [ctx.unit, "variant", "dtype", "batch", "vocab", "measured", "model", "measured / model"]
    table = Table(columns, rows, "Peak temporary memory at the largest batch × vocab per variant and dtype.")
    return [figure_block("memory", title, build, caption), table]


def mismatch_figure(ctx: Context) -> list[Block]:
    """Headline: how often the baseline's top token is not the float64 reference's, per dtype and logits."""
    name = ctx.roles.baseline
    base = ctx.frame[(ctx.frame["variant"] == name) & ctx.frame["top1_mismatch_f64"].notna()]
    if base.empty:
        return [Note(f"Top-1 mismatch: {name} has no top1_mismatch_f64 values, figure skipped.")]
    weights = base["finite_rows"].fillna(0)
    weighted = base.assign(_rows=weights, _weighted=base["top1_mismatch_f64"] * weights)
    agg = weighted.groupby([ctx.unit, "dtype", "logits"]).agg(
        cases=("variant", "size"), rows=("_rows", "sum"), weighted=("_weighted", "sum"),
        mean=("top1_mismatch_f64", "mean"), worst_case=("top1_mismatch_f64", "max"),
    ).reset_index()  # fmt: skip
    agg["mismatch"] = (agg["weighted"] / agg["rows"]).where(agg["rows"] > 0, agg["mean"])
    agg["rows"] = agg["rows"].astype(int)
    agg["percent"] = 100 * agg["mismatch"]
    title = f"How often {name} picks a different top token than the float64 reference"
    caption = (
        f"Share of finite rows whose first {name} token is neither the float64 reference's token nor an "
        "equal-logit tie of it (rows pooled over shapes and paths; the worst single case in the hover). In "
        "bf16/fp16 the softmax rounds near-equal probabilities to equal ones, creating ties the logits did "
        "not have; `max` then returns the lowest index among them."
    )
    worst = agg.loc[agg["mismatch"].idxmax()]
    where = f"{worst['dtype']} logits '{worst['logits']}' on {worst[ctx.unit]}"
    build = partial(_mismatch_bars, agg, title, ctx.unit if ctx.several_devices else None)
    worst_note = Note(f"Worst: {fmt.percent(worst['mismatch'])} of rows for {where}.")
    return [worst_note, figure_block("top1-mismatch", title, build, caption)]


def _mismatch_bars(agg: pd.DataFrame, title: str, facet: str | None) -> go.Figure:
    import plotly.express as px

    fig = px.bar(
        agg, x="logits", y="percent", color="dtype", barmode="group", facet_col=facet, title=title,
        text=agg["percent"].map(lambda v: f"{v:.3g}"),
        hover_data=[facet or "device", "dtype", "logits", "cases", "rows", "worst_case"],
        labels={"percent": "rows with a different top token (%)", "logits": "logits distribution"},
        category_orders={"dtype": ordered(agg["dtype"], kc.DTYPE_ORDER)},
    )  # fmt: skip
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_layout(height=440, legend={"title": {"text": "dtype"}}, **REPORT_LAYOUT)
    return fig


def distribution_figures(ctx: Context) -> list[Block]:
    """A box per variant with its samples, for a few representative shapes; a note without samples."""
    if ctx.samples is None or ctx.samples.empty:
        why = "not drawn, the report was not given the raw samples (samples.jsonl beside results.csv)"
        return [Note(f"Distributions of the timed samples: {why}.")]
    matched = matched_samples(ctx)
    matched = matched[matched["batch"].notna() & matched["vocab"].notna()]
    if matched.empty:
        return [Note("Distributions of the timed samples: no sample matches a measured case of these rows.")]
    keys = [ctx.unit, *SHAPE_KEYS]
    shapes, logits, total = pick_shapes(matched, keys)
    shown = [k for i, k in enumerate(keys) if k in ("batch", "vocab") or len({s[i] for s in shapes}) > 1]
    common = [(k, shapes[0][i]) for i, k in enumerate(keys) if k not in shown]
    titles = [case_label(shown, [shape[keys.index(k)] for k in shown]) for shape in shapes]
    groups = matched.groupby(keys, dropna=False, sort=False)
    panels = [groups.get_group(shape).reset_index(drop=True) for shape in shapes]
    thinned = int(sum((p["seconds"].map(len) > MAX_SAMPLES).sum() for p in panels))
    caption = (
        f"Every timed sample of one call (points, µs, log scale) and their quartiles (box) per variant, for "
        f"{len(shapes)} of the {total} shapes with raw samples"
        + (f" (logits '{logits}' only)" if logits else "")
        + ": evenly spread from the smallest batch × vocab to the largest"
        + (" of each device and run" if ctx.several_devices else "")
        + (f"; every panel: {case_label(*zip(*common, strict=True))}" if common else "")
        + f". At most {MAX_SAMPLES} samples per case"
        + (f" ({thinned} cases thinned evenly)" if thinned else "")
        + f"; every sample of every case is in samples.jsonl. {UNSTABLE_MARK} after a variant: an unstable "
        f"case ({kc.SPREAD_ABOVE})."
    )
    return [figure_block("distributions", FIGURE_TITLE, partial(_boxes, ctx, panels, titles), caption)]


def matched_samples(ctx: Context) -> pd.DataFrame:
    """The measured rows that have raw samples, each with its `seconds`: matched on case_id and run; a
    sample without a run label matches the one row of its case_id (none when several rows share it)."""
    samples, rows = ctx.samples, ctx.ok[ctx.ok["case_id"].notna()]
    if samples is None or samples.empty or rows.empty:
        return rows.assign(seconds=pd.Series(dtype=object)).iloc[0:0]
    rows = rows.assign(_case=rows["case_id"].astype(str), _run=rows["run"].fillna("").astype(str))
    runs = samples["run"].fillna("").astype(str) if "run" in samples else ""
    data = samples.assign(_case=samples["case_id"].astype(str), _run=runs)
    data = data.drop_duplicates(["_case", "_run"], keep="last")[["_case", "_run", "seconds"]]
    labelled = rows.merge(data[data["_run"] != ""], on=["_case", "_run"], how="inner")
    unique = rows[~rows["_case"].duplicated(keep=False)]
    bare = unique.merge(data[data["_run"] == ""].drop(columns="_run"), on="_case", how="inner")
    bare = bare[~bare.set_index(["_case", "_run"]).index.isin(labelled.set_index(["_case", "_run"]).index)]
    out = pd.concat([labelled, bare], ignore_index=True)
    out = out[out["seconds"].map(lambda s: isinstance(s, list) and len(s) > 0)]
    return out.drop(columns=["_case", "_run"]).reset_index(drop=True)


def pick_shapes(matched: pd.DataFrame, keys: list[str]) -> tuple[list[tuple], str, int]:
    """(the shapes to draw, their logits distribution, how many have samples): of the most common logits,
    with two variants sampled where some are, spread evenly over batch x vocab per device (and run)."""
    counts = matched.groupby(keys, dropna=False)["variant"].nunique()
    shapes = (counts[counts >= 2] if (counts >= 2).any() else counts).index.to_frame(index=False)
    logits = str(shapes["logits"].value_counts().index[0])
    shapes = shapes[shapes["logits"] == logits]
    order = shapes.assign(_elements=shapes["batch"] * shapes["vocab"])
    order = order.assign(**{f"_{c}": shapes[c].map(kc.facet_rank) for c in ("path", "dtype")})
    order = order.sort_values(["_elements", "_path", "_dtype", "topk", "l2"], kind="stable")
    shapes = shapes.loc[order.index]
    units = list(dict.fromkeys(shapes[keys[0]]))
    per_unit = max(1, MAX_SHAPES // max(len(units), 1))
    mine = [shapes[shapes[keys[0]] == unit][keys].to_numpy().tolist() for unit in units]
    chosen = [tuple(row) for rows in mine for row in spread(rows, per_unit)]
    return chosen[:MAX_SHAPES], logits, len(counts)


def thin(seconds: list[float], limit: int = MAX_SAMPLES) -> list[float]:
    """At most `limit` of the samples, evenly spaced in the order taken."""
    step = max(len(seconds) / limit, 1)
    return [seconds[int(i * step)] for i in range(min(limit, len(seconds)))]


def _boxes(ctx: Context, panels: list[pd.DataFrame], titles: list[str]) -> dict:
    """The figure: a panel per shape, a box per variant with its samples as points (plain data)."""
    columns = min(MAX_COLUMNS, len(panels))
    rows = range(math.ceil(len(panels) / columns))
    fig = grid(rows, range(columns), FIGURE_TITLE, height=300, subplot_titles=titles)
    fig.update_yaxes(type="log", title_text="µs per call", col=1)
    fig.update_layout(showlegend=False)
    order, traces = {v: i for i, v in enumerate(ctx.variants)}, []
    for n, panel in enumerate(panels, start=1):
        for rec in panel.assign(_order=panel["variant"].map(order)).sort_values("_order").to_dict("records"):
            values = np.asarray(thin(rec["seconds"]), dtype=float) * 1e6
            mark, color = f" {UNSTABLE_MARK}" if rec[UNSTABLE] else "", ctx.colors.get(rec["variant"], "#444")
            hover = (
                f"{rec['variant']}<br>%{{y:.4g}} µs<br>{len(rec['seconds'])} samples, median "
                f"{fmt.number(rec['median_us'])} µs, spread {fmt.number(rec.get('spread'))}"
                f"{' (unstable)' if mark else ''}<extra></extra>"
            )
            traces.append({
                "type": "box", "y": [float(f"{v:.4g}") for v in values], "name": f"{rec['variant']}{mark}",
                "xaxis": axes(n)[0], "yaxis": axes(n)[1], "boxpoints": "all", "jitter": 0.5, "pointpos": 0,
                "marker": {"size": 3, "color": color}, "line": {"width": 1.5, "color": color},
                "fillcolor": "rgba(0,0,0,0)", "hovertemplate": hover,
            })  # fmt: skip
    return plain(fig, traces)
