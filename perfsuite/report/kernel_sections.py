"""The kernel-level sections of the report: summary, plots, measured traffic, parity, skipped cases, the
full results table and the environment, each built from a prepared `Context`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import Block, Cell, Details, Note, Section, Table, frame_table, guard
from perfsuite.report.kernel_context import (
    BASELINE,
    FACET_ORDER,
    INEXACT_SHORTCUT,
    Context,
    dim_text,
    ordered,
    varying_keys,
)
from perfsuite.report.kernel_figures import (
    bandwidth_figures,
    latency_figures,
    memory_figure,
    mismatch_figure,
    speedup_figures,
)
from perfsuite.schema import FLAG_TOLERANCE, flagged

ENVIRONMENT_COLUMNS = ("device", "backend", "runtime", "driver", "torch", "triton", "git_sha", "scenario")
SUMMARY_ENVIRONMENT = ("backend", "runtime", "driver", "torch", "triton", "git_sha")
MAX_REASON_GROUPS = 60


def summary_section(ctx: Context) -> Section:
    """Where the figures come from, the fastest exact variant, the argmax_ones trade, the top-1 mismatch."""
    section = Section("summary", "Summary", intro=_summary_intro(ctx))
    section.blocks += guard("measured on", lambda: _measured_on(ctx))
    section.blocks += guard("fastest exact variant", lambda: _fastest_exact_table(ctx))
    section.blocks += guard("argmax_ones trade", lambda: _argmax_table(ctx))
    section.blocks += guard("top-1 mismatch", lambda: mismatch_figure(ctx))
    section.blocks += guard("measured bytes", lambda: _traffic_finding(ctx))
    return section


def _measured_on(ctx: Context) -> list[Block]:
    """Where each device's figures come from: backend, runtime, driver, torch, triton, perfsuite commit."""
    rows = []
    for device, part in ctx.frame.groupby("device", sort=True):
        values = _frame_environment(part)
        rows.append([str(device), *(values.get(c, "") for c in SUMMARY_ENVIRONMENT)])
    if not rows:
        return []
    return [Table(["measured on", *SUMMARY_ENVIRONMENT], rows, "", css="compact")]


def _summary_intro(ctx: Context) -> str:
    return (
        "Which variant returns exact probabilities fastest, what the inexact argmax_ones shortcut would save "
        "and what it costs in probability error, and how often the baseline's bf16/fp16 rounding changes the "
        "top token. Speedups: full_softmax's median over the variant's, same device, path, dtype and shape."
    )


def _summary_keys(ok: pd.DataFrame) -> list[str]:
    return ["device", *varying_keys(ok, ["backend"]), "dtype", "path", *varying_keys(ok, ["topk", "l2"])]


def _fastest_exact_table(ctx: Context) -> list[Block]:
    exact = ctx.ok[(ctx.ok["accuracy"] == "exact") & ctx.ok["batch"].notna() & ctx.ok["vocab"].notna()]
    if exact.empty:
        return [Note("Fastest exact variant: no exact variant has timings.")]
    keys = _summary_keys(ctx.ok)
    per_case = exact.groupby([*keys, "batch", "vocab", "variant"], dropna=False).agg(
        median_us=("median_us", "median"), speedup=("speedup_vs_full", "median")
    )
    per_case = per_case.reset_index()
    best = per_case.loc[per_case.groupby([*keys, "batch", "vocab"], dropna=False)["median_us"].idxmin()]
    vocabs = sorted(best["vocab"].dropna().unique())
    rows = []
    for group, part in best.groupby([*keys, "batch"], sort=True, dropna=False):
        cells = {v: Cell("") for v in vocabs}
        for rec in part.itertuples(index=False):
            text = f"{rec.variant} {fmt.speedup(rec.speedup)}".strip()
            tip = (
                f"{rec.variant}: {fmt.number(rec.median_us)} µs, {fmt.speedup(rec.speedup) or 'no baseline'}"
            )
            cells[rec.vocab] = Cell(text, _speedup_class(rec.speedup), tip)
        labels = [
            dim_text(k, v) if k in ("topk",) else fmt.number(v)
            for k, v in zip([*keys, "batch"], group, strict=True)
        ]
        rows.append([*labels, *(cells[v] for v in vocabs)])
    columns = [*keys, "batch", *(f"V={fmt.number(v)}" for v in vocabs)]
    caption = (
        "Fastest exact variant (accuracy = exact) per batch × vocab, with its speedup over full_softmax "
        "(green ≥ 1.05×, red ≤ 0.95×). Median over logits distributions."
    )
    return [*_fastest_findings(best), Table(columns, rows, caption, css="compact")]


