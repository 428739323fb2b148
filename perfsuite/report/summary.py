"""The text views of a run's summary (`kernel_context.Summary`): the markdown of `perfsuite summary`
(`summary_markdown`, `tuned_markdown`) and the table `perfsuite run` ends with (`console_table`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import pandas as pd

from perfsuite.measure.timing import UNSTABLE_SPREAD
from perfsuite.report import formatting as fmt
from perfsuite.report.kernel_context import (
    PAIRING_TEXT,
    TARGETS_TEXT,
    TIE_TEXT,
    UNSTABLE_MARK,
    UNSTABLE_TEXT,
    Summary,
)

SHORT = {"vocab": "V", "batch": "B", "topk": "k", "l2": "L2"}  # the console's column names


def to_markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A GitHub-flavoured markdown table (numbers to `digits` significant figures)."""
    if table.empty:
        return "(no measured cases)\n"

    def cell(value: object) -> str:
        return ("" if pd.isna(value) else f"{value:.{digits}g}") if isinstance(value, float) else str(value)

    rows = [table.columns, ["---"] * table.shape[1], *table.itertuples(index=False)]
    return "\n".join("| " + " | ".join(map(cell, row)) + " |" for row in rows) + "\n"


def _marked(s: Summary, shown: Collection[str] | None = None) -> pd.DataFrame:
    """The case table for reading (the markdown's; the console's with `shown`, the variants whose medians it
    keeps): unstable medians marked, the winners' accuracy named, one band column."""
    table, flags = s.cases, s.wide("unstable")
    out = table.astype(object)
    for variant in flags.columns:
        marked = (flags[variant] > 0) & table[variant].notna()
        out.loc[marked, variant] = [f"{x:.3g} {UNSTABLE_MARK}" for x in table.loc[marked, variant]]
    out["fastest"] = table["fastest"] + " (" + table["fastest_accuracy"] + ")"
    if "full/best p20" in table:
        low, high = (table[f"full/best {p}"].map("{:.2f}".format) for p in ("p20", "p80"))
        band = (low + "-" + high).where(table["full/best p20"].notna(), "")
        out.insert(list(out.columns).index("full/best") + 1, "full/best p20-p80", band)
    out["unstable"] = [int(n) or "" for n in table["unstable"]]
    hidden = [v for v in flags.columns if shown is not None and v not in shown]
    out = out.drop(columns=[*hidden, "fastest_accuracy", "full/best p20", "full/best p80"], errors="ignore")
    return out.rename(
        columns={"fastest": "fastest (any accuracy)", "best_exact": "fastest exact"}
    ).reset_index()


def summary_markdown(frame: pd.DataFrame, notes: Sequence[str] = ()) -> str:
    """The whole summary: cost of exactness, warnings, who is fastest, cases, pairs, tie policy, targets."""
    from perfsuite.report.html import measurement_warnings, simulated_devices

    s = Summary.of(frame)
    r, warnings, devices = s.roles, measurement_warnings(frame, notes), s.devices
    counts = sorted(s.frame["status"].value_counts().items())
    simulated = ", ".join(simulated_devices(frame))
    held = " or ".join(f"{e} beside {a}" for e, a in r.held.items())
    tables = zip(("k = 1", "k > 1"), s.exactness, strict=True)
    tables = [f"### {k}\n\n{to_markdown(t)}" for k, t in tables if len(t)]
    no_triton = "the Triton kernels run on a GPU, or on a CPU under TRITON_INTERPRET=1"
    parts = [
        f"# perfsuite summary: {', '.join(devices)}\n",
        "Cases: " + ", ".join(f"{n} {status}" for status, n in counts) + "\n",
        "## Cost of exactness\n",
        s.exactness_text()
        + (f" Simulated: {simulated}: host times of CPU work, not a GPU's." if simulated else ""),
        "\n" + "\n".join(tables) if tables else f"\n(no shape has {held} or {r.baseline}: {no_triton})\n",
        *(["## Warnings\n", "\n".join(f"- {w}" for w in warnings) + "\n"] if warnings else []),
        "## Fastest variants\n",
        "\n".join(f"- {line}" for line in s.findings) + "\n" if s.findings else "(no measured cases)\n",
        "## Median us per case (same run, median over logits distributions)\n",
        f"fastest (any accuracy): the fastest variant whatever its accuracy ({r.baseline} rounds its "
        f"probabilities in bf16/fp16, {r.shortcut} returns 1.0 in place of them); fastest exact: the fastest "
        f"variant whose accuracy is exact, which may well be slower than {r.baseline}. full/best: "
        f"{r.baseline}'s time over the fastest exact variant's: {PAIRING_TEXT} (full/best p20-p80: the "
        "band of the per-round ratios); below 1 the exact variant is slower. best/argmax: its cost over "
        f"{r.shortcut}; best_%copy: its bandwidth as a percent of the measured copy bandwidth. "
        f"{UNSTABLE_TEXT}; unstable: how many of the case's rows are.\n",
        to_markdown(_marked(s) if len(s.cases) else s.cases),
        "\n## Speedup pairs\n",
        f"Every speedup in this summary: {PAIRING_TEXT}. Per path and variant: the baseline it is compared "
        "with, its timed cases, how many were paired in turn with the baseline, compared by medians, or had "
        "no baseline beside them.\n",
        to_markdown(s.pairs),
        "\n## Tie policy: lowest index on ties against torch's order\n",
        TIE_TEXT + "\n",
        to_markdown(s.ties) if len(s.ties) else "(no selector and its twin in torch's order measured)\n",
        "\n## Triton targets\n",
        TARGETS_TEXT + "\n",
        to_markdown(s.targets),
    ]
    return "\n".join(parts)


def console_table(frame: pd.DataFrame, limit: int = 40) -> str:
    """The lines `perfsuite run` ends with: the markdown's case table with the medians of the baseline and
    the winners only; then who is fastest per device and dtype, and the cost of exactness."""
    s = Summary.of(frame)
    if s.cases.empty:
        return ""
    base, exact = s.roles.baseline, s.cases.get("best_exact", pd.Series(dtype=object)).dropna()
    table = _marked(s, shown={base, *s.cases["fastest"], *exact})
    dropped = [*([] if s.several_devices else [s.unit]), "best/argmax", "best_%copy"]
    table = table.drop(columns=dropped, errors="ignore").rename(columns=SHORT)
    if "full/best" in table:
        table["full/best"] = table["full/best"].map(fmt.speedup)
    more = f"\n... {len(table) - limit} more cases in results.csv" if len(table) > limit else ""
    title = (
        f"{', '.join(s.devices)}: median us per case over logits distributions ({UNSTABLE_MARK}: unstable, "
        f"samples spread over {100 * UNSTABLE_SPREAD:.0f} % of the median). fastest: whatever its accuracy; "
        f"fastest exact: among the exact variants; full/best: {base} over it, {PAIRING_TEXT}"
    )
    shown = table.head(limit).to_string(index=False, float_format="{:.4g}".format, na_rep="")
    return "\n".join([title, shown + more, *s.findings, *s.exactness_lines])


def tuned_markdown(path: Path) -> str:
    """The tuned-plan table `perfsuite tune` wrote: per shape the best plan against the heuristic."""
    from perfsuite.kernels import plan_table

    table = plan_table.TunedTable.from_json(path.read_text())
    title = f"\n## Tuned plans ({table.device}, {table.path} path, `perfsuite tune`)\n"
    return title + to_markdown(pd.DataFrame(table.summary()))
