"""Scenario files: the shipped ones load, expansion is right, and every bad file gets one clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.scenario import load as scenario
from perfsuite.scenario.load import ScenarioError

ROOT = Path(__file__).resolve().parent.parent


def test_models_sweeps_the_real_vocabularies():
    s = scenario.load(ROOT / "scenarios" / "models.toml")
    main = s.sweeps[0]
    assert {32000, 128256, 129280, 151552, 151936, 163840, 200064, 201088, 248320, 262144} <= set(main.vocab)
    assert min(main.batch) == 1 and max(main.batch) == 256 and set(main.topk) == {1, 4, 8}
    assert {"bfloat16", "float32"} <= set(main.dtypes) and {"eager", "graph"} <= set(main.paths)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_defaults_and_aliases(tmp_path):
    s = scenario.load(write(tmp_path, '[sweep]\ndtypes = ["bf16", "fp32", "bfloat16"]\ntopk = 4\n'))
    assert s.name == "s" and s.sweeps[0].dtypes == ("bfloat16", "float32") and s.sweeps[0].topk == (4,)
    assert s.timing == scenario.Timing() and s.inputs == scenario.Inputs()


def test_expansion_is_the_cross_product_grouped_by_input(tmp_path):
    text = """
[sweep]
variants = ["identity", "full_softmax"]
paths = ["eager"]
dtypes = ["float32"]
vocab = [100, 200]
batch = [1, 2]
topk = [1, 3]
logits = ["gaussian"]
"""
    cases = scenario.expand(scenario.load(write(tmp_path, text)))
    assert len(cases) == 2 * 2 * 2 * 2
    keys = [(c.input_key, c.topk) for c in cases]
    assert keys == sorted(keys)  # cases sharing an input run back to back
    assert cases[0].case_id == "identity/eager/float32/V100/B1/k1/gaussian"


def test_several_sweeps_do_not_repeat_cases(tmp_path):
    text = "[[sweep]]\nvocab = [100]\nbatch = [1]\n[[sweep]]\nvocab = [100, 50]\nbatch = [1]\n"
    cases = scenario.expand(scenario.load(write(tmp_path, text)))
    assert len({c.case_id for c in cases}) == len(cases)
    assert {c.vocab for c in cases} == {50, 100}


BAD = {
    "syntax": ("[sweep\nvocab = [1]", "invalid TOML"),
    "top_key": ("sweeps = 1", "sweeps: unknown key (did you mean 'sweep'?)"),
    "sweep_key": ("[sweep]\nvocabs = [1]", "[sweep].vocabs: unknown key (did you mean 'vocab'?)"),
    "variant": ('[sweep]\nvariants = ["identty"]', "unknown variant 'identty' (did you mean 'identity'?)"),
    "path": ('[sweep]\npaths = ["cuda_graph"]', "[sweep].paths: unknown path 'cuda_graph'"),
    "dtype": ('[sweep]\ndtypes = ["int8"]', "unknown dtype 'int8'"),
    "logits": ('[sweep]\nlogits = ["uniform"]', "unknown logits kind 'uniform'"),
    "vocab0": ("[sweep]\nvocab = [0]", "[sweep].vocab: expected one or a non-empty list of integers >= 1"),
    "vocab_str": ('[sweep]\nvocab = ["32k"]', "[sweep].vocab: expected one or a non-empty list of integers"),
    "batch_neg": ("[sweep]\nbatch = [-1]", "[sweep].batch: expected"),
    "topk_bool": ("[sweep]\ntopk = [true]", "[sweep].topk: expected"),
    "empty": ("[sweep]\ntopk = []", "[sweep].topk: expected one or a non-empty list"),
    "l2": ('[timing]\nl2 = "warm"', "[timing].l2: expected 'cold' or 'hot'"),
    "reps": ("[timing]\nreps = 0", "[timing].reps: expected an integer >= 1"),
    "timing_key": ("[timing]\nrepeats = 3", "[timing].repeats: unknown key"),
    "seed": ('[inputs]\nseed = "x"', "[inputs].seed: expected an integer >= 0"),
    "scale_inf": ("[inputs]\nscale = inf", "[inputs].scale: expected a finite number > 0"),
    "device": ('device = "tpu"', "device: expected 'auto', 'cpu', 'cuda' or 'cuda:N'"),
    "name": ("name = 3", "name: expected a string"),
    "table": ("timing = 3", "[timing]: expected a table"),
    "sweep_item": ("sweep = [1]", "expected a table"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_name_the_file_the_key_and_what_is_allowed(tmp_path, case):
    text, expected = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        scenario.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message.strip()


def test_missing_file():
    with pytest.raises(ScenarioError, match="no such scenario file"):
        scenario.load("/nonexistent/x.toml")


@pytest.mark.parametrize("command", ["list", "run"])
def test_cli_exits_2_with_one_line_and_no_traceback(tmp_path, command):
    path = write(tmp_path, '[sweep]\nvariants = ["fastest"]')
    proc = subprocess.run(
        [sys.executable, "-m", "perfsuite", command, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    allowed = ", ".join(scenario._all_variant_names())
    expected = f"perfsuite: {path}: [sweep].variants: unknown variant 'fastest'; allowed: {allowed}"
    assert proc.stderr.strip() == expected


# ---------------------------------------------------------------- logits files ([inputs.files])


def logits_file(tmp_path: Path, name: str = "x.pt", vocab: int = 64) -> Path:
    import torch

    path = tmp_path / name
    torch.save(torch.randn(4, vocab), path)
    return path


def test_a_sweep_with_a_file_kind_runs_at_the_files_vocab(tmp_path):
    logits_file(tmp_path)
    text = (
        '[inputs.files]\nmine = "x.pt"\n'
        '[[sweep]]\nlogits = ["gaussian", "file:mine"]\nbatch = [2]\n'
        '[[sweep]]\nlogits = ["gaussian"]\nvocab = [100]\nbatch = [2]\n'
    )
    s = scenario.load(write(tmp_path, text))
    assert s.sweeps[0].vocab == (64,) and s.sweeps[1].vocab == (100,)
    assert [f.name for f in s.inputs.files] == ["mine"] and s.inputs.files[0].vocab == 64
    cases = scenario.expand(s)
    assert {(c.logits, c.vocab) for c in cases} == {("gaussian", 64), ("file:mine", 64), ("gaussian", 100)}
    assert any(c.case_id.endswith("/V64/B2/k1/file:mine") for c in cases)


def test_a_file_path_is_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "data").mkdir()
    logits_file(tmp_path / "data")
    path = write(tmp_path, '[inputs.files]\nmine = { path = "data/x.pt" }\n[sweep]\nlogits = ["file:mine"]\n')
    s = scenario.load(path)
    assert Path(s.inputs.files[0].path) == tmp_path / "data" / "x.pt"


FILE_BAD = {
    "vocab": ('vocab = [100]\nlogits = ["file:mine"]', "[sweep].vocab: file:mine has V 64", "give 64"),
    "two_vocabs": ('logits = ["file:mine", "file:wide"]', "[sweep].logits: file:mine has V 64", "V 128"),
    "unknown": ('logits = ["file:yours"]', "'file:yours' names no [inputs.files] entry", "entries: mine"),
    "entry": ('logits = ["file:mine"]\n[inputs.files.mine]\npath = "x.pt"\nkey = 1', 'expected "path"', ""),
}


@pytest.mark.parametrize("case", sorted(FILE_BAD))
def test_file_kinds_are_refused_where_they_cannot_run(tmp_path, case):
    logits_file(tmp_path)
    logits_file(tmp_path, "wide.pt", vocab=128)
    sweep, expected, also = FILE_BAD[case]
    files = '[inputs.files]\nmine = "x.pt"\nwide = "wide.pt"\n' if case != "entry" else ""
    path = write(tmp_path, f"{files}[sweep]\n{sweep}\n")
    with pytest.raises(ScenarioError) as info:
        scenario.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message and also in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('[inputs]\nfiles = "x.pt"', '[inputs].files: expected a table of NAME = "path"'),
        ('[inputs.files]\n"a/b" = "x.pt"', "[inputs].files.a/b: expected a name of letters"),
        ('[inputs.files]\nmine = { path = "x.pt", rows = "1" }', "[inputs].files.mine.rows: unknown key"),
        ('[inputs.files]\nmine = { tensor = "t" }', "[inputs].files.mine: missing path"),
    ],
)
def test_bad_inputs_files_tables(tmp_path, table, expected):
    logits_file(tmp_path)
    path = write(tmp_path, table)
    with pytest.raises(ScenarioError, match=None) as info:
        scenario.load(path)
    assert str(info.value).startswith(f"{path}: ") and expected in str(info.value), str(info.value)
