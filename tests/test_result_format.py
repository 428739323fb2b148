"""The versioned result format (issue 20): every row and `run.json` carry `format_version`; files without
it read as format 1, as before; a newer format is refused in one line, by the loaders and the CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from perfsuite import cli
from perfsuite.results import columns, read, sweep_shards
from perfsuite.results.columns import COLUMNS, FORMAT_COLUMN, FORMAT_HISTORY, FORMAT_VERSION, RUN_COLUMNS
from perfsuite.results.run import load_run
from perfsuite.results.write import ResultsLog, to_frame

SCENARIO = """
name = "fmt"
device = "cpu"
[[sweep]]
variants = ["full_softmax"]
paths = ["eager"]
dtypes = ["float32"]
vocab = [300]
batch = [2]
topk = [2]
logits = ["gaussian"]
[draft]
variants = ["full_softmax"]
paths = ["eager"]
dtypes = ["float32"]
vocab = 64
hidden = 8
batch = 2
topk = 2
num_steps = 2
logits = "head"
cycles = 2
kernels = false
selection_share = false
[timing]
warmup = 1
reps = 3
max_seconds = 0.05
"""
NEWER = FORMAT_VERSION + 1
REFUSAL = f"result format {NEWER} is newer than this perfsuite reads ({FORMAT_VERSION})"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "fmt.toml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture(scope="module")
def run_folder(scenario: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny CPU run (one kernel case, one draft case), shared by the tests: copy it to change it."""
    threads = torch.get_num_threads()
    out = tmp_path_factory.mktemp("run") / "out"
    try:
        assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress"]) == 0
    finally:
        torch.set_num_threads(threads)
    return out


def _copy(run_folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "out"
    shutil.copytree(run_folder, target, ignore=shutil.ignore_patterns(".perfsuite.lock*"))
    return target


def _jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def test_the_history_names_every_version_and_the_column_is_documented_last():
    assert sorted(FORMAT_HISTORY) == list(range(1, FORMAT_VERSION + 1))
    assert all(FORMAT_HISTORY[v].strip() for v in FORMAT_HISTORY)
    assert COLUMNS[-1].name == FORMAT_COLUMN


def test_rows_tables_and_run_json_carry_the_format(run_folder: Path):
    for name in ("results.jsonl", "draft.jsonl"):  # the run's columns, the format among them: in run.json
        rows = _jsonl(run_folder / name)
        assert rows and not any(set(row) & set(RUN_COLUMNS) for row in rows), name
    assert all(row[FORMAT_COLUMN] == FORMAT_VERSION for row in _jsonl(run_folder / "samples.jsonl"))
    for table in ("results.csv", "draft.csv"):
        assert list(pd.read_csv(run_folder / table).columns) == columns.table_columns(table)
    manifest = json.loads((run_folder / "run.json").read_text())
    assert next(iter(manifest)) == FORMAT_COLUMN and manifest[FORMAT_COLUMN] == FORMAT_VERSION
    assert set(manifest["constants"]) == set(RUN_COLUMNS)
    run = load_run([run_folder])
    for table in (run.frame, run.tables["draft.csv"]):
        assert (table[FORMAT_COLUMN] == FORMAT_VERSION).all() and (table["backend"] == "cpu").all()


def test_a_tensor_parallel_row_is_stamped_where_it_is_logged(tmp_path: Path):
    log = ResultsLog(tmp_path / "tp" / "tp2.jsonl")  # the workers' log, read back by the launcher
    row = {
        "variant": "sharded_torch",
        "tp": 2,
        "status": "ok",
        **dict.fromkeys(["comm_gbps", "parity_ranks"], 1),
    }
    log.append(row)
    assert FORMAT_COLUMN not in row  # the caller's row is left as it was
    (logged,) = log.read()
    assert logged[FORMAT_COLUMN] == FORMAT_VERSION
    assert list(to_frame([logged]).columns) == columns.table_columns("results.csv", run=True)


def test_an_unversioned_file_reads_as_format_1_as_before(run_folder: Path, tmp_path: Path):
    now = load_run([run_folder]).frame
    csv = tmp_path / "old.csv"  # every column on every row, no format_version: format 1
    now.drop(columns=[FORMAT_COLUMN]).to_csv(csv, index=False)
    jsonl = tmp_path / "old.jsonl"
    _write_jsonl(jsonl, json.loads(now.drop(columns=[FORMAT_COLUMN]).to_json(orient="records")))
    for path in (csv, jsonl):
        old = load_run([path]).frame
        assert (old[FORMAT_COLUMN] == 1).all()
        keep = ["case_id", "variant", "status", "median_us", "verdict", "tp", "device", "torch"]
        pd.testing.assert_frame_equal(old[keep], now[keep])
    mixed = load_run([csv, run_folder / "results.csv"]).frame  # known formats mix in one merge
    assert sorted(mixed[FORMAT_COLUMN]) == [1, FORMAT_VERSION]


def test_a_newer_format_is_refused_in_one_line(run_folder: Path, tmp_path: Path):
    newer = tmp_path / "newer.csv"
    frame = pd.read_csv(run_folder / "results.csv")
    frame.assign(**{FORMAT_COLUMN: NEWER}).to_csv(newer, index=False)
    with pytest.raises(read.FormatTooNew) as caught:
        _load(newer)
    assert str(caught.value) == f"{newer}: {REFUSAL}: upgrade perfsuite, or re-run with this perfsuite"
    mixed = tmp_path / "mixed.jsonl"  # one newer row is enough
    rows = _jsonl(run_folder / "results.jsonl")
    _write_jsonl(mixed, [*rows, {**rows[0], FORMAT_COLUMN: NEWER}])
    with pytest.raises(read.FormatTooNew, match=re.escape(REFUSAL)):
        _load(mixed)
    with pytest.raises(ValueError, match="'x' is not a result format"):
        _load(_with_format(run_folder, tmp_path, "x"))


def _load(path: Path) -> pd.DataFrame:
    return load_run([path]).frame


def _with_format(run_folder: Path, tmp_path: Path, value: object) -> Path:
    path = tmp_path / f"with-{value}.csv"
    pd.read_csv(run_folder / "results.csv").assign(**{FORMAT_COLUMN: value}).to_csv(path, index=False)
    return path


def test_report_and_compare_refuse_a_newer_file_with_exit_2(run_folder: Path, tmp_path: Path, capsys):
    newer = _with_format(run_folder, tmp_path, NEWER)
    assert cli.main(["report", str(newer), "--out", str(tmp_path / "r.html")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == f"perfsuite: {newer}: {REFUSAL}: upgrade perfsuite, or re-run with this perfsuite"
    assert cli.main(["compare", str(newer), str(run_folder / "results.csv")]) == 2
    assert REFUSAL in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "r.html").exists()


def test_a_newer_run_folder_is_refused_by_report(run_folder: Path, tmp_path: Path, capsys):
    out = _copy(run_folder, tmp_path)
    manifest = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**manifest, FORMAT_COLUMN: NEWER}))
    assert cli.main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 2
    assert f"{out / 'run.json'}: {REFUSAL}" in _one_error_line(capsys.readouterr().err)


