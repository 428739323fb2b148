"""Launching tensor-parallel cases from the main process: one torchrun per tp size, rows streamed back.

    run_tp_cases(scenario_path, cases, out_dir, env) -> Iterator[row]

Cases are grouped by `tp`; each group runs as `torchrun --standalone --nproc-per-node tp -m
perfsuite.cases.tensor_parallel ...` (a subprocess with a timeout) whose rank 0 appends rows to
`out_dir/tp/tp{N}.jsonl`; they are yielded as they appear. A group that cannot run (more ranks than GPUs,
or than the CPU limit; a launch that fails) yields a skipped row per case with the reason; cases a
crashed or timed-out worker never reached become error rows. Worker output: `out_dir/tp/tp{N}.log`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import torch

import perfsuite
from perfsuite.cases.tensor_parallel import tp_rows
from perfsuite.core.console import progress_bar
from perfsuite.core.kinds import KindRun
from perfsuite.scenario.load import Case

TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
MAX_CPU_RANKS_ENV = "PERFSUITE_TP_MAX_CPU_RANKS"
POLL_S = 0.2
BASE_TIMEOUT_S = 120.0
CASE_TIMEOUT_S = 10.0
"""Group timeout: start-up, then this plus twice the case's `max_seconds` per case."""


def cpu_rank_limit() -> int:
    """Most gloo ranks on a CPU: $PERFSUITE_TP_MAX_CPU_RANKS, else the core count clamped to [2, 8]."""
    if os.environ.get(MAX_CPU_RANKS_ENV, "").isdigit():
        return int(os.environ[MAX_CPU_RANKS_ENV])
    return max(2, min(8, os.cpu_count() or 1))


def rank_limit(backend: str, max_cpu_ranks: int | None = None) -> tuple[int, str]:
    """(most ranks, why): one GPU per rank on a GPU backend, the CPU limit otherwise."""
    if backend in ("cuda", "rocm"):
        gpus = torch.cuda.device_count()
        return gpus, f"{gpus} GPU(s) visible and each rank needs its own"
    limit = cpu_rank_limit() if max_cpu_ranks is None else max_cpu_ranks
    return limit, f"at most {limit} gloo ranks on this CPU (${MAX_CPU_RANKS_ENV} raises it)"


def group_timeout(cases: list[Case]) -> float:
    return BASE_TIMEOUT_S + sum(CASE_TIMEOUT_S + 2 * c.timing.max_seconds for c in cases)


def run_tp_cases(
    scenario_path: str,
    cases: list[Case],
    out_dir: Path,
    env: dict,
    *,
    timeout_s: float | None = None,
    max_cpu_ranks: int | None = None,
) -> Iterator[dict]:
    """Run `cases` (from `scenario_path`) under torchrun, one process group per tp size; yield one row
    per case. `env` holds the environment columns of the run (`environment.environment`); its `backend`
    (cuda | rocm | cpu) picks NCCL/RCCL or gloo. `timeout_s` bounds each group (default: by its cases)."""
    backend = str(env.get("backend") or ("cuda" if torch.cuda.is_available() else "cpu"))
    by_tp: dict[int, list[Case]] = defaultdict(list)
    for case in cases:
        by_tp[case.tp].append(case)
    for tp in sorted(by_tp):
        group = by_tp[tp]
        limit, why = rank_limit(backend, max_cpu_ranks)
        if tp > limit:
            yield from _all(group, env, backend, "skipped", f"tp {tp} needs {tp} ranks: {why}")
            continue
        timeout = group_timeout(group) if timeout_s is None else timeout_s
        yield from _launch(str(scenario_path), tp, group, Path(out_dir) / "tp", env, backend, timeout)


def _pg(backend: str) -> str:
    return "gloo" if backend == "cpu" else "nccl"


def _all(cases: list[Case], env: dict, backend: str, status: str, reason: str) -> Iterator[dict]:
    for case in cases:
        yield tp_rows.not_run(tp_rows.case_row(case, env, _pg(backend)), status, reason)


def command(scenario_path: str, tp: int, out: Path, ids: Path, env_file: Path, backend: str) -> list[str]:
    """The torchrun command line of one group."""
    cmd = [*TORCHRUN, "--standalone", "--nproc-per-node", str(tp), "-m", "perfsuite.cases.tensor_parallel"]
    cmd += [scenario_path, "--tp", str(tp), "--out", str(out), "--case-ids", str(ids), "--env", str(env_file)]
    return cmd + (["--device", "cpu"] if backend == "cpu" else [])


def _process_env() -> dict[str, str]:
    root = str(Path(perfsuite.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root,
        "PYTHONUNBUFFERED": "1",
    }


def _launch(
    scenario_path: str, tp: int, group: list[Case], work: Path, env: dict, backend: str, timeout: float
) -> Iterator[dict]:
    work.mkdir(parents=True, exist_ok=True)
    out, ids, log = work / f"tp{tp}.jsonl", work / f"tp{tp}.cases.json", work / f"tp{tp}.log"
    env_file = work / "env.json"
    out.unlink(missing_ok=True)
    ids.write_text(json.dumps([c.case_id for c in group]))
    env_file.write_text(json.dumps(env, default=str))
    wanted = {c.case_id for c in group}
    seen: set[str] = set()
    try:
        with log.open("w") as log_file:
            proc = subprocess.Popen(
                command(scenario_path, tp, out, ids, env_file, backend),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=_process_env(),
                start_new_session=True,
            )
    except OSError as exc:
        yield from _all(group, env, backend, "skipped", f"tensor-parallel launch failed: {exc}")
        return
    tail, deadline, timed_out = _Tail(out), time.monotonic() + timeout, False
    try:
        while True:
            done = proc.poll() is not None
            for row in tail.rows():
                if row.get("case_id") in wanted and row["case_id"] not in seen:
                    seen.add(str(row["case_id"]))
                    yield row
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                _stop(proc)
                break
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            _stop(proc)
    missing = [c for c in group if c.case_id not in seen]
    if missing:
        status, reason = _missing_reason(proc.returncode, timed_out, timeout, bool(seen), log)
        yield from _all(missing, env, backend, status, reason)


def _missing_reason(rc: int, timed_out: bool, timeout: float, some: bool, log: Path) -> tuple[str, str]:
    last = _last_error(log)
    if timed_out:
        return "error", f"tensor-parallel worker timed out after {timeout:.0f} s ({log}): {last}"
    if rc != 0 and not some:
        return "skipped", f"tensor-parallel launch failed (torchrun exit {rc}, {log}): {last}"
    if rc != 0:
        return "error", f"tensor-parallel worker exited with status {rc} before this case ({log}): {last}"
    return "error", f"the tensor-parallel worker wrote no row for this case ({log})"


def _last_error(log: Path) -> str:
    """The last line of the worker log that names an error (else its last line), shortened."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    named = [
        line
        for line in lines
        if "Error" in line or "error:" in line or "perfsuite.cases.tensor_parallel:" in line
    ]
    return (named or lines or [""])[-1][:300]


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the torchrun process group this launcher started (then kill it if it lingers)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


class _Tail:
    """The complete JSON lines appended to a file since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(line) for line in data[:end].decode().splitlines() if line.strip()]


def run(cases: list[Case], context: KindRun) -> Iterator[dict[str, object]]:
    """The tensor-parallel case kind's rows (`core.kinds`): one torchrun launch per tp size, rank 0's rows
    as they finish."""
    if not cases:
        return iter(())
    rows = run_tp_cases(context.scenario.source, cases, context.out_dir, context.env)
    return progress_bar(rows, context.progress, "tp")
