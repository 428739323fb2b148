"""Triton's CPU interpreter in the battery: which failures are the interpreter's, not the kernel's.

Under `TRITON_INTERPRET=1` Triton runs kernels in numpy, and converts bf16 subnormals to float32 wrongly
(a load-and-store kernel gives 1.14e-38 for 5.79e-39): a correct kernel then picks the wrong token on a
row of bf16 subnormals. The battery counts the interpreted launches of each call (`launches`); when a
call launched one, its logits are bf16 and it failed, the rows holding a subnormal are set aside and the
rest judged again: if they pass, the row's verdict is a skip that names the interpreter (`excused`),
never a FAIL. A failure on the other rows stays a FAIL; so does any failure of a call that launched no
interpreted kernel (torch ops convert bf16 correctly).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import torch

from perfsuite import kernels

MISCONVERTED = (torch.bfloat16,)
"""The logits dtypes whose subnormals the interpreter converts wrongly."""
REASON = (
    "Triton's CPU interpreter converts bf16 subnormals to float32 wrongly (a load-and-store kernel gives "
    "1.14e-38 for 5.79e-39): run it on a GPU"
)


INTERPRETER_MODULE = "triton.runtime.interpreter"


@contextlib.contextmanager
def launches() -> Iterator[list[int]]:
    """Counts, in the yielded one-item list, the Triton kernels launched in the interpreter inside the
    block (none without `TRITON_INTERPRET=1`). Triton is never imported here (a second import of its
    extension aborts the process: pytest's in-process runs drop it from `sys.modules`); a block that
    imports it (a selector that loads Triton on its first call, to launch a kernel) counts at least one."""
    count = [0]
    module = sys.modules.get(INTERPRETER_MODULE)
    if not kernels.interpreting() or module is None:
        yield count
        if kernels.interpreting() and INTERPRETER_MODULE in sys.modules:
            count[0] = max(count[0], 1)
        return
    interpreted = module.InterpretedFunction
    original = interpreted.run  # the simulated GPU's own wrapper, where it is installed

    def run(self, *args, **kwargs):
        count[0] += 1
        return original(self, *args, **kwargs)

    interpreted.run = run
    try:
        yield count
    finally:
        interpreted.run = original


def subnormal_rows(logits: torch.Tensor) -> torch.Tensor:
    """`[B]` bool: the rows holding a nonzero value below the dtype's smallest normal."""
    x = logits.cpu().float().abs()
    return ((x > 0) & (x < torch.finfo(logits.dtype).tiny)).any(dim=-1)


def excused(
    verdict_text: str,
    logits: torch.Tensor,
    launched: int,
    rejudge: Callable[[torch.Tensor], bool],
) -> str | None:
    """The skip reason when a failed call's failure is the interpreter's, else None: the call `launched`
    interpreted kernels, its logits are bf16, and `rejudge(rows)` (the call judged on the bool mask
    `rows` of its batch) passes on the rows without a subnormal."""
    if not launched or logits.dtype not in MISCONVERTED:
        return None
    subnormal = subnormal_rows(logits)
    if not bool(subnormal.any()) or not rejudge(~subnormal):
        return None
    rows = ", ".join(str(r) for r in subnormal.nonzero().flatten().tolist())
    calls = f"its calls launched {launched} interpreted Triton kernel(s)"
    return f"{REASON} ({calls}; {verdict_text} on subnormal rows {rows})"
