"""The draft cycle as SGLang's EAGLE worker runs it (docs/draft-loop.md): draft extend, selected at each
sequence's last accepted token; `num_steps` tree decode steps; the tree handed to the verifier (SGLang's
organisation, or its topk-1 fast path). The selection is any `Selector`; the candidate choice and the
organisation use torch.max/topk, as engines do. No host syncs: a cycle captures into one graph.

Accept lengths: with no target model, each sequence's accept length per cycle is drawn from a stated rule,
seeded, on the CPU (the same on every device): `all` (every extend token), `uniform` (1 .. `max_accept`)
or `geometric:P` (each drafted token accepted with probability P when its parent was, the bonus token
always: mean `(1 - P**max_accept) / (1 - P)`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from perfsuite.cases.draft.head import DraftHead
from perfsuite.variants.base import Selector
from perfsuite.variants.ordering import topk_lowest_index

DEFAULT_ACCEPT = "geometric:0.8"
"""A `[draft]` table's default: each drafted token accepted with probability 0.8 (mean accept length
2.95 of 4 at 3 steps), an assumed per-token acceptance, neither measured here nor taken from a cited
source. `LoopConfig`'s own default is `all` (the loop without accept lengths)."""
ACCEPT_SEED_OFFSET = 2_000_003
"""Accept lengths are drawn from `seed + ACCEPT_SEED_OFFSET` (apart from the inputs' stream)."""


def parse_accept(rule: str) -> tuple[str, float | None]:
    """`("all" | "uniform", None)` or `("geometric", P)` with 0 <= P <= 1; ValueError otherwise."""
    if rule in ("all", "uniform"):
        return rule, None
    name, _, value = rule.partition(":")
    try:
        p = float(value) if name == "geometric" else math.nan
    except ValueError:
        p = math.nan
    if 0.0 <= p <= 1.0:
        return name, p
    raise ValueError(f"unknown accept rule {rule!r}; allowed: all, uniform, geometric:P (0 <= P <= 1)")


def accept_name(rule: str) -> str:
    """The canonical spelling of an accept rule (`geometric:0.80` -> `geometric:0.8`)."""
    name, p = parse_accept(rule)
    return name if p is None else f"{name}:{p:g}"


@dataclass(frozen=True)
class LoopConfig:
    """The draft tree's shape, the logits the selector gets (`upcast`: fp32, SGLang's logits processor;
    else the head's dtype) and the accept rule (canonical spelling; `all`: the last extend position)."""

    topk: int
    num_steps: int
    num_draft_tokens: int
    upcast: bool = True
    accept: str = "all"

    @property
    def max_accept(self) -> int:
        """The longest accept length: the deepest tree path plus the bonus token, within the extend."""
        return min(self.num_steps + 1, self.num_draft_tokens)

    @property
    def candidates(self) -> int:
        """Scored tree positions: `k` at step 0, `k * k` at each later step."""
        return self.topk + (self.num_steps - 1) * self.topk**2

    @property
    def parents_width(self) -> int:
        """Columns of the parent list: `k + 1` for step 0 and `k` per step after it, the last excluded."""
        return 0 if self.num_steps == 1 else self.topk + 1 + (self.num_steps - 2) * self.topk

    @property
    def extend_tokens(self) -> int:
        """Tokens per sequence in the draft extend: `num_draft_tokens`, as SGLang pads them."""
        return self.num_draft_tokens

    @property
    def fast_path(self) -> bool:
        """SGLang's topk-1 fast path: a chain of `num_steps` drafted tokens, no organisation step."""
        return self.topk == 1 and self.num_draft_tokens == self.num_steps + 1

    def unlike_sglang(self) -> str | None:
        """Why SGLang never runs this tree shape, or None when it does."""
        if self.topk == 1 and not self.fast_path:
            return (
                f"not run by SGLang: topk 1 with num_draft_tokens {self.num_draft_tokens} "
                f"(SGLang sets num_steps + 1 = {self.num_steps + 1})"
            )
        return None

    def problem(self) -> str | None:
        """Why this tree cannot be organised, or None."""
        if self.num_draft_tokens - 1 > self.candidates:
            return (
                f"num_draft_tokens - 1 = {self.num_draft_tokens - 1} exceeds the {self.candidates} scored "
                f"positions of a topk {self.topk}, num_steps {self.num_steps} tree"
            )
        return None


