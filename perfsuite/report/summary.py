"""A short text summary of a run: each variant's median per case, the fastest variant whatever its accuracy
and the fastest exact one, ratios to the baseline, and targets.

    perfsuite summary reports/gpu-check/results.csv --out reports/gpu-check/summary.md

One markdown table row per (device, path, dtype, vocab, batch, topk; run, l2, tp where they vary): the
median of every variant in the same run (marked ⚠ where unstable), the fastest variant of any accuracy
(full_softmax rounds in bf16/fp16, argmax_ones is inexact), the fastest exact variant, `full_softmax / best
exact` (its speedup: the median of paired per-round ratios where the variants were sampled in turn, else the
ratio of medians), `best exact / argmax_ones` (the price of exactness) and the best exact variant's
bandwidth as a percent of the measured copy bandwidth; then the Triton targets of issue 3 evaluated over the
run; then which pairs the speedups compare (per path and variant: the baseline on the same path, cases
paired in turn) and what the lowest-index tie repair costs (`identity` against `identity_engine_order`);
then, where `perfsuite tune` wrote `tuned.json` beside the results (or `--tuned` names one), each tuned
shape's best plan against the heuristic. Warnings (a shared machine, unstable cases) come first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from perfsuite.measure.timing import UNSTABLE_SPREAD
from perfsuite.report.kernel_context import (
    ARGMAX_TRITON,
    EXACT_TRITON,
    EXACTNESS_TEXT,
    PAIRING_TEXT,
    UNSTABLE_MARK,
    cost_of_exactness,
    run_labels,
    speedup_pairs,
    tie_policy,
)
from perfsuite.results.columns import BASELINE, add_speedups
from perfsuite.results.columns import complete as coerce

CASE = ["device", "path", "dtype", "vocab", "batch", "topk"]
"""The case keys every summary has; `case_keys` adds run and l2 where they vary."""
TRITON_PICK = EXACT_TRITON


def case_keys(frame: pd.DataFrame) -> list[str]:
    """CASE, with `run` after the device where a device has rows of several runs (never pooled), `l2`
    where both cache states were measured and `tp` where tensor-parallel rows are among them."""
    keys = list(CASE)
    if _several_runs(frame):
        keys.insert(1, "run")
    for column in ("l2", "tp"):
        if column in frame and frame[column].dropna().astype(str).nunique() > 1:
            keys.append(column)
    return keys


def _several_runs(frame: pd.DataFrame) -> bool:
    runs = run_labels(frame)
    return bool(len(frame)) and int(runs.groupby(frame["device"].astype(str)).nunique().max()) > 1


def _with_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with every run labelled (`run`, else the file they came from) where runs are kept apart."""
    return frame.assign(run=run_labels(frame)) if _several_runs(frame) else frame


def _unit(frame: pd.DataFrame) -> list[str]:
    """The keys that keep devices (and runs of one device) apart."""
    return ["device", "run"] if _several_runs(frame) else ["device"]


def per_variant(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured rows reduced to one per (case, variant): medians over logits distributions of the time,
    the speedup over full_softmax and its paired p20/p80, how the speedup was measured, and how many of
    the rows are unstable."""
    keys = case_keys(frame)
    frame = _with_runs(frame)
    ok = frame[(frame["status"] == "ok") & frame["median_us"].notna()]
    nan = pd.Series(float("nan"), index=ok.index)
    method = ok["speedup_method"] if "speedup_method" in ok else pd.Series(pd.NA, index=ok.index)
    ok = ok.assign(
        _unstable=ok["unstable"].fillna(False).astype(bool) if "unstable" in ok else False,
        _speedup=pd.to_numeric(ok["speedup_vs_full"], errors="coerce") if "speedup_vs_full" in ok else nan,
        _p20=pd.to_numeric(ok["speedup_p20"], errors="coerce") if "speedup_p20" in ok else nan,
        _p80=pd.to_numeric(ok["speedup_p80"], errors="coerce") if "speedup_p80" in ok else nan,
        _method=method.astype(object).fillna("").astype(str),
    )
    grouped = ok.groupby([*keys, "variant"], dropna=False)
    return grouped.agg(
        median_us=("median_us", "median"),
        pct_copy=("pct_copy", "median"),
        accuracy=("accuracy", "first"),
        speedup=("_speedup", "median"),
        speedup_p20=("_p20", "median"),
        speedup_p80=("_p80", "median"),
        method=("_method", lambda m: ", ".join(sorted(set(m) - {""}))),
        unstable=("_unstable", "sum"),
        rows=("_unstable", "size"),
    ).reset_index()


def _fastest_of(medians: pd.DataFrame) -> pd.Series:
    """Each case's variant with the smallest median; NaN for a case with none of these variants timed (a
    sweep stopped mid-group, exact variants that all failed on a shape), where pandas' idxmin raises."""
    return medians.dropna(how="all").idxmin(axis=1).reindex(medians.index)


