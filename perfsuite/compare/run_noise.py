"""How far two runs of the same code drift apart, case by case: the floor a change must clear before
`perfsuite compare` calls it slower or faster.

On a shared machine the medians of two runs differ by far more than each case's own samples say: the
machine is slower in some seconds than in others (other tenants, clocks), and every case measured in those
seconds moves with it. On the 2-core VM perfsuite is built on, two idle runs of one commit differ by a
robust standard deviation of about 10 % per case, with heavier tails than a normal law.

Three figures per matched case, from the comparison itself:
- `judged`: log(new / base), anchored to the baseline where the case's shape has a baseline row in both
  runs: log(new / base) - log(baseline new / base) (`anchor` "baseline"); the variants of a shape are
  sampled in turn, so the machine's slow seconds move both alike and cancel. The baseline itself on what
  its change less the median change of its shape's other variants and its change less the machine's
  drift agree on (`agreed`; `anchor` "other variants"): a slow spell that hit its shape moved the others
  alike, a change of the baseline's code moves it alone, and a change of one other variant's code does not
  make the baseline look faster. Where both runs sampled the reference, every anchored variant is judged
  the same way: on what its anchored figure and its change less the machine's drift agree on (a baseline
  that moved alone in one shape does not make the shape's variants move), and with them its change over
  the reference of the same rounds less the run's median of it (`reference_bias`): a spell that moved
  the case and the reference alike is no change. A case with neither is judged on the log ratio less the
  machine's drift (`anchor` "machine drift") and over the reference, without the reference on the plain
  log ratio.
- `noise`: the robust standard deviation (1.4826 x MAD around the median) of `judged` over the cases of the
  same variant judged the same way (`anchor`), with `NOISE_MIN_CASES` of them, else over all timed
  cases, else 0 (no floor). Around the median, so a change of all of a variant's cases still counts.
- `variant_shift`: the median log ratio of the variant over all its cases, less the machine's drift where
  both runs sampled the in-turn reference with them (`machine_drift`: what the reference's median shift
  over the same cases and the whole run's median shift agree on), and its standard error: a change of a
  whole variant that the baseline-anchored figure cancels, the baseline's included, while a uniform drift
  of the machine, which moves the reference and the run alike, is no shift. Without the reference
  (results from before it, or another reference workload) the shift is absolute, as it was. The floor
  uses the reference run-wide (taken per case, the variants' medians over it drifted up to 14 % in loaded
  A/A pairs; less the agreed drift, up to 7 %); `compare.match` also takes it per case, as a
  second witness of a case's change (its time over the reference's in the same rounds), which this
  floor must still clear (docs/comparing.md has the A/A figures).

A case clears the floor when `judged` lies beyond `NOISE_SIGMAS` x noise in the direction of its
confirmed change, or when its variant shifted as a whole that way by more than the threshold and
`NOISE_SIGMAS` standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

NOISE_SIGMAS = 4.0
"""How many run-to-run standard deviations a change must exceed. The largest of 150 unchanged cases lies
near 3 for normal noise; run-to-run drift on a VM has heavier tails: of three pairs of quick sweeps of one
commit on this 2-core VM (two idle, one with a core busy), 3 of 438 unchanged cases were called slower at 3,
none at 4, while a variant made 2x slower was still caught."""
NOISE_MIN_CASES = 10
"""Cases needed to estimate a noise figure; below it the pooled figure, below that no floor."""
ROBUST_SIGMA = 1.4826
"""MAD to standard deviation for a normal law."""


def robust_sigma(logs: pd.Series) -> float:
    """The robust standard deviation of log ratios around their median (0 with too few)."""
    values = logs.to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    if len(values) < NOISE_MIN_CASES:
        return 0.0
    return float(ROBUST_SIGMA * np.median(np.abs(values - np.median(values))))


def judge(
    table: pd.DataFrame, timed: pd.Series, shape: list[str], baselines: tuple[str, ...]
) -> pd.DataFrame:
    """`machine_drift` (a log ratio, 0 without the reference), `reference_bias` (the median log anchored
    ratio over the cases with the reference, 0 elsewhere), `judged`, `anchor`, `anchored`, `noise`,
    `variant_shift` and `variant_se` for every row of a
    comparison table (columns `variant`, `ratio`, the `shape` keys and, where the runs had the reference,
    `by_reference` and `anchored_ratio`; `timed`: rows timed in both runs)."""
    out = pd.DataFrame(index=table.index)
    logs = np.log(table["ratio"].where(timed))
    by_ref = timed & (table["by_reference"].astype(bool) if "by_reference" in table else False)
    variant = table["variant"].map(str)
    shape_key = table[shape].map(str).agg("/".join, axis=1)
    is_base = variant.isin(baselines)
    base_log = logs[is_base & timed].groupby(shape_key[is_base & timed]).first()
    anchor = shape_key.map(base_log)
    out["anchored"] = ~is_base & anchor.notna() & timed  # against the baseline of its shape
    group = variant + by_ref.map({True: " reference", False: ""})
    drift = (np.log(table["ref_ratio"]) if "ref_ratio" in table else logs * np.nan).where(by_ref)
    reference = drift[timed].groupby(group[timed]).median()
    run = logs[timed & by_ref].median() if (timed & by_ref).any() else 0.0
    machine = group.map(reference.map(lambda ref: machine_drift(ref, run))).fillna(0.0)
    out["machine_drift"] = machine
    # how the run's cases moved over the reference as a whole: a reference answering the machine unlike the
    # selectors; the reference's witness of each case is taken less it
    anchored = np.log(table["anchored_ratio"]).where(by_ref) if "anchored_ratio" in table else drift
    bias = anchored.median() if by_ref.any() else 0.0
    out["reference_bias"] = bias * by_ref
    # the baseline has no baseline beside it: against the median change of its shape's other variants,
    # sampled in the same rounds (a slow spell that hit its shape moved them alike)
    others = logs[~is_base & timed].groupby(shape_key[~is_base & timed]).median()
    beside = shape_key.map(others)
    by_others = is_base & timed & beside.notna()
    out["anchor"] = np.where(
        out["anchored"],
        "baseline",
        np.where(by_others, "other variants", np.where(machine != 0, "machine drift", "")),
    )
    # against the baseline (whose own change carries the machine's); the baseline by what its change less
    # the others' and its change less the machine's drift agree on; anything else less the machine's drift
    spread = (logs - machine).where(~out["anchored"], logs - anchor).where(~by_others, logs - beside)
    # judged: what the anchored figure and the change less the machine's drift agree on, the baseline's as
    # every other variant's (a baseline that moved alone in one shape does not make its variants move);
    # where the runs sampled the reference, with the case's change over it (less its bias) agreeing too (a
    # fast spell in one case's rounds, which moved the reference alike, is no change)
    with_drift = by_others | (by_ref & out["anchored"])
    judged = spread.where(~with_drift, pd.Series(agreed(spread, logs - machine), index=table.index))
    three = pd.Series(agreed(spread, logs - machine, anchored - bias), index=table.index)
    out["judged"] = judged.where(~by_ref, three)
    # the noise of each figure before any agreement (which pulls values to zero and would shrink it)
    pooled = robust_sigma(spread[timed])
    kind = variant + " " + out["anchor"]
    counts = kind[timed].value_counts()
    own = spread[timed].groupby(kind[timed]).agg(robust_sigma)
    own = own[counts.reindex(own.index) >= NOISE_MIN_CASES]
    out["noise"] = kind.map(own).fillna(pooled)
    # a whole variant's shift, less the machine's drift (`machine_drift`)
    per_variant = (logs - machine)[timed].groupby(group[timed])
    out["variant_shift"] = group.map(per_variant.median())
    se = per_variant.agg(
        lambda s: robust_sigma(s) / math.sqrt(len(s)) if len(s) >= NOISE_MIN_CASES else math.inf
    )
    out["variant_se"] = group.map(se)
    return out


def agreed(*estimates: float | np.ndarray | pd.Series) -> np.ndarray:
    """What several estimates of one log ratio agree on, element by element: the one nearest zero where
    all point the same way, zero where they disagree (for two: the median of a, b and 0); NaN where one
    is NaN."""
    stack = np.stack(np.broadcast_arrays(*(np.asarray(e, float) for e in estimates)))
    low, high = stack.min(axis=0), stack.max(axis=0)
    return np.where(np.isnan(low), np.nan, np.where(low > 0, low, np.where(high < 0, high, 0.0)))


def machine_drift(reference: float, run: float) -> float:
    """The machine's drift between two runs (a log ratio) as both witnesses saw it: the in-turn
    reference's median shift and the median shift of every case of the run. Where they agree in direction,
    the one nearer zero; where they disagree, none; without the reference, none. A drift only the reference
    saw is not taken out of the variants, nor is one only the cases saw (a change of every variant's code
    is still a change)."""
    if reference is None or math.isnan(reference):
        return 0.0
    return float(agreed(reference, run))


def beyond_noise(row: pd.Series, threshold: float, direction: int) -> bool:
    """Whether a case's change in `direction` (+1 slower, -1 faster) clears the run-to-run floor (see the
    module docstring)."""
    judged, noise = row.get("judged", math.nan), row.get("noise", 0.0)
    floor = NOISE_SIGMAS * (0.0 if math.isnan(noise) else noise)
    if not math.isnan(judged) and direction * judged > floor:
        return True  # beyond the floor, and the same way as the case's own change
    shift, se = row.get("variant_shift", math.nan), row.get("variant_se", math.inf)
    return bool(direction * shift > max(math.log1p(threshold), NOISE_SIGMAS * se))
