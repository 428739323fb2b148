"""Running a scenario: each case timed, its traffic accounted for and its results checked for parity.

Every case becomes one row, appended to `results.jsonl` the moment it finishes; a case that cannot run
records why (skipped) and a case that breaks records its error, and the sweep goes on.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

import pandas as pd
import torch

from perfsuite import edge_cases, inputs, memory, parity, paths, timing, variants
from perfsuite.device import DeviceInfo, detect
from perfsuite.results import ResultsLog, add_speedups, to_frame, write_tables
from perfsuite.scenario import Case, Scenario, expand

EDGE_TOPK = (1, 4)
T = TypeVar("T")


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_sha() -> str:
    """The perfsuite checkout's commit (with `-dirty` for uncommitted changes), or 'unknown'."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def _first_line_of(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0].strip() if out.strip() else ""


def driver_version(info: DeviceInfo) -> str:
    """The GPU driver's version: nvidia-smi on NVIDIA, the amdgpu module's on ROCm; '' on a CPU or unknown."""
    if info.backend == "cuda":
        index = info.device.split(":")[-1]
        return _first_line_of(
            ["nvidia-smi", f"--id={index}", "--query-gpu=driver_version", "--format=csv,noheader"]
        )
    if info.backend == "rocm":
        try:
            return Path("/sys/module/amdgpu/version").read_text().strip()
        except OSError:
            return ""
    return ""


def environment(info: DeviceInfo, scenario: str) -> dict[str, object]:
    """Facts every row carries: where and with what it was measured."""
    return {
        "scenario": scenario,
        "backend": info.backend,
        "device": info.name,
        "simulated": info.simulated,
        "runtime": info.runtime,
        "driver": driver_version(info),
        "peak_gbps": info.peak_gbps if info.peak_gbps else float("nan"),
        "copy_gbps": memory.copy_gbps(info.device),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "git_sha": git_sha(),
    }


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def failure(exc: BaseException) -> dict[str, str]:
    """The status and reason of a case that raised: out of memory is a skip, anything else an error."""
    if is_out_of_memory(exc):
        return {"status": "skipped", "reason": f"out of memory: {one_line(exc)}"}
    return {"status": "error", "reason": one_line(exc)}


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in str(exc)


