"""The pytest plugin (perfsuite.pytest_plugin, entry point pytest11): an engine's test run checks its
selector with the battery (`--perfsuite-selector`, `battery_test`, `perfsuite_check`) and times it
(`perfsuite_benchmark`); without those it adds nothing to a test run."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfsuite.correctness.conformance  # noqa: F401  here, so pytester's in-process runs do not re-import pandas

pytest_plugins = ["pytester"]

DATA = Path(__file__).parent / "data"
FAST = ["--perfsuite-device", "cpu", "--perfsuite-case", "vocab_7", "--perfsuite-case", "ties_far"]
FAST += ["--perfsuite-quick"]  # the quick batch axis


@pytest.fixture
def engine(pytester: pytest.Pytester) -> pytest.Pytester:
    """A bare project with the test selectors importable, as an engine repository would be."""
    pytester.syspathinsert(DATA)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester


def test_the_plugin_is_installed_and_idle_unless_asked(engine):
    engine.makepyfile(test_plain="def test_nothing():\n    assert True\n")
    result = engine.runpytest_inprocess("-q", "--trace-config")
    result.assert_outcomes(passed=1)
    assert "perfsuite.pytest_plugin" in result.stdout.str()


def test_selector_option_adds_an_item_per_battery_row(engine):
    result = engine.runpytest_inprocess("-v", "-rs", "--perfsuite-selector", "identity", *FAST)
    result.assert_outcomes(passed=12, skipped=2)  # 2 cases x 2 k x 3 dtypes; the two fp8 dtypes not claimed
    result.stdout.fnmatch_lines(["*perfsuite-check?identity?::ties_far-bfloat16-k8 PASSED*"])
    assert "not claimed" in result.stdout.str()


def test_a_broken_selector_fails_with_its_finding(engine):
    spec = "broken_selectors:highest_index_ties"
    result = engine.runpytest_inprocess("-q", "--perfsuite-selector", spec, *FAST, "-k", "ties_far")
    result.assert_outcomes(failed=6, deselected=8)
    result.stdout.fnmatch_lines(
        ["*ties_far (equal maxima at 3 and V-5*): wrong tie: *index 8188, the lowest*"]
    )


def test_a_selector_that_does_not_load_is_a_usage_error(engine):
    result = engine.runpytest_inprocess("--perfsuite-selector", "no_such_engine:topk")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot import no_such_engine" in result.stderr.str()


def test_test_files_use_battery_test_and_the_fixtures(engine):
    engine.makepyfile(
        test_engine="""
        import pytest
        from perfsuite.pytest_plugin import BatteryFailure, battery_test

        test_conforms = battery_test("selectors_for_tests:exact_topk", "cpu", cases=["vocab_100"])

        def test_table(perfsuite_check):
            table = perfsuite_check("selectors_for_tests:exact_topk", "cpu", cases=["ties_far"], quick=True)
            assert set(table["verdict"]) == {"pass", "skip"}

        def test_broken(perfsuite_check):
            with pytest.raises(BatteryFailure, match="wrong probability"):
                perfsuite_check("broken_selectors:ones_claimed_exact", "cpu", cases=["vocab_100"])

        def test_speed(perfsuite_benchmark):
            p, index = perfsuite_benchmark(
                "selectors_for_tests:argmax_indices", batch=2, vocab=1000, k=1, dtype="float32", device="cpu"
            )
            assert index.shape == (2, 1)
        """
    )
    result = engine.runpytest_inprocess("-q", "-rs", "--benchmark-disable")
    result.assert_outcomes(passed=6 + 3, skipped=2)  # 3 dtypes x 2 k, the 3 tests; fp8 is not claimed
    assert "not claimed" in result.stdout.str()


def test_a_benchmark_saved_by_the_fixture_reads_as_a_run(engine, tmp_path, monkeypatch):
    """`perfsuite_benchmark` names its parameters as the column registry does: the saved JSON loads, and
    reports and compares, like any run (`results.run.load_run`)."""
    engine.makepyfile(
        test_speed="""
        def test_speed(perfsuite_benchmark):
            perfsuite_benchmark("selectors_for_tests:argmax_indices", batch=2, vocab=1000, k=1, device="cpu")
        """
    )
    saved = tmp_path / "bench.json"
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark idles under an xdist worker
    result = engine.runpytest_inprocess("-q", f"--benchmark-json={saved}", "--benchmark-max-time=0.01")
    result.assert_outcomes(passed=1)
    from perfsuite.results.run import load_run

    row = load_run([saved]).frame.iloc[0]
    assert row["variant"] == "selectors_for_tests:argmax_indices"
    assert row["topk"] == 1 and row["vocab"] == 1000
    assert row["median_us"] > 0 and row["timing"] == "pytest-benchmark host timer"
