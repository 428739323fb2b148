"""The battery's cases: named inputs that break selector kernels on edge shapes, each saying what it probes.

Every input is a `[B, V]` view inside a larger buffer, as an engine hands logits over, whose other elements
(row padding, the elements before an offset data pointer, the tail after the last row) hold a poison value
above any real logit: a kernel that reads past its row picks it. Values are drawn in float32 on the CPU
(seeded by the case's name) and cast to the case's dtype, so every device and dtype sees the same rows.
"""

from __future__ import annotations

import fnmatch
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

import torch

from perfsuite import simulated_gpu
from perfsuite.core import machine
from perfsuite.correctness import edge_cases

TAIL = 256  # poisoned elements after the last row (and around each row of a buffer not filled)
BATCHES = tuple(sorted({1, 2, 3, 4096, *(2**n + d for n in range(2, 11) for d in (-1, 0, 1))}))
"""The batch axis: 1 to 3 rows, one below, at and above every power of two up to 1024, and 4096 rows."""
QUICK_BATCHES = (1, 2, 17, 65, 257, 1025)  # past 16, 64 (and an H200's split-or-fused 33), 256 and 1024
TILES = (1024, 2048, 4096, 8192, 16384)  # V = t - 1, t, t + 1: kernels/plan.py's split blocks, merge tiles,
# chunks and fused tiles (2048 fp32, 4096 bf16, 8192 fp8 columns), and vendors' up to 16384
MODEL_VOCABS = (32000, 128256, 129280, 151936)  # Llama 2, Llama 3, DeepSeek-V3, Qwen2.5/3 (and 151666 below)
INT64_STRIDE = (1 << 31) + 1024  # the int64 addressing case's row stride: rows past 2^31 and 2^32 elements

Build = Callable[[torch.dtype, torch.device], torch.Tensor]


class Skip(Exception):
    """A case that cannot run here; the message is the recorded reason."""


@dataclass(frozen=True)
class Case:
    """A named input; `build(dtype, device)` makes its logits (or raises `Skip`)."""

    name: str
    description: str
    vocab: int
    build: Build
    ks: tuple[int, ...] = (1, 8)
    quick: bool = True
    graph: bool = False  # captured in a CUDA/HIP graph and replayed (GPUs only)
    batch_check: bool = False  # its rows also run in batches of `batches` rows (QUICK_BATCHES in --quick)
    batches: tuple[int, ...] = BATCHES

    def topks(self) -> list[int]:
        """The k values it runs with (k never above V)."""
        return sorted({min(k, self.vocab) for k in self.ks})


def poison_value(dtype: torch.dtype) -> float:
    """Larger than any real logit of the battery, and finite in `dtype`."""
    return min(1e4, torch.finfo(dtype).max / 2)


