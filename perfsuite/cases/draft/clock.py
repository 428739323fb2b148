"""How a draft cycle is timed, on top of `perfsuite.measure.timing`'s samplers.

Two figures per case:
- the cycle as an engine pays it (`cycle_*`): CPU: `timing.host_sampler` (the thread's CPU time with one
  intra-op thread, else `time.perf_counter`) around the call. GPU: device events
  around the call with the device idle when it starts (flush or nothing, then a synchronize), so the
  kernels run as the host issues them: an eager cycle pays every launch, a graph cycle one graph launch
  (the cached graph replayed once per cycle, as engines do);
- the device time (`device_*`, GPU only): eager, `timing.EventSampler` (launches queued behind a flush or
  a spin: first to last kernel); graph, `timing.GraphSampler` (copies of the cycle in one graph, the count
  capped by `GRAPH_UNROLL_CAP` over `num_steps`, a flush-only graph subtracted).

The selection's share compares the cycle with the same cycle whose selection is a no-op, sampled in
alternation (`timing.measure_in_turn`) so that clock drift and noise hit both alike.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from perfsuite.core.settings import Timing
from perfsuite.measure import timing
from perfsuite.measure.device import DeviceInfo

Call = Callable[[], object]


class LaunchBoundSampler(timing.Sampler):
    """GPU: device events around one call that starts on an idle device, launches issued live."""

    method = "device events, idle start (launches paid)"

    def __init__(self, call: Call, flush: Callable[[], None] | None, device: torch.device):
        super().__init__(call, flush)
        self.device = device
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample(self) -> float:
        if self.flush:
            self.flush()
        torch.cuda.synchronize(self.device)
        self.start.record()
        self.call()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3


def flusher(info: DeviceInfo, settings: Timing) -> Callable[[], None] | None:
    return timing.cache_flusher(info) if settings.l2 == "cold" else None


def cycle_sampler(call: Call, info: DeviceInfo, settings: Timing) -> timing.Sampler:
    """The engine-view sampler of one cycle (`call` is an eager/compiled cycle or a graph replay)."""
    flush = flusher(info, settings)
    if not info.is_gpu:
        return timing.host_sampler(call, flush)
    return LaunchBoundSampler(call, flush, torch.device(info.device))


def device_sampler(
    call: Call, body: Call | None, info: DeviceInfo, settings: Timing, unroll: int
) -> timing.Sampler | None:
    """The device-time sampler (GPU only): events with queued launches, or graph replay of `unroll`
    captured copies of `body` when `body` is given (the graph path)."""
    if not info.is_gpu:
        return None
    flush = flusher(info, settings)
    if body is not None:
        return timing.GraphSampler(body, flush, torch.device(info.device), unroll)
    return timing.EventSampler(call, flush)
