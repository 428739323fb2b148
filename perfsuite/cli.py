"""Commands: `perfsuite list | run | report | profile | compare | call | kernels | tune | check | variants
| warm | summary | tp-page`.

Exit status (the same for every command):
  0    done
  1    a finding: a case failed parity (`run`, after writing everything: a wrong index, or an exact
       variant's probability off), a regression (`compare`), a kernel that does not compile or spills
       registers (`kernels`), a selector failing the conformance battery (`check`), a launch that
       failed (`warm`)
  2    bad input: a malformed scenario or results file, an unknown key, variant or target (one message)
  3    `call` on a case that cannot run here
  4    internal error: one line on stderr naming the file that holds the traceback
       (PERFSUITE_DEBUG=1: the traceback on stderr)
  124  `warm` stopped at its --budget with launches left
  130  interrupted by SIGINT or SIGTERM: what was measured so far is written first
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import tempfile
import textwrap
import traceback
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pandas as pd

from perfsuite import variants
from perfsuite.core import kinds
from perfsuite.core.console import first_line, interruptible, number_at_least
from perfsuite.scenario.load import SWEEP_CHECKS, Scenario, ScenarioError, expand, load

EXIT_OK, EXIT_PARITY, EXIT_USAGE, EXIT_SKIPPED, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_REGRESSION = EXIT_PROBLEM = EXIT_PARITY  # the other findings share status 1
EXIT_BUDGET = 124  # `warm` stopped at its --budget with launches left (perfsuite.tools.warm.EXIT_BUDGET)
DEBUG_ENV = "PERFSUITE_DEBUG"


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _cmd_list(args: argparse.Namespace) -> int:
    from perfsuite.cases.draft import expand_draft

    scenario = load(args.scenario)
    cases = expand(scenario)
    drafts = expand_draft(scenario)
    print(
        f"{scenario.source}: {scenario.name}: {len(cases)} cases, {len(drafts)} draft cases "
        f"(timing: {scenario.timing}, inputs: {scenario.inputs})"
    )
    kernel_columns = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits", "tp")
    for rows, columns in ((cases, kernel_columns), (drafts, ("variant", "path", "batch"))):
        table = pd.DataFrame([{"case_id": c.case_id, **{k: getattr(c, k) for k in columns}} for c in rows])
        if len(table):
            print(table.to_string(index=False))
    return EXIT_OK


def _default_out(name: str) -> Path:
    from perfsuite.measure.device import detect

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{name}-{detect().backend}-{stamp}"


def _scenario(args: argparse.Namespace):
    """The scenario file with the command line's overrides (--device, --threads)."""
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
    """The scenario's extra tables with `--variant` in place of each `[draft]` table's variants, checked
    now (a tensor-parallel name there is one line, exit 2)."""
    from perfsuite.cases.draft.draft_table import parse_draft

    raw = scenario.extra.get("draft")
    if raw is None:
        return scenario.extra
    tables = [{**table, "variants": list(chosen)} for table in (raw if isinstance(raw, list) else [raw])]
    replaced = tables if isinstance(raw, list) else tables[0]
    parse_draft(replaced, f"{scenario.source} with --variant")
    return {**scenario.extra, "draft": replaced}


