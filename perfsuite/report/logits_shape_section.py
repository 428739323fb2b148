"""The report's section on the inputs: per logits kind and dtype, the distribution's shape (mean top-1
probability, entropy, exact ties at the top and at the k-th place), and the generated kind closest to each
`file:` kind. Each logits tensor counts once; figures over several are means weighted by their rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfsuite.report import blocks
from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import Block, Group, Note, Section, Table, figure_block, guard
from perfsuite.report.kernel_context import Context, facet_rank

SECTION_ID = "logits-shape"
TITLE = "Logits: the distributions' shape"
FIGURES = ("top1_prob", "entropy_nats", "top1_tie_rows")
FILE_PREFIX = "file:"
TENSOR_KEYS = ["device", "run", "logits", "dtype", "vocab", "batch"]
"""Rows with the same values of these share one logits tensor (and its figures)."""
TIES_AT = "rows tied at k="
HEADERS = ["mean top-1 p", "mean entropy (nats)", "entropy / ln V", "rows tied at the top"]


def sections(ctx: Context) -> list[Section]:
    """The section as a list: none when no row carries the figures, a note when it breaks."""
    return blocks.guarded_section(SECTION_ID, TITLE, lambda _: section(ctx), ctx.frame)


def section(ctx: Context) -> Section | None:
    """The shape of every logits kind in these results; None when no row carries the figures."""
    tensors = _tensors(ctx.frame)
    if tensors.empty:
        return None
    intro = (
        "What the logits look like, per kind and dtype: the mean probability of the top token, the mean "
        "entropy of the softmax in nats (entropy / ln V: 0 for one certain token, 1 for a uniform row), "
        "the share of rows whose top logit is an exact tie, and the share whose k-th and (k+1)-th logits "
        "are equal (which tokens make the top k is then up to the tie order). Computed in float64 on the "
        "logits as each case saw them, already in its dtype (bf16 and fp16 rounding makes ties). "
        "`file:` kinds are logits read from files ([inputs.files]); the generated kinds are guesses: the "
        "one closest to a file is the one whose results speak for it."
    )
    parts: list[Block] = []
    parts += guard("closest kind", lambda: _closest_notes(tensors))
    parts += guard("shape table", lambda: _overview_table(ctx, tensors))
    parts += guard("shape figure", lambda: _shape_figure(tensors))
    parts += guard("shape per tensor", lambda: _per_tensor_details(tensors))
    return Section(SECTION_ID, TITLE, parts, intro=intro)


def _tensors(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per logits tensor with its figures and `entropy_ratio` (entropy / ln V), a `rows tied at
    k=K` column per k (the first of each tensor's rows at that k), and `file` (a `file:` kind or not)."""
    data = frame.assign(run=frame["run"].astype(object).fillna(""))[frame["top1_prob"].notna()]
    if data.empty:
        return pd.DataFrame()
    tensors = data.groupby(TENSOR_KEYS, sort=False, dropna=False)[list(FIGURES)].first()
    ties = data.groupby([*TENSOR_KEYS, "topk"], sort=False, dropna=False)["topk_tie_rows"].first()
    ties = ties.unstack("topk")
    tensors = tensors.join(ties.rename(columns=lambda k: f"{TIES_AT}{fmt.number(k)}")).reset_index()
    tensors["entropy_ratio"] = tensors["entropy_nats"] / np.log(tensors["vocab"].where(tensors["vocab"] > 1))
    tensors["file"] = tensors["logits"].astype(str).str.startswith(FILE_PREFIX)
    return tensors


def _tie_columns(tensors: pd.DataFrame) -> list[str]:
    """The k-th-place tie columns, k > 1 (at k = 1 they are the ties at the top)."""
    columns = [c for c in tensors.columns if str(c).startswith(TIES_AT) and c != f"{TIES_AT}1"]
    return sorted(columns, key=lambda c: float(c.removeprefix(TIES_AT)))


