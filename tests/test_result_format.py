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
from perfsuite.results import read, sweep_shards
from perfsuite.results.schema import (
    DRAFT_COLUMNS,
    FORMAT_COLUMN,
    FORMAT_HISTORY,
    FORMAT_VERSION,
    RESULT_COLUMNS,
    TP_COLUMNS,
)
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
    assert list(RESULT_COLUMNS)[-1] == FORMAT_COLUMN and list(DRAFT_COLUMNS)[-1] == FORMAT_COLUMN


def test_rows_tables_and_run_json_carry_the_format(run_folder: Path):
    for name in ("results.jsonl", "draft.jsonl", "samples.jsonl"):
        rows = _jsonl(run_folder / name)
        assert rows and all(row[FORMAT_COLUMN] == FORMAT_VERSION for row in rows), name
    results = pd.read_csv(run_folder / "results.csv")
    assert list(results.columns) == list(RESULT_COLUMNS) and (results[FORMAT_COLUMN] == FORMAT_VERSION).all()
    draft = pd.read_csv(run_folder / "draft.csv")
    assert list(draft.columns) == list(DRAFT_COLUMNS) and (draft[FORMAT_COLUMN] == FORMAT_VERSION).all()
    manifest = json.loads((run_folder / "run.json").read_text())
    assert next(iter(manifest)) == FORMAT_COLUMN and manifest[FORMAT_COLUMN] == FORMAT_VERSION
    assert (read.load_results(run_folder)[FORMAT_COLUMN] == FORMAT_VERSION).all()


def test_a_tensor_parallel_row_is_stamped_where_it_is_logged(tmp_path: Path):
    log = ResultsLog(tmp_path / "tp" / "tp2.jsonl")  # the workers' log, read back by the launcher
    row = {"variant": "sharded_torch", "tp": 2, "status": "ok", **dict.fromkeys(TP_COLUMNS, 1)}
    log.append(row)
    assert FORMAT_COLUMN not in row  # the caller's row is left as it was
    (logged,) = log.read()
    assert logged[FORMAT_COLUMN] == FORMAT_VERSION
    columns = list(to_frame([logged]).columns)
    assert columns == [*RESULT_COLUMNS, *TP_COLUMNS]  # the schema's columns first, the tp extras after


def test_an_unversioned_file_reads_as_format_1_as_before(run_folder: Path, tmp_path: Path):
    csv = tmp_path / "old.csv"
    pd.read_csv(run_folder / "results.csv").drop(columns=[FORMAT_COLUMN]).to_csv(csv, index=False)
    jsonl = tmp_path / "old.jsonl"
    _write_jsonl(
        jsonl,
        [{k: v for k, v in r.items() if k != FORMAT_COLUMN} for r in _jsonl(run_folder / "results.jsonl")],
    )
    now = read.load_results(run_folder / "results.csv")
    for path in (csv, jsonl):
        old = read.load_results(path)
        assert (old[FORMAT_COLUMN] == 1).all()
        keep = ["case_id", "variant", "status", "median_us", "verdict", "tp"]
        pd.testing.assert_frame_equal(old[keep], now[keep])
    mixed = read.load_many([csv, run_folder / "results.csv"])  # known formats mix in one merge
    assert sorted(mixed[FORMAT_COLUMN]) == [1, FORMAT_VERSION]


def test_a_newer_format_is_refused_in_one_line(run_folder: Path, tmp_path: Path):
    newer = tmp_path / "newer.csv"
    frame = pd.read_csv(run_folder / "results.csv")
    frame.assign(**{FORMAT_COLUMN: NEWER}).to_csv(newer, index=False)
    with pytest.raises(read.FormatTooNew) as caught:
        read.load_results(newer)
    assert str(caught.value) == f"{newer}: {REFUSAL}: upgrade perfsuite, or re-run with this perfsuite"
    mixed = tmp_path / "mixed.jsonl"  # one newer row is enough
    rows = _jsonl(run_folder / "results.jsonl")
    _write_jsonl(mixed, [*rows, {**rows[0], FORMAT_COLUMN: NEWER}])
    with pytest.raises(read.FormatTooNew, match=re.escape(REFUSAL)):
        read.load_results(mixed)
    with pytest.raises(ValueError, match="'x' is not a result format"):
        read.load_results(_with_format(run_folder, tmp_path, "x"))


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
        read.read_table(path)
    assert len(read.read_table(run_folder / "draft.csv")) == 1


def test_resume_continues_a_format_1_run(run_folder: Path, scenario: Path, tmp_path: Path):
    out = _copy(run_folder, tmp_path)
    manifest = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != FORMAT_COLUMN}))
    old = [{k: v for k, v in r.items() if k != FORMAT_COLUMN} for r in _jsonl(out / "results.jsonl")]
    _write_jsonl(out / "results.jsonl", old)
    logged = (out / "results.jsonl").read_text()
    (out / "draft.jsonl").write_text("")  # the draft case runs again, in this format
    threads = torch.get_num_threads()
    try:
        assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress", "--resume"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert (out / "results.jsonl").read_text() == logged  # the format-1 rows kept as they were
    assert (read.load_results(out)[FORMAT_COLUMN] == 1).all()
    assert (pd.read_csv(out / "draft.csv")[FORMAT_COLUMN] == FORMAT_VERSION).all()
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
