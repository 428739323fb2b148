"""One self-contained HTML report from result rows: summary, plots, parity, edge cases, skips, full table.

Each section and figure is one small function of a prepared `_Context`; each figure is guarded so that a
missing combination or an all-NaN column turns into a one-line note instead of an exception. plotly is
imported only where a figure is built: without it (`plots_available()` says why) every table is still
written, each figure becomes a note and the page says at the top how to get the plots.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache, cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from perfsuite.counters import FLAG_TOLERANCE, flagged
from perfsuite.report.load import coerce

if TYPE_CHECKING:
    import plotly.graph_objects as go

BASELINE = "full_softmax"
INEXACT_SHORTCUT = "argmax_ones"
DEFAULT_TITLE = "perfsuite: top-k selection of the draft step"
TEMPLATES = Path(__file__).parent / "templates"
DIMENSIONS = ("device", "backend", "variant", "accuracy", "path", "dtype", "logits", "l2", "status")
ENVIRONMENT_COLUMNS = ("device", "backend", "runtime", "driver", "torch", "triton", "git_sha", "scenario")
SUMMARY_ENVIRONMENT = ("backend", "runtime", "driver", "torch", "triton", "git_sha")
MAX_FACET_COLUMNS = 5  # batch sizes per latency / bandwidth figure
MAX_SLICES = 4  # figures per (path, topk, l2) combination
MAX_HEATMAP_ROWS = 8
MAX_REASON_GROUPS = 60
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}
DTYPE_ORDER = ("float32", "float16", "bfloat16")
PATH_ORDER = ("eager", "graph", "compile")
FACET_ORDER = (*DTYPE_ORDER, *PATH_ORDER)
NUMBERS = (int, float, np.integer, np.floating)
PLOTLY_MODULES = (
    "plotly",
    "plotly.express",
    "plotly.graph_objects",
    "plotly.io",
    "plotly.offline",
    "plotly.subplots",
)
GET_PLOTLY = (
    "`pip install plotly`, or offline: `scripts/fetch_wheels.sh` on a machine with network, copy its `.whl/` "
    "folder here, then `pip install --no-index --find-links .whl plotly`"
)
REPORT_AGAIN = "`perfsuite report DIR/results.csv` (DIR: the run's folder)"


# --------------------------------------------------------------------------------------------- plotly


@cache
def plots_available() -> str | None:
    """None when plotly can draw the figures; else why not and how to get it (one line, for a terminal)."""
    try:
        for module in PLOTLY_MODULES:  # plotly itself first: its absence is the common case
            importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "plotly":
            return f"plotly is not installed: {GET_PLOTLY}"
        return f"plotly cannot be imported ({type(exc).__name__}: {exc}): {GET_PLOTLY}"
    return None


def missing_plots_banner(report_again: str) -> str:
    """The note at the top of a page drawn without plotly: why, and the command that redraws it."""
    return f"The plots are missing. {plots_available()}; then re-render with {report_again}."


def missing_plot_note(title: str) -> str:
    """The note standing in for one figure when plotly is missing."""
    return f"{title}: plot not drawn, plotly is missing (see the note at the top)."


# --------------------------------------------------------------------------------------------- blocks


@dataclass
class Cell:
    """A table cell: text, an optional CSS class (win, loss, differs, invalid, error) and a tooltip."""

    text: str
    cls: str = ""
    title: str = ""


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell | str]]
    caption: str = ""
    kind: str = "table"
    css: str = ""


@dataclass
class Figure:
    name: str
    html: Markup
    caption: str = ""
    kind: str = "figure"


@dataclass
class Note:
    text: str
    kind: str = "note"


@dataclass
class Details:
    """A collapsible block around other blocks."""

    summary: str
    blocks: list[Block]
    kind: str = "details"


Block = Table | Figure | Note | Details


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    intro: str = ""


# --------------------------------------------------------------------------------------------- entry point


def build_report(
    results: pd.DataFrame,
    out_path: str | Path,
    *,
    edge_cases: pd.DataFrame | None = None,
    draft: pd.DataFrame | None = None,
    environment: dict[str, str] | None = None,
    title: str = DEFAULT_TITLE,
) -> Path:
    """Write one self-contained HTML report of `results` (schema frame) to `out_path`; return its path.

    `out_path` may be a directory (the file is then `report.html` in it). `edge_cases` is the edge-case
    matrix (pattern, description, dtype, topk, variant, index, topk_p, index_valid, same_as_baseline,
    error); `draft` the draft-loop rows (perfsuite.draft); tensor-parallel rows in `results` get a
    section of their own. `environment` overrides what the frame's columns say about the machine and run.
    """
    out = Path(out_path)
    if out.is_dir() or out.suffix == "":
        out = out / "report.html"
    single, tensor_parallel = split_tensor_parallel(results)
    ctx = _Context.of(single)
    kernel_level = len(single) > 0  # a draft-only or tensor-parallel-only run has no single-device rows
    every = ctx if tensor_parallel.empty else _Context.of(results)
    sections = [
        *(
            [_summary_section(ctx), _plots_section(ctx), _traffic_section(ctx), _parity_section(ctx)]
            if kernel_level
            else []
        ),
        _fragment_section(
            "tp",
            "Tensor parallel: all-gather then select vs merge partials",
            tensor_parallel,
            "perfsuite.distributed.report",
            "tp_html",
        ),
        _fragment_section(
            "draft",
            "Draft loop: the selection where engines consume it",
            draft,
            "perfsuite.report.draft_section",
            "draft_html",
        ),
        _edge_case_section(edge_cases),
        *([_skipped_section(every), _results_section(every)] if len(results) else []),
        _environment_section(ctx, environment),
    ]
    sections = [s for s in sections if s is not None]
    simulated = _simulated_devices(results, draft)
    if simulated:
        note = (
            f"Simulated GPU ({', '.join(simulated)}): perfsuite ran its GPU code paths on the CPU "
            "(PERFSUITE_SIMULATED_GPU). Every time here is a host time of CPU work, not a GPU measurement."
        )
        sections.insert(0, Section("simulated", "Simulated GPU", [Note(note)]))
    if not len(results) and (draft is None or draft.empty):
        sections.insert(0, Section("summary", "Summary", [Note("No result rows: nothing to plot.")]))
    html = _render(title, ctx, sections)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


def split_tensor_parallel(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(single-device rows, tensor-parallel rows): the latter have tp > 1 or a tensor-parallel variant."""
    from perfsuite.distributed import tp_variants

    tp = pd.to_numeric(results["tp"], errors="coerce").fillna(1) if "tp" in results else 1
    mask = (tp > 1) | results["variant"].isin(tp_variants.names())
    return results[~mask], results[mask]


