"""One self-contained HTML report from result rows: warnings, summary, plots, parity, the logits' shape,
tensor parallel, draft loop, edge cases, skips, full table and environment.

Each section is built from the blocks of `perfsuite.report.blocks` by its own module (`kernel_sections`,
`logits_shape_section`, `tp_section`, `draft_section`, `edge_case_section`) and the page is rendered by
`perfsuite.report.page`.
plotly is imported only where a figure is built: without it (`plots_available()` says why) every table is
still written, each figure becomes a note and the page says at the top how to get the plots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from perfsuite.measure.machine import SHARED_CORES
from perfsuite.measure.timing import UNSTABLE_SPREAD
from perfsuite.report import (
    draft_section,
    edge_case_section,
    kernel_sections,
    logits_shape_section,
    tp_section,
)
from perfsuite.report.blocks import Note, Section
from perfsuite.report.kernel_context import UNSTABLE_MARK, Context
from perfsuite.report.page import render_page

DEFAULT_TITLE = "perfsuite: top-k selection of the draft step"
REPORT_AGAIN = "`perfsuite report DIR/results.csv` (DIR: the run's folder)"


def build_report(
    results: pd.DataFrame,
    out_path: str | Path,
    *,
    edge_cases: pd.DataFrame | None = None,
    draft: pd.DataFrame | None = None,
    environment: dict[str, str] | None = None,
    title: str = DEFAULT_TITLE,
    notes: Sequence[str] = (),
    samples: pd.DataFrame | None = None,
) -> Path:
    """Write one self-contained HTML report of `results` (schema frame) to `out_path`; return its path.

    `out_path` may be a directory (the file is then `report.html` in it). `edge_cases` is the edge-case
    matrix (pattern, description, dtype, topk, variant, index, topk_p, index_valid, same_as_baseline,
    error); `draft` the draft-loop rows (perfsuite.draft); tensor-parallel rows in `results` get a
    section of their own. `environment` overrides what the frame's columns say about the machine and run.
    `notes`: the run's warnings (run.json's `notes`: a shared machine, dropped log lines), shown in a
    banner at the top with what the rows' `other_cores` and `unstable` columns add (`measurement_warnings`).
    `samples`: the raw samples (`load.load_samples`: case_id, run, seconds), for the distribution figure.
    """
    out = Path(out_path)
    if out.is_dir() or out.suffix == "":
        out = out / "report.html"
    single, tensor_parallel = split_tensor_parallel(results)
    ctx = Context.of(single, samples)
    kernel_level = len(single) > 0  # a draft-only or tensor-parallel-only run has no single-device rows
    every = ctx if tensor_parallel.empty else Context.of(results)
    sections = [
        *(
            [
                kernel_sections.summary_section(ctx),
                kernel_sections.plots_section(ctx),
                kernel_sections.traffic_section(ctx),
                kernel_sections.parity_section(ctx),
                _logits_shape(ctx),
            ]
            if kernel_level
            else []
        ),
        _rows_section(tp_section.SECTION_ID, tp_section.TITLE, tensor_parallel, tp_section.section),
        _rows_section(draft_section.SECTION_ID, draft_section.TITLE, draft, draft_section.section),
        edge_case_section.section(edge_cases),
        *(
            [kernel_sections.skipped_section(every), kernel_sections.results_section(every)]
            if len(results)
            else []
        ),
        kernel_sections.environment_section(ctx, environment),
    ]
    sections = [s for s in sections if s is not None]
    simulated = _simulated_devices(results, draft)
    if simulated:
        note = (
            f"Simulated GPU ({', '.join(simulated)}): perfsuite ran its GPU code paths on the CPU "
            "(PERFSUITE_SIMULATED_GPU). Every time here is a host time of CPU work, not a GPU measurement."
        )
        sections.insert(0, Section("simulated", "Simulated GPU", [Note(note)]))
    if not len(results) and (draft is None or draft.empty):
        sections.insert(0, Section("summary", "Summary", [Note("No result rows: nothing to plot.")]))
    warnings = measurement_warnings(results, notes)
    html = render_page(title, ctx.subtitle(), sections, REPORT_AGAIN, warnings=warnings)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


def measurement_warnings(results: pd.DataFrame, notes: Sequence[str] = ()) -> list[str]:
    """What a reader must know before trusting the figures, most important first: the run's own notes
    (run.json), then from the rows: per run, how many cases other processes shared the machine with
    (`other_cores` above `machine.SHARED_CORES`), how many cases are unstable, and how many beat the
    measured copy bandwidth by the bytes model."""
    out = [str(n) for n in notes]
    ok = results[results["status"].astype(str) == "ok"] if "status" in results else results
    if "other_cores" in ok and len(ok):
        runs = ok["run"].astype(object).fillna("") if "run" in ok else pd.Series("", ok.index)
        several = runs.nunique() > 1
        for run, rows in ok.groupby(runs, sort=True):
            busy = pd.to_numeric(rows["other_cores"], errors="coerce")
            shared = busy > SHARED_CORES
            if shared.any():
                where = f"run {run}: " if several and run else ""
                out.append(
                    f"{where}shared machine: {int(shared.sum())} of {len(rows)} cases were measured while "
                    f"other processes kept more than {SHARED_CORES:g} cores busy (up to {busy.max():.1f}, "
                    f"{busy[shared].mean():.1f} on average in those cases; column other_cores). Their times "
                    "may be slower and noisier than on an idle machine: compare them with care, or measure "
                    "again on an idle one."
                )
    if "unstable" in ok and len(ok):
        unstable = int(ok["unstable"].astype(str).str.strip().str.lower().eq("true").sum())
        if unstable:
            out.append(
                f"{unstable} of {len(ok)} measured cases are unstable (the p20-p80 spread of their samples "
                f"is above {100 * UNSTABLE_SPREAD:.0f} % of the median; marked {UNSTABLE_MARK} in the "
                "tables, open rings in the latency plots): do not rank variants on them."
            )
    above = above_copy_rows(ok)
    if above.any():
        out.append(
            f"{int(above.sum())} of {len(ok)} measured cases move more bytes per second by the bytes model "
            "than the measured copy bandwidth (column above_copy, pct_copy above 100): the model counts "
            "bytes that stayed in a cache, or copy_gbps is low (its clocks: copy_sm_mhz, copy_mem_mhz)."
        )
    return out


def above_copy_rows(rows: pd.DataFrame) -> pd.Series:
    """Rows whose gbps exceeds the measured copy bandwidth: `above_copy`, else (results from before the
    column) pct_copy above 100."""
    none = pd.Series("", index=rows.index)
    flag = rows.get("above_copy", none).astype(str).str.strip().str.lower()
    pct = pd.to_numeric(rows.get("pct_copy", none), errors="coerce")
    return flag.eq("true") | (~flag.isin(["true", "false"]) & pct.gt(100))


def split_tensor_parallel(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(single-device rows, tensor-parallel rows): the latter have tp > 1 or a tensor-parallel variant."""
    from perfsuite.distributed import tp_variants

    tp = pd.to_numeric(results["tp"], errors="coerce").fillna(1) if "tp" in results else 1
    mask = (tp > 1) | results["variant"].isin(tp_variants.names())
    return results[~mask], results[mask]


