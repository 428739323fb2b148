"""The draft cycle as SGLang's EAGLE worker runs it (docs/draft-loop.md): draft extend, selected at each
sequence's last accepted token, `num_steps` tree decode steps, the tree handed to the verifier; any
`Selector`, no host syncs: a cycle captures into one graph (`DraftGraph`). Accept lengths: a seeded rule."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from perfsuite.cases.draft.head import DraftHead
from perfsuite.core.console import first_line
from perfsuite.measure.execution import GraphCaptureError, capturing, warm_up
from perfsuite.variants.base import Selector

DEFAULT_ACCEPT = "geometric:0.8"  # a `[draft]` table's: an assumed per-token acceptance, not measured
ACCEPT_SEED_OFFSET = 2_000_003  # accept lengths are drawn apart from the inputs' stream


def accept_name(rule: str) -> str:
    """An accept rule's canonical spelling (`geometric:0.80` -> `geometric:0.8`); ValueError for others."""
    if rule in ("all", "uniform"):
        return rule
    name, _, value = rule.partition(":")
    with contextlib.suppress(ValueError):
        if name == "geometric" and 0.0 <= (p := float(value)) <= 1.0:
            return f"{name}:{p:g}"
    raise ValueError(f"unknown accept rule {rule!r}; allowed: all, uniform, geometric:P (0 <= P <= 1)")


@dataclass(frozen=True)
class LoopConfig:
    """The draft tree's shape, the logits the selector gets (`upcast`: fp32, SGLang's, else the head's
    dtype) and the accept rule (canonical; `all`: the last extend position)."""

    topk: int
    num_steps: int
    num_draft_tokens: int
    upcast: bool = True
    accept: str = "all"

    @property
    def max_accept(self) -> int:
        """The deepest tree path plus the bonus token, within the extend."""
        return min(self.num_steps + 1, self.num_draft_tokens)

    @property
    def candidates(self) -> int:
        """Scored tree positions: `k` at step 0, `k * k` at each later step."""
        return self.topk + (self.num_steps - 1) * self.topk**2

    @property
    def parents_width(self) -> int:
        """Columns of the parent list: `k + 1` for step 0, `k` per later step but the last."""
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
    """`count` cycles' accept lengths, int64 `[batch]` on the CPU, by `config.accept` (canonical): `all`,
    every extend token; `uniform`, 1 .. `max_accept`; `geometric:P`, each drafted token accepted with
    probability P if its parent was, the bonus token always."""
    if config.accept == "all":
        return [torch.full((batch,), config.extend_tokens, dtype=torch.int64) for _ in range(count)]
    gen = torch.Generator().manual_seed(seed + ACCEPT_SEED_OFFSET)
    top = config.max_accept
    if config.accept == "uniform":
        drawn = torch.randint(1, top + 1, (count, batch), generator=gen)
    else:
        p = float(config.accept.removeprefix("geometric:"))
        accepted = torch.rand((count, batch, top - 1), generator=gen, dtype=torch.float64) < p
        drawn = 1 + accepted.long().cumprod(dim=-1).sum(dim=-1)
    return list(drawn.unbind(0))


