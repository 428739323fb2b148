"""The compile plan: every Triton launch a GPU check stage will make, one per compile key, ahead of it.

Each source below derives its launches from the inputs the stage itself builds, so the compile keys
(`topk_softmax.Launch.compile_key`, which carry the logits' dtype, V, row stride and shift) are the
stage's:
- `sweep_units`: a scenario's kernel-level cases (`perfsuite run`), logits with the case's `row_pad`;
- `candidate_units`: every candidate plan `perfsuite tune` times for the cases' shapes;
- `edge_matrix_units`: the edge-case matrix `perfsuite run` adds after a sweep's last case;
- `draft_units`: a scenario's draft cases (the extend's `[B, V]` and the decode steps' `[B * k, V]`
  selections, fp32 when upcast);
- `battery_units`: the conformance battery (`perfsuite check`) on Triton selectors, each case's logits
  built as the battery builds them (row-strided, offset and int64-strided views included).
Plans are each variant's `plan_for` on the hardware given, so a tuned table in `PERFSUITE_PLANS` gives
the tuned plans; `triton_argmax`'s plans select the argmax kernels (`argmax`, `argmax_partials`,
`argmax_merge`), whose keys do not depend on k. `distinct` keeps one launch per key, in the order of
the sources given.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from perfsuite import variants
from perfsuite.core.dtypes import dtype_name, dtype_of
from perfsuite.kernels import plan as plans
from perfsuite.scenario.load import Case, Scenario

PlanFor = Callable[[int, int, int, torch.dtype, plans.Hardware], plans.Plan]


@dataclass(frozen=True)
class Warmup:
    """One launch to make: a kernel of a plan on a row geometry, and the specialisation it compiles."""

    kernel: str  # a key of topk_softmax.KERNELS
    source: str  # where it comes from, for the log: "triton_split V151936 B1 k8"
    dtype: str
    batch: int
    vocab: int
    k: int
    stride: int  # elements between row starts
    shift: int  # elements from the 16-byte boundary below the first row to its start
    plan: plans.Plan
    n_parts: int  # merge: partials per row (the first stage's splits)
    key: tuple  # Launch.compile_key

    def describe(self) -> str:
        kernel, logits, constants, _, warps = self.key
        shown = " ".join(f"{name}={value}" for name, value in constants)
        return f"{kernel} {logits.removeprefix('torch.') or '-'} {shown} w{warps}  ({self.source})"


def plan_functions() -> dict[str, PlanFor]:
    """Each Triton variant's `plan_for` (the plan its `select` launches), by variant name."""
    found = {}
    for name in variants.names():
        plan_for = getattr(inspect.getmodule(variants.get(name).select), "plan_for", None)
        if plan_for is not None:
            found[name] = plan_for
    return found


def selection_of(name: str) -> plans.Selection:
    """What the Triton variant `name` selects ("argmax" or "topk"; "topk" for any other variant)."""
    from perfsuite.tools import tuning

    return tuning.variant_selection(name)


def plan_units(
    source: str, dtype: torch.dtype, batch: int, vocab: int, k: int, plan: plans.Plan, stride: int, shift: int
) -> list[Warmup]:
    """The launches `topk_softmax.run_plan` makes for `plan` on `[batch, vocab]` rows of this geometry."""
    from perfsuite.kernels import topk_softmax

    layout = topk_softmax.RowLayout(stride, shift, dtype.itemsize)
    launches = topk_softmax.plan_launches(batch, vocab, k, plan, layout)
    n_parts = launches[0].grid[-1] if plan.kernel == "split" else 0
    shape = (dtype_name(dtype), batch, vocab, k, stride, shift, plan, n_parts)
    return [Warmup(x.kernel, source, *shape, x.compile_key(dtype)) for x in launches]


def logits_units(name: str, logits: torch.Tensor, k: int, hw: plans.Hardware, source: str) -> list[Warmup]:
    """What the variant `name` launches on these very logits (their layout decides the key)."""
    from perfsuite.kernels import topk_softmax

    batch, vocab = logits.shape
    if batch == 0:
        return []
    layout = topk_softmax.RowLayout.of(logits)
    plan = plan_functions()[name](batch, vocab, k, logits.dtype, hw)
    return plan_units(source, logits.dtype, batch, vocab, k, plan, layout.stride, layout.shift)


def _contiguous_units(
    name: str,
    dtype: torch.dtype,
    batch: int,
    vocab: int,
    k: int,
    hw: plans.Hardware,
    source: str,
    pad: int = 0,
) -> list[Warmup]:
    """What the variant `name` launches on freshly allocated `[batch, vocab]` logits (rows `pad` apart
    more than `vocab`; fresh buffers are 16-byte aligned)."""
    if batch <= 0:
        return []
    plan = plan_functions()[name](batch, vocab, k, dtype, hw)
    return plan_units(source, dtype, batch, vocab, k, plan, vocab + pad, 0)


def sweep_units(cases: Iterable[Case], hw: plans.Hardware) -> list[Warmup]:
    """The Triton cases' launches (`perfsuite run`'s kernel-level sweep)."""
    plan_for = plan_functions()
    found: list[Warmup] = []
    for case in cases:
        if case.variant in plan_for:
            source = f"{case.variant} V{case.vocab} B{case.batch} k{case.topk}"
            dtype = dtype_of(case.dtype)
            pad = case.inputs.row_pad
            found += _contiguous_units(
                case.variant, dtype, case.batch, case.vocab, case.topk, hw, source, pad
            )
    return found


