"""The variant contract: a named top-k selector, its accuracy claim and its model of HBM traffic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

import torch

from perfsuite.variants.cache import Pass, hbm_bytes

Selector = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]
Accuracy = Literal["exact", "rounded", "inexact"]
"""exact: `topk_p` equals softmax(logits.double()) at its indices within fp32 rounding, logits order.
rounded: probabilities rounded to the input dtype before selection (the engines' baseline).
inexact: the indices follow the logits order but `topk_p` is not a probability (argmax_ones)."""

NanPolicy = Literal["unspecified", "largest", "smallest"]
"""Where a selector ranks NaN logits: "largest" above every number, +inf included (torch.argmax,
torch.topk); "smallest" below every number, -inf included (SGLang's kernels); "unspecified": no claim."""
NAN_POLICIES: tuple[str, ...] = get_args(NanPolicy)

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""The logits dtypes every built-in variant accepts (an external selector may declare others)."""
FP8_DTYPES = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name))
"""The 8-bit float dtypes this torch has: logits a selector may declare (`external`'s `dtypes`)."""
OUTPUT_BYTES_PER_SLOT = 4 + 8  # float32 topk_p + int64 topk_index


@dataclass(frozen=True)
class Traffic:
    """Bytes a call must move through device memory, and the largest temporary it materializes.

    `read` and `write` count every pass from HBM (`total`, the figure of a device without a cache).
    `passes`, where the model lists them, are the `[B, V]` sweeps whose tensors a last-level cache can keep
    between kernels (the logits re-read, temporaries written and read back): `hbm(cache_bytes)` is the
    cache-aware figure (`perfsuite.variants.cache`); bytes outside the passes always count.
    """

    read: int
    write: int
    temp: int = 0
    passes: tuple[Pass, ...] = ()

    @property
    def total(self) -> int:
        return self.read + self.write

    def hbm(self, cache_bytes: int) -> int:
        """HBM bytes with a last-level cache of `cache_bytes` (0: `total`)."""
        if not self.passes:
            return self.total
        listed = sum(p.bytes for p in self.passes)
        return self.total - listed + hbm_bytes(self.passes, cache_bytes)

    def cached(self, cache_bytes: int) -> int:
        """Bytes the cache absorbs: `total - hbm(cache_bytes)`."""
        return self.total - self.hbm(cache_bytes)

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.read + other.read,
            self.write + other.write,
            max(self.temp, other.temp),
            self.passes + other.passes,
        )


def swept(*passes: Pass, temp: int = 0) -> Traffic:
    """The traffic of `passes`, every byte counted in `read` / `write`, the passes kept for `hbm`."""
    read = sum(n for p in passes for _, n in p.reads)
    write = sum(n for p in passes for _, n in p.writes)
    return Traffic(read, write, temp, passes)


def elementwise(n: int, read_bytes: int, write_bytes: int, *, temp: bool = False) -> Traffic:
    """One pass over `n` elements reading and writing the given bytes per element."""
    return Traffic(n * read_bytes, n * write_bytes, n * write_bytes if temp else 0)


def ideal_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The unavoidable traffic of any selector: read the logits once, write `[B, k]` outputs."""
    return Traffic(batch * vocab * dtype.itemsize, batch * k * OUTPUT_BYTES_PER_SLOT)


TrafficModel = Callable[[int, int, int, torch.dtype], Traffic]
Availability = Callable[[torch.device], "str | None"]


def always_available(device: torch.device) -> str | None:
    return None


@dataclass(frozen=True)
class Variant:
    """A top-k selector over logits `[B, V]` returning `(topk_p float32 [B, k], topk_index int64 [B, k])`."""

    name: str
    select: Selector
    accuracy: Accuracy
    traffic: TrafficModel
    summary: str
    lowest_index_ties: bool = True
    available: Availability = field(default=always_available)
    untimed: Availability = field(default=always_available)
    """Why the variant, though it runs on a device, gives no time worth recording there (None: timed):
    the Triton kernels in Triton's interpreter on a CPU are checked, never timed."""
    launch: Callable[[int, int, int, torch.dtype], str] | None = None
    """How the variant launches a shape (batch, vocab, k, dtype) on the current device, for the results
    (the Triton variants: kernel, splits, tile, warps); None for the others."""
    dtypes: tuple[torch.dtype, ...] = SUPPORTED_DTYPES
    """The logits dtypes it accepts; others are refused by `check_inputs` (the battery: "not claimed")."""
    max_k: int | None = None
    """The largest topk it supports (an argmax kernel: 1); None: any."""
    nan: NanPolicy = "unspecified"
    """Where it ranks NaN logits (`NanPolicy`): the battery judges the indices of NaN rows by it."""

    @property
    def exact(self) -> bool:
        return self.accuracy == "exact"

    def unclaimed_k(self, k: int) -> str | None:
        """Why a call with this k is outside what the selector declares (None: it is inside)."""
        return unclaimed_k(self.max_k, k)

    def __call__(self, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        unclaimed = self.unclaimed_k(k)
        if unclaimed:
            raise ValueError(unclaimed)
        return bind(self.select, logits, k, self.dtypes)()


def unclaimed_k(max_k: int | None, k: int) -> str | None:
    """Why k is above a selector's declared `max_k` (None: it is not)."""
    if max_k is not None and k > max_k:
        return f"not claimed: the selector declares topk <= {max_k}"
    return None


def dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


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
        return lambda: empty_outputs(logits, k)
    return lambda: select(logits, k)


def empty_outputs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs for a batch of zero rows."""
    device = logits.device
    return (
        torch.empty((0, k), dtype=torch.float32, device=device),
        torch.empty((0, k), dtype=torch.int64, device=device),
    )
