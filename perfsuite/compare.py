"""Run-to-run comparison: match the cases of two results files and flag what got slower or less exact.

Matching: two rows are the same case when `schema.CASE_KEYS` (variant, path, dtype, vocab, batch, topk,
logits, l2, tp) and the device name are equal (`ignore_device` drops the device, to compare two machines).
Noise rule: a case is slower when new median / base median exceeds 1 + threshold AND, where both rows carry
p20/p80, the new p20 is above the base p80 (the middle 60 % of the two runs' samples do not overlap);
faster mirrors it. A ratio past the threshold whose spreads overlap is `noisy`, not a regression.
Parity: a verdict that got worse (pass < inexact < fail) is a regression whatever the time, and so is a case
that ran in the base and errors in the new run. Inputs: anything `report.load_results` reads (the suite's
csv/json/jsonl, pytest-benchmark JSON whose entries carry a result row), or a plain pytest-benchmark JSON
(matched by benchmark name; its quartiles stand in for p20/p80).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfsuite.report.load import load_results
from perfsuite.schema import CASE_KEYS

KEYS = (*CASE_KEYS, "device")
VERDICT_RANK = {"pass": 0, "inexact": 1, "fail": 2}
FAILING = ("slower", "parity worse", "broken")
"""Outcomes that make `perfsuite compare` exit 1."""
ORDER = ("broken", "parity worse", "slower", "noisy", "skipped now", "faster", "same", "not timed")
NUMBERS = ("median_us", "p20_us", "p80_us", "bytes_model", "bytes_measured")


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
    """One side of a comparison; `ValueError` (message starts with the file) when it cannot be read."""
    path = Path(path)
    try:
        frame = load_results(path)
    except ValueError as exc:
        plain = _plain_benchmark(path) if "no perfsuite result row" in str(exc) else None
        if plain is None:
            raise
        frame = plain
    return _normalized(frame)


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column the comparison reads present; the numeric ones as float64 (NaN for missing)."""
    frame = frame.copy()
    for column in (*NUMBERS, *KEYS, "status", "verdict", "case_id", "reason"):
        if column not in frame:
            frame[column] = math.nan
    for column in NUMBERS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in (*KEYS, "status", "verdict", "case_id", "reason"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), math.nan)
    return frame


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


@dataclass(frozen=True)
class Comparison:
    """Matched cases (a row each: base_* and new_* columns, ratios, an outcome) and what was left over."""

    table: pd.DataFrame
    threshold: float
    base_only: int
    new_only: int
    duplicates: int
    base_name: str = "base"
    new_name: str = "new"

    @property
    def failures(self) -> pd.DataFrame:
        return self.table[self.table["outcome"].isin(FAILING)]

    def counts(self) -> dict[str, int]:
        counts = self.table["outcome"].value_counts()
        return {o: int(counts[o]) for o in ORDER if o in counts}


def _outcome(row: pd.Series, threshold: float) -> str:
    base_ok, new_ok = row["base_status"] == "ok", row["new_status"] == "ok"
    if base_ok and row["new_status"] == "error":
        return "broken"
    base_rank = VERDICT_RANK.get(row["base_verdict"])
    new_rank = VERDICT_RANK.get(row["new_verdict"])
    if base_rank is not None and new_rank is not None and new_rank > base_rank:
        return "parity worse"
    if base_ok and not new_ok:
        return "skipped now"
    ratio = row["ratio"]
    if not (base_ok and new_ok) or math.isnan(ratio):
        return "not timed"
    spread = not (math.isnan(row["band_low"]) or math.isnan(row["band_high"]))
    if ratio > 1 + threshold:
        return "slower" if not spread or row["band_low"] > 1 else "noisy"
    if ratio < 1 / (1 + threshold):
        return "faster" if not spread or row["band_high"] < 1 else "noisy"
    return "same"


def compare(
    base: pd.DataFrame,
    new: pd.DataFrame,
    threshold: float = 0.05,
    *,
    ignore_device: bool = False,
    names: tuple[str, str] = ("base", "new"),
) -> Comparison:
    """Match the cases of two results frames and classify each: see the module docstring for the rules."""
    keys = [k for k in KEYS if not (ignore_device and k == "device")]
    base_k, base_dups = _keyed(_normalized(base), keys)
    new_k, new_dups = _keyed(_normalized(new), keys)
    key_columns = [f"k_{k}" for k in keys]
    kept = ["case_id", *keys, "status", "verdict", "reason", *NUMBERS]
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
    table["band_low"] = table["new_p20_us"] / table["base_p80_us"]
    table["band_high"] = table["new_p80_us"] / table["base_p20_us"]
    table["bytes_measured_ratio"] = table["new_bytes_measured"] / table["base_bytes_measured"]
    table["bytes_model_ratio"] = table["new_bytes_model"] / table["base_bytes_model"]
    table["outcome"] = [_outcome(r, threshold) for _, r in table.iterrows()] if len(table) else []
    rank = {o: i for i, o in enumerate(ORDER)}
    table = table.sort_values(
        ["outcome", "ratio"], key=lambda s: s.map(rank) if s.name == "outcome" else -s.fillna(0)
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
    rule = f"threshold {100 * comparison.threshold:.3g} %, new p20 above base p80"
    return f"{len(comparison.table)} cases matched{more}: {counts}; {rule}"


def text_table(comparison: Comparison, limit: int = 30, width: int = 64) -> str:
    """A compact table: every failing case, then the largest other changes, up to `limit` rows."""
    table = comparison.table[comparison.table["outcome"] != "not timed"]
    failures = table[table["outcome"].isin(FAILING)]
    shown = pd.concat([failures, table[~table["outcome"].isin(FAILING)].head(limit)])
    shown = shown.head(max(limit, len(failures)))
    if shown.empty:
        return summary_line(comparison)
    out = pd.DataFrame(
        {
            "case": shown["case"].map(lambda s: s if len(s) <= width else "…" + s[-(width - 1) :]),
            "base us": shown["base_median_us"].map(lambda v: f"{v:.4g}"),
            "new us": shown["new_median_us"].map(lambda v: f"{v:.4g}"),
            "ratio": shown["ratio"].map(_ratio_text),
            "p20/p80 band": [
                f"{_ratio_text(lo)}-{_ratio_text(hi)}"
                for lo, hi in zip(shown["band_low"], shown["band_high"], strict=True)
            ],
            "parity": [
                verdicts(b, n) for b, n in zip(shown["base_verdict"], shown["new_verdict"], strict=True)
            ],
            "bytes": [bytes_ratio(r) for _, r in shown.iterrows()],
            "outcome": shown["outcome"],
        }
    )
    out = out.replace({"nan": "", "-": ""})
    left_out = len(table) - len(shown)
    tail = f"\n… {left_out} more timed cases (see --out / --csv)" if left_out > 0 else ""
    return f"{out.to_string(index=False)}{tail}\n{summary_line(comparison)}"