def case_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Medians (us) per case and variant; `fastest`: the fastest variant whatever its accuracy (with
    `fastest_accuracy`), `best_exact`: the fastest exact one, and its ratios: `full/best` (full_softmax over
    it: the median of its paired speedups where measured in turn, else the ratio of medians; `full/best
    p20`, `full/best p80`: the paired band), `best/argmax`, `best_%copy`; `unstable`: how many rows behind
    the case are unstable."""
    rows = per_variant(frame)
    if rows.empty:
        return pd.DataFrame()
    keys = case_keys(frame)
    medians = rows.pivot(index=keys, columns="variant", values="median_us")
    copy = rows.pivot(index=keys, columns="variant", values="pct_copy")
    accuracy = rows.groupby("variant")["accuracy"].agg(lambda a: a.iloc[0] if a.nunique() == 1 else "mixed")
    exact = [v for v in medians.columns if (rows[rows["variant"] == v]["accuracy"] == "exact").all()]
    table = medians.copy()
    table["fastest"] = _fastest_of(medians)
    table["fastest_accuracy"] = table["fastest"].map(accuracy)
    table["unstable"] = rows.groupby(keys, dropna=False)["unstable"].sum()
    if exact:
        best = _fastest_of(medians[exact])
        best_us = medians[exact].min(axis=1)
        table["best_exact"] = best
        stats = rows.set_index([*keys, "variant"])
        picked = [(*case, name) if isinstance(name, str) else None for case, name in best.items()]

        def of_best(column: str) -> list[float]:
            return [stats.at[k, column] if k is not None else float("nan") for k in picked]

        if BASELINE in medians:
            ratio = medians[BASELINE] / best_us
            paired = pd.Series(of_best("speedup"), index=table.index)
            table["full/best"] = paired.where(paired.notna(), ratio)
            table["full/best p20"] = of_best("speedup_p20")
            table["full/best p80"] = of_best("speedup_p80")
        if "argmax_ones" in medians:
            table["best/argmax"] = best_us / medians["argmax_ones"]
        table["best_%copy"] = [
            copy.at[case, name] if isinstance(name, str) else float("nan") for case, name in best.items()
        ]
    return table.reset_index()


def winners(table: pd.DataFrame) -> list[str]:
    """One line per device (and run) and dtype: which variants are fastest whatever their accuracy, in how
    many cases; then the fastest exact variant, which is never called the fastest unless it is."""
    if table.empty:
        return []
    unit = ["device", "run"] if "run" in table else ["device"]
    lines = []
    for group, part in table.groupby([*unit, "dtype"], sort=True, dropna=False):
        label = " · ".join(str(g) for g in group)
        counts = part.groupby("fastest", sort=False).agg(
            n=("fastest", "size"), acc=("fastest_accuracy", "first")
        )
        counts = counts.sort_values("n", ascending=False, kind="stable")
        fastest = "; ".join(
            f"{name} ({row.acc}) in {row.n} of {len(part)}" for name, row in counts.iterrows()
        )
        line = f"{label}: fastest variant (any accuracy): {fastest}."
        if "best_exact" in part and part["best_exact"].notna().any():
            best = part["best_exact"].value_counts()
            name, n = best.index[0], int(best.iloc[0])
            line += f" Fastest exact variant: {name} in {n} of {len(part)}"
            if "full/best" in part:
                mid = part.loc[part["best_exact"] == name, "full/best"].median()
                if pd.notna(mid):
                    side = "faster than" if mid >= 1.05 else "slower than" if mid <= 0.95 else "as fast as"
                    line += f", median {mid:.2f}x against {BASELINE} ({side} it)"
            overall = int((part["fastest"] == name).sum())
            line += f"; fastest of any accuracy in {overall} of {len(part)}."
        else:
            line += " No exact variant measured."
        lines.append(line)
    return lines


def triton_targets(frame: pd.DataFrame) -> pd.DataFrame:
    """Issue 3's targets for `triton_auto`, each with the cases it covers and how many meet it."""
    rows = per_variant(frame)
    columns = ["target", "cases", "met", "worst"]
    if rows.empty or TRITON_PICK not in set(rows["variant"]):
        return pd.DataFrame(columns=columns)
    keys = case_keys(frame)
    medians = rows.pivot(index=keys, columns="variant", values="median_us")
    copy = rows.pivot(index=keys, columns="variant", values="pct_copy")[TRITON_PICK]
    auto = medians[TRITON_PICK]
    shape = medians.index.to_frame(index=False).set_index(medians.index)
    small_b = (shape["batch"] == 1) & shape["vocab"].between(129280, 163840)
    # (target, cases it covers, other variant, ratio of auto and other, threshold, higher is better)
    checks = [
        ("B=1, V 129280-163840: full_softmax / triton_auto >= 5", small_b, BASELINE, 5.0, True),
        ("B=1, V 129280-163840: triton_auto / argmax_ones <= 1.2", small_b, "argmax_ones", 1.2, False),
        ("every case: identity / triton_auto >= 1", shape["batch"] >= 0, "identity", 1.0, True),
    ]
    out = []
    for name, mask, other, threshold, higher in checks:
        if other in medians:
            ratio = medians[other] / auto if higher else auto / medians[other]
            out.append(_target(name, ratio[mask], threshold, higher))
    copy_name = "B>=64: triton_auto bandwidth >= 85 % of measured copy"
    out.append(_target(copy_name, copy[shape["batch"] >= 64], 85.0, True))
    return pd.DataFrame(out, columns=columns)


