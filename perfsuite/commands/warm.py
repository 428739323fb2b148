"""`perfsuite warm SCENARIO...`: fill Triton's compile cache for every launch the given scenarios and the
conformance battery make, in parallel worker processes on this GPU (`tools.warm`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from perfsuite.commands import battery_arguments
from perfsuite.core.console import number_at_least

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
    from perfsuite.tools import warm

    return warm.run(args)
