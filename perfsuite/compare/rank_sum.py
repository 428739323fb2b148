"""The rank test `perfsuite compare` decides "slower" and "faster" with: a two-sided Mann-Whitney U test
on two sets of raw samples (per-call seconds), in numpy alone (GPU boxes install perfsuite offline, without
scipy; the tests check it against `scipy.stats.mannwhitneyu`).

Why ranks: per-call times are skewed (a long right tail of interrupts, other processes, clock changes)
and a few wild samples must not decide a verdict. The test asks whether a sample of one set tends to be
larger than a sample of the other, without assuming any distribution.

What it cannot see: it treats the samples of each set as independent draws. Samples of one run share that
run's machine (its load, clocks, temperature), so a machine that was busier during one run makes the two
sets really differ, and the test confirms that difference as it would a slower kernel. `compare` states
the median ratio over all cases beside its verdicts for that reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

ALPHA = 0.01
"""The p-value below which the test confirms a change. A compare tests every matched case, tens to hundreds
of them: at 0.05, several unchanged cases per compare would pass by chance; at 0.01 about one in a hundred
does, and such a case is only called slower or faster when its median also moved past the threshold, which
a chance rank difference rarely does. A Bonferroni-strict level (0.05 / 200 cases = 0.00025) would cost
too much power at the sample counts a run takes: with 25 samples a side, a real 5 % slowdown of a case
whose p20-p80 spread is 10 % of its median gives a median p of 0.005 (confirmed 6 times in 10 at 0.01, 1 in
7 at 0.00025); a 10 % slowdown gives p near 1e-5."""
EXACT_BELOW = 8
"""Below this many samples on either side (and at most `EXACT_MAX_TOTAL` in all) the p-value is exact: the
permutation distribution of the rank sum, ties included. Otherwise the normal approximation with tie and
continuity corrections (scipy's `method="asymptotic"`)."""
EXACT_MAX_TOTAL = 500
"""The exact count takes time in proportion to the square of the samples: beyond this, the approximation."""


@dataclass(frozen=True)
class RankTest:
    """The outcome of `mann_whitney_u(base, new)`."""

    u_new: float
    """Pairs (base sample, new sample) where the new one is larger, ties counting half: scipy's statistic
    for `mannwhitneyu(new, base)`."""
    p_value: float
    """Two-sided: the chance of ranks at least this lopsided, either way, if both sets came from one
    distribution."""
    n_base: int
    n_new: int
    method: str
    """'exact' or 'asymptotic'."""

    @property
    def new_larger(self) -> float:
        """The share of (base, new) pairs where the new sample is larger (ties half): 0.5 is no change;
        above it, the new samples tend to be slower."""
        return self.u_new / (self.n_base * self.n_new)


def average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n of `values`, tied values sharing their average rank; and the size of each tie group."""
    unique, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    del unique
    last = np.cumsum(counts)
    return (last - (counts - 1) / 2)[inverse], counts


def mann_whitney_u(base: Sequence[float], new: Sequence[float]) -> RankTest:
    """The two-sided Mann-Whitney U test of `new` against `base` (both finite, at least one value each)."""
    x = np.asarray(base, dtype="float64").ravel()
    y = np.asarray(new, dtype="float64").ravel()
    n1, n2 = len(x), len(y)
    if not n1 or not n2 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("mann_whitney_u: needs at least one finite sample on each side, and no NaN or inf")
    ranks, ties = average_ranks(np.concatenate([x, y]))
    u_new = float(ranks[n1:].sum() - n2 * (n2 + 1) / 2)
    if min(n1, n2) < EXACT_BELOW and n1 + n2 <= EXACT_MAX_TOTAL:
        p, method = _exact_p(ranks, n1, u_new), "exact"
    else:
        p, method = _asymptotic_p(u_new, n1, n2, ties), "asymptotic"
    return RankTest(u_new, min(max(p, 0.0), 1.0), n1, n2, method)


def _asymptotic_p(u_new: float, n1: int, n2: int, ties: np.ndarray) -> float:
    """Normal approximation: z of the larger U, with the tie-corrected variance and a continuity
    correction of 1/2 (as scipy's `method="asymptotic"`); p = 2 P(Z > z)."""
    n = n1 + n2
    u = max(u_new, n1 * n2 - u_new)
    tie_term = float(np.sum(ties.astype("float64") ** 3 - ties))
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:  # every sample equal: no evidence either way
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))  # 2 * (1 - Phi(z))


def _exact_p(ranks: np.ndarray, n1: int, u_new: float) -> float:
    """The exact permutation p-value: the distribution of one set's rank sum over every way of
    splitting the pooled ranks into sets of n1 and n2 (ties kept as they are), two-sided as twice the
    smaller tail. Counted by dynamic programming over doubled ranks (whole numbers with ties too)."""
    n2 = len(ranks) - n1
    doubled = np.rint(2 * ranks).astype("int64")
    if n1 <= n2:  # count subsets of the smaller set's size: its rank sum decides the same p-value
        k, observed = n1, round(2 * (n1 * n2 - u_new + n1 * (n1 + 1) / 2))
    else:
        k, observed = n2, round(2 * (u_new + n2 * (n2 + 1) / 2))
    top = int(np.sort(doubled)[-k:].sum())
    ways = np.zeros((k + 1, top + 1))  # ways[j, s]: subsets of j values whose doubled ranks sum to s
    ways[0, 0] = 1.0
    for value in doubled:
        ways[1:, value:] += ways[:-1, : top + 1 - value].copy()
    counts = ways[k]
    total = counts.sum()
    lower, upper = counts[: observed + 1].sum() / total, counts[observed:].sum() / total
    return float(2 * min(lower, upper))


@cache
def smallest_p_value(n_base: int, n_new: int) -> float:
    """The smallest p-value the test can give for these sample counts (every new sample beyond every base
    one): at or above `ALPHA`, the test cannot confirm anything (e.g. 4 samples a side) and `compare`
    falls back to the p20/p80 band."""
    return mann_whitney_u(range(n_base), range(n_base, n_base + n_new)).p_value
