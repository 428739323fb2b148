"""The files a run leaves behind: the row log (`results.jsonl`) and the tables (`results.csv`, `.json`),
in the schema of `perfsuite.results.schema`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from perfsuite.results.schema import FORMAT_COLUMN, FORMAT_VERSION, RESULT_COLUMNS


def to_frame(rows: Iterable[dict[str, object]]) -> pd.DataFrame:
    """Rows to a frame with every schema column, in schema order (extra columns kept at the end)."""
    frame = pd.DataFrame(list(rows))
    for column in RESULT_COLUMNS:
        if column not in frame:
            frame[column] = pd.NA
    extra = [c for c in frame.columns if c not in RESULT_COLUMNS]
    return frame[list(RESULT_COLUMNS) + extra]


class ResultsLog:
    """Appends each finished row to a JSON-lines log at once, so an interrupted run keeps what it measured.

    Reading tolerates a torn last line (a process killed mid-write, a full disk): it is dropped, and
    `dropped` says so; so is any other line that is not a JSON object. Every row appended carries the
    result format (`schema.FORMAT_COLUMN`); rows kept by `rewrite` keep theirs (none: format 1)."""

    def __init__(self, path: Path):
        self.path = path
        self.dropped: list[str] = []
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, row: dict[str, object]) -> None:
        """Write one row, stamped with this perfsuite's result format (`FORMAT_VERSION`), and flush."""
        row = {**row, FORMAT_COLUMN: FORMAT_VERSION}  # every kind's rows pass here: kernel, tp, draft
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=_jsonable) + "\n")
            f.flush()

    def read(self) -> list[dict[str, object]]:
        self.dropped = []
        if not self.path.exists():
            return []
        rows = []
        lines = self.path.read_text(encoding="utf-8", errors="replace").split("\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict):
                rows.append(row)
                continue
            torn = number == len(lines)  # no newline after it: the write never finished
            what = "a torn last line (an interrupted write)" if torn else f"line {number}: not a JSON row"
            self.dropped.append(f"{self.path}: dropped {what}: {line[:60]!r}")
        return rows

    def rewrite(self, rows: list[dict[str, object]]) -> None:
        """Replace the log's contents with `rows` (atomically)."""
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=_jsonable) + "\n")
        tmp.replace(self.path)


def _jsonable(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


def write_tables(frame: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """`results.csv` and `results.json` (records) under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / "results.csv", out_dir / "results.json"
    frame.to_csv(csv_path, index=False)
    frame.to_json(json_path, orient="records", indent=1)
    return csv_path, json_path