def _cmd_run(args: argparse.Namespace) -> int:
    from perfsuite.report.summary import console_table
    from perfsuite.results.run_dir import RunRefused
    from perfsuite.sweep import run_scenario

    scenario = _scenario(args)
    out_dir = Path(args.out) if args.out else _default_out(scenario.name)
    shard = _shard(args.shard)
    if shard is not None:  # every shard of a job array can take the same --out
        out_dir = out_dir / shard.folder_name
    try:
        outcome = run_scenario(
            scenario,
            out_dir,
            resume=args.resume,
            progress=not args.no_progress,
            counters=args.counters,
            only=args.only,
            label=args.label,
            shard=shard,
        )
    except RunRefused as exc:
        raise UsageError(str(exc)) from None
    frame = outcome.run.frame
    table = console_table(frame)
    if table:
        print(table)
    print(f"{len(frame)} cases: {_status_counts(frame)}")
    for kind in kinds.KINDS[1:]:  # tensor-parallel and draft cases, and any other kind's
        rows = outcome.run.rows(kind)
        if len(rows) and kind.table_file != kinds.KINDS[0].table_file:
            print(f"{len(rows)} {kind.name.replace('_', ' ')} cases: {_status_counts(rows)}")
    for name, path in outcome.files.items():
        print(f"  {name:10s} {path}")
    for note in outcome.notes:
        print(f"perfsuite: warning: {note}", file=sys.stderr)
    _print_caveats()
    if args.counters:
        _print_counters(frame)
    if outcome.interrupted:
        print(
            "interrupted: what was measured is written; `perfsuite run --resume` continues", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    failures = outcome.parity_failures
    if len(failures):
        print(f"PARITY FAILURE: {len(failures)} case(s) failed parity:", file=sys.stderr)
        for row in failures.head(20).itertuples():
            print(f"  {row.case_id}: {row.problem}", file=sys.stderr)
        return EXIT_PARITY
    return EXIT_OK


def _shard(text: str | None):
    """`--shard I/N` as a `sweep_shards.Shard` (None without it); a bad value is a usage error."""
    from perfsuite.results import sweep_shards

    if text is None:
        return None
    try:
        return sweep_shards.parse(text)
    except sweep_shards.ShardError as exc:
        raise UsageError(str(exc)) from None


def _print_caveats() -> None:
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


def _status_counts(rows: pd.DataFrame) -> str:
    counts = rows["status"].value_counts().to_dict() if len(rows) else {}
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"


def _print_counters(frame: pd.DataFrame) -> None:
    from perfsuite.results.columns import FLAG_TOLERANCE, flagged

    measured = frame[frame["bytes_measured"].notna()]
    if measured.empty:
        reasons = frame["counters"].dropna()
        print(f"counters: nothing measured ({reasons.iloc[0] if len(reasons) else 'no ok case'})")
        return
    off = measured[flagged(measured)]
    print(
        f"counters: {len(measured)} cases measured, "
        f"{len(off)} over {100 * FLAG_TOLERANCE:.0f} % off the model"
    )
    for row in off.head(10).itertuples():
        print(f"  {row.case_id}: measured / model = {row.bytes_measured_vs_model:.3f}")


def _cmd_profile(args: argparse.Namespace) -> int:
    from perfsuite.tools.profiling import profile_scenario, short_table

    scenario = _scenario(args)
    out_dir = Path(args.out) if args.out else Path(f"{_default_out(scenario.name)}-profile")
    outcome = profile_scenario(scenario, out_dir, calls=args.calls, only=args.only)
    counts = outcome.cases["status"].value_counts().to_dict()
    print(f"{len(outcome.cases)} cases: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    activity = outcome.cases["activity"].dropna() if "activity" in outcome.cases else pd.Series(dtype=str)
    if len(activity) and activity.iloc[0].startswith("cpu"):
        print("CPU run: the tables show aten ops and host time, not device kernels")
    print(short_table(outcome))
    for row in outcome.cases[outcome.cases["status"] != "ok"].head(20).itertuples():
        print(f"  {row.status}: {row.case_id}: {row.reason}")
    for name, path in outcome.files.items():
        print(f"  {name:10s} {path}")
    print(
        f"  {'traces':10s} {out_dir}/<case>/*.pt.trace.json (tensorboard --logdir {out_dir}; ui.perfetto.dev)"
    )
    if outcome.interrupted:
        print("interrupted: the cases profiled so far are written", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _cmd_call(args: argparse.Namespace) -> int:
    from perfsuite.tools.profiling import call_case

    scenario = _scenario(args)
    reason = call_case(scenario, args.case_id, calls=args.calls, roctx_region=args.roctx_region)
    if reason:
        print(f"perfsuite: skipped: {reason}", file=sys.stderr)
        return EXIT_SKIPPED
    return EXIT_OK


def _compare_help() -> str:
    from perfsuite.compare.rule import DECISION_TABLE

    before = (
        "Match the cases of BASE and NEW (variant, path, dtype, vocab, batch, topk, logits, l2, tp, device) "
        "and judge each case's time by one witness: where both runs sampled the same in-turn reference, its "
        "time over the reference's round by round; otherwise its own samples (samples.jsonl beside a run's "
        "results). Each case gets the first row that holds:"
    )
    after = (
        "Apart from the table, a parity verdict that got worse (pass < inexact < fail) or a case that ran in "
        "the base and errors now fails too. Exit 1 on a slower case or such a check, 0 otherwise, 2 on "
        "unreadable input or no case in common. Inputs: results.csv/.json/.jsonl, a run folder, a sharded "
        "run's folder or pytest-benchmark JSON."
    )
    return f"{textwrap.fill(before, 100)}\n\n{DECISION_TABLE}\n\n{textwrap.fill(after, 100)}"


def _cmd_compare(args: argparse.Namespace) -> int:
    from perfsuite.compare.match import compare, load_side, parse_threshold
    from perfsuite.report.compare_page import build_compare_page, text_table

    try:
        threshold = parse_threshold(args.fail_on)
        base, new = load_side(args.base), load_side(args.new)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    names = (Path(args.base).name, Path(args.new).name)
    if names[0] == names[1]:
        names = (str(args.base), str(args.new))
    result = compare(base, new, threshold, ignore_device=args.ignore_device, names=names)
    if result.table.empty:
        raise UsageError(
            f"{args.base} and {args.new} have no case in common (matched on {', '.join(result_keys(args))})"
        )
    print(text_table(result, limit=args.limit))
    if args.out:
        print(f"  html {build_compare_page(result, args.out)}")
        _print_caveats()
    if args.csv:
        result.table.to_csv(args.csv, index=False)
        print(f"  csv  {args.csv}")
    return EXIT_REGRESSION if len(result.failures) else EXIT_OK


def result_keys(args: argparse.Namespace) -> list[str]:
    from perfsuite.compare.match import KEYS

    return [k for k in KEYS if not (args.ignore_device and k == "device")]


def _cmd_report(args: argparse.Namespace) -> int:
    from perfsuite.report import build_report
    from perfsuite.results import sweep_shards
    from perfsuite.results.run import load_run

    try:
        run = load_run(args.results, edge_cases=args.edge_cases, draft=args.draft)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    first = Path(args.results[0])
    folder = first if first.is_dir() else first.parent
    if sweep_shards.is_shard(folder):  # a shard given alone or with its siblings: beside them
        folder = folder.parent
    print(build_report(run, Path(args.out) if args.out else folder / "report.html", title=args.title))
    _print_caveats()
    return EXIT_OK


def _cmd_kernels(args: argparse.Namespace) -> int:
    from perfsuite import kernels
    from perfsuite.core.dtypes import dtype_of
    from perfsuite.kernels import resources

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
    cases = expand(load(args.scenario))
    shapes = {(dtype_of(c.dtype), c.batch, c.vocab, c.topk) for c in cases}
    asm = Path(args.asm) if args.asm else None
    table, interrupted = resources.compile_report(shapes, targets, asm, jobs=args.jobs)
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
    return EXIT_PROBLEM if len(bad) else EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    from perfsuite import kernels
    from perfsuite.core import settings
    from perfsuite.kernels import plan_table
    from perfsuite.measure.device import detect
    from perfsuite.tools import tuning

    scenario = _scenario(args)
    settings.apply_threads(scenario.timing.threads)
    info = detect(scenario.device)
    reason = kernels.availability(info.device)
    if reason:
        raise UsageError(f"`tune` times the Triton kernels: {reason}")
    out = Path(args.out) if args.out else plan_table.default_path(info)
    csv = Path(args.csv) if args.csv else out.with_suffix(".csv")
    shapes = tuning.shapes_of(expand(scenario))
    print(f"tuning {len(shapes)} shapes on {info.name} -> {out}")

    def write_as_it_goes(case, timed: list[tuning.TimedPlan], outcome: tuning.TuneOutcome) -> None:
        tuning.write_outcome(outcome, out, csv)
        usable = [t.median_us for t in timed if t.usable]
        best = f"{min(usable):.2f} us" if usable else "no exact candidate"
        shape = f"{case.dtype} B{case.batch} V{case.vocab} k{case.topk}"
        print(f"  {shape}: {len(timed)} candidates, best {best}")

    try:
        outcome = tuning.tune(shapes, info, on_shape=write_as_it_goes)
    except KeyboardInterrupt:
        print(f"interrupted: the shapes tuned so far are in {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(pd.DataFrame(outcome.table.summary()).to_string(index=False))
    print(f"  table      {out}\n  candidates {csv}")
    if out.parent != plan_table.PACKAGED:
        where = f"{plan_table.PLANS_ENV}={out} (or copy it into {plan_table.PACKAGED})"
        print(f"triton_auto uses it where {where}")
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from perfsuite.correctness import conformance
    from perfsuite.measure.device import resolve_device

    try:
        device = resolve_device(args.device)
        dtypes = [conformance.battery_dtype(name) for name in args.dtype] or None
        conformance.select(args.case, quick=args.quick)
    except (RuntimeError, ValueError) as exc:
        raise UsageError(f"check: {exc}") from None
    if device.type == "cuda" and not conformance.gpu_available():
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
        _write_check_csv(conformance.frame(records), args.csv)
        print(f"interrupted: {len(records)} rows judged so far", file=sys.stderr)
        return EXIT_INTERRUPTED
    table = conformance.frame(records)
    _write_check_csv(table, args.csv)
    _print_caveats()
    return EXIT_PROBLEM if (table["verdict"] == "FAIL").any() else EXIT_OK


def _write_check_csv(table: pd.DataFrame, path: str | None) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
        print(f"  csv  {path}")


def _cmd_variants(args: argparse.Namespace) -> int:
    for name in variants.names():
        v = variants.get(name)
        print(f"{name:22s} {v.accuracy:8s} NaN {v.nan:11s} {v.summary}")
    for name in variants.external_names():  # installed `perfsuite.selectors` entry points
        try:
            v = variants.get(name)
        except variants.ExternalSelectorError as exc:
            print(f"{name:22s} ERROR    {exc}")
            continue
        print(f"{name:22s} {v.accuracy:8s} NaN {v.nan:11s} {v.summary}")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="perfsuite",
        description=__doc__[: __doc__.index("\n\n")],
        epilog=__doc__[__doc__.index("Exit status") :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_CommandParser)

    s = sub.add_parser("list", help="print the cases a scenario expands to")
    s.add_argument("scenario")
    s.set_defaults(func=_cmd_list)

    s = sub.add_parser("run", help="run a scenario: results.csv/json, edge_cases.csv, report.html")
    s.add_argument("scenario")
    s.add_argument("--out", help="output folder (default reports/<scenario>-<backend>-<time>)")
    s.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    s.add_argument("--device", help="override the scenario's device (auto, cpu, cuda, cuda:N)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    _threads_option(s)
    s.add_argument("--only", help="run only the cases whose case_id matches this glob")
    s.add_argument(
        "--variant",
        action="append",
        help="run these variants in place of each sweep's and [draft] table's (repeat): a built-in name, "
        "package.module:function or a perfsuite.selectors entry point",
    )
    s.add_argument("--label", help="the run's label in its rows and reports (default: start time and host)")
    s.add_argument(
        "--shard",
        metavar="I/N",
        help="run only shard I (0-based) of N of the cases, into OUT/shard-I-of-N (a job array's index: "
        "Slurm $SLURM_ARRAY_TASK_ID, Kubernetes $JOB_COMPLETION_INDEX); `report OUT` and `compare` merge "
        "them",
    )
    s.add_argument(
        "--counters",
        action="store_true",
        help="also measure each case's HBM bytes with hardware counters (ncu on NVIDIA, rocprofv3 on AMD): "
        "one profiled subprocess per case, slow",
    )
    s.set_defaults(func=_cmd_run)

    s = sub.add_parser("report", help="rebuild the HTML report from results files")
    s.add_argument(
        "results",
        nargs="+",
        help="results.csv / .json / .jsonl, pytest-benchmark JSON, run folders, or the --out of a sharded "
        "run (or its shard folders): the shards are merged into one run",
    )
    s.add_argument("--out", help="HTML file (default: report.html beside the first results file)")
    s.add_argument(
        "--edge-cases", help="edge_cases.csv to include (default: the one beside a single run's results)"
    )
    s.add_argument("--draft", help="draft.csv to include (default: the one beside a single run's results)")
    s.add_argument("--title", default="perfsuite report")
    s.set_defaults(func=_cmd_report)

    s = sub.add_parser(
        "profile",
        help="a torch.profiler trace per case (TensorBoard layout) and a per-kernel table (kernels.csv)",
    )
    s.add_argument("scenario")
    s.add_argument("--out", help="output folder (default reports/<scenario>-<backend>-<time>-profile)")
    s.add_argument("--device", help="override the scenario's device (auto, cpu, cuda, cuda:N)")
    s.add_argument("--calls", type=number_at_least(1), default=5, help="profiled calls per case (default 5)")
    s.add_argument("--only", help="profile only cases whose case_id matches this glob or substring")
    _threads_option(s)
    s.set_defaults(func=_cmd_profile)

    s = sub.add_parser(
        "compare",
        help="compare two results files case by case; exit 1 on a regression",
        description=_compare_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("base", help="results of the reference run")
    s.add_argument("new", help="results of the run to judge")
    s.add_argument("--fail-on", default="5%", help="time regression threshold: 5%%, 5 or 0.05 (default 5%%)")
    s.add_argument("--out", help="write an HTML page (table and a plot of the shifts)")
    s.add_argument("--csv", help="write the matched table as CSV")
    s.add_argument("--ignore-device", action="store_true", help="match cases across device names")
    s.add_argument(
        "--limit", type=number_at_least(1), default=30, help="rows of the text table (failures always)"
    )
    s.set_defaults(func=_cmd_compare)

    s = sub.add_parser(
        "call",
        help="run one case's call inside its NVTX/ROCTx range perfsuite.<variant>.<path> (for ncu, nsys, "
        "rocprofv3)",
    )
    s.add_argument("scenario")
    s.add_argument("case_id", help="a case_id as `perfsuite list` prints it")
    s.add_argument("--device", help="override the scenario's device (auto, cpu, cuda, cuda:N)")
    s.add_argument("--calls", type=number_at_least(1), default=1, help="calls inside the range (default 1)")
    s.add_argument(
        "--roctx-region",
        action="store_true",
        help="also wrap the calls in roctxProfilerResume/Pause (rocprofv3 --selected-regions)",
    )
    _threads_option(s)
    s.set_defaults(func=_cmd_call)

    s = sub.add_parser(
        "kernels",
        help="compile the Triton kernels a scenario's shapes launch for GPU targets, without a GPU: "
        "registers, spills, shared memory, occupancy, load width",
        description="For every (dtype, batch, vocab, topk) of the scenario, the launch plan triton_auto "
        "picks on each target, compiled ahead of time with the Triton compiler (no GPU needed; Triton's "
        "bundled ptxas and cuobjdump for NVIDIA). Prints one row per distinct kernel; exit 1 when one does "
        "not compile or spills registers.",
    )
    s.add_argument("scenario")
    s.add_argument(
        "--target",
        action="append",
        default=[],
        help="sm_80, sm_90, sm_100, gfx90a, gfx942, gfx950 (repeat; default sm_90 and gfx942)",
    )
    s.add_argument("--csv", help="write every (target, shape, launch) row as CSV")
    s.add_argument("--asm", help="write each distinct kernel's TTGIR, PTX and SASS (NVIDIA) or AMDGCN here")
    s.add_argument(
        "--jobs", type=number_at_least(1), help="compile in this many processes (default: the CPU count)"
    )
    s.set_defaults(func=_cmd_kernels)

    s = sub.add_parser(
        "tune",
        help="time every launch plan of the Triton kernels per shape of a scenario on this GPU; write the "
        "fastest exact ones as the device's tuned-plan table, which triton_auto then uses",
    )
    s.add_argument("scenario", help="its cases' dtype, batch, vocab, topk and path are the shapes tuned")
    s.add_argument("--out", help="table JSON (default perfsuite/kernels/plan_table/<device>.json)")
    s.add_argument("--csv", help="every candidate's times (default: the table's name with .csv)")
    s.add_argument("--device", help="override the scenario's device (auto, cpu, cuda, cuda:N)")
    _threads_option(s)
    s.set_defaults(func=_cmd_tune)

    s = sub.add_parser(
        "check",
        help="the conformance battery on selectors: edge shapes, non-finite rows, ties, dtypes, graphs",
        description="Run the conformance battery on each SELECTOR (a built-in variant, "
        "package.module:function or a perfsuite.selectors entry point) on this device: misaligned and tiny "
        "vocabularies (k up to V), poisoned row padding, offset data pointers, NaN/inf rows (judged by the "
        "declared NaN policy), bit-level float patterns (signed zeros, one-ulp near-ties, subnormals, the "
        "largest finite values), grammar masks, ties, huge values, B = 0, int64 addressing, every dtype the "
        "selector declares, and on a GPU a graph capture and a side stream. Each call is made twice (bitwise "
        "repeat) and some on other batches (batch invariance). One row per case, dtype and k: pass, FAIL "
        "with what went wrong, or skip with the reason. Exit 1 on any failure, 0 otherwise, 2 when a "
        "selector does not load.",
    )
    s.add_argument("selector", nargs="+", help="variant name, package.module:function or entry-point name")
    s.add_argument("--device", default="auto", help="auto (the first GPU, else the CPU), cpu, cuda, cuda:N")
    s.add_argument("--csv", help="write every row (all selectors) as CSV")
    s.add_argument("--case", action="append", default=[], help="only cases matching this glob (repeat)")
    s.add_argument("--dtype", action="append", default=[], help="only this logits dtype (repeat)")
    s.add_argument(
        "--quick",
        action="store_true",
        help="a subset for CI: two of the large vocabularies, V 1 and 2 of the tiny ones, two offsets, no "
        "split-crossing ties",
    )
    s.set_defaults(func=_cmd_check)

    s = sub.add_parser("variants", help="list the registered variants")
    s.set_defaults(func=_cmd_variants)

    # commands whose options and body live in their module (also run as `python -m MODULE`, an alias)
    sub.add_parser(
        "warm",
        help="fill Triton's compile cache with the launches of scenarios and the conformance battery, in "
        "parallel on this GPU (exit 124: stopped at --budget)",
        module="perfsuite.tools.warm",
    )
    sub.add_parser(
        "summary",
        help="a run's text summary: medians per case, the fastest variants, speedups, Triton targets, "
        "tuned plans (markdown)",
        module="perfsuite.report.summary",
    )
    sub.add_parser(
        "tp-page",
        help="the tensor-parallel comparison of result files: a table, with --out a standalone page",
        module="perfsuite.report.tp_section",
    )
    return p


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser. One given `module` takes its options from `module.add_arguments(parser)`
    and runs `module.run(args)`, the module imported only when that command is parsed (its help
    included): the other commands, and `perfsuite --help`, do not import it."""

    def __init__(self, *args: object, module: str | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._module = module

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's parse, the module's options and `func` added first (once)."""
        if self._module is not None:
            module = importlib.import_module(self._module)
            self._module = None
            module.add_arguments(self)
            self.set_defaults(func=module.run)
        return super().parse_known_args(args, namespace)


def _threads_option(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--threads",
        type=number_at_least(0),
        help="torch CPU threads (default: the scenario's [timing] threads, else 1; 0: torch's default)",
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "resume", False) and not args.out:
        print("perfsuite: --resume needs --out (the folder of the run to continue)", file=sys.stderr)
        return EXIT_USAGE
    try:
        with interruptible():
            return args.func(args)
    except (ScenarioError, UsageError) as exc:
        print(f"perfsuite: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `perfsuite list ... | head`
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:  # a command that had nothing measured to write, or a second interruption
        print("perfsuite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        print(
            f"perfsuite: internal error: {first_line(exc, 300, whole=True)} ({_file_traceback()})",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _file_traceback() -> str:
    """Where the current exception's traceback went: stderr with PERFSUITE_DEBUG=1, else a file."""
    text = traceback.format_exc()
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        sys.stderr.write(text)
        return "traceback above"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        handle, name = tempfile.mkstemp(prefix=f"perfsuite-error-{stamp}-", suffix=".txt", text=True)
        with os.fdopen(handle, "w") as file:
            file.write(text)
    except OSError as error:
        return f"the traceback could not be written: {error}; {DEBUG_ENV}=1 prints it"
    return f"traceback in {name}; {DEBUG_ENV}=1 prints it"


if __name__ == "__main__":
    sys.exit(main())
