"""Triton kernels for exact top-k softmax selection, and the launch plan that picks between them.

Importing this package never imports Triton: `perfsuite.kernels.topk_softmax` does (lazily, when a
variant first runs). `triton_code` holds the device code (the `@triton.jit` kernels), `topk_softmax` the
launch code (plans to grids, tensors to arguments, the wrappers the variants call). `plan` holds the
Triton-free shape heuristic and its knobs, `tuned` the tables of plans measured on a GPU and `tuner` what
measures them (`perfsuite tune`), `resources` the ahead-of-time compile report (`perfsuite kernels`),
`compile_plan` every kernel key the GPU check's stages will launch (scenarios, tune candidates, edge cases,
draft cases, the battery), `warm` compiles such a plan in parallel (`perfsuite warm`)
and `launch_log` records the keys launched, to prove each was warmed first.

    availability(device) -> None when the kernels can run on `device`, else a short reason
"""

from __future__ import annotations

import importlib.util
import os

import torch

INTERPRET_ENV = "TRITON_INTERPRET"
NO_TRITON = "triton is not installed"
NEEDS_GPU = "Triton kernels need a GPU; set TRITON_INTERPRET=1 to run them on the CPU (correctness only)"


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
    """None when the Triton kernels can run on `device`, else why not.

    CUDA and ROCm devices (torch calls both "cuda") need Triton installed; the CPU additionally needs the
    interpreter (`TRITON_INTERPRET=1`, set before Triton is first imported), which is for correctness only.
    """
    if not triton_installed():
        return NO_TRITON
    if torch.device(device).type == "cuda":
        return None
    return None if interpreting() else NEEDS_GPU


NOT_TIMED = (
    "Triton's interpreter on the CPU checks correctness only: not timed (time it on a GPU; "
    "PERFSUITE_SIMULATED_GPU runs its GPU code path here)"
)


def untimed(device: torch.device) -> str | None:
    """Why a Triton kernel that runs on `device` gives no figure worth recording: the interpreter."""
    return NOT_TIMED if torch.device(device).type == "cpu" and interpreting() else None


__all__ = [
    "INTERPRET_ENV",
    "NEEDS_GPU",
    "NOT_TIMED",
    "NO_TRITON",
    "availability",
    "interpreting",
    "triton_installed",
    "untimed",
]
