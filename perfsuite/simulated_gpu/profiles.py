"""The GPUs the simulation stands in for: what `torch.cuda.get_device_properties` and `torch.version` say."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

LABEL = "(simulated)"
"""Appended to the device name: every row, table and report of a simulated run carries it."""


@dataclass(frozen=True)
class Profile:
    """One simulated GPU model."""

    key: str  # the PERFSUITE_SIMULATED_GPU value
    model: str  # the name the real device reports
    backend: str  # "cuda" | "rocm"
    runtime: str  # torch.version.cuda or torch.version.hip
    major: int
    minor: int
    sms: int  # SMs (CUs on ROCm)
    warp_size: int
    l2_bytes: int
    total_memory: int
    gcn_arch: str = ""  # ROCm's gcnArchName

    @property
    def name(self) -> str:
        return f"{self.model} {LABEL}"

    def properties(self) -> SimpleNamespace:
        """A stand-in for `torch.cuda.get_device_properties(i)` (the fields perfsuite and Triton read)."""
        props = SimpleNamespace(
            name=self.name, major=self.major, minor=self.minor, total_memory=self.total_memory,
            multi_processor_count=self.sms, L2_cache_size=self.l2_bytes, warp_size=self.warp_size,
            is_integrated=False, is_multi_gpu_board=False, uuid="00000000-0000-0000-0000-000000000000",
        )  # fmt: skip
        if self.backend == "rocm":
            props.gcnArchName = self.gcn_arch
        return props


PROFILES: dict[str, Profile] = {
    p.key: p
    for p in (
        # l2_bytes: the 60 MiB torch reports on the project's H200 (KINDS.md), not the datasheet's 50 MB
        Profile("h200", "NVIDIA H200", "cuda", "13.0", 9, 0, 132, 32, 60 << 20, 150_110_945_280),
        Profile("mi300x", "AMD Instinct MI300X", "rocm", "6.4.43482", 9, 4, 304, 64, 4 << 20, 205_822_885_888,
                "gfx942:sramecc+:xnack-"),
    )
}  # fmt: skip


def profile(key: str) -> Profile:
    """The profile named `key` (case-insensitive); ValueError naming the known ones otherwise."""
    try:
        return PROFILES[key.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown simulated GPU {key!r}; known: {', '.join(PROFILES)}") from None