def _generator(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def ordinary(name: str, batch: int, vocab: int) -> torch.Tensor:
    """float32 gaussian rows `[batch, vocab]`: row 0's maximum in its very last column (a kernel that drops
    the tail misses it), each later row's first 16 columns above everything in the row before it (a kernel
    that over-reads a row's tail into the next row picks them)."""
    x = torch.randn((batch, vocab), generator=_generator(name))
    x[0, vocab - 1] = 8.0
    head = min(16, vocab)
    for r in range(1, batch):
        x[r, :head] = 8.0 + 2 * r + torch.linspace(0, 1, head)
    return x


def place(
    values: torch.Tensor, dtype: torch.dtype, device: torch.device, *, offset: int = 0, stride: int = 0
) -> torch.Tensor:
    """`values` as a `[B, V]` view `offset` elements into a poisoned buffer, rows `stride` apart (0: V).
    A buffer over 1 GiB is poisoned only `TAIL` elements around each row (touching it whole would commit
    it: on a CPU the untouched pages of `torch.empty` never are)."""
    batch, vocab = values.shape
    stride = stride or vocab
    size = offset + max(batch - 1, 0) * stride + vocab + TAIL
    buffer = torch.empty(size, dtype=dtype, device=device)
    poison = poison_value(dtype)
    if size * dtype.itemsize <= 1 << 30:
        buffer.fill_(poison)
    else:
        for start in range(offset, offset + batch * stride, stride):
            buffer[max(start - TAIL, 0) : start + vocab + TAIL].fill_(poison)
    view = buffer.as_strided((batch, vocab), (stride, 1), offset)
    view.copy_(values.to(dtype).to(device))
    return view


def _placed(values: Callable[[], torch.Tensor], **layout) -> Build:
    return lambda dtype, device: place(values(), dtype, device, **layout)


def _ordinary(name: str, description: str, vocab: int, *, offset: int = 0, stride: int = 0, **flags) -> Case:
    rows = _placed(lambda: ordinary(name, 3, vocab), offset=offset, stride=stride)
    return Case(name, description, vocab, rows, **flags)


def _pattern_rows(name: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """edge_cases' pattern `name` in row 0, an ordinary row after it (a bad row must not spill over)."""
    rows = edge_cases.pattern_rows([edge_cases.PATTERNS[name][1]], dtype)
    return place(torch.cat([rows, ordinary(name, 2, edge_cases.EDGE_VOCAB)[1:]]), dtype, device)


def _all_negative() -> torch.Tensor:
    x = torch.randn((2, 8193), generator=_generator("all_negative")).abs()
    return torch.stack([-(40 + x[0]), -(2 + x[1])])


def _subnormal(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    tiny = torch.finfo(dtype).tiny
    x = torch.rand((2, 4099), generator=_generator("subnormal")) * tiny * 0.5
    x[0, 4099 // 3] = tiny * 0.9  # one largest value, itself subnormal
    x[1] = -x[1]
    return place(x, dtype, device)


def _ties_far() -> torch.Tensor:
    vocab = 8193
    x = torch.randn((3, vocab), generator=_generator("ties_far")).clamp(-3, 3)
    x[0, [3, vocab - 5]] = 6.0
    x[1, [0, vocab // 2, vocab - 1]] = 6.0
    return x


def _ties_across_splits() -> torch.Tensor:
    vocab = 32771
    x = torch.randn((2, vocab), generator=_generator("ties_across_splits")).clamp(-3, 3)
    x[0, torch.linspace(5, vocab - 6, 24).long()] = 6.0  # every split and tile holds one of the maxima
    x[1, [vocab - 1, vocab - 2, vocab - 3, vocab - 4, vocab - 5]] = torch.tensor([7.0, 6.75, 6.5, 6.25, 6.0])
    x[1, torch.linspace(0, vocab - 10, 12).long()] = 5.5  # 12 ties for slots 5..7, across splits
    return x


def _int64_addressing(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Three rows `INT64_STRIDE` apart: offsets past 2^31 (int32 overflows) and 2^32 (uint32 wraps)."""
    batch, vocab = 3, 1031
    need = ((batch - 1) * INT64_STRIDE + vocab + TAIL) * dtype.itemsize
    gib = need / (1 << 30)
    if device.type == "cuda" and simulated_gpu.active() is None:
        free, _ = torch.cuda.mem_get_info(device)
        if need + (1 << 30) > free:  # a GiB to spare
            raise Skip(f"needs {gib:.1f} GiB of device memory, {free / (1 << 30):.1f} GiB free")
    elif machine.host_available_bytes() < batch * (vocab + 2 * TAIL) * dtype.itemsize + (256 << 20):
        raise Skip("the host has too little memory left for the rows")  # the rows it touches, 256 MiB spare
    try:
        return place(ordinary("int64_addressing", batch, vocab), dtype, device, stride=INT64_STRIDE)
    except (RuntimeError, MemoryError) as exc:  # the allocator refused the address space
        raise Skip(f"cannot allocate a {gib:.1f} GiB buffer: {str(exc).splitlines()[0][:120]}") from None


BIT_PATTERN_ROWS = (  # what each row of `bit_patterns` holds
    "signed zeros tie at the top", "signed zeros tie at the k-th place", "one ulp apart at the top",
    "subnormal maxima", "the largest finite values", "+inf beside the largest finite value",
)  # fmt: skip


def _bits(value: float, dtype: torch.dtype, ulps: int) -> float:
    """The `dtype` value `ulps` steps from the positive `value` (its bit pattern plus `ulps`), as a float."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    return float((torch.tensor([value]).to(dtype).view(ints) + ulps).view(dtype).float())


def _bit_patterns(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """One row per `BIT_PATTERN_ROWS` entry, the rest of each row below the values placed in it, and
    every value placed exactly representable in `dtype` (each tie and near-tie is one in the dtype)."""
    info = torch.finfo(dtype)
    x = -1 - torch.rand((len(BIT_PATTERN_ROWS), edge_cases.EDGE_VOCAB), generator=_generator("bit_patterns"))
    x[0, [100, 900]] = torch.tensor([-0.0, 0.0])  # equal: the lowest index, 100, is first
    x[1, 500:507] = torch.arange(7, 0, -1).float()  # 7 values above the zeros, then +0.0 at 10, -0.0 at 20
    x[1, [10, 20]] = torch.tensor([0.0, -0.0])  # the other order: -0.0 put above +0.0 misses 10
    x[2, [30, 800]] = torch.tensor([_bits(1.0, dtype, 0), _bits(1.0, dtype, 1)])  # 800 is one ulp above 30
    x[2, 31:40] = 0.5
    tiny = info.tiny * info.eps  # the smallest subnormal
    x[3, [5, 50, 700, 701]] = torch.tensor([tiny, 2 * tiny, 3 * tiny, 3 * tiny])  # two maxima, subnormal
    x[4, [3, 600]] = torch.tensor([_bits(info.max, dtype, -1), info.max])  # max one ulp above its neighbour
    x[4, 601] = float("-inf")
    x[5, [2, 9]] = torch.tensor([info.max, float("inf")])
    return place(x, dtype, device)


# the rows of `masked`: a share of the row masked to -inf, or how many finite logits are left
MASKED_ROWS = (("50 % -inf", 0.5), ("90 % -inf", 0.9), ("99 % -inf", 0.99), ("3 finite logits", 3))


def _masked() -> torch.Tensor:
    """Grammar-style masks: each row's finite logits at random places (`MASKED_ROWS`), the rest -inf."""
    vocab = 4099
    gen = _generator("masked")
    x = torch.randn((len(MASKED_ROWS), vocab), generator=gen)
    for row, (_, share) in enumerate(MASKED_ROWS):
        kept = share if isinstance(share, int) else round(vocab * (1 - share))
        x[row, torch.randperm(vocab, generator=gen)[kept:]] = float("-inf")
    return x


def catalogue() -> list[Case]:
    """Every case of the battery, in the order they are run and shown."""
    vocab = edge_cases.EDGE_VOCAB
    wide = dict(ks=(1, 8, 16), quick=False, batch_check=True, batches=QUICK_BATCHES)  # k up to 16
    return [
        *(_ordinary(f"vocab_{v}", f"misaligned vocabulary V={v}, B=3, poison after the last row", v,
                    quick=v in (8193, 151666)) for v in (8193, 129281, 151666, 248320)),
        *(_ordinary(f"vocab_{v}", f"V={v}, around a {t}-column tile, k up to 16", v, **wide)
          for t in TILES for v in (t - 1, t, t + 1) if v != 8193),
        *(_ordinary(f"vocab_{v}", f"a model's vocabulary V={v}", v, **wide) for v in MODEL_VOCABS),
        # k up to V; V = 3 and 17 add 30 Triton compile keys: the full battery only
        *(_ordinary(f"vocab_{v}", f"tiny vocabulary V={v}, k up to V", v, quick=v <= 2,
                    ks=tuple(range(1, v + 1)) if v <= 3 else (1, 8, v - 1, v)) for v in (1, 2, 3, 17)),
        *(_ordinary(f"vocab_{v}", f"V={v}, below one tile", v, batch_check=v == 7) for v in (7, 100)),
        *(_ordinary(f"padded_rows_{v}", f"row-strided view [3, {v}] of a [3, {s}] buffer, the padding "
                    "poisoned", v, stride=s, quick=v == 1031) for v, s in ((1031, 1088), (151666, 151680))),
        *(_ordinary(f"offset_{o}", f"data pointer {o} elements into the buffer (V=4096, rows aligned but for "
                    "it)", 4096, offset=o, quick=o in (1, 3)) for o in range(8)),
        *(Case(p, f"{d}, then an ordinary row", vocab, partial(_pattern_rows, p))
          for p, (d, _) in edge_cases.PATTERNS.items()),
        Case("all_negative", "every logit below -2 (a running max started at 0 is wrong)", 8193,
             _placed(_all_negative)),
        Case("subnormal", "subnormal logits of the dtype, one largest (flushing them to 0 ties them)", 4099,
             _subnormal),
        Case("bit_patterns", f"rows: {'; '.join(BIT_PATTERN_ROWS)} (V={vocab})", vocab, _bit_patterns,
             batch_check=True),
        Case("masked", f"grammar masks, rows: {'; '.join(r for r, _ in MASKED_ROWS)} (V=4099)", 4099,
             _placed(_masked), batch_check=True),
        Case("ties_far", "equal maxima at 3 and V-5, and at 0, V/2, V-1 (V=8193)", 8193, _placed(_ties_far),
             batch_check=True),
        Case("ties_across_splits", "24 equal maxima spread over the row; 12 ties for slots 5..7 (V=32771)",
             32771, _placed(_ties_across_splits), quick=False, batch_check=True),
        Case("batch_zero", "B = 0", 1031, _placed(lambda: torch.empty((0, 1031)))),
        Case("int64_addressing", f"rows {INT64_STRIDE} elements apart: offsets past 2^31 and 2^32", 1031,
             _int64_addressing),
        _ordinary("graph_replay", "captured in a CUDA/HIP graph and replayed: same answer, new inputs, no "
                  "host sync (V=8193)", 8193, graph=True),
    ]  # fmt: skip


def select(patterns: Iterable[str] | None = None, *, quick: bool = False) -> list[Case]:
    """The cases whose names match any of the glob `patterns` (all without), the quick subset if asked;
    ValueError naming the known cases when a pattern matches none."""
    cases = [c for c in catalogue() if c.quick or not quick]
    patterns = list(patterns or [])
    names = [c.name for c in cases]
    if unmatched := [p for p in patterns if not fnmatch.filter(names, p)]:
        raise ValueError(f"no battery case matches {', '.join(unmatched)}; cases: {', '.join(names)}")
    return [c for c in cases if not patterns or any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
