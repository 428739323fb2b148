"""The case-kind registry is the only place a kind is added: a fourth kind, defined here and put in
`KINDS`, gets its scenario table validated, its cases run and logged, its table written, its shard units
kept whole and its report section drawn, with no other file changed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.core import exits, kinds
from perfsuite.report.blocks import Note, Section
from perfsuite.results.columns import RUN_COLUMNS, Column
from perfsuite.scenario import load as scenarios
from perfsuite.scenario.validate import fail

HERE = __name__
ECHO_COLUMNS = tuple(
    Column(name, type, meaning, kinds=("echo",))
    for name, type, meaning in (
        ("case_id", "text", "echo/VALUE"),
        ("value", "int", "the value echoed"),
        ("status", "category", "ok"),
        ("reason", "text", ""),
    )
)
SCENARIO = """
name = "echo"
device = "cpu"
sweep = []
[echo]
values = [3, 1, 2]
"""


@dataclasses.dataclass(frozen=True)
class EchoCase:
    value: int

    @property
    def case_id(self) -> str:
        return f"echo/{self.value}"


def parse(raw: object, source: str) -> tuple[int, ...]:
    if not isinstance(raw, dict) or not all(isinstance(v, int) for v in raw.get("values", [None])):
        raise fail(source, "[echo].values", f"expected a list of integers, got {raw!r}")
    return tuple(raw["values"])


def cases(scenario) -> list[EchoCase]:
    return [EchoCase(v) for v in parse(scenario.extra.get("echo", {"values": []}), scenario.source)]


def unit(case: EchoCase) -> int:
    return case.value % 2


def run(todo: list[EchoCase], context: kinds.KindRun) -> Iterator[dict[str, object]]:
    run_columns = {key: context.env[key] for key in RUN_COLUMNS if key in context.env}
    for case in todo:
        yield {"case_id": case.case_id, "value": case.value, "status": "ok", "reason": "", **run_columns}


def sections(frame: pd.DataFrame, samples: pd.DataFrame | None = None) -> list[Section]:
    if frame.empty:
        return []
    return [Section("echo", "Echo kind", [Note(f"echoed {sorted(frame['value'].tolist())}")])]


ECHO = kinds.CaseKind(
    name="echo",
    table="echo",
    cases=f"{HERE}:cases",
    unit=f"{HERE}:unit",
    run=f"{HERE}:run",
    log="echo.jsonl",
    table_file="echo.csv",
    columns=f"{HERE}:ECHO_COLUMNS",
    baseline="full_softmax",
    sections=f"{HERE}:sections",
)


@pytest.fixture
def with_echo(monkeypatch):
    monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS, ECHO))


def _scenario(tmp_path: Path, text: str = SCENARIO) -> Path:
    path = tmp_path / "echo.toml"
    path.write_text(text)
    return path


def test_without_the_kind_its_table_is_refused(tmp_path):
    with pytest.raises(scenarios.ScenarioError, match="echo"):
        scenarios.load(_scenario(tmp_path))


def test_the_kind_checks_its_table_before_a_run_touches_its_folder(with_echo, tmp_path, capsys):
    assert scenarios.load(_scenario(tmp_path)).extra["echo"] == {"values": [3, 1, 2]}
    out = tmp_path / "out"
    bad = _scenario(tmp_path, SCENARIO.replace("[3, 1, 2]", '["x"]'))
    assert cli.main(["run", str(bad), "--out", str(out), "--no-progress"]) == exits.EXIT_USAGE
    assert "[echo].values" in capsys.readouterr().err
    assert not out.exists()


def test_a_fourth_kind_runs_logs_writes_and_reports(with_echo, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", str(_scenario(tmp_path)), "--out", str(out), "--no-progress"]) == exits.EXIT_OK
    logged = [json.loads(line) for line in (out / "echo.jsonl").read_text().splitlines()]
    assert [row["case_id"] for row in logged] == ["echo/3", "echo/1", "echo/2"]
    table = pd.read_csv(out / "echo.csv")
    assert list(table.columns[: len(ECHO_COLUMNS)]) == [c.name for c in ECHO_COLUMNS]  # the kind's order
    assert "echoed [1, 2, 3]" in (out / "report.html").read_text()
    assert "3 echo cases: 3 ok" in capsys.readouterr().out
    # a second run puts the kind's files aside like every other run file
    assert cli.main(["run", str(_scenario(tmp_path)), "--out", str(out), "--no-progress"]) == exits.EXIT_OK
    assert list((out / "earlier").glob("*/echo.jsonl"))


def test_a_resumed_run_skips_the_kinds_logged_cases(with_echo, tmp_path, monkeypatch):
    out = tmp_path / "out"
    path = _scenario(tmp_path)
    assert cli.main(["run", str(path), "--out", str(out), "--no-progress"]) == exits.EXIT_OK
    ran: list[str] = []
    original = run

    def counting(todo, context):
        ran.extend(c.case_id for c in todo)
        return original(todo, context)

    monkeypatch.setattr(f"{HERE}.run", counting)
    assert cli.main(["run", str(path), "--out", str(out), "--no-progress", "--resume"]) == exits.EXIT_OK
    assert ran == [] and len((out / "echo.jsonl").read_text().splitlines()) == 3


def test_shards_keep_the_kinds_units_whole(with_echo, tmp_path):
    path = _scenario(tmp_path)
    seen = []
    for index in range(2):
        out = tmp_path / f"shard{index}"
        assert cli.main(["run", str(path), "--out", str(out), f"--shard={index}/2", "--no-progress"]) == 0
        log = out / f"shard-{index}-of-2" / "echo.jsonl"
        ids = [json.loads(line)["case_id"] for line in log.read_text().splitlines()] if log.exists() else []
        seen.append(ids)
    assert sorted(i for ids in seen for i in ids) == ["echo/1", "echo/2", "echo/3"]  # every case once
    assert all(len({int(i.split("/")[1]) % 2 for i in ids}) <= 1 for ids in seen)  # a unit in one shard
    # the shards merged back: the kind's rows of both in one report
    folders = [str(tmp_path / f"shard{i}" / f"shard-{i}-of-2") for i in range(2)]
    page = tmp_path / "merged.html"
    assert cli.main(["report", *folders, "--out", str(page)]) == exits.EXIT_OK
    assert "echoed [1, 2, 3]" in page.read_text()
