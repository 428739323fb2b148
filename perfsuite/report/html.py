"""One self-contained HTML report from result rows: warnings, summary, plots, parity, the logits' shape,
tensor parallel, draft loop, edge cases, skips, full table and environment.

Each case kind (`perfsuite.core.kinds`) names the function that draws its sections from its rows
(`kernel_sections`, `tp_section`, `draft_section`); the edge cases, skips, full table and environment
follow. Sections are built from the blocks of `perfsuite.report.blocks` and the page is rendered by
`perfsuite.report.page`.
plotly is imported only where a figure is built: without it (`plots_available()` says why) every table is
still written, each figure becomes a note and the page says at the top how to get the plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from perfsuite.core import kinds
from perfsuite.core.machine import SHARED_CORES
from perfsuite.measure.timing import UNSTABLE_SPREAD
from perfsuite.report import kernel_sections
from perfsuite.report.blocks import Note, Section
from perfsuite.report.kernel_context import UNSTABLE_MARK, Context
from perfsuite.report.page import render_page
from perfsuite.results.run import PRIMARY, Run

DEFAULT_TITLE = "perfsuite: top-k selection of the draft step"
REPORT_AGAIN = "`perfsuite report DIR/results.csv` (DIR: the run's folder)"


def build_report(
    run: Run, out_path: str | Path, *, environment: dict[str, str] | None = None, title: str = DEFAULT_TITLE
) -> Path:
    """Write one self-contained HTML report of `run` (`results.run.load_run`) to `out_path` (a folder: its
    `report.html`); return its path. Each case kind (`perfsuite.core.kinds`) draws its sections from its
    rows; then the edge cases, skips, the full results table and the environment (`environment` over what
    the rows say). The run's notes (run.json: a shared machine, dropped log lines) open the page, with what
    the rows' `other_cores` and `unstable` columns add (`measurement_warnings`)."""
    out = Path(out_path)
    if out.is_dir() or out.suffix == "":
        out = out / "report.html"
    results = run.frame
    frames = {kind.name: run.rows(kind) for kind in kinds.KINDS}
    primary = frames[kinds.KINDS[0].name]  # single-device kernel rows: the page's context
    ctx = Context.of(primary, run.samples)
    every = ctx if len(primary) == len(results) else Context.of(results)
    sections = [
        *(s for kind in kinds.KINDS for s in kind.part("sections")(frames[kind.name], run.samples)),
        *(kernel_sections.skipped_section(every), kernel_sections.results_section(every))[
            : 2 * bool(len(results))
        ],
        kernel_sections.environment_section(ctx, environment),
    ]
    sections = [s for s in sections if s is not None]
    others = [frame for name, frame in run.tables.items() if name != PRIMARY]
    simulated = _simulated_devices(results, *others)
    if simulated:
        note = (
            f"Simulated GPU ({', '.join(simulated)}): perfsuite ran its GPU code paths on the CPU "
            "(PERFSUITE_SIMULATED_GPU). Every time here is a host time of CPU work, not a GPU measurement."
        )
        sections.insert(0, Section("simulated", "Simulated GPU", [Note(note)]))
    if not len(results) and all(frame.empty for frame in others):
        sections.insert(0, Section("summary", "Summary", [Note("No result rows: nothing to plot.")]))
    warnings = measurement_warnings(results, run.notes)
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
        unstable = int(ok["unstable"].fillna(False).sum())
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
    flag = rows.get("above_copy", pd.Series(pd.NA, index=rows.index, dtype="boolean"))
    pct = rows.get("pct_copy", pd.Series(float("nan"), index=rows.index))
    return flag.fillna(pct.gt(100)).astype(bool)


def _simulated_devices(*frames: pd.DataFrame | None) -> list[str]:
    """The names of the simulated devices among the rows (the `simulated` column, or the name's label)."""
    names: set[str] = set()
    for frame in frames:
        if frame is None or frame.empty or "device" not in frame:
            continue
        flag = frame["simulated"].fillna(False).astype(bool) if "simulated" in frame else False
        labelled = frame["device"].astype(str).str.endswith("(simulated)")
        names.update(frame.loc[flag | labelled, "device"].astype(str))
    return sorted(names)


__all__ = ["DEFAULT_TITLE", "build_report", "measurement_warnings"]
