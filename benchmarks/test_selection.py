"""Each case of the scenario as a pytest-benchmark test, timed by the suite's own samplers.

    pytest benchmarks --scenario scenarios/quick.toml --benchmark-json reports/bench.json
    pytest benchmarks --benchmark-compare --benchmark-compare-fail=median:5%
    perfsuite report reports/bench.json

The recorded durations are device time (events or graph replay) on a GPU, host time on a CPU. Every
result column (bytes, bandwidth, parity) lands in the benchmark's `extra_info`.
"""

from __future__ import annotations

import pytest

from perfsuite import timing
from perfsuite.kernel_case import KernelCaseRunner
from perfsuite.rows import case_row
from perfsuite.scenario import Case

CLOCK = timing.SampleClock()


@pytest.mark.benchmark(timer=CLOCK)
def test_selection(benchmark, case: Case, case_runner: KernelCaseRunner) -> None:
    reason = case_runner.skip_reason(case)
    if reason:
        pytest.skip(reason)
    prepared, check, peak_temp = case_runner.prepare(case)
    CLOCK.use(timing.sampler_for(prepared, case_runner.info, case.timing))
    benchmark.group = f"{case.path} {case.dtype} V={case.vocab} B={case.batch} k={case.topk} {case.logits}"
    benchmark.pedantic(CLOCK.advance, rounds=case.timing.reps, warmup_rounds=case.timing.warmup)
    figures = case_runner.figures(case, CLOCK.samples(skip=case.timing.warmup), peak_temp)
    row = {**case_row(case, case_runner.env), **check.as_row(), **figures, "status": "ok", "reason": ""}
    benchmark.extra_info.update(row)
    if row["accuracy"] == "exact":
        assert check.verdict in ("pass", "n/a"), f"{case.case_id}: {check.problem}"
