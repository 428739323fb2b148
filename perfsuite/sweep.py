"""Running a scenario: each case timed, its traffic accounted for and its results checked for parity.

Every case becomes one row, appended to `results.jsonl` the moment it finishes; a case that cannot run
records why (skipped) and a case that breaks records its error, and the sweep goes on.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from perfsuite.cases.kernel import KernelCaseRunner
from perfsuite.cases.protocol import SAMPLES
from perfsuite.correctness import edge_cases
from perfsuite.measure import machine, threads
from perfsuite.measure.device import DeviceInfo, detect
from perfsuite.measure.environment import environment, gpu_state
from perfsuite.measure.progress import progress_bar
from perfsuite.results import run_dir, sweep_shards
from perfsuite.results.schema import DRAFT_COLUMNS, add_speedups
from perfsuite.results.write import ResultsLog, to_frame, write_tables
from perfsuite.scenario import inputs
from perfsuite.scenario.load import Case, Scenario, expand


@dataclass
class RunOutcome:
    """What a run left behind."""

    frame: pd.DataFrame
    draft: pd.DataFrame
    out_dir: Path
    files: dict[str, Path]
    interrupted: bool
    notes: list[str] = field(default_factory=list)  # warnings for the console and the report's top

    @property
    def parity_failures(self) -> pd.DataFrame:
        """Rows whose parity verdict is "fail": an index the reference ranks lower (any variant, argmax
        and indices-only selectors included) or an exact variant's probability off."""
        f = self.frame
        return f[f["verdict"] == "fail"]


def run_scenario(
    scenario: Scenario,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    counters: bool = False,
    only: str | None = None,
    label: str | None = None,
    shard: sweep_shards.Shard | None = None,
) -> RunOutcome:
    """Run every case of a scenario into `out_dir`: results.jsonl as it goes, then CSV, JSON and HTML.

    The variants of one shape and path are sampled in turn (`KernelCaseRunner.run_in_turn`). `only`: a
    glob on case ids. `shard`: only that shard's cases (`perfsuite.results.sweep_shards`; the edge-case matrix
    runs in shard 0 only), recorded in `run.json`. `counters`: also measure each ok case's HBM bytes with the
    vendor's counter tool (slow; see counters.py). Raises `run_dir.RunRefused` when another run holds
    `out_dir`, or `resume` meets a log of other settings or of another shard; without `resume`, an
    earlier run's files move to `out_dir/earlier/`.
    """
    with run_dir.claimed(out_dir):
        return _run(scenario, out_dir, resume, progress, counters, only, label, shard)