def _fastest_findings(best: pd.DataFrame) -> list[Note]:
    """A line per device and dtype: the exact variant winning most cells, its speedups over full_softmax."""
    notes = []
    for (device, dtype), part in best.groupby(["device", "dtype"], sort=True):
        device = f"{device} · {dtype}"
        winner = part["variant"].value_counts()
        name, wins = winner.index[0], int(winner.iloc[0])
        speedups = part.loc[part["variant"] == name, "speedup"].dropna()
        spread = ""
        if len(speedups):
            low, mid, high = speedups.min(), speedups.median(), speedups.max()
            spread = f": median {fmt.speedup(mid)} over full_softmax ({fmt.speedup(low)} to {high:.2f}×)"
        notes.append(
            Note(f"{device}: {name} is the fastest exact variant in {wins} of {len(part)} cells{spread}.")
        )
    return notes


def _argmax_table(ctx: Context) -> list[Block]:
    shortcut = ctx.ok[ctx.ok["variant"] == INEXACT_SHORTCUT]
    if shortcut.empty:
        return [Note(f"{INEXACT_SHORTCUT}: no timed cases.")]
    keys = _summary_keys(ctx.ok)
    case = [*keys, "batch", "vocab"]
    exact = ctx.ok[ctx.ok["accuracy"] == "exact"].groupby(case, dropna=False)["median_us"].median()
    exact_best = ctx.ok[ctx.ok["accuracy"] == "exact"].groupby([*case, "variant"], dropna=False)["median_us"]
    exact_best = (
        exact_best.median().groupby(case, dropna=False).min().rename("exact_us") if len(exact) else None
    )
    cases = shortcut.groupby(case, dropna=False).agg(
        us=("median_us", "median"), speedup=("speedup_vs_full", "median"), relerr=("p_relerr_ref", "max")
    )
    if exact_best is not None:
        cases = cases.join(exact_best, how="left")
    else:
        cases["exact_us"] = np.nan
    cases["vs_exact"] = cases["exact_us"] / cases["us"]
    cases = cases.reset_index()
    rows = [_argmax_row(keys, group, part) for group, part in cases.groupby(keys, sort=True, dropna=False)]
    columns = [
        *keys,
        "cases",
        "saves vs full_softmax (median)",
        "best (at B×V)",
        "vs fastest exact (median)",
        "vs fastest exact (best)",
        "max p_relerr_ref",
    ]
    caption = (
        f"Where {INEXACT_SHORTCUT} (argmax of the logits, topk_p = 1.0) would save time: its speedup over "
        "full_softmax and over the fastest exact variant, and the probability error it carries (max relative "
        "error of topk_p against float64; 1.0 in place of p is an error of 1/p - 1)."
    )
    return [Table(columns, rows, caption, css="compact"), _argmax_verdict(cases)]


def _argmax_row(keys: list[str], group: tuple, part: pd.DataFrame) -> list[Cell | str]:
    best = part.loc[part["speedup"].idxmax()] if part["speedup"].notna().any() else None
    where = (
        f"{fmt.speedup(best['speedup'])} at {fmt.number(best['batch'])}×{fmt.number(best['vocab'])}"
        if best is not None
        else ""
    )
    med, vs_exact = part["speedup"].median(), part["vs_exact"].median()
    best_vs_exact = part["vs_exact"].max()
    relerr = part["relerr"].max()
    return [
        *(fmt.number(v) for v in group),
        str(len(part)),
        Cell(fmt.speedup(med), _speedup_class(med)),
        where,
        Cell(fmt.speedup(vs_exact), _speedup_class(vs_exact)),
        Cell(fmt.speedup(best_vs_exact), _speedup_class(best_vs_exact)),
        Cell(fmt.number(relerr), "differs" if relerr > 1e-3 else ""),
    ]


