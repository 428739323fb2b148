"""Measured HBM traffic from hardware counters: Nsight Compute on NVIDIA, rocprofv3 on AMD (`run --counters`).

Each ok case is relaunched as `python -m perfsuite call SCENARIO CASE_ID` under the tool, which prepares the
case exactly as `run` does and calls it once inside the range `perfsuite.<variant>.<path>`; only kernels
launched inside that range are counted. A subprocess per case keeps the tool's slowdown (kernel
serialization and replay) away from the timed sweep and lets the tool own the process from its start.

- NVIDIA: `ncu --nvtx --nvtx-include perfsuite.<variant>.<path>/ --metrics dram__bytes_read.sum,
  dram__bytes_write.sum --replay-mode kernel --cache-control none --export X.ncu-rep`, then
  `ncu --import X.ncu-rep --csv --page raw --print-units base`. Kernel replay works for every path (graph
  replays are profiled node by node, allocations and syncs inside the range are allowed, unlike range
  replay) and gives a row per kernel. ncu never flushes the cache itself: a cold case's call starts after
  perfsuite's read-only flush (outside the range), and its kernels see what the previous ones left in the
  cache, as in the timed run and as the cache-aware bytes model assumes (`bytes_model`).
- AMD: `rocprofv3 --pmc FETCH_SIZE WRITE_SIZE --selected-regions --output-format csv`, the call wrapped in
  roctxProfilerResume / roctxProfilerPause; counter_collection.csv has a row per dispatch and counter, in KiB.
  These count the L2's traffic to the fabric, which the MI300 series' Infinity Cache may still serve: where
  `bytes_measured_vs_model` (the model with the 256 MiB Infinity Cache) is off, read
  `bytes_measured_vs_uncached` beside it (to be settled on the first MI300X run).

Where the tool, the counters (permissions) or a GPU are missing, the case keeps NaN in the byte columns and
the `counters` column says why.
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
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:  # torch-free at import
    from perfsuite.measure.device import DeviceInfo
    from perfsuite.scenario.load import Case

NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
ROCPROF_COUNTERS = ("FETCH_SIZE", "WRITE_SIZE")  # KiB fetched from / written to video memory
MEASURED_COLUMNS = (
    "bytes_measured",
    "bytes_read_measured",
    "bytes_write_measured",
    "bytes_measured_vs_model",
    "bytes_measured_vs_uncached",
)
EXIT_SKIPPED = 3
"""Exit status of `perfsuite call` for a case that cannot run here."""
BYTE_UNITS = {
    "": 1.0,
    "b": 1.0,
    "byte": 1.0,
    "bytes": 1.0,
    "kbyte": 1e3,
    "kb": 1e3,
    "mbyte": 1e6,
    "mb": 1e6,
    "gbyte": 1e9,
    "gb": 1e9,
    "tbyte": 1e12,
    "tb": 1e12,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
}
"""ncu prints decimal units (Kbyte = 1000 bytes; newer versions KB); KiB and friends are binary."""


class CountersError(RuntimeError):
    """Counters could not be measured; the message is the one-line reason for the `counters` column."""


@dataclass(frozen=True)
class Measured:
    """Bytes one call moved, by the counters, and how many kernels they came from."""

    read: float
    write: float
    kernels: int

    @property
    def total(self) -> float:
        return self.read + self.write


# ------------------------------------------------------------------------------------------ parsing


def _number(text: str) -> float:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return math.nan
    return float(text)


def _bytes(value: str, unit: str) -> float:
    scale = BYTE_UNITS.get(unit.strip().lower())
    if scale is None:
        raise CountersError(f"unknown byte unit {unit!r} in the ncu output")
    return _number(value) * scale


def _csv_rows(text: str, first_column: str) -> list[list[str]]:
    """CSV rows from the header (the line starting with `first_column`) on; tool chatter above is skipped."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().strip('"').startswith(first_column):
            return [row for row in csv.reader(io.StringIO("\n".join(lines[i:]))) if row]
    return []


def parse_ncu_csv(text: str) -> Measured:
    """DRAM bytes summed over the kernels of an `ncu --csv` report: `--page raw` or the default details page.

    raw: a header row, a units row, then a row per kernel with a column per metric.
    details: a row per kernel and metric, with "Metric Name", "Metric Unit" and "Metric Value" columns.
    """
    if "==PROF== No kernels were profiled" in text or "No kernels were profiled" in text:
        raise CountersError("ncu profiled no kernel inside the NVTX range")
    rows = _csv_rows(text, "ID")
    if not rows:
        raise CountersError("no CSV table in the ncu output")
    header = rows[0]
    body = [r for r in rows[1:] if len(r) == len(header)]  # drops ==PROF== / ==WARNING== lines
    if "Metric Name" in header:
        return _ncu_details(header, body)
    missing = [m for m in NCU_METRICS if m not in header]
    if missing:
        raise CountersError(f"ncu output lacks {', '.join(missing)}")
    units = body[0] if body and not body[0][0].strip() else [""] * len(header)
    kernels = [r for r in body if r and r[0].strip()]
    if not kernels:
        raise CountersError("ncu profiled no kernel inside the NVTX range")
    read, write = (header.index(m) for m in NCU_METRICS)
    return Measured(
        sum(_bytes(r[read], units[read]) for r in kernels),
        sum(_bytes(r[write], units[write]) for r in kernels),
        len(kernels),
    )


