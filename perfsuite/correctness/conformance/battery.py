"""Running the battery on one selector: one row per (case, dtype, k), and the console table of them."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import pandas as pd
import torch

from perfsuite import variants
from perfsuite.core.dtypes import DTYPE_ALIASES, dtype_name
from perfsuite.correctness import edge_cases
from perfsuite.correctness.conformance import battery_patterns as catalogue
from perfsuite.correctness.conformance import consistency, graph_replay
from perfsuite.correctness.conformance.judge import PASS, Verdict, excused, interpreted_launches, judge
from perfsuite.variants.base import FP8_DTYPES, SUPPORTED_DTYPES, Variant, dtype_names

DTYPES = (*SUPPORTED_DTYPES, *FP8_DTYPES)  # every logits dtype the battery knows (float8 where torch has it)
COLUMNS = (
    "selector", "case", "dtype", "k", "verdict", "finding", "detail", "repeat", "batch_invariant",
    "batch_max_dp", "batch_worst", "batch_largest", "batch", "vocab", "row_stride", "offset", "description",
    "accuracy", "lowest_index_ties", "nan", "device", "seconds",
)  # fmt: skip
"""`repeat`: the second call bitwise equal to the first; `batch_invariant` etc.: the batch axis (cases marked
`batch_check`), `consistency.batch`."""
ALL_CASES = "*"
NEEDS_GPU = "graph capture needs a GPU (CUDA or HIP)"


def battery_dtype(name: str) -> torch.dtype:
    """A logits dtype by name or alias (`bf16`, `float8_e4m3fn`); ValueError naming the known ones."""
    known = {dtype_name(d): d for d in DTYPES}
    if (dtype := known.get(DTYPE_ALIASES.get(name, name))) is None:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(known)}")
    return dtype


def _row(variant: Variant, device: torch.device, dtype: torch.dtype, verdict: Verdict, **where) -> dict:
    return {
        "selector": variant.name, "case": ALL_CASES, "dtype": dtype_name(dtype), "k": pd.NA,
        "verdict": verdict.status, "finding": verdict.finding, "detail": verdict.detail,
        "accuracy": variant.accuracy, "lowest_index_ties": variant.lowest_index_ties, "nan": variant.nan,
        "device": str(device), **where,
    }  # fmt: skip


def rows(
    name: str, device: torch.device, *, cases: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] | None = None, quick: bool = False,
) -> Iterator[dict]:  # fmt: skip
    """The battery on the selector `name` (`variants.get`: KeyError or ExternalSelectorError), a row per
    (case, dtype, k) as it goes and one per dtype not claimed; `cases`: globs (ValueError if one matches
    none), `quick`: the quick subset."""
    variant = variants.get(name)
    chosen = catalogue.select(cases, quick=quick)
    wanted = [d for d in DTYPES if dtypes is None or d in set(dtypes)]
    if unavailable := variant.available(device):
        yield _row(variant, device, (*wanted, torch.float32)[0], Verdict("skip", detail=unavailable))
        return
    unclaimed = f"not claimed: the selector declares {dtype_names(variant.dtypes)}"
    for dtype in wanted:
        if dtype not in variant.dtypes:
            yield _row(variant, device, dtype, Verdict("skip", detail=unclaimed))
    for case in chosen:
        for dtype in (d for d in wanted if d in variant.dtypes):
            yield from _case_rows(variant, case, dtype, device, quick)


def _case_rows(
    variant: Variant, case: catalogue.Case, dtype: torch.dtype, device: torch.device, quick: bool
) -> Iterator[dict]:
    where = {"case": case.name, "description": case.description, "vocab": case.vocab}
    logits, reason, axis = None, NEEDS_GPU, None  # axis: the batch axis, built for the first k run
    if not case.graph or device.type == "cuda":
        try:
            logits = case.build(dtype, device)
            where |= dict(batch=logits.shape[0], row_stride=logits.stride(0), offset=logits.storage_offset())
        except catalogue.Skip as skip:
            reason = str(skip)
    for k in case.topks():
        start, checks = time.perf_counter(), {}
        if skip := variant.unclaimed_k(k) or (reason if logits is None else None):
            verdict = Verdict("skip", detail=skip)
        elif case.graph:
            verdict = graph_replay.replay_verdict(variant, logits, k)
        else:
            build = case.batch_check and axis is None
            axis = list(consistency.other_batches(logits, quick, case.batches)) if build else axis or []
            verdict, checks = _verdict(variant, logits, k, device, axis)
        seconds = round(time.perf_counter() - start, 4)
        yield _row(variant, device, dtype, verdict, **where, **checks, k=k, seconds=seconds)


def _verdict(
    variant: Variant, logits: torch.Tensor, k: int, device: torch.device, axis: list[consistency.Batch]
) -> tuple[Verdict, dict]:
    """The verdict on two calls on a side stream and the consistency columns: the first call judged (or
    excused), then the stream, the repeat and (none failed) the batch `axis`; the first failure found is the
    verdict's."""
    with consistency.on_side_stream(device) as elsewhere, interpreted_launches() as launched:
        first = edge_cases.call(variant, logits, k)
        second = None if isinstance(first, str) else edge_cases.call(variant, logits, k)
    if isinstance(first, str):
        return Verdict("FAIL", "crash", first), {}
    verdict = excused(judge(variant, logits, k, *first), launched[0], variant, logits, k, first)
    found = [verdict, Verdict("FAIL", "wrong_stream", elsewhere[0]) if elsewhere[0] else PASS]
    found.append(consistency.repeat(first, second))
    checks: dict = {"repeat": found[-1].status}
    if axis and all(v.status != "FAIL" for v in found):  # the batch axis, on an answer found right
        invariance, columns = consistency.batch(variant, axis, k, first, bool(launched[0]))
        checks |= columns
        found.append(invariance)
    return next((v for v in found if v.status == "FAIL"), verdict), checks


