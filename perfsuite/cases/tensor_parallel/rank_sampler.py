"""Timing a collective call: every rank samples together, a sample's time is the slowest rank's.

Before each sample: a barrier, then the cache flush (cold) and, on a GPU, a spin that the call queues
behind. A sample is `time.perf_counter` around the call on the CPU, device events around it on a GPU (the
collective waits on the other ranks inside it). One all-reduce MAX per sample gives every rank the same
per-sample time and the same elapsed time, so all ranks stop sampling after the same sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from perfsuite.core.settings import Timing
from perfsuite.measure.device import DeviceInfo, synchronize
from perfsuite.measure.timing import Spin, cache_flusher
from perfsuite.variants.tensor_parallel.group import Group


class RankSampler:
    """One synchronised sample of `call` on this rank, in seconds (before the max over ranks)."""

    def __init__(self, call: Callable[[], object], group: Group, info: DeviceInfo, timing: Timing):
        self.call, self.group, self.info = call, group, info
        self.flush = cache_flusher(info) if timing.l2 == "cold" else None
        self.events = info.is_gpu
        self.spin = Spin()
        base = "device events" if self.events else "host perf_counter"
        self.method = f"{base}, max over {group.size} ranks, barrier before each sample"

    def sample(self) -> float:
        if self.events:
            return self._device_sample()
        if self.flush:
            self.flush()
        self.group.barrier()
        start = time.perf_counter()
        self.call()
        return time.perf_counter() - start

    def _device_sample(self) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        synchronize(self.group.device)
        self.group.barrier()
        if self.flush:
            self.flush()
        torch.cuda._sleep(
            self.spin.cycles
        )  # the call's launches queue behind it, as in perfsuite.measure.timing
        queued_from = time.perf_counter()
        start.record()
        self.call()
        end.record()
        self.spin.cover(time.perf_counter() - queued_from)
        end.synchronize()
        return start.elapsed_time(end) * 1e-3
