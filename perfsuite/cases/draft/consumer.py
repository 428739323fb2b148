"""Parity at the consumer: how two runs of the draft cycle differ in what the verifier reads.

Each run is a list of `DraftTree`s, one per input cycle; a "tree" below is one sequence's draft tree in
one cycle (`cycles x batch` trees per case). Figures: the share of trees whose draft tokens, parent list
or chosen positions differ, and the largest absolute and relative difference of the chosen positions'
path scores (compared position by position, whatever tokens they hold).

`split` sorts the trees that differ by where they first part (`Traced` runs: the logit of every scored
position): a tie, when the first tree level whose tokens differ picked the same logit values under every
parent (equal logits taken in another order: lowest index against torch's order), or a value difference
otherwise (another token with another logit, another candidate or position chosen because the scores
differ: softmax rounding in bf16/fp16, fp32 ulps, or a variant's inexact scores such as argmax_ones' 1.0).
Up to the first differing level both runs computed the same logits, so equal values there mean a tie.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from perfsuite.cases.draft.loop import DraftTree, LoopConfig, Traced

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


def _trees_differ(a: DraftTree, b: DraftTree) -> torch.Tensor:
    """Per tree: draft tokens, parents or positions differ (what the verifier reads)."""
    out = torch.zeros(a.draft_tokens.shape[0], dtype=torch.bool, device=a.draft_tokens.device)
    for x, y in ((a.draft_tokens, b.draft_tokens), (a.parents, b.parents), (a.positions, b.positions)):
        out |= (x != y).reshape(x.shape[0], -1).any(dim=1)
    return out


def _ties_first(a: Traced, b: Traced, config: LoopConfig) -> torch.Tensor:
    """Per tree: the first level where the two runs part is a token block whose picks, parent by parent,
    are the same multiset of logit values (a tie-order difference)."""
    k = config.topk
    ta, tb = a.tree, b.tree
    rows = ta.all_tokens.shape[0]
    decided = torch.zeros(rows, dtype=torch.bool, device=ta.all_tokens.device)
    tie = torch.zeros_like(decided)
    for level in range(config.num_steps):
        if level >= 2:  # the k candidates chosen at level - 1, the parents of this level's nodes
            start = k + 1 + (level - 2) * k
            moved = (ta.parents[:, start : start + k] != tb.parents[:, start : start + k]).any(dim=1)
            decided |= moved
        start = 0 if level == 0 else k + (level - 1) * k * k
        width = k if level == 0 else k * k
        cols = slice(start, start + width)
        differs = (ta.all_tokens[:, cols] != tb.all_tokens[:, cols]).any(dim=1)
        va = a.logit_values[:, cols].reshape(rows, -1, k).sort(dim=-1).values
        vb = b.logit_values[:, cols].reshape(rows, -1, k).sort(dim=-1).values
        same_values = (va == vb).reshape(rows, -1).all(dim=1)
        tie |= differs & ~decided & same_values
        decided |= differs
    return tie


def split(
    runs: Sequence[Traced], against: Sequence[Traced], config: LoopConfig, suffix: str
) -> dict[str, float]:
    """`tie_diff_{suffix}` and `precision_diff_{suffix}`: shares of trees that differ from `against`
    (tokens, parents or positions) by a tie first, or by other values first (see the module's text)."""
    if len(runs) != len(against):
        raise ValueError(f"{len(runs)} cycles against {len(against)}")
    ties = values = trees = 0
    for a, b in zip(runs, against, strict=True):
        differs = _trees_differ(a.tree, b.tree)
        tie = _ties_first(a, b, config) & differs
        ties += int(tie.sum())
        values += int((differs & ~tie).sum())
        trees += int(differs.shape[0])
    nan = float("nan")
    return {
        f"tie_diff_{suffix}": ties / trees if trees else nan,
        f"precision_diff_{suffix}": values / trees if trees else nan,
    }
