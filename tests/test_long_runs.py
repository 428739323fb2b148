"""Long sweeps survive broken cases: a variant that raises, one that runs out of memory, a broken model.

Every case becomes a row in results.jsonl as it finishes, the sweep goes on, and `--resume` retries only
the errors.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from perfsuite import cli, variants
from perfsuite.variants.base import Variant

SCENARIO = """
name = "robust"
device = "cpu"  # CPU expectations (host OOM, no graph path) on any machine
[[sweep]]
variants = ["crashing", "oom", "host_oom", "bad_model", "identity"]
paths = ["eager"]
dtypes = ["float32"]
vocab = [300]
batch = [2, 4]
topk = [1]
logits = ["gaussian"]
[timing]
warmup = 0
reps = 3
max_seconds = 0.01
"""


def _raising(error: Exception):
    def select(logits: torch.Tensor, k: int):
        raise error

    return select


def _broken_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype):
    raise ValueError("traffic model has no formula for this shape")


@pytest.fixture
def fragile_variants(monkeypatch):
    registry = {name: variants.get(name) for name in variants.names()}
    identity = variants.get("identity")
    failures = {
        "crashing": RuntimeError("illegal value in kernel\nsecond line"),
        "oom": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB"),
        "host_oom": MemoryError(),
    }
    for name, error in failures.items():
        registry[name] = Variant(name, _raising(error), "exact", identity.traffic, name)
    registry["bad_model"] = Variant("bad_model", identity.select, "exact", _broken_traffic, "bad model")
    monkeypatch.setattr(variants, "_REGISTRY", registry)


def test_crashes_and_ooms_are_recorded_and_the_sweep_goes_on(tmp_path, fragile_variants):
    scenario = tmp_path / "robust.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress"]) == 0
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 10 and len({r["case_id"] for r in lines}) == 10  # a row per case, as it finished
    frame = pd.read_csv(out / "results.csv").set_index(["variant", "batch"])
    for batch in (2, 4):
        assert frame.loc[("crashing", batch), "status"] == "error"
        assert frame.loc[("crashing", batch), "reason"] == "RuntimeError: illegal value in kernel"
        assert frame.loc[("oom", batch), "status"] == "skipped"
        assert frame.loc[("oom", batch), "reason"].startswith("out of memory: OutOfMemoryError: CUDA out of")
        assert frame.loc[("host_oom", batch), "status"] == "skipped"
        assert frame.loc[("host_oom", batch), "reason"].startswith("out of memory: MemoryError")
        assert frame.loc[("bad_model", batch), "status"] == "error"
        assert "traffic model has no formula" in frame.loc[("bad_model", batch), "reason"]
        assert frame.loc[("identity", batch), "status"] == "ok"
        assert frame.loc[("identity", batch), "median_us"] > 0
    assert (out / "report.html").exists() and (out / "edge_cases.csv").exists()

    assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress", "--resume"]) == 0
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    kept, retried = lines[:6], lines[6:]  # errors are dropped and run again; the rest is kept as it was
    assert {r["variant"] for r in kept} == {"oom", "host_oom", "identity"}
    assert {r["variant"] for r in retried} == {"crashing", "bad_model"} and len(retried) == 4
    again = pd.read_csv(out / "results.csv")
    assert len(again) == 10 and again["case_id"].is_unique
