"""`perfsuite run SCENARIO`: every case of a scenario into a run folder, then its tables and report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from perfsuite.commands import (
    UsageError,
    default_out,
    print_caveats,
    scenario_arguments,
    scenario_of,
    status_counts,
)
from perfsuite.core import kinds
from perfsuite.core.exits import EXIT_FINDING, EXIT_INTERRUPTED, EXIT_OK

NAME, HELP = "run", "run a scenario: results.csv/json, edge_cases.csv, report.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, out="output folder (default reports/<scenario>-<backend>-<time>)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--only", help="run only the cases whose case_id matches this glob")
    parser.add_argument(
        "--variant",
        action="append",
        help="run these variants in place of each sweep's and [draft] table's (repeat): a built-in name, "
        "package.module:function or a perfsuite.selectors entry point",
    )
    parser.add_argument("--label", help="the run's label in its rows and reports (default: start time, host)")
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="run only shard I (0-based) of N of the cases, into OUT/shard-I-of-N (a job array's index: "
        "Slurm $SLURM_ARRAY_TASK_ID, Kubernetes $JOB_COMPLETION_INDEX); `report OUT` and `compare` merge "
        "them",
    )
    parser.add_argument(
        "--counters",
        action="store_true",
        help="also measure each case's HBM bytes with hardware counters (ncu on NVIDIA, rocprofv3 on AMD): "
        "one profiled subprocess per case, slow",
    )


def run(args: argparse.Namespace) -> int:
    from perfsuite.report.summary import console_table
    from perfsuite.results import sweep_shards
    from perfsuite.results.run_dir import RunRefused
    from perfsuite.sweep import run_scenario

    if args.resume and not args.out:
        raise UsageError("--resume needs --out (the folder of the run to continue)")
    scenario = scenario_of(args)
    out_dir = Path(args.out) if args.out else default_out(scenario.name)
    try:
        shard = sweep_shards.parse(args.shard) if args.shard is not None else None
    except sweep_shards.ShardError as exc:
        raise UsageError(str(exc)) from None
    if shard is not None:  # every shard of a job array can take the same --out
        out_dir = out_dir / shard.folder_name
    try:
        outcome = run_scenario(
            scenario,
            out_dir,
            resume=args.resume,
            progress=not args.no_progress,
            counters=args.counters,
            only=args.only,
            label=args.label,
            shard=shard,
        )
    except RunRefused as exc:
        raise UsageError(str(exc)) from None
    frame = outcome.run.frame
    table = console_table(frame)
    if table:
        print(table)
    print(status_counts(f"{len(frame)} case{'' if len(frame) == 1 else 's'}", frame))
    for kind in kinds.KINDS:  # the kinds with a table of their own: "2 draft cases: 2 ok", "40 ... rows"
        if kind.table_file != kinds.KINDS[0].table_file and len(rows := outcome.run.rows(kind)):
            statuses = "status" in rows and rows["status"].notna().any()
            print(status_counts(kind.count(len(rows), "case" if statuses else "row"), rows))
    for name, path in outcome.files.items():
        print(f"  {name:10s} {path}")
    for note in outcome.notes:
        print(f"perfsuite: warning: {note}", file=sys.stderr)
    print_caveats()
    if args.counters:
        _print_counters(frame)
    if outcome.interrupted:
        print("interrupted: what was measured is written; `run --resume` continues", file=sys.stderr)
        return EXIT_INTERRUPTED
    failures = outcome.parity_failures
    if len(failures):
        print(f"PARITY FAILURE: {len(failures)} case(s) failed parity:", file=sys.stderr)
        for row in failures.head(20).itertuples():
            print(f"  {row.case_id}: {row.problem}", file=sys.stderr)
        return EXIT_FINDING
    return EXIT_OK


def _print_counters(frame: pd.DataFrame) -> None:
    from perfsuite.results.columns import FLAG_TOLERANCE, flagged

    measured = frame[frame["bytes_measured"].notna()]
    if measured.empty:
        reasons = frame["counters"].dropna()
        print(f"counters: nothing measured ({reasons.iloc[0] if len(reasons) else 'no ok case'})")
        return
    off = measured[flagged(measured)]
    over = f"{len(off)} over {100 * FLAG_TOLERANCE:.0f} % off the model"
    print(f"counters: {len(measured)} cases measured, {over}")
    for row in off.head(10).itertuples():
        print(f"  {row.case_id}: measured / model = {row.bytes_measured_vs_model:.3f}")
