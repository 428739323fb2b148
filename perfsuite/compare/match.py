"""Run-to-run comparison: match the cases of two results files and flag what got slower or less exact.

Matching: two rows are the same case when `schema.CASE_KEYS` (variant, path, dtype, vocab, batch, topk,
logits, l2, tp) and the device name are equal (`ignore_device` drops the device, to compare two machines).
A side holding one case several times keeps its last row (`duplicates` counts the others).

A case's change has two witnesses (`Witness`), each a new / base ratio with what confirms it:
- the run's: `judged_ratio`, the new / base median less the machine's drift between the runs
  (`run_noise.machine_drift`: one figure per run, what the in-turn reference's median shift and the whole
  run's agree on); confirmed by the rank test on the raw samples, the new ones divided by the drift first
  (a machine 10 % faster in the new run must not hide a variant 20 % slower);
- the reference's, where both runs sampled the same in-turn reference with the case (`by_reference`; an
  exp of the case's logits sampled in the same rounds, `cases.kernel.KernelRunner.prepare_reference`,
  the row's `vs_ref`): `ref_judged_ratio`, new vs_ref / base vs_ref (`anchored_ratio`) less the run's
  median of it (`reference_bias`: a reference answering the load unlike the selectors moves every case
  alike); confirmed by the rank test on the per-round ratios (the case's sample over the reference's of
  the same round), the new ones divided by that bias first. It takes out what one
  figure per run cannot: a machine faster or slower in the seconds this case was sampled, which on a
  shared machine hid some cases of a 1.2x slower full_softmax and called unchanged cases 1.17-1.69x faster.
Rows without the same reference in both runs (results from before it, or with another reference workload,
as format 2's copy; tensor-parallel rows) have the run's witness alone, with no drift taken out (the rule
as it was); `drift_line` says how many.

Each witness is confirmed, where its ratio is past the threshold (outside 1 / (1 + threshold) ..
1 + threshold), by the first of `RULES` it can use:
- `unstable`: the base or the new row is unstable (p20-p80 spread above `timing.UNSTABLE_SPREAD` of its
  median; derived from p20/p80 where a file has no `unstable` column): never confirmed;
- `rank test`: both runs' samples at hand (`samples.jsonl` beside the results), enough of them for the
  test to reach `rank_sum.ALPHA`: confirmed when the two-sided Mann-Whitney U test gives p < ALPHA and the
  new samples rank above (below) the base ones;
- `p20/p80 band`: without usable samples, p20/p80 on both rows: confirmed when the new p20 is above the
  base p80 (the middle 60 % of the two runs' samples do not overlap), mirrored for faster;
- `medians` (the run's witness only): nothing else to go by, the medians alone decide.
The outcome: `same` when no witness is past the threshold; `slower` (`faster`) when a witness confirms
that change and it clears the run-to-run floor of `run_noise`: the change as the figures agree on it
(anchored to the baseline of its shape, less the machine's drift and, with the reference, over it)
beyond `run_noise.NOISE_SIGMAS` times its variant's run-to-run noise in this comparison, or its whole
variant shifted that way beyond the machine's drift by more than the threshold; else `noisy`. Of two
witnesses confirming opposite changes (a fast spell in one case's rounds against a slower variant, or
a reference hit alone), the floor backs at most one. `confirmed_by` names the witnesses that confirmed
the outcome ("run", "reference", "run and reference").
`drift_line` states the median absolute ratio over every timed case and the reference's own shift (the
machine's drift between the runs, which every whole-variant shift has taken out).
Parity: a verdict that got worse (pass < inexact < fail) is a regression whatever the time, and so is a case
that ran in the base and errors in the new run. Inputs: anything `results.read.load_results` reads
(the suite's csv/json/jsonl, a run folder, pytest-benchmark JSON whose entries carry a result row), or a plain
pytest-benchmark JSON (matched by benchmark name; its quartiles stand in for p20/p80).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfsuite.compare import run_noise
from perfsuite.compare.rank_sum import ALPHA, mann_whitney_u, smallest_p_value
from perfsuite.measure.timing import UNSTABLE_SPREAD, Samples, paired_ratio
from perfsuite.results import sweep_shards
from perfsuite.results.read import load_results, load_samples
from perfsuite.results.schema import BASELINES, CASE_KEYS

KEYS = (*CASE_KEYS, "device")
VERDICT_RANK = {"pass": 0, "inexact": 1, "fail": 2}
FAILING = ("slower", "parity worse", "broken")
"""Outcomes that make `perfsuite compare` exit 1."""
ORDER = ("broken", "parity worse", "slower", "noisy", "skipped now", "faster", "same", "not timed")
NUMBERS = ("median_us", "p20_us", "p80_us", "bytes_model", "bytes_measured", "spread", "other_cores",
           "ref_median_us", "vs_ref", "vs_ref_p20", "vs_ref_p80")  # fmt: skip
TEXTS = (*KEYS, "status", "verdict", "case_id", "reason", "run", "reference")
"""A run's raw samples, beside its results (`run_dir.logs()`): {"case_id", "run", "seconds": [...]} a line."""
SECONDS = "seconds"
"""The column `load_side` puts a case's raw samples in (a tuple of seconds; None without)."""
REF_SECONDS = "ref_seconds"
"""... and the in-turn reference's samples, the same rounds (`samples.jsonl`'s ref_seconds; None without)."""
RULES = ("unstable", "rank test", "p20/p80 band", "medians")
"""What decided a timed case's outcome (the `rule` column), in the order they are tried."""


