"""The edge-case matrix: what each variant returns on non-finite and degenerate rows, side by side. Its row
patterns (`PATTERNS`) and its guarded call (`call`) are also the conformance battery's, which judges them."""

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
INF, NAN, ALL = float("inf"), float("nan"), slice(None)

Pattern = Callable[[torch.Tensor, torch.dtype], None]  # rewrites a float32 row in place for logits of a dtype
Outputs = tuple[torch.Tensor, torch.Tensor]


def _writes(*writes: tuple[object, float]) -> Pattern:
    def poison(row: torch.Tensor, dtype: torch.dtype) -> None:
        for columns, value in writes:
            row[columns] = value

    return poison


def _huge(row: torch.Tensor, dtype: torch.dtype) -> None:
    row.clamp_(-1, 1).mul_(torch.finfo(dtype).max * 0.75)


PATTERNS: dict[str, tuple[str, Pattern]] = {
    "nan_one": ("one NaN in an ordinary row", _writes((517, NAN))),
    "nan_all": ("every logit NaN", _writes((ALL, NAN))),
    "posinf_one": ("one +inf", _writes((300, INF))),
    "posinf_two": ("two +inf (a tie of infinities)", _writes(([900, 40], INF))),
    "nan_and_posinf": ("a NaN and a +inf", _writes((10, NAN), (20, INF))),
    "neginf_half": ("every other logit -inf (a vocabulary mask)", _writes((slice(None, None, 2), -INF))),
    "neginf_all": ("every logit -inf", _writes((ALL, -INF))),
    "one_hot": ("one 0, the rest -inf", _writes((ALL, -INF), (700, 0.0))),
    "all_equal": ("every logit equal (a V-way tie)", _writes((ALL, 0.0))),
    "huge": ("finite logits near the dtype's largest value", _huge),
}


def pattern_rows(patterns: list[Pattern], dtype: torch.dtype) -> torch.Tensor:
    """One float32 row per pattern, `[n, EDGE_VOCAB]` on the CPU, gaussian where the pattern leaves it (seed
    0): cast it to `dtype` to get the logits."""
    rows = torch.randn((len(patterns), EDGE_VOCAB), generator=torch.Generator().manual_seed(0))
    for row, poison in zip(rows, patterns, strict=True):
        poison(row, dtype)
    return rows


def edge_logits(dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """One row per pattern, `[len(PATTERNS), EDGE_VOCAB]`, gaussian elsewhere."""
    return pattern_rows([poison for _, poison in PATTERNS.values()], dtype).to(dtype).to(device)


def call(variant: variants.Variant, logits: torch.Tensor, k: int) -> Outputs | str:
    """The variant's outputs copied to the CPU (copies on a CPU too: a selector writing into preallocated
    outputs overwrites them on its next call), or the exception it raised, in one line."""
    try:
        p, idx = variant(logits, k)
        return p.to("cpu", copy=True), idx.to("cpu", copy=True)
    except Exception as exc:  # recorded as a crash instead of stopping
        return first_line(exc).rstrip(": ")


def _run(variant: variants.Variant, logits: torch.Tensor, k: int) -> Outputs | str:
    """`call`, or why the matrix does not run the variant: unavailable on the device, or k not claimed."""
    return variant.available(logits.device) or variant.unclaimed_k(k) or call(variant, logits, k)


def _fmt(values: torch.Tensor) -> str:
    if values.dtype.is_floating_point:
        return "[" + ", ".join(f"{v:.4g}" for v in values.tolist()) + "]"
    return str(values.tolist())


def _cell(out: Outputs | str, base: Outputs | str, row: int, dtype: torch.dtype) -> dict:
    """One variant's outputs on one row; the same as the baseline's where the indices are equal and the
    probabilities within the baseline's rounding (NaN equal to NaN)."""
    if isinstance(out, str):
        return {"index": "", "topk_p": "", "index_valid": False, "same_as_baseline": False, "error": out}
    p, idx = out[0][row], out[1][row]
    rtol, atol = tolerance("rounded", dtype)
    same = not isinstance(base, str) and torch.equal(idx, base[1][row])
    same = same and torch.allclose(p, base[0][row], rtol=rtol, atol=atol, equal_nan=True)
    valid = bool(((idx >= 0) & (idx < EDGE_VOCAB)).all())
    return dict(index=_fmt(idx), topk_p=_fmt(p), index_valid=valid, same_as_baseline=same, error="")


def matrix(
    dtypes: Iterable[torch.dtype], ks: Iterable[int], names: Iterable[str], device: torch.device | str
) -> pd.DataFrame:
    """Run every variant (and the baseline) on every pattern; one row per (pattern, dtype, k, variant)."""
    names = list(dict.fromkeys([variants.BASELINE, *names]))
    records = []
    for dtype in dtypes:
        logits = edge_logits(dtype, device)
        for k in ks:
            outputs = {name: _run(variants.get(name), logits, k) for name in names}
            for row, (pattern, (description, _)) in enumerate(PATTERNS.items()):
                for name, out in outputs.items():
                    where = {"pattern": pattern, "description": description, "dtype": dtype_name(dtype)}
                    cell = _cell(out, outputs[variants.BASELINE], row, dtype)
                    records.append({**where, "topk": k, "variant": name, **cell})
    return pd.DataFrame.from_records(records)
