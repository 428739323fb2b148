"""Where the draft extend selects: at each sequence's last accepted token, accept lengths drawn per sequence
from a stated, seeded rule (`[draft] accept`: geometric:P by default, uniform, or all = today's last
position). The selection row follows the lengths, the rows record them, the same seed draws the same ones,
`all` keeps today's trees bit for bit, and the graph path still captures (no host sync) with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from perfsuite import variants
from perfsuite.cases.draft import DraftHead, DraftLoop, GraphCache, HeadConfig, LoopConfig
from perfsuite.cases.draft.consumer import identical
from perfsuite.cases.draft.draft_runner import REFERENCE, DraftRunner, reference_select, run
from perfsuite.cases.draft.draft_table import draft_sweeps, expand_draft
from perfsuite.cases.draft.head import inputs_for
from perfsuite.cases.draft.loop import DEFAULT_ACCEPT, DraftTree, accept_lengths, accept_name, extend_index
from perfsuite.core.kinds import KindRun
from perfsuite.measure.device import detect
from perfsuite.scenario import load as scenario

GEOMETRIC = LoopConfig(2, 3, 6, accept="geometric:0.5")


def _head(dtype: str = "float32", vocab: int = 256, hidden: int = 16, device: str = "cpu") -> DraftHead:
    return DraftHead(HeadConfig(vocab, hidden, dtype), device)


def _recording(seen: list[torch.Tensor]):
    select = variants.get("identity").select

    def record(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(logits.clone())
        return select(logits, k)

    return record


# ------------------------------------------------------------------------------------ the rules


def test_rules_parse_to_one_spelling_and_bad_ones_are_refused():
    assert accept_name("all") == "all" and accept_name("uniform") == "uniform"
    assert accept_name("geometric:0.25") == "geometric:0.25" and accept_name("geometric:1") == "geometric:1"
    assert accept_name("geometric:0.80") == "geometric:0.8" == DEFAULT_ACCEPT
    for bad in ("most", "geometric", "geometric:1.5", "geometric:x", "geometric:nan", "uniform:3"):
        with pytest.raises(ValueError, match="allowed: all, uniform, geometric:P"):
            accept_name(bad)


def test_the_same_seed_draws_the_same_lengths_within_the_tree():
    for rule in ("uniform", "geometric:0.5", "geometric:0.8"):
        config = LoopConfig(4, 3, 13, accept=rule)
        first = accept_lengths(config, 16, 8, seed=3)
        again = accept_lengths(config, 16, 8, seed=3)
        other = accept_lengths(config, 16, 8, seed=4)
        assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True)), rule
        assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True)), rule
        flat = torch.cat(first)
        assert flat.dtype == torch.int64 and flat.device.type == "cpu"
        assert int(flat.min()) >= 1 and int(flat.max()) <= config.max_accept == 4, "num_steps + 1"
        assert len(set(flat.tolist())) > 1, rule
    assert LoopConfig(1, 5, 3).max_accept == 3, "within the extend"
    everything = accept_lengths(LoopConfig(4, 3, 13, accept="all"), 4, 2)
    assert all(t.tolist() == [13] * 4 for t in everything), "all: every extend token"
    edges = {p: torch.cat(accept_lengths(LoopConfig(1, 3, 4, accept=f"geometric:{p}"), 8, 4)) for p in (0, 1)}
    assert set(edges[0].tolist()) == {1} and set(edges[1].tolist()) == {4}


def test_geometric_mean_is_the_stated_one():
    config = LoopConfig(1, 3, 4, accept="geometric:0.8")
    mean = float(torch.cat(accept_lengths(config, 1000, 20)).double().mean())
    assert abs(mean - (1 - 0.8**4) / (1 - 0.8)) < 0.03, mean  # 2.952


def test_extend_index_is_sglangs_select_index():
    assert extend_index(torch.tensor([1, 3, 2]), 4).tolist() == [0, 6, 9]


# ------------------------------------------------------------------------------------ the loop


def test_the_extend_selects_at_each_sequences_last_accepted_token():
    head, config, batch = _head(), GEOMETRIC, 4
    (tokens, hidden), lengths = inputs_for(head.config, batch, 6, 1, "cpu")[0], torch.tensor([1, 4, 2, 3])
    seen: list[torch.Tensor] = []
    loop = DraftLoop(head, _recording(seen), config)
    loop.cycle(tokens, hidden, extend_index(lengths, config.extend_tokens))
    flat = head.step(tokens.reshape(-1), hidden.reshape(batch * 6, -1)).view(batch, 6, -1)
    rows = torch.arange(batch)
    direct = head.logits(flat[rows, lengths - 1]).float()  # one head call over the B selected rows
    last = head.logits(flat[:, -1]).float()
    for b, n in enumerate(lengths.tolist()):
        assert torch.equal(seen[0][b], direct[b]), f"sequence {b}: the head's logits at position {n - 1}"
        assert not torch.equal(seen[0][b], last[b]), f"sequence {b}: not the last position"


def test_the_decode_starts_from_the_selected_hidden_state():
    head, config = _head(), GEOMETRIC
    tokens, hidden = inputs_for(head.config, 2, 6, 1, "cpu")[0]
    index = extend_index(torch.tensor([2, 1]), 6)
    loop = DraftLoop(head, variants.get("identity").select, config)
    _, _, start = loop.extend(tokens, hidden, index)
    flat = head.step(tokens.reshape(-1), hidden.reshape(12, -1))
    assert torch.equal(start, flat[[1, 6]])
    assert not identical([loop.cycle(tokens, hidden, index)], [loop.cycle(tokens, hidden)])


class _Today(DraftLoop):
    """The extend as it was before accept lengths: the selection at the last position, verbatim."""

    def extend(self, tokens, target_hidden, index=None):
        batch, length = tokens.shape
        flat = self.head.step(tokens.reshape(-1), target_hidden.reshape(batch * length, -1))
        last = flat.view(batch, length, -1)[:, -1]
        topk_p, topk_index = self.select(self.selector_logits(last), self.config.topk)
        return topk_p, topk_index, last


@pytest.mark.parametrize(("k", "steps", "n"), [(1, 3, 4), (4, 3, 13), (1, 5, 3)])
def test_all_reproduces_todays_trees_bit_for_bit(k, steps, n):
    head = _head("bfloat16", vocab=512, hidden=32)
    config = LoopConfig(k, steps, n, accept="all")
    select = variants.get("full_softmax").select
    loop, today = DraftLoop(head, select, config), _Today(head, select, config)
    lengths = accept_lengths(config, 3, 2)
    for (tokens, hidden), n_acc in zip(inputs_for(head.config, 3, n, 2, "cpu"), lengths, strict=True):
        old = today.cycle(tokens, hidden)
        assert identical([loop.cycle(tokens, hidden)], [old])
        assert identical([loop.cycle(tokens, hidden, extend_index(n_acc, n))], [old]), "the gather too"


# ------------------------------------------------------------------------------------ table and rows


def _scenario(draft: dict | list, **top) -> scenario.Scenario:
    return scenario.parse({"name": "t", "sweep": [], "draft": draft, **top}, "scen/t.toml")


def test_the_table_takes_rules_and_only_non_default_ones_enter_the_case_id():
    s = _scenario({"variants": "identity", "dtypes": "fp32", "batch": 2, "topk": 2, "logits": "head"})
    (default,) = expand_draft(s)
    assert default.loop.accept == DEFAULT_ACCEPT and default.case_id.endswith("/head/fp32"), "ids as before"
    s = _scenario({**s.extra["draft"], "accept": ["all", "geometric:0.50", "uniform", "geometric:0.8"]})
    ids = {c.loop.accept: c.case_id for c in expand_draft(s)}
    assert set(ids) == {"all", "geometric:0.5", "uniform", DEFAULT_ACCEPT}
    assert ids["all"].endswith("/fp32/accept-all") and ids[DEFAULT_ACCEPT] == default.case_id
    assert ids["geometric:0.5"].endswith("/accept-geometric:0.5")
    with pytest.raises(scenario.ScenarioError, match=r"\[draft\]\.accept: unknown accept rule 'most'"):
        draft_sweeps(_scenario({"accept": "most"}))
    with pytest.raises(scenario.ScenarioError, match=r"\[draft\]\.accept: expected one or a non-empty"):
        draft_sweeps(_scenario({"accept": []}))


_ROWS_DRAFT = {
    "variants": ["full_softmax", "identity"],
    "paths": "eager",
    "dtypes": "float32",
    "vocab": 256,
    "hidden": 16,
    "batch": 3,
    "topk": [1, 2],
    "num_steps": 3,
    "logits": "head",
    "cycles": 3,
    "accept": ["geometric:0.5", "uniform", "all"],
    "selection_share": False,
    "kernels": False,
}


FAST = {"warmup": 1, "reps": 3, "max_seconds": 0.05, "l2": "hot"}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, object]]:
    """Eager rows (the compile path at accept lengths: test_draft.py's test_compile_path_matches_eager)."""
    s = _scenario(_ROWS_DRAFT, timing=FAST)
    info = detect("cpu")
    context = KindRun(s, info, {"backend": info.backend, "device": info.name}, Path(), progress=False)
    return list(run(expand_draft(s), context))


def _lengths(text: str) -> list[list[int]]:
    return [[int(v) for v in cycle.split(" ")] for cycle in text.split("; ")]


def test_rows_record_the_rule_and_the_lengths_used(rows):
    assert rows and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    for r in rows:
        config = LoopConfig(r["topk"], r["num_steps"], r["num_draft_tokens"], accept=r["accept"])
        drawn = [t.tolist() for t in accept_lengths(config, r["batch"], 3, seed=0)]
        assert _lengths(r["accept_lengths"]) == drawn, "reproducible from the rule and the seed"
        assert r["accept_mean"] == pytest.approx(sum(map(sum, drawn)) / 9)
        assert r["tok_diff_f64"] == 0 and r["pos_diff_f64"] == 0, "references on the same lengths"
    every = {r["accept"]: r["accept_lengths"] for r in rows if r["topk"] == 2}
    assert set(_lengths(every["all"])[0]) == {r["num_draft_tokens"] for r in rows if r["topk"] == 2}
    assert len(set(every["uniform"].replace(";", "").split())) > 1


def test_every_run_of_a_configuration_selects_at_the_recorded_lengths(rows):
    """The case's eager trees and its parity references (full_softmax's, the float64 selection's) are
    direct cycles at the row's lengths, not at the last position."""
    r = next(r for r in rows if r["accept"] == "uniform" and r["topk"] == 2 and r["variant"] == "identity")
    s = _scenario({**_ROWS_DRAFT, "accept": "uniform"}, timing=FAST)
    case = next(c for c in expand_draft(s) if c.case_id == r["case_id"])
    runner = DraftRunner(detect("cpu"), {})
    try:
        runner._configure(case)
        lengths = [torch.tensor(c) for c in _lengths(r["accept_lengths"])]
        n = case.loop.extend_tokens
        assert [i.tolist() for _, _, i in runner.inputs] == [extend_index(x, n).tolist() for x in lengths]
        runner.measure(case)
        for name, select, got in (
            ("identity", variants.get("identity").select, runner.eager["identity"]),
            ("full_softmax", variants.get("full_softmax").select, runner.eager["full_softmax"]),
            ("float64", reference_select, runner.eager[REFERENCE]),
        ):
            loop = DraftLoop(runner.head, select, case.loop)
            direct = [
                loop.cycle(t, h, extend_index(x, n))
                for (t, h, _), x in zip(runner.inputs, lengths, strict=True)
            ]
            last = [loop.cycle(t, h) for t, h, _ in runner.inputs]
            assert identical([t.tree for t in got], direct), name
            assert not identical(direct, last), f"{name}: the lengths move the trees"
    finally:
        runner.close()


# ------------------------------------------------------------------------------------ graph path


@pytest.mark.usefixtures("gpu")
def test_graph_captures_and_replays_with_accept_lengths():
    """On a GPU (the simulated H200 without one: it refuses host syncs, masks and data-dependent shapes
    during capture): one capture, the index a static input, each replay = eager at that cycle's lengths."""
    gpu = torch.device("cuda:0")
    head, config = _head("bfloat16", vocab=1024, hidden=64, device=gpu), LoopConfig(4, 3, 9, accept="uniform")
    loop = DraftLoop(head, variants.get("full_softmax").select, config)
    cache = GraphCache(gpu)
    try:
        graph = cache.get(loop, 3, ("accept", config))
        assert graph.index is not None and graph.index.device.type == "cuda"
        lengths = accept_lengths(config, 3, 3, seed=1)
        assert len({tuple(n.tolist()) for n in lengths}) > 1
        for (tokens, hidden), n in zip(inputs_for(head.config, 3, 9, 3, gpu), lengths, strict=True):
            index = extend_index(n, 9).to(gpu)
            replayed: DraftTree = graph(tokens, hidden, index)
            assert identical([replayed], [loop.cycle(tokens, hidden, index)]), n.tolist()
        with pytest.raises(ValueError, match="takes an index"):
            graph.load(tokens, hidden)
    finally:
        cache.clear()
