"""Helpers shared by the tests."""

from __future__ import annotations

import pytest
import torch

from perfsuite import simulated_gpu

HAS_GPU = torch.cuda.is_available()  # a real GPU, or the simulated one for the whole run (the env switch)
REAL_GPU = HAS_GPU and simulated_gpu.active() is None
DEVICE = torch.device("cuda:0" if HAS_GPU else "cpu")
needs_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="needs a CUDA or ROCm GPU (torch.cuda.is_available() is False)"
)
needs_real_gpu = pytest.mark.skipif(
    not REAL_GPU,
    reason="needs a real CUDA or ROCm GPU: the simulated GPU's figures are the host's, not a GPU's",
)


def stable_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """Independent canonical top-k indices: a stable descending sort of the whole row."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :k]
