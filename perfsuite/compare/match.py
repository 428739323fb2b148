"""`perfsuite compare`: match the cases of two runs, judge each one's time by `rule`, check parity apart.

Two rows are the same case when `KEYS` (`schema.CASE_KEYS`, the device) are equal (`ignore_device`: not the
device); of one case twice in a run the last row is kept. Apart from the time's outcome, `check` says
"parity worse" where the parity verdict got worse (pass < inexact < fail) and "broken" where a case that ran
in the base errors in the new run: either, or a slower case, fails the compare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfsuite.compare import rule
from perfsuite.compare.groups import judge_groups
from perfsuite.compare.rule import BY_REFERENCE, OWN_TIME, Side, judge, judged_at, key_text, outcome
from perfsuite.results import columns
from perfsuite.results.columns import CASE_KEYS
from perfsuite.results.run import load_run

KEYS = (*CASE_KEYS, "device")
SECONDS, REF_SECONDS = "seconds", "ref_seconds"
"""The columns `load_side` puts a row's raw samples in, and the in-turn reference's of the same rounds."""
OWN, VS_REF = ("median_us", "p20_us", "p80_us"), ("vs_ref", "vs_ref_p20", "vs_ref_p80")
JUDGED = ("witness", "shift", "low", "high", "floor", "noise", "outcome", "judged_at", "check")
ORDER = ("slower", "cannot tell", "faster", "same", "not comparable")
CHECKS = ("broken", "parity worse")
VERDICT_RANK = {"pass": 0, "inexact": 1, "fail": 2}


def load_side(path: str | Path) -> pd.DataFrame:
    """One side of a comparison (`results.run.load_run`: any results file, run folder, sharded run or
    pytest-benchmark JSON) with each row's raw samples (`SECONDS`, `REF_SECONDS`; None without);
    `ValueError` (its message starting with the file) when it cannot be read."""
    run = load_run([path])
    return with_samples(run.frame, run.samples)


def with_samples(frame: pd.DataFrame, logged: pd.DataFrame | None) -> pd.DataFrame:
    """`frame` with each row's samples and its reference's: those logged for its case_id and its run label
    (two runs' samples of one case never mix), the last entry of a case and run winning."""
    found = {}
    if logged is not None:
        refs = logged[REF_SECONDS] if REF_SECONDS in logged else [None] * len(logged)
        for case, run, own, ref in zip(logged["case_id"], logged["run"], logged[SECONDS], refs, strict=True):
            found[(case, key_text(run, ""))] = (own, ref)
    rows = frame.reindex(columns=["case_id", "run"]).to_numpy()
    pairs = [found.get((key_text(case), key_text(run, "")), (None, None)) for case, run in rows]
    return frame.assign(**{SECONDS: [p[0] for p in pairs], REF_SECONDS: [p[1] for p in pairs]})


def _keys(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """Each row's `keys` as one text (an empty list for no rows)."""
    return ["\x1f".join(map(key_text, r)) for r in frame[keys].to_numpy()]


def _array(samples: object) -> np.ndarray | None:
    listed = isinstance(samples, (list, tuple, np.ndarray)) and len(samples)
    return np.asarray(samples, float) if listed else None


def _side(frame: pd.DataFrame, keys: list[str], prefix: str) -> tuple[pd.DataFrame, int]:
    """One run's rows keyed by `keys` (the last row of each key), its columns prefixed; and the duplicates."""
    carried = [name for name, c in columns.registered().items() if c.compare and name not in keys]
    own = [*carried, SECONDS, REF_SECONDS]  # every column the registry marks `compare`, and the samples
    frame = columns.typed(frame.assign(**{c: math.nan for c in (*keys, *own) if c not in frame}))
    frame = frame.assign(**{c: frame[c].map(_array) for c in (SECONDS, REF_SECONDS)})
    frame["_key"] = _keys(frame, keys)
    unique = frame.drop_duplicates("_key", keep="last")
    kept = unique[["_key", *(keys if prefix == "base_" else []), *own]]
    return kept.rename(columns={c: prefix + c for c in own}), len(frame) - len(unique)


@dataclass(frozen=True)
class Comparison:
    """Matched cases, a row each: the keys, `case`, each run's columns (`base_median_us`, `new_verdict`, ...),
    `ratio` (new/base median), then `JUDGED`: the witness, its shift, low, high and floor (`rule.judge`),
    the outcome (`rule.ROWS`) and the check ("broken", "parity worse" or ""); the variants and groups
    judged (`groups.judge_groups`); and what was left over."""

    table: pd.DataFrame
    groups: pd.DataFrame
    threshold: float
    base_only: int
    new_only: int
    duplicates: int
    base_name: str = "base"
    new_name: str = "new"

    @property
    def failures(self) -> pd.DataFrame:
        """The cases that make `perfsuite compare` exit 1: slower, or failing the parity and status check."""
        return self.table[failing(self.table)]

    @property
    def slower_groups(self) -> pd.DataFrame:
        """The variants and groups called slower: each makes `perfsuite compare` exit 1 too."""
        return self.groups[self.groups["outcome"].eq("slower")]

    @property
    def failed(self) -> bool:
        return bool(len(self.failures) or len(self.slower_groups))

    def counts(self) -> dict[str, int]:
        """Cases per outcome, then per failed check."""
        found = {**self.table["outcome"].value_counts(), **self.table["check"].value_counts()}
        return {name: int(found[name]) for name in (*ORDER, *CHECKS) if name in found}


def failing(table: pd.DataFrame) -> pd.Series:
    return table["outcome"].eq("slower") | table["check"].ne("")


def compare(
    base: pd.DataFrame,
    new: pd.DataFrame,
    threshold: float = 0.05,
    *,
    ignore_device: bool = False,
    names: tuple[str, str] = ("base", "new"),
) -> Comparison:
    """Match the cases of two runs' rows (with their samples, as `load_side` gives them) and judge each."""
    keys = [k for k in KEYS if not (ignore_device and k == "device")]
    (left, base_dups), (right, new_dups) = _side(base, keys, "base_"), _side(new, keys, "new_")
    merged = left.merge(right, on="_key", how="outer", indicator=True)
    sides = merged["_merge"].value_counts()
    table = merged[merged["_merge"] == "both"].drop(columns=["_key", "_merge"]).reset_index(drop=True)
    several = "device" in keys and table["device"].map(key_text).nunique() > 1
    table.insert(0, "case", [_label(r, keys, several) for r in table.to_dict("records")])
    table["ratio"] = table["new_median_us"] / table["base_median_us"]
    judged = [_judged(r) for r in table.to_dict("records")]
    table = table.drop(columns=[f"{s}_{c}" for s in ("base", "new") for c in (SECONDS, REF_SECONDS)])
    table = pd.concat([table, pd.DataFrame(judged, index=table.index, columns=list(JUDGED))], axis=1)
    shapes = pd.Series(_keys(table, [k for k in keys if k != "variant"]), index=table.index, dtype=object)
    table[["floor", "noise"]] = rule.run_floors(table, threshold, shapes)
    figures = table[["shift", "low", "high", "floor", "noise"]].to_numpy()
    table["outcome"] = [outcome(*f, threshold) for f in figures]
    table["judged_at"] = judged_at(table)
    groups = judge_groups(table, threshold, shapes)
    rank = (-table["shift"].fillna(1), table["outcome"].map(ORDER.index), ~failing(table))
    table = table.iloc[np.lexsort(rank)].reset_index(drop=True)
    left_only, right_only = int(sides["left_only"]), int(sides["right_only"])
    return Comparison(table, groups, threshold, left_only, right_only, base_dups + new_dups, *names)


def workload(reference: object) -> str:
    """The workload of a row's `reference` ("logits exp, host perf_counter" -> "logits exp"; "" for none)."""
    return reference.split(",")[0].strip() if isinstance(reference, str) else ""


def _witness(row: dict, side: str, by_reference: bool) -> Side:
    """One run's witness of a case: its time over the reference's (the per-round ratios, the vs_ref
    figures) or its own time (its samples, its median, p20 and p80)."""
    own, ref = row[f"{side}_{SECONDS}"], row[f"{side}_{REF_SECONDS}"]
    if not by_reference:
        return Side(_logs(own) if isinstance(own, np.ndarray) else None, *(row[f"{side}_{c}"] for c in OWN))
    paired = isinstance(own, np.ndarray) and isinstance(ref, np.ndarray) and len(own) == len(ref)
    return Side(_logs(own, ref) if paired else None, *(row[f"{side}_{c}"] for c in VS_REF))


def _logs(values: np.ndarray, over: np.ndarray | float = 1.0) -> np.ndarray | None:
    """The logs of the positive finite values of `values / over` (a graph sample clipped at 0 after its
    flush is no time); None when none is left."""
    with np.errstate(divide="ignore", invalid="ignore"):
        values = values / over
        kept = values[np.isfinite(values) & (values > 0)]
    return np.log(kept) if len(kept) else None


def _judged(row: dict) -> tuple:
    """A matched case's `JUDGED` figures (its rounds' floor, the outcome to come): against the reference
    where both runs sampled the same one."""
    base_ok, new_ok = row["base_status"] == "ok", row["new_status"] == "ok"
    by_reference = workload(row["base_reference"]) == workload(row["new_reference"]) != ""
    sides = [_witness(row, s, by_reference) for s in ("base", "new")]
    if by_reference and any(s.rounds is None and math.isnan(s.median) for s in sides):
        by_reference, sides = False, [_witness(row, s, False) for s in ("base", "new")]
    counts = [len(s.rounds) for s in sides if s.rounds is not None]
    counted = f"{counts[0]}/{counts[1]} rounds" if len(counts) == 2 else "p20/p80"
    shift = judge(*sides) if base_ok and new_ok else (math.nan,) * 4
    base_rank, new_rank = VERDICT_RANK.get(row["base_verdict"]), VERDICT_RANK.get(row["new_verdict"])
    worse = base_rank is not None and new_rank is not None and new_rank > base_rank
    check = "broken" if base_ok and row["new_status"] == "error" else "parity worse" if worse else ""
    witness = f"{BY_REFERENCE if by_reference else OWN_TIME}, {counted}"
    return witness, *shift, math.nan, "", math.nan, check


def _label(row: dict, keys: list[str], with_device: bool) -> str:
    case_id = row["base_case_id"]
    if not isinstance(case_id, str) or not case_id:
        case_id = "/".join(key_text(row[k]) for k in keys if k != "device" and key_text(row[k]) != "-")
    return f"{case_id} @ {row['device']}" if with_device and key_text(row["device"]) != "-" else case_id
