"""The tensor-parallel variant contract, and what it runs on: vocabulary slices and the process group.

    tensor_parallel.get(name)(local, k) -> (topk_p float32 [B, k], topk_index int64 [B, k])

Every rank calls it with its own slice (a collective inside) and gets the same answer, with the single-device
contract: global indices, descending logit with the lowest index first on ties across ranks and exact
`topk_p` (exact variants). Each variant models its HBM traffic per rank and the interconnect bytes each
rank receives (a ring all-gather sends as many).

Engines pad the vocabulary to a multiple of tp, so every rank's slice has the width `ceil(V / tp)`, the
padding at the end: rank `r` holds the real columns `[min(r * w, V), min((r + 1) * w, V))`, none when
`V < tp`. Process groups: NCCL on CUDA GPUs, RCCL on ROCm (torch calls it "nccl" too), gloo on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from perfsuite.variants.base import Accuracy, Availability, Traffic, always_available, check_inputs

TIMEOUT_S = 300.0
"""A collective that waits longer than this raises (a rank died or diverged) instead of hanging."""


@dataclass(frozen=True)
class Group:
    """This process's place in the group: rank, size, backend and the device its tensors live on. Every
    method is a collective: all ranks call it in the same order."""

    rank: int
    size: int
    backend: str
    device: torch.device

    def barrier(self) -> None:
        dist.barrier(device_ids=[self.device.index] if self.backend == "nccl" else None)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """`[size, *x.shape]`: every rank's `x`, in rank order (one all-gather into one tensor)."""
        x = x.contiguous()
        out = torch.empty((self.size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x)
        return out.view(self.size, *x.shape)

    def max(self, values: Sequence[float]) -> list[float]:
        """The element-wise maximum of `values` over the ranks (one all-reduce)."""
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def objects(self, obj: object) -> list[object]:
        """Every rank's picklable `obj`, in rank order."""
        out: list[object] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out


def init(device_spec: str = "auto", init_method: str | None = None, rank: int = -1, size: int = -1) -> Group:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), or the
    one `init_method`, `rank` and `size` give. 'auto' and 'cuda[:N]' give each rank GPU LOCAL_RANK."""
    kind = device_spec.split(":")[0]
    gpu = kind != "cpu" and (kind != "auto" or torch.cuda.is_available())
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    backend = "nccl" if gpu else "gloo"
    timeout = timedelta(seconds=TIMEOUT_S)
    dist.init_process_group(backend, init_method, timeout, size, rank, device_id=device if gpu else None)
    return Group(dist.get_rank(), dist.get_world_size(), backend, device)


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@dataclass(frozen=True)
class VocabSlice:
    """Rank `rank` of `tp`: `width` real columns from global column `start`, in a `padded_width` slice."""

    rank: int
    tp: int
    vocab: int
    start: int
    width: int
    padded_width: int


def padded_width(vocab: int, tp: int) -> int:
    """Columns of every rank's slice: `ceil(vocab / tp)`."""
    return -(-vocab // tp)


def vocab_slice(vocab: int, tp: int, rank: int) -> VocabSlice:
    """The columns rank `rank` holds when `vocab` columns are split over `tp` ranks."""
    padded = padded_width(vocab, tp)
    start = min(rank * padded, vocab)
    return VocabSlice(rank, tp, vocab, start, min(padded, vocab - start), padded)


def local_slice(full: torch.Tensor, shard: VocabSlice, row_pad: int = 0) -> torch.Tensor:
    """The rank's `[B, padded_width]` slice of `full` `[B, V]`, in a buffer `row_pad` columns wider.

    Columns past `shard.width` (vocabulary padding and `row_pad`) hold the dtype's largest value, so a
    sharded selector that reads past its real columns picks a wrong token and fails parity.
    """
    poison = torch.finfo(full.dtype).max
    buffer = full.new_full((full.shape[0], shard.padded_width + row_pad), poison)
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
        """The real columns, `[B, shard.width]` (a row-strided view when the slice carries padding)."""
        return self.padded[:, : self.shard.width]


@dataclass(frozen=True)
class TPVariant:
    """A vocabulary-parallel top-k selector with its accuracy claim and its models (per rank): `traffic`,
    the HBM `Traffic`; `comm_bytes`, the interconnect bytes it receives."""

    name: str
    select: Callable[[Local, int], tuple[torch.Tensor, torch.Tensor]]
    accuracy: Accuracy
    traffic: Callable[[int, int, int, torch.dtype, int], Traffic]
    comm_bytes: Callable[[int, int, int, torch.dtype, int], int]
    available: Availability = field(default=always_available)
    max_k: int | None = None
    """The largest topk it supports (an all-gathered argmax kernel: 1); None: any."""

    def __call__(self, local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Checked call; an empty batch returns at once on every rank (no collective)."""
        check_inputs(local.padded, 1)
        if not 1 <= k <= local.shard.vocab:
            raise ValueError(f"topk must be in [1, vocab={local.shard.vocab}], got {k}")
        if local.padded.shape[0] == 0:
            device = local.padded.device
            return torch.empty((0, k), device=device), torch.empty((0, k), dtype=torch.int64, device=device)
        return self.select(local, k)
