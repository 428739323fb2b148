"""The selectors under test. Adding one: a module with a `VARIANT`, and its name in `_MODULES`.

variants.names() -> list[str]                 the built-ins, the baseline first
variants.external_names() -> list[str]        installed `perfsuite.selectors` entry points
variants.get(name)(logits, k) -> (topk_p float32 [B, k], topk_index int64 [B, k])
"""

from __future__ import annotations

import importlib

from perfsuite.core import kinds
from perfsuite.variants import external
from perfsuite.variants.base import Traffic, Variant, ideal_traffic
from perfsuite.variants.external import ExternalSelectorError, external_names

_MODULES = ("full_softmax", "argmax_ones", "identity", "identity_engine_order")
_MODULES += ("triton_fused", "triton_split", "triton_auto", "triton_argmax")
BASELINE = kinds.BASELINE
_REGISTRY: dict[str, Variant] = {}


def names() -> list[str]:
    """Registered variant names, the baseline first."""
    if not _REGISTRY:
        for module in _MODULES:
            variant: Variant = importlib.import_module(f"perfsuite.variants.{module}").VARIANT
            _REGISTRY[variant.name] = variant
    return list(_REGISTRY)


def get(name: str) -> Variant:
    """A built-in variant, else an external selector (`module:function` or an entry point, loaded once):
    `KeyError` for an unknown plain name, `ExternalSelectorError` for an external one that cannot load."""
    known = names()
    variant = _REGISTRY.get(name) or external.load(name)
    if variant is None:
        raise KeyError(f"unknown variant {name!r}; known: {', '.join(known)}")
    return variant


__all__ = ["BASELINE", "ExternalSelectorError", "Traffic", "Variant", "external_names", "get", "names"]
__all__ += ["ideal_traffic"]
