"""Running a scenario: each case timed, its traffic accounted for and its results checked for parity.

Every case becomes one row, appended to `results.jsonl` the moment it finishes; a case that cannot run
records why (skipped) and a case that breaks records its error, and the sweep goes on.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

from perfsuite import edge_cases, inputs, memory, parity, paths, timing, variants
from perfsuite.device import DeviceInfo, detect
from perfsuite.results import ResultsLog, add_speedups, to_frame, write_tables
from perfsuite.scenario import Case, Scenario, expand

EDGE_TOPK = (1, 4)


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


def environment(info: DeviceInfo, scenario: str) -> dict[str, object]:
    """Facts every row carries: where and with what it was measured."""
    return {
        "scenario": scenario,
        "backend": info.backend,
        "device": info.name,
        "runtime": info.runtime,
        "peak_gbps": info.peak_gbps if info.peak_gbps else float("nan"),
        "copy_gbps": memory.copy_gbps(info.device),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "git_sha": git_sha(),
    }


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)


@dataclass
class CaseRunner:
    """Runs cases on one device, keeping the current logits, reference and baseline between cases."""

    info: DeviceInfo
    env: dict[str, object]
    _logits: tuple[tuple, torch.Tensor] | None = None
    _truth: tuple[tuple, parity.Reference, tuple[torch.Tensor, torch.Tensor]] | None = None
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
        row = case_row(case, self.env)
        reason = self.skip_reason(case)
        if reason:
            return {**row, "status": "skipped", "reason": reason, **_stamp()}
        try:
            row.update(self._measure(case))
        except Exception as exc:  # one broken case must not stop the sweep
            if is_out_of_memory(exc):
                row.update(status="skipped", reason=f"out of memory: {_one_line(exc)}")
            else:
                row.update(status="error", reason=_one_line(exc))
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return {**row, **_stamp()}

    def prepare(self, case: Case) -> tuple[paths.PreparedCall, parity.Parity, int]:
        """Bind the case on its path, check its outputs' parity and measure its peak temporary memory."""
        variant = variants.get(case.variant)
        logits = self.logits(case)
        ref, baseline = self.truth(case)
        prepared = paths.prepare(case.path, variant.select, logits, case.topk)
        topk_p, topk_index = prepared.run()
        check = parity.check(variant.accuracy, topk_p, topk_index, ref, baseline)
        return prepared, check, memory.peak_temp_bytes(prepared.run, self.info)

    def _measure(self, case: Case) -> dict[str, object]:
        prepared, check, peak_temp = self.prepare(case)
        samples = timing.measure(timing.sampler_for(prepared, self.info, case.timing), case.timing)
        return {**check.as_row(), **self.figures(case, samples, peak_temp), "status": "ok", "reason": ""}

    def figures(self, case: Case, samples: timing.Samples, peak_temp: int) -> dict[str, object]:
        """Time, bytes and bandwidth columns of one measured case."""
        dtype = inputs.dtype_of(case.dtype)
        traffic = variants.get(case.variant).traffic(case.batch, case.vocab, case.topk, dtype)
        ideal = variants.ideal_traffic(case.batch, case.vocab, case.topk, dtype)
        seconds = samples.median_us * 1e-6
        achieved = memory.gbps(traffic.total, seconds)
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
            "pct_peak": memory.percent(achieved, self.info.peak_gbps),
            "pct_copy": memory.percent(achieved, self.env["copy_gbps"]),
            "peak_temp_bytes": peak_temp,
            "model_temp_bytes": traffic.temp,
        }


def case_row(case: Case, env: dict[str, object]) -> dict[str, object]:
    """The identifying columns of a case's row."""
    return {
        **env,
        "case_id": case.case_id,
        "variant": case.variant,
        "accuracy": variants.get(case.variant).accuracy,
        "path": case.path,
        "dtype": case.dtype,
        "vocab": case.vocab,
        "batch": case.batch,
        "topk": case.topk,
        "logits": case.logits,
        "l2": case.timing.l2,
    }


def _stamp() -> dict[str, str]:
    return {"timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")}


@dataclass
class RunOutcome:
    """What a run left behind."""

    frame: pd.DataFrame
    out_dir: Path
    files: dict[str, Path]
    interrupted: bool

    @property
    def exact_failures(self) -> pd.DataFrame:
        f = self.frame
        return f[(f["accuracy"] == "exact") & (f["verdict"] == "fail")]


def _progress(cases: list[Case], enabled: bool) -> Iterable[Case]:
    if not enabled:
        return cases
    from tqdm import tqdm

    return tqdm(cases, unit="case", file=sys.stderr, dynamic_ncols=True)


def run_scenario(
    scenario: Scenario, out_dir: Path, *, resume: bool = False, progress: bool = True
) -> RunOutcome:
    """Run every case of a scenario into `out_dir`: results.jsonl as it goes, then CSV, JSON and HTML."""
    info = detect(scenario.device)
    env = environment(info, scenario.name)
    log = ResultsLog(out_dir / "results.jsonl")
    if not resume and log.path.exists():
        log.path.unlink()
    done = {row["case_id"] for row in log.read() if row.get("status") != "error"}
    todo = [case for case in expand(scenario) if case.case_id not in done]
    if resume:  # errors are retried: drop their old rows
        kept = [row for row in log.read() if row.get("case_id") in done]
        log.path.unlink(missing_ok=True)
        for row in kept:
            log.append(row)
    runner = CaseRunner(info, env)
    interrupted = False
    bar = _progress(todo, progress)
    try:
        for case in bar:
            if progress:
                bar.set_postfix_str(case.case_id, refresh=False)
            log.append(runner.run(case))
    except KeyboardInterrupt:
        interrupted = True
    return finish(scenario, out_dir, log, info, env, interrupted)


def finish(
    scenario: Scenario,
    out_dir: Path,
    log: ResultsLog,
    info: DeviceInfo,
    env: dict[str, object],
    interrupted: bool,
) -> RunOutcome:
    """Turn the log into tables, the edge-case matrix and the HTML report."""
    from perfsuite.report import build_report

    frame = add_speedups(to_frame(log.read()))
    csv_path, json_path = write_tables(frame, out_dir)
    files = {"jsonl": log.path, "csv": csv_path, "json": json_path}
    edges = None
    if not interrupted:
        names = list(dict.fromkeys(v for s in scenario.sweeps for v in s.variants))
        dtypes = list(dict.fromkeys(inputs.dtype_of(d) for s in scenario.sweeps for d in s.dtypes))
        edges = edge_cases.matrix(dtypes, EDGE_TOPK, names, info.device)
        files["edge_cases"] = out_dir / "edge_cases.csv"
        edges.to_csv(files["edge_cases"], index=False)
    files["html"] = build_report(
        frame,
        out_dir / "report.html",
        edge_cases=edges,
        environment={**{k: str(v) for k, v in env.items()}, "source": scenario.source},
        title=f"perfsuite: {scenario.name} on {info.name}",
    )
    return RunOutcome(frame, out_dir, files, interrupted)