def _ncu_details(header: list[str], body: list[str]) -> Measured:
    name, unit, value = (header.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value"))
    totals = {m: 0.0 for m in NCU_METRICS}
    kernels: set[str] = set()
    for row in body:
        if len(row) == len(header) and row[name] in totals:
            totals[row[name]] += _bytes(row[value], row[unit])
            kernels.add(row[0])
    if not kernels:
        raise CountersError(f"ncu output has no {' or '.join(NCU_METRICS)} rows")
    return Measured(totals[NCU_METRICS[0]], totals[NCU_METRICS[1]], len(kernels))


def parse_rocprof_csv(text: str) -> Measured:
    """FETCH_SIZE and WRITE_SIZE (KiB) summed over the dispatches of a rocprofv3 counter_collection.csv."""
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    columns = {c.lower(): c for c in frame.columns}
    if "counter_name" not in columns or "counter_value" not in columns:
        raise CountersError("rocprofv3 CSV without Counter_Name / Counter_Value columns")
    names = frame[columns["counter_name"]].str.strip()
    values = frame[columns["counter_value"]].map(_number)
    kib = {c: float(values[names == c].sum()) for c in ROCPROF_COUNTERS}
    if not (names.isin(ROCPROF_COUNTERS)).any():
        raise CountersError(
            f"rocprofv3 CSV has no {' or '.join(ROCPROF_COUNTERS)} rows (no dispatch counted)"
        )
    dispatch = columns.get("dispatch_id") or columns.get("correlation_id")
    counted = frame[names.isin(ROCPROF_COUNTERS)]
    kernels = counted[dispatch].nunique() if dispatch else len(counted) // len(ROCPROF_COUNTERS)
    return Measured(kib["FETCH_SIZE"] * 1024, kib["WRITE_SIZE"] * 1024, int(kernels))


# ------------------------------------------------------------------------------------------ the row


def row_values(
    measured: Measured | None, bytes_model: float, note: str, bytes_uncached: float | None = None
) -> dict[str, object]:
    """The counter columns of a result row (NaN bytes and the reason in `note` when not measured): the
    measured bytes over the cache-aware model (`bytes_model`) and over every pass from HBM."""
    if measured is None:
        return {**dict.fromkeys(MEASURED_COLUMNS, math.nan), "counters": note}
    uncached = bytes_model if bytes_uncached is None else bytes_uncached
    return {
        "bytes_measured": measured.total,
        "bytes_read_measured": measured.read,
        "bytes_write_measured": measured.write,
        "bytes_measured_vs_model": measured.total / bytes_model if bytes_model else math.nan,
        "bytes_measured_vs_uncached": measured.total / uncached if uncached else math.nan,
        "counters": note,
    }


# ------------------------------------------------------------------------------------------ the tools


@dataclass(frozen=True)
class Tool:
    name: str  # "ncu" | "rocprofv3"
    path: str
    version: str = ""


def _version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    found = re.search(r"(?:Version|version)[: ]+([0-9][\w.\-]*)", out)
    return found.group(1) if found else ""


TOOLS = {
    # backend: (override variable, program, (install root variable, its default), what it is)
    "cuda": ("PERFSUITE_NCU", "ncu", ("CUDA_HOME", "/usr/local/cuda"), "Nsight Compute (ncu)"),
    "rocm": ("PERFSUITE_ROCPROFV3", "rocprofv3", ("ROCM_PATH", "/opt/rocm"), "rocprofv3 (rocprofiler-sdk)"),
}


def find_tool(backend: str) -> Tool:
    """The counter tool for a backend, or `CountersError` saying what is missing."""
    if backend not in TOOLS:
        raise CountersError(
            "hardware counters need a GPU (ncu on NVIDIA, rocprofv3 on AMD); "
            f"this run is on the {backend.upper()}"
        )
    env, name, (root_env, root), what = TOOLS[backend]
    installed = os.path.join(os.environ.get(root_env, root), "bin", name)
    for candidate in (os.environ.get(env), shutil.which(name), installed):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Tool(name, candidate, _version(candidate))
    raise CountersError(f"{what} not found on PATH (or set {env})")


def ncu_command(tool: Tool, case: Case, child: list[str], report: Path) -> list[str]:
    """Profile the kernels of the case's NVTX range with the cache as the call leaves it between kernels
    (a cold call starts after perfsuite's flush, outside the range), at the clocks the GPU runs at (not
    ncu's default of locking them at base)."""
    from perfsuite.tools.profiling import range_name

    return [
        tool.path,
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        f"{range_name(case)}/",
        "--metrics",
        ",".join(NCU_METRICS),
        "--replay-mode",
        "kernel",
        "--cache-control",  # ncu's "all" would flush before every kernel: temporaries that stay in the
        "none",  # cache between kernels would be counted as HBM traffic
        "--clock-control",  # ncu locks clocks at base by default: bytes do not care, but the kernel
        "none",  # then runs as it does in the timed sweep
        "--export",
        str(report),
        "--force-overwrite",
        *child,
    ]


def ncu_import_command(tool: Tool, report: Path) -> list[str]:
    return [tool.path, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def rocprof_command(tool: Tool, out_dir: Path, child: list[str]) -> list[str]:
    """Count FETCH_SIZE / WRITE_SIZE of the dispatches inside the child's ROCTx resume / pause region."""
    return [
        tool.path,
        "--pmc",
        *ROCPROF_COUNTERS,
        "--selected-regions",
        "--marker-trace",
        "--output-format",
        "csv",
        "--output-directory",
        str(out_dir),
        "--output-file",
        "counters",
        "--",
        *child,
    ]


Runner = Callable[..., subprocess.CompletedProcess]


def _tail(result: subprocess.CompletedProcess) -> str:
    text = f"{result.stdout or ''}\n{result.stderr or ''}"
    if "ERR_NVGPUCTRPERM" in text:
        return (
            "no permission to read GPU counters (ERR_NVGPUCTRPERM: run as root or allow profiling for users)"
        )
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("==PROF==")]
    return lines[-1][:200] if lines else "no output"


class CounterCollector:
    """Measures the HBM bytes of cases, one subprocess under the vendor's tool per case.

    Call it with a case: the counter columns of its row. Never raises: problems become the reason.
    """

    def __init__(
        self,
        info: DeviceInfo,
        scenario_source: str,
        out_dir: Path,
        *,
        timeout_s: float = 900.0,
        run: Runner = subprocess.run,
    ):
        self.info, self.scenario_source, self.out_dir = info, scenario_source, out_dir
        self.timeout_s, self._run = timeout_s, run

    @cached_property
    def tool(self) -> Tool | CountersError:
        try:
            return find_tool(self.info.backend)
        except CountersError as exc:
            return exc

    def child(self, case: Case, *, roctx: bool = False) -> list[str]:
        command = [sys.executable, "-m", "perfsuite", "call", self.scenario_source, case.case_id]
        return [*command, "--device", self.info.device, *(["--roctx-region"] if roctx else [])]

    def __call__(self, case: Case) -> dict[str, object]:
        from perfsuite import variants
        from perfsuite.core import dtypes

        dtype = dtypes.dtype_of(case.dtype)
        traffic = variants.get(case.variant).traffic(case.batch, case.vocab, case.topk, dtype)
        model = traffic.hbm(self.info.model_cache_bytes)
        tool = self.tool
        if isinstance(tool, CountersError):
            return row_values(None, model, f"skipped: {tool}")
        try:
            measured, note = self.measure(tool, case)
        except CountersError as exc:
            return row_values(None, model, f"skipped: {exc}")
        except Exception as exc:  # a counter run must never stop the sweep
            return row_values(None, model, f"error: {type(exc).__name__}: {exc}"[:300])
        return row_values(measured, model, note, traffic.total)

    def _call(self, command: list[str]) -> subprocess.CompletedProcess:
        try:
            result = self._run(command, capture_output=True, text=True, timeout=self.timeout_s)
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
        from perfsuite.tools.profiling import run_name

        folder = self.out_dir / run_name(case)
        folder.mkdir(parents=True, exist_ok=True)
        version = f" {tool.version}" if tool.version else ""
        if tool.name == "ncu":
            report = folder / "counters.ncu-rep"
            self._call(ncu_command(tool, case, self.child(case), report))
            text = self._call(ncu_import_command(tool, report)).stdout
            (folder / "counters.csv").write_text(text, encoding="utf-8")
            measured = parse_ncu_csv(text)
            cache = "after perfsuite's flush" if case.timing.l2 == "cold" else "hot"
            note = f"ncu{version} kernel replay, no cache control ({cache}): {measured.kernels} kernels"
        else:
            for old in folder.rglob("*counter_collection.csv"):
                old.unlink()
            self._call(rocprof_command(tool, folder, self.child(case, roctx=True)))
            found = sorted(folder.rglob("*counter_collection.csv"))
            if not found:
                raise CountersError(f"rocprofv3 wrote no counter_collection.csv under {folder}")
            measured = parse_rocprof_csv(found[-1].read_text(encoding="utf-8"))
            note = f"rocprofv3{version} FETCH_SIZE + WRITE_SIZE: {measured.kernels} dispatches"
        return measured, note
