"""Tensor-parallel cases on every rank of a process group (`run_case(TensorParallelRunner(...), case)`: the
row, kept by rank 0), and the case kind's parts (`core.kinds`): `tp_cases`, `unit`, `rows`.

Each rank builds the same full logits from the seed (so its parity is checked against the full float64
reference) and keeps its vocabulary slice. Per case: a skip decision all ranks share; one call whose
outputs every rank checks for parity and all ranks compare bit for bit; peak temporaries; then timing,
each sample the slowest rank's. A rank that fails a phase makes every rank record the case as an error.
Rows carry the single-device columns and `schema.TP_COLUMNS`: bytes per rank, times the max over ranks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pandas as pd
import torch

from perfsuite import variants
from perfsuite.core import dtypes
from perfsuite.core.settings import Timing
from perfsuite.correctness import parity
from perfsuite.measure import memory, timing
from perfsuite.measure.device import DeviceInfo, synchronize
from perfsuite.results import rows as row_pieces
from perfsuite.results.rows import CaseFailed, is_out_of_memory, one_line
from perfsuite.scenario import inputs
from perfsuite.scenario.load import Case, Scenario, expand
from perfsuite.variants import tensor_parallel
from perfsuite.variants.base import ideal_traffic, unclaimed_k
from perfsuite.variants.tensor_parallel.tp_base import Group, Local, local_slice, padded_width, vocab_slice

T = TypeVar("T")
VERDICT_RANK = {"fail": 3, "inexact": 2, "pass": 1, "n/a": 0}


def case_row(case: Case, env: dict[str, object], backend_pg: str) -> dict[str, object]:
    """The identifying columns, as `rows.case_row` writes them, plus `backend_pg`."""
    return {**row_pieces.case_row(case, env), "backend_pg": backend_pg}


def rank_sampler(
    call: Callable[[], object], group: Group, info: DeviceInfo, settings: Timing
) -> timing.Sampler:
    """Samples of a collective call, every rank's together; each sample becomes the slowest rank's (`measure`
    agrees on `Group.max`). Before each sample a barrier and the cache flush (cold)."""
    flush = timing.cache_flusher(info) if settings.l2 == "cold" else (lambda: None)
    if info.is_gpu:  # once the device is idle; then the spin the call queues behind (`EventSampler`)
        sampler = timing.EventSampler(call, lambda: (synchronize(group.device), group.barrier(), flush()))
    else:  # the flush first, so the ranks start the call together
        sampler = timing.Sampler(call, lambda: (flush(), group.barrier()))
    base = "device events" if info.is_gpu else "host perf_counter"
    sampler.method = f"{base}, max over {group.size} ranks, barrier before each sample"
    return sampler


@dataclass
class Truth:
    """One rank's inputs for a case: its slice, the float64 reference and the single-device baseline."""

    local: Local
    ref: parity.Truth
    baseline: tuple[torch.Tensor, torch.Tensor]


@dataclass
class TensorParallelRunner:
    """The `CaseRunner` of tensor-parallel cases on this rank; its row is meaningful on rank 0."""

    group: Group
    info: DeviceInfo
    env: dict[str, object]
    _truth: tuple[tuple, Truth] | None = None

    def identify(self, case: Case) -> dict[str, object]:
        return case_row(case, self.env, self.group.backend)

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
        width = padded_width(case.vocab, case.tp) + case.inputs.row_pad
        temp = variant.traffic(case.batch, case.vocab, case.topk, dtype, case.tp).temp
        need = case.batch * (case.vocab * (2 * dtype.itemsize + 8) + width * dtype.itemsize) + 2 * temp
        return memory.fits(need, self.group.device)

    def measure(self, case: Case) -> dict[str, object]:
        """Prepare, check and time the case on every rank; a phase that fails on any rank raises
        `CaseFailed` on all of them."""
        truth = self._agreed(lambda: self.prepare(case))
        variant = tensor_parallel.get(case.variant)
        call = functools.partial(variant, truth.local, case.topk)
        outputs = self._agreed(call)
        check = self._agreed(lambda: parity.check(variant.accuracy, *outputs, truth.ref, truth.baseline))
        peak = self._agreed(lambda: memory.peak_temp_bytes(call, self.info))
        sampler = functools.partial(rank_sampler, call, self.group, self.info, case.timing)
        # each sample the slowest rank's (the max over ranks): all ranks stop after the same sample
        samples = self._agreed(lambda: timing.measure_in_turn([sampler()], case.timing, self.group.max)[0])
        peak = int(self.group.max([peak])[0])
        dtype = dtypes.dtype_of(case.dtype)
        shape = (case.batch, case.vocab, case.topk, dtype, case.tp)
        ideal = ideal_traffic(case.batch, padded_width(case.vocab, case.tp), case.topk, dtype)
        copy_gbps, cache = self.env.get("copy_gbps"), self.info.model_cache_bytes
        figures = row_pieces.figures(
            samples, variant.traffic(*shape), ideal, peak, self.info.peak_gbps, copy_gbps, cache
        )
        comm = variant.comm_bytes(*shape)
        return {
            **self._parity_over_ranks(check, outputs),
            **figures,
            "hbm_bytes_model": figures["bytes_model"],
            "comm_bytes_model": comm,
            "comm_gbps": memory.gbps(comm, samples.median_us * 1e-6),
            "status": "ok",
            "reason": "",
        }

    def prepare(self, case: Case) -> Truth:
        """This rank's slice, the reference and the baseline (kept for the cases that share them)."""
        key = (case.input_key, case.inputs, case.topk)
        if self._truth is None or self._truth[0] != key:
            self._truth = None
            given = {"seed": case.inputs.seed, "scale": case.inputs.scale, "files": case.inputs.files}
            dtype, device = dtypes.dtype_of(case.dtype), self.group.device
            full = inputs.make_logits(case.logits, case.batch, case.vocab, dtype, device=device, **given)
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
        if worst:  # the first rank with the worst verdict: a worse one than rank 0's
            out.update(verdict=checks[worst]["verdict"], problem=f"rank {worst}: {checks[worst]['problem']}")
        if not agree:
            out.update(verdict="fail", problem=f"ranks returned different results; {out['problem']}".strip())
        return {**out, "ranks_agree": agree, "parity_ranks": len(checks)}


def is_tensor_parallel(case: Case) -> bool:
    """Cases that run under torchrun: tp > 1, or a tensor-parallel variant."""
    return case.tp > 1 or tensor_parallel.is_tp_variant(case.variant)


def tp_cases(scenario: Scenario) -> list[Case]:
    """The scenario's tensor-parallel cases (the `tensor_parallel` case kind), in sweep order."""
    return [case for case in expand(scenario) if is_tensor_parallel(case)]


def unit(case: Case) -> tuple:
    """The cases that run together (one shard's unit): one tp size's cases, one torchrun launch."""
    return ("tp", case.tp)


def rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows of results.jsonl are tensor-parallel rows: tp > 1 or a tensor-parallel variant."""
    tp = pd.to_numeric(frame["tp"], errors="coerce").fillna(1) if "tp" in frame else 1
    return (tp > 1) | frame["variant"].isin(tensor_parallel.names())
