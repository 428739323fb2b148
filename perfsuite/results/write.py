"""The files a run leaves behind: its row logs (`results.jsonl`, `draft.jsonl`, `samples.jsonl`), appended
as each case finishes, and the tables written from them (`results.csv`, `.json`, each kind's CSV), in the
order of the column registry (`perfsuite.results.columns`); strict JSON, a missing value `null`
(`core.strict_json`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from perfsuite.core import strict_json
from perfsuite.results.columns import FORMAT_COLUMN, FORMAT_VERSION, ordered

PRIMARY = "results.csv"


def to_frame(rows: Iterable[dict[str, object]], table_file: str = PRIMARY, run: bool = True) -> pd.DataFrame:
    """Rows as a frame with every column of `table_file` in registry order (the run columns too unless
    `run` is False), missing ones empty, unregistered ones kept at the end."""
    return ordered(pd.DataFrame(list(rows)), table_file, run)


class ResultsLog:
    """Appends each finished row to a JSON-lines log at once, so an interrupted run keeps what it measured.

    With the run's `constants` (run.json), a row leaves out the run columns that hold the run's value;
    without them every row is stamped with this perfsuite's result format. Reading drops a torn last line
    (a process killed mid-write) and any line that is not a JSON object, and says so in `dropped`."""

    def __init__(self, path: Path, constants: dict[str, object] | None = None):
        self.path, self.constants = path, constants or {}
        self.dropped: list[str] = []
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, row: dict[str, object]) -> None:
        """Write one row and flush."""
        row = {k: v for k, v in row.items() if not (k in self.constants and _same(v, self.constants[k]))}
        if not self.constants:
            row[FORMAT_COLUMN] = FORMAT_VERSION
        with self.path.open("a", encoding="utf-8") as f:
            f.write(strict_json.dumps(row) + "\n")
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
        tmp.write_text("".join(strict_json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        tmp.replace(self.path)


def _same(value: object, constant: object) -> bool:
    """Whether a row's value is the run's constant, or no value at all (None, NaN)."""
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return missing or (type(value) is type(constant) and value == constant)


def write_tables(frame: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """`results.csv` and `results.json` (records) under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / "results.csv", out_dir / "results.json"
    frame.to_csv(csv_path, index=False)
    frame.to_json(json_path, orient="records", indent=1)
    return csv_path, json_path