def _argmax_verdict(cases: pd.DataFrame) -> Note:
    vs = cases["vs_exact"].dropna()
    relerr = cases["relerr"].max()
    if vs.empty:
        return Note(f"{INEXACT_SHORTCUT}: no exact variant timed on the same cases to compare with.")
    share = (vs >= 1.05).mean()
    return Note(
        f"{INEXACT_SHORTCUT} beats the fastest exact variant by ≥ 5 % in {fmt.percent(share)} of its cases "
        f"(median {fmt.speedup(vs.median())}, best {fmt.speedup(vs.max())}); its topk_p is off by up to "
        f"{fmt.number(relerr)} relative to float64."
    )


def _speedup_class(value: float) -> str:
    if fmt.is_nan(value):
        return ""
    return "win" if value >= 1.05 else "loss" if value <= 0.95 else "even"


def plots_section(ctx: Context) -> Section:
    """Latency, speedup heatmaps, bandwidth and memory figures."""
    section = Section("plots", "Plots")
    if ctx.ok.empty:
        section.blocks.append(Note("No ok cases with timings: nothing to plot."))
        return section
    for name, build in (
        ("latency", latency_figures),
        ("speedup", speedup_figures),
        ("bandwidth", bandwidth_figures),
        ("memory", memory_figure),
    ):
        section.blocks += guard(name, lambda b=build: b(ctx))
    return section


def _counted(ctx: Context) -> pd.DataFrame:
    """ok rows that went through `run --counters` (measured or with the reason they were not)."""
    counters = ctx.ok["counters"].astype(object)
    return ctx.ok[counters.notna() & counters.astype(str).str.strip().ne("")]


def _traffic_finding(ctx: Context) -> list[Block]:
    counted = _counted(ctx)
    measured = counted[counted["bytes_measured"].notna()]
    if counted.empty:
        return []
    if measured.empty:
        return [Note(f"Measured HBM bytes: none ({counted['counters'].iloc[0]}).")]
    off = int(flagged(measured).sum())
    return [
        Note(
            f"Measured HBM bytes: {len(measured)} cases; {off} differ from the bytes model by more than "
            f"{100 * FLAG_TOLERANCE:.0f} % (see 'Measured HBM traffic')."
        )
    ]


def traffic_section(ctx: Context) -> Section | None:
    """Measured HBM bytes against the bytes model; None without `run --counters` rows."""
    counted = _counted(ctx)
    if counted.empty:
        return None
    section = Section(
        "traffic",
        "Measured HBM traffic",
        intro="Bytes one call moved by the hardware counters (ncu dram__bytes_read/write.sum, rocprofv3 "
        f"FETCH_SIZE/WRITE_SIZE) next to the variant's bytes model; more than {100 * FLAG_TOLERANCE:.0f} % "
        "apart is flagged (red). Median over logits distributions.",
    )
    section.blocks += guard("traffic table", lambda: _traffic_table(counted))
    return section


