"""The kernel-level sections of the report: the summary (a view of `kernel_context.Summary`), plots,
measured traffic, parity, skipped cases, the full results table and the environment."""

from __future__ import annotations

import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report import kernel_context as kc
from perfsuite.report import kernel_figures as figures
from perfsuite.report import logits_shape_section
from perfsuite.report.blocks import Block, Cell, Group, Note, Section, Table, frame_table, guard
from perfsuite.report.kernel_context import TIE_TEXT, Context, Summary
from perfsuite.results.columns import FLAG_TOLERANCE, flagged

ENVIRONMENT_COLUMNS = ("device", "backend", "runtime", "driver", "torch", "triton", "git_sha", "scenario")
ENVIRONMENT_COLUMNS += ("run", "settings", "cpu_model", "cores", "cpu_quota", "threads", "governor")
SUMMARY_ENVIRONMENT = ("backend", "runtime", "driver", "torch", "triton", "git_sha")
MAX_REASON_GROUPS = 60
SHORT = {"vocab": "V", "batch": "B", "topk": "k"}


def kind_sections(frame: pd.DataFrame, samples: pd.DataFrame | None = None) -> list[Section]:
    """The kernel kind's part of the report (`core.kinds`): summary, plots, traffic, parity, logits' shape."""
    if not len(frame):
        return []
    summary = Summary.of(frame, samples)
    sections = [summary_section(summary), plots_section(summary), traffic_section(summary)]
    sections += [parity_section(summary), *logits_shape_section.sections(summary)]
    return [s for s in sections if s is not None]


def summary_section(s: Summary) -> Section:
    """The summary's view on the page (`Summary`), with where the figures come from and the top-1 mismatch."""
    r = s.roles
    intro = (
        f"Which variant is fastest per shape whatever its accuracy ({r.baseline} rounds its probabilities in "
        f"bf16/fp16, {r.shortcut} returns 1.0 in place of them), which exact variant is fastest and at what "
        f"speed against {r.baseline}, what the inexact {r.shortcut} shortcut would save and what it costs in "
        "probability error, and how often the baseline's bf16/fp16 rounding changes the top token. "
        f"Every speedup: {kc.PAIRING_TEXT}."
    )
    parts = {"measured on": _measured_on, "cost of exactness": _exactness_tables, "fastest variant": _fastest}
    parts |= {"speedup pairs": _pairs_table, "tie policy": _tie_table, f"{r.shortcut} trade": _shortcut_table}
    parts |= {"top-1 mismatch": figures.mismatch_figure, "measured bytes": _traffic_finding}
    blocks = [block for name, build in parts.items() for block in guard(name, lambda b=build: b(s))]
    return Section("summary", "Summary", blocks, intro=intro)


def _shown(s: Summary, table: pd.DataFrame) -> pd.DataFrame:
    """A summary table for the page: without the device (or run) column where there is one."""
    return table if s.several_devices else table.drop(columns=[s.unit])


def _measured_on(s: Summary) -> list[Block]:
    """Where each device's (or run's) figures come from: backend, runtime, driver, torch, triton, commit."""
    units = s.frame.groupby(s.unit, sort=True)
    rows = [[str(unit), *map(_frame_environment(part).get, SUMMARY_ENVIRONMENT)] for unit, part in units]
    return [Table(["measured on", *SUMMARY_ENVIRONMENT], rows, "", css="compact")] if rows else []


def _exactness_tables(s: Summary) -> list[Block]:
    """The cost of exactness per shape, k = 1 and k > 1 (none where the kernels did not run)."""
    text, tables = s.exactness_text(), zip(("k = 1", "k > 1"), s.exactness, strict=True)
    return [frame_table(_shown(s, t).rename(columns=SHORT), f"Cost of exactness, {k}. {text}")
            for k, t in tables if len(t)]  # fmt: skip


