"""Profiler traces: one torch.profiler trace per case, in the layout TensorBoard's profiler plugin reads.

    DIR/<run>/<worker>.<ts>.pt.trace.json     one run folder per case, named after its case_id
    DIR/kernels.csv                           per case and kernel of the selection: calls, total and mean
                                              time, share (the cache flush excluded, its time in a column)
    DIR/cases.csv                             per case: status, reason, threads, trace, kernels per call

The same Chrome-trace JSON opens in Perfetto (ui.perfetto.dev) and Holistic Trace Analysis: each trace
carries `distributedInfo` (rank 0 of a world of 1, which HTA needs and torch.profiler only writes under
torch.distributed) and a `perfsuite` key (the case, its device, threads and cache state). Every variant
call runs inside a range named `perfsuite.<variant>.<path>` (`record_function`, plus an NVTX range on
CUDA, which ROCm maps to ROCTx), so its kernels are easy to find, and the kernel table keeps only what was
launched inside it. When the case is timed cold, the cache is flushed before each call inside a range of
its own, `perfsuite.cache_flush`, so a trace viewer shows the flush apart from the selection. Cases are
prepared by `KernelRunner.prepare`, so the profiled call is the measured one (eager, graph replay or
torch.compile), with the torch CPU threads of the scenario (`[timing] threads`, `--threads`) in effect.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fnmatch
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.core import settings
from perfsuite.core.console import first_line
from perfsuite.measure import timing
from perfsuite.measure.device import DeviceInfo, detect, synchronize
from perfsuite.measure.memory import native_stderr_silenced
from perfsuite.results.rows import case_row
from perfsuite.scenario.load import Case, Scenario, ScenarioError, expand

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
"""Trace event categories of device work (kineto: CUDA via CUPTI, ROCm via roctracer)."""
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
"""Host-side runtime calls; their `correlation` arg names the device work they launched."""
KERNEL_COLUMNS = ("kernel", "calls", "per_call", "total_us", "mean_us", "share")
FLUSH_RANGE = "perfsuite.cache_flush"
"""The range around every cache flush of a profile or a call (a cold case's flush before each call): no
variant's range (`perfsuite.<variant>.<path>`, three parts) has this name."""
DEVICE_ACTIVITY = "device kernels"
CPU_ACTIVITY = "cpu ops (aten, host time)"


def range_name(case: Case) -> str:
    """The marker range around a case's call (no '/' or '@': ncu's NVTX filter syntax uses them)."""
    return f"perfsuite.{case.variant}.{case.path}"


def run_name(case: Case) -> str:
    """The case's trace folder: its case_id made filesystem-safe (identity-eager-bfloat16-V1000-B3-k1-...)."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", case.case_id).strip("-")


@contextlib.contextmanager
def marked(name: str, device: torch.device) -> Iterator[None]:
    """A `record_function` range, and on a GPU an NVTX range of the same name (ROCTx on ROCm)."""
    with record_function(name):
        pushed = False
        if device.type == "cuda":
            try:
                torch.cuda.nvtx.range_push(name)
                pushed = True
            except (RuntimeError, AttributeError):  # a build without NVTX / ROCTx
                pass
        try:
            yield
        finally:
            if pushed:
                torch.cuda.nvtx.range_pop()


def flushed(flush: Callable[[], object], device: torch.device) -> None:
    """One cache flush inside its own range, `FLUSH_RANGE`, closed once the device is done: a trace viewer
    (TensorBoard, HTA, Perfetto, Nsight Systems) shows the flush apart from the selection, and ncu's
    `--nvtx-include perfsuite.<variant>.<path>/` leaves it out."""
    with marked(FLUSH_RANGE, device):
        flush()
        synchronize(device)


def trace_metadata(case: Case, info: DeviceInfo, *, calls: int) -> dict[str, dict[str, object]]:
    """The top-level keys perfsuite adds to a case's trace JSON.

    `distributedInfo`: Holistic Trace Analysis maps each trace of a folder to a rank by it (and warns
    without it); torch.profiler writes it only when torch.distributed is initialized, so a perfsuite trace,
    a single process, says rank 0 of a world of 1, with the backend torch.distributed would pick on its
    device (nccl on a GPU, RCCL on ROCm answering to that name too; gloo on a CPU). `perfsuite`: the case,
    flat (HTA's metadata reader skips nested maps), with the torch CPU threads in effect.
    """
    return {
        "distributedInfo": {"backend": "nccl" if info.is_gpu else "gloo", "rank": 0, "world_size": 1},
        "perfsuite": {
            **case_row(case, {"scenario": case.scenario}),
            "device": info.name,
            "backend": info.backend,
            "simulated": bool(info.simulated),
            "threads": torch.get_num_threads(),
            "calls": calls,
            "range": range_name(case),
            "flush_range": FLUSH_RANGE if case.timing.l2 == "cold" else "",
            "torch": torch.__version__,
        },
    }


# ------------------------------------------------------------------------------------------ recording


def record_trace(
    call: Callable[[], object],
    folder: Path,
    name: str,
    device: torch.device,
    *,
    calls: int = 5,
    flush: Callable[[], object] | None = None,
    metadata: Mapping[str, object] | None = None,
) -> Path:
    """Profile `calls` calls (after one warm-up step) into `folder`; the trace file written. `flush` runs
    before each call inside the range `FLUSH_RANGE`; `metadata`: top-level keys of the trace JSON, each
    value JSON-encoded (`trace_metadata`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.pt.trace.json*"):
        old.unlink()
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    steps = schedule(wait=0, warmup=1, active=calls, repeat=1)
    handler = tensorboard_trace_handler(str(folder))
    with warnings.catch_warnings(), native_stderr_silenced():
        warnings.simplefilter("ignore")
        prof = profile(activities=activities, schedule=steps, on_trace_ready=handler, record_shapes=True)
        for key, value in (metadata or {}).items():  # preset: written once the recording starts
            prof.preset_metadata_json(key, json.dumps(value, allow_nan=False))
        with prof:
            for _ in range(1 + calls):
                if flush is not None:
                    flushed(flush, device)
                synchronize(device)
                with marked(name, device):  # the range closes once the device is done
                    call()
                    synchronize(device)
                prof.step()
    traces = sorted(folder.glob("*.pt.trace.json"), key=lambda p: p.stat().st_mtime)
    if not traces:
        raise RuntimeError(f"torch.profiler wrote no trace into {folder}")
    return traces[-1]


# ------------------------------------------------------------------------------------------ reading


def load_events(path: Path) -> pd.DataFrame:
    """Complete ('X') events of a Chrome-trace JSON file: name, cat, ts, dur (µs), pid, tid, correlation."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable trace ({exc})") from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path}: no traceEvents list")
    rows = [
        {
            "name": str(e.get("name", "")),
            "cat": str(e.get("cat", "")),
            "ts": float(e.get("ts", 0.0)),
            "dur": float(e.get("dur", 0.0)),
            "pid": str(e.get("pid", "")),
            "tid": str(e.get("tid", "")),
            "correlation": (e.get("args") or {}).get("correlation"),
        }
        for e in events
        if isinstance(e, dict) and e.get("ph") == "X"
    ]
    columns = ["name", "cat", "ts", "dur", "pid", "tid", "correlation"]
    return pd.DataFrame(rows, columns=columns)


def _inside(events: pd.DataFrame, ranges: pd.DataFrame, *, same_thread: bool = True) -> pd.Series:
    """Events that start within one of `ranges` (on the same process and thread, by default)."""
    inside = pd.Series(False, index=events.index)
    for r in ranges.itertuples(index=False):
        same = (events["pid"] == r.pid) & (events["tid"] == r.tid) if same_thread else True
        inside |= same & (events["ts"] >= r.ts) & (events["ts"] <= r.ts + r.dur)
    return inside


def _leaves(ops: pd.DataFrame) -> pd.DataFrame:
    """CPU ops that contain no other op (the ones doing the work; their callers only dispatch)."""
    ops = ops.sort_values(["pid", "tid", "ts", "dur"], ascending=[True, True, True, False])
    following = ops.groupby(["pid", "tid"])["ts"].shift(-1)
    return ops[following.isna() | (following >= ops["ts"] + ops["dur"])]


@dataclass(frozen=True)
class KernelSummary:
    """What one case's trace says: a row per kernel of the selection, and per-call figures; the cache
    flush's work (inside `FLUSH_RANGE`) is in none of the rows, only in the `flush_*` figures."""

    table: pd.DataFrame  # KERNEL_COLUMNS
    activity: str  # DEVICE_ACTIVITY or CPU_ACTIVITY
    calls: int
    kernels_per_call: float
    kernel_us_per_call: float
    range_us_per_call: float
    flushes: int = 0  # FLUSH_RANGE ranges in the trace
    flush_kernels_per_call: float = float("nan")  # nan: no flush in the trace
    flush_us_per_call: float = float("nan")


def _ranges(events: pd.DataFrame, name: str) -> pd.DataFrame:
    return events[(events["cat"] == "user_annotation") & (events["name"] == name)]


def _work(events: pd.DataFrame, ranges: pd.DataFrame | None) -> tuple[pd.DataFrame, str]:
    """The work attributed to `ranges` (None: all of it) and what kind it is. GPU traces: device kernels
    (and memcpy / memset) matched to the ranges through the `correlation` of the runtime calls issued
    inside them, or where that matches nothing (no correlation ids), the device work that starts inside a
    range (the ranges close after a device sync). CPU traces: the leaf aten ops inside the ranges."""
    device = events[events["cat"].isin(DEVICE_CATEGORIES)]
    if len(device):
        if ranges is not None:
            launches = events[events["cat"].isin(LAUNCH_CATEGORIES)]
            ids = set(launches.loc[_inside(launches, ranges), "correlation"].dropna())
            matched = device[device["correlation"].isin(ids)]
            device = matched if len(matched) else device[_inside(device, ranges, same_thread=False)]
        return device, DEVICE_ACTIVITY
    ops = events[events["cat"] == "cpu_op"]
    return _leaves(ops[_inside(ops, ranges)] if ranges is not None else ops), CPU_ACTIVITY


def summarize(events: pd.DataFrame, name: str) -> KernelSummary:
    """Per-kernel table of the work launched inside the ranges called `name` (see `_work`), host time on
    a CPU; without any such range in the trace, everything of that kind counts.

    The cache flush of a cold case is never the selection's: its work, the work attributed to the
    `FLUSH_RANGE` ranges, is left out of the table and of the shares even where it would otherwise count
    (no range of the selection in the trace, or device work that spills into the selection's range), and
    summed apart, per call, in `flush_kernels_per_call` and `flush_us_per_call`. kernels.csv thus lists
    the selection's kernels alone, as `ncu --nvtx-include` of the selection's range would, so their shares
    add up to the selection and its top kernel is a kernel of the selection, not a 60 ms fill of a
    flush buffer; what was left out is said by a column (cases.csv and kernels.csv:
    `excluded_flush_us_per_call`), so the flush stays visible without being mistaken for the selection.
    """
    ranges = _ranges(events, name)
    calls = max(len(ranges), 1)
    flush_ranges = _ranges(events, FLUSH_RANGE)
    flush_work, _ = _work(events, flush_ranges)
    work, activity = _work(events, ranges if len(ranges) else None)
    work = work[~work.index.isin(flush_work.index)]
    table = work.groupby("name", sort=False)["dur"].agg(calls="count", total_us="sum", mean_us="mean")
    table = table.reset_index().rename(columns={"name": "kernel"})
    total = float(table["total_us"].sum())
    table["per_call"] = table["calls"] / calls
    table["share"] = table["total_us"] / total if total > 0 else float("nan")
    table = table.sort_values("total_us", ascending=False, ignore_index=True)[list(KERNEL_COLUMNS)]
    range_us = float(ranges["dur"].mean()) if len(ranges) else float("nan")
    flush_kernels = len(flush_work) / calls if len(flush_ranges) else float("nan")
    flush_us = float(flush_work["dur"].sum()) / calls if len(flush_ranges) else float("nan")
    return KernelSummary(
        table,
        activity,
        len(ranges),
        len(work) / calls,
        total / calls,
        range_us,
        len(flush_ranges),
        flush_kernels,
        flush_us,
    )


# ------------------------------------------------------------------------------------------ a sweep


@dataclass(frozen=True)
class ProfileOutcome:
    cases: pd.DataFrame
    kernels: pd.DataFrame
    files: dict[str, Path]
    interrupted: bool = False


def _case_columns(case: Case, info: DeviceInfo) -> dict[str, object]:
    """The case's identifying columns (as in results.csv), the torch CPU threads in effect and its trace
    folder's name."""
    env = {"device": info.name, "backend": info.backend, "threads": torch.get_num_threads()}
    return {**case_row(case, env), "run": run_name(case)}


def profile_case(runner: KernelRunner, case: Case, out_dir: Path, calls: int) -> tuple[dict, pd.DataFrame]:
    """Trace one case; its row for cases.csv and its kernel rows (empty when skipped or broken)."""
    row = _case_columns(case, runner.info)
    try:
        reason = runner.skip_reason(case)
        if reason:
            return {**row, "status": "skipped", "reason": reason}, pd.DataFrame()
        prepared, _, _ = runner.prepare(case)
        flush = timing.cache_flusher(runner.info) if case.timing.l2 == "cold" else None
        name = range_name(case)
        trace = record_trace(
            prepared.run,
            out_dir / run_name(case),
            name,
            runner.device,
            calls=calls,
            flush=flush,
            metadata=trace_metadata(case, runner.info, calls=calls),
        )
        summary = summarize(load_events(trace), name)
    except Exception as exc:  # one broken case must not stop the sweep
        return {**row, "status": "error", "reason": first_line(exc)}, (pd.DataFrame())
    top = summary.table.iloc[0] if len(summary.table) else None
    row |= {
        "status": "ok",
        "reason": "",
        "trace": str(trace.relative_to(out_dir)),
        "activity": summary.activity,
        "calls": summary.calls,
        "kernels_per_call": summary.kernels_per_call,
        "kernel_us_per_call": summary.kernel_us_per_call,
        "range_us_per_call": summary.range_us_per_call,
        "top_kernel": "" if top is None else str(top["kernel"]),
        "top_share": float("nan") if top is None else float(top["share"]),
        "excluded_flush_kernels_per_call": summary.flush_kernels_per_call,
        "excluded_flush_us_per_call": summary.flush_us_per_call,
    }
    kernels = summary.table.assign(**{k: row[k] for k in ("case_id", "run", "device", "activity")})
    for key in ("variant", "path", "dtype", "vocab", "batch", "topk", "logits", "l2", "threads"):
        kernels[key] = row[key]
    kernels["excluded_flush_us_per_call"] = summary.flush_us_per_call
    return row, kernels


def select_cases(cases: list[Case], only: str | None) -> list[Case]:
    """Cases whose case_id matches the glob `only` (all when None)."""
    if not only:
        return cases
    pattern = only if any(c in only for c in "*?[") else f"*{only}*"
    return [c for c in cases if fnmatch.fnmatchcase(c.case_id, pattern)]


def profile_scenario(
    scenario: Scenario, out_dir: Path, *, calls: int = 5, only: str | None = None
) -> ProfileOutcome:
    """A trace per case of the scenario under `out_dir`, then kernels.csv and cases.csv (interrupted: the
    tables of the cases profiled so far), with the scenario's torch CPU threads applied first."""
    settings.apply_threads(scenario.timing.threads)
    info = detect(scenario.device)
    runner = KernelRunner(info, {"device": info.name, "backend": info.backend})
    cases = select_cases(expand(scenario), only)
    if not cases:
        raise ScenarioError(f"{scenario.source}: no case matches {only!r} (`perfsuite list` shows them)")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, tables = [], []
    interrupted = False
    try:
        for case in cases:
            row, kernels = profile_case(runner, case, out_dir, calls)
            rows.append(row)
            tables.append(kernels)
    except KeyboardInterrupt:
        interrupted = True
    kernels = (
        pd.concat([t for t in tables if len(t)], ignore_index=True)
        if any(len(t) for t in tables)
        else (pd.DataFrame(columns=["case_id", *KERNEL_COLUMNS]))
    )
    front = ["case_id", "run", "device", "activity"]
    kernels = kernels[[*front, *(c for c in kernels.columns if c not in front)]]
    files = {"kernels": out_dir / "kernels.csv", "cases": out_dir / "cases.csv"}
    kernels.to_csv(files["kernels"], index=False)
    frame = pd.DataFrame(rows, columns=None if rows else ["case_id", "status", "reason"])
    frame.to_csv(files["cases"], index=False)
    return ProfileOutcome(frame, kernels, files, interrupted)


def short_table(outcome: ProfileOutcome, width: int = 60) -> str:
    """One line per profiled case: kernels per call, time per call and the top kernel."""
    ok = outcome.cases[outcome.cases["status"] == "ok"]
    if ok.empty:
        return "no case was profiled"
    table = pd.DataFrame(
        {
            "case": ok["case_id"],
            "kernels/call": ok["kernels_per_call"].map(lambda v: f"{v:.3g}"),
            "us/call": ok["kernel_us_per_call"].map(lambda v: f"{v:.4g}"),
            "top kernel": ok["top_kernel"].map(lambda s: s if len(s) <= width else s[: width - 1] + "…"),
            "share": ok["top_share"].map(lambda v: f"{100 * v:.0f} %"),
        }
    )
    return table.to_string(index=False)


# ------------------------------------------------------------------------------------------ one call


def _roctx() -> ctypes.CDLL:
    """The ROCTx library whose profiler pause / resume calls rocprofv3 --selected-regions honours."""
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    candidates = [
        ctypes.util.find_library("rocprofiler-sdk-roctx"),
        f"{rocm}/lib/librocprofiler-sdk-roctx.so",
    ]
    for candidate in filter(None, candidates):
        try:
            lib = ctypes.CDLL(candidate)
        except OSError:
            continue
        for fn in (lib.roctxProfilerPause, lib.roctxProfilerResume):
            fn.argtypes, fn.restype = [ctypes.c_uint64], ctypes.c_int
        return lib
    raise RuntimeError("librocprofiler-sdk-roctx.so not found (ROCm >= 6.2): cannot mark the counted region")


def call_case(scenario: Scenario, case_id: str, *, calls: int = 1, roctx_region: bool = False) -> str | None:
    """Run one case's call `calls` times inside its marker range, prepared exactly as `run` prepares it.

    For external profilers (ncu --nvtx, nsys, rocprofv3 --selected-regions): everything else (inputs,
    compilation, graph capture, parity) happens outside the range. With `roctx_region`, the calls are
    also wrapped in roctxProfilerResume / roctxProfilerPause. A cold case's flush before each call runs in
    its own range, `FLUSH_RANGE`, outside the case's range and the ROCTx region; the scenario's torch CPU
    threads are applied first. Returns why the case is skipped here, or None.
    """
    settings.apply_threads(scenario.timing.threads)
    cases = {c.case_id: c for c in expand(scenario)}
    if case_id not in cases:
        raise ScenarioError(f"{scenario.source}: no case {case_id!r} (`perfsuite list` shows them)")
    case = cases[case_id]
    info = detect(scenario.device)
    runner = KernelRunner(info, {"device": info.name})
    reason = runner.skip_reason(case)
    if reason:
        return reason
    prepared, _, _ = runner.prepare(case)
    flush = timing.cache_flusher(info) if case.timing.l2 == "cold" else None
    roctx = _roctx() if roctx_region else None
    for _ in range(calls):
        if flush is not None:
            flushed(flush, runner.device)
        synchronize(runner.device)
        if roctx is not None:
            roctx.roctxProfilerResume(0)
        with marked(range_name(case), runner.device):
            prepared.run()
            synchronize(runner.device)
        if roctx is not None:
            roctx.roctxProfilerPause(0)
    print(json.dumps({"case_id": case_id, "range": range_name(case), "calls": calls}), file=sys.stdout)
    return None
