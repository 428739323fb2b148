"""The compile plan of `perfsuite warm` (commands/warm.py) and its workers: every launch the GPU check's
stages make (each SCENARIO's Triton sweep cases, edge-case matrix and draft cases; `perfsuite tune`'s plans
with `--tune` / `--candidates`; the conformance battery's with `--check`), derived from the inputs each stage
builds and the variants' own plans: one launch per compile key, on one row of its geometry, in N workers, so
Triton's cache keys are the run's (docs/triton.md). Under TRITON_INTERPRET=1 the launches run, uncompiled.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from perfsuite import variants
from perfsuite.core.console import first_line
from perfsuite.core.dtypes import dtype_of
from perfsuite.kernels import launch_log
from perfsuite.kernels import plan as plans
from perfsuite.scenario.load import Case, Scenario, expand, load
from perfsuite.tools import tuning

if TYPE_CHECKING:
    from perfsuite.kernels.topk_softmax import Launch


@dataclass(frozen=True)
class Warmup:
    """One launch a stage will make, and where it comes from (for the log: "triton_split V151936 B1 k8")."""

    source: str
    dtype: torch.dtype  # the logits'
    launch: Launch

    @cached_property
    def key(self) -> tuple:
        return self.launch.compile_key(self.dtype)

    def describe(self) -> str:
        kernel, logits, constants, _, warps = self.key
        shown = " ".join(f"{name}={value}" for name, value in constants)
        return f"{kernel} {logits.removeprefix('torch.') or '-'} {shown} w{warps}  ({self.source})"


Shape = tuple[int, int, int]  # (batch, vocab, k)


def _units(
    source: str, dtype: torch.dtype, shape: Shape, layout: plans.RowLayout, plan: plans.Plan
) -> list[Warmup]:
    from perfsuite.kernels.topk_softmax import plan_launches

    return [Warmup(source, dtype, launch) for launch in plan_launches(*shape, plan, layout)]


def _variant_units(
    source: str, name: str, hw: plans.Hardware, dtype: torch.dtype, shape: Shape, layout: plans.RowLayout
) -> list[Warmup]:
    """What the Triton variant `name` launches on logits of this shape and layout."""
    if shape[0] <= 0:
        return []
    return _units(source, dtype, shape, layout, tuning.variant_plan(name)(*shape, dtype, hw))


def _logits_units(source: str, name: str, hw: plans.Hardware, logits: torch.Tensor, k: int) -> list[Warmup]:
    """What the Triton variant `name` launches on these very logits (their layout decides the key)."""
    return _variant_units(source, name, hw, logits.dtype, (*logits.shape, k), plans.RowLayout.of(logits))


def sweep_units(cases: Iterable[Case], hw: plans.Hardware) -> list[Warmup]:
    """The Triton cases' launches (`perfsuite run`'s kernel-level sweep)."""
    found: list[Warmup] = []
    for c in (c for c in cases if tuning.variant_plan(c.variant)):
        dtype, source = dtype_of(c.dtype), f"{c.variant} V{c.vocab} B{c.batch} k{c.topk}"
        layout = plans.RowLayout.contiguous(c.vocab, dtype.itemsize, c.inputs.row_pad)
        found += _variant_units(source, c.variant, hw, dtype, (c.batch, c.vocab, c.topk), layout)
    return found


def candidate_units(cases: Iterable[Case], hw: plans.Hardware) -> list[Warmup]:
    """Every candidate plan `perfsuite tune` times for the shapes of the Triton cases of `cases`."""
    found: list[Warmup] = []
    for case in tuning.shapes_of(c for c in cases if tuning.variant_plan(c.variant) and c.batch > 0):
        dtype, selection = dtype_of(case.dtype), tuning.selection_of(case.variant)
        shape = (case.batch, case.vocab, case.topk)
        source = f"tune V{case.vocab} B{case.batch} k{case.topk}{' argmax' if selection == 'argmax' else ''}"
        layout = plans.RowLayout.contiguous(case.vocab, dtype.itemsize, case.inputs.row_pad)
        for tunables in tuning.candidates(*shape, hw, dtype.itemsize, selection):
            plan = tunables.plan_for(*shape, hw, dtype.itemsize)
            found += _units(f"{source}, {tunables.describe()}", dtype, shape, layout, plan)
    return found


def edge_matrix_units(scenario: Scenario, hw: plans.Hardware) -> list[Warmup]:
    """The edge-case matrix `perfsuite run` makes after the sweep (`EDGE_TOPK`, the sweep's dtypes and
    single-device variants) on `edge_cases.edge_logits`."""
    from perfsuite.correctness import edge_cases

    names = list(dict.fromkeys(v for s in scenario.sweeps for v in s.variants if tuning.variant_plan(v)))
    found: list[Warmup] = []
    for dtype in dict.fromkeys(dtype_of(d) for s in scenario.sweeps for d in s.dtypes):
        logits = edge_cases.edge_logits(dtype, "cpu")
        for k in edge_cases.EDGE_TOPK:
            for name in names:
                found += _logits_units(f"{name} edge-case matrix k{k}", name, hw, logits, k)
    return found


def draft_units(scenario: Scenario, hw: plans.Hardware) -> list[Warmup]:
    """The selections of a scenario's draft cases: the extend on `[B, V]`, the decode steps (and the
    runner's output-reuse probe) on `[B * k, V]`; fp32 logits when upcast, else the head's dtype."""
    from perfsuite.cases.draft.draft_table import expand_draft

    found: list[Warmup] = []
    for case in (c for c in expand_draft(scenario) if tuning.variant_plan(c.variant)):
        head, topk = case.head, case.loop.topk
        dtype = torch.float32 if case.loop.upcast else head.torch_dtype
        layout = plans.RowLayout.contiguous(head.vocab, dtype.itemsize)
        for rows in (case.batch, case.batch * topk):
            source = f"{case.variant} draft V{head.vocab} rows {rows} k{topk}"
            found += _variant_units(source, case.variant, hw, dtype, (rows, head.vocab, topk), layout)
    return found


def battery_units(
    selectors: Iterable[str], hw: plans.Hardware, device: torch.device, *, cases: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] | None = None, quick: bool = False,
) -> list[Warmup]:  # fmt: skip
    """The Triton launches of `perfsuite check SELECTORS [--case ...] [--dtype ...] [--quick]` on `device`:
    each case's logits built as the battery builds them (on the CPU: the same strides and offsets), every
    dtype the selector claims, every k of the case, and a `batch_check` case's other batches."""
    from perfsuite.correctness.conformance import battery, consistency
    from perfsuite.correctness.conformance import battery_patterns as catalogue

    names = [n for n in selectors if tuning.variant_plan(n) and not variants.get(n).available(device)]
    wanted = [d for d in battery.DTYPES if dtypes is None or d in set(dtypes)]
    found: list[Warmup] = []
    for case in catalogue.select(cases, quick=quick):
        if case.graph and device.type != "cuda":
            continue  # the battery skips it (graph capture needs a GPU)
        for dtype in wanted:
            if not (users := [n for n in names if dtype in variants.get(n).dtypes]):
                continue
            try:
                logits = case.build(dtype, torch.device("cpu"))
            except catalogue.Skip:
                continue
            others = consistency.other_batches(logits) if case.batch_check else []
            batches = [logits, *(rows for _, rows, _ in others)]
            for k in case.topks():
                for name in (n for n in users if not variants.get(n).unclaimed_k(k)):
                    for rows in batches:
                        found += _logits_units(f"{name} check {case.name} k{k}", name, hw, rows, k)
            del logits, batches  # the int64 addressing case's buffer spans gigabytes of address space
    return found


