"""The HTML page of `perfsuite compare`: the verdict, the machine-wide drift (and what the in-turn reference
saw), a plot of the per-case time ratios and the table (each case's ratio, the one judged, beside its
ratio against the in-turn reference, its rank-test p-value and the two runs' spreads).

plotly is imported only to draw the plot; without it the page keeps the verdict and the table.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perfsuite.compare.match import (
    FAILING,
    Comparison,
    bytes_ratio,
    drift_line,
    p_text,
    spreads,
    summary_line,
    unstable_sides,
    verdicts,
)
from perfsuite.compare.rank_sum import ALPHA
from perfsuite.measure.timing import UNSTABLE_SPREAD
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
        f"p20/p80). Dashed lines: the threshold, ±{100 * comparison.threshold:.3g} %. Above 1: slower. "
        "A marker past a dashed line is a regression only when its colour says slower: the rank test "
        "or the band must confirm it, and unstable cases are noisy."
    )
    if not comparison.anchored.empty:
        caption += (
            " The ratios are new / base medians; a whole variant's shift counts only beyond the in-turn "
            "reference's own shift (the machine's drift, in the line above)."
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
        css = OUTCOME_CSS.get(rec["outcome"], "")
        spread = spreads(rec)
        rows.append(
            [
                str(rec["case"]),
                fmt.significant(rec["base_median_us"]),
                fmt.significant(rec["new_median_us"]),
                Cell(fmt.significant(rec["ratio"], 3), css),
                Cell(
                    fmt.significant(rec["anchored_ratio"], 3) if rec["by_reference"] else "",
                    "",
                    _ref_title(rec),
                ),
                Cell(p_text(rec["p_value"]), "", _p_title(rec)),
                Cell(p_text(rec["ref_p_value"]), "", _p_title(rec, "ref_")),
                f"{fmt.significant(rec['band_low'], 3)} – {fmt.significant(rec['band_high'], 3)}".strip(" –"),
                Cell(spread, "differs" if "!" in spread else "", _spread_title(rec)),
                Cell(verdicts(rec["base_verdict"], rec["new_verdict"]), parity_cls),
                bytes_ratio(rec),
                Cell(
                    str(rec["outcome"]),
                    OUTCOME_CSS.get(rec["outcome"], ""),
                    "; ".join(
                        t
                        for t in (_confirmed_title(rec), _rule_title(rec), _text(rec.get("new_reason")))
                        if t
                    ),
                ),
            ]
        )
    columns = [
        "case", "base µs", "new µs", "ratio", "vs ref", "p", "p vs ref", "p20/p80 band", "spread", "parity",
        "bytes", "outcome",
    ]  # fmt: skip
    caption = (
        "Failing cases first, then by the judged ratio. ratio: new / base median (the run's witness judges "
        "it less the machine's drift); vs ref: new / base of the case's time over the in-turn reference's "
        "(an exp of its logits sampled in the same rounds; the reference's witness; blank: no reference in "
        "both runs). p: two-sided Mann-Whitney U test on the two runs' raw samples (blank without them); "
        "p vs ref: the same on the per-round ratios to the reference; spread: p20-p80 as a percent of the "
        f"median, base → new, ! above {100 * UNSTABLE_SPREAD:.0f} % (unstable)."
    )
    return Table(columns, rows, caption, css="compact")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _p_title(rec: pd.Series, prefix: str = "") -> str:
    """What a witness's rank test ran on (`prefix` "ref_": the per-round ratios to the reference)."""
    if np.isnan(rec[f"{prefix}p_value"]):
        return ""
    share = 100 * rec[f"{prefix}new_larger"]
    what = "per-round ratios to the reference" if prefix else "samples"
    return (
        f"{rec[f'{prefix}base_raw_samples']:.0f} base and {rec[f'{prefix}new_raw_samples']:.0f} new {what}; "
        f"the new one is the larger in {share:.0f} % of pairs"
    )


def _confirmed_title(rec: pd.Series) -> str:
    by = _text(rec.get("confirmed_by"))
    return f"confirmed by the {by} witness{'es' if ' and ' in by else ''}" if by else ""


def _ref_title(rec: pd.Series) -> str:
    if not rec["by_reference"]:
        return "no in-turn reference in both runs: judged on the ratio (the earlier rule)"
    return (
        f"the reference's own new / base: {fmt.significant(rec['ref_ratio'], 3)}; the case's time over it: "
        f"{fmt.significant(rec['base_vs_ref'], 3)} → {fmt.significant(rec['new_vs_ref'], 3)}"
    )


def _spread_title(rec: pd.Series) -> str:
    unstable = unstable_sides(rec)
    return f"unstable in {' and '.join(unstable)}: a change past the threshold is noisy" if unstable else ""


def _rule_title(rec: pd.Series) -> str:
    """How the witness behind the outcome was confirmed (the reference's where it alone confirmed it)."""
    rule = rec.get("ref_rule") if rec.get("confirmed_by") == "reference" else rec.get("rule", "")
    return {
        "unstable": "unstable: a change past the threshold is noisy",
        "rank test": f"decided by the rank test (p < {ALPHA:g} confirms)",
        "p20/p80 band": "no raw samples: decided by the p20/p80 band",
        "medians": "no samples nor p20/p80: decided by the medians",
    }.get(str(rule), "")


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
        [Note(verdict), Note(summary_line(comparison)), Note(drift_line(comparison))],
        intro=f"{comparison.base_name} (base) against {comparison.new_name} (new). A case is slower when its "
        f"median grew by more than {100 * comparison.threshold:.3g} % and, where both runs left raw samples, "
        f"a two-sided Mann-Whitney U test on them gives p < {ALPHA:g} (without samples: its new p20 is above "
        f"the base p80); a case unstable in either run (p20-p80 spread above {100 * UNSTABLE_SPREAD:.0f} % "
        "of its median) is noisy, never slower. A parity verdict that got worse (pass < inexact < fail) or "
        "a case that now errors also fails. Where both runs sampled the in-turn reference (an exp of each "
        "case's logits, in the same rounds as its variants), a case's change has a second witness: its time "
        "over the reference's (vs ref), confirmed by the same test on the per-round ratios, which takes out "
        "a machine faster or slower in the seconds the case was sampled; either witness may confirm a "
        "change. Every case, full_softmax included, is also judged less the machine's drift (what the "
        "reference's own shift and the whole run's agree on), and its change must clear its variant's "
        "run-to-run noise, which backs at most one of two opposite confirmed changes (a case it backs "
        "neither way is noisy). Cases without the reference keep the earlier "
        "rule (said in the drift line). The median ratio over all cases tells "
        "whether the whole machine was slower in one run.",
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
