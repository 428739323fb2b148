"""`perfsuite list SCENARIO`: the cases a scenario expands to, every kind's."""

from __future__ import annotations

import argparse

import pandas as pd

from perfsuite.core import kinds
from perfsuite.core.exits import EXIT_OK
from perfsuite.scenario.load import load

NAME, HELP = "list", "print the cases a scenario expands to"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario")


def run(args: argparse.Namespace) -> int:
    scenario = load(args.scenario)
    every = {kind.name: kind.cases_of(scenario) for kind in kinds.KINDS}
    counted = ", ".join(kinds.get(name).count(len(cases)) for name, cases in every.items())
    print(f"{scenario.source}: {scenario.name}: {counted}")
    print(f"timing: {scenario.timing}, inputs: {scenario.inputs}")
    fields = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits", "tp")
    for cases in every.values():
        table = pd.DataFrame(
            [{"case_id": c.case_id, **{k: getattr(c, k) for k in fields if hasattr(c, k)}} for c in cases]
        )
        if len(table):
            print(table.to_string(index=False))
    return EXIT_OK