def _fastest(s: Summary) -> list[Block]:
    """Per batch x vocab: the fastest variant whatever its accuracy and, beside it, the fastest exact one."""
    if s.cases.empty:
        return [Note("Fastest variant: no timings.")]
    cases, keys = s.cases.reset_index(), [k for k in s.keys if k != "vocab"]
    vocabs = sorted(cases["vocab"].unique())
    by_cell = {(*(rec[k] for k in keys), rec["vocab"]): rec for rec in cases.to_dict("records")}
    rows = []
    for group in cases[keys].drop_duplicates().sort_values(keys).itertuples(index=False):
        cells: list[Cell | str] = [fmt.number(v) for v in group]
        for vocab in vocabs:
            rec = by_cell.get((*group, vocab), {})
            for column in ("fastest", "best_exact"):
                name = rec.get(column)
                if not isinstance(name, str):
                    cells.append(Cell(""))
                    continue
                cells.append(_winner_cell(s, s.per_variant.loc[(*(rec[k] for k in s.keys), name)], name))
        rows.append(cells)
    winners = ("fastest (any accuracy)", "fastest exact")
    columns = [*keys, *(f"V={fmt.number(v)}: {w}" for v in vocabs for w in winners)]
    caption = (
        "Per batch × vocab: the fastest variant whatever its accuracy (its accuracy in brackets when it is "
        "not exact) and the fastest exact variant (accuracy = exact), each with its speedup over "
        f"{s.roles.baseline} (green ≥ 1.05×, red ≤ 0.95×; the hover gives the times and the paired p20-p80 "
        f"band). Median over logits distributions. {kc.UNSTABLE_TEXT}."
    )
    if "best_exact" not in cases:
        caption += " No exact variant has timings."
    return [*map(Note, s.findings), Table(columns, rows, caption, css="compact")]


def _winner_cell(s: Summary, rec: pd.Series, name: str) -> Cell:
    """A variant, its accuracy unless exact, its speedup over the baseline and a mark when unstable."""
    accuracy = "" if rec["accuracy"] == "exact" else f" ({rec['accuracy']})"
    base = name == s.roles.baseline
    mark = f" {kc.UNSTABLE_MARK}" if rec["unstable"] else ""
    text = " ".join(t for t in (f"{name}{accuracy}", "" if base else fmt.speedup(rec["speedup"])) if t) + mark
    tip = f"{name}: {fmt.number(rec['median_us'])} µs"
    if not base:
        tip += f", {fmt.speedup(rec['speedup']) or 'no baseline'} ({figures.band_text(rec)})"
    if rec["unstable"]:
        tip += f"; unstable in {int(rec['unstable'])} of {int(rec['rows'])} logits distributions"
    return Cell(text, "" if base else _speedup_class(rec["speedup"]), tip)


def _pairs_table(s: Summary) -> list[Block]:
    """Which pairs the speedups compare: per path and variant the baseline on that path, and how many cases
    were paired in turn with it."""
    pairs = _shown(s, s.pairs)
    if pairs.empty:
        return []
    base = s.roles.baseline
    caption = (
        f"The pairs compared: {kc.PAIRING_TEXT}. cases: the variant's timed cases; paired: sampled in turn "
        f"with {base} on the same path; medians: compared by the ratio of separate medians; no baseline: no "
        f"{base} timed beside them (no speedup)."
    )
    table, column = frame_table(pairs, caption, "compact"), list(pairs.columns).index("no baseline")
    for row, n in zip(table.rows, pairs["no baseline"], strict=True):
        row[column] = Cell(fmt.number(n), "differs" if n else "")
    return [table]


def _tie_table(s: Summary) -> list[Block]:
    """A lowest-index selector against its twin in torch's order: the repair's cost per path, dtype and k."""
    ties = _shown(s, s.ties)
    if ties.empty:
        return []
    cost = [Cell(fmt.speedup(c), "loss" if c >= 1.05 else "even") for c in ties["cost"]]
    spans = [f"{fmt.speedup(lo)} to {fmt.speedup(hi)}" for lo, hi in ties[["low", "high"]].to_numpy()]
    shown = ties.drop(columns=["cost", "low", "high"])
    shown = shown.rename(columns=lambda c: SHORT.get(c, c.replace(" us", " µs")))
    table = frame_table(shown, TIE_TEXT, "compact")
    table.columns += ["tie repair", "range"]
    table.rows = [[*row, c, span] for row, c, span in zip(table.rows, cost, spans, strict=True)]
    return [table]


