"""`perfsuite compare BASE NEW`: the cases of two runs matched and judged; exit 1 on a regression."""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path

from perfsuite.commands import EXIT_FINDING, EXIT_OK, UsageError, print_caveats
from perfsuite.core.console import number_at_least

NAME, HELP = "compare", "compare two results files case by case; exit 1 on a regression"
BEFORE = (
    "Match the cases of BASE and NEW (variant, path, dtype, vocab, batch, topk, logits, l2, tp, device) and "
    "judge each case's time by one witness: where both runs sampled the same in-turn reference, its time "
    "over the reference's round by round; otherwise its own samples (samples.jsonl beside a run's results). "
    "Each case gets the first row that holds:"
)
AFTER = (
    "Each variant, and each variant within one value of a case key (path, dtype, topk, vocab, batch, logits, "
    "l2, tp), is judged too, by the same table, from its cases' shifts pooled (docs/comparing.md). Apart "
    "from the table, a parity verdict that got worse (pass < inexact < fail) or a case that ran in the base "
    "and errors now fails too. Exit 1 on a slower case, variant or group, or such a check; 2 on unreadable "
    "input or no case in common; 0 otherwise, which promises only this: nothing was confirmed slower. A "
    "case or group that cannot tell at the threshold may have moved by up to its noise (the summary says "
    "how many, and the thresholds they could be judged at). Inputs: results.csv/.json/.jsonl, a run "
    "folder, a sharded run's folder or pytest-benchmark JSON."
)


def parse_threshold(text: str) -> float:
    """'5%' or '5' -> 0.05; '0.05' -> 0.05 (a bare number below 1 is a fraction)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", str(text))
    if not match:
        raise ValueError(
            f"--fail-on: expected a percentage such as 5% or a fraction such as 0.05, got {text!r}"
        )
    value = float(match.group(1))
    fraction = value / 100 if match.group(2) or value >= 1 else value
    if not 0 < fraction < 10:
        raise ValueError(f"--fail-on: {text!r} is not a usable threshold")
    return fraction


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from perfsuite.compare.rule import DECISION_TABLE

    parser.description = f"{textwrap.fill(BEFORE, 100)}\n\n{DECISION_TABLE}\n\n{textwrap.fill(AFTER, 100)}"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("base", help="results of the reference run")
    parser.add_argument("new", help="results of the run to judge")
    parser.add_argument(
        "--fail-on", default="5%", help="time regression threshold: 5%%, 5 or 0.05 (default 5%%)"
    )
    parser.add_argument("--out", help="write an HTML page (table and a plot of the shifts)")
    parser.add_argument(
        "--csv", help="write the matched cases (level case), then the variants and groups, as CSV"
    )
    parser.add_argument("--ignore-device", action="store_true", help="match cases across device names")
    parser.add_argument(
        "--limit", type=number_at_least(1), default=30, help="rows of the text table (failures always)"
    )


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from perfsuite.compare.match import KEYS, compare, load_side
    from perfsuite.report.compare_page import build_compare_page, text_table

    try:
        threshold = parse_threshold(args.fail_on)
        base, new = load_side(args.base), load_side(args.new)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    names = (Path(args.base).name, Path(args.new).name)
    names = (str(args.base), str(args.new)) if names[0] == names[1] else names
    result = compare(base, new, threshold, ignore_device=args.ignore_device, names=names)
    if result.table.empty:
        keys = ", ".join(k for k in KEYS if not (args.ignore_device and k == "device"))
        raise UsageError(f"{args.base} and {args.new} have no case in common (matched on {keys})")
    print(text_table(result, limit=args.limit))
    if args.out:
        print(f"  html {build_compare_page(result, args.out)}")
        print_caveats()
    if args.csv:
        levels = [result.table.assign(level="case"), result.groups]
        pd.concat(levels, ignore_index=True).to_csv(args.csv, index=False)
        print(f"  csv  {args.csv}")
    return EXIT_FINDING if result.failed else EXIT_OK