def _weighted(tensors: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Means of the figures over tensors, weighted by their rows (batch), per `keys`."""
    values = ["top1_prob", "entropy_nats", "entropy_ratio", "top1_tie_rows", *_tie_columns(tensors)]
    weight = tensors[values].notna().mul(tensors["batch"].clip(lower=0).fillna(0), axis=0)  # where known
    group = [tensors[k] for k in keys]
    sums = tensors[values].mul(weight).groupby(group, sort=False, dropna=False).sum()
    totals = weight.groupby(group, sort=False, dropna=False).sum()
    out = (sums / totals.where(totals > 0)).reset_index()
    grouped = tensors.groupby(keys, sort=False, dropna=False)
    out["vocab"], out["batch"] = (grouped[c].agg(_values_text).to_numpy() for c in ("vocab", "batch"))
    out["file"] = grouped["file"].first().to_numpy()
    return out


def _values_text(values: pd.Series) -> str:
    return ", ".join(fmt.number(v) for v in sorted(values.dropna().unique()))


def _overview_table(ctx: Context, tensors: pd.DataFrame) -> list[Block]:
    """dtypes in their natural order; within one, the most confident kind first (a scale from peaked to
    flat, with each file where it falls on it)."""
    keys, ties = [*(["device"] if ctx.several_devices else []), "dtype", "logits"], _tie_columns(tensors)
    summary = _weighted(tensors, keys)
    summary = summary.assign(_rank=summary["dtype"].map(facet_rank))
    summary = summary.sort_values(["_rank", "top1_prob"], ascending=[True, False])
    rows = [
        [*(str(rec[k]) for k in keys), "file" if rec["file"] else "generated", rec["vocab"], rec["batch"],
         *_figure_cells(rec, ties)]
        for rec in summary.to_dict("records")
    ]  # fmt: skip
    caption = (
        "Means over every row of every tensor of a kind (batches and vocabularies pooled, weighted by rows). "
        "Rows tied at k: the k-th and (k+1)-th largest logits are equal."
    )
    return [Table([*keys, "source", "vocab", "batch", *HEADERS, *ties], rows, caption, css="compact")]


def _figure_cells(rec: dict, ties: list[str]) -> list[str]:
    numbers = [fmt.number(rec[c]) for c in ("top1_prob", "entropy_nats", "entropy_ratio")]
    return [*numbers, fmt.percent(rec["top1_tie_rows"]), *(fmt.percent(rec[c]) for c in ties)]


def _closest_notes(tensors: pd.DataFrame) -> list[Block]:
    """For each file kind and dtype: the generated kind nearest in (top-1 p, entropy / ln V, top ties)."""
    summary, notes = _weighted(tensors, ["dtype", "logits"]), []
    for rec in summary[summary["file"]].to_dict("records"):
        generated = summary[(summary["dtype"] == rec["dtype"]) & ~summary["file"]]
        figures = ["top1_prob", "entropy_ratio", "top1_tie_rows"]
        distance = ((generated[figures] - pd.Series(rec)[figures]) ** 2).sum(axis=1, min_count=3)
        if distance.isna().all():
            continue
        near = generated.loc[distance.idxmin()]
        text = (
            f"{rec['logits']} ({rec['dtype']}): mean top-1 p {fmt.number(rec['top1_prob'])}, entropy "
            f"{fmt.number(rec['entropy_nats'])} nats ({fmt.number(rec['entropy_ratio'])} of ln V), "
            f"{fmt.percent(rec['top1_tie_rows'])} of rows tied at the top. Closest generated kind: "
            f"{near['logits']} (top-1 p {fmt.number(near['top1_prob'])}, entropy / ln V "
            f"{fmt.number(near['entropy_ratio'])}, {fmt.percent(near['top1_tie_rows'])} tied at the top)."
        )
        notes.append(Note(text))
    return notes


def _shape_figure(tensors: pd.DataFrame) -> Block:
    data = tensors.assign(source=np.where(tensors["file"], "file", "generated"))

    def build():
        import plotly.express as px

        labels = {"top1_prob": "mean top-1 probability (log scale)", "entropy_ratio": "mean entropy / ln V"}
        fig = px.scatter(
            data, x="top1_prob", y="entropy_ratio", color="logits", symbol="source", log_x=True,
            symbol_map={"file": "star", "generated": "circle"},
            labels=labels | {"top1_tie_rows": "rows tied at the top"},
            hover_data={"dtype": True, "vocab": True, "batch": True, "top1_tie_rows": ":.3f"},
            title="Where each kind's logits sit: confidence against spread",
        )  # fmt: skip
        fig.update_traces(marker={"size": 11, "opacity": 0.75})
        fig.update_layout(**blocks.REPORT_LAYOUT, height=460)
        return fig

    caption = (
        "One point per logits tensor (kind, dtype, vocabulary, batch; stars: files). Right and low: "
        "confident heads (one token takes most of the mass); left and high: flat ones. A file's points "
        "among a generated kind's: that kind's results speak for the file."
    )
    return figure_block("logits-shape", "logits shape", build, caption)


def _per_tensor_details(tensors: pd.DataFrame) -> list[Block]:
    shown = [c for c in TENSOR_KEYS if c not in ("device", "run") or tensors[c].nunique() > 1]
    ties = _tie_columns(tensors)
    records = tensors.to_dict("records")
    rows = [[*(fmt.number(rec[c]) for c in shown), *_figure_cells(rec, ties)] for rec in records]
    table = Table([*shown, *HEADERS, *ties], rows, f"{len(rows)} logits tensors.", css="compact")
    return [Group(f"Per tensor ({len(rows)} logits tensors)", [table], "details")]