@dataclass
class CaseRunner:
    """Runs cases on one device, keeping the current logits, reference and baseline between cases."""

    info: DeviceInfo
    env: dict[str, object]
    _logits: tuple[tuple, torch.Tensor] | None = None
    _truth: tuple[tuple, parity.Reference, tuple[torch.Tensor, torch.Tensor]] | None = None
    counters: Callable[[Case], dict[str, object]] | None = None  # measured bytes (`run --counters`)
    device: torch.device = field(init=False)

    def __post_init__(self) -> None:
        self.device = torch.device(self.info.device)

    def logits(self, case: Case) -> torch.Tensor:
        key = (case.input_key, case.inputs)
        if self._logits is None or self._logits[0] != key:
            self._logits = self._truth = None
            dtype = inputs.dtype_of(case.dtype)
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
                ),
            )
        return self._logits[1]

    def truth(self, case: Case) -> tuple[parity.Reference, tuple[torch.Tensor, torch.Tensor]]:
        """float64 reference and the eager full_softmax outputs for the case's logits and k."""
        key = (case.input_key, case.inputs, case.topk)
        if self._truth is None or self._truth[0] != key:
            logits = self.logits(case)
            baseline = variants.get(variants.BASELINE)(logits, case.topk)
            self._truth = (key, parity.reference(logits, case.topk), baseline)
        return self._truth[1], self._truth[2]

    def skip_reason(self, case: Case) -> str | None:
        """Why a case cannot run here, decided before anything is allocated."""
        variant = variants.get(case.variant)
        if case.topk > case.vocab:
            return f"topk {case.topk} > vocab {case.vocab}"
        reason = variant.available(self.device) or paths.unavailable(case.path, self.device)
        if reason:
            return reason
        dtype = inputs.dtype_of(case.dtype)
        elements = case.batch * case.vocab
        need = (
            inputs.bytes_needed(case.batch, case.vocab, dtype, case.inputs.row_pad)
            + elements * 8  # the float64 reference's logsumexp
            + 2 * variant.traffic(case.batch, case.vocab, case.topk, dtype).temp
            + elements * dtype.itemsize  # the baseline's probabilities
        )
        return memory.fits(need, self.device)

    def run(self, case: Case) -> dict[str, object]:
        """Measure one case; always returns a row (status ok, skipped or error)."""
        row = {**case_row(case, self.env), "launch": launch_of(case)}
        try:
            reason = self.skip_reason(case)
            if reason:
                return {**row, "status": "skipped", "reason": reason, **stamp()}
            row.update(self._measure(case))
        except Exception as exc:  # one broken case must not stop the sweep
            row.update(failure(exc))
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        if self.counters is not None and row.get("status") == "ok":
            row.update(self.counters(case))
        return {**row, **stamp()}

    def prepare(self, case: Case) -> tuple[paths.PreparedCall, parity.Parity, int]:
        """Bind the case on its path, check its outputs' parity and measure its peak temporary memory."""
        variant = variants.get(case.variant)
        logits = self.logits(case)
        ref, baseline = self.truth(case)
        prepared = paths.prepare(case.path, variant.select, logits, case.topk)
        topk_p, topk_index = prepared.run()
        check = parity.check(variant.accuracy, topk_p, topk_index, ref, baseline)
        # a graph replay allocates nothing (its temporaries live in the graph's pool): measure the
        # captured ops themselves, run once outside the graph
        measured = prepared.body if prepared.graphed else prepared.run
        return prepared, check, memory.peak_temp_bytes(measured, self.info)

    def _measure(self, case: Case) -> dict[str, object]:
        prepared, check, peak_temp = self.prepare(case)
        samples = timing.measure(timing.sampler_for(prepared, self.info, case.timing), case.timing)
        return {**check.as_row(), **self.figures(case, samples, peak_temp), "status": "ok", "reason": ""}

    def figures(self, case: Case, samples: timing.Samples, peak_temp: int) -> dict[str, object]:
        """Time, bytes and bandwidth columns of one measured case."""
        dtype = inputs.dtype_of(case.dtype)
        traffic = variants.get(case.variant).traffic(case.batch, case.vocab, case.topk, dtype)
        ideal = variants.ideal_traffic(case.batch, case.vocab, case.topk, dtype)
        return figures(samples, traffic, ideal, peak_temp, self.info.peak_gbps, self.env["copy_gbps"])


def figures(
    samples: timing.Samples,
    traffic: variants.Traffic,
    ideal: variants.Traffic,
    peak_temp: int,
    peak_gbps: float | None,
    copy_gbps: object,
) -> dict[str, object]:
    """Time, bytes and bandwidth columns from a case's samples and its traffic (model and ideal)."""
    seconds = samples.median_us * 1e-6
    achieved = memory.gbps(traffic.total, seconds)
    copy = copy_gbps if isinstance(copy_gbps, (int, float)) else None
    return {
        "median_us": samples.median_us,
        "p20_us": samples.p20_us,
        "p80_us": samples.p80_us,
        "samples": len(samples.seconds),
        "timing": samples.method,
        "bytes_model": traffic.total,
        "bytes_ideal": ideal.total,
        "gbps": achieved,
        "gbps_ideal": memory.gbps(ideal.total, seconds),
        "pct_peak": memory.percent(achieved, peak_gbps),
        "pct_copy": memory.percent(achieved, copy),
        "peak_temp_bytes": peak_temp,
        "model_temp_bytes": traffic.temp,
    }


def accuracy_of(name: str) -> str:
    """The accuracy claim of a single-device or tensor-parallel variant ('' for an unknown name)."""
    from perfsuite.distributed import tp_variants

    for registry in (variants, tp_variants):
        try:
            return registry.get(name).accuracy
        except KeyError:
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
    dtype = inputs.dtype_of(case.dtype)
    return describe(case.batch, case.vocab, case.topk, dtype) if describe else ""


def stamp() -> dict[str, str]:
    return {"timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")}


@dataclass
class RunOutcome:
    """What a run left behind."""

    frame: pd.DataFrame
    draft: pd.DataFrame
    out_dir: Path
    files: dict[str, Path]
    interrupted: bool

    @property
    def exact_failures(self) -> pd.DataFrame:
        f = self.frame
        return f[(f["accuracy"] == "exact") & (f["verdict"] == "fail")]


def progress_bar(items: Iterable[T], enabled: bool, label: str | None = None) -> Iterable[T]:
    """`items` behind a progress bar on stderr when enabled."""
    if not enabled or (isinstance(items, list) and not items):
        return items
    from tqdm import tqdm

    return tqdm(items, unit="case", desc=label, file=sys.stderr, dynamic_ncols=True)


