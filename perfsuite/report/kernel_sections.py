"""The kernel-level sections of the report: summary, plots, measured traffic, parity, skipped cases, the
full results table and the environment, each built from a prepared `Context`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report import logits_shape_section
from perfsuite.report.blocks import (
    Block,
    Cell,
    Details,
    Note,
    Section,
    Table,
    frame_table,
    guard,
    guarded_section,
)
from perfsuite.report.distributions import distribution_figures
from perfsuite.report.kernel_context import (
    BASELINE,
    ENGINE_ORDER_IDENTITY,
    EXACTNESS_TEXT,
    FACET_ORDER,
    HELPERS,
    INEXACT_SHORTCUT,
    LOWEST_INDEX_IDENTITY,
    PAIRING_TEXT,
    UNSTABLE,
    UNSTABLE_MARK,
    UNSTABLE_TEXT,
    Context,
    cost_of_exactness,
    dim_text,
    ordered,
    speedup_pairs,
    tie_policy,
    varying_keys,
)
from perfsuite.report.kernel_figures import (
    band_text,
    bandwidth_figures,
    latency_figures,
    memory_figure,
    mismatch_figure,
    speedup_cells,
    speedup_figures,
)
from perfsuite.results.columns import FLAG_TOLERANCE, flagged

ENVIRONMENT_COLUMNS = (
    "device",
    "backend",
    "runtime",
    "driver",
    "torch",
    "triton",
    "git_sha",
    "scenario",
    "run",
    "settings",
    "cpu_model",
    "cores",
    "cpu_quota",
    "threads",
    "governor",
)
SUMMARY_ENVIRONMENT = ("backend", "runtime", "driver", "torch", "triton", "git_sha")
MAX_REASON_GROUPS = 60


def kind_sections(frame: pd.DataFrame, samples: pd.DataFrame | None = None) -> list[Section]:
    """The kernel case kind's part of the report (`core.kinds`): summary, plots, traffic, parity and the
    logits' shape; none without rows."""
    if not len(frame):
        return []
    ctx = Context.of(frame, samples)
    sections = [summary_section(ctx), plots_section(ctx), traffic_section(ctx), parity_section(ctx)]
    shape = guarded_section(
        logits_shape_section.SECTION_ID,
        logits_shape_section.TITLE,
        frame,
        lambda _: logits_shape_section.section(ctx),
    )
    return [s for s in [*sections, *shape] if s is not None]


def summary_section(ctx: Context) -> Section:
    """Where the figures come from, the fastest variant whatever its accuracy and the fastest exact one,
    the argmax_ones trade, the top-1 mismatch."""
    section = Section("summary", "Summary", intro=_summary_intro(ctx))
    section.blocks += guard("measured on", lambda: _measured_on(ctx))
    section.blocks += guard("cost of exactness", lambda: _exactness_tables(ctx))
    section.blocks += guard("fastest variant", lambda: _fastest_table(ctx))
    section.blocks += guard("speedup pairs", lambda: _pairs_table(ctx))
    section.blocks += guard("tie policy", lambda: _tie_policy_table(ctx))
    section.blocks += guard("argmax_ones trade", lambda: _argmax_table(ctx))
    section.blocks += guard("top-1 mismatch", lambda: mismatch_figure(ctx))
    section.blocks += guard("measured bytes", lambda: _traffic_finding(ctx))
    return section


def _measured_on(ctx: Context) -> list[Block]:
    """Where each device's (or run's) figures come from: backend, runtime, driver, torch, triton, commit."""
    rows = []
    for device, part in ctx.frame.groupby(ctx.unit, sort=True):
        values = _frame_environment(part)
        rows.append([str(device), *(values.get(c, "") for c in SUMMARY_ENVIRONMENT)])
    if not rows:
        return []
    return [Table(["measured on", *SUMMARY_ENVIRONMENT], rows, "", css="compact")]


def _summary_intro(ctx: Context) -> str:
    return (
        "Which variant is fastest per shape whatever its accuracy (full_softmax rounds its probabilities in "
        "bf16/fp16, argmax_ones returns 1.0 in place of them), which exact variant is fastest and at what "
        "speed against full_softmax, what the inexact argmax_ones shortcut would save and what it costs in "
        "probability error, and how often the baseline's bf16/fp16 rounding changes the top token. "
        f"Every speedup: {PAIRING_TEXT}."
    )