def _target(name: str, values: pd.Series, threshold: float, higher: bool) -> dict[str, object]:
    """How many of `values` meet the threshold, and the worst of them."""
    values = values.dropna()
    met = values >= threshold if higher else values <= threshold
    worst = values.min() if higher else values.max()
    return {"target": name, "cases": len(values), "met": int(met.sum()), "worst": worst}


def console_table(frame: pd.DataFrame, limit: int = 40) -> str:
    """The few lines `perfsuite run` ends with: per case the fastest variant whatever its accuracy, the
    fastest exact one, full_softmax's time and the exact one's speedup (paired where sampled in turn, with
    its p20-p80), how many rows are unstable; then who wins per device and dtype."""
    table = case_table(frame)
    if table.empty:
        return ""
    keys = case_keys(frame)
    shown = {"device": "device", "run": "run", "path": "path", "dtype": "dtype", "vocab": "V", "batch": "B"}
    shown |= {"topk": "k", "l2": "L2", "tp": "tp"}
    several_devices = table["device"].nunique() > 1
    out = []
    for record in table.to_dict("records"):
        exact = record.get("best_exact")
        has_exact = isinstance(exact, str)
        speedup, p20, p80 = (
            record.get(c, float("nan")) for c in ("full/best", "full/best p20", "full/best p80")
        )
        band = f" ({p20:.2f}-{p80:.2f})" if pd.notna(p20) and pd.notna(p80) else ""
        row = {shown[k]: record[k] for k in keys if k != "device" or several_devices}
        row |= {
            "fastest (any accuracy)": f"{record['fastest']} ({record['fastest_accuracy']})",
            "us": f"{record[record['fastest']]:.4g}",
            "fastest exact": exact if has_exact else "-",
            "exact us": f"{record[exact]:.4g}" if has_exact else "",
            f"{BASELINE} us": f"{record[BASELINE]:.4g}" if pd.notna(record.get(BASELINE)) else "",
            f"{BASELINE}/exact": f"{speedup:.2f}x{band}" if has_exact and pd.notna(speedup) else "",
            "unstable": int(record["unstable"]) or "",
        }
        out.append(row)
    text = pd.DataFrame(out).head(limit).to_string(index=False)
    more = f"\n... {len(out) - limit} more cases in results.csv" if len(out) > limit else ""
    devices = ", ".join(sorted(frame["device"].dropna().astype(str).unique()))
    title = (
        f"{devices}: medians over logits distributions. fastest: whatever its accuracy; fastest exact: among "
        f"the exact variants; {BASELINE}/exact: {BASELINE}'s time over the fastest exact's on the same path, "
        "dtype, shape and logits (paired, with p20-p80, where sampled in turn; a compiled variant against "
        f"the compiled {BASELINE}); unstable: rows whose samples spread over "
        f"{100 * UNSTABLE_SPREAD:.0f} % of the median"
    )
    return "\n".join([title, text + more, *winners(table), *exactness_lines(frame)])


