"""Test set-up: Triton runs in its interpreter on machines without a GPU; shared fixtures (devices, the
recorded Triton launches).

GPU tests run on the real GPU where there is one, else on the simulated one (`perfsuite.simulated_gpu`):
the `gpu` fixture installs it for the test's duration, `simulated` runs a test on every simulated model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is defined

import pytest
from support import DEVICE, HAS_GPU

from perfsuite import simulated_gpu


@pytest.fixture
def device() -> torch.device:
    """The device tests run on: the first GPU when there is one, else the CPU."""
    return DEVICE


@pytest.fixture
def gpu() -> Iterator[torch.device]:
    """A GPU: the real one when there is one, else the simulated H200 for this test."""
    if HAS_GPU:
        yield torch.device("cuda:0")
        return
    with simulated_gpu.simulated("h200"):
        yield torch.device("cuda:0")


@pytest.fixture(params=sorted(simulated_gpu.PROFILES))
def simulated(request: pytest.FixtureRequest) -> Iterator[simulated_gpu.Profile]:
    """Each simulated GPU in turn (H200: the CUDA branches; MI300X: the ROCm ones), on the CPU."""
    if HAS_GPU:
        pytest.skip("a GPU is present: simulating another one would hide it")
    with simulated_gpu.simulated(request.param) as profile:
        yield profile


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Triton launches record their compile key (and check their pointers' alignment) instead of running."""
    from perfsuite.kernels import plan as plans
    from perfsuite.kernels import topk_softmax as ts

    keys: list[tuple] = []

    def record(launch: ts.Launch, *tensors: torch.Tensor) -> None:
        assert all(t.data_ptr() % plans.LOAD_BYTES == 0 for t in tensors)
        keys.append(launch.compile_key(tensors[0].dtype))

    monkeypatch.setattr(ts.Launch, "__call__", record)
    return keys
