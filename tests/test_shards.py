"""Sharded sweeps (`run --shard I/N`): a deterministic, balanced split that keeps the variants of one shape
together, and the shards merged back into one run by `report` and `compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import tomllib

from perfsuite import cli
from perfsuite.cases.kernel import unit as unit_of
from perfsuite.core import exits
from perfsuite.results import sweep_shards
from perfsuite.results.run import load_run
from perfsuite.scenario.load import expand, parse

SCENARIO = """
name = "sharded"
device = "cpu"
[sweep]
variants = ["full_softmax", "argmax_ones"]
paths = ["eager"]
dtypes = ["float32"]
vocab = [{vocab}]
batch = [1, 3]
topk = [1]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 5
max_seconds = 0.05
"""


def scenario_file(tmp_path: Path, vocab: str = "700, 900") -> Path:
    path = tmp_path / "sharded.toml"
    path.write_text(SCENARIO.format(vocab=vocab))
    return path


def run_shard(scenario: Path, out: Path, shard: str, *extra: str) -> int:
    return cli.main(["run", str(scenario), "--out", str(out), f"--shard={shard}", "--no-progress", *extra])


@pytest.mark.parametrize("text", ["", "3", "1/0", "2/2", "-1/4", "a/b", "1/2/3"])
def test_a_bad_shard_is_one_line_and_exit_2(text, tmp_path, capsys):
    assert run_shard(scenario_file(tmp_path), tmp_path / "out", text) == exits.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfsuite: --shard: expected I/N") and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_shards_partition_the_cases_keep_shapes_whole_and_balance_the_work():
    toml = SCENARIO.format(vocab="1000, 32000, 128256, 151936, 2000, 64000")
    cases = expand(parse(tomllib.loads(toml), "inline"))
    picked = [sweep_shards.select(cases, unit_of, sweep_shards.Shard(i, 4)) for i in range(4)]
    ids = [c.case_id for shard in picked for c in shard]
    assert sorted(ids) == sorted(c.case_id for c in cases)  # every case once
    for shard in picked:  # the variants of a shape never split across shards
        units = {unit_of(c) for c in shard}
        assert all(sum(unit_of(c) == u for c in shard) == 2 for u in units)
    # the same split on every machine: a second expansion gives the same shards
    again = [
        [c.case_id for c in sweep_shards.select(cases, unit_of, sweep_shards.Shard(i, 4))] for i in range(4)
    ]
    assert again == [[c.case_id for c in shard] for shard in picked]
    weight = [sum(sweep_shards._case_weight(c) for c in shard) for shard in picked]
    # greedy, largest first: the biggest shard exceeds the smallest by at most one unit's weight
    biggest_unit = max(2 * sweep_shards._case_weight(c) for c in cases)
    assert max(weight) - min(weight) <= biggest_unit
    assert min(weight) > 0


def test_assign_puts_the_largest_units_first_on_the_least_loaded_shard():
    owner = sweep_shards.assign([1, 10, 1, 9, 1], float, 2)
    # 10 -> 0, 9 -> 1, the first 1 -> 1 (10 each), the next to the lower index (0), the last to 1
    assert owner == [1, 0, 0, 1, 1]


def test_shards_run_apart_and_merge_into_one_run(tmp_path, capsys):
    scenario, out = scenario_file(tmp_path), tmp_path / "out"
    for i in range(2):
        assert run_shard(scenario, out, f"{i}/2", "--label", "job7") == 0
    folders = sorted(p.name for p in out.iterdir())
    assert folders == ["shard-0-of-2", "shard-1-of-2"]
    manifests = [json.loads((out / f / "run.json").read_text()) for f in folders]
    assert [m["shard"] for m in manifests] == [{"index": 0, "count": 2}, {"index": 1, "count": 2}]
    frames = [pd.read_csv(out / f / "results.csv") for f in folders]
    assert set(frames[0]["case_id"]).isdisjoint(frames[1]["case_id"])
    assert sum(len(f) for f in frames) == 8
    edges = [(out / f / "edge_cases.csv").exists() for f in folders]  # the matrix: one unit, one shard
    assert sorted(edges) == [False, True]

    merged = load_run([out])
    assert merged is not None and len(merged.frame) == 8
    assert set(merged.frame["run"]) == {"job7"}
    assert not [note for note in merged.notes if "shard" in note]  # none missing, same labels
    assert merged.samples is not None and set(merged.samples["run"]) == {"job7"}
    assert len(merged.tables["edge_cases.csv"])
    others = merged.frame[merged.frame["variant"] == "argmax_ones"]  # paired within their shard's shape
    assert len(others) == 4 and set(others["speedup_method"]) == {"paired"}

    capsys.readouterr()
    assert cli.main(["report", str(out)]) == 0
    assert (out / "report.html").exists()
    assert cli.main(["compare", str(out), str(out)]) == 0  # both sides: the shards merged
    assert "8 cases matched" in capsys.readouterr().out


def test_merge_refuses_shards_of_other_settings_or_twice_and_notes_a_missing_one(tmp_path, capsys):
    scenario = scenario_file(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_shard(scenario, a, "0/3") == 0
    assert run_shard(scenario, a, "2/3") == 0
    (tmp_path / "x").mkdir()
    other = scenario_file(tmp_path / "x", "700, 901")
    assert run_shard(other, b, "1/3") == 0
    capsys.readouterr()

    code = cli.main(["report", str(a / "shard-0-of-3"), str(b / "shard-1-of-3")])
    err = capsys.readouterr().err.strip()
    assert code == exits.EXIT_USAGE and "shard of other settings" in err and "\n" not in err

    code = cli.main(["report", str(a / "shard-0-of-3"), str(a / "shard-0-of-3" / "results.csv")])
    assert code == exits.EXIT_USAGE and "given twice" in capsys.readouterr().err

    merged = load_run([a])
    assert merged is not None
    assert any("shards 1 of 3 are missing" in note for note in merged.notes)


def test_a_shard_stopped_before_its_first_row_is_noted_and_the_others_merge(tmp_path, capsys):
    """Slurm's scancel landed on a shard between its run.json and its first row (the clean-clone CI met
    it): its row logs were empty, and merging, `report` and `compare` of the run failed on it."""
    scenario, out = scenario_file(tmp_path), tmp_path / "out"
    for i in (0, 2):
        assert run_shard(scenario, out, f"{i}/3") == 0
    assert run_shard(scenario, out, "1/3", "--only", "no-such-case*") == 0  # a shard folder, no row
    stopped = out / "shard-1-of-3"
    for name in ("results.csv", "draft.csv", "samples.jsonl"):
        (stopped / name).unlink(missing_ok=True)
    (stopped / "results.json").write_text("[]\n")  # as the SIGTERM handler leaves it
    assert sweep_shards.wrote_no_row(stopped) and not sweep_shards.wrote_no_row(out / "shard-0-of-3")
    merged = load_run([out])
    assert merged is not None and stopped not in merged.folders and len(merged.folders) == 2
    assert set(merged.frame["source"]) == {"shard-0-of-3", "shard-2-of-3"}
    assert any("shards 1 of 3 stopped before their first row" in note for note in merged.notes)
    capsys.readouterr()
    assert cli.main(["report", str(out)]) == 0 and (out / "report.html").exists()
    assert cli.main(["compare", str(out), str(out)]) == 0
    for i in (0, 2):  # no shard with a row: one line, exit 2
        for name in ("results.csv", "results.json", "samples.jsonl"):
            (out / f"shard-{i}-of-3" / name).unlink(missing_ok=True)
        (out / f"shard-{i}-of-3" / "results.jsonl").write_text("")
    capsys.readouterr()
    assert cli.main(["report", str(out)]) == exits.EXIT_USAGE
    assert "no shard wrote a row yet" in capsys.readouterr().err


def test_merge_refuses_a_plain_run_among_shards(tmp_path, capsys):
    scenario = scenario_file(tmp_path)
    assert run_shard(scenario, tmp_path / "s", "0/2") == 0
    assert cli.main(["run", str(scenario), "--out", str(tmp_path / "plain"), "--no-progress"]) == 0
    capsys.readouterr()
    code = cli.main(["report", str(tmp_path / "s" / "shard-0-of-2"), str(tmp_path / "plain")])
    err = capsys.readouterr().err
    assert code == exits.EXIT_USAGE and "not a shard" in err


def test_resume_refuses_another_shard_in_the_folder(tmp_path, capsys):
    scenario = scenario_file(tmp_path)
    out = tmp_path / "out"
    assert run_shard(scenario, out, "0/2") == 0
    (out / "shard-0-of-2").rename(out / "shard-1-of-2")  # the folder holds shard 0, named as shard 1
    capsys.readouterr()
    assert run_shard(scenario, out, "1/2", "--resume") == exits.EXIT_USAGE
    assert "holds shard 0/2" in capsys.readouterr().err
    # a job array's retry passes --resume always: a shard's first start resumes nothing, and runs
    assert run_shard(scenario, tmp_path / "fresh", "1/2", "--resume") == 0
    assert json.loads((tmp_path / "fresh" / "shard-1-of-2" / "run.json").read_text())["shard"]["index"] == 1
