"""`perfsuite report RESULTS...`: the HTML report of one run, its shards, or several runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from perfsuite.commands import UsageError, print_caveats
from perfsuite.core.exits import EXIT_OK

NAME, HELP = "report", "rebuild the HTML report from results files"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        nargs="+",
        help="results.csv / .json / .jsonl, pytest-benchmark JSON, run folders, or the --out of a sharded "
        "run (or its shard folders): the shards are merged into one run",
    )
    parser.add_argument("--out", help="HTML file (default: report.html beside the first results file)")
    parser.add_argument("--edge-cases", help="edge_cases.csv to include (default: the one beside the run's)")
    parser.add_argument("--draft", help="draft.csv to include (default: the one beside a single run's)")
    parser.add_argument("--title", default="perfsuite report")


def run(args: argparse.Namespace) -> int:
    from perfsuite.report import build_report
    from perfsuite.results import sweep_shards
    from perfsuite.results.run import load_run

    try:
        loaded = load_run(args.results, edge_cases=args.edge_cases, draft=args.draft)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    first = Path(args.results[0])
    folder = first if first.is_dir() else first.parent
    if sweep_shards.is_shard(folder):  # a shard given alone or with its siblings: beside them
        folder = folder.parent
    print(build_report(loaded, Path(args.out) if args.out else folder / "report.html", title=args.title))
    print_caveats()
    return EXIT_OK
