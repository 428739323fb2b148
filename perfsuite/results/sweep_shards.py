"""Sharded sweeps (docs/sharding.md): one scenario split over many machines (`run --shard I/N`), and the
shards merged back. The split is deterministic, keeps a unit of cases that must run together (the variants
of one shape and path, one tensor-parallel size, one draft configuration) whole, and balances the shards
by each case's logits bytes. `merge` reads the shards' folders back as one run under one label.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from perfsuite.core import dtypes, kinds
from perfsuite.results.columns import FORMAT_COLUMN
from perfsuite.results.read import MANIFEST_FILE, format_of, read_manifest

T = TypeVar("T")
MIB = 1 << 20


class ShardError(ValueError):
    """A bad `--shard` value, or shard folders that are not the shards of one run (one line)."""


@dataclass(frozen=True)
class Shard:
    """Shard `index` (0-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def folder_name(self) -> str:
        """The sub-folder of `--out` a shard writes into: shard-I-of-N."""
        return f"shard-{self.index}-of-{self.count}"


def parse(text: str) -> Shard:
    """`I/N` with 0 <= I < N (a Slurm array index or a Kubernetes completion index as it comes)."""
    index_text, slash, count_text = str(text).strip().partition("/")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        index, count = -1, 0
    if not slash or count < 1 or not 0 <= index < count:
        raise ShardError(f"--shard: expected I/N with 0 <= I < N (e.g. 0/8), got {text!r}")
    return Shard(index, count)


def assign(units: Sequence[T], weight: Callable[[T], float], count: int) -> list[int]:
    """The shard of each unit: largest first to the least loaded shard (ties: input order, lower shard)."""
    order = sorted(range(len(units)), key=lambda i: (-weight(units[i]), i))
    loads = [(0.0, shard) for shard in range(count)]
    heapq.heapify(loads)
    owner = [0] * len(units)
    for i in order:
        load, shard = heapq.heappop(loads)
        owner[i] = shard
        heapq.heappush(loads, (load + weight(units[i]), shard))
    return owner


def _case_weight(case: object) -> float:
    """One case's estimated cost: a fixed part plus its logits' MiB (kernel and draft cases alike)."""
    head = getattr(case, "head", None)
    source = head if head is not None else case
    dtype = getattr(source, "dtype", "float32")
    try:
        itemsize = dtypes.dtype_of(dtype).itemsize
    except (KeyError, ValueError, TypeError):
        itemsize = 4
    vocab = int(getattr(source, "vocab", 0) or 0)
    return 1.0 + int(getattr(case, "batch", 1) or 0) * vocab * itemsize / MIB


def select(cases: Iterable[T], key: Callable[[T], Hashable], shard: Shard | None) -> list[T]:
    """The cases of `shard`, in their order; units are the groups of equal `key`. None: every case."""
    cases = list(cases)
    if shard is None:
        return cases
    groups: dict[Hashable, list[T]] = {}
    for case in cases:
        groups.setdefault(key(case), []).append(case)
    units = list(groups.values())
    owner = assign(units, lambda unit: sum(_case_weight(c) for c in unit), shard.count)
    mine = {id(case) for unit, who in zip(units, owner, strict=True) if who == shard.index for case in unit}
    return [case for case in cases if id(case) in mine]


@dataclass
class Merged:
    """The folders of one sharded run, checked: in shard order, with the label the merged rows carry."""

    folders: list[Path]
    label: str
    notes: list[str] = field(default_factory=list)


def shard_of(manifest: dict[str, object]) -> Shard | None:
    """The shard a run folder's manifest records (None: an unsharded run)."""
    value = manifest.get("shard")
    if not isinstance(value, dict):
        return None
    try:
        return Shard(int(value["index"]), int(value["count"]))
    except (KeyError, TypeError, ValueError):
        return None


def _facts(folder: Path) -> dict[str, object]:
    return read_manifest(folder, check=False) or {}


def is_shard(folder: Path) -> bool:
    """Whether `folder` holds one shard of a sharded run."""
    return shard_of(_facts(folder)) is not None


def shard_folders(path: Path) -> list[Path]:
    """The shard run folders directly inside `path` (a `--shard` run's `--out`), by name; [] if none."""
    if not path.is_dir() or (path / MANIFEST_FILE).is_file():
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and shard_of(_facts(p)) is not None)


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Results paths with every folder of shard folders replaced by its shards."""
    return [path for item in paths for path in shard_folders(Path(item)) or [Path(item)]]


def merge(paths: Sequence[str | Path]) -> Merged | None:
    """Check that the run folders among `paths` are the shards of one run; None when none is a shard.
    `ShardError` when sharded folders are mixed with others, or differ in settings or shard count, or a
    shard comes twice; `read.FormatTooNew` when a shard's `run.json` is of a newer result format."""
    folders = [Path(p) if Path(p).is_dir() else Path(p).parent for p in paths]
    manifests = [_facts(f) for f in folders]
    for folder, manifest in zip(folders, manifests, strict=True):  # known formats mix; a newer one: refused
        format_of(manifest.get(FORMAT_COLUMN), folder / MANIFEST_FILE)
    shards = [shard_of(m) for m in manifests]
    if all(s is None for s in shards):
        return None
    if any(s is None for s in shards):
        plain = [str(f) for f, s in zip(folders, shards, strict=True) if s is None]
        raise ShardError(f"{plain[0]}: not a shard, but given with shards; merge shards of one run only")
    first, count = manifests[0], shards[0].count  # type: ignore[union-attr]
    seen: dict[int, tuple[Path, dict]] = {}  # shard index: its folder and run.json
    for folder, manifest, shard in zip(folders, manifests, shards, strict=True):
        assert shard is not None
        if manifest.get("settings_fingerprint") != first.get("settings_fingerprint"):
            raise ShardError(
                f"{folder}: shard of other settings than {folders[0]} "
                f"({manifest.get('scenario_file')} {manifest.get('settings_fingerprint')} vs "
                f"{first.get('scenario_file')} {first.get('settings_fingerprint')}); merge shards of one run"
            )
        if shard.count != count:
            raise ShardError(f"{folder}: shard {shard} of another split than {folders[0]} ({shards[0]})")
        if shard.index in seen:
            raise ShardError(f"{folder}: shard {shard} given twice (also {seen[shard.index][0]})")
        seen[shard.index] = (folder, manifest)
    ordered = sorted(seen)
    labels = sorted({str(seen[i][1].get("label") or "") for i in ordered})
    label = str(seen[ordered[0]][1].get("label") or "")
    notes = []
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        notes.append(
            f"shards {', '.join(map(str, missing))} of {count} are missing: their cases are not shown"
        )
    if len(labels) > 1:
        notes.append(f"the shards' labels differ ({', '.join(labels)}): merged as run {label}")
    silent = [i for i in ordered if wrote_no_row(seen[i][0])]
    if len(silent) == len(ordered):
        raise ShardError(
            f"{seen[ordered[0]][0].parent}: no shard wrote a row yet (each stopped before its first)"
        )
    if silent:
        notes.append(
            f"shards {', '.join(map(str, silent))} of {count} stopped before their first row "
            "(cancelled or killed at the start): their cases are not shown"
        )
    kept = [i for i in ordered if i not in silent]
    unfinished = [str(seen[i][0]) for i in kept if seen[i][1].get("interrupted")]
    if unfinished:
        notes.append(f"interrupted shards (partial): {', '.join(unfinished)}")
    return Merged([seen[i][0] for i in kept], label, notes)


def wrote_no_row(folder: Path) -> bool:
    """Whether a run folder's row logs (`kinds.logs()`: results.jsonl, draft.jsonl) are all there and
    empty: a shard cancelled or killed before its first row, whose results.json, if a handler wrote it on
    the way out, is an empty list."""
    logs = [folder / name for name in kinds.logs()]
    return all(log.is_file() and not _holds_text(log) for log in logs)


def _holds_text(path: Path) -> bool:
    with path.open("rb") as f:  # a row log can be large: its first bytes are enough
        return bool(f.read(4096).strip())
