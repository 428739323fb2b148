"""The column registry (docs/architecture.md, "Columns: one registry"): every column perfsuite writes, once,
with its type, unit, kinds, roles and meaning. Writing orders a kind's table by it (`ordered`), reading types
every column by it (`typed`); a column a producer writes must be registered (a test runs every kind and
checks), a plug-in kind may bring its own (`CaseKind.columns`). Run columns (`per_run`) are kept once in
`run.json`'s `constants`. docs/columns.md is generated from it (`python -m perfsuite.results.columns`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from perfsuite.core import kinds

Type = Literal["float", "int", "bool", "text", "category"]
FORMAT_VERSION = 4
"""The result format this perfsuite writes and the newest it reads (`run.json`, and rows of older
formats); raise it, and add a line below, when a column changes meaning or goes away."""
FORMAT_HISTORY: dict[int, str] = {
    1: "everything before versioning (no format_version; files from before tp read as tp 1)",
    2: "format_version on every row and in run.json; the in-turn reference's columns ('logits copy')",
    3: "the in-turn reference is an exp of the logits ('logits exp'); CPU times are thread CPU time",
    4: "run columns (machine, versions, label, format) once in run.json's constants, not on every row; the "
    "float64 parity columns end in _f64 (were _ref, a word the in-turn reference's columns keep)",
}
FORMAT_COLUMN = "format_version"

KT = ("kernel", "tensor_parallel")
TP = ("tensor_parallel",)
DR = ("draft",)
ALL = (*KT, "draft")
EC = ("edge_cases",)
EVERY = (*ALL, *EC)


@dataclass(frozen=True)
class Column:
    """One column: its name, type, meaning, unit, the kinds writing it, and its roles."""

    name: str
    type: Type
    meaning: str
    unit: str = ""
    kinds: tuple[str, ...] = KT
    per_run: bool = False  # one value per run: kept in run.json's constants, joined back when loaded
    compare: bool = False  # `perfsuite compare` carries it (base_ and new_)
    default: object = None  # the value of a row that does not say (files from before the column)


def _group(
    type: Type,
    kinds: tuple[str, ...] = KT,
    unit: str = "",
    per_run: bool = False,
    compare: bool = False,
    **meanings: str,
) -> tuple[Column, ...]:
    return tuple(Column(n, type, m, unit, kinds, per_run, compare) for n, m in meanings.items())


# fmt: off
COLUMNS: tuple[Column, ...] = (
    *_group("text", EVERY, compare=True, case_id="stable id of the case: its kind's fields joined by '/'"),
    *_group("category", EVERY, compare=True, variant="selector name"),
    *_group("category", ALL, accuracy="what the variant claims: exact | rounded | inexact"),
    *_group("category", ALL, compare=True, path="eager | graph | compile (draft: the whole cycle)"),
    *_group("category", EVERY, compare=True, dtype="logits dtype (draft: the head's)"),
    *_group("int", ALL, compare=True, vocab="V", batch="B (draft: sequences per cycle)"),
    *_group("int", EVERY, compare=True, topk="k (draft: tokens kept per tree node and level)"),
    *_group("category", ALL, compare=True, logits="logits distribution (draft: the head's behaviour)",
            l2="cache state while timing: cold (flushed before each sample) | hot"),
    Column("tp", "int", "tensor-parallel ranks the vocabulary is split over (1: one device)", "", KT, False,
           True, default=1),
    *_group("int", DR, hidden="draft head hidden size", layers="draft head MLP layers",
            num_steps="draft tree depth (selections per cycle: 1 in draft extend + num_steps - 1)",
            num_draft_tokens="tokens handed to the verifier + 1 (the engines' convention)"),
    *_group("category", DR, upcast="fp32: the selector gets fp32 logits (SGLang) | none: the head's dtype",
            selector_dtype="dtype of the logits handed to the selector",
            tree_build="constants (SGLang's topk-1 fast path) | organisation: top num_draft_tokens - 1",
            engine_setting="sglang, or why SGLang never runs the setting"),
    *_group("text", DR, accept="where the extend selects: geometric:P | uniform | all (accept lengths' rule)",
            accept_lengths="the accept lengths used: one group per cycle ('; '), one per sequence (' ')"),
    *_group("float", DR, accept_mean="mean of accept_lengths"),
    *_group("category", ALL, compare=True, status="ok | skipped | error"),
    *_group("text", ALL, compare=True, reason="why the case was skipped or failed"),
    *_group("text", KT, launch="how a Triton variant launched: kernel, splits x columns, tile, warps"),
    *_group("float", KT, "us", compare=True, median_us="median time per call",
            p20_us="20th percentile time", p80_us="80th percentile time"),
    *_group("int", ALL, samples="timed samples behind the median (raw samples: samples.jsonl)"),
    *_group("float", KT, "ratio", compare=True, spread="(p80 - p20) / median: the samples' dispersion"),
    *_group("bool", KT, compare=True, unstable="spread above 0.25: not a figure to rank or compare on"),
    *_group("text", ALL, timing="how it was timed: host thread CPU time | device events | graph replay xN"),
    *_group("float", KT, "ratio",
            speedup_vs_full="the baseline's time over this one, same path, shape, dtype, logits, tp, run",
            speedup_p20="20th percentile of the per-round ratios (paired only)",
            speedup_p80="80th percentile of the per-round ratios (paired only)"),
    *_group("category", KT, speedup_method="paired (sampled in turn with the baseline) | medians"),
    *_group("float", KT, "bytes", compare=True,
            bytes_model="HBM bytes the variant moves by its cache-aware model (docs/measuring.md)"),
    *_group("float", KT, "bytes", bytes_model_uncached="... every pass and temporary from HBM",
            bytes_ideal="unavoidable bytes: read logits once, write [B, k] outputs"),
    *_group("float", KT, "bytes", compare=True,
            bytes_measured="HBM bytes one call moved by hardware counters, read + write (--counters)"),
    *_group("float", KT, "bytes",
            bytes_read_measured="... read (ncu dram__bytes_read.sum; rocprofv3 FETCH_SIZE)",
            bytes_write_measured="... written (ncu dram__bytes_write.sum; rocprofv3 WRITE_SIZE)"),
    *_group("float", KT, "ratio", bytes_measured_vs_model="bytes_measured / bytes_model (flag: off 20 %)",
            bytes_measured_vs_uncached="bytes_measured / bytes_model_uncached"),
    *_group("text", KT, counters="how bytes_measured was measured (tool, replay, kernels), or why not"),
    *_group("float", KT, "GB/s", gbps="bytes_model / median time",
            gbps_ideal="bytes_ideal / median time (comparable across variants)"),
    *_group("float", KT, "%", pct_peak="gbps as a percent of peak_gbps",
            pct_copy="gbps as a percent of copy_gbps"),
    *_group("bool", KT, above_copy="gbps above copy_gbps: the model counts bytes the device did not move"),
    *_group("text", KT, compare=True, reference="the in-turn reference: 'logits exp, <timing>'"),
    *_group("float", KT, "us", compare=True, ref_median_us="the reference's median, same rounds"),
    *_group("float", KT, "us", ref_p20_us="... its 20th percentile", ref_p80_us="... its 80th percentile"),
    *_group("float", KT, "ratio", compare=True, vs_ref="time over the reference's, per round: median",
            vs_ref_p20="20th percentile of the per-round ratios to the reference",
            vs_ref_p80="80th percentile of the per-round ratios to the reference"),
    *_group("float", KT, "us", copy_us_in_turn="median of a logits copy, same rounds"),
    *_group("float", KT, "GB/s", copy_gbps_in_turn="2 x logits bytes / copy_us_in_turn"),
    *_group("float", KT, "%", pct_copy_in_turn="gbps as a percent of copy_gbps_in_turn"),
    *_group("float", KT, "bytes", peak_temp_bytes="peak memory the call allocates beyond its input",
            model_temp_bytes="largest temporary by the variant's model"),
    *_group("category", KT, compare=True, verdict="parity against float64: pass | inexact | fail | n/a"),
    *_group("text", KT, problem="what the parity check found"),
    *_group("float", KT, "share", idx_exact_f64="share of slots with the float64 truth's index",
            idx_tie_f64="... or a different index with an equal logit",
            top1_mismatch_f64="share of rows whose top token is not (a tie of) the float64 truth's"),
    *_group("float", KT, "ratio", p_relerr_f64="max relative error of topk_p against float64"),
    *_group("float", KT, "share", idx_exact_base="share of slots with full_softmax's index",
            idx_tie_base="... or an equal-logit index"),
    *_group("float", KT, "ratio", p_relerr_base="max relative difference of topk_p from full_softmax"),
    *_group("int", KT, "rows", finite_rows="rows whose softmax is defined; parity is judged on these",
            nonfinite_rows="rows with NaN, +inf or only -inf logits (see the edge-case matrix)"),
    *_group("float", KT, top1_prob="the logits' mean top-1 softmax probability (float64)"),
    *_group("float", KT, "nats", entropy_nats="the logits' mean softmax entropy per row"),
    *_group("float", KT, "share", top1_tie_rows="share of rows whose largest logit is held by 2+ tokens",
            topk_tie_rows="share of rows whose k-th and (k+1)-th largest logits are equal"),
    *_group("category", TP, backend_pg="the process group's backend: gloo | nccl"),
    *_group("float", TP, "bytes", hbm_bytes_model="HBM bytes per rank by the variant's model",
            comm_bytes_model="interconnect bytes each rank receives by the variant's model"),
    *_group("float", TP, "GB/s", comm_gbps="comm_bytes_model / median time"),
    *_group("bool", TP, ranks_agree="every rank returned the same bits"),
    *_group("int", TP, parity_ranks="ranks whose parity was checked"),
    *_group("float", DR, "us", cycle_median_us="median time per draft cycle as an engine pays it",
            cycle_p20_us="20th percentile cycle time", cycle_p80_us="80th percentile cycle time",
            device_median_us="GPU: device time per cycle (launch gaps removed); NaN on a CPU",
            device_p20_us="20th percentile device time", device_p80_us="80th percentile device time",
            noop_median_us="median cycle with the selection replaced by a no-op",
            selection_us="cycle_median_us - noop_median_us (may dip below 0 within noise)"),
    *_group("text", DR, device_timing="how the device time was taken (graph replay xN)",
            selection_method="how the selection's share was measured",
            kernels_unit="what kernels_per_cycle counts"),
    *_group("float", DR, "share", selection_share="selection_us / cycle_median_us, clipped to [0, 1]"),
    *_group("int", DR, selections_per_cycle="vocabulary selections per cycle",
            trees="draft trees compared: cycles x batch",
            graphs_cached="graph path: draft graphs held in the cache after the case"),
    *_group("float", DR, kernels_per_cycle="kernels per cycle from torch.profiler",
            launches_per_cycle="GPU: host launch calls per cycle; NaN on a CPU"),
    *_group("bool", DR, outputs_copied="the selector reused its output buffers: the loop copies them (timed)",
            bitexact_eager="graph / compile: every output of every cycle equals the eager path's"),
    *_group("category", DR, consumer_vs_base="against full_softmax: identical | scores within rounding | "
            "scores differ (same tokens) | tokens differ"),
    *_group("float", DR, "share", orphan_trees="share of trees with a token whose parent was not drafted",
            **{f"{what}_diff_{against}": f"share of trees whose {text} differ from {who}"
               for against, who in (("base", "full_softmax's"), ("f64", "the float64 selection's"),
                                    ("eager", "the eager path's"))
               for what, text in (("tok", "draft tokens"), ("parent", "parent lists"),
                                  ("pos", "chosen positions"))},
            tie_diff_base="... of trees differing from full_softmax's, those whose first difference is a tie",
            precision_diff_base="... those whose first difference has other values (rounding, 1.0)",
            step0_diff_base="share of trees whose draft-extend top-k tokens differ from full_softmax's",
            tie_diff_f64="... of trees differing from the float64 selection's, first by a tie",
            precision_diff_f64="... first by other values"),
    *_group("float", DR, **{f"score_{e}_{against}": f"max {kind} score difference from {who}"
                            for against, who in (("base", "full_softmax"), ("f64", "the float64 selection"),
                                                 ("eager", "the eager path"))
                            for e, kind in (("abserr", "absolute"), ("relerr", "relative"))}),
    *_group("category", EC, pattern="the edge-case row pattern (correctness.edge_cases.PATTERNS)"),
    *_group("text", EC, description="what the pattern does to the row",
            index="the indices the variant returned on that row", topk_p="the probabilities it returned",
            error="the exception the variant raised, in one line"),
    *_group("bool", EC, index_valid="every index inside [0, V)",
            same_as_baseline="the same indices and probabilities (within rounding) as full_softmax"),
    *_group("float", ALL, "cores", other_cores="cores other processes kept busy while the case was measured"),
    *_group("float", ALL, load_avg="1-minute load average when the case finished"),
    *_group("text", ALL, timestamp="when the case finished (UTC, ISO 8601)"),
    # the run's columns: one value per run, in run.json's constants
    *_group("text", EVERY, per_run=True, scenario="scenario name", settings="fingerprint of its settings",
            torch="torch version", triton="triton version", runtime="CUDA / HIP runtime",
            git_sha="commit of perfsuite"),
    *_group("text", EVERY, per_run=True, compare=True, device="device name", run="the run's label"),
    *_group("category", EVERY, per_run=True, backend="cuda | rocm | cpu"),
    *_group("bool", KT, per_run=True, simulated="a GPU simulated on the CPU: host times, never a GPU figure"),
    *_group("int", EVERY, per_run=True, threads="torch CPU threads in effect ([timing] threads, --threads)"),
    *_group("text", KT, per_run=True, cpu_model="host CPU model", governor="CPU frequency governor",
            driver="GPU driver version"),
    *_group("int", KT, per_run=True, cores="CPU cores this process may use"),
    *_group("float", KT, "cores", per_run=True, cpu_quota="cgroup CPU limit in cores (NaN: none)"),
    *_group("float", KT, "GB/s", per_run=True, peak_gbps="datasheet bandwidth of the device",
            copy_gbps="measured device-to-device copy bandwidth (read + write)"),
    *_group("float", KT, "MHz", per_run=True, copy_sm_mhz="SM clock while the copy warm-up ran",
            copy_mem_mhz="memory clock while the copy warm-up ran"),
    *_group("float", KT, "s", per_run=True, copy_warmup_s="seconds of copies before copy_gbps was timed"),
    *_group("int", KT, "bytes", per_run=True, model_cache_bytes="cache the bytes model lets tensors stay in"),
    Column("format_version", "int", "result format (FORMAT_HISTORY)", kinds=EVERY, per_run=True, default=1),
)
# fmt: on
BY_NAME = {c.name: c for c in COLUMNS}
RUN_COLUMNS = tuple(c.name for c in COLUMNS if c.per_run)
RENAMED = {f"{c.name[:-4]}_ref": c.name for c in COLUMNS if c.name.endswith("_f64")}
"""Columns of formats 1-3 under their names since (a file of an older format loads under today's names)."""
CASE_KEYS = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits", "l2", "tp")
"""Columns that identify a kernel case: rows of two runs match when these match (and the device)."""
BENCH_COLUMNS = ("bench_name", "bench_group")
"""Columns kept from a pytest-benchmark entry."""
BASELINES = tuple(dict.fromkeys(kind.baseline for kind in kinds.KINDS))
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


def _declared(kind: kinds.CaseKind) -> tuple[Column, ...]:
    """A plug-in kind's own columns (`CaseKind.columns`); none for the built-in kinds."""
    return tuple(kind.part("columns")) if kind.columns is not None else ()


def registered() -> dict[str, Column]:
    """Every column by name: the registry's, then those of plug-in kinds."""
    found = dict(BY_NAME)
    for kind in kinds.KINDS:
        found.update({c.name: c for c in _declared(kind) if c.name not in found})
    return found


def of_kind(name: str) -> list[str]:
    """The columns rows of kind `name` carry, in table order (run columns included)."""
    return table_columns(kinds.get(name).table_file, run=True, only=name)


def table_columns(table_file: str, run: bool = False, only: str | None = None) -> list[str]:
    """A table file's columns in order: the registry's of every kind writing it (`only`: of that kind),
    then a plug-in kind's own (the run columns only with `run`)."""
    writers = [k for k in kinds.KINDS if k.table_file == table_file and only in (None, k.name)]
    names = {kind.name for kind in writers}
    listed = [c for c in COLUMNS if names & set(c.kinds)] + [c for k in writers for c in _declared(k)]
    return list(dict.fromkeys(c.name for c in listed if run or not c.per_run))


def ordered(frame: pd.DataFrame, table_file: str, run: bool = False) -> pd.DataFrame:
    """`frame` with its table's registered columns first, in order (missing ones empty), then the rest."""
    columns = table_columns(table_file, run)
    return frame.reindex(columns=[*columns, *(c for c in frame.columns if c not in columns)])


def complete(frame: pd.DataFrame, table_file: str = "results.csv") -> pd.DataFrame:
    """`frame` with every column of its table, the run columns included, typed (rows built in memory)."""
    return typed(ordered(frame, table_file, run=True))


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Every registered column of `frame` in its type: float as float64, int as int64 (float64 where a value
    is missing), bool as pandas' nullable boolean, text and category as str with NaN for missing."""
    frame = frame.copy()
    every = registered()
    for name in frame.columns:
        column = every.get(name)
        kind = column.type if column else ("text" if name in BENCH_COLUMNS else None)
        if kind in ("float", "int"):
            values = pd.to_numeric(frame[name], errors="coerce").astype("float64")
            if column and column.default is not None:
                values = values.fillna(column.default)
            whole = values.notna().all() and (values == values.round()).all() and (values.abs() < 2**62).all()
            frame[name] = values.astype("int64") if kind == "int" and len(values) and whole else values
        elif kind == "bool":
            frame[name] = pd.array([flag(v) for v in frame[name]], dtype="boolean")
        elif kind is not None:
            frame[name] = frame[name].map(_text, na_action="ignore").astype(object)
            frame[name] = frame[name].where(frame[name].notna(), math.nan)
    return frame.reset_index(drop=True).copy()  # one block per type again: columns added later stay cheap


def flag(value: object) -> bool | None:
    """True/False from a bool or its text ('True', 'false', '1', '0.0'); None when missing or unclear."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    text, true, false = str(value).strip().lower(), ("true", "1", "1.0", "yes"), ("false", "0", "0.0", "no")
    return text in true if text in (*true, *false) else None


def _text(value: object) -> object:
    if isinstance(value, float):
        return math.nan if math.isnan(value) else str(int(value)) if value.is_integer() else str(value)
    return math.nan if isinstance(value, str) and value == "" else str(value)


def markdown(columns: Iterable[Column] = COLUMNS) -> str:
    """The registry as a markdown table (docs/columns.md)."""
    lines = ["| column | type | unit | kinds | run | compare | meaning |", "|---|---|---|---|---|---|---|"]
    for c in columns:
        where = "all" if c.kinds == ALL else ", ".join(c.kinds)
        lines.append(
            f"| `{c.name}` | {c.type} | {c.unit} | {where} | {'yes' if c.per_run else ''} | "
            f"{'yes' if c.compare else ''} | {c.meaning.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


DOC_HEAD = """# Columns: every column perfsuite writes

Generated from `perfsuite/results/columns.py` (`python -m perfsuite.results.columns > docs/columns.md`).
**run**: one value per run, kept once in `run.json` (`constants`) and joined back to every row when a run
is loaded; **compare**: `perfsuite compare` carries it for both sides. Kinds: `kernel`, `tensor_parallel`
(both in `results.csv`) and `draft` (`draft.csv`).

"""

if __name__ == "__main__":
    print(DOC_HEAD + markdown(), end="")
