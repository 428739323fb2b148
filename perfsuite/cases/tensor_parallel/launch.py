"""Launching tensor-parallel cases from the main process: one torchrun per tp size, rows streamed back.

Each tp size's cases run as `torchrun --standalone --nproc-per-node tp -m perfsuite.cases.tensor_parallel
...` (a subprocess with a timeout) whose rank 0 appends rows to `out_dir/tp/tp{N}.jsonl`; they are yielded
as they appear. A group that cannot run (more ranks than GPUs, or than the CPU limit; a launch that fails)
yields a skipped row per case with the reason; cases a crashed or timed-out worker never reached become
error rows. Worker output: `out_dir/tp/tp{N}.log`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import torch

import perfsuite
from perfsuite.cases.tensor_parallel.tp_runner import case_row
from perfsuite.core.console import progress_bar
from perfsuite.core.kinds import KindRun
from perfsuite.results.rows import stamp
from perfsuite.scenario.load import Case

TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
MAX_CPU_RANKS_ENV = "PERFSUITE_TP_MAX_CPU_RANKS"
POLL_S = 0.2
BASE_TIMEOUT_S = 120.0
CASE_TIMEOUT_S = 10.0
"""Group timeout: start-up, then this plus twice the case's `max_seconds` per case."""


def rank_limit(backend: str) -> tuple[int, str]:
    """(most ranks, why): one GPU per rank on a GPU backend; else $PERFSUITE_TP_MAX_CPU_RANKS gloo ranks,
    by default the core count clamped to [2, 8]."""
    if backend in ("cuda", "rocm"):
        gpus = torch.cuda.device_count()
        return gpus, f"{gpus} GPU(s) visible and each rank needs its own"
    given = os.environ.get(MAX_CPU_RANKS_ENV, "")
    limit = int(given) if given.isdigit() else max(2, min(8, os.cpu_count() or 1))
    return limit, f"at most {limit} gloo ranks on this CPU (${MAX_CPU_RANKS_ENV} raises it)"


def run_tp_cases(scenario_path: str, cases: list[Case], out_dir: Path, env: dict) -> Iterator[dict]:
    """Run `cases` (from `scenario_path`) under torchrun, one process group per tp size; yield one row
    per case. `env` holds the environment columns of the run (`environment.environment`); its `backend`
    (cuda | rocm | cpu) picks NCCL/RCCL or gloo."""
    backend = str(env.get("backend") or ("cuda" if torch.cuda.is_available() else "cpu"))
    for tp in sorted({case.tp for case in cases}):
        group = [case for case in cases if case.tp == tp]
        limit, why = rank_limit(backend)
        if tp > limit:
            yield from _not_run(group, env, backend, "skipped", f"tp {tp} needs {tp} ranks: {why}")
            continue
        timeout = BASE_TIMEOUT_S + sum(CASE_TIMEOUT_S + 2 * c.timing.max_seconds for c in group)
        yield from _launch(str(scenario_path), group, Path(out_dir) / "tp", env, backend, timeout)


def _not_run(cases: list[Case], env: dict, backend: str, status: str, reason: str) -> Iterator[dict]:
    pg = "gloo" if backend == "cpu" else "nccl"
    return ({**case_row(c, env, pg), "status": status, "reason": reason, **stamp()} for c in cases)


def _launch(
    scenario_path: str, group: list[Case], work: Path, env: dict, backend: str, timeout: float
) -> Iterator[dict]:
    """One torchrun of `group` (one tp size), its rows as rank 0 writes them, then those of cases it never
    reached."""
    tp = group[0].tp
    work.mkdir(parents=True, exist_ok=True)
    out, ids, log = work / f"tp{tp}.jsonl", work / f"tp{tp}.cases.json", work / f"tp{tp}.log"
    env_file = work / "env.json"
    out.write_text("")
    ids.write_text(json.dumps([c.case_id for c in group]))
    env_file.write_text(json.dumps(env, default=str))
    cmd = [*TORCHRUN, "--standalone", "--nproc-per-node", str(tp), "-m", "perfsuite.cases.tensor_parallel"]
    cmd += [scenario_path, "--tp", str(tp), "--out", str(out), "--case-ids", str(ids), "--env", str(env_file)]
    cmd += ["--device", "cpu"] if backend == "cpu" else []
    try:
        with log.open("w") as log_file:
            proc = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, env=_process_env(), start_new_session=True
            )
    except OSError as exc:
        yield from _not_run(group, env, backend, "skipped", f"tensor-parallel launch failed: {exc}")
        return
    seen: set[str] = set()
    timed_out = yield from _stream(proc, out, {c.case_id for c in group}, seen, time.monotonic() + timeout)
    missing = [c for c in group if c.case_id not in seen]
    if missing:
        status, reason = _missing_reason(proc.returncode, timed_out, timeout, bool(seen), log)
        yield from _not_run(missing, env, backend, status, reason)


def _process_env() -> dict[str, str]:
    """This environment, with this perfsuite first on the workers' PYTHONPATH."""
    root = str(Path(perfsuite.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root,
        "PYTHONUNBUFFERED": "1",
    }


def _stream(
    proc: subprocess.Popen, out: Path, wanted: set[str], seen: set[str], deadline: float
) -> Generator[dict, None, bool]:
    """Yield the rows of `wanted` cases the worker appends to `out` (each once, adding it to `seen`) until it
    exits, or stop it at `deadline`; returns whether it timed out."""
    offset = 0
    try:
        while True:
            done = proc.poll() is not None
            with out.open("rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # complete lines only
            offset += end
            for row in (json.loads(line) for line in data[:end].splitlines() if line.strip()):
                if row.get("case_id") in wanted - seen:
                    seen.add(str(row["case_id"]))
                    yield row
            if done:
                return False
            if time.monotonic() > deadline:
                return True
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            _stop(proc)


def _missing_reason(rc: int, timed_out: bool, timeout: float, some: bool, log: Path) -> tuple[str, str]:
    """The status and reason of the cases the worker wrote no row for, with the log's last error."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    marks = ("Error", "error:", "perfsuite.cases.tensor_parallel:")
    named = [line for line in lines if any(mark in line for mark in marks)]
    last = (named or lines or [""])[-1][:300]
    if timed_out:
        return "error", f"tensor-parallel worker timed out after {timeout:.0f} s ({log}): {last}"
    if rc != 0 and not some:
        return "skipped", f"tensor-parallel launch failed (torchrun exit {rc}, {log}): {last}"
    if rc != 0:
        return "error", f"tensor-parallel worker exited with status {rc} before this case ({log}): {last}"
    return "error", f"the tensor-parallel worker wrote no row for this case ({log})"


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the torchrun process group this launcher started (then kill it if it lingers)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def run(cases: list[Case], context: KindRun) -> Iterator[dict[str, object]]:
    """The tensor-parallel case kind's rows (`core.kinds`): one torchrun launch per tp size, rank 0's rows
    as they finish."""
    rows = run_tp_cases(context.scenario.source, cases, context.out_dir, context.env) if cases else []
    return progress_bar(rows, context.progress, "tp")
