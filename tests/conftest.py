"""Test set-up: Triton runs in its interpreter on machines without a GPU; shared fixtures."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is defined

import pytest
from support import DEVICE


@pytest.fixture
def device() -> torch.device:
    """The device tests run on: the first GPU when there is one, else the CPU."""
    return DEVICE
