"""The text of numbers in report cells, notes and hovers, one function per style: missing values are blank,
except in the draft-loop styles (`scientific`, `percent_one_decimal`) where they are a dash."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

DASH = "–"


def is_nan(value: object) -> bool:
    """True for a float NaN (plain or numpy), False for anything else."""
    return isinstance(value, float) and math.isnan(value)


def number(value: object, digits: int = 3) -> str:
    """Compact text for a table cell: blanks for NaN, integers without a point, floats to `digits`."""
    if value is None or is_nan(value) or value is pd.NA:
        return ""
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return str(value if isinstance(value, (bool, np.bool_)) else int(value))
    if not isinstance(value, (float, np.floating)):
        return str(value)
    value = float(value)
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.0f}" if 10**digits <= abs(value) < 1e15 else f"{value:.{digits}g}"


def significant(value: float | None, digits: int = 4) -> str:
    """`digits` significant digits (Python's `g` format); blank when missing."""
    return "" if value is None or math.isnan(value) else f"{value:.{digits}g}"


def grouped(value: object) -> str:
    """Floats from 1000 up as whole numbers with thousands separators, below to 3 significant digits;
    other values as text; blank for NaN."""
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def scientific(value: object, digits: int = 3) -> str:
    """Floats to `digits` significant digits, in exponent form outside [1e-3, 1e5); a dash when missing."""
    if value is None or is_nan(value):
        return DASH
    if isinstance(value, float) and value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def percent(value: float) -> str:
    """A share as a percentage to 3 significant digits ("12.5 %"); blank for NaN."""
    return "" if is_nan(value) else f"{100 * value:.3g} %"


def percent_one_decimal(value: object) -> str:
    """A share as a percentage with one decimal ("12.5%"); a dash when missing or not a float."""
    return f"{100 * value:.1f}%" if isinstance(value, float) and not math.isnan(value) else DASH


def speedup(value: float) -> str:
    """A ratio of times ("1.23×"); blank for NaN."""
    return "" if is_nan(value) else f"{value:.2f}×"


def mebibytes(value: float) -> str:
    """Bytes in MiB to 3 significant digits; blank for NaN."""
    return "" if is_nan(value) else f"{value / 2**20:.3g} MiB"
