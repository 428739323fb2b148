"""Every registered variant against the contract (DESIGN.md section 5) on the edge cases engines hit."""

from __future__ import annotations

import pytest
import torch
from support import stable_topk

from perfsuite import variants
from perfsuite.correctness import parity
from perfsuite.scenario import inputs
from perfsuite.variants.base import Traffic, ideal_traffic

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def runnable(device: torch.device) -> list[str]:
    """The variants that run here at any k (an argmax, `max_k = 1`, has tests of its own)."""
    found = [variants.get(n) for n in variants.names()]
    return [v.name for v in found if v.available(device) is None and v.max_k is None]


def test_registry_lists_the_baseline_first_and_rejects_unknown_names():
    assert variants.names()[0] == variants.BASELINE == "full_softmax"
    assert {"full_softmax", "argmax_ones", "identity"} <= set(variants.names())
    with pytest.raises(KeyError, match="unknown variant 'nope'"):
        variants.get("nope")


def test_accuracy_claims():
    assert variants.get("full_softmax").accuracy == "rounded"
    assert variants.get("argmax_ones").accuracy == "inexact"
    assert variants.get("identity").exact and variants.get("identity").lowest_index_ties
    assert "identity_engine_order" in variants.names() and variants.get("identity_engine_order").exact
    assert not variants.get("identity_engine_order").lowest_index_ties  # torch's tie order


@pytest.mark.parametrize("vocab", [1, 3, 127, 8193])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_variant_matches_the_reference_on_misaligned_vocab(vocab, dtype, device):
    logits = inputs.make_logits("gaussian", 3, vocab, dtype, seed=vocab, device=device)
    for k in sorted({1, min(2, vocab), min(5, vocab)}):
        ref = parity.truth(logits, k)
        for name in runnable(device):
            variant = variants.get(name)
            p, idx = variant(logits, k)
            assert p.dtype == torch.float32 and idx.dtype == torch.int64 and p.shape == idx.shape == (3, k)
            result = parity.check(variant.accuracy, p, idx, ref)
            assert result.verdict in ("pass", "inexact"), (name, vocab, k, result.problem)
            assert result.idx_tie_f64 == 1.0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_strided_views_never_read_the_poisoned_padding(dtype, device):
    logits = inputs.make_logits("peaked", 4, 1000, dtype, seed=3, device=device, row_pad=29)
    assert logits.stride(0) == 1029 and not logits.is_contiguous()
    dense = logits.contiguous()
    for name in runnable(device):
        for k in (1, 4):
            p, idx = variants.get(name)(logits, k)
            p_dense, idx_dense = variants.get(name)(dense, k)
            assert bool((idx < 1000).all()), name
            assert torch.equal(idx, idx_dense), name
            torch.testing.assert_close(p, p_dense, equal_nan=True)


def test_empty_batch_gives_empty_outputs(device):
    logits = torch.empty((0, 50), dtype=torch.bfloat16, device=device)
    for name in runnable(device):
        p, idx = variants.get(name)(logits, 3)
        assert p.shape == idx.shape == (0, 3) and p.dtype == torch.float32 and idx.dtype == torch.int64


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_exact_variants_break_ties_by_lowest_index(dtype, device):
    logits = inputs.make_logits("ties", 6, 300, dtype, seed=5, device=device)
    logits[0] = 1.0  # a 300-way tie
    logits[1, 40:] = float("-inf")  # k past the finite entries: ties among -inf
    for name in runnable(device):
        variant = variants.get(name)
        if not variant.lowest_index_ties:
            continue
        for k in (1, 2, 7, 16, 50):
            _, idx = variant(logits, k)
            assert torch.equal(idx, stable_topk(logits, k)), (name, k)


