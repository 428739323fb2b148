"""The draft-loop section of the report (draft.csv): time per cycle, the selection's share, parity at the
consumer, kernels per cycle, skipped and failed cases; a note in place of what the rows do not have."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import pandas as pd

from perfsuite.report import blocks
from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import Block, Cell, Group, Note, Section, Table, figure_block, guard
from perfsuite.report.kernel_context import PATH_ORDER, Roles, ordered
from perfsuite.results.columns import complete

if TYPE_CHECKING:
    import plotly.graph_objects as go

SECTION_ID = "draft"
TITLE = "Draft loop: the selection where engines consume it"
CONFIG_KEYS = ("device", "dtype", "vocab", "hidden", "batch", "topk", "num_steps", "num_draft_tokens")
CONFIG_KEYS += ("logits", "upcast", "accept")
SHORT = {"num_steps": "s", "num_draft_tokens": "n", "vocab": "V", "hidden": "H", "batch": "B", "topk": "k"}
UPCAST_LABELS = {"fp32": "fp32 logits", "none": "without upcast"}
TEXTS = ("device", "dtype", "logits", "variant", "path", "status", "reason", "kernels_unit", "engine_setting")
MAX_CONFIGS_PER_FIGURE = 40
HOVER = ("device", "timing", "device_median_us", "kernels_per_cycle")
NOT_SGLANG = "†"  # marks a configuration SGLang never runs (engine_setting)
# the parity table's share columns: header, column, the cell's class when a tree differs
BASE_SHARES = (
    ("tokens differ", "tok_diff_base", "loss"), ("parents differ", "parent_diff_base", "loss"),
    ("positions differ", "pos_diff_base", "loss"), ("step-0 tokens differ", "step0_diff_base", "loss"),
    ("tie-order", "tie_diff_base", "differs"), ("precision", "precision_diff_base", "loss"),
    ("broken trees", "orphan_trees", "invalid"),
)  # fmt: skip
REF_SHARES = (
    ("tokens differ vs float64", "tok_diff_f64", "loss"), ("tie-order vs float64", "tie_diff_f64", "differs"),
    ("precision vs float64", "precision_diff_f64", "loss"),
)  # fmt: skip
VERDICT_CLASSES = {"tokens differ": "invalid", "scores differ (same tokens)": "differs"}


def section(frame: pd.DataFrame | None) -> Section:
    """The report's draft section: a subsection per view; safe on empty or partial frames."""
    if frame is None or frame.empty or "status" not in frame:
        return Section(SECTION_ID, TITLE, [Note("No draft-loop rows in these results.")])
    data = complete(frame, "draft.csv")
    data["upcast"] = data["upcast"].fillna("none")  # rows from before the setting: the head's dtype
    data[list(TEXTS)] = data[list(TEXTS)].fillna("").astype(str)
    data["config"] = _config_labels(data)
    ok, base = data[data["status"] == "ok"], Roles.declared().baseline
    parts = {
        "Time per draft cycle": lambda: _cycle_figures(ok),
        "Share of the cycle spent in the selection": lambda: _share_figures(ok),
        "Parity at the consumer": lambda: _parity_blocks(ok, base),
        "Kernels per cycle": lambda: _kernel_table(ok),
        "Skipped and failed draft cases": lambda: _skipped_table(data),
    }
    subsections = [Group(t, guard(t, build)) for t, build in parts.items()]
    return Section(SECTION_ID, TITLE, subsections, intro=_intro(data, base))


def _config_labels(data: pd.DataFrame) -> pd.Series:
    """A short label per row from the configuration keys that vary in the frame."""
    varying = [k for k in CONFIG_KEYS if data[k].nunique(dropna=False) > 1] or ["dtype", "batch", "topk"]

    def label(row: pd.Series) -> str:
        values = {k: UPCAST_LABELS.get(row[k], row[k]) if k == "upcast" else row[k] for k in varying}
        text = " ".join(SHORT.get(k, "") + fmt.number(v) for k, v in values.items())
        return f"{text} {NOT_SGLANG}" if row["engine_setting"] not in ("", "sglang") else text

    return data.apply(label, axis=1) if len(data) else pd.Series(dtype=str)


def _bars(name: str, title: str, data: pd.DataFrame, y: str, axis: str, caption: str = "", **bar) -> Block:
    """A figure of grouped bars of `y` per configuration, a panel per path (`bar`: more of px.bar's
    arguments: colour, hover, error bars, height); a share of trees runs from 0 to 1."""

    def build() -> go.Figure:
        import plotly.express as px

        height, orders = bar.pop("height", 380), {"path": ordered(data["path"], PATH_ORDER)}
        fig = px.bar(data, x="config", y=y, title=title, category_orders=orders, barmode="group",
                     facet_col="path", **bar)  # fmt: skip
        fig.update_yaxes(title_text=axis, col=1, **({"range": [0, 1.05]} if axis == "share of trees" else {}))
        fig.update_xaxes(title_text="")
        fig.update_layout(height=height, margin={"t": 60, "b": 80})
        return fig

    return figure_block(name, title, build, caption)


