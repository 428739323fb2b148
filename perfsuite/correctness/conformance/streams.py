"""Streams: the battery calls a selector on a side stream and flags work it issues elsewhere.

An engine runs its draft step on the stream it makes current (often a side stream beside the target
model's); a selector that launches on the default stream, or on one of its own without making the
caller's wait for it, races with the engine. So on a GPU each call of the battery's eager cases runs
under `torch.cuda.stream(side)`, a fresh stream that waits for the caller's. On the simulated GPU, which
records the stream current when each kernel runs (`simulated_gpu.kernels_by_stream`), any kernel on
another stream is a FAIL ("wrong_stream"). On a real GPU the check sees what the host can: a call that
leaves another stream current; kernels issued elsewhere are not traced there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from perfsuite import simulated_gpu

T = TypeVar("T")


def _elsewhere(before: dict[object, int], after: dict[object, int], side: object) -> dict[object, int]:
    """Kernels run between the two records, by stream, on streams other than `side`."""
    ran = {stream: n - before.get(stream, 0) for stream, n in after.items() if stream is not side}
    return {stream: n for stream, n in ran.items() if n}


def on_side_stream(device: torch.device, call: Callable[[], T]) -> tuple[T, str]:
    """`call()` with a fresh side stream current on `device`, and what it did elsewhere ("" when nothing,
    or on a CPU, where there are no streams)."""
    if device.type != "cuda":
        return call(), ""
    caller = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(caller)
    recorded = simulated_gpu.active() is not None
    before = simulated_gpu.kernels_by_stream() if recorded else {}
    with torch.cuda.stream(side):
        result = call()
        current = torch.cuda.current_stream(device)
    caller.wait_stream(side)
    if current != side:
        return result, "the call left another stream current than the caller's (a side stream)"
    if recorded:
        elsewhere = _elsewhere(before, simulated_gpu.kernels_by_stream(), side)
        if elsewhere:
            on_default = elsewhere.get(torch.cuda.default_stream(device), 0)
            return result, (
                f"{sum(elsewhere.values())} kernel(s) ran on another stream than the caller's side stream "
                f"({on_default} on the default stream)"
            )
    return result, ""
