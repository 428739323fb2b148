"""The edge-case matrix section: each variant's result on non-finite, tied and misaligned inputs."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import Block, Cell, Note, Section, Table, guard, guarded_section
from perfsuite.report.kernel_context import BASELINE, variant_order
from perfsuite.results.columns import flag


def section(edge_cases: pd.DataFrame) -> Section:
    """The edge-case matrix (`perfsuite.correctness.edge_cases` rows) as a section."""
    intro = (
        "Each variant on non-finite, tied and misaligned inputs. Cell: topk_index / topk_p. "
        f"Highlighted: a different result from {BASELINE} (amber), an index outside [0, V) (red), an "
        "exception (red)."
    )
    blocks = guard("edge-case matrix", lambda: _edge_case_table(edge_cases))
    return Section("edge-cases", "Edge-case matrix", blocks, intro=intro)


kind_sections = partial(guarded_section, "edge-cases", "Edge-case matrix", section)
"""The edge-case kind's part of the report (`core.kinds`): its matrix, none without rows."""


def _edge_case_table(edge: pd.DataFrame) -> list[Block]:
    needed = {"pattern", "variant", "index", "topk_p"}
    if edge.empty or not needed <= set(edge.columns):
        return [Note(f"Edge-case matrix: empty or without the columns {', '.join(sorted(needed))}.")]
    optional = ("description", "dtype", "topk", "index_valid", "same_as_baseline", "error")
    edge = edge.assign(**{column: np.nan for column in optional if column not in edge})
    row_keys = [k for k in ("pattern", "dtype", "topk") if edge[k].notna().any()]
    edge[row_keys] = edge[row_keys].astype(object).where(edge[row_keys].notna(), "-")
    edge["variant"] = edge["variant"].astype(str)
    notes, edge = _unavailable_variants(edge)
    variants = variant_order(edge["variant"])
    cells = {(tuple(r[k] for k in row_keys), str(r["variant"])): r for r in edge.to_dict("records")}
    descriptions = edge.groupby("pattern", sort=False)["description"].first()
    described = ["description"] if edge["description"].notna().any() else []  # a column after the pattern
    rows: list[list[Cell | str]] = []
    for key in dict.fromkeys(tuple(r) for r in edge[row_keys].itertuples(index=False, name=None)):
        about = [fmt.number(descriptions.get(key[0])) for _ in described]
        row = [*map(fmt.number, key[:1]), *about, *map(fmt.number, key[1:])]
        rows.append([*row, *(_edge_cell(cells.get((key, v))) for v in variants)])
    columns = [*row_keys[:1], *described, *row_keys[1:], *variants]
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
    index, p = fmt.number(rec.get("index")), fmt.number(rec.get("topk_p"))
    text = f"{index} / {p}" if len(index) + len(p) < 28 else f"{index} /\n{p}"
    if flag(rec.get("index_valid")) is False:
        return Cell(text, "invalid", "index outside [0, V)")
    if flag(rec.get("same_as_baseline")) is False:
        return Cell(text, "differs", f"differs from {BASELINE}")
    return Cell(text)