def _bar_figures(
    data: pd.DataFrame, name: str, y: str, title: str, axis: str, caption: str, errors: bool = False
) -> list[Block]:
    """Bar figures of `y` per variant (names `name-0`, `name-1`, ...), one per `MAX_CONFIGS_PER_FIGURE`
    configurations; `errors`: p20-p80 bars of the cycle time."""
    data = data[data[y].notna()]
    if data.empty:
        return [Note(f"No {axis.lower()} figures in these rows.")]
    configs, out = list(dict.fromkeys(data["config"])), []
    for i, start in enumerate(range(0, len(configs), MAX_CONFIGS_PER_FIGURE)):
        part = data[data["config"].isin(configs[start : start + MAX_CONFIGS_PER_FIGURE])]
        bars: dict[str, object] = {"color": "variant", "hover_data": list(HOVER), "height": 420}
        if errors:
            plus, minus = part["cycle_p80_us"] - part[y], part[y] - part["cycle_p20_us"]
            part = part.assign(err_plus=plus.clip(lower=0), err_minus=minus.clip(lower=0))
            bars |= {"error_y": "err_plus", "error_y_minus": "err_minus"}
        out.append(_bars(f"{name}-{i}", title, part, y, axis, caption, **bars))
    return out


def _intro(data: pd.DataFrame, base: str) -> str:
    counts = data["status"].value_counts()
    unlike = data[data["engine_setting"].ne("sglang") & data["engine_setting"].ne("")]
    settings = "; ".join(dict.fromkeys(unlike["engine_setting"]))
    if len(unlike):
        settings = f" {len(unlike)} cases ({NOT_SGLANG}) use a setting SGLang never runs: {settings}."
    return (
        f"{len(data)} draft cases ({', '.join(f'{n} {s}' for s, n in counts.items())}). One cycle runs as "
        "SGLang's EAGLE worker does: draft extend over num_draft_tokens tokens, then the num_steps tree "
        "draft decode and the organisation of the draft tokens (at topk 1 SGLang's fast path: constants, no "
        "organisation, num_draft_tokens = num_steps + 1), on a tiny draft head. The selector gets fp32 "
        "logits, as SGLang's logits processor hands them (logits[:, :vocab].float()); 'without upcast' rows "
        "hand it the head's bf16/fp16 logits, an engine without the upcast: only there does softmax "
        "rounding in bf16/fp16 change draft tokens. Parity is measured on what the verifier reads: draft "
        f"tokens, parent lists and tree scores, against {base} (the engines' baseline) and the "
        "float64-softmax selection; trees that differ are split into tie-order differences (equal logits "
        f"taken in another order) and precision differences (other values).{settings}"
    )


def _cycle_figures(ok: pd.DataFrame) -> list[Block]:
    caption = (
        "Median time per cycle with p20–p80 bars, as an engine pays it (host clock on a CPU; on a GPU "
        "device events from an idle start, launches included: one graph launch on the graph path)."
    )
    title = "Time per draft cycle"
    return _bar_figures(ok, "draft-cycle", "cycle_median_us", title, "µs per cycle", caption, errors=True)


def _share_figures(ok: pd.DataFrame) -> list[Block]:
    if ok["selection_share"].isna().all():
        return [Note("Selection share was not measured (selection_share = false).")]
    method = next((m for m in ok["selection_method"].dropna() if m), "")
    title = "Share of the cycle spent in the vocabulary selection"
    caption = f"Measured as: {method}." if method else ""
    return _bar_figures(ok, "draft-share", "selection_share", title, "share of the cycle", caption)


def _share_cell(value: float, cls: str) -> Cell:
    """A share of trees that differ, marked with `cls` when any does."""
    return Cell(fmt.percent_one_decimal(value), cls if isinstance(value, float) and value > 0 else "")


