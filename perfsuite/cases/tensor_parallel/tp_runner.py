"""Tensor-parallel cases, run on every rank of a process group: `select` picks a scenario's cases of one tp
size, and `TensorParallelRunner.run(case)` gives the row (on rank 0) of one case.

Each rank builds the same full logits from the seed (so its parity is checked against the full float64
reference) and keeps its vocabulary slice. Per case: a skip decision all ranks share; one call whose
outputs every rank checks for parity and all ranks compare bit for bit; peak temporaries; then timing,
each sample the slowest rank's. A rank that fails a phase makes every rank record the case as an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pandas as pd
import torch

from perfsuite import variants
from perfsuite.cases.protocol import run_case
from perfsuite.cases.tensor_parallel import tp_rows
from perfsuite.cases.tensor_parallel.rank_sampler import RankSampler
from perfsuite.core import dtypes
from perfsuite.correctness import parity
from perfsuite.measure import memory, timing
from perfsuite.measure.device import DeviceInfo
from perfsuite.results.rows import CaseFailed, is_out_of_memory, one_line
from perfsuite.scenario import inputs
from perfsuite.scenario import load as scenarios
from perfsuite.scenario.load import Case, Scenario
from perfsuite.variants import tensor_parallel
from perfsuite.variants.base import unclaimed_k
from perfsuite.variants.tensor_parallel import Local
from perfsuite.variants.tensor_parallel.group import Group
from perfsuite.variants.tensor_parallel.vocab_slice import local_slice, vocab_slice

T = TypeVar("T")
VERDICT_RANK = {"fail": 3, "inexact": 2, "pass": 1, "n/a": 0}


@dataclass
class Truth:
    """One rank's inputs for a case: its slice, the float64 reference and the single-device baseline."""

    local: Local
    ref: parity.Truth
    baseline: tuple[torch.Tensor, torch.Tensor]


