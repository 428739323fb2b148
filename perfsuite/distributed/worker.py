"""The tensor-parallel worker: every rank runs each case; rank 0 writes one row per case.

    torchrun --nproc-per-node N -m perfsuite.distributed SCENARIO --tp N --out FILE.jsonl

Each rank builds the same full logits from the seed (so its parity is checked against the full float64
reference) and keeps its vocabulary slice. Per case: a skip decision all ranks share; one call whose
outputs every rank checks for parity and all ranks compare bit for bit; peak temporaries; then timing.
A rank that fails a phase makes every rank record the case as an error, and the sweep goes on.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from perfsuite import inputs, memory, parity, variants
from perfsuite.device import DeviceInfo, detect
from perfsuite.distributed import cases, group, rows, tp_variants
from perfsuite.distributed.group import Group
from perfsuite.distributed.measure import RankSampler, measure
from perfsuite.distributed.shard import local_slice, shard_of
from perfsuite.distributed.tp_variants import Local
from perfsuite.results import ResultsLog
from perfsuite.runner import environment, is_out_of_memory, one_line, stamp
from perfsuite.scenario import Case, ScenarioError

T = TypeVar("T")
EXIT_OK, EXIT_USAGE = 0, 2
VERDICT_RANK = {"fail": 3, "inexact": 2, "pass": 1, "n/a": 0}


class CaseFailed(Exception):
    """A phase failed on some rank; `status` is 'error' or 'skipped' (out of memory)."""

    def __init__(self, reason: str, status: str = "error"):
        super().__init__(reason)
        self.status = status


@dataclass
class Truth:
    """One rank's inputs for a case: its slice, the float64 reference and the single-device baseline."""

    local: Local
    ref: parity.Reference
    baseline: tuple[torch.Tensor, torch.Tensor]


