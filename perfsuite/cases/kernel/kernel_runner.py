"""Kernel cases: one selector call on one device, timed, its traffic accounted for and its outputs
checked for parity. `KernelRunner` is what `perfsuite run`, `profile`, `call`, `tune` and the
pytest-benchmark front end prepare and measure a kernel case with. Each group sampled in turn also samples
a reference (`prepare_reference`: an exp of the case's logits, and a copy of them) whose figures every row
carries."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from perfsuite import variants
from perfsuite.cases.protocol import InTurnReference, ReadyCase, run_case, run_in_turn
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
    reference: ClassVar[bool] = True
    """Whether groups sampled in turn also sample the reference (`prepare_reference`); a harness measuring
    its cost sets it False on the class."""

    def __post_init__(self) -> None:
        self.device = torch.device(self.info.device)

    def logits(self, case: Case) -> torch.Tensor:
        key = (case.input_key, case.inputs)
        if self._logits is None or self._logits[0] != key:
            self._logits = self._truth = None
            dtype = dtypes.dtype_of(case.dtype)
            self._logits = (
                key,
                inputs.make_logits(
                    case.logits,
                    case.batch,
                    case.vocab,
                    dtype,
                    seed=case.inputs.seed,
                    device=self.device,
                    row_pad=case.inputs.row_pad,
                    scale=case.inputs.scale,
                    files=case.inputs.files,
                ),
            )
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
        reason = (
            variant.unclaimed_k(case.topk)
            or variant.available(self.device)
            or variant.untimed(self.device)
            or execution.unavailable(case.path, self.device)
        )
        if reason:
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

    def run(self, case: Case) -> dict[str, object]:
        """Measure one case; always returns a row (status ok, skipped or error)."""
        return run_case(self, case)

    def run_in_turn(self, cases: Sequence[Case]) -> list[dict[str, object]]:
        """Measure cases of one shape and path, sampled in turn with the reference of their logits;
        speedups paired with the baseline's."""
        names = [case.variant for case in cases]
        baseline = names.index(variants.BASELINE) if variants.BASELINE in names else None
        make = (lambda: self.prepare_reference(cases[0])) if self.reference else None
        return run_in_turn(self, cases, cases[0].timing, baseline, make)

    def prepare_reference(self, case: Case) -> InTurnReference:
        """The group's in-turn reference, two fixed workloads on the case's logits into a preallocated
        buffer, timed as the cases are (flushed before each sample when cold; on the graph path `unroll`
        calls captured in a graph, on the eager and compile paths called eagerly: nothing to compile):
        `torch.exp(logits, out=dst)`, the one rows are judged against (`REFERENCE`), and `dst.copy_(logits)`,
        the one-read floor whose rate gives `copy_gbps_in_turn` (every `COPY_EVERY` rounds). The exp
        shares the selectors' bottleneck on each device (memory on a GPU, like a copy; the vector units on
        a CPU, where contention slows the selectors and barely moves a copy), so it moves with them when
        the machine drifts."""
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

        def row(
            refs: Sequence[timing.Samples], own: timing.Samples, figures: dict[str, object]
        ) -> dict[str, object]:
            return reference_figures(refs[0], refs[1], own, figures, copy_bytes)

        return InTurnReference((exp, copy), row)

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
        """Prepare and check the case, untimed: its sampler, and its figures from samples (with counters,
        also its measured HBM bytes)."""
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
        dtype = dtypes.dtype_of(case.dtype)
        traffic = variants.get(case.variant).traffic(case.batch, case.vocab, case.topk, dtype)
        ideal = variants.ideal_traffic(case.batch, case.vocab, case.topk, dtype)
        copy = self.env["copy_gbps"]
        return figures(
            samples, traffic, ideal, peak_temp, self.info.peak_gbps, copy, self.info.model_cache_bytes
        )


COPY_EVERY = 4
"""The in-turn copy is sampled every `COPY_EVERY` rounds (7 of 25, 2 of 5): its median is a rate, not a
per-round anchor, and a cold sample costs a flush (3 ms on the 2-core VM), so the copy costs a quarter of
what the exp does."""
REFERENCE = "logits exp"
"""What the in-turn reference rows are judged against is, as the `reference` column starts (format 2's
was "logits copy": `compare` judges two runs against the reference only where both sampled the same)."""


def reference_figures(
    ref: timing.Samples, copy: timing.Samples, own: timing.Samples, row: dict[str, object], copy_bytes: int
) -> dict[str, object]:
    """A row's reference columns: the reference's median and p20/p80, the row's time over it per round
    (`vs_ref`: median, p20, p80), the copy sampled beside it (its median, its rate) and the row's `gbps`
    as a percent of that rate."""
    ratio = timing.paired_ratio(own, ref)
    copy = copy.taken()
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
