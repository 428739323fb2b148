"""Fill Triton's on-disk compile cache for a scenario, in parallel, before the run that needs it.

    python -m perfsuite.kernels.warm SCENARIO [--jobs N] [--budget SECONDS] [--tune]

Triton compiles a kernel at its first launch with a new specialisation, in the launching process, one
at a time: a cold sweep waits on the compiler before its first Triton cases. This command takes every
Triton case of the scenario (variants whose module has a `plan_for`), their launches on this device
(`topk_softmax.plan_launches`), keeps one launch per specialisation (`Launch.compile_key`) and makes
those launches in N worker processes (default: the CPU count). Each worker launches for real, through the
wrappers the variants call, on inputs of the case's shape, dtype and row padding, so Triton's cache keys
are exactly the run's; the run then loads compiled kernels. `--tune` adds every candidate plan
`perfsuite tune` times for the scenario's shapes. Tensor-parallel cases and Inductor's launches
(`compile` path) are not warmed.

Without a GPU there is nothing to warm (exit 0). Under Triton's interpreter (TRITON_INTERPRET=1, which
the simulated GPU sets) nothing is compiled or cached, but the launches run all the same, so the
machinery runs on a CPU.

Exit status: 0 done or nothing to warm, 1 a launch failed, 2 bad input, 124 stopped at the budget with
launches left, 130 interrupted (SIGINT or SIGTERM: the workers are stopped, Triton's cache keeps every
kernel it finished writing).
"""

from __future__ import annotations

import argparse
import inspect
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from perfsuite import kernels, variants
from perfsuite.inputs import dtype_of
from perfsuite.interrupts import interruptible
from perfsuite.kernels import plan as plans
from perfsuite.scenario import Case

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUDGET, EXIT_INTERRUPTED = 0, 1, 2, 124, 130

PlanFor = Callable[[int, int, int, torch.dtype, plans.Hardware], plans.Plan]


@dataclass(frozen=True)
class Warmup:
    """One launch to make: a kernel of a plan on a case's shape, and the specialisation it compiles."""

    kernel: str  # a key of topk_softmax.KERNELS
    source: str  # where it comes from, for the log: "triton_split V151936 B1 k8"
    dtype: str
    batch: int
    vocab: int
    k: int
    row_pad: int
    plan: plans.Plan
    n_parts: int  # merge: partials per row (the first stage's splits)
    key: tuple  # Launch.compile_key

    def describe(self) -> str:
        kernel, logits, constants, _, warps = self.key
        shown = " ".join(f"{name}={value}" for name, value in constants)
        return f"{kernel} {logits.removeprefix('torch.') or '-'} {shown} w{warps}  ({self.source})"


def plan_functions() -> dict[str, PlanFor]:
    """Each Triton variant's `plan_for` (the plan its `select` launches), by variant name."""
    found = {}
    for name in variants.names():
        plan_for = getattr(inspect.getmodule(variants.get(name).select), "plan_for", None)
        if plan_for is not None:
            found[name] = plan_for
    return found


def _launches(source: str, dtype: torch.dtype, case: Case, plan: plans.Plan) -> list[Warmup]:
    from perfsuite.kernels import topk_softmax

    pad = case.inputs.row_pad
    layout = topk_softmax.RowLayout(case.vocab + pad, 0, dtype.itemsize)  # fresh buffers are aligned
    shape = (case.dtype, case.batch, case.vocab, case.topk, pad)
    launches = topk_softmax.plan_launches(case.batch, case.vocab, case.topk, plan, layout)
    n_parts = launches[0].grid[-1] if plan.kernel == "split" else 0
    return [Warmup(x.kernel, source, *shape, plan, n_parts, x.compile_key(dtype)) for x in launches]


