"""Result rows: the tidy schema every front end writes, and the files a run leaves behind."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

# One row per case. Order is the CSV's column order; the text is the column's meaning.
COLUMNS: dict[str, str] = {
    "scenario": "scenario name",
    "case_id": "stable id of the case: variant/path/dtype/V/B/k/logits",
    "variant": "selector name (perfsuite.variants)",
    "accuracy": "what the variant claims: exact | rounded | inexact",
    "path": "eager | graph | compile",
    "backend": "cuda | rocm | cpu",
    "device": "device name",
    "simulated": "True: a GPU simulated on the CPU (PERFSUITE_SIMULATED_GPU), host times, never a GPU figure",
    "dtype": "logits dtype",
    "vocab": "V",
    "batch": "B",
    "topk": "k",
    "logits": "logits distribution",
    "l2": "cache state while timing: cold (flushed before each sample) | hot",
    "tp": "tensor-parallel ranks the vocabulary is split over (1: one device)",
    "status": "ok | skipped | error",
    "reason": "why the case was skipped or failed",
    "launch": "how a Triton variant launched the case: kernel, splits x columns, tile, warps, prefetch",
    "median_us": "median time per call, microseconds",
    "p20_us": "20th percentile, microseconds",
    "p80_us": "80th percentile, microseconds",
    "samples": "timed samples behind the median",
    "timing": "how it was timed: host perf_counter | device events | graph replay xN",
    "speedup_vs_full": "baseline median / this median: same path, shape, dtype, logits, tp; same run",
    "bytes_model": "HBM bytes the variant moves by its model (every pass and temporary)",
    "bytes_ideal": "unavoidable bytes: read logits once, write [B, k] outputs",
    "bytes_measured": "HBM bytes one call moved by hardware counters, read + write (`run --counters`)",
    "bytes_read_measured": "... read (ncu dram__bytes_read.sum; rocprofv3 FETCH_SIZE)",
    "bytes_write_measured": "... written (ncu dram__bytes_write.sum; rocprofv3 WRITE_SIZE)",
    "bytes_measured_vs_model": "bytes_measured / bytes_model; over 20 % apart (outside 0.8-1.2) is flagged",
    "counters": "how bytes_measured was measured (tool, replay, kernels), or why it was not",
    "gbps": "bytes_model / median time, GB/s",
    "gbps_ideal": "bytes_ideal / median time, GB/s (comparable across variants)",
    "peak_gbps": "datasheet bandwidth of the device, GB/s",
    "copy_gbps": "measured device-to-device copy bandwidth (read + write), GB/s",
    "pct_peak": "gbps as a percent of peak_gbps",
    "pct_copy": "gbps as a percent of copy_gbps",
    "peak_temp_bytes": "peak memory the call allocates beyond its input (measured; graph: the captured ops)",
    "model_temp_bytes": "largest temporary by the variant's model",
    "verdict": "parity against float64: pass | inexact | fail | n/a",
    "problem": "what the parity check found",
    "idx_exact_ref": "share of slots with the float64 reference's index",
    "idx_tie_ref": "... or a different index with an equal logit",
    "top1_mismatch_ref": "share of rows whose top token is not (a tie of) the reference's",
    "p_relerr_ref": "max relative error of topk_p against float64 at the variant's indices",
    "idx_exact_base": "share of slots with full_softmax's index",
    "idx_tie_base": "... or an equal-logit index",
    "p_relerr_base": "max relative difference of topk_p from full_softmax where indices agree",
    "finite_rows": "rows whose softmax is defined (-inf entries allowed); parity is judged on these",
    "nonfinite_rows": "rows with NaN, +inf or only -inf logits (see the edge-case matrix)",
    "torch": "torch version",
    "triton": "triton version",
    "runtime": "CUDA / HIP runtime",
    "driver": "GPU driver version (nvidia-smi; amdgpu module version on ROCm)",
    "git_sha": "commit of perfsuite",
    "timestamp": "when the case finished (UTC, ISO 8601)",
}
CASE_KEYS = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits", "l2", "tp")
"""Columns that identify a case: rows from two runs match when these match (and the device)."""


def to_frame(rows: Iterable[dict[str, object]]) -> pd.DataFrame:
    """Rows to a frame with every schema column, in schema order (extra columns kept at the end)."""
    frame = pd.DataFrame(list(rows))
    for column in COLUMNS:
        if column not in frame:
            frame[column] = pd.NA
    extra = [c for c in frame.columns if c not in COLUMNS]
    return frame[list(COLUMNS) + extra]


BASELINES = ("full_softmax", "allgather_full_softmax")
"""The variant every speedup is relative to: single device first, then tensor parallel (tp > 1)."""


def add_speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """Fill `speedup_vs_full`: the baseline's median over each row's, within the same run and case."""
    keys = [k for k in ("device", "path", "dtype", "vocab", "batch", "topk", "logits", "l2") if k in frame]
    data = frame.assign(_tp=pd.to_numeric(frame["tp"], errors="coerce").fillna(1) if "tp" in frame else 1)
    keys.append("_tp")
    base = data[(data["status"] == "ok") & data["variant"].isin(BASELINES)]
    base = base.assign(_rank=base["variant"].map(BASELINES.index)).sort_values("_rank").drop_duplicates(keys)
    base = base[[*keys, "median_us"]].rename(columns={"median_us": "_base"})
    merged = data.drop(columns=["speedup_vs_full"]).merge(base, on=keys, how="left")
    merged["speedup_vs_full"] = merged["_base"] / merged["median_us"]
    return merged[frame.columns]


class ResultsLog:
    """Appends each finished row to `results.jsonl` at once, so an interrupted run keeps what it measured."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, row: dict[str, object]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=_jsonable) + "\n")
            f.flush()

    def read(self) -> list[dict[str, object]]:
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


def _jsonable(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


def write_tables(frame: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """`results.csv` and `results.json` (records) under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / "results.csv", out_dir / "results.json"
    frame.to_csv(csv_path, index=False)
    frame.to_json(json_path, orient="records", indent=1)
    return csv_path, json_path
