"""The host machine's state: what it is (CPU model, cores, cgroup limits, frequency governor), how busy
it is (load average, the CPU time other processes take while perfsuite measures) and whether a run shared
it. Reads /proc and /sys only (Linux); anything unreadable is reported as unknown, never raised.

`CpuUse` is the figure a reader needs: the cores other processes kept busy between two snapshots, from
/proc/stat's busy time minus this process's own (and its children's) CPU time. A load average counts
this run's threads too and lags by a minute; `other_cores` does neither.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
SHARED_CORES = 0.5
"""A run (or case) whose other processes kept more than this many cores busy on average shared the
machine: its figures are flagged and the console and report say so."""


def _read(path: Path | str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's processor string."""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.split(":")[0].strip() in ("model name", "Model", "cpu model"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def llc_bytes(unknown: int = 64 << 20) -> int:
    """The largest CPU cache (sysfs: "32K", "1024K", "32M"), `unknown` when none can be read."""
    sizes = [_read(p).upper().rstrip("B") for p in CPU_CACHES.glob("index*/size")]
    split = [(s[:-1], 1 << {"K": 10, "M": 20}[s[-1]]) if s[-1:] in "KM" else (s, 1) for s in sizes if s]
    return max((int(n) * unit for n, unit in split if n.isdigit()), default=unknown)


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), else the machine's count."""
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_quota() -> float | None:
    """The cgroup's CPU limit in cores (cgroup v2 cpu.max, v1 cfs quota / period); None: no limit."""
    text = _read(CGROUP / "cpu.max")
    if text:
        quota, _, period = text.partition(" ")
        return None if quota == "max" else int(quota) / int(period or 100000)
    quota, period = _read(CGROUP / "cpu/cpu.cfs_quota_us"), _read(CGROUP / "cpu/cpu.cfs_period_us")
    return int(quota) / int(period) if quota and period and int(quota) > 0 else None


def memory_limit_left() -> int | None:
    """Bytes the cgroup lets this process still allocate (limit - usage; v2 or v1); None: no limit."""
    for limit_file, used_file in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        limit, used = _read(CGROUP / limit_file), _read(CGROUP / used_file)
        if limit.isdigit() and used.isdigit() and int(limit) < 1 << 60:
            return max(int(limit) - int(used), 0)
    return None


def host_available_bytes() -> int:
    """Memory the host can still give this process: MemAvailable, capped by the cgroup's limit."""
    free = 1 << 62  # unknown: do not refuse
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            free = int(line.split()[1]) * 1024
    left = memory_limit_left()
    return min(free, left) if left is not None else free


def governor() -> str:
    """cpu0's frequency governor ('' where the kernel does not expose it, as in most VMs)."""
    return _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def load_average() -> float:
    """The 1-minute load average (NaN where unreadable)."""
    with contextlib.suppress(OSError):
        return os.getloadavg()[0]
    return float("nan")


def facts() -> dict[str, object]:
    """The host's fixed facts, as row columns."""
    quota = cpu_quota()
    return {
        "cpu_model": cpu_model(),
        "cores": usable_cores(),
        "cpu_quota": quota if quota is not None else float("nan"),
        "governor": governor(),
    }


@dataclass(frozen=True)
class CpuSnapshot:
    """Busy and total CPU time of the machine and this process's own, in seconds, at one moment."""

    wall: float
    busy: float
    own: float


def snapshot() -> CpuSnapshot:
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = float("nan")
    fields = _read("/proc/stat").splitlines()[:1]
    if fields and fields[0].startswith("cpu "):
        values = [int(v) for v in fields[0].split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        busy = (sum(values[:8]) - idle) / ticks  # user nice system idle iowait irq softirq steal
    t = os.times()
    return CpuSnapshot(time.monotonic(), busy, t.user + t.system + t.children_user + t.children_system)


def other_cores(start: CpuSnapshot, end: CpuSnapshot) -> float:
    """Cores other processes kept busy on average between two snapshots (NaN when unknown or too short)."""
    wall = end.wall - start.wall
    return float("nan") if wall < 0.05 else max((end.busy - start.busy) - (end.own - start.own), 0.0) / wall


class CpuUse:
    """Tracks how busy other processes keep the machine: over the whole run and since the last `lap`."""

    def __init__(self) -> None:
        self.first = self.last = snapshot()
        self.load_start = load_average()

    def lap(self) -> float:
        """Other processes' cores since the previous lap (or the start)."""
        now = snapshot()
        value = other_cores(self.last, now)
        self.last = now
        return value

    def overall(self) -> float:
        return other_cores(self.first, snapshot())


def sharing_note(other: float, load_start: float, load_end: float) -> str:
    """The warning for a run that shared the machine, '' for one that had it to itself."""
    if not other > SHARED_CORES:
        return ""
    return (
        f"the machine was shared: other processes kept {other:.1f} of {usable_cores()} cores busy on "
        f"average (load average {load_start:.1f} at the start, {load_end:.1f} at the end); "
        "times may be slower and noisier than on an idle machine"
    )
