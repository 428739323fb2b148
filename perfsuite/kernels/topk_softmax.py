"""The launch code of the Triton kernels (`triton_code`): plans to grids, tensors to arguments. `run_plan`
runs a plan: the exact top-k softmax (`(topk_p float32 [B, k], topk_index int64 [B, k])`, fused in one pass
or split into `row_partials` and `merge_partials`) or the argmax (k = 1, `topk_p = 1.0`); docs/triton.md."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

import torch
import triton

from perfsuite.kernels import launch_log
from perfsuite.kernels import plan as plans
from perfsuite.kernels import triton_code as code
from perfsuite.kernels.plan import RowLayout


@dataclass(frozen=True)
class Partials:
    """Per-split summaries of a row, enough to finish an exact top-k softmax without the logits: partials of
    disjoint column ranges (splits, tensor-parallel ranks) concatenated along S merge (`merge_partials`)."""

    max: torch.Tensor  # [B, S]: the split's largest logit, NaN counted as +inf
    sumexp: torch.Tensor  # [B, S]: sum(exp(x - max)), NaN with a NaN or +inf
    values: torch.Tensor  # [B, S, k]: its top-k, -inf past its length
    indices: torch.Tensor  # [B, S, k]: their columns, -1 past its length


KERNELS = {name: getattr(code, f"_{name}_kernel") for name in code.UNSPECIALISED}  # "fused": _fused_kernel

# The element type of every kernel's pointer arguments, by name ("input": the logits').
POINTER_TYPES = {
    "base_ptr": "input", "p_ptr": "fp32", "max_ptr": "fp32", "sum_ptr": "fp32", "val_ptr": "fp32",
    "idx_ptr": "i64", "out_idx_ptr": "i64", "cand_ptr": "i64",
}  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """One kernel launch without its tensors: what runs it here, and what compiles it ahead of time."""

    kernel: str  # a key of KERNELS
    grid: tuple[int, ...]
    scalars: dict[str, int]  # runtime integer arguments, by name
    constants: dict[str, int]  # tl.constexpr arguments, by name
    num_warps: int

    def __call__(self, *tensors: torch.Tensor) -> None:
        """Launch on the pointer arguments `tensors`, in the kernel's order."""
        if launch_log.LOG_PATH is not None:  # the compile-plan proof: which keys each stage launches
            aligned = all(t.data_ptr() % plans.LOAD_BYTES == 0 for t in tensors)
            launch_log.record(self.compile_key(tensors[0].dtype), aligned)
        device, kernel = tensors[0].device, KERNELS[self.kernel]
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            kernel[self.grid](*tensors, **self.scalars, **self.constants, num_warps=self.num_warps)

    def specialisation(self) -> tuple[tuple[str, str, str], ...]:
        """The integer arguments as Triton's launcher specialises them: `(name, i32 / i64, "D")` for a
        multiple of 16, `(name, "constexpr", "1")` for a 1, else (or `UNSPECIALISED`) `(name, type, "")`."""
        found = []
        for name, value in sorted(self.scalars.items()):
            kind = "i32" if -(2**31) <= value < 2**31 else "i64"
            if name in code.UNSPECIALISED[self.kernel]:
                found.append((name, kind, ""))
            elif value == 1:
                found.append((name, "constexpr", "1"))
            else:
                found.append((name, kind, "D" if value % 16 == 0 else ""))
        return tuple(found)

    def compile_key(self, dtype: torch.dtype) -> tuple:
        """What Triton compiles this launch by, with logits of `dtype` and 16-byte aligned pointers (fresh
        outputs, `aligned_base`)."""
        logits = str(dtype) if "base_ptr" in KERNELS[self.kernel].arg_names else ""  # a kernel of the logits
        return (self.kernel, logits, tuple(self.constants.items()), self.specialisation(), self.num_warps)


def aligned_base(logits: torch.Tensor, layout: RowLayout) -> torch.Tensor:
    """The kernels' `base_ptr`: the logits' storage `layout.shift` elements before the first row."""
    shift = layout.shift
    return logits if shift == 0 else logits.as_strided((1,), (1,), logits.storage_offset() - shift)


def _slots(k: int) -> int:
    """Width of the running top-k vector: a power of two >= k (at least 2)."""
    return max(2, triton.next_power_of_2(k))


def _tile(block: int, columns: int) -> int:
    """`block` shrunk to the smallest power of two covering `columns` (at least 16)."""
    return max(16, min(block, triton.next_power_of_2(max(columns, 1))))