def _fragment_section(
    section_id: str, title: str, frame: pd.DataFrame | None, module: str, function: str
) -> Section | None:
    """A section whose body another module renders (`module.function(frame) -> html`); None without rows."""
    if frame is None or frame.empty:
        return None
    try:
        body = getattr(importlib.import_module(module), function)(frame)
    except Exception as exc:  # a broken section must not cost the whole report
        return Section(section_id, title, [Note(f"{title}: not drawn ({type(exc).__name__}: {exc})")])
    return Section(section_id, title, [Figure(section_id, Markup(body))])


def _render(title: str, ctx: _Context, sections: list[Section]) -> str:
    return render_page(title, ctx.subtitle(), sections, REPORT_AGAIN)


def _simulated_devices(*frames: pd.DataFrame | None) -> list[str]:
    """The names of the simulated devices among the rows (the `simulated` column, or the name's label)."""
    names: set[str] = set()
    for frame in frames:
        if frame is None or frame.empty or "device" not in frame:
            continue
        flag = frame["simulated"].astype(str).eq("True") if "simulated" in frame else False
        labelled = frame["device"].astype(str).str.endswith("(simulated)")
        names.update(frame.loc[flag | labelled, "device"].astype(str))
    return sorted(names)


def render_page(title: str, subtitle: str, sections: list[Section], report_again: str) -> str:
    """A self-contained page of sections in the report's template and style, plotly.js inlined once.

    Without plotly the page has no script at all and opens with a note: why the plots are missing and
    `report_again`, the command that draws them once plotly is installed.
    """
    missing = plots_available() is not None
    if missing:
        plotly_js = Markup("")
    else:
        import plotly.offline

        plotly_js = Markup(plotly.offline.get_plotlyjs())
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html").render(
        title=title,
        subtitle=subtitle,
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        sections=sections,
        plotly_js=plotly_js,
        banner=missing_plots_banner(report_again) if missing else "",
    )


# --------------------------------------------------------------------------------------------- context


@dataclass
class _Context:
    """The prepared frame and what every section needs: ok rows, variant order and colours, devices."""

    frame: pd.DataFrame
    ok: pd.DataFrame
    variants: list[str]
    devices: list[str]

    @classmethod
    def of(cls, results: pd.DataFrame) -> _Context:
        frame = _prepare(results)
        ok = frame[(frame["status"] == "ok") & frame["median_us"].notna()].copy()
        variants = _variant_order(frame["variant"])
        devices = sorted(frame["device"].unique())
        return cls(frame, ok, variants, devices)

    @cached_property
    def colors(self) -> dict[str, str]:
        """A colour per variant, the same in every figure (only figures need it: plotly's palette)."""
        import plotly.express as px

        palette = px.colors.qualitative.Plotly + px.colors.qualitative.Dark24
        return {v: palette[i % len(palette)] for i, v in enumerate(self.variants)}

    def subtitle(self) -> str:
        counts = self.frame["status"].value_counts()
        parts = [f"{len(self.frame)} cases"] + [f"{counts[s]} {s}" for s in counts.index]
        return f"{', '.join(parts)} · {len(self.variants)} variants · devices: {', '.join(self.devices)}"

    @property
    def several_devices(self) -> bool:
        return len(self.devices) > 1


