"""One reader of a run (docs/architecture.md): `load_run` turns what the command line names (a run folder,
a results file, the shards of one run, runs of several machines) into one typed `Run`, the run columns
joined back from each folder's `run.json`. Several paths that are not shards are several runs: their rows
are stacked with `source` (the file's name), and the kinds' other tables are read beside a single run only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfsuite.core import kinds
from perfsuite.results import columns, sweep_shards
from perfsuite.results.read import read_manifest, read_rows, read_samples

RESULTS_FILES = ("results.json", "results.csv", "results.jsonl")
"""What a run folder is searched for, in this order (the JSON-lines log may be a partial run)."""
PRIMARY = kinds.KINDS[0].table_file  # results.csv: the kernel and tensor-parallel rows


@dataclass
class Run:
    """Every kind's rows by table file (`PRIMARY` first), typed, with the runs' samples and notes."""

    tables: dict[str, pd.DataFrame]
    samples: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)

    @property
    def frame(self) -> pd.DataFrame:
        """The rows of results.csv: kernel and tensor-parallel cases."""
        return self.tables.get(PRIMARY, pd.DataFrame(columns=["variant"]))

    def rows(self, kind: kinds.CaseKind) -> pd.DataFrame:
        """`kind`'s rows (empty without)."""
        table = self.tables.get(kind.table_file)
        return kinds.rows_of(kind, table) if table is not None else pd.DataFrame()

    @classmethod
    def of(
        cls,
        frame: pd.DataFrame,
        *,
        samples: pd.DataFrame | None = None,
        notes: Sequence[str] = (),
        draft: pd.DataFrame | None = None,
        edge_cases: pd.DataFrame | None = None,
    ) -> Run:
        """A run of rows built in memory (tests, the pytest plugin), typed."""
        given = {"kernel": frame, "draft": draft, "edge_cases": edge_cases}
        files = {kinds.get(kind).table_file: t for kind, t in given.items() if t is not None}
        return cls({name: columns.complete(t, name) for name, t in files.items()}, samples, list(notes))


def load_run(paths: Sequence[str | Path], shards: bool = True, **given: str | Path | None) -> Run:
    """The run (or runs) `paths` name, typed. `given`: a kind's table from another file (draft="x.csv",
    edge_cases="y.csv"), in place of the one beside the results. `ValueError` (one line naming the file)
    for what cannot be read, `sweep_shards.ShardError` for shards that are not of one run. `shards` False:
    a shard's folder is read as it is (a shard's own report), not merged with its siblings."""
    if not paths:
        raise ValueError("no results files given")
    merged = sweep_shards.merge(sweep_shards.expand(paths)) if shards else None
    given_paths = merged.folders if merged is not None else [Path(p) for p in paths]
    parts = [_one(path, merged is not None or len(paths) == 1) for path in given_paths]
    if len(parts) > 1:  # several runs, or shards: each row says which file or folder it came from
        for (part, _), path in zip(parts, given_paths, strict=True):
            part.tables = {k: t.assign(source=path.name) for k, t in part.tables.items()}
    run = _stack(parts, merged.label if merged is not None else None)
    run.notes[:0] = merged.notes if merged is not None else []
    for name, path in given.items():
        if path is not None:
            table = f"{name}.csv"
            run.tables[table] = columns.typed(_joined(read_rows(Path(path), (table,)), {}, table))
    return run


def _one(path: Path, companions: bool) -> tuple[Run, str]:
    """One results file or run folder, and its run's label; with `companions`, its other tables too."""
    file = _resolve(path)
    folder = file.parent if file is not None else path
    manifest = read_manifest(folder) or {}
    constants = manifest.get("constants") or {}
    rows = read_rows(file) if file is not None else pd.DataFrame(columns=["variant"])
    tables = {PRIMARY: _joined(rows, constants, PRIMARY)}
    for table_file in kinds.table_files()[1:] if companions else ():
        if (folder / table_file).is_file():
            tables[table_file] = _joined(read_rows(folder / table_file, (table_file,)), constants, table_file)
    notes = [str(n) for n in manifest.get("notes") or []]
    return Run(tables, read_samples(folder), notes, [folder]), str(manifest.get("label") or folder.name)


def _joined(frame: pd.DataFrame, constants: dict, table_file: str) -> pd.DataFrame:
    """`frame` with every column of its table, the run columns its rows lack taken from the run's
    constants (`run.json`); what is still missing reads as the registry's default (tp 1, format 1)."""
    frame = frame.rename(columns=columns.RENAMED)
    wanted = columns.table_columns(table_file, run=True)  # a kind's table takes the run columns it has
    for name, value in constants.items():
        if name in wanted:
            frame[name] = frame[name].where(frame[name].notna(), value) if name in frame else value
    return columns.ordered(frame, table_file, run=True)


def _stack(parts: list[tuple[Run, str]], label: str | None) -> Run:
    """Runs as one: their tables stacked (a sharded run's label on every row and sample), samples and
    notes kept (each note prefixed with its run's label where there are several)."""
    runs = [run for run, _ in parts]
    tables: dict[str, pd.DataFrame] = {}
    for name in dict.fromkeys(n for r in runs for n in r.tables):
        pieces = [r.tables[name] for r in runs if name in r.tables]
        pieces = [p.dropna(axis=1, how="all") for p in pieces] if len(pieces) > 1 else pieces
        table = pd.concat(pieces, ignore_index=True)
        tables[name] = columns.typed(table.assign(run=label) if label is not None and len(table) else table)
    found = [r.samples for r in runs if r.samples is not None]
    samples = pd.concat(found, ignore_index=True) if found else None
    if samples is not None and label is not None:
        samples = samples.assign(run=label)
    several = len(parts) > 1
    notes = [f"run {who}: {n}" if several else n for r, who in parts for n in r.notes]
    return Run(tables, samples, notes, [f for r in runs for f in r.folders])


def _resolve(path: Path) -> Path | None:
    """The results file a path names: itself, or a run folder's (None: a folder with only another kind's
    table, a draft-only run)."""
    if path.is_dir():
        for name in RESULTS_FILES:
            if (path / name).is_file():
                return path / name
        if any((path / name).is_file() for name in kinds.table_files()[1:]):
            return None
        raise ValueError(f"{path}: directory without {', '.join(RESULTS_FILES)}")
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    return path
