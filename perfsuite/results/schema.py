"""The schema of every row kind perfsuite writes, in one place: the columns of kernel and tensor-parallel
case rows (`results.csv`), the tensor-parallel extras, the draft rows (`draft.csv`), which columns identify a
case, and the speedup against the baseline. Each column's text is its meaning; order is CSV order. The
result format's version (`FORMAT_VERSION`, on every row and in `run.json`) and its history are here too."""

from __future__ import annotations

import pandas as pd

from perfsuite import variants
from perfsuite.core import kinds

FORMAT_VERSION = 3
"""The result format this perfsuite writes and the newest it reads (`FORMAT_COLUMN` of every row and
`run.json`); a row or file without it is format 1. Raise it, and add a line below, when a column changes
meaning or goes away (a new column alone does not need it)."""
FORMAT_COLUMN = "format_version"
FORMAT_HISTORY: dict[int, str] = {
    1: (
        "everything before versioning (no format_version): issue 11 added samples, spread, unstable, the "
        "paired speedups (speedup_p20/p80/method), threads, machine state and run/settings; issue 14 the "
        "logits' shape (top1_prob, entropy_nats, tie rows) and the draft tie/precision columns; issue 19 "
        "made bytes_model cache-aware (bytes_model_uncached: the old figure), added model_cache_bytes, "
        "the copy clocks and above_copy; files from before tp read as tp 1"
    ),
    2: (
        "format_version on every row (results, tensor parallel, draft, samples) and in run.json; issue 24 "
        "added the in-turn reference (reference, ref_*_us, vs_ref*, copy_gbps_in_turn, pct_copy_in_turn; "
        "samples.jsonl's ref_seconds)"
    ),
    3: (
        "issue 24: the in-turn reference is an exp of the logits ('logits exp', was 'logits copy': "
        "ref_*_us, vs_ref* and ref_seconds are its figures), the copy sampled beside it (copy_us_in_turn, "
        "copy_gbps_in_turn and pct_copy_in_turn from it); compare judges against the reference only rows "
        "whose two runs sampled the same one; CPU times are the calling thread's CPU time with one "
        "intra-op thread (timing 'host thread CPU time', was the wall clock)"
    ),
}
"""One line per result format: what changed in it."""