def distinct(*sources: list[Warmup]) -> list[Warmup]:
    """One launch per compile key: the first of each, sources in the order given, each source's scans
    before its merges (a budget that runs out leaves the later sources' kernels to compile when used)."""
    kept: dict[tuple, Warmup] = {}
    for source in sources:
        for unit in sorted(source, key=lambda u: u.launch.kernel.endswith("merge")):
            kept.setdefault(unit.key, unit)
    return list(kept.values())


def scenario_units(scenario: Scenario, hw: plans.Hardware, tune: bool = False) -> list[list[Warmup]]:
    """A scenario's launches as `perfsuite run` makes them: with `tune` the candidate plans first, then
    the sweep's cases, the edge-case matrix, the draft cases."""
    cases = expand(scenario)
    sources = [candidate_units(cases, hw)] if tune else []
    return [*sources, sweep_units(cases, hw), edge_matrix_units(scenario, hw), draft_units(scenario, hw)]


def make_launch(unit: Warmup, device: torch.device) -> None:
    """The unit's launch on one row of its geometry (the batch only sizes the grid, which no kernel is
    specialised on), on fresh tensors of the run's types: Triton compiles (or loads) the kernel, runs it."""
    from perfsuite.kernels.topk_softmax import KERNELS, POINTER_TYPES

    launch = replace(unit.launch, grid=(1, *unit.launch.grid[1:]))
    scalars, k = launch.scalars, launch.constants.get("K", 1)
    size = max(launch.grid[-1], scalars.get("n_parts", 1)) * max(k, scalars.get("part_k", 1))
    types = {"fp32": torch.float32, "i64": torch.int64}

    def tensor(kind: str) -> torch.Tensor:  # the logits are zeros, the partials ones (sums of one)
        if kind == "input":
            return torch.zeros(scalars["shift"] + scalars["V"], dtype=unit.dtype, device=device)
        return torch.ones(size, dtype=types[kind], device=device)

    launch(*(tensor(POINTER_TYPES[n]) for n in KERNELS[launch.kernel].arg_names if n in POINTER_TYPES))


