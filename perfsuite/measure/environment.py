"""Where and with what a run was measured: the facts every row of it carries (device, runtime, driver,
torch and triton versions, the perfsuite commit, the measured copy bandwidth and the clocks it ran at,
the cache the bytes model assumes)."""

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


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_sha() -> str:
    """The perfsuite checkout's commit (with `-dirty` for uncommitted changes), or 'unknown'."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def _first_line_of(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0].strip() if out.strip() else ""


def driver_version(info: DeviceInfo) -> str:
    """The GPU driver's version: nvidia-smi on NVIDIA, the amdgpu module's on ROCm; '' on a CPU or unknown."""
    if info.backend == "cuda":
        index = info.device.split(":")[-1]
        return _first_line_of(
            ["nvidia-smi", f"--id={index}", "--query-gpu=driver_version", "--format=csv,noheader"]
        )
    if info.backend == "rocm":
        try:
            return Path("/sys/module/amdgpu/version").read_text().strip()
        except OSError:
            return ""
    return ""


def gpu_state(info: DeviceInfo) -> dict[str, object]:
    """The GPU's clocks (MHz), temperature (C) and power (W) now, where readable: nvidia-smi on NVIDIA,
    the amdgpu sysfs files on ROCm; {} on a CPU or a simulated GPU."""
    if info.simulated or not info.is_gpu:
        return {}
    if info.backend == "cuda":
        index = info.device.split(":")[-1]
        fields = (
            "clocks.sm",
            "clocks.mem",
            "clocks.max.sm",
            "temperature.gpu",
            "power.draw",
        )
        line = _first_line_of(
            [
                "nvidia-smi",
                f"--id={index}",
                f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits",
            ]
        )
        values = [v.strip() for v in line.split(",")] if line else []
        names = ("sm_mhz", "mem_mhz", "max_sm_mhz", "temp_c", "power_w")
        return dict(zip(names, values, strict=True)) if len(values) == len(names) else {}
    out: dict[str, object] = {}
    for card in sorted(Path("/sys/class/drm").glob("card[0-9]*/device"))[:1]:
        for name, key in (("pp_dpm_sclk", "sm_mhz"), ("pp_dpm_mclk", "mem_mhz")):
            lines = _read_lines(card / name)
            current = [line for line in lines if line.endswith("*")]
            if current:
                out[key] = current[0].split()[1].rstrip("*")
        for temp in sorted(card.glob("hwmon/hwmon*/temp1_input"))[:1]:
            lines = _read_lines(temp)
            if lines:
                out["temp_c"] = int(lines[0]) / 1000
    return out


def _mhz(state: dict[str, object], key: str) -> float:
    """A clock of `gpu_state` as a number (NaN where it was not read or is not a number)."""
    found = re.match(r"\s*(\d+(?:\.\d+)?)", str(state.get(key, "")))  # "1980", amdgpu's "2100Mhz"
    return float(found.group(1)) if found else float("nan")


@cache
def copy_measurement(info: DeviceInfo) -> memory.CopyBandwidth:
    """The device's copy bandwidth, once per process: on a GPU after about 0.2 s of copies, with the
    clocks read by `gpu_state` while those copies ran (none on a CPU or a simulated GPU)."""
    probe = (lambda: gpu_state(info)) if info.is_gpu and not info.simulated else None
    return memory.copy_bandwidth(info.device, probe=probe)


def copy_columns(info: DeviceInfo) -> dict[str, object]:
    """copy_gbps and the state it was measured in: the SM and memory clocks (MHz) under the copies, and
    the seconds of warm-up copies before them."""
    copy = copy_measurement(info)
    return {
        "copy_gbps": copy.gbps,
        "copy_sm_mhz": _mhz(copy.during, "sm_mhz"),
        "copy_mem_mhz": _mhz(copy.during, "mem_mhz"),
        "copy_warmup_s": copy.warmup_s,
    }


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().strip().splitlines()
    except OSError:
        return []


def environment(info: DeviceInfo, scenario: str, *, run: str = "", settings: str = "") -> dict[str, object]:
    """Facts every row carries: where and with what it was measured (`run`: the run's label; `settings`:
    the fingerprint of its settings)."""
    return {
        "scenario": scenario,
        "run": run,
        "settings": settings,
        "threads": torch.get_num_threads(),
        **machine.facts(),
        "backend": info.backend,
        "device": info.name,
        "simulated": info.simulated,
        "runtime": info.runtime,
        "driver": driver_version(info),
        "peak_gbps": info.peak_gbps if info.peak_gbps else float("nan"),
        **copy_columns(info),
        "model_cache_bytes": info.model_cache_bytes,
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "git_sha": git_sha(),
    }
