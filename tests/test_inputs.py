"""Logits generators: shapes, determinism, the distributions they promise, poisoned padding."""

from __future__ import annotations

import pytest
import torch

from perfsuite import inputs


@pytest.mark.parametrize("kind", sorted(inputs.KINDS))
@pytest.mark.parametrize("dtype", ["float32", "bf16", "fp16"])
def test_shape_dtype_and_determinism(kind, dtype):
    dt = inputs.dtype_of(dtype)
    a = inputs.make_logits(kind, 3, 500, dt, seed=7)
    b = inputs.make_logits(kind, 3, 500, dt, seed=7)
    c = inputs.make_logits(kind, 3, 500, dt, seed=8)
    assert a.shape == (3, 500) and a.dtype == dt and torch.equal(a, b) and not torch.equal(a, c)
    assert bool(torch.isfinite(a).all())


def test_peaked_rows_have_a_confident_top_token():
    p = torch.softmax(inputs.make_logits("peaked", 16, 50000, torch.float32).double(), -1)
    assert bool((p.max(-1).values > 0.8).all())


def test_near_ties_put_contenders_within_a_few_ulps():
    x = inputs.make_logits("near_ties", 32, 4000, torch.bfloat16, seed=1)
    top2 = x.float().topk(2).values
    ulp = inputs.low_precision_ulp(torch.bfloat16, 0.75)
    assert bool(((top2[:, 0] - top2[:, 1]) <= 3 * ulp).all())


def test_row_pad_gives_a_strided_view_with_poisoned_padding():
    x = inputs.make_logits("gaussian", 2, 10, torch.float16, row_pad=6)
    assert x.shape == (2, 10) and x.stride() == (16, 1)
    storage = x.as_strided((2, 16), (16, 1))
    assert bool((storage[:, 10:] == torch.finfo(torch.float16).max).all())
    assert inputs.bytes_needed(2, 10, torch.float16, 6) == 2 * 16 * 2


def test_unknown_kind():
    with pytest.raises(KeyError, match="unknown logits kind"):
        inputs.make_logits("uniform", 1, 1, torch.float32)
