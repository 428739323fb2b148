"""The variant contract: a named top-k selector, its accuracy claim and its model of HBM traffic."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from perfsuite.core.dtypes import dtype_name
from perfsuite.kernels import plan as plans
from perfsuite.variants.cache import Pass, hbm_bytes

Selector = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]
PlanFor = Callable[[int, int, int, torch.dtype, plans.Hardware], plans.Plan]
"""A Triton variant's launch plan for a shape `(batch, vocab, k, dtype)` on a device's `Hardware`."""
Accuracy = Literal["exact", "rounded", "inexact"]
"""exact: `topk_p` equals softmax(logits.double()) at its indices within fp32 rounding, logits order.
rounded: probabilities rounded to the input dtype before selection (the engines' baseline).
inexact: the indices follow the logits order but `topk_p` is not a probability (argmax_ones)."""
NanPolicy = Literal["unspecified", "largest", "smallest"]
"""Where a selector ranks NaN logits: "largest" above every number, +inf included (torch.argmax,
torch.topk); "smallest" below every number, -inf included (SGLang's kernels); "unspecified": no claim."""
Role = Literal["shortcut", "torch exact"]
"""What the reports single a selector out as (beside the baseline, `variants.BASELINE`): the inexact shortcut
whose trade they show, the exact selector in torch ops that a kernel must beat."""
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # every built-in variant accepts them
FP8_DTYPES = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name))
"""The 8-bit float dtypes this torch has: logits an external selector may declare."""


@dataclass(frozen=True)
class Traffic:
    """Bytes a call moves through device memory (`total`: every pass from HBM) and its largest temporary.

    `passes`, where the model lists them, are the `[B, V]` sweeps a last-level cache can keep between
    kernels: `hbm(cache_bytes)` is the cache-aware figure (`perfsuite.variants.cache`); bytes outside the
    passes always count."""

    read: int
    write: int
    temp: int = 0
    passes: tuple[Pass, ...] = ()

    @property
    def total(self) -> int:
        return self.read + self.write

    def hbm(self, cache_bytes: int) -> int:
        """HBM bytes with a last-level cache of `cache_bytes` (0: `total`)."""
        return self.total - sum(p.bytes for p in self.passes) + hbm_bytes(self.passes, cache_bytes)

    def __add__(self, other: Traffic) -> Traffic:
        read, write = self.read + other.read, self.write + other.write
        return Traffic(read, write, max(self.temp, other.temp), self.passes + other.passes)


def swept(*passes: Pass, temp: int = 0) -> Traffic:
    """The traffic of `passes`, every byte counted in `read` / `write`, the passes kept for `hbm`."""
    read = sum(n for p in passes for _, n in p.reads)
    write = sum(n for p in passes for _, n in p.writes)
    return Traffic(read, write, temp, passes)


def ideal_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The unavoidable traffic of any selector: read the logits once, write `[B, k]` fp32 + int64 outputs."""
    return Traffic(batch * vocab * dtype.itemsize, batch * k * (4 + 8))


Availability = Callable[[torch.device], "str | None"]


def always_available(device: torch.device) -> str | None:
    return None


@dataclass(frozen=True)
class Variant:
    """A top-k selector over logits `[B, V]` returning `(topk_p float32 [B, k], topk_index int64 [B, k])`."""

    name: str
    select: Selector
    accuracy: Accuracy
    traffic: Callable[[int, int, int, torch.dtype], Traffic]
    summary: str
    lowest_index_ties: bool = True
    available: Availability = always_available
    untimed: Availability = always_available  # why its times are not worth recording (Triton interpreted)
    launch: Callable[[int, int, int, torch.dtype], str] | None = None  # how it launches a shape (Triton)
    plan_for: PlanFor | None = None  # the plan its `select` launches for a shape (Triton); None: no plan
    dtypes: tuple[torch.dtype, ...] = SUPPORTED_DTYPES  # others are refused ("not claimed" in the battery)
    max_k: int | None = None  # the largest topk it supports (an argmax kernel: 1); None: any
    nan: NanPolicy = "unspecified"  # the battery judges the indices of NaN rows by it
    role: Role | None = None
    held_against: str | None = None  # an exact kernel's argmax kernel: what its cost of exactness is over
    engine_order_of: str | None = None  # the lowest-index selector this one is in torch's tie order

    @property
    def exact(self) -> bool:
        return self.accuracy == "exact"

    def unclaimed_k(self, k: int) -> str | None:
        return unclaimed_k(self.max_k, k)

    def __call__(self, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if unclaimed := self.unclaimed_k(k):
            raise ValueError(unclaimed)
        return bind(self.select, logits, k, self.dtypes)()


def unclaimed_k(max_k: int | None, k: int) -> str | None:
    """Why k is above a selector's declared `max_k` (None: it is not)."""
    return f"not claimed: the selector declares topk <= {max_k}" if max_k is not None and k > max_k else None


def dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(map(dtype_name, dtypes))


def check_inputs(logits: torch.Tensor, k: int, dtypes: tuple[torch.dtype, ...] = SUPPORTED_DTYPES) -> None:
    """Raise ValueError for inputs outside the contract (shape, dtype among `dtypes`, k)."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    if logits.dtype not in dtypes:
        raise ValueError(f"logits dtype {logits.dtype} is not one of {dtype_names(dtypes)}")
    if logits.stride(-1) != 1:
        raise ValueError("logits rows must be contiguous (a row-strided view is fine)")
    if not 1 <= k <= logits.shape[1]:
        raise ValueError(f"topk must be in [1, vocab={logits.shape[1]}], got {k}")


def bind(
    select: Selector, logits: torch.Tensor, k: int, dtypes: tuple[torch.dtype, ...] = SUPPORTED_DTYPES
) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """A zero-argument call of `select` on checked inputs; an empty batch never reaches the selector."""
    check_inputs(logits, k, dtypes)
    if logits.shape[0] == 0:
        empty = functools.partial(torch.empty, (0, k), device=logits.device)
        return lambda: (empty(dtype=torch.float32), empty(dtype=torch.int64))
    return lambda: select(logits, k)
