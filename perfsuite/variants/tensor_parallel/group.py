"""The process group a tensor-parallel worker runs in, and the few collectives the suite needs.

Backend by device: NCCL on CUDA GPUs, RCCL on ROCm GPUs (torch calls it "nccl" too), gloo on the CPU.
Every helper is a collective: all ranks of the group must call it in the same order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 300.0
"""A collective that waits longer than this raises (a rank died or diverged) instead of hanging."""


def backend_for(device: torch.device) -> str:
    """'nccl' for a GPU (NCCL on CUDA, RCCL on ROCm), 'gloo' for the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(spec: str, local_rank: int) -> torch.device:
    """This rank's device: 'auto' and 'cuda[:N]' give GPU `local_rank` (one GPU per rank), 'cpu' the CPU."""
    kind = spec.split(":")[0]
    if kind == "cpu" or (kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", local_rank)


@dataclass(frozen=True)
class Group:
    """This process's place in the group: rank, size, backend and the device its tensors live on."""

    rank: int
    size: int
    backend: str
    device: torch.device

    def barrier(self) -> None:
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

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


def init_from_env(device_spec: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> Group:
    """Join the group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the env)."""
    device = rank_device(device_spec, int(os.environ.get("LOCAL_RANK", "0")))
    return init(device, timeout_s=timeout_s)


def init(
    device: torch.device,
    *,
    rank: int | None = None,
    size: int | None = None,
    init_method: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Group:
    """Initialise the default process group for `device` (rank/size/init_method default to the env)."""
    backend = backend_for(device)
    kwargs: dict[str, object] = {"timeout": timedelta(seconds=timeout_s)}
    if init_method is not None:
        kwargs.update(init_method=init_method, rank=rank, world_size=size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend, **kwargs)
    return Group(dist.get_rank(), dist.get_world_size(), backend, device)


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
