"""Backend detection and the table of device peaks."""

from __future__ import annotations

import pytest
import torch

from perfsuite.measure import device


@pytest.mark.parametrize(
    ("name", "arch", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "sm_90", 3350.0),
        ("NVIDIA H100 PCIe", "sm_90", 2000.0),
        ("NVIDIA H200", "sm_90", 4800.0),
        ("NVIDIA B200", "sm_100", 8000.0),
        ("NVIDIA GB200", "sm_100", 8000.0),
        ("NVIDIA A100-SXM4-80GB", "sm_80", 2039.0),
        ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 5300.0),
        ("AMD Instinct MI325X", "gfx942", 6000.0),
        ("AMD Instinct MI355X", "gfx950", 8000.0),
        ("AMD Radeon Graphics", "gfx942:sramecc+:xnack-", 5300.0),  # name missing: by architecture
        ("Some New GPU", "sm_120", None),
    ],
)
def test_peak_lookup(name, arch, peak):
    assert device.lookup_peak_gbps(name, arch) == peak


def test_backend_of_tells_rocm_from_cuda(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    assert device.backend_of(torch.device("cuda:0")) == "rocm"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert device.backend_of(torch.device("cuda:0")) == "cuda"
    assert device.backend_of(torch.device("cpu")) == "cpu"


def pretend_rocm_gpu(monkeypatch, props: type) -> None:
    """A ROCm build of torch whose one GPU has the properties `props` (ROCm answers through torch.cuda)."""
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_detect_a_rocm_gpu_through_the_cuda_api(monkeypatch):
    class Props:
        name = "AMD Instinct MI300X"
        gcnArchName = "gfx942:sramecc+:xnack-"
        L2_cache_size = 4 << 20
        major, minor = 9, 4

    pretend_rocm_gpu(monkeypatch, Props)
    device.detect.cache_clear()
    try:
        info = device.detect("cuda:0")
    finally:
        device.detect.cache_clear()
    assert (info.backend, info.name, info.peak_gbps) == ("rocm", Props.name, 5300.0)
    assert info.arch == Props.gcnArchName and info.runtime == "HIP 6.4.0"
    assert info.cache_bytes == 256 << 20  # the Infinity Cache, not the 4 MB L2
    assert info.graph_unroll_cap == device.GRAPH_UNROLL_CAP["rocm"] < device.GRAPH_UNROLL_CAP["cuda"]


@pytest.mark.parametrize("has_warp_size", [True, False])
def test_launch_plans_see_a_rocm_gpu_as_wavefronts_of_64(monkeypatch, has_warp_size):
    """MI300X through the CUDA API: 304 CUs, wavefronts of 64 (from the properties, or from torch.version.hip
    where an older torch lacks `warp_size`), so a bf16 split tile grows to 2048 columns (16 bytes a lane)."""
    from perfsuite.kernels import plan as plans

    class Props:
        name = "AMD Instinct MI300X"
        multi_processor_count = 304

    if has_warp_size:
        Props.warp_size = 64
    pretend_rocm_gpu(monkeypatch, Props)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    plans._cuda_hardware.cache_clear()
    try:
        hw = plans.hardware("cuda:0")
    finally:
        plans._cuda_hardware.cache_clear()
    assert hw == plans.Hardware(sms=304, warp_size=64, name="AMD Instinct MI300X")
    split = plans.split_plan(1, 151936, 1, hw, element_size=2)
    assert split.block == 2048 and split.chunk % 2048 == 0
    assert plans.hardware("cpu") == plans.Hardware()


def test_detect_cpu(monkeypatch):
    monkeypatch.setenv("PERFSUITE_PEAK_GBPS", "123")
    device.detect.cache_clear()
    try:
        info = device.detect("cpu")
    finally:
        device.detect.cache_clear()
    assert info.backend == "cpu" and not info.is_gpu and info.peak_gbps == 123.0 and info.cache_bytes > 0
