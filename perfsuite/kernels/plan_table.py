"""Tuned launch plans: measured on a GPU by `perfsuite tune`, filed by device name, used by `triton_auto`.

A table is one JSON file per device (`TunedTable`): for each tuned shape (dtype, batch, vocab, k), the
fastest exact plan's `Tunables` and its median time next to the heuristic plan's. `best_plan` takes the
tuned entry nearest to a shape (same element size; distance in octaves of batch, vocab and k) and applies
its tunables to the shape: a fused plan keeps its tile and warps, a split plan its tile, warps and waves
(programs per SM), so the split count follows the batch and the vocabulary. Without a table for the
device, or for a CPU, it is the heuristic `plan.choose`. The argmax kernels (`triton_argmax`) are tuned
and looked up apart: their entries' tunables say `selection = "argmax"` (a table without it: the top-k's).

Tables are read from `perfsuite/kernels/plan_table/*.json` (committed ones) and from the files named in
`PERFSUITE_PLANS` (os.pathsep-separated), the latter winning for the same device. They are written whole
(`write_table`): a reader, or a `perfsuite tune` killed mid-write, never leaves a half-written table.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Protocol

import torch

from perfsuite.core.dtypes import dtype_of
from perfsuite.kernels import plan as plans

PLANS_ENV = "PERFSUITE_PLANS"
PACKAGED = Path(__file__).with_name("tuned")


@dataclass(frozen=True)
class Tunables:
    """A launch plan independent of the shape: the kernel, its tile and warps, and for split the waves
    (programs per SM) its chunking aims at."""

    kernel: plans.Kernel
    block: int
    num_warps: int
    waves: float = 0.0  # split only
    prefetch: bool = plans.PREFETCH
    selection: plans.Selection = "topk"  # the exact top-k kernels or the argmax ones

    @staticmethod
    def of(plan: plans.Plan, waves: float = plans.SPLIT_WAVES) -> Tunables:
        waves = waves if plan.kernel == "split" else 0.0
        return Tunables(plan.kernel, plan.block, plan.num_warps, waves, plan.prefetch, plan.selection)

    def describe(self) -> str:
        """One line: "split, block 1024, 4 warps, 1 wave, prefetch" ("argmax " in front for the argmax)."""
        waves = f", {self.waves:g} waves" if self.kernel == "split" else ""
        prefetch = ", prefetch" if self.prefetch else ""
        kernel = f"argmax {self.kernel}" if self.selection == "argmax" else self.kernel
        return f"{kernel}, block {self.block}, {self.num_warps} warps{waves}{prefetch}"

    def plan_for(self, batch: int, vocab: int, k: int, hw: plans.Hardware, element_size: int) -> plans.Plan:
        """These tunables applied to a shape (a row too short to split runs fused)."""
        tunables = {"block": self.block, "num_warps": self.num_warps, "prefetch": self.prefetch}
        if self.kernel == "fused" or vocab < 2 * plans.SPLIT_MIN_CHUNK:
            return plans.fused_plan(hw, element_size, **tunables).selecting(self.selection)
        plan = plans.split_plan(batch, vocab, k, hw, element_size, waves=self.waves, **tunables)
        return plan.selecting(self.selection)


@dataclass(frozen=True)
class TunedShape:
    """The fastest exact plan measured for one shape, and what the heuristic plan took there."""

    dtype: str
    batch: int
    vocab: int
    k: int
    best: Tunables
    median_us: float
    heuristic_us: float

    @staticmethod
    def from_dict(data: dict) -> TunedShape:
        return TunedShape(**{**data, "best": Tunables(**data["best"])})


@dataclass(frozen=True)
class TunedTable:
    """The tuned plans of one device."""

    device: str
    sms: int
    warp_size: int
    versions: dict[str, str] = field(default_factory=dict)
    path: str = ""  # the execution path the candidates were timed on (eager or graph)
    entries: tuple[TunedShape, ...] = ()

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "entries": [asdict(e) for e in self.entries]}, indent=1)

    @staticmethod
    def from_json(text: str) -> TunedTable:
        data = json.loads(text)
        return TunedTable(**{**data, "entries": tuple(TunedShape.from_dict(e) for e in data["entries"])})

    def summary(self) -> list[dict[str, object]]:
        """One record per tuned shape: the best plan, its median and its speedup over the heuristic plan."""
        return [
            {
                "dtype": e.dtype,
                "batch": e.batch,
                "vocab": e.vocab,
                "k": e.k,
                "best": e.best.describe(),
                "best_us": round(e.median_us, 2),
                "heuristic_us": round(e.heuristic_us, 2),
                "speedup": round(e.heuristic_us / e.median_us, 3) if e.median_us > 0 else math.nan,
            }
            for e in self.entries
        ]


def replace_text(path: Path, text: str) -> None:
    """Replace `path`'s content with `text` all at once: written to a temporary file in the same folder,
    flushed to disk, then renamed over `path` (`os.replace`, atomic). Readers see the old or the new text."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_table(path: Path, table: TunedTable) -> None:
    """Write a tuned table as JSON, atomically (`replace_text`)."""
    replace_text(path, table.to_json())


