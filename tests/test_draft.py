"""The draft loop on the CPU: tree shapes and invariants, the loop as SGLang runs it (fp32 logits to the
selector, the topk-1 fast path, the extend over num_draft_tokens, settings SGLang never runs labelled),
selectors swapped in (external ones too), consumer parity and its tie-order / precision split, compile vs
eager, the `[draft]` table's validation, the kind's rows and the report section.

Shapes are tiny (V <= 4096, H <= 64) so the whole file runs in seconds; the Triton variants run under
TRITON_INTERPRET=1 (conftest) at V 256 only, where the interpreter takes a fraction of a second per cycle.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from perfsuite import kernels, variants
from perfsuite.cases.draft import DraftHead, DraftLoop, HeadConfig, LoopConfig, expand_draft
from perfsuite.cases.draft.consumer import compare, orphan_share, split
from perfsuite.cases.draft.draft_runner import (
    CPU_UNIT,
    FAST_PATH,
    ORGANISATION,
    count_kernels,
    reference_select,
    run,
    timing_unroll,
)
from perfsuite.cases.draft.draft_table import draft_sweeps
from perfsuite.cases.draft.head import inputs_for
from perfsuite.cases.draft.loop import accept_lengths
from perfsuite.core.kinds import KindRun
from perfsuite.measure.device import GRAPH_UNROLL_CAP, detect
from perfsuite.report.draft_section import NOT_SGLANG, section
from perfsuite.report.page import render_fragment
from perfsuite.results.columns import of_kind
from perfsuite.scenario import load as scenario
from perfsuite.variants import external
from perfsuite.variants.base import Variant

TORCH_EXACT = ("identity",)
TRITON = ("triton_fused", "triton_split", "triton_auto")
DATA = Path(__file__).parent / "data"  # selectors_for_tests: selectors written the way an engine would


def _head(dtype: str = "float32", logits: str = "head", vocab: int = 512, hidden: int = 32) -> DraftHead:
    return DraftHead(HeadConfig(vocab, hidden, dtype, logits=logits))


def _trees(head: DraftHead, name: str, config: LoopConfig, batch: int = 4, cycles: int = 4, select=None):
    loop = DraftLoop(head, select or variants.get(name).select, config)
    return [loop.cycle(t, h) for t, h in inputs_for(head.config, batch, config.extend_tokens, cycles, "cpu")]


# ------------------------------------------------------------------------------------ loop invariants


@pytest.mark.parametrize(("k", "steps", "n"), [(1, 1, 2), (1, 3, 4), (2, 3, 6), (4, 2, 9), (3, 4, 11)])
def test_tree_shapes_and_gathers(k, steps, n):
    config = LoopConfig(k, steps, n)
    (tree,) = _trees(_head(), "identity", config, batch=3, cycles=1)
    assert tree.all_scores.shape == tree.all_tokens.shape == (3, config.candidates)
    for t in (tree.draft_tokens, tree.positions, tree.scores):
        assert t.shape == (3, n - 1)
    assert tree.parents.shape == (3, config.parents_width)
    assert tree.draft_tokens.dtype == tree.parents.dtype == tree.positions.dtype == torch.int64
    assert tree.scores.dtype == torch.float32
    assert torch.all(tree.positions[:, 1:] > tree.positions[:, :-1]), "positions sorted and distinct"
    assert torch.equal(tree.draft_tokens, tree.all_tokens.gather(1, tree.positions))
    assert torch.equal(tree.scores, tree.all_scores.gather(1, tree.positions))
    # the chosen positions are the best n - 1 scores
    kth_best = tree.all_scores.topk(n - 1, dim=1).values[:, -1:]
    assert torch.all(tree.scores >= kth_best)


def _parent(tree, b: int, position: int, k: int) -> int:
    return -1 if position < k else int(tree.parents[b, position // k])


def test_parents_are_valid_and_scores_are_products_along_the_path():
    """Recompute every scored position's path probability by running the head along its path."""
    head, config = _head(), LoopConfig(2, 3, 6)
    loop = DraftLoop(head, variants.get("identity").select, config)
    tokens, hidden = inputs_for(head.config, 2, config.extend_tokens, 1, "cpu")[0]
    tree = loop.cycle(tokens, hidden)
    _, _, start = loop.extend(tokens, hidden)
    k = config.topk
    assert torch.all(tree.parents[:, 0] == -1)
    for b in range(2):
        for position in range(config.candidates):
            path = [position]
            while (parent := _parent(tree, b, path[-1], k)) >= 0:
                assert parent < path[-1], "a parent is scored before its child"
                path.append(parent)
            level = 0 if position < k else 1 + (position - k) // (k * k)
            assert len(path) == level + 1, "one ancestor per tree level"
            h, expected = start[b : b + 1], 1.0
            for depth, node in enumerate(reversed(path)):
                if depth:
                    h = head.step(tree.all_tokens[b, path[len(path) - depth]].view(1), h)
                probs = torch.softmax(head.logits(h).double(), dim=-1)[0]
                expected *= float(probs[tree.all_tokens[b, node]])
            assert tree.all_scores[b, position].item() == pytest.approx(expected, rel=1e-4)


