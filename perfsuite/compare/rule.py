"""How `perfsuite compare` judges a case's time: one witness, one estimate with its interval, its noise and
floor, and the decision table below (`ROWS`, shown by `compare --help` and docs/comparing.md as
`DECISION_TABLE`); `groups` judges variants and groups by the same table.

The witness: the case's time over the in-turn reference's, round by round, where both runs sampled the same
reference (a machine slower in those seconds moves both alike); else its own samples. The shift is their
Hodges-Lehmann estimate of new over base in log space, its interval the Mann-Whitney one at `LEVEL`; the
noise and floor are learnt from the two runs (`run_floors`). Without raw samples on both sides the rows stand
in: the medians' ratio, new p20 / base p80 to new p80 / base p20, the rounds' spread from their p20/p80. A
case is "same" only where its noise is within the threshold: elsewhere it cannot tell.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
import pandas as pd

SIGMAS = 5.0
"""Robust SDs of a variant's run-to-run scatter a case must clear, and standard errors its median shift
must clear: two runs' scatter has heavier tails than a normal law's (about 2 in 1,000 cases lay past 4 in
A/A pairs of quick.toml, one core busy, on a 2-core VM: docs/comparing.md), and a compare judges hundreds
of cases."""
MIN_CASES = 10  # a variant's cases needed to learn its scatter (fewer: the rounds' spread alone)
LEVEL = 0.95
"""The interval's confidence: it decides alone only where the floor is 1 (a variant that moved as a whole);
elsewhere the floor, far wider than the interval, stands between an unchanged case and a verdict."""
Z = NormalDist().inv_cdf((1 + LEVEL) / 2)
BY_REFERENCE, OWN_TIME = "vs reference", "own time"
"""The witness kinds, the start of each case's `witness` ("vs reference, 25/25 rounds")."""

ROWS: tuple[tuple[str, str, Callable[[float, float, float, float, float, float], bool]], ...] = (
    ("slower", "low > 1 and shift > max(1 + threshold, floor)",
     lambda s, lo, hi, f, n, t: lo > 1 and s > max(1 + t, f)),
    ("faster", "high < 1 and shift < 1 / max(1 + threshold, floor)",
     lambda s, lo, hi, f, n, t: hi < 1 and s < 1 / max(1 + t, f)),
    ("same", "noise <= 1 + threshold and 1 / (1 + threshold) <= shift <= 1 + threshold",
     lambda s, lo, hi, f, n, t: n <= 1 + t and 1 / (1 + t) <= s <= 1 + t),
    ("cannot tell", "any other shift: noise wider than the threshold, or past it but not confirmed",
     lambda s, lo, hi, f, n, t: not math.isnan(s)),
    ("not comparable", "no shift: the case was not timed in both runs",
     lambda s, lo, hi, f, n, t: math.isnan(s)),
)  # fmt: skip
"""The decision table: each row's outcome, its condition as text and as code (of shift, low, high, floor and
threshold); a case gets the first row that holds."""
LEGEND = (
    "shift: new/base of the case's witness (Hodges-Lehmann); low, high: its "
    f"{100 * LEVEL:.0f} % interval (Mann-Whitney); noise: the larger of sqrt(base p80/p20 x new p80/p20) "
    f"of the witness's rounds and exp({SIGMAS:g} robust SDs) of its variant's shifts over the run (the "
    "rounds' alone where the whole variant moved past the threshold by "
    f"{SIGMAS:g} SEs: then the floor is 1); floor: the noise or, against the reference, "
    "(1 + threshold) x the median shift of its shape's other variants where that lies the case's way "
    "(its inverse for faster), the larger; threshold: --fail-on (default 5 %). A variant or group: "
    "the same table on its pooled figures (docs/comparing.md)."
)
DECISION_TABLE = "\n".join(
    [f"{'outcome':<16}condition", *(f"{o:<16}{c}" for o, c, _ in ROWS), *textwrap.wrap(LEGEND, 100)]
)
__doc__ = f"{__doc__}\n{DECISION_TABLE}\n"


def outcome(shift: float, low: float, high: float, floor: float, noise: float, threshold: float) -> str:
    """The row of `ROWS` that holds (all figures ratios; `threshold` a fraction)."""
    return next(name for name, _, holds in ROWS if holds(shift, low, high, floor, noise, threshold))