def candidate_units(cases: Iterable[Case], hw: plans.Hardware) -> list[Warmup]:
    """Every candidate plan `perfsuite tune` times for the shapes of the Triton cases of `cases`."""
    from perfsuite.tools import tuning

    cases = [c for c in cases if c.variant in plan_functions() and c.batch > 0]
    found: list[Warmup] = []
    for case in tuning.shapes_of(cases):
        dtype, pad = dtype_of(case.dtype), case.inputs.row_pad
        selection = tuning.selection_of(case)
        argmax = " argmax" if selection == "argmax" else ""
        source = f"tune V{case.vocab} B{case.batch} k{case.topk}{argmax}"
        for tunables in tuning.candidates(case.batch, case.vocab, case.topk, hw, dtype.itemsize, selection):
            plan = tunables.plan_for(case.batch, case.vocab, case.topk, hw, dtype.itemsize)
            where = f"{source}, {tunables.describe()}"
            found += plan_units(where, dtype, case.batch, case.vocab, case.topk, plan, case.vocab + pad, 0)
    return found


def edge_matrix_units(scenario: Scenario, hw: plans.Hardware) -> list[Warmup]:
    """The edge-case matrix `perfsuite run` makes after the sweep (`edge_cases.EDGE_TOPK`, the sweep's dtypes,
    its single-device variants) on `edge_cases.edge_logits`."""
    from perfsuite.correctness import edge_cases
    from perfsuite.correctness.edge_cases import EDGE_TOPK

    plan_for = plan_functions()
    names = list(dict.fromkeys(v for s in scenario.sweeps for v in s.variants if v in plan_for))
    dtypes = list(dict.fromkeys(dtype_of(d) for s in scenario.sweeps for d in s.dtypes))
    found: list[Warmup] = []
    for dtype in dtypes:
        logits = edge_cases.edge_logits(dtype, "cpu")
        for k in EDGE_TOPK:
            for name in names:
                found += logits_units(name, logits, k, hw, f"{name} edge-case matrix k{k}")
    return found


def draft_units(scenario: Scenario, hw: plans.Hardware) -> list[Warmup]:
    """The selections of a scenario's draft cases: the extend on `[B, V]`, the decode steps (and the
    draft runner's output-reuse probe) on `[B * k, V]`; fp32 logits when upcast, else the head's dtype."""
    from perfsuite.cases.draft.draft_table import expand_draft

    plan_for = plan_functions()
    found: list[Warmup] = []
    for case in expand_draft(scenario):
        if case.variant not in plan_for:
            continue
        head, loop = case.head, case.loop
        dtype = torch.float32 if loop.upcast else head.torch_dtype
        for rows in (case.batch, case.batch * loop.topk):
            source = f"{case.variant} draft V{head.vocab} rows {rows} k{loop.topk}"
            found += _contiguous_units(case.variant, dtype, rows, head.vocab, loop.topk, hw, source)
    return found


def battery_units(
    selectors: Iterable[str],
    hw: plans.Hardware,
    device: torch.device,
    *,
    cases: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    quick: bool = False,
) -> list[Warmup]:
    """The Triton launches of `perfsuite check SELECTORS [--case ...] [--dtype ...] [--quick]` on
    `device`: each case's logits built as the battery builds them (on the CPU: the same strides and
    offsets), for every dtype the selector claims and every k of the case, and for a `batch_check` case
    its other batches (`consistency.other_batches`: the rows reversed, row 0 alone)."""
    from perfsuite.correctness.conformance import battery, consistency
    from perfsuite.correctness.conformance import battery_patterns as catalogue

    plan_for = plan_functions()
    names = [n for n in selectors if n in plan_for and not variants.get(n).available(device)]
    chosen = catalogue.select(cases, quick=quick)
    wanted = [d for d in battery.DTYPES if dtypes is None or d in set(dtypes)]
    found: list[Warmup] = []
    for case in chosen:
        if case.graph and device.type != "cuda":
            continue  # the battery skips it (graph capture needs a GPU)
        for dtype in wanted:
            users = [n for n in names if dtype in variants.get(n).dtypes]
            if not users:
                continue
            try:
                logits = case.build(dtype, torch.device("cpu"))
            except catalogue.Skip:
                continue
            batches = [logits] + [
                rows for _, rows, _ in consistency.other_batches(logits) if case.batch_check
            ]
            for k in case.topks():
                for name in users:
                    if not variants.get(name).unclaimed_k(k):
                        for rows in batches:
                            found += logits_units(name, rows, k, hw, f"{name} check {case.name} k{k}")
            del logits
    return found


def distinct(*sources: list[Warmup]) -> list[Warmup]:
    """One launch per compile key: the first of each, sources in the order given, each source's scans
    before its merges (a budget that runs out leaves the later sources' kernels to compile when used)."""
    seen: set[tuple] = set()
    ordered: list[Warmup] = []
    for source in sources:
        kept = []
        for unit in source:
            if unit.key not in seen:
                seen.add(unit.key)
                kept.append(unit)
        ordered += sorted(kept, key=lambda w: w.kernel.endswith("merge"))
    return ordered
