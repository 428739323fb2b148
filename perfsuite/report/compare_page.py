"""The views of a `perfsuite compare`: the text table it prints (the cases, their counts and the drift line)
and its HTML page (the verdict, the drift, the decision table, a plot of each case's shift with its
interval, and the cases)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perfsuite.compare.groups import ALL, GROUPS_LEGEND, MOVED
from perfsuite.compare.match import CHECKS, ORDER, Comparison, failing
from perfsuite.compare.rule import BY_REFERENCE, LEGEND, LEVEL, OWN_TIME, ROWS
from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import REPORT_LAYOUT, Block, Cell, Note, Section, Table, figure_block
from perfsuite.report.page import render_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

OUTCOME_COLORS = {"slower": "#ef8a62", "cannot tell": "#999999", "faster": "#4393c3", "same": "#92c5de"}
OUTCOME_CSS = {"slower": "loss", "faster": "win", "cannot tell": "differs", "broken": "error"}
OUTCOME_CSS["parity worse"] = "loss"
TITLE = "perfsuite compare"
SORTED = "cases, sorted by shift"
COMPARE_AGAIN = "`perfsuite compare BASE NEW --out FILE.html`"
INTERVAL = f"{100 * LEVEL:.0f} % interval"
WITNESS_NOTE = (
    "witness: vs ref, the case's time over the in-turn reference's round by round; own, its own samples; "
    "the rule: perfsuite compare --help"
)


def summary_line(comparison: Comparison) -> str:
    """How many cases matched, per outcome and failed check (and the thresholds the cases that cannot
    tell would be judged at), what was left over, and the variants and groups called slower or faster."""
    c = comparison
    left = ((c.base_only, f"only in {c.base_name}"), (c.new_only, f"only in {c.new_name}"),
            (c.duplicates, "duplicate rows (the last kept)"))  # fmt: skip
    extra = "; ".join(f"{n} {what}" for n, what in left if n)
    counts = {o: f"{n} {o}" for o, n in c.counts().items()}
    if "cannot tell" in counts:
        at = c.table["judged_at"].quantile([0.5, 0.9])
        counts["cannot tell"] += (
            f" at this threshold (half could be judged at {_pct(at[0.5])}, 90 % at {_pct(at[0.9])})"
        )
    outcomes = ", ".join(counts[o] for o in ORDER if o in counts) or "nothing to compare"
    checks = "".join(f"; {counts[o]}" for o in CHECKS if o in counts)
    threshold = f"threshold {_pct(c.threshold)}"
    matched = f"{len(c.table)} cases matched{f' ({extra})' if extra else ''}"
    return f"{matched}: {outcomes}{checks}{where_line(c.groups)}; {threshold}"


def where_line(groups: pd.DataFrame) -> str:
    """ "; slower: SELECTOR +8.1 % (topk=1 +13.1 %)": each variant that moved, or whose groups named
    where a change is (`groups.where`), per outcome."""
    parts = []
    for name in MOVED:
        found = []
        for variant, rows in groups[groups["outcome"].eq(name)].groupby("variant", sort=False):
            whole, inner = rows[rows["level"].eq("variant")], rows[rows["where"]]
            text = f"{variant} {moved(whole['shift'].iloc[0])}" if len(whole) else str(variant)
            inside = ", ".join(f"{r.group} {moved(r.shift)}" for r in inner.itertuples())
            found += [f"{text} ({inside})" if inside else text] if len(whole) or inside else []
        parts += [f"; {name}: {'; '.join(found)}"] if found else []
    return "".join(parts)


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.3g} %"


def outcome_text(rec: pd.Series | object) -> str:
    """The outcome, with the threshold from which a row that cannot tell could be judged."""
    outcome, at = (
        (rec["outcome"], rec["judged_at"]) if isinstance(rec, pd.Series) else (rec.outcome, rec.judged_at)
    )
    return f"cannot tell (from {_pct(at)})" if outcome == "cannot tell" else outcome


def moved(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f} %"


def drift_line(comparison: Comparison) -> str:
    """The runs' drift as the in-turn reference saw it (its own new/base, median over the cases sampled
    with it), beside the cases' own median shift and their median shift against the reference."""
    timed = comparison.table[comparison.table["outcome"] != "not comparable"]
    if timed.empty:
        return "drift: no case timed in both runs"
    own = f"the cases' own times {moved(timed['ratio'].median())}"
    ref = timed[timed["witness"].str.startswith(BY_REFERENCE)]
    if ref.empty:
        return (
            f"drift: no in-turn reference in both runs; {own} (median over {len(timed)} cases), judged as "
            "they are: a machine slower in one run moves them all"
        )
    drift = (ref["new_ref_median_us"] / ref["base_ref_median_us"]).median()
    line = (
        f"drift: the reference moved {moved(drift)} (new/base median over the {len(ref)} cases sampled with "
        f"it); {own}, against the reference {moved(ref['shift'].median())}"
    )
    without = len(timed) - len(ref)
    return line + (f"; {without} cases judged on their own time (no same reference)" if without else "")