def _prepare(results: pd.DataFrame) -> pd.DataFrame:
    frame = coerce(results)
    for column in DIMENSIONS:
        frame[column] = frame[column].fillna("-").astype(str)
    frame["status"] = frame["status"].replace("-", "ok")
    frame["reason"] = frame["reason"].fillna("").astype(str)
    for column in ("vocab", "batch", "topk"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame["topk"] = frame["topk"].fillna(-1)
    missing = frame["speedup_vs_full"].isna() & frame["median_us"].notna()
    if missing.any():
        frame.loc[missing, "speedup_vs_full"] = _baseline_speedups(frame)[missing]
    return frame


def _baseline_speedups(frame: pd.DataFrame) -> pd.Series:
    """full_softmax median / each row's median for the same device, backend and case (duplicates averaged)."""
    keys = ["device", "backend", "path", "dtype", "vocab", "batch", "topk", "logits", "l2"]
    base = frame[(frame["variant"] == BASELINE) & (frame["status"] == "ok")]
    base = base.groupby(keys, dropna=False)["median_us"].median().rename("_base").reset_index()
    merged = frame[keys].merge(base, on=keys, how="left")
    return pd.Series(merged["_base"].to_numpy() / frame["median_us"].to_numpy(), index=frame.index)


def _variant_order(values: Iterable[str]) -> list[str]:
    seen = list(dict.fromkeys(values))
    return sorted(seen, key=lambda v: (v != BASELINE, v != INEXACT_SHORTCUT, seen.index(v)))


def _ordered(values: Iterable[object], preferred: Sequence[str] = ()) -> list:
    unique = list(dict.fromkeys(v for v in values if not _isnan(v)))
    rank = {v: i for i, v in enumerate(preferred)}
    return sorted(
        unique, key=lambda v: (rank.get(v, len(rank)), *((0, v) if isinstance(v, NUMBERS) else (1, str(v))))
    )


def _rank(value: object) -> tuple[int, object]:
    """Sort key: dtypes and paths in their natural order, then the rest as text or number."""
    if value in FACET_ORDER:
        return (0, FACET_ORDER.index(value))
    return (1, value) if isinstance(value, NUMBERS) else (2, str(value))


def _varying(frame: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    return [k for k in keys if k in frame and frame[k].nunique(dropna=False) > 1]


def _isnan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


# --------------------------------------------------------------------------------------------- formatting


def _fmt(value: object, digits: int = 3) -> str:
    """Compact text for a table cell: blanks for NaN, integers without a point, floats to `digits`."""
    if value is None or _isnan(value) or value is pd.NA:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        if 10**digits <= abs(value) < 1e15:
            return f"{value:.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def _pct(value: float) -> str:
    return "" if _isnan(value) else f"{100 * value:.3g} %"


def _speedup_text(value: float) -> str:
    return "" if _isnan(value) else f"{value:.2f}×"


def _speedup_class(value: float) -> str:
    if _isnan(value):
        return ""
    return "win" if value >= 1.05 else "loss" if value <= 0.95 else "even"


def _mib(value: float) -> str:
    return "" if _isnan(value) else f"{value / 2**20:.3g} MiB"


def _case_label(keys: Sequence[str], values: Sequence[object]) -> str:
    return " · ".join(_dim_text(k, v) for k, v in zip(keys, values, strict=True))


def _dim_text(key: str, value: object) -> str:
    if key in ("topk", "batch", "vocab"):
        return f"{'k' if key == 'topk' else key}={_fmt(value)}"
    if key == "l2":
        return f"L2 {value}"
    return str(value)


def _table(frame: pd.DataFrame, caption: str = "") -> Table:
    """A plain table of a frame's cells as compact text."""
    columns = [[_fmt(v) for v in frame[c].tolist()] for c in frame.columns]
    rows = [list(r) for r in zip(*columns, strict=True)] if columns else []
    return Table([str(c) for c in frame.columns], rows, caption)


# --------------------------------------------------------------------------------------------- figures


def _guard(name: str, build: Callable[[], Block | list[Block]]) -> list[Block]:
    """Run a figure builder; an unexpected failure becomes a note rather than a crashed report."""
    try:
        blocks = build()
    except Exception as err:  # a report with one figure missing beats no report
        return [Note(f"{name}: not drawn ({type(err).__name__}: {err})")]
    return blocks if isinstance(blocks, list) else [blocks]


def figure_block(name: str, title: str, build: Callable[[], go.Figure | dict], caption: str = "") -> Block:
    """The figure `build` returns (object, or plain dict of well-formed data and layout) as a div without
    plotly.js; without plotly, a note naming `title` in its place (`build` is then never called)."""
    if plots_available() is not None:
        return Note(missing_plot_note(title))
    import plotly.graph_objects as go
    import plotly.io

    fig = build()
    if isinstance(fig, go.Figure):
        fig.update_layout(template="plotly_white", margin={"l": 60, "r": 30, "t": 80, "b": 50})
    html = plotly.io.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"fig-{name}",
        config=FIGURE_CONFIG,
        validate=isinstance(fig, go.Figure),
    )
    return Figure(name, Markup(html), caption)


def _grid(
    rows: Sequence[object], cols: Sequence[object], title: str, *, height: int = 250, **subplots: object
) -> go.Figure:
    """The empty subplot grid (layout only) that `_facet_lines` and the heatmaps fill with plain traces."""
    from plotly.subplots import make_subplots

    spacing = {"vertical_spacing": min(0.12, 0.35 / max(len(rows), 1))}
    fig = make_subplots(rows=len(rows), cols=len(cols), **spacing | subplots)
    fig.update_layout(
        template="plotly_white",
        title=title,
        height=150 + height * len(rows),
        margin={"l": 60, "r": 40, "t": 90, "b": 50},
        legend={"title": None, "x": 1.04},
        hovermode="closest",
    )
    fig.update_annotations(font_size=12)
    return fig


def _axes(n: int) -> tuple[str, str]:
    """Trace axis references of the n-th subplot (row-major, from 1)."""
    return ("x", "y") if n == 1 else (f"x{n}", f"y{n}")


def _plain(fig: go.Figure, traces: list[dict]) -> dict:
    return {"data": traces, "layout": fig.to_dict()["layout"]}


@dataclass
class _Facets:
    """How a long frame maps onto a grid of line plots: rows, columns, colour and dash."""

    x: str
    y: str
    row: str | None
    col: str | None
    color: str
    dash: str | None
    hover: list[str]
    errors: tuple[str, str] | None = None  # columns of the upper and lower error bar lengths


DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def _facet_lines(ctx: _Context, data: pd.DataFrame, spec: _Facets, title: str, **axes: object) -> dict:
    """Lines of `spec.y` against `spec.x` per colour (x dash) in a row x column grid, not validated.

    px builds and validates one trace object per line and panel; with ~150 lines per figure that is seconds.
    """
    rows = _ordered(data[spec.row], FACET_ORDER) if spec.row else [None]
    cols = _ordered(data[spec.col], FACET_ORDER) if spec.col else [None]
    fig = _grid(
        rows,
        cols,
        title,
        shared_xaxes=True,
        column_titles=[_dim_text(spec.col, c) for c in cols] if spec.col else None,
        row_titles=[str(r) for r in rows] if spec.row and len(rows) > 1 else None,
        horizontal_spacing=min(0.06, 0.3 / max(len(cols), 1)),
    )
    fig.update_xaxes(**{k[2:]: v for k, v in axes.items() if k.startswith("x_")})
    fig.update_yaxes(**{k[2:]: v for k, v in axes.items() if k.startswith("y_")})
    for c in range(1, len(cols) + 1):
        fig.update_xaxes(title_text=spec.x, row=len(rows), col=c)
    fig.update_yaxes(title_text=axes.get("label", spec.y), col=1)
    dashes = (
        {d: DASHES[i % len(DASHES)] for i, d in enumerate(_ordered(data[spec.dash]))} if spec.dash else {}
    )
    traces: list[dict] = []
    shown: set[str] = set()
    keys = [k for k in (spec.row, spec.col) if k]
    panels = data.groupby(keys, sort=False) if keys else [((), data)]
    index = {(r, c): i * len(cols) + j + 1 for i, r in enumerate(rows) for j, c in enumerate(cols)}
    for key, panel in panels:
        key = key if isinstance(key, tuple) else (key,)
        row = key[0] if spec.row else None
        col = key[-1] if spec.col else None
        xaxis, yaxis = _axes(index[(row, col)])
        traces += _panel_lines(ctx, panel, spec, xaxis, yaxis, dashes, shown)
    return _plain(fig, traces)


def _panel_lines(
    ctx: _Context, panel: pd.DataFrame, spec: _Facets, xaxis: str, yaxis: str, dashes: dict, shown: set[str]
) -> list[dict]:
    traces = []
    groups = [spec.color, *([spec.dash] if spec.dash else [])]
    order = {v: i for i, v in enumerate(ctx.variants)}
    for key, line in sorted(panel.groupby(groups), key=lambda g: (order.get(g[0][0], 99), str(g[0]))):
        line = line.sort_values(spec.x)
        name = " · ".join(map(str, key))
        hover = "<br>".join(f"{h}: %{{customdata[{i}]}}" for i, h in enumerate(spec.hover))
        trace = {
            "type": "scatter",
            "mode": "lines+markers",
            "x": line[spec.x].to_numpy(),
            "y": line[spec.y].to_numpy(),
            "xaxis": xaxis,
            "yaxis": yaxis,
            "name": name,
            "legendgroup": name,
            "showlegend": name not in shown,
            "line": {
                "color": ctx.colors.get(key[0], "#444"),
                "dash": dashes.get(key[-1], "solid"),
                "width": 2,
            },
            "marker": {"size": 6},
            "customdata": [[_fmt(v) for v in r] for r in line[spec.hover].itertuples(index=False)],
            "hovertemplate": f"{hover}<br>{spec.y}: %{{y:.4g}}<extra>{name}</extra>",
        }
        if spec.errors:
            plus, minus = (line[c].to_numpy() for c in spec.errors)
            trace["error_y"] = {
                "type": "data",
                "array": plus,
                "arrayminus": minus,
                "thickness": 1,
                "width": 3,
            }
        shown.add(name)
        traces.append(trace)
    return traces


def _pick(values: Iterable[object], n: int) -> list:
    """At most `n` of the sorted values, evenly spread, first and last included."""
    values = sorted(set(values))
    if len(values) <= n:
        return values
    idx = sorted({round(i * (len(values) - 1) / (n - 1)) for i in range(n)})
    return [values[i] for i in idx]


def _slices(frame: pd.DataFrame, keys: Sequence[str]) -> tuple[list[tuple[str, pd.DataFrame]], str]:
    """Split by the keys that vary: the largest `MAX_SLICES` pieces first, and a note on what was left out."""
    varying = _varying(frame, keys)
    if not varying:
        return [("", frame)], ""
    groups = sorted(frame.groupby(varying, sort=False), key=lambda g: -len(g[1]))
    kept = [(_case_label(varying, g if isinstance(g, tuple) else (g,)), f) for g, f in groups]
    if len(kept) <= MAX_SLICES:
        return kept, ""
    left = ", ".join(label for label, _ in kept[MAX_SLICES:])
    return kept[:MAX_SLICES], f"Not drawn (fewest cases): {left}."


def _over_logits(frame: pd.DataFrame, values: dict[str, str], keys: Sequence[str]) -> pd.DataFrame:
    """Median of each value over the logits distributions of a case (timing barely depends on them)."""
    agg = {column: (column, how) for column, how in values.items()}
    agg["logits"] = ("logits", lambda s: ", ".join(sorted(set(s))))
    return frame.groupby(list(keys), dropna=False, sort=True).agg(**agg).reset_index()


def _line_figures(
    ctx: _Context, name: str, y: str, y_label: str, caption: str, *, log_y: bool, errors: bool = False
) -> list[Block]:
    """`y` against vocab per variant, a figure per (path, topk, L2) slice; batch in columns, dtype in rows."""
    data = ctx.ok[ctx.ok[y].notna() & ctx.ok["vocab"].notna() & ctx.ok["batch"].notna()]
    if data.empty:
        return [Note(f"{y_label}: no values in '{y}', figure skipped.")]
    keys = ["device", "path", "topk", "l2", "dtype", "batch", "vocab", "variant"]
    values = {y: "median", "samples": "median", "timing": "first"}
    if errors:
        values |= {"p20_us": "median", "p80_us": "median"}
    hover = [
        "variant",
        "device",
        "path",
        "dtype",
        "batch",
        "vocab",
        "topk",
        "l2",
        "logits",
        "samples",
        "timing",
    ]
    if "launch" in data:  # the Triton variants' plan (older results files lack the column)
        values["launch"] = "first"
        hover.append("launch")
    spec = _Facets(
        x="vocab",
        y=y,
        row="dtype" if data["dtype"].nunique() > 1 else None,
        col="batch",
        color="variant",
        dash="device" if ctx.several_devices else None,
        hover=hover + (["p20_us", "p80_us"] if errors else []),
        errors=("err_plus", "err_minus") if errors else None,
    )
    blocks: list[Block] = []
    slices, note = _slices(data, ["path", "topk", "l2"])
    for i, (label, part) in enumerate(slices):
        part = part[part["batch"].isin(_pick(part["batch"], MAX_FACET_COLUMNS))]
        agg = _over_logits(part, values, keys)
        if errors:
            agg["err_plus"] = (agg["p80_us"] - agg[y]).clip(lower=0)
            agg["err_minus"] = (agg[y] - agg["p20_us"]).clip(lower=0)
        title = f"{y_label}{' · ' + label if label else ''}"
        axes = {"x_type": "log", "x_dtick": "D2", "y_type": "log" if log_y else "linear", "label": y_label}
        axes |= {"y_dtick": "D2"} if log_y else {}
        build = partial(_facet_lines, ctx, agg, spec, title, **axes)
        blocks.append(figure_block(f"{name}-{i}", title, build, caption))
    if note:
        blocks.append(Note(note))
    return blocks


def _latency_figures(ctx: _Context) -> list[Block]:
    caption = (
        "Median time per call (markers) with the 20th-80th percentile as error bars, against the vocabulary "
        "size. Columns: batch size; rows: logits dtype; line style: device. Each point: the median over "
        "logits distributions."
    )
    return _line_figures(ctx, "latency", "median_us", "latency (µs)", caption, log_y=True, errors=True)


def _bandwidth_metric(ok: pd.DataFrame) -> tuple[str, str] | None:
    """pct_peak, else pct_copy, else gbps: the first that covers every device, else the best covered."""
    choices = [("pct_peak", "% of datasheet peak"), ("pct_copy", "% of measured copy"), ("gbps", "GB/s")]
    present = [(c, label) for c, label in choices if ok[c].notna().any()]
    if not present:
        return None
    devices = set(ok["device"])
    for column, label in present:
        if set(ok.loc[ok[column].notna(), "device"]) == devices:
            return column, label
    return max(present, key=lambda c: ok[c[0]].notna().sum())


def _bandwidth_figures(ctx: _Context) -> list[Block]:
    metric = _bandwidth_metric(ctx.ok)
    if metric is None:
        return [Note("Bandwidth: no pct_peak, pct_copy or gbps values, figure skipped.")]
    column, label = metric
    caption = f"Achieved bandwidth by each variant's bytes model, as {label} ('{column}'), against vocab."
    if column != "pct_peak":
        caption += (
            " The datasheet peak is unknown for some device (e.g. a CPU): this is what every device has."
        )
    missing = ctx.ok[ctx.ok[column].isna()]
    blocks = _line_figures(ctx, "bandwidth", column, f"bandwidth ({label})", caption, log_y=False)
    if len(missing):
        blocks.append(Note(f"{len(missing)} ok cases have no '{column}' value and are not drawn."))
    return blocks


def _speedup_figures(ctx: _Context) -> list[Block]:
    data = ctx.ok[ctx.ok["speedup_vs_full"].notna() & (ctx.ok["variant"] != BASELINE)]
    data = data[data["batch"].notna() & data["vocab"].notna()]
    if data.empty:
        return [Note("Speedup: no variant has a full_softmax baseline to compare with, figures skipped.")]
    blocks: list[Block] = []
    for variant in [v for v in ctx.variants if v in set(data["variant"])]:
        blocks += _guard(f"speedup {variant}", lambda v=variant: _speedup_heatmap(data, v))
    return blocks


def _speedup_heatmap(data: pd.DataFrame, variant: str) -> list[Block]:
    part = data[data["variant"] == variant]
    row_keys = ["device", *_varying(part, ["path", "topk", "l2"])]
    all_rows = list(part[row_keys].drop_duplicates().itertuples(index=False, name=None))
    all_rows.sort(key=lambda r: [_rank(v) for v in r])
    rows = all_rows[:MAX_HEATMAP_ROWS]
    dtypes = _ordered(part["dtype"], DTYPE_ORDER)
    titles = [f"{_case_label(row_keys, r)} · {d}" for r in rows for d in dtypes]
    grids = part.groupby([*row_keys, "dtype", "batch", "vocab"])["speedup_vs_full"].median()
    traces, limit = [], 1.0
    for r, row in enumerate(rows):
        for c, dtype in enumerate(dtypes):
            key = (*row, dtype)
            if key not in grids.index.droplevel(["batch", "vocab"]):
                continue
            grid = grids.loc[key].unstack("vocab").sort_index().sort_index(axis=1)
            limit = max(limit, float(np.nanmax(np.abs(np.log2(grid.to_numpy(dtype=float))))))
            traces.append(_heatmap_trace(grid, titles[r * len(dtypes) + c], _axes(r * len(dtypes) + c + 1)))
    title = f"speedup of {variant} over full_softmax"
    build = partial(_heatmap_grid, rows, dtypes, titles, traces, min(math.ceil(limit), 4), title)
    blocks = [figure_block(f"speedup-{variant}", title, build, _speedup_caption(variant))]
    if len(all_rows) > len(rows):
        blocks.append(Note(f"speedup {variant}: {len(all_rows) - len(rows)} device/path rows not drawn."))
    return blocks


def _heatmap_grid(
    rows: list[tuple], dtypes: list, titles: list[str], traces: list[dict], limit: int, title: str
) -> dict:
    """The heatmaps' figure: a panel per (row, dtype), one log2 colour scale centred at 1× up to 2**limit."""
    fig = _grid(rows, dtypes, title, height=230, subplot_titles=titles)
    ticks = list(range(-limit, limit + 1))
    colorbar = {"title": {"text": "speedup"}, "tickvals": ticks, "ticktext": [f"{2.0**t:g}×" for t in ticks]}
    fig.update_layout(coloraxis={"colorscale": "RdBu", "cmin": -limit, "cmax": limit, "colorbar": colorbar})
    fig.update_xaxes(type="category", title_text="vocab", title_standoff=4)
    fig.update_yaxes(type="category", title_text="batch", title_standoff=4)
    return _plain(fig, traces)


def _heatmap_trace(grid: pd.DataFrame, name: str, axes: tuple[str, str]) -> dict:
    values = grid.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log2(values)
    return {
        "type": "heatmap",
        "x": [_fmt(v) for v in grid.columns],
        "y": [_fmt(v) for v in grid.index],
        "z": np.where(np.isfinite(z), z, np.nan),
        "text": [[_speedup_text(v) for v in row] for row in values],
        "texttemplate": "%{text}",
        "coloraxis": "coloraxis",
        "name": name,
        "xaxis": axes[0],
        "yaxis": axes[1],
        "hovertemplate": "batch %{y}<br>vocab %{x}<br>speedup %{text}<extra>%{fullData.name}</extra>",
    }


def _speedup_caption(variant: str) -> str:
    return (
        f"Cells: full_softmax median over {variant} median for the same device, path, dtype and shape "
        "(median over logits distributions). Blue: faster than full_softmax; red: slower; the colour "
        "scale is logarithmic and centred at 1×."
    )


def _memory_figure(ctx: _Context) -> list[Block]:
    data = ctx.ok[ctx.ok["batch"].notna() & ctx.ok["vocab"].notna()]
    if data[["peak_temp_bytes", "model_temp_bytes"]].isna().all().all():
        return [Note("Memory: no peak_temp_bytes or model_temp_bytes values, figure skipped.")]
    keys = ["device", "variant", "dtype", "batch", "vocab"]
    agg = data.groupby(keys, dropna=False)[["peak_temp_bytes", "model_temp_bytes"]].max().reset_index()
    agg["elements"] = (agg["batch"] * agg["vocab"]).astype(float)
    long = agg.melt([*keys, "elements"], ["peak_temp_bytes", "model_temp_bytes"], "source", "bytes")
    long = long[long["bytes"].notna()].copy()
    long["source"] = long["source"].map({"peak_temp_bytes": "measured", "model_temp_bytes": "model"})
    long["bytes per logit"] = long["bytes"] / long["elements"]
    long["MiB"] = long["bytes"] / 2**20
    spec = _Facets(
        x="elements",
        y="bytes per logit",
        row="device" if ctx.several_devices else None,
        col="dtype" if long["dtype"].nunique() > 1 else None,
        color="variant",
        dash="source",
        hover=["variant", "source", "device", "dtype", "batch", "vocab", "MiB"],
    )
    title = "peak temporary memory per logit: measured (solid) vs the variant's model (dashed)"
    axes = {"x_type": "log", "x_dtick": "D2", "label": "temporary bytes per logit"}
    build = partial(_facet_lines, ctx, long, spec, title, **axes)
    caption = (
        "Largest temporary a call allocates beyond its input, divided by batch × vocab (x axis; worst case "
        "over paths, k and logits). 2 bytes/logit is a bf16 [B, V] copy, 4 an fp32 one; 0: no [B, V] "
        "temporary."
    )
    return [figure_block("memory", title, build, caption), _memory_table(agg)]


def _memory_table(agg: pd.DataFrame) -> Table:
    rows = []
    for (device, variant, dtype), part in agg.groupby(["device", "variant", "dtype"], sort=True):
        big = part.loc[part["elements"].idxmax()]
        measured, model = big["peak_temp_bytes"], big["model_temp_bytes"]
        ratio = measured / model if model and not _isnan(model) else math.nan
        sizes = [_fmt(big["batch"]), _fmt(big["vocab"])]
        rows.append([device, variant, dtype, *sizes, _mib(measured), _mib(model), _fmt(ratio)])
    columns = ["device", "variant", "dtype", "batch", "vocab", "measured", "model", "measured / model"]
    return Table(columns, rows, "Peak temporary memory at the largest batch × vocab per variant and dtype.")


def _mismatch_figure(ctx: _Context) -> list[Block]:
    """Headline: how often full_softmax's top token is not the float64 reference's, per dtype and logits."""
    base = ctx.frame[(ctx.frame["variant"] == BASELINE) & ctx.frame["top1_mismatch_ref"].notna()]
    if base.empty:
        return [Note("Top-1 mismatch: full_softmax has no top1_mismatch_ref values, figure skipped.")]
    keys = ["device", "dtype", "logits"]
    agg = base.groupby(keys).apply(_weighted_mismatch, include_groups=False).reset_index()
    agg["percent"] = 100 * agg["mismatch"]
    title = "How often full_softmax picks a different top token than the float64 reference"
    caption = (
        "Share of finite rows whose first full_softmax token is neither the float64 reference's token nor an "
        "equal-logit tie of it (rows pooled over shapes and paths; the worst single case in the hover). In "
        "bf16/fp16 the softmax rounds near-equal probabilities to equal ones, creating ties the logits did "
        "not have; `max` then returns the lowest index among them."
    )
    worst = agg.loc[agg["mismatch"].idxmax()]
    headline = Note(
        f"Worst: {_pct(worst['mismatch'])} of rows for {worst['dtype']} logits '{worst['logits']}' "
        f"on {worst['device']}."
    )
    build = partial(_mismatch_bars, agg, title, ctx.several_devices)
    return [headline, figure_block("top1-mismatch", title, build, caption)]


def _mismatch_bars(agg: pd.DataFrame, title: str, several_devices: bool) -> go.Figure:
    import plotly.express as px

    fig = px.bar(
        agg,
        x="logits",
        y="percent",
        color="dtype",
        barmode="group",
        facet_col="device" if several_devices else None,
        text=agg["percent"].map(lambda v: f"{v:.3g}"),
        hover_data=["device", "dtype", "logits", "cases", "rows", "worst_case"],
        labels={"percent": "rows with a different top token (%)", "logits": "logits distribution"},
        category_orders={"dtype": _ordered(agg["dtype"], DTYPE_ORDER)},
        title=title,
    )
    fig.update_layout(height=440, legend={"title": {"text": "dtype"}})
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    return fig


def _weighted_mismatch(part: pd.DataFrame) -> pd.Series:
    weights = part["finite_rows"].fillna(0)
    share = part["top1_mismatch_ref"]
    mismatch = float((share * weights).sum() / weights.sum()) if weights.sum() > 0 else float(share.mean())
    return pd.Series(
        {
            "mismatch": mismatch,
            "cases": len(part),
            "rows": int(weights.sum()),
            "worst_case": float(share.max()),
        }
    )


# --------------------------------------------------------------------------------------------- sections


def _summary_section(ctx: _Context) -> Section:
    section = Section("summary", "Summary", intro=_summary_intro(ctx))
    section.blocks += _guard("measured on", lambda: _measured_on(ctx))
    section.blocks += _guard("fastest exact variant", lambda: _fastest_exact_table(ctx))
    section.blocks += _guard("argmax_ones trade", lambda: _argmax_table(ctx))
    section.blocks += _guard("top-1 mismatch", lambda: _mismatch_figure(ctx))
    section.blocks += _guard("measured bytes", lambda: _traffic_finding(ctx))
    return section


def _measured_on(ctx: _Context) -> list[Block]:
    """Where each device's figures come from: backend, runtime, driver, torch, triton, perfsuite commit."""
    rows = []
    for device, part in ctx.frame.groupby("device", sort=True):
        values = _frame_environment(part)
        rows.append([str(device), *(values.get(c, "") for c in SUMMARY_ENVIRONMENT)])
    if not rows:
        return []
    return [Table(["measured on", *SUMMARY_ENVIRONMENT], rows, "", css="compact")]


def _summary_intro(ctx: _Context) -> str:
    return (
        "Which variant returns exact probabilities fastest, what the inexact argmax_ones shortcut would save "
        "and what it costs in probability error, and how often the baseline's bf16/fp16 rounding changes the "
        "top token. Speedups: full_softmax's median over the variant's, same device, path, dtype and shape."
    )


def _summary_keys(ok: pd.DataFrame) -> list[str]:
    return ["device", *_varying(ok, ["backend"]), "dtype", "path", *_varying(ok, ["topk", "l2"])]


def _fastest_exact_table(ctx: _Context) -> list[Block]:
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
            text = f"{rec.variant} {_speedup_text(rec.speedup)}".strip()
            tip = f"{rec.variant}: {_fmt(rec.median_us)} µs, {_speedup_text(rec.speedup) or 'no baseline'}"
            cells[rec.vocab] = Cell(text, _speedup_class(rec.speedup), tip)
        labels = [
            _dim_text(k, v) if k in ("topk",) else _fmt(v)
            for k, v in zip([*keys, "batch"], group, strict=True)
        ]
        rows.append([*labels, *(cells[v] for v in vocabs)])
    columns = [*keys, "batch", *(f"V={_fmt(v)}" for v in vocabs)]
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
            spread = f": median {_speedup_text(mid)} over full_softmax ({_speedup_text(low)} to {high:.2f}×)"
        notes.append(
            Note(f"{device}: {name} is the fastest exact variant in {wins} of {len(part)} cells{spread}.")
        )
    return notes


def _argmax_table(ctx: _Context) -> list[Block]:
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
        f"{_speedup_text(best['speedup'])} at {_fmt(best['batch'])}×{_fmt(best['vocab'])}"
        if best is not None
        else ""
    )
    med, vs_exact = part["speedup"].median(), part["vs_exact"].median()
    best_vs_exact = part["vs_exact"].max()
    relerr = part["relerr"].max()
    return [
        *(_fmt(v) for v in group),
        str(len(part)),
        Cell(_speedup_text(med), _speedup_class(med)),
        where,
        Cell(_speedup_text(vs_exact), _speedup_class(vs_exact)),
        Cell(_speedup_text(best_vs_exact), _speedup_class(best_vs_exact)),
        Cell(_fmt(relerr), "differs" if relerr > 1e-3 else ""),
    ]


