"""The logits dtypes a scenario may name, their aliases, and the names back from torch."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def dtype_of(name: str) -> torch.dtype:
    """torch dtype for a name or alias (`bf16`, `fp16`, `fp32`)."""
    return DTYPES[DTYPE_ALIASES.get(name, name)]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
