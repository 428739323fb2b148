"""Vocabulary-parallel (tensor-parallel) selectors. Adding one: a module with a `VARIANT`, named here.

from perfsuite.distributed import tp_variants
tp_variants.names() -> list[str]
tp_variants.get(name)(local, k) -> (topk_p float32 [B, k], topk_index int64 [B, k]) on every rank
"""

from __future__ import annotations

import importlib

from perfsuite.distributed.tp_variants.base import Local, TPVariant

BASELINE = "allgather_full_softmax"
"""What engines do today under tensor parallelism: all-gather the logits, then softmax and top-k."""

_MODULES = ("allgather_full_softmax", "allgather_identity", "sharded_torch", "sharded_triton")

_REGISTRY: dict[str, TPVariant] = {}


def _load() -> dict[str, TPVariant]:
    if not _REGISTRY:
        for module in _MODULES:
            variant: TPVariant = importlib.import_module(
                f"perfsuite.distributed.tp_variants.{module}"
            ).VARIANT
            _REGISTRY[variant.name] = variant
    return _REGISTRY


def names() -> list[str]:
    """Registered tensor-parallel variant names, the baseline first."""
    return list(_load())


def get(name: str) -> TPVariant:
    """The variant called `name`; a `KeyError` naming the known ones otherwise."""
    registry = _load()
    if name not in registry:
        raise KeyError(f"unknown tensor-parallel variant {name!r}; known: {', '.join(registry)}")
    return registry[name]


def is_tp_variant(name: str) -> bool:
    return name in _load()


__all__ = ["BASELINE", "Local", "TPVariant", "get", "is_tp_variant", "names"]