def _argmax_verdict(cases: pd.DataFrame) -> Note:
    vs = cases["vs_exact"].dropna()
    relerr = cases["relerr"].max()
    if vs.empty:
        return Note(f"{INEXACT_SHORTCUT}: no exact variant timed on the same cases to compare with.")
    share = (vs >= 1.05).mean()
    return Note(
        f"{INEXACT_SHORTCUT} beats the fastest exact variant by ≥ 5 % in {_pct(share)} of its cases "
        f"(median {_speedup_text(vs.median())}, best {_speedup_text(vs.max())}); its topk_p is off by up to "
        f"{_fmt(relerr)} relative to float64."
    )


def _plots_section(ctx: _Context) -> Section:
    section = Section("plots", "Plots")
    if ctx.ok.empty:
        section.blocks.append(Note("No ok cases with timings: nothing to plot."))
        return section
    for name, build in (
        ("latency", _latency_figures),
        ("speedup", _speedup_figures),
        ("bandwidth", _bandwidth_figures),
        ("memory", _memory_figure),
    ):
        section.blocks += _guard(name, lambda b=build: b(ctx))
    return section


def _counted(ctx: _Context) -> pd.DataFrame:
    """ok rows that went through `run --counters` (measured or with the reason they were not)."""
    counters = ctx.ok["counters"].astype(object)
    return ctx.ok[counters.notna() & counters.astype(str).str.strip().ne("")]