def test_baselines_agree_with_the_reference_up_to_ties(device):
    logits = inputs.make_logits("ties", 6, 300, torch.float32, seed=5, device=device)
    ref = parity.truth(logits, 7)
    for name in ("full_softmax", "argmax_ones"):
        p, idx = variants.get(name)(logits, 7)
        assert parity.check(variants.get(name).accuracy, p, idx, ref).idx_tie_f64 == 1.0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_exact_variants_give_float64_probabilities(dtype, device):
    logits = inputs.make_logits("zipf", 4, 5000, dtype, seed=2, device=device)
    truth = torch.softmax(logits.double(), dim=-1)
    for name in runnable(device):
        for k in (1, 8) if variants.get(name).exact else ():
            p, idx = variants.get(name)(logits, k)
            assert p.dtype == torch.float32 and idx.dtype == torch.int64
            torch.testing.assert_close(p.double(), truth.gather(-1, idx), rtol=parity.EXACT_RTOL, atol=0)


def test_argmax_ones_keeps_the_token_and_loses_the_probability(device):
    logits = inputs.make_logits("gaussian", 8, 4000, torch.float32, seed=1, device=device)
    p, idx = variants.get("argmax_ones")(logits, 1)
    assert torch.equal(idx, logits.argmax(-1, keepdim=True))
    assert bool((p == 1.0).all())
    result = parity.check("inexact", p, idx, parity.truth(logits, 1))
    assert result.verdict == "inexact" and result.p_relerr_f64 > 1.0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_finite_rows_keep_indices_in_range(dtype, device):
    logits = inputs.make_logits("gaussian", 5, 257, dtype, seed=0, device=device)
    logits[0, 100] = float("nan")
    logits[1, 7] = float("inf")
    logits[2] = float("-inf")
    logits[3] = float("nan")
    logits[4, ::2] = float("-inf")  # a vocabulary mask: still a well-defined row
    for name in runnable(device):
        for k in (1, 3):
            p, idx = variants.get(name)(logits, k)
            assert bool(((idx >= 0) & (idx < 257)).all()), name
            if name != "argmax_ones":
                assert bool(torch.isfinite(p[4]).all()), name
    p, idx = variants.get("identity")(logits, 1)
    assert idx[0, 0] == 100 and idx[1, 0] == 7 and idx[2, 0] == 0  # NaN and +inf win, as in torch.max
    assert bool(p[:4].isnan().all())


REFUSED = {
    "3d": (lambda x: x[None], 1),
    "int": (lambda x: x.long(), 1),
    "k0": (lambda x: x, 0),
    "kbig": (lambda x: x, 11),
    "cols": (lambda x: torch.randn(10, 2).t(), 1),
}


@pytest.mark.parametrize("bad", sorted(REFUSED))
def test_inputs_outside_the_contract_are_refused(bad):
    make, k = REFUSED[bad]
    with pytest.raises(ValueError):
        variants.get("identity")(make(torch.randn(2, 10)), k)


def test_traffic_models_count_passes_and_temporaries():
    b, v, k, dtype = 16, 128256, 8, torch.bfloat16
    ideal = ideal_traffic(b, v, k, dtype)
    assert ideal == Traffic(b * v * 2, b * k * 12)
    full = variants.get("full_softmax").traffic(b, v, k, dtype)
    assert full.total >= 3 * b * v * 2 and full.temp == b * v * 2  # softmax read+write, select read
    ones = variants.get("argmax_ones").traffic(b, v, k, dtype)
    assert ideal.read == ones.read and ones.temp == 0
    ident = variants.get("identity").traffic(b, v, k, dtype)
    assert ident.temp == b * v * 4  # the fp32 exp temporary torch ops cannot avoid
    assert ident.total > full.total  # eager torch identity is not free, for bf16
    engine = variants.get("identity_engine_order").traffic(b, v, k, dtype)
    assert engine.total < ident.total and engine.temp == ident.temp  # no tie repair pass, same temporary
    for name in variants.names():
        model = variants.get(name).traffic(b, v, k, dtype)
        assert model.read >= ideal.read, name
