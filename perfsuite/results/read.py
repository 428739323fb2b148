"""Read result files back into the tidy schema (`perfsuite.results.schema.RESULT_COLUMNS`).

Accepted: the suite's `results.csv`, `results.json` (pandas records, or the columns orient),
`results.jsonl` (one JSON object per line, as `ResultsLog` appends them), a pytest-benchmark
`--benchmark-json` file whose entries carry a result row in `extra_info`, or a run directory holding one
of the suite's files. Every failure is a `ValueError` whose message starts with the file name.

A run's companions, found beside a results file or in its folder: `load_samples` (the raw timed samples
of `samples.jsonl`) and `run_notes` (the run's warnings in `run.json`); both are optional and return
nothing rather than raise when a file is missing or unreadable.

The result format (`schema.FORMAT_VERSION`, history in `schema.FORMAT_HISTORY`): rows without a
`format_version` are format 1 and read as before; a file with rows of a newer format than this perfsuite
knows is refused (`FormatTooNew`, a `ValueError`: one line that says to upgrade or re-run); rows of
different known formats in one file or one merge are fine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from perfsuite.core.console import first_line
from perfsuite.results.schema import FORMAT_COLUMN, FORMAT_VERSION
from perfsuite.results.schema import RESULT_COLUMNS as COLUMNS
from perfsuite.results.write import ResultsLog, to_frame

NUMERIC_COLUMNS = (
    "vocab",
    "batch",
    "topk",
    "tp",
    "median_us",
    "p20_us",
    "p80_us",
    "samples",
    "spread",
    "speedup_vs_full",
    "speedup_p20",
    "speedup_p80",
    "bytes_model",
    "bytes_model_uncached",
    "model_cache_bytes",
    "bytes_ideal",
    "bytes_measured",
    "bytes_read_measured",
    "bytes_write_measured",
    "bytes_measured_vs_model",
    "bytes_measured_vs_uncached",
    "gbps",
    "gbps_ideal",
    "peak_gbps",
    "copy_gbps",
    "copy_sm_mhz",
    "copy_mem_mhz",
    "copy_warmup_s",
    "pct_peak",
    "pct_copy",
    "ref_median_us",
    "ref_p20_us",
    "ref_p80_us",
    "vs_ref",
    "vs_ref_p20",
    "vs_ref_p80",
    "copy_us_in_turn",
    "copy_gbps_in_turn",
    "pct_copy_in_turn",
    "peak_temp_bytes",
    "model_temp_bytes",
    "idx_exact_ref",
    "idx_tie_ref",
    "top1_mismatch_ref",
    "p_relerr_ref",
    "idx_exact_base",
    "idx_tie_base",
    "p_relerr_base",
    "finite_rows",
    "nonfinite_rows",
    "top1_prob",
    "entropy_nats",
    "top1_tie_rows",
    "topk_tie_rows",
    "threads",
    "other_cores",
    "load_avg",
    "cores",
    "cpu_quota",
    FORMAT_COLUMN,
)
"""Schema columns holding numbers; every other schema column is text."""
TEXT_COLUMNS = tuple(c for c in COLUMNS if c not in NUMERIC_COLUMNS)
RUN_FILES = ("results.json", "results.csv", "results.jsonl")
"""What a run directory is searched for, in this order (the JSONL log may be a partial run)."""
BENCH_COLUMNS = ("bench_name", "bench_group")
"""Extra columns kept from a pytest-benchmark entry."""
SAMPLES_FILE = "samples.jsonl"
MANIFEST_FILE = "run.json"
SAMPLE_COLUMNS = ("case_id", "run", "seconds")


class FormatTooNew(ValueError):
    """A results file or run folder of a newer result format than this perfsuite reads (one line)."""


def format_of(value: object, where: object) -> int:
    """The result format one row or `run.json` states (`value`; None or '': 1, before versioning).
    `ValueError` for a value that is no format number, `FormatTooNew` for one newer than this perfsuite's;
    messages start with `where` (the file)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return 1
    try:
        number = float(value)  # type: ignore[arg-type]  # CSV text, a JSON int, or a float beside NaNs
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (number.is_integer() and number >= 1):
        raise ValueError(f"{where}: {FORMAT_COLUMN} {value!r} is not a result format (a whole number >= 1)")
    version = int(number)
    if version > FORMAT_VERSION:
        raise FormatTooNew(
            f"{where}: result format {version} is newer than this perfsuite reads ({FORMAT_VERSION}): "
            "upgrade perfsuite, or re-run with this perfsuite"
        )
    return version


def formats(frame: pd.DataFrame, where: object) -> set[int]:
    """The result formats of a file's rows (`format_of` each distinct value; no column: {1})."""
    if FORMAT_COLUMN not in frame:
        return {1}
    values = frame[FORMAT_COLUMN]
    return {format_of(v, where) for v in values[values.notna()].unique()} or {1}