_DEVICE: torch.device | None = None  # a worker's device
Finished = tuple[Warmup, float, str]  # a unit, its launch's seconds (compile included), its error ("" ran)
# How often the parent wakes while it waits for a worker: a signal delivered to one of the pool's threads
# only interrupts the main thread when it wakes.
POLL_S = 0.25


def _start_worker(device: str) -> None:
    global _DEVICE
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool (SIGTERM still ends a worker)
    os.environ[launch_log.WARMED_ENV] = "1"  # a launch log records these launches as warmed
    _DEVICE = torch.device(device)
    if _DEVICE.type == "cuda":
        torch.cuda.set_device(_DEVICE)


def _warm(unit: Warmup) -> Finished:
    """In a worker: make the unit's launch; its seconds (compile included) and the error, if any."""
    start = time.perf_counter()
    try:
        make_launch(unit, _DEVICE)
        if _DEVICE.type == "cuda":
            torch.cuda.synchronize(_DEVICE)
    except Exception as exc:  # reported by the parent, one line per unit
        return unit, time.perf_counter() - start, first_line(exc, 300)
    return unit, time.perf_counter() - start, ""


def _next(results: multiprocessing.pool.IMapIterator, deadline: float) -> Finished:
    """The next finished unit; `multiprocessing.TimeoutError` once `deadline` has passed."""
    while time.monotonic() < deadline:
        try:
            return results.next(timeout=min(deadline - time.monotonic(), POLL_S))
        except multiprocessing.TimeoutError:
            continue
    raise multiprocessing.TimeoutError


def run_pool(
    units: list[Warmup], device: torch.device, jobs: int, deadline: float, started: str, keys: Path | None
) -> tuple[list[Finished], str]:
    """Warm `units` in `jobs` spawned workers (then print `started`) until done, the deadline
    (`time.monotonic()`) or an interruption, each finished unit kept in `keys`: what finished, and how it
    stopped ("" done, "budget", "interrupted")."""
    done: list[Finished] = []
    pool, stopped = None, "interrupted"
    try:
        restore = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited: the parent stops the workers
        try:  # spawned: CUDA does not survive a fork
            pool = multiprocessing.get_context("spawn").Pool(jobs, _start_worker, (str(device),))
        finally:
            signal.signal(signal.SIGINT, restore)
        print(started, flush=True)
        results = pool.imap_unordered(_warm, units)
        for _ in units:
            done.append(_next(results, deadline))
            unit, seconds, error = done[-1]
            _keep_key(keys, done[-1])
            print(f"{seconds:7.1f} s  {unit.describe()}" + (f"  FAILED {error}" if error else ""), flush=True)
        stopped = ""
    except multiprocessing.TimeoutError:
        stopped = "budget"
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        if pool is not None:
            # terminated, a kernel being written is dropped: Triton's cache only holds whole ones
            pool.terminate() if stopped else pool.close()
            pool.join()
    return done, stopped


def planned(args: argparse.Namespace, device: torch.device) -> tuple[list[Warmup], int]:
    """The distinct units of everything asked for (candidates, scenarios, battery, in that order), those
    listed in the `--keys` file left out; and the launches they cover."""
    from perfsuite.correctness.conformance.battery import battery_dtype

    hw = plans.hardware(device)
    sources = [candidate_units(expand(load(path)), hw) for path in args.candidates]
    for path in args.scenario:
        sources += scenario_units(load(path), hw, tune=args.tune)
    if args.check:
        options = {"cases": args.case or None, "quick": args.quick}
        dtypes = [battery_dtype(name) for name in args.dtype] or None
        sources.append(battery_units(args.check, hw, device, dtypes=dtypes, **options))
    lines = args.keys.read_text(encoding="utf-8").splitlines() if args.keys and args.keys.exists() else []
    warmed = {json.loads(line) for line in lines if line.strip()}
    units = [u for u in distinct(*sources) if launch_log.key_text(u.key) not in warmed]
    return units, sum(len(s) for s in sources)


def _keep_key(path: Path | None, finished: Finished) -> None:
    """`--keys`: each unit warmed without an error is added to the file at once (a stop keeps them)."""
    unit, _, error = finished
    if path is not None and not error:
        with path.open("a", encoding="utf-8") as keys:
            keys.write(json.dumps(launch_log.key_text(unit.key)) + "\n")
