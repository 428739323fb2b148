"""The summary of a run (`summary.Summary`) and its text views: per-case medians, ratios, who is fastest,
the cost of exactness, the Triton targets; roles from the selectors' declarations."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pandas as pd

from perfsuite import cli, variants
from perfsuite.report import summary, tp_section
from perfsuite.report.kernel_context import Roles, Summary
from perfsuite.results.write import to_frame
from perfsuite.variants import tensor_parallel

ENGINE = "identity_engine_order"
REPORT = Path(__file__).resolve().parents[1] / "perfsuite" / "report"


def rows(batch: int, vocab: int, times: dict[str, float], copy: float = 50.0) -> list[dict[str, object]]:
    accuracy = {"full_softmax": "rounded", "argmax_ones": "inexact"}
    return [
        {
            "device": "GPU",
            "path": "graph",
            "dtype": "bfloat16",
            "vocab": vocab,
            "batch": batch,
            "topk": 1,
            "variant": v,
            "accuracy": accuracy.get(v, "exact"),
            "status": "ok",
            "median_us": t,
            "pct_copy": copy,
            "logits": "gaussian",
        }
        for v, t in times.items()
    ]


def frame() -> pd.DataFrame:
    fast = {"full_softmax": 60.0, "argmax_ones": 10.0, "identity": 40.0, "triton_auto": 11.0}
    slow = {"full_softmax": 60.0, "argmax_ones": 10.0, "identity": 40.0, "triton_auto": 20.0}
    big = {"full_softmax": 600.0, "argmax_ones": 200.0, "identity": 500.0, "triton_auto": 210.0}
    skipped = {"variant": "triton_auto", "status": "skipped", "reason": "no GPU", "device": "GPU"}
    return to_frame([*rows(1, 151936, fast), *rows(1, 163840, slow), *rows(64, 151936, big, 90.0), skipped])


def test_case_table_picks_the_fastest_exact_variant_and_its_ratios():
    table = Summary.of(frame()).cases.reset_index().set_index(["vocab", "batch"])
    row = table.loc[(151936, 1)]
    assert row["best_exact"] == "triton_auto"
    assert abs(row["full/best"] - 60 / 11) < 1e-9 and abs(row["best/argmax"] - 1.1) < 1e-9
    assert row["best_%copy"] == 50.0


def test_a_case_without_an_exact_variant_timed_has_no_best_exact_and_no_error():
    """A sweep stopped mid-group (SIGTERM in CI) left a case with argmax_ones alone: the console table
    printed on the way out raised in pandas' idxmin and turned exit 130 into an internal error."""
    partial = to_frame(
        [*rows(1, 151936, {"full_softmax": 60.0, "argmax_ones": 10.0, "identity": 40.0}),
         *rows(1, 163840, {"argmax_ones": 12.0})]
    )  # fmt: skip
    table = Summary.of(partial).cases.reset_index().set_index("vocab")
    assert table.loc[151936, "best_exact"] == "identity" and table.loc[151936, "fastest"] == "argmax_ones"
    assert pd.isna(table.loc[163840, "best_exact"]) and table.loc[163840, "fastest"] == "argmax_ones"
    assert "163840" in summary.console_table(partial)


def test_triton_targets_count_cases_and_the_worst():
    targets = Summary.of(frame()).targets.set_index("target")
    speed = targets.loc["B=1, V 129280-163840: full_softmax / triton_auto >= 5"]
    assert (speed["cases"], speed["met"], speed["worst"]) == (2, 1, 3.0)
    cost = targets.loc["B=1, V 129280-163840: triton_auto / argmax_ones <= 1.2"]
    assert (cost["cases"], cost["met"], cost["worst"]) == (2, 1, 2.0)
    copy = targets.loc["B>=64: triton_auto bandwidth >= 85 % of measured copy"]
    assert (copy["cases"], copy["met"]) == (1, 1)
    assert targets.loc["every case: identity / triton_auto >= 1"]["met"] == 3


