"""The shape of a logits distribution, so a reader can tell which synthetic kind resembles a model's: mean
top-1 probability, mean entropy (nats), and the shares of rows with an exact tie at the top and across the
top-k boundary. In float64 on the logits as a case sees them (bf16's rounding shows as ties), over the rows
whose softmax is defined (`parity.defined_rows`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from perfsuite.correctness.parity import defined_rows

COLUMNS = ("top1_prob", "entropy_nats", "top1_tie_rows", "topk_tie_rows")
NAN = float("nan")
CHUNK_ELEMENTS = 1 << 24  # rows are taken in chunks of at most this many elements (128 MiB in float64)


def _chunks(logits: torch.Tensor) -> Iterator[torch.Tensor]:
    step = max(1, CHUNK_ELEMENTS // max(1, logits.shape[-1]))
    for start in range(0, logits.shape[0], step):
        x = logits[start : start + step]
        yield x[defined_rows(x)]


def shape_of(logits: torch.Tensor) -> dict[str, float]:
    """Mean top-1 probability, mean entropy and the share of rows with an exact tie at the top, over the
    defined rows of `[B, V]` logits (NaN where no row is defined)."""
    top1 = entropy = ties = count = 0.0
    for chunk in _chunks(logits):
        x = chunk.double()
        log_p = x - torch.logsumexp(x, dim=-1, keepdim=True)
        p = log_p.exp()
        top1 += float(p.amax(dim=-1).sum())
        entropy -= float(torch.where(p > 0, p * log_p, 0.0).sum())
        ties += float(((x == x.amax(dim=-1, keepdim=True)).sum(dim=-1) >= 2).sum())
        count += x.shape[0]
    rows = count or NAN
    return {"top1_prob": top1 / rows, "entropy_nats": entropy / rows, "top1_tie_rows": ties / rows}


def kth_ties(logits: torch.Tensor, k: int) -> float:
    """Share of the defined rows whose k-th and (k+1)-th largest logits are equal (NaN when k >= V or no
    row is defined)."""
    if k >= logits.shape[-1] or k < 1:
        return NAN
    ties = count = 0
    for x in _chunks(logits):
        values = x.topk(k + 1, dim=-1).values
        ties += int((values[:, k - 1] == values[:, k]).sum())
        count += x.shape[0]
    return ties / count if count else NAN


def _or_nan(figures: Callable[[], object], nan: object) -> object:
    """Figures that cannot be computed (out of memory) are NaN: they never cost a measured case its row."""
    try:
        return figures()
    except (RuntimeError, MemoryError):
        return nan


@dataclass
class ShapeMemo:
    """The figures of the last logits tensor seen, so cases sharing a tensor compute them once."""

    key: object = None
    figures: dict[str, float] = field(default_factory=dict)
    by_k: dict[int, float] = field(default_factory=dict)

    def columns(self, key: object, logits: torch.Tensor, k: int) -> dict[str, float]:
        """The row columns for a case of top-k on `logits` (`key`: what identifies the tensor)."""
        if key != self.key:
            self.key, self.by_k = key, {}
            self.figures = _or_nan(lambda: shape_of(logits), dict.fromkeys(COLUMNS[:3], NAN))
        if k not in self.by_k:
            self.by_k[k] = _or_nan(lambda: kth_ties(logits, k), NAN)
        return {**self.figures, "topk_tie_rows": self.by_k[k]}
