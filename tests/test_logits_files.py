"""Logits read from files: the shipped example, the three formats and folders, how rows are taken, the
memory check, a measured case's row, and one clear line for every file that cannot be used."""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from perfsuite.correctness import logits_shape
from perfsuite.measure import memory
from perfsuite.scenario import inputs, logits_files
from perfsuite.scenario import load as scenario
from perfsuite.scenario.logits_files import LogitsFileError
from perfsuite.scenario.validate import ScenarioError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "scenarios" / "data" / "draft_head_logits.pt"


def scenario_with(tmp_path: Path, files: str, sweep: str = 'logits = ["file:mine"]') -> Path:
    path = tmp_path / "s.toml"
    path.write_text(f"[inputs.files]\n{files}\n[sweep]\n{sweep}\n")
    return path


def save_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """`safetensors.torch.save_file`; the test is skipped where safetensors is not installed."""
    pytest.importorskip("safetensors", reason="safetensors is not installed (pip install safetensors)")
    from safetensors.torch import save_file as save

    save(tensors, path)


def source(path: Path, tensor: str = "") -> logits_files.LogitsSource:
    return logits_files.inspect("mine", path, tensor)


# ---------------------------------------------------------------- the shipped example


def test_the_example_file_is_small_and_what_its_scenario_sweeps():
    found = source(EXAMPLE)
    assert (found.rows, found.vocab, found.parts[0].dtype) == (32, 16384, "bfloat16")
    assert EXAMPLE.stat().st_size < 2 << 20
    s = scenario.load(ROOT / "scenarios" / "real_logits.toml")
    cases = scenario.expand(s)
    assert {c.vocab for c in cases} == {16384}  # vocab left out: the file's V
    assert {"file:draft_head", "gaussian", "zipf"} <= {c.logits for c in cases}
    assert max(c.batch for c in cases) > found.rows  # a batch the file's rows are tiled to


