"""The selectors under test. Adding one: a module with a `VARIANT`, and its name in `_MODULES`.

from perfsuite import variants
variants.names() -> list[str]
variants.get(name)(logits, k) -> (topk_p float32 [B, k], topk_index int64 [B, k])
"""

from __future__ import annotations

import importlib

from perfsuite.variants.base import Traffic, Variant, ideal_traffic

_MODULES = ("full_softmax", "argmax_ones", "identity", "triton_fused", "triton_split", "triton_auto")
BASELINE = "full_softmax"

_REGISTRY: dict[str, Variant] = {}


def _load() -> dict[str, Variant]:
    if not _REGISTRY:
        for module in _MODULES:
            variant: Variant = importlib.import_module(f"perfsuite.variants.{module}").VARIANT
            _REGISTRY[variant.name] = variant
    return _REGISTRY


def names() -> list[str]:
    """Registered variant names, the baseline first."""
    return list(_load())


def get(name: str) -> Variant:
    """The variant called `name`; a `KeyError` naming the known ones otherwise."""
    registry = _load()
    if name not in registry:
        raise KeyError(f"unknown variant {name!r}; known: {', '.join(registry)}")
    return registry[name]


__all__ = ["BASELINE", "Traffic", "Variant", "get", "ideal_traffic", "names"]
