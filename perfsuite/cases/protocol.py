"""One way to run a case, whatever its kind (a kernel call, a tensor-parallel call, a draft cycle).

A `CaseRunner` names the columns that identify a case, says why the case cannot run here (decided before
anything is allocated) and measures it: prepares the call, checks its parity, times it, and returns the
row's figures. `run_case` is the one failure shell around them: the row of a skipped, measured or broken
case (out of memory is a skip, anything else an error), stamped; a broken case never stops a sweep.

A `PairedRunner` prepares cases without timing them, so `run_in_turn` can sample the cases of one shape
in turn and give each its speedup as a ratio of samples taken in the same seconds (`timing.paired_ratio`).
A group may bring a `InTurnReference` (kernel cases: an exp of the case's logits, and a copy of them for the
in-turn copy rate), more samplers in the turn: each row gets their figures and the row's time over the
first, round by round, so `perfsuite compare` can judge every variant, the baseline included, against a
workload sampled in the same seconds.
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
        reason = runner.skip_reason(case)
        if reason:
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


SAMPLES = "sample_seconds"
"""The row key that carries a measured case's raw samples (seconds) to the run's samples log."""
REF_SAMPLES = "ref_sample_seconds"
"""The row key that carries the in-turn reference's raw samples (seconds, the same rounds as `SAMPLES`):
the first of its workloads, the one rows are judged against."""


@dataclass
class InTurnReference:
    """Fixed workloads sampled in turn with the cases of a group: their samplers (the first is the one a
    row is judged against), and the columns they give a row from (each workload's samples, the row's
    samples, the row's figures so far)."""

    samplers: tuple[timing.Sampler, ...]
    figures: Callable[[Sequence[timing.Samples], timing.Samples, dict[str, object]], dict[str, object]]


def run_in_turn(
    runner: PairedRunner[CaseT],
    cases: Sequence[CaseT],
    settings: Timing,
    baseline: int | None = None,
    reference: Callable[[], InTurnReference | None] | None = None,
) -> list[dict[str, object]]:
    """The rows of cases of one shape, sampled in turn (`timing.measure_in_turn`); `baseline`: the index
    of the case the others' speedups are paired against; `reference`: makes the group's `InTurnReference`
    once its cases are prepared (None, or raising: the group goes without). The reference shares the
    group's time budget (`measure_each`'s `budgeted`). A case that cannot run or breaks gets its row; if
    one breaks while sampled, the others are timed alone (their speedups then come from medians, and no
    row gets the reference)."""
    rows = [runner.identify(case) for case in cases]
    ready: dict[int, ReadyCase] = {}
    ref: InTurnReference | None = None
    since = machine.snapshot()
    try:
        for i, case in enumerate(cases):
            try:
                reason = runner.skip_reason(case)
                if reason:
                    rows[i].update(status="skipped", reason=reason)
                else:
                    ready[i] = runner.prepare_timed(case)
            except Exception as exc:  # one broken case must not stop the others
                rows[i].update(failure(exc))
        ref = _reference(reference) if ready else None
        guards = [_Guarded(s) for s in ref.samplers] if ref else []
        samplers = [t.sampler for t in ready.values()] + guards
        measured = timing.measure_each(samplers, settings, budgeted=len(ready)) if ready else []
        paired = all(isinstance(m, timing.Samples) for m in measured)  # all in turn (reference too)
        ref_samples = measured[len(ready) :]
        measured = measured[: len(ready)]
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


def _reference(make: Callable[[], InTurnReference | None] | None) -> InTurnReference | None:
    """The group's reference, or None where there is none or it cannot be made (out of memory, ...)."""
    if make is None:
        return None
    try:
        return make()
    except Exception:  # a group without its reference is still measured (compare: today's rule)
        return None


class _Guarded(timing.Sampler):
    """The reference's sampler, never raising: a reference that breaks gives NaN from then on (`broken`),
    so the variants stay sampled in turn and only the reference's figures are lost."""

    def __init__(self, inner: timing.Sampler):
        self.inner, self.broken, self.method = inner, False, inner.method
        self.every = getattr(inner, "every", 1)

    def sample(self) -> float:
        if not self.broken:
            try:
                return self.inner.sample()
            except Exception:
                self.broken = True
        return math.nan

    def settle(self, seconds: Sequence[float]) -> tuple[float, ...]:
        return tuple(seconds) if self.broken else timing.settled(self.inner, seconds)
