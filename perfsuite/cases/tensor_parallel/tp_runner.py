"""Tensor-parallel cases on every rank: the torchrun worker (`worker`), a case's row (`TensorParallelRunner`,
rank 0's kept) and the case kind's parts (`core.kinds`): `tp_cases`, `unit`, `rows`."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pandas as pd
import torch

from perfsuite import variants
from perfsuite.cases.protocol import run_case
from perfsuite.core import dtypes, settings
from perfsuite.core.exits import EXIT_OK, EXIT_USAGE
from perfsuite.correctness import parity
from perfsuite.measure import memory, timing
from perfsuite.measure.device import DeviceInfo, detect, synchronize
from perfsuite.measure.environment import environment
from perfsuite.results import rows as row_pieces
from perfsuite.results.rows import CaseFailed, is_out_of_memory, one_line
from perfsuite.results.write import ResultsLog
from perfsuite.scenario import inputs
from perfsuite.scenario.load import Case, Scenario, ScenarioError, expand, load
from perfsuite.variants import tensor_parallel
from perfsuite.variants.base import ideal_traffic, unclaimed_k
from perfsuite.variants.tensor_parallel import tp_base
from perfsuite.variants.tensor_parallel.tp_base import Group, Local, local_slice, padded_width, vocab_slice

T = TypeVar("T")
VERDICT_RANK = {"fail": 3, "inexact": 2, "pass": 1, "n/a": 0}
RankInputs = tuple[Local, parity.Truth, tuple[torch.Tensor, torch.Tensor]]  # slice, reference, baseline
WHO = "perfsuite.cases.tensor_parallel"  # the launcher finds the worker's own errors in its log by it


def case_row(case: Case, env: dict[str, object], backend_pg: str) -> dict[str, object]:
    """The identifying columns, as `rows.case_row` writes them, plus `backend_pg`."""
    return {**row_pieces.case_row(case, env), "backend_pg": backend_pg}


@dataclass
class TensorParallelRunner:
    """The `CaseRunner` of tensor-parallel cases on this rank; its row is meaningful on rank 0."""

    group: Group
    info: DeviceInfo
    env: dict[str, object]
    _inputs: tuple[tuple, RankInputs] | None = None

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
        if reason := unclaimed_k(variant.max_k, case.topk) or variant.available(self.group.device):
            return reason
        dtype = dtypes.dtype_of(case.dtype)
        width = padded_width(case.vocab, case.tp) + case.inputs.row_pad
        temp = variant.traffic(case.batch, case.vocab, case.topk, dtype, case.tp).temp
        need = case.batch * (case.vocab * (2 * dtype.itemsize + 8) + width * dtype.itemsize) + 2 * temp
        return memory.fits(need, self.group.device)

    def measure(self, case: Case) -> dict[str, object]:
        """Prepare, call, check parity, peak temporaries, then time: each phase agreed by every rank."""
        local, ref, baseline = self._agreed(lambda: self.prepare(case))
        variant = tensor_parallel.get(case.variant)
        call = functools.partial(variant, local, case.topk)
        outputs = self._agreed(call)
        check = self._agreed(lambda: parity.check(variant.accuracy, *outputs, ref, baseline))
        peak = self._agreed(lambda: memory.peak_temp_bytes(call, self.info))
        # each sample the slowest rank's (the max over ranks): all ranks stop after the same sample
        samples = self._agreed(
            lambda: timing.measure_in_turn([self.sampler(call, case)], case.timing, self.group.max)[0]
        )
        dtype = dtypes.dtype_of(case.dtype)
        shape = (case.batch, case.vocab, case.topk, dtype, case.tp)
        ideal = ideal_traffic(case.batch, padded_width(case.vocab, case.tp), case.topk, dtype)
        figures = row_pieces.figures(
            samples, variant.traffic(*shape), ideal, int(self.group.max([peak])[0]), self.info.peak_gbps,
            self.env.get("copy_gbps"), self.info.model_cache_bytes,
        )  # fmt: skip
        comm = variant.comm_bytes(*shape)
        return {
            **self._ranks_parity(check, outputs),
            **figures,
            "hbm_bytes_model": figures["bytes_model"],
            "comm_bytes_model": comm,
            "comm_gbps": memory.gbps(comm, samples.median_us * 1e-6),
            "status": "ok",
            "reason": "",
        }

    def sampler(self, call: Callable[[], object], case: Case) -> timing.Sampler:
        """Samples of the collective call, a barrier (and the cold flush) before each."""
        flush = timing.flusher(self.info, case.timing) or (lambda: None)
        group = self.group
        if self.info.is_gpu:  # once the device is idle; then the spin the call queues behind (`EventSampler`)
            sampler = timing.EventSampler(call, lambda: (synchronize(group.device), group.barrier(), flush()))
        else:  # the flush first, so the ranks start the call together
            sampler = timing.Sampler(call, lambda: (flush(), group.barrier()))
        sampler.method = f"{sampler.method}, max over {group.size} ranks, barrier before each sample"
        return sampler

    def prepare(self, case: Case) -> RankInputs:
        """This rank's slice of the full logits (every rank builds them), their reference and baseline."""
        key = (case.input_key, case.inputs, case.topk)
        if self._inputs is None or self._inputs[0] != key:
            self._inputs = None
            given = {"seed": case.inputs.seed, "scale": case.inputs.scale, "files": case.inputs.files}
            dtype, device = dtypes.dtype_of(case.dtype), self.group.device
            full = inputs.make_logits(case.logits, case.batch, case.vocab, dtype, device=device, **given)
            shard = vocab_slice(case.vocab, self.group.size, self.group.rank)
            local = Local(local_slice(full, shard, case.inputs.row_pad), shard, self.group)
            baseline = variants.get(variants.BASELINE)(full, case.topk)
            self._inputs = (key, (local, parity.truth(full, case.topk), baseline))
        return self._inputs[1]

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

    def _ranks_parity(self, check: parity.Parity, outputs: tuple[torch.Tensor, ...]) -> dict[str, object]:
        """Rank 0's parity columns with the worst verdict of any rank, and whether all ranks agree bitwise."""
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