def _run(
    scenario: Scenario,
    out_dir: Path,
    resume: bool,
    progress: bool,
    counters: bool,
    only: str | None,
    label: str | None,
    shard: sweep_shards.Shard | None,
) -> RunOutcome:
    from perfsuite.draft import expand_draft, run_draft

    threads.apply(scenario.timing.threads)  # the rows record the threads in effect (environment)
    info = detect(scenario.device)
    settings = run_dir.settings_of(scenario, info.name)
    key = run_dir.fingerprint(settings)
    earlier = run_dir.read_manifest(out_dir)
    if resume:
        run_dir.check_resume_shard(out_dir, earlier, shard)
    notes: list[str] = []
    logs, kept = _open_logs(out_dir, resume, earlier, settings, notes)
    if resume:
        label = str((earlier or {}).get("label") or label or run_dir.new_label(info.name))
    label = label or run_dir.new_label(info.name)
    log, draft_log, samples_log = logs
    done = {str(row["case_id"]) for row in kept[0]}
    draft_done = {str(row["case_id"]) for row in kept[1]}
    usage = machine.CpuUse()
    env = environment(info, scenario.name, run=label, settings=key)
    manifest = {
        "label": label,
        "settings_fingerprint": key,
        "settings": settings,
        "scenario_file": scenario.source,
        "started": (earlier or {}).get("started") if resume else _now(),
        "machine": {k: env[k] for k in ("cpu_model", "cores", "cpu_quota", "governor", "threads")},
        "start": {"load_avg": usage.load_start, "gpu": gpu_state(info)},
    }
    if shard is not None:
        manifest["shard"] = {"index": shard.index, "count": shard.count}
    run_dir.write_manifest(out_dir, manifest)
    chosen = (lambda case_id: fnmatch.fnmatchcase(case_id, only)) if only else (lambda case_id: True)
    mine = sweep_shards.select(expand(scenario), unit_of, shard)
    todo = [case for case in mine if case.case_id not in done and chosen(case.case_id)]
    single = [case for case in todo if not is_tensor_parallel(case)]
    parallel = [case for case in todo if is_tensor_parallel(case)]
    my_drafts = sweep_shards.select(
        expand_draft(scenario), lambda c: getattr(c, "config_key", c.case_id), shard
    )
    drafts = [c for c in my_drafts if c.case_id not in draft_done and chosen(c.case_id)]
    collector = None
    if counters:
        from perfsuite.tools.counters import CounterCollector

        collector = CounterCollector(info, scenario.source, out_dir / "counters")
    runner = KernelCaseRunner(info, env, counters=collector)
    interrupted = False
    try:
        for group in progress_bar(same_shape(single), progress, unit="shape"):
            for row in runner.run_in_turn(group):
                _log_row(row, log, samples_log)
        if parallel:  # one torchrun launch per tp size; rank 0's rows come back as they finish
            from perfsuite.distributed.launch import run_tp_cases

            for row in progress_bar(run_tp_cases(scenario.source, parallel, out_dir, env), progress, "tp"):
                _log_row(row, log, samples_log)
        for row in run_draft(scenario, info, env, progress, cases=drafts):
            draft_log.append(row)
    except KeyboardInterrupt:
        interrupted = True
    other, load_end = usage.overall(), machine.load_average()
    shared = machine.sharing_note(other, usage.load_start, load_end)
    if shared:
        _note(notes, shared)
    manifest.update(
        finished=_now(),
        interrupted=interrupted,
        end={"load_avg": load_end, "other_cores": other, "gpu": gpu_state(info)},
        notes=notes,
    )
    run_dir.write_manifest(out_dir, manifest)
    state = {
        "load average (start, end)": f"{usage.load_start:.2f}, {load_end:.2f}",
        "other processes' cores (run average)": f"{other:.2f}",
        **{f"gpu at the {when}": _gpu_text(manifest[when]["gpu"]) for when in ("start", "end")},
    }
    if shard is not None:
        state["shard"] = f"{shard} ({len(mine)} cases, {len(my_drafts)} draft cases)"
    edges = shard is None or shard.first
    return finish(scenario, out_dir, log, draft_log, info, {**env, **state}, interrupted, notes, edges)


