"""Scenario files: the shipped ones load, expansion is right, and every bad file gets one clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite import scenario
from perfsuite.scenario import ScenarioError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["quick", "models"])
def test_shipped_scenarios_load(name):
    s = scenario.load(ROOT / "scenarios" / f"{name}.toml")
    cases = scenario.expand(s)
    assert s.name == name and cases
    assert len({c.case_id for c in cases}) == len(cases)


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
