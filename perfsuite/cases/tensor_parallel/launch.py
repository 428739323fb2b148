"""The tensor-parallel case kind's `run`: a torchrun of the workers (`tp_runner.worker`) per tp size, rank 0's
rows streamed back from `out_dir/tp/tp{N}.jsonl` (output: `tp{N}.log`). A group that cannot run gives skipped
rows, with the reason; cases a crashed or timed-out worker never reached: error rows."""

from __future__ import annotations

import contextlib
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
from perfsuite.cases.tensor_parallel.tp_runner import WHO, case_row
from perfsuite.core import strict_json
from perfsuite.core.console import progress_bar
from perfsuite.core.kinds import KindRun
from perfsuite.results.rows import stamp
from perfsuite.scenario.load import Case

TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
MAX_CPU_RANKS_ENV = "PERFSUITE_TP_MAX_CPU_RANKS"
POLL_S = 0.2
BASE_TIMEOUT_S = 120.0
CASE_TIMEOUT_S = 10.0  # a group's timeout: BASE_TIMEOUT_S, then this plus twice max_seconds per case


def run_tp_cases(scenario_path: str, cases: list[Case], out_dir: Path, env: dict) -> Iterator[dict]:
    """A row per case, a process group per tp size: by `env`'s `backend`, NCCL/RCCL with a GPU per rank, or
    gloo on the CPU, at most $PERFSUITE_TP_MAX_CPU_RANKS ranks (default: the cores, clamped to [2, 8])."""
    backend = str(env.get("backend") or ("cuda" if torch.cuda.is_available() else "cpu"))
    if backend in ("cuda", "rocm"):
        limit = torch.cuda.device_count()
        why = f"{limit} GPU(s) visible and each rank needs its own"
    else:
        given = os.environ.get(MAX_CPU_RANKS_ENV, "")
        limit = int(given) if given.isdigit() else max(2, min(8, os.cpu_count() or 1))
        why = f"at most {limit} gloo ranks on this CPU (${MAX_CPU_RANKS_ENV} raises it)"
    for tp in sorted({case.tp for case in cases}):
        group = [case for case in cases if case.tp == tp]
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
    """One torchrun of a tp size's cases: the rows rank 0 writes, then those of the cases it never reached."""
    tp = group[0].tp
    work.mkdir(parents=True, exist_ok=True)
    out, ids, log = (work / f"tp{tp}{ext}" for ext in (".jsonl", ".cases.json", ".log"))
    env_file = work / "env.json"
    out.write_text("")
    ids.write_text(json.dumps([c.case_id for c in group]))
    env_file.write_text(strict_json.dumps(env))
    cmd = [*TORCHRUN, "--standalone", "--nproc-per-node", str(tp), "-m", WHO]
    cmd += [scenario_path, "--tp", str(tp), "--out", str(out), "--case-ids", str(ids), "--env", str(env_file)]
    cmd += ["--device", "cpu"] if backend == "cpu" else []
    root = str(Path(perfsuite.__file__).resolve().parent.parent)  # this perfsuite first on the workers' path
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    try:
        with log.open("w") as log_file:
            proc = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
    except OSError as exc:
        yield from _not_run(group, env, backend, "skipped", f"tensor-parallel launch failed: {exc}")
        return
    seen: set[str] = set()
    timed_out = yield from _stream(proc, out, {c.case_id for c in group}, seen, time.monotonic() + timeout)
    if missing := [c for c in group if c.case_id not in seen]:
        status, reason = _missing_reason(proc.returncode, timed_out, timeout, bool(seen), log)
        yield from _not_run(missing, env, backend, status, reason)


def _stream(
    proc: subprocess.Popen, out: Path, wanted: set[str], seen: set[str], deadline: float
) -> Generator[dict, None, bool]:
    """Rows of `wanted` from `out` (each once, into `seen`) until the worker exits; True if it timed out."""
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
        if proc.poll() is None:  # stop the torchrun process group, kill it if it lingers
            with contextlib.suppress(ProcessLookupError):
                for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                    os.killpg(proc.pid, sig)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(wait)
                        break


def _missing_reason(rc: int, timed_out: bool, timeout: float, some: bool, log: Path) -> tuple[str, str]:
    """The status and reason of the cases the worker wrote no row for, with the log's last error."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    marks = ("Error", "error:", f"{WHO}:")
    last = ([line for line in lines if any(mark in line for mark in marks)] or lines or [""])[-1][:300]
    if timed_out:
        return "error", f"tensor-parallel worker timed out after {timeout:.0f} s ({log}): {last}"
    if rc != 0 and not some:
        return "skipped", f"tensor-parallel launch failed (torchrun exit {rc}, {log}): {last}"
    if rc != 0:
        return "error", f"tensor-parallel worker exited with status {rc} before this case ({log}): {last}"
    return "error", f"the tensor-parallel worker wrote no row for this case ({log})"


def run(cases: list[Case], context: KindRun) -> Iterator[dict[str, object]]:
    """The tensor-parallel case kind's rows (`core.kinds`), as each finishes."""
    rows = run_tp_cases(context.scenario.source, cases, context.out_dir, context.env) if cases else []
    return progress_bar(rows, context.progress, "tp")
