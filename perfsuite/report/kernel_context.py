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

from perfsuite.report import formatting as fmt
from perfsuite.report.load import coerce
from perfsuite.schema import BASELINE, add_speedups
from perfsuite.timing import UNSTABLE_SPREAD

INEXACT_SHORTCUT = "argmax_ones"
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
    """Each row's run: its `run` label, else the file it came from (`source`, from `load_many`), else ''."""
    labels = pd.Series("", index=frame.index, dtype=object)
    for column in ("source", "run"):  # run wins over source
        if column in frame:
            values = frame[column].astype(object)
            present = values.notna() & values.astype(str).str.strip().ne("")
            labels = labels.where(~present, values.astype(str))
    return labels


def _prepare(results: pd.DataFrame) -> pd.DataFrame:
    frame = coerce(results)
    for column in DIMENSIONS:
        frame[column] = frame[column].fillna("-").astype(str)
    frame["status"] = frame["status"].replace("-", "ok")
    frame["reason"] = frame["reason"].fillna("").astype(str)
    for column in ("vocab", "batch", "topk"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame["topk"] = frame["topk"].fillna(-1)
    frame[UNSTABLE] = frame["unstable"].astype(str).str.strip().str.lower().eq("true")
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
