"""Helpers shared by the tests."""

from __future__ import annotations

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda:0" if HAS_GPU else "cpu")
needs_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="needs a CUDA or ROCm GPU (torch.cuda.is_available() is False)"
)


def stable_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """Independent canonical top-k indices: a stable descending sort of the whole row."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :k]
