"""Result files read back as rows: the suite's CSV, JSON (records or pandas' columns orient) and JSON-lines
files, and pytest-benchmark's JSON (the perfsuite row in each entry's `extra_info`; a benchmark without
one becomes a row named after it, its quartiles standing in for p20/p80). Every failure is a `ValueError`
whose message starts with the file name. A run's companions are read here too: its raw samples
(`samples.jsonl`) and its `run.json`. Known result formats mix freely; a newer one is refused (`format_of`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from perfsuite.core.console import first_line
from perfsuite.results.columns import BENCH_COLUMNS, BY_NAME, FORMAT_COLUMN, FORMAT_VERSION
from perfsuite.results.write import ResultsLog

SAMPLES_FILE = "samples.jsonl"
MANIFEST_FILE = "run.json"


class FormatTooNew(ValueError):
    """A results file or run folder of a newer result format than this perfsuite reads (one line)."""


def format_of(value: object, where: object) -> int:
    """The result format a row or `run.json` states (None or '': 1); `ValueError` for a value that is no
    format number, `FormatTooNew` for one newer than this perfsuite's; messages start with `where`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return 1
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (number.is_integer() and number >= 1):
        raise ValueError(f"{where}: {FORMAT_COLUMN} {value!r} is not a result format (a whole number >= 1)")
    if number > FORMAT_VERSION:
        raise FormatTooNew(
            f"{where}: result format {int(number)} is newer than this perfsuite reads ({FORMAT_VERSION}): "
            "upgrade perfsuite, or re-run with this perfsuite"
        )
    return int(number)


def read_rows(path: Path, tables: tuple[str, ...] = ()) -> pd.DataFrame:
    """One results file's rows as they are written (not yet typed), its formats checked; a file not named
    in `tables` (a kind's own table) must have a `variant` column."""
    text = _read_text(path)
    kind = _kind(path, text)
    if kind == "csv":
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
        except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
            raise ValueError(f"{path}: not a readable CSV file ({first_line(err, typed=False)})") from None
    elif kind == "jsonl":
        frame = pd.DataFrame(_jsonl(path, text))
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
        frame = _from_json(path, data)
    if "variant" not in frame.columns and len(frame.columns) and path.name not in tables:
        found = ", ".join(map(str, list(frame.columns)[:8]))
        raise ValueError(f"{path}: not a perfsuite results file (no 'variant' column; columns: {found})")
    for value in frame[FORMAT_COLUMN].dropna().unique() if FORMAT_COLUMN in frame else ():
        format_of(value, path)  # a row of an unknown or newer result format: refused
    return frame


def read_samples(folder: Path) -> pd.DataFrame | None:
    """The raw samples logged in `folder`'s `samples.jsonl`: case_id, run ('' without), seconds (floats), and
    ref_seconds (the in-turn reference's, the same rounds; None where missing or not paired one to one);
    None without a sample."""
    path = folder / SAMPLES_FILE
    records = []
    for row in ResultsLog(path).read() if path.is_file() else []:
        seconds, raw = row.get("seconds"), row.get("ref_seconds")
        if not row.get("case_id") or not isinstance(seconds, list):
            continue
        values = [float(v) for v in seconds if isinstance(v, (int, float)) and math.isfinite(v)]
        raw = raw if isinstance(raw, list) else []
        ref = [float(v) for v in raw if isinstance(v, (int, float)) and math.isfinite(v)]
        paired = bool(ref) and len(ref) == len(raw) == len(values) == len(seconds)
        if values:
            records.append({"case_id": str(row["case_id"]), "run": str(row.get("run") or ""),
                            "seconds": values, "ref_seconds": ref if paired else None})  # fmt: skip
    return pd.DataFrame(records) if records else None


def read_manifest(folder: Path, check: bool = True) -> dict[str, object] | None:
    """`folder`'s `run.json` (None when missing or unreadable), its format checked unless `check` is False."""
    try:
        data = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if check:
        format_of(data.get(FORMAT_COLUMN), folder / MANIFEST_FILE)
    return data


