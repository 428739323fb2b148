"""`perfsuite profile`: a torch.profiler trace per case (TensorBoard's layout, DIR/<run>/*.pt.trace.json),
DIR/kernels.csv and DIR/cases.csv; `perfsuite call`: one case's calls in their range (docs/profiling.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fnmatch
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.core import settings, strict_json
from perfsuite.core.console import first_line
from perfsuite.measure import timing
from perfsuite.measure.device import DeviceInfo, detect, synchronize
from perfsuite.measure.memory import native_stderr_silenced
from perfsuite.results.rows import case_row
from perfsuite.scenario.load import Case, Scenario, ScenarioError, expand

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # device work (kineto: CUPTI, roctracer)
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")  # host calls; `correlation` names the work launched
KERNEL_COLUMNS = ("kernel", "calls", "per_call", "total_us", "mean_us", "share")
KERNEL_FRONT = ["case_id", "run", "device", "activity"]
# the cases.csv columns repeated on each of the case's kernels.csv rows
CASE_KEYS = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits", "l2", "threads")
FLUSH_RANGE = "perfsuite.cache_flush"  # no variant's range (`perfsuite.<variant>.<path>`) has this name


def range_name(case: Case) -> str:
    """The marker range around a case's call (no '/' or '@': ncu's NVTX filter syntax uses them)."""
    return f"perfsuite.{case.variant}.{case.path}"


def run_name(case: Case) -> str:
    """The case's trace folder: its case_id made filesystem-safe."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", case.case_id).strip("-")


@contextlib.contextmanager
def marked(name: str, device: torch.device) -> Iterator[None]:
    """A `record_function` range, and on a GPU an NVTX range of the same name (ROCTx on ROCm)."""
    nvtx = torch.cuda.nvtx.range(name) if device.type == "cuda" else contextlib.nullcontext()
    with record_function(name), nvtx:
        yield


def marked_calls(
    call: Callable[[], object], case: Case, info: DeviceInfo, calls: int, roctx: ctypes.CDLL | None = None
) -> Iterator[None]:
    """`calls` calls in the case's range, each closed once the device is done, a cold case's flush before
    each in `FLUSH_RANGE`; yields after each. `roctx`: its profiler resume / pause wraps each call."""
    device = torch.device(info.device)
    flush = timing.flusher(info, case.timing)
    for _ in range(calls):
        if flush is not None:
            with marked(FLUSH_RANGE, device):
                flush()
                synchronize(device)
        synchronize(device)
        if roctx is not None:
            roctx.roctxProfilerResume(0)
        with marked(range_name(case), device):
            call()
            synchronize(device)
        if roctx is not None:
            roctx.roctxProfilerPause(0)
        yield


def record_trace(call: Callable[[], object], folder: Path, case: Case, info: DeviceInfo, calls: int) -> Path:
    """Profile `calls` calls of the case (after one warm-up step) into `folder`; the trace file written."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.pt.trace.json*"):
        old.unlink()
    # HTA maps a trace to a rank by `distributedInfo`, which torch.profiler writes only under
    # torch.distributed; `perfsuite`: the case, flat (HTA's reader skips nested maps)
    meta = {
        "distributedInfo": {"backend": "nccl" if info.is_gpu else "gloo", "rank": 0, "world_size": 1},
        "perfsuite": {
            **case_row(case, {"scenario": case.scenario}),
            **{"device": info.name, "backend": info.backend, "simulated": bool(info.simulated)},
            **{"threads": torch.get_num_threads(), "calls": calls, "range": range_name(case)},
            **{"flush_range": FLUSH_RANGE if case.timing.l2 == "cold" else "", "torch": torch.__version__},
        },
    }
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if info.device.startswith("cuda") else [])]
    steps = schedule(wait=0, warmup=1, active=calls, repeat=1)
    with warnings.catch_warnings(), native_stderr_silenced():
        warnings.simplefilter("ignore")
        handler = tensorboard_trace_handler(str(folder))
        prof = profile(activities=activities, schedule=steps, on_trace_ready=handler, record_shapes=True)
        for key, value in meta.items():  # written once recording starts
            prof.preset_metadata_json(key, strict_json.dumps(value))
        with prof:
            for _ in marked_calls(call, case, info, 1 + calls):
                prof.step()
    traces = list(folder.glob("*.pt.trace.json"))
    if not traces:
        raise RuntimeError(f"torch.profiler wrote no trace into {folder}")
    return traces[0]


def load_events(path: Path) -> pd.DataFrame:
    """Complete ('X') events of a Chrome trace: name, cat, ts, dur (µs), pid, tid, correlation."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable trace ({exc})") from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    types = {"name": str, "cat": str, "ts": float, "dur": float, "pid": str, "tid": str}
    frame = pd.DataFrame(complete, columns=list(types)).fillna({"ts": 0.0, "dur": 0.0}).astype(types)
    frame["correlation"] = [(e.get("args") or {}).get("correlation") for e in complete]
    return frame


