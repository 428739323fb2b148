"""One command line: every command a module of perfsuite/commands (its options and its run), the options
several share declared once, cli.py thin; the commands' domain modules imported only when they run."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.core import exits

ROOT = Path(__file__).parents[1]
NAMES = [command.NAME for command in cli.COMMANDS]


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
    assert all(f"\n    {name} " in out for name in NAMES) and "124  `warm` stopped at its --budget" in out
    assert len((ROOT / "perfsuite" / "cli.py").read_text().splitlines()) < 250


@pytest.mark.parametrize("command", cli.COMMANDS, ids=NAMES)
def test_each_command_has_its_modules_options(command, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([command.NAME, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    own = argparse.ArgumentParser()
    command.add_arguments(own)
    options = [o for action in own._actions for o in action.option_strings if o != "-h"]
    assert out.startswith(f"usage: perfsuite {command.NAME}") and all(o in out for o in options)


def test_the_shared_options_are_declared_once():
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {
        name: tuple(a.help for a in sub.choices[name]._actions if a.dest in ("device", "threads"))
        for name in ("run", "profile", "call", "tune")
    }
    assert len(set(helps.values())) == 1 and len(helps["run"]) == 2


def test_the_commands_domain_modules_are_imported_only_when_they_run():
    domain = [
        "perfsuite.sweep",
        "perfsuite.report.summary",
        "perfsuite.tools.warm",
        "perfsuite.compare.match",
    ]
    probe = (
        "import sys; from perfsuite import cli; p = cli.parser(); p.parse_args(['variants']); "
        f"print(sorted(m for m in {domain!r} if m in sys.modules))"
    )
    done = _python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[]"


def test_tp_page_reads_any_results_file(tmp_path, capsys):
    rows = tmp_path / "tp2.jsonl"
    tp_frame().to_json(rows, orient="records", lines=True)
    assert cli.main(["tp-page", str(rows), "--out", str(tmp_path / "page.html")]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "2.5" in out and "<html" in (tmp_path / "page.html").read_text()
    csv = tmp_path / "tp2.csv"
    tp_frame().to_csv(csv, index=False)
    assert cli.main(["tp-page", str(csv)]) == 0 and capsys.readouterr().out == out
    assert cli.main(["tp-page", str(tmp_path / "missing.jsonl")]) == exits.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("perfsuite: ") and "missing.jsonl" in err and len(err.splitlines()) == 1


def test_python_m_perfsuite_runs_the_commands(tmp_path):
    summary = _python("-m", "perfsuite", "summary", str(tmp_path / "missing.csv"))
    assert summary.returncode == 2 and summary.stderr.startswith("perfsuite: "), summary.stderr
    warm = _python("-m", "perfsuite", "warm")
    assert warm.returncode == 2 and "warm: nothing to warm" in warm.stderr, warm.stderr
