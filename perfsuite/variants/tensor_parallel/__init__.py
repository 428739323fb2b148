"""Vocabulary-parallel (tensor-parallel) selectors: the registry, and the all-gather variants.

    from perfsuite.variants import tensor_parallel
    tensor_parallel.names() -> list[str]          the registered ones, the baseline first
    tensor_parallel.get(name)(local, k) -> (topk_p float32 [B, k], topk_index int64 [B, k]) on every rank

`allgather_<NAME>` all-gathers the logits, then runs the single-device selector NAME on them: the engines'
usual path. Registered: `allgather_full_softmax` (the baseline) and `allgather_identity`; any other NAME
works too, a built-in (`allgather_identity_engine_order`) or an external one (`allgather_mypkg.kernels:topk`,
or an entry-point name), so an engine's own kernel runs under tensor parallelism as engines run it today.
The merge-partials variants (`sharded_torch`, `sharded_triton`) are in `sharded`; adding one: a
`TPVariant` (`tp_base`) named in `_registry`.
"""

from __future__ import annotations

import functools

import torch

from perfsuite import variants
from perfsuite.variants.base import Traffic
from perfsuite.variants.tensor_parallel import sharded
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant, padded_width

BASELINE = "allgather_full_softmax"
"""What engines do today under tensor parallelism: all-gather the logits, then softmax and top-k."""
ALLGATHER_PREFIX = "allgather_"
_GATHERED: dict[str, TPVariant] = {}


def gather_logits(local: Local) -> torch.Tensor:
    """Full `[B, V]` logits on every rank, as a vocabulary-parallel LM head makes them: the all-gather
    stacks the padded slices by rank, a copy moves them to the column axis, the padding is sliced off."""
    slices = local.group.all_gather(local.padded)  # [tp, B, padded_width]
    return slices.permute(1, 0, 2).reshape(local.padded.shape[0], -1)[:, : local.shard.vocab]


def gather_traffic(batch: int, vocab: int, dtype: torch.dtype, tp: int) -> Traffic:
    """Send the slice, receive tp slices, copy them into `[B, tp * padded_width]` (two temporaries)."""
    slice_bytes = batch * padded_width(vocab, tp) * dtype.itemsize
    gathered = tp * slice_bytes
    return Traffic(slice_bytes, gathered, gathered) + Traffic(gathered, gathered, gathered)


def gather_comm_bytes(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
    """Each rank receives (tp - 1) padded slices of `B x ceil(V / tp)` logits."""
    return (tp - 1) * batch * padded_width(vocab, tp) * dtype.itemsize


def allgather_variant(single_name: str) -> TPVariant:
    """`allgather_<single_name>`: gather the logits, then run the single-device selector on them (a
    `KeyError` or `variants.ExternalSelectorError` when it is no selector)."""
    single = variants.get(single_name)
    return TPVariant(
        name=ALLGATHER_PREFIX + single_name,
        select=lambda local, k: single.select(gather_logits(local), k),
        accuracy=single.accuracy,
        traffic=lambda b, v, k, dtype, tp: gather_traffic(b, v, dtype, tp) + single.traffic(b, v, k, dtype),
        comm_bytes=gather_comm_bytes,
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
    """The variant called `name` (registered, or `allgather_<selector>`); a `KeyError` naming the known
    ones otherwise."""
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
