"""Timing: a sampler per execution kind, the cold-cache flush, and the one sampling loop that samples them in
turn (`measure_in_turn`). docs/measuring.md says how each one measures, and why."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from perfsuite import simulated_gpu
from perfsuite.core.settings import Timing
from perfsuite.measure.device import DeviceInfo
from perfsuite.measure.execution import Call, GraphCall, PreparedCall

SPIN_MIN_CYCLES = 100_000  # the shortest GPU spin before a sample (about 50 us)
SPIN_CLOCK_HZ = 2.1e9  # cycles a second when a spin is sized in seconds: no GPU perfsuite knows clocks higher
SPIN_MARGIN = 2.0
UNSTABLE_SPREAD = 0.25  # (p80 - p20) / median above it: `unstable`, not a figure to rank or compare on
SIMULATED_LABEL = "(simulated GPU: host clock)"  # the simulated GPU's events read the host clock
SIMULATED_FLUSH_BYTES = 4 << 20  # the simulated GPU has no cache to evict: a host-friendly flush
Agree = Callable[[list[float]], list[float]]  # a round's figures as every rank shares them
MIN_ROUNDS = 5  # whatever max_seconds says (unless reps is lower): a rank test needs 5 a side for p < 0.01


@dataclass(frozen=True)
class Samples:
    """Per-call times of one case, in seconds, and how they were taken."""

    seconds: tuple[float, ...]
    method: str

    def __post_init__(self) -> None:
        if simulated_gpu.active() and SIMULATED_LABEL not in self.method:
            object.__setattr__(self, "method", f"{self.method} {SIMULATED_LABEL}")

    def quantile_us(self, q: float) -> float:
        if len(self.seconds) == 1:
            return self.seconds[0] * 1e6
        return statistics.quantiles(self.seconds, n=100, method="inclusive")[round(q * 100) - 1] * 1e6

    def taken(self) -> Samples:
        """The samples of the rounds the sampler ran in (NaN in the others: `Sampler.every`)."""
        return Samples(tuple(s for s in self.seconds if not math.isnan(s)), self.method)

    @property
    def median_us(self) -> float:
        return statistics.median(self.seconds) * 1e6

    @property
    def p20_us(self) -> float:
        return self.quantile_us(0.20)

    @property
    def p80_us(self) -> float:
        return self.quantile_us(0.80)

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: the dispersion of the samples relative to their median."""
        median = self.median_us
        return (self.p80_us - self.p20_us) / median if median > 0 else float("nan")

    @property
    def unstable(self) -> bool:
        return not self.spread <= UNSTABLE_SPREAD


@dataclass(frozen=True)
class Ratio:
    """A ratio of paired samples: median with p20 and p80 over the pairs."""

    median: float
    p20: float
    p80: float


def paired_ratio(numerator: Samples, denominator: Samples) -> Ratio:
    """numerator_i / denominator_i over the samples of each round (e.g. the baseline's over a variant's)."""
    ratios = sorted(a / b for a, b in zip(numerator.seconds, denominator.seconds, strict=True) if b > 0)
    if len(ratios) < 2:
        only = ratios[0] if ratios else float("nan")
        return Ratio(only, only, only)
    q = statistics.quantiles(ratios, n=10, method="inclusive")
    return Ratio(statistics.median(ratios), q[1], q[7])


def flush_bytes(info: DeviceInfo) -> int:
    """Bytes read to evict the last-level cache: twice `cache_bytes` (H200: 128 MiB, MI300X: 512 MiB)."""
    return SIMULATED_FLUSH_BYTES if info.simulated else 2 * info.cache_bytes


@dataclass(frozen=True)
class CacheFlush:
    """Evicts the device's cache by reading a zeroed buffer twice its size (a sum into a scalar, capturable);
    read-only, so no dirty line is left for the timed call to write back, unlike `zero_()`."""

    buffer: torch.Tensor
    out: torch.Tensor

    def __call__(self) -> None:
        torch.sum(self.buffer, dim=0, out=self.out)


