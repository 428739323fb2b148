"""The Triton kernels of the exact top-k softmax (and the argmax), their launch plans, tuned-plan tables,
ahead-of-time compile report and launch log (docs/triton.md). Importing this package never imports
Triton: `topk_softmax` (the launch code) and `triton_code` (the device code) do, when first used."""

from __future__ import annotations

import importlib.util
import os

import torch

INTERPRET_ENV = "TRITON_INTERPRET"
NO_TRITON = "triton is not installed"
NEEDS_GPU = "Triton kernels need a GPU; set TRITON_INTERPRET=1 to run them on the CPU (correctness only)"
NOT_TIMED = (
    "Triton's interpreter on the CPU checks correctness only: not timed (time it on a GPU; "
    "PERFSUITE_SIMULATED_GPU runs its GPU code path here)"
)


def triton_installed() -> bool:
    """Whether `import triton` can succeed (without importing it)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def interpreting() -> bool:
    """Whether Triton runs kernels in its numpy interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get(INTERPRET_ENV, "") == "1"


def availability(device: torch.device) -> str | None:
    """None when the Triton kernels can run on `device` (a GPU, or the CPU interpreting), else why not."""
    if not triton_installed():
        return NO_TRITON
    return None if torch.device(device).type == "cuda" or interpreting() else NEEDS_GPU


def untimed(device: torch.device) -> str | None:
    """Why a Triton kernel that runs on `device` gives no figure worth recording: the interpreter."""
    return NOT_TIMED if torch.device(device).type == "cpu" and interpreting() else None
