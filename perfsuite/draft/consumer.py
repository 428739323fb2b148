"""Parity at the consumer: how two runs of the draft cycle differ in what the verifier reads.

Each run is a list of `DraftTree`s, one per input cycle; a "tree" below is one sequence's draft tree in
one cycle (`cycles x batch` trees per case). Figures: the share of trees whose draft tokens, parent list
or chosen positions differ, and the largest absolute and relative difference of the chosen positions'
path scores (compared position by position, whatever tokens they hold).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from perfsuite.draft.loop import DraftTree

TINY = 1e-30


def _share_differs(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    differs = sum(int((x != y).reshape(x.shape[0], -1).any(dim=1).sum()) for x, y in zip(a, b, strict=True))
    trees = sum(x.shape[0] for x in a)
    return differs / trees if trees else float("nan")


def _score_errors(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> tuple[float, float]:
    abs_err = rel_err = 0.0
    for x, y in zip(a, b, strict=True):
        if x.numel() == 0:
            continue
        diff = (x.double() - y.double()).abs()
        abs_err = max(abs_err, float(diff.max()))
        rel_err = max(rel_err, float((diff / y.double().abs().clamp_min(TINY)).max()))
    return abs_err, rel_err


def compare(runs: Sequence[DraftTree], against: Sequence[DraftTree], suffix: str) -> dict[str, float]:
    """Consumer figures of `runs` against `against`, with column names ending in `_{suffix}`."""
    if len(runs) != len(against):
        raise ValueError(f"{len(runs)} cycles against {len(against)}")
    abs_err, rel_err = _score_errors([t.scores for t in runs], [t.scores for t in against])
    return {
        f"tok_diff_{suffix}": _share_differs(
            [t.draft_tokens for t in runs], [t.draft_tokens for t in against]
        ),
        f"parent_diff_{suffix}": _share_differs([t.parents for t in runs], [t.parents for t in against]),
        f"pos_diff_{suffix}": _share_differs([t.positions for t in runs], [t.positions for t in against]),
        f"score_abserr_{suffix}": abs_err,
        f"score_relerr_{suffix}": rel_err,
    }


def identical(runs: Sequence[DraftTree], against: Sequence[DraftTree]) -> bool:
    """Bit-for-bit equality of every output of every cycle."""
    return len(runs) == len(against) and all(
        torch.equal(x, y) for a, b in zip(runs, against, strict=True) for x, y in zip(a, b, strict=True)
    )


def first_step_differs(runs: Sequence[DraftTree], against: Sequence[DraftTree], topk: int) -> float:
    """Share of trees whose step-0 tokens (the draft-extend selection) already differ."""
    return _share_differs([t.all_tokens[:, :topk] for t in runs], [t.all_tokens[:, :topk] for t in against])


def orphan_share(runs: Sequence[DraftTree], topk: int) -> float:
    """Share of trees with a drafted token whose parent position was not drafted (a broken tree: the
    verifier's tree mask has no path to it). Scores that shrink along a path never do this; ties can."""
    orphans = trees = 0
    for tree in runs:
        trees += tree.positions.shape[0]
        if tree.parents.shape[1] == 0:
            continue
        parent = tree.parents.gather(1, tree.positions // topk)
        drafted = (parent.unsqueeze(2) == tree.positions.unsqueeze(1)).any(dim=2)
        orphans += int(((parent >= 0) & ~drafted).any(dim=1).sum())
    return orphans / trees if trees else float("nan")