def _pairs_table(ctx: Context) -> list[Block]:
    """Which pairs the speedups compare: per path and variant, the baseline on that path and how many
    cases were paired in turn with it."""
    unit = [ctx.unit] if ctx.several_devices else []
    pairs = speedup_pairs(ctx.ok, unit)
    if pairs.empty:
        return []
    rows = [
        [
            *(str(rec[k]) for k in unit),
            str(rec["path"]),
            str(rec["variant"]),
            str(rec["against"]),
            fmt.number(rec["cases"]),
            fmt.number(rec["paired"]),
            fmt.number(rec["medians"]),
            Cell(fmt.number(rec["no baseline"]), "differs" if rec["no baseline"] else ""),
        ]
        for rec in pairs.to_dict("records")
    ]
    caption = (
        f"The pairs compared: {PAIRING_TEXT}. cases: the variant's timed cases; paired: sampled in turn with "
        f"{BASELINE} on the same path; medians: compared by the ratio of separate medians; no baseline: no "
        f"{BASELINE} timed beside them (no speedup)."
    )
    return [Table(list(pairs.columns), rows, caption, css="compact")]


def _exactness_tables(ctx: Context) -> list[Block]:
    """The cost of exactness per shape: k = 1 against the Triton argmax and full_softmax, k > 1 against
    full_softmax (none where the Triton kernels did not run)."""
    unit = [ctx.unit] if ctx.several_devices else []
    one, several = cost_of_exactness(ctx.ok, unit)
    blocks: list[Block] = []
    for title, table in (("k = 1", one), ("k > 1", several)):
        if len(table):
            caption = f"Cost of exactness, {title}. {EXACTNESS_TEXT}"
            blocks.append(
                frame_table(table.rename(columns={"vocab": "V", "batch": "B", "topk": "k"}), caption)
            )
    return blocks


def _tie_policy_table(ctx: Context) -> list[Block]:
    """identity (lowest index first on ties) against identity_engine_order (torch's order): the repair's
    cost per path, dtype and k."""
    unit = [ctx.unit] if ctx.several_devices else []
    table = tie_policy(ctx.ok, unit)
    if table.empty:
        return []
    rows = []
    for rec in table.to_dict("records"):
        cost = rec["cost"]
        rows.append(
            [
                *(str(rec[k]) for k in unit),
                str(rec["path"]),
                str(rec["dtype"]),
                dim_text("topk", rec["topk"]),
                fmt.number(rec["cases"]),
                fmt.number(rec["identity us"]),
                fmt.number(rec["engine order us"]),
                Cell(fmt.speedup(cost), "" if fmt.is_nan(cost) else "loss" if cost >= 1.05 else "even"),
                f"{fmt.speedup(rec['low'])} to {fmt.speedup(rec['high'])}",
            ]
        )
    columns = [*unit, "path", "dtype", "k", "cases", "identity µs", "engine order µs", "tie repair", "range"]
    caption = (
        f"What the tie policy costs: {LOWEST_INDEX_IDENTITY} (ties to the lowest index: a compare pass and a "
        f"cumulative count over [B, V] for k > 1) against {ENGINE_ORDER_IDENTITY} (the same exact "
        "probabilities in torch's top-k order, no repair), on the same cases. tie repair: identity's time "
        "over the engine-order identity's, per case the ratio of their medians (sampled in turn, in the same "
        "rounds), median over cases (range: cheapest to dearest case); 1.30× means the repair adds 30 %. "
        "At k = 1 both run torch.max and the same ops: their ratio there is the measurement's own noise. "
        "Times: medians over cases."
    )
    return [Table(columns, rows, caption, css="compact")]


def _summary_keys(ctx: Context) -> list[str]:
    ok = ctx.ok
    return [ctx.unit, *varying_keys(ok, ["backend"]), "dtype", "path", *varying_keys(ok, ["topk", "l2"])]


def _per_variant(ctx: Context, keys: list[str]) -> pd.DataFrame:
    """One row per (case, variant): the median over logits distributions of its time and speedup, the
    medians of the paired band, how the speedup was measured and how many rows behind it are unstable."""
    data = ctx.ok[ctx.ok["batch"].notna() & ctx.ok["vocab"].notna()]
    cells = speedup_cells(data, [*keys, "batch", "vocab", "variant"])
    extra = data.groupby([*keys, "batch", "vocab", "variant"], dropna=False, sort=True).agg(
        median_us=("median_us", "median"), accuracy=("accuracy", "first")
    )
    return cells.join(extra).reset_index()


