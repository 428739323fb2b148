"""Draft cases to rows: time per cycle, the selection's share, consumer parity and kernels per cycle.

`run_draft(scenario, info, env, progress)` yields one row per case of the scenario's `[draft]` tables as
each finishes. A case that cannot run here is a `skipped` row with its reason, one that breaks an `error`
row; the sweep goes on. Figures are named in `schema.DRAFT_COLUMNS`. Every path of a configuration, and its
parity references (full_softmax's and the float64 selection's eager trees), run on the same inputs and the
same accept lengths (`loop.accept_lengths`, recorded in the row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from perfsuite import kernels, variants
from perfsuite.cases.draft import consumer
from perfsuite.cases.draft.clock import cycle_sampler, device_sampler
from perfsuite.cases.draft.counting import count_kernels
from perfsuite.cases.draft.draft_table import DraftCase, expand_draft, upcast_name
from perfsuite.cases.draft.graph import GraphCache, graph_body, timing_unroll
from perfsuite.cases.draft.head import DraftHead, HeadConfig, inputs_for
from perfsuite.cases.draft.loop import (
    DraftLoop,
    DraftTree,
    LoopConfig,
    Traced,
    accept_lengths,
    constant_select,
    extend_index,
    reference_select,
)
from perfsuite.cases.protocol import run_case
from perfsuite.core import dtypes
from perfsuite.core.console import progress_bar
from perfsuite.core.kinds import KindRun
from perfsuite.measure import execution, memory, timing
from perfsuite.measure.device import DeviceInfo
from perfsuite.results.schema import DRAFT_COLUMNS
from perfsuite.scenario.load import Scenario
from perfsuite.variants.base import Selector, dtype_names

NAN = float("nan")
NOOP = "(no-op selection)"
SELECTION_METHOD = (
    "cycle minus the same cycle with the selection replaced by a constant of its shape, sampled alternately"
)
SCORE_TOLERANCE = 0.05
"""Relative score difference beyond what bf16 rounding of a few probabilities along a path explains."""
FAST_PATH = "constants (SGLang's topk-1 fast path)"
ORGANISATION = "organisation: top num_draft_tokens - 1 of the step scores"


def run_draft(
    scenario: Scenario,
    info: DeviceInfo,
    env: dict[str, object],
    progress: bool = True,
    cases: list[DraftCase] | None = None,
) -> Iterator[dict[str, object]]:
    """One row per draft case of `scenario` (or of `cases`, e.g. those a resumed run still lacks), yielded
    as each finishes.

    A malformed `[draft]` table raises `ScenarioError` before any case runs; after that nothing raises for
    one case (status skipped / error with its reason).
    """
    cases = expand_draft(scenario) if cases is None else cases
    runner = DraftRunner(info, env)
    try:
        for case in progress_bar(cases, progress, "draft"):
            yield runner.run(case)
    finally:
        runner.close()


def run(cases: list[DraftCase], context: KindRun) -> Iterator[dict[str, object]]:
    """The draft case kind's rows (`core.kinds`), as each finishes."""
    return run_draft(context.scenario, context.info, context.env, context.progress, cases=cases)


def unit(case: DraftCase) -> tuple:
    """The cases that run together (one shard's unit): one draft configuration's variants and paths."""
    return case.config_key


def case_row(case: DraftCase, env: dict[str, object]) -> dict[str, object]:
    """Every column, identifying ones filled, figures NaN."""
    row: dict[str, object] = dict.fromkeys(DRAFT_COLUMNS, NAN)
    row.update({k: v for k, v in env.items() if k in DRAFT_COLUMNS})
    head, loop = case.head, case.loop
    row.update(
        scenario=case.scenario,
        case_id=case.case_id,
        variant=case.variant,
        accuracy=variant.accuracy if (variant := _variant(case.variant)) is not None else "",
        path=case.path,
        dtype=head.dtype,
        vocab=head.vocab,
        hidden=head.hidden,
        layers=head.layers,
        batch=case.batch,
        topk=loop.topk,
        num_steps=loop.num_steps,
        num_draft_tokens=loop.num_draft_tokens,
        logits=head.logits,
        upcast=upcast_name(loop),
        **_accept_columns(case),
        selector_dtype=dtypes.dtype_name(torch.float32 if loop.upcast else head.torch_dtype),
        tree_build=FAST_PATH if loop.fast_path else ORGANISATION,
        engine_setting=_engine_setting(loop, variant),
        l2=case.timing.l2,
        selections_per_cycle=loop.selections,
        status="ok",
        reason="",
    )
    return row


