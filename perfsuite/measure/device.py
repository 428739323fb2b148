"""Backend detection (CUDA, ROCm, CPU), device names and datasheet peak memory bandwidth."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from perfsuite import simulated_gpu
from perfsuite.core import machine

# datasheet HBM bandwidth in GB/s (1e9 bytes/s), matched in the device name, longest key first (H100: the
# SXM5 80 GB; A100: the 40 GB)
_PEAKS = """GB200 8000, B200 8000, B100 8000, H200 4800, GH200 4000, H100 NVL 3900, H100 PCIe 2000, H100 3350,
    H800 3350, H20 4000, A100-SXM4-80GB 2039, A100 80GB PCIe 1935, A100 1555, A800 2039, L40S 864, L40 864,
    L4 300, A10G 600, A10 600, RTX 4090 1008, RTX 6000 Ada 960, V100 900,
    MI355X 8000, MI350X 8000, MI325X 6000, MI300X 5300, MI300A 5300, MI250X 3277, MI250 3277, MI210 1638,
    MI100 1229"""
PEAK_GBPS = {name: float(gbps) for name, gbps in (e.strip().rsplit(" ", 1) for e in _PEAKS.split(","))}
# by gfx architecture, where the name lacks the model (some ROCm builds say "AMD Radeon Graphics")
AMD_ARCH_PEAK_GBPS = {"gfx950": 8000.0, "gfx942": 5300.0, "gfx90a": 3277.0, "gfx908": 1229.0}
# last-level caches beyond the L2 torch reports (MI300 series: 256 MiB Infinity Cache in front of HBM)
AMD_ARCH_LLC_BYTES = {"gfx950": 256 << 20, "gfx942": 256 << 20}
MIN_FLUSH_CACHE_BYTES = 64 << 20  # the least cache a GPU's cold-cache flush evicts, whatever L2 it reports
GRAPH_UNROLL_CAP = {"cuda": 64, "rocm": 8, "cpu": 1}  # calls in one graph: long HIP graphs crashed on ROCm


@dataclass(frozen=True)
class DeviceInfo:
    """What a run was measured on."""

    backend: str  # "cuda" | "rocm" | "cpu"
    device: str  # torch device string, e.g. "cuda:0" or "cpu"
    name: str
    runtime: str  # "CUDA 12.8", "HIP 6.4", or "cpu"
    peak_gbps: float | None  # datasheet HBM bandwidth; None where unknown (CPUs)
    cache_bytes: int  # cache a cold-cache flush must evict: the LLC, at least 64 MiB on a GPU
    arch: str = ""
    simulated: bool = False  # a simulated GPU (perfsuite.simulated_gpu): host times, not GPU figures
    llc_bytes: int = 0  # last-level cache as the device reports it (L2, MI300: Infinity Cache); 0 unknown

    @property
    def is_gpu(self) -> bool:
        return self.backend in ("cuda", "rocm")

    @property
    def model_cache_bytes(self) -> int:
        """The cache a call's tensors stay in between its kernels in the bytes model: a real GPU's LLC (a
        CPU's L3 is shared with every process; a simulated GPU's times are on the host's caches)."""
        return self.llc_bytes if self.is_gpu and not self.simulated else 0

    @property
    def graph_unroll_cap(self) -> int:
        return GRAPH_UNROLL_CAP[self.backend]


def backend_of(device: torch.device) -> str:
    """'cuda', 'rocm' (a CUDA-API device under a HIP build of torch) or 'cpu'."""
    return ("rocm" if torch.version.hip else "cuda") if device.type == "cuda" else "cpu"


def lookup_peak_gbps(name: str, arch: str = "") -> float | None:
    """Datasheet bandwidth for a device name (NVIDIA or AMD), else by AMD gfx arch, else None."""
    found = [key for key in PEAK_GBPS if key.upper() in name.upper()]
    return PEAK_GBPS[max(found, key=len)] if found else AMD_ARCH_PEAK_GBPS.get(arch.split(":")[0])


def resolve_device(spec: str = "auto") -> torch.device:
    """'auto' picks the first GPU (CUDA or ROCm) when there is one, else the CPU."""
    return torch.device(("cuda:0" if torch.cuda.is_available() else "cpu") if spec == "auto" else spec)


@simulated_gpu.device_cached
def detect(spec: str = "auto") -> DeviceInfo:
    """Describe the device a run will use. `PERFSUITE_PEAK_GBPS` overrides the datasheet peak."""
    device = resolve_device(spec)
    backend = backend_of(device)
    peak = float(os.environ["PERFSUITE_PEAK_GBPS"]) if os.environ.get("PERFSUITE_PEAK_GBPS") else None
    if backend == "cpu":
        llc = machine.llc_bytes()
        return DeviceInfo("cpu", "cpu", machine.cpu_model(), "cpu", peak, llc, llc_bytes=llc)
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    arch = getattr(props, "gcnArchName", "") if backend == "rocm" else f"sm_{props.major}{props.minor}"
    runtime = f"HIP {torch.version.hip}" if backend == "rocm" else f"CUDA {torch.version.cuda}"
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)  # H100: 50 MiB; the project's H200: 60 MiB
    llc = max(l2, AMD_ARCH_LLC_BYTES.get(arch.split(":")[0], 0))
    peak = lookup_peak_gbps(props.name, arch) if peak is None else peak
    simulated = simulated_gpu.active() is not None
    cache = max(llc, MIN_FLUSH_CACHE_BYTES)
    return DeviceInfo(backend, f"cuda:{index}", props.name, runtime, peak, cache, arch, simulated, llc)


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