def parse_threshold(text: str) -> float:
    """'5%' or '5' -> 0.05; '0.05' -> 0.05 (a bare number below 1 is a fraction)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", str(text))
    if not match:
        raise ValueError(
            f"--fail-on: expected a percentage such as 5% or a fraction such as 0.05, got {text!r}"
        )
    value = float(match.group(1))
    fraction = value / 100 if match.group(2) or value >= 1 else value
    if not 0 < fraction < 10:
        raise ValueError(f"--fail-on: {text!r} is not a usable threshold")
    return fraction


def _plain_benchmark(path: Path) -> pd.DataFrame | None:
    """A pytest-benchmark file without perfsuite rows: one row per benchmark, quartiles for p20/p80."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        return None
    rows = []
    for entry in data["benchmarks"]:
        stats = entry.get("stats") or {} if isinstance(entry, dict) else {}
        if not stats.get("median"):
            continue
        rows.append(
            {
                "variant": entry.get("fullname") or entry.get("name"),
                "status": "ok",
                "median_us": stats["median"] * 1e6,
                "p20_us": stats.get("q1", math.nan) * 1e6,
                "p80_us": stats.get("q3", math.nan) * 1e6,
                "timing": "pytest-benchmark (quartiles as p20/p80)",
            }
        )
    return pd.DataFrame(rows) if rows else None


def load_side(path: str | Path) -> pd.DataFrame:
    """One side of a comparison, with each case's raw samples (`SECONDS` column) where `samples.jsonl`
    lies beside the results (or inside the run folder); `ValueError` (message starts with the file) when
    it cannot be read."""
    path = Path(path)
    merged = sweep_shards.load([path])
    if merged is not None:  # a sharded run's --out: its shards as one run
        return with_samples(_normalized(merged.frame), _samples_by_case(merged.samples))
    try:
        frame = load_results(path)
    except ValueError as exc:
        plain = _plain_benchmark(path) if "no perfsuite result row" in str(exc) else None
        if plain is None:
            raise
        frame = plain
    return with_samples(_normalized(frame), _samples_by_case(load_samples(path)))


Logged = dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...] | None]]
"""(case_id, run) -> the case's samples and the reference's of the same rounds (None: not logged)."""


def _samples_by_case(logged: pd.DataFrame | None) -> Logged:
    """(case_id, run) -> its samples and its reference's; the last entry of a case and run wins."""
    if logged is None:
        return {}
    refs = logged[REF_SECONDS] if REF_SECONDS in logged else [None] * len(logged)
    columns = zip(logged["case_id"], logged["run"], logged["seconds"], refs, strict=True)
    return {
        (case_id, _run_text(run)): (tuple(seconds), _samples_or_none(ref))
        for case_id, run, seconds, ref in columns
    }


def with_samples(frame: pd.DataFrame, samples: Logged) -> pd.DataFrame:
    """`frame` with each row's raw samples in `SECONDS` and its reference's in `REF_SECONDS`: those logged
    for its case_id and its run label (no label: those logged without one), so two runs' samples of one
    case never mix."""
    frame = frame.copy()
    found = [
        samples.get((case_id, _run_text(run)), (None, None)) if isinstance(case_id, str) else (None, None)
        for case_id, run in zip(frame["case_id"], frame["run"], strict=True)
    ]
    frame[SECONDS] = [own for own, _ in found]
    frame[REF_SECONDS] = [ref for _, ref in found]
    return frame