def _shortcut_table(s: Summary) -> list[Block]:
    """Where the shortcut would save time, against the baseline and the fastest exact variant, and the
    probability error it carries."""
    name, base = s.roles.shortcut, s.roles.baseline
    if s.shortcut.empty:
        return [Note(f"{name}: no timed cases.")]
    keys, rows = [k for k in s.keys if k not in ("vocab", "batch")], []
    for group, part in s.shortcut.groupby(keys, sort=True, dropna=False):
        best = part.loc[part["speedup"].idxmax()] if part["speedup"].notna().any() else None
        where = f"{fmt.speedup(best['speedup'])} at {fmt.number(best['batch'])}×{fmt.number(best['vocab'])}"
        vs, vs_best = part["vs_exact"].agg(["median", "max"])
        med, relerr = part["speedup"].median(), part["relerr"].max()
        rows.append([
            *map(fmt.number, group), str(len(part)), Cell(fmt.speedup(med), _speedup_class(med)),
            where if best is not None else "", Cell(fmt.speedup(vs), _speedup_class(vs)),
            Cell(fmt.speedup(vs_best), _speedup_class(vs_best)),
            Cell(fmt.number(relerr), "differs" if relerr > 1e-3 else "")
        ])  # fmt: skip
    columns = [*keys, "cases", f"saves vs {base} (median)", "best (at B×V)", "vs fastest exact (median)"]
    columns += ["vs fastest exact (best)", "max p_relerr_f64"]
    caption = (
        f"Where {name} (argmax of the logits, topk_p = 1.0) would save time: its speedup over {base} and "
        "over the fastest exact variant, and the probability error it carries (max relative error of topk_p "
        "against float64; 1.0 in place of p is an error of 1/p - 1)."
    )
    return [Table(columns, rows, caption, css="compact"), Note(s.shortcut_verdict())]


def _speedup_class(value: float) -> str:
    return "" if fmt.is_nan(value) else "win" if value >= 1.05 else "loss" if value <= 0.95 else "even"


def plots_section(s: Summary) -> Section:
    """Latency, the samples' distributions, speedup heatmaps, bandwidth and memory figures."""
    if s.ok.empty:
        return Section("plots", "Plots", [Note("No ok cases with timings: nothing to plot.")])
    builders = {"latency": figures.latency_figures, "distributions": figures.distribution_figures}
    builders |= {"speedup": figures.speedup_figures, "bandwidth": figures.bandwidth_figures}
    builders |= {"memory": figures.memory_figure}
    blocks = [block for name, build in builders.items() for block in guard(name, lambda b=build: b(s))]
    return Section("plots", "Plots", blocks)


def _counted(ctx: Context) -> pd.DataFrame:
    """ok rows that went through `run --counters` (measured or with the reason they were not)."""
    return ctx.ok[ctx.ok["counters"].fillna("").str.strip().ne("")]


def _traffic_finding(s: Summary) -> list[Block]:
    counted = _counted(s)
    measured = counted[counted["bytes_measured"].notna()]
    if counted.empty:
        return []
    if measured.empty:
        return [Note(f"Measured HBM bytes: none ({counted['counters'].iloc[0]}).")]
    off, tolerance = int(flagged(measured).sum()), 100 * FLAG_TOLERANCE
    text = f"{len(measured)} cases; {off} differ from the bytes model by more than {tolerance:.0f} %"
    return [Note(f"Measured HBM bytes: {text} (see 'Measured HBM traffic').")]


def traffic_section(ctx: Context) -> Section | None:
    """Measured HBM bytes against the bytes model; None without `run --counters` rows."""
    counted = _counted(ctx)
    if counted.empty:
        return None
    intro = (
        "Bytes one call moved by the hardware counters (ncu dram__bytes_read/write.sum, rocprofv3 "
        "FETCH_SIZE/WRITE_SIZE) next to the variant's cache-aware bytes model (model: what stays in the "
        "last-level cache between kernels is not counted) and the model with every pass from HBM (uncached "
        f"model); measured and model more than {100 * FLAG_TOLERANCE:.0f} % apart is flagged (red). Median "
        "over logits distributions."
    )
    blocks = guard("traffic table", lambda: _traffic_table(counted, ctx.unit))
    return Section("traffic", "Measured HBM traffic", blocks, intro=intro)


