"""pytest-benchmark front end: one benchmark per case of a scenario file (`--scenario`, default quick).

Options: `--scenario FILE`, `--scenario-device auto|cpu|cuda[:N]` and `--scenario-threads N` (torch CPU
threads, overriding the scenario's `[timing] threads`; 0: torch's default). The threads are applied once
per session, before the first case. Each benchmark is parametrized by the case's primitive parameters
(variant, path, dtype, vocab, batch, topk, logits; tp when the scenario has tensor-parallel cases), so
`--benchmark-group-by=param:dtype` or `param:variant` works and the saved JSON's `params` are plain values.
The session's facts (device, threads, CPU, load average at the start, versions) are in the saved JSON's
`machine_info["perfsuite"]`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.core import machine
from perfsuite.core.settings import apply_threads
from perfsuite.measure.device import DeviceInfo, detect
from perfsuite.measure.environment import environment
from perfsuite.results import run_dir
from perfsuite.scenario.load import Case, Scenario, ScenarioError, expand, load

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quick.toml"
PARAMS = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits")
"""The case fields every benchmark is parametrized by (`tp` too when a case has tp > 1)."""
MACHINE_INFO = (
    "device",
    "backend",
    "simulated",
    "runtime",
    "driver",
    "threads",
    "cpu_model",
    "cores",
    "cpu_quota",
    "governor",
    "torch",
    "triton",
)
"""The environment columns copied into pytest-benchmark's machine_info["perfsuite"] (the commit is in the
saved JSON's commit_info)."""
MOMENT = ("load_avg_start",)
"""machine_info["perfsuite"] keys that say how busy the machine was, not what it is: left out when
`--benchmark-compare` checks that the saved run's machine_info is the same as this run's."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--scenario", default=str(DEFAULT_SCENARIO), help="scenario file to benchmark")
    parser.addoption("--scenario-device", default=None, help="override the scenario's device")
    parser.addoption(
        "--scenario-threads",
        type=int,
        default=None,
        help="torch CPU threads, overriding the scenario's [timing] threads (0: torch's default)",
    )


@dataclass
class Session:
    """What every benchmark of one pytest session shares: the scenario (with the command line's
    overrides), its cases, the device, the threads in effect and the rows' environment columns."""

    scenario: Scenario
    cases: list[Case]
    info: DeviceInfo
    threads: int
    load_start: float
    env: dict[str, object]

    @property
    def tensor_parallel(self) -> bool:
        return any(case.tp > 1 for case in self.cases)


SESSION = pytest.StashKey[Session]()


def _scenario(config: pytest.Config) -> Scenario:
    try:
        scenario = load(config.getoption("--scenario"))
    except ScenarioError as exc:
        raise pytest.UsageError(str(exc)) from None
    device = config.getoption("--scenario-device")
    if device:
        scenario = dataclasses.replace(scenario, device=device)
    count = config.getoption("--scenario-threads")
    if count is not None:
        if count < 0:
            raise pytest.UsageError(f"--scenario-threads: expected 0 (torch's default) or more, got {count}")
        scenario = dataclasses.replace(scenario, timing=dataclasses.replace(scenario.timing, threads=count))
    return scenario


def session_of(config: pytest.Config) -> Session:
    """The session's shared state, made on first use (collection, or pytest-benchmark loading a run to
    compare with): the threads are applied here, once, before any case runs."""
    if SESSION not in config.stash:
        scenario = _scenario(config)
        in_effect = apply_threads(scenario.timing.threads)
        load_start = machine.load_average()
        info = detect(scenario.device)
        label = f"pytest-benchmark {run_dir.new_label(info.name)}"
        key = run_dir.fingerprint(run_dir.settings_of(scenario, info.name))
        env = environment(info, scenario.name, run=label, settings=key)
        config.stash[SESSION] = Session(scenario, expand(scenario), info, in_effect, load_start, env)
    return config.stash[SESSION]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    session = session_of(metafunc.config)
    names = [*PARAMS, "tp"] if session.tensor_parallel else list(PARAMS)
    metafunc.parametrize(
        names,
        [tuple(getattr(case, name) for name in names) for case in session.cases],
        ids=[case.case_id for case in session.cases],
    )


@pytest.fixture
def tp() -> int:
    """A case's tensor-parallel ranks when the scenario has no tensor-parallel case (not a parameter)."""
    return 1


@pytest.fixture
def case(
    pytestconfig: pytest.Config,
    variant: str,
    path: str,
    dtype: str,
    vocab: int,
    batch: int,
    topk: int,
    logits: str,
    tp: int,
) -> Case:
    """The scenario's case with these parameters."""
    scenario = session_of(pytestconfig).scenario
    return Case(
        scenario.name,
        variant,
        path,
        dtype,
        vocab,
        batch,
        topk,
        logits,
        timing=scenario.timing,
        inputs=scenario.inputs,
        tp=tp,
    )


@pytest.fixture(scope="session")
def case_runner(pytestconfig: pytest.Config) -> KernelRunner:
    session = session_of(pytestconfig)
    return KernelRunner(session.info, session.env)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, object]) -> None:
    """The session's device, threads, CPU, load average at its start and versions, as
    machine_info["perfsuite"]: pytest-benchmark saves it with the run and compares it on
    --benchmark-compare."""
    session = session_of(config)
    entry = {name: session.env[name] for name in MACHINE_INFO}
    entry.update(
        scenario=session.scenario.name,
        settings=session.env["settings"],
        threads=session.threads,
        load_avg_start=session.load_start,
    )
    machine_info["perfsuite"] = {key: _json_value(value) for key, value in entry.items()}


def _json_value(value: object) -> object:
    """NaN (unknown, or no limit) as null: machine_info is compared as JSON between runs."""
    return None if isinstance(value, float) and math.isnan(value) else value


@pytest.hookimpl(wrapper=True)
def pytest_benchmark_compare_machine_info(
    config: pytest.Config,
    benchmarksession: object,
    machine_info: dict[str, object],
    compared_benchmark: dict[str, object],
) -> object:
    """pytest-benchmark warns when the saved run's machine_info differs from this run's: compare them
    without the keys of `MOMENT` (a load average differs every run), restored afterwards."""
    saved = compared_benchmark.get("machine_info")
    entries = [info.get("perfsuite") for info in (machine_info, saved) if isinstance(info, dict)]
    put_back = [
        (entry, key, entry.pop(key))
        for entry in entries
        if isinstance(entry, dict)
        for key in MOMENT
        if key in entry
    ]
    try:
        return (yield)
    finally:
        for entry, key, value in put_back:
            entry[key] = value
