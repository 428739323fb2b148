"""Draft cases to rows (kind draft in `results.columns`): time per cycle, the selection's share, consumer
parity and kernels per cycle. Every path of a configuration and its parity references (full_softmax's
and the float64 selection's eager trees) run on the same inputs and accept lengths (docs/draft-loop.md)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity

from perfsuite import kernels, simulated_gpu, variants
from perfsuite.cases.draft import consumer
from perfsuite.cases.draft.draft_table import DraftCase, upcast_name
from perfsuite.cases.draft.head import DraftHead, inputs_for
from perfsuite.cases.draft.loop import DraftLoop, DraftTree, GraphCache, Traced, accept_lengths, extend_index
from perfsuite.cases.protocol import run_case
from perfsuite.core import dtypes
from perfsuite.core.console import progress_bar
from perfsuite.core.kinds import KindRun
from perfsuite.measure import execution, memory, timing
from perfsuite.measure.device import DeviceInfo, synchronize
from perfsuite.results.columns import of_kind
from perfsuite.variants.base import Selector, dtype_names
from perfsuite.variants.ordering import topk_lowest_index

Row = dict[str, object]
Call = Callable[[], object]
NOOP, REFERENCE = "(no-op selection)", "(float64 selection)"
SELECTION_METHOD = (
    "cycle minus the same cycle with the selection replaced by a constant of its shape, sampled alternately"
)
SCORE_TOLERANCE = 0.05  # relative score difference beyond bf16 rounding of a few probabilities on a path
FAST_PATH = "constants (SGLang's topk-1 fast path)"
ORGANISATION = "organisation: top num_draft_tokens - 1 of the step scores"
LAUNCH_CALL = re.compile(r"(LaunchKernel|GraphLaunch|LaunchCooperativeKernel|Memcpy\w*Async|Memset\w*Async)")
GPU_UNIT = "device kernels (incl. memcpy/memset)"
CPU_UNIT = "top-level aten ops (cpu)"


def run(cases: list[DraftCase], context: KindRun) -> Iterator[Row]:
    """The draft case kind's rows (`core.kinds`), yielded as each case finishes (none raises)."""
    runner = DraftRunner(context.info, context.env)
    try:
        for case in progress_bar(cases, context.progress, "draft"):
            yield run_case(runner, case)
    finally:
        runner.close()


def unit(case: DraftCase) -> tuple:
    """The cases that run together (one shard's unit): one draft configuration's variants and paths."""
    return case.config_key


