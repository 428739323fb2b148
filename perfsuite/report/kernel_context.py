"""What the kernel-level sections share: the prepared results frame (`Context`) and the order and labels
of variants, dtypes, paths and case dimensions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.load import coerce
from perfsuite.schema import BASELINE, add_speedups

INEXACT_SHORTCUT = "argmax_ones"
DIMENSIONS = ("device", "backend", "variant", "accuracy", "path", "dtype", "logits", "l2", "status")
DTYPE_ORDER = ("float32", "float16", "bfloat16")
PATH_ORDER = ("eager", "graph", "compile")
FACET_ORDER = (*DTYPE_ORDER, *PATH_ORDER)
NUMBERS = (int, float, np.integer, np.floating)


@dataclass
class Context:
    """The prepared frame and what every section needs: ok rows, variant order and colours, devices."""

    frame: pd.DataFrame
    ok: pd.DataFrame
    variants: list[str]
    devices: list[str]

    @classmethod
    def of(cls, results: pd.DataFrame) -> Context:
        frame = _prepare(results)
        ok = frame[(frame["status"] == "ok") & frame["median_us"].notna()].copy()
        variants = variant_order(frame["variant"])
        devices = sorted(frame["device"].unique())
        return cls(frame, ok, variants, devices)

    @cached_property
    def colors(self) -> dict[str, str]:
        """A colour per variant, the same in every figure (only figures need it: plotly's palette)."""
        import plotly.express as px

        palette = px.colors.qualitative.Plotly + px.colors.qualitative.Dark24
        return {v: palette[i % len(palette)] for i, v in enumerate(self.variants)}

    def subtitle(self) -> str:
        counts = self.frame["status"].value_counts()
        parts = [f"{len(self.frame)} cases"] + [f"{counts[s]} {s}" for s in counts.index]
        return f"{', '.join(parts)} · {len(self.variants)} variants · devices: {', '.join(self.devices)}"

    @property
    def several_devices(self) -> bool:
        return len(self.devices) > 1


def _prepare(results: pd.DataFrame) -> pd.DataFrame:
    frame = coerce(results)
    for column in DIMENSIONS:
        frame[column] = frame[column].fillna("-").astype(str)
    frame["status"] = frame["status"].replace("-", "ok")
    frame["reason"] = frame["reason"].fillna("").astype(str)
    for column in ("vocab", "batch", "topk"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame["topk"] = frame["topk"].fillna(-1)
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