RESULT_COLUMNS: dict[str, str] = {
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
    "samples": "timed samples behind the median (raw samples: samples.jsonl beside the results)",
    "spread": "(p80 - p20) / median: the dispersion of the samples",
    "unstable": "spread above 0.25 (timing.UNSTABLE_SPREAD): not a figure to rank or compare on",
    "timing": "how it was timed: host thread CPU time | host perf_counter | device events | graph replay xN",
    "speedup_vs_full": (
        "the baseline's time over this one: same path, shape, dtype, logits, tp and run; paired: the median "
        "of per-round ratios (the variants of a shape sampled in turn), else the ratio of medians"
    ),
    "speedup_p20": "20th percentile of the per-round ratios (paired only)",
    "speedup_p80": "80th percentile of the per-round ratios (paired only)",
    "speedup_method": "paired (sampled in turn with the baseline) | medians (ratio of separate medians)",
    "bytes_model": (
        "HBM bytes the variant moves by its cache-aware model: a tensor re-read or a temporary that stays in "
        "the last-level cache between kernels (model_cache_bytes) is cache traffic (docs/measuring.md)"
    ),
    "bytes_model_uncached": "... every pass and temporary from HBM (bytes_model before it was cache-aware)",
    "model_cache_bytes": (
        "cache the bytes model lets tensors stay in: GPU L2, MI300 Infinity Cache; 0: CPU, simulated GPU"
    ),
    "bytes_ideal": "unavoidable bytes: read logits once, write [B, k] outputs",
    "bytes_measured": "HBM bytes one call moved by hardware counters, read + write (`run --counters`)",
    "bytes_read_measured": "... read (ncu dram__bytes_read.sum; rocprofv3 FETCH_SIZE)",
    "bytes_write_measured": "... written (ncu dram__bytes_write.sum; rocprofv3 WRITE_SIZE)",
    "bytes_measured_vs_model": "bytes_measured / bytes_model; over 20 % apart (outside 0.8-1.2) is flagged",
    "bytes_measured_vs_uncached": "bytes_measured / bytes_model_uncached (every pass from HBM), beside it",
    "counters": "how bytes_measured was measured (tool, replay, kernels), or why it was not",
    "gbps": "bytes_model / median time, GB/s",
    "gbps_ideal": "bytes_ideal / median time, GB/s (comparable across variants)",
    "peak_gbps": "datasheet bandwidth of the device, GB/s",
    "copy_gbps": "measured device-to-device copy bandwidth (read + write), GB/s; GPU: after ~0.2 s of copies",
    "copy_sm_mhz": "SM clock while the copy warm-up ran, MHz (nvidia-smi, amdgpu sysfs; NaN: CPU, simulated)",
    "copy_mem_mhz": "memory clock while the copy warm-up ran, MHz (NaN where not readable)",
    "copy_warmup_s": "seconds of copies run before copy_gbps was timed (0: none, CPU and simulated GPU)",
    "pct_peak": "gbps as a percent of peak_gbps",
    "pct_copy": "gbps as a percent of copy_gbps",
    "above_copy": "gbps above copy_gbps: the model counts bytes the device did not move, or copy_gbps is low",
    "reference": (
        "the in-turn reference sampled with the variants of this shape and path, what vs_ref and compare "
        "judge against: 'logits exp, <timing>' (torch.exp(logits, out=dst) into a preallocated buffer; "
        "graph path: captured like the variants; format 2: 'logits copy')"
    ),
    "ref_median_us": "the reference's median time in the same rounds as this row, microseconds",
    "ref_p20_us": "... its 20th percentile (raw samples: ref_seconds in samples.jsonl)",
    "ref_p80_us": "... its 80th percentile",
    "vs_ref": "this row's time over the reference's, per round: the median (what `compare` judges)",
    "vs_ref_p20": "20th percentile of the per-round ratios to the reference",
    "vs_ref_p80": "80th percentile of the per-round ratios to the reference",
    "copy_us_in_turn": "median time of a copy of the logits (dst.copy_) sampled in the same rounds, us",
    "copy_gbps_in_turn": "the in-turn copy's rate: 2 x the logits' bytes / copy_us_in_turn, GB/s (r + w)",
    "pct_copy_in_turn": "gbps as a percent of copy_gbps_in_turn (the one-read floor measured in turn)",
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
    "top1_prob": "the logits' shape: mean top-1 softmax probability over rows (float64, logits in the dtype)",
    "entropy_nats": "... mean softmax entropy per row, nats (0: one token; ln V: uniform)",
    "top1_tie_rows": "... share of rows whose largest logit is held by two or more tokens (an exact tie)",
    "topk_tie_rows": "... share of rows whose k-th and (k+1)-th largest logits are equal (a tie at k)",
    "threads": "torch CPU threads in effect ([timing] threads, --threads)",
    "other_cores": "cores other processes kept busy on average while the case was measured",
    "load_avg": "1-minute load average when the case finished (this run's threads included)",
    "cpu_model": "host CPU model",
    "cores": "CPU cores this process may use",
    "cpu_quota": "cgroup CPU limit in cores (NaN: none)",
    "governor": "CPU frequency governor ('' where not exposed)",
    "run": "the run's label (run.json): keeps runs from one device apart",
    "settings": "fingerprint of the run's settings (scenario, timing, inputs, device)",
    "torch": "torch version",
    "triton": "triton version",
    "runtime": "CUDA / HIP runtime",
    "driver": "GPU driver version (nvidia-smi; amdgpu module version on ROCm)",
    "git_sha": "commit of perfsuite",
    "timestamp": "when the case finished (UTC, ISO 8601)",
    "format_version": "result format of the row (schema.FORMAT_HISTORY); empty: 1, before versioning",
}
RUN_COLUMNS = ("run", "settings", "threads")
"""Columns that say which run a row came from: rows of different runs never pool into one figure."""
CASE_KEYS = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits", "l2", "tp")
"""Columns that identify a case: rows from two runs match when these match (and the device)."""

TP_COLUMNS: dict[str, str] = {
    "backend_pg": "the process group's backend: gloo | nccl",
    "hbm_bytes_model": "HBM bytes per rank by the variant's model",
    "comm_bytes_model": "interconnect bytes each rank receives by the variant's model",
    "comm_gbps": "comm_bytes_model / median time, GB/s",
    "ranks_agree": "every rank returned the same bits",
    "parity_ranks": "ranks whose parity was checked",
}
"""Columns tensor-parallel rows add after RESULT_COLUMNS (`to_frame` keeps them at the end)."""

