"""`perfsuite variants`: the registered selectors, their accuracy claim and NaN policy, one line each."""

from __future__ import annotations

import argparse

from perfsuite.core.exits import EXIT_OK

NAME, HELP = "variants", "list the registered variants"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from perfsuite import variants

    for name in [*variants.names(), *variants.external_names()]:  # and installed entry points
        try:
            v = variants.get(name)
        except variants.ExternalSelectorError as exc:
            print(f"{name:22s} ERROR    {exc}")
            continue
        print(f"{name:22s} {v.accuracy:8s} NaN {v.nan:11s} {v.summary}")
    return EXIT_OK
