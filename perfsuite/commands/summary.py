"""`perfsuite summary RESULTS...`: a run's text summary (markdown), and with --csv its rows, every column."""

from __future__ import annotations

import argparse
from pathlib import Path

from perfsuite.commands import UsageError
from perfsuite.core.exits import EXIT_OK

NAME = "summary"
HELP = "a run's text summary: medians per case, the fastest variants, speedups, Triton targets, tuned plans"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="results.csv / .json / .jsonl or run folders")
    parser.add_argument("--out", help="write the markdown here too")
    parser.add_argument("--csv", help="also write its rows, every column on every row (the run's too)")
    parser.add_argument("--tuned", help="a tuned-plan table to add (default: tuned.json beside the results)")


def run(args: argparse.Namespace) -> int:
    from perfsuite.report.summary import summary_markdown, tuned_markdown
    from perfsuite.results.run import load_run

    first = Path(args.results[0])
    tuned = Path(args.tuned) if args.tuned else (first if first.is_dir() else first.parent) / "tuned.json"
    try:
        loaded = load_run(args.results)
        text = summary_markdown(loaded.frame, notes=loaded.notes)
        if args.tuned or tuned.exists():
            text += tuned_markdown(tuned)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise UsageError(str(exc)) from None
    print(text)
    if args.csv:
        loaded.frame.to_csv(args.csv, index=False)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return EXIT_OK
