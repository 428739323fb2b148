"""The HTML page of `perfsuite compare`: the verdict, a plot of the per-case time ratios and the table.

plotly is imported only to draw the plot; without it the page keeps the verdict and the table.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perfsuite.compare import FAILING, Comparison, bytes_ratio, summary_line, verdicts
from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import REPORT_LAYOUT, Block, Cell, Note, Section, Table, figure_block
from perfsuite.report.page import render_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

OUTCOME_COLORS = {
    "broken": "#b2182b",
    "parity worse": "#d6604d",
    "slower": "#ef8a62",
    "noisy": "#999999",
    "skipped now": "#bababa",
    "faster": "#4393c3",
    "same": "#92c5de",
    "not timed": "#dddddd",
}
COMPARE_AGAIN = "`perfsuite compare BASE NEW --out FILE.html`"
OUTCOME_CSS = {
    "broken": "error",
    "parity worse": "loss",
    "slower": "loss",
    "faster": "win",
    "noisy": "differs",
}


def _ratio_figure(comparison: Comparison) -> Block:
    table = comparison.table[comparison.table["ratio"].notna()].sort_values("ratio").reset_index(drop=True)
    if table.empty:
        return Note("No case was timed in both runs: nothing to plot.")
    title = f"new / base median time per case ({comparison.new_name} vs {comparison.base_name})"
    caption = (
        "Markers: median ratio; bars: new p20 / base p80 to new p80 / base p20 (where both runs report "
        f"p20/p80). Dashed lines: the threshold, ±{100 * comparison.threshold:.3g} %. Above 1: slower."
    )
    build = partial(_ratio_plot, table, comparison.threshold, title)
    return figure_block("compare-ratios", title, build, caption)


def _ratio_plot(table: pd.DataFrame, threshold: float, title: str) -> go.Figure:
    """Each case's new / base ratio (sorted), coloured by outcome, with the threshold lines."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for outcome, part in table.groupby("outcome", sort=False):
        fig.add_trace(
            go.Scatter(
                x=part.index.to_numpy(),
                y=part["ratio"].to_numpy(),
                mode="markers",
                name=str(outcome),
                marker={"color": OUTCOME_COLORS.get(str(outcome), "#444"), "size": 7},
                error_y={
                    "type": "data",
                    "array": (part["band_high"] - part["ratio"]).clip(lower=0).to_numpy(),
                    "arrayminus": (part["ratio"] - part["band_low"]).clip(lower=0).to_numpy(),
                    "thickness": 1,
                    "width": 0,
                },
                customdata=np.stack([part["case"], part["base_median_us"], part["new_median_us"]], axis=-1),
                hovertemplate="%{customdata[0]}<br>%{customdata[1]:.4g} µs → %{customdata[2]:.4g} µs"
                "<br>ratio %{y:.3f}<extra>%{fullData.name}</extra>",
            )
        )
    limit = 1 + threshold
    for y, dash in ((1.0, "solid"), (limit, "dash"), (1 / limit, "dash")):
        fig.add_hline(y=y, line={"color": "#555", "width": 1, "dash": dash})
    fig.update_layout(
        title=title,
        height=460,
        xaxis_title="cases, sorted by ratio",
        yaxis={"type": "log", "title": "time ratio (new / base)"},
        legend_title_text="outcome",
    )
    fig.update_layout(**REPORT_LAYOUT)
    return fig


def _table(comparison: Comparison) -> Table:
    rows = []
    for _, rec in comparison.table.iterrows():
        parity_cls = "loss" if rec["outcome"] == "parity worse" else ""
        rows.append(
            [
                str(rec["case"]),
                fmt.significant(rec["base_median_us"]),
                fmt.significant(rec["new_median_us"]),
                Cell(fmt.significant(rec["ratio"], 3), OUTCOME_CSS.get(rec["outcome"], "")),
                f"{fmt.significant(rec['band_low'], 3)} – {fmt.significant(rec['band_high'], 3)}".strip(" –"),
                Cell(verdicts(rec["base_verdict"], rec["new_verdict"]), parity_cls),
                bytes_ratio(rec),
                Cell(
                    str(rec["outcome"]), OUTCOME_CSS.get(rec["outcome"], ""), str(rec.get("new_reason", ""))
                ),
            ]
        )
    columns = ["case", "base µs", "new µs", "ratio", "p20/p80 band", "parity", "bytes", "outcome"]
    return Table(columns, rows, "Failing cases first, then by ratio.", css="compact")


def build_compare_page(
    comparison: Comparison, out_path: str | Path, title: str = "perfsuite compare"
) -> Path:
    """Write the comparison as one self-contained HTML page; return its path."""
    out = Path(out_path)
    failing = len(comparison.failures)
    verdict = (
        f"FAIL: {failing} case(s) regressed ({', '.join(FAILING)})." if failing else "PASS: no regression."
    )
    summary = Section(
        "summary",
        "Verdict",
        [Note(verdict), Note(summary_line(comparison))],
        intro=f"{comparison.base_name} (base) against {comparison.new_name} (new). A case is slower when its "
        f"median grew by more than {100 * comparison.threshold:.3g} % and its new p20 is above the base p80; "
        "a parity verdict that got worse (pass < inexact < fail) or a case that now errors also fails.",
    )
    sections = [
        summary,
        Section("ratios", "Time ratios", [_ratio_figure(comparison)]),
        Section("cases", "Cases", [_table(comparison)]),
    ]
    subtitle = f"{comparison.base_name} → {comparison.new_name}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(title, subtitle, sections, COMPARE_AGAIN), encoding="utf-8")
    return out