def test_shards_merge_across_known_formats_and_refuse_a_newer_one(tmp_path: Path):
    folders = []
    for index, version in enumerate((None, FORMAT_VERSION)):
        folder = tmp_path / f"shard-{index}-of-2"
        folder.mkdir()
        manifest = {"label": "r", "settings_fingerprint": "f", "shard": {"index": index, "count": 2}}
        if version is not None:
            manifest[FORMAT_COLUMN] = version
        (folder / "run.json").write_text(json.dumps(manifest))
        folders.append(folder)
    merged = sweep_shards.merge(folders)
    assert merged is not None and merged.folders == folders
    (folders[1] / "run.json").write_text(json.dumps({**manifest, FORMAT_COLUMN: NEWER}))
    with pytest.raises(read.FormatTooNew, match=r"run\.json: result format"):
        sweep_shards.merge(folders)


def test_a_newer_draft_table_is_refused(run_folder: Path, tmp_path: Path):
    path = tmp_path / "draft.csv"
    pd.read_csv(run_folder / "draft.csv").assign(**{FORMAT_COLUMN: NEWER}).to_csv(path, index=False)
    with pytest.raises(read.FormatTooNew):
        read.read_rows(path)
    assert len(read.read_rows(run_folder / "draft.csv")) == 1


def test_resume_continues_a_format_1_run(run_folder: Path, scenario: Path, tmp_path: Path):
    out = _copy(run_folder, tmp_path)
    manifest = json.loads((out / "run.json").read_text())
    old_manifest = {k: v for k, v in manifest.items() if k not in (FORMAT_COLUMN, "constants")}
    (out / "run.json").write_text(json.dumps(old_manifest))
    constants = {k: v for k, v in manifest["constants"].items() if k != FORMAT_COLUMN}
    old = [{**r, **constants} for r in _jsonl(out / "results.jsonl")]  # format 1: every column on every row
    _write_jsonl(out / "results.jsonl", old)
    (out / "draft.jsonl").write_text("")  # the draft case runs again, in this format
    (out / "edge_cases.jsonl").unlink()  # before format 4 the matrix was no case kind
    threads = torch.get_num_threads()
    try:
        assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress", "--resume"]) == 0
    finally:
        torch.set_num_threads(threads)
    kept = _jsonl(out / "results.jsonl")  # the format-1 rows kept as they were, their format said
    assert [{k: v for k, v in r.items() if k != FORMAT_COLUMN} for r in kept] == old
    assert all(r[FORMAT_COLUMN] == 1 for r in kept) and (_load(out)[FORMAT_COLUMN] == 1).all()
    assert (load_run([out]).tables["draft.csv"][FORMAT_COLUMN] == FORMAT_VERSION).all()
    assert json.loads((out / "run.json").read_text())[FORMAT_COLUMN] == FORMAT_VERSION


def test_resume_of_a_newer_run_is_refused_in_one_line(
    run_folder: Path, scenario: Path, tmp_path: Path, capsys
):
    out = _copy(run_folder, tmp_path)
    manifest = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**manifest, FORMAT_COLUMN: NEWER}))
    log = (out / "results.jsonl").read_text()
    assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress", "--resume"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"perfsuite: {out}: cannot --resume: its run.json is result format {NEWER}")
    assert "upgrade perfsuite, or run without --resume" in line
    assert (out / "results.jsonl").read_text() == log  # nothing lost
