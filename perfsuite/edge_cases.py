"""The edge-case matrix: what each variant returns on non-finite and degenerate rows, side by side."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pandas as pd
import torch

from perfsuite import variants
from perfsuite.inputs import dtype_name
from perfsuite.parity import tolerance

EDGE_VOCAB = 1031  # misaligned, larger than one small block, small enough for the Triton interpreter

Pattern = Callable[[torch.Tensor], None]
Outputs = tuple[torch.Tensor, torch.Tensor]


def _at(*columns: int, value: float) -> Pattern:
    def poison(row: torch.Tensor) -> None:
        row[list(columns)] = value

    return poison


def _fill(value: float) -> Pattern:
    return lambda row: row.fill_(value)


def _masked(row: torch.Tensor) -> None:
    row[::2] = float("-inf")


def _one_hot(row: torch.Tensor) -> None:
    row.fill_(float("-inf"))
    row[700] = 0.0


def _huge(row: torch.Tensor) -> None:
    big = torch.finfo(row.dtype).max * 0.75
    row.clamp_(-1, 1).mul_(big)


PATTERNS: dict[str, tuple[str, Pattern]] = {
    "nan_one": ("one NaN in an ordinary row", _at(517, value=float("nan"))),
    "nan_all": ("every logit NaN", _fill(float("nan"))),
    "posinf_one": ("one +inf", _at(300, value=float("inf"))),
    "posinf_two": ("two +inf (a tie of infinities)", _at(900, 40, value=float("inf"))),
    "nan_and_posinf": (
        "a NaN and a +inf",
        lambda r: (_at(10, value=float("nan"))(r), _at(20, value=float("inf"))(r)),
    ),
    "neginf_half": ("every other logit -inf (a vocabulary mask)", _masked),
    "neginf_all": ("every logit -inf", _fill(float("-inf"))),
    "one_hot": ("one 0, the rest -inf", _one_hot),
    "all_equal": ("every logit equal (a V-way tie)", _fill(0.0)),
    "huge": ("finite logits near the dtype's largest value", _huge),
}


def edge_logits(dtype: torch.dtype, device: torch.device | str, vocab: int = EDGE_VOCAB) -> torch.Tensor:
    """One row per pattern, `[len(PATTERNS), vocab]`, gaussian elsewhere."""
    gen = torch.Generator(device=device).manual_seed(0)
    rows = torch.randn((len(PATTERNS), vocab), generator=gen, device=device).to(dtype)
    for row, (_, poison) in zip(rows, PATTERNS.values(), strict=True):
        poison(row)
    return rows


def _fmt(values: torch.Tensor) -> str:
    if values.dtype.is_floating_point:
        return "[" + ", ".join(f"{v:.4g}" for v in values.tolist()) + "]"
    return str(values.tolist())


def _same(a: Outputs, b: Outputs, dtype: torch.dtype) -> bool:
    """Same indices, and probabilities equal within the baseline's rounding (NaN equal to NaN)."""
    rtol, atol = tolerance("rounded", dtype)
    return bool(torch.equal(a[1], b[1]) and torch.allclose(a[0], b[0], rtol=rtol, atol=atol, equal_nan=True))


def _run(name: str, logits: torch.Tensor, k: int) -> Outputs | str:
    """A variant's outputs on the CPU, or why there are none (unavailable here, or the error it raised)."""
    variant = variants.get(name)
    reason = variant.available(logits.device)
    if reason:
        return reason
    try:
        p, idx = variant(logits, k)
    except Exception as exc:  # the matrix records crashes instead of stopping
        return f"{type(exc).__name__}: {exc}"
    return p.cpu(), idx.cpu()


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
