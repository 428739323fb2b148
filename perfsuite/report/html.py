"""One self-contained HTML report from result rows (`build_report`): warnings, then each case kind's sections
(`perfsuite.core.kinds`), skips, the full table and the environment, rendered by `perfsuite.report.page`.
plotly is imported only where a figure is built: without it every table is still written, each figure
becomes a note and the page says at the top how to get the plots (`plots_available()`).
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
from perfsuite.results.columns import flag
from perfsuite.results.run import PRIMARY, Run

DEFAULT_TITLE = "perfsuite: top-k selection of the draft step"
REPORT_AGAIN = "`perfsuite report DIR/results.csv` (DIR: the run's folder)"


def build_report(
    run: Run, out_path: str | Path, *, environment: dict[str, str] | None = None, title: str = DEFAULT_TITLE
) -> Path:
    """Write the HTML report of `run` (`results.run.load_run`) to `out_path` (a folder: its `report.html`);
    return its path. `environment` overrides what the rows say; the page opens on `measurement_warnings`."""
    out = Path(out_path)
    if out.is_dir() or out.suffix == "":
        out = out / "report.html"
    results = run.frame
    frames = {kind.name: run.rows(kind) for kind in kinds.KINDS}
    every = Context.of(results)  # the rows of results.csv (kernel and tensor parallel): the page's context
    sections = [s for kind in kinds.KINDS for s in kind.part("sections")(frames[kind.name], run.samples)]
    if len(results):
        sections += [kernel_sections.skipped_section(every), kernel_sections.results_section(every)]
    sections.append(kernel_sections.environment_section(every, environment))
    others = [frame for name, frame in run.tables.items() if name != PRIMARY]
    simulated = simulated_devices(results, *others)
    if simulated:
        note = (
            f"Simulated GPU ({', '.join(simulated)}): perfsuite ran its GPU code paths on the CPU "
            "(PERFSUITE_SIMULATED_GPU). Every time here is a host time of CPU work, not a GPU measurement."
        )
        sections.insert(0, Section("simulated", "Simulated GPU", [Note(note)]))
    if not len(results) and all(frame.empty for frame in others):
        sections.insert(0, Section("summary", "Summary", [Note("No result rows: nothing to plot.")]))
    warnings = measurement_warnings(results, run.notes)
    html = render_page(title, every.subtitle(), sections, REPORT_AGAIN, warnings=warnings)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


def measurement_warnings(results: pd.DataFrame, notes: Sequence[str] = ()) -> list[str]:
    """What a reader must know before trusting the figures, most important first: the run's notes (run.json),
    then per run the cases measured on a shared machine (`other_cores`), the unstable ones, and those above
    the measured copy bandwidth."""
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
        unstable = int(_flags(ok, "unstable").sum())
        if unstable:
            out.append(
                f"{unstable} of {len(ok)} measured cases are unstable (the p20-p80 spread of their samples "
                f"is above {100 * UNSTABLE_SPREAD:.0f} % of the median; marked {UNSTABLE_MARK} in the "
                "tables, open rings in the latency plots): do not rank variants on them."
            )
    pct = ok.get("pct_copy", pd.Series(float("nan"), index=ok.index))  # results from before above_copy
    above = _flags(ok, "above_copy").fillna(pct.gt(100)).astype(bool)
    if above.any():
        out.append(
            f"{int(above.sum())} of {len(ok)} measured cases move more bytes per second by the bytes model "
            "than the measured copy bandwidth (column above_copy, pct_copy above 100): the model counts "
            "bytes that stayed in a cache, or copy_gbps is low (its clocks: copy_sm_mhz, copy_mem_mhz)."
        )
    return out


def _flags(rows: pd.DataFrame, column: str) -> pd.Series:
    """A bool column as nullable booleans whatever its stored type (`columns.flag`); NA where absent."""
    return rows.get(column, pd.Series(pd.NA, index=rows.index)).map(flag).astype("boolean")


def simulated_devices(*frames: pd.DataFrame | None) -> list[str]:
    """The names of the simulated devices among the rows (the `simulated` column, or the name's label)."""
    names: set[str] = set()
    for frame in frames:
        if frame is None or frame.empty or "device" not in frame:
            continue
        labelled = frame["device"].astype(str).str.endswith("(simulated)")
        names.update(frame.loc[_flags(frame, "simulated").fillna(False) | labelled, "device"].astype(str))
    return sorted(names)


__all__ = ["DEFAULT_TITLE", "build_report", "measurement_warnings"]