@dataclass
class TPCaseRunner:
    """Runs tensor-parallel cases on this rank; `run` returns the row (meaningful on rank 0)."""

    group: Group
    info: DeviceInfo
    env: dict[str, object]
    _cache: tuple[tuple, torch.Tensor] | None = field(default=None, repr=False)
    _truth: tuple[tuple, Truth] | None = field(default=None, repr=False)

    def skip_reason(self, case: Case) -> str | None:
        """Why this rank cannot run `case`, decided before anything is allocated."""
        if not tp_variants.is_tp_variant(case.variant):
            known = ", ".join(tp_variants.names())
            return f"{case.variant} is not a tensor-parallel variant (tp={case.tp}); use one of: {known}"
        if case.path != "eager":
            return f"tensor-parallel variants run eagerly; path {case.path!r} is not measured"
        if case.topk > case.vocab:
            return f"topk {case.topk} > vocab {case.vocab}"
        reason = tp_variants.get(case.variant).available(self.group.device)
        if reason:
            return reason
        dtype = inputs.dtype_of(case.dtype)
        width = -(-case.vocab // case.tp) + case.inputs.row_pad
        traffic = tp_variants.get(case.variant).traffic(case.batch, case.vocab, case.topk, dtype, case.tp)
        need = (
            case.batch * (case.vocab * (2 * dtype.itemsize + 8) + width * dtype.itemsize) + 2 * traffic.temp
        )
        return memory.fits(need, self.group.device)

    def run(self, case: Case) -> dict[str, object]:
        """Measure one case on every rank; always returns a row (ok, skipped or error)."""
        row = rows.case_row(case, self.env, self.group.backend)
        reasons = [r for r in self.group.objects(self.skip_reason(case)) if r]
        if reasons:
            return rows.not_run(row, "skipped", str(reasons[0]))
        try:
            truth = self._agreed(lambda: self.prepare(case))
            variant = tp_variants.get(case.variant)
            outputs = self._agreed(lambda: variant(truth.local, case.topk))
            check = self._agreed(lambda: parity.check(variant.accuracy, *outputs, truth.ref, truth.baseline))
            row.update(self._parity_over_ranks(check, outputs))
            call = lambda: variant(truth.local, case.topk)  # noqa: E731
            peak = self._agreed(lambda: memory.peak_temp_bytes(call, self.info))
            sampler = RankSampler(call, self.group, self.info, case.timing)
            samples = self._agreed(lambda: measure(sampler, case.timing))
        except CaseFailed as failed:
            return rows.not_run(row, failed.status, str(failed))
        peak = int(self.group.max([peak])[0])
        figures = rows.figures(case, samples, peak, self.info, self.env.get("copy_gbps"))
        return {**row, **figures, "status": "ok", "reason": "", **stamp()}

    def full_logits(self, case: Case) -> torch.Tensor:
        """The case's full `[B, V]` logits, the same on every rank (kept for the cases that share them)."""
        key = (case.input_key, case.inputs)
        if self._cache is None or self._cache[0] != key:
            self._cache = None
            logits = inputs.make_logits(
                case.logits,
                case.batch,
                case.vocab,
                inputs.dtype_of(case.dtype),
                seed=case.inputs.seed,
                device=self.group.device,
                scale=case.inputs.scale,
            )
            self._cache = (key, logits)
        return self._cache[1]

    def prepare(self, case: Case) -> Truth:
        """This rank's slice, the reference and the baseline (kept for the cases that share them)."""
        key = (case.input_key, case.inputs, case.topk)
        if self._truth is None or self._truth[0] != key:
            self._truth = None
            full = self.full_logits(case)
            shard = shard_of(case.vocab, self.group.size, self.group.rank)
            local = Local(local_slice(full, shard, case.inputs.row_pad), shard, self.group)
            baseline = variants.get(variants.BASELINE)(full, case.topk)
            self._truth = (key, Truth(local, parity.reference(full, case.topk), baseline))
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m perfsuite.distributed", description=__doc__.splitlines()[0])
    p.add_argument("scenario", help="scenario file (.toml)")
    p.add_argument("--tp", type=int, required=True, help="ranks; must equal WORLD_SIZE")
    p.add_argument("--out", required=True, help="rows are appended here by rank 0 (JSON lines)")
    p.add_argument("--case-ids", help="JSON list of case ids: run only these (default: every tp == N case)")
    p.add_argument("--env", help="JSON object of environment columns for every row (default: measured)")
    p.add_argument("--device", help="auto | cpu | cuda (default: the scenario's)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (under torchrun). 0: done (failing cases are error rows); 2: bad input."""
    args = parse_args(argv)
    try:
        scenario = cases.load(args.scenario)
        ids = json.loads(Path(args.case_ids).read_text()) if args.case_ids else None
    except (ScenarioError, OSError, ValueError) as exc:
        print(f"perfsuite.distributed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    g = group.init_from_env(args.device or scenario.device)
    try:
        if g.size != args.tp:
            print(f"perfsuite.distributed: --tp {args.tp} but WORLD_SIZE is {g.size}", file=sys.stderr)
            return EXIT_USAGE
        return _sweep(g, scenario.name, cases.select(scenario, args.tp, ids), args)
    finally:
        group.close()


def _sweep(g: Group, name: str, todo: list[Case], args: argparse.Namespace) -> int:
    info = detect(str(g.device))
    env: dict[str, object] = {}
    if g.rank == 0:
        env = json.loads(Path(args.env).read_text()) if args.env else environment(info, name)
    log = ResultsLog(Path(args.out)) if g.rank == 0 else None
    runner = TPCaseRunner(g, info, env)
    for i, case in enumerate(todo, 1):
        row = runner.run(case)
        if log is not None:
            log.append(row)
            figure = f"{row['median_us']:.1f} us" if row["status"] == "ok" else row["reason"]
            print(f"[{i}/{len(todo)}] {case.case_id}: {row['status']} {figure}", flush=True)
    g.barrier()  # every rank is done before the group goes away
    return EXIT_OK