def key_text(value: object, missing: str = "-") -> str:
    """A case key's text: whole floats without '.0', `missing` for None and NaN."""
    if pd.isna(value):
        return missing
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def judged_at(table: pd.DataFrame) -> pd.Series:
    """For the rows that cannot tell, the threshold (a fraction) from which they could be judged: their
    noise or their shift, whichever is wider (inf: no interval); NaN for the others."""
    shift = table["shift"].astype(float)
    at = np.maximum(np.maximum(table["noise"].astype(float), shift), 1 / shift) - 1
    return at.where(table["outcome"].eq("cannot tell"))


class Side(NamedTuple):
    """One run's witness of a case: the log of each round (None without samples), its row's median, p20
    and p80 (NaN where missing)."""

    rounds: np.ndarray | None
    median: float
    p20: float
    p80: float


def hodges_lehmann(base: np.ndarray, new: np.ndarray) -> tuple[float, float, float]:
    """The Hodges-Lehmann estimate of new - base (the median of every pairwise difference) and the
    Mann-Whitney interval around it at `LEVEL` (normal approximation; -inf, inf where too few values reach
    that level: 2 a side at 95 %)."""
    diffs = np.sort(np.subtract.outer(new, base), axis=None)
    n = diffs.size
    k = math.floor(n / 2 - Z * math.sqrt(n * (len(base) + len(new) + 1) / 12))
    if k < 0:
        return float(np.median(diffs)), -math.inf, math.inf
    return float(np.median(diffs)), float(diffs[k]), float(diffs[n - 1 - k])


def judge(base: Side, new: Side) -> tuple[float, float, float, float]:
    """The shift of a case's witness, its interval and its floor, as ratios: from the rounds where both
    sides have them, else from the rows."""
    if base.rounds is not None and new.rounds is not None:
        shift, low, high = hodges_lehmann(base.rounds, new.rounds)
        floor = float(np.mean([np.subtract(*np.quantile(r, [0.8, 0.2])) for r in (base.rounds, new.rounds)]))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            (bm, b20, b80), (nm, n20, n80) = np.log(np.array([base[1:], new[1:]], dtype=float))
        shift, low, high = nm - bm, n20 - b80, n80 - b20
        low, high = (shift, shift) if math.isnan(low + high) else (low, high)
        floor = 0.0 if math.isnan(b80 - b20 + n80 - n20) else (b80 - b20 + n80 - n20) / 2
    return math.exp(shift), math.exp(low), math.exp(high), math.exp(floor)


def shape_others(logs: pd.Series, shapes: pd.Series) -> pd.Series:
    """For each row, the median of `logs` over the other rows of its `shapes` key (NaN where none)."""
    return logs.groupby(shapes.to_numpy(), group_keys=False).apply(
        lambda shape: pd.Series([shape.drop(i).median() for i in shape.index], index=shape.index, dtype=float)
    )


def run_floors(table: pd.DataFrame, threshold: float, shapes: pd.Series) -> pd.DataFrame:
    """Each case's `noise` and `floor` (see `LEGEND`): the noise, the larger of its rounds' (`floor` as
    `judge` gave it) and its variant's scatter (`SIGMAS` robust SDs of its cases' log shifts, one witness
    kind); the floor, the larger of the noise and, judged against the reference, its shape's move (the
    median log shift of the other cases of its `shapes` key, where that lies the case's way, with the
    threshold's). Where the variant's median is past the threshold by `SIGMAS` SEs: the rounds' noise
    and a floor of 1."""
    logs = np.log(table["shift"].astype(float)).replace([-np.inf, np.inf], np.nan)
    kind = table["witness"].str.split(",").str[0]
    group = table["variant"].astype(str) + " " + kind
    middle, count = logs.groupby(group).transform("median"), logs.groupby(group).transform("count")
    sigma = 1.4826 * (logs - middle).abs().groupby(group).transform("median")
    learnt = count >= MIN_CASES
    moved = learnt & (middle.abs() - SIGMAS * sigma / np.sqrt(count) > math.log1p(threshold))
    by_ref = logs.where(kind == BY_REFERENCE)
    aside = shape_others(by_ref, shapes)
    shape_move = (aside.abs() + math.log1p(threshold)).where(aside * by_ref > 0, 0.0)
    rounds = np.log(table["floor"].astype(float))
    noise = np.maximum(rounds, (SIGMAS * sigma).where(learnt & ~moved, 0.0))
    floor = np.maximum(noise, shape_move).mask(moved, 0.0)
    return pd.DataFrame({"floor": np.exp(floor), "noise": np.exp(noise)}, index=table.index)
