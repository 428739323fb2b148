"""Kernel cases: one selector call on one device, timed, its traffic accounted for and its parity checked
(`KernelRunner`, for `perfsuite run`, `profile`, `call`, `tune` and the pytest-benchmark front end). Groups
sampled in turn also sample a reference (`prepare_reference`) whose figures every row carries."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from perfsuite import variants
from perfsuite.cases.protocol import InTurnReference, ReadyCase, run_in_turn
from perfsuite.core import dtypes
from perfsuite.correctness import parity
from perfsuite.correctness.logits_shape import ShapeMemo
from perfsuite.measure import execution, memory, timing
from perfsuite.measure.device import DeviceInfo
from perfsuite.results.rows import case_row, figures, launch_of
from perfsuite.scenario import inputs
from perfsuite.scenario.load import Case


@dataclass
class KernelRunner:
    """Runs cases on one device, keeping the current logits, reference and baseline between cases."""

    info: DeviceInfo
    env: dict[str, object]
    _logits: tuple[tuple, torch.Tensor] | None = None
    _truth: tuple[tuple, parity.Truth, tuple[torch.Tensor, torch.Tensor]] | None = None
    counters: Callable[[Case], dict[str, object]] | None = None  # measured bytes (`run --counters`)
    shapes: ShapeMemo = field(default_factory=ShapeMemo)  # the logits' distribution figures, per tensor
    device: torch.device = field(init=False)
    reference: ClassVar[bool] = True  # groups also sample `prepare_reference` (a harness timing it: False)

    def __post_init__(self) -> None:
        self.device = torch.device(self.info.device)

    def logits(self, case: Case) -> torch.Tensor:
        key = (case.input_key, case.inputs)
        if self._logits is None or self._logits[0] != key:
            self._logits = self._truth = None
            given = case.inputs
            options = {"seed": given.seed, "row_pad": given.row_pad, "scale": given.scale}
            shape = (case.logits, case.batch, case.vocab, dtypes.dtype_of(case.dtype))
            made = inputs.make_logits(*shape, device=self.device, files=given.files, **options)
            self._logits = (key, made)
        return self._logits[1]

    def truth(self, case: Case) -> tuple[parity.Truth, tuple[torch.Tensor, torch.Tensor]]:
        """float64 reference and the eager full_softmax outputs for the case's logits and k."""
        key = (case.input_key, case.inputs, case.topk)
        if self._truth is None or self._truth[0] != key:
            logits = self.logits(case)
            baseline = variants.get(variants.BASELINE)(logits, case.topk)
            self._truth = (key, parity.truth(logits, case.topk), baseline)
        return self._truth[1], self._truth[2]

    def skip_reason(self, case: Case) -> str | None:
        """Why a case cannot run here, decided before anything is allocated."""
        variant = variants.get(case.variant)
        if case.topk > case.vocab:
            return f"topk {case.topk} > vocab {case.vocab}"
        if reason := variant.unclaimed_k(case.topk) or variant.available(self.device):
            return reason
        if reason := variant.untimed(self.device) or execution.unavailable(case.path, self.device):
            return reason
        dtype = dtypes.dtype_of(case.dtype)
        elements = case.batch * case.vocab
        need = (
            inputs.bytes_needed(case.batch, case.vocab, dtype, case.inputs.row_pad)
            + elements * 8  # the float64 reference's logsumexp
            + 2 * variant.traffic(case.batch, case.vocab, case.topk, dtype).temp
            + elements * dtype.itemsize  # the baseline's probabilities
            + elements * dtype.itemsize  # the in-turn reference's buffer (its exp, its copy of the logits)
        )
        host = inputs.host_bytes_needed(case.logits, case.batch, case.inputs.files)
        return memory.fits(need, self.device, host_bytes=host)

    def run_in_turn(self, cases: Sequence[Case]) -> list[dict[str, object]]:
        """Measure cases of one shape and path in turn with their reference; speedups paired."""
        names = [case.variant for case in cases]
        baseline = names.index(variants.BASELINE) if variants.BASELINE in names else None
        make = (lambda: self.prepare_reference(cases[0])) if self.reference else None
        return run_in_turn(self, cases, cases[0].timing, baseline, make)

    def prepare_reference(self, case: Case) -> InTurnReference:
        """The group's in-turn reference, timed as the cases are: `torch.exp(logits, out=dst)`, what rows are
        judged against, and `dst.copy_(logits)`, the one-read floor giving `copy_gbps_in_turn`. The exp shares
        the selectors' bottleneck (memory on a GPU; the vector units on a CPU, where contention barely moves
        a copy), so it moves with them when the machine drifts."""
        logits = self.logits(case)
        dst = torch.empty_like(logits, memory_format=torch.contiguous_format)
        graphed = case.path == "graph" and self.device.type == "cuda"

        def sampler(call: Callable[[], object]) -> timing.Sampler:
            def body() -> execution.Outputs:
                call()
                return dst, dst

            prepared = execution.PreparedCall(case.path, body, body, graphed=graphed)
            return timing.sampler_for(prepared, self.info, case.timing)

        exp = sampler(lambda: torch.exp(logits, out=dst))
        copy = sampler(lambda: dst.copy_(logits))
        copy.every = COPY_EVERY
        copy_bytes = 2 * logits.numel() * logits.element_size()
        return InTurnReference((exp, copy), functools.partial(reference_figures, copy_bytes=copy_bytes))

    def identify(self, case: Case) -> dict[str, object]:
        return {**case_row(case, self.env), "launch": launch_of(case)}

    def release(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def prepare(self, case: Case) -> tuple[execution.PreparedCall, parity.Parity, int]:
        """Bind the case on its path, check its outputs' parity and measure its peak temporary memory."""
        variant = variants.get(case.variant)
        logits = self.logits(case)
        ref, baseline = self.truth(case)
        prepared = execution.prepare(case.path, variant.select, logits, case.topk)
        topk_p, topk_index = prepared.run()
        check = parity.check(variant.accuracy, topk_p, topk_index, ref, baseline)
        # a graph replay allocates nothing (its temporaries live in the graph's pool): measure the
        # captured ops themselves, run once outside the graph
        measured = prepared.body if prepared.graphed else prepared.run
        return prepared, check, memory.peak_temp_bytes(measured, self.info)

    def prepare_timed(self, case: Case) -> ReadyCase:
        """Prepare and check the case, untimed: its sampler and its figures from samples (counters too)."""
        prepared, check, peak_temp = self.prepare(case)

        def row(samples: timing.Samples) -> dict[str, object]:
            shape = self.shapes.columns((case.input_key, case.inputs), self.logits(case), case.topk)
            out = {**check.as_row(), **self.figures(case, samples, peak_temp), **shape}
            if self.counters is not None:
                self.release()  # the counter tool's process needs the memory this one cached
                out.update(self.counters(case))
            return out

        return ReadyCase(timing.sampler_for(prepared, self.info, case.timing), row)

    def measure(self, case: Case) -> dict[str, object]:
        """Prepare, check and time the case alone."""
        timed = self.prepare_timed(case)
        return {**timed.figures(timing.measure(timed.sampler, case.timing)), "status": "ok", "reason": ""}

    def figures(self, case: Case, samples: timing.Samples, peak_temp: int) -> dict[str, object]:
        """Time, bytes and bandwidth columns of one measured case."""
        shape = (case.batch, case.vocab, case.topk, dtypes.dtype_of(case.dtype))
        traffic, ideal = variants.get(case.variant).traffic(*shape), variants.ideal_traffic(*shape)
        info, copy = self.info, self.env["copy_gbps"]
        return figures(samples, traffic, ideal, peak_temp, info.peak_gbps, copy, info.model_cache_bytes)


# The copy's median is a rate, not a per-round anchor, and a cold sample costs a flush: sampled every
# `COPY_EVERY` rounds (7 of 25, 2 of 5), it costs a quarter of what the exp does.
COPY_EVERY = 4
# How the `reference` column starts (format 2's was "logits copy": `compare` judges two runs against the
# reference only where both sampled the same).
REFERENCE = "logits exp"


def reference_figures(
    refs: Sequence[timing.Samples], own: timing.Samples, row: dict[str, object], copy_bytes: int
) -> dict[str, object]:
    """A row's reference columns: the exp's quantiles, `vs_ref` per round, the copy's rate and `pct_copy`."""
    ref, copy = refs[0], refs[1].taken()
    ratio = timing.paired_ratio(own, ref)
    rate = memory.gbps(copy_bytes, copy.median_us * 1e-6)
    gbps = row.get("gbps")
    return {
        "ref_median_us": ref.median_us,
        "ref_p20_us": ref.p20_us,
        "ref_p80_us": ref.p80_us,
        "vs_ref": ratio.median,
        "vs_ref_p20": ratio.p20,
        "vs_ref_p80": ratio.p80,
        "copy_us_in_turn": copy.median_us,
        "copy_gbps_in_turn": rate,
        "pct_copy_in_turn": memory.percent(gbps, rate) if isinstance(gbps, (int, float)) else float("nan"),
        "reference": f"{REFERENCE}, {ref.method}",
    }