def _traffic_finding(ctx: _Context) -> list[Block]:
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


def _traffic_section(ctx: _Context) -> Section | None:
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
    section.blocks += _guard("traffic table", lambda: _traffic_table(counted))
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
                *(_fmt(rec[k]) for k in keys),
                _mib(rec["bytes_model"]),
                _mib(rec["bytes_measured"]),
                _mib(rec["bytes_read_measured"]),
                _mib(rec["bytes_write_measured"]),
                Cell(_fmt(rec["ratio"]), "loss" if bad else "", "model off by > 20 %" if bad else ""),
            ]
        )
    columns = [*keys, "model", "measured", "read", "written", "measured / model"]
    caption = f"{len(agg)} cases, {int(off.sum())} flagged (listed first)."
    return [*blocks, Table(columns, rows, caption, css="compact")]


def _parity_section(ctx: _Context) -> Section:
    section = Section(
        "parity",
        "Parity against float64",
        intro="Per variant, dtype and logits distribution: verdict counts over cases (pass | inexact | "
        "fail | n/a), the worst probability error, the worst tie-aware index agreement with the float64 "
        "reference, and the index agreement with full_softmax.",
    )
    section.blocks += _guard("parity table", lambda: _parity_table(ctx))
    section.blocks += _guard("parity problems", lambda: _problems_table(ctx))
    return section


