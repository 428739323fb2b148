"""The tensor-parallel variant contract (`TPVariant`), the process group and the vocabulary slices: a rank
holds `ceil(V / tp)` columns, the padding at the end (engines pad V to a multiple of tp)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

import torch
import torch.distributed as dist

from perfsuite.variants.base import Accuracy, Availability, Traffic, always_available, check_inputs

TIMEOUT_S = 300.0  # a collective waiting longer raises (a rank died or diverged) instead of hanging


@dataclass(frozen=True)
class Group:
    """This process's rank in the group, and the group's collectives (all ranks call them in order)."""

    rank: int
    size: int
    backend: str
    device: torch.device

    def barrier(self) -> None:
        dist.barrier(device_ids=[self.device.index] if self.backend == "nccl" else None)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """`[size, *x.shape]`: every rank's `x`, in rank order."""
        x = x.contiguous()
        out = torch.empty((self.size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x)
        return out.view(self.size, *x.shape)

    def max(self, values: Sequence[float]) -> list[float]:
        """The element-wise maximum of `values` over the ranks."""
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def objects(self, obj: object) -> list[object]:
        """Every rank's picklable `obj`, in rank order."""
        out: list[object] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out


def init(device_spec: str = "auto", init_method: str | None = None, rank: int = -1, size: int = -1) -> Group:
    """Join torchrun's process group (or `init_method`'s): NCCL/RCCL on GPU LOCAL_RANK, else gloo."""
    kind = device_spec.split(":")[0]
    gpu = kind != "cpu" and (kind != "auto" or torch.cuda.is_available())
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    backend, timeout = "nccl" if gpu else "gloo", timedelta(seconds=TIMEOUT_S)
    dist.init_process_group(backend, init_method, timeout, size, rank, device_id=device if gpu else None)
    return Group(dist.get_rank(), dist.get_world_size(), backend, device)


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class VocabSlice(NamedTuple):
    """One of `tp` ranks' slices: `width` real columns from global column `start`, `padded_width` wide."""

    tp: int
    vocab: int
    start: int
    width: int
    padded_width: int


def padded_width(vocab: int, tp: int) -> int:
    return -(-vocab // tp)


def vocab_slice(vocab: int, tp: int, rank: int) -> VocabSlice:
    padded = padded_width(vocab, tp)
    start = min(rank * padded, vocab)
    return VocabSlice(tp, vocab, start, min(padded, vocab - start), padded)


def local_slice(full: torch.Tensor, shard: VocabSlice, row_pad: int = 0) -> torch.Tensor:
    """The rank's `[B, padded_width]` slice of `full`, in a buffer `row_pad` columns wider; columns past
    `shard.width` hold the dtype's largest value, so a selector that reads them fails parity."""
    buffer = full.new_full((full.shape[0], shard.padded_width + row_pad), torch.finfo(full.dtype).max)
    buffer[:, : shard.width] = full[:, shard.start : shard.start + shard.width]
    return buffer[:, : shard.padded_width]


@dataclass(frozen=True)
class Local:
    """What one rank holds: its `[B, padded_width]` slice of the logits, the shard and the group."""

    padded: torch.Tensor
    shard: VocabSlice
    group: Group

    @property
    def logits(self) -> torch.Tensor:
        """The real columns, `[B, shard.width]`."""
        return self.padded[:, : self.shard.width]


@dataclass(frozen=True)
class TPVariant:
    """A vocabulary-parallel selector, its accuracy claim and its models per rank: `traffic` (HBM) and
    `comm_bytes` (interconnect bytes received; a ring all-gather sends as many)."""

    name: str
    select: Callable[[Local, int], tuple[torch.Tensor, torch.Tensor]]
    accuracy: Accuracy
    traffic: Callable[[int, int, int, torch.dtype, int], Traffic]
    comm_bytes: Callable[[int, int, int, torch.dtype, int], int]
    available: Availability = always_available
    max_k: int | None = None  # the largest topk it supports (an all-gathered argmax kernel: 1); None: any

    def __call__(self, local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Checked call; an empty batch returns at once on every rank (no collective)."""
        check_inputs(local.padded, 1)
        if not 1 <= k <= local.shard.vocab:
            raise ValueError(f"topk must be in [1, vocab={local.shard.vocab}], got {k}")
        if local.padded.shape[0] == 0:
            device = local.padded.device
            return torch.empty((0, k), device=device), torch.empty((0, k), dtype=torch.int64, device=device)
        return self.select(local, k)
