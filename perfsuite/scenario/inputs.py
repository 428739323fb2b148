"""Logits generators: the distributions a draft head produces, and the ones that break selectors; and
logits read from files (`file:NAME` kinds, `perfsuite.scenario.logits_files`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from perfsuite.scenario import logits_files
from perfsuite.scenario.logits_files import LogitsSource

DEFAULT_SCALE = 2.5
"""Standard deviation of the gaussian background, in logit units (LLM logits spread a few units)."""


def gaussian(shape, gen, device, scale, dtype=None) -> torch.Tensor:
    """i.i.d. normal logits: a flat, uncertain head (top-1 probability of a few percent at most)."""
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale


def _distinct_columns(shape: tuple[int, int], n: int, gen: torch.Generator, device) -> torch.Tensor:
    """`n` different random column indices per row, `[B, n]`."""
    return torch.rand(shape, generator=gen, device=device).topk(n, dim=-1).indices


def peaked(shape, gen, device, scale, dtype) -> torch.Tensor:
    """A confident draft head: one token 12 logits above the background, two runners-up behind it."""
    x = gaussian(shape, gen, device, scale)
    rows = torch.arange(shape[0], device=device)[:, None]
    picks = _distinct_columns(shape, min(3, shape[1]), gen, device)
    boosts = torch.tensor([12.0, 9.0, 8.0], device=device)[: picks.shape[1]]
    x[rows, picks] = x.amax(dim=-1, keepdim=True) + boosts
    return x


def low_precision_ulp(dtype: torch.dtype, value: float) -> float:
    """Spacing of the low-precision grid at `value`: fp16's for fp16, bf16's otherwise."""
    mantissa_bits = 10 if dtype == torch.float16 else 7
    return 2.0 ** (math.floor(math.log2(abs(value))) - mantissa_bits)


def near_ties(shape, gen, device, scale, dtype) -> torch.Tensor:
    """Top logits 0-3 low-precision ulps apart (and an exact tie): softmax in bf16/fp16 merges them.

    Softmax is shift-invariant, so rows are shifted to put the contenders near 0.75, where the bf16 grid
    is 2^-8 apart: their probabilities then differ by less than one bf16 ulp of the probability.
    """
    x = gaussian(shape, gen, device, scale)
    x = x - x.amax(dim=-1, keepdim=True) - 1.0
    top, ulp = 0.75, low_precision_ulp(dtype, 0.75)
    n = min(5, shape[1])
    rows = torch.arange(shape[0], device=device)[:, None]
    picks = _distinct_columns(shape, n, gen, device)
    steps = torch.randint(0, 4, (shape[0], n), generator=gen, device=device).float()
    steps[:, -1] = steps[:, 0]  # one exact tie per row
    x[rows, picks] = top - steps * ulp
    return x


def zipf(shape, gen, device, scale, dtype) -> torch.Tensor:
    """Heavy-tailed logits `-1.2 * scale * log(rank)` in a random order per row, as language models give."""
    ranks = torch.arange(1, shape[1] + 1, device=device, dtype=torch.float32)
    x = (-1.2 * scale * torch.log(ranks)).expand(shape).contiguous()
    order = torch.argsort(torch.rand(shape, generator=gen, device=device), dim=-1)
    return x.gather(-1, order) + 0.01 * gaussian(shape, gen, device, 1.0)


def ties(shape, gen, device, scale, dtype) -> torch.Tensor:
    """Small integers: many exact ties, at the top and at the k-th position."""
    return torch.randint(0, 6, shape, generator=gen, device=device).float()


KINDS = {f.__name__: f for f in (gaussian, peaked, near_ties, zipf, ties)}


def file_source(kind: str, files: Sequence[LogitsSource]) -> LogitsSource:
    """The source a `file:NAME` kind names among a scenario's `[inputs.files]`."""
    found = {source.kind: source for source in files}
    if kind not in found:
        raise KeyError(
            f"logits kind {kind!r} names no [inputs.files] entry; known: {', '.join(found) or 'none'}"
        )
    return found[kind]


def make_logits(
    kind: str,
    batch: int,
    vocab: int,
    dtype: torch.dtype,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    row_pad: int = 0,
    scale: float = DEFAULT_SCALE,
    files: Sequence[LogitsSource] = (),
) -> torch.Tensor:
    """Logits `[batch, vocab]` of one distribution, generated on `device` from `seed`, or the rows of the
    file source a `file:NAME` kind names in `files` (`vocab` must be its V; `scale` does not apply).
    `row_pad > 0`: a row-strided view of a wider buffer whose padding holds the dtype's largest value, so a
    selector that reads past a row's end gets caught."""
    device = torch.device(device)
    if logits_files.is_file_kind(kind):
        source = file_source(kind, files)
        if vocab != source.vocab:
            raise ValueError(f"{kind} ({source.path}) has V {source.vocab}, not {vocab}")
        values = logits_files.read_rows(source, batch, seed, dtype).to(device)
    elif kind in KINDS:
        gen = torch.Generator(device=device).manual_seed(seed)
        values = KINDS[kind]((batch, vocab), gen, device, scale, dtype).to(dtype)
    else:
        raise KeyError(f"unknown logits kind {kind!r}; known: {', '.join(KINDS)}")
    if row_pad == 0:
        return values
    buffer = torch.full((batch, vocab + row_pad), torch.finfo(dtype).max, dtype=dtype, device=device)
    buffer[:, :vocab] = values
    return buffer[:, :vocab]


def bytes_needed(batch: int, vocab: int, dtype: torch.dtype, row_pad: int = 0) -> int:
    """Device memory the logits buffer takes."""
    return batch * (vocab + row_pad) * dtype.itemsize


def host_bytes_needed(kind: str, batch: int, files: Sequence[LogitsSource] = ()) -> int:
    """Host memory making the logits takes beyond the buffer: reading a file source's rows (0 for the
    generated kinds)."""
    return logits_files.host_bytes(file_source(kind, files), batch) if logits_files.is_file_kind(kind) else 0