def _fastest_table(ctx: Context) -> list[Block]:
    """Per batch x vocab: the fastest variant whatever its accuracy and, beside it, the fastest exact one."""
    keys = _summary_keys(ctx)
    per_case = _per_variant(ctx, keys)
    if per_case.empty:
        return [Note("Fastest variant: no timings.")]
    case = [*keys, "batch", "vocab"]
    fastest = per_case.loc[per_case.groupby(case, dropna=False)["median_us"].idxmin()]
    exact = per_case[per_case["accuracy"] == "exact"]
    best_exact = exact.loc[exact.groupby(case, dropna=False)["median_us"].idxmin()] if len(exact) else exact
    vocabs = sorted(per_case["vocab"].dropna().unique())
    winners = {"fastest": _by_cell(fastest, case), "exact": _by_cell(best_exact, case)}
    rows = []
    for group, _ in per_case.groupby([*keys, "batch"], sort=True, dropna=False):
        cells: list[Cell | str] = [
            dim_text(k, v) if k in ("topk",) else fmt.number(v)
            for k, v in zip([*keys, "batch"], group, strict=True)
        ]
        for vocab in vocabs:
            for which in ("fastest", "exact"):
                rec = winners[which].get((*group, vocab))
                cells.append(_winner_cell(rec) if rec is not None else Cell(""))
        rows.append(cells)
    columns = [*keys, "batch"]
    for vocab in vocabs:
        columns += [f"V={fmt.number(vocab)}: fastest (any accuracy)", f"V={fmt.number(vocab)}: fastest exact"]
    caption = (
        "Per batch × vocab: the fastest variant whatever its accuracy (its accuracy in brackets when it is "
        "not exact) and the fastest exact variant (accuracy = exact), each with its speedup over "
        "full_softmax (green ≥ 1.05×, red ≤ 0.95×; the hover gives the times and the paired p20-p80 band). "
        f"Median over logits distributions. {UNSTABLE_TEXT}."
    )
    if exact.empty:
        caption += " No exact variant has timings."
    return [*_fastest_findings(fastest, best_exact, keys), Table(columns, rows, caption, css="compact")]


def _by_cell(frame: pd.DataFrame, case: list[str]) -> dict[tuple, pd.Series]:
    return {tuple(rec[case]): rec for _, rec in frame.iterrows()}


def _winner_cell(rec: pd.Series) -> Cell:
    """A variant, its accuracy unless exact, its speedup over full_softmax and a mark when unstable."""
    name = str(rec["variant"])
    accuracy = "" if rec["accuracy"] == "exact" else f" ({rec['accuracy']})"
    speed = "" if name == BASELINE else fmt.speedup(rec["speedup"])
    mark = f" {UNSTABLE_MARK}" if rec["unstable"] else ""
    text = " ".join(t for t in (f"{name}{accuracy}", speed) if t) + mark
    tip = f"{name}: {fmt.number(rec['median_us'])} µs"
    if name != BASELINE:
        tip += f", {fmt.speedup(rec['speedup']) or 'no baseline'} ({band_text(rec)})"
    if rec["unstable"]:
        tip += f"; unstable in {int(rec['unstable'])} of {int(rec['rows'])} logits distributions"
    return Cell(text, _speedup_class(rec["speedup"]) if name != BASELINE else "", tip)


def _fastest_findings(fastest: pd.DataFrame, exact: pd.DataFrame, keys: list[str]) -> list[Note]:
    """A line per device (or run) and dtype: which variants are fastest (whatever their accuracy) in how
    many cells, then the exact variant winning most cells among the exact ones and its speedups."""
    notes = []
    unit = keys[0]
    for (device, dtype), part in fastest.groupby([unit, "dtype"], sort=True):
        counts = part.groupby("variant")["accuracy"].agg(["size", "first"])
        counts = counts.sort_values("size", ascending=False, kind="stable")
        wins = [f"{name} ({acc}) in {n} of {len(part)} cells" for name, (n, acc) in counts.iterrows()]
        text = f"{device} · {dtype}: fastest variant: {'; '.join(wins)}."
        mine = exact[(exact[unit] == device) & (exact["dtype"] == dtype)] if len(exact) else exact
        if mine.empty:
            text += " No exact variant was timed here."
        else:
            text += " " + _exact_finding(mine, part)
        notes.append(Note(text))
    return notes


