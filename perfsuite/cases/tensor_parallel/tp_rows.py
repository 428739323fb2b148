"""Result rows of tensor-parallel cases: the single-device columns plus tp, backend and traffic models.

Extra columns (kept after the schema's by `write.to_frame`):
tp, backend_pg (gloo | nccl), hbm_bytes_model (HBM bytes per rank), comm_bytes_model (interconnect bytes
each rank receives), comm_gbps (comm_bytes_model / median time), ranks_agree (every rank returned the
same bits), parity_ranks (ranks whose parity was checked).
"""

from __future__ import annotations

from perfsuite.core import dtypes
from perfsuite.measure import memory
from perfsuite.measure.device import DeviceInfo
from perfsuite.measure.timing import Samples
from perfsuite.results import rows
from perfsuite.scenario.load import Case
from perfsuite.variants import tensor_parallel
from perfsuite.variants.base import ideal_traffic


def case_row(case: Case, env: dict[str, object], backend_pg: str) -> dict[str, object]:
    """The identifying columns, as `rows.case_row` writes them, plus `backend_pg`."""
    return {**rows.case_row(case, env), "backend_pg": backend_pg}


def not_run(row: dict[str, object], status: str, reason: str) -> dict[str, object]:
    """A skipped or error row (cases the launcher could not hand to the ranks)."""
    return {**row, "status": status, "reason": reason, **rows.stamp()}


def models(case: Case) -> dict[str, int]:
    """hbm_bytes_model and comm_bytes_model of a TP case (per rank)."""
    variant, dtype = tensor_parallel.get(case.variant), dtypes.dtype_of(case.dtype)
    shape = (case.batch, case.vocab, case.topk, dtype, case.tp)
    return {"hbm_bytes_model": variant.traffic(*shape).total, "comm_bytes_model": variant.comm_bytes(*shape)}


def figures(
    case: Case, samples: Samples, peak_temp: int, info: DeviceInfo, copy_gbps: object
) -> dict[str, object]:
    """Time, bytes and bandwidth columns of a measured TP case (bytes per rank; times max over ranks)."""
    variant, dtype = tensor_parallel.get(case.variant), dtypes.dtype_of(case.dtype)
    shape = (case.batch, case.vocab, case.topk, dtype, case.tp)
    traffic = variant.traffic(*shape)
    ideal = ideal_traffic(case.batch, -(-case.vocab // case.tp), case.topk, dtype)
    comm = variant.comm_bytes(*shape)
    figures = rows.figures(
        samples, traffic, ideal, peak_temp, info.peak_gbps, copy_gbps, info.model_cache_bytes
    )
    return {
        **figures,
        "hbm_bytes_model": figures["bytes_model"],
        "comm_bytes_model": comm,
        "comm_gbps": memory.gbps(comm, samples.median_us * 1e-6),
    }
