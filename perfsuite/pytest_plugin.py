"""pytest plugin (entry point `pytest11`): an engine's CI runs perfsuite's conformance battery on its own
selector (`pytest --perfsuite-selector SPEC`: one test item per battery row; `battery_test`; the
`perfsuite_check` fixture) and times the selector with pytest-benchmark (the `perfsuite_benchmark`
fixture); docs/selectors.md shows each. It does nothing until asked, and imports torch only when it is."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

SELECTOR_OPTION = "--perfsuite-selector"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfsuite", "perfsuite conformance battery")
    group.addoption(
        SELECTOR_OPTION, action="append", default=[], metavar="SPEC",
        help="run the conformance battery on this selector (package.module:function, an entry point or a "
        "built-in variant): one test per case, dtype and k (repeat for several)",
    )  # fmt: skip
    group.addoption("--perfsuite-quick", action="store_true", help="the battery's quick subset")
    group.addoption("--perfsuite-device", default="auto", help="device for the battery (default: auto)")
    group.addoption(
        "--perfsuite-case", action="append", default=[], metavar="GLOB", help="only these battery cases"
    )


class BatteryFailure(AssertionError):
    """A selector failed battery rows; the message lists them."""


def check(spec: str, device: str = "auto", **options: Any) -> Any:
    """The battery's table for `spec` (`conformance.rows`' options: cases, dtypes, quick)."""
    from perfsuite.correctness import conformance
    from perfsuite.measure.device import resolve_device

    return conformance.run(spec, resolve_device(device), **options)


def row_id(row: dict) -> str:
    """`case-dtype-kK` (`case-dtype` for a row about every case, such as a dtype not claimed)."""
    from perfsuite.correctness.conformance.battery import ALL_CASES

    return f"{row['case']}-{row['dtype']}" + ("" if row["case"] == ALL_CASES else f"-k{int(row['k'])}")


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
    """One selector's battery, `perfsuite-check[SPEC]`: the parent of its items."""

    def collect(self) -> Iterable[BatteryItem]:
        return []  # made by `pytest_collection_modifyitems`, which judges the rows once


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    specs = config.getoption(SELECTOR_OPTION)
    if not specs:
        return  # not asked: nothing imported (torch included)
    from perfsuite import variants
    from perfsuite.correctness import conformance

    cases = config.getoption("--perfsuite-case") or None
    options = {"cases": cases, "quick": config.getoption("--perfsuite-quick")}
    for spec in specs:
        try:
            variants.get(spec)
            conformance.select(cases)
        except (KeyError, ValueError) as exc:  # ExternalSelectorError is a ValueError
            raise pytest.UsageError(f"{SELECTOR_OPTION} {spec}: {exc.args[0]}") from None
        parent = BatteryCollector.from_parent(session, name=f"perfsuite-check[{spec}]")
        for row in check(spec, config.getoption("--perfsuite-device"), **options).to_dict("records"):
            items.append(BatteryItem.from_parent(parent, name=row_id(row), row=row))


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
        bad = table[table["verdict"] == "FAIL"]
        if len(bad):
            lines = [f"  {r.selector} {r.case} {r.dtype} k={r.k}: {r.detail}" for r in bad.itertuples()]
            raise BatteryFailure("\n".join([f"{len(bad)} of {len(table)} battery rows failed:", *lines]))
        return table

    return run


@pytest.fixture
def perfsuite_benchmark(benchmark: Any) -> Callable[..., Any]:
    """`perfsuite_benchmark(spec, batch=, vocab=, k=, dtype="bfloat16", device="auto", logits="gaussian")`:
    time one call of the selector with pytest-benchmark (the device synchronised inside each timed call),
    after one checked call; returns the selector's last outputs."""

    def run(
        spec: str, *, batch: int, vocab: int, k: int, dtype: str = "bfloat16", device: str = "auto",
        logits: str = "gaussian",
    ) -> Any:  # fmt: skip
        from perfsuite import variants
        from perfsuite.core import dtypes
        from perfsuite.measure.device import resolve_device, synchronize
        from perfsuite.scenario import inputs

        where = resolve_device(device)
        variant = variants.get(spec)
        x = inputs.make_logits(logits, batch, vocab, dtypes.dtype_of(dtype), seed=0, device=where)
        variant(x, k)  # compiles, allocates preallocated outputs; a wrong return raises here

        def call() -> Any:
            out = variant(x, k)
            synchronize(where)
            return out

        benchmark.extra_info.update(
            variant=spec, batch=batch, vocab=vocab, topk=k, dtype=dtype, device=str(where)
        )
        return benchmark(call)

    return run
