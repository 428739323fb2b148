"""Each case of the scenario as a pytest-benchmark test, timed by the suite's own samplers.

Save a run, change the code, run again compared with it (exit 1 when a median got 5 % slower), then read
both saved files with perfsuite (on a fresh checkout they are `.benchmarks/<machine>/0001_base.json` and
`0002_new.json`):

    pytest benchmarks --scenario scenarios/quick.toml --benchmark-save=base
    pytest benchmarks --scenario scenarios/quick.toml --benchmark-save=new \\
        --benchmark-compare --benchmark-compare-fail=median:5%
    perfsuite compare .benchmarks/*/*_base.json .benchmarks/*/*_new.json
    perfsuite report .benchmarks/*/*_base.json .benchmarks/*/*_new.json --out reports/bench.html

`--benchmark-compare` alone compares with the latest saved run (`--benchmark-compare=0001`: that one;
name the files to `perfsuite compare` once a name was saved twice); `--benchmark-autosave` saves under a
counter and the commit instead of a name; `--benchmark-json FILE` writes one file anywhere, which
`perfsuite report` and `compare` read too. Keep `--benchmark-storage` under the working directory:
pytest-benchmark 5.x crashes comparing with a storage outside it when the two runs' machine_info differ
(its issue 217; the load average is left out of that check, the threads and device are not).
`--benchmark-group-by=param:dtype` (or `param:variant`, `param:path`, ...) groups the table by a case
parameter; `--scenario-threads N` overrides the scenario's `[timing] threads`.

The recorded durations are device time (events or graph replay) on a GPU, host time on a CPU. Every
result column (bytes, bandwidth, parity, threads, run and settings, how busy the machine was) lands in the
benchmark's `extra_info`; the session's device, threads, CPU and versions in `machine_info["perfsuite"]`.
Triton variants are not timed on a CPU (Triton's interpreter): those cases are skipped, with the reason.
"""

from __future__ import annotations

import pytest

from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.core import machine
from perfsuite.measure import timing
from perfsuite.results.rows import case_row, stamp
from perfsuite.scenario.load import Case
from perfsuite.variants import tensor_parallel

CLOCK = timing.SampleClock()
TENSOR_PARALLEL = "a tensor-parallel case: it runs under torchrun (`perfsuite run`), not here"


@pytest.mark.benchmark(timer=CLOCK)
def test_selection(benchmark, case: Case, case_runner: KernelRunner) -> None:
    if case.tp > 1 or tensor_parallel.is_tp_variant(case.variant):
        pytest.skip(TENSOR_PARALLEL)
    reason = case_runner.skip_reason(case)
    if reason:
        pytest.skip(reason)
    since = machine.snapshot()
    prepared, check, peak_temp = case_runner.prepare(case)
    CLOCK.use(timing.sampler_for(prepared, case_runner.info, case.timing))
    benchmark.group = f"{case.path} {case.dtype} V={case.vocab} B={case.batch} k={case.topk} {case.logits}"
    benchmark.pedantic(CLOCK.advance, rounds=case.timing.reps, warmup_rounds=case.timing.warmup)
    figures = case_runner.figures(case, CLOCK.samples(skip=case.timing.warmup), peak_temp)
    row = {
        **case_row(case, case_runner.env),
        **check.as_row(),
        **figures,
        "status": "ok",
        "reason": "",
        **stamp(since),
    }
    benchmark.extra_info.update(row)
    if row["accuracy"] == "exact":
        assert check.verdict in ("pass", "n/a"), f"{case.case_id}: {check.problem}"
