"""The whole draft cycle captured into one CUDA graph (a HIP graph on ROCm), one graph per batch size.

As engines do: static input and output buffers outside the graph; a call copies a cycle's inputs in,
replays and hands out copies of the outputs. The cache's graphs share one memory pool (intermediates only).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import torch

from perfsuite.cases.draft.loop import DraftLoop, DraftTree, extend_index
from perfsuite.core.console import first_line
from perfsuite.measure.execution import GraphCaptureError, capturing, warm_up

WARMUP_CYCLES = 3


class DraftGraph:
    """One captured draft cycle for one batch size."""

    def __init__(
        self, loop: DraftLoop, batch: int, device: torch.device, pool: object = None, label: str = ""
    ):
        head, length = loop.head.config, loop.config.extend_tokens
        self.loop = loop
        self.tokens = torch.zeros((batch, length), dtype=torch.int64, device=device)
        self.hidden = torch.zeros((batch, length, head.hidden), dtype=head.torch_dtype, device=device)
        self.index: torch.Tensor | None = None  # accept "all": the last position, no index
        if loop.config.accept != "all":  # valid rows until the first load: the last positions
            self.index = extend_index(torch.full((batch,), length, device=device), length)
        what = f"draft graph capture failed ({label or f'batch {batch}'})"
        try:  # a few cycles on a side stream (library handles, Triton compilation): the capture's errors
            result = warm_up(self._cycle, device, WARMUP_CYCLES)
        except Exception as exc:
            raise GraphCaptureError(f"{what}: {first_line(exc)}", exc) from exc
        self.outputs = tuple(torch.empty_like(t) for t in result)  # outside the graph pool
        self.graph = torch.cuda.CUDAGraph()
        with capturing(self.graph, device, pool=pool, what=what):
            self.body()
        self.replay = self.graph.replay

    def _cycle(self) -> tuple[torch.Tensor, ...]:
        return self.loop.cycle_tuple(self.tokens, self.hidden, self.index)

    def body(self) -> tuple[torch.Tensor, ...]:
        """The cycle on the static buffers into the static outputs: what is captured (and what a timing
        graph captures several copies of)."""
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
    """Draft graphs keyed by (batch size, configuration key), sharing one memory pool, at most
    `max_graphs` of them (least recently used dropped first)."""

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
