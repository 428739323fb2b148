"""Parity checks: the reference, the verdicts, and the figures they report."""

from __future__ import annotations

import torch

from perfsuite import variants
from perfsuite.correctness import parity
from perfsuite.scenario import inputs


def test_reference_is_the_float64_softmax():
    logits = inputs.make_logits("gaussian", 4, 999, torch.bfloat16, seed=1)
    ref = parity.truth(logits, 5)
    truth = torch.softmax(logits.double(), dim=-1)
    torch.testing.assert_close(ref.prob, truth.gather(-1, ref.index))
    assert ref.prob.dtype == torch.float64 and bool(ref.finite.all())


def test_the_reference_is_exact_at_huge_finite_magnitudes():
    """Four tied maxima at 1e30: p = 0.25 each. A logsumexp (max + log(sum)) rounds log(4) away at that
    magnitude and gave 1.0, judging the exact identity a failure and the 1.0 shortcut a pass."""
    logits = torch.zeros(2, 64, dtype=torch.float32)
    logits[:, [3, 17, 40, 63]] = 1e30
    logits[1, :3] = -1e30
    ref = parity.truth(logits, 4)
    assert torch.equal(ref.prob, torch.full((2, 4), 0.25, dtype=torch.float64))
    identity = parity.check("exact", *variants.get("identity")(logits, 4), ref)
    shortcut = parity.check("inexact", *variants.get("argmax_ones")(logits, 4), ref)
    assert identity.verdict == "pass", identity.problem
    assert shortcut.verdict == "inexact"


def test_a_correct_selection_passes_and_a_wrong_token_fails():
    logits = inputs.make_logits("peaked", 8, 1000, torch.float32, seed=2)
    ref = parity.truth(logits, 2)
    good = parity.check("exact", ref.prob.float(), ref.index, ref)
    assert good.verdict == "pass" and good.idx_exact_f64 == 1.0 and good.top1_mismatch_f64 == 0.0
    swapped = ref.index.flip(-1)
    bad = parity.check("exact", ref.prob.float(), swapped, ref)
    assert bad.verdict == "fail" and bad.top1_mismatch_f64 == 1.0 and "ranks lower" in bad.problem


def test_exact_probabilities_are_held_to_fp32_rounding():
    logits = inputs.make_logits("gaussian", 4, 1000, torch.float32, seed=3)
    ref = parity.truth(logits, 1)
    off = parity.check("exact", (ref.prob * (1 + 1e-3)).float(), ref.index, ref)
    assert off.verdict == "fail" and off.p_relerr_f64 > 5e-4
    as_inexact = parity.check("inexact", (ref.prob * (1 + 1e-3)).float(), ref.index, ref)
    assert as_inexact.verdict == "inexact"
    assert parity.check("rounded", (ref.prob * (1 + 1e-3)).float(), ref.index, ref).verdict == "fail"
    assert parity.check("rounded", (ref.prob * (1 + 1e-9)).float(), ref.index, ref).verdict == "pass"


def test_rounded_variants_may_swap_tokens_only_within_rounding():
    logits = torch.tensor([[0.75, 0.7461, -3.0, -4.0]]).to(torch.bfloat16)  # one bf16 ulp apart
    ref = parity.truth(logits, 1)
    other = torch.tensor([[1]])
    p = ref.prob_at(other).float()
    assert parity.check("rounded", p, other, ref).verdict == "pass"
    assert parity.check("exact", p, other, ref).verdict == "fail"
    far = torch.tensor([[2]])
    assert parity.check("rounded", ref.prob_at(far).float(), far, ref).verdict == "fail"


def test_out_of_range_indices_and_bad_shapes_fail():
    logits = torch.randn(2, 10)
    ref = parity.truth(logits, 1)
    assert "outside" in parity.check("exact", ref.prob.float(), torch.full((2, 1), 10), ref).problem
    assert "shapes" in parity.check("exact", ref.prob.float()[:1], ref.index[:1], ref).problem
    assert "dtypes" in parity.check("exact", ref.prob.float(), ref.index.int(), ref).problem


def test_non_finite_rows_are_counted_not_judged():
    logits = torch.randn(4, 10)
    logits[1, 3] = float("nan")
    logits[2, 0] = float("inf")
    logits[3] = float("-inf")
    logits[0, 5] = float("-inf")  # a mask is fine
    p, idx = variants.get("identity")(logits, 2)
    result = parity.check("exact", p, idx, parity.truth(logits, 2))
    assert (result.finite_rows, result.nonfinite_rows, result.verdict) == (1, 3, "pass")
    all_bad = torch.full((2, 10), float("nan"))
    p, idx = variants.get("identity")(all_bad, 1)
    assert parity.check("exact", p, idx, parity.truth(all_bad, 1)).verdict == "n/a"


def test_baseline_agreement_figures():
    logits = inputs.make_logits("gaussian", 16, 2000, torch.float32, seed=4)
    ref = parity.truth(logits, 4)
    base = variants.get("full_softmax")(logits, 4)
    p, idx = variants.get("identity")(logits, 4)
    result = parity.check("exact", p, idx, ref, base)
    assert result.idx_exact_base == 1.0 and result.idx_tie_base == 1.0
    assert 0 <= result.p_relerr_base < 1e-5


def test_bf16_softmax_picks_other_tokens_on_near_ties():
    """The headline: rounding probabilities to bf16 makes ties the logits did not have."""
    logits = inputs.make_logits("near_ties", 256, 4096, torch.bfloat16, seed=0)
    ref = parity.truth(logits, 1)
    p, idx = variants.get("full_softmax")(logits, 1)
    result = parity.check("rounded", p, idx, ref)
    assert result.verdict == "pass"  # within its declared rounding
    assert result.top1_mismatch_f64 > 0.01  # yet a different token than float64 on some rows
    p, idx = variants.get("identity")(logits, 1)
    assert parity.check("exact", p, idx, ref).top1_mismatch_f64 == 0.0