def test_step_zero_is_the_extend_selection():
    head, config = _head(), LoopConfig(3, 2, 5)
    loop = DraftLoop(head, variants.get("full_softmax").select, config)
    tokens, hidden = inputs_for(head.config, 2, config.extend_tokens, 1, "cpu")[0]
    topk_p, topk_index, _ = loop.extend(tokens, hidden)
    tree = loop.cycle(tokens, hidden)
    assert torch.equal(tree.all_tokens[:, :3], topk_index)
    assert torch.equal(tree.all_scores[:, :3], topk_p)


def test_bad_tree_is_refused():
    with pytest.raises(ValueError, match="exceeds the 3 scored positions"):
        DraftLoop(_head(), variants.get("identity").select, LoopConfig(1, 3, 5))


# ------------------------------------------------------------------------------------ selectors swapped in


@pytest.mark.parametrize("name", [*TORCH_EXACT, *TRITON])
def test_exact_variants_give_full_softmax_tokens_on_fp32(name):
    reason = variants.get(name).available(torch.device("cpu"))
    if reason:
        pytest.skip(reason)
    head = _head(vocab=256, hidden=16)
    for config in (LoopConfig(1, 3, 4), LoopConfig(2, 3, 6)):
        cycles = 1 if name in TRITON else 4  # the interpreter takes seconds a cycle
        ours, base = _trees(head, name, config, 2, cycles), _trees(head, "full_softmax", config, 2, cycles)
        figures = compare(ours, base, "base")
        assert figures["tok_diff_base"] == figures["parent_diff_base"] == figures["pos_diff_base"] == 0
        assert figures["score_relerr_base"] < 1e-5


def test_argmax_ones_keeps_the_tokens_and_changes_the_scores_at_topk_1():
    head, config = _head(), LoopConfig(1, 3, 4)
    ones, base = _trees(head, "argmax_ones", config), _trees(head, "full_softmax", config)
    figures = compare(ones, base, "base")
    assert figures["tok_diff_base"] == figures["parent_diff_base"] == figures["pos_diff_base"] == 0
    assert all(torch.all(t.scores == 1.0) for t in ones)
    assert all(torch.all(t.scores < 1.0) for t in base)
    assert figures["score_relerr_base"] > 10


def test_argmax_ones_changes_the_tree_at_topk_above_1():
    """Every path score is 1.0, so the k*k candidate choice and the organisation pick among ties."""
    head, config = _head(), LoopConfig(4, 3, 9)
    figures = compare(_trees(head, "argmax_ones", config), _trees(head, "full_softmax", config), "base")
    assert figures["tok_diff_base"] > 0.5
    assert figures["parent_diff_base"] > 0.5


def test_argmax_ones_breaks_the_tree_at_topk_1_with_fewer_draft_tokens_than_steps():
    """All path scores 1.0: the organisation's top-(n-1) picks among ties, not the chain's prefix."""
    head = _head()
    config = LoopConfig(1, 5, 3)
    ones, base = _trees(head, "argmax_ones", config), _trees(head, "full_softmax", config)
    assert all(torch.equal(t.positions, torch.tensor([[0, 1]] * 4)) for t in base), "the chain's prefix"
    assert orphan_share(base, 1) == 0
    figures = compare(ones, base, "base")
    # which tied positions torch.topk returns is unspecified; on this CPU build it is not the prefix
    assert figures["pos_diff_base"] > 0 and figures["tok_diff_base"] > 0
    assert orphan_share(ones, 1) > 0
    all_steps = LoopConfig(1, 5, 6)  # every position drafted: only the scores differ
    assert (
        compare(_trees(head, "argmax_ones", all_steps), _trees(head, "full_softmax", all_steps), "b")[
            "tok_diff_b"
        ]
        == 0
    )


