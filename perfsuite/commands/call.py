"""`perfsuite call SCENARIO CASE_ID`: one case's call inside its NVTX range (ncu, nsys, rocprofv3)."""

from __future__ import annotations

import argparse
import sys

from perfsuite.commands import scenario_arguments, scenario_of
from perfsuite.core.console import number_at_least
from perfsuite.core.exits import EXIT_OK, EXIT_SKIPPED

NAME = "call"
HELP = "run one case's call inside its NVTX/ROCTx range perfsuite.<variant>.<path> (for ncu, nsys, rocprofv3)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser)
    parser.add_argument("case_id", help="a case_id as `perfsuite list` prints it")
    parser.add_argument(
        "--calls", type=number_at_least(1), default=1, help="calls inside the range (default 1)"
    )
    parser.add_argument(
        "--roctx-region",
        action="store_true",
        help="also wrap the calls in roctxProfilerResume/Pause (rocprofv3 --selected-regions)",
    )


def run(args: argparse.Namespace) -> int:
    from perfsuite.tools.profiling import call_case

    reason = call_case(scenario_of(args), args.case_id, calls=args.calls, roctx_region=args.roctx_region)
    if reason:
        print(f"perfsuite: skipped: {reason}", file=sys.stderr)
        return EXIT_SKIPPED
    return EXIT_OK
