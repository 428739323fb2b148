"""`perfsuite check SELECTOR...`: the conformance battery on each SELECTOR (a built-in variant,
package.module:function or a perfsuite.selectors entry point) on this device: misaligned, tiny, tile-edge
and models' vocabularies (k up to V, or 16), poisoned row padding, offset data pointers, NaN/inf rows (by
the declared NaN policy), bit-level float patterns, grammar masks, ties, huge values, B = 0, int64
addressing, every declared dtype, on a GPU a graph capture and a side stream. Each call is made twice
(bitwise repeat), and some cases' rows again in batches of 1 to 4096 rows (the batch axis). One row per
case, dtype and k: pass, FAIL with what went wrong, or skip with the reason. Exit 1 on any failure, 0
otherwise, 2 when a selector does not load."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from perfsuite.commands import (
    EXIT_FINDING,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    battery_arguments,
    print_caveats,
)

NAME = "check"
HELP = "the conformance battery on selectors: edge shapes, non-finite rows, ties, dtypes, graphs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "selector", nargs="+", help="variant name, package.module:function or entry-point name"
    )
    parser.add_argument(
        "--device", default="auto", help="auto (the first GPU, else the CPU), cpu, cuda, cuda:N"
    )
    parser.add_argument("--csv", help="write every row (all selectors) as CSV")
    battery_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import torch

    from perfsuite import variants
    from perfsuite.correctness import conformance
    from perfsuite.measure.device import resolve_device

    try:
        device = resolve_device(args.device)
        dtypes = [conformance.battery_dtype(name) for name in args.dtype] or None
        conformance.select(args.case, quick=args.quick)
    except (RuntimeError, ValueError) as exc:
        raise UsageError(f"check: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"check: --device {args.device}: no CUDA or ROCm device here")
    for name in args.selector:  # every selector loads before any runs: a bad name is one line, exit 2
        try:
            variants.get(name)
        except (KeyError, variants.ExternalSelectorError) as exc:
            raise UsageError(str(exc.args[0])) from None
    records: list[dict] = []
    try:
        for name in args.selector:
            start = len(records)
            records += conformance.rows(name, device, cases=args.case, dtypes=dtypes, quick=args.quick)
            print(conformance.console(conformance.frame(records[start:])))
    except KeyboardInterrupt:
        _write(conformance.frame(records), args.csv)
        print(f"interrupted: {len(records)} rows judged so far", file=sys.stderr)
        return EXIT_INTERRUPTED
    table = conformance.frame(records)
    _write(table, args.csv)
    print_caveats()
    return EXIT_FINDING if (table["verdict"] == "FAIL").any() else EXIT_OK


def _write(table: pd.DataFrame, path: str | None) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
        print(f"  csv  {path}")
