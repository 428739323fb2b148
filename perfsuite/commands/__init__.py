"""The command line's commands, one module each (NAME, HELP, `add_arguments(parser)`, `run(args)` -> exit
status: `core.exits`), and what several share: the usage error, the scenario options and their overrides,
where a run writes by default, and the caveats printed after writing files."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd

from perfsuite.core.console import number_at_least
from perfsuite.core.exits import EXIT_FINDING, EXIT_INTERRUPTED, EXIT_OK  # noqa: F401 (check, compare)
from perfsuite.scenario.load import SWEEP_CHECKS, Scenario, load


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def scenario_arguments(
    parser: argparse.ArgumentParser, *, out: str | None = None, device: bool = True, threads: bool = True
) -> None:
    """The scenario file and the options that override it: `out` (the --out help), --device, --threads."""
    parser.add_argument("scenario", help="a scenario file (scenarios/*.toml; docs/scenarios.md)")
    if out:
        parser.add_argument("--out", help=out)
    if device:
        parser.add_argument("--device", help="override the scenario's device (auto, cpu, cuda, cuda:N)")
    if threads:
        parser.add_argument(
            "--threads",
            type=number_at_least(0),
            help="torch CPU threads (default: the scenario's [timing] threads, else 1; 0: torch's default)",
        )


def battery_arguments(parser: argparse.ArgumentParser) -> None:
    """The conformance battery's selection (`check`, and `warm --check`): --case, --dtype, --quick."""
    parser.add_argument("--case", action="append", default=[], help="only cases matching this glob (repeat)")
    parser.add_argument("--dtype", action="append", default=[], help="only this logits dtype (repeat)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a subset for CI: two of the large vocabularies, V 1 and 2 of the tiny ones, two offsets, no "
        "split-crossing ties",
    )


def scenario_of(args: argparse.Namespace) -> Scenario:
    """The scenario file with the command line's overrides (--device, --threads, --variant)."""
    scenario = load(args.scenario)
    if getattr(args, "device", None):
        scenario = dataclasses.replace(scenario, device=args.device)
    if getattr(args, "threads", None) is not None:
        timing = dataclasses.replace(scenario.timing, threads=args.threads)
        scenario = dataclasses.replace(scenario, timing=timing)
    if getattr(args, "variant", None):
        chosen = SWEEP_CHECKS["variants"]("the command line", "--variant", args.variant)
        sweeps = tuple(dataclasses.replace(sweep, variants=chosen) for sweep in scenario.sweeps)
        scenario = dataclasses.replace(scenario, sweeps=sweeps, extra=_draft_variants(scenario, chosen))
    return scenario


def _draft_variants(scenario: Scenario, chosen: tuple[str, ...]) -> dict:
    """The scenario's tables with `--variant` in place of each `[draft]` table's variants, checked now."""
    from perfsuite.cases.draft.draft_table import parse_draft

    raw = scenario.extra.get("draft")
    if raw is None:
        return scenario.extra
    tables = [{**table, "variants": list(chosen)} for table in (raw if isinstance(raw, list) else [raw])]
    replaced = tables if isinstance(raw, list) else tables[0]
    parse_draft(replaced, f"{scenario.source} with --variant")
    return {**scenario.extra, "draft": replaced}


def default_out(name: str, suffix: str = "") -> Path:
    """reports/<scenario>-<backend>-<time><suffix>."""
    from perfsuite.measure.device import detect

    return Path("reports") / f"{name}-{detect().backend}-{datetime.now().strftime('%Y%m%d-%H%M%S')}{suffix}"


def print_caveats() -> None:
    """What a reader of the files must know: a simulated GPU's figures, a report without its plots."""
    from perfsuite import simulated_gpu
    from perfsuite.report import plots_available

    profile = simulated_gpu.active()
    if profile:
        print(
            f"perfsuite: {profile.name}: a GPU simulated on the CPU ({simulated_gpu.ENV}={profile.key}); "
            "its times are host times, not GPU measurements",
            file=sys.stderr,
        )
    missing = plots_available()
    if missing:
        print(f"perfsuite: report written without plots: {missing}", file=sys.stderr)


def status_counts(what: str, rows: pd.DataFrame) -> str:
    """`what` (a count: "16 cases"), then how many rows of each status: "16 cases: 8 ok, 8 skipped"."""
    counts = rows["status"].value_counts().to_dict() if len(rows) and "status" in rows else {}
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"{what}: {shown}" if shown else what