def read_table(path: str | Path) -> pd.DataFrame:
    """A case kind's own table (draft.csv: draft-loop rows; pandas' types), its result format checked as
    `load_results` does."""
    frame = pd.read_csv(path)
    formats(frame, path)
    return frame


def load_results(path: str | Path) -> pd.DataFrame:
    """One results file (or run directory) as a frame in the schema, numbers numeric and text as text."""
    path = _resolve(Path(path))
    text = _read_text(path)
    kind = _kind(path, text)
    if kind == "csv":
        frame = _read_csv(path)
    elif kind == "jsonl":
        frame = to_frame(_read_jsonl(path, text))
    else:
        frame = _from_json(path, _parse_json(path, text))
    if "variant" not in frame.columns:
        found = ", ".join(map(str, list(frame.columns)[:8])) or "none"
        raise ValueError(f"{path}: not a perfsuite results file (no 'variant' column; columns: {found})")
    formats(frame, path)
    return coerce(frame)


def load_many(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Several results files (one per machine or backend) in one frame, with a `source` column (file name)."""
    frames = []
    for path in paths:
        frame = load_results(path)
        frame["source"] = Path(path).name
        frames.append(frame)
    if not frames:
        raise ValueError("no results files given")
    frames = [f.dropna(axis=1, how="all") if len(frames) > 1 else f for f in frames]
    return coerce(pd.concat(frames, ignore_index=True))


def load_samples(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame | None:
    """The raw samples of the runs behind one or more results files (or run folders): `samples.jsonl`
    beside each, as a frame of case_id, run ('' where the log has none) and seconds (a list of floats per
    measured case), and ref_seconds where any line has them (the in-turn reference's samples of the same
    rounds; None where a line has none or they do not pair one to one with its seconds); None when no such
    file holds a sample. Torn or malformed lines are skipped."""
    records = []
    for folder in _folders(paths):
        path = folder / SAMPLES_FILE
        for row in ResultsLog(path).read() if path.is_file() else []:  # its folder exists: nothing made
            seconds = row.get("seconds")
            if not row.get("case_id") or not isinstance(seconds, list):
                continue
            values = [float(v) for v in seconds if isinstance(v, (int, float)) and math.isfinite(v)]
            raw = row.get("ref_seconds") if isinstance(row.get("ref_seconds"), list) else []
            ref = [float(v) for v in raw if isinstance(v, (int, float)) and math.isfinite(v)]
            paired = bool(ref) and len(ref) == len(raw) == len(values) == len(seconds)
            if values:
                records.append({"case_id": str(row["case_id"]), "run": str(row.get("run") or ""),
                                "seconds": values, "ref_seconds": ref if paired else None})  # fmt: skip
    columns = [*SAMPLE_COLUMNS, "ref_seconds"]
    if not any(r["ref_seconds"] for r in records):  # logs from before the reference: the three columns
        columns.pop()
    return pd.DataFrame(records, columns=columns) if records else None


def run_notes(paths: str | Path | Iterable[str | Path]) -> list[str]:
    """The warnings (`notes`) each run wrote to its `run.json` beside the results files (or in the run
    folders); each prefixed with the run's label when several run folders are read. Missing files: no
    notes."""
    manifests = []
    folders = _folders(paths)
    for folder in folders:
        try:
            data = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("notes"), list):
            manifests.append((str(data.get("label") or folder.name), [str(n) for n in data["notes"]]))
    several = len(folders) > 1
    return [f"run {label}: {note}" if several else note for label, notes in manifests for note in notes]


def _folders(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """The run folders of results files or folders, each once, in order."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    folders = [Path(p) if Path(p).is_dir() else Path(p).parent for p in items]
    return list(dict.fromkeys(folders))


def coerce(frame: pd.DataFrame) -> pd.DataFrame:
    """Every schema column present, in schema order; numeric columns as numbers, text columns as text.

    Integer columns without gaps become int64, others float64; text keeps NaN for missing values.
    """
    frame = frame.copy()
    for column in COLUMNS:
        if column not in frame:
            frame[column] = float("nan")
    frame = frame[list(COLUMNS) + [c for c in frame.columns if c not in COLUMNS]]
    frame["tp"] = pd.to_numeric(frame["tp"], errors="coerce").fillna(1)  # files from before tp: one device
    frame[FORMAT_COLUMN] = pd.to_numeric(frame[FORMAT_COLUMN], errors="coerce").fillna(1)  # unversioned: 1
    for column in NUMERIC_COLUMNS:
        values = pd.to_numeric(frame[column], errors="coerce").astype("float64")
        frame[column] = _maybe_int(values)
    for column in (*TEXT_COLUMNS, *(c for c in BENCH_COLUMNS if c in frame)):
        frame[column] = frame[column].map(_text, na_action="ignore").astype(object)
        frame[column] = frame[column].where(frame[column].notna(), float("nan"))
    return frame.reset_index(drop=True)


def _maybe_int(values: pd.Series) -> pd.Series:
    whole = bool((values == values.round()).all()) and bool((values.abs() < 2**62).all())
    if len(values) and values.notna().all() and whole:
        return values.astype("int64")
    return values


def _text(value: object) -> object:
    if isinstance(value, float):
        if math.isnan(value):
            return float("nan")
        return str(int(value)) if value.is_integer() else str(value)
    if isinstance(value, str) and value == "":
        return float("nan")
    return str(value)


def _resolve(path: Path) -> Path:
    if path.is_dir():
        for name in RUN_FILES:
            if (path / name).is_file():
                return path / name
        raise ValueError(f"{path}: directory without {', '.join(RUN_FILES)}")
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    return path


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
    if suffix in (".csv", ".jsonl", ".json"):
        return suffix[1:]
    if suffix == ".ndjson":
        return "jsonl"
    head = text.lstrip()[:1]
    if head == "[":
        return "json"
    if head == "{":  # one document, or one object per line
        first = text.lstrip().splitlines()[0]
        try:
            json.loads(first)
        except json.JSONDecodeError:
            return "json"
        return "jsonl" if len(text.strip().splitlines()) > 1 else "json"
    return "csv"


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
        raise ValueError(f"{path}: not a readable CSV file ({first_line(err, typed=False)})") from None


def _read_jsonl(path: Path, text: str) -> list[dict[str, object]]:
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


def _parse_json(path: Path, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None


def _from_json(path: Path, data: object) -> pd.DataFrame:
    if isinstance(data, list):
        if not all(isinstance(row, dict) for row in data):
            raise ValueError(f"{path}: a JSON list whose items are not all objects (expected records)")
        return to_frame(data)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: JSON {type(data).__name__}, expected records or a pytest-benchmark file")
    if "benchmarks" in data:
        return _from_pytest_benchmark(path, data)
    if data and all(isinstance(v, dict) for v in data.values()) and "variant" in data:
        return pd.DataFrame(data)  # pandas' default "columns" orient
    keys = ", ".join(list(map(str, data))[:8]) or "none"
    raise ValueError(f"{path}: unrecognised JSON object (keys: {keys}); expected records or pytest-benchmark")


def _from_pytest_benchmark(path: Path, data: dict[str, object]) -> pd.DataFrame:
    benchmarks = data["benchmarks"]
    if not isinstance(benchmarks, list):
        raise ValueError(f"{path}: 'benchmarks' is not a list")
    commit = data.get("commit_info") if isinstance(data.get("commit_info"), dict) else {}
    rows = [_benchmark_row(path, entry, commit, data.get("datetime")) for entry in benchmarks]
    if not rows:
        return pd.DataFrame(columns=["variant", *BENCH_COLUMNS])
    if not any(has_case for _, has_case in rows):
        raise ValueError(f"{path}: pytest-benchmark entries carry no perfsuite result row in extra_info")
    return to_frame(row for row, _ in rows)


def _benchmark_row(
    path: Path, entry: object, commit: dict[str, object], when: object
) -> tuple[dict[str, object], bool]:
    """The result row of one benchmark entry, and whether it named its case (a perfsuite entry)."""
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: a 'benchmarks' entry is a {type(entry).__name__}, expected an object")
    extra = entry.get("extra_info") or {}
    stats = entry.get("stats") or {}
    params = entry.get("params") or {}
    if not isinstance(extra, dict) or not isinstance(stats, dict):
        raise ValueError(f"{path}: benchmark {entry.get('name')!r} has malformed extra_info or stats")
    row = {k: v for k, v in params.items() if k in COLUMNS} if isinstance(params, dict) else {}
    row.update(extra)
    has_case = bool(row.get("variant"))
    row["bench_name"] = entry.get("name")
    row["bench_group"] = entry.get("group")
    if not row.get("variant"):
        row["variant"] = entry.get("name")
    if not row.get("status"):
        row["status"] = "ok"
    if row["status"] == "ok" and _missing(row.get("median_us")) and not _missing(stats.get("median")):
        row["median_us"] = float(stats["median"]) * 1e6
        row.setdefault("timing", "pytest-benchmark host timer")
        if _missing(row.get("samples")) and not _missing(stats.get("rounds")):
            row["samples"] = stats["rounds"]
    if _missing(row.get("git_sha")) and commit.get("id"):
        row["git_sha"] = commit["id"]
    if _missing(row.get("timestamp")) and when:
        row["timestamp"] = when
    return row, has_case


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""
