"""The pieces every measured row is built from, whatever the case kind (kernel, tensor parallel, draft; the
edge-case matrix's rows are the matrix's own, `correctness.edge_cases`): the identifying columns of a case,
the time and bandwidth figures of its samples, the row of a case that raised, and the time stamp."""

from __future__ import annotations

from datetime import datetime, timezone

import torch

from perfsuite import variants
from perfsuite.core import dtypes, machine
from perfsuite.core.console import first_line
from perfsuite.measure import memory, timing
from perfsuite.scenario.load import Case


def one_line(exc: BaseException) -> str:
    """A row's reason for an error: its first line, at most 300 characters."""
    return first_line(exc, 300)


class CaseFailed(Exception):
    """A case that failed with a known status ('error', or 'skipped' for out of memory) and reason, e.g.
    decided together by the ranks of a tensor-parallel group."""

    def __init__(self, reason: str, status: str = "error"):
        super().__init__(reason)
        self.status = status


def failure(exc: BaseException) -> dict[str, str]:
    """The status and reason of a case that raised: out of memory is a skip, anything else an error."""
    if isinstance(exc, CaseFailed):
        return {"status": exc.status, "reason": str(exc)}
    if is_out_of_memory(exc):
        return {"status": "skipped", "reason": f"out of memory: {one_line(exc)}"}
    return {"status": "error", "reason": one_line(exc)}


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in str(exc)


def figures(
    samples: timing.Samples,
    traffic: variants.Traffic,
    ideal: variants.Traffic,
    peak_temp: int,
    peak_gbps: float | None,
    copy_gbps: object,
    model_cache_bytes: int = 0,
) -> dict[str, object]:
    """Time, bytes and bandwidth columns from a case's samples and its traffic (model and ideal).

    `bytes_model` is the cache-aware HBM figure with a last-level cache of `model_cache_bytes` (the
    device's `model_cache_bytes`; 0: every pass from HBM), `bytes_model_uncached` every pass from HBM;
    `gbps` and the percentages follow `bytes_model`. `above_copy`: `gbps` beats the measured copy rate,
    so the model counts bytes the device did not move through HBM (or the copy figure is low)."""
    seconds = samples.median_us * 1e-6
    hbm = traffic.hbm(model_cache_bytes)
    achieved = memory.gbps(hbm, seconds)
    copy = copy_gbps if isinstance(copy_gbps, (int, float)) else None
    return {
        "median_us": samples.median_us,
        "p20_us": samples.p20_us,
        "p80_us": samples.p80_us,
        "samples": len(samples.seconds),
        "spread": samples.spread,
        "unstable": samples.unstable,
        "timing": samples.method,
        "bytes_model": hbm,
        "bytes_model_uncached": traffic.total,
        "bytes_ideal": ideal.total,
        "gbps": achieved,
        "gbps_ideal": memory.gbps(ideal.total, seconds),
        "pct_peak": memory.percent(achieved, peak_gbps),
        "pct_copy": memory.percent(achieved, copy),
        "above_copy": bool(copy) and achieved == achieved and achieved > copy,  # NaN != NaN: unknown
        "peak_temp_bytes": peak_temp,
        "model_temp_bytes": traffic.temp,
    }


def accuracy_of(name: str) -> str:
    """The accuracy claim of a single-device or tensor-parallel variant ('' for an unknown name)."""
    from perfsuite.variants import tensor_parallel

    for registry in (tensor_parallel, variants):  # tensor-parallel first: `allgather_pkg.mod:fn` is one
        try:
            return registry.get(name).accuracy
        except (KeyError, variants.ExternalSelectorError):
            continue
    return ""


def case_row(case: Case, env: dict[str, object]) -> dict[str, object]:
    """The identifying columns of a case's row."""
    return {
        **env,
        "case_id": case.case_id,
        "variant": case.variant,
        "accuracy": accuracy_of(case.variant),
        "path": case.path,
        "dtype": case.dtype,
        "vocab": case.vocab,
        "batch": case.batch,
        "topk": case.topk,
        "logits": case.logits,
        "l2": case.timing.l2,
        "tp": case.tp,
    }


def launch_of(case: Case) -> str:
    """How the case's variant launches it (the Triton variants' plan); "" for the others."""
    describe = variants.get(case.variant).launch
    dtype = dtypes.dtype_of(case.dtype)
    return describe(case.batch, case.vocab, case.topk, dtype) if describe else ""


def stamp(since: machine.CpuSnapshot | None = None) -> dict[str, object]:
    """When the case finished and how busy the machine was: other processes' cores since `since` (the
    case's start), and the load average."""
    busy = machine.other_cores(since, machine.snapshot()) if since else float("nan")
    return {
        "other_cores": busy,
        "load_avg": machine.load_average(),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