def _run_text(value: object) -> str:
    text = _key_text(value)
    return "" if text == "-" else text


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column the comparison reads present; the numeric ones as float64 (NaN for missing); `spread`
    from p20/p80 and `unstable` from the spread where a row does not say; `SECONDS` None where absent."""
    frame = frame.copy()
    for column in (*NUMBERS, *TEXTS, "unstable"):
        if column not in frame:
            frame[column] = math.nan
    for column in NUMBERS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in TEXTS:
        frame[column] = frame[column].astype(object).where(frame[column].notna(), math.nan)
    derived = (frame["p80_us"] - frame["p20_us"]) / frame["median_us"].where(frame["median_us"] > 0)
    frame["spread"] = frame["spread"].fillna(derived)
    said = [_flag(v) for v in frame["unstable"]]
    frame["unstable"] = [
        flag if flag is not None else bool(spread > UNSTABLE_SPREAD)
        for flag, spread in zip(said, frame["spread"], strict=True)
    ]
    for column in (SECONDS, REF_SECONDS):
        if column not in frame:
            frame[column] = None
        frame[column] = [_samples_or_none(v) for v in frame[column]]
    return _vs_ref_from_samples(frame)


def _vs_ref_from_samples(frame: pd.DataFrame) -> pd.DataFrame:
    """vs_ref (median, p20, p80 of the per-round ratios) from a row's paired samples where it has none."""
    columns = ["vs_ref", "vs_ref_p20", "vs_ref_p80"]
    values = frame[columns].to_numpy(dtype=float, copy=True)
    for at in np.flatnonzero(np.isnan(values[:, 0])):  # by position: a concatenated frame repeats labels
        own, ref = frame[SECONDS].iat[at], frame[REF_SECONDS].iat[at]
        if own and ref and len(own) == len(ref):
            ratio = paired_ratio(Samples(own, ""), Samples(ref, ""))
            values[at] = [ratio.median, ratio.p20, ratio.p80]
    frame[columns] = values
    return frame


