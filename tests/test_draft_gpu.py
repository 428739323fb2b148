"""The draft loop on a GPU: one captured graph per batch size, graph replay = eager bit for bit, a clear
capture failure, the graph cache's cap, and the draft rows on the graph path (SGLang's topk-1 fast path
captured, the head's bf16 logits handed to the selector, an engine selector writing into preallocated
outputs inside the graph, the device time from replays of captured cycles within the backend's unroll
cap). Without a GPU they run on the simulated H200 (the `gpu` fixture), on smaller vocabularies."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support import HAS_GPU

from perfsuite import variants
from perfsuite.cases.draft import DraftHead, DraftLoop, GraphCache, HeadConfig, LoopConfig, expand_draft
from perfsuite.cases.draft.consumer import identical
from perfsuite.cases.draft.draft_runner import FAST_PATH, run
from perfsuite.cases.draft.head import inputs_for
from perfsuite.core.kinds import KindRun
from perfsuite.measure.device import detect
from perfsuite.measure.execution import GraphCaptureError
from perfsuite.scenario import load as scenario
from perfsuite.variants import external

pytestmark = pytest.mark.usefixtures("gpu")
GPU = torch.device("cuda:0")
VOCAB = 32000 if HAS_GPU else 2048  # the simulated GPU runs Triton in its interpreter
TORCH_VARIANTS = ("full_softmax", "argmax_ones", "identity")


def _runnable() -> list[str]:
    """The variants that run here at any topk (an argmax, `max_k = 1`, is left out: these loops draft k 4)."""
    found = [variants.get(n) for n in variants.names()]
    return [v.name for v in found if v.available(GPU) is None and v.max_k is None]


def _head(dtype: str = "bfloat16", vocab: int = VOCAB, logits: str = "head") -> DraftHead:
    return DraftHead(HeadConfig(vocab, 128, dtype, logits=logits), GPU)


# the simulated GPU interprets Triton (seconds a launch): one Triton variant stands for the three there
@pytest.mark.parametrize("name", _runnable() if HAS_GPU else [*TORCH_VARIANTS, "triton_auto"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_graph_replay_equals_eager_bit_for_bit(name, dtype):
    head, config = _head(dtype), LoopConfig(4, 3, 9)
    loop = DraftLoop(head, variants.get(name).select, config)
    cache = GraphCache(GPU)
    try:
        for batch in (1, 8) if HAS_GPU else (1, 3):
            graph = cache.get(loop, batch, ("t", name))
            assert graph.tokens.shape == (batch, config.num_draft_tokens), "extend over n tokens"
            for tokens, hidden in inputs_for(head.config, batch, config.extend_tokens, 3, GPU):
                eager, replayed = loop.cycle(tokens, hidden), graph(tokens, hidden)
                assert identical([replayed], [eager]), (name, dtype, batch)
    finally:
        cache.clear()


def test_one_graph_per_batch_size_and_the_cache_cap():
    head, config = _head(), LoopConfig(1, 3, 4)
    loop = DraftLoop(head, variants.get("identity").select, config)
    cache = GraphCache(GPU, max_graphs=2)
    try:
        g1 = cache.get(loop, 1, "k")
        assert cache.get(loop, 1, "k") is g1
        g4 = cache.get(loop, 4, "k")
        assert g4 is not g1 and len(cache.graphs) == 2
        cache.get(loop, 1, "k")  # g1 most recently used: g4 goes next
        cache.get(loop, 16, "k")
        assert len(cache.graphs) == 2 and (4, "k") not in cache.graphs and (1, "k") in cache.graphs
        # the graphs share one pool and still replay correctly in any order
        for batch in (16, 1, 16):
            tokens, hidden = inputs_for(head.config, batch, config.extend_tokens, 1, GPU)[0]
            assert identical([cache.get(loop, batch, "k")(tokens, hidden)], [loop.cycle(tokens, hidden)])
    finally:
        cache.clear()
    assert len(cache.graphs) == 0


def test_capture_failure_is_a_clear_graph_capture_error():
    def syncs(logits, k):
        if logits.sum().item() > 1e30:  # a host sync: not capturable
            return None
        return variants.get("identity").select(logits, k)

    loop = DraftLoop(_head(vocab=1024), syncs, LoopConfig(2, 2, 4))
    cache = GraphCache(GPU)
    with pytest.raises(GraphCaptureError, match=r"draft graph capture failed \(batch 2\): "):
        cache.get(loop, 2, "sync")
    assert len(cache.graphs) == 0
    cache.clear()
    # the device is still usable afterwards
    ok = DraftLoop(_head(vocab=1024), variants.get("identity").select, LoopConfig(2, 2, 4))
    tokens, hidden = inputs_for(ok.head.config, 2, 3, 1, GPU)[0]
    assert ok.cycle(tokens, hidden).draft_tokens.shape == (2, 3)


PREALLOCATED = "selectors_for_tests:preallocated_topk"


def test_draft_rows_on_the_graph_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "data"))
    monkeypatch.setattr(external, "_LOADED", {})
    s = scenario.parse(
        {
            "name": "g",
            "sweep": [],
            "draft": [
                {
                    "variants": list(TORCH_VARIANTS),
                    "paths": ["eager", "graph"],
                    "dtypes": "bfloat16",
                    "vocab": VOCAB,
                    "hidden": 128,
                    "batch": [1, 8] if HAS_GPU else [2],
                    "topk": [1, 4] if HAS_GPU else [4],
                    "num_steps": 3,
                    "num_draft_tokens": "auto" if HAS_GPU else 5,  # the extend covers n tokens
                    "logits": "head",
                    "cycles": 4,
                    "max_graphs": 3,
                },
                {  # the fast path in a graph, bf16 logits straight to the selector, an engine selector
                    "variants": ["identity", PREALLOCATED],
                    "paths": ["eager", "graph"],
                    "dtypes": "bfloat16",
                    "upcast": "none",
                    "vocab": 512,
                    "hidden": 128,
                    "batch": 2,
                    "topk": 1,
                    "num_steps": 3,
                    "logits": "head",
                    "cycles": 2,
                    "selection_share": False,
                },
            ],
            # the simulated GPU replays a timing graph's copies on the host: two cycles a graph there
            "timing": {"warmup": 2, "reps": 10, "max_seconds": 0.2}
            if HAS_GPU
            else {"warmup": 1, "reps": 3, "graph_unroll": 2},
        },
        "g.toml",
    )
    info = detect("cuda:0")
    context = KindRun(s, info, {"backend": info.backend, "device": info.name}, Path(), progress=False)
    rows = list(run(expand_draft(s), context))
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows if r["status"] != "ok"]
    graph = [r for r in rows if r["path"] == "graph"]
    assert all(r["bitexact_eager"] is True for r in graph)
    assert all(r["graphs_cached"] <= 3 for r in graph)
    assert all(r["accept"] == "geometric:0.8" and r["accept_mean"] < r["num_draft_tokens"] for r in graph), (
        "captured with the extend selecting at drawn accept lengths (the default)"
    )
    fast = [r for r in graph if r["upcast"] == "none"]
    assert len(fast) == 2 and all(r["tree_build"] == FAST_PATH for r in fast)
    assert all(r["selector_dtype"] == "bfloat16" and r["tok_diff_f64"] == 0 for r in fast)
    engine = next(r for r in fast if r["variant"] == PREALLOCATED)
    assert engine["outputs_copied"] is True and engine["score_relerr_f64"] < 1e-2
    for r in graph:
        eager = next(
            e
            for e in rows
            if e["path"] == "eager" and all(e[k] == r[k] for k in ("variant", "batch", "topk", "upcast"))
        )
        assert r["launches_per_cycle"] < eager["launches_per_cycle"]
        # replays of captured cycles: the simulated GPU's 2 asked; a GPU's 20, within CUDA's cap (64 // 3
        # steps = 21), capped at ROCm's (8 // 3 = 2)
        unroll = 20 if HAS_GPU and info.backend == "cuda" else 2
        assert r["device_timing"].split(" (")[0] == f"graph replay x{unroll}" and r["device_median_us"] > 0
        assert eager["device_timing"].startswith("device events")


def test_draft_timing_graph_unroll_within_the_cap():
    """20 cycles asked of 5 steps each: CUDA's cap of 64 calls a graph binds at 12 cycles (ROCm's 8 at 1)."""
    draft = {"variants": ["identity"], "paths": ["graph"], "dtypes": "bfloat16", "logits": "head", "topk": 1}
    draft.update(vocab=64, hidden=8, batch=1, num_steps=5, cycles=1, selection_share=False, kernels=False)
    timing = {"warmup": 0, "reps": 1, "l2": "hot", "graph_unroll": 20}
    s = scenario.parse({"name": "u", "sweep": [], "draft": [draft], "timing": timing}, "u.toml")
    info = detect("cuda:0")
    context = KindRun(s, info, {"backend": info.backend, "device": info.name}, Path(), progress=False)
    (row,) = run(expand_draft(s), context)
    assert row["status"] == "ok", row["reason"]
    assert row["device_timing"].split(" (")[0] == f"graph replay x{12 if info.backend == 'cuda' else 1}"