def _parity_blocks(ok: pd.DataFrame, base: str) -> list[Block]:
    if ok.empty:
        return [Note("No measured draft cases.")]
    rows = []
    for r in ok.sort_values(["config", "variant", "path"]).to_dict("records"):
        verdict = "" if pd.isna(r["consumer_vs_base"]) else str(r["consumer_vs_base"])
        exact = fmt.DASH if pd.isna(r["bitexact_eager"]) else str(bool(r["bitexact_eager"]))
        rows.append(
            [r["config"], r["variant"], r["path"], fmt.scientific(r["trees"]),
             Cell(verdict, VERDICT_CLASSES.get(verdict, "")),
             *(_share_cell(r[column], cls) for _, column, cls in BASE_SHARES),
             fmt.scientific(r["score_relerr_base"]),
             *(_share_cell(r[column], cls) for _, column, cls in REF_SHARES),
             Cell(exact, "loss" if exact == "False" else "")]
        )  # fmt: skip
    columns = ["config", "variant", "path", "trees", f"against {base}", *(h for h, _, _ in BASE_SHARES)]
    columns += ["max score rel. diff", *(h for h, _, _ in REF_SHARES), "graph/compile = eager"]
    others = ok[ok["variant"] != base]
    tokens = others[others["tok_diff_base"].notna()]
    split = others[others["tie_diff_base"].notna() | others["precision_diff_base"].notna()]
    blocks: list[Block] = []
    if not tokens.empty:
        title = f"Share of draft trees whose tokens differ from {base}'s"
        bar = {"color": "variant", "hover_data": ["parent_diff_base", "score_relerr_base", "tok_diff_f64"]}
        blocks.append(_bars("draft-token-diff", title, tokens, "tok_diff_base", "share of trees", **bar))
    if not split.empty:
        kinds = {"tie_diff_base": "tie order", "precision_diff_base": "precision"}
        long = split.melt(["config", "variant", "path"], list(kinds), "kind", "share")
        long["kind"] = long["kind"].map(kinds)
        long["variant_kind"] = long["variant"] + " · " + long["kind"]
        title = f"Trees that differ from {base}'s: tie order or precision"
        bar = {"color": "variant_kind", "pattern_shape": "kind"}
        blocks.append(_bars("draft-parity-split", title, long, "share", "share of trees", **bar))
    shortcut = Roles.declared().shortcut
    caption = (
        "Shares are of draft trees (cycles x batch). 'scores differ (same tokens)': the verifier gets the "
        f"same draft tokens with other tree scores ({shortcut} at topk 1); 'tokens differ': another draft "
        "tree. 'tie-order' / 'precision': trees that differ (tokens, parents or positions), by what made "
        "them part first: equal logits taken in another order (lowest index vs torch's order), or other "
        "values (softmax rounding in bf16/fp16 without upcast, fp32 ulps, inexact scores such as "
        f"{shortcut}' 1.0); from the eager runs. 'broken trees': a drafted token whose parent was not "
        "drafted. 'vs float64' says which side of a difference the float64-softmax selection takes (lowest "
        f"index on ties). {NOT_SGLANG}: a setting SGLang never runs."
    )
    return [*blocks, Table(columns, rows, caption)]


def _kernel_table(ok: pd.DataFrame) -> list[Block]:
    data = ok[ok["kernels_per_cycle"].notna()]
    if data.empty:
        return [Note("Kernels were not counted (kernels = false).")]
    units = ", ".join(sorted({u for u in data["kernels_unit"] if u}))
    present, paths = set(zip(data["variant"], data["path"], strict=True)), ordered(data["path"], PATH_ORDER)
    pairs = [(v, p) for v in dict.fromkeys(data["variant"]) for p in paths if (v, p) in present]
    launches = data["launches_per_cycle"]
    launched = (" (" + launches.map(fmt.scientific) + " launches)").where(launches.notna(), "")
    data, rows = data.assign(_cell=data["kernels_per_cycle"].map(fmt.scientific) + launched), []
    for config, part in data.groupby("config", sort=False):
        first = part.drop_duplicates(["variant", "path"]).set_index(["variant", "path"])  # a row per cell
        rows.append([str(config), *(first.loc[p, "_cell"] if p in first.index else fmt.DASH for p in pairs)])
    caption = f"Per cycle, counted by torch.profiler: {units}."
    return [Table(["config", *(f"{v} / {p}" for v, p in pairs)], rows, caption)]


def _skipped_table(data: pd.DataFrame) -> list[Block]:
    bad = data[data["status"] != "ok"]
    if bad.empty:
        return [Note("Every draft case ran.")]
    rows = [
        [Cell(str(status), "error" if status == "error" else ""), str(len(part)),
         *(", ".join(dict.fromkeys(part[c])) for c in ("path", "variant")), str(reason)]
        for (status, reason), part in bad.groupby(["status", "reason"], sort=False)
    ]  # fmt: skip
    return [Table(["status", "cases", "paths", "variants", "reason"], rows)]


kind_sections = partial(blocks.guarded_section, SECTION_ID, TITLE, section)
"""This case kind's part of the report (`core.kinds`): the section of its rows, none without rows."""
