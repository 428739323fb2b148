"""`perfsuite tune`: every candidate launch plan of the Triton kernels timed per shape of a scenario on this
GPU (the suite's samplers, on the scenario's path and `[timing]`, once its outputs passed the exact parity
check: one that fails is recorded, never chosen), the fastest exact one per shape kept as a tuned-plan table
(`kernels.plan_table`). `triton_argmax`'s cases tune the argmax kernels apart, judged on their indices."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
import torch

from perfsuite import variants
from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.core.dtypes import dtype_of
from perfsuite.correctness import parity
from perfsuite.kernels import plan as plans
from perfsuite.kernels import plan_table
from perfsuite.kernels.plan_table import Tunables, TunedShape, TunedTable
from perfsuite.measure import execution, timing
from perfsuite.measure.device import DeviceInfo
from perfsuite.measure.environment import package_version
from perfsuite.results.rows import one_line
from perfsuite.scenario.load import Case
from perfsuite.variants.base import PlanFor

FUSED_WARPS = (4, 8, 16)
FUSED_BYTES_PER_THREAD = (16, 32, 64)
SPLIT_PROGRAMS = ((4, 16), (4, 32), (8, 16))  # (warps, bytes per thread per tile)
SPLIT_WAVES = (0.5, 1.0, 2.0, 4.0)
# A candidate replaces the heuristic plan only when its median is this much lower and its p80 is below the
# heuristic's p20 (outside both runs' noise): the fastest of ~30 noisy medians is otherwise a coin toss.
MIN_GAIN = 0.03


def variant_plan(name: str) -> PlanFor | None:
    """A built-in Triton variant's `plan_for` (the plan its `select` launches); None for other variants."""
    return variants.get(name).plan_for if name in variants.names() else None


def selection_of(variant: str) -> plans.Selection:
    """What the variant's kernels select: "argmax" for an argmax Triton variant, else "topk"."""
    plan_for = variant_plan(variant)
    return "topk" if plan_for is None else plan_for(1, 1, 1, torch.float32, plans.Hardware()).selection


def shapes_of(cases: Iterable[Case]) -> list[Case]:
    """One case per (dtype, batch, vocab, k, path, selection), whatever else its variant: the shapes to
    tune (an argmax variant's case tunes the argmax kernels, every other the exact top-k)."""
    distinct: dict[tuple, Case] = {}
    for c in cases:
        distinct.setdefault((c.dtype, c.batch, c.vocab, c.topk, c.path, selection_of(c.variant)), c)
    return list(distinct.values())


def candidates(
    batch: int, vocab: int, k: int, hw: plans.Hardware, element_size: int, selection: plans.Selection = "topk"
) -> list[Tunables]:
    """The heuristic plan first, then every candidate that launches differently for this shape: fused with
    FUSED_WARPS x FUSED_BYTES_PER_THREAD, with and without prefetch; for rows long enough to split, split
    with SPLIT_PROGRAMS at SPLIT_WAVES (and one wave without prefetch)."""
    from perfsuite.kernels.topk_softmax import plan_launches

    found = [Tunables.of(plans.choose(batch, vocab, k, hw, element_size, selection))]
    for prefetch, warps, per_thread in itertools.product((True, False), FUSED_WARPS, FUSED_BYTES_PER_THREAD):
        block = per_thread // element_size * hw.warp_size * warps
        found.append(Tunables("fused", block, warps, prefetch=prefetch, selection=selection))
    if vocab >= 2 * plans.SPLIT_MIN_CHUNK:
        for warps, per_thread in SPLIT_PROGRAMS:
            block = per_thread // element_size * hw.warp_size * warps
            found += [Tunables("split", block, warps, waves, selection=selection) for waves in SPLIT_WAVES]
            found.append(Tunables("split", block, warps, 1.0, prefetch=False, selection=selection))
    layout = plans.RowLayout.contiguous(vocab, element_size)
    distinct: dict[tuple, Tunables] = {}  # by what is launched (tiles shrink to short rows)
    for tunables in found:
        plan = tunables.plan_for(batch, vocab, k, hw, element_size)
        launches = plan_launches(batch, vocab, k, plan, layout)
        distinct.setdefault(tuple((x.grid, *x.constants.items(), x.num_warps) for x in launches), tunables)
    return list(distinct.values())


@dataclass(frozen=True)
class TimedPlan:
    """One candidate on one shape: its launch, median time and parity verdict (or why it failed)."""

    tunables: Tunables
    plan: plans.Plan
    median_us: float = math.nan
    p20_us: float = math.nan
    p80_us: float = math.nan
    verdict: str = ""
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.verdict == "pass" and not math.isnan(self.median_us)


