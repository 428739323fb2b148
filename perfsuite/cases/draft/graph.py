"""The whole draft cycle captured into one CUDA graph (a HIP graph on ROCm), one graph per batch size.

As engines do: static input buffers (accepted tokens, target hidden states and, unless the loop's accept
rule is `all`, the extend's `select_index`, `loop.extend_index`) and static output buffers are
allocated outside the graph; a replay copies a cycle's inputs in, replays, and hands out copies of the
outputs. Graphs live in a small cache keyed by batch size and loop configuration; they share one graph
memory pool (only intermediates live in it, so replay order does not matter) and the least recently used
graph is dropped beyond `max_graphs`. A failed capture raises `execution.GraphCaptureError` naming the case
(`execution.capturing`: the process is left on the stream it was on).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

import torch

from perfsuite.cases.draft.loop import DraftLoop, DraftTree, extend_index
from perfsuite.core.console import first_line
from perfsuite.measure.device import GRAPH_UNROLL_CAP
from perfsuite.measure.execution import GraphCaptureError, capturing, warm_up

DEFAULT_MAX_GRAPHS = 8
WARMUP_CYCLES = 3


def timing_unroll(requested: int, backend: str, num_steps: int) -> int:
    """Cycles captured per timing graph: `requested`, capped so that cycles x steps stays within the
    backend's `GRAPH_UNROLL_CAP` (long unrolled graphs have crashed on ROCm); at least one."""
    cap = GRAPH_UNROLL_CAP.get(backend, 1)
    return max(1, min(requested, cap // max(num_steps, 1)))


class DraftGraph:
    """One captured draft cycle for one batch size."""

    def __init__(
        self,
        loop: DraftLoop,
        batch: int,
        device: torch.device,
        pool: object | None = None,
        label: str = "",
    ):
        head, length = loop.head, loop.config.extend_tokens
        self.batch, self.device = batch, device
        self.tokens = torch.zeros((batch, length), dtype=torch.int64, device=device)
        self.hidden = torch.zeros((batch, length, head.hidden), dtype=head.dtype, device=device)
        self.index: torch.Tensor | None = None  # accept "all": the last position, no index
        if loop.config.accept != "all":  # valid rows until the first load: the last positions
            self.index = extend_index(torch.full((batch,), length, device=device), length)
        what = f"draft graph capture failed ({label or f'batch {batch}'})"
        try:
            self.outputs = self._warm_up(loop)
        except Exception as exc:  # the warm-up runs what the capture will: its errors are the capture's
            raise GraphCaptureError(f"{what}: {first_line(exc)}", exc) from exc
        self.graph = torch.cuda.CUDAGraph()
        with capturing(self.graph, device, pool=pool, what=what):
            result = loop.cycle_tuple(self.tokens, self.hidden, self.index)
            for static, value in zip(self.outputs, result, strict=True):
                static.copy_(value)

    def _warm_up(self, loop: DraftLoop) -> tuple[torch.Tensor, ...]:
        """Run a few cycles on a side stream (library handles, Triton compilation), then allocate the
        static outputs outside the graph pool."""

        def cycle() -> tuple[torch.Tensor, ...]:
            return loop.cycle_tuple(self.tokens, self.hidden, self.index)

        result = warm_up(cycle, self.device, WARMUP_CYCLES)
        return tuple(torch.empty_like(t) for t in result)

    def load(self, tokens: torch.Tensor, hidden: torch.Tensor, index: torch.Tensor | None = None) -> None:
        """Copy one cycle's inputs into the static buffers (`index`: the extend's `select_index`, needed
        unless the accept rule is `all`)."""
        if (index is None) != (self.index is None):
            raise ValueError("a draft graph with an accept rule other than 'all' takes an index, others none")
        self.tokens.copy_(tokens)
        self.hidden.copy_(hidden)
        if self.index is not None and index is not None:
            self.index.copy_(index)

    def replay(self) -> None:
        self.graph.replay()

    def __call__(
        self, tokens: torch.Tensor, hidden: torch.Tensor, index: torch.Tensor | None = None
    ) -> DraftTree:
        """Load, replay, and return copies of the outputs (safe across other graphs' replays)."""
        self.load(tokens, hidden, index)
        self.graph.replay()
        return DraftTree(*(t.clone() for t in self.outputs))

    def release(self) -> None:
        self.graph.reset()


class GraphCache:
    """Draft graphs keyed by (batch size, configuration key), sharing one memory pool, at most
    `max_graphs` of them (least recently used dropped first)."""

    def __init__(self, device: torch.device, max_graphs: int = DEFAULT_MAX_GRAPHS):
        if max_graphs < 1:
            raise ValueError("max_graphs must be at least 1")
        self.device, self.max_graphs = device, max_graphs
        self.graphs: OrderedDict[tuple[int, Hashable], DraftGraph] = OrderedDict()
        self._pool: object | None = None

    def pool(self) -> object:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return self._pool

    def get(self, loop: DraftLoop, batch: int, key: Hashable, label: str = "") -> DraftGraph:
        """The graph of `loop` at `batch`, captured on first use."""
        slot = (batch, key)
        if slot in self.graphs:
            self.graphs.move_to_end(slot)
            return self.graphs[slot]
        while len(self.graphs) >= self.max_graphs:
            _, old = self.graphs.popitem(last=False)
            old.release()
        graph = DraftGraph(loop, batch, self.device, self.pool(), label)
        self.graphs[slot] = graph
        return graph

    def clear(self) -> None:
        """Drop every graph and the pool (its memory returns to the allocator's cache)."""
        for graph in self.graphs.values():
            graph.release()
        self.graphs.clear()
        self._pool = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    def __len__(self) -> int:
        return len(self.graphs)


def graph_body(graph: DraftGraph, loop: DraftLoop) -> Callable[[], tuple[torch.Tensor, ...]]:
    """The cycle on `graph`'s static buffers, for a timing graph that captures several copies of it."""

    def body() -> tuple[torch.Tensor, ...]:
        result = loop.cycle_tuple(graph.tokens, graph.hidden, graph.index)
        for static, value in zip(graph.outputs, result, strict=True):
            static.copy_(value)
        return graph.outputs

    return body