def _parity_table(ctx: _Context) -> Block:
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
        row += [Cell(_fmt(rec["p_relerr_ref"]), "differs" if rec["p_relerr_ref"] > 1e-3 else "")]
        row += [Cell(_pct(rec["idx_tie_ref"]), "differs" if rec["idx_tie_ref"] < 1 else "")]
        row += [_pct(rec["idx_exact_base"]), _pct(rec["idx_tie_base"]), _pct(rec["top1_mismatch_ref"])]
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


def _problems_table(ctx: _Context) -> list[Block]:
    data = ctx.frame[(ctx.frame["verdict"] == "fail") & ctx.frame["problem"].notna()]
    if data.empty:
        return []
    grouped = data.groupby(["variant", "dtype", "logits", "problem"]).size().rename("cases").reset_index()
    grouped = grouped.sort_values("cases", ascending=False).head(MAX_REASON_GROUPS)
    return [_table(grouped, "What the failing parity checks found (most frequent first).")]


def _edge_case_section(edge_cases: pd.DataFrame | None) -> Section | None:
    if edge_cases is None:
        return None
    section = Section(
        "edge-cases",
        "Edge-case matrix",
        intro="Each variant on non-finite, tied and misaligned inputs. Cell: topk_index / topk_p. "
        "Highlighted: a different result from full_softmax (amber), an index outside [0, V) (red), an "
        "exception (red).",
    )
    section.blocks += _guard("edge-case matrix", lambda: _edge_case_table(edge_cases))
    return section


