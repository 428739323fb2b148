"""The draft-loop section of the report, from `perfsuite.cases.draft` rows.

`section(frame)` holds figures and tables: time per draft cycle per variant and path, the selection's
share of the cycle, parity at the consumer (draft tokens, parents, tree scores against full_softmax and the
float64 selection, the differing trees split into tie-order and precision differences), kernels per
cycle, and the cases that were skipped or failed with their reasons. Each row says which logits the
selector got (fp32 as SGLang's logits processor hands them, or the head's dtype: an engine without upcast)
and whether SGLang runs its setting at all.
Missing columns or an empty frame give a note, never an error; without plotly each figure is a note and
the tables stay. `draft_html(frame)` is the section's body as HTML.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING

import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import (
    Block,
    Cell,
    Note,
    Section,
    Subsection,
    Table,
    figure_block,
    guard,
    guarded_section,
)
from perfsuite.report.page import render_fragment
from perfsuite.results.schema import BASELINE

if TYPE_CHECKING:
    import plotly.graph_objects as go

SECTION_ID = "draft"
TITLE = "Draft loop: the selection where engines consume it"

SHAPE_KEYS = ("vocab", "hidden", "batch", "topk", "num_steps", "num_draft_tokens")
CONFIG_KEYS = ("device", "dtype", *SHAPE_KEYS, "logits", "upcast", "accept")
NUMERIC = (
    *SHAPE_KEYS,
    "cycle_median_us",
    "cycle_p20_us",
    "cycle_p80_us",
    "device_median_us",
    "noop_median_us",
    "selection_us",
    "selection_share",
    "kernels_per_cycle",
    "launches_per_cycle",
    "trees",
    "tok_diff_base",
    "parent_diff_base",
    "pos_diff_base",
    "score_abserr_base",
    "score_relerr_base",
    "step0_diff_base",
    "orphan_trees",
    "tie_diff_base",
    "precision_diff_base",
    "tie_diff_ref",
    "precision_diff_ref",
    "tok_diff_ref",
    "parent_diff_ref",
    "score_relerr_ref",
    "tok_diff_eager",
    "score_abserr_eager",
)
PATH_ORDER = ("eager", "graph", "compile")
MAX_CONFIGS_PER_FIGURE = 40
SHORT = {"num_steps": "s", "num_draft_tokens": "n", "vocab": "V", "hidden": "H", "batch": "B", "topk": "k"}
UPCAST_LABELS = {"fp32": "fp32 logits", "none": "without upcast"}
NOT_SGLANG = "†"
"""Marks a configuration SGLang never runs (engine_setting)."""


def kind_sections(frame: pd.DataFrame, samples: pd.DataFrame | None = None) -> list[Section]:
    """This case kind's part of the report (`core.kinds`): the section of its rows, none without rows."""
    return guarded_section(SECTION_ID, TITLE, frame, section)


def section(frame: pd.DataFrame | None) -> Section:
    """The report's draft section: a subsection per view; safe on empty or partial frames."""
    if frame is None or frame.empty or "status" not in frame:
        return Section(SECTION_ID, TITLE, [Note("No draft-loop rows in these results.")])
    data = _prepare(frame)
    ok = data[data["status"] == "ok"]
    parts = []
    for title, build in (
        ("Time per draft cycle", lambda: _cycle_figures(ok)),
        ("Share of the cycle spent in the selection", lambda: _share_figures(ok)),
        ("Parity at the consumer", lambda: _parity_blocks(ok)),
        ("Kernels per cycle", lambda: _kernel_table(ok)),
        ("Skipped and failed draft cases", lambda: _skipped_table(data)),
    ):
        parts.append(Subsection(title, guard(title, build)))
    return Section(SECTION_ID, TITLE, parts, intro=_intro(data))


def draft_html(frame: pd.DataFrame | None) -> str:
    """The draft section's body (introduction, subsections) as HTML, without the page around it."""
    return render_fragment(section(frame))


# ------------------------------------------------------------------------------------------ helpers


def _prepare(frame: pd.DataFrame) -> pd.DataFrame:
    data = frame.copy()
    for column in NUMERIC:
        data[column] = pd.to_numeric(data[column], errors="coerce") if column in data else math.nan
    if "upcast" not in data:  # rows from before the setting: the selector got the head's dtype
        data["upcast"] = "none"
    texts = ("device", "dtype", "logits", "variant", "path", "status", "reason", "kernels_unit", "upcast")
    for column in (*texts, "engine_setting", "tree_build"):
        data[column] = data[column].astype(object).fillna("").astype(str) if column in data else ""
    data["config"] = _config_labels(data)
    return data


