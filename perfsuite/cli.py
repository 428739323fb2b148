"""Command line: `perfsuite list | run | report | variants`.

Exit status: 0 done; 1 an exact variant failed parity (everything is written first); 2 bad input
(a malformed scenario or results file, an unknown variant) with one message and no traceback;
130 interrupted (what was measured is written).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd

from perfsuite import variants
from perfsuite.scenario import ScenarioError, expand, load

EXIT_OK, EXIT_PARITY, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _cmd_list(args: argparse.Namespace) -> int:
    scenario = load(args.scenario)
    cases = expand(scenario)
    table = pd.DataFrame(
        [
            {
                "case_id": c.case_id,
                "variant": c.variant,
                "path": c.path,
                "dtype": c.dtype,
                "vocab": c.vocab,
                "batch": c.batch,
                "topk": c.topk,
                "logits": c.logits,
            }
            for c in cases
        ]
    )
    print(
        f"{scenario.source}: {scenario.name}: {len(cases)} cases "
        f"(timing: {scenario.timing}, inputs: {scenario.inputs})"
    )
    if len(table):
        print(table.to_string(index=False))
    return EXIT_OK


def _default_out(name: str) -> Path:
    from perfsuite.device import detect

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{name}-{detect().backend}-{stamp}"


def _cmd_run(args: argparse.Namespace) -> int:
    from perfsuite.runner import run_scenario

    scenario = load(args.scenario)
    if args.device:
        scenario = dataclasses.replace(scenario, device=args.device)
    out_dir = Path(args.out) if args.out else _default_out(scenario.name)
    outcome = run_scenario(scenario, out_dir, resume=args.resume, progress=not args.no_progress)
    frame = outcome.frame
    counts = frame["status"].value_counts().to_dict()
    print(f"{len(frame)} cases: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    for name, path in outcome.files.items():
        print(f"  {name:10s} {path}")
    if outcome.interrupted:
        print(
            "interrupted: what was measured is written; `perfsuite run --resume` continues", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    failures = outcome.exact_failures
    if len(failures):
        print(f"PARITY FAILURE: {len(failures)} case(s) of exact variants failed:", file=sys.stderr)
        for row in failures.head(20).itertuples():
            print(f"  {row.case_id}: {row.problem}", file=sys.stderr)
        return EXIT_PARITY
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from perfsuite.report import build_report, load_many

    try:
        frame = load_many([Path(p) for p in args.results])
        edges = pd.read_csv(args.edge_cases) if args.edge_cases else None
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out) if args.out else Path(args.results[0]).with_name("report.html")
    print(build_report(frame, out, edge_cases=edges, title=args.title))
    return EXIT_OK


def _cmd_variants(args: argparse.Namespace) -> int:
    for name in variants.names():
        v = variants.get(name)
        print(f"{name:14s} {v.accuracy:8s} {v.summary}")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perfsuite", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="print the cases a scenario expands to")
    s.add_argument("scenario")
    s.set_defaults(func=_cmd_list)

    s = sub.add_parser("run", help="run a scenario: results.csv/json, edge_cases.csv, report.html")
    s.add_argument("scenario")
    s.add_argument("--out", help="output folder (default reports/<scenario>-<backend>-<time>)")
    s.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    s.add_argument("--device", help="override the scenario's device (auto, cpu, cuda, cuda:N)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_run)

    s = sub.add_parser("report", help="rebuild the HTML report from results files")
    s.add_argument("results", nargs="+", help="results.csv / .json / .jsonl or pytest-benchmark JSON")
    s.add_argument("--out", help="HTML file (default: report.html beside the first results file)")
    s.add_argument("--edge-cases", help="edge_cases.csv to include")
    s.add_argument("--title", default="perfsuite report")
    s.set_defaults(func=_cmd_report)

    s = sub.add_parser("variants", help="list the registered variants")
    s.set_defaults(func=_cmd_variants)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "resume", False) and not args.out:
        print("perfsuite: --resume needs --out (the folder of the run to continue)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except (ScenarioError, UsageError) as exc:
        print(f"perfsuite: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
