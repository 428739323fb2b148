"""The graph case: a selector captured in a CUDA/HIP graph (`torch.cuda.CUDAGraph`) and replayed.

Engines capture the draft step once and replay it every step, so a selector must (1) not synchronise
with the host while captured (CUDA refuses it; on a real GPU `torch.cuda.set_sync_debug_mode("error")`
also turns the implicit syncs torch would do into errors, on the simulated GPU the capture raises), (2)
give on replay the answer it gives eagerly, and (3) keep giving it when new logits are copied into the
captured input buffer (a replay reads the buffer's current contents and runs no Python).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from perfsuite import simulated_gpu
from perfsuite.core.console import first_line
from perfsuite.correctness import edge_cases
from perfsuite.correctness.conformance import judge as judging
from perfsuite.measure import execution
from perfsuite.measure.device import synchronize
from perfsuite.variants.base import Variant

SYNC_WORDS = ("synchroniz", "capturing", "capture")
"""Words of the errors CUDA and torch raise for a host sync (or a pageable upload) during capture."""


@contextlib.contextmanager
def _sync_is_error() -> Iterator[None]:
    """On a real GPU, host synchronisations raise inside the block."""
    if simulated_gpu.active() is not None or not hasattr(torch.cuda, "set_sync_debug_mode"):
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


def _same(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> bool:
    return torch.equal(a[1], b[1]) and torch.allclose(a[0], b[0], rtol=0, atol=0, equal_nan=True)


def capture_failure(exc: BaseException) -> judging.Verdict:
    """The verdict on a capture that raised, from the error that broke it: "host_sync" for a host
    synchronisation or a pageable host-to-device copy (a boolean mask, a host index), else "crash"."""
    message = first_line(execution.capture_cause(exc))
    if any(word in message.lower() for word in SYNC_WORDS):
        return judging.failed("host_sync", f"during capture: {message}")
    return judging.failed("crash", f"during capture: {message}")


def replay_verdict(variant: Variant, logits: torch.Tensor, k: int) -> judging.Verdict:
    """Capture `variant(logits, k)` (after an eager warm-up), replay, compare; then refill `logits` with
    new values, replay again, and judge that answer against the eager one and the reference."""
    first = edge_cases.call(variant, logits, k)  # warm-up: compiles kernels, allocates preallocated outputs
    if isinstance(first, str):
        return judging.failed("crash", first)
    graph = torch.cuda.CUDAGraph()
    try:
        with execution.capturing(graph, logits.device), _sync_is_error():
            out = variant(logits, k)
    except execution.GraphCaptureError as exc:
        return capture_failure(exc)
    graph.replay()
    synchronize(logits.device)
    replayed = (out[0].cpu(), out[1].cpu())
    if not _same(replayed, first):
        return judging.failed(
            "graph_differs", "the first replay differs from the eager call on the same logits"
        )
    logits.copy_(logits.flip(-1))  # new logits in the captured buffer: every row reversed, its maxima move
    graph.replay()
    synchronize(logits.device)
    replayed = (out[0].cpu(), out[1].cpu())
    eager = edge_cases.call(variant, logits, k)
    if isinstance(eager, str):
        return judging.failed("crash", f"eager call on the new logits: {eager}")
    if not _same(replayed, eager):
        return judging.failed(
            "graph_differs", "after new logits were copied into the captured input, the replay differs from "
            "the eager call (a stale buffer or a value baked into the graph)"
        )  # fmt: skip
    return judging.judge(variant, logits, k, *replayed)
