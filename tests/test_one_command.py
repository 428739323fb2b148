"""One command: `perfsuite warm`, `perfsuite summary` and `perfsuite tp-page` are subcommands of
`perfsuite`, their options defined once in their modules, which `perfsuite` imports only when they run;
`python -m perfsuite.tools.warm`, `perfsuite.report.summary` and `perfsuite.report.tp_section` stay as
aliases. (Each command's own tests: tests/test_kernel_warm.py, tests/test_summary.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.report import tp_section

ROOT = Path(__file__).parents[1]
COMMANDS = {
    "warm": "perfsuite.tools.warm",
    "summary": "perfsuite.report.summary",
    "tp-page": "perfsuite.report.tp_section",
}


def _python(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def tp_frame() -> pd.DataFrame:
    """All-gather 2.5x slower than merging partials at tp 2 and 4 (tests/test_distributed.py's rows)."""
    return pd.DataFrame(
        [
            {
                "case_id": f"{v}-tp{tp}-b{b}",
                "variant": v,
                "status": "ok",
                "tp": tp,
                "dtype": "bfloat16",
                "vocab": 32000,
                "batch": b,
                "topk": 1,
                "median_us": us,
                "comm_bytes_model": comm,
            }
            for tp in (2, 4)
            for b in (1, 16)
            for v, us, comm in (("allgather_full_softmax", 50.0, 32000 * b), ("sharded_torch", 20.0, 16 * b))
        ]
    )


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert f"\n    {name} " in out
    assert "| warm | summary | tp-page" in out and "124  `warm` stopped at its --budget" in out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_has_its_modules_options(name, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([name, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    own = {"warm": "--budget BUDGET", "summary": "--tuned TUNED", "tp-page": "--out OUT"}[name]
    assert out.startswith(f"usage: perfsuite {name} ") and own in out


def test_the_commands_modules_are_imported_only_when_they_run():
    probe = (
        "import sys; from perfsuite import cli; p = cli.parser(); p.parse_args(['variants']); "
        f"print(sorted(m for m in {sorted(COMMANDS.values())!r} if m in sys.modules)); "
        "p.parse_args(['summary', 'x.csv']); print('perfsuite.report.summary' in sys.modules)"
    )
    done = _python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]


def test_tp_page_is_the_alias_command(tmp_path, capsys):
    rows = tmp_path / "tp2.jsonl"
    tp_frame().to_json(rows, orient="records", lines=True)
    assert tp_section.main([str(rows), "--out", str(tmp_path / "alias.html")]) == 0
    alias = capsys.readouterr().out
    assert cli.main(["tp-page", str(rows), "--out", str(tmp_path / "command.html")]) == 0
    out = capsys.readouterr().out
    assert out == alias and "speedup" in out and "2.5" in out
    assert "<html" in (tmp_path / "command.html").read_text()
    for main, argv in ((tp_section.main, []), (cli.main, ["tp-page"])):
        assert main([*argv, str(tmp_path / "missing.jsonl")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("perfsuite tp-page: ") and "missing.jsonl" in err and len(err.splitlines()) == 1


def test_the_python_m_aliases_still_work(tmp_path):
    rows = tmp_path / "tp2.csv"
    tp_frame().to_csv(rows, index=False)
    page = _python("-m", COMMANDS["tp-page"], str(rows))
    assert page.returncode == 0 and "speedup" in page.stdout, page.stderr
    missing = str(tmp_path / "missing.csv")
    summary = _python("-m", COMMANDS["summary"], missing)
    assert summary.returncode == 2 and summary.stderr.startswith("perfsuite summary: "), summary.stderr
    warm = _python("-m", COMMANDS["warm"])
    assert warm.returncode == 2 and "warm: nothing to warm" in warm.stderr, warm.stderr
