"""`perfsuite warm SCENARIO...`: fill Triton's compile cache for every launch the given scenarios and the
conformance battery make, in parallel worker processes on this GPU (the compile plan: `tools.warm`). Its
statuses (`core.exits`): done or nothing to warm, a launch failed, bad input, stopped at the budget with
launches left, interrupted (SIGINT or SIGTERM: Triton's cache keeps every kernel it finished writing)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

from perfsuite.commands import battery_arguments
from perfsuite.core.console import number_at_least
from perfsuite.core.exits import EXIT_BUDGET, EXIT_FINDING, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

NAME = "warm"
HELP = (
    "fill Triton's compile cache with the launches of scenarios and the conformance battery, in parallel on "
    "this GPU (exit 124: stopped at --budget)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    battery_arguments(parser)  # --case, --dtype, --quick: which battery cases --check warms
    parser.add_argument("--device", default="auto", help="without a scenario: auto, cuda, cuda:N")
    parser.add_argument(
        "--keys", type=Path, help="skip the keys this file lists (warmed before), add the ones warmed now"
    )
    jobs = {"type": number_at_least(1), "default": os.cpu_count() or 1}
    parser.add_argument("--jobs", **jobs, help="worker processes (default: the CPUs)")
    budget = number_at_least(0, float, strict=True)
    parser.add_argument("--budget", type=budget, help="stop after this many seconds (exit 124)")


def run(args: argparse.Namespace) -> int:
    """Warm what `args` asks for; the exit status (an interruption outside the workers: `cli.main`'s)."""
    from perfsuite import kernels
    from perfsuite.measure.device import resolve_device
    from perfsuite.scenario.load import ScenarioError, load
    from perfsuite.tools import warm

    start = time.monotonic()
    if not (args.scenario or args.candidates or args.check):
        nothing = "nothing to warm: give a SCENARIO, --candidates SCENARIO or --check SELECTOR"
        print(f"warm: {nothing}", file=sys.stderr)
        return EXIT_USAGE
    try:
        first = args.scenario[:1] or args.candidates[:1]
        device = resolve_device(load(first[0]).device if first else args.device)
        interpreted = kernels.interpreting()
        if not kernels.triton_installed() or (device.type != "cuda" and not interpreted):
            why = kernels.NO_TRITON if not kernels.triton_installed() else f"no GPU here ({device})"
            print(f"warm: {why}: nothing to warm (Triton compiles for the GPU that launches)")
            return EXIT_OK
        units, launches = warm.planned(args, device)
    except (ScenarioError, OSError, RuntimeError, ValueError, KeyError) as exc:
        print(f"warm: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}", file=sys.stderr)
        return EXIT_USAGE
    jobs = max(1, min(args.jobs, len(units)))
    kinds = ", ".join(f"{kernel} {n}" for kernel, n in Counter(u.launch.kernel for u in units).items())
    mode = "compiling into Triton's cache"
    mode = "Triton interpreter: the launches run, nothing is compiled or cached" if interpreted else mode
    what = " ".join([*args.candidates, *args.scenario, *(f"check:{name}" for name in args.check)])
    print(f"warm: {what} on {device} ({mode})", flush=True)
    counted = f"warm: {len(units)} specialisations ({kinds or 'none'}) for {launches} launches"
    if args.keys is not None and args.keys.exists():
        counted += f", those warmed before ({args.keys.name}) left out"
    if not units:
        print(counted)
        return EXIT_OK
    deadline = start + args.budget if args.budget else math.inf
    started = f"{counted}, {jobs} workers started"
    done, stopped = warm.run_pool(units, device, jobs, deadline, started, args.keys)
    failed = [unit for unit, _, error in done if error]
    busy = sum(seconds for _, seconds, _ in done)
    status = {"": "done", "budget": f"stopped at the {args.budget} s budget", "interrupted": "interrupted"}
    print(
        f"warm: {len(done)} of {len(units)} specialisations in {time.monotonic() - start:.1f} s "
        f"({jobs} workers, {busy:.1f} s of launches), {len(failed)} failed; {status[stopped]}"
    )
    if stopped == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FINDING if failed else EXIT_BUDGET if stopped == "budget" else EXIT_OK
