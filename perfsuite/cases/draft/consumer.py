"""Parity at the consumer: how two runs of the draft cycle (lists of `DraftTree`s, one per input cycle; a
"tree" is one sequence's in one cycle) differ in what the verifier reads, and (`split`) whether differing
trees first part at a tie (the same logit values, in another order) or at other values (precision)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

import torch

from perfsuite.cases.draft.loop import DraftTree, LoopConfig, Traced

TINY = 1e-30
VERIFIER_READS = {"tok": "draft_tokens", "parent": "parents", "pos": "positions"}
Pick = Callable[[DraftTree], torch.Tensor]


def _differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per tree (row): whether any element differs."""
    return (a != b).reshape(a.shape[0], -1).any(dim=1)


def _share(count: int, trees: int) -> float:
    return count / trees if trees else float("nan")


def share_differs(runs: Sequence[DraftTree], against: Sequence[DraftTree], pick: Pick) -> float:
    """Share of trees whose `pick` differs."""
    differs = sum(int(_differs(pick(a), pick(b)).sum()) for a, b in zip(runs, against, strict=True))
    return _share(differs, sum(pick(a).shape[0] for a in runs))


def compare(runs: Sequence[DraftTree], against: Sequence[DraftTree], suffix: str) -> dict[str, float]:
    """Consumer figures of `runs` against `against`, with column names ending in `_{suffix}`."""
    out = {
        f"{n}_diff_{suffix}": share_differs(runs, against, attrgetter(f)) for n, f in VERIFIER_READS.items()
    }
    abs_err = rel_err = 0.0  # a cycle whose largest difference is NaN adds nothing (max keeps the first)
    for a, b in zip(runs, against, strict=True):
        if a.scores.numel():
            diff = (a.scores.double() - b.scores.double()).abs()
            abs_err = max(abs_err, float(diff.max()))
            rel_err = max(rel_err, float((diff / b.scores.double().abs().clamp_min(TINY)).max()))
    return {**out, f"score_abserr_{suffix}": abs_err, f"score_relerr_{suffix}": rel_err}


def identical(runs: Sequence[DraftTree], against: Sequence[DraftTree]) -> bool:
    """Bit-for-bit equality of every output of every cycle."""
    return len(runs) == len(against) and all(
        torch.equal(x, y) for a, b in zip(runs, against, strict=True) for x, y in zip(a, b, strict=True)
    )


def orphan_share(runs: Sequence[DraftTree], topk: int) -> float:
    """Share of trees drafting a token whose parent was not drafted (no path in the tree mask): ties can."""
    orphans = trees = 0
    for tree in runs:
        trees += tree.positions.shape[0]
        if tree.parents.shape[1]:
            parent = tree.parents.gather(1, tree.positions // topk)
            drafted = (parent.unsqueeze(2) == tree.positions.unsqueeze(1)).any(dim=2)
            orphans += int(((parent >= 0) & ~drafted).any(dim=1).sum())
    return _share(orphans, trees)


def _ties_first(a: Traced, b: Traced, config: LoopConfig) -> torch.Tensor:
    """Per tree: the first level where the two runs part is a token block whose picks, parent by parent,
    are the same multiset of logit values (a tie-order difference)."""
    k, ta, tb = config.topk, a.tree, b.tree
    rows = ta.all_tokens.shape[0]
    decided = torch.zeros(rows, dtype=torch.bool, device=ta.all_tokens.device)
    tie = torch.zeros_like(decided)
    for level in range(config.num_steps):
        if level >= 2:  # the k candidates chosen at level - 1, the parents of this level's nodes
            start = k + 1 + (level - 2) * k
            decided |= _differs(ta.parents[:, start : start + k], tb.parents[:, start : start + k])
        start = 0 if level == 0 else k + (level - 1) * k * k
        cols = slice(start, start + (k if level == 0 else k * k))
        differs = _differs(ta.all_tokens[:, cols], tb.all_tokens[:, cols])
        va = a.logit_values[:, cols].reshape(rows, -1, k).sort(dim=-1).values
        vb = b.logit_values[:, cols].reshape(rows, -1, k).sort(dim=-1).values
        tie |= differs & ~decided & (va == vb).reshape(rows, -1).all(dim=1)
        decided |= differs
    return tie


def split(
    runs: Sequence[Traced], against: Sequence[Traced], config: LoopConfig, suffix: str
) -> dict[str, float]:
    """`tie_diff_{suffix}` and `precision_diff_{suffix}`: shares of trees whose tokens, parents or positions
    differ from `against`'s by a tie first, or by other values first."""
    ties = values = trees = 0
    for a, b in zip(runs, against, strict=True):
        reads = [_differs(getattr(a.tree, f), getattr(b.tree, f)) for f in VERIFIER_READS.values()]
        differs = torch.stack(reads).any(dim=0)  # per tree: what the verifier reads differs
        tie = _ties_first(a, b, config) & differs
        ties += int(tie.sum())
        values += int((differs & ~tie).sum())
        trees += differs.shape[0]
    return {f"tie_diff_{suffix}": _share(ties, trees), f"precision_diff_{suffix}": _share(values, trees)}
