"""One way to run a case, whatever its kind (a kernel call, a tensor-parallel call, a draft cycle).

A `CaseRunner` identifies a case, says why it cannot run here (before anything is allocated) and measures
it. `run_case` is the one failure shell around them: out of memory is a skip, anything else an error row;
a broken case never stops a sweep. A `PairedRunner` prepares cases untimed, so `run_in_turn` can sample
the cases of one shape in turn: each speedup is a ratio of samples taken in the same seconds, and an
`InTurnReference` sampled with them lets `perfsuite compare` judge every variant against a workload
sampled in the same seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from perfsuite.core import machine
from perfsuite.core.settings import Timing
from perfsuite.measure import timing
from perfsuite.results.rows import failure, stamp

CaseT = TypeVar("CaseT", contravariant=True)


class CaseRunner(Protocol[CaseT]):
    """What every case kind's runner provides."""

    def identify(self, case: CaseT) -> dict[str, object]:
        """The columns that say which case a row is (and where it ran)."""
        ...

    def skip_reason(self, case: CaseT) -> str | None:
        """Why `case` cannot run here, or None."""
        ...

    def measure(self, case: CaseT) -> dict[str, object]:
        """Prepare, check and time `case`: its figures, status "ok". Raises when the case breaks."""
        ...

    def release(self) -> None:
        """After each case: give back what the case held (a GPU's cached memory)."""
        ...


def run_case(runner: CaseRunner[CaseT], case: CaseT) -> dict[str, object]:
    """The row of one case: skipped with its reason, measured, or the error it raised."""
    row = runner.identify(case)
    since = machine.snapshot()
    try:
        if reason := runner.skip_reason(case):
            row.update(status="skipped", reason=reason)
        else:
            row.update(runner.measure(case))
    except Exception as exc:  # one broken case must not stop the sweep
        row.update(failure(exc))
    finally:
        runner.release()
    return {**row, **stamp(since)}


@dataclass
class ReadyCase:
    """A prepared case: the sampler that times it and how its samples become the row's figures."""

    sampler: timing.Sampler
    figures: Callable[[timing.Samples], dict[str, object]]


class PairedRunner(CaseRunner[CaseT], Protocol):
    """A case runner whose cases can be prepared now and timed later, in turn with others."""

    def prepare_timed(self, case: CaseT) -> ReadyCase:
        """Prepare and check `case` (its parity and memory figures in `ReadyCase.figures`), untimed."""
        ...


SAMPLES = "sample_seconds"  # the row key carrying a measured case's raw samples (s) to the samples log
REF_SAMPLES = "ref_sample_seconds"  # the same for the in-turn reference's first workload, same rounds


@dataclass
class InTurnReference:
    """Fixed workloads sampled in turn with a group's cases (the first sampler is what rows are judged
    against), and the columns they give a row from (their samples, the row's samples, its figures)."""

    samplers: tuple[timing.Sampler, ...]
    figures: Callable[[Sequence[timing.Samples], timing.Samples, dict[str, object]], dict[str, object]]


def run_in_turn(
    runner: PairedRunner[CaseT],
    cases: Sequence[CaseT],
    settings: Timing,
    baseline: int | None = None,
    reference: Callable[[], InTurnReference | None] | None = None,
) -> list[dict[str, object]]:
    """The rows of cases of one shape, sampled in turn; `baseline`: the index of the case the speedups
    are paired against; `reference`: makes the group's `InTurnReference` once its cases are prepared
    (None, or raising: the group goes without), sharing the group's time budget. If a case breaks while
    sampled, the others are timed alone (speedups from medians, no reference figures)."""
    rows = [runner.identify(case) for case in cases]
    ready: dict[int, ReadyCase] = {}
    ref: InTurnReference | None = None
    since = machine.snapshot()
    try:
        for i, case in enumerate(cases):
            try:
                if reason := runner.skip_reason(case):
                    rows[i].update(status="skipped", reason=reason)
                else:
                    ready[i] = runner.prepare_timed(case)
            except Exception as exc:  # one broken case must not stop the others
                rows[i].update(failure(exc))
        try:  # a group without its reference is still measured (out of memory, ...)
            ref = reference() if reference and ready else None
        except Exception:
            ref = None
        guards = [_Guarded(s) for s in ref.samplers] if ref else []
        samplers = [t.sampler for t in ready.values()] + guards
        measured = timing.measure_each(samplers, settings, budgeted=len(ready)) if ready else []
        paired = all(isinstance(m, timing.Samples) for m in measured)  # all in turn (reference too)
        measured, ref_samples = measured[: len(ready)], measured[len(ready) :]
        samples: dict[int, timing.Samples] = {}
        for i, outcome in zip(ready, measured, strict=True):
            if isinstance(outcome, BaseException):
                rows[i].update(failure(outcome))
                continue
            try:
                rows[i].update(ready[i].figures(outcome), status="ok", reason="")
            except Exception as exc:
                rows[i].update(failure(exc))
                continue
            samples[i] = outcome
            rows[i][SAMPLES] = list(outcome.seconds)
        if baseline in samples and paired:
            for i, own in samples.items():
                ratio = timing.paired_ratio(samples[baseline], own)
                rows[i].update(
                    speedup_vs_full=ratio.median,
                    speedup_p20=ratio.p20,
                    speedup_p80=ratio.p80,
                    speedup_method="paired",
                )
        if ref is not None and paired and not any(g.broken for g in guards):  # paired: all Samples
            for i, own in samples.items():
                try:
                    rows[i].update(ref.figures(ref_samples, own, rows[i]))
                except Exception:  # the reference's figures never break a measured row
                    continue
                rows[i][REF_SAMPLES] = list(ref_samples[0].seconds)
    finally:
        ready.clear()
        ref = None
        runner.release()
    finished = stamp(since)
    return [{**row, **finished} for row in rows]


class _Guarded(timing.Sampler):
    """The reference's sampler, never raising: a reference that breaks gives NaN from then on (`broken`),
    so the variants stay sampled in turn and only the reference's figures are lost."""

    def __init__(self, inner: timing.Sampler):
        self.inner, self.broken, self.method = inner, False, inner.method
        self.every = inner.every

    def sample(self) -> float:
        if not self.broken:
            try:
                return self.inner.sample()
            except Exception:
                self.broken = True
        return math.nan

    def settle(self, seconds: Sequence[float]) -> tuple[float, ...]:
        return tuple(seconds) if self.broken else self.inner.settle(seconds)  # NaN-free: `timing.settled`