def exactness_lines(frame: pd.DataFrame) -> list[str]:
    """The cost of exactness in a line per device (and run): the median over shapes of the exact Triton
    kernel's time over the Triton argmax's and over full_softmax's (k = 1), and over full_softmax's (k > 1);
    none where the Triton kernels did not run."""
    one, several = cost_of_exactness(_with_runs(coerce(frame)), _unit(frame))
    unit = _unit(frame)
    lines = []
    for group, part in pd.concat([one, several]).groupby(unit, sort=True):
        label = " · ".join(str(g) for g in (group if isinstance(group, tuple) else (group,)))
        k1, kn = part[part["topk"] == 1], part[part["topk"] > 1]
        said = []
        if len(k1):
            said.append(
                f"k = 1: {EXACT_TRITON} / {ARGMAX_TRITON} {k1['exact/argmax'].median():.2f}x, / {BASELINE} "
                f"{k1[f'exact/{BASELINE}'].median():.2f}x"
            )
        if len(kn):
            said.append(f"k > 1: {EXACT_TRITON} / {BASELINE} {kn[f'exact/{BASELINE}'].median():.2f}x")
        lines.append(f"{label}: cost of exactness (median over {len(part)} shapes): {'; '.join(said)}.")
    return lines


def to_markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A GitHub-flavoured markdown table (numbers to `digits` significant figures)."""
    if table.empty:
        return "(no measured cases)\n"

    def cell(value: object) -> str:
        if isinstance(value, float):
            return "" if pd.isna(value) else f"{value:.{digits}g}"
        return str(value)

    header = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


def summary_markdown(frame: pd.DataFrame, notes: Sequence[str] = ()) -> str:
    """The whole summary: warnings, who is fastest, the per-case table, the Triton targets."""
    from perfsuite.report.html import measurement_warnings

    devices = ", ".join(sorted(frame["device"].dropna().astype(str).unique()))
    counts = frame["status"].value_counts().to_dict()
    table = case_table(frame)
    warnings = measurement_warnings(frame, notes)
    parts = [
        f"# perfsuite summary: {devices}\n",
        "Cases: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + "\n",
        "## Cost of exactness\n",
        EXACTNESS_TEXT + _simulated_text(frame) + "\n",
        _exactness_markdown(frame),
        *(["## Warnings\n", "\n".join(f"- {w}" for w in warnings) + "\n"] if warnings else []),
        "## Fastest variants\n",
        "\n".join(f"- {line}" for line in winners(table)) + "\n" if len(table) else "(no measured cases)\n",
        "## Median us per case (same run, median over logits distributions)\n",
        "fastest (any accuracy): the fastest variant whatever its accuracy (full_softmax rounds its "
        "probabilities in bf16/fp16, argmax_ones returns 1.0 in place of them); fastest exact: the fastest "
        "variant whose accuracy is exact, which may well be slower than full_softmax. full/best: "
        "full_softmax's time over the fastest exact variant's on the same path (a compiled variant against "
        "the compiled full_softmax), dtype, shape and logits, the median of paired per-round ratios where "
        "the variants were sampled in turn (full/best p20-p80: their band), else the ratio of medians; below "
        "1 the exact variant is slower. best/argmax: its cost over argmax_ones; best_%copy: its bandwidth as "
        f"a percent of the measured copy bandwidth. {UNSTABLE_MARK} after a median: unstable (the p20-p80 "
        f"spread of its samples above {100 * UNSTABLE_SPREAD:.0f} % of the median in at least one logits "
        "distribution): do not rank on it; unstable: how many of the case's rows are.\n",
        to_markdown(_marked(table, frame)),
        "\n## Speedup pairs\n",
        f"Every speedup in this summary: {PAIRING_TEXT}. Per path and variant: the baseline it is compared "
        "with, its timed cases, how many were paired in turn with the baseline, compared by medians, or had "
        "no baseline beside them.\n",
        to_markdown(speedup_pairs(_with_speedups(frame), _unit(frame))),
        "\n## Tie policy: identity (lowest index on ties) against identity_engine_order (torch's order)\n",
        "cost: identity's time over identity_engine_order's on the same cases (the ratio of their medians, "
        "sampled in turn in the same rounds), median over cases, low-high its range; 1.3 means the "
        "lowest-index repair adds 30 %. At k = 1 both run the same ops (torch.max): the ratio there is the "
        "measurement's noise. Times: medians over cases.\n",
        _tie_policy_markdown(frame),
        "\n## Triton targets (issue 3)\n",
        to_markdown(triton_targets(frame)),
    ]
    return "\n".join(parts)


def _exactness_markdown(frame: pd.DataFrame) -> str:
    """The cost-of-exactness tables (k = 1, then k > 1), or why there are none."""
    one, several = cost_of_exactness(_with_runs(coerce(frame)), _unit(frame))
    if one.empty and several.empty:
        return (
            f"(no shape has {EXACT_TRITON} beside {ARGMAX_TRITON} or {BASELINE}: the Triton kernels run on "
            "a GPU, or on a CPU under TRITON_INTERPRET=1)\n"
        )
    parts = []
    for title, table in (("k = 1", one), ("k > 1", several)):
        if len(table):
            parts += [f"### {title}\n", to_markdown(table)]
    return "\n".join(parts)


def _simulated_text(frame: pd.DataFrame) -> str:
    """A sentence naming the simulated devices among the rows, if any: their times are the host's."""
    simulated = sorted({str(d) for d in frame["device"].dropna() if str(d).endswith("(simulated)")})
    if not simulated:
        return ""
    return f" Simulated: {', '.join(simulated)}: host times of CPU work, not a GPU's."