def warm_units(cases: Iterable[Case], hw: plans.Hardware, tune: bool = False) -> tuple[list[Warmup], int]:
    """One launch per distinct specialisation the Triton cases of `cases` make on `hw` (with `tune`, also
    every candidate plan `perfsuite tune` times for their shapes), the scans before the merges; and how
    many launches that covers."""
    plan_for = plan_functions()
    cases = [c for c in cases if c.variant in plan_for and c.batch > 0]
    every: list[Warmup] = []
    for case in cases:
        dtype = dtype_of(case.dtype)
        source = f"{case.variant} V{case.vocab} B{case.batch} k{case.topk}"
        plan = plan_for[case.variant](case.batch, case.vocab, case.topk, dtype, hw)
        every += _launches(source, dtype, case, plan)
    if tune:
        from perfsuite.kernels import tuner

        for case in tuner.shapes_of(cases):
            dtype = dtype_of(case.dtype)
            source = f"tune V{case.vocab} B{case.batch} k{case.topk}"
            for tunables in tuner.candidates(case.batch, case.vocab, case.topk, hw, dtype.itemsize):
                plan = tunables.plan_for(case.batch, case.vocab, case.topk, hw, dtype.itemsize)
                every += _launches(f"{source}, {tunables.describe()}", dtype, case, plan)
    distinct: dict[tuple, Warmup] = {}
    for unit in every:
        distinct.setdefault(unit.key, unit)  # the first case of each specialisation names it
    return sorted(distinct.values(), key=lambda w: w.kernel == "merge"), len(every)


def make_launch(unit: Warmup, device: torch.device) -> None:
    """The unit's launch, made as the variants make it (`topk_softmax.run_plan`'s calls) on inputs of its
    shape (zeros; partial sums of one): Triton compiles (or loads) the kernel and runs it."""
    from perfsuite.kernels import topk_softmax

    plan, batch, k = unit.plan, unit.batch, unit.k
    tunables = {"block": plan.block, "num_warps": plan.num_warps, "prefetch": plan.prefetch}
    if unit.kernel == "merge":
        fp32 = {"dtype": torch.float32, "device": device}
        partials = topk_softmax.Partials(
            torch.zeros(batch, unit.n_parts, **fp32),
            torch.ones(batch, unit.n_parts, **fp32),
            torch.zeros(batch, unit.n_parts, k, **fp32),
            torch.zeros(batch, unit.n_parts, k, dtype=torch.int64, device=device),
        )
        topk_softmax.merge_partials(partials, k)
        return
    buffer = torch.zeros(batch, unit.vocab + unit.row_pad, dtype=dtype_of(unit.dtype), device=device)
    logits = buffer[:, : unit.vocab]
    if unit.kernel == "fused":
        topk_softmax.fused_topk_softmax(logits, k, **tunables)
    else:
        topk_softmax.row_partials(logits, k, chunk=plan.chunk, **tunables)


_DEVICE: torch.device | None = None  # a worker's device


def _start_worker(device: str) -> None:
    global _DEVICE
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool (SIGTERM still ends a worker)
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
        text = str(exc).strip().splitlines()
        return unit, time.perf_counter() - start, f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
    return unit, time.perf_counter() - start, ""


Finished = tuple[Warmup, float, str]
"""A unit, the seconds its launch took (compile included) and its error ("" when it ran)."""


POLL_S = 0.25
"""How often the parent wakes while it waits for a worker: a signal delivered to one of the pool's threads
only interrupts the main thread when it wakes."""


def _next(results: multiprocessing.pool.IMapIterator, deadline: float | None) -> Finished:
    """The next finished unit; `multiprocessing.TimeoutError` once `deadline` has passed."""
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise multiprocessing.TimeoutError
        try:
            return results.next(timeout=POLL_S if left is None else min(left, POLL_S))
        except multiprocessing.TimeoutError:
            continue