def _flag(value: object) -> bool | None:
    """True/False from a bool or its text ('True', 'false', '1', '0.0'); None when missing or unclear."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0", "yes"):
        return True
    if text in ("false", "0", "0.0", "no"):
        return False
    return None


def _samples_or_none(value: object) -> tuple[float, ...] | None:
    if isinstance(value, (tuple, list, np.ndarray)) and len(value):
        return tuple(float(v) for v in value)
    return None


def _key_text(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _keyed(frame: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, int]:
    frame = frame.copy()
    for key in keys:
        frame[f"k_{key}"] = frame[key].map(_key_text)
    key_columns = [f"k_{k}" for k in keys]
    unique = frame.drop_duplicates(subset=key_columns, keep="last")
    return unique, len(frame) - len(unique)


def _timed_mask(table: pd.DataFrame) -> pd.Series:
    ok = (table["base_status"] == "ok") & (table["new_status"] == "ok")
    return ok & np.isfinite(table["ratio"]) & (table["ratio"] > 0)


@dataclass(frozen=True)
class Comparison:
    """Matched cases (a row each: base_* and new_* columns, ratios, an outcome) and what was left over.

    Besides each side's figures (`base_spread`, `new_unstable`, `base_other_cores`, `base_vs_ref`, ...) a
    row holds: `ratio` (new / base median, the absolute change), `ref_ratio` (the reference's own new /
    base median), `anchored_ratio` (new vs_ref / base vs_ref), `reference_bias` (the run's median of its
    log), `ref_judged_ratio` (the reference's witness: the anchored ratio less that bias), `by_reference`
    (both runs sampled the same reference with the case), `judged_ratio` (the run's witness: the ratio
    less the machine's drift), `band_low`/`band_high` (new p20 / base p80, new p80 / base p20, less the
    drift), `p_value` (the rank test on the raw samples), `new_larger` (the share of sample pairs where the
    new one is slower), `base_raw_samples`/`new_raw_samples` (the counts behind the test), `rule` (which
    of `RULES` confirms the run's witness); the same with the prefix `ref_` for the reference's witness
    (`ref_p_value`, `ref_band_low`, `ref_rule`, ... on the per-round ratios and the vs_ref p20/p80;
    `ref_rule` "" where it has neither); `outcome` (one of `ORDER`) and `confirmed_by` (the witnesses
    behind a slower or faster outcome)."""

    table: pd.DataFrame
    threshold: float
    base_only: int
    new_only: int
    duplicates: int
    base_name: str = "base"
    new_name: str = "new"

    def noise_text(self) -> str:
        """Each variant's noise, e.g. 'full_softmax 9.1 %, identity 4.5 % (against the baseline)'."""
        timed = self.timed
        if "noise" not in timed or not (timed["noise"] > 0).any():
            return ""
        per = timed.groupby([timed["variant"].map(_key_text), timed["anchor"]])["noise"].first()
        return ", ".join(
            f"{name} {100 * value:.2g} %{f' (against the {anchor})' if anchor else ''}"
            for (name, anchor), value in per.items()
        )

    @property
    def failures(self) -> pd.DataFrame:
        return self.table[self.table["outcome"].isin(FAILING)]

    def counts(self) -> dict[str, int]:
        counts = self.table["outcome"].value_counts()
        return {o: int(counts[o]) for o in ORDER if o in counts}

    @property
    def timed(self) -> pd.DataFrame:
        """The cases timed in both runs (both ok, a finite positive ratio)."""
        return self.table[_timed_mask(self.table)]

    @property
    def drift(self) -> float:
        """The median new / base ratio over every case timed in both runs (NaN: none): near 1 when the
        machine behaved the same in both runs, whatever a few cases did."""
        ratios = self.timed["ratio"]
        return float(ratios.median()) if len(ratios) else math.nan

    @property
    def anchored(self) -> pd.DataFrame:
        """The timed cases with the reference in both runs (judged against it)."""
        timed = self.timed
        return timed[timed["by_reference"].astype(bool)] if "by_reference" in timed else timed.iloc[0:0]

    @property
    def machine_drift(self) -> float:
        """The machine's drift taken out of the anchored cases (`run_noise.machine_drift`), as a ratio."""
        drift = self.anchored["machine_drift"].dropna() if "machine_drift" in self.anchored else []
        return float(np.exp(drift.median())) if len(drift) else 1.0

    @property
    def ref_drift(self) -> float:
        """The median of the reference's own new / base ratio over the anchored cases (NaN: none): the
        machine's drift between the runs as a fixed workload sampled with every case saw it."""
        ratios = self.anchored["ref_ratio"].dropna()
        return float(ratios.median()) if len(ratios) else math.nan


def workload(reference: object) -> str:
    """The workload of a row's `reference` text ("logits exp, host perf_counter" -> "logits exp"; "" for
    none): two runs are judged against the reference only where both sampled the same workload."""
    return reference.split(",")[0].strip() if isinstance(reference, str) else ""


@dataclass(frozen=True)
class Witness:
    """One view of a case's change between two runs, and what confirms it: `run` (new / base median less
    the machine's drift; the rank test on the raw samples, the new ones less the drift) or `reference`
    (new / base of the case's time over the in-turn reference's; the rank test on the per-round ratios)."""

    name: str
    ratio: float
    rule: str
    """One of `RULES`; "" where this witness has nothing to go by."""
    p_value: float
    new_larger: float
    band_low: float
    band_high: float

    def past(self, threshold: float) -> bool:
        """Whether its ratio lies beyond the threshold, either way."""
        return not math.isnan(self.ratio) and not 1 / (1 + threshold) <= self.ratio <= 1 + threshold

    def confirmed(self, threshold: float) -> int:
        """+1 (slower) or -1 (faster) where its ratio is past the threshold and its rule confirms it,
        else 0. "unstable" never confirms; "medians" (nothing else to go by) always does."""
        if not self.past(threshold) or not self.rule:
            return 0
        slower = self.ratio > 1
        if self.rule == "rank test":
            confirmed = self.p_value < ALPHA and (self.new_larger > 0.5) == slower
        elif self.rule == "p20/p80 band":
            confirmed = self.band_low > 1 if slower else self.band_high < 1
        else:
            confirmed = self.rule == "medians"
        return (1 if slower else -1) if confirmed else 0


WITNESS_COLUMNS = {
    "run": ("judged_ratio", "rule", "p_value", "new_larger", "band_low", "band_high"),
    "reference": ("ref_judged_ratio", "ref_rule", "ref_p_value", "ref_new_larger", "ref_band_low",
                  "ref_band_high"),
}  # fmt: skip
"""The table's columns behind each witness, in `Witness`'s order after its name."""


def witnesses(row: pd.Series) -> list[Witness]:
    """The case's change as the run saw it and, where both runs sampled the reference in turn with it,
    as the reference saw it."""
    seen = [Witness("run", *(row[c] for c in WITNESS_COLUMNS["run"]))]
    if _flag(row.get("by_reference")) and row.get("ref_rule"):
        seen.append(Witness("reference", *(row[c] for c in WITNESS_COLUMNS["reference"])))
    return seen


def _outcome(row: pd.Series, threshold: float) -> tuple[str, str]:
    """The case's outcome (one of `ORDER`) and the witnesses that confirmed it where it is slower or
    faster ("run", "reference" or "run and reference")."""
    base_ok, new_ok = row["base_status"] == "ok", row["new_status"] == "ok"
    if base_ok and row["new_status"] == "error":
        return "broken", ""
    base_rank = VERDICT_RANK.get(row["base_verdict"])
    new_rank = VERDICT_RANK.get(row["new_verdict"])
    if base_rank is not None and new_rank is not None and new_rank > base_rank:
        return "parity worse", ""
    if base_ok and not new_ok:
        return "skipped now", ""
    if not (base_ok and new_ok) or math.isnan(row["ratio"]) or math.isnan(row["judged_ratio"]):
        return "not timed", ""
    seen = witnesses(row)
    if not any(w.past(threshold) for w in seen):
        return "same", ""
    confirmed = {w.name: w.confirmed(threshold) for w in seen}
    # a confirmed change counts where it clears the run-to-run floor, whose figure is what the witnesses
    # agree on: of two opposite confirmed changes, at most the one the floor backs
    cleared = {d for d in set(confirmed.values()) - {0} if run_noise.beyond_noise(row, threshold, d)}
    if len(cleared) != 1:
        return "noisy", ""
    direction = cleared.pop()
    by = " and ".join(name for name, d in confirmed.items() if d == direction)
    return ("slower" if direction > 0 else "faster"), by


def _rule(row: pd.Series, prefix: str = "") -> str:
    """Which part of the noise rule judges a witness of a case (`prefix` "" for the run's, "ref_" for the
    reference's; see the module docstring): one of `RULES`, or "" where the reference's witness has
    neither paired samples nor a p20/p80 band on both sides."""
    if _flag(row["base_unstable"]) or _flag(row["new_unstable"]):
        return "unstable"
    n_base, n_new = row[f"{prefix}base_raw_samples"], row[f"{prefix}new_raw_samples"]
    if n_base > 0 and n_new > 0 and smallest_p_value(int(n_base), int(n_new)) < ALPHA:
        return "rank test"
    if not (math.isnan(row[f"{prefix}band_low"]) or math.isnan(row[f"{prefix}band_high"])):
        return "p20/p80 band"
    return "" if prefix else "medians"


def _judged_samples(table: pd.DataFrame, side: str) -> list[tuple[float, ...] | None]:
    """Each row's own raw samples, the new ones divided by the machine's drift (`machine_drift`, 1 without
    the reference): the rank test judges the change `judged_ratio` judges."""
    own = map(_samples_or_none, table[f"{side}_{SECONDS}"])
    return _divided(list(own), table["machine_drift"] if side == "new" else None)


def _per_round_ratios(table: pd.DataFrame, side: str) -> list[tuple[float, ...] | None]:
    """Each row's samples over its reference's of the same rounds (None without both, or unpaired), the
    new ones divided by the reference's bias (`reference_bias`): the rank test judges the change
    `ref_judged_ratio` judges."""
    ratios = [
        tuple(a / b for a, b in zip(own, ref, strict=True) if b > 0)
        if own and ref and len(own) == len(ref) and by_reference
        else None
        for own, ref, by_reference in zip(
            map(_samples_or_none, table[f"{side}_{SECONDS}"]),
            map(_samples_or_none, table[f"{side}_{REF_SECONDS}"]),
            table["by_reference"].astype(bool),
            strict=True,
        )
    ]
    return _divided(ratios, table["reference_bias"] if side == "new" else None)


def _divided(
    samples: list[tuple[float, ...] | None], logs: pd.Series | None
) -> list[tuple[float, ...] | None]:
    """Each row's samples divided by exp(its log factor) (unchanged without factors)."""
    if logs is None:
        return samples
    factors = np.exp(logs.astype(float).fillna(0.0))
    return [tuple(s / f for s in row) if row else row for row, f in zip(samples, factors, strict=True)]


def _rank_tests(table: pd.DataFrame) -> pd.DataFrame:
    """For each witness (the run's: raw samples, the new ones less the machine's drift; the reference's,
    prefix `ref_`: the per-round ratios to the reference) p_value and new_larger (`rank_sum.RankTest`)
    where both rows carry them, else NaN; and the sample counts behind them."""
    pairs = {
        "": (_judged_samples(table, "base"), _judged_samples(table, "new")),
        "ref_": (_per_round_ratios(table, "base"), _per_round_ratios(table, "new")),
    }
    columns = [
        f"{p}{c}" for p in pairs for c in ("p_value", "new_larger", "base_raw_samples", "new_raw_samples")
    ]
    out = pd.DataFrame(math.nan, index=table.index, columns=columns)
    for prefix, (bases, news) in pairs.items():
        for i, base, new in zip(table.index, bases, news, strict=True):
            out.loc[i, f"{prefix}base_raw_samples"] = len(base) if base else math.nan
            out.loc[i, f"{prefix}new_raw_samples"] = len(new) if new else math.nan
            if base and new:
                test = mann_whitney_u(base, new)
                out.loc[i, [f"{prefix}p_value", f"{prefix}new_larger"]] = [test.p_value, test.new_larger]
    return out


def compare(
    base: pd.DataFrame,
    new: pd.DataFrame,
    threshold: float = 0.05,
    *,
    ignore_device: bool = False,
    names: tuple[str, str] = ("base", "new"),
) -> Comparison:
    """Match the cases of two results frames and classify each: see the module docstring for the rules.
    Raw samples come in a `SECONDS` column (as `load_side` adds it); without it, no rank test."""
    keys = [k for k in KEYS if not (ignore_device and k == "device")]
    base_k, base_dups = _keyed(_normalized(base), keys)
    new_k, new_dups = _keyed(_normalized(new), keys)
    key_columns = [f"k_{k}" for k in keys]
    kept = [
        "case_id",
        *keys,
        "status",
        "verdict",
        "reason",
        "run",
        "unstable",
        "reference",
        SECONDS,
        REF_SECONDS,
        *NUMBERS,
    ]
    left = base_k[[*key_columns, *kept]].rename(columns={c: f"base_{c}" for c in kept})
    right = new_k[[*key_columns, *(c for c in kept if c not in keys)]].rename(
        columns={c: f"new_{c}" for c in kept}
    )
    merged = left.merge(right, on=key_columns, how="outer", indicator=True)
    both = merged[merged["_merge"] == "both"].drop(columns="_merge").reset_index(drop=True)
    base_only = int((merged["_merge"] == "left_only").sum())
    new_only = int((merged["_merge"] == "right_only").sum())
    table = both.rename(columns={f"base_{k}": k for k in keys}).drop(columns=key_columns)
    several = "device" in table and table["device"].map(_key_text).nunique() > 1
    table["case"] = [_label(r, keys, several) for r in table.to_dict("records")]
    table["ratio"] = table["new_median_us"] / table["base_median_us"]
    table["ref_ratio"] = table["new_ref_median_us"] / table["base_ref_median_us"]
    table["anchored_ratio"] = table["new_vs_ref"] / table["base_vs_ref"]
    ok = (table["base_status"] == "ok") & (table["new_status"] == "ok")
    same = table["base_reference"].map(workload) == table["new_reference"].map(workload)
    table["by_reference"] = ok & same & np.isfinite(table["anchored_ratio"]) & (table["anchored_ratio"] > 0)
    if len(table):  # the machine's drift first: every case's change is judged less it
        shape = [k for k in keys if k != "variant"]
        table = pd.concat([table, run_noise.judge(table, _timed_mask(table), shape, BASELINES)], axis=1)
    else:
        table["machine_drift"] = table["reference_bias"] = 0.0
    machine = np.exp(table["machine_drift"].astype(float))
    table["judged_ratio"] = table["ratio"] / machine  # one figure per run, not a per-case reference
    table["band_low"] = table["new_p20_us"] / table["base_p80_us"] / machine
    table["band_high"] = table["new_p80_us"] / table["base_p20_us"] / machine
    table["bytes_measured_ratio"] = table["new_bytes_measured"] / table["base_bytes_measured"]
    table["bytes_model_ratio"] = table["new_bytes_model"] / table["base_bytes_model"]
    bias = np.exp(table["reference_bias"].astype(float)).where(table["by_reference"])
    table["ref_judged_ratio"] = table["anchored_ratio"] / bias  # the case against its run's other cases
    table["ref_band_low"] = table["new_vs_ref_p20"] / table["base_vs_ref_p80"] / bias
    table["ref_band_high"] = table["new_vs_ref_p80"] / table["base_vs_ref_p20"] / bias
    table = pd.concat([table, _rank_tests(table)], axis=1)
    table = table.drop(columns=[f"{side}_{c}" for side in ("base", "new") for c in (SECONDS, REF_SECONDS)])
    records = [r for _, r in table.iterrows()]
    table["rule"] = [_rule(r) if not math.isnan(r["ratio"]) else "" for r in records]
    table["ref_rule"] = [_rule(r, "ref_") if not math.isnan(r["ratio"]) else "" for r in records]
    judged = [_outcome(r, threshold) for _, r in table.iterrows()]
    table["outcome"] = [outcome for outcome, _ in judged]
    table["confirmed_by"] = [by for _, by in judged]
    rank = {o: i for i, o in enumerate(ORDER)}
    table = table.sort_values(
        ["outcome", "judged_ratio"], key=lambda s: s.map(rank) if s.name == "outcome" else -s.fillna(0)
    ).reset_index(drop=True)
    return Comparison(table, threshold, base_only, new_only, base_dups + new_dups, *names)


def _label(row: dict, keys: list[str], with_device: bool) -> str:
    case_id = row.get("base_case_id")
    if isinstance(case_id, str) and case_id:
        label = case_id
    else:
        label = "/".join(_key_text(row[k]) for k in keys if k != "device" and _key_text(row[k]) != "-")
    device = row.get("device")
    if with_device and isinstance(device, str) and device not in ("", "-"):
        return f"{label} @ {device}"
    return label


def _ratio_text(value: float) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.3f}×"


def verdicts(base: object, new: object) -> str:
    """'pass', or 'pass→fail' where the verdict changed ('-' for none)."""
    b, n = _key_text(base), _key_text(new)
    return b if b == n else f"{b}→{n}"


def bytes_ratio(row: pd.Series) -> str:
    """The measured bytes' ratio where both runs measured them, else the model's when it changed."""
    if not math.isnan(row["bytes_measured_ratio"]):
        return f"{_ratio_text(row['bytes_measured_ratio'])} measured"
    if not math.isnan(row["bytes_model_ratio"]) and row["bytes_model_ratio"] != 1:
        return f"{_ratio_text(row['bytes_model_ratio'])} model"
    return ""


def rule_text(threshold: float, floor: bool = False, reference: bool = False) -> str:
    """The noise rule in one clause, for the summary line (`reference`: the runs sampled the in-turn
    reference, a second witness of each case's change)."""
    run = (
        f"the rank test on raw samples{' (the new ones less the machine drift)' if reference else ''} gives "
        f"p < {ALPHA:g} (without samples: new p20 above base p80)"
    )
    if reference:
        run += " or, against the in-turn reference, the rank test on the per-round ratios to it does"
    floor = (
        f", and beyond {run_noise.NOISE_SIGMAS:g}x its run-to-run noise or its whole variant's shift "
        f"{'less the machine drift ' if reference else ''}past the threshold"
        if floor
        else ""
    )
    return f"rule: slower/faster past {100 * threshold:.3g} % when {run}{floor}; unstable cases are noisy"


def summary_line(comparison: Comparison) -> str:
    counts = ", ".join(f"{n} {o}" for o, n in comparison.counts().items()) or "nothing to compare"
    extra = []
    if comparison.base_only:
        extra.append(f"{comparison.base_only} only in {comparison.base_name}")
    if comparison.new_only:
        extra.append(f"{comparison.new_only} only in {comparison.new_name}")
    if comparison.duplicates:
        extra.append(f"{comparison.duplicates} duplicate rows (the last kept)")
    more = f" ({'; '.join(extra)})" if extra else ""
    rule = rule_text(comparison.threshold, bool(comparison.noise_text()), not comparison.anchored.empty)
    return f"{len(comparison.table)} cases matched{more}: {counts}; {rule}"


def reference_text(comparison: Comparison) -> str:
    """What the in-turn reference saw: its own new / base shift over the anchored cases, and how many
    timed cases went without it (judged by the rule as it was before the reference)."""
    timed, anchored = comparison.timed, comparison.anchored
    without = len(timed) - len(anchored)
    parts = []
    if len(anchored):
        ratios = anchored["ref_ratio"].dropna()
        spread = (
            f" (p20 {_ratio_text(ratios.quantile(0.2))}, p80 {_ratio_text(ratios.quantile(0.8))})"
            if len(ratios)
            else ""
        )
        what = ", ".join(sorted(set(anchored["new_reference"].map(workload)) - {""})) or "unnamed"
        parts.append(
            f"reference ({what}, sampled in turn with each case): new/base median "
            f"{_ratio_text(comparison.ref_drift)}{spread} over {len(anchored)} cases; the machine's drift "
            f"taken out of every case: {_ratio_text(comparison.machine_drift)} (what the reference and the "
            "whole run agree on)"
        )
    if without:
        which = "none of the" if not len(anchored) else f"{without} of the {len(timed)}"
        parts.append(
            f"{which} timed cases without the same reference in both runs (results from before it, or "
            "from a perfsuite whose reference was another workload): judged by the earlier rule (a "
            "variant's whole shift absolute, not less the machine's drift)"
        )
    return "; ".join(parts)


def drift_line(comparison: Comparison) -> str:
    """The machine-wide picture: the median new / base ratio over every timed case, how many rows are
    unstable on each side, how busy other processes kept the machine and what the in-turn reference saw
    (`reference_text`). The absolute median is said, not subtracted; the reference's shift is taken out
    of every whole-variant shift."""
    timed = comparison.timed
    if timed.empty:
        return "all cases: none timed in both runs"
    ratios = timed["ratio"]
    parts = [
        f"all {len(timed)} timed cases: new/base median {_ratio_text(comparison.drift)} "
        f"(p20 {_ratio_text(ratios.quantile(0.2))}, p80 {_ratio_text(ratios.quantile(0.8))}); "
        f"run-to-run noise (robust std of log ratios) {comparison.noise_text() or 'not estimated'}"
    ]
    unstable = [int(timed[f"{side}_unstable"].map(_flag).eq(True).sum()) for side in ("base", "new")]
    if any(unstable):
        parts.append(f"unstable rows: {unstable[0]} base, {unstable[1]} new")
    busy = [timed[f"{side}_other_cores"].median() for side in ("base", "new")]
    if not all(math.isnan(b) for b in busy):
        shown = ["?" if math.isnan(b) else f"{b:.1f}" for b in busy]
        parts.append(f"other processes kept {shown[0]} → {shown[1]} cores busy (median over cases)")
    parts.append(reference_text(comparison))
    line = "; ".join(p for p in parts if p)
    limit = 1 + comparison.threshold
    moved = comparison.drift > limit or comparison.drift < 1 / limit
    if moved and comparison.anchored.empty:
        line += (
            "; most cases moved together: suspect the machine (load, clocks, other jobs) as much as the "
            "code, and rerun both on a quiet machine"
        )
    elif moved:
        line += (
            "; most cases moved together: where the reference moved with them the machine did, and each "
            "variant's shift has the reference's taken out"
        )
    return line


def p_text(value: float) -> str:
    """A p-value in a few characters: '0.034', '2e-09'; blank when missing."""
    if value is None or math.isnan(value):
        return ""
    return f"{value:.2g}" if value >= 1e-3 else f"{value:.0e}"


def spread_text(spread: float, unstable: object) -> str:
    """A row's p20-p80 spread as a percent of its median, '!' after an unstable one; blank when unknown."""
    text = "" if spread is None or math.isnan(spread) else f"{100 * spread:.0f}%"
    return f"{text}!" if _flag(unstable) else text


def unstable_sides(row: pd.Series) -> list[str]:
    """'base', 'new', both or neither: the sides whose row is unstable."""
    return [side for side in ("base", "new") if _flag(row[f"{side}_unstable"])]


def spreads(row: pd.Series) -> str:
    """'2%→40%!': the base and new spreads ('!': unstable)."""
    base = spread_text(row["base_spread"], row["base_unstable"])
    new = spread_text(row["new_spread"], row["new_unstable"])
    return f"{base}→{new}" if base or new else ""


def text_table(comparison: Comparison, limit: int = 30, width: int = 64) -> str:
    """A compact table: every failing case, then the largest other changes, up to `limit` rows."""
    table = comparison.table[comparison.table["outcome"] != "not timed"]
    failures = table[table["outcome"].isin(FAILING)]
    shown = pd.concat([failures, table[~table["outcome"].isin(FAILING)].head(limit)])
    shown = shown.head(max(limit, len(failures)))
    if shown.empty:
        return f"{summary_line(comparison)}\n{drift_line(comparison)}"
    out = pd.DataFrame(
        {
            "case": shown["case"].map(lambda s: s if len(s) <= width else "…" + s[-(width - 1) :]),
            "base us": shown["base_median_us"].map(lambda v: f"{v:.4g}"),
            "new us": shown["new_median_us"].map(lambda v: f"{v:.4g}"),
            "ratio": shown["ratio"].map(_ratio_text),
            "vs ref": [
                _ratio_text(r) if anchored else ""
                for r, anchored in zip(shown["anchored_ratio"], shown["by_reference"], strict=True)
            ],
            "p": shown["p_value"].map(p_text),
            "p vs ref": shown["ref_p_value"].map(p_text),
            "p20/p80 band": [
                f"{_ratio_text(lo)}-{_ratio_text(hi)}"
                for lo, hi in zip(shown["band_low"], shown["band_high"], strict=True)
            ],
            "spread": [spreads(r) for _, r in shown.iterrows()],
            "parity": [
                verdicts(b, n) for b, n in zip(shown["base_verdict"], shown["new_verdict"], strict=True)
            ],
            "bytes": [bytes_ratio(r) for _, r in shown.iterrows()],
            "outcome": shown["outcome"],
            "confirmed by": shown["confirmed_by"],
        }
    )
    out = out.replace({"nan": "", "-": ""})
    left_out = len(table) - len(shown)
    tail = f"\n… {left_out} more timed cases (see --out / --csv)" if left_out > 0 else ""
    legend = ""
    if out["spread"].str.contains("!").any():
        legend = (
            f"\n! unstable: p20-p80 spread above {100 * UNSTABLE_SPREAD:.0f} % of the median "
            "(noisy, never slower or faster)"
        )
    if out["vs ref"].ne("").any():
        legend += (
            "\nratio: new / base median (the run's witness judges it less the machine's drift); vs ref: "
            "new / base of the case's time over the in-turn reference's (an exp of its logits, the same "
            "rounds; the reference's witness)"
        )
    else:
        out = out.drop(columns="vs ref")
    if out["p"].ne("").any():
        legend += "\np: two-sided Mann-Whitney U test on the two runs' raw samples"
    if out["p vs ref"].ne("").any():
        legend += "; p vs ref: the same on the per-round ratios to the reference"
    else:
        out = out.drop(columns="p vs ref")
    if not out["confirmed by"].ne("").any():
        out = out.drop(columns="confirmed by")
    return f"{out.to_string(index=False)}{tail}{legend}\n{summary_line(comparison)}\n{drift_line(comparison)}"
