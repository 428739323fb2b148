"""HTML fragment for tensor-parallel rows: all-gather-then-select against merge-partials, per tp.

tp_html(frame) -> str   (plotly figures without plotly.js: the page already inlines it)
python -m perfsuite.distributed.report ROWS.jsonl... [--out tp.html]   (table; standalone page)

plotly is imported only to draw a figure; without it each figure is a note and the tables stay.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from perfsuite.distributed import tp_variants
from perfsuite.report.html import missing_plot_note, missing_plots_banner, plots_available

if TYPE_CHECKING:
    import plotly.graph_objects as go

SHAPE = ["dtype", "vocab", "batch", "topk"]
ALLGATHER = ("allgather_full_softmax", "allgather_identity")
SHARDED = ("sharded_torch", "sharded_triton")


def tp_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured rows of tensor-parallel variants."""
    if "tp" not in frame or "variant" not in frame:
        return frame.iloc[0:0]
    rows = frame[frame["variant"].isin(tp_variants.names()) & (frame["status"] == "ok")].copy()
    for column in ("tp", "vocab", "batch", "topk", "median_us", "comm_bytes_model"):
        rows[column] = pd.to_numeric(rows[column], errors="coerce") if column in rows else float("nan")
    return rows


def comparison(rows: pd.DataFrame) -> pd.DataFrame:
    """Per tp and shape: the faster all-gather and merge-partials variants, speedup and bytes ratio."""
    keys = ["tp", *SHAPE]
    wide = rows.pivot_table(index=keys, columns="variant", values="median_us", aggfunc="median")
    comm = rows.pivot_table(index=keys, columns="variant", values="comm_bytes_model", aggfunc="first")
    out = pd.DataFrame(index=wide.index)
    for name in tp_variants.names():
        if name in wide:
            out[f"{name} us"] = wide[name]
    gathered = [n for n in ALLGATHER if n in wide]
    sharded = [n for n in SHARDED if n in wide]
    if gathered and sharded:
        out["speedup"] = wide[gathered].min(axis=1) / wide[sharded].min(axis=1)
        out["all-gather bytes/rank"] = comm[gathered].max(axis=1)
        out["partials bytes/rank"] = comm[sharded].min(axis=1)
    return out.reset_index()


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def _table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    caption = "speedup: fastest all-gather variant's median / fastest merge-partials variant's"
    return f"<table class='tp'><caption>{caption}</caption><tr>{head}</tr>{body}</table>"


def _label(row: pd.Series) -> str:
    return f"{row['dtype']} V{row['vocab']} B{row['batch']} k{row['topk']}"


def figure(rows: pd.DataFrame, tp: int) -> go.Figure:
    """Time per call and interconnect bytes per rank, per shape and variant, at one tp (needs plotly)."""
    from plotly.subplots import make_subplots

    part = rows[rows["tp"] == tp].sort_values(SHAPE)
    labels = list(dict.fromkeys(part.apply(_label, axis=1)))
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        subplot_titles=("time per call (us, max over ranks)", "interconnect bytes per rank (model)"),
    )
    for i, name in enumerate(n for n in tp_variants.names() if n in set(part["variant"])):
        mine = part[part["variant"] == name]
        x = list(mine.apply(_label, axis=1))
        fig.add_bar(
            x=x, y=mine["median_us"], name=name, legendgroup=name, marker_color=_color(i), row=1, col=1
        )
        bytes_trace = {"name": name, "legendgroup": name, "showlegend": False, "marker_color": _color(i)}
        fig.add_bar(x=x, y=mine["comm_bytes_model"], **bytes_trace, row=2, col=1)
    fig.update_xaxes(categoryorder="array", categoryarray=labels)
    fig.update_yaxes(type="log")
    fig.update_layout(
        title=f"tp = {tp}: all-gather then select vs merge partials",
        barmode="group",
        template="plotly_white",
        height=620,
    )
    return fig


def _color(i: int) -> str:
    return ("#636efa", "#ab63fa", "#00cc96", "#ef553b")[i % 4]


def tp_html(frame: pd.DataFrame) -> str:
    """An HTML fragment: per tp, a comparison table and a figure (empty note without TP rows)."""
    rows = tp_rows(frame)
    if rows.empty:
        return "<p class='note'>No tensor-parallel rows were measured.</p>"
    parts = [_table(comparison(rows))]
    for tp in sorted(rows["tp"].dropna().unique()):
        if plots_available() is not None:
            title = f"tp = {int(tp)}: all-gather then select vs merge partials"
            parts.append(f"<p class='note'>{html.escape(missing_plot_note(title))}</p>")
            continue
        parts.append(figure(rows, int(tp)).to_html(full_html=False, include_plotlyjs=False))
    return "\n".join(parts)


def page(frame: pd.DataFrame, title: str = "perfsuite: tensor-parallel selection") -> str:
    """A standalone HTML page around `tp_html`, plotly.js inlined (no network needed to view it); without
    plotly, no script and a note on how to get the plots."""
    head = f"<meta charset='utf-8'><title>{html.escape(title)}</title>"
    heading = "<h1>Tensor parallel: all-gather then select vs merge partials</h1>"
    if plots_available() is not None:
        again = "`python -m perfsuite.distributed.report ROWS... --out FILE.html`"
        heading += f"<p class='note'>{html.escape(missing_plots_banner(again))}</p>"
        return f"<!doctype html><html><head>{head}</head><body>{heading}{tp_html(frame)}</body></html>"
    import plotly.offline

    script = f"<script>{plotly.offline.get_plotlyjs()}</script>"
    return f"<!doctype html><html><head>{head}{script}</head><body>{heading}{tp_html(frame)}</body></html>"


def main(argv: list[str] | None = None) -> int:
    """Print the comparison table of result files (JSON lines or CSV); write a page with --out."""
    p = argparse.ArgumentParser(prog="python -m perfsuite.distributed.report")
    p.add_argument("results", nargs="+", help="results.jsonl / tp*.jsonl / results.csv")
    p.add_argument("--out", help="write a standalone HTML page here")
    args = p.parse_args(argv)
    frames = [pd.read_csv(f) if f.endswith(".csv") else pd.read_json(f, lines=True) for f in args.results]
    frame = pd.concat(frames, ignore_index=True)
    counts = frame.groupby(["tp", "status"]).size().unstack(fill_value=0) if "tp" in frame else frame
    print(counts.to_string())
    if "verdict" in frame:
        failed = frame[frame["verdict"] == "fail"]
        for row in failed.itertuples():
            print(f"PARITY FAIL {row.case_id}: {row.problem}")
    print(comparison(tp_rows(frame)).to_string(index=False))
    if args.out:
        Path(args.out).write_text(page(frame), encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