def _cells(rec: pd.Series) -> list[str]:
    """A case's figures as text: base µs, new µs, witness, shift, interval, floor, noise, parity ('pass', or
    'pass→fail' where the verdict changed)."""
    base, new = ("" if pd.isna(rec[c]) else str(rec[c]) for c in ("base_verdict", "new_verdict"))
    parity = base if base == new else f"{base or '-'}→{new or '-'}"
    low, high = (fmt.significant(rec[c], 3) for c in ("low", "high"))
    interval = f"{low}–{high}" if low else ""
    witness = rec["witness"].replace(BY_REFERENCE, "vs ref").replace(OWN_TIME, "own")
    figures = (rec["base_median_us"], rec["new_median_us"])
    return [*(fmt.significant(v) for v in figures), witness, fmt.significant(rec["shift"], 4), interval,
            fmt.significant(rec["floor"], 3), fmt.significant(rec["noise"], 3), parity]  # fmt: skip


COLUMNS = ["case", "base us", "new us", "witness", "shift", INTERVAL, "floor", "noise", "parity", "outcome",
           "check"]  # fmt: skip


def text_table(comparison: Comparison, limit: int = 30, width: int = 64) -> str:
    """Every failing case, then the largest other shifts, up to `limit` rows; the counts and the drift."""
    table, bad = comparison.table, failing(comparison.table)
    candidates = pd.concat([table[bad], table[~bad & table["outcome"].ne("not comparable")]])
    shown = candidates.head(max(limit, int(bad.sum())))
    footer = f"{summary_line(comparison)}\n{drift_line(comparison)}"
    if shown.empty:
        return footer
    rows = [
        [rec["case"] if len(rec["case"]) <= width else "…" + rec["case"][1 - width :], *_cells(rec),
         outcome_text(rec), rec["check"]]
        for _, rec in shown.iterrows()
    ]  # fmt: skip
    out = pd.DataFrame(rows, columns=COLUMNS)
    out = out.drop(columns="check") if out["check"].eq("").all() else out
    left_out = len(candidates) - len(shown)
    tail = f"\n… {left_out} more timed cases (see --out / --csv)" if left_out else ""
    groups = pd.DataFrame([_group_cells(r) for r in _shown_groups(comparison)], columns=GROUP_COLUMNS)
    groups_text = f"\n\n{groups.to_string(index=False)}" if len(groups) else ""
    return f"{out.to_string(index=False)}{tail}\n{WITNESS_NOTE}{groups_text}\n{footer}"


GROUP_COLUMNS = ["variant", "group", "cases", "shift", "interval", "floor", "outcome"]


def _shown_groups(comparison: Comparison) -> list:
    """Each variant's row, then the groups that name where a change is."""
    groups = comparison.groups
    return list(groups[groups["level"].eq("variant") | groups["where"]].itertuples())


def _group_cells(rec: object) -> list[str]:
    low, high = (fmt.significant(v, 3) for v in (rec.low, rec.high))
    interval = f"{low}–{high}" if rec.low > 0 and rec.high < np.inf else "none (too few cases)"
    group = "(variant)" if rec.group == ALL else rec.group
    return [rec.variant, group, str(rec.cases), fmt.significant(rec.shift, 4), interval,
            fmt.significant(rec.floor, 3), outcome_text(rec)]  # fmt: skip


