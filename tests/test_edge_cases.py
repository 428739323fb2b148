"""The edge-case matrix: every variant on non-finite and degenerate rows, next to full_softmax."""

from __future__ import annotations

import torch

from perfsuite import variants
from perfsuite.correctness import edge_cases


def test_matrix_covers_every_pattern_variant_dtype_and_k(device):
    frame = edge_cases.matrix([torch.float32, torch.bfloat16], [1, 3], ["identity", "argmax_ones"], device)
    assert len(frame) == len(edge_cases.PATTERNS) * 2 * 2 * 3  # the baseline is always included
    assert set(frame["variant"]) == {"full_softmax", "identity", "argmax_ones"}
    assert frame["index_valid"].all() and frame["error"].eq("").all()
    base = frame[frame["variant"] == "full_softmax"]
    assert base["same_as_baseline"].all()


def test_it_shows_where_variants_part_from_the_baseline(device):
    frame = edge_cases.matrix([torch.float32], [1], ["identity", "argmax_ones"], device).set_index(
        ["pattern", "variant"]
    )
    assert frame.loc[("nan_one", "full_softmax"), "topk_p"] == "[nan]"
    assert frame.loc[("nan_one", "identity"), "index"] == "[517]"  # the NaN's position, as torch.max
    assert frame.loc[("nan_one", "argmax_ones"), "topk_p"] == "[1]"
    assert not frame.loc[("nan_one", "argmax_ones"), "same_as_baseline"]
    assert frame.loc[("neginf_half", "identity"), "same_as_baseline"]  # a mask is an ordinary row
    assert frame.loc[("one_hot", "identity"), "topk_p"] == "[1]"
    assert frame.loc[("one_hot", "identity"), "index"] == "[700]"


def test_crashes_and_unavailable_variants_are_recorded(monkeypatch, device):
    def boom(logits, k):
        raise RuntimeError("no")

    registry = {name: variants.get(name) for name in variants.names()}
    registry["boom"] = variants.Variant("boom", boom, "exact", registry["identity"].traffic, "boom")
    monkeypatch.setattr(variants, "_REGISTRY", registry)
    frame = edge_cases.matrix([torch.float32], [1], ["boom"], device)
    crashed = frame[frame["variant"] == "boom"]
    assert crashed["error"].eq("RuntimeError: no").all() and not crashed["index_valid"].any()