def _traffic_table(counted: pd.DataFrame) -> list[Block]:
    measured = counted[counted["bytes_measured"].notna()]
    blocks: list[Block] = []
    missing = counted[counted["bytes_measured"].isna()]
    if len(missing):
        reasons = missing["counters"].value_counts()
        text = "; ".join(f"{n} cases: {reason}" for reason, n in reasons.head(5).items())
        blocks.append(Note(f"Not measured: {text}."))
    if measured.empty:
        return blocks
    keys = ["device", "variant", "path", "dtype", "batch", "vocab", "topk", "l2"]
    values = ["bytes_model", "bytes_measured", "bytes_read_measured", "bytes_write_measured"]
    agg = measured.groupby(keys, dropna=False, sort=True)[values].median().reset_index()
    agg["ratio"] = agg["bytes_measured"] / agg["bytes_model"]
    agg["off"] = flagged(agg.rename(columns={"ratio": "bytes_measured_vs_model"}))
    agg = agg.sort_values("off", ascending=False, kind="stable")  # flagged cases first
    off = agg["off"]
    rows = []
    for rec, bad in zip(agg.to_dict("records"), off, strict=True):
        rows.append(
            [
                *(fmt.number(rec[k]) for k in keys),
                fmt.mebibytes(rec["bytes_model"]),
                fmt.mebibytes(rec["bytes_measured"]),
                fmt.mebibytes(rec["bytes_read_measured"]),
                fmt.mebibytes(rec["bytes_write_measured"]),
                Cell(fmt.number(rec["ratio"]), "loss" if bad else "", "model off by > 20 %" if bad else ""),
            ]
        )
    columns = [*keys, "model", "measured", "read", "written", "measured / model"]
    caption = f"{len(agg)} cases, {int(off.sum())} flagged (listed first)."
    return [*blocks, Table(columns, rows, caption, css="compact")]


def parity_section(ctx: Context) -> Section:
    """Verdict counts and worst errors per variant, dtype and logits; the failing checks' findings."""
    section = Section(
        "parity",
        "Parity against float64",
        intro="Per variant, dtype and logits distribution: verdict counts over cases (pass | inexact | "
        "fail | n/a), the worst probability error, the worst tie-aware index agreement with the float64 "
        "reference, and the index agreement with full_softmax.",
    )
    section.blocks += guard("parity table", lambda: _parity_table(ctx))
    section.blocks += guard("parity problems", lambda: _problems_table(ctx))
    return section


def _parity_table(ctx: Context) -> Block:
    data = ctx.frame[ctx.frame["verdict"].notna()]
    if data.empty:
        return Note("No parity verdicts in these results.")
    keys = [*(["device"] if ctx.several_devices else []), "variant", "dtype", "logits"]
    verdicts = [v for v in ("pass", "inexact", "fail", "n/a") if v in set(data["verdict"])]
    verdicts += sorted(set(data["verdict"]) - set(verdicts))
    counts = data.groupby([*keys, "verdict"]).size().unstack("verdict", fill_value=0)
    stats = data.groupby(keys).agg(
        p_relerr_ref=("p_relerr_ref", "max"),
        idx_tie_ref=("idx_tie_ref", "min"),
        idx_exact_base=("idx_exact_base", "min"),
        idx_tie_base=("idx_tie_base", "min"),
        top1_mismatch_ref=("top1_mismatch_ref", "max"),
    )
    table = counts.reindex(columns=verdicts, fill_value=0).join(stats).reset_index()
    order = {v: i for i, v in enumerate(ctx.variants)}
    table = table.sort_values(keys, key=lambda s: s.map(order) if s.name == "variant" else s)
    rows = []
    for rec in table.to_dict("records"):
        row: list[Cell | str] = [str(rec[k]) for k in keys]
        row += [Cell(str(rec[v]), "loss" if v == "fail" and rec[v] else "") for v in verdicts]
        row += [Cell(fmt.number(rec["p_relerr_ref"]), "differs" if rec["p_relerr_ref"] > 1e-3 else "")]
        row += [Cell(fmt.percent(rec["idx_tie_ref"]), "differs" if rec["idx_tie_ref"] < 1 else "")]
        row += [
            fmt.percent(rec["idx_exact_base"]),
            fmt.percent(rec["idx_tie_base"]),
            fmt.percent(rec["top1_mismatch_ref"]),
        ]
        rows.append(row)
    columns = [
        *keys,
        *verdicts,
        "max p_relerr_ref",
        "min idx_tie_ref",
        "min idx_exact_base",
        "min idx_tie_base",
        "max top1_mismatch_ref",
    ]
    return Table(columns, rows, "Agreement figures are minima over cases (worst case); errors are maxima.")


