"""pytest plugin: an engine repository runs perfsuite's conformance battery on its own selector in its CI,
and times the selector through pytest-benchmark. Installed with perfsuite (entry point `pytest11`); it
does nothing until asked, and imports torch only when it is.

From the command line, one test item per battery row (case, dtype, k):

    pytest --perfsuite-selector my_engine.sampling:greedy [--perfsuite-quick] [--perfsuite-device cuda]

In a test file, the same items as a parametrized test, or the whole table at once:

    from perfsuite.pytest_plugin import battery_test
    test_greedy_conforms = battery_test("my_engine.sampling:greedy", quick=True)

    def test_greedy(perfsuite_check):
        perfsuite_check("my_engine.sampling:greedy", cases=["vocab_*"])  # fails listing the FAIL rows

and the selector timed on one shape with pytest-benchmark's `benchmark` fixture:

    def test_greedy_speed(perfsuite_benchmark):
        perfsuite_benchmark("my_engine.sampling:greedy", batch=64, vocab=151936, k=1, dtype="bfloat16")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

SELECTOR_OPTION = "--perfsuite-selector"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfsuite", "perfsuite conformance battery")
    group.addoption(
        SELECTOR_OPTION,
        action="append",
        default=[],
        metavar="SPEC",
        help="run the conformance battery on this selector (package.module:function, an entry point or a "
        "built-in variant): one test per case, dtype and k (repeat for several)",
    )
    group.addoption("--perfsuite-quick", action="store_true", help="the battery's quick subset")
    group.addoption("--perfsuite-device", default="auto", help="device for the battery (default: auto)")
    group.addoption(
        "--perfsuite-case", action="append", default=[], metavar="GLOB", help="only these battery cases"
    )


def _device(spec: str):
    from perfsuite.measure.device import resolve_device

    return resolve_device(spec)


class BatteryFailure(AssertionError):
    """A selector failed battery rows; the message lists them."""


def failures_text(table: Any) -> str:
    """The FAIL rows of a battery table, one line each."""
    bad = table[table["verdict"] == "FAIL"]
    lines = [f"{len(bad)} of {len(table)} battery rows failed:"]
    for r in bad.itertuples():
        lines.append(f"  {r.selector} {r.case} {r.dtype} k={r.k}: {r.detail}")
    return "\n".join(lines)


def assert_conforms(table: Any) -> None:
    """Raise `BatteryFailure` listing the failing rows of a battery table (skips are fine)."""
    if (table["verdict"] == "FAIL").any():
        raise BatteryFailure(failures_text(table))


def check(spec: str, device: str = "auto", **options: Any) -> Any:
    """The battery's table for `spec` (`conformance.rows`' options: cases, dtypes, quick)."""
    from perfsuite.correctness import conformance

    return conformance.frame(conformance.rows(spec, _device(device), **options))


# ---------------------------------------------------------------- items from the command line


def row_id(row: dict) -> str:
    """`case-dtype-kK` (`case-dtype` for a row about every case, such as a dtype not claimed)."""
    import pandas as pd

    k = "" if pd.isna(row["k"]) else f"-k{int(row['k'])}"
    return f"{row['case']}-{row['dtype']}{k}"


def expect_pass(row: dict) -> None:
    """Pass on a passing row, skip with its reason, or raise `BatteryFailure` with what went wrong."""
    if row["verdict"] == "skip":
        pytest.skip(row["detail"])
    if row["verdict"] == "FAIL":
        raise BatteryFailure(f"{row['case']} ({row['description']}): {row['detail']}")


class BatteryItem(pytest.Item):
    """One battery row: passes, fails with the finding, or skips with the reason."""

    def __init__(self, *, row: dict, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.row = row

    def runtest(self) -> None:
        expect_pass(self.row)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> str:
        if isinstance(excinfo.value, BatteryFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int, str]:
        return "perfsuite-check", 0, self.name


class BatteryCollector(pytest.Collector):
    """The battery of one selector: it runs when collected (the rows are judged once) and yields an item
    per row, named `case-dtype-k`."""

    def __init__(self, *, spec: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec

    def collect(self) -> Iterable[BatteryItem]:
        from perfsuite.correctness import conformance

        config = self.config
        rows = conformance.rows(
            self.spec,
            _device(config.getoption("--perfsuite-device")),
            cases=config.getoption("--perfsuite-case") or None,
            quick=config.getoption("--perfsuite-quick"),
        )
        for row in rows:
            yield BatteryItem.from_parent(self, name=row_id(row), row=row)


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    specs = config.getoption(SELECTOR_OPTION)
    if not specs:
        return
    from perfsuite import variants
    from perfsuite.correctness import conformance

    for spec in specs:
        try:
            variants.get(spec)
            conformance.select(config.getoption("--perfsuite-case") or None)
        except (KeyError, ValueError) as exc:  # ExternalSelectorError is a ValueError
            raise pytest.UsageError(f"{SELECTOR_OPTION} {spec}: {exc.args[0]}") from None
        collector = BatteryCollector.from_parent(session, name=f"perfsuite-check[{spec}]", spec=spec)
        items.extend(collector.collect())


# ---------------------------------------------------------------- in test files


def battery_test(spec: str, device: str = "auto", **options: Any) -> Callable[..., None]:
    """A test function parametrized by the battery's rows for `spec` (run when the test module is
    collected): assign it to a `test_` name in a test module."""
    rows = check(spec, device, **options).to_dict("records")

    @pytest.mark.parametrize("row", rows, ids=[row_id(r) for r in rows])
    def test_battery_row(row: dict) -> None:
        expect_pass(row)

    return test_battery_row


@pytest.fixture
def perfsuite_check() -> Callable[..., Any]:
    """`perfsuite_check(spec, device="auto", cases=..., dtypes=..., quick=...)`: run the battery, fail the
    test listing the failing rows, return the table."""

    def run(spec: str, device: str = "auto", **options: Any) -> Any:
        table = check(spec, device, **options)
        assert_conforms(table)
        return table

    return run


@pytest.fixture
def perfsuite_benchmark(benchmark: Any) -> Callable[..., Any]:
    """`perfsuite_benchmark(spec, batch=, vocab=, k=, dtype="bfloat16", device="auto", logits="gaussian")`:
    time one call of the selector with pytest-benchmark (the device synchronised inside each timed call),
    after one checked call; returns the selector's last outputs."""

    def run(
        spec: str,
        *,
        batch: int,
        vocab: int,
        k: int,
        dtype: str = "bfloat16",
        device: str = "auto",
        logits: str = "gaussian",
    ) -> Any:
        from perfsuite import variants
        from perfsuite.core import dtypes
        from perfsuite.measure.device import synchronize
        from perfsuite.scenario import inputs

        where = _device(device)
        variant = variants.get(spec)
        x = inputs.make_logits(logits, batch, vocab, dtypes.dtype_of(dtype), seed=0, device=where)
        variant(x, k)  # compiles, allocates preallocated outputs; a wrong return raises here

        def call() -> Any:
            out = variant(x, k)
            synchronize(where)
            return out

        benchmark.extra_info.update(
            selector=spec, batch=batch, vocab=vocab, k=k, dtype=dtype, device=str(where)
        )
        return benchmark(call)

    return run