DRAFT_COLUMNS: dict[str, str] = {
    "scenario": "scenario name",
    "case_id": "stable id: draft/variant/path/dtype/V/H/B/k/steps/n/logits/upcast",
    "variant": "vocabulary selector (perfsuite.variants; built-in, package.module:function or entry point)",
    "accuracy": "what the variant claims: exact | rounded | inexact",
    "path": "eager | graph (whole cycle in one CUDA/HIP graph) | compile (torch.compile of the cycle)",
    "backend": "cuda | rocm | cpu",
    "device": "device name",
    "dtype": "draft head and logits dtype",
    "vocab": "V",
    "hidden": "draft head hidden size",
    "layers": "draft head MLP layers",
    "batch": "sequences per cycle",
    "topk": "k: tokens kept per tree node and per level",
    "num_steps": "draft tree depth (vocabulary selections per cycle: 1 in draft extend + num_steps - 1)",
    "num_draft_tokens": "tokens handed to the verifier + 1 (the engines' convention); draft extend length",
    "logits": "draft head logits behaviour: head | near_ties",
    "upcast": (
        "fp32: the selector gets fp32 logits (SGLang's logits processor, logits[:, :vocab].float()) | "
        "none: the head's dtype (an engine without upcast)"
    ),
    "selector_dtype": "dtype of the logits handed to the selector",
    "tree_build": "constants (SGLang's topk-1 fast path) | organisation: top num_draft_tokens - 1 scores",
    "engine_setting": "sglang, or why SGLang never runs the setting (topk 1, num_draft_tokens != steps + 1)",
    "accept": (
        "where the draft extend selects: each sequence's last accepted token, accept lengths drawn by this "
        "rule (perfsuite.cases.draft.loop.accept_lengths, seed + 2000003): geometric:P (each drafted token "
        "accepted with probability P, the default geometric:0.8) | uniform (1..min(num_steps + 1, "
        "num_draft_tokens)) | all (every extend token: the last position); in the case id as /accept-RULE "
        "when not the default"
    ),
    "accept_lengths": (
        "the accept lengths used, the selection at position length - 1 of each sequence's extend tokens: "
        "one group per cycle ('; '), one length per sequence (' '); the same in every path and in the "
        "parity references"
    ),
    "accept_mean": "mean of accept_lengths",
    "l2": "cache state at the start of a timed cycle: cold | hot",
    "status": "ok | skipped | error",
    "reason": "why the case was skipped or failed",
    "cycle_median_us": "median time per draft cycle (extend + decode) as an engine pays it, microseconds",
    "cycle_p20_us": "20th percentile, microseconds",
    "cycle_p80_us": "80th percentile, microseconds",
    "samples": "timed cycles behind the median",
    "timing": "how cycles were timed",
    "device_median_us": "GPU: device time per cycle (launch gaps removed); NaN on a CPU",
    "device_p20_us": "20th percentile of the device time",
    "device_p80_us": "80th percentile of the device time",
    "device_timing": "how the device time was taken (graph replay xN: N cycles per timed graph)",
    "noop_median_us": "median cycle with the selection replaced by a no-op of the same output shape",
    "selection_us": "cycle_median_us - noop_median_us (may dip below 0 within noise)",
    "selection_share": "selection_us / cycle_median_us, clipped to [0, 1]",
    "selection_method": "how the selection's share was measured",
    "selections_per_cycle": "vocabulary selections per cycle",
    "kernels_per_cycle": "kernels per cycle from torch.profiler (kernels_unit says what was counted)",
    "launches_per_cycle": "GPU: host launch calls per cycle (a graph cycle: one graph launch); NaN on CPU",
    "kernels_unit": "what kernels_per_cycle counts",
    "trees": "draft trees compared: cycles x batch",
    "outputs_copied": (
        "the selector returned the same output buffers twice (preallocated outputs): the loop copies them "
        "after each selection, copies timed"
    ),
    "consumer_vs_base": (
        "against full_softmax: identical | scores within rounding (relative difference <= 5%) | "
        "scores differ (same tokens) | tokens differ"
    ),
    "orphan_trees": "share of trees with a drafted token whose parent was not drafted (a broken tree)",
    "tok_diff_base": "share of trees whose draft tokens differ from full_softmax's (eager path)",
    "parent_diff_base": "share of trees whose parent list differs from full_softmax's",
    "pos_diff_base": "share of trees whose chosen positions (tree shape) differ from full_softmax's",
    "score_abserr_base": "max |score - full_softmax's score| over the chosen positions",
    "score_relerr_base": "max relative score difference from full_softmax",
    "tie_diff_base": (
        "share of trees differing from full_softmax's (tokens, parents or positions) whose first difference "
        "is a tie: the same logit values picked in another order (lowest index vs torch's); eager runs"
    ),
    "precision_diff_base": (
        "... whose first difference has other values: softmax rounding (bf16/fp16, fp32 ulps) or inexact "
        "scores (argmax_ones' 1.0)"
    ),
    "step0_diff_base": "share of trees whose draft-extend top-k tokens differ from full_softmax's",
    "tok_diff_ref": "share of trees whose draft tokens differ from the float64-softmax selection's",
    "parent_diff_ref": "... parent lists",
    "pos_diff_ref": "... chosen positions",
    "score_abserr_ref": "max |score - float64 selection's score|",
    "score_relerr_ref": "max relative score difference from the float64 selection",
    "tie_diff_ref": "share of trees differing from the float64 selection's by a tie first (lowest index)",
    "precision_diff_ref": "... by other values first",
    "bitexact_eager": "graph / compile: every output of every cycle equals the eager path's (same variant)",
    "tok_diff_eager": "share of trees whose draft tokens differ from the eager path's (same variant)",
    "parent_diff_eager": "... parent lists",
    "pos_diff_eager": "... chosen positions",
    "score_abserr_eager": "max |score - eager score| (same variant)",
    "score_relerr_eager": "max relative score difference from eager (same variant)",
    "graphs_cached": "graph path: draft graphs held in the cache after the case",
    "threads": "torch CPU threads in effect ([timing] threads, --threads)",
    "other_cores": "cores other processes kept busy on average while the case was measured",
    "load_avg": "1-minute load average when the case finished",
    "run": "the run's label (run.json)",
    "settings": "fingerprint of the run's settings",
    "torch": "torch version",
    "triton": "triton version",
    "runtime": "CUDA / HIP runtime",
    "git_sha": "commit of perfsuite",
    "timestamp": "when the case finished (UTC, ISO 8601)",
    "format_version": "result format of the row (schema.FORMAT_HISTORY); empty: 1, before versioning",
}


