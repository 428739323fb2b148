"""The tensor-parallel worker, one per rank under torchrun: every rank runs each case; rank 0 appends one row
per case. A case that fails becomes an error row on every rank, and the sweep goes on.

    torchrun --nproc-per-node N -m perfsuite.cases.tensor_parallel SCENARIO --tp N --out FILE.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from perfsuite.cases.protocol import run_case
from perfsuite.cases.tensor_parallel.tp_runner import TensorParallelRunner
from perfsuite.core import settings
from perfsuite.measure.device import detect
from perfsuite.measure.environment import environment
from perfsuite.results.write import ResultsLog
from perfsuite.scenario.load import ScenarioError, expand, load
from perfsuite.variants.tensor_parallel import tp_base

EXIT_OK, EXIT_USAGE = 0, 2
WHO = "perfsuite.cases.tensor_parallel"  # the launcher finds this worker's own errors in the log by it


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (under torchrun). 0: done (failing cases are error rows); 2: bad input."""
    p = argparse.ArgumentParser(prog=f"python -m {WHO}", description=__doc__.splitlines()[0])
    p.add_argument("scenario", help="scenario file (.toml)")
    p.add_argument("--tp", type=int, required=True, help="ranks; must equal WORLD_SIZE")
    p.add_argument("--out", required=True, help="rows are appended here by rank 0 (JSON lines)")
    p.add_argument("--case-ids", help="JSON list of case ids: run only these (default: every tp == N case)")
    p.add_argument("--env", help="JSON object of environment columns for every row (default: measured)")
    p.add_argument("--device", help="auto | cpu | cuda (default: the scenario's)")
    args = p.parse_args(argv)
    try:
        scenario = load(args.scenario)
        ids = set(json.loads(Path(args.case_ids).read_text())) if args.case_ids else None
    except (ScenarioError, OSError, ValueError) as exc:
        print(f"{WHO}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    group = tp_base.init(args.device or scenario.device)
    try:
        if group.size != args.tp:
            print(f"{WHO}: --tp {args.tp} but WORLD_SIZE is {group.size}", file=sys.stderr)
            return EXIT_USAGE
        todo = [c for c in expand(scenario) if c.tp == args.tp and (ids is None or c.case_id in ids)]
        info = detect(str(group.device))
        env: dict[str, object] = json.loads(Path(args.env).read_text()) if args.env else {}
        # the launching run's threads (its --threads included), else the scenario's setting
        threads = int(env["threads"]) if "threads" in env else (todo[0].timing.threads if todo else 1)
        settings.apply_threads(threads)
        if group.rank == 0 and not env:
            env = environment(info, scenario.name)
        runner, log = TensorParallelRunner(group, info, env), ResultsLog(Path(args.out))
        for i, case in enumerate(todo, 1):
            row = run_case(runner, case)
            if group.rank == 0:
                log.append(row)
                figure = f"{row['median_us']:.1f} us" if row["status"] == "ok" else row["reason"]
                print(f"[{i}/{len(todo)}] {case.case_id}: {row['status']} {figure}", flush=True)
        group.barrier()  # every rank is done before the group goes away
        return EXIT_OK
    finally:
        tp_base.close()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: gloo's worker threads can abort the process while it finalises, even after
    # destroy_process_group (pytorch/pytorch#179291); every row is already written and flushed.
    os._exit(code)