def run(name: str, device: torch.device | str = "cpu", **options) -> pd.DataFrame:
    """The battery's rows for the selector `name` as a table (`rows`' options)."""
    return frame(rows(name, torch.device(device), **options))


def frame(records: Iterable[dict]) -> pd.DataFrame:
    """Rows as a table with the battery's columns in order."""
    return pd.DataFrame.from_records(list(records), columns=list(COLUMNS))


def _overall(statuses: pd.Series) -> str:
    """A check's cell over the dtypes: FAIL if any failed, pass if any passed, empty where none ran."""
    seen = set(statuses.dropna()) - {""}
    return "FAIL" if "FAIL" in seen else "pass" if "pass" in seen else ""


def console(table: pd.DataFrame) -> str:
    """One selector's table for the terminal: a row per (case, k), a column per dtype, then each failure
    and each distinct skip reason in full."""
    if table.empty:
        return "no rows"
    head = table.iloc[0]
    ties = "lowest-index ties" if head["lowest_index_ties"] else "ties in any order"
    lines = [f"{head['selector']}: {head['accuracy']}, {ties}, NaN {head['nan']}, on {head['device']}"]
    cells = table[table["case"] != ALL_CASES].copy()
    if len(cells):
        cells["cell"] = cells["verdict"].where(cells["verdict"] != "FAIL", "FAIL " + cells["finding"])
        cells["k"] = cells["k"].astype("Int64")
        wide = cells.pivot_table(
            index=["case", "k"], columns="dtype", values="cell", aggfunc="first", sort=False
        )
        wide = wide.rename_axis(columns=None).fillna("")
        cells["failed_at"] = pd.to_numeric(cells["batch_worst"]).where(cells["batch_invariant"] == "FAIL")
        checked = cells.groupby(["case", "k"], sort=False).agg(
            repeat=("repeat", _overall), batch=("batch_invariant", _overall), dp=("batch_max_dp", "max"),
            failed_at=("failed_at", "min"), largest=("batch_largest", "max"),
        )  # fmt: skip
        wide["repeat"] = checked["repeat"]
        # aligned on (case, k), as repeat: FAIL at the first batch that differs (over the dtypes), or pass
        # up to the largest batch run and the largest topk_p difference
        passed = "pass to " + checked["largest"].map("{:.0f} ".format) + checked["dp"].map("{:.2g}".format)
        failed = "FAIL at " + checked["failed_at"].map("{:.0f}".format)
        wide["batch"] = failed.where(checked["batch"] == "FAIL", passed.where(checked["batch"] != "", ""))
        lines.append(wide.reset_index().to_string(index=False))
    for r in table[table["verdict"] == "FAIL"].itertuples():
        lines.append(f"  FAIL {r.case} {r.dtype} k={'-' if pd.isna(r.k) else int(r.k)}: {r.detail}")
    for (case, reason), part in table[table["verdict"] == "skip"].groupby(["case", "detail"], sort=False):
        lines.append(f"  skip {case} ({', '.join(dict.fromkeys(part['dtype']))}): {reason}")
    tally = table["verdict"].value_counts()
    counts = ", ".join(f"{int(tally[v])} {v}" for v in ("pass", "FAIL", "skip") if v in tally)
    lines.append(f"{head['selector']}: {counts} in {table['seconds'].sum():.1f} s")
    return "\n".join(lines)
