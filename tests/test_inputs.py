"""Logits generators: shapes, determinism, the distributions they promise, poisoned padding; and the
figures of a distribution's shape (perfsuite.correctness.logits_shape)."""

from __future__ import annotations

import math

import pytest
import torch

from perfsuite.core import dtypes
from perfsuite.correctness import logits_shape
from perfsuite.scenario import inputs


@pytest.mark.parametrize("kind", sorted(inputs.KINDS))
@pytest.mark.parametrize("dtype", ["float32", "bf16", "fp16"])
def test_shape_dtype_and_determinism(kind, dtype):
    dt = dtypes.dtype_of(dtype)
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


# ---------------------------------------------------------------- the distribution's shape (logits_shape)


def test_shape_of_rows_with_known_figures():
    flat = torch.zeros(1, 100)  # uniform: top-1 p 1/V, entropy ln V, a 100-way tie at the top
    certain = torch.full((1, 100), float("-inf"))
    certain[0, 3] = 0.0  # one token: p 1, entropy 0 (the -inf entries count as p = 0)
    figures = logits_shape.shape_of(torch.cat([flat, certain]))
    assert figures["top1_prob"] == pytest.approx((0.01 + 1.0) / 2)
    assert figures["entropy_nats"] == pytest.approx(math.log(100) / 2)
    assert figures["top1_tie_rows"] == 0.5


def test_shape_skips_rows_without_a_softmax():
    x = torch.randn(4, 50, dtype=torch.float64)
    bad = x.clone()
    bad[1, 0], bad[2] = float("nan"), float("-inf")
    assert logits_shape.shape_of(bad[[0, 3]]) == pytest.approx(logits_shape.shape_of(x[[0, 3]]))
    assert logits_shape.shape_of(bad) == pytest.approx(logits_shape.shape_of(x[[0, 3]]))
    assert math.isnan(logits_shape.shape_of(bad[[1, 2]])["top1_prob"])


def test_shape_in_chunks_is_the_same(monkeypatch):
    x = inputs.make_logits("zipf", 9, 300, torch.float32)
    whole = logits_shape.shape_of(x)
    monkeypatch.setattr(logits_shape, "CHUNK_ELEMENTS", 700)  # two rows a chunk
    assert logits_shape.shape_of(x) == pytest.approx(whole)


def test_ties_at_the_kth_place():
    x = torch.tensor([[5.0, 4.0, 4.0, 1.0], [5.0, 4.0, 3.0, 3.0], [2.0, 2.0, 1.0, 0.0]])
    assert logits_shape.kth_ties(x, 1) == pytest.approx(1 / 3)  # the third row's top
    assert logits_shape.kth_ties(x, 2) == pytest.approx(1 / 3)  # the first row's 2nd and 3rd
    assert logits_shape.kth_ties(x, 3) == pytest.approx(1 / 3)
    assert math.isnan(logits_shape.kth_ties(x, 4))  # no (k+1)-th logit


def test_the_kinds_differ_in_shape_as_documented():
    """peaked is confident, gaussian flat, near_ties and ties tie at the top; bf16 rounding adds ties."""
    shape = {k: logits_shape.shape_of(inputs.make_logits(k, 64, 4000, torch.float32)) for k in inputs.KINDS}
    assert shape["peaked"]["top1_prob"] > 0.8 > 0.2 > shape["gaussian"]["top1_prob"]
    assert shape["gaussian"]["entropy_nats"] > shape["zipf"]["entropy_nats"] > shape["peaked"]["entropy_nats"]
    assert shape["ties"]["top1_tie_rows"] == 1.0 and shape["near_ties"]["top1_tie_rows"] > 0.2
    assert shape["gaussian"]["top1_tie_rows"] == 0.0
    fp32 = inputs.make_logits("gaussian", 64, 4000, torch.float32)
    bf16 = inputs.make_logits("gaussian", 64, 4000, torch.bfloat16)
    assert logits_shape.kth_ties(bf16, 8) > 0.0 == logits_shape.kth_ties(fp32, 8)


def test_a_memo_computes_each_tensor_once(monkeypatch):
    calls = []
    shape_of = logits_shape.shape_of
    monkeypatch.setattr(logits_shape, "shape_of", lambda x: calls.append(1) or shape_of(x))
    memo = logits_shape.ShapeMemo()
    x = inputs.make_logits("ties", 8, 100, torch.float32)
    a = memo.columns("key", x, 1)
    b = memo.columns("key", x, 4)
    assert len(calls) == 1 and a["top1_prob"] == b["top1_prob"] and set(a) == set(logits_shape.COLUMNS)
    memo.columns("other", x, 4)
    assert len(calls) == 2


def test_a_shape_that_cannot_be_computed_is_nan_not_an_error(monkeypatch):
    def out_of_memory(x):
        raise torch.OutOfMemoryError("no memory for float64")

    monkeypatch.setattr(logits_shape, "shape_of", out_of_memory)
    columns = logits_shape.ShapeMemo().columns("key", inputs.make_logits("gaussian", 2, 10, torch.float32), 1)
    assert math.isnan(columns["top1_prob"]) and columns["topk_tie_rows"] == 0.0
