"""Running a scenario: each case timed, its traffic accounted for and its results checked for parity.

Each case kind (`perfsuite.core.kinds`: kernel, tensor parallel, draft, edge-case matrix) gives the
scenario's cases and runs them; every case becomes its rows (one; the edge-case matrix's: one per row
pattern and variant), appended to its kind's log the moment it finishes; a case that cannot run records why
(skipped) and a case that breaks records its error, and the sweep goes on.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfsuite.cases.protocol import REF_SAMPLES, SAMPLES
from perfsuite.core import kinds, machine
from perfsuite.core.console import utc_now
from perfsuite.core.settings import apply_threads
from perfsuite.measure.device import DeviceInfo, detect
from perfsuite.measure.environment import environment, gpu_state
from perfsuite.results import run_dir, sweep_shards
from perfsuite.results.columns import FORMAT_COLUMN, FORMAT_VERSION, add_speedups
from perfsuite.results.read import SAMPLES_FILE, read_manifest
from perfsuite.results.run import Run, load_run
from perfsuite.results.write import ResultsLog, to_frame, write_tables
from perfsuite.scenario.load import Scenario


@dataclass
class RunOutcome:
    """What a run left behind: the run as read back from its folder, the files, and its warnings."""

    run: Run
    out_dir: Path
    files: dict[str, Path]
    interrupted: bool
    notes: list[str] = field(default_factory=list)  # warnings for the console and the report's top

    @property
    def parity_failures(self) -> pd.DataFrame:
        """Rows whose parity verdict is "fail": an index the float64 truth ranks lower or an exact
        variant's probability off."""
        frame = self.run.frame
        return frame[frame["verdict"] == "fail"]


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
    """Run every case of a scenario into `out_dir`: each case kind's cases in turn (`core.kinds`), each
    row appended to its kind's log as it finishes, then the tables and the report. `only`: a glob on case
    ids. `shard`: only that shard's whole units (`results.sweep_shards`), recorded in `run.json`.
    `counters`: also measure each ok case's HBM bytes with the vendor's counter tool (slow). Raises
    `run_dir.RunRefused` when another run holds `out_dir`, or `resume` meets a log of other settings or of
    another shard; without `resume`, an earlier run's files move to `out_dir/earlier/`."""
    # every kind's cases, in run order, each kind's table checked before the folder is touched
    every = [(kind, case) for kind in kinds.KINDS for case in kind.cases_of(scenario)]
    with run_dir.claimed(out_dir):
        apply_threads(scenario.timing.threads)  # the rows record the threads in effect (environment)
        info = detect(scenario.device)
        settings = run_dir.settings_of(scenario, info.name)
        key = run_dir.fingerprint(settings)
        earlier = read_manifest(out_dir, check=False)
        if resume:
            run_dir.check_resume_shard(out_dir, earlier, shard)
        notes: list[str] = []
        opened, kept = _open_logs(out_dir, resume, earlier, settings, notes)
        if resume:
            label = str((earlier or {}).get("label") or label or run_dir.new_label(info.name))
        label = label or run_dir.new_label(info.name)
        logs = dict(zip(run_dir.logs(), opened, strict=True))
        samples_log = logs[SAMPLES_FILE]
        done = {
            name: {str(r["case_id"]) for r in rows} for name, rows in zip(run_dir.logs(), kept, strict=True)
        }
        usage = machine.CpuUse()
        env = environment(info, scenario.name, run=label, settings=key)
        manifest = {
            "label": label,
            "settings_fingerprint": key,
            "settings": settings,
            "scenario_file": scenario.source,
            "started": (earlier or {}).get("started") if resume else utc_now(),
            "constants": {**env, FORMAT_COLUMN: FORMAT_VERSION},  # the run columns (columns.RUN_COLUMNS)
            "start": {"load_avg": usage.load_start, "gpu": gpu_state(info)},
        }
        if shard is not None:
            manifest["shard"] = {"index": shard.index, "count": shard.count}
        run_dir.write_manifest(out_dir, manifest)
        for name in kinds.logs():  # the kinds' rows leave the run's columns to run.json
            logs[name].constants = manifest["constants"]
        chosen = (lambda case_id: fnmatch.fnmatchcase(case_id, only)) if only else (lambda case_id: True)
        units = {kind.name: kind.part("unit") for kind in kinds.KINDS}  # a shard takes whole units
        mine = sweep_shards.select(every, lambda pair: (pair[0].name, units[pair[0].name](pair[1])), shard)
        todo: dict[str, list] = {kind.name: [] for kind in kinds.KINDS}
        for kind, case in mine:
            if case.case_id not in done[kind.log] and chosen(case.case_id):
                todo[kind.name].append(case)
        collector = None
        if counters:
            from perfsuite.tools.counters import CounterCollector

            collector = CounterCollector(info, scenario.source, out_dir / "counters")
        context = kinds.KindRun(scenario, info, env, out_dir, progress, collector)
        interrupted = False
        try:
            for kind in kinds.KINDS:
                for row in kind.run_cases(todo[kind.name], context):
                    _log_row(row, logs[kind.log], samples_log)
        except KeyboardInterrupt:
            interrupted = True
        other, load_end = usage.overall(), machine.load_average()
        shared = machine.sharing_note(other, usage.load_start, load_end)
        if shared:
            notes.append(shared)
        manifest.update(
            finished=utc_now(),
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
            counts = Counter(kind.name for kind, _ in mine)
            state["shard"] = f"{shard} ({', '.join(f'{counts[k.name]} {k.name} cases' for k in kinds.KINDS)})"
        return finish(scenario, out_dir, logs, info, {**env, **state}, interrupted, notes)


def _gpu_text(state: dict[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in state.items()) or "not readable here"


def _open_logs(
    out_dir: Path, resume: bool, earlier: dict | None, settings: dict[str, object], notes: list[str]
) -> tuple[list[ResultsLog], list[list[dict[str, object]]]]:
    """The run's logs (`run_dir.logs()`) and the rows each keeps: with `resume`, every row but errors (after
    checking they were written with these settings), else none (an earlier run's files are put aside)."""
    logs = [ResultsLog(out_dir / name) for name in run_dir.logs()]
    if resume:
        kept = []
        for log in logs:  # every row but errors (retried); lines that are not rows are dropped, and said
            kept.append([row for row in log.read() if row.get("status") != "error"])
            notes.extend(log.dropped)
        row_logs = [rows for name, rows in zip(run_dir.logs(), kept, strict=True) if name in kinds.logs()]
        run_settings = ((earlier or {}).get("constants") or {}).get("settings")  # rows leave it to run.json
        logged = {str(row.get("settings") or run_settings or "") for rows in row_logs for row in rows}
        run_dir.check_resume(out_dir, earlier, settings, logged)
    else:
        moved = run_dir.put_aside(out_dir)
        if moved:
            notes.append(f"{out_dir} held an earlier run: its files moved to {moved}")
        kept = [[] for _ in logs]
    if not (earlier or {}).get("constants"):  # rows of a format before 4 state theirs; format 1 none
        kept = [[{FORMAT_COLUMN: 1, **row} for row in rows] for rows in kept]
    for log, rows in zip(logs, kept, strict=True):
        log.rewrite(rows)
    return logs, kept


def _log_row(row: dict[str, object], log: ResultsLog, samples_log: ResultsLog) -> None:
    seconds = row.pop(SAMPLES, None)
    reference = row.pop(REF_SAMPLES, None)  # the in-turn reference's samples, the same rounds
    if seconds:
        entry = {"case_id": row["case_id"], "run": row.get("run", ""), "seconds": seconds}
        if reference:
            entry["ref_seconds"] = reference
        samples_log.append(entry)
    log.append(row)


def finish(
    scenario: Scenario,
    out_dir: Path,
    logs: dict[str, ResultsLog],
    info: DeviceInfo,
    env: dict[str, object],
    interrupted: bool,
    notes: list[str],
) -> RunOutcome:
    """Turn the logs into tables (results.csv and .json from the first kind's log, then a CSV per other
    kind's log, `core.kinds`), the edge-case matrix (`edge_matrix`: in this run) and the HTML report (the
    report last: every table is on disk before anything imports it)."""
    primary, *others = kinds.logs()
    log = logs[primary]
    frame = add_speedups(to_frame(log.read(), run=False), only_missing=True)
    csv_path, json_path = write_tables(frame, out_dir)
    files = {"jsonl": log.path, "csv": csv_path, "json": json_path}
    samples = logs[SAMPLES_FILE].path
    if samples.exists() and samples.stat().st_size:
        files["samples"] = samples
    for name in others:
        (kind,) = kinds.sharing(name)
        rows = logs[name].read()
        path = out_dir / kind.table_file
        path.unlink(missing_ok=True)  # only this run's rows, never an older file
        if rows:
            files[kind.name] = path
            to_frame(rows, kind.table_file, run=False).to_csv(path, index=False)
    from perfsuite.report import build_report

    run = load_run([out_dir], shards=False)
    files["html"] = build_report(
        run,
        out_dir / "report.html",
        environment={**{k: str(v) for k, v in env.items()}, "source": scenario.source},
        title=f"perfsuite: {scenario.name} on {info.name}",
    )
    return RunOutcome(run, out_dir, files, interrupted, notes)
