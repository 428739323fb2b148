"""Fill Triton's on-disk compile cache, in parallel, before the stages that launch the kernels.

    perfsuite warm [SCENARIO ...] [--tune] [--candidates SCENARIO] [--check SELECTOR
        [--quick] [--case GLOB] [--dtype D]] [--keys FILE] [--jobs N] [--budget SECONDS]
    python -m perfsuite.tools.warm ...   (an alias: the same options and exit status)

Triton compiles a kernel at its first launch with a new specialisation, in the launching process, one
at a time: a cold stage waits on the compiler (about 1.8 s of CPU a kernel). This command takes the
compile plan (`perfsuite.tools.warm_keys`) of what it is given: each SCENARIO's Triton sweep cases,
its edge-case matrix and its draft cases; with `--tune` or `--candidates SCENARIO`, every candidate plan
`perfsuite tune` times for the shapes; with `--check`, the conformance battery's launches on those
selectors (its --quick, --case and --dtype). It keeps one launch per specialisation
(`Launch.compile_key`), in that order (candidates, scenarios, battery) and makes those launches in N
worker processes (default: the CPU count). Each worker launches for real, through the wrappers the
variants call, on one row of the logits' geometry (dtype, V, row stride, shift), so Triton's cache keys
are exactly the run's; the run then loads compiled kernels. Plans are the variants' own, so with a tuned
table in PERFSUITE_PLANS the tuned ones. `--keys FILE` leaves out the keys FILE lists and adds each key
warmed now: a second call in the same check (after `perfsuite tune`) only compiles what is new.
Tensor-parallel cases and Inductor's launches (`compile` path) are not warmed.

Without a GPU there is nothing to warm (exit 0). Under Triton's interpreter (TRITON_INTERPRET=1, which
the simulated GPU sets) nothing is compiled or cached, but the launches run all the same, so the
machinery runs on a CPU (and a launch log, `perfsuite.kernels.launch_log`, records them as warmed).

Exit status: 0 done or nothing to warm, 1 a launch failed, 2 bad input, 124 stopped at the budget with
launches left, 130 interrupted (SIGINT or SIGTERM: the workers are stopped, Triton's cache keeps every
kernel it finished writing).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from perfsuite import kernels
from perfsuite.core.console import first_line, interruptible, number_at_least
from perfsuite.core.dtypes import dtype_of
from perfsuite.kernels import launch_log
from perfsuite.kernels import plan as plans
from perfsuite.scenario.load import Case, Scenario
from perfsuite.tools import warm_keys

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUDGET, EXIT_INTERRUPTED = 0, 1, 2, 124, 130

Warmup = warm_keys.Warmup
plan_functions = warm_keys.plan_functions


def warm_units(cases: Iterable[Case], hw: plans.Hardware, tune: bool = False) -> tuple[list[Warmup], int]:
    """One launch per distinct specialisation the Triton cases of `cases` make on `hw` (with `tune`, also
    every candidate plan `perfsuite tune` times for their shapes, first), the scans before the merges;
    and how many launches that covers."""
    cases = list(cases)
    sources = [warm_keys.candidate_units(cases, hw)] if tune else []
    sources.append(warm_keys.sweep_units(cases, hw))
    return warm_keys.distinct(*sources), sum(len(s) for s in sources)


def scenario_units(scenario: Scenario, hw: plans.Hardware, tune: bool = False) -> list[list[Warmup]]:
    """A scenario's launches as `perfsuite run` makes them: with `tune` the candidate plans first, then
    the sweep's cases, the edge-case matrix after them, the draft cases."""
    from perfsuite.scenario.load import expand

    cases = expand(scenario)
    sources = [warm_keys.candidate_units(cases, hw)] if tune else []
    sources.append(warm_keys.sweep_units(cases, hw))
    sources.append(warm_keys.edge_matrix_units(scenario, hw))
    sources.append(warm_keys.draft_units(scenario, hw))
    return sources