def scan_launch(
    kernel: str, batch: int, vocab: int, k: int, layout: RowLayout, plan: plans.Plan, index_offset: int = 0
) -> Launch:
    """A scan over `[batch, vocab]` on `plan`'s tunables: grid `(B,)`, or `(B, splits)` of `plan.chunk`
    columns for "partials" and "argmax_partials"."""
    scalars = {"V": vocab, "stride_row": layout.stride, "shift": layout.shift}
    grid, columns = (batch,), vocab
    if kernel.endswith("partials"):
        grid, columns = (batch, -(-vocab // plan.chunk)), plan.chunk
        scalars |= {"chunk": plan.chunk, "n_splits": grid[1]}
        scalars |= {"index_offset": index_offset} if kernel == "partials" else {}
    constants = {} if kernel.startswith("argmax") else {"K": k, "KP": _slots(k)}
    constants |= {
        "BLOCK": _tile(plan.block, columns),
        "VEC": plans.LOAD_BYTES // layout.element_size,
        "PREFETCH": plan.prefetch,
    }
    return Launch(kernel, grid, scalars, constants, plan.num_warps)


def merge_launch(batch: int, n_parts: int, k: int, part_k: int | None) -> Launch:
    """The merge of `n_parts` partials per row, top-`part_k` each, into the top-k (part_k None: the argmax's
    merge of packed candidates)."""
    part_tile = {"PART_TILE": _tile(plans.MERGE_PART_TILE, n_parts)}
    if part_k is None:
        return Launch("argmax_merge", (batch,), {"n_parts": n_parts}, part_tile, plans.MERGE_NUM_WARPS)
    constants = {"K": k, "KP": _slots(k), "TILE": _tile(plans.MERGE_TILE, n_parts * part_k), **part_tile}
    return Launch("merge", (batch,), {"n_parts": n_parts, "part_k": part_k}, constants, plans.MERGE_NUM_WARPS)


def plan_launches(batch: int, vocab: int, k: int, plan: plans.Plan, layout: RowLayout) -> list[Launch]:
    """The launches `run_plan` makes for this shape, layout and plan (an argmax plan ignores k)."""
    argmax = plan.selection == "argmax"
    if plan.kernel == "fused":
        return [scan_launch("argmax" if argmax else "fused", batch, vocab, k, layout, plan)]
    stage1 = scan_launch("argmax_partials" if argmax else "partials", batch, vocab, k, layout, plan)
    return [stage1, merge_launch(batch, stage1.grid[1], k, None if argmax else k)]


def _check(logits: torch.Tensor, k: int) -> None:
    if logits.dim() != 2 or logits.stride(-1) != 1:
        raise ValueError("logits must be [B, V] with contiguous rows (a row-strided view is fine)")
    if not 1 <= k <= logits.shape[1]:
        raise ValueError(f"k must be in [1, {logits.shape[1]}], got {k}")
    if logits.shape[1] >= 2**31:
        raise ValueError("vocabularies of 2^31 columns or more are not supported")


def _outputs(batch: int, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.empty((batch, k), dtype=torch.float32, device=device)
    return p, torch.empty((batch, k), dtype=torch.int64, device=device)


def row_partials(
    logits: torch.Tensor, k: int, *, chunk: int | None = None, block: int | None = None,
    num_warps: int | None = None, index_offset: int = 0, prefetch: bool | None = None,
) -> Partials:  # fmt: skip
    """Stage 1 of the split kernel, grid `(B, S)`, the tunables not given from the split plan; indices are
    global columns plus `index_offset` (a tensor-parallel rank's first vocabulary column)."""
    _check(logits, k)
    batch, vocab = logits.shape
    plan = plans.split_plan(batch, vocab, k, plans.hardware(logits.device), logits.element_size())
    given = {"chunk": chunk, "block": block, "num_warps": num_warps, "prefetch": prefetch}
    plan = replace(plan, **{name: value for name, value in given.items() if value is not None})
    layout = RowLayout.of(logits)
    launch = scan_launch("partials", batch, vocab, k, layout, plan, index_offset)
    grid, fp32 = launch.grid, {"dtype": torch.float32, "device": logits.device}
    parts = Partials(
        torch.empty(grid, **fp32), torch.empty(grid, **fp32), torch.empty((*grid, k), **fp32),
        torch.empty((*grid, k), dtype=torch.int64, device=logits.device),
    )  # fmt: skip
    if batch > 0:
        launch(aligned_base(logits, layout), *vars(parts).values())
    return parts


def merge_partials(partials: Partials, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 2: exact `(topk_p, topk_index)` from partials of disjoint column ranges (k: at most theirs)."""
    (batch, n_parts), part_k = partials.max.shape, partials.values.shape[2]
    k = part_k if k is None else k
    if not 1 <= k <= part_k:
        raise ValueError(f"k must be in [1, {part_k}] (the partials' k), got {k}")
    tensors = [t.contiguous() for t in vars(partials).values()]
    outputs = _outputs(batch, k, partials.max.device)
    if batch > 0:
        merge_launch(batch, n_parts, k, part_k)(*tensors, *outputs)
    return outputs


def run_plan(logits: torch.Tensor, k: int, plan: plans.Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernels a plan names with its tunables (an argmax plan: k must be 1)."""
    if plan.selection == "argmax" and k != 1:
        raise ValueError(f"the argmax kernels select k = 1, got {k}")
    if plan.kernel == "split" and plan.selection == "topk":
        tunables = {"chunk": plan.chunk, "block": plan.block, "num_warps": plan.num_warps}
        return merge_partials(row_partials(logits, k, **tunables, prefetch=plan.prefetch), k)
    _check(logits, k)
    batch, vocab = logits.shape
    layout = RowLayout.of(logits)
    outputs = _outputs(batch, k, logits.device)
    if batch > 0:
        scan, *merge = plan_launches(batch, vocab, k, plan, layout)
        if merge:  # the split argmax: one packed (key, column) candidate per split, then their max
            candidates = torch.empty(scan.grid, dtype=torch.int64, device=logits.device)
            scan(aligned_base(logits, layout), candidates)
            merge[0](candidates, *outputs)
        else:
            scan(aligned_base(logits, layout), *outputs)
    return outputs