def _problems_table(ctx: Context) -> list[Block]:
    data = ctx.frame[(ctx.frame["verdict"] == "fail") & ctx.frame["problem"].notna()]
    if data.empty:
        return []
    grouped = data.groupby(["variant", "dtype", "logits", "problem"]).size().rename("cases").reset_index()
    grouped = grouped.sort_values("cases", ascending=False).head(MAX_REASON_GROUPS)
    return [frame_table(grouped, "What the failing parity checks found (most frequent first).")]


def skipped_section(ctx: Context) -> Section:
    """Cases that did not run, grouped by status and reason."""
    section = Section("skipped", "Skipped and failed cases")
    bad = ctx.frame[ctx.frame["status"] != "ok"]
    if bad.empty:
        section.blocks.append(Note("Every case ran."))
        return section
    grouped = (
        bad.groupby(["status", "reason"], sort=False)
        .agg(
            cases=("variant", "size"),
            variants=("variant", _distinct),
            devices=("device", _distinct),
            dtypes=("dtype", _distinct),
            paths=("path", _distinct),
            vocab=("vocab", _span),
            batch=("batch", _span),
        )
        .reset_index()
        .sort_values(["status", "cases"], ascending=[True, False])
    )
    grouped["reason"] = grouped["reason"].replace("", "(no reason given)")
    shown = grouped.head(MAX_REASON_GROUPS)
    caption = f"{len(bad)} cases in {len(grouped)} groups by status and reason."
    section.blocks.append(frame_table(shown, caption))
    if len(grouped) > len(shown):
        section.blocks.append(Note(f"{len(grouped) - len(shown)} smaller groups not listed."))
    return section


def _distinct(values: pd.Series) -> str:
    unique = ordered(values, (BASELINE, INEXACT_SHORTCUT, *FACET_ORDER))
    return ", ".join(map(str, unique[:6])) + (" …" if len(unique) > 6 else "")


def _span(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return ""
    low, high = values.min(), values.max()
    return fmt.number(low) if low == high else f"{fmt.number(low)}–{fmt.number(high)}"


def results_section(ctx: Context) -> Section:
    """Every row and non-empty column, collapsed."""
    frame = ctx.frame
    empty = [c for c in frame.columns if frame[c].isna().all()]
    shown = frame.drop(columns=empty)
    section = Section("results", "All results")
    blocks: list[Block] = [frame_table(shown, f"{len(shown)} rows.")]
    if empty:
        blocks.append(Note(f"Columns without any value, left out: {', '.join(empty)}."))
    section.blocks.append(
        Details(f"Full results table ({len(shown)} rows × {shown.shape[1]} columns)", blocks)
    )
    return section


def environment_section(ctx: Context, environment: dict[str, str] | None) -> Section:
    """The machine and run: `environment` over what the rows say."""
    values = _frame_environment(ctx.frame)
    values.update({str(k): str(v) for k, v in (environment or {}).items()})
    rows = [[key, value] for key, value in values.items() if value]
    table = Table(["", "value"], rows, "From the environment given to the report, else from the result rows.")
    return Section("environment", "Environment", [table])


def _frame_environment(frame: pd.DataFrame) -> dict[str, str]:
    values = {}
    for column in ENVIRONMENT_COLUMNS:
        unique = [
            v for v in dict.fromkeys(frame[column].tolist()) if not fmt.is_nan(v) and v not in ("-", "")
        ]
        values[column] = ", ".join(map(str, unique[:5])) + (
            f" (+{len(unique) - 5})" if len(unique) > 5 else ""
        )
    stamps = sorted(str(v) for v in frame["timestamp"].dropna())
    values["timestamp"] = (
        stamps[0] if len(set(stamps)) == 1 else f"{stamps[0]} … {stamps[-1]}" if stamps else ""
    )
    return values
