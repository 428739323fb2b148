"""The edge-case matrix: what each variant returns on non-finite and degenerate rows, side by side.

Its row patterns (`PATTERNS`) and its guarded call (`call`) are also the conformance battery's
(`perfsuite.correctness.conformance`): the matrix shows what each variant returns, the battery judges it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pandas as pd
import torch

from perfsuite import variants
from perfsuite.core.console import first_line
from perfsuite.core.dtypes import dtype_name
from perfsuite.correctness.parity import tolerance

EDGE_TOPK = (1, 4)  # the k of the edge-case matrix `perfsuite run` makes after the sweep
EDGE_VOCAB = 1031  # misaligned, larger than one small block, small enough for the Triton interpreter

Pattern = Callable[[torch.Tensor, torch.dtype], None]
"""Rewrites a float32 row in place, for logits of the given dtype (magnitudes are the dtype's)."""
Outputs = tuple[torch.Tensor, torch.Tensor]


def _at(*columns: int, value: float) -> Pattern:
    def poison(row: torch.Tensor, dtype: torch.dtype) -> None:
        row[list(columns)] = value

    return poison


def _fill(value: float) -> Pattern:
    return lambda row, dtype: row.fill_(value)


def _masked(row: torch.Tensor, dtype: torch.dtype) -> None:
    row[::2] = float("-inf")


def _one_hot(row: torch.Tensor, dtype: torch.dtype) -> None:
    row.fill_(float("-inf"))
    row[700] = 0.0


def _huge(row: torch.Tensor, dtype: torch.dtype) -> None:
    big = torch.finfo(dtype).max * 0.75
    row.clamp_(-1, 1).mul_(big)


def _both(*patterns: Pattern) -> Pattern:
    def poison(row: torch.Tensor, dtype: torch.dtype) -> None:
        for pattern in patterns:
            pattern(row, dtype)

    return poison


PATTERNS: dict[str, tuple[str, Pattern]] = {
    "nan_one": ("one NaN in an ordinary row", _at(517, value=float("nan"))),
    "nan_all": ("every logit NaN", _fill(float("nan"))),
    "posinf_one": ("one +inf", _at(300, value=float("inf"))),
    "posinf_two": ("two +inf (a tie of infinities)", _at(900, 40, value=float("inf"))),
    "nan_and_posinf": ("a NaN and a +inf", _both(_at(10, value=float("nan")), _at(20, value=float("inf")))),
    "neginf_half": ("every other logit -inf (a vocabulary mask)", _masked),
    "neginf_all": ("every logit -inf", _fill(float("-inf"))),
    "one_hot": ("one 0, the rest -inf", _one_hot),
    "all_equal": ("every logit equal (a V-way tie)", _fill(0.0)),
    "huge": ("finite logits near the dtype's largest value", _huge),
}


def pattern_rows(patterns: Iterable[Pattern], dtype: torch.dtype, vocab: int = EDGE_VOCAB) -> torch.Tensor:
    """One float32 row per pattern, `[n, vocab]` on the CPU, gaussian where the pattern leaves it (seed 0):
    cast it to `dtype` to get the logits."""
    patterns = list(patterns)
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn((len(patterns), vocab), generator=gen)
    for row, poison in zip(rows, patterns, strict=True):
        poison(row, dtype)
    return rows


def edge_logits(dtype: torch.dtype, device: torch.device | str, vocab: int = EDGE_VOCAB) -> torch.Tensor:
    """One row per pattern, `[len(PATTERNS), vocab]`, gaussian elsewhere."""
    rows = pattern_rows((poison for _, poison in PATTERNS.values()), dtype, vocab)
    return rows.to(dtype).to(device)


def _fmt(values: torch.Tensor) -> str:
    if values.dtype.is_floating_point:
        return "[" + ", ".join(f"{v:.4g}" for v in values.tolist()) + "]"
    return str(values.tolist())


def _same(a: Outputs, b: Outputs, dtype: torch.dtype) -> bool:
    """Same indices, and probabilities equal within the baseline's rounding (NaN equal to NaN)."""
    rtol, atol = tolerance("rounded", dtype)
    return bool(torch.equal(a[1], b[1]) and torch.allclose(a[0], b[0], rtol=rtol, atol=atol, equal_nan=True))


def call(variant: variants.Variant, logits: torch.Tensor, k: int) -> Outputs | str:
    """The variant's outputs copied to the CPU (copies on a CPU too: a selector writing into preallocated
    outputs overwrites them on its next call), or the exception it raised, in one line."""
    try:
        p, idx = variant(logits, k)
        return p.to("cpu", copy=True), idx.to("cpu", copy=True)
    except Exception as exc:  # recorded as a crash instead of stopping
        return first_line(exc).rstrip(": ")


def _run(name: str, logits: torch.Tensor, k: int) -> Outputs | str:
    """A variant's outputs on the CPU, or why there are none (unavailable here, or the error it raised)."""
    variant = variants.get(name)
    return variant.available(logits.device) or variant.unclaimed_k(k) or call(variant, logits, k)


def _cell(out: Outputs | str, base: Outputs | str, row: int, vocab: int, dtype: torch.dtype) -> dict:
    if isinstance(out, str):
        return {"index": "", "topk_p": "", "index_valid": False, "same_as_baseline": False, "error": out}
    p, idx = out[0][row], out[1][row]
    same = not isinstance(base, str) and _same((p, idx), (base[0][row], base[1][row]), dtype)
    valid = bool(((idx >= 0) & (idx < vocab)).all())
    return {
        "index": _fmt(idx),
        "topk_p": _fmt(p),
        "index_valid": valid,
        "same_as_baseline": same,
        "error": "",
    }


def matrix(
    dtypes: Iterable[torch.dtype], ks: Iterable[int], names: Iterable[str], device: torch.device | str
) -> pd.DataFrame:
    """Run every variant (and the baseline) on every pattern; one row per (pattern, dtype, k, variant)."""
    names = list(dict.fromkeys([variants.BASELINE, *names]))
    records = []
    for dtype in dtypes:
        logits = edge_logits(dtype, device)
        for k in ks:
            outputs = {name: _run(name, logits, k) for name in names}
            for row, (pattern, (description, _)) in enumerate(PATTERNS.items()):
                for name, out in outputs.items():
                    where = {
                        "pattern": pattern,
                        "description": description,
                        "dtype": dtype_name(dtype),
                        "topk": k,
                        "variant": name,
                    }
                    base = outputs[variants.BASELINE]
                    records.append({**where, **_cell(out, base, row, logits.shape[1], dtype)})
    return pd.DataFrame.from_records(records)