def _traced(head: DraftHead, select, config: LoopConfig, batch: int = 8, cycles: int = 8):
    loop = DraftLoop(head, select, config)
    return [
        loop.cycle_traced(t, h)
        for t, h in inputs_for(head.config, batch, config.extend_tokens, cycles, "cpu")
    ]


def test_bf16_near_ties_change_draft_tokens_only_without_the_fp32_upcast():
    """SGLang hands the draft step fp32 logits: there full_softmax keeps the logits' order. Handed the
    head's bf16 logits (an engine without upcast), bf16 softmax rounding picks other tokens: precision."""
    head = _head("bfloat16", "near_ties", vocab=4096, hidden=64)
    for upcast in (True, False):
        config = LoopConfig(1, 3, 4, upcast)
        base = _traced(head, variants.get("full_softmax").select, config)
        ref = _traced(head, reference_select, config)
        ones = _traced(head, variants.get("argmax_ones").select, config)
        exact = _traced(head, variants.get("identity").select, config)
        trees = {name: [t.tree for t in run] for name, run in (("base", base), ("ref", ref), ("ones", ones))}
        exact_trees = [t.tree for t in exact]
        assert compare(trees["ones"], exact_trees, "x")["tok_diff_x"] == 0, "argmax = exact top-1 at k=1"
        assert compare(exact_trees, trees["ref"], "f64")["tok_diff_f64"] == 0
        rounding = compare(trees["base"], trees["ref"], "f64")["tok_diff_f64"]
        parts = split(base, ref, config, "f64")
        if upcast:  # SGLang's draft step: no bf16 softmax rounding
            assert rounding == 0 and compare(exact_trees, trees["base"], "b")["tok_diff_b"] == 0
            assert parts == {"tie_diff_f64": 0, "precision_diff_f64": 0}
        else:
            assert rounding > 0.05, "bf16 softmax rounding picks other tokens: values, never a tie"
            assert compare(exact_trees, trees["base"], "b")["tok_diff_b"] > 0.05
            assert parts["tie_diff_f64"] == 0 and parts["precision_diff_f64"] >= rounding