def _edge_case_table(edge: pd.DataFrame) -> list[Block]:
    needed = {"pattern", "variant", "index", "topk_p"}
    if edge.empty or not needed <= set(edge.columns):
        return [Note(f"Edge-case matrix: empty or without the columns {', '.join(sorted(needed))}.")]
    edge = edge.copy()
    for column in ("description", "dtype", "topk", "index_valid", "same_as_baseline", "error"):
        if column not in edge:
            edge[column] = np.nan
    row_keys = [k for k in ("pattern", "dtype", "topk") if edge[k].notna().any()]
    edge[row_keys] = edge[row_keys].astype(object).where(edge[row_keys].notna(), "-")
    edge["variant"] = edge["variant"].astype(str)
    notes, edge = _unavailable_variants(edge)
    variants = _variant_order(edge["variant"])
    cells = {(tuple(r[k] for k in row_keys), str(r["variant"])): r for r in edge.to_dict("records")}
    descriptions = edge.groupby("pattern", sort=False)["description"].first()
    rows = []
    has_description = bool(edge["description"].notna().any())
    for key in dict.fromkeys(tuple(r) for r in edge[row_keys].itertuples(index=False, name=None)):
        row: list[Cell | str] = [_fmt(v) for v in key]
        if has_description:
            row.insert(1, _fmt(descriptions.get(key[0])))
        row += [_edge_cell(cells.get((key, v))) for v in variants]
        rows.append(row)
    columns = [*row_keys, *variants]
    if has_description:
        columns.insert(1, "description")
    return [*notes, Table(columns, rows, f"{len(rows)} inputs × {len(variants)} variants.", css="matrix")]


