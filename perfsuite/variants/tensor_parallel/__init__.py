"""Vocabulary-parallel (tensor-parallel) selectors. Adding one: a module with a `VARIANT`, named here.

from perfsuite.cases.tensor_parallel import tp_variants
tp_variants.names() -> list[str]
tp_variants.get(name)(local, k) -> (topk_p float32 [B, k], topk_index int64 [B, k]) on every rank

Besides the registered ones, `allgather_<NAME>` is any single-device selector after the all-gather: a
built-in (`allgather_identity_engine_order`) or an external one (`allgather_mypkg.kernels:topk`, or an
entry-point name), so an engine's own kernel runs under tensor parallelism as engines run it today.
"""

from __future__ import annotations

import importlib

from perfsuite import variants
from perfsuite.variants.tensor_parallel.allgather import allgather_variant
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant

BASELINE = "allgather_full_softmax"
"""What engines do today under tensor parallelism: all-gather the logits, then softmax and top-k."""

_MODULES = ("allgather_full_softmax", "allgather_identity", "sharded_torch", "sharded_triton")

ALLGATHER_PREFIX = "allgather_"

_REGISTRY: dict[str, TPVariant] = {}
_GATHERED: dict[str, TPVariant] = {}


def _load() -> dict[str, TPVariant]:
    if not _REGISTRY:
        for module in _MODULES:
            variant: TPVariant = importlib.import_module(
                f"perfsuite.variants.tensor_parallel.{module}"
            ).VARIANT
            _REGISTRY[variant.name] = variant
    return _REGISTRY


def names() -> list[str]:
    """Registered tensor-parallel variant names, the baseline first."""
    return list(_load())


def gathered(name: str) -> TPVariant | None:
    """`allgather_<NAME>` for a single-device selector NAME (built-in or external), made once; None when
    `name` has not that form or NAME is no selector. An external one that cannot load raises
    `variants.ExternalSelectorError` (one line)."""
    if name in _GATHERED:
        return _GATHERED[name]
    single = name.removeprefix(ALLGATHER_PREFIX)
    if single == name or not single:
        return None
    try:
        variant = variants.get(single)
    except KeyError:
        return None
    made = _GATHERED[name] = allgather_variant(single, f"all-gather [B, V] logits, then {variant.summary}")
    return made


def get(name: str) -> TPVariant:
    """The variant called `name` (registered, or `allgather_<selector>`); a `KeyError` naming the known
    ones otherwise."""
    registry = _load()
    if name in registry:
        return registry[name]
    made = gathered(name)
    if made is None:
        raise KeyError(
            f"unknown tensor-parallel variant {name!r}; known: {', '.join(registry)}, "
            f"or {ALLGATHER_PREFIX}<a single-device selector>"
        )
    return made


def is_tp_variant(name: str) -> bool:
    """Whether `name` is a tensor-parallel variant (an external one that cannot load: False)."""
    if name in _load():
        return True
    try:
        return gathered(name) is not None
    except variants.ExternalSelectorError:
        return False


__all__ = ["ALLGATHER_PREFIX", "BASELINE", "Local", "TPVariant", "gathered", "get", "is_tp_variant", "names"]
