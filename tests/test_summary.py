"""The text summary the GPU check prints: per-case medians, ratios, and the Triton targets."""

from __future__ import annotations

import pandas as pd

from perfsuite.report import summary
from perfsuite.results import to_frame


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
    table = summary.case_table(frame()).set_index(["vocab", "batch"])
    row = table.loc[(151936, 1)]
    assert row["best_exact"] == "triton_auto"
    assert abs(row["full/best"] - 60 / 11) < 1e-9 and abs(row["best/argmax"] - 1.1) < 1e-9
    assert row["best_%copy"] == 50.0


def test_triton_targets_count_cases_and_the_worst():
    targets = summary.triton_targets(frame()).set_index("target")
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
    assert summary.main([str(path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| device | path |" in text and "triton_auto" in text and "Triton targets" in text
    assert "3 ok" not in text and "12 ok, 1 skipped" in text
    assert summary.main([str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err


def test_the_tuned_table_beside_the_results_joins_the_summary(tmp_path, capsys):
    from perfsuite.kernels import tuned

    path = tmp_path / "results.csv"
    frame().to_csv(path, index=False)
    best = tuned.Tunables("split", 2048, 4, waves=2.0)
    entry = tuned.Entry("bfloat16", 1, 151936, 1, best, median_us=8.0, heuristic_us=10.0)
    table = tuned.TunedTable("NVIDIA H200", 132, 32, {}, "graph", (entry,))
    (tmp_path / "tuned.json").write_text(table.to_json())
    assert summary.main([str(path)]) == 0
    printed = capsys.readouterr().out
    assert "## Tuned plans (NVIDIA H200, graph path" in printed
    assert (
        "| bfloat16 | 1 | 151936 | 1 | split, block 2048, 4 warps, 2 waves, prefetch | 8 | 10 | 1.25 |"
        in printed
    )
    (tmp_path / "tuned.json").write_text("{}")
    assert summary.main([str(path)]) == 2  # a broken table is a one-line error
    assert "perfsuite summary:" in capsys.readouterr().err