def run_scenario(
    scenario: Scenario,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    counters: bool = False,
) -> RunOutcome:
    """Run every case of a scenario into `out_dir`: results.jsonl as it goes, then CSV, JSON and HTML.

    `counters`: also measure each ok case's HBM bytes with the vendor's counter tool (slow; see counters.py).
    """
    from perfsuite.draft import expand_draft, run_draft

    info = detect(scenario.device)
    env = environment(info, scenario.name)
    log, done = open_log(out_dir / "results.jsonl", resume)
    draft_log, draft_done = open_log(out_dir / "draft.jsonl", resume)
    todo = [case for case in expand(scenario) if case.case_id not in done]
    single = [case for case in todo if not is_tensor_parallel(case)]
    parallel = [case for case in todo if is_tensor_parallel(case)]
    drafts = [case for case in expand_draft(scenario) if case.case_id not in draft_done]
    collector = None
    if counters:
        from perfsuite.counters import CounterCollector

        collector = CounterCollector(info, scenario.source, out_dir / "counters")
    runner = CaseRunner(info, env, counters=collector)
    interrupted = False
    try:
        for case in progress_bar(single, progress):
            log.append(runner.run(case))
        if parallel:  # one torchrun launch per tp size; rank 0's rows come back as they finish
            from perfsuite.distributed.launch import run_tp_cases

            for row in progress_bar(run_tp_cases(scenario.source, parallel, out_dir, env), progress, "tp"):
                log.append(row)
        for row in run_draft(scenario, info, env, progress, cases=drafts):
            draft_log.append(row)
    except KeyboardInterrupt:
        interrupted = True
    return finish(scenario, out_dir, log, draft_log, info, env, interrupted)


def is_tensor_parallel(case: Case) -> bool:
    """Cases that run under torchrun (perfsuite.distributed): tp > 1, or a tensor-parallel variant."""
    from perfsuite.distributed import tp_variants

    return case.tp > 1 or tp_variants.is_tp_variant(case.variant)


def open_log(path: Path, resume: bool) -> tuple[ResultsLog, set[str]]:
    """The row log at `path` and the case ids it already holds (resume); errors are dropped to be retried."""
    log = ResultsLog(path)
    if not resume:
        path.unlink(missing_ok=True)
        return log, set()
    kept = [row for row in log.read() if row.get("status") != "error"]
    path.unlink(missing_ok=True)
    for row in kept:
        log.append(row)
    return log, {str(row["case_id"]) for row in kept}


def finish(
    scenario: Scenario,
    out_dir: Path,
    log: ResultsLog,
    draft_log: ResultsLog,
    info: DeviceInfo,
    env: dict[str, object],
    interrupted: bool,
) -> RunOutcome:
    """Turn the logs into tables, the edge-case matrix and the HTML report (the report last: every table
    is on disk before anything imports it)."""
    from perfsuite.draft import DRAFT_COLUMNS

    frame = add_speedups(to_frame(log.read()))
    csv_path, json_path = write_tables(frame, out_dir)
    files = {"jsonl": log.path, "csv": csv_path, "json": json_path}
    draft = pd.DataFrame(draft_log.read())
    if len(draft):
        draft = draft.reindex(columns=[*DRAFT_COLUMNS, *(c for c in draft if c not in DRAFT_COLUMNS)])
        files["draft"] = out_dir / "draft.csv"
        draft.to_csv(files["draft"], index=False)
    edges = None
    single_device = set(variants.names())
    names = list(dict.fromkeys(v for s in scenario.sweeps for v in s.variants if v in single_device))
    if names and not interrupted:
        dtypes = list(dict.fromkeys(inputs.dtype_of(d) for s in scenario.sweeps for d in s.dtypes))
        edges = edge_cases.matrix(dtypes, EDGE_TOPK, names, info.device)
        files["edge_cases"] = out_dir / "edge_cases.csv"
        edges.to_csv(files["edge_cases"], index=False)
    from perfsuite.report import build_report

    files["html"] = build_report(
        frame,
        out_dir / "report.html",
        edge_cases=edges,
        draft=draft,
        environment={**{k: str(v) for k, v in env.items()}, "source": scenario.source},
        title=f"perfsuite: {scenario.name} on {info.name}",
    )
    return RunOutcome(frame, draft, out_dir, files, interrupted)