def _read_text(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a text file ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror})") from None
    if not text.strip():
        raise ValueError(f"{path}: empty file")
    return text


def _kind(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".jsonl", ".json", ".ndjson"):
        return "jsonl" if suffix == ".ndjson" else suffix[1:]
    head = text.lstrip()[:1]
    if head == "{":  # one document, or one object per line
        try:
            json.loads(text.lstrip().splitlines()[0])
        except json.JSONDecodeError:
            return "json"
        return "jsonl" if len(text.strip().splitlines()) > 1 else "json"
    return "json" if head == "[" else "csv"


def _jsonl(path: Path, text: str) -> list[dict[str, object]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: line {number} is not JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {number} is a JSON {type(row).__name__}, expected an object")
        rows.append(row)
    return rows


def _from_json(path: Path, data: object) -> pd.DataFrame:
    if isinstance(data, list):
        if not all(isinstance(row, dict) for row in data):
            raise ValueError(f"{path}: a JSON list whose items are not all objects (expected records)")
        return pd.DataFrame(data)
    if isinstance(data, dict) and "benchmarks" in data:  # pytest-benchmark's
        if not isinstance(data["benchmarks"], list):
            raise ValueError(f"{path}: 'benchmarks' is not a list")
        commit = data.get("commit_info") if isinstance(data.get("commit_info"), dict) else {}
        rows = [_benchmark_row(path, e, commit.get("id"), data.get("datetime")) for e in data["benchmarks"]]
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["variant", *BENCH_COLUMNS])
    if isinstance(data, dict) and "variant" in data and all(isinstance(v, dict) for v in data.values()):
        return pd.DataFrame(data)  # pandas' "columns" orient
    keys = ", ".join(list(map(str, data))[:8]) if isinstance(data, dict) else ""
    what = f"keys: {keys or 'none'}" if isinstance(data, dict) else type(data).__name__
    raise ValueError(f"{path}: unrecognised JSON ({what}); expected records or a pytest-benchmark file")


def _benchmark_row(path: Path, entry: object, commit: object, when: object) -> dict[str, object]:
    """One benchmark entry's row: the perfsuite row in its extra_info, else one named after the benchmark."""
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: a 'benchmarks' entry is a {type(entry).__name__}, expected an object")
    extra, stats, params = (entry.get(key) or {} for key in ("extra_info", "stats", "params"))
    if not isinstance(extra, dict) or not isinstance(stats, dict):
        raise ValueError(f"{path}: benchmark {entry.get('name')!r} has malformed extra_info or stats")
    row = {k: v for k, v in params.items() if k in BY_NAME} if isinstance(params, dict) else {}
    row.update(extra, bench_name=entry.get("name"), bench_group=entry.get("group"))
    plain = not row.get("variant")
    if plain:  # a benchmark of some other suite: its name, its quartiles for p20/p80
        row["variant"] = entry.get("fullname") or entry.get("name")
        row.setdefault("p20_us", _us(stats.get("q1")))
        row.setdefault("p80_us", _us(stats.get("q3")))
    row.setdefault("status", "ok")
    if row["status"] == "ok" and _missing(row.get("median_us")) and not _missing(stats.get("median")):
        row["median_us"] = _us(stats["median"])
        timer = "pytest-benchmark (quartiles as p20/p80)" if plain else "pytest-benchmark host timer"
        row.setdefault("timing", timer)
        if _missing(row.get("samples")):
            row["samples"] = stats.get("rounds")
    for key, value in (("git_sha", commit), ("timestamp", when)):  # the file's, where the row says none
        if _missing(row.get(key)) and value:
            row[key] = value
    return row


def _us(seconds: object) -> float:
    return math.nan if _missing(seconds) else float(seconds) * 1e6  # type: ignore[arg-type]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""
