"""Exit codes and signals of the command line: SIGTERM stops a command as SIGINT does (what was measured is
written, exit 130), an unexpected exception is one line and exit 4, and the codes are distinct and listed
in `perfsuite --help`."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from support import LONG_SWEEP, LONG_SWEEP_CASES, sigterm_once_started

from perfsuite import cli, commands, kernels
from perfsuite.core import exits
from perfsuite.kernels import resources

ROOT = Path(__file__).parents[1]
TWO_SHAPES = """
name = "two"
device = "cpu"
[sweep]
variants = ["triton_auto"]
dtypes = ["bfloat16"]
vocab = [1000, 2000]
batch = [1]
topk = [1]
logits = ["gaussian"]
"""


def test_exit_statuses_are_one_table_listed_in_help(capsys):
    statuses = {name: value for name, value in vars(exits).items() if name.startswith("EXIT_")}
    assert len(set(statuses.values())) == len(statuses) == len(exits.MEANINGS)
    assert set(exits.MEANINGS) == set(statuses.values())
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = re.findall(r"^ {2}(\d+) ", capsys.readouterr().out, re.M)
    assert sorted(map(int, listed)) == sorted(statuses.values())


def test_no_module_but_the_table_defines_an_exit_status():
    defined = []
    for path in (ROOT / "perfsuite").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            names = [n for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])]
            if any(isinstance(n, ast.Name) and n.id.startswith("EXIT_") for n in names):
                defined.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    elsewhere = [where for where in defined if not where.startswith("perfsuite/core/exits.py:")]
    assert not elsewhere, f"exit statuses defined outside perfsuite/core/exits.py: {elsewhere}"
    assert len(defined) == len(exits.MEANINGS)  # the walk sees the table's own lines


def _broken(args) -> int:
    raise RuntimeError("the registry\nis broken")


def test_an_internal_error_is_one_line_naming_the_traceback_file(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(commands.variants, "run", _broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    assert cli.main(["variants"]) == exits.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("perfsuite: internal error: RuntimeError: the registry is broken (traceback in ")
    (written,) = tmp_path.glob("perfsuite-error-*.txt")
    assert str(written) in err
    assert written.read_text().startswith("Traceback (most recent call last)")
    assert "_broken" in written.read_text()


def test_debug_puts_the_traceback_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(commands.variants, "run", _broken)
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert cli.main(["variants"]) == exits.EXIT_INTERNAL
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert err[-1] == "perfsuite: internal error: RuntimeError: the registry is broken (traceback above)"


def test_sigterm_interrupts_a_command_and_the_handler_is_restored(monkeypatch, capsys):
    def waits_for_a_signal(args) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs at the next bytecode: long before this loop ends
            time.sleep(0.01)
        return exits.EXIT_OK

    monkeypatch.setattr(commands.variants, "run", waits_for_a_signal)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["variants"]) == exits.EXIT_INTERRUPTED
    assert signal.getsignal(signal.SIGTERM) is before
    assert capsys.readouterr().err == "perfsuite: interrupted\n"


def test_interrupted_kernels_writes_the_launches_compiled_so_far(monkeypatch, tmp_path, capsys):
    scenario, csv = tmp_path / "two.toml", tmp_path / "kernels.csv"
    scenario.write_text(TWO_SHAPES)
    compiled = []

    def compile_then_stop(shapes, targets, asm) -> pd.DataFrame:
        if compiled:
            raise KeyboardInterrupt
        compiled.append(shapes)
        return pd.DataFrame([{"target": targets[0], "vocab": shapes[0][2], "registers": 40}])

    monkeypatch.setattr(resources, "plan_resources", compile_then_stop)
    monkeypatch.setattr(kernels, "triton_installed", lambda: True)
    monkeypatch.setattr(kernels, "interpreting", lambda: False)
    command = ["kernels", str(scenario), "--target", "sm_90", "--csv", str(csv)]
    assert cli.main(command) == exits.EXIT_INTERRUPTED
    assert pd.read_csv(csv).to_dict("records") == [{"target": "sm_90", "vocab": 1000, "registers": 40}]
    assert "interrupted: 1 launches compiled, written" in capsys.readouterr().err


def test_sigterm_mid_sweep_writes_the_results_and_exits_130(tmp_path):
    scenario, out = tmp_path / "long.toml", tmp_path / "out"
    scenario.write_text(LONG_SWEEP)
    command = [sys.executable, "-m", "perfsuite", "run", str(scenario), "--out", str(out), "--no-progress"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = out / "results.jsonl"
    _, stderr = sigterm_once_started(process, lambda: rows.exists() and rows.stat().st_size > 0)
    assert process.returncode == exits.EXIT_INTERRUPTED, stderr[-3000:]
    assert "interrupted: what was measured is written" in stderr and "Traceback" not in stderr
    results = pd.read_csv(out / "results.csv")
    assert 1 <= len(results) < LONG_SWEEP_CASES and (results["status"] == "ok").all()
    assert (out / "report.html").stat().st_size > 0


def test_sigint_interrupts_even_when_inherited_as_ignored():
    """A non-interactive shell starts background jobs with SIGINT ignored; `kill -INT` must still stop
    a perfsuite command (gpu_check's budgets, a script's cleanup), and the disposition comes back after."""
    from perfsuite.core.console import interruptible

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt), interruptible():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises long before
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
