"""The edge-case matrix section: each variant's result on non-finite, tied and misaligned inputs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfsuite.report import formatting as fmt
from perfsuite.report.blocks import Block, Cell, Note, Section, Table, guard
from perfsuite.report.kernel_context import BASELINE, variant_order


def kind_sections(frame: pd.DataFrame, samples: pd.DataFrame | None = None) -> list[Section]:
    """The edge-case kind's part of the report (`core.kinds`): its matrix, none without rows."""
    return [section(frame)] if len(frame) else []


def section(edge_cases: pd.DataFrame) -> Section:
    """The edge-case matrix (`perfsuite.correctness.edge_cases` rows) as a section."""
    intro = (
        "Each variant on non-finite, tied and misaligned inputs. Cell: topk_index / topk_p. "
        f"Highlighted: a different result from {BASELINE} (amber), an index outside [0, V) (red), an "
        "exception (red)."
    )
    blocks = guard("edge-case matrix", lambda: _edge_case_table(edge_cases))
    return Section("edge-cases", "Edge-case matrix", blocks, intro=intro)


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
    variants = variant_order(edge["variant"])
    cells = {(tuple(r[k] for k in row_keys), str(r["variant"])): r for r in edge.to_dict("records")}
    descriptions = edge.groupby("pattern", sort=False)["description"].first()
    rows = []
    has_description = bool(edge["description"].notna().any())
    for key in dict.fromkeys(tuple(r) for r in edge[row_keys].itertuples(index=False, name=None)):
        row: list[Cell | str] = [fmt.number(v) for v in key]
        if has_description:
            row.insert(1, fmt.number(descriptions.get(key[0])))
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
    index, p = fmt.number(rec.get("index")), fmt.number(rec.get("topk_p"))
    text = f"{index} / {p}" if len(index) + len(p) < 28 else f"{index} /\n{p}"
    if _truthy(rec.get("index_valid")) is False:
        return Cell(text, "invalid", "index outside [0, V)")
    if _truthy(rec.get("same_as_baseline")) is False:
        return Cell(text, "differs", f"differs from {BASELINE}")
    return Cell(text)


def _truthy(value: object) -> bool | None:
    """A typed boolean cell: None where unknown."""
    return None if value is None or value is pd.NA or fmt.is_nan(value) else bool(value)
