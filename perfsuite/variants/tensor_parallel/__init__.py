"""Vocabulary-parallel (tensor-parallel) selectors: the registry, and the all-gather variants.

    from perfsuite.variants import tensor_parallel
    tensor_parallel.names() -> list[str]          the registered ones, the baseline first
    tensor_parallel.get(name)(local, k) -> (topk_p float32 [B, k], topk_index int64 [B, k]) on every rank

`allgather_<NAME>` all-gathers the logits, then runs the single-device selector NAME, the engines' usual
path: registered for `full_softmax` (the baseline) and `identity`, made on demand for any other built-in or
external NAME (`allgather_mypkg.kernels:topk`). The merge-partials variants are in `sharded`; adding one: a
`TPVariant` (`tp_base`) named in `_registry`.
"""

from __future__ import annotations

import functools

import torch

from perfsuite import variants
from perfsuite.core import kinds
from perfsuite.variants.base import Traffic
from perfsuite.variants.tensor_parallel import sharded
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant, padded_width

BASELINE = kinds.get("tensor_parallel").baseline
"""What engines do today under tensor parallelism: all-gather the logits, then softmax and top-k."""
ALLGATHER_PREFIX = "allgather_"
_GATHERED: dict[str, TPVariant] = {}


def gather_logits(local: Local) -> torch.Tensor:
    """Full `[B, V]` logits on every rank, as a vocabulary-parallel LM head makes them (padding dropped)."""
    slices = local.group.all_gather(local.padded)  # [tp, B, padded_width]
    return slices.permute(1, 0, 2).reshape(local.padded.shape[0], -1)[:, : local.shard.vocab]


def gather_traffic(batch: int, vocab: int, dtype: torch.dtype, tp: int) -> Traffic:
    """Send the slice, receive tp slices, copy them into `[B, tp * padded_width]` (two temporaries)."""
    slice_bytes = batch * padded_width(vocab, tp) * dtype.itemsize
    gathered = tp * slice_bytes
    return Traffic(slice_bytes, gathered, gathered) + Traffic(gathered, gathered, gathered)


def allgather_variant(single_name: str) -> TPVariant:
    """`allgather_<single_name>`: that selector on the gathered logits (`KeyError` etc. if it is none)."""
    single = variants.get(single_name)
    return TPVariant(
        name=ALLGATHER_PREFIX + single_name,
        select=lambda local, k: single.select(gather_logits(local), k),
        accuracy=single.accuracy,
        traffic=lambda b, v, k, dtype, tp: gather_traffic(b, v, dtype, tp) + single.traffic(b, v, k, dtype),
        comm_bytes=lambda b, v, k, dtype, tp: (tp - 1) * b * padded_width(v, tp) * dtype.itemsize,  # received
        max_k=single.max_k,
    )


@functools.cache
def _registry() -> dict[str, TPVariant]:
    made = [allgather_variant("full_softmax"), allgather_variant("identity")]
    return {v.name: v for v in [*made, sharded.SHARDED_TORCH, sharded.SHARDED_TRITON]}


def names() -> list[str]:
    """Registered tensor-parallel variant names, the baseline first."""
    return list(_registry())


def gathered(name: str) -> TPVariant | None:
    """`allgather_<NAME>` for a single-device selector NAME, made once; None when `name` has not that form
    or NAME is no selector. An external one that cannot load raises `variants.ExternalSelectorError`."""
    single = name.removeprefix(ALLGATHER_PREFIX)
    if name not in _GATHERED and single not in ("", name):
        try:
            _GATHERED[name] = allgather_variant(single)
        except KeyError:
            return None
    return _GATHERED.get(name)


def get(name: str) -> TPVariant:
    """The variant `name` (registered, or `allgather_<selector>`); a `KeyError` naming the known ones."""
    variant = _registry().get(name) or gathered(name)
    if variant is None:
        known = f"{', '.join(_registry())}, or {ALLGATHER_PREFIX}<a single-device selector>"
        raise KeyError(f"unknown tensor-parallel variant {name!r}; known: {known}")
    return variant


def is_tp_variant(name: str) -> bool:
    """Whether `name` is a tensor-parallel variant (an external one that cannot load: False)."""
    try:
        return name in _registry() or gathered(name) is not None
    except variants.ExternalSelectorError:
        return False


__all__ = ["ALLGATHER_PREFIX", "BASELINE", "Local", "TPVariant", "gathered", "get", "is_tp_variant", "names"]