def _accept_columns(case: DraftCase) -> dict[str, object]:
    """The accept rule and the lengths it draws for this case's cycles (the ones the run uses)."""
    lengths = accept_lengths(case.loop, case.batch, case.sweep.cycles, case.sweep.seed)
    flat = torch.cat(lengths).double()
    return {
        "accept": case.loop.accept,
        "accept_lengths": "; ".join(" ".join(str(int(v)) for v in cycle) for cycle in lengths),
        "accept_mean": float(flat.mean()),
    }


def _engine_setting(loop: LoopConfig, variant: variants.Variant | None) -> str:
    """ "sglang" where SGLang runs this tree shape with this kind of selector, else why it never does:
    its argmax shortcut (`topk_p = 1.0`, an inexact selector) runs at topk 1 only."""
    unlike = loop.unlike_sglang()
    if unlike:
        return unlike
    if variant is not None and variant.accuracy == "inexact" and loop.topk > 1:
        return f"not run by SGLang: an argmax shortcut (topk_p = 1.0) at topk {loop.topk} (topk 1 only)"
    return "sglang"


@dataclass
class _ConfigState:
    """What cases of one (head, batch, tree) configuration share."""

    key: tuple
    inputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]
    """Per cycle: accepted tokens, target hidden states, the extend's `select_index` (None: accept all)."""
    ref: list[Traced] | None = None
    eager: dict[str, list[Traced]] = field(default_factory=dict)
    selectors: dict[str, tuple[Selector, bool]] = field(default_factory=dict)