def _shift_figure(comparison: Comparison) -> Block:
    table = comparison.table[comparison.table["shift"].notna()].sort_values("shift").reset_index(drop=True)
    if table.empty:
        return Note("No case was timed in both runs: nothing to plot.")
    title = f"new / base shift per case ({comparison.new_name} vs {comparison.base_name})"
    caption = (
        f"Markers: each case's shift; bars: its {INTERVAL}. Dashed lines: the threshold, "
        f"±{100 * comparison.threshold:.3g} %. Above 1: slower; the colour: the decision table's outcome."
    )
    build = partial(_shift_plot, table, comparison.threshold, title)
    return figure_block("compare-shifts", title, build, caption)


def _shift_plot(table: pd.DataFrame, threshold: float, title: str) -> go.Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, part in table.groupby("outcome", sort=False):
        bars = {"array": part["high"] - part["shift"], "arrayminus": part["shift"] - part["low"]}
        bars = {k: np.nan_to_num(v.to_numpy(), posinf=0.0) for k, v in bars.items()}  # no interval: no bar
        hover = "%{customdata[0]}<br>%{customdata[1]}<br>shift %{y:.3f}<extra>%{fullData.name}</extra>"
        fig.add_scatter(
            x=part.index.to_numpy(), y=part["shift"].to_numpy(), mode="markers", name=str(name),
            marker={"color": OUTCOME_COLORS.get(str(name), "#444"), "size": 7}, hovertemplate=hover,
            error_y={"type": "data", "thickness": 1, "width": 0, **bars},
            customdata=np.stack([part["case"], part["witness"]], axis=-1),
        )  # fmt: skip
    for y, dash in ((1.0, "solid"), (1 + threshold, "dash"), (1 / (1 + threshold), "dash")):
        fig.add_hline(y=y, line={"color": "#555", "width": 1, "dash": dash})
    yaxis = {"type": "log", "title": "shift (new / base)"}
    fig.update_layout(title=title, height=460, xaxis_title=SORTED, legend_title_text="outcome")
    fig.update_layout(yaxis=yaxis, **REPORT_LAYOUT)
    return fig


def build_compare_page(comparison: Comparison, out_path: str | Path, title: str = TITLE) -> Path:
    """Write the comparison as one self-contained HTML page; return its path."""
    failing_now, groups_now = len(comparison.failures), len(comparison.slower_groups)
    verdict = (
        f"FAIL: {failing_now} case(s) and {groups_now} variant(s) or group(s) regressed."
        if comparison.failed
        else "PASS: no case, variant or group confirmed slower."
    )
    rule = Table(["outcome", "condition"], [[o, c] for o, c, _ in ROWS], caption=LEGEND)
    intro = (
        f"{comparison.base_name} (base) against {comparison.new_name} (new). Each case's time has one "
        "outcome of the decision table below; a slower case fails the compare, and so does, apart from the "
        "table, a parity verdict that got worse (pass < inexact < fail) or a case that now errors (check)."
    )
    notes = [Note(verdict), Note(summary_line(comparison)), Note(drift_line(comparison)), rule]
    sections = [Section("summary", "Verdict", notes, intro=intro)]
    group_rows = [
        [*cells[:-1], Cell(cells[-1], OUTCOME_CSS.get(cells[-1].split(" (")[0], ""))]
        for cells in map(_group_cells, comparison.groups.itertuples())
    ]
    groups = Table(GROUP_COLUMNS, group_rows, GROUPS_LEGEND, css="compact")
    sections += [Section("groups", "Variants and groups", [groups])]
    sections += [Section("shifts", "Shifts", [_shift_figure(comparison)])]
    rows = [
        [str(rec["case"]), *_cells(rec), Cell(outcome_text(rec), OUTCOME_CSS.get(rec["outcome"], "")),
         Cell(rec["check"], OUTCOME_CSS.get(rec["check"], ""), rec["new_reason"] if rec["check"] else "")]
        for _, rec in comparison.table.iterrows()
    ]  # fmt: skip
    caption = f"Failing cases first, then by outcome and shift. {WITNESS_NOTE}."
    cases = Table([c.replace("us", "µs") for c in COLUMNS], rows, caption, css="compact")
    sections += [Section("cases", "Cases", [cases])]
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    subtitle = f"{comparison.base_name} → {comparison.new_name}"
    out.write_text(render_page(title, subtitle, sections, COMPARE_AGAIN), encoding="utf-8")
    return out