def _rows_section(
    section_id: str, title: str, frame: pd.DataFrame | None, build: Callable[[pd.DataFrame], Section]
) -> Section | None:
    """The section `build` makes of `frame`; None without rows; a note when it breaks."""
    if frame is None or frame.empty:
        return None
    try:
        return build(frame)
    except Exception as exc:  # a broken section must not cost the whole report
        return Section(section_id, title, [Note(f"{title}: not drawn ({type(exc).__name__}: {exc})")])


def _logits_shape(ctx: Context) -> Section | None:
    """The logits' shape section (None for results without its figures); a note when it breaks."""
    try:
        return logits_shape_section.section(ctx)
    except Exception as exc:  # a broken section must not cost the whole report
        message = f"{logits_shape_section.TITLE}: not drawn ({type(exc).__name__}: {exc})"
        return Section(logits_shape_section.SECTION_ID, logits_shape_section.TITLE, [Note(message)])


def _simulated_devices(*frames: pd.DataFrame | None) -> list[str]:
    """The names of the simulated devices among the rows (the `simulated` column, or the name's label)."""
    names: set[str] = set()
    for frame in frames:
        if frame is None or frame.empty or "device" not in frame:
            continue
        flag = frame["simulated"].astype(str).eq("True") if "simulated" in frame else False
        labelled = frame["device"].astype(str).str.endswith("(simulated)")
        names.update(frame.loc[flag | labelled, "device"].astype(str))
    return sorted(names)


__all__ = ["DEFAULT_TITLE", "build_report", "measurement_warnings", "split_tensor_parallel"]