@dataclass
class DraftRunner:
    """Runs draft cases on one device, keeping one head, its inputs, reference trees and graphs."""

    info: DeviceInfo
    env: dict[str, object]
    device: torch.device = field(init=False)
    graphs: GraphCache | None = field(init=False, default=None)
    _head: DraftHead | None = field(init=False, default=None)
    _state: _ConfigState | None = field(init=False, default=None)
    _compiled: dict[tuple, Callable] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.device = torch.device(self.info.device)

    # ------------------------------------------------------------------------------------- per case

    def run(self, case: DraftCase) -> dict[str, object]:
        """Measure one case; always returns a row (status ok, skipped or error)."""
        return run_case(self, case)

    def identify(self, case: DraftCase) -> dict[str, object]:
        return case_row(case, self.env)

    def release(self) -> None:
        """The head, graphs and reference trees stay for the next case of the configuration (`close`)."""

    def skip_reason(self, case: DraftCase) -> str | None:
        """Why a case cannot run here, decided before anything is allocated."""
        try:
            variant = variants.get(case.variant)
        except (KeyError, variants.ExternalSelectorError) as exc:
            return str(exc.args[0] if isinstance(exc, KeyError) else exc)
        head, loop = case.head, case.loop
        if loop.topk > head.vocab:
            return f"topk {loop.topk} > vocab {head.vocab}"
        reason = (
            loop.problem()
            or variant.unclaimed_k(loop.topk)
            or variant.available(self.device)
            or execution.unavailable(case.path, self.device)
        )
        if reason:
            return reason
        handed = torch.float32 if loop.upcast else head.torch_dtype
        if handed not in variant.dtypes:  # an external selector that declares other logits dtypes
            return (
                f"the loop hands the selector {dtypes.dtype_name(handed)} logits (upcast = "
                f"{upcast_name(loop)}); it declares {dtype_names(variant.dtypes)}"
            )
        if self.device.type == "cpu" and case.variant.startswith("triton") and kernels.interpreting():
            return "Triton under TRITON_INTERPRET=1 is for correctness checks only: too slow for a draft loop"
        return memory.fits(_bytes_needed(case), self.device)

    def measure(self, case: DraftCase) -> dict[str, object]:
        state = self._config(case)
        select, copied = self._selector(case, state, case.variant)
        loop = DraftLoop(self._head_for(case.head), select, case.loop)
        run_tree, call, body = self._path_calls(case, loop, state)
        if case.path == "eager":  # the traced eager run (parity) is this path's run
            trees = [t.tree for t in self._traced(case, state, case.variant)]
        else:
            trees = [run_tree(*each) for each in state.inputs]
        out: dict[str, object] = {
            "trees": len(trees) * case.batch,
            "status": "ok",
            "reason": "",
            "outputs_copied": copied,
        }
        out.update(self._parity(case, state, trees))
        out.update(self._timing(case, state, call, body))
        if case.sweep.kernels:
            counted = count_kernels(call, self.device)
            out.update(
                kernels_per_cycle=counted.kernels,
                launches_per_cycle=counted.launches,
                kernels_unit=counted.unit,
            )
        if case.path == "graph" and self.graphs is not None:
            out["graphs_cached"] = len(self.graphs)
        return out

    # -------------------------------------------------------------------------------------- paths

    def _path_calls(
        self, case: DraftCase, loop: DraftLoop, state: _ConfigState
    ) -> tuple[Callable[..., DraftTree], Callable[[], object], Callable | None]:
        """(run one cycle on given inputs -> tree, a zero-argument timed cycle, graph body or None)."""
        tokens, hidden, index = state.inputs[0]
        if case.path == "eager":
            return loop.cycle, lambda: loop.cycle_tuple(tokens, hidden, index), None
        if case.path == "compile":
            fn = self._compiled_cycle(case, loop)
            fn(tokens, hidden, index)  # compile outside any timing

            def run_compiled(t: torch.Tensor, h: torch.Tensor, i: torch.Tensor | None) -> DraftTree:
                return DraftTree(*fn(t, h, i))

            return run_compiled, lambda: fn(tokens, hidden, index), None
        if case.path == "graph":
            reason = execution.unavailable("graph", self.device)
            if reason:
                raise execution.GraphCaptureError(reason)
            graph = self._graph_cache(case).get(
                loop, case.batch, (case.head, case.loop, case.variant), case.case_id
            )
            graph.load(tokens, hidden, index)
            return graph, graph.replay, graph_body(graph, loop)
        raise ValueError(f"unknown path {case.path!r}; known: {', '.join(execution.PATHS)}")

    def _graph_cache(self, case: DraftCase) -> GraphCache:
        """The graph cache, holding at least two graphs (a case's and its no-op twin's)."""
        cap = max(2, case.sweep.max_graphs)
        if self.graphs is None or self.graphs.max_graphs != cap:
            if self.graphs is not None:
                self.graphs.clear()
            self.graphs = GraphCache(self.device, cap)
        return self.graphs

    def _compiled_cycle(self, case: DraftCase, loop: DraftLoop) -> Callable:
        key = (case.config_key, case.variant)
        if key not in self._compiled:
            execution.set_compile_limits()
            self._compiled[key] = torch.compile(loop.cycle_tuple, dynamic=False)
        return self._compiled[key]

    # -------------------------------------------------------------------------------------- figures

    def _parity(self, case: DraftCase, state: _ConfigState, trees: list[DraftTree]) -> dict[str, object]:
        """Consumer figures of the case's trees against full_softmax's, the float64 selection's and (graph,
        compile) eager's; the tie / precision split from the eager runs (logit values traced)."""
        own = self._traced(case, state, case.variant)
        base = self._traced(case, state, variants.BASELINE)
        ref = state.ref = state.ref or self._run_eager(case, state, reference_select)
        base_trees, ref_trees = [t.tree for t in base], [t.tree for t in ref]
        out: dict[str, object] = {}
        out.update(consumer.compare(trees, base_trees, "base"))
        out.update(consumer.split(own, base, case.loop, "base"))
        out.update(consumer.compare(trees, ref_trees, "ref"))
        out.update(consumer.split(own, ref, case.loop, "ref"))
        out["step0_diff_base"] = consumer.first_step_differs(trees, base_trees, case.loop.topk)
        out["orphan_trees"] = consumer.orphan_share(trees, case.loop.topk)
        if case.path != "eager":
            eager = [t.tree for t in own]
            out.update(consumer.compare(trees, eager, "eager"))
            out["bitexact_eager"] = consumer.identical(trees, eager)
        out["consumer_vs_base"] = _consumer_verdict(out)
        return out

    def _traced(self, case: DraftCase, state: _ConfigState, name: str) -> list[Traced]:
        """Eager traced trees of variant `name` for this configuration (cached)."""
        if name not in state.eager:
            state.eager[name] = self._run_eager(case, state, self._selector(case, state, name)[0])
        return state.eager[name]

    def _run_eager(self, case: DraftCase, state: _ConfigState, select: Selector) -> list[Traced]:
        loop = DraftLoop(self._head_for(case.head), select, case.loop)
        return [loop.cycle_traced(*each) for each in state.inputs]

    def _selector(self, case: DraftCase, state: _ConfigState, name: str) -> tuple[Selector, bool]:
        """Variant `name`'s selection for the loop, and whether its outputs are copied: a selector that
        hands back the same output buffers on two calls (preallocated outputs, as graph-captured engines
        call them) would overwrite the previous step's `topk_p`/`topk_index`, which the tree still holds,
        so the loop copies them after each selection (as an engine must; the copies are timed)."""
        if name not in state.selectors:
            select = variants.get(name).select
            reused = _reuses_outputs(select, case, self.device)
            state.selectors[name] = (_owned(select) if reused else select, reused)
        return state.selectors[name]

    def _timing(
        self, case: DraftCase, state: _ConfigState, call: Callable[[], object], body: Callable | None
    ) -> dict[str, object]:
        noop = self._noop_call(case, state) if case.sweep.selection_share else None
        samplers = [cycle_sampler(c, self.info, case.timing) for c in (call, noop) if c is not None]
        samples, *paired = timing.measure_in_turn(samplers, case.timing)  # the no-op cycle in turn
        out: dict[str, object] = {
            "cycle_median_us": samples.median_us,
            "cycle_p20_us": samples.p20_us,
            "cycle_p80_us": samples.p80_us,
            "samples": len(samples.seconds),
            "timing": samples.method,
        }
        if paired:
            noop_samples = paired[0]
            selection = samples.median_us - noop_samples.median_us
            out.update(
                noop_median_us=noop_samples.median_us,
                selection_us=selection,
                selection_share=min(max(selection / samples.median_us, 0.0), 1.0),
                selection_method=SELECTION_METHOD,
            )
        unroll = timing_unroll(case.timing.graph_unroll, self.info.backend, case.loop.num_steps)
        sampler = device_sampler(call, body, self.info, case.timing, unroll)
        if sampler is not None:
            device = timing.measure(sampler, case.timing)
            out.update(
                device_median_us=device.median_us,
                device_p20_us=device.p20_us,
                device_p80_us=device.p80_us,
                device_timing=device.method,
            )
        return out

    def _noop_call(self, case: DraftCase, state: _ConfigState) -> Callable[[], object]:
        """The case's cycle on its path with a no-op selection. Fetched per case: on the graph path the
        cache then holds both graphs (the case's was used last, so the no-op's capture never evicts it)."""
        loop = DraftLoop(self._head_for(case.head), constant_select, case.loop)
        noop_case = DraftCase(
            case.scenario, NOOP, case.path, case.head, case.batch, case.loop, case.sweep, case.timing
        )
        _, call, _ = self._path_calls(noop_case, loop, state)
        call()
        return call

    # -------------------------------------------------------------------------------------- state

    def _head_for(self, config: HeadConfig) -> DraftHead:
        if self._head is None or self._head.config != config:
            self._release()
            self._head = DraftHead(config, self.device)
        return self._head

    def _config(self, case: DraftCase) -> _ConfigState:
        if self._state is None or self._state.key != case.config_key:
            head = self._head_for(case.head)
            self._state = None
            count = case.sweep.cycles
            seed, length = case.sweep.seed, case.loop.extend_tokens
            pairs = inputs_for(head.config, case.batch, length, count, self.device, seed)
            if case.loop.accept == "all":  # the last position: no index, today's cycle as it was
                indices: list[torch.Tensor | None] = [None] * count
            else:  # precomputed on the device, outside the timed cycle (no host sync inside it)
                lengths = accept_lengths(case.loop, case.batch, count, seed)
                indices = [extend_index(n, length).to(self.device) for n in lengths]
            triples = [(t, h, i) for (t, h), i in zip(pairs, indices, strict=True)]
            self._state = _ConfigState(case.config_key, triples)
        return self._state

    def _release(self) -> None:
        """Drop the head and everything built on it (graphs, compiled cycles, cached trees)."""
        self._head = self._state = None
        if self.graphs is not None:
            self.graphs.clear()
        if self._compiled:
            self._compiled.clear()
            torch._dynamo.reset()

    def close(self) -> None:
        self._release()
        self.graphs = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _variant(name: str) -> variants.Variant | None:
    """The variant called `name` (built-in or external), or None when it cannot be resolved."""
    try:
        return variants.get(name)
    except (KeyError, variants.ExternalSelectorError):
        return None