class DraftRunner:
    """Runs draft cases on one device, keeping what one configuration's cases share (head, inputs, graphs)."""

    def __init__(self, info: DeviceInfo, env: Row):
        self.info, self.env, self.device = info, env, torch.device(info.device)
        self.graphs: GraphCache | None = None
        self.compiled: dict[tuple, Callable] = {}
        self.head: DraftHead | None = None
        self.key: tuple | None = None  # the configuration the inputs and caches below are made for
        self.inputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []  # `extend`'s
        self.eager: dict[str, list[Traced]] = {}  # traced eager trees, by variant and REFERENCE
        self.selectors: dict[str, tuple[Selector, bool]] = {}  # `_selector`'s, by variant

    def identify(self, case: DraftCase) -> Row:
        """Every column, identifying ones filled, figures NaN."""
        head, loop = case.head, case.loop
        try:
            variant: variants.Variant | None = variants.get(case.variant)
        except (KeyError, variants.ExternalSelectorError):  # a skipped row, `skip_reason` says why
            variant = None
        # SGLang's argmax shortcut (topk_p = 1.0, an inexact selector) runs at topk 1 only
        shortcut = variant and variant.accuracy == "inexact" and loop.topk > 1
        unlike = f"not run by SGLang: an argmax shortcut (topk_p = 1.0) at topk {loop.topk} (topk 1 only)"
        lengths = accept_lengths(loop, case.batch, case.sweep.cycles, case.sweep.seed)
        columns = of_kind("draft")
        row: Row = {**dict.fromkeys(columns, math.nan), "status": "ok", "reason": ""}
        row.update({k: v for k, v in self.env.items() if k in columns})
        row.update({k: getattr(case, k) for k in ("scenario", "case_id", "variant", "path", "batch")})
        row.update({k: getattr(head, k) for k in ("dtype", "vocab", "hidden", "layers", "logits")})
        row.update({k: getattr(loop, k) for k in ("topk", "num_steps", "num_draft_tokens", "accept")})
        row.update(
            accuracy=variant.accuracy if variant else "",
            upcast=upcast_name(loop),
            accept_lengths="; ".join(" ".join(str(int(v)) for v in cycle) for cycle in lengths),
            accept_mean=float(torch.cat(lengths).double().mean()),
            selector_dtype=dtypes.dtype_name(case.selector_dtype),
            tree_build=FAST_PATH if loop.fast_path else ORGANISATION,
            engine_setting=loop.unlike_sglang() or (unlike if shortcut else "sglang"),
            l2=case.timing.l2,
            selections_per_cycle=loop.num_steps,  # one in draft extend, one per later draft forward
        )
        return row

    def release(self) -> None:
        """Nothing after each case: the head, graphs and reference trees stay for the next one (`close`)."""

    def skip_reason(self, case: DraftCase) -> str | None:
        """Why a case cannot run here, decided before anything is allocated."""
        try:
            variant = variants.get(case.variant)
        except (KeyError, variants.ExternalSelectorError) as exc:
            return str(exc.args[0] if isinstance(exc, KeyError) else exc)
        head, loop, device = case.head, case.loop, self.device
        if loop.topk > head.vocab:
            return f"topk {loop.topk} > vocab {head.vocab}"
        reason = loop.problem() or variant.unclaimed_k(loop.topk) or variant.available(device)
        reason = reason or execution.unavailable(case.path, device)
        if reason:
            return reason
        if case.selector_dtype not in variant.dtypes:  # an external selector declaring other dtypes
            return (
                f"the loop hands the selector {dtypes.dtype_name(case.selector_dtype)} logits (upcast = "
                f"{upcast_name(loop)}); it declares {dtype_names(variant.dtypes)}"
            )
        if device.type == "cpu" and case.variant.startswith("triton") and kernels.interpreting():
            return "Triton under TRITON_INTERPRET=1 is for correctness checks only: too slow for a draft loop"
        # weights, the widest logits with their fp32 temporaries and float64 reference probabilities
        size = head.torch_dtype.itemsize
        weights = (2 * head.vocab * head.hidden + (2 + 4 * head.layers) * head.hidden**2) * size
        return memory.fits(weights + case.batch * loop.topk * head.vocab * (size + 4 + 4 + 2 * 8), device)

    def measure(self, case: DraftCase) -> Row:
        self._configure(case)
        select, copied = self._selector(case, case.variant)
        run_tree, call, body = self._path_calls(case, DraftLoop(self.head, select, case.loop))
        if case.path == "eager":  # the traced eager run (parity) is this path's run
            trees = [t.tree for t in self._traced(case, case.variant)]
        else:
            trees = [run_tree(*each) for each in self.inputs]
        out: Row = {"trees": len(trees) * case.batch, "outputs_copied": copied, **self._parity(case, trees)}
        out.update(self._timing(case, call, body))
        if case.sweep.kernels:
            counted = count_kernels(call, self.device)
            out.update(zip(("kernels_per_cycle", "launches_per_cycle", "kernels_unit"), counted, strict=True))
        if case.path == "graph":
            out["graphs_cached"] = len(self.graphs.graphs)
        return out

    def _path_calls(
        self, case: DraftCase, loop: DraftLoop
    ) -> tuple[Callable[..., DraftTree], Call, Call | None]:
        """(one cycle on given inputs -> tree, the timed zero-argument cycle, the graph body or None)."""
        first, key = self.inputs[0], (case.config_key, case.variant)
        if case.path == "graph":  # the cache holds the sweep's `max_graphs`: a case's and its no-op twin's
            if self.graphs is None or self.graphs.max_graphs != case.sweep.max_graphs:
                if self.graphs is not None:
                    self.graphs.clear()
                self.graphs = GraphCache(self.device, case.sweep.max_graphs)
            graph = self.graphs.get(loop, case.batch, key, case.case_id)
            graph.load(*first)
            return graph, graph.graph.replay, graph.body
        if case.path == "compile":
            if key not in self.compiled:
                execution.set_compile_limits()
                self.compiled[key] = torch.compile(loop.cycle_tuple, dynamic=False)
            compiled = self.compiled[key]
            compiled(*first)  # compile outside any timing
            return lambda *each: DraftTree(*compiled(*each)), lambda: compiled(*first), None
        return loop.cycle, lambda: loop.cycle_tuple(*first), None

    def _parity(self, case: DraftCase, trees: list[DraftTree]) -> Row:
        """Consumer figures of the case's trees against full_softmax's, the float64 selection's and (graph,
        compile) eager's; the tie / precision split from the eager runs (logit values traced)."""
        own, base = self._traced(case, case.variant), self._traced(case, variants.BASELINE)
        ref = self._traced(case, REFERENCE, reference_select)
        base_trees, k = [t.tree for t in base], case.loop.topk
        out: Row = {
            **consumer.compare(trees, base_trees, "base"),
            **consumer.split(own, base, case.loop, "base"),
            **consumer.compare(trees, [t.tree for t in ref], "f64"),
            **consumer.split(own, ref, case.loop, "f64"),
            "step0_diff_base": consumer.share_differs(trees, base_trees, lambda t: t.all_tokens[:, :k]),
            "orphan_trees": consumer.orphan_share(trees, k),
        }
        if case.path != "eager":
            eager = [t.tree for t in own]
            out.update(consumer.compare(trees, eager, "eager"))
            out["bitexact_eager"] = consumer.identical(trees, eager)
        tokens, scores = out["tok_diff_base"], out["score_relerr_base"]
        if math.isnan(tokens):  # one word on the figures against full_softmax
            out["consumer_vs_base"] = "n/a"
        elif tokens > 0:
            out["consumer_vs_base"] = "tokens differ"
        elif scores > SCORE_TOLERANCE:
            out["consumer_vs_base"] = "scores differ (same tokens)"
        else:
            out["consumer_vs_base"] = "scores within rounding" if scores > 0 else "identical"
        return out

    def _traced(self, case: DraftCase, name: str, select: Selector | None = None) -> list[Traced]:
        """Eager traced trees of variant `name` (or of `select`) for this configuration, cached."""
        if name not in self.eager:
            loop = DraftLoop(self.head, select or self._selector(case, name)[0], case.loop)
            self.eager[name] = [loop.cycle_traced(*each) for each in self.inputs]
        return self.eager[name]

    def _selector(self, case: DraftCase, name: str) -> tuple[Selector, bool]:
        """Variant `name`'s selection, and whether its outputs are copied: outputs reused call after call
        would overwrite the previous step's, which the tree still holds; an engine copies them (timed)."""
        if name not in self.selectors:
            select = variants.get(name).select
            reused = _reuses_outputs(select, case, self.device)

            def owned(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
                p, i = select(logits, k)
                return p.clone(), i.clone()

            self.selectors[name] = (owned if reused else select, reused)
        return self.selectors[name]

    def _timing(self, case: DraftCase, call: Call, body: Call | None) -> Row:
        """The cycle as an engine pays it (the host clock on a CPU; on a GPU device events around a call
        that starts on an idle device), in turn with its no-op twin; the device time (GPU only)."""
        calls = [call]
        if case.sweep.selection_share:  # fetched per case: on the graph path the cache then holds both graphs
            noop = DraftLoop(self.head, constant_select, case.loop)  # (the case's used last: never evicted)
            calls.append(self._path_calls(dataclasses.replace(case, variant=NOOP), noop)[1])
            calls[1]()
        gpu, settings = self.info.is_gpu, case.timing
        flush = timing.flusher(self.info, settings)
        samplers = [
            LaunchBoundSampler(c, flush, self.device) if gpu else timing.host_sampler(c, flush) for c in calls
        ]
        samples, *paired = timing.measure_in_turn(samplers, settings)
        out = {**_quantiles("cycle", samples), "samples": len(samples.seconds), "timing": samples.method}
        if paired:
            noop, selection = paired[0].median_us, samples.median_us - paired[0].median_us
            share = min(max(selection / samples.median_us, 0.0), 1.0)
            out.update(noop_median_us=noop, selection_us=selection, selection_share=share)
            out["selection_method"] = SELECTION_METHOD
        if gpu:  # queued launches, or replays of `timing_unroll` captured cycles
            unroll = timing_unroll(settings.graph_unroll, self.info.graph_unroll_cap, case.loop.num_steps)
            prepared = execution.PreparedCall(case.path, call, body or call, graphed=body is not None)
            settings = dataclasses.replace(settings, graph_unroll=unroll)
            device = timing.measure(timing.sampler_for(prepared, self.info, settings), settings)
            out.update(_quantiles("device", device), device_timing=device.method)
        return out

    def _configure(self, case: DraftCase) -> None:
        """The case's head, inputs and caches: those of the last case when its configuration is the same."""
        if self.head is None or self.head.config != case.head:
            self.close()
            self.head = DraftHead(case.head, self.device)
        if self.key == case.config_key:
            return
        self.inputs, self.eager, self.selectors = [], {}, {}  # the old inputs go before the new ones are made
        count, seed, length = case.sweep.cycles, case.sweep.seed, case.loop.extend_tokens
        pairs = inputs_for(case.head, case.batch, length, count, self.device, seed)
        indices: list[torch.Tensor | None] = [None] * count  # accept all: the last position, no index
        if case.loop.accept != "all":  # on the device, made outside the timed cycle (no host sync in it)
            lengths = accept_lengths(case.loop, case.batch, count, seed)
            indices = [extend_index(n, length).to(self.device) for n in lengths]
        self.inputs = [(t, h, i) for (t, h), i in zip(pairs, indices, strict=True)]
        self.key = case.config_key

    def close(self) -> None:
        """Drop the head and everything built on it (graphs, compiled cycles, inputs, cached trees)."""
        if self.graphs is not None:
            self.graphs.clear()
        if self.compiled:
            self.compiled.clear()
            torch._dynamo.reset()
        self.head = self.key = self.graphs = None
        self.inputs, self.eager, self.selectors = [], {}, {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def reference_select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 truth: softmax in float64, top-k with ties to the lowest index."""
    values, index = topk_lowest_index(torch.softmax(logits.double(), dim=-1), k)
    return values.float(), index


def constant_select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A no-op selection of the same output shape (two fill kernels): the cycle without the selection."""
    rows = logits.shape[0]
    topk_p = torch.full((rows, k), 1.0 / k, dtype=torch.float32, device=logits.device)
    return topk_p, torch.arange(k, device=logits.device).expand(rows, k)


def _reuses_outputs(select: Selector, case: DraftCase, device: torch.device) -> bool:
    """Whether two calls of `select` on the decode steps' shape return the same output storage."""
    rows, k = case.batch * case.loop.topk, case.loop.topk
    logits = torch.zeros((rows, case.head.vocab), dtype=case.selector_dtype, device=device)
    first = select(logits, k)  # held through the second call: its memory cannot be handed out again
    pointers = {t.untyped_storage().data_ptr() for t in first}
    return any(t.untyped_storage().data_ptr() in pointers for t in select(logits, k))


def _quantiles(prefix: str, samples: timing.Samples) -> dict[str, float]:
    return {f"{prefix}_{q}_us": getattr(samples, f"{q}_us") for q in ("median", "p20", "p80")}


class LaunchBoundSampler(timing.Sampler):
    """GPU: device events around one call that starts on an idle device, launches issued live."""

    method = "device events, idle start (launches paid)"

    def __init__(self, call: Call, flush: Callable[[], None] | None, device: torch.device):
        super().__init__(call, flush)
        self.timed = timing.DeviceTimer(idle=device)


def timing_unroll(requested: int, cap: int, num_steps: int) -> int:
    """Cycles per timing graph: `requested`, >= 1, cycles x steps within the `cap` (ROCm crashes)."""
    return max(1, min(requested, cap // num_steps))


def count_kernels(call: Call, device: torch.device, cycles: int = 2) -> tuple[float, float, str]:
    """Per call of an already warmed-up `call`, over `cycles` calls: (kernels, host launches, the unit): a
    GPU's device activities and the launch calls that issued them, a CPU's top-level aten ops."""
    gpu = device.type == "cuda"
    if gpu and simulated_gpu.active():  # ops that compute and Triton launches; a graph replay is one launch
        before = simulated_gpu.kernel_counts()
        for _ in range(cycles):
            call()
        kernels, launches = (b - a for a, b in zip(before, simulated_gpu.kernel_counts(), strict=True))
        return kernels / cycles, launches / cycles, f"{GPU_UNIT} {simulated_gpu.LABEL}"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]
    synchronize(device)
    with memory.quiet_profile(activities=activities) as prof:
        for _ in range(cycles):
            call()
        synchronize(device)
    if not gpu:
        aten = [e for e in prof.events() if e.name.startswith("aten::")]
        top_level = sum(e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::") for e in aten)
        return top_level / cycles, math.nan, CPU_UNIT
    device_types = (torch.autograd.DeviceType.CUDA, getattr(torch.autograd.DeviceType, "HIP", None))
    events = list(prof.profiler.kineto_results.events())
    kernels = sum(e.device_type() in device_types for e in events)
    host = torch.autograd.DeviceType.CPU
    launches = sum(e.device_type() == host and bool(LAUNCH_CALL.search(e.name())) for e in events)
    return kernels / cycles, launches / cycles, GPU_UNIT