def test_the_regeneration_script_makes_the_shipped_rows():
    script = ROOT / "scripts" / "make_example_logits.py"
    spec = importlib.util.spec_from_file_location("make_example_logits", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = module.example_logits()
    shipped = torch.load(EXAMPLE, weights_only=True)
    assert made.shape == shipped.shape and made.dtype == shipped.dtype
    # bf16 matmuls round differently on another CPU (AMD EPYC against the CPU that wrote the file), and
    # the draft loop carries each step's rounding into the next step's hidden state: the draft extend's
    # rows within a couple of bf16 ulps, every row within 1/8 (logits up to 12.75), the same argmax
    rows = len(made) // module.LOOP.num_steps  # the draft extend's selection: one row per sequence
    torch.testing.assert_close(made[:rows].float(), shipped[:rows].float(), rtol=2**-6, atol=2**-6)
    torch.testing.assert_close(made.float(), shipped.float(), rtol=2**-6, atol=2**-3)
    assert torch.equal(made.float().argmax(-1), shipped.float().argmax(-1))


# ---------------------------------------------------------------- formats, folders, rows


def test_npy_safetensors_and_pt_give_the_same_rows(tmp_path):
    rows = torch.randn(6, 50)
    np.save(tmp_path / "a.npy", rows.numpy())
    save_file({"logits": rows, "other": torch.zeros(3)}, tmp_path / "a.safetensors")
    torch.save({"logits": rows}, tmp_path / "a.pt")
    made = [
        inputs.make_logits("file:mine", 4, 50, torch.float32, seed=3, files=[source(path, tensor)])
        for path, tensor in (
            (tmp_path / "a.npy", ""),
            (tmp_path / "a.safetensors", "logits"),
            (tmp_path / "a.pt", "logits"),
        )
    ]
    order = logits_files.row_order(6, 4, 3)
    for x in made:
        assert torch.equal(x, rows[order])
    assert len(set(order.tolist())) == 4  # batch <= rows: distinct rows


def test_rows_follow_the_seed_and_are_tiled_past_the_file(tmp_path):
    rows = torch.arange(5 * 8, dtype=torch.float32).view(5, 8)
    torch.save(rows, tmp_path / "x.pt")
    files = [source(tmp_path / "x.pt")]
    a = inputs.make_logits("file:mine", 5, 8, torch.float32, seed=1, files=files)
    b = inputs.make_logits("file:mine", 5, 8, torch.float32, seed=1, files=files)
    c = inputs.make_logits("file:mine", 5, 8, torch.float32, seed=2, files=files)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert sorted(a[:, 0].tolist()) == sorted(rows[:, 0].tolist())  # each row once
    tiled = inputs.make_logits("file:mine", 12, 8, torch.float32, seed=1, files=files)
    counts = torch.bincount((tiled[:, 0] / 8).long(), minlength=5)
    assert sorted(counts.tolist()) == [2, 2, 2, 3, 3]  # tiled: every row, evenly


def test_dtype_conversion_and_row_pad(tmp_path):
    rows = torch.randn(3, 40, dtype=torch.float64)
    np.save(tmp_path / "x.npy", rows.numpy())
    files = [source(tmp_path / "x.npy")]
    x = inputs.make_logits("file:mine", 3, 40, torch.bfloat16, seed=0, files=files, row_pad=5)
    order = logits_files.row_order(3, 3, 0)
    assert x.dtype == torch.bfloat16 and x.stride() == (45, 1)
    assert torch.equal(x, rows[order].to(torch.bfloat16))


def test_a_folder_concatenates_its_files_in_name_order(tmp_path):
    folder = tmp_path / "dump"
    folder.mkdir()
    first, second = torch.randn(2, 30), torch.randn(3, 30).to(torch.float16)
    torch.save(first, folder / "0.pt")
    np.save(folder / "1.npy", second.numpy())
    (folder / "notes.txt").write_text("not logits")
    found = source(folder)
    assert found.rows == 5 and found.vocab == 30 and [p.dtype for p in found.parts] == ["float32", "float16"]
    x = inputs.make_logits("file:mine", 5, 30, torch.float32, seed=4, files=[found])
    every = torch.cat([first, second.float()])
    assert torch.equal(x, every[logits_files.row_order(5, 5, 4)])


def test_file_logits_on_a_gpu(gpu):
    """Read on the host, uploaded to the device (the real GPU, else the simulated one); the same figures."""
    found = source(EXAMPLE)
    x = inputs.make_logits("file:mine", 48, found.vocab, torch.float16, seed=2, files=[found], device=gpu)
    host = inputs.make_logits("file:mine", 48, found.vocab, torch.float16, seed=2, files=[found])
    assert x.device.type == "cuda" and x.dtype == torch.float16 and torch.equal(x.cpu(), host)
    assert logits_shape.shape_of(x) == pytest.approx(logits_shape.shape_of(host))


def test_the_vocab_must_be_the_files():
    found = source(EXAMPLE)
    with pytest.raises(ValueError, match="has V 16384, not 1000"):
        inputs.make_logits("file:mine", 1, 1000, torch.float32, files=[found])
    with pytest.raises(KeyError, match=r"names no \[inputs.files\] entry"):
        inputs.make_logits("file:other", 1, 16384, torch.float32, files=[found])


def test_a_file_changed_after_loading_is_one_clear_error(tmp_path):
    torch.save(torch.randn(4, 10), tmp_path / "x.pt")
    found = source(tmp_path / "x.pt")
    torch.save(torch.randn(4, 12), tmp_path / "x.pt")
    with pytest.raises(LogitsFileError, match="changed since the scenario was loaded"):
        inputs.make_logits("file:mine", 2, 10, torch.float32, files=[found])


def test_a_changed_file_is_other_settings(tmp_path):
    """The files' digest is in the run's settings: `--resume` refuses a run whose logits changed."""
    from perfsuite.results import run_dir

    torch.save(torch.ones(2, 4), tmp_path / "x.pt")
    path = scenario_with(tmp_path, 'mine = "x.pt"')
    before = run_dir.fingerprint(run_dir.settings_of(scenario.load(path), "cpu"))
    assert before == run_dir.fingerprint(run_dir.settings_of(scenario.load(path), "cpu"))
    torch.save(torch.zeros(2, 4), tmp_path / "x.pt")
    assert run_dir.fingerprint(run_dir.settings_of(scenario.load(path), "cpu")) != before


def test_the_memory_check_knows_the_files_size(tmp_path, monkeypatch):
    torch.save(torch.randn(4, 1000), tmp_path / "new.pt")
    with open(tmp_path / "old.pt", "wb") as f:  # an old-format .pt cannot be mapped: read whole
        torch.save(torch.randn(4, 1000), f, _use_new_zipfile_serialization=False)
    mapped, whole = source(tmp_path / "new.pt"), source(tmp_path / "old.pt")
    assert not mapped.parts[0].read_whole and whole.parts[0].read_whole
    need = inputs.host_bytes_needed("file:mine", 2, [mapped])
    assert need == 2 * 1000 * (4 + 8) and inputs.host_bytes_needed("gaussian", 2) == 0
    assert inputs.host_bytes_needed("file:mine", 2, [whole]) == need + 4 * 1000 * 4
    monkeypatch.setattr(memory, "available_bytes", lambda device: 30_000)
    assert memory.fits(10_000, torch.device("cpu")) is None
    assert "GiB of cpu memory" in memory.fits(10_000, torch.device("cpu"), host_bytes=need)
    assert "GiB of cpu memory" in memory.fits(10, torch.device("cuda"), host_bytes=200_000)


def test_a_measured_case_on_a_file_records_the_logits_shape(tmp_path):
    from perfsuite.cases.kernel.kernel_runner import KernelRunner
    from perfsuite.measure.device import detect
    from perfsuite.measure.environment import environment

    logits = torch.randn(8, 300)
    logits[:, 7] = logits.amax(-1) + 1  # a confident token
    torch.save(logits, tmp_path / "x.pt")
    path = scenario_with(
        tmp_path,
        'mine = "x.pt"',
        'variants = ["full_softmax", "identity"]\ndtypes = ["float32"]\nbatch = [8]\ntopk = [2]\n'
        'logits = ["file:mine"]\n[timing]\nwarmup = 1\nreps = 3\nmax_seconds = 0.05',
    )
    s = scenario.load(path)
    group = scenario.expand(s)
    info = detect("cpu")
    rows = KernelRunner(info, environment(info, s.name)).run_in_turn(group)
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[1]["verdict"] == "pass"
    expected = logits_shape.shape_of(logits)
    for row in rows:
        assert row["logits"] == "file:mine" and row["vocab"] == 300
        assert row["top1_prob"] == pytest.approx(expected["top1_prob"])
        assert row["entropy_nats"] == pytest.approx(expected["entropy_nats"])
        assert row["topk_tie_rows"] == 0.0


# ---------------------------------------------------------------- bad files: one line naming the file


NOT_TORCH = "not a tensor file torch.load reads with weights_only=True"
BAD = {  # case: (the files written into bad/, the [inputs.files] entry if not "bad/<the last file>", message)
    "missing": ({}, '"bad/nothing.pt"', "no such file or folder"),
    "suffix": ({"x.bin": b"1234"}, None, "unsupported file type '.bin'"),
    "garbage_pt": ({"x.pt": b"not a torch file"}, None, NOT_TORCH),
    "pickle_pt": ({"x.pt": pickle.dumps(Path("/etc"), protocol=2)}, None, NOT_TORCH),  # weights_only refuses
    "list_pt": ({"x.pt": [1, 2, 3]}, None, "holds a list, expected a tensor"),
    "3d": ({"x.pt": torch.zeros(2, 3, 4)}, None, "a 3-D tensor of shape [2, 3, 4]; expected [rows, V]"),
    "int": ({"x.npy": np.zeros((2, 3), dtype=np.int64)}, None, "dtype int64; expected floating-point logits"),
    "empty": ({"x.pt": torch.zeros(0, 10)}, None, "an empty tensor of shape [0, 10]"),
    "garbage_npy": ({"x.npy": b"\x93NUMPY garbage"}, None, "not a .npy file numpy reads"),
    "garbage_safetensors": ({"x.safetensors": b"\xff" * 16}, None, "not a .safetensors file"),
    "several_tensors": (
        {"x.safetensors": {"a": torch.zeros(2, 3), "b": torch.zeros(2, 3)}},
        None,
        "holds 2 tensors (a, b); name one",
    ),
    "key_not_found": (
        {"x.safetensors": {"a": torch.zeros(2, 3)}},
        '{ path = "bad/x.safetensors", tensor = "logits" }',
        "no tensor 'logits'; it holds: a",
    ),
    "mismatched_folder": (
        {"a.pt": torch.zeros(2, 3), "b.npy": np.zeros((2, 4), dtype=np.float32)},
        '"bad"',
        "V 4, but a.pt has V 3: the files of a folder share one V",
    ),
    "empty_folder": ({}, '"bad"', "a folder without .pt, .pth, .npy or .safetensors files"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_naming_it(tmp_path, case):
    files, entry, expected = BAD[case]
    (tmp_path / "bad").mkdir()
    for name, content in files.items():
        path = tmp_path / "bad" / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif path.suffix == ".npy":
            np.save(path, content)
        elif path.suffix == ".safetensors":
            save_file(content, path)
        else:
            torch.save(content, path)
    named = list(files)[-1] if files else entry.strip('"')
    path = scenario_with(tmp_path, "mine = " + (entry or f'"bad/{named}"'))
    with pytest.raises(ScenarioError) as info:
        scenario.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: [inputs].files.mine: "), message
    assert named in message and expected in message and "\n" not in message, message


def test_without_safetensors_the_error_says_to_install_it(tmp_path, monkeypatch):
    save_file({"a": torch.zeros(2, 3)}, tmp_path / "x.safetensors")
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors raises ImportError
    with pytest.raises(LogitsFileError, match=r"x\.safetensors: install safetensors"):
        source(tmp_path / "x.safetensors")


def test_the_cli_refuses_a_bad_file_with_exit_2_and_one_line(tmp_path):
    (tmp_path / "x.pt").write_bytes(b"garbage")
    path = scenario_with(tmp_path, 'mine = "x.pt"')
    proc = subprocess.run(
        [sys.executable, "-m", "perfsuite", "list", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "x.pt: not a tensor file" in lines[0], proc.stderr