def _inside(events: pd.DataFrame, ranges: pd.DataFrame, *, same_thread: bool = True) -> pd.Series:
    """Events that start within one of `ranges` (on the same process and thread, by default)."""
    inside = pd.Series(False, index=events.index)
    for r in ranges.itertuples(index=False):
        same = (events["pid"] == r.pid) & (events["tid"] == r.tid) if same_thread else True
        inside |= same & (events["ts"] >= r.ts) & (events["ts"] <= r.ts + r.dur)
    return inside


def _work(events: pd.DataFrame, ranges: pd.DataFrame | None) -> tuple[pd.DataFrame, str]:
    """The work in `ranges` (None: all) and its kind: on a GPU the device work launched by runtime calls in
    the ranges (by correlation id; without ids, the work starting in a range: ranges close after a sync);
    on a CPU the leaf aten ops in the ranges (their callers only dispatch)."""
    device = events[events["cat"].isin(DEVICE_CATEGORIES)]
    if len(device):
        if ranges is not None:
            launches = events[events["cat"].isin(LAUNCH_CATEGORIES)]
            ids = set(launches.loc[_inside(launches, ranges), "correlation"].dropna())
            matched = device[device["correlation"].isin(ids)]
            device = matched if len(matched) else device[_inside(device, ranges, same_thread=False)]
        return device, "device kernels"
    ops = events[events["cat"] == "cpu_op"]
    ops = ops[_inside(ops, ranges)] if ranges is not None else ops
    ops = ops.sort_values(["pid", "tid", "ts", "dur"], ascending=[True, True, True, False])
    following = ops.groupby(["pid", "tid"])["ts"].shift(-1)
    return ops[following.isna() | (following >= ops["ts"] + ops["dur"])], "cpu ops (aten, host time)"


def summarize(events: pd.DataFrame, name: str) -> tuple[pd.DataFrame, dict[str, object]]:
    """The per-kernel table of the work in the ranges called `name` (none: all the work), and the case's
    figures per call. The flush's work is left out, summed apart in `excluded_flush_*` (NaN without one)."""
    is_range = events["cat"] == "user_annotation"
    ranges = events[is_range & (events["name"] == name)]
    flush_ranges = events[is_range & (events["name"] == FLUSH_RANGE)]
    calls = max(len(ranges), 1)
    flush_work, _ = _work(events, flush_ranges)
    work, activity = _work(events, ranges if len(ranges) else None)
    work = work[~work.index.isin(flush_work.index)]
    table = work.groupby("name", sort=False)["dur"].agg(calls="count", total_us="sum", mean_us="mean")
    table = table.reset_index().rename(columns={"name": "kernel"})
    total = float(table["total_us"].sum())
    table["per_call"] = table["calls"] / calls
    table["share"] = table["total_us"] / total if total > 0 else float("nan")
    table = table.sort_values("total_us", ascending=False, ignore_index=True)[list(KERNEL_COLUMNS)]
    flushed = len(flush_ranges) > 0
    return table, {
        "activity": activity,
        "calls": len(ranges),
        "kernels_per_call": len(work) / calls,
        "kernel_us_per_call": total / calls,
        "range_us_per_call": float(ranges["dur"].mean()) if len(ranges) else float("nan"),
        "top_kernel": str(table["kernel"].iloc[0]) if len(table) else "",
        "top_share": float(table["share"].iloc[0]) if len(table) else float("nan"),
        "excluded_flush_kernels_per_call": len(flush_work) / calls if flushed else float("nan"),
        "excluded_flush_us_per_call": float(flush_work["dur"].sum()) / calls if flushed else float("nan"),
    }


class ProfileOutcome(NamedTuple):
    cases: pd.DataFrame
    files: dict[str, Path]
    interrupted: bool = False


def profile_case(
    runner: KernelRunner, case: Case, out_dir: Path, calls: int
) -> tuple[dict, pd.DataFrame | None]:
    """Trace one case; its row for cases.csv and its kernel rows (None when skipped or broken)."""
    env = {"device": runner.info.name, "backend": runner.info.backend, "threads": torch.get_num_threads()}
    row = {**case_row(case, env), "run": run_name(case)}
    try:
        if reason := runner.skip_reason(case):
            return {**row, "status": "skipped", "reason": reason}, None
        prepared, _, _ = runner.prepare(case)
        trace = record_trace(prepared.run, out_dir / run_name(case), case, runner.info, calls)
        table, figures = summarize(load_events(trace), range_name(case))
    except Exception as exc:  # one broken case must not stop the sweep
        return {**row, "status": "error", "reason": first_line(exc)}, None
    row |= {"status": "ok", "reason": "", "trace": str(trace.relative_to(out_dir)), **figures}
    keys = (*KERNEL_FRONT, *CASE_KEYS, "excluded_flush_us_per_call")
    return row, table.assign(**{k: row[k] for k in keys})