BASELINE = variants.BASELINE
BASELINES = tuple(
    dict.fromkeys(kind.baseline for kind in kinds.KINDS)
)  # full_softmax, allgather_full_softmax
"""The variant every speedup is relative to: single device first, then tensor parallel (tp > 1)."""
SPEEDUP_KEYS = ("device", "backend", "run", "path", "dtype", "vocab", "batch", "topk", "logits", "l2")
"""A row's baseline is the baseline variant's row with the same values of these (and the same tp)."""


def add_speedups(frame: pd.DataFrame, only_missing: bool = False) -> pd.DataFrame:
    """`speedup_vs_full`: the baseline's median over each row's, per case (the median of the baseline's
    rows where several runs are pooled). `only_missing` keeps the speedups the rows already carry."""
    keys = [k for k in SPEEDUP_KEYS if k in frame]
    tp = pd.to_numeric(frame["tp"], errors="coerce").fillna(1) if "tp" in frame else 1
    data = frame.assign(_tp=tp)
    keys.append("_tp")
    base = data[(data["status"] == "ok") & data["variant"].isin(BASELINES)]
    base = base.assign(_rank=base["variant"].map(BASELINES.index))
    base = base.groupby([*keys, "_rank"], dropna=False)["median_us"].median().reset_index()
    base = base.sort_values("_rank").drop_duplicates(keys)[[*keys, "median_us"]]
    merged = data[keys].merge(base.rename(columns={"median_us": "_base"}), on=keys, how="left")
    speedup = pd.Series(
        merged["_base"].to_numpy() / pd.to_numeric(frame["median_us"]).to_numpy(), frame.index
    )
    out = frame.copy()
    if only_missing and "speedup_vs_full" in frame:
        missing = frame["speedup_vs_full"].isna() & speedup.notna()
        out["speedup_vs_full"] = frame["speedup_vs_full"].where(~missing, speedup)
    else:
        missing = speedup.notna()
        out["speedup_vs_full"] = speedup
    for column in ("speedup_p20", "speedup_p80"):
        if column not in out or not only_missing:
            out[column] = float("nan")
        out[column] = out[column].where(~missing, float("nan"))
    method = (
        out["speedup_method"] if "speedup_method" in out and only_missing else pd.Series(pd.NA, out.index)
    )
    out["speedup_method"] = method.astype(object).where(~missing, "medians")
    return out


FLAG_TOLERANCE = 0.20
"""Measured and modelled bytes more than this far apart (relative to the model) are flagged."""


def flagged(frame: pd.DataFrame, tolerance: float = FLAG_TOLERANCE) -> pd.Series:
    """Rows whose measured bytes differ from the model by more than `tolerance` (of the model)."""
    if "bytes_measured_vs_model" not in frame:
        return pd.Series(False, index=frame.index)
    ratio = pd.to_numeric(frame["bytes_measured_vs_model"], errors="coerce")
    return ((ratio - 1).abs() > tolerance).fillna(False)
