"""The report's section on the inputs themselves: per logits kind and dtype, the distribution's shape (mean
top-1 probability, mean entropy, exact ties at the top and at the k-th place,
`perfsuite.correctness.logits_shape`), so a reader can tell which generated kind resembles a model's
logits (a `file:` kind), and which generated kind is closest to each file.

Every row of one logits tensor carries the same figures (the k-th-place ties: the same per k): each tensor
counts once, and figures over several tensors (batches, vocabularies, devices) are means weighted by their
rows. Results from before these figures were recorded have none: the section is then left out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import REPORT_LAYOUT, Block, Details, Note, Section, Table, figure_block, guard
from perfsuite.report.kernel_context import DTYPE_ORDER, Context

SECTION_ID = "logits-shape"
TITLE = "Logits: the distributions' shape"
FIGURES = ("top1_prob", "entropy_nats", "top1_tie_rows")
FILE_PREFIX = "file:"
TENSOR_KEYS = ("device", "run", "logits", "dtype", "vocab", "batch")
"""Rows with the same values of these share one logits tensor (and its figures)."""
TIES_AT = "rows tied at k="


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
    blocks: list[Block] = []
    blocks += guard("closest kind", lambda: _closest_notes(tensors))
    blocks += guard("shape table", lambda: _overview_table(ctx, tensors))
    blocks += guard("shape figure", lambda: _shape_figure(tensors))
    blocks += guard("shape per tensor", lambda: _per_tensor_details(tensors))
    return Section(SECTION_ID, TITLE, blocks, intro=intro)


def _tensors(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per logits tensor with its figures and `entropy_ratio` (entropy / ln V), and a `ties at
    k=K` column per k (the first of each tensor's rows at that k)."""
    if not set(FIGURES) <= set(frame.columns):
        return pd.DataFrame()
    data = frame[pd.to_numeric(frame["top1_prob"], errors="coerce").notna()].copy()
    if data.empty:
        return pd.DataFrame()
    for column in (*FIGURES, "topk_tie_rows", "vocab", "batch", "topk"):
        data[column] = pd.to_numeric(data[column], errors="coerce")
    data["run"] = data["run"].astype(object).fillna("")
    keys = list(TENSOR_KEYS)
    tensors = data.groupby(keys, sort=False, dropna=False)[list(FIGURES)].first()
    ties = data.groupby([*keys, "topk"], sort=False, dropna=False)["topk_tie_rows"].first().unstack("topk")
    ties.columns = [f"{TIES_AT}{fmt.number(k)}" for k in ties.columns]
    tensors = tensors.join(ties).reset_index()
    tensors["entropy_ratio"] = tensors["entropy_nats"] / np.log(tensors["vocab"].where(tensors["vocab"] > 1))
    return tensors


def _tie_columns(tensors: pd.DataFrame) -> list[str]:
    """The k-th-place tie columns, k > 1 (at k = 1 they are the ties at the top)."""
    columns = [c for c in tensors.columns if c.startswith(TIES_AT) and c != f"{TIES_AT}1"]
    return sorted(columns, key=lambda c: float(c.removeprefix(TIES_AT)))


