"""pytest-benchmark front end: one benchmark per case of a scenario file (`--scenario`, default quick)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from perfsuite.device import detect
from perfsuite.environment import environment
from perfsuite.kernel_case import KernelCaseRunner
from perfsuite.scenario import ScenarioError, expand, load

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quick.toml"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--scenario", default=str(DEFAULT_SCENARIO), help="scenario file to benchmark")
    parser.addoption("--scenario-device", default=None, help="override the scenario's device")


def _scenario(config: pytest.Config):
    try:
        scenario = load(config.getoption("--scenario"))
    except ScenarioError as exc:
        raise pytest.UsageError(str(exc)) from None
    device = config.getoption("--scenario-device")
    return dataclasses.replace(scenario, device=device) if device else scenario


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = expand(_scenario(metafunc.config))
        metafunc.parametrize("case", cases, ids=[c.case_id for c in cases])


@pytest.fixture(scope="session")
def case_runner(pytestconfig: pytest.Config) -> KernelCaseRunner:
    scenario = _scenario(pytestconfig)
    info = detect(scenario.device)
    return KernelCaseRunner(info, environment(info, scenario.name))
