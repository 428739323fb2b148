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
from perfsuite.correctness.conformance import consistency, graph_replay, interpreter, streams
from perfsuite.correctness.conformance.judge import PASS, Verdict, failed, judge, skipped
from perfsuite.variants.base import FP8_DTYPES, SUPPORTED_DTYPES, Variant, dtype_names

DTYPES = (*SUPPORTED_DTYPES, *FP8_DTYPES)
"""Every logits dtype the battery knows (the float8 ones where this torch has them)."""
COLUMNS = (
    "selector", "case", "dtype", "k", "verdict", "finding", "detail", "repeat", "batch_invariant",
    "batch_max_dp", "batch", "vocab", "row_stride", "offset", "description", "accuracy",
    "lowest_index_ties", "nan", "device", "seconds",
)  # fmt: skip
"""`repeat`: the second call bitwise equal to the first (pass, FAIL, or empty where not called);
`batch_invariant`: the same indices with the rows reversed and row 0 alone (cases marked `batch_check`),
`batch_max_dp` the largest `topk_p` difference seen there (`consistency`)."""
ALL_CASES = "*"
NEEDS_GPU = "graph capture needs a GPU (CUDA or HIP)"


def battery_dtype(name: str) -> torch.dtype:
    """A logits dtype by name or alias (`bf16`, `float8_e4m3fn`); ValueError naming the known ones."""
    known = {dtype_name(d): d for d in DTYPES}
    dtype = known.get(DTYPE_ALIASES.get(name, name))
    if dtype is None:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(known)}")
    return dtype


def gpu_available() -> bool:
    """Whether torch sees a CUDA or ROCm device (or the simulated one)."""
    return torch.cuda.is_available()


def _row(variant: Variant, device: torch.device, dtype: torch.dtype, verdict: Verdict, **where) -> dict:
    return {
        "selector": variant.name,
        "case": ALL_CASES,
        "dtype": dtype_name(dtype),
        "k": pd.NA,
        "verdict": verdict.status,
        "finding": verdict.finding,
        "detail": verdict.detail,
        "accuracy": variant.accuracy,
        "lowest_index_ties": variant.lowest_index_ties,
        "nan": variant.nan,
        "device": str(device),
        **where,
    }


def rows(
    name: str,
    device: torch.device,
    *,
    cases: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    quick: bool = False,
) -> Iterator[dict]:
    """Run the battery on the selector `name` (loaded through `variants.get`), yielding a row per
    (case, dtype, k) as it goes, and a row per dtype the selector does not claim.

    `cases`: glob patterns of case names (all when None); `quick`: the quick subset. A `KeyError` or
    `ExternalSelectorError` when `name` does not load, a `ValueError` when `cases` matches none."""
    variant = variants.get(name)
    chosen = catalogue.select(cases, quick=quick)
    wanted = [d for d in DTYPES if dtypes is None or d in set(dtypes)]
    unavailable = variant.available(device)
    if unavailable:
        yield _row(variant, device, wanted[0] if wanted else torch.float32, skipped(unavailable))
        return
    claimed = [d for d in wanted if d in variant.dtypes]
    for dtype in wanted:
        if dtype not in variant.dtypes:
            reason = f"not claimed: the selector declares {dtype_names(variant.dtypes)}"
            yield _row(variant, device, dtype, skipped(reason))
    for case in chosen:
        for dtype in claimed:
            yield from _case_rows(variant, case, dtype, device)


def _case_rows(
    variant: Variant, case: catalogue.Case, dtype: torch.dtype, device: torch.device
) -> Iterator[dict]:
    where = {"case": case.name, "description": case.description, "vocab": case.vocab}
    logits: torch.Tensor | None = None
    reason = ""
    if case.graph and device.type != "cuda":
        reason = NEEDS_GPU
    else:
        try:
            logits = case.build(dtype, device)
        except catalogue.Skip as skip:
            reason = str(skip)
    for k in case.topks():
        start = time.perf_counter()
        unclaimed = variant.unclaimed_k(k)
        checks: dict = {}
        if unclaimed:
            verdict = skipped(unclaimed)
        elif logits is None:
            verdict = skipped(reason)
        elif case.graph:
            verdict = graph_replay.replay_verdict(variant, logits, k)
        else:
            verdict, checks = _verdict(variant, logits, k, device, batch_check=case.batch_check)
        layout = {}
        if logits is not None:
            offset = logits.storage_offset()
            layout = {"batch": logits.shape[0], "row_stride": logits.stride(0), "offset": offset}
        seconds = round(time.perf_counter() - start, 4)
        yield _row(variant, device, dtype, verdict, **where, **layout, **checks, k=k, seconds=seconds)
    del logits