def _unavailable_variants(edge: pd.DataFrame) -> tuple[list[Note], pd.DataFrame]:
    """Variants whose every cell is the same error (not runnable here): a note each instead of a column."""
    notes, drop = [], []
    for variant, part in edge.groupby("variant", sort=False):
        errors = part["error"].map(lambda e: e.strip() if isinstance(e, str) else "")
        if len(part) > 1 and errors.ne("").all() and errors.nunique() == 1:
            notes.append(Note(f"{variant}: not run on any input ({errors.iloc[0]})."))
            drop.append(variant)
    return notes, edge[~edge["variant"].isin(drop)]


def _edge_cell(rec: dict | None) -> Cell:
    if rec is None:
        return Cell("—", "", "not run")
    error = rec.get("error")
    if isinstance(error, str) and error.strip():
        first = error.strip().splitlines()[0]
        return Cell(f"error: {first if len(first) <= 60 else first[:59] + '…'}", "error", error)
    index, p = _fmt(rec.get("index")), _fmt(rec.get("topk_p"))
    text = f"{index} / {p}" if len(index) + len(p) < 28 else f"{index} /\n{p}"
    if _truthy(rec.get("index_valid")) is False:
        return Cell(text, "invalid", "index outside [0, V)")
    if _truthy(rec.get("same_as_baseline")) is False:
        return Cell(text, "differs", "differs from full_softmax")
    return Cell(text)


def _truthy(value: object) -> bool | None:
    """True / False from bools, numbers and 'true' / 'false' strings; None when unknown (NaN, empty)."""
    if value is None or _isnan(value) or value is pd.NA:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "yes", "1"):
            return True
        if text in ("false", "no", "0"):
            return False
        return None
    return bool(value)


def _skipped_section(ctx: _Context) -> Section:
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
    section.blocks.append(_table(shown, caption))
    if len(grouped) > len(shown):
        section.blocks.append(Note(f"{len(grouped) - len(shown)} smaller groups not listed."))
    return section


def _distinct(values: pd.Series) -> str:
    unique = _ordered(values, (BASELINE, INEXACT_SHORTCUT, *FACET_ORDER))
    return ", ".join(map(str, unique[:6])) + (" …" if len(unique) > 6 else "")


def _span(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return ""
    low, high = values.min(), values.max()
    return _fmt(low) if low == high else f"{_fmt(low)}–{_fmt(high)}"


def _results_section(ctx: _Context) -> Section:
    frame = ctx.frame
    empty = [c for c in frame.columns if frame[c].isna().all()]
    shown = frame.drop(columns=empty)
    section = Section("results", "All results")
    blocks: list[Block] = [_table(shown, f"{len(shown)} rows.")]
    if empty:
        blocks.append(Note(f"Columns without any value, left out: {', '.join(empty)}."))
    section.blocks.append(
        Details(f"Full results table ({len(shown)} rows × {shown.shape[1]} columns)", blocks)
    )
    return section


def _environment_section(ctx: _Context, environment: dict[str, str] | None) -> Section:
    values = _frame_environment(ctx.frame)
    values.update({str(k): str(v) for k, v in (environment or {}).items()})
    rows = [[key, value] for key, value in values.items() if value]
    table = Table(["", "value"], rows, "From the environment given to the report, else from the result rows.")
    return Section("environment", "Environment", [table])


def _frame_environment(frame: pd.DataFrame) -> dict[str, str]:
    values = {}
    for column in ENVIRONMENT_COLUMNS:
        unique = [v for v in dict.fromkeys(frame[column].tolist()) if not _isnan(v) and v not in ("-", "")]
        values[column] = ", ".join(map(str, unique[:5])) + (
            f" (+{len(unique) - 5})" if len(unique) > 5 else ""
        )
    stamps = sorted(str(v) for v in frame["timestamp"].dropna())
    values["timestamp"] = (
        stamps[0] if len(set(stamps)) == 1 else f"{stamps[0]} … {stamps[-1]}" if stamps else ""
    )
    return values


__all__ = ["DEFAULT_TITLE", "build_report", "figure_block", "missing_plot_note", "plots_available"]