def extend_index(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """SGLang's `select_index`: flat extend row `b * length + lengths[b] - 1`, the last accepted token."""
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


class DraftLoop:
    """A draft head, a selector and a tree shape: `cycle(tokens, hidden) -> DraftTree`."""

    def __init__(self, head: DraftHead, select: Selector, config: LoopConfig):
        if problem := config.problem():
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
        at each sequence's last accepted token (`index`, a gather: no sync), else at the last position."""
        batch, length = tokens.shape
        flat = self.head.step(tokens.reshape(-1), target_hidden.reshape(batch * length, -1))
        last = flat.view(batch, length, -1)[:, -1] if index is None else flat.index_select(0, index)
        topk_p, topk_index = self.select(self.selector_logits(last), self.config.topk)
        return topk_p, topk_index, last

    def decode(self, topk_p: torch.Tensor, topk_index: torch.Tensor, hidden: torch.Tensor) -> DraftTree:
        """Draft decode from the extend's top-k: `num_steps` tree levels (candidates chosen by the engines'
        `fast_topk`: max at k 1), then the tree: the fast path's chain or the organisation's top n - 1."""
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
            scores, chosen = torch.max(expanded, -1, keepdim=True) if k == 1 else torch.topk(expanded, k, -1)
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
        last = len(parent_list) - 1  # the last step's parents are not handed on
        parents = torch.cat(parent_list[:last], dim=1) if last else positions.new_empty((batch, 0))
        tokens, chosen = all_tokens.gather(1, positions), all_scores.gather(1, positions)
        return DraftTree(tokens, parents, positions, chosen, all_scores, all_tokens)

    def _chain_constants(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The chain's positions `0..s-1` and parents `-1..s-2`, once per batch size (outside any replay)."""
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
        """`cycle` as a plain tuple (what graph capture and torch.compile see)."""
        return tuple(self.cycle(*inputs))

    def cycle_traced(self, *inputs: torch.Tensor | None) -> Traced:
        """`cycle` (eager, untimed) with the logit each selection picked per scored position (float64)."""
        picked: list[torch.Tensor] = []

        def recording(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
            topk_p, topk_index = self.select(logits, k)
            picked.append(logits.gather(1, topk_index).double())
            return topk_p, topk_index

        tree = DraftLoop(self.head, recording, self.config).cycle(*inputs)
        batch = tree.all_tokens.shape[0]
        return Traced(tree, torch.cat([p.reshape(batch, -1) for p in picked], dim=1))


class DraftGraph:
    """One draft cycle captured for one batch size into a CUDA graph (a HIP graph on ROCm), as engines do:
    static inputs and outputs outside the graph; a call loads a cycle's inputs, replays, copies outputs."""

    def __init__(self, loop: DraftLoop, batch: int, device: torch.device, pool: object, label: str):
        head, length = loop.head.config, loop.config.extend_tokens
        self.loop = loop
        self.tokens = torch.zeros((batch, length), dtype=torch.int64, device=device)
        self.hidden = torch.zeros((batch, length, head.hidden), dtype=head.torch_dtype, device=device)
        last = torch.full((batch,), length, device=device)  # valid rows until the first load
        self.index = None if loop.config.accept == "all" else extend_index(last, length)
        what = f"draft graph capture failed ({label or f'batch {batch}'})"
        try:  # a few cycles on a side stream (library handles, Triton compilation): the capture's errors
            result = warm_up(self._cycle, device, 3)
        except Exception as exc:
            raise GraphCaptureError(f"{what}: {first_line(exc)}", exc) from exc
        self.outputs = tuple(torch.empty_like(t) for t in result)  # outside the graph pool
        self.graph = torch.cuda.CUDAGraph()
        with capturing(self.graph, device, pool=pool, what=what):
            self.body()

    def _cycle(self) -> tuple[torch.Tensor, ...]:
        return self.loop.cycle_tuple(self.tokens, self.hidden, self.index)

    def body(self) -> tuple[torch.Tensor, ...]:
        """The cycle on the static buffers into the static outputs: what is captured (also by timing)."""
        for static, value in zip(self.outputs, self._cycle(), strict=True):
            static.copy_(value)
        return self.outputs

    def load(self, tokens: torch.Tensor, hidden: torch.Tensor, index: torch.Tensor | None = None) -> None:
        """Copy one cycle's inputs into the static buffers (`index`: unless the accept rule is `all`)."""
        if (index is None) != (self.index is None):
            raise ValueError("a draft graph with an accept rule other than 'all' takes an index, others none")
        self.tokens.copy_(tokens)
        self.hidden.copy_(hidden)
        if self.index is not None:
            self.index.copy_(index)

    def __call__(self, *inputs: torch.Tensor | None) -> DraftTree:
        """Load a cycle's inputs, replay, and return copies of the outputs (safe across other replays)."""
        self.load(*inputs)
        self.graph.replay()
        return DraftTree(*(t.clone() for t in self.outputs))


class GraphCache:
    """Draft graphs by (batch size, key) in one memory pool, at most `max_graphs` (least recently used go)."""

    def __init__(self, device: torch.device, max_graphs: int = 8):
        self.device, self.max_graphs = device, max_graphs
        self.graphs: OrderedDict[tuple[int, Hashable], DraftGraph] = OrderedDict()
        self.pool: object = None

    def get(self, loop: DraftLoop, batch: int, key: Hashable, label: str = "") -> DraftGraph:
        """The graph of `loop` at `batch`, captured on first use."""
        slot = (batch, key)
        if slot not in self.graphs:
            while len(self.graphs) >= self.max_graphs:
                self.graphs.popitem(last=False)[1].graph.reset()
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            self.graphs[slot] = DraftGraph(loop, batch, self.device, self.pool, label)
        self.graphs.move_to_end(slot)
        return self.graphs[slot]

    def clear(self) -> None:
        """Drop every graph and the pool (its memory returns to the allocator's cache)."""
        for graph in self.graphs.values():
            graph.graph.reset()
        self.graphs.clear()
        self.pool = None
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