def _verdict(
    variant: Variant, logits: torch.Tensor, k: int, device: torch.device, *, batch_check: bool
) -> tuple[Verdict, dict]:
    """The verdict on two calls on a side stream (on a GPU), and the consistency columns: the first call
    judged (a failure the interpreter caused is a skip that says so), then the stream, the repeat and,
    for `batch_check` cases, batch invariance; the first failure found is the verdict's."""

    def twice() -> tuple:
        with interpreter.launches() as launched:
            first = edge_cases.call(variant, logits, k)
            second = None if isinstance(first, str) else edge_cases.call(variant, logits, k)
        return first, second, launched[0]

    (first, second, launched), elsewhere = streams.on_side_stream(device, twice)
    if isinstance(first, str):
        return failed("crash", first), {}
    verdict = judge(variant, logits, k, *first)
    if verdict.status == "FAIL":
        host = logits.cpu()
        rejudge = lambda rows: judge(variant, host[rows], k, first[0][rows], first[1][rows]) == PASS  # noqa: E731
        excuse = interpreter.excused(verdict.text, logits, launched, rejudge)
        if excuse:
            verdict = skipped(excuse)
    repeat = consistency.repeat(first, second)
    checks: dict = {"repeat": repeat.status}
    found = [("wrong_stream", elsewhere)] if elsewhere else []
    if repeat.status == "FAIL":
        found.append(("not_repeatable", repeat.detail))
    if batch_check:
        invariance = consistency.batch(variant, logits, k, first)
        checks |= {"batch_invariant": invariance.status, "batch_max_dp": invariance.max_dp}
        if invariance.status == "FAIL":
            found.append(("batch_variant", invariance.detail))
    if found and verdict.status != "FAIL":
        verdict = failed(*found[0])
    return verdict, checks


def run(name: str, device: torch.device | str = "cpu", **options) -> pd.DataFrame:
    """The battery's rows for the selector `name` as a table (`rows`' options)."""
    return frame(rows(name, torch.device(device), **options))


def frame(records: Iterable[dict]) -> pd.DataFrame:
    """Rows as a table with the battery's columns in order."""
    return pd.DataFrame.from_records(list(records), columns=list(COLUMNS))


def counts(table: pd.DataFrame) -> str:
    """ "n pass, n FAIL, n skip" of a table (zeros left out)."""
    tally = table["verdict"].value_counts()
    return ", ".join(f"{int(tally[v])} {v}" for v in ("pass", "FAIL", "skip") if v in tally) or "no rows"


def console(table: pd.DataFrame) -> str:
    """One selector's table for the terminal: a row per (case, k), a column per dtype, then each failure
    and each distinct skip reason in full."""
    if table.empty:
        return "no rows"
    variant = table.iloc[0]
    ties = "lowest-index ties" if variant["lowest_index_ties"] else "ties in any order"
    nan = f"NaN {variant['nan']}"
    lines = [f"{variant['selector']}: {variant['accuracy']}, {ties}, {nan}, on {variant['device']}"]
    cells = table[table["case"] != ALL_CASES].copy()
    if len(cells):
        cells["cell"] = [
            f"FAIL {r.finding}" if r.verdict == "FAIL" else r.verdict for r in cells.itertuples()
        ]
        cells["k"] = cells["k"].astype("Int64")
        wide = cells.pivot_table(
            index=["case", "k"], columns="dtype", values="cell", aggfunc="first", sort=False
        ).fillna("")
        wide.columns.name = None
        checked = cells.groupby(["case", "k"], sort=False).agg(
            repeat=("repeat", _overall), batch=("batch_invariant", _overall), dp=("batch_max_dp", "max")
        )
        shown = [
            f"{b} {dp:.2g}" if b and pd.notna(dp) else b
            for b, dp in zip(checked["batch"], checked["dp"], strict=True)
        ]
        wide["repeat"] = checked["repeat"]
        wide["batch"] = pd.Series(shown, index=checked.index)  # aligned on (case, k), as repeat
        lines.append(wide.reset_index().to_string(index=False))
    for r in table[table["verdict"] == "FAIL"].itertuples():
        lines.append(f"  FAIL {r.case} {r.dtype} k={_k(r.k)}: {r.detail}")
    skips = table[table["verdict"] == "skip"]
    for (case, reason), part in skips.groupby(["case", "detail"], sort=False):
        dtypes = ", ".join(dict.fromkeys(part["dtype"]))
        lines.append(f"  skip {case} ({dtypes}): {reason}")
    lines.append(f"{variant['selector']}: {counts(table)} in {table['seconds'].sum():.1f} s")
    return "\n".join(lines)


def _overall(statuses: pd.Series) -> str:
    """A check's cell over the dtypes: FAIL if any failed, pass if any passed, empty where none ran."""
    seen = set(statuses.dropna()) - {""}
    return "FAIL" if "FAIL" in seen else "pass" if "pass" in seen else ""


def _k(value: object) -> str:
    return "-" if pd.isna(value) else str(int(value))
