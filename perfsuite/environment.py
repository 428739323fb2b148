"""Where and with what a run was measured: the facts every row of it carries (device, runtime, driver,
torch and triton versions, the perfsuite commit, the measured copy bandwidth)."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import torch

from perfsuite import memory
from perfsuite.device import DeviceInfo


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


def environment(info: DeviceInfo, scenario: str) -> dict[str, object]:
    """Facts every row carries: where and with what it was measured."""
    return {
        "scenario": scenario,
        "backend": info.backend,
        "device": info.name,
        "simulated": info.simulated,
        "runtime": info.runtime,
        "driver": driver_version(info),
        "peak_gbps": info.peak_gbps if info.peak_gbps else float("nan"),
        "copy_gbps": memory.copy_gbps(info.device),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "git_sha": git_sha(),
    }
