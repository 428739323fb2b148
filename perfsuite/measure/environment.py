"""Where and with what a run was measured: the facts every row of it carries."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
from functools import cache
from pathlib import Path

import torch

from perfsuite.core import machine
from perfsuite.measure import memory
from perfsuite.measure.device import DeviceInfo

# gpu_state's key: nvidia-smi's field
SMI_FIELDS = {"sm_mhz": "clocks.sm", "mem_mhz": "clocks.mem", "max_sm_mhz": "clocks.max.sm",
              "temp_c": "temperature.gpu", "power_w": "power.draw"}  # fmt: skip


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _first_line_of(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0].strip() if out else ""


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().strip().splitlines()
    except OSError:
        return []


def _smi(info: DeviceInfo, *options: str) -> str:
    """The first line nvidia-smi prints about this device with these options ("" when it cannot)."""
    return _first_line_of(["nvidia-smi", f"--id={info.device.split(':')[-1]}", *options])


def git_sha() -> str:
    """The perfsuite checkout's commit (with `-dirty` for uncommitted changes), or 'unknown'."""
    git = ["git", "-C", str(Path(__file__).resolve().parent.parent)]
    sha = _first_line_of([*git, "rev-parse", "--short=12", "HEAD"])
    dirty = _first_line_of([*git, "status", "--porcelain", "--untracked-files=no"])
    return "unknown" if not sha else f"{sha}-dirty" if dirty else sha


def driver_version(info: DeviceInfo) -> str:
    """The GPU driver's version: nvidia-smi on NVIDIA, the amdgpu module's on ROCm; '' on a CPU or unknown."""
    if info.backend == "cuda":
        return _smi(info, "--query-gpu=driver_version", "--format=csv,noheader")
    return "".join(_read_lines(Path("/sys/module/amdgpu/version"))[:1]) if info.backend == "rocm" else ""


def gpu_state(info: DeviceInfo) -> dict[str, object]:
    """The GPU's clocks (MHz), temperature (C) and power (W) now, where nvidia-smi or amdgpu's sysfs say."""
    if info.simulated or not info.is_gpu:
        return {}
    if info.backend == "cuda":
        line = _smi(info, f"--query-gpu={','.join(SMI_FIELDS.values())}", "--format=csv,noheader,nounits")
        values = [v.strip() for v in line.split(",")] if line else []
        return dict(zip(SMI_FIELDS, values, strict=True)) if len(values) == len(SMI_FIELDS) else {}
    out: dict[str, object] = {}
    for card in sorted(Path("/sys/class/drm").glob("card[0-9]*/device"))[:1]:  # the current level has a *
        for name, key in (("pp_dpm_sclk", "sm_mhz"), ("pp_dpm_mclk", "mem_mhz")):
            current = [line.split()[1].rstrip("*") for line in _read_lines(card / name) if line.endswith("*")]
            out.update({key: current[0]} if current else {})
        for lines in map(_read_lines, sorted(card.glob("hwmon/hwmon*/temp1_input"))[:1]):
            out.update({"temp_c": int(lines[0]) / 1000} if lines else {})
    return out


@cache
def copy_columns(info: DeviceInfo) -> dict[str, object]:
    """copy_gbps (once per process), the SM and memory clocks `gpu_state` read under it, its warm-up time."""
    probe = (lambda: gpu_state(info)) if info.is_gpu and not info.simulated else None
    copy = memory.copy_bandwidth(info.device, probe=probe)
    clocks = {}
    for key in ("sm_mhz", "mem_mhz"):  # "1980", amdgpu's "2100Mhz"; NaN where not read or not a number
        found = re.match(r"\s*(\d+(?:\.\d+)?)", str(copy.during.get(key, "")))
        clocks[f"copy_{key}"] = float(found.group(1)) if found else float("nan")
    return {"copy_gbps": copy.gbps, **clocks, "copy_warmup_s": copy.warmup_s}


def environment(info: DeviceInfo, scenario: str, *, run: str = "", settings: str = "") -> dict[str, object]:
    """Facts every row carries (`run`: the run's label; `settings`: the fingerprint of its settings)."""
    return {
        "scenario": scenario, "run": run, "settings": settings, "threads": torch.get_num_threads(),
        **machine.facts(),
        "backend": info.backend, "device": info.name, "simulated": info.simulated, "runtime": info.runtime,
        "driver": driver_version(info), "peak_gbps": info.peak_gbps if info.peak_gbps else float("nan"),
        **copy_columns(info),
        "model_cache_bytes": info.model_cache_bytes, "torch": torch.__version__,
        "triton": package_version("triton"), "git_sha": git_sha(),
    }  # fmt: skip
