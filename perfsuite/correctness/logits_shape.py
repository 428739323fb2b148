"""The shape of a logits distribution, so a reader can tell which synthetic kind resembles a model's: the
mean top-1 probability, the mean entropy in nats, the share of rows whose top logit is an exact tie and the
share whose k-th and (k+1)-th logits are equal (which tokens make the top k is then up to the tie order).

Computed in float64 on the logits as a case sees them (already in its dtype, so bf16's rounding shows
as ties), over the rows whose softmax is defined (no NaN or +inf, not all -inf); once per logits tensor,
the k-th-place ties once per k.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

COLUMNS = ("top1_prob", "entropy_nats", "top1_tie_rows", "topk_tie_rows")
CHUNK_ELEMENTS = 1 << 24
"""Rows are taken in chunks of at most this many elements (128 MiB in float64)."""


def _defined(x: torch.Tensor) -> torch.Tensor:
    """Rows whose softmax is defined: no NaN or +inf, and at least one finite logit."""
    return ~(x.isnan() | (x == float("inf"))).any(-1) & (x > float("-inf")).any(-1)


def _chunks(logits: torch.Tensor):
    step = max(1, CHUNK_ELEMENTS // max(1, logits.shape[-1]))
    for start in range(0, logits.shape[0], step):
        x = logits[start : start + step]
        yield x[_defined(x)]


def shape_of(logits: torch.Tensor) -> dict[str, float]:
    """Mean top-1 probability, mean entropy (nats) and the share of rows with an exact tie at the top,
    over the defined rows of `[B, V]` logits (NaN where no row is defined)."""
    top1 = entropy = ties = 0.0
    count = 0
    for chunk in _chunks(logits):
        x = chunk.double()
        log_p = x - torch.logsumexp(x, dim=-1, keepdim=True)
        p = log_p.exp()
        top = x.amax(dim=-1, keepdim=True)
        top1 += float(p.amax(dim=-1).sum())
        entropy -= float(torch.where(p > 0, p * log_p, 0.0).sum())
        ties += float(((x == top).sum(dim=-1) >= 2).sum())
        count += x.shape[0]
    if count == 0:
        return dict.fromkeys(COLUMNS[:3], float("nan"))
    return {"top1_prob": top1 / count, "entropy_nats": entropy / count, "top1_tie_rows": ties / count}


def kth_ties(logits: torch.Tensor, k: int) -> float:
    """Share of the defined rows whose k-th and (k+1)-th largest logits are equal (NaN when k >= V or no
    row is defined): a tie across the top-k boundary."""
    if k >= logits.shape[-1] or k < 1:
        return float("nan")
    ties = count = 0
    for x in _chunks(logits):
        values = x.topk(k + 1, dim=-1).values
        ties += int((values[:, k - 1] == values[:, k]).sum())
        count += x.shape[0]
    return ties / count if count else float("nan")


@dataclass
class ShapeMemo:
    """The figures of the last logits tensor seen, so cases sharing a tensor compute them once."""

    key: object = None
    figures: dict[str, float] = field(default_factory=dict)
    by_k: dict[int, float] = field(default_factory=dict)

    def columns(self, key: object, logits: torch.Tensor, k: int) -> dict[str, float]:
        """The row columns for a case of top-k on `logits` (`key`: what identifies the tensor). Figures
        that cannot be computed (out of memory) are NaN: they never cost a measured case its row."""
        if key != self.key:
            self.key, self.by_k = key, {}
            try:
                self.figures = shape_of(logits)
            except (RuntimeError, MemoryError):
                self.figures = dict.fromkeys(COLUMNS[:3], float("nan"))
        if k not in self.by_k:
            try:
                self.by_k[k] = kth_ties(logits, k)
            except (RuntimeError, MemoryError):
                self.by_k[k] = float("nan")
        return {**self.figures, "topk_tie_rows": self.by_k[k]}
