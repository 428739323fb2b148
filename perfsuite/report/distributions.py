"""The distribution of the timed samples behind a few representative shapes: a box per variant with every
sample as a point, so a reader sees what a median and its p20-p80 band hide (a bimodal case, a few slow
outliers, a variant that only looks faster because of one noisy round).

The raw samples come from `samples.jsonl` (`Run.samples`): a frame of case_id, run
and seconds (a list per case). Only a bounded selection is drawn, to keep the page small: at most
`MAX_SHAPES` shapes of one logits distribution, evenly spread from the smallest batch x vocab to the
largest, each with at most `MAX_SAMPLES` samples per variant; the figure's caption says which.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import Block, Note, figure_block
from perfsuite.report.kernel_context import (
    DTYPE_ORDER,
    PATH_ORDER,
    UNSTABLE,
    UNSTABLE_MARK,
    Context,
    case_label,
)
from perfsuite.report.kernel_figures import _axes, _grid, _plain

MAX_SHAPES = 6
"""Shapes drawn (panels), over every device and run together."""
MAX_SAMPLES = 200
"""Samples drawn per case; a case with more is thinned evenly (every n-th sample, in the order taken)."""
MAX_COLUMNS = 3
SHAPE_KEYS = ("path", "dtype", "batch", "vocab", "topk", "l2", "logits")
FIGURE_TITLE = "distribution of the timed samples"


def distribution_figures(ctx: Context) -> list[Block]:
    """A box per variant with its samples, for a few representative shapes; a note without samples."""
    if ctx.samples is None or ctx.samples.empty:
        return [
            Note(
                "Distributions of the timed samples: not drawn, the report was not given the raw samples "
                "(samples.jsonl beside results.csv)."
            )
        ]
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
    build = partial(_boxes, ctx, panels, titles)
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
        "case (p20-p80 spread above 25 % of the median)."
    )
    return [figure_block("distributions", FIGURE_TITLE, build, caption)]


def matched_samples(ctx: Context) -> pd.DataFrame:
    """The measured rows that have raw samples, each with its `seconds`: matched on case_id and run; a
    sample without a run label matches the one row of its case_id (none when several rows share it)."""
    samples = ctx.samples
    rows = ctx.ok[ctx.ok["case_id"].notna()].copy()
    if samples is None or samples.empty or rows.empty:
        return rows.assign(seconds=pd.Series(dtype=object)).iloc[0:0]
    rows["_case"] = rows["case_id"].astype(str)
    rows["_run"] = ctx.ok["run"].astype(object).where(ctx.ok["run"].notna(), "").astype(str)
    if "run" not in samples:
        samples = samples.assign(run="")
    data = samples.assign(_case=samples["case_id"].astype(str), _run=samples["run"].fillna("").astype(str))
    data = data.drop_duplicates(["_case", "_run"], keep="last")[["_case", "_run", "seconds"]]
    labelled = rows.merge(data[data["_run"] != ""], on=["_case", "_run"], how="inner")
    unique = rows[~rows["_case"].duplicated(keep=False)]
    bare = unique.merge(data[data["_run"] == ""].drop(columns="_run"), on="_case", how="inner")
    bare = bare[~bare.set_index(["_case", "_run"]).index.isin(labelled.set_index(["_case", "_run"]).index)]
    out = pd.concat([labelled, bare], ignore_index=True)
    out = out[out["seconds"].map(lambda s: isinstance(s, list) and len(s) > 0)]
    return out.drop(columns=["_case", "_run"]).reset_index(drop=True)


def pick_shapes(matched: pd.DataFrame, keys: list[str]) -> tuple[list[tuple], str, int]:
    """(the shapes to draw, the logits distribution they share or '', how many shapes have samples).

    Shapes with at least two variants sampled are preferred; one logits distribution (the most common)
    keeps the panels comparable; per device (and run), the shapes are spread evenly over batch x vocab."""
    counts = matched.groupby(keys, dropna=False)["variant"].nunique()
    total = len(counts)
    candidates = counts[counts >= 2] if (counts >= 2).any() else counts
    shapes = candidates.index.to_frame(index=False)
    logits = str(shapes["logits"].value_counts().index[0])
    shapes = shapes[shapes["logits"] == logits]
    shapes = shapes.assign(
        _elements=shapes["batch"] * shapes["vocab"],
        _path=shapes["path"].map(lambda p: PATH_ORDER.index(p) if p in PATH_ORDER else len(PATH_ORDER)),
        _dtype=shapes["dtype"].map(lambda d: DTYPE_ORDER.index(d) if d in DTYPE_ORDER else len(DTYPE_ORDER)),
    ).sort_values(["_elements", "_path", "_dtype", "topk", "l2"], kind="stable")
    units = list(dict.fromkeys(shapes[keys[0]]))
    per_unit = max(1, MAX_SHAPES // max(len(units), 1))
    chosen: list[tuple] = []
    for unit in units:
        mine = shapes[shapes[keys[0]] == unit]
        picks = _spread(len(mine), per_unit)
        chosen += [tuple(mine.iloc[i][keys]) for i in picks]
    return chosen[:MAX_SHAPES], logits, total


def _spread(n: int, k: int) -> list[int]:
    """At most `k` of the indices 0..n-1, evenly spread, first and last included."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [n - 1]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def thin(seconds: list[float], limit: int = MAX_SAMPLES) -> list[float]:
    """At most `limit` of the samples, evenly spaced in the order taken."""
    if len(seconds) <= limit:
        return list(seconds)
    step = len(seconds) / limit
    return [seconds[int(i * step)] for i in range(limit)]


def _boxes(ctx: Context, panels: list[pd.DataFrame], titles: list[str]) -> dict:
    """The figure: a panel per shape, a box per variant with its samples as points (plain data)."""
    columns = min(MAX_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig = _grid(range(rows), range(columns), FIGURE_TITLE, height=300, subplot_titles=titles)
    fig.update_yaxes(type="log", title_text="µs per call", col=1)
    fig.update_layout(showlegend=False)
    order = {v: i for i, v in enumerate(ctx.variants)}
    traces = []
    for n, panel in enumerate(panels, start=1):
        xaxis, yaxis = _axes(n)
        panel = panel.assign(_order=panel["variant"].map(order)).sort_values("_order")
        for rec in panel.to_dict("records"):
            values = np.asarray(thin(rec["seconds"]), dtype=float) * 1e6
            mark = f" {UNSTABLE_MARK}" if rec[UNSTABLE] else ""
            name = f"{rec['variant']}{mark}"
            traces.append(
                {
                    "type": "box",
                    "y": [float(f"{v:.4g}") for v in values],
                    "name": name,
                    "xaxis": xaxis,
                    "yaxis": yaxis,
                    "boxpoints": "all",
                    "jitter": 0.5,
                    "pointpos": 0,
                    "marker": {"size": 3, "color": ctx.colors.get(rec["variant"], "#444")},
                    "line": {"width": 1.5, "color": ctx.colors.get(rec["variant"], "#444")},
                    "fillcolor": "rgba(0,0,0,0)",
                    "hovertemplate": (
                        f"{rec['variant']}<br>%{{y:.4g}} µs<br>{len(rec['seconds'])} samples, median "
                        f"{fmt.number(rec['median_us'])} µs, spread {fmt.number(rec.get('spread'))}"
                        f"{' (unstable)' if mark else ''}<extra></extra>"
                    ),
                }
            )
    return _plain(fig, traces)