def _with_speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows (runs labelled where kept apart) in the schema's types, each with its speedup."""
    return add_speedups(coerce(_with_runs(frame)), only_missing=True)


def _tie_policy_markdown(frame: pd.DataFrame) -> str:
    table = tie_policy(_with_speedups(frame), _unit(frame))
    if table.empty:
        return "(identity and identity_engine_order were not both measured on the same cases)\n"
    return to_markdown(table)


def _marked(table: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The case table for reading: medians of unstable rows marked, the winners' accuracy named, the
    paired band as one column."""
    if table.empty:
        return table
    keys = case_keys(frame)
    rows = per_variant(frame).set_index([*keys, "variant"])
    out = table.copy().astype(object)
    variants = [v for v in rows.index.get_level_values("variant").unique() if v in table]
    for i, record in table.iterrows():
        case = tuple(record[k] for k in keys)
        for variant in variants:
            key = (*case, variant)
            if key in rows.index and rows.at[key, "unstable"] and pd.notna(record[variant]):
                out.at[i, variant] = f"{record[variant]:.3g} {UNSTABLE_MARK}"
    out["fastest"] = [f"{f} ({a})" for f, a in zip(table["fastest"], table["fastest_accuracy"], strict=True)]
    if "full/best p20" in table:
        band = [
            f"{lo:.2f}-{hi:.2f}" if pd.notna(lo) and pd.notna(hi) else ""
            for lo, hi in zip(table["full/best p20"], table["full/best p80"], strict=True)
        ]
        out = out.drop(columns=["full/best p20", "full/best p80"])
        out.insert(list(out.columns).index("full/best") + 1, "full/best p20-p80", band)
    out["unstable"] = [int(n) or "" for n in table["unstable"]]
    out = out.drop(columns=["fastest_accuracy"])
    return out.rename(columns={"fastest": "fastest (any accuracy)", "best_exact": "fastest exact"})


def tuned_markdown(path: Path) -> str:
    """The tuned-plan table `perfsuite tune` wrote: per shape the best plan against the heuristic."""
    from perfsuite.kernels import plan_table

    table = plan_table.TunedTable.from_json(path.read_text())
    title = f"\n## Tuned plans ({table.device}, {table.path} path, `perfsuite tune`)\n"
    return title + to_markdown(pd.DataFrame(table.summary()))
