"""`perfsuite profile SCENARIO`: a torch.profiler trace per case and a per-kernel table (kernels.csv)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfsuite.commands import default_out, scenario_arguments, scenario_of, status_counts
from perfsuite.core.console import number_at_least
from perfsuite.core.exits import EXIT_INTERRUPTED, EXIT_OK

NAME = "profile"
HELP = "a torch.profiler trace per case (TensorBoard layout) and a per-kernel table (kernels.csv)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, out="output folder (default reports/<scenario>-<backend>-<time>-profile)")
    parser.add_argument(
        "--calls", type=number_at_least(1), default=5, help="profiled calls per case (default 5)"
    )
    parser.add_argument("--only", help="profile only cases whose case_id matches this glob or substring")


def run(args: argparse.Namespace) -> int:
    from perfsuite.tools.profiling import profile_scenario, short_table

    scenario = scenario_of(args)
    out_dir = Path(args.out) if args.out else default_out(scenario.name, "-profile")
    outcome = profile_scenario(scenario, out_dir, calls=args.calls, only=args.only)
    cases = outcome.cases
    print(status_counts(f"{len(cases)} cases", cases))
    activity = cases["activity"].dropna() if "activity" in cases else []
    if len(activity) and activity.iloc[0].startswith("cpu"):
        print("CPU run: the tables show aten ops and host time, not device kernels")
    print(short_table(outcome))
    for row in cases[cases["status"] != "ok"].head(20).itertuples():
        print(f"  {row.status}: {row.case_id}: {row.reason}")
    for name, path in outcome.files.items():
        print(f"  {name:10s} {path}")
    print(
        f"  {'traces':10s} {out_dir}/<case>/*.pt.trace.json (tensorboard --logdir {out_dir}; ui.perfetto.dev)"
    )
    if outcome.interrupted:
        print("interrupted: the cases profiled so far are written", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK
