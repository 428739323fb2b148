"""Timing: one sampler per execution kind, shared by the CLI sweep and the pytest-benchmark front end.

- CPU: the calling thread's CPU time around the call (`time.thread_time`) with one intra-op thread,
  perfsuite's default, so what other processes take of the core is not counted; `time.perf_counter`
  with more threads.
- GPU eager: device events around the call. Before each sample the cache is flushed (cold), then the GPU
  spins while the host queues the call, so its launches queue up behind the spin and the figure is the
  device time from its first kernel to its last, as in an engine whose CPU runs ahead.
- GPU graph: `unroll` copies of the call captured into one graph (each copy after a flush when cold);
  a replay's time, minus the median replay of a flush-only graph over the same rounds, divided by
  `unroll` (tritonbench's method, with a robust estimate of the flush's share).
- Cold cache: before each sample a buffer of twice the last-level cache is read (`cache_flusher`), a
  read-only pass that leaves no dirty line for the timed call to write back (docs/measuring.md).
Figures are medians with p20/p80 over many samples, after warm-up. The variants of one shape are sampled
in turn (A B C, B C A, ...), so each speedup is a median of ratios of samples taken in the same seconds of
machine time (`paired_ratio`); a case whose samples spread wider than `UNSTABLE_SPREAD` is flagged. A
group's in-turn reference (an exp and a copy of the logits, `cases.protocol.InTurnReference`) is two more
samplers in the turn that share the group's time budget (`budgeted`); the copy is sampled every few rounds
(`Sampler.every`).
"""

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
from perfsuite.measure.execution import Call, GraphCall, Outputs, PreparedCall

SPIN_MIN_CYCLES = 100_000
"""The shortest GPU spin before a sample (about 50 us): the host queues the timed call meanwhile."""
SPIN_CLOCK_HZ = 2.1e9
"""Cycles per second assumed when a spin is sized in seconds: no GPU perfsuite knows clocks higher, so the
spin lasts at least as long as asked."""
SPIN_MARGIN = 2.0


@dataclass
class Spin:
    """How long the GPU spins before a timed call, in `torch.cuda._sleep` cycles: it grows to cover twice
    the longest host queueing time seen."""

    cycles: int = SPIN_MIN_CYCLES

    def cover(self, host_seconds: float) -> None:
        self.cycles = max(self.cycles, int(SPIN_MARGIN * host_seconds * SPIN_CLOCK_HZ))


@dataclass(frozen=True)
class Samples:
    """Per-call times of one case, in seconds, and how they were taken."""

    seconds: tuple[float, ...]
    method: str

    def __post_init__(self) -> None:
        label = simulated_gpu.timing_label()
        if label and label not in self.method:  # a simulated GPU's events read the host clock
            object.__setattr__(self, "method", f"{self.method} {label}")

    def quantile_us(self, q: float) -> float:
        ordered = sorted(self.seconds)
        if len(ordered) == 1:
            return ordered[0] * 1e6
        return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1] * 1e6

    def taken(self) -> Samples:
        """The samples of the rounds the sampler ran in (one sampled every few rounds, `Sampler.every`,
        has NaN in the others)."""
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


UNSTABLE_SPREAD = 0.25
"""A case whose (p80 - p20) / median exceeds this is `unstable`: its median is not a figure to rank or
compare on (`compare` calls its change "noisy", never "slower")."""


@dataclass(frozen=True)
class Ratio:
    """A ratio of paired samples: median with p20 and p80 over the pairs."""

    median: float
    p20: float
    p80: float


def paired_ratio(numerator: Samples, denominator: Samples) -> Ratio:
    """numerator_i / denominator_i over samples taken in the same round (the same seconds of machine
    time): e.g. the baseline's over a variant's, its speedup."""
    ratios = sorted(a / b for a, b in zip(numerator.seconds, denominator.seconds, strict=True) if b > 0)
    if not ratios:
        return Ratio(float("nan"), float("nan"), float("nan"))
    if len(ratios) == 1:
        return Ratio(ratios[0], ratios[0], ratios[0])
    q = statistics.quantiles(ratios, n=10, method="inclusive")
    return Ratio(statistics.median(ratios), q[1], q[7])


@simulated_gpu.device_cached
def _flush_buffer(device: str, nbytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The zeroed fp32 buffer a flush reads and the scalar its sum lands in (no allocation per flush)."""
    buffer = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
    return buffer, torch.zeros((), dtype=torch.float32, device=device)


SIMULATED_FLUSH_BYTES = 4 << 20
"""The simulated GPU has no cache to evict: its flush keeps the code path at a host-friendly size."""


def flush_bytes(info: DeviceInfo) -> int:
    """Bytes read to evict the last-level cache: twice `cache_bytes` (H200: 128 MiB, MI300X: 512 MiB)."""
    if info.simulated:
        return SIMULATED_FLUSH_BYTES
    return 2 * info.cache_bytes


@dataclass(frozen=True)
class CacheFlush:
    """Evicts the device's cache by reading a buffer twice its size (a sum into a preallocated scalar):
    a read-only pass, so no dirty line is left for the timed call to write back, unlike `zero_()` (which
    leaves the cache full of modified lines of the buffer). Graph-capturable; one reduction kernel."""

    buffer: torch.Tensor
    out: torch.Tensor

    def __call__(self) -> None:
        torch.sum(self.buffer, dim=0, out=self.out)


def cache_flusher(info: DeviceInfo) -> Callable[[], None]:
    """A call that evicts the device's cache with a read-only pass over a buffer larger than it."""
    return CacheFlush(*_flush_buffer(info.device, flush_bytes(info)))


class Sampler:
    """Times one call per `sample()` on the host's wall clock; `method` names how. `settle` turns the last
    samples into their final figures once every round is in (the graph sampler's flush correction)."""

    method = "host perf_counter"
    clock: Callable[[], float] = staticmethod(time.perf_counter)
    every = 1
    """`measure_in_turn` samples it in every `every`-th round (the first included), NaN in the others."""

    def __init__(self, call: Call, flush: Callable[[], None] | None):
        self.call, self.flush = call, flush

    def sample(self) -> float:
        if self.flush:
            self.flush()
        start = self.clock()
        self.call()
        return self.clock() - start

    def settle(self, seconds: Sequence[float]) -> tuple[float, ...]:
        """The final figures of the last `len(seconds)` samples (here: as sampled)."""
        return tuple(seconds)


class ThreadTimeSampler(Sampler):
    """A CPU whose torch runs its ops in the calling thread (one intra-op thread): the thread's own CPU
    time around the call (`time.thread_time`, user and system). Seconds in which the scheduler ran another
    process on the core are not the op's cost and are not counted: on the shared 2-core VM with one core
    busy and other work running, a 4.6 ms softmax + top-k read 8.7 / 12.6 / 17.6 ms (p20 / p50 / p90) on
    the wall clock and 4.5 / 4.6 / 4.8 ms on this one. What contention does to the op itself (caches,
    memory bandwidth, clocks) still shows, and the in-turn reference sees it too."""

    method = "host thread CPU time"
    clock = staticmethod(time.thread_time)


class EventSampler(Sampler):
    """GPU eager: device events around the call. Before each sample the cache is flushed (cold), then the
    GPU spins (`torch.cuda._sleep`) while the host queues the start event, the call and the end event, so
    the events time the device work from the call's first kernel to its last and no launch gap between its
    kernels (a torch-op variant is a dozen launches; a Triton launch costs tens of microseconds of Python).
    The spin lasts twice the longest time the host has taken to queue the call, calibrated on creation and
    grown whenever a sample queued slower."""

    method = "device events"

    def __init__(self, call: Call, flush: Callable[[], None] | None):
        super().__init__(call, flush)
        self.spin = Spin()
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.sample()  # calibrates the spin to this call's queueing time

    def sample(self) -> float:
        if self.flush:
            self.flush()
        torch.cuda._sleep(self.spin.cycles)
        queued_from = time.perf_counter()
        self.start.record()
        self.call()
        self.end.record()
        self.spin.cover(time.perf_counter() - queued_from)
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3


class GraphSampler(Sampler):
    """GPU graph: replay `unroll` captured copies of the call (after a flush each, when cold).

    Cold: each sample also replays a graph of `unroll` flushes alone. A sample's own flush-only replay is
    a noisy estimate of the flushes' share (subtracting it and clipping at 0 biases small kernels up), so
    `sample()` subtracts the median flush-only time so far, and `settle` the median over the same rounds
    as the samples it settles."""

    def __init__(self, body: Call, flush: Callable[[], None] | None, device: torch.device, unroll: int):
        def step() -> Outputs:
            if flush:
                flush()
            return body()

        def flush_only() -> tuple[()]:
            flush()
            return ()

        self.graph = GraphCall(step, device, unroll)
        self.flush_graph = GraphCall(flush_only, device, unroll) if flush else None
        self.unroll, self.spin = unroll, Spin()
        self.totals: list[float] = []  # per call: flushes + calls, one replay / unroll
        self.flushes: list[float] = []  # per call: the flush-only replay / unroll
        self.method = f"graph replay x{unroll}"
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def _replay_seconds(self, graph: GraphCall) -> float:
        torch.cuda._sleep(self.spin.cycles)
        self.start.record()
        graph.graph.replay()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3

    def sample(self) -> float:
        self.totals.append(self._replay_seconds(self.graph) / self.unroll)
        if self.flush_graph is not None:
            self.flushes.append(self._replay_seconds(self.flush_graph) / self.unroll)
        return flush_corrected(self.totals[-1:], self.flushes)[0]  # the median so far

    def settle(self, seconds: Sequence[float]) -> tuple[float, ...]:
        """The last `len(seconds)` samples, each minus the median flush-only time of those rounds."""
        if not seconds:
            return ()
        return flush_corrected(self.totals[-len(seconds) :], self.flushes[-len(seconds) :])


def flush_corrected(totals: Sequence[float], flushes: Sequence[float]) -> tuple[float, ...]:
    """`totals` minus the median of `flushes` (none: as they are), clipped at 0."""
    flush = statistics.median(flushes) if flushes else 0.0
    return tuple(max(total - flush, 0.0) for total in totals)


def sampler_for(prepared: PreparedCall, info: DeviceInfo, timing: Timing) -> Sampler:
    """The sampler that times `prepared` on this device with these settings."""
    flush = cache_flusher(info) if timing.l2 == "cold" else None
    if not info.is_gpu:
        return host_sampler(prepared.run, flush)
    if prepared.graphed:
        unroll = min(timing.graph_unroll, info.graph_unroll_cap)
        return GraphSampler(prepared.body, flush, torch.device(info.device), unroll)
    return EventSampler(prepared.run, flush)


def host_sampler(call: Call, flush: Callable[[], None] | None) -> Sampler:
    """A CPU's sampler: the calling thread's CPU time where torch runs ops in that thread alone (intra-op
    threads 1, perfsuite's default: `ThreadTimeSampler`), else the wall clock (a pool of threads does
    the work, and their CPU time summed is not the call's latency)."""
    return (ThreadTimeSampler if torch.get_num_threads() == 1 else Sampler)(call, flush)


MIN_ROUNDS = 5
"""Rounds taken whatever `max_seconds` says (unless `reps` is lower): with 5 samples a side, a rank test
(`perfsuite compare`) can tell two runs apart at p < 0.01; with 4 it never can."""

Agree = Callable[[list[float]], list[float]]
"""Turns one round's figures (each sampler's sample, then the elapsed time) into the figures every
process of a group shares (tensor parallel: the max over ranks)."""


def measure_in_turn(
    samplers: Sequence[Sampler], timing: Timing, agree: Agree | None = None, budgeted: int | None = None
) -> list[Samples]:
    """The sampling loop: warm up, then sample the samplers in turn until `reps` rounds, or once there are
    `MIN_ROUNDS`, until `max_seconds` per sampler has passed, so samplers compared with each other are sampled
    in the same seconds of machine time. Each round starts one sampler later (A B C, B C A, C A B): no
    sampler always follows the same one. With `agree`, every rank stops after the same round on the same
    figures. `budgeted`: how many samplers the time budget counts (default all; an in-turn reference
    shares the cases' budget instead of adding its own)."""
    for _ in range(timing.warmup):
        for sampler in samplers:
            sampler.sample()
    rounds: list[list[float]] = []
    start = time.perf_counter()
    n = len(samplers)
    budget = timing.max_seconds * (n if budgeted is None else max(1, min(budgeted, n)))
    while True:
        figures = [math.nan] * n
        for i in range(n):
            at = (len(rounds) + i) % n
            if len(rounds) % getattr(samplers[at], "every", 1) == 0:  # a rank's sampler is duck-typed
                figures[at] = samplers[at].sample()
        elapsed = time.perf_counter() - start
        if agree is not None:
            *figures, elapsed = agree([*figures, elapsed])
        rounds.append(figures)
        enough = len(rounds) >= min(MIN_ROUNDS, timing.reps)
        if len(rounds) >= timing.reps or (enough and elapsed >= budget):
            return [Samples(settled(s, [r[i] for r in rounds]), s.method) for i, s in enumerate(samplers)]


def settled(sampler: Sampler, seconds: Sequence[float]) -> tuple[float, ...]:
    """The sampler's final figures of these rounds (a duck-typed sampler without `settle`, e.g. a
    tensor-parallel rank's: as sampled); the rounds it sat out (NaN) stay NaN."""
    taken = [s for s in seconds if not math.isnan(s)]
    settle = getattr(sampler, "settle", None)
    final = iter(settle(taken) if settle is not None else taken)
    return tuple(math.nan if math.isnan(s) else next(final) for s in seconds)


def measure(sampler: Sampler, timing: Timing) -> Samples:
    """`measure_in_turn` of one sampler."""
    return measure_in_turn([sampler], timing)[0]


def measure_each(
    samplers: Sequence[Sampler], timing: Timing, budgeted: int | None = None
) -> list[Samples | BaseException]:
    """`measure_in_turn` (its `budgeted`), or where a sampler raises, each sampler alone: the ones that
    work get their samples (not paired), the broken ones their exception."""
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
    """A pytest-benchmark timer that advances by one sampler's measured time per call of `advance`.

    pytest-benchmark reads a host clock around its target; with `@pytest.mark.benchmark(timer=CLOCK)`
    and `benchmark.pedantic(CLOCK.advance, ...)` the durations it records are the sampler's (device
    events or graph replay on a GPU), so its statistics and `--benchmark-compare-fail` use device time.
    """

    __name__ = "perfsuite.measure.timing.SampleClock"

    def __init__(self) -> None:
        self.now = 0.0
        self.sampler: Sampler | None = None
        self.seconds: list[float] = []

    def __call__(self) -> float:
        return self.now

    def use(self, sampler: Sampler) -> None:
        self.sampler, self.seconds = sampler, []

    def advance(self) -> None:
        assert self.sampler is not None, "SampleClock.use(sampler) first"
        elapsed = self.sampler.sample()
        self.seconds.append(elapsed)
        self.now += elapsed

    def samples(self, skip: int = 0) -> Samples:
        """The recorded samples after the first `skip` (pytest-benchmark's warm-up rounds): the durations
        pytest-benchmark saw (graph: each minus the median flush-only time up to its round, never settled
        afterwards, so pytest-benchmark's statistics and the row's agree)."""
        assert self.sampler is not None
        return Samples(tuple(self.seconds[skip:]), self.sampler.method)