@simulated_gpu.device_cached
def cache_flusher(info: DeviceInfo) -> CacheFlush:
    """The device's cache flush (its buffer allocated once, not per flush)."""
    buffer = torch.zeros(flush_bytes(info) // 4, dtype=torch.float32, device=info.device)
    return CacheFlush(buffer, buffer.new_zeros(()))


def flusher(info: DeviceInfo, timing: Timing) -> CacheFlush | None:
    """The flush before each sample: the device's cache flush when `l2` is cold, else None."""
    return cache_flusher(info) if timing.l2 == "cold" else None


class Sampler:
    """Times one call per `sample()`, after the flush: `timed` by the host's wall clock. `measure_in_turn`
    samples it every `every`-th round (NaN in the others), then `settle` gives its final figures."""

    method = "host perf_counter"
    clock: Callable[[], float] = staticmethod(time.perf_counter)
    every = 1

    def __init__(self, call: Call, flush: Callable[[], None] | None):
        self.call, self.flush = call, flush

    def sample(self) -> float:
        if self.flush:
            self.flush()
        return self.timed(self.call)

    def timed(self, work: Callable[[], object]) -> float:
        start = self.clock()
        work()
        return self.clock() - start

    def settle(self, seconds: Sequence[float]) -> tuple[float, ...]:
        return tuple(seconds)


class ThreadTimeSampler(Sampler):
    """One intra-op thread: the thread's own CPU time, so time the core ran another process is not counted."""

    method = "host thread CPU time"
    clock = staticmethod(time.thread_time)


class DeviceTimer:
    """Device events around queued work, behind a GPU spin (`torch.cuda._sleep`) that holds the device while
    the host queues them, so no launch gap is timed; the spin grows to twice the longest queueing seen.
    With `idle`, the work starts on that device idle instead (no spin: its launch gaps are timed)."""

    def __init__(self, idle: torch.device | None = None) -> None:
        self.spin, self.idle = SPIN_MIN_CYCLES, idle
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def __call__(self, work: Callable[[], object]) -> float:
        if self.idle is not None:
            torch.cuda.synchronize(self.idle)
        else:
            torch.cuda._sleep(self.spin)
        queued_from = time.perf_counter()
        self.start.record()
        work()
        self.end.record()
        self.spin = max(self.spin, int(SPIN_MARGIN * (time.perf_counter() - queued_from) * SPIN_CLOCK_HZ))
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3


class EventSampler(Sampler):
    """GPU eager: device time from the call's first kernel to its last (one sample first sizes the spin)."""

    method = "device events"

    def __init__(self, call: Call, flush: Callable[[], None] | None):
        super().__init__(call, flush)
        self.timed = DeviceTimer()
        self.sample()


class GraphSampler(Sampler):
    """GPU graph: replays `unroll` copies of flush and call, minus the median of `unroll` flushes alone (so
    far in `sample()`, over the same rounds in `settle`: a sample's own is noisy, clipped at 0 biases up)."""

    def __init__(self, body: Call, flush: Callable[[], None] | None, device: torch.device, unroll: int):
        super().__init__(body, flush)
        self.graph = GraphCall(lambda: (flush and flush(), body())[1], device, unroll)  # flush, then call
        self.flush_graph = GraphCall(lambda: flush() or (), device, unroll) if flush else None
        self.unroll, self.timed, self.method = unroll, DeviceTimer(), f"graph replay x{unroll}"
        self.totals: list[float] = []  # per call: flushes + calls, one replay / unroll
        self.flushes: list[float] = []  # per call: the flush-only replay / unroll

    def sample(self) -> float:
        self.totals.append(self.timed(self.graph.graph.replay) / self.unroll)
        if self.flush_graph is not None:
            self.flushes.append(self.timed(self.flush_graph.graph.replay) / self.unroll)
        return flush_corrected(self.totals[-1:], self.flushes)[0]  # the median so far

    def settle(self, seconds: Sequence[float]) -> tuple[float, ...]:
        """The last `len(seconds)` samples, each minus the median flush-only time of those rounds."""
        n = len(seconds)
        return flush_corrected(self.totals[-n:], self.flushes[-n:]) if n else ()


def flush_corrected(totals: Sequence[float], flushes: Sequence[float]) -> tuple[float, ...]:
    """`totals` minus the median of `flushes` (none: as they are), clipped at 0."""
    flush = statistics.median(flushes) if flushes else 0.0
    return tuple(max(total - flush, 0.0) for total in totals)


def sampler_for(prepared: PreparedCall, info: DeviceInfo, timing: Timing) -> Sampler:
    flush = flusher(info, timing)
    if not info.is_gpu:
        return host_sampler(prepared.run, flush)
    if prepared.graphed:
        unroll = min(timing.graph_unroll, info.graph_unroll_cap)
        return GraphSampler(prepared.body, flush, torch.device(info.device), unroll)
    return EventSampler(prepared.run, flush)


def host_sampler(call: Call, flush: Callable[[], None] | None) -> Sampler:
    """The thread's CPU time with one intra-op thread, else the wall clock (a pool's CPU time: no latency)."""
    return (ThreadTimeSampler if torch.get_num_threads() == 1 else Sampler)(call, flush)


def measure_in_turn(
    samplers: Sequence[Sampler], timing: Timing, agree: Agree | None = None, budgeted: int | None = None
) -> list[Samples]:
    """The sampling loop: warm up, then sample in turn, each round one sampler later (A B C, B C A, ...), for
    `reps` rounds or, past `MIN_ROUNDS`, `max_seconds` a sampler (of `budgeted`: an in-turn reference shares
    the cases' budget); `agree` (tensor parallel: the max over ranks) makes all ranks stop after one round."""
    for _ in range(timing.warmup):
        for sampler in samplers:
            sampler.sample()
    rounds: list[list[float]] = []
    start, n = time.perf_counter(), len(samplers)
    budget = timing.max_seconds * (n if budgeted is None else max(1, min(budgeted, n)))
    while True:
        figures = [math.nan] * n
        for i in range(n):
            at = (len(rounds) + i) % n
            if len(rounds) % samplers[at].every == 0:
                figures[at] = samplers[at].sample()
        elapsed = time.perf_counter() - start
        if agree is not None:
            *figures, elapsed = agree([*figures, elapsed])
        rounds.append(figures)
        enough = len(rounds) >= min(MIN_ROUNDS, timing.reps)
        if len(rounds) >= timing.reps or (enough and elapsed >= budget):
            return [Samples(settled(s, [r[i] for r in rounds]), s.method) for i, s in enumerate(samplers)]


def settled(sampler: Sampler, seconds: Sequence[float]) -> tuple[float, ...]:
    """The sampler's final figures of these rounds; the rounds it sat out (NaN) stay NaN."""
    final = iter(sampler.settle([s for s in seconds if not math.isnan(s)]))
    return tuple(math.nan if math.isnan(s) else next(final) for s in seconds)


def measure(sampler: Sampler, timing: Timing) -> Samples:
    return measure_in_turn([sampler], timing)[0]


def measure_each(
    samplers: Sequence[Sampler], timing: Timing, budgeted: int | None = None
) -> list[Samples | BaseException]:
    """`measure_in_turn`, or where a sampler raises, each sampler alone (not paired): samples or exception."""
    try:
        return list(measure_in_turn(samplers, timing, budgeted=budgeted))
    except Exception:
        if len(samplers) == 1:
            raise
    out: list[Samples | BaseException] = []
    for sampler in samplers:
        try:
            out.append(measure(sampler, timing))
        except Exception as exc:
            out.append(exc)
    return out


class SampleClock:
    """A pytest-benchmark timer that advances by one sampler's time per `advance` (device time on a GPU)."""

    __name__ = "perfsuite.measure.timing.SampleClock"

    def __init__(self) -> None:
        self.now, self.seconds = 0.0, []

    def __call__(self) -> float:
        return self.now

    def use(self, sampler: Sampler) -> None:
        self.sampler, self.seconds = sampler, []

    def advance(self) -> None:
        self.seconds.append(self.sampler.sample())
        self.now += self.seconds[-1]

    def samples(self, skip: int = 0) -> Samples:
        """The samples after `skip` warm-up rounds, as pytest-benchmark saw them (never settled)."""
        return Samples(tuple(self.seconds[skip:]), self.sampler.method)