def test_markdown_and_command(tmp_path, capsys):
    path = tmp_path / "results.csv"
    frame().to_csv(path, index=False)
    out = tmp_path / "summary.md"
    assert cli.main(["summary", str(path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| device | path |" in text and "triton_auto" in text and "Triton targets" in text
    assert "3 ok" not in text and "12 ok, 1 skipped" in text
    assert cli.main(["summary", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err


def test_the_tuned_table_beside_the_results_joins_the_summary(tmp_path, capsys):
    from perfsuite.kernels import plan_table

    path = tmp_path / "results.csv"
    frame().to_csv(path, index=False)
    best = plan_table.Tunables("split", 2048, 4, waves=2.0)
    entry = plan_table.TunedShape("bfloat16", 1, 151936, 1, best, median_us=8.0, heuristic_us=10.0)
    table = plan_table.TunedTable("NVIDIA H200", 132, 32, {}, "graph", (entry,))
    (tmp_path / "tuned.json").write_text(table.to_json())
    assert cli.main(["summary", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "## Tuned plans (NVIDIA H200, graph path" in printed
    assert (
        "| bfloat16 | 1 | 151936 | 1 | split, block 2048, 4 warps, 2 waves, prefetch | 8 | 10 | 1.25 |"
        in printed
    )
    (tmp_path / "tuned.json").write_text("{}")
    assert cli.main(["summary", str(path)]) == 2  # a broken table is a one-line error
    assert "perfsuite: " in capsys.readouterr().err


def with_columns(rows_: list[dict[str, object]], **columns: dict[str, object]) -> list[dict[str, object]]:
    """The rows with extra columns set per variant (`columns[name][variant]`)."""
    return [{**r, **{c: v[r["variant"]] for c, v in columns.items() if r["variant"] in v}} for r in rows_]


def full_softmax_wins() -> pd.DataFrame:
    """full_softmax 7x faster than identity, the only exact variant; argmax_ones in between."""
    times = {"full_softmax": 100.0, "argmax_ones": 150.0, "identity": 700.0}
    return to_frame(rows(1, 151936, times) + rows(64, 151936, {k: 10 * v for k, v in times.items()}))


def test_the_fastest_variant_whatever_its_accuracy_beside_the_fastest_exact():
    table = Summary.of(full_softmax_wins()).cases
    assert list(table["fastest"]) == ["full_softmax", "full_softmax"]
    assert list(table["fastest_accuracy"]) == ["rounded", "rounded"]
    assert list(table["best_exact"]) == ["identity", "identity"]
    assert abs(table["full/best"].iloc[0] - 100 / 700) < 1e-9  # ratio of medians: nothing paired


def test_markdown_names_full_softmax_as_fastest_and_identity_only_as_fastest_exact():
    text = summary.summary_markdown(full_softmax_wins())
    assert "- GPU · bfloat16: fastest variant (any accuracy): full_softmax (rounded) in 2 of 2 cases." in text
    assert "Fastest exact variant: identity in 2 of 2 cases, median 0.14× against full_softmax" in text
    assert "slower than full_softmax; it is the fastest variant of any accuracy in 0 of 2 cases." in text
    assert (
        "identity is the fastest" not in text
        and "fastest (any accuracy): the fastest variant whatever" in text
    )
    header = next(line for line in text.splitlines() if line.startswith("| device |"))
    assert "| fastest (any accuracy) |" in header and "| fastest exact |" in header
    assert "| full_softmax (rounded) |" in text and "| identity |" in text


def test_console_table_names_both_winners():
    text = summary.console_table(full_softmax_wins())
    lines = text.splitlines()
    assert "fastest (any accuracy)" in lines[1] and "fastest exact" in lines[1]
    assert "full_softmax (rounded)" in lines[2] and "identity" in lines[2] and "0.14×" in lines[2]
    header = lines[1].split()
    assert "full_softmax" in header and "identity" in header and "argmax_ones" not in header  # no winner
    assert "100" in lines[2].split() and "700" in lines[2].split()  # the medians of both winners
    fastest = "GPU · bfloat16: fastest variant (any accuracy): full_softmax (rounded) in 2 of 2 cases."
    assert lines[-1].startswith(fastest)  # the console's last line: the markdown's verdict, whole
    assert "Fastest exact variant: identity in 2 of 2 cases, median 0.14× against full_softmax" in lines[-1]


def test_paired_speedups_and_their_band_win_over_the_ratio_of_medians():
    paired = with_columns(
        rows(1, 151936, {"full_softmax": 100.0, "identity": 50.0}),
        speedup_vs_full={"full_softmax": 1.0, "identity": 1.8},
        speedup_p20={"full_softmax": 1.0, "identity": 1.6},
        speedup_p80={"full_softmax": 1.0, "identity": 2.1},
        speedup_method={"full_softmax": "paired", "identity": "paired"},
    )
    frame = to_frame(paired)
    row = Summary.of(frame).cases.iloc[0]
    assert (row["full/best"], row["full/best p20"], row["full/best p80"]) == (1.8, 1.6, 2.1)  # not 100 / 50
    assert "| 1.8 | 1.60-2.10 |" in summary.summary_markdown(frame)
    assert summary.console_table(frame).splitlines()[2].split()[-2:] == ["1.80×", "1.60-2.10"]


def test_unstable_medians_are_marked():
    frame = to_frame(
        with_columns(rows(1, 151936, {"full_softmax": 60.0, "identity": 40.0}), unstable={"identity": True})
    )
    assert Summary.of(frame).cases["unstable"].tolist() == [1]
    text = summary.summary_markdown(frame)
    assert "| 60 | 40 ⚠ |" in text  # full_softmax's median plain, identity's marked
    assert "1 of 2 measured cases are unstable" in text and "## Warnings" in text
    stable = summary.summary_markdown(to_frame(rows(1, 151936, {"full_softmax": 60.0, "identity": 40.0})))
    assert "⚠ |" not in stable and "## Warnings" not in stable


def test_shared_machine_warning_in_the_markdown():
    from perfsuite.core.machine import SHARED_CORES

    busy = {"full_softmax": SHARED_CORES + 1, "identity": SHARED_CORES + 1}
    frame = to_frame(
        with_columns(rows(1, 151936, {"full_softmax": 60.0, "identity": 40.0}), other_cores=busy)
    )
    assert "shared machine: 2 of 2 cases were measured while other processes" in summary.summary_markdown(
        frame
    )


def test_two_runs_of_one_device_are_two_rows():
    monday = with_columns(
        rows(1, 151936, {"full_softmax": 60.0, "identity": 40.0}),
        run={"full_softmax": "mon", "identity": "mon"},
    )
    tuesday = with_columns(
        rows(1, 151936, {"full_softmax": 90.0, "identity": 30.0}),
        run={"full_softmax": "tue", "identity": "tue"},
    )
    frame = to_frame(monday + tuesday)
    table = Summary.of(frame).cases.reset_index()
    assert list(table["device · run"]) == ["GPU · mon", "GPU · tue"]
    assert list(table["identity"]) == [40.0, 30.0]  # not pooled: 35
    assert list(table["full/best"]) == [1.5, 3.0]
    text = summary.summary_markdown(frame)
    assert "| device · run | path |" in text
    assert (
        "- GPU · mon · bfloat16: fastest variant" in text
        and "- GPU · tue · bfloat16: fastest variant" in text
    )
    assert "mon" in summary.console_table(frame) and "tue" in summary.console_table(frame)
    one = Summary.of(to_frame(monday)).cases.reset_index()
    assert "device · run" not in one and "device" in one  # one run: the device alone


def test_tensor_parallel_rows_of_the_same_shape_are_not_pooled():
    single = with_columns(
        rows(1, 151936, {"full_softmax": 60.0, "identity": 40.0}), tp={"full_softmax": 1, "identity": 1}
    )
    tp_times = (("allgather_full_softmax", 50.0), ("sharded_torch", 20.0))
    parallel = [
        {**r, "variant": v, "tp": 2, "median_us": us} for r, (v, us) in zip(single, tp_times, strict=True)
    ]
    frame = to_frame(single + parallel)
    table = Summary.of(frame).cases.reset_index()
    assert list(table["tp"].astype(int)) == [1, 2] and list(table["fastest"]) == ["identity", "sharded_torch"]
    assert "tp" in summary.console_table(frame).splitlines()[1]


def test_rates_above_the_measured_copy_bandwidth_are_a_warning():
    over = to_frame(rows(64, 151936, {"full_softmax": 60.0, "identity": 40.0}, copy=130.0))
    text = summary.summary_markdown(over)
    assert (
        "2 of 2 measured cases move more bytes per second by the bytes model than the measured copy" in text
    )
    flagged = over.assign(above_copy=[True, False], pct_copy=[130.0, 130.0])  # the column wins where set
    assert "1 of 2 measured cases move more bytes" in summary.summary_markdown(flagged)
    assert "above_copy" not in summary.summary_markdown(to_frame(rows(64, 151936, {"identity": 40.0})))


def exactness_frame(device: str = "NVIDIA H200 (simulated)") -> pd.DataFrame:
    """k 1 and k 8 shapes with the exact Triton kernel, the Triton argmax (k 1) and full_softmax."""
    made = []
    for topk, times in (
        (1, {"triton_auto": 12.0, "triton_argmax": 10.0, "full_softmax": 30.0}),
        (8, {"triton_auto": 15.0, "full_softmax": 45.0}),
    ):
        for row in rows(1, 151936, times):
            made.append({**row, "device": device, "topk": topk, "bytes_model": 1000.0 * row["median_us"]})
    made.append({**made[0], "variant": "triton_auto", "logits": "zipf", "median_us": 14.0})  # a second kind
    return to_frame(made)


def test_cost_of_exactness_per_shape_with_the_bytes_each_moves():
    one, several = Summary.of(exactness_frame()).exactness
    assert list(one.columns) == [
        "device",
        "path",
        "dtype",
        "vocab",
        "batch",
        "topk",
        "exact",
        "argmax",
        "exact us",
        "argmax us",
        "full_softmax us",
        "exact/argmax",
        "exact/full_softmax",
        "exact bytes",
        "argmax bytes",
        "full_softmax bytes",
    ]
    (row,) = one.to_dict("records")
    assert row["exact us"] == 13.0  # the median over the logits kinds
    assert abs(row["exact/argmax"] - 1.3) < 1e-9 and abs(row["exact/full_softmax"] - 13 / 30) < 1e-9
    assert (row["argmax bytes"], row["full_softmax bytes"]) == (10000.0, 30000.0)
    (big,) = several.to_dict("records")  # k > 1: against softmax + topk only
    assert "exact/argmax" not in several and abs(big["exact/full_softmax"] - 1 / 3) < 1e-9
    assert not one.isna().any().any() and not several.isna().any().any()  # every cell measured


def test_the_summary_opens_with_the_cost_of_exactness_labelled_simulated():
    text = summary.summary_markdown(exactness_frame())
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Cost of exactness"
    part = text.split("## Cost of exactness")[1].split("\n## ")[0]
    assert "Simulated: NVIDIA H200 (simulated)" in part and "### k = 1" in part and "### k > 1" in part
    assert "| exact us | argmax us | full_softmax us | exact/argmax | exact/full_softmax |" in part
    cpu = summary.summary_markdown(exactness_frame("AMD EPYC").query("variant == 'full_softmax'"))
    assert "no shape has triton_auto beside triton_argmax or full_softmax" in cpu and "Simulated" not in cpu


def test_the_run_summary_states_the_cost_of_exactness_per_device():
    (line,) = Summary.of(exactness_frame()).exactness_lines
    assert line == (
        "NVIDIA H200 (simulated): cost of exactness (median over 2 shapes): k = 1: triton_auto / "
        "triton_argmax 1.30×, / full_softmax 0.43×; k > 1: triton_auto / full_softmax 0.33×."
    )
    assert line in summary.console_table(exactness_frame())
    assert Summary.of(exactness_frame().query("variant == 'full_softmax'")).exactness_lines == []


def test_the_report_names_no_selector():
    """Roles come from the case kinds' baselines and the selectors' declarations (`Variant.role`,
    `held_against`, `engine_order_of`): no registered name is written anywhere in perfsuite/report/."""
    names = sorted({*variants.names(), *tensor_parallel.names()}, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    found = [
        f"{path.relative_to(REPORT)}:{n}: {match.group()}"
        for path in sorted(REPORT.rglob("*"))
        if path.suffix in (".py", ".html")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in pattern.finditer(line)
    ]
    assert not found, found
    roles = Roles.declared()
    assert (roles.baseline, roles.shortcut, roles.torch_exact) == ("full_softmax", "argmax_ones", "identity")
    assert roles.held == {"triton_auto": "triton_argmax"} and roles.tp_baseline == "allgather_full_softmax"
    assert roles.engine_order == {"identity": "identity_engine_order"}


def test_a_selector_declaring_a_role_joins_the_tables_that_role_feeds(monkeypatch):
    """A second exact Triton kernel held against the argmax kernel joins the cost of exactness, the run's
    lines and the Triton targets; a second twin in torch's order joins the tie policy; a tensor-parallel
    selector that merges partials joins the tensor-parallel comparison, named or not."""
    variants.names()  # the registry, filled
    second = dataclasses.replace(variants.get("triton_auto"), name="triton_second")
    twin = dataclasses.replace(variants.get(ENGINE), name="auto_twin", engine_order_of="triton_auto")
    for variant in (second, twin):
        monkeypatch.setitem(variants._REGISTRY, variant.name, variant)
    frame = exactness_frame()
    extra = frame[frame["variant"] == "triton_auto"].assign(variant="triton_second", median_us=11.0)
    twins = frame[frame["variant"] == "triton_auto"].assign(variant="auto_twin", median_us=10.0)
    s = Summary.of(pd.concat([frame, extra, twins], ignore_index=True))
    one, several = s.exactness
    assert set(one["exact"]) == set(several["exact"]) == {"triton_auto", "triton_second"}
    assert set(one["argmax"]) == {"triton_argmax"} and len(s.exactness_lines) == 2
    assert "B=1, V 129280-163840: full_softmax / triton_second >= 5" in set(s.targets["target"])
    assert set(s.ties["lowest index"]) == {"triton_auto"} and set(s.ties["engine order"]) == {"auto_twin"}
    rows = [
        {"variant": v, "status": "ok", "tp": 2, "dtype": "bfloat16", "vocab": 32000, "batch": 1, "topk": 1,
         "median_us": us, "comm_bytes_model": 1.0}
        for v, us in (("allgather_full_softmax", 50.0), ("merge_new", 10.0))
    ]  # fmt: skip
    table = tp_section.comparison(tp_section.tp_rows(pd.DataFrame(rows)))
    assert "merge_new us" in table and table["speedup"].iloc[0] == 5.0
