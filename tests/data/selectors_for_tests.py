"""Selectors written the way an engine would, for tests/test_external_selectors.py (imported by name:
`selectors_for_tests:<function>` with tests/data on sys.path)."""

from __future__ import annotations

import torch

from perfsuite.variants.external import selector


def _exact(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """identity's math with plain torch ops: top-k of the logits (lowest index on ties), then
    exp(v - max) / sum(exp(x - max)) in fp32."""
    # lowest index first among equal logits: sort by (logit desc, index asc) with a stable sort
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :k]
    values = logits.gather(-1, order)
    row_max = values[:, :1].float()
    sum_exp = (logits.float() - row_max).exp().sum(dim=-1, keepdim=True)
    return torch.exp(values.float() - row_max) / sum_exp, order


@selector(accuracy="exact", summary="identity's math in plain torch ops")
def exact_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _exact(logits, k)


@selector(accuracy="exact", index_dtype="int32")
def int32_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices as int32, as some engines keep them."""
    p, index = _exact(logits, k)
    return p, index.int()


ADDRESSES: list[tuple[int, int]] = []
"""(out_p, out_index) addresses `preallocated_topk` was handed, call by call."""


@selector(accuracy="exact", preallocated=True, index_dtype="int32")
def preallocated_topk(logits: torch.Tensor, k: int, out_p: torch.Tensor, out_index: torch.Tensor) -> None:
    """Writes into the caller's buffers, as a graph-captured engine calls it."""
    p, index = _exact(logits, k)
    out_p.copy_(p)
    out_index.copy_(index)
    ADDRESSES.append((out_p.data_ptr(), out_index.data_ptr()))


@selector(accuracy="exact", outputs="indices")
def argmax_indices(logits: torch.Tensor, k: int) -> torch.Tensor:
    """An argmax kernel: indices only (lowest index on ties)."""
    return _exact(logits, k)[1]


@selector(accuracy="exact", outputs="indices", preallocated=True)
def argmax_into(logits: torch.Tensor, k: int, out_index: torch.Tensor) -> None:
    out_index.copy_(_exact(logits, k)[1])


@selector(accuracy="exact", outputs="indices")
def argmax_wrong(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Picks the lowest logits: parity must fail it."""
    return _exact(-logits, k)[1]


def dict_declared(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _exact(logits, k)


dict_declared.__perfsuite_selector__ = {"accuracy": "exact", "summary": "declared with a plain dict"}


def undeclared(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _exact(logits, k)


def bad_value(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _exact(logits, k)


bad_value.__perfsuite_selector__ = {"accuracy": "exact", "outputs": "probs"}


def bad_key(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _exact(logits, k)


bad_key.__perfsuite_selector__ = {"accuracy": "exact", "index_type": "int32"}


@selector(accuracy="exact")
def wrong_shape(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    p, index = _exact(logits, k)
    return p[:, :1].expand(-1, k + 1).contiguous(), torch.cat([index, index[:, :1]], dim=-1)


@selector(accuracy="exact")
def tuple_for_indices(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Declares probabilities and indices but returns only the indices."""
    return _exact(logits, k)[1]


@selector(accuracy="inexact", outputs="indices")
def argmax_tuple(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Declares indices only but returns both."""
    return _exact(logits, k)


@selector(accuracy="exact")
def int32_undeclared(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    p, index = _exact(logits, k)
    return p, index.int()


class Engine:
    @staticmethod
    @selector(accuracy="exact")
    def topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _exact(logits, k)


NOT_CALLABLE = 3


@selector(accuracy="exact", dtypes=["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def fp8_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Declares bf16 and fp8 logits (upcast to fp32 first: torch's CPU sort has no fp8)."""
    return _exact(logits.float(), k)


@selector(accuracy="inexact", outputs="indices", max_k=1)
def argmax_k1(logits: torch.Tensor, k: int) -> torch.Tensor:
    """An argmax kernel: k = 1 only, as SGLang's, AITER's and vLLM's greedy paths."""
    return logits.argmax(dim=-1, keepdim=True)
