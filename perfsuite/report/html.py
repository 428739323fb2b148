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

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from perfsuite.core import kinds
from perfsuite.core.machine import SHARED_CORES
from perfsuite.measure.timing import UNSTABLE_SPREAD
from perfsuite.report import edge_case_section, kernel_sections
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
    tables: Mapping[str, pd.DataFrame | None] | None = None,
    environment: dict[str, str] | None = None,
    title: str = DEFAULT_TITLE,
    notes: Sequence[str] = (),
    samples: pd.DataFrame | None = None,
) -> Path:
    """Write one self-contained HTML report of `results` (schema frame) to `out_path`; return its path.

    `out_path` may be a directory (the file is then `report.html` in it). Each case kind
    (`perfsuite.core.kinds`) draws its sections from its rows: `results` is results.csv (kernel and
    tensor-parallel rows), `tables` the other kinds' tables by file name (`draft` is the same as
    `tables={"draft.csv": draft}`). `edge_cases` is the edge-case matrix (pattern, description, dtype,
    topk, variant, index, topk_p, index_valid, same_as_baseline, error). `environment` overrides what
    the frame's columns say about the machine and run. `notes`: the run's warnings (run.json's `notes`:
    a shared machine, dropped log lines), shown in a banner at the top with what the rows' `other_cores`
    and `unstable` columns add (`measurement_warnings`). `samples`: the raw samples
    (`load.load_samples`: case_id, run, seconds), for the distribution figure.
    """
    out = Path(out_path)
    if out.is_dir() or out.suffix == "":
        out = out / "report.html"
    by_file = kind_tables(results, {**({"draft.csv": draft} if draft is not None else {}), **(tables or {})})
    frames = {kind.name: kinds.rows_of(kind, by_file[kind.table_file]) for kind in kinds.KINDS}
    primary = frames[kinds.KINDS[0].name]  # single-device kernel rows: the page's context
    ctx = Context.of(primary, samples)
    every = ctx if len(primary) == len(results) else Context.of(results)
    sections = [
        *(s for kind in kinds.KINDS for s in kind.part("sections")(frames[kind.name], samples)),
        edge_case_section.section(edge_cases),
        *(
            [kernel_sections.skipped_section(every), kernel_sections.results_section(every)]
            if len(results)
            else []
        ),
        kernel_sections.environment_section(ctx, environment),
    ]
    sections = [s for s in sections if s is not None]
    others = [frame for name, frame in by_file.items() if name != kinds.KINDS[0].table_file]
    simulated = _simulated_devices(results, *others)
    if simulated:
        note = (
            f"Simulated GPU ({', '.join(simulated)}): perfsuite ran its GPU code paths on the CPU "
            "(PERFSUITE_SIMULATED_GPU). Every time here is a host time of CPU work, not a GPU measurement."
        )
        sections.insert(0, Section("simulated", "Simulated GPU", [Note(note)]))
    if not len(results) and all(frame.empty for frame in others):
        sections.insert(0, Section("summary", "Summary", [Note("No result rows: nothing to plot.")]))
    warnings = measurement_warnings(results, notes)
    html = render_page(title, ctx.subtitle(), sections, REPORT_AGAIN, warnings=warnings)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


def kind_tables(results: pd.DataFrame, tables: Mapping[str, pd.DataFrame | None]) -> dict[str, pd.DataFrame]:
    """Every kind's table by file name: results.csv is `results`, a table not given is empty."""
    given = {kinds.KINDS[0].table_file: results, **tables}
    return {
        name: given.get(name) if given.get(name) is not None else pd.DataFrame()
        for name in kinds.table_files()
    }


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


__all__ = ["DEFAULT_TITLE", "build_report", "kind_tables", "measurement_warnings"]