def make_launch(unit: Warmup, device: torch.device) -> None:
    """The unit's launch, made as the variants make it (`topk_softmax.run_plan`'s calls) on one row of
    its geometry (V, row stride, shift; zeros; partial sums of one): Triton compiles (or loads) the kernel
    and runs it. The batch only sizes the grid, which no kernel is specialised on."""
    from perfsuite.kernels import topk_softmax

    plan, k = unit.plan, unit.k
    tunables = {"block": plan.block, "num_warps": plan.num_warps, "prefetch": plan.prefetch}
    if unit.kernel == "argmax_merge":
        topk_softmax.merge_argmax(torch.zeros(1, unit.n_parts, dtype=torch.int64, device=device))
        return
    if unit.kernel == "merge":
        fp32 = {"dtype": torch.float32, "device": device}
        partials = topk_softmax.Partials(
            torch.zeros(1, unit.n_parts, **fp32),
            torch.ones(1, unit.n_parts, **fp32),
            torch.zeros(1, unit.n_parts, k, **fp32),
            torch.zeros(1, unit.n_parts, k, dtype=torch.int64, device=device),
        )
        topk_softmax.merge_partials(partials, k)
        return
    buffer = torch.zeros(unit.shift + unit.vocab, dtype=dtype_of(unit.dtype), device=device)  # aligned
    logits = buffer.as_strided((1, unit.vocab), (unit.stride, 1), unit.shift)
    if unit.kernel == "fused":
        topk_softmax.fused_topk_softmax(logits, k, **tunables)
    elif unit.kernel == "argmax":
        topk_softmax.fused_argmax(logits, **tunables)
    elif unit.kernel == "argmax_partials":
        topk_softmax.argmax_partials(logits, chunk=plan.chunk, **tunables)
    else:
        topk_softmax.row_partials(logits, k, chunk=plan.chunk, **tunables)


_DEVICE: torch.device | None = None  # a worker's device


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
    units: list[Warmup],
    device: torch.device,
    jobs: int,
    deadline: float | None,
    started: str,
    on_done: Callable[[Finished], None] = lambda finished: None,
) -> tuple[list[Finished], str]:
    """Warm `units` in `jobs` spawned workers (then print `started`) until done, the deadline
    (`time.monotonic()`) or an interruption, calling `on_done` with each finished unit: what finished,
    and how it stopped ("" done, "budget", "interrupted")."""
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
            on_done(done[-1])
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