def time_candidate(case: Case, tunables: Tunables, inputs: KernelRunner, hw: plans.Hardware) -> TimedPlan:
    """Time one candidate plan on a case's logits, path and timing settings."""
    from perfsuite.kernels import topk_softmax

    logits = inputs.logits(case)
    plan = tunables.plan_for(case.batch, case.vocab, case.topk, hw, logits.element_size())
    timed = TimedPlan(tunables, plan)
    try:
        prepared = execution.prepare(
            case.path, lambda x, k: topk_softmax.run_plan(x, k, plan), logits, case.topk
        )
        argmax = plan.selection == "argmax"  # judged on its indices: topk_p is the constant 1.0
        check = parity.check("inexact" if argmax else "exact", *prepared.run(), inputs.truth(case)[0])
        if check.verdict != "pass" and not (argmax and check.verdict == "inexact"):
            return replace(timed, verdict=check.verdict, reason=check.problem)
        samples = timing.measure(timing.sampler_for(prepared, inputs.info, case.timing), case.timing)
    except Exception as exc:  # a candidate that cannot launch (resources, capture) is a finding
        return replace(timed, verdict="error", reason=one_line(exc))
    finally:
        if logits.device.type == "cuda":
            torch.cuda.empty_cache()
    figures = {"median_us": samples.median_us, "p20_us": samples.p20_us, "p80_us": samples.p80_us}
    return replace(timed, **figures, verdict="pass")


def best_of(timed: list[TimedPlan]) -> TimedPlan | None:
    """The fastest usable candidate if it beats the heuristic (`timed[0]`) by MIN_GAIN outside the noise,
    else the heuristic; None when no candidate is usable."""
    best, heuristic = min((t for t in timed if t.usable), key=lambda t: t.median_us, default=None), timed[0]
    if best is None or not heuristic.usable:
        return best
    clear = best.median_us < (1 - MIN_GAIN) * heuristic.median_us and best.p80_us < heuristic.p20_us
    return best if clear else heuristic


@dataclass
class TuneOutcome:
    """Every candidate's row and the table of the best plans, so far."""

    rows: list[dict[str, object]]
    table: TunedTable


OnShape = Callable[[Case, list[TimedPlan], "TuneOutcome"], None]


def tune(cases: Iterable[Case], info: DeviceInfo, on_shape: OnShape | None = None) -> TuneOutcome:
    """Time the candidates of every shape of `cases` on `info`'s device. The outcome grows shape by shape
    and `on_shape` sees it after each (to write it as it goes: an interruption keeps the tuned shapes)."""
    hw = plans.hardware(info.device)
    inputs = KernelRunner(info, {"copy_gbps": None})
    shapes = shapes_of(cases)
    versions = {name: package_version(name) for name in ("torch", "triton")}
    path = ",".join(sorted({c.path for c in shapes}))
    outcome = TuneOutcome([], TunedTable(hw.name or info.name, hw.sms, hw.warp_size, versions, path))
    for case in shapes:
        size, selection = dtype_of(case.dtype).itemsize, selection_of(case.variant)
        tunables = candidates(case.batch, case.vocab, case.topk, hw, size, selection)
        timed = [time_candidate(case, t, inputs, hw) for t in tunables]
        shape = {"dtype": case.dtype, "batch": case.batch, "vocab": case.vocab, "k": case.topk}
        for rank, t in enumerate(timed):
            row = {**shape, "path": case.path, "heuristic": rank == 0, **asdict(t.tunables)}
            row |= {"n_splits": t.plan.n_splits, "chunk": t.plan.chunk}
            outcome.rows.append(row | {k: v for k, v in vars(t).items() if k not in ("tunables", "plan")})
        best = best_of(timed)
        if best is not None:
            times = {"median_us": best.median_us, "heuristic_us": timed[0].median_us}
            entry = TunedShape(**shape, best=best.tunables, **times)
            outcome.table = replace(outcome.table, entries=(*outcome.table.entries, entry))
        if on_shape:
            on_shape(case, timed, outcome)
    return outcome


def write_outcome(outcome: TuneOutcome, table: Path, csv: Path) -> None:
    """The table and every candidate's row, each file replaced whole (a kill mid-write keeps the old)."""
    for path in (table, csv):
        path.parent.mkdir(parents=True, exist_ok=True)
    plan_table.replace_text(table, outcome.table.to_json())
    plan_table.replace_text(csv, pd.DataFrame(outcome.rows).to_csv(index=False))
