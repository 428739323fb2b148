"""One way to run a case, whatever its kind (a kernel call, a tensor-parallel call, a draft cycle).

A `CaseRunner` names the columns that identify a case, says why the case cannot run here (decided before
anything is allocated) and measures it: prepares the call, checks its parity, times it, and returns the
row's figures. `run_case` is the one failure shell around them: the row of a skipped, measured or broken
case (out of memory is a skip, anything else an error), stamped; a broken case never stops a sweep.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from perfsuite.rows import failure, stamp

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
    return {**row, **stamp()}