DESCRIPTION = (
    "Fill Triton's compile cache for every launch the given scenarios and conformance battery make, in "
    "parallel worker processes on this GPU."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `perfsuite warm` (and of its alias `python -m perfsuite.tools.warm`)."""
    parser.description = DESCRIPTION
    parser.add_argument("scenario", nargs="*", help="its sweep, edge-case matrix and draft cases")
    parser.add_argument("--tune", action="store_true", help="also every plan `perfsuite tune` times for them")
    parser.add_argument(
        "--candidates", action="append", default=[], metavar="SCENARIO",
        help="only every plan `perfsuite tune SCENARIO` times, first (repeat)",
    )  # fmt: skip
    parser.add_argument(
        "--check", action="append", default=[], metavar="SELECTOR",
        help="the conformance battery's launches on this selector, last (repeat)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the battery's --quick subset")
    parser.add_argument("--case", action="append", default=[], help="the battery's --case globs (repeat)")
    parser.add_argument("--dtype", action="append", default=[], help="the battery's --dtype (repeat)")
    parser.add_argument("--device", default="auto", help="without a scenario: auto, cuda, cuda:N")
    parser.add_argument(
        "--keys", type=Path, help="skip the keys this file lists (warmed before), add the ones warmed now"
    )
    parser.add_argument(
        "--jobs",
        type=number_at_least(1),
        default=os.cpu_count() or 1,
        help="worker processes (default: the CPUs)",
    )
    parser.add_argument(
        "--budget",
        type=number_at_least(0, float, strict=True),
        help="stop after this many seconds (exit 124)",
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m perfsuite.tools.warm`: an alias of `perfsuite warm`."""
    parser = argparse.ArgumentParser(prog="python -m perfsuite.tools.warm")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Warm what `args` (parsed by `add_arguments`' options) asks for; the exit status."""
    start = time.monotonic()
    if not (args.scenario or args.candidates or args.check):
        nothing = "nothing to warm: give a SCENARIO, --candidates SCENARIO or --check SELECTOR"
        print(f"warm: {nothing}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with interruptible():
            return _warm_all(args, start)
    except KeyboardInterrupt:
        print("warm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _plan(args: argparse.Namespace, device: torch.device) -> tuple[list[Warmup], int]:
    """The distinct units of everything asked for (candidates, scenarios, battery, in that order), those
    listed in `--keys` left out; and the launches they cover."""
    from perfsuite.correctness.conformance.battery import battery_dtype
    from perfsuite.scenario.load import load

    hw = plans.hardware(device)
    sources = [warm_keys.candidate_units(_cases(load(path)), hw) for path in args.candidates]
    for path in args.scenario:
        sources += scenario_units(load(path), hw, tune=args.tune)
    if args.check:
        dtypes = [battery_dtype(name) for name in args.dtype] or None
        options = {"cases": args.case or None, "dtypes": dtypes, "quick": args.quick}
        sources.append(warm_keys.battery_units(args.check, hw, device, **options))
    units = warm_keys.distinct(*sources)
    warmed = _warmed_keys(args.keys)
    return [u for u in units if launch_log.key_text(u.key) not in warmed], sum(len(s) for s in sources)


def _cases(scenario: Scenario) -> list[Case]:
    from perfsuite.scenario.load import expand

    return expand(scenario)


def _warmed_keys(path: Path | None) -> set[str]:
    """The keys a `--keys` file lists (none for a missing file)."""
    if path is None or not path.exists():
        return set()
    return {json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


def _keep_key(path: Path | None) -> Callable[[Finished], None]:
    """`--keys`: each unit warmed without an error is added to the file at once (a stop keeps them)."""

    def keep(finished: Finished) -> None:
        unit, _, error = finished
        if path is not None and not error:
            with path.open("a", encoding="utf-8") as keys:
                keys.write(json.dumps(launch_log.key_text(unit.key)) + "\n")

    return keep


def _warm_all(args: argparse.Namespace, start: float) -> int:
    from perfsuite.measure.device import resolve_device
    from perfsuite.scenario.load import ScenarioError, load

    try:
        first = args.scenario[:1] or args.candidates[:1]
        device = resolve_device(load(first[0]).device if first else args.device)
        interpreted = kernels.interpreting()
        if not kernels.triton_installed() or (device.type != "cuda" and not interpreted):
            why = kernels.NO_TRITON if not kernels.triton_installed() else f"no GPU here ({device})"
            print(f"warm: {why}: nothing to warm (Triton compiles for the GPU that launches)")
            return EXIT_OK
        units, launches = _plan(args, device)
    except (ScenarioError, OSError, RuntimeError, ValueError, KeyError) as exc:
        print(f"warm: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}", file=sys.stderr)
        return EXIT_USAGE
    jobs = max(1, min(args.jobs, len(units)))
    kinds = ", ".join(f"{kernel} {n}" for kernel, n in Counter(u.kernel for u in units).items())
    mode = "compiling into Triton's cache"
    if interpreted:
        mode = "Triton interpreter: the launches run, nothing is compiled or cached"
    what = " ".join([*args.candidates, *args.scenario, *(f"check:{name}" for name in args.check)])
    print(f"warm: {what} on {device} ({mode})", flush=True)
    counted = f"warm: {len(units)} specialisations ({kinds or 'none'}) for {launches} launches"
    if args.keys is not None and args.keys.exists():
        counted += f", those warmed before ({args.keys.name}) left out"
    if not units:
        print(counted)
        return EXIT_OK
    deadline = start + args.budget if args.budget else None
    started = f"{counted}, {jobs} workers started"
    done, stopped = _run_pool(units, device, jobs, deadline, started, _keep_key(args.keys))
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
    from perfsuite.tools.warm import main as _main

    sys.exit(_main())