@dataclass
class TensorParallelRunner:
    """Runs tensor-parallel cases on this rank; `run` returns the row (meaningful on rank 0)."""

    group: Group
    info: DeviceInfo
    env: dict[str, object]
    _cache: tuple[tuple, torch.Tensor] | None = field(default=None, repr=False)
    _truth: tuple[tuple, Truth] | None = field(default=None, repr=False)

    def run(self, case: Case) -> dict[str, object]:
        """Measure one case on every rank; always returns a row (ok, skipped or error)."""
        return run_case(self, case)

    def identify(self, case: Case) -> dict[str, object]:
        return tp_rows.case_row(case, self.env, self.group.backend)

    def release(self) -> None:
        """Inputs stay for the next case that shares them."""

    def skip_reason(self, case: Case) -> str | None:
        """Why some rank cannot run `case` (every rank gets the same answer)."""
        reasons = [r for r in self.group.objects(self.rank_skip_reason(case)) if r]
        return str(reasons[0]) if reasons else None

    def rank_skip_reason(self, case: Case) -> str | None:
        """Why this rank cannot run `case`, decided before anything is allocated."""
        if not tensor_parallel.is_tp_variant(case.variant):
            known = ", ".join(tensor_parallel.names())
            return f"{case.variant} is not a tensor-parallel variant (tp={case.tp}); use one of: {known}"
        if case.path != "eager":
            return f"tensor-parallel variants run eagerly; path {case.path!r} is not measured"
        if case.topk > case.vocab:
            return f"topk {case.topk} > vocab {case.vocab}"
        variant = tensor_parallel.get(case.variant)
        reason = unclaimed_k(variant.max_k, case.topk) or variant.available(self.group.device)
        if reason:
            return reason
        dtype = dtypes.dtype_of(case.dtype)
        width = -(-case.vocab // case.tp) + case.inputs.row_pad
        traffic = variant.traffic(case.batch, case.vocab, case.topk, dtype, case.tp)
        need = (
            case.batch * (case.vocab * (2 * dtype.itemsize + 8) + width * dtype.itemsize) + 2 * traffic.temp
        )
        return memory.fits(need, self.group.device)

    def measure(self, case: Case) -> dict[str, object]:
        """Prepare, check and time the case on every rank; a phase that fails on any rank raises
        `CaseFailed` on all of them."""
        truth = self._agreed(lambda: self.prepare(case))
        variant = tensor_parallel.get(case.variant)
        outputs = self._agreed(lambda: variant(truth.local, case.topk))
        check = self._agreed(lambda: parity.check(variant.accuracy, *outputs, truth.ref, truth.baseline))
        call = lambda: variant(truth.local, case.topk)  # noqa: E731
        peak = self._agreed(lambda: memory.peak_temp_bytes(call, self.info))
        sampler = RankSampler(call, self.group, self.info, case.timing)
        agree = self.group.max  # each sample is the slowest rank's; all ranks stop together
        samples = self._agreed(lambda: timing.measure_in_turn([sampler], case.timing, agree)[0])
        peak = int(self.group.max([peak])[0])
        figures = tp_rows.figures(case, samples, peak, self.info, self.env.get("copy_gbps"))
        return {**self._parity_over_ranks(check, outputs), **figures, "status": "ok", "reason": ""}

    def full_logits(self, case: Case) -> torch.Tensor:
        """The case's full `[B, V]` logits, the same on every rank (kept for the cases that share them)."""
        key = (case.input_key, case.inputs)
        if self._cache is None or self._cache[0] != key:
            self._cache = None
            logits = inputs.make_logits(
                case.logits,
                case.batch,
                case.vocab,
                dtypes.dtype_of(case.dtype),
                seed=case.inputs.seed,
                device=self.group.device,
                scale=case.inputs.scale,
                files=case.inputs.files,
            )
            self._cache = (key, logits)
        return self._cache[1]

    def prepare(self, case: Case) -> Truth:
        """This rank's slice, the reference and the baseline (kept for the cases that share them)."""
        key = (case.input_key, case.inputs, case.topk)
        if self._truth is None or self._truth[0] != key:
            self._truth = None
            full = self.full_logits(case)
            shard = vocab_slice(case.vocab, self.group.size, self.group.rank)
            local = Local(local_slice(full, shard, case.inputs.row_pad), shard, self.group)
            baseline = variants.get(variants.BASELINE)(full, case.topk)
            self._truth = (key, Truth(local, parity.truth(full, case.topk), baseline))
        return self._truth[1]

    def _agreed(self, phase: Callable[[], T]) -> T:
        """Run `phase` on every rank; when any rank raised, every rank raises `CaseFailed` naming it."""
        result, error = None, None
        try:
            result = phase()
        except Exception as exc:  # one broken case must not stop the sweep
            error = ("skipped" if is_out_of_memory(exc) else "error", one_line(exc))
        failures = [(r, e) for r, e in enumerate(self.group.objects(error)) if e]
        if failures:
            rank, (status, text) = failures[0]
            prefix = "out of memory: " if status == "skipped" else ""
            raise CaseFailed(f"{prefix}rank {rank}: {text}", status)
        return result  # type: ignore[return-value]

    def _parity_over_ranks(
        self, check: parity.Parity, outputs: tuple[torch.Tensor, torch.Tensor]
    ) -> dict[str, object]:
        """Rank 0's parity columns with the worst verdict of any rank, and whether all ranks agree."""
        topk_p, topk_index = outputs
        bits = torch.cat([topk_p.contiguous().view(torch.int32).to(torch.int64), topk_index], dim=-1)
        everyone = self.group.all_gather(bits)
        agree = bool((everyone == everyone[0]).all())
        checks = self.group.objects(check.as_row())
        worst = max(range(len(checks)), key=lambda r: VERDICT_RANK.get(str(checks[r]["verdict"]), 0))
        out = dict(checks[0])
        if VERDICT_RANK.get(str(checks[worst]["verdict"]), 0) > VERDICT_RANK.get(str(out["verdict"]), 0):
            out.update(verdict=checks[worst]["verdict"], problem=f"rank {worst}: {checks[worst]['problem']}")
        if not agree:
            out.update(verdict="fail", problem=f"ranks returned different results; {out['problem']}".strip())
        return {**out, "ranks_agree": agree, "parity_ranks": len(checks)}


def load(path: str | Path) -> Scenario:
    """The scenario file (its validation knows the tensor-parallel variant names)."""
    return scenarios.load(path)


def select(scenario: Scenario, tp: int, case_ids: Iterable[str] | None = None) -> list[Case]:
    """The scenario's cases with `case.tp == tp` (only those in `case_ids` when given), in sweep order."""
    wanted = None if case_ids is None else set(case_ids)
    return [
        case
        for case in scenarios.expand(scenario)
        if case.tp == tp and (wanted is None or case.case_id in wanted)
    ]


def is_tensor_parallel(case: Case) -> bool:
    """Cases that run under torchrun: tp > 1, or a tensor-parallel variant."""
    return case.tp > 1 or tensor_parallel.is_tp_variant(case.variant)


def tp_cases(scenario: Scenario) -> list[Case]:
    """The scenario's tensor-parallel cases (the `tensor_parallel` case kind, `core.kinds`), in sweep
    order."""
    return [case for case in scenarios.expand(scenario) if is_tensor_parallel(case)]


def unit(case: Case) -> tuple:
    """The cases that run together (one shard's unit): one tp size's cases, one torchrun launch."""
    return ("tp", case.tp)


def rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows of results.jsonl are tensor-parallel rows: tp > 1 or a tensor-parallel variant."""
    tp = pd.to_numeric(frame["tp"], errors="coerce").fillna(1) if "tp" in frame else 1
    return (tp > 1) | frame["variant"].isin(tensor_parallel.names())