def _reuses_outputs(select: Selector, case: DraftCase, device: torch.device) -> bool:
    """Whether two calls of `select` on the decode steps' shape return the same output storage."""
    rows, head = case.batch * case.loop.topk, case.head
    dtype = torch.float32 if case.loop.upcast else head.torch_dtype
    logits = torch.zeros((rows, head.vocab), dtype=dtype, device=device)
    first = select(logits, case.loop.topk)
    pointers = {t.untyped_storage().data_ptr() for t in first}
    second = select(logits, case.loop.topk)
    return any(t.untyped_storage().data_ptr() in pointers for t in second)


def _owned(select: Selector) -> Selector:
    """`select` with its outputs copied into tensors of the loop's own."""

    def owned(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        topk_p, topk_index = select(logits, k)
        return topk_p.clone(), topk_index.clone()

    return owned


def _consumer_verdict(figures: dict[str, object]) -> str:
    """One word on the figures against full_softmax: scores count as changed beyond rounding when their
    relative difference exceeds `SCORE_TOLERANCE`."""
    tokens = figures.get("tok_diff_base", NAN)
    scores = figures.get("score_relerr_base", NAN)
    if not isinstance(tokens, float) or math.isnan(tokens):
        return "n/a"
    if tokens > 0:
        return "tokens differ"
    if scores > SCORE_TOLERANCE:
        return "scores differ (same tokens)"
    return "scores within rounding" if scores > 0 else "identical"


def _bytes_needed(case: DraftCase) -> int:
    """Device memory a case plans to use: weights, the widest logits with their temporaries, float64
    reference probabilities, and a graph's static buffers."""
    head, loop = case.head, case.loop
    size = head.torch_dtype.itemsize
    weights = (2 * head.vocab * head.hidden + (2 + 4 * head.layers) * head.hidden**2) * size
    rows = case.batch * loop.topk
    logits = rows * head.vocab * (size + 4 + 4 + 2 * 8)  # logits, fp32 temporaries, float64 reference
    return weights + logits
