"""Measured HBM traffic (`run --counters`): each ok case relaunched (`perfsuite call`) under ncu or rocprofv3,
away from the timed sweep; without a tool, permission or GPU, `counters` says why (docs/profiling.md).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

from perfsuite.core.exits import EXIT_SKIPPED  # `perfsuite call`'s status for a case that cannot run here

if TYPE_CHECKING:  # torch-free at import
    from perfsuite.measure.device import DeviceInfo
    from perfsuite.scenario.load import Case

NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
ROCPROF_COUNTERS = ("FETCH_SIZE", "WRITE_SIZE")  # KiB fetched from / written to video memory
# ncu prints decimal units (Kbyte = 1000 bytes; newer versions KB); KiB and friends are binary
BYTE_UNITS = {"": 1.0, "b": 1.0, "byte": 1.0, "bytes": 1.0} | {
    f"{prefix}{suffix}": base**power
    for power, prefix in enumerate("kmgt", 1)
    for suffix, base in (("byte", 1e3), ("b", 1e3), ("ib", 1024.0))
}


class CountersError(RuntimeError):
    """Counters could not be measured; the message is the one-line reason for the `counters` column."""


class Measured(NamedTuple):
    """Bytes one call moved, by the counters, and how many kernels they came from."""

    read: float
    write: float
    kernels: int


def _number(text: str) -> float:
    text = text.strip().replace(",", "")
    return math.nan if text in ("", "n/a", "N/A") else float(text)


def _bytes(value: str, unit: str) -> float:
    if (scale := BYTE_UNITS.get(unit.strip().lower())) is None:
        raise CountersError(f"unknown byte unit {unit!r} in the ncu output")
    return _number(value) * scale


def parse_ncu_csv(text: str) -> Measured:
    """DRAM bytes summed over the kernels of an `ncu --csv` report: the `--page raw` table (a header, a units
    row, a row per kernel) or the details page (a row per kernel and metric), tool chatter skipped."""
    if "No kernels were profiled" in text:
        raise CountersError("ncu profiled no kernel inside the NVTX range")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().strip('"').startswith("ID")), None)
    if start is None:
        raise CountersError("no CSV table in the ncu output")
    header, *body = (row for row in csv.reader(lines[start:]) if row)
    body = [r for r in body if len(r) == len(header)]  # drops ==PROF== / ==WARNING== lines
    if "Metric Name" in header:
        name, unit, value = (header.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value"))
        cells = [(r[0], r[name], r[unit], r[value]) for r in body]
    else:
        if missing := [m for m in NCU_METRICS if m not in header]:
            raise CountersError(f"ncu output lacks {', '.join(missing)}")
        units = body[0] if body and not body[0][0].strip() else [""] * len(header)
        at = {m: header.index(m) for m in NCU_METRICS}
        cells = [(r[0], m, units[i], r[i]) for r in body if r[0].strip() for m, i in at.items()]
    counted = [(kernel, metric, _bytes(v, u)) for kernel, metric, u, v in cells if metric in NCU_METRICS]
    if not counted:
        raise CountersError("ncu profiled no kernel inside the NVTX range")
    read, write = (sum(b for _, m, b in counted if m == metric) for metric in NCU_METRICS)
    return Measured(read, write, len({kernel for kernel, _, _ in counted}))


def parse_rocprof_csv(text: str) -> Measured:
    """FETCH_SIZE and WRITE_SIZE (KiB) summed over the dispatches of a rocprofv3 counter_collection.csv."""
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).rename(columns=str.lower)
    if not {"counter_name", "counter_value"} <= set(frame.columns):
        raise CountersError("rocprofv3 CSV without Counter_Name / Counter_Value columns")
    names = frame["counter_name"].str.strip()
    counted = frame[names.isin(ROCPROF_COUNTERS)]
    if counted.empty:
        raise CountersError("rocprofv3 CSV has no FETCH_SIZE or WRITE_SIZE rows (no dispatch counted)")
    kib = {c: float(counted.loc[names == c, "counter_value"].map(_number).sum()) for c in ROCPROF_COUNTERS}
    dispatch = next((c for c in ("dispatch_id", "correlation_id") if c in frame), None)
    kernels = counted[dispatch].nunique() if dispatch else len(counted) // len(ROCPROF_COUNTERS)
    return Measured(kib["FETCH_SIZE"] * 1024, kib["WRITE_SIZE"] * 1024, int(kernels))


def row_values(
    measured: Measured | None, bytes_model: float, note: str, bytes_uncached: float | None = None
) -> dict[str, object]:
    """The counter columns of a row (NaN bytes when not measured, `note` says why): the measured bytes over
    the cache-aware model (`bytes_model`) and over every pass from HBM."""
    read, write = (math.nan, math.nan) if measured is None else (measured.read, measured.write)
    total, uncached = read + write, bytes_model if bytes_uncached is None else bytes_uncached
    return {
        "bytes_measured": total,
        "bytes_read_measured": read,
        "bytes_write_measured": write,
        "bytes_measured_vs_model": total / bytes_model if bytes_model else math.nan,
        "bytes_measured_vs_uncached": total / uncached if uncached else math.nan,
        "counters": note,
    }


class Tool(NamedTuple):
    name: str  # "ncu" | "rocprofv3"
    path: str
    version: str = ""


TOOLS = {
    # backend: (override variable, program, (install root variable, its default), what it is)
    "cuda": ("PERFSUITE_NCU", "ncu", ("CUDA_HOME", "/usr/local/cuda"), "Nsight Compute (ncu)"),
    "rocm": ("PERFSUITE_ROCPROFV3", "rocprofv3", ("ROCM_PATH", "/opt/rocm"), "rocprofv3 (rocprofiler-sdk)"),
}


def find_tool(backend: str) -> Tool:
    """The counter tool for a backend, or `CountersError` saying what is missing."""
    if backend not in TOOLS:
        need = "hardware counters need a GPU (ncu on NVIDIA, rocprofv3 on AMD)"
        raise CountersError(f"{need}; this run is on the {backend.upper()}")
    env, name, (root_env, root), what = TOOLS[backend]
    installed = os.path.join(os.environ.get(root_env, root), "bin", name)
    for candidate in (os.environ.get(env), shutil.which(name), installed):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            try:
                out = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                out = None
            version = re.search(r"[Vv]ersion[: ]+([0-9][\w.\-]*)", out.stdout if out else "")
            return Tool(name, candidate, version.group(1) if version else "")
    raise CountersError(f"{what} not found on PATH (or set {env})")


def _tail(result: subprocess.CompletedProcess) -> str:
    text = f"{result.stdout or ''}\n{result.stderr or ''}"
    if "ERR_NVGPUCTRPERM" in text:
        return (
            "no permission to read GPU counters (ERR_NVGPUCTRPERM: run as root or allow profiling for users)"
        )
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("==PROF==")]
    return lines[-1][:200] if lines else "no output"


class CounterCollector:
    """Called with a case: the counter columns of its row, measured in a subprocess under the vendor's
    tool. Never raises: problems become the reason."""

    def __init__(self, info: DeviceInfo, scenario_source: str, out_dir: Path, *, timeout_s: float = 900.0,
                 run: Callable[..., subprocess.CompletedProcess] = subprocess.run):  # fmt: skip
        self.info, self.scenario_source, self.out_dir = info, scenario_source, out_dir
        self.timeout_s, self._run = timeout_s, run

    @cached_property
    def tool(self) -> Tool | CountersError:
        try:
            return find_tool(self.info.backend)
        except CountersError as exc:
            return exc

    def __call__(self, case: Case) -> dict[str, object]:
        from perfsuite import variants
        from perfsuite.core import dtypes

        dtype = dtypes.dtype_of(case.dtype)
        traffic = variants.get(case.variant).traffic(case.batch, case.vocab, case.topk, dtype)
        model = traffic.hbm(self.info.model_cache_bytes)
        if isinstance(self.tool, CountersError):
            return row_values(None, model, f"skipped: {self.tool}")
        try:
            measured, note = self.measure(self.tool, case)
        except CountersError as exc:
            return row_values(None, model, f"skipped: {exc}")
        except Exception as exc:  # a counter run must never stop the sweep
            return row_values(None, model, f"error: {type(exc).__name__}: {exc}"[:300])
        return row_values(measured, model, note, traffic.total)

    def _call(self, *command: str) -> subprocess.CompletedProcess:
        try:
            result = self._run(list(command), capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise CountersError(f"{Path(command[0]).name} took over {self.timeout_s:.0f} s") from None
        if result.returncode == EXIT_SKIPPED:
            raise CountersError(f"case skipped in the counter run: {_tail(result)}")
        if result.returncode != 0:
            raise CountersError(f"{Path(command[0]).name} exited {result.returncode}: {_tail(result)}")
        if "ERR_NVGPUCTRPERM" in f"{result.stdout}{result.stderr}":
            raise CountersError(_tail(result))
        return result

    def measure(self, tool: Tool, case: Case) -> tuple[Measured, str]:
        """Run the case under the tool and read its CSV; the bytes and a note on how they were taken."""
        from perfsuite.tools.profiling import range_name, run_name

        folder = self.out_dir / run_name(case)
        folder.mkdir(parents=True, exist_ok=True)
        child = [sys.executable, "-m", "perfsuite", "call", self.scenario_source, case.case_id]
        child += ["--device", self.info.device]
        version = f" {tool.version}" if tool.version else ""
        if tool.name == "ncu":
            report = folder / "counters.ncu-rep"
            # --cache-control all would flush before every kernel, counting as HBM traffic what stays in the
            # cache between the kernels of one call; ncu locks clocks at base by default, --clock-control none
            # runs the kernels as the timed sweep does
            options = (
                f"--target-processes all --nvtx --nvtx-include {range_name(case)}/"
                f" --metrics {','.join(NCU_METRICS)} --replay-mode kernel --cache-control none"
                " --clock-control none --force-overwrite --export"
            )
            self._call(tool.path, *options.split(), str(report), *child)
            read_back = ["--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
            text = self._call(tool.path, *read_back).stdout
            (folder / "counters.csv").write_text(text, encoding="utf-8")
            measured = parse_ncu_csv(text)
            cache = "after perfsuite's flush" if case.timing.l2 == "cold" else "hot"
            note = f"ncu{version} kernel replay, no cache control ({cache}): {measured.kernels} kernels"
            return measured, note
        for old in folder.rglob("*counter_collection.csv"):
            old.unlink()
        options = "--selected-regions --marker-trace --output-format csv --output-file counters"
        command = [tool.path, "--pmc", *ROCPROF_COUNTERS, *options.split(), "--output-directory", str(folder)]
        self._call(*command, "--", *child, "--roctx-region")
        found = sorted(folder.rglob("*counter_collection.csv"))
        if not found:
            raise CountersError(f"rocprofv3 wrote no counter_collection.csv under {folder}")
        measured = parse_rocprof_csv(found[-1].read_text(encoding="utf-8"))
        return measured, f"rocprofv3{version} FETCH_SIZE + WRITE_SIZE: {measured.kernels} dispatches"