def worker(argv: list[str] | None = None) -> int:
    """The worker on one rank: 0 done (failing cases are error rows), 2 bad input."""
    about = "The tensor-parallel worker, one per rank under torchrun: every rank runs each case;"
    p = argparse.ArgumentParser(prog=f"python -m {WHO}", description=f"{about} rank 0 appends one row")
    p.add_argument("scenario", help="scenario file (.toml)")
    p.add_argument("--tp", type=int, required=True, help="ranks; must equal WORLD_SIZE")
    p.add_argument("--out", required=True, help="rows are appended here by rank 0 (JSON lines)")
    p.add_argument("--case-ids", help="JSON list of case ids: run only these (default: every tp == N case)")
    p.add_argument("--env", help="JSON object of environment columns for every row (default: measured)")
    p.add_argument("--device", help="auto | cpu | cuda (default: the scenario's)")
    args = p.parse_args(argv)
    try:
        scenario = load(args.scenario)
        ids = set(json.loads(Path(args.case_ids).read_text())) if args.case_ids else None
    except (ScenarioError, OSError, ValueError) as exc:
        print(f"{WHO}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    group = tp_base.init(args.device or scenario.device)
    try:
        if group.size != args.tp:
            print(f"{WHO}: --tp {args.tp} but WORLD_SIZE is {group.size}", file=sys.stderr)
            return EXIT_USAGE
        todo = [c for c in expand(scenario) if c.tp == args.tp and (ids is None or c.case_id in ids)]
        info = detect(str(group.device))
        env: dict[str, object] = json.loads(Path(args.env).read_text()) if args.env else {}
        # the launching run's threads (its --threads included), else the scenario's setting
        threads = int(env["threads"]) if "threads" in env else (todo[0].timing.threads if todo else 1)
        settings.apply_threads(threads)
        if group.rank == 0 and not env:
            env = environment(info, scenario.name)
        runner, log = TensorParallelRunner(group, info, env), ResultsLog(Path(args.out))
        for i, case in enumerate(todo, 1):
            row = run_case(runner, case)
            if group.rank == 0:
                log.append(row)
                figure = f"{row['median_us']:.1f} us" if row["status"] == "ok" else row["reason"]
                print(f"[{i}/{len(todo)}] {case.case_id}: {row['status']} {figure}", flush=True)
        group.barrier()  # every rank is done before the group goes away
        return EXIT_OK
    finally:
        tp_base.close()


def is_tensor_parallel(case: Case) -> bool:
    """Cases that run under torchrun: tp > 1, or a tensor-parallel variant."""
    return case.tp > 1 or tensor_parallel.is_tp_variant(case.variant)


def tp_cases(scenario: Scenario) -> list[Case]:
    return [case for case in expand(scenario) if is_tensor_parallel(case)]


def unit(case: Case) -> tuple:
    """One tp size's cases run together: one torchrun launch."""
    return ("tp", case.tp)


def rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows of results.jsonl are tensor-parallel rows."""
    tp = pd.to_numeric(frame["tp"], errors="coerce").fillna(1) if "tp" in frame else 1
    return (tp > 1) | frame["variant"].isin(tensor_parallel.names())
