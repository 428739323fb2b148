"""The canonical order helper: top-k by logit with lowest-index ties, and no host sync."""

from __future__ import annotations

import pytest
import torch
from support import stable_topk

from perfsuite.variants.ordering import canonical_order, topk_lowest_index


@pytest.mark.parametrize("seed", range(6))
def test_matches_a_stable_sort_with_many_ties(seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(40):
        vocab = int(torch.randint(2, 2000, (1,), generator=gen))
        k = int(torch.randint(1, min(vocab, 24) + 1, (1,), generator=gen))
        x = torch.randint(0, 5, (3, vocab), generator=gen).float()
        x[1, :: max(vocab // 7, 1)] = float("-inf")
        values, index = topk_lowest_index(x, k)
        assert torch.equal(index, stable_topk(x, k)), (vocab, k)
        assert torch.equal(values, x.gather(-1, index))


def test_nan_ranks_first_and_indices_stay_valid():
    x = torch.zeros(3, 50)
    x[0, 9] = float("nan")
    x[1] = float("nan")
    x[2, 30:] = float("-inf")
    _, index = topk_lowest_index(x, 4)
    assert index[0].tolist() == [9, 0, 1, 2]
    assert bool((index >= 0).all() and (index < 50).all())
    assert index[2].tolist() == [0, 1, 2, 3]


def test_canonical_order_sorts_equal_values_by_index():
    values = torch.tensor([[2.0, 5.0, 2.0, 5.0]])
    index = torch.tensor([[9, 4, 1, 3]])
    v, i = canonical_order(values, index)
    assert v.tolist() == [[5.0, 5.0, 2.0, 2.0]] and i.tolist() == [[3, 4, 1, 9]]