def _traffic_table(counted: pd.DataFrame, unit: str) -> list[Block]:
    measured, missing = counted[counted["bytes_measured"].notna()], counted[counted["bytes_measured"].isna()]
    reasons = "; ".join(f"{n} cases: {why}" for why, n in missing["counters"].value_counts().head(5).items())
    blocks: list[Block] = [Note(f"Not measured: {reasons}.")] if len(missing) else []
    if measured.empty:
        return blocks
    keys = [unit, "variant", "path", "dtype", "batch", "vocab", "topk", "l2"]
    # results from before the model was cache-aware: their bytes_model was the uncached figure
    uncached = measured["bytes_model_uncached"].fillna(measured["bytes_model"])
    measured = measured.assign(bytes_model_uncached=uncached)
    values = ["bytes_model", "bytes_model_uncached", "bytes_measured", "bytes_read_measured"]
    values.append("bytes_write_measured")
    agg = measured.groupby(keys, dropna=False, sort=True)[values].median().reset_index()
    agg["bytes_measured_vs_model"] = agg["bytes_measured"] / agg["bytes_model"]
    agg["off"] = flagged(agg)
    agg = agg.sort_values("off", ascending=False, kind="stable")  # flagged cases first
    flag = ("loss", "model off by > 20 %")
    rows = [
        [*(fmt.number(rec[k]) for k in keys), *(fmt.mebibytes(rec[v]) for v in values),
         Cell(fmt.number(rec["bytes_measured_vs_model"]), *(flag if rec["off"] else ())),
         fmt.number(rec["bytes_measured"] / rec["bytes_model_uncached"])]
        for rec in agg.to_dict("records")
    ]  # fmt: skip
    columns = [*keys, "model", "uncached model", "measured", "read", "written", "measured / model"]
    caption = f"{len(agg)} cases, {int(agg['off'].sum())} flagged (listed first)."
    return [*blocks, Table([*columns, "measured / uncached"], rows, caption, css="compact")]


def parity_section(ctx: Context) -> Section:
    """Verdict counts and worst errors per variant, dtype and logits; the failing checks' findings."""
    intro = (
        "Per variant, dtype and logits distribution: verdict counts over cases (pass | inexact | fail | "
        "n/a), the worst probability error, the worst tie-aware index agreement with the float64 reference, "
        f"and the index agreement with {ctx.roles.baseline}."
    )
    blocks = guard("parity table", lambda: _parity_table(ctx)) + guard("problems", lambda: _problems(ctx))
    return Section("parity", "Parity against float64", blocks, intro=intro)


PARITY = {"p_relerr_f64": "max", "idx_tie_f64": "min", "idx_exact_base": "min", "idx_tie_base": "min"}
PARITY |= {"top1_mismatch_f64": "max"}


def _parity_table(ctx: Context) -> Block:
    data = ctx.frame[ctx.frame["verdict"].notna()]
    if data.empty:
        return Note("No parity verdicts in these results.")
    keys = [*([ctx.unit] if ctx.several_devices else []), "variant", "dtype", "logits"]
    verdicts = kc.ordered(data["verdict"], ("pass", "inexact", "fail", "n/a"))
    counts = data.groupby([*keys, "verdict"]).size().unstack("verdict", fill_value=0)
    table = counts.reindex(columns=verdicts, fill_value=0).join(data.groupby(keys).agg(PARITY)).reset_index()
    order = {v: i for i, v in enumerate(ctx.variants)}
    table = table.sort_values(keys, key=lambda s: s.map(order) if s.name == "variant" else s)
    rows = [
        [*(str(rec[k]) for k in keys),
         *(Cell(str(rec[v]), "loss" if v == "fail" and rec[v] else "") for v in verdicts),
         Cell(fmt.number(rec["p_relerr_f64"]), "differs" if rec["p_relerr_f64"] > 1e-3 else ""),
         Cell(fmt.percent(rec["idx_tie_f64"]), "differs" if rec["idx_tie_f64"] < 1 else ""),
         *(fmt.percent(rec[c]) for c in ("idx_exact_base", "idx_tie_base", "top1_mismatch_f64"))]
        for rec in table.to_dict("records")
    ]  # fmt: skip
    columns = [*keys, *verdicts, *(f"{how} {column}" for column, how in PARITY.items())]
    return Table(columns, rows, "Agreement figures are minima over cases (worst case); errors are maxima.")