def _config_labels(data: pd.DataFrame) -> pd.Series:
    """A short label per row from the configuration keys that vary in the frame."""
    varying = [k for k in CONFIG_KEYS if k in data and data[k].nunique(dropna=False) > 1]
    if not varying:
        varying = [k for k in ("dtype", "batch", "topk") if k in data]

    def label(row: pd.Series) -> str:
        text = " ".join(_dim(k, row[k]) for k in varying)
        unlike = row.get("engine_setting", "") not in ("", "sglang")
        return f"{text} {NOT_SGLANG}" if unlike else text

    return data.apply(label, axis=1) if len(data) else pd.Series(dtype=str)


def _dim(key: str, value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if key == "upcast":
        return UPCAST_LABELS.get(str(value), str(value))
    return f"{SHORT[key]}{value}" if key in SHORT else str(value)


def _chunks(data: pd.DataFrame) -> list[pd.DataFrame]:
    """Split rows into figures of at most `MAX_CONFIGS_PER_FIGURE` configurations each."""
    configs = list(dict.fromkeys(data["config"]))
    return [
        data[data["config"].isin(configs[i : i + MAX_CONFIGS_PER_FIGURE])]
        for i in range(0, len(configs), MAX_CONFIGS_PER_FIGURE)
    ]


def _paths(data: pd.DataFrame) -> list[str]:
    present = list(dict.fromkeys(data["path"]))
    return [p for p in PATH_ORDER if p in present] + [p for p in present if p not in PATH_ORDER]


def _bar_figures(
    data: pd.DataFrame, name: str, y: str, title: str, axis: str, errors: bool, caption: str
) -> list[Block]:
    """Bar figures of `y` (figure names `name-0`, `name-1`, ...), a figure per chunk of configurations."""
    data = data[data[y].notna()]
    if data.empty:
        return [Note(f"No {axis.lower()} figures in these rows.")]
    out = []
    for i, part in enumerate(_chunks(data)):
        part = part.assign(
            err_plus=(part["cycle_p80_us"] - part[y]).clip(lower=0) if errors else 0.0,
            err_minus=(part[y] - part["cycle_p20_us"]).clip(lower=0) if errors else 0.0,
        )
        build = partial(_bars, part, y, title, axis, errors)
        out.append(figure_block(f"{name}-{i}", title, build, caption))
    return out


def _bars(part: pd.DataFrame, y: str, title: str, axis: str, errors: bool) -> go.Figure:
    """Grouped bars of `y` per configuration and variant, a panel per path."""
    import plotly.express as px

    fig = px.bar(
        part,
        x="config",
        y=y,
        color="variant",
        barmode="group",
        facet_col="path",
        category_orders={"path": _paths(part)},
        error_y="err_plus" if errors else None,
        error_y_minus="err_minus" if errors else None,
        hover_data=[c for c in ("device", "timing", "device_median_us", "kernels_per_cycle") if c in part],
        title=title,
    )
    fig.update_yaxes(title_text=axis, col=1)
    fig.update_xaxes(title_text="")
    fig.update_layout(height=420, margin={"t": 60, "b": 80})
    return fig


# ------------------------------------------------------------------------------------------ sections


def _intro(data: pd.DataFrame) -> str:
    counts = data["status"].value_counts()
    summary = ", ".join(f"{counts[s]} {s}" for s in counts.index)
    unlike = data[data["engine_setting"].ne("sglang") & data["engine_setting"].ne("")]
    unlike_text = (
        f" {len(unlike)} cases ({NOT_SGLANG}) use a setting SGLang never runs: "
        + "; ".join(dict.fromkeys(unlike["engine_setting"]))
        + "."
        if len(unlike)
        else ""
    )
    return (
        f"{len(data)} draft cases ({summary}). One cycle runs as SGLang's EAGLE worker does: draft extend "
        "over num_draft_tokens tokens, then the num_steps tree draft decode and the organisation of the "
        "draft tokens (at topk 1 SGLang's fast path: constants, no organisation, num_draft_tokens = "
        "num_steps + 1), on a tiny draft head. The selector gets fp32 logits, as SGLang's logits "
        "processor hands them (logits[:, :vocab].float()); 'without upcast' rows hand it the head's "
        "bf16/fp16 logits, an engine without the upcast: only there does softmax rounding in bf16/fp16 "
        "change draft tokens. Parity is measured on what the verifier reads: draft tokens, parent lists "
        "and tree scores, against full_softmax (the engines' baseline) and the float64-softmax selection; "
        "trees that differ are split into tie-order differences (equal logits taken in another order) "
        "and precision differences (other values)." + unlike_text
    )


def _cycle_figures(ok: pd.DataFrame) -> list[Block]:
    caption = (
        "Median time per cycle with p20–p80 bars, as an engine pays it (host clock on a CPU; on a GPU "
        "device events from an idle start, launches included: one graph launch on the graph path)."
    )
    title = "Time per draft cycle"
    return _bar_figures(ok, "draft-cycle", "cycle_median_us", title, "µs per cycle", True, caption)


def _share_figures(ok: pd.DataFrame) -> list[Block]:
    if "selection_share" not in ok or ok["selection_share"].isna().all():
        return [Note("Selection share was not measured (selection_share = false).")]
    method = next((m for m in ok.get("selection_method", pd.Series(dtype=str)).dropna() if m), "")
    return _bar_figures(
        ok,
        "draft-share",
        "selection_share",
        "Share of the cycle spent in the vocabulary selection",
        "share of the cycle",
        False,
        f"Measured as: {method}." if method else "",
    )


def _share_cell(value: float, cls: str = "loss") -> Cell:
    """A share of trees that differ, marked with `cls` when any does."""
    differs = isinstance(value, float) and not math.isnan(value) and value > 0
    return Cell(fmt.percent_one_decimal(value), cls if differs else "")


def _parity_blocks(ok: pd.DataFrame) -> list[Block]:
    if ok.empty:
        return [Note("No measured draft cases.")]
    columns = [
        "config",
        "variant",
        "path",
        "trees",
        "against full_softmax",
        "tokens differ",
        "parents differ",
        "positions differ",
        "step-0 tokens differ",
        "tie-order",
        "precision",
        "broken trees",
        "max score rel. diff",
        "tokens differ vs float64",
        "tie-order vs float64",
        "precision vs float64",
        "graph/compile = eager",
    ]
    rows = []
    for _, r in ok.sort_values(["config", "variant", "path"]).iterrows():
        verdict = str(r.get("consumer_vs_base", ""))
        verdict_cls = {"tokens differ": "invalid", "scores differ (same tokens)": "differs"}.get(verdict, "")
        exact = r.get("bitexact_eager")
        exact_text = (
            fmt.DASH if exact is None or (isinstance(exact, float) and math.isnan(exact)) else str(exact)
        )
        rows.append(
            [
                r["config"],
                r["variant"],
                r["path"],
                fmt.scientific(r["trees"]),
                Cell(verdict, verdict_cls),
                _share_cell(r["tok_diff_base"]),
                _share_cell(r["parent_diff_base"]),
                _share_cell(r["pos_diff_base"]),
                _share_cell(r["step0_diff_base"]),
                _share_cell(r["tie_diff_base"], "differs"),
                _share_cell(r["precision_diff_base"]),
                _share_cell(r["orphan_trees"], "invalid"),
                fmt.scientific(r["score_relerr_base"]),
                _share_cell(r["tok_diff_ref"]),
                _share_cell(r["tie_diff_ref"], "differs"),
                _share_cell(r["precision_diff_ref"]),
                Cell(exact_text, "loss" if exact_text == "False" else ""),
            ]
        )
    caption = (
        "Shares are of draft trees (cycles x batch). 'scores differ (same tokens)': the verifier gets the "
        "same draft tokens with other tree scores (argmax_ones at topk 1); 'tokens differ': another draft "
        "tree. 'tie-order' / 'precision': trees that differ (tokens, parents or positions), by what made "
        "them part first: equal logits taken in another order (lowest index vs torch's order), or other "
        "values (softmax rounding in bf16/fp16 without upcast, fp32 ulps, inexact scores such as "
        "argmax_ones' 1.0); from the eager runs. 'broken trees': a drafted token whose parent was not "
        "drafted. 'vs float64' says which side of a difference the float64-softmax selection takes "
        f"(lowest index on ties). {NOT_SGLANG}: a setting SGLang never runs."
    )
    return [*_parity_figure(ok), *_split_figure(ok), Table(columns, rows, caption)]


def _split_figure(ok: pd.DataFrame) -> list[Block]:
    data = ok[ok["variant"] != BASELINE]
    data = data[data["tie_diff_base"].notna() | data["precision_diff_base"].notna()]
    if data.empty:
        return []
    title = "Trees that differ from full_softmax's: tie order or precision"
    return [figure_block("draft-parity-split", title, partial(_split_bars, data, title))]


def _split_bars(data: pd.DataFrame, title: str) -> go.Figure:
    import plotly.express as px

    long = data.melt(
        id_vars=["config", "variant", "path"],
        value_vars=["tie_diff_base", "precision_diff_base"],
        var_name="kind",
        value_name="share",
    )
    long["kind"] = long["kind"].map({"tie_diff_base": "tie order", "precision_diff_base": "precision"})
    long["variant_kind"] = long["variant"] + " · " + long["kind"]
    fig = px.bar(
        long,
        x="config",
        y="share",
        color="variant_kind",
        barmode="group",
        pattern_shape="kind",
        facet_col="path",
        category_orders={"path": _paths(data)},
        title=title,
    )
    fig.update_yaxes(title_text="share of trees", range=[0, 1.05], col=1)
    fig.update_xaxes(title_text="")
    fig.update_layout(height=380, margin={"t": 60, "b": 80})
    return fig


def _parity_figure(ok: pd.DataFrame) -> list[Block]:
    data = ok[ok["tok_diff_base"].notna() & (ok["variant"] != BASELINE)]
    if data.empty:
        return []
    title = "Share of draft trees whose tokens differ from full_softmax's"
    return [figure_block("draft-token-diff", title, partial(_token_diff_bars, data, title))]


def _token_diff_bars(data: pd.DataFrame, title: str) -> go.Figure:
    import plotly.express as px

    fig = px.bar(
        data,
        x="config",
        y="tok_diff_base",
        color="variant",
        barmode="group",
        facet_col="path",
        category_orders={"path": _paths(data)},
        hover_data=["parent_diff_base", "score_relerr_base", "tok_diff_ref"],
        title=title,
    )
    fig.update_yaxes(title_text="share of trees", range=[0, 1.05], col=1)
    fig.update_xaxes(title_text="")
    fig.update_layout(height=380, margin={"t": 60, "b": 80})
    return fig


def _kernel_table(ok: pd.DataFrame) -> list[Block]:
    data = ok[ok["kernels_per_cycle"].notna()]
    if data.empty:
        return [Note("Kernels were not counted (kernels = false).")]
    units = ", ".join(sorted({u for u in data["kernels_unit"] if u}))
    columns_present = [(v, p) for v in dict.fromkeys(data["variant"]) for p in _paths(data)]
    columns_present = [
        (v, p) for v, p in columns_present if ((data["variant"] == v) & (data["path"] == p)).any()
    ]
    rows = []
    for config, part in data.groupby("config", sort=False):
        row: list[Cell | str] = [str(config)]
        for variant, path in columns_present:
            cell = part[(part["variant"] == variant) & (part["path"] == path)]
            if cell.empty:
                row.append(fmt.DASH)
                continue
            kernels, launches = cell["kernels_per_cycle"].iloc[0], cell["launches_per_cycle"].iloc[0]
            launched = "" if math.isnan(launches) else f" ({fmt.scientific(launches)} launches)"
            text = fmt.scientific(kernels) + launched
            row.append(text)
        rows.append(row)
    columns = ["config", *(f"{v} / {p}" for v, p in columns_present)]
    return [Table(columns, rows, f"Per cycle, counted by torch.profiler: {units}.")]


def _skipped_table(data: pd.DataFrame) -> list[Block]:
    bad = data[data["status"] != "ok"]
    if bad.empty:
        return [Note("Every draft case ran.")]
    groups = bad.groupby(["status", "reason"], sort=False)
    rows = []
    for (status, reason), part in groups:
        cls = "error" if status == "error" else ""
        variants = ", ".join(dict.fromkeys(part["variant"]))
        paths = ", ".join(dict.fromkeys(part["path"]))
        rows.append([Cell(str(status), cls), str(len(part)), paths, variants, str(reason)])
    return [Table(["status", "cases", "paths", "variants", "reason"], rows)]
