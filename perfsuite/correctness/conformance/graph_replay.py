"""The graph case: a selector captured in a CUDA/HIP graph and replayed, as engines replay the draft step.
It must not synchronise with the host while captured (on a real GPU the sync debug mode makes torch's
implicit syncs errors too), must give its eager answer on replay, and still after new logits are copied into
the captured input buffer (a replay reads the buffer's current contents and runs no Python)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from perfsuite import simulated_gpu
from perfsuite.core.console import first_line
from perfsuite.correctness import edge_cases
from perfsuite.correctness.conformance.judge import Verdict, judge
from perfsuite.measure import execution
from perfsuite.measure.device import synchronize
from perfsuite.variants.base import Variant

SYNC_WORDS = ("synchroniz", "capturing", "capture")  # in CUDA's and torch's errors for a sync in capture


@contextlib.contextmanager
def _sync_is_error() -> Iterator[None]:
    """On a real GPU, host synchronisations raise inside the block."""
    if simulated_gpu.active() is not None:
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


def _same(a: edge_cases.Outputs, b: edge_cases.Outputs) -> bool:
    return torch.equal(a[1], b[1]) and torch.allclose(a[0], b[0], rtol=0, atol=0, equal_nan=True)


def replay_verdict(variant: Variant, logits: torch.Tensor, k: int) -> Verdict:
    """Capture `variant(logits, k)` after an eager warm-up, replay, compare; refill `logits`, replay, and
    judge that against the eager call and the reference. A capture that raised on a host sync (or a
    pageable upload: a boolean mask, a host index) is "host_sync", else "crash"."""
    first = edge_cases.call(variant, logits, k)  # warm-up: compiles kernels, allocates preallocated outputs
    if isinstance(first, str):
        return Verdict("FAIL", "crash", first)
    graph = torch.cuda.CUDAGraph()
    try:
        with execution.capturing(graph, logits.device), _sync_is_error():
            out = variant(logits, k)
    except execution.GraphCaptureError as exc:
        message = first_line(execution.capture_cause(exc))
        finding = "host_sync" if any(word in message.lower() for word in SYNC_WORDS) else "crash"
        return Verdict("FAIL", finding, f"during capture: {message}")

    def replay() -> edge_cases.Outputs:
        graph.replay()
        synchronize(logits.device)
        return out[0].cpu(), out[1].cpu()

    if not _same(replay(), first):
        detail = "the first replay differs from the eager call on the same logits"
        return Verdict("FAIL", "graph_differs", detail)
    logits.copy_(logits.flip(-1))  # new logits in the captured buffer: every row reversed, its maxima move
    replayed = replay()
    eager = edge_cases.call(variant, logits, k)
    if isinstance(eager, str):
        return Verdict("FAIL", "crash", f"eager call on the new logits: {eager}")
    if not _same(replayed, eager):
        detail = (
            "after new logits were copied into the captured input, the replay differs from the eager call"
        )
        return Verdict("FAIL", "graph_differs", f"{detail} (a stale buffer or a value baked into the graph)")
    return judge(variant, logits, k, *replayed)