def _weighted(tensors: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Means of the figures over tensors, weighted by their rows (batch), per `keys`."""
    values = ["top1_prob", "entropy_nats", "entropy_ratio", "top1_tie_rows", *_tie_columns(tensors)]
    rows = []
    for group, part in tensors.groupby(keys, sort=False, dropna=False):
        weights = part["batch"].clip(lower=0).fillna(0)
        record = dict(zip(keys, group if isinstance(group, tuple) else (group,), strict=True))
        for column in values:
            known = part[column].notna() & (weights > 0)
            total = weights[known].sum()
            record[column] = (part.loc[known, column] * weights[known]).sum() / total if total else math.nan
        record["vocab"] = _values_text(part["vocab"])
        record["batch"] = _values_text(part["batch"])
        record["rows"] = int(weights.sum())
        rows.append(record)
    return pd.DataFrame(rows)


def _values_text(values: pd.Series) -> str:
    return ", ".join(fmt.number(v) for v in sorted(values.dropna().unique()))


def _ordered(summary: pd.DataFrame) -> pd.DataFrame:
    """dtypes in their natural order; within one, the most confident kind first (a scale from peaked to
    flat, with each file where it falls on it)."""
    rank = summary["dtype"].map(lambda d: DTYPE_ORDER.index(d) if d in DTYPE_ORDER else len(DTYPE_ORDER))
    return (
        summary.assign(_rank=rank)
        .sort_values(["_rank", "top1_prob"], ascending=[True, False])
        .drop(columns="_rank")
    )


def _overview_table(ctx: Context, tensors: pd.DataFrame) -> list[Block]:
    keys = [*(["device"] if ctx.several_devices else []), "dtype", "logits"]
    summary = _ordered(_weighted(tensors, keys))
    ties = _tie_columns(tensors)
    rows = []
    for rec in summary.to_dict("records"):
        source = "file" if str(rec["logits"]).startswith(FILE_PREFIX) else "generated"
        rows.append(
            [
                *(str(rec[k]) for k in keys),
                source,
                rec["vocab"],
                rec["batch"],
                fmt.number(rec["top1_prob"]),
                fmt.number(rec["entropy_nats"]),
                fmt.number(rec["entropy_ratio"]),
                fmt.percent(rec["top1_tie_rows"]),
                *(fmt.percent(rec[c]) for c in ties),
            ]
        )
    columns = [
        *keys,
        "source",
        "vocab",
        "batch",
        "mean top-1 p",
        "mean entropy (nats)",
        "entropy / ln V",
        "rows tied at the top",
        *ties,
    ]
    caption = (
        "Means over every row of every tensor of a kind (batches and vocabularies pooled, weighted by rows). "
        "Rows tied at k: the k-th and (k+1)-th largest logits are equal."
    )
    return [Table(columns, rows, caption, css="compact")]


def _closest_notes(tensors: pd.DataFrame) -> list[Block]:
    """For each file kind and dtype: the generated kind nearest in (top-1 p, entropy / ln V, top ties)."""
    summary = _weighted(tensors, ["dtype", "logits"])
    files = summary[summary["logits"].astype(str).str.startswith(FILE_PREFIX)]
    notes = []
    for rec in files.to_dict("records"):
        generated = summary[
            (summary["dtype"] == rec["dtype"]) & ~summary["logits"].astype(str).str.startswith(FILE_PREFIX)
        ]
        if generated.empty:
            continue
        distance = (
            (generated["top1_prob"] - rec["top1_prob"]) ** 2
            + (generated["entropy_ratio"] - rec["entropy_ratio"]) ** 2
            + (generated["top1_tie_rows"] - rec["top1_tie_rows"]) ** 2
        ) ** 0.5
        if distance.isna().all():
            continue
        near = generated.loc[distance.idxmin()]
        notes.append(
            Note(
                f"{rec['logits']} ({rec['dtype']}): mean top-1 p {fmt.number(rec['top1_prob'])}, entropy "
                f"{fmt.number(rec['entropy_nats'])} nats ({fmt.number(rec['entropy_ratio'])} of ln V), "
                f"{fmt.percent(rec['top1_tie_rows'])} of rows tied at the top. Closest generated kind: "
                f"{near['logits']} (top-1 p {fmt.number(near['top1_prob'])}, entropy / ln V "
                f"{fmt.number(near['entropy_ratio'])}, {fmt.percent(near['top1_tie_rows'])} tied at the top)."
            )
        )
    return notes


def _shape_figure(tensors: pd.DataFrame) -> Block:
    data = tensors.assign(
        source=np.where(tensors["logits"].astype(str).str.startswith(FILE_PREFIX), "file", "generated"),
        label=tensors["logits"].astype(str) + " · " + tensors["dtype"].astype(str),
    )

    def build():
        import plotly.express as px

        fig = px.scatter(
            data,
            x="top1_prob",
            y="entropy_ratio",
            color="logits",
            symbol="source",
            symbol_map={"file": "star", "generated": "circle"},
            hover_data={"dtype": True, "vocab": True, "batch": True, "top1_tie_rows": ":.3f"},
            log_x=True,
            labels={
                "top1_prob": "mean top-1 probability (log scale)",
                "entropy_ratio": "mean entropy / ln V",
                "top1_tie_rows": "rows tied at the top",
            },
            title="Where each kind's logits sit: confidence against spread",
        )
        fig.update_traces(marker={"size": 11, "opacity": 0.75})
        fig.update_layout(**REPORT_LAYOUT, height=460)
        return fig

    caption = (
        "One point per logits tensor (kind, dtype, vocabulary, batch; stars: files). Right and low: "
        "confident heads (one token takes most of the mass); left and high: flat ones. A file's points "
        "among a generated kind's: that kind's results speak for the file."
    )
    return figure_block("logits-shape", "logits shape", build, caption)


def _per_tensor_details(tensors: pd.DataFrame) -> list[Block]:
    columns = ["device", "run", "logits", "dtype", "vocab", "batch"]
    shown = [c for c in columns if c not in ("device", "run") or tensors[c].nunique() > 1]
    ties = _tie_columns(tensors)
    frame = tensors[[*shown, *FIGURES, "entropy_ratio", *ties]]
    rows = [
        [
            *(fmt.number(rec[c]) for c in shown),
            fmt.number(rec["top1_prob"]),
            fmt.number(rec["entropy_nats"]),
            fmt.number(rec["entropy_ratio"]),
            fmt.percent(rec["top1_tie_rows"]),
            *(fmt.percent(rec[c]) for c in ties),
        ]
        for rec in frame.to_dict("records")
    ]
    header = [*shown, "mean top-1 p", "mean entropy (nats)", "entropy / ln V", "rows tied at the top", *ties]
    table = Table(header, rows, f"{len(rows)} logits tensors.", css="compact")
    return [Details(f"Per tensor ({len(rows)} logits tensors)", [table])]