def _exact_finding(exact: pd.DataFrame, fastest: pd.DataFrame) -> str:
    """The exact variant winning most cells among the exact ones, its speedups, and how it compares with
    the overall winner: never worded as if it were the fastest variant when it is not."""
    winner = exact["variant"].value_counts()
    name, wins = winner.index[0], int(winner.iloc[0])
    speedups = exact.loc[exact["variant"] == name, "speedup"].dropna()
    text = f"Fastest exact variant: {name} in {wins} of {len(exact)} cells"
    if len(speedups):
        low, mid, high = speedups.min(), speedups.median(), speedups.max()
        verdict = (
            "faster than full_softmax"
            if mid >= 1.05
            else "slower than full_softmax"
            if mid <= 0.95
            else "as fast as full_softmax, within 5 %"
        )
        spread = f"{fmt.speedup(low)} to {high:.2f}×"
        text += f", median {fmt.speedup(mid)} against full_softmax ({spread}): {verdict}"
    overall = int((fastest["variant"] == name).sum())
    if overall == len(fastest):
        return text + "; it is also the fastest variant of any accuracy in every cell."
    return text + f"; it is the fastest variant of any accuracy in {overall} of {len(fastest)} cells."


def _argmax_table(ctx: Context) -> list[Block]:
    shortcut = ctx.ok[ctx.ok["variant"] == INEXACT_SHORTCUT]
    if shortcut.empty:
        return [Note(f"{INEXACT_SHORTCUT}: no timed cases.")]
    keys = _summary_keys(ctx)
    case = [*keys, "batch", "vocab"]
    exact = ctx.ok[ctx.ok["accuracy"] == "exact"].groupby(case, dropna=False)["median_us"].median()
    exact_best = ctx.ok[ctx.ok["accuracy"] == "exact"].groupby([*case, "variant"], dropna=False)["median_us"]
    exact_best = (
        exact_best.median().groupby(case, dropna=False).min().rename("exact_us") if len(exact) else None
    )
    cases = shortcut.groupby(case, dropna=False).agg(
        us=("median_us", "median"), speedup=("speedup_vs_full", "median"), relerr=("p_relerr_f64", "max")
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
        "max p_relerr_f64",
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
    """Latency, the samples' distributions, speedup heatmaps, bandwidth and memory figures."""
    section = Section("plots", "Plots")
    if ctx.ok.empty:
        section.blocks.append(Note("No ok cases with timings: nothing to plot."))
        return section
    for name, build in (
        ("latency", latency_figures),
        ("distributions", distribution_figures),
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
        "FETCH_SIZE/WRITE_SIZE) next to the variant's cache-aware bytes model (model: what stays in the "
        "last-level cache between kernels is not counted) and the model with every pass from HBM "
        f"(uncached model); measured and model more than {100 * FLAG_TOLERANCE:.0f} % apart is flagged "
        "(red). Median over logits distributions.",
    )
    section.blocks += guard("traffic table", lambda: _traffic_table(counted, ctx.unit))
    return section


def _traffic_table(counted: pd.DataFrame, unit: str) -> list[Block]:
    measured = counted[counted["bytes_measured"].notna()]
    blocks: list[Block] = []
    missing = counted[counted["bytes_measured"].isna()]
    if len(missing):
        reasons = missing["counters"].value_counts()
        text = "; ".join(f"{n} cases: {reason}" for reason, n in reasons.head(5).items())
        blocks.append(Note(f"Not measured: {text}."))
    if measured.empty:
        return blocks
    keys = [unit, "variant", "path", "dtype", "batch", "vocab", "topk", "l2"]
    uncached = measured.get("bytes_model_uncached", measured["bytes_model"])
    # results from before the model was cache-aware: their bytes_model was the uncached figure
    measured = measured.assign(bytes_model_uncached=uncached.fillna(measured["bytes_model"]))
    values = ["bytes_model", "bytes_model_uncached", "bytes_measured", "bytes_read_measured"]
    values.append("bytes_write_measured")
    agg = measured.groupby(keys, dropna=False, sort=True)[values].median().reset_index()
    agg["ratio"] = agg["bytes_measured"] / agg["bytes_model"]
    agg["ratio_uncached"] = agg["bytes_measured"] / agg["bytes_model_uncached"]
    agg["off"] = flagged(agg.rename(columns={"ratio": "bytes_measured_vs_model"}))
    agg = agg.sort_values("off", ascending=False, kind="stable")  # flagged cases first
    off = agg["off"]
    rows = []
    for rec, bad in zip(agg.to_dict("records"), off, strict=True):
        rows.append(
            [
                *(fmt.number(rec[k]) for k in keys),
                fmt.mebibytes(rec["bytes_model"]),
                fmt.mebibytes(rec["bytes_model_uncached"]),
                fmt.mebibytes(rec["bytes_measured"]),
                fmt.mebibytes(rec["bytes_read_measured"]),
                fmt.mebibytes(rec["bytes_write_measured"]),
                Cell(fmt.number(rec["ratio"]), "loss" if bad else "", "model off by > 20 %" if bad else ""),
                fmt.number(rec["ratio_uncached"]),
            ]
        )
    columns = [*keys, "model", "uncached model", "measured", "read", "written", "measured / model"]
    columns.append("measured / uncached")
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
    keys = [*([ctx.unit] if ctx.several_devices else []), "variant", "dtype", "logits"]
    verdicts = [v for v in ("pass", "inexact", "fail", "n/a") if v in set(data["verdict"])]
    verdicts += sorted(set(data["verdict"]) - set(verdicts))
    counts = data.groupby([*keys, "verdict"]).size().unstack("verdict", fill_value=0)
    stats = data.groupby(keys).agg(
        p_relerr_f64=("p_relerr_f64", "max"),
        idx_tie_f64=("idx_tie_f64", "min"),
        idx_exact_base=("idx_exact_base", "min"),
        idx_tie_base=("idx_tie_base", "min"),
        top1_mismatch_f64=("top1_mismatch_f64", "max"),
    )
    table = counts.reindex(columns=verdicts, fill_value=0).join(stats).reset_index()
    order = {v: i for i, v in enumerate(ctx.variants)}
    table = table.sort_values(keys, key=lambda s: s.map(order) if s.name == "variant" else s)
    rows = []
    for rec in table.to_dict("records"):
        row: list[Cell | str] = [str(rec[k]) for k in keys]
        row += [Cell(str(rec[v]), "loss" if v == "fail" and rec[v] else "") for v in verdicts]
        row += [Cell(fmt.number(rec["p_relerr_f64"]), "differs" if rec["p_relerr_f64"] > 1e-3 else "")]
        row += [Cell(fmt.percent(rec["idx_tie_f64"]), "differs" if rec["idx_tie_f64"] < 1 else "")]
        row += [
            fmt.percent(rec["idx_exact_base"]),
            fmt.percent(rec["idx_tie_base"]),
            fmt.percent(rec["top1_mismatch_f64"]),
        ]
        rows.append(row)
    columns = [
        *keys,
        *verdicts,
        "max p_relerr_f64",
        "min idx_tie_f64",
        "min idx_exact_base",
        "min idx_tie_base",
        "max top1_mismatch_f64",
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
            **({"runs": ("run", _distinct)} if ctx.runs_apart else {}),
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
    """Every row and non-empty column, collapsed; unstable rows marked in their `unstable` column."""
    frame = ctx.frame.drop(columns=[c for c in HELPERS if c in ctx.frame])
    empty = [c for c in frame.columns if frame[c].isna().all()]
    shown = frame.drop(columns=empty)
    section = Section("results", "All results")
    table = frame_table(shown, f"{len(shown)} rows. {UNSTABLE_TEXT}.")
    if "unstable" in shown:
        column = list(shown.columns).index("unstable")
        tip = "p20-p80 spread above 25 % of the median: not a figure to rank or compare on"
        for row, flag in zip(table.rows, ctx.frame[UNSTABLE], strict=True):
            if flag:
                row[column] = Cell(f"True {UNSTABLE_MARK}", "differs", tip)
    blocks: list[Block] = [table]
    if empty:
        blocks.append(Note(f"Columns without any value, left out: {', '.join(empty)}."))
    unstable = int(ctx.frame[UNSTABLE].sum())
    summary = f"Full results table ({len(shown)} rows × {shown.shape[1]} columns"
    summary += f", {unstable} unstable)" if unstable else ")"
    section.blocks.append(Details(summary, blocks))
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