def _problems(ctx: Context) -> list[Block]:
    data = ctx.frame[(ctx.frame["verdict"] == "fail") & ctx.frame["problem"].notna()]
    if data.empty:
        return []
    grouped = data.groupby(["variant", "dtype", "logits", "problem"]).size().rename("cases").reset_index()
    grouped = grouped.sort_values("cases", ascending=False).head(MAX_REASON_GROUPS)
    return [frame_table(grouped, "What the failing parity checks found (most frequent first).")]


def skipped_section(ctx: Context) -> Section:
    """Cases that did not run, grouped by status and reason."""
    section, bad = Section("skipped", "Skipped and failed cases"), ctx.frame[ctx.frame["status"] != "ok"]
    if bad.empty:
        section.blocks.append(Note("Every case ran."))
        return section
    first = (ctx.roles.baseline, ctx.roles.shortcut, *kc.FACET_ORDER)

    def distinct(values: pd.Series) -> str:
        unique = kc.ordered(values, first)
        return ", ".join(map(str, unique[:6])) + (" …" if len(unique) > 6 else "")

    columns = {"variants": "variant", "devices": "device", **({"runs": "run"} if ctx.runs_apart else {})}
    columns |= {"dtypes": "dtype", "paths": "path"}
    grouped = (
        bad.groupby(["status", "reason"], sort=False)
        .agg(cases=("variant", "size"), **{k: (c, distinct) for k, c in columns.items()},
             vocab=("vocab", _span), batch=("batch", _span))
        .reset_index()
        .sort_values(["status", "cases"], ascending=[True, False])
    )  # fmt: skip
    grouped["reason"] = grouped["reason"].replace("", "(no reason given)")
    shown = grouped.head(MAX_REASON_GROUPS)
    caption = f"{len(bad)} cases in {len(grouped)} groups by status and reason."
    section.blocks.append(frame_table(shown, caption))
    if len(grouped) > len(shown):
        section.blocks.append(Note(f"{len(grouped) - len(shown)} smaller groups not listed."))
    return section


def _span(values: pd.Series) -> str:
    low, high = (fmt.number(v) for v in (values.min(), values.max()))
    return low if low == high else f"{low}–{high}"


def results_section(ctx: Context) -> Section:
    """Every row and non-empty column, collapsed; unstable rows marked in their `unstable` column."""
    frame = ctx.frame.drop(columns=[c for c in kc.HELPERS if c in ctx.frame])
    empty = [c for c in frame.columns if frame[c].isna().all()]
    shown = frame.drop(columns=empty)
    table = frame_table(shown, f"{len(shown)} rows. {kc.UNSTABLE_TEXT}.")
    if "unstable" in shown:
        column = list(shown.columns).index("unstable")
        tip = f"{kc.SPREAD_ABOVE}: not a figure to rank or compare on"
        for row, flag in zip(table.rows, ctx.frame[kc.UNSTABLE], strict=True):
            if flag:
                row[column] = Cell(f"True {kc.UNSTABLE_MARK}", "differs", tip)
    blocks = [table, *([Note(f"Columns without any value, left out: {', '.join(empty)}.")] if empty else [])]
    unstable = int(ctx.frame[kc.UNSTABLE].sum())
    counted = f"{len(shown)} rows × {shown.shape[1]} columns{f', {unstable} unstable' if unstable else ''}"
    summary = f"Full results table ({counted})"
    return Section("results", "All results", [Group(summary, blocks, "details")])


def environment_section(ctx: Context, environment: dict[str, str] | None) -> Section:
    """The machine and run: `environment` over what the rows say."""
    values = _frame_environment(ctx.frame) | {str(k): str(v) for k, v in (environment or {}).items()}
    rows = [[key, value] for key, value in values.items() if value]
    table = Table(["", "value"], rows, "From the environment given to the report, else from the result rows.")
    return Section("environment", "Environment", [table])


def _frame_environment(frame: pd.DataFrame) -> dict[str, str]:
    values = {}
    for column in ENVIRONMENT_COLUMNS:
        unique = [v for v in dict.fromkeys(frame[column]) if not fmt.is_nan(v) and v not in ("-", "")]
        more = f" (+{len(unique) - 5})" if len(unique) > 5 else ""
        values[column] = ", ".join(map(str, unique[:5])) + more
    stamps = sorted(str(v) for v in frame["timestamp"].dropna())
    values["timestamp"] = " … ".join(dict.fromkeys([stamps[0], stamps[-1]])) if stamps else ""
    return values