def slug(device: str) -> str:
    """A file name for a device name: "NVIDIA H200" -> "nvidia-h200"."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "device"


def table_files(plans_env: str | None = None) -> list[Path]:
    """Packaged tables first, then PERFSUITE_PLANS files (later files win for the same device)."""
    plans_env = os.environ.get(PLANS_ENV, "") if plans_env is None else plans_env
    return sorted(PACKAGED.glob("*.json")) + [Path(p) for p in plans_env.split(os.pathsep) if p]


@cache
def _tables(plans_env: str) -> dict[str, TunedTable]:
    tables = {}
    for path in table_files(plans_env):
        try:
            table = TunedTable.from_json(path.read_text())
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise ValueError(f"{path}: not a perfsuite tuned-plan table ({error})") from error
        tables[table.device] = table
    return tables


def table_for(device: str) -> TunedTable | None:
    """The tuned table of a device name, if one is installed or named in PERFSUITE_PLANS (read once)."""
    return _tables(os.environ.get(PLANS_ENV, "")).get(device) if device else None


def nearest(
    table: TunedTable,
    dtype: torch.dtype,
    batch: int,
    vocab: int,
    k: int,
    selection: plans.Selection = "topk",
) -> TunedShape | None:
    """The entry closest to the shape among those of the same element size and selection (None if there
    are none)."""
    size = dtype.itemsize
    same = [e for e in table.entries if dtype_of(e.dtype).itemsize == size and e.best.selection == selection]

    def octaves(e: TunedShape) -> float:
        return sum(abs(math.log2(a / b)) for a, b in ((batch or 1, e.batch), (vocab, e.vocab), (k, e.k)))

    return min(same, key=octaves, default=None)


def best_plan(
    batch: int,
    vocab: int,
    k: int,
    dtype: torch.dtype,
    hw: plans.Hardware,
    selection: plans.Selection = "topk",
) -> plans.Plan:
    """The tuned plan for this shape on `hw` where its device has a table with entries of `selection`,
    else the heuristic.

    Memoised (it runs on every `triton_auto` / `triton_argmax` call, ahead of the launch).
    """
    return _best_plan(batch, vocab, k, dtype, hw, os.environ.get(PLANS_ENV, ""), selection)


def is_tuned(device: str, selection: plans.Selection = "topk") -> bool:
    """Whether the device's table (if any) holds entries of `selection`."""
    table = table_for(device)
    return table is not None and any(e.best.selection == selection for e in table.entries)


@cache
def _best_plan(
    batch: int,
    vocab: int,
    k: int,
    dtype: torch.dtype,
    hw: plans.Hardware,
    plans_env: str,
    selection: plans.Selection = "topk",
) -> plans.Plan:
    table = _tables(plans_env).get(hw.name) if hw.name else None
    entry = nearest(table, dtype, batch, vocab, k, selection) if table else None
    if entry is None:
        return plans.choose(batch, vocab, k, hw, dtype.itemsize, selection)
    return entry.best.plan_for(batch, vocab, k, hw, dtype.itemsize)


class Device(Protocol):
    """What `default_path` reads of a `perfsuite.measure.device.DeviceInfo` (the measure layer sits above
    the kernels)."""

    @property
    def device(self) -> str: ...
    @property
    def name(self) -> str: ...


def default_path(info: Device) -> Path:
    """Where `perfsuite tune` files a device's table by default: the packaged tables, by device name."""
    return PACKAGED / f"{slug(plans.hardware(info.device).name or info.name)}.json"
