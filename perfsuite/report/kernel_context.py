"""What the kernel-level sections share: the prepared results frame (`Context`) and the order and labels
of variants, dtypes, paths and case dimensions.

Rows of several devices make the device a dimension of every figure and table (`Context.unit`); where one
device carries rows of several runs (two `perfsuite run`s reported together), the (device, run) pair is
that dimension instead (column `UNIT`, "device · run"), so two runs' medians are never pooled into one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from perfsuite.measure.timing import UNSTABLE_SPREAD
from perfsuite.report import formatting as fmt
from perfsuite.results.columns import BASELINE, BASELINES, add_speedups, complete

INEXACT_SHORTCUT = "argmax_ones"
LOWEST_INDEX_IDENTITY = "identity"
ENGINE_ORDER_IDENTITY = "identity_engine_order"
"""The exact identity with the lowest-index tie repair, and without it (torch's top-k order)."""
PAIRING_TEXT = (
    f"speedup = {BASELINE}'s time over the variant's, both on the same device, run, path, dtype, shape "
    "(vocab, batch, k) and logits, sampled in turn (the median of per-round ratios; the ratio of medians "
    f"where they were not): a compiled variant is compared with the compiled {BASELINE}, an eager one with "
    "the eager one, never across paths"
)
"""Which pairs every speedup of the report and the summary compares."""
DIMENSIONS = ("device", "backend", "variant", "accuracy", "path", "dtype", "logits", "l2", "status")
DTYPE_ORDER = ("float32", "float16", "bfloat16")
PATH_ORDER = ("eager", "graph", "compile")
FACET_ORDER = (*DTYPE_ORDER, *PATH_ORDER)
NUMBERS = (int, float, np.integer, np.floating)
UNIT = "device · run"
"""The column naming a row's (device, run) when runs of one device are kept apart."""
UNSTABLE = "_unstable"
"""Helper column: the row's `unstable` flag as a bool (False where the rows do not say)."""
HELPERS = (UNIT, UNSTABLE)
"""Columns `Context` adds to the rows, left out of the full results table."""
UNSTABLE_MARK = "⚠"
UNSTABLE_TEXT = (
    f"{UNSTABLE_MARK}: unstable, the p20-p80 spread of its samples is above {100 * UNSTABLE_SPREAD:.0f} % "
    "of the median (in at least one logits distribution behind the figure): do not rank on it"
)


@dataclass
class Context:
    """The prepared frame and what every section needs: ok rows, variant order and colours, devices, the
    dimension that keeps devices and runs apart (`unit`), and the raw samples where given."""

    frame: pd.DataFrame
    ok: pd.DataFrame
    variants: list[str]
    devices: list[str]
    samples: pd.DataFrame | None = None

    @classmethod
    def of(cls, results: pd.DataFrame, samples: pd.DataFrame | None = None) -> Context:
        frame = _prepare(results)
        ok = frame[(frame["status"] == "ok") & frame["median_us"].notna()].copy()
        variants = variant_order(frame["variant"])
        devices = sorted(frame["device"].unique())
        return cls(frame, ok, variants, devices, samples)

    @cached_property
    def colors(self) -> dict[str, str]:
        """A colour per variant, the same in every figure (only figures need it: plotly's palette)."""
        import plotly.express as px

        palette = px.colors.qualitative.Plotly + px.colors.qualitative.Dark24
        return {v: palette[i % len(palette)] for i, v in enumerate(self.variants)}

    def subtitle(self) -> str:
        counts = self.frame["status"].value_counts()
        parts = [f"{len(self.frame)} cases"] + [f"{counts[s]} {s}" for s in counts.index]
        where = f"devices: {', '.join(self.devices)}"
        if self.runs_apart:
            where = f"{len(self.units)} runs kept apart: {', '.join(self.units)}"
        return f"{', '.join(parts)} · {len(self.variants)} variants · {where}"

    @property
    def runs_apart(self) -> bool:
        """Whether some device has rows of more than one run: the run is then a dimension too."""
        return UNIT in self.frame

    @property
    def unit(self) -> str:
        """The column every figure and table splits by: "device", or (device, run) where runs differ."""
        return UNIT if self.runs_apart else "device"

    @property
    def units(self) -> list[str]:
        return sorted(self.frame[self.unit].astype(str).unique())

    @property
    def several_devices(self) -> bool:
        """More than one device, or more than one run of a device: the unit is a dimension to draw."""
        return len(self.units) > 1


def run_labels(frame: pd.DataFrame) -> pd.Series:
    """Each row's run: its `run` label, else the file it came from (`source`), else ''."""
    labels = pd.Series("", index=frame.index, dtype=object)
    for column in ("source", "run"):  # run wins over source
        if column in frame:
            values = frame[column].astype(object)
            present = values.notna() & values.astype(str).str.strip().ne("")
            labels = labels.where(~present, values.astype(str))
    return labels


def _prepare(results: pd.DataFrame) -> pd.DataFrame:
    frame = complete(results)
    for column in DIMENSIONS:
        frame[column] = frame[column].fillna("-").astype(str)
    frame["status"] = frame["status"].replace("-", "ok")
    frame["reason"] = frame["reason"].fillna("").astype(str)
    for column in ("vocab", "batch", "topk"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame["topk"] = frame["topk"].fillna(-1)
    frame[UNSTABLE] = frame["unstable"].fillna(False).astype(bool)
    runs = run_labels(frame)
    if len(frame) and runs.groupby(frame["device"]).nunique().max() > 1:
        frame[UNIT] = frame["device"] + " · " + runs.replace("", "(no run label)")
        frame["run"] = frame["run"].where(frame["run"].notna(), runs.where(runs.ne(""), float("nan")))
    return add_speedups(frame, only_missing=True)  # pytest-benchmark files carry none


def variant_order(values: Iterable[str]) -> list[str]:
    """full_softmax, then argmax_ones, then the others as they first appear."""
    seen = list(dict.fromkeys(values))
    return sorted(seen, key=lambda v: (v != BASELINE, v != INEXACT_SHORTCUT, seen.index(v)))


def ordered(values: Iterable[object], preferred: Sequence[str] = ()) -> list:
    """The distinct values without NaN: `preferred` ones first in their order, then numbers, then text."""
    unique = list(dict.fromkeys(v for v in values if not fmt.is_nan(v)))
    rank = {v: i for i, v in enumerate(preferred)}
    return sorted(
        unique, key=lambda v: (rank.get(v, len(rank)), *((0, v) if isinstance(v, NUMBERS) else (1, str(v))))
    )


def facet_rank(value: object) -> tuple[int, object]:
    """Sort key: dtypes and paths in their natural order, then the rest as text or number."""
    if value in FACET_ORDER:
        return (0, FACET_ORDER.index(value))
    return (1, value) if isinstance(value, NUMBERS) else (2, str(value))


def varying_keys(frame: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    """The keys whose column takes more than one value in `frame`."""
    return [k for k in keys if k in frame and frame[k].nunique(dropna=False) > 1]


def case_label(keys: Sequence[str], values: Sequence[object]) -> str:
    """A case's dimensions as one label ("eager · k=1 · L2 cold")."""
    return " · ".join(dim_text(k, v) for k, v in zip(keys, values, strict=True))


def dim_text(key: str, value: object) -> str:
    """One dimension's value as a label ("k=8", "batch=64", "L2 hot", "bfloat16")."""
    if key in ("topk", "batch", "vocab"):
        return f"{'k' if key == 'topk' else key}={fmt.number(value)}"
    if key == "l2":
        return f"L2 {value}"
    return str(value)


def speedup_pairs(frame: pd.DataFrame, unit: Sequence[str] = ()) -> pd.DataFrame:
    """Which pairs the speedups of rows prepared by `add_speedups` compare: per (`unit`, path, variant)
    the baseline on the same path, how many of the variant's ok cases were paired in turn with it,
    compared by medians, or had no baseline measured beside them (tensor-parallel rows: the
    tensor-parallel baseline)."""
    columns = [*unit, "path", "variant", "against", "cases", "paired", "medians", "no baseline"]
    ok = frame[(frame["status"] == "ok") & frame["median_us"].notna() & ~frame["variant"].isin(BASELINES)]
    if ok.empty or "speedup_vs_full" not in ok:
        return pd.DataFrame(columns=columns)
    method = ok["speedup_method"] if "speedup_method" in ok else pd.Series(pd.NA, index=ok.index)
    measured = pd.to_numeric(ok["speedup_vs_full"], errors="coerce").notna()
    method = method.astype(object).where(measured, "none").fillna("medians").astype(str)
    tp = pd.to_numeric(ok["tp"], errors="coerce").fillna(1) if "tp" in ok else pd.Series(1, index=ok.index)
    baseline = pd.Series(BASELINES[0], index=ok.index).where(tp <= 1, BASELINES[1])
    data = ok.assign(
        path=ok["path"].astype(str),
        variant=ok["variant"].astype(str),
        against=baseline + " · " + ok["path"].astype(str),
        _paired=method.eq("paired"),
        _medians=method.eq("medians"),
        _none=method.eq("none"),
    )
    keys = [*unit, "path", "variant", "against"]
    out = data.groupby(keys, sort=False).agg(
        cases=("variant", "size"),
        paired=("_paired", "sum"),
        medians=("_medians", "sum"),
        **{"no baseline": ("_none", "sum")},
    )
    order = {v: i for i, v in enumerate(variant_order(data["variant"]))}
    rank = {"variant": order.get, "path": facet_rank}
    out = out.reset_index().sort_values(keys, key=lambda s: s.map(rank.get(s.name, lambda v: v)))
    return out[columns].reset_index(drop=True)


def tie_policy(frame: pd.DataFrame, unit: Sequence[str] = ()) -> pd.DataFrame:
    """What the lowest-index tie repair costs: per (`unit`, path, dtype, k) over the cases where both
    identities ran, `identity`'s time over `identity_engine_order`'s (1.30: the repair adds 30 %; `low`,
    `high`: the cheapest and dearest case). Per case the ratio of their medians: the two are sampled in
    turn, in the same rounds, so the machine's drift touches both alike; the ratio of their speedups
    would carry the baseline's own noise twice."""
    columns = [
        *unit,
        "path",
        "dtype",
        "topk",
        "cases",
        "identity us",
        "engine order us",
        "cost",
        "low",
        "high",
    ]
    pair = [LOWEST_INDEX_IDENTITY, ENGINE_ORDER_IDENTITY]
    ok = frame[(frame["status"] == "ok") & frame["median_us"].notna() & frame["variant"].isin(pair)]
    case = [*unit, "path", "dtype", "topk", "vocab", "batch", "logits", *(c for c in ("l2", "tp") if c in ok)]
    data = ok.assign(_us=pd.to_numeric(ok["median_us"], errors="coerce"))
    us = data.groupby([*case, "variant"], dropna=False)["_us"].median().unstack("variant")
    us = us.reindex(columns=pair).dropna()
    if us.empty:
        return pd.DataFrame(columns=columns)
    cases = pd.DataFrame(
        {
            "identity us": us[LOWEST_INDEX_IDENTITY],
            "engine order us": us[ENGINE_ORDER_IDENTITY],
            "cost": us[LOWEST_INDEX_IDENTITY] / us[ENGINE_ORDER_IDENTITY],
        }
    ).reset_index()
    keys = [*unit, "path", "dtype", "topk"]
    out = cases.groupby(keys, sort=False, dropna=False).agg(
        cases=("cost", "size"),
        **{"identity us": ("identity us", "median"), "engine order us": ("engine order us", "median")},
        cost=("cost", "median"),
        low=("cost", "min"),
        high=("cost", "max"),
    )
    out = out.reset_index().sort_values(keys, key=lambda s: s.map(facet_rank))
    return out[columns].reset_index(drop=True)


EXACT_TRITON = "triton_auto"
ARGMAX_TRITON = "triton_argmax"
EXACTNESS_TEXT = (
    f"What the exact probability costs. k = 1: the exact Triton kernel ({EXACT_TRITON}) over the argmax "
    f"kernel engines ship ({ARGMAX_TRITON}, topk_p = 1.0: no probability at all) and over {BASELINE} "
    f"(softmax, then top-k). k > 1: the exact fused top-k ({EXACT_TRITON}) over {BASELINE}. Per shape, the "
    "ratio of the variants' medians (sampled in turn, in the same rounds; median over logits "
    "distributions); 1.10 means the exact kernel takes 10 % longer. Bytes: each one's HBM bytes by its "
    "cache-aware model."
)


def cost_of_exactness(frame: pd.DataFrame, unit: Sequence[str] = ()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(k = 1 table, k > 1 table): per (`unit`, path, dtype, V, B, k) where the variants ran, the exact
    Triton kernel's time over the Triton argmax's (k = 1 only) and over full_softmax's, and the HBM bytes
    each moves (`bytes_model`). A shape without the exact kernel, or without what it is compared with, has
    no row: every cell of a row is measured."""
    keys = [*unit, "path", "dtype", "vocab", "batch", "topk"]
    names = [EXACT_TRITON, ARGMAX_TRITON, BASELINE]
    ok = frame[(frame["status"] == "ok") & frame["median_us"].notna() & frame["variant"].isin(names)]
    data = ok.assign(
        _us=pd.to_numeric(ok["median_us"], errors="coerce"),
        _bytes=pd.to_numeric(ok["bytes_model"], errors="coerce") if "bytes_model" in ok else np.nan,
    )
    grouped = data.groupby([*keys, "variant"], dropna=False)
    us = grouped["_us"].median().unstack("variant").reindex(columns=names)
    moved = grouped["_bytes"].median().unstack("variant").reindex(columns=names)
    table = pd.DataFrame(
        {
            "exact us": us[EXACT_TRITON],
            "argmax us": us[ARGMAX_TRITON],
            f"{BASELINE} us": us[BASELINE],
            "exact/argmax": us[EXACT_TRITON] / us[ARGMAX_TRITON],
            f"exact/{BASELINE}": us[EXACT_TRITON] / us[BASELINE],
            "exact bytes": moved[EXACT_TRITON],
            "argmax bytes": moved[ARGMAX_TRITON],
            f"{BASELINE} bytes": moved[BASELINE],
        }
    ).reset_index()
    one = table[table["topk"] == 1].dropna().reset_index(drop=True)
    several = table[table["topk"] > 1].drop(columns=["argmax us", "exact/argmax", "argmax bytes"]).dropna()
    return one, several.reset_index(drop=True)
