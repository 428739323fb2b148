"""`perfsuite tune SCENARIO`: every launch plan of the Triton kernels timed per shape on this GPU; the
fastest exact ones written as the device's tuned-plan table, which triton_auto then uses."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from perfsuite.commands import UsageError, scenario_arguments, scenario_of
from perfsuite.core.exits import EXIT_INTERRUPTED, EXIT_OK

NAME = "tune"
HELP = (
    "time every launch plan of the Triton kernels per shape of a scenario on this GPU; write the fastest "
    "exact ones as the device's tuned-plan table, which triton_auto then uses"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, out="table JSON (default perfsuite/kernels/tuned/<device>.json)")
    parser.add_argument("--csv", help="every candidate's times (default: the table's name with .csv)")


def run(args: argparse.Namespace) -> int:
    from perfsuite import kernels
    from perfsuite.core import settings
    from perfsuite.kernels import plan_table
    from perfsuite.measure.device import detect
    from perfsuite.scenario.load import expand
    from perfsuite.tools import tuning

    scenario = scenario_of(args)
    settings.apply_threads(scenario.timing.threads)
    info = detect(scenario.device)
    reason = kernels.availability(info.device)
    if reason:
        raise UsageError(f"`tune` times the Triton kernels: {reason}")
    out = Path(args.out) if args.out else plan_table.default_path(info)
    csv = Path(args.csv) if args.csv else out.with_suffix(".csv")
    shapes = tuning.shapes_of(expand(scenario))
    print(f"tuning {len(shapes)} shapes on {info.name} -> {out}")

    def write_as_it_goes(case, timed: list[tuning.TimedPlan], outcome: tuning.TuneOutcome) -> None:
        tuning.write_outcome(outcome, out, csv)
        usable = [t.median_us for t in timed if t.usable]
        best = f"{min(usable):.2f} us" if usable else "no exact candidate"
        print(
            f"  {case.dtype} B{case.batch} V{case.vocab} k{case.topk}: {len(timed)} candidates, best {best}"
        )

    try:
        outcome = tuning.tune(shapes, info, on_shape=write_as_it_goes)
    except KeyboardInterrupt:
        print(f"interrupted: the shapes tuned so far are in {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(pd.DataFrame(outcome.table.summary()).to_string(index=False))
    print(f"  table      {out}\n  candidates {csv}")
    if out.parent != plan_table.PACKAGED:
        print(
            f"triton_auto uses it where {plan_table.PLANS_ENV}={out} (or copy it into {plan_table.PACKAGED})"
        )
    return EXIT_OK
