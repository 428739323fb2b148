"""Tuned launch plans: measured on a GPU by `perfsuite tune`, one JSON table per device name, used by
`triton_auto` (and, for entries whose `best.selection` is "argmax", `triton_argmax`). Tables come from
`perfsuite/kernels/tuned/*.json` and the files in `PERFSUITE_PLANS` (os.pathsep-separated, the later winning
for one device)."""

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

from perfsuite.core import strict_json
from perfsuite.core.dtypes import dtype_of
from perfsuite.kernels import plan as plans

PLANS_ENV = "PERFSUITE_PLANS"
PACKAGED = Path(__file__).with_name("tuned")


@dataclass(frozen=True)
class Tunables:
    """A launch plan independent of the shape: the kernel, its tile and warps, for split the waves
    (programs per SM) its chunking aims at."""

    kernel: plans.Kernel
    block: int
    num_warps: int
    waves: float = 0.0  # split only
    prefetch: bool = plans.PREFETCH
    selection: plans.Selection = "topk"

    @staticmethod
    def of(plan: plans.Plan) -> Tunables:
        waves = plans.SPLIT_WAVES if plan.kernel == "split" else 0.0
        return Tunables(plan.kernel, plan.block, plan.num_warps, waves, plan.prefetch, plan.selection)

    def describe(self) -> str:
        """One line: "[argmax ]split, block 1024, 4 warps, 1 waves, prefetch"."""
        waves = f", {self.waves:g} waves" if self.kernel == "split" else ""
        kernel = f"argmax {self.kernel}" if self.selection == "argmax" else self.kernel
        prefetch = ", prefetch" if self.prefetch else ""
        return f"{kernel}, block {self.block}, {self.num_warps} warps{waves}{prefetch}"

    def plan_for(self, batch: int, vocab: int, k: int, hw: plans.Hardware, element_size: int) -> plans.Plan:
        """These tunables applied to a shape (a row too short to split runs fused)."""
        tunables = {"block": self.block, "num_warps": self.num_warps, "prefetch": self.prefetch}
        if self.kernel == "fused" or vocab < 2 * plans.SPLIT_MIN_CHUNK:
            plan = plans.fused_plan(hw, element_size, **tunables)
        else:
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
        return strict_json.dumps({**asdict(self), "entries": [asdict(e) for e in self.entries]}, indent=1)

    @staticmethod
    def from_json(text: str) -> TunedTable:
        data = json.loads(text)
        entries = tuple(TunedShape(**{**e, "best": Tunables(**e["best"])}) for e in data["entries"])
        return TunedTable(**{**data, "entries": entries})

    def summary(self) -> list[dict[str, object]]:
        """One record per tuned shape: the best plan, its median and its speedup over the heuristic."""
        return [
            {"dtype": e.dtype, "batch": e.batch, "vocab": e.vocab, "k": e.k, "best": e.best.describe(),
             "best_us": round(e.median_us, 2), "heuristic_us": round(e.heuristic_us, 2),
             "speedup": round(e.heuristic_us / e.median_us, 3) if e.median_us > 0 else math.nan}
            for e in self.entries
        ]  # fmt: skip


def replace_text(path: Path, text: str) -> None:
    """Replace `path`'s content atomically: a temporary file in its folder, flushed to disk, renamed over it
    (`os.replace`): readers see the old or the new text, never part of it."""
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


@cache
def _tables(plans_env: str) -> dict[str, TunedTable]:
    tables = {}
    for path in sorted(PACKAGED.glob("*.json")) + [Path(p) for p in plans_env.split(os.pathsep) if p]:
        try:
            table = TunedTable.from_json(path.read_text())
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise ValueError(f"{path}: not a perfsuite tuned-plan table ({error})") from error
        tables[table.device] = table
    return tables


def table_for(device: str) -> TunedTable | None:
    """The tuned table of a device name, if one is installed or named in PERFSUITE_PLANS (read once)."""
    return _tables(os.environ.get(PLANS_ENV, "")).get(device) if device else None


MAX_OCTAVES = 2.0
"""A tuned entry applies to shapes within this many octaves of it (summed over batch, vocab and k): a table
cut short (a tune stopped at its budget) leaves the shapes it never came near to the heuristic."""


def best_plan(
    batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware,
    selection: plans.Selection = "topk",
) -> plans.Plan:  # fmt: skip
    """The tunables of the nearest tuned shape within `MAX_OCTAVES` (same element size and selection)
    applied to this one, else the heuristic plan."""
    entry = tuned_entry(batch, vocab, k, dtype, hw, selection)
    if entry is None:
        return plans.choose(batch, vocab, k, hw, dtype.itemsize, selection)
    return entry.best.plan_for(batch, vocab, k, hw, dtype.itemsize)


def tuned_entry(
    batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware,
    selection: plans.Selection = "topk",
) -> TunedShape | None:  # fmt: skip
    """The nearest tuned shape of `hw`'s device within `MAX_OCTAVES` of this one, if any."""
    return _tuned_entry(batch, vocab, k, dtype, hw, os.environ.get(PLANS_ENV, ""), selection)


@cache  # it runs ahead of every `triton_auto` / `triton_argmax` launch
def _tuned_entry(
    batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware, plans_env: str,
    selection: plans.Selection,
) -> TunedShape | None:  # fmt: skip
    table = _tables(plans_env).get(hw.name) if hw.name else None
    same = [
        e for e in (table.entries if table else ())
        if dtype_of(e.dtype).itemsize == dtype.itemsize and e.best.selection == selection
    ]  # fmt: skip

    def octaves(e: TunedShape) -> float:
        return sum(abs(math.log2(a / b)) for a, b in ((batch or 1, e.batch), (vocab, e.vocab), (k, e.k)))

    entry = min(same, key=octaves, default=None)
    return entry if entry is not None and octaves(entry) <= MAX_OCTAVES else None


class Device(Protocol):
    """What `default_path` reads of a `measure.device.DeviceInfo` (a layer above the kernels)."""

    device: str
    name: str


def default_path(info: Device) -> Path:
    """Where `perfsuite tune` files a device's table by default: the packaged tables, by a file name made of
    the device name ("NVIDIA H200" -> "nvidia-h200.json")."""
    name = re.sub(r"[^a-z0-9]+", "-", (plans.hardware(info.device).name or info.name).lower()).strip("-")
    return PACKAGED / f"{name or 'device'}.json"
