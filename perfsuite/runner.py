"""Running a scenario: each case timed, its traffic accounted for and its results checked for parity.

Every case becomes one row, appended to `results.jsonl` the moment it finishes; a case that cannot run
records why (skipped) and a case that breaks records its error, and the sweep goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfsuite import edge_cases, inputs, variants
from perfsuite.device import DeviceInfo, detect
from perfsuite.environment import environment
from perfsuite.kernel_case import KernelCaseRunner
from perfsuite.progress import progress_bar
from perfsuite.results import ResultsLog, to_frame, write_tables
from perfsuite.scenario import Case, Scenario, expand
from perfsuite.schema import DRAFT_COLUMNS, add_speedups

EDGE_TOPK = (1, 4)


@dataclass
class RunOutcome:
    """What a run left behind."""

    frame: pd.DataFrame
    draft: pd.DataFrame
    out_dir: Path
    files: dict[str, Path]
    interrupted: bool

    @property
    def exact_failures(self) -> pd.DataFrame:
        f = self.frame
        return f[(f["accuracy"] == "exact") & (f["verdict"] == "fail")]


def run_scenario(
    scenario: Scenario,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    counters: bool = False,
) -> RunOutcome:
    """Run every case of a scenario into `out_dir`: results.jsonl as it goes, then CSV, JSON and HTML.

    `counters`: also measure each ok case's HBM bytes with the vendor's counter tool (slow; see counters.py).
    """
    from perfsuite.draft import expand_draft, run_draft

    info = detect(scenario.device)
    env = environment(info, scenario.name)
    log, done = open_log(out_dir / "results.jsonl", resume)
    draft_log, draft_done = open_log(out_dir / "draft.jsonl", resume)
    todo = [case for case in expand(scenario) if case.case_id not in done]
    single = [case for case in todo if not is_tensor_parallel(case)]
    parallel = [case for case in todo if is_tensor_parallel(case)]
    drafts = [case for case in expand_draft(scenario) if case.case_id not in draft_done]
    collector = None
    if counters:
        from perfsuite.counters import CounterCollector

        collector = CounterCollector(info, scenario.source, out_dir / "counters")
    runner = KernelCaseRunner(info, env, counters=collector)
    interrupted = False
    try:
        for case in progress_bar(single, progress):
            log.append(runner.run(case))
        if parallel:  # one torchrun launch per tp size; rank 0's rows come back as they finish
            from perfsuite.distributed.launch import run_tp_cases

            for row in progress_bar(run_tp_cases(scenario.source, parallel, out_dir, env), progress, "tp"):
                log.append(row)
        for row in run_draft(scenario, info, env, progress, cases=drafts):
            draft_log.append(row)
    except KeyboardInterrupt:
        interrupted = True
    return finish(scenario, out_dir, log, draft_log, info, env, interrupted)


def is_tensor_parallel(case: Case) -> bool:
    """Cases that run under torchrun (perfsuite.distributed): tp > 1, or a tensor-parallel variant."""
    from perfsuite.distributed import tp_variants

    return case.tp > 1 or tp_variants.is_tp_variant(case.variant)


def open_log(path: Path, resume: bool) -> tuple[ResultsLog, set[str]]:
    """The row log at `path` and the case ids it already holds (resume); errors are dropped to be retried."""
    log = ResultsLog(path)
    if not resume:
        path.unlink(missing_ok=True)
        return log, set()
    kept = [row for row in log.read() if row.get("status") != "error"]
    path.unlink(missing_ok=True)
    for row in kept:
        log.append(row)
    return log, {str(row["case_id"]) for row in kept}


def finish(
    scenario: Scenario,
    out_dir: Path,
    log: ResultsLog,
    draft_log: ResultsLog,
    info: DeviceInfo,
    env: dict[str, object],
    interrupted: bool,
) -> RunOutcome:
    """Turn the logs into tables, the edge-case matrix and the HTML report (the report last: every table
    is on disk before anything imports it)."""
    frame = add_speedups(to_frame(log.read()))
    csv_path, json_path = write_tables(frame, out_dir)
    files = {"jsonl": log.path, "csv": csv_path, "json": json_path}
    draft = pd.DataFrame(draft_log.read())
    if len(draft):
        draft = draft.reindex(columns=[*DRAFT_COLUMNS, *(c for c in draft if c not in DRAFT_COLUMNS)])
        files["draft"] = out_dir / "draft.csv"
        draft.to_csv(files["draft"], index=False)
    edges = None
    single_device = set(variants.names())
    names = list(dict.fromkeys(v for s in scenario.sweeps for v in s.variants if v in single_device))
    if names and not interrupted:
        dtypes = list(dict.fromkeys(inputs.dtype_of(d) for s in scenario.sweeps for d in s.dtypes))
        edges = edge_cases.matrix(dtypes, EDGE_TOPK, names, info.device)
        files["edge_cases"] = out_dir / "edge_cases.csv"
        edges.to_csv(files["edge_cases"], index=False)
    from perfsuite.report import build_report

    files["html"] = build_report(
        frame,
        out_dir / "report.html",
        edge_cases=edges,
        draft=draft,
        environment={**{k: str(v) for k, v in env.items()}, "source": scenario.source},
        title=f"perfsuite: {scenario.name} on {info.name}",
    )
    return RunOutcome(frame, draft, out_dir, files, interrupted)