def _gpu_text(state: dict[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in state.items()) or "not readable here"


def _open_logs(
    out_dir: Path, resume: bool, earlier: dict | None, settings: dict[str, object], notes: list[str]
) -> tuple[list[ResultsLog], list[list[dict[str, object]]]]:
    """The run's logs (`run_dir.LOGS`) and the rows each keeps: with `resume`, every row but errors (after
    checking they were written with these settings), else none (an earlier run's files are put aside)."""
    logs = [ResultsLog(out_dir / name) for name in run_dir.LOGS]
    if resume:
        kept = [_resumable(log, notes) for log in logs]
        logged = {str(row.get("settings") or "") for rows in kept[:2] for row in rows}
        run_dir.check_resume(out_dir, earlier, settings, logged)
    else:
        moved = run_dir.put_aside(out_dir)
        if moved:
            _note(notes, f"{out_dir} held an earlier run: its files moved to {moved}")
        kept = [[] for _ in logs]
    for log, rows in zip(logs, kept, strict=True):
        log.rewrite(rows)
    return logs, kept


def same_shape(cases: list[Case]) -> list[list[Case]]:
    """Cases grouped by everything but the variant (shape, dtype, logits, k, path), in first-seen order:
    each group is sampled in turn."""
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(unit_of(case), []).append(case)
    return list(groups.values())


def unit_of(case: Case) -> tuple:
    """The cases that run together (one shard's unit): the variants of one shape and path, or one
    tensor-parallel size's cases (one torchrun launch)."""
    if is_tensor_parallel(case):
        return ("tp", case.tp)
    return (case.tp, case.input_key, case.topk, case.path)


def _log_row(row: dict[str, object], log: ResultsLog, samples_log: ResultsLog) -> None:
    seconds = row.pop(SAMPLES, None)
    if seconds:
        samples_log.append({"case_id": row["case_id"], "run": row.get("run", ""), "seconds": seconds})
    log.append(row)


def _resumable(log: ResultsLog, notes: list[str]) -> list[dict[str, object]]:
    """The rows a resumed run keeps: all but errors (retried) and lines that are not rows (dropped, said)."""
    rows = log.read()
    for text in log.dropped:
        _note(notes, text)
    return [row for row in rows if row.get("status") != "error"]


def _note(notes: list[str], text: str) -> None:
    """A warning for the end of the console output and the top of the report."""
    notes.append(text)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def is_tensor_parallel(case: Case) -> bool:
    """Cases that run under torchrun (perfsuite.distributed): tp > 1, or a tensor-parallel variant."""
    from perfsuite.distributed import tp_variants

    return case.tp > 1 or tp_variants.is_tp_variant(case.variant)


def finish(
    scenario: Scenario,
    out_dir: Path,
    log: ResultsLog,
    draft_log: ResultsLog,
    info: DeviceInfo,
    env: dict[str, object],
    interrupted: bool,
    notes: list[str],
    edge_matrix: bool = True,
) -> RunOutcome:
    """Turn the logs into tables, the edge-case matrix (`edge_matrix`: in this run) and the HTML report
    (the report last: every table is on disk before anything imports it)."""
    frame = add_speedups(to_frame(log.read()), only_missing=True)
    csv_path, json_path = write_tables(frame, out_dir)
    files = {"jsonl": log.path, "csv": csv_path, "json": json_path}
    samples = out_dir / run_dir.LOGS[2]
    if samples.exists() and samples.stat().st_size:
        files["samples"] = samples
    draft = pd.DataFrame(draft_log.read())
    (out_dir / "draft.csv").unlink(missing_ok=True)  # only this run's draft rows, never an older file
    if len(draft):
        draft = draft.reindex(columns=[*DRAFT_COLUMNS, *(c for c in draft if c not in DRAFT_COLUMNS)])
        files["draft"] = out_dir / "draft.csv"
        draft.to_csv(files["draft"], index=False)
    edges = None
    (out_dir / "edge_cases.csv").unlink(missing_ok=True)
    from perfsuite.distributed.tp_variants import is_tp_variant

    # built-in and external single-device selectors
    names = list(dict.fromkeys(v for s in scenario.sweeps for v in s.variants if not is_tp_variant(v)))
    if names and edge_matrix and not interrupted:
        dtypes = list(dict.fromkeys(inputs.dtype_of(d) for s in scenario.sweeps for d in s.dtypes))
        edges = edge_cases.matrix(dtypes, edge_cases.EDGE_TOPK, names, info.device)
        files["edge_cases"] = out_dir / "edge_cases.csv"
        edges.to_csv(files["edge_cases"], index=False)
    from perfsuite.report import build_report
    from perfsuite.results.read import load_samples

    files["html"] = build_report(
        frame,
        out_dir / "report.html",
        edge_cases=edges,
        draft=draft,
        environment={**{k: str(v) for k, v in env.items()}, "source": scenario.source},
        title=f"perfsuite: {scenario.name} on {info.name}",
        notes=notes,
        samples=load_samples(out_dir),
    )
    return RunOutcome(frame, draft, out_dir, files, interrupted, notes)
