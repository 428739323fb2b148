"""A short text summary of a run: each variant's median per case, ratios to the baseline, and targets.

    python -m perfsuite.report.summary reports/gpu-check/results.csv --out reports/gpu-check/summary.md

One markdown table row per (device, path, dtype, vocab, batch, topk): the median of every variant in the
same run, `full_softmax / best exact` (speedup), `best exact / argmax_ones` (the price of exactness) and
the best exact variant's bandwidth as a percent of the measured copy bandwidth; then the Triton targets
of issue 3 evaluated over the run; then, where `perfsuite tune` wrote `tuned.json` beside the results (or
`--tuned` names one), each tuned shape's best plan against the heuristic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from perfsuite.report.load import load_many
from perfsuite.schema import BASELINE

CASE = ["device", "path", "dtype", "vocab", "batch", "topk"]
TRITON_PICK = "triton_auto"


def per_variant(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured rows reduced to one per (case, variant): medians over logits distributions, and how many
    of them are unstable."""
    ok = frame[(frame["status"] == "ok") & frame["median_us"].notna()]
    ok = ok.assign(
        _unstable=ok["unstable"].astype(str).eq("True") if "unstable" in ok else False,
        _speedup=pd.to_numeric(ok["speedup_vs_full"], errors="coerce") if "speedup_vs_full" in ok else None,
    )
    grouped = ok.groupby([*CASE, "variant"], dropna=False)
    return grouped.agg(
        median_us=("median_us", "median"),
        pct_copy=("pct_copy", "median"),
        accuracy=("accuracy", "first"),
        speedup=("_speedup", "median"),
        unstable=("_unstable", "sum"),
    ).reset_index()


def case_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Medians (us) per case and variant; the fastest variant whatever its accuracy, the fastest exact one
    and its ratios; how many rows behind the case are unstable."""
    rows = per_variant(frame)
    if rows.empty:
        return pd.DataFrame()
    medians = rows.pivot(index=CASE, columns="variant", values="median_us")
    copy = rows.pivot(index=CASE, columns="variant", values="pct_copy")
    exact = [v for v in medians.columns if (rows[rows["variant"] == v]["accuracy"] == "exact").all()]
    table = medians.copy()
    table["fastest"] = medians.idxmin(axis=1)
    table["unstable"] = rows.groupby(CASE, dropna=False)["unstable"].sum()
    if exact:
        best = medians[exact].idxmin(axis=1)
        best_us = medians[exact].min(axis=1)
        table["best_exact"] = best
        if BASELINE in medians:
            table["full/best"] = medians[BASELINE] / best_us
        if "argmax_ones" in medians:
            table["best/argmax"] = best_us / medians["argmax_ones"]
        table["best_%copy"] = [
            copy.at[case, name] if isinstance(name, str) else float("nan") for case, name in best.items()
        ]
    return table.reset_index()


def triton_targets(frame: pd.DataFrame) -> pd.DataFrame:
    """Issue 3's targets for `triton_auto`, each with the cases it covers and how many meet it."""
    rows = per_variant(frame)
    columns = ["target", "cases", "met", "worst"]
    if rows.empty or TRITON_PICK not in set(rows["variant"]):
        return pd.DataFrame(columns=columns)
    medians = rows.pivot(index=CASE, columns="variant", values="median_us")
    copy = rows.pivot(index=CASE, columns="variant", values="pct_copy")[TRITON_PICK]
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
    """The few lines `perfsuite run` ends with: per case the fastest variant (whatever its accuracy), the
    fastest exact one, full_softmax's time and the exact one's speedup (paired where sampled in turn)."""
    rows = per_variant(frame)
    if rows.empty:
        return ""
    table = case_table(frame)
    speedups = rows.pivot(index=CASE, columns="variant", values="speedup")
    out = []
    for record in table.to_dict("records"):
        key = tuple(record[c] for c in CASE)
        exact = record.get("best_exact")
        exact_speedup = speedups.at[key, exact] if isinstance(exact, str) else float("nan")
        out.append(
            {
                "path": record["path"],
                "dtype": record["dtype"],
                "V": record["vocab"],
                "B": record["batch"],
                "k": record["topk"],
                "fastest": record["fastest"],
                "us": f"{record[record['fastest']]:.4g}",
                "fastest exact": exact if isinstance(exact, str) else "-",
                "exact us": f"{record[exact]:.4g}" if isinstance(exact, str) else "",
                f"{BASELINE} us": f"{record[BASELINE]:.4g}" if pd.notna(record.get(BASELINE)) else "",
                "speedup": f"{exact_speedup:.2f}x" if pd.notna(exact_speedup) else "",
                "unstable": int(record["unstable"]) or "",
            }
        )
    text = pd.DataFrame(out).head(limit).to_string(index=False)
    more = f"\n... {len(out) - limit} more cases in results.csv" if len(out) > limit else ""
    devices = ", ".join(sorted(frame["device"].dropna().astype(str).unique()))
    title = f"{devices}: medians over logits distributions (speedup: {BASELINE} over the fastest exact)"
    return f"{title}\n{text}{more}"


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


def summary_markdown(frame: pd.DataFrame) -> str:
    devices = ", ".join(sorted(frame["device"].dropna().astype(str).unique()))
    counts = frame["status"].value_counts().to_dict()
    parts = [
        f"# perfsuite summary: {devices}\n",
        "Cases: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + "\n",
        "## Median us per case (same run, median over logits distributions)\n",
        "full/best: speedup of the fastest exact variant over full_softmax; best/argmax: its cost over "
        "argmax_ones; best_%copy: its bandwidth as a percent of the measured copy bandwidth.\n",
        to_markdown(case_table(frame)),
        "\n## Triton targets (issue 3)\n",
        to_markdown(triton_targets(frame)),
    ]
    return "\n".join(parts)


def tuned_markdown(path: Path) -> str:
    """The tuned-plan table `perfsuite tune` wrote: per shape the best plan against the heuristic."""
    from perfsuite.kernels import tuned, tuner

    table = tuned.TunedTable.from_json(path.read_text())
    title = f"\n## Tuned plans ({table.device}, {table.path} path, `perfsuite tune`)\n"
    return title + to_markdown(tuner.summary(table))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--out", help="write the markdown here too")
    parser.add_argument("--tuned", help="a tuned-plan table to add (default: tuned.json beside the results)")
    args = parser.parse_args(argv)
    first = Path(args.results[0])
    tuned_file = (
        Path(args.tuned) if args.tuned else (first if first.is_dir() else first.parent) / "tuned.json"
    )
    try:
        frame = load_many([Path(p) for p in args.results])
        text = summary_markdown(frame)
        if args.tuned or tuned_file.exists():
            text += tuned_markdown(tuned_file)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"perfsuite summary: {exc}", file=sys.stderr)
        return 2
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
