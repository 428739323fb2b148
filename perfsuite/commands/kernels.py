"""`perfsuite kernels SCENARIO`: for every (dtype, batch, vocab, topk) of the scenario, the launch plan
triton_auto picks on each target, compiled ahead of time with the Triton compiler (no GPU needed; Triton's
bundled ptxas and cuobjdump for NVIDIA). One row per distinct kernel; exit 1 when one does not compile or
spills registers."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from perfsuite.commands import UsageError
from perfsuite.core.console import number_at_least
from perfsuite.core.exits import EXIT_FINDING, EXIT_INTERRUPTED, EXIT_OK

NAME = "kernels"
HELP = (
    "compile the Triton kernels a scenario's shapes launch for GPU targets, without a GPU: registers, "
    "spills, shared memory, occupancy, load width"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario")
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        help="sm_80, sm_90, sm_100, gfx90a, gfx942, gfx950 (repeat; default sm_90 and gfx942)",
    )
    parser.add_argument("--csv", help="write every (target, shape, launch) row as CSV")
    parser.add_argument(
        "--asm", help="write each distinct kernel's TTGIR, PTX and SASS (NVIDIA) or AMDGCN here"
    )
    parser.add_argument(
        "--jobs", type=number_at_least(1), help="compile in this many processes (default: the CPUs)"
    )


def run(args: argparse.Namespace) -> int:
    from perfsuite import kernels
    from perfsuite.core.dtypes import dtype_of
    from perfsuite.kernels import resources
    from perfsuite.scenario.load import expand, load

    targets = list(dict.fromkeys(args.target)) or list(resources.DEFAULT_TARGETS)
    unknown = sorted(set(targets) - set(resources.TARGETS))
    if unknown:
        raise UsageError(f"unknown target {', '.join(unknown)}; known: {', '.join(resources.TARGETS)}")
    if not kernels.triton_installed():
        raise UsageError("`kernels` compiles the Triton kernels: install triton")
    if kernels.interpreting():
        if "triton" in sys.modules:
            raise UsageError("`kernels` compiles for GPUs: unset TRITON_INTERPRET")
        os.environ.pop(kernels.INTERPRET_ENV)  # Triton not imported yet: compile, do not interpret
    shapes = {(dtype_of(c.dtype), c.batch, c.vocab, c.topk) for c in expand(load(args.scenario))}
    table, interrupted = resources.compile_report(
        shapes, targets, Path(args.asm) if args.asm else None, jobs=args.jobs
    )
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
    if interrupted:
        print(f"interrupted: {len(table)} launches compiled, written", file=sys.stderr)
        return EXIT_INTERRUPTED
    distinct = resources.distinct_kernels(table)
    print(f"{len(shapes)} shapes, {len(distinct)} distinct kernels compiled")
    print(distinct.to_string(index=False))
    bad = resources.problems(distinct)
    for row in bad.itertuples():
        problem = row.error or f"spills {row.spill_bytes} bytes per thread"
        print(f"perfsuite: {row.target} {row.kernel} {row.dtype} {row.constants}: {problem}", file=sys.stderr)
    return EXIT_FINDING if len(bad) else EXIT_OK