def select_cases(cases: list[Case], only: str | None) -> list[Case]:
    """Cases whose case_id matches the glob `only` (a plain string: as a substring; all when None)."""
    if not only:
        return cases
    pattern = only if any(c in only for c in "*?[") else f"*{only}*"
    return [c for c in cases if fnmatch.fnmatchcase(c.case_id, pattern)]


def kernel_runner(scenario: Scenario) -> KernelRunner:
    """The runner `run` prepares cases with, the scenario's torch CPU threads applied first."""
    settings.apply_threads(scenario.timing.threads)
    info = detect(scenario.device)
    return KernelRunner(info, {"device": info.name, "backend": info.backend})


def profile_scenario(
    scenario: Scenario, out_dir: Path, *, calls: int = 5, only: str | None = None
) -> ProfileOutcome:
    """A trace per case under `out_dir`, then kernels.csv and cases.csv (interrupted: those so far)."""
    cases = select_cases(expand(scenario), only)
    if not cases:
        raise ScenarioError(f"{scenario.source}: no case matches {only!r} (`perfsuite list` shows them)")
    runner = kernel_runner(scenario)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, tables, interrupted = [], [], False
    try:
        for case in cases:
            row, kernels = profile_case(runner, case, out_dir, calls)
            rows.append(row)
            tables += [] if kernels is None else [kernels]
    except KeyboardInterrupt:
        interrupted = True
    empty = pd.DataFrame(columns=[*KERNEL_FRONT, *KERNEL_COLUMNS])
    kernels = pd.concat(tables, ignore_index=True) if tables else empty
    files = {"kernels": out_dir / "kernels.csv", "cases": out_dir / "cases.csv"}
    kernels[[*KERNEL_FRONT, *kernels.columns.drop(KERNEL_FRONT)]].to_csv(files["kernels"], index=False)
    frame = pd.DataFrame(rows, columns=None if rows else ["case_id", "status", "reason"])
    frame.to_csv(files["cases"], index=False)
    return ProfileOutcome(frame, files, interrupted)


def short_table(outcome: ProfileOutcome, width: int = 60) -> str:
    """One line per profiled case: kernels per call, time per call and the top kernel."""
    ok = outcome.cases[outcome.cases["status"] == "ok"]
    if ok.empty:
        return "no case was profiled"
    top = ok["top_kernel"].map(lambda s: s if len(s) <= width else s[: width - 1] + "…")
    kernels, us = ok["kernels_per_call"].map("{:.3g}".format), ok["kernel_us_per_call"].map("{:.4g}".format)
    share = (100 * ok["top_share"]).map("{:.0f} %".format)
    table = {"case": ok["case_id"], "kernels/call": kernels, "us/call": us, "top kernel": top, "share": share}
    return pd.DataFrame(table).to_string(index=False)


def _roctx() -> ctypes.CDLL:
    """The ROCTx library whose profiler pause / resume calls rocprofv3 --selected-regions honours."""
    rocm_lib = f"{os.environ.get('ROCM_PATH', '/opt/rocm')}/lib/librocprofiler-sdk-roctx.so"
    for candidate in filter(None, (ctypes.util.find_library("rocprofiler-sdk-roctx"), rocm_lib)):
        with contextlib.suppress(OSError):
            lib = ctypes.CDLL(candidate)
            for fn in (lib.roctxProfilerPause, lib.roctxProfilerResume):
                fn.argtypes, fn.restype = [ctypes.c_uint64], ctypes.c_int
            return lib
    raise RuntimeError("librocprofiler-sdk-roctx.so not found (ROCm >= 6.2): cannot mark the counted region")


def call_case(scenario: Scenario, case_id: str, *, calls: int = 1, roctx_region: bool = False) -> str | None:
    """One case's call `calls` times in its range, prepared as `run` prepares it (outside the range), for
    ncu, nsys or rocprofv3 (`roctx_region`: --selected-regions). Returns why the case is skipped, or None."""
    cases = {c.case_id: c for c in expand(scenario)}
    if case_id not in cases:
        raise ScenarioError(f"{scenario.source}: no case {case_id!r} (`perfsuite list` shows them)")
    case, runner = cases[case_id], kernel_runner(scenario)
    if reason := runner.skip_reason(case):
        return reason
    prepared, _, _ = runner.prepare(case)
    for _ in marked_calls(prepared.run, case, runner.info, calls, _roctx() if roctx_region else None):
        pass
    print(json.dumps({"case_id": case_id, "range": range_name(case), "calls": calls}))
    return None
