"""The draft cycle as SGLang's EAGLE worker runs it: draft extend, then a multi-step tree draft decode.

A cycle (one per verification round) is
1. draft extend over `num_draft_tokens` tokens per sequence (SGLang pads the accepted tokens to the
   verified tree's length): the head runs over them with the target's hidden states, and the logits at
   each sequence's last accepted token (position `accept_len[b] - 1`, gathered with a precomputed device
   index, SGLang's `select_index`; without one, the last position: every token accepted) go through the
   selector: step 0's `topk_p, topk_index`;
2. draft decode, `num_steps` steps. Step 0 takes the extend's top-k as the first tree level. Each later
   step runs the head on the `k` tokens chosen last (with their parents' hidden states), selects top-k
   over the vocabulary for each of them, expands the path scores `scores[..., None] * topk_p` to `k * k`
   candidates, keeps the best `k` with their parents and feeds those tokens back in;
3. the tree handed to the verifier. topk > 1: SGLang's organisation, the best `num_draft_tokens - 1` of all
   step scores, their positions sorted, the draft tokens gathered there, and the parent list of every tree
   level but the last. topk 1 with `num_draft_tokens = num_steps + 1` (the only topk-1 setting SGLang runs:
   it rewrites `num_draft_tokens` to that): the fast path, a chain whose positions and parents are constants
   and whose draft tokens are every step's token, with no organisation step.

The selector sees the logits as SGLang's logits processor hands them over: upcast to fp32
(`LoopConfig.upcast`, the default); `upcast=False` hands it the head's bf16/fp16 logits, an engine without
the upcast. The vocabulary selection is pluggable (`Selector`): any `perfsuite.variants` entry. The `k * k`
candidate selection and the tree organisation use `torch.max`/`torch.topk` on the scores, as engines do.
Everything is written without host syncs, so a whole cycle can be captured into one CUDA/HIP graph.

Accept lengths (`LoopConfig.accept`, `accept_lengths`): there is no target model, so how many tokens the
verifier accepted is drawn per sequence and cycle from a stated rule, seeded, on the CPU (the same on every
device): `all` (every extend token: the selection at the last of the `num_draft_tokens` positions),
`uniform` (1 .. `max_accept`, equally likely) or `geometric:P` (each drafted token accepted with
probability P when its parent was, the bonus token always: `1 + min(Geometric, max_accept - 1)`, mean
`(1 - P**max_accept) / (1 - P)`), where `max_accept = min(num_steps + 1, num_draft_tokens)` is the deepest
accepted path plus the bonus token. `DEFAULT_ACCEPT`, `geometric:0.8`, is the default of a `[draft]` table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from perfsuite.cases.draft.head import DraftHead
from perfsuite.variants.base import Selector
from perfsuite.variants.ordering import topk_lowest_index

ACCEPT_RULES = ("all", "uniform", "geometric:P")
"""Accept-length rules: every extend token, uniform over 1..max_accept, geometric with acceptance P."""
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
    if name == "geometric":
        try:
            p = float(value)
        except ValueError:
            p = float("nan")
        if 0.0 <= p <= 1.0:
            return name, p
    raise ValueError(f"unknown accept rule {rule!r}; allowed: all, uniform, geometric:P (0 <= P <= 1)")


def accept_name(rule: str) -> str:
    """The canonical spelling of an accept rule (`geometric:0.80` -> `geometric:0.8`)."""
    name, p = parse_accept(rule)
    return name if p is None else f"{name}:{p:g}"


@dataclass(frozen=True)
class LoopConfig:
    """The draft tree's shape."""

    topk: int
    num_steps: int
    num_draft_tokens: int
    upcast: bool = True
    """The logits reach the selector as fp32 (SGLang's logits processor: `logits[:, :vocab].float()`);
    False: in the head's dtype (an engine without the upcast)."""
    accept: str = "all"
    """The rule the accept lengths are drawn with (`ACCEPT_RULES`, canonical spelling): `all` selects
    at the last extend position, as if every token were accepted."""

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
        """Tokens per sequence in the draft-extend pass: SGLang's, `num_draft_tokens` (the accepted tokens
        padded to the verified tree's length)."""
        return self.num_draft_tokens

    @property
    def fast_path(self) -> bool:
        """SGLang's topk-1 fast path: a chain of `num_steps` drafted tokens, no organisation step."""
        return self.topk == 1 and self.num_draft_tokens == self.num_steps + 1

    def unlike_sglang(self) -> str | None:
        """Why SGLang never runs this tree shape, or None when it does."""
        if self.topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            return (
                f"not run by SGLang: topk 1 with num_draft_tokens {self.num_draft_tokens} "
                f"(SGLang sets num_steps + 1 = {self.num_steps + 1})"
            )
        return None

    @property
    def selections(self) -> int:
        """Vocabulary selections per cycle: one in draft extend, one per draft forward."""
        return self.num_steps

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
    `seed + ACCEPT_SEED_OFFSET` (a CPU generator: the same lengths on every device). `all`: every one
    `num_draft_tokens` (today's selection at the last extend position)."""
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
    if k == 1:
        return torch.max(values, dim=-1, keepdim=True)
    return torch.topk(values, k, dim=-1)


def reference_select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 truth: softmax in float64, top-k with ties to the lowest index."""
    values, index = topk_lowest_index(torch.softmax(logits.double(), dim=-1), k)
    return values.float(), index


def constant_select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A no-op selection of the same output shape (two fill kernels): the cycle without the selection."""
    rows = logits.shape[0]
    topk_p = torch.full((rows, k), 1.0 / k, dtype=torch.float32, device=logits.device)
    topk_index = torch.arange(k, device=logits.device).expand(rows, k)
    return topk_p, topk_index


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
        self, tokens: torch.Tensor, target_hidden: torch.Tensor, accept_index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draft extend: tokens `[B, L]`, hidden `[B, L, H]` -> step-0 `topk_p`, `topk_index`, hidden,
        selected at each sequence's last accepted token: `accept_index` (`extend_index`, int64 `[B]` on
        the device: a gather, no host sync), or the last position when None."""
        batch, length = tokens.shape
        flat = self.head.step(tokens.reshape(-1), target_hidden.reshape(batch * length, -1))
        if accept_index is None:
            last = flat.view(batch, length, -1)[:, -1]
        else:
            last = flat.index_select(0, accept_index)
        topk_p, topk_index = self.select(self.selector_logits(last), self.config.topk)
        return topk_p, topk_index, last

    def decode(self, topk_p: torch.Tensor, topk_index: torch.Tensor, hidden: torch.Tensor) -> DraftTree:
        """Draft decode from the extend's top-k: `num_steps` tree levels, then the engine organisation."""
        k, batch = self.config.topk, topk_p.shape[0]
        device = topk_p.device
        scores = topk_p
        input_ids = topk_index.reshape(-1)
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
        if self.config.fast_path:
            return self.chain(score_list, token_list)
        return self.organize(score_list, token_list, parent_list)

    def chain(self, score_list: list[torch.Tensor], token_list: list[torch.Tensor]) -> DraftTree:
        """SGLang's topk-1 fast path: every step's token is drafted, in order; positions `0..s-1` and
        parents `-1, 0, .., s-2` are constants (made once per batch size, outside any capture's replay)."""
        all_scores = torch.cat(score_list, dim=1)
        all_tokens = torch.cat(token_list, dim=1)
        positions, parents = self._chain_constants(all_scores.shape[0], all_scores.device)
        return DraftTree(all_tokens, parents, positions, all_scores, all_scores, all_tokens)

    def _chain_constants(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (batch, device)
        if key not in self._chains:
            steps = self.config.num_steps
            positions = torch.arange(steps, device=device).expand(batch, steps)
            width = self.config.parents_width
            parents = torch.arange(-1, width - 1, device=device).expand(batch, width)
            self._chains[key] = (positions, parents)
        return self._chains[key]

    def organize(
        self, score_list: list[torch.Tensor], token_list: list[torch.Tensor], parent_list: list[torch.Tensor]
    ) -> DraftTree:
        """The best `num_draft_tokens - 1` positions over all levels, sorted; tokens and parents for them."""
        all_scores = torch.cat(score_list, dim=1)
        all_tokens = torch.cat(token_list, dim=1)
        positions = torch.topk(all_scores, self.config.num_draft_tokens - 1, dim=-1).indices
        positions = torch.sort(positions, dim=-1).values
        batch = all_scores.shape[0]
        if len(parent_list) > 1:
            parents = torch.cat(parent_list[:-1], dim=1)
        else:
            parents = torch.empty((batch, 0), dtype=torch.int64, device=all_scores.device)
        return DraftTree(
            all_tokens.gather(1, positions),
            parents,
            positions,
            all_scores.gather(1, positions),
            all_scores,
            all_tokens,
        )

    def cycle(
        self, tokens: torch.Tensor, target_hidden: torch.Tensor, accept_index: torch.Tensor | None = None
    ) -> DraftTree:
        """One draft cycle: draft extend over the accepted tokens (selected at `accept_index`, `extend`),
        then draft decode."""
        return self.decode(*self.extend(tokens, target_hidden, accept_index))

    def cycle_tuple(
        self, tokens: torch.Tensor, target_hidden: torch.Tensor, accept_index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """`cycle` returning a plain tuple (what graph capture and torch.compile see)."""
        return tuple(self.cycle(tokens, target_hidden, accept_index))

    def cycle_traced(
        self, tokens: torch.Tensor, target_hidden: torch.Tensor, accept_index: torch.Tensor | None = None
    ) -> Traced:
        """`cycle` (eager, untimed) with the logit of every scored position: `[B, candidates]` float64
        values of the logits each selection picked, aligned with `all_tokens` (the parity split)."""
        picked: list[torch.Tensor] = []
        select = self.select

        def recording(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
            topk_p, topk_index = select(logits, k)
            picked.append(logits.gather(1, topk_index).double())
            return topk_p, topk_index

        self.select = recording
        try:
            tree = self.cycle(tokens, target_hidden, accept_index)
        finally:
            self.select = select
        batch = tree.all_tokens.shape[0]
        return Traced(tree, torch.cat([p.reshape(batch, -1) for p in picked], dim=1))