def accept_lengths(config: LoopConfig, batch: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` cycles' accept lengths, int64 `[batch]` on the CPU, drawn with `config.accept` from
    `seed + ACCEPT_SEED_OFFSET`; `all`: every one `num_draft_tokens`."""
    name, p = parse_accept(config.accept)
    if name == "all":
        return [torch.full((batch,), config.extend_tokens, dtype=torch.int64) for _ in range(count)]
    gen = torch.Generator().manual_seed(seed + ACCEPT_SEED_OFFSET)
    top = config.max_accept
    if name == "uniform":
        drawn = torch.randint(1, top + 1, (count, batch), generator=gen)
    else:
        accepted = torch.rand((count, batch, top - 1), generator=gen, dtype=torch.float64) < p
        drawn = 1 + accepted.long().cumprod(dim=-1).sum(dim=-1)
    return list(drawn.unbind(0))


def extend_index(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """SGLang's `select_index`: the flat row `b * length + lengths[b] - 1` of each sequence's last
    accepted token among the `[B * length]` extend rows (made once, outside the timed cycle)."""
    rows = torch.arange(lengths.shape[0], dtype=torch.int64, device=lengths.device)
    return rows * length + lengths.to(torch.int64) - 1


class DraftTree(NamedTuple):
    """What the verifier consumes, plus the raw step outputs (for checks)."""

    draft_tokens: torch.Tensor  # int64 [B, n - 1]: tokens at the chosen positions, in position order
    parents: torch.Tensor  # int64 [B, parents_width]: parent position of each group of k candidates
    positions: torch.Tensor  # int64 [B, n - 1]: chosen positions, sorted (SGLang's top_scores_index)
    scores: torch.Tensor  # float32 [B, n - 1]: path scores at the chosen positions
    all_scores: torch.Tensor  # float32 [B, candidates]: path score of every scored position
    all_tokens: torch.Tensor  # int64 [B, candidates]: token of every scored position


class Traced(NamedTuple):
    """A tree and the logit value of each of its scored positions (`[B, candidates]`, float64)."""

    tree: DraftTree
    logit_values: torch.Tensor


def fast_topk(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The engines' `fast_topk` over the last dimension: `max` for k == 1, else `topk`."""
    return torch.max(values, dim=-1, keepdim=True) if k == 1 else torch.topk(values, k, dim=-1)


def reference_select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 truth: softmax in float64, top-k with ties to the lowest index."""
    values, index = topk_lowest_index(torch.softmax(logits.double(), dim=-1), k)
    return values.float(), index


def constant_select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A no-op selection of the same output shape (two fill kernels): the cycle without the selection."""
    rows = logits.shape[0]
    topk_p = torch.full((rows, k), 1.0 / k, dtype=torch.float32, device=logits.device)
    return topk_p, torch.arange(k, device=logits.device).expand(rows, k)


class DraftLoop:
    """A draft head, a selector and a tree shape: `cycle(tokens, hidden) -> DraftTree`."""

    def __init__(self, head: DraftHead, select: Selector, config: LoopConfig):
        problem = config.problem()
        if problem:
            raise ValueError(problem)
        self.head, self.select, self.config = head, select, config
        self._chains: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    def selector_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head's logits as the selector gets them: fp32 (upcast) or the head's dtype."""
        logits = self.head.logits(hidden)
        return logits.float() if self.config.upcast else logits

    def extend(
        self, tokens: torch.Tensor, target_hidden: torch.Tensor, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draft extend over tokens `[B, L]`, hidden `[B, L, H]`: step 0's `topk_p`, `topk_index` and hidden
        at each sequence's last accepted token, `index` (`extend_index`: a gather, no sync), else the last."""
        batch, length = tokens.shape
        flat = self.head.step(tokens.reshape(-1), target_hidden.reshape(batch * length, -1))
        last = flat.view(batch, length, -1)[:, -1] if index is None else flat.index_select(0, index)
        topk_p, topk_index = self.select(self.selector_logits(last), self.config.topk)
        return topk_p, topk_index, last

    def decode(self, topk_p: torch.Tensor, topk_index: torch.Tensor, hidden: torch.Tensor) -> DraftTree:
        """Draft decode from the extend's top-k: `num_steps` tree levels, then the tree (module text)."""
        k, batch, device = self.config.topk, topk_p.shape[0], topk_p.device
        scores, input_ids = topk_p, topk_index.reshape(-1)
        hidden = hidden.repeat_interleave(k, dim=0)
        score_list, token_list = [topk_p], [topk_index]
        parent_list = [torch.arange(-1, k, device=device).expand(batch, k + 1)]
        row_base = torch.arange(batch, device=device).unsqueeze(1) * k
        for step in range(1, self.config.num_steps):
            hidden = self.head.step(input_ids, hidden)
            step_p, step_index = self.select(self.selector_logits(hidden), k)
            expanded = (scores.unsqueeze(2) * step_p.view(batch, k, k)).view(batch, k * k)
            scores, chosen = fast_topk(expanded, k)
            step_index = step_index.reshape(batch, k * k)
            score_list.append(expanded)
            token_list.append(step_index)
            parent_list.append(chosen + (k * k * (step - 1) + k))
            if step < self.config.num_steps - 1:
                input_ids = step_index.gather(1, chosen).reshape(-1)
                hidden = hidden[(chosen // k + row_base).reshape(-1)]
        all_scores, all_tokens = torch.cat(score_list, dim=1), torch.cat(token_list, dim=1)
        if self.config.fast_path:  # every step's token drafted, in order
            positions, parents = self._chain_constants(batch, device)
            return DraftTree(all_tokens, parents, positions, all_scores, all_scores, all_tokens)
        positions = torch.topk(all_scores, self.config.num_draft_tokens - 1, dim=-1).indices
        positions = torch.sort(positions, dim=-1).values
        if len(parent_list) > 1:
            parents = torch.cat(parent_list[:-1], dim=1)
        else:
            parents = torch.empty((batch, 0), dtype=torch.int64, device=device)
        tokens, chosen = all_tokens.gather(1, positions), all_scores.gather(1, positions)
        return DraftTree(tokens, parents, positions, chosen, all_scores, all_tokens)

    def _chain_constants(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The chain's positions `0..s-1` and parents `-1, 0, .., s-2`, made once per batch size (outside
        any capture's replay)."""
        if (batch, device) not in self._chains:
            steps, width = self.config.num_steps, self.config.parents_width
            positions = torch.arange(steps, device=device).expand(batch, steps)
            parents = torch.arange(-1, width - 1, device=device).expand(batch, width)
            self._chains[batch, device] = (positions, parents)
        return self._chains[batch, device]

    def cycle(self, *inputs: torch.Tensor | None) -> DraftTree:
        """One draft cycle on `extend`'s inputs: draft extend, then draft decode."""
        return self.decode(*self.extend(*inputs))

    def cycle_tuple(self, *inputs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """`cycle` returning a plain tuple (what graph capture and torch.compile see)."""
        return tuple(self.cycle(*inputs))

    def cycle_traced(self, *inputs: torch.Tensor | None) -> Traced:
        """`cycle` (eager, untimed) with the logit each selection picked at every scored position,
        `[B, candidates]` float64 aligned with `all_tokens` (the parity split)."""
        picked: list[torch.Tensor] = []

        def recording(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
            topk_p, topk_index = self.select(logits, k)
            picked.append(logits.gather(1, topk_index).double())
            return topk_p, topk_index

        tree = DraftLoop(self.head, recording, self.config).cycle(*inputs)
        batch = tree.all_tokens.shape[0]
        return Traced(tree, torch.cat([p.reshape(batch, -1) for p in picked], dim=1))