def _run_pool(
    units: list[Warmup], device: torch.device, jobs: int, deadline: float | None, started: str
) -> tuple[list[Finished], str]:
    """Warm `units` in `jobs` spawned workers (then print `started`) until done, the deadline
    (`time.monotonic()`) or an interruption: what finished, and how it stopped ("" done, "budget",
    "interrupted")."""
    done: list[Finished] = []
    pool = None
    stopped = "interrupted"
    try:
        context = multiprocessing.get_context("spawn")  # CUDA does not survive a fork
        restore = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited: the parent stops the workers
        try:
            pool = context.Pool(jobs, initializer=_start_worker, initargs=(str(device),))
        finally:
            signal.signal(signal.SIGINT, restore)
        print(started, flush=True)
        results = pool.imap_unordered(_warm, units)
        for _ in units:
            done.append(_next(results, deadline))
            unit, seconds, error = done[-1]
            print(f"{seconds:7.1f} s  {unit.describe()}" + (f"  FAILED {error}" if error else ""), flush=True)
        stopped = ""
    except multiprocessing.TimeoutError:
        stopped = "budget"
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        if pool is not None:
            if stopped:
                pool.terminate()  # a kernel being written is dropped: Triton's cache only holds whole ones
            else:
                pool.close()
            pool.join()
    return done, stopped


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m perfsuite.kernels.warm",
        description="Fill Triton's compile cache for every launch a scenario's Triton cases make, in "
        "parallel worker processes on this GPU.",
    )
    parser.add_argument("scenario")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (CPUs)")
    parser.add_argument("--budget", type=float, help="stop after this many seconds (exit 124)")
    parser.add_argument("--tune", action="store_true", help="also every plan `perfsuite tune` times")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.budget is not None and not args.budget > 0:
        parser.error(f"--budget must be a positive number of seconds, got {args.budget}")
    return args


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    args = _arguments(argv)
    try:
        with interruptible():
            return _warm_scenario(args, start)
    except KeyboardInterrupt:
        print("warm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _warm_scenario(args: argparse.Namespace, start: float) -> int:
    from perfsuite.device import resolve_device
    from perfsuite.scenario import ScenarioError, expand, load

    try:
        scenario = load(args.scenario)
        cases = expand(scenario)
        device = resolve_device(scenario.device)
    except (ScenarioError, OSError, RuntimeError) as exc:
        print(f"warm: {exc}", file=sys.stderr)
        return EXIT_USAGE
    interpreted = kernels.interpreting()
    if not kernels.triton_installed() or (device.type != "cuda" and not interpreted):
        why = kernels.NO_TRITON if not kernels.triton_installed() else f"no GPU here ({device})"
        print(f"warm: {why}: nothing to warm (Triton compiles for the GPU that launches)")
        return EXIT_OK
    units, launches = warm_units(cases, plans.hardware(device), tune=args.tune)
    jobs = max(1, min(args.jobs, len(units)))
    kinds = ", ".join(f"{kernel} {n}" for kernel, n in Counter(u.kernel for u in units).items())
    mode = "compiling into Triton's cache"
    if interpreted:
        mode = "Triton interpreter: the launches run, nothing is compiled or cached"
    print(f"warm: {args.scenario} on {device} ({mode})", flush=True)
    counted = f"warm: {len(units)} specialisations ({kinds or 'none'}) for {launches} launches"
    if not units:
        print(counted)
        return EXIT_OK
    deadline = start + args.budget if args.budget else None
    done, stopped = _run_pool(units, device, jobs, deadline, f"{counted}, {jobs} workers started")
    failed = [unit for unit, _, error in done if error]
    busy = sum(seconds for _, seconds, _ in done)
    status = {"": "done", "budget": f"stopped at the {args.budget} s budget", "interrupted": "interrupted"}
    print(
        f"warm: {len(done)} of {len(units)} specialisations in {time.monotonic() - start:.1f} s "
        f"({jobs} workers, {busy:.1f} s of launches), {len(failed)} failed; {status[stopped]}"
    )
    if stopped == "interrupted":
        return EXIT_INTERRUPTED
    if failed:
        return EXIT_FAILED
    return EXIT_BUDGET if stopped == "budget" else EXIT_OK


if __name__ == "__main__":
    from perfsuite.kernels.warm import main as _main  # workers unpickle this module's functions by name

    sys.exit(_main())
