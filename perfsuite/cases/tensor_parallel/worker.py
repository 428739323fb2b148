"""The tensor-parallel worker, one per rank under torchrun: every rank runs each case
(`runner.TensorParallelRunner`); rank 0 writes one row per case.

    torchrun --nproc-per-node N -m perfsuite.cases.tensor_parallel SCENARIO --tp N --out FILE.jsonl

A case that fails becomes an error row on every rank, and the sweep goes on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfsuite.cases.tensor_parallel import tp_runner
from perfsuite.cases.tensor_parallel.tp_runner import TensorParallelRunner
from perfsuite.core import settings
from perfsuite.measure.device import detect
from perfsuite.measure.environment import environment
from perfsuite.results.write import ResultsLog
from perfsuite.scenario.load import Case, ScenarioError
from perfsuite.variants.tensor_parallel import group
from perfsuite.variants.tensor_parallel.group import Group

EXIT_OK, EXIT_USAGE = 0, 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m perfsuite.cases.tensor_parallel", description=__doc__.splitlines()[0]
    )
    p.add_argument("scenario", help="scenario file (.toml)")
    p.add_argument("--tp", type=int, required=True, help="ranks; must equal WORLD_SIZE")
    p.add_argument("--out", required=True, help="rows are appended here by rank 0 (JSON lines)")
    p.add_argument("--case-ids", help="JSON list of case ids: run only these (default: every tp == N case)")
    p.add_argument("--env", help="JSON object of environment columns for every row (default: measured)")
    p.add_argument("--device", help="auto | cpu | cuda (default: the scenario's)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (under torchrun). 0: done (failing cases are error rows); 2: bad input."""
    args = parse_args(argv)
    try:
        scenario = tp_runner.load(args.scenario)
        ids = json.loads(Path(args.case_ids).read_text()) if args.case_ids else None
    except (ScenarioError, OSError, ValueError) as exc:
        print(f"perfsuite.cases.tensor_parallel: {exc}", file=sys.stderr)
        return EXIT_USAGE
    g = group.init_from_env(args.device or scenario.device)
    try:
        if g.size != args.tp:
            print(
                f"perfsuite.cases.tensor_parallel: --tp {args.tp} but WORLD_SIZE is {g.size}", file=sys.stderr
            )
            return EXIT_USAGE
        return _sweep(g, scenario.name, tp_runner.select(scenario, args.tp, ids), args)
    finally:
        group.close()


def _sweep(g: Group, name: str, todo: list[Case], args: argparse.Namespace) -> int:
    info = detect(str(g.device))
    env: dict[str, object] = json.loads(Path(args.env).read_text()) if args.env else {}
    # the launching run's threads (its --threads included), else the scenario's setting
    threads = int(env["threads"]) if "threads" in env else (todo[0].timing.threads if todo else 1)
    settings.apply_threads(threads)
    if g.rank == 0 and not env:
        env = environment(info, name)
    log = ResultsLog(Path(args.out)) if g.rank == 0 else None
    runner = TensorParallelRunner(g, info, env)
    for i, case in enumerate(todo, 1):
        row = runner.run(case)
        if log is not None:
            log.append(row)
            figure = f"{row['median_us']:.1f} us" if row["status"] == "ok" else row["reason"]
            print(f"[{i}/{len(todo)}] {case.case_id}: {row['status']} {figure}", flush=True)
    g.barrier()  # every rank is done before the group goes away
    return EXIT_OK
