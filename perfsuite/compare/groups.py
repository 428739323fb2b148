"""Where a change is: each variant, and each variant within one value of a case key (`GROUP_KEYS`), judged
from its cases' shifts pooled.

A group's witness is each of its cases' log shift less its shape's common move, as the other variants of
the shape (sampled in the same rounds) saw it, their own variants' moves taken out and, judged a second
time, without the cases of groups that moved (`witnesses`): a reference or a machine that moved in one
shape's rounds, or in one run, moves every variant of a shape alike and cancels; a change of one variant's
code does not, and does not leak into the others. The group's shift is the one-sample Hodges-Lehmann
estimate of its cases' witnesses, its interval the signed-rank one (`pooled`) at a level that holds for all
the groups of the compare together (Bonferroni: `ALPHA` over the groups judged), its floor and its noise
that interval's half-width; the decision table (`rule.ROWS`) then judges it as a case. A group that moved
names where a change is when its key separates (`where`): some of the key's values moved, not all.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd

from perfsuite.compare.rule import judged_at, key_text, outcome, shape_others

GROUP_KEYS = ("path", "dtype", "topk", "vocab", "batch", "logits", "l2", "tp")
ALPHA = 0.05  # the chance that any variant or group of a compare moves (slower or faster) when none did
MIN_CASES = 10  # a group's cases needed to be judged (fewer: no row)
COLUMNS = ("level", "variant", "group", "cases", "shift", "low", "high", "floor", "noise", "outcome", "where")
ALL = "all cases"
MOVED = ("slower", "faster")
GROUPS_LEGEND = (
    "A variant's or group's shift: the Hodges-Lehmann estimate of its cases' shifts less their shapes' "
    "common move (the other variants', their own moves out); low, high: the signed-rank interval, at a "
    f"level that holds for all the groups of the compare together ({100 * (1 - ALPHA):.0f} %); floor and "
    "noise: its half-width. where: the group's key separates the change (not all its values moved)."
)


def witnesses(table: pd.DataFrame, shapes: pd.Series, moved: pd.Series) -> pd.Series:
    """Each case's log shift less its shape's common move: the median, over the shape's other variants'
    cases not `moved`, of their log shifts less their variant's median, plus the median of those variants'
    medians (its own log shift where no such case is left)."""
    logs = np.log(table["shift"].astype(float)).replace([-np.inf, np.inf], np.nan)
    middle = logs.groupby(table["variant"]).transform("median")
    common = shape_others((logs - middle).where(~moved), shapes) + shape_others(middle.where(~moved), shapes)
    return logs - common.fillna(0.0)


def members(table: pd.DataFrame) -> list[tuple[str, str, pd.Index]]:
    """(variant, group, its rows) for each variant and each of its key values, where the key varies."""
    found = []
    for variant, cases in table.groupby("variant", sort=False):
        found.append((str(variant), ALL, cases.index))
        for key in (k for k in GROUP_KEYS if k in cases and cases[k].nunique() > 1):
            found += [(str(variant), f"{key}={key_text(v)}", part.index) for v, part in cases.groupby(key)]
    return [(v, g, rows) for v, g, rows in found if len(rows) >= MIN_CASES]


def pooled(values: np.ndarray, z: float) -> tuple[float, float, float]:
    """The one-sample Hodges-Lehmann estimate of `values` (the median of their pairwise means, each value
    with itself included) and the signed-rank interval around it for `z`: the `r`-th smallest and largest
    of those N = n (n + 1) / 2 means, `r = floor(N / 2 - z sqrt(n (n + 1) (2 n + 1) / 24))` (-inf, inf
    where r < 1: too few values)."""
    n = len(values)
    means = np.sort(((values[:, None] + values[None, :]) / 2)[np.triu_indices(n)])
    r = math.floor(len(means) / 2 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    if r < 1:
        return float(np.median(means)), -math.inf, math.inf
    return float(np.median(means)), float(means[r - 1]), float(means[len(means) - r])


def judge_groups(table: pd.DataFrame, threshold: float, shapes: pd.Series) -> pd.DataFrame:
    """A row per variant and group (`COLUMNS`): the variants first, then the groups, by shift. Judged again
    where any moved: then the cases of the groups that moved are no other case's witness."""
    timed = table[
        table["shift"].between(0, np.inf, inclusive="neither") & table["outcome"].ne("not comparable")
    ]
    found, moved = members(timed), pd.Series(False, index=timed.index)
    z = NormalDist().inv_cdf(1 - ALPHA / (2 * max(len(found), 1)))
    for second in (False, True):
        logs, rows = witnesses(timed, shapes[timed.index], moved), []
        for variant, group, index in found:
            shift, low, high = np.exp(pooled(logs[index].to_numpy(), z))
            floor = max(high / shift, shift / low) if low > 0 else math.inf
            level = "variant" if group == ALL else "group"
            rows.append([level, variant, group, len(index), shift, low, high, floor, floor,
                         outcome(shift, low, high, floor, floor, threshold), False])  # fmt: skip
        flagged = {i for row, (*_, index) in zip(rows, found, strict=True) if row[9] in MOVED for i in index}
        if second or not flagged:  # nothing moved: a second pass would judge the same witnesses again
            break
        moved = pd.Series(timed.index.isin(list(flagged)), index=timed.index)
    groups = pd.DataFrame(rows, columns=list(COLUMNS)).astype({"shift": float, "where": bool})
    groups["where"], groups["judged_at"] = where(groups), judged_at(groups)
    return groups.sort_values(["level", "shift"], ascending=[False, False], ignore_index=True)


def where(groups: pd.DataFrame) -> pd.Series:
    """The groups that moved (slower or faster) whose key separates: other values of it did not move so."""
    key = groups["group"].str.split("=").str[0].where(groups["level"] == "group")
    values = groups.groupby([groups["variant"], key])["group"].transform("count")
    moved = groups.groupby([groups["variant"], key, groups["outcome"]])["group"].transform("count")
    return (groups["outcome"].isin(MOVED) & (moved < values)).fillna(False).astype(bool)
