"""The selectors under test. Adding one: a module with a `VARIANT`, and its name in `_MODULES`.

from perfsuite import variants
variants.names() -> list[str]                 the built-ins, the baseline first
variants.external_names() -> list[str]        installed `perfsuite.selectors` entry points
variants.get(name)(logits, k) -> (topk_p float32 [B, k], topk_index int64 [B, k])

`get` also loads external selectors: `package.module:function` or an entry-point name (external.py);
one that cannot load raises `ExternalSelectorError` (a `ValueError`) with a one-line message.
"""

from __future__ import annotations

import importlib

from perfsuite.variants import external
from perfsuite.variants.base import Traffic, Variant, ideal_traffic
from perfsuite.variants.external import ExternalSelectorError, external_names

_MODULES = (
    "full_softmax",
    "argmax_ones",
    "identity",
    "identity_engine_order",
    "triton_fused",
    "triton_split",
    "triton_auto",
    "triton_argmax",
)
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
    """The variant called `name`: a built-in, else an external selector (`module:function` or an entry
    point of `perfsuite.selectors`, loaded once); a `KeyError` naming the known ones for an unknown plain
    name, an `ExternalSelectorError` for an external one that cannot load."""
    registry = _load()
    if name in registry:
        return registry[name]
    variant = external.load(name)
    if variant is None:
        raise KeyError(f"unknown variant {name!r}; known: {', '.join(registry)}")
    return variant


__all__ = [
    "BASELINE",
    "ExternalSelectorError",
    "Traffic",
    "Variant",
    "external_names",
    "get",
    "ideal_traffic",
    "names",
]
