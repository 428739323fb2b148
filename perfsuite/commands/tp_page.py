"""`perfsuite tp-page RESULTS...`: the tensor-parallel comparison of result files; with --out, its page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfsuite.commands import UsageError
from perfsuite.core.exits import EXIT_OK

NAME, HELP = "tp-page", "the tensor-parallel comparison of result files: a table, with --out a page"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="results.jsonl / tp*.jsonl / results.csv or run folders")
    parser.add_argument("--out", help="write a standalone HTML page here")


def run(args: argparse.Namespace) -> int:
    from perfsuite.report import tp_section
    from perfsuite.report.page import render_page
    from perfsuite.results.run import load_run

    try:
        frame = load_run(args.results).frame
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(frame.groupby(["tp", "status"]).size().unstack(fill_value=0).to_string())
    for row in frame[frame["verdict"] == "fail"].itertuples():
        print(f"PARITY FAIL {row.case_id}: {row.problem}")
    rows = tp_section.tp_rows(frame)
    print(tp_section.comparison(rows).to_string(index=False))
    if args.out:  # plotly.js inlined (no network needed to view it); without plotly a note on the plots
        page = render_page(
            tp_section.PAGE_TITLE,
            f"{len(rows)} measured tensor-parallel cases",
            [tp_section.section(frame)],
            tp_section.REPORT_AGAIN,
        )
        Path(args.out).write_text(page, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return EXIT_OK