def _highest_index_ties(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """identity's probabilities with ties broken towards the highest index (a deliberate tie rule)."""
    vocab = logits.shape[-1]
    topk_p, flipped = variants.get("identity").select(logits.flip(-1).contiguous(), k)
    return topk_p, vocab - 1 - flipped


def test_parity_split_tells_tie_order_from_precision():
    """Exact twin logits: the highest-index rule parts from identity's by ties only; argmax_ones' 1.0
    scores part by values; a selector against itself does not differ at all. A difference is classed by
    where the trees first part (argmax_ones on exact twins would part by tie order first)."""
    head, config = _head(logits="ties", vocab=256, hidden=16), LoopConfig(2, 3, 6)
    exact = _traced(head, variants.get("identity").select, config, 4, 4)
    high = _traced(head, _highest_index_ties, config, 4, 4)
    differs = compare([t.tree for t in high], [t.tree for t in exact], "x")
    assert differs["tok_diff_x"] > 0.5
    ties = split(high, exact, config, "x")
    assert ties["tie_diff_x"] >= differs["tok_diff_x"] and ties["precision_diff_x"] == 0
    # argmax_ones' scores are all 1.0: on a head without exact ties its trees part by values
    plain = _head(vocab=256, hidden=16)
    values = split(
        _traced(plain, variants.get("argmax_ones").select, config, 4, 4),
        _traced(plain, variants.get("identity").select, config, 4, 4),
        config,
        "x",
    )
    assert values["precision_diff_x"] > 0.5 and values["tie_diff_x"] == 0
    assert split(exact, exact, config, "x") == {"tie_diff_x": 0, "precision_diff_x": 0}
    # near-equal (not equal) twins part by values, never by a tie: the bf16 near-ties test above


# ------------------------------------------------------------------------------------ as SGLang runs it


def test_topk_1_fast_path_is_the_organisation_without_its_work(monkeypatch):
    """At topk 1 with num_draft_tokens = num_steps + 1 the tree is SGLang's constant chain: the same tree
    the organisation builds, with fewer ops per cycle (no top-k, sort or gathers over the scores)."""
    head, config = _head(), LoopConfig(1, 4, 5)
    assert config.fast_path and config.unlike_sglang() is None
    chain = _trees(head, "full_softmax", config)
    tokens, hidden = inputs_for(head.config, 4, config.extend_tokens, 1, "cpu")[0]
    loop = DraftLoop(head, variants.get("full_softmax").select, config)
    fast, launches, unit = count_kernels(lambda: loop.cycle_tuple(tokens, hidden), torch.device("cpu"))
    assert unit == CPU_UNIT and fast > 10 and math.isnan(launches), "top-level aten ops"
    monkeypatch.setattr(LoopConfig, "fast_path", property(lambda self: False))
    organised = _trees(head, "full_softmax", config)
    slow_ops = count_kernels(lambda: loop.cycle_tuple(tokens, hidden), torch.device("cpu"))[0]
    for a, b in zip(chain, organised, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)
    assert torch.equal(chain[0].positions, torch.arange(4).expand(4, 4))
    assert torch.equal(chain[0].parents, torch.arange(-1, 3).expand(4, 4))
    assert fast < slow_ops - 2


def test_settings_sglang_never_runs_are_labelled_and_auto_is_sglangs():
    assert LoopConfig(1, 5, 3).unlike_sglang() == (
        "not run by SGLang: topk 1 with num_draft_tokens 3 (SGLang sets num_steps + 1 = 6)"
    )
    assert not LoopConfig(1, 5, 3).fast_path
    assert LoopConfig(4, 5, 3).unlike_sglang() is None and not LoopConfig(4, 3, 4).fast_path
    cases = expand_draft(_scenario({"topk": [1, 4], "num_steps": 5, "variants": "identity"}))
    assert {c.loop.num_draft_tokens for c in cases if c.loop.topk == 1} == {6}


def test_draft_extend_covers_num_draft_tokens(monkeypatch):
    head, config = _head(), LoopConfig(4, 3, 9)
    assert config.extend_tokens == 9
    seen: list[int] = []
    step = head.step
    monkeypatch.setattr(
        head, "step", lambda tokens, hidden: seen.append(tokens.shape[0]) or step(tokens, hidden)
    )
    _trees(head, "identity", config, batch=2, cycles=1)
    assert seen == [2 * 9, 2 * 4, 2 * 4], "extend over B x n tokens, then B x k per draft step"


def test_the_selector_gets_fp32_logits_unless_upcast_is_off():
    head = _head("bfloat16", vocab=256, hidden=16)
    seen: list[torch.dtype] = []

    def spy(logits, k):
        seen.append(logits.dtype)
        return variants.get("identity").select(logits, k)

    for upcast in (True, False):
        _trees(head, "", LoopConfig(2, 2, 4, upcast), batch=1, cycles=1, select=spy)
    assert seen == [torch.float32] * 2 + [torch.bfloat16] * 2


# ------------------------------------------------------------------------------------ scenario table


def _scenario(draft, **top) -> scenario.Scenario:
    return scenario.parse({"name": "t", "sweep": [], "draft": draft, **top}, "scen/t.toml")


@pytest.mark.parametrize(
    ("draft", "match"),
    [
        ({"topk_": 1}, r"scen/t\.toml: \[draft\]\.topk_: unknown key \(did you mean 'topk'\?\)"),
        ({"dtypes": ["bf8"]}, r"\[draft\]\.dtypes: unknown dtype 'bf8'.*allowed: float32"),
        (
            {"variants": "identty"},
            r"\[draft\]\.variants: unknown variant 'identty' \(did you mean 'identity'",
        ),
        ({"paths": ["graphs"]}, r"\[draft\]\.paths: unknown path 'graphs'"),
        ({"topk": 0}, r"\[draft\]\.topk: expected one or a non-empty list of integers >= 1 and <= 64"),
        ({"batch": []}, r"\[draft\]\.batch: expected one or a non-empty list"),
        ({"num_draft_tokens": "many"}, r"\[draft\]\.num_draft_tokens: .*integers >= 2 or 'auto'"),
        ({"num_steps": True}, r"\[draft\]\.num_steps:"),
        (
            {"logits": "peaked"},
            r"\[draft\]\.logits: unknown logits behaviour 'peaked'.*allowed: head, near_ties",
        ),
        ({"kernels": "yes"}, r"\[draft\]\.kernels: expected true or false"),
        ({"layers": 9}, r"\[draft\]\.layers: expected an integer from 1 to 4"),
        ([{"vocab": 64}, {"hidden": 4}], r"\[draft#2\]\.hidden: .*integers >= 8"),
        ([], r"\[\[draft\]\]: expected at least one table"),
        (3, r"\[draft\]: expected a table"),
    ],
)
def test_draft_table_errors_name_file_key_and_what_is_allowed(draft, match):
    with pytest.raises(scenario.ScenarioError, match=match):
        draft_sweeps(_scenario(draft))


def test_upcast_key_expands_and_fp32_heads_have_one_case():
    s = _scenario({"dtypes": ["bf16", "fp32"], "upcast": ["fp32", "none"], "topk": 2, "variants": "identity"})
    cases = expand_draft(s)
    got = {(c.head.dtype, c.loop.upcast, c.case_id.rsplit("/", 1)[1]) for c in cases}
    assert got == {("bfloat16", False, "none"), ("bfloat16", True, "fp32"), ("float32", True, "fp32")}
    assert len(cases) == 3 * 2 * 2, "3 (dtype, upcast) x 2 batch x 2 logits: fp32 'none' = fp32 'fp32'"
    assert all(not c.loop.upcast for c in expand_draft(_scenario({"dtypes": "bf16", "upcast": "none"})))
    assert all(c.loop.upcast for c in expand_draft(_scenario({"dtypes": "bf16"}))), "fp32 by default"
    with pytest.raises(scenario.ScenarioError, match=r"\[draft\]\.upcast: unknown upcast 'bf16'.*fp32, none"):
        draft_sweeps(_scenario({"upcast": "bf16"}))


@pytest.fixture
def engine_selectors(monkeypatch):
    monkeypatch.syspath_prepend(str(DATA))
    monkeypatch.setattr(external, "_LOADED", {})


@pytest.mark.parametrize(
    ("name", "match"),
    [
        (
            "no_such_engine.kernels:topk",
            r"\[draft\]\.variants: selector 'no_such_engine.kernels:topk': cannot import",
        ),
        ("selectors_for_tests:undeclared", r"\[draft\]\.variants: selector .*: no contract declared"),
        ("selectors_for_tests:bad_value", r"contract key 'outputs' is 'probs'"),
        ("no_such_entry_point", r"\[draft\]\.variants: unknown variant 'no_such_entry_point'"),
    ],
)
def test_external_draft_variants_that_cannot_load_are_one_line(engine_selectors, name, match):
    with pytest.raises(scenario.ScenarioError, match=match) as info:
        draft_sweeps(_scenario({"variants": ["identity", name]}))
    assert "\n" not in str(info.value)


def test_draft_table_expands_with_aliases_and_auto_draft_tokens():
    s = _scenario({"dtypes": ["bf16", "bfloat16"], "topk": [1, 4], "num_steps": 3, "variants": "identity"})
    cases = expand_draft(s)
    assert {c.head.dtype for c in cases} == {"bfloat16"}
    assert {(c.loop.topk, c.loop.num_draft_tokens) for c in cases} == {(1, 4), (4, 13)}
    assert len({c.case_id for c in cases}) == len(cases)


@pytest.mark.parametrize("name", ["draft_quick", "draft_models"])
def test_shipped_draft_scenarios_load_without_a_main_sweep(name):
    from pathlib import Path

    s = scenario.load(Path(__file__).resolve().parent.parent / "scenarios" / f"{name}.toml")
    assert scenario.expand(s) == []
    cases = expand_draft(s)
    assert cases and {c.path for c in cases} >= {"eager", "graph"}
    assert all(c.loop.problem() is None for c in cases)


def test_scenario_without_draft_table_has_no_draft_cases():
    assert expand_draft(scenario.parse({"name": "t"}, "t.toml")) == []


# ------------------------------------------------------------------------------------ the kind's rows

_BROKEN = Variant(
    name="broken_draft_test",
    select=lambda logits, k: (_ for _ in ()).throw(RuntimeError("selector exploded")),
    accuracy="exact",
    traffic=variants.get("identity").traffic,
    summary="raises",
)


EXACT_EXTERNAL = "selectors_for_tests:exact_topk"
PREALLOCATED = "selectors_for_tests:preallocated_topk"  # int32 indices, writes into reused buffers
BF16_ONLY = "selectors_for_tests:fp8_topk"  # declares bfloat16 and the fp8 dtypes


def _run(s: scenario.Scenario, env: dict[str, object] | None = None) -> list[dict[str, object]]:
    """The rows of the draft kind's `run` over the scenario's draft cases, on the CPU."""
    info = detect("cpu")
    env = {"backend": info.backend, "device": info.name} if env is None else env
    return list(run(expand_draft(s), KindRun(s, info, env, Path(), progress=False)))


@pytest.fixture(scope="module")
def rows() -> list[dict[str, object]]:
    tiny = {"variants": "identity", "dtypes": "float32", "logits": "head", "hidden": 8, "batch": 1}
    small = {"dtypes": "bfloat16", "vocab": 256, "hidden": 16, "batch": 2, "num_steps": 3, "cycles": 2}
    head = {"dtypes": "float32", "vocab": 256, "hidden": 16, "batch": 2, "num_steps": 2, "logits": "head"}
    quiet = {"selection_share": False, "kernels": False}  # figures the tests below do not read
    patch = pytest.MonkeyPatch()
    variants.names()  # the built-ins registered, then a selector that raises beside them
    patch.setitem(variants._REGISTRY, _BROKEN.name, _BROKEN)
    patch.syspath_prepend(str(DATA))
    patch.setattr(external, "_LOADED", {})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # perfsuite's default (a sweep applies [timing] threads)
    try:
        draft = [
            {
                **head,
                "variants": ["full_softmax", "argmax_ones", "identity", "triton_auto", _BROKEN.name],
                "paths": ["eager", "graph"],
                "topk": [1, 2],
                "cycles": 2,
            },
            {  # the compile path at accept lengths (uniform: the gathered extend row moves cycle to cycle)
                **head,
                "variants": "identity",
                "paths": "compile",
                "topk": 2,
                "cycles": 2,
                "accept": "uniform",
                "selection_share": False,
            },
            {**tiny, "vocab": 4, "topk": 8, "num_steps": 1},
            {**tiny, "vocab": 64, "topk": 1, "num_draft_tokens": 9},
            {  # the selector handed the head's bf16 logits, and a topk-1 setting SGLang never runs
                **small,
                **quiet,
                "variants": "identity",
                "logits": "near_ties",
                "upcast": ["fp32", "none"],
                "topk": 1,
                "num_draft_tokens": [3, 4],
            },
            {  # exact twins: tie-order differences; engine selectors as draft variants
                **small,
                **quiet,
                "variants": ["full_softmax", "identity", EXACT_EXTERNAL, PREALLOCATED],
                "logits": "ties",
                "topk": 2,
            },
            # topk 1: extend and draft steps share the selector's reused buffers
            {**small, **quiet, "variants": PREALLOCATED, "dtypes": "float32", "logits": "head", "topk": 1},
            # a selector declaring bf16 (and fp8) logits only: fp32 upcast is refused, bf16 runs
            {
                **small,
                **quiet,
                "variants": BF16_ONLY,
                "logits": "head",
                "topk": 1,
                "upcast": ["fp32", "none"],
            },
        ]
        s = _scenario(draft, timing={"warmup": 1, "reps": 5, "max_seconds": 0.05, "l2": "hot"})
        info = detect("cpu")
        return _run(
            s, {"scenario": s.name, "backend": info.backend, "device": info.name, "torch": torch.__version__}
        )
    finally:
        torch.set_num_threads(threads)
        patch.undo()


def test_a_selector_is_handed_only_logits_it_declares(rows):
    upcast = _row(rows, variant=BF16_ONLY, upcast="fp32")
    assert upcast["status"] == "skipped"
    assert upcast["reason"].startswith("the loop hands the selector float32 logits (upcast = fp32)")
    assert "declares bfloat16, float8_e4m3fn, float8_e5m2" in upcast["reason"]
    plain = _row(rows, variant=BF16_ONLY, upcast="none")
    assert plain["status"] == "ok", plain["reason"]
    assert plain["selector_dtype"] == "bfloat16"


def _row(rows, **match) -> dict[str, object]:
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, match
    return found[0]


def test_rows_carry_every_column_in_order(rows):
    assert rows
    for row in rows:
        assert list(row) == of_kind("draft")
        assert row["status"] in ("ok", "skipped", "error")
        assert row["scenario"] == "t" and row["backend"] == "cpu"


def test_ok_rows_have_cycle_time_share_kernels_and_parity(rows):
    row = _row(rows, variant="identity", path="eager", topk=2, vocab=256, logits="head")
    assert row["status"] == "ok", row["reason"]
    assert 0 < row["cycle_p20_us"] <= row["cycle_median_us"] <= row["cycle_p80_us"]
    assert row["timing"] == "host thread CPU time"
    assert 0 <= row["selection_share"] <= 1 and row["noop_median_us"] > 0
    assert row["kernels_per_cycle"] > 10 and row["kernels_unit"] == CPU_UNIT
    assert math.isnan(row["launches_per_cycle"]) and math.isnan(row["device_median_us"])
    assert row["trees"] == 4 and row["selections_per_cycle"] == 2
    assert row["tok_diff_base"] == 0 and row["tok_diff_f64"] == 0
    assert row["tie_diff_f64"] == row["precision_diff_f64"] == 0
    assert row["upcast"] == "fp32" and row["selector_dtype"] == "float32"
    assert row["tree_build"] == ORGANISATION and row["engine_setting"] == "sglang"
    assert row["outputs_copied"] is False
    assert row["consumer_vs_base"] in ("identical", "scores within rounding")
    assert row["orphan_trees"] == 0
    ones = _row(rows, variant="argmax_ones", path="eager", topk=1, vocab=256, logits="head")
    assert ones["consumer_vs_base"] == "scores differ (same tokens)" and ones["tok_diff_base"] == 0
    assert ones["engine_setting"] == "sglang"  # SGLang's topk-1 shortcut
    wide = _row(rows, variant="argmax_ones", path="eager", topk=2, vocab=256, logits="head")
    assert wide["engine_setting"].startswith("not run by SGLang: an argmax shortcut (topk_p = 1.0) at topk 2")


def test_rows_record_the_selector_logits_the_tree_build_and_the_setting(rows):
    near = [r for r in rows if r["logits"] == "near_ties"]
    assert {(r["upcast"], r["selector_dtype"]) for r in near} == {("fp32", "float32"), ("none", "bfloat16")}
    fast = _row(rows, variant="identity", logits="near_ties", upcast="fp32", num_draft_tokens=4)
    assert fast["tree_build"] == FAST_PATH and fast["engine_setting"] == "sglang"
    odd = _row(rows, variant="identity", logits="near_ties", upcast="fp32", num_draft_tokens=3)
    assert odd["status"] == "ok" and odd["tree_build"] == ORGANISATION
    assert odd["engine_setting"].startswith("not run by SGLang: topk 1 with num_draft_tokens 3")
    for r in near:  # identity keeps the logits' order whatever the logits' dtype
        assert r["status"] == "ok", r["reason"]
        if r["variant"] == "identity":
            assert r["tok_diff_f64"] == r["tie_diff_f64"] == r["precision_diff_f64"] == 0


def test_parity_split_in_rows(rows):
    tied = _row(rows, variant="full_softmax", logits="ties", topk=2, path="eager")
    exact = _row(rows, variant="identity", logits="ties", topk=2, path="eager")
    assert exact["tie_diff_f64"] == exact["precision_diff_f64"] == 0, "identity is lowest-index"
    assert tied["precision_diff_f64"] == 0, "full_softmax differs from float64 by tie order only"
    assert tied["tie_diff_f64"] == pytest.approx(exact["tie_diff_base"])
    for r in rows:
        if r["status"] == "ok":
            assert 0 <= r["tie_diff_base"] + r["precision_diff_base"] <= 1


def test_external_selectors_run_as_draft_variants(rows):
    for name, topk in ((EXACT_EXTERNAL, 2), (PREALLOCATED, 2), (PREALLOCATED, 1)):
        row = _row(rows, variant=name, path="eager", topk=topk)
        assert row["status"] == "ok", row["reason"]
        assert row["accuracy"] == "exact"
        # the same trees as identity's (lowest index, exact probabilities): the float64 selection's
        assert row["tok_diff_f64"] == row["parent_diff_f64"] == row["pos_diff_f64"] == 0
        assert row["score_relerr_f64"] < 1e-5
    # preallocated outputs are reused call after call: the loop copies them (else, at topk 1, the draft
    # steps overwrite the extend's topk_p, which the tree still holds)
    assert all(r["outputs_copied"] is True for r in rows if r["variant"] == PREALLOCATED)
    assert _row(rows, variant=EXACT_EXTERNAL, path="eager")["outputs_copied"] is False


def test_graph_rows_are_skipped_on_the_cpu_with_the_reason(rows):
    graph = [r for r in rows if r["path"] == "graph"]
    assert graph and all(r["status"] == "skipped" for r in graph)
    assert all("needs a CUDA or ROCm GPU" in str(r["reason"]) for r in graph)


def test_compile_path_matches_eager(rows):
    row = _row(rows, variant="identity", path="compile")
    if kernels.interpreting() and row["status"] == "skipped":
        pytest.skip(str(row["reason"]))
    assert row["status"] == "ok", row["reason"]
    assert row["tok_diff_eager"] == row["parent_diff_eager"] == row["pos_diff_eager"] == 0
    assert row["score_relerr_eager"] < 1e-4, "torch.compile on the CPU fuses: not always bit for bit"
    assert row["bitexact_eager"] in (True, False)
    assert math.isnan(row["selection_share"])
    # selected at the accept lengths the row records, like its references (full_softmax's, float64's)
    drawn = accept_lengths(LoopConfig(2, 2, 5, accept="uniform"), 2, 2)
    assert row["accept_lengths"] == "; ".join(" ".join(map(str, n.tolist())) for n in drawn)
    assert row["tok_diff_f64"] == row["pos_diff_f64"] == 0 and len({*row["accept_lengths"].split()}) > 1


def test_cases_that_cannot_run_or_break_become_rows(rows):
    triton = _row(rows, variant="triton_auto", path="eager", topk=1, vocab=256, logits="head")
    assert triton["status"] == "skipped" and "TRITON_INTERPRET" in str(triton["reason"])
    too_wide = _row(rows, vocab=4)
    assert too_wide["status"] == "skipped" and too_wide["reason"] == "topk 8 > vocab 4"
    too_many = _row(rows, vocab=64)
    assert too_many["status"] == "skipped" and "num_draft_tokens - 1 = 8 exceeds" in str(too_many["reason"])
    broken = _row(rows, variant=_BROKEN.name, path="eager", topk=1)
    assert broken["status"] == "error" and broken["reason"] == "RuntimeError: selector exploded"


def draft_html(frame: pd.DataFrame) -> str:
    """The draft section's body (introduction, subsections) as HTML, without the page around it."""
    return render_fragment(section(frame))


def test_draft_html_renders(rows, tmp_path):
    frame = pd.DataFrame(rows)
    page = draft_html(frame)
    assert "<section" not in page and page.count("<h3>") == 5  # the body of the report's draft section
    assert page.count('class="figure"') >= 3 and page.count("<table") >= 3
    assert "needs a CUDA or ROCm GPU" in page and "scores differ (same tokens)" in page
    assert "without upcast" in page and "fp32 logits" in page and "tie-order" in page
    assert f"{NOT_SGLANG}" in page and "not run by SGLang: topk 1 with num_draft_tokens 3" in page
    assert "<script src" not in page
    frame.to_csv(tmp_path / "draft.csv", index=False)
    assert page.count("<table") == draft_html(pd.read_csv(tmp_path / "draft.csv")).count("<table")
    assert "No draft-loop rows" in draft_html(pd.DataFrame())
    assert "<h3>" in draft_html(frame.drop(columns=["kernels_per_cycle", "selection_share"]))


# ------------------------------------------------------------------------------------ pieces


def test_timing_unroll_is_capped_per_backend():
    cap = GRAPH_UNROLL_CAP
    assert timing_unroll(20, cap["cuda"], 3) == min(20, cap["cuda"] // 3)
    assert timing_unroll(20, cap["rocm"], 3) == cap["rocm"] // 3
    assert timing_unroll(20, cap["rocm"], 16) == 1
    assert timing_unroll(20, cap["cpu"], 1) == 1
    assert timing_unroll(2, cap["cuda"], 1) == 2
    for backend, steps in ((b, s) for b in cap for s in (1, 3, 5)):  # cycles x steps within the cap
        assert timing_unroll(20, cap[backend], steps) * steps <= max(cap[backend], steps)


def test_head_is_deterministic_from_its_seed():
    a, b = _head("bfloat16", "near_ties"), _head("bfloat16", "near_ties")
    assert torch.equal(a.lm_head, b.lm_head) and a.lm_head.dtype == torch.bfloat16
    c = DraftHead(HeadConfig(512, 32, "bfloat16", logits="near_ties", seed=1))
    assert not torch.equal(a.lm_head, c.lm_head)
