"""`perfsuite kernels`: the launches a plan makes, compiled ahead of time with Triton's compiler (call it with
TRITON_INTERPRET unset) for NVIDIA (PTX, cubin) and AMD (AMDGCN) targets without a GPU, specialised as Triton
specialises them at run time (`Launch.specialisation`; pointers 16-byte aligned): registers, spills, shared
memory, occupancy and the load widths, overall and inside loops."""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch

from perfsuite.kernels import plan as plans

if TYPE_CHECKING:
    from perfsuite.kernels.topk_softmax import Launch

TRITON_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class Target:
    """A GPU architecture to compile for, with what occupancy and the launch plan need to know of it."""

    name: str
    backend: str  # Triton's: "cuda" or "hip"
    arch: int | str
    warp_size: int
    sms: int  # SMs / CUs of the part named in `parts` (the plan's wave sizing)
    parts: str
    max_warps: int = 64  # CUDA: resident warps per SM
    registers: int = 65536  # CUDA: 32-bit registers per SM
    shared_bytes: int = 0  # CUDA: shared memory per SM usable by blocks
    max_waves: int = 8  # AMD: waves per SIMD


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sm_80", "cuda", 80, 32, 108, "A100", shared_bytes=164 << 10),
    Target("sm_90", "cuda", 90, 32, 132, "H100, H200", shared_bytes=228 << 10),
    Target("sm_100", "cuda", 100, 32, 148, "B200", shared_bytes=228 << 10),
    Target("gfx90a", "hip", "gfx90a", 64, 110, "MI250X (one GCD)"),
    Target("gfx942", "hip", "gfx942", 64, 304, "MI300X, MI325X"),
    Target("gfx950", "hip", "gfx950", 64, 256, "MI355X"),
)}  # fmt: skip
DEFAULT_TARGETS = ("sm_90", "gfx942")

CUDA_BLOCKS_PER_SM = 32
CUDA_REGISTER_GRANULE = 256  # registers are allocated per warp in units of 256
CUDA_RESERVED_SHARED = 1024  # bytes the driver reserves per block (sm_80 and later)


@dataclass(frozen=True)
class Resources:
    """One compiled kernel: its resources on `target`, or why it did not compile."""

    target: str
    kernel: str
    dtype: str
    k: int
    constants: str
    num_warps: int
    integers: str = ""  # how Triton specialises the integer arguments: D (multiple of 16), 1, i32 / i64
    registers: int | None = None  # per thread (CUDA) or VGPRs per lane (AMD)
    spill_bytes: int | None = None  # local memory / scratch per thread
    shared_bytes: int | None = None  # shared memory / LDS per block
    occupancy: float | None = None  # resident warps per SM / 64 (CUDA), waves per SIMD / 8 (AMD)
    widest_load_bytes: int | None = None  # the widest global load: 16 when the hot loop is vectorised
    loop_load_bytes: int | None = None  # the narrowest global load inside a loop (None: no loop loads)
    error: str = ""


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """`cuobjdump FLAG` on a cubin, with the cuobjdump Triton ships (or one on PATH); "" without one."""
    import triton.backends.nvidia as nvidia

    tool = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    tool = tool if os.access(tool, os.X_OK) else shutil.which("cuobjdump")
    if tool is None:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        return subprocess.run([tool, flag, file.name], capture_output=True, text=True).stdout


def _signature(fn, scalars: tuple, element_type: str, constants: dict) -> tuple[dict, dict, dict]:
    """Triton's signature, constants and specialisation attributes, as its launcher derives them at run
    time for `scalars` (`Launch.specialisation`), every pointer 16-byte aligned (`aligned_base`)."""
    from perfsuite.kernels.topk_softmax import POINTER_TYPES

    by_name = {name: (kind, attr) for name, kind, attr in scalars}
    by_name |= {name: ("*" + (element_type if t == "input" else t), "D") for name, t in POINTER_TYPES.items()}
    kinds = {name: by_name.get(name, ("constexpr", None)) for name in fn.arg_names}
    found = {name: int(attr) for name, (kind, attr) in kinds.items() if kind == "constexpr" and attr}
    attrs = {(i,): [["tt.divisibility", 16]] for i, (_, attr) in enumerate(kinds.values()) if attr == "D"}
    return {name: kind for name, (kind, _) in kinds.items()}, {**constants, **found}, attrs


LOAD_BYTES_PTX = re.compile(r"\bld\.global\S*?(?:\.v(\d))?\.[bfsu](\d+)\b")
LOAD_BYTES_AMDGCN = re.compile(
    r"\b(?:global|buffer)_load_(dwordx[234]|dword|b128|b96|b64|b32|u?short|u16|b16|s?byte)"
)
AMDGCN_WIDTHS = {
    "dwordx4": 16, "b128": 16, "dwordx3": 12, "b96": 12, "dwordx2": 8, "b64": 8, "dword": 4, "b32": 4,
    "ushort": 2, "short": 2, "u16": 2, "b16": 2, "ubyte": 1, "byte": 1, "sbyte": 1,
}  # fmt: skip


def _load_widths(asm: str, backend: str) -> list[int]:
    """Bytes of each global load in PTX (`ld.global.v4.b32` -> 16) or AMDGCN (`global_load_ushort` -> 2)."""
    if backend == "cuda":
        return [int(v or 1) * int(bits) // 8 for v, bits in LOAD_BYTES_PTX.findall(asm)]
    return [AMDGCN_WIDTHS[w] for w in LOAD_BYTES_AMDGCN.findall(asm)]


def widest_load(asm: str, backend: str) -> int | None:
    return max(_load_widths(asm, backend), default=None)


BLOCK_LABEL = re.compile(r"^\s*(?:\$L__BB\d+_\d+:|\.LBB\d+_\d+:|(?://|;)\s*%bb\.\d+:)")
"""The first line of a basic block in LLVM's PTX or AMDGCN output; LLVM's comment on it names the loop
the block belongs to ("Loop Header", "in Loop", "Parent Loop")."""
LABEL_NAME = re.compile(r"^\s*(\$L__BB\d+_\d+|\.LBB\d+_\d+):")
BRANCH_TARGET = re.compile(r"\b(?:bra(?:\.uni)?|s_branch|s_cbranch_\w+)\s+(\$L__BB\d+_\d+|\.LBB\d+_\d+)")
"""A block's label and a branch's target: a branch back to a label above it closes a loop (LLVM does not
always comment a loop of one block, e.g. `$L__BB0_2: // %.lr.ph`)."""


def loop_code(asm: str) -> str:
    """The lines of `asm` (PTX or AMDGCN) inside loops: the blocks LLVM's comments place in a loop, and the
    lines from a label to a branch back to it; no labels."""
    lines = asm.splitlines()
    looped, inside, labels = [False] * len(lines), False, {}
    for i, line in enumerate(lines):
        inside = "Loop" in line if BLOCK_LABEL.match(line) else inside
        looped[i] = inside
        if named := LABEL_NAME.match(line):
            labels[named.group(1)] = i
        if (target := BRANCH_TARGET.search(line)) and target.group(1) in labels:  # a backward branch: a loop
            looped[labels[target.group(1)] + 1 : i + 1] = [True] * (i - labels[target.group(1)])
    return "\n".join(
        line for line, kept in zip(lines, looped, strict=True) if kept and not BLOCK_LABEL.match(line)
    )


def narrowest_loop_load(asm: str, backend: str) -> int | None:
    """Bytes of the narrowest global load inside a loop (`ld.global.b16` / `global_load_ushort` -> 2)."""
    return min(_load_widths(loop_code(asm), backend), default=None)


def _amdgcn_field(asm: str, pattern: str) -> int | None:
    found = re.search(pattern, asm)
    return int(found.group(1)) if found else None


def cuda_occupancy(target: Target, registers: int, shared: int, num_warps: int) -> float:
    """Theoretical occupancy (resident warps / max warps per SM), as CUDA's occupancy calculator gives it."""
    per_warp = math.ceil(registers * target.warp_size / CUDA_REGISTER_GRANULE) * CUDA_REGISTER_GRANULE
    by_registers = target.registers // max(per_warp * num_warps, 1)
    by_shared = target.shared_bytes // (shared + CUDA_RESERVED_SHARED) if shared else CUDA_BLOCKS_PER_SM
    blocks = min(by_registers, target.max_warps // num_warps, by_shared, CUDA_BLOCKS_PER_SM)
    return blocks * num_warps / target.max_warps


def _read(compiled, target: Target, num_warps: int) -> tuple[dict, dict[str, str]]:
    """What `Resources` reads of a compiled kernel (loads from its PTX / AMDGCN, registers and spills from
    cuobjdump or the AMDGCN's notes), and its code by file extension."""
    backend, shared = target.backend, int(compiled.metadata.shared)
    asm = compiled.asm["ptx" if backend == "cuda" else "amdgcn"]
    found = {"shared_bytes": shared, "widest_load_bytes": widest_load(asm, backend)}
    found["loop_load_bytes"] = narrowest_loop_load(asm, backend)
    if backend != "cuda":
        spills = [_amdgcn_field(asm, rf"\.{kind}_spill_count:\s+(\d+)") or 0 for kind in ("vgpr", "sgpr")]
        waves = _amdgcn_field(asm, r"; Occupancy: (\d+)")
        found["registers"] = _amdgcn_field(asm, r"\.vgpr_count:\s+(\d+)")
        found["spill_bytes"] = max(_amdgcn_field(asm, r"; ScratchSize: (\d+)") or 0, sum(spills))
        found["occupancy"] = None if waves is None else waves / target.max_waves
        return found, {"ttgir": compiled.asm["ttgir"], "amdgcn": asm}
    usage = _cuobjdump(compiled.asm["cubin"], "-res-usage")
    match = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", usage)
    if match:
        registers, stack, local = (int(g) for g in match.groups())
        occupancy = cuda_occupancy(target, registers, shared, num_warps)
        found |= {"registers": registers, "spill_bytes": stack + local, "occupancy": occupancy}
    sass = _cuobjdump(compiled.asm["cubin"], "-sass")
    return found, {"ttgir": compiled.asm["ttgir"], "ptx": asm, "sass": sass}


# (target, kernel, logits type, integer specialisation, constants, warps): one compiled kernel
CompileKey = tuple[str, str, str, tuple, tuple, int]
_COMPILED: dict[CompileKey, tuple[Resources, dict[str, str]]] = {}  # here or by `compile_ahead`'s workers


def _compile_now(key: CompileKey) -> tuple[Resources, dict[str, str]]:
    """Compile one key with Triton's compiler: its resources, and its code by file extension (TTGIR, then
    PTX and SASS or AMDGCN)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from perfsuite.kernels.topk_softmax import KERNELS

    target_name, kernel, dtype, scalars, constants, num_warps = key
    constants, target, fn = dict(constants), TARGETS[target_name], KERNELS[kernel]
    signature, constexprs, attrs = _signature(fn, scalars, dtype, constants)
    shown = ", ".join(f"{k}={v}" for k, v in constants.items())
    integers = ", ".join(f"{name}={attr or kind}" for name, kind, attr in scalars)
    row = Resources(target_name, kernel, dtype, constants.get("K", 1), shown, num_warps, integers)
    try:
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs=constexprs, attrs=attrs),
            target=GPUTarget(target.backend, target.arch, target.warp_size),
            options={"num_warps": num_warps},
        )
    except Exception as error:  # a compile error is this report's finding, not a crash
        while error.__cause__ is not None:  # the innermost, on one line: Triton wraps it in source excerpts
            error = error.__cause__
        return replace(row, error=f"{type(error).__name__}: {' '.join(str(error).split())}"[:300]), {}
    found, texts = _read(compiled, target, num_warps)
    return replace(row, **found), texts


def compile_key(target: str, launch: Launch, dtype: torch.dtype) -> CompileKey:
    """The key one `topk_softmax.Launch` compiles under for `target` with logits of `dtype`: integers enter
    the compiled kernel only through their specialisation (`Launch.specialisation`)."""
    constants = tuple(launch.constants.items())
    return (target, launch.kernel, TRITON_TYPES[dtype], launch.specialisation(), constants, launch.num_warps)


# The report's second view of each shape starts 3 elements past a 16-byte boundary (`buf[:, 3:3 + V]`):
# Triton sees the logits' own pointer as unaligned there, the kernels' base pointer as aligned.
ODD_VIEW_SHIFT = 3

Shape = tuple[torch.dtype, int, int, int]  # (dtype, batch, vocab, k)


def _planned(shapes: Iterable[Shape], targets: Iterable[str]) -> Iterator[tuple[str, Shape, dict, Launch]]:
    """(target, shape, row fields, launch) for every launch the report compiles: the plan `triton_auto`
    picks on each target for each shape (at k = 1 also `triton_argmax`'s), over a fresh tensor and a view
    ODD_VIEW_SHIFT elements past a 16-byte boundary."""
    from perfsuite.kernels.topk_softmax import plan_launches

    for target in targets:
        hw = plans.Hardware(TARGETS[target].sms, TARGETS[target].warp_size)  # no name: never a tuned plan
        for shape in sorted(set(shapes), key=str):
            dtype, batch, vocab, k = shape
            for selection in ("topk", "argmax") if k == 1 else ("topk",):
                plan = plans.choose(batch, vocab, k, hw, dtype.itemsize, selection)
                for shift in (0, ODD_VIEW_SHIFT):
                    aligned = shift == 0 and vocab * dtype.itemsize % 16 == 0  # every row on a boundary
                    fields = {"batch": batch, "vocab": vocab, "shift": shift, "plan": plan.kernel}
                    fields |= {"selection": selection, "rows_aligned": aligned}
                    layout = plans.RowLayout(vocab, shift, dtype.itemsize)
                    for launch in plan_launches(batch, vocab, k, plan, layout):
                        yield target, shape, fields, launch


def compile_ahead(
    shapes: Iterable[Shape], targets: Iterable[str] = DEFAULT_TARGETS, jobs: int | None = None
) -> int:
    """Compile the distinct kernels `plan_resources(shapes, targets)` needs and this process has not, in
    `jobs` processes (default: the CPUs; 1: here); returns how many. Interrupted, it keeps what finished."""
    planned = _planned(list(shapes), targets)
    keys = dict.fromkeys(compile_key(target, launch, shape[0]) for target, shape, _, launch in planned)
    keys = [key for key in keys if key not in _COMPILED]
    jobs = min(jobs or os.cpu_count() or 1, len(keys))
    if jobs <= 1:
        for key in keys:
            _COMPILED[key] = _compile_now(key)
        return len(keys)
    context = multiprocessing.get_context("spawn")  # no state of this process in the workers
    ignore_interrupts = functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN)  # the parent stops it
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=ignore_interrupts)
    try:
        futures = {pool.submit(_compile_now, key): key for key in keys}
        for future in as_completed(futures):
            _COMPILED[futures[future]] = future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return len(keys)


FRONT_COLUMNS = ["target", "dtype", "batch", "vocab", "shift", "rows_aligned", "k", "selection", "plan"]
FRONT_COLUMNS += ["kernel", "grid", "num_warps", "constants"]
REPORT_COLUMNS = ["target", "dtype", "kernel", "constants", "shift", "integers", "num_warps", "rows_aligned"]
REPORT_COLUMNS += ["registers", "spill_bytes", "shared_bytes", "occupancy", "widest_load_bytes"]
REPORT_COLUMNS += ["loop_load_bytes", "error"]
"""What makes a compiled kernel distinct in the printed report: its configuration and its findings."""


def plan_resources(
    shapes: Iterable[Shape], targets: Iterable[str] = DEFAULT_TARGETS, asm_dir: Path | None = None
) -> pd.DataFrame:
    """One row per target, shape, view and launch of `_planned`, with the launch's resources (compiled
    once per key); with `asm_dir`, each kernel's code is written there too, one file per text:
    `<target>/<kernel>-<dtype>-<constants>-w<warps>[-unaligned-rows][-shift<n>].<ext>`."""
    rows = []
    for target, shape, fields, launch in _planned(shapes, targets):
        if (key := compile_key(target, launch, shape[0])) not in _COMPILED:
            _COMPILED[key] = _compile_now(key)
        found, texts = _COMPILED[key]
        rows.append({**fields, "grid": launch.grid, **asdict(found)})
        if asm_dir is not None:
            constants, shift = found.constants.replace("=", "").replace(", ", "-"), fields["shift"]
            name = f"{launch.kernel}-{found.dtype}-{constants}-w{launch.num_warps}"
            name += "" if fields["rows_aligned"] else "-unaligned-rows"
            name += f"-shift{shift}" if shift else ""
            (asm_dir / target).mkdir(parents=True, exist_ok=True)
            for ext, text in texts.items():
                (asm_dir / target / f"{name}.{ext}").write_text(text)
    frame = pd.DataFrame(rows)
    return frame[FRONT_COLUMNS + [c for c in frame if c not in FRONT_COLUMNS]] if len(frame) else frame


def compile_report(
    shapes: Iterable[Shape], targets: Iterable[str], asm_dir: Path | None = None, jobs: int | None = None
) -> tuple[pd.DataFrame, bool]:
    """`perfsuite kernels`: every distinct kernel compiled in parallel (`compile_ahead`), then read back
    one target and shape at a time; an interruption keeps the rows so far. Returns (rows, interrupted)."""
    shapes, targets = sorted(set(shapes), key=str), list(targets)
    frames: list[pd.DataFrame] = []
    interrupted = False
    try:
        compile_ahead(shapes, targets, jobs)
        for target in targets:
            for shape in shapes:
                frames.append(plan_resources([shape], [target], asm_dir))
    except KeyboardInterrupt:
        interrupted = True
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=REPORT_COLUMNS)
    return table, interrupted


def distinct_kernels(table: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct kernel (`REPORT_COLUMNS`), with how many (target, shape, view) rows share it."""
    columns = [c for c in REPORT_COLUMNS if c in table]
    shapes = table.groupby(columns, sort=False, dropna=False).size().rename("shapes")
    return table.drop_duplicates(columns).join(shapes, on=columns)[[*columns, "shapes"]]


def problems(distinct: pd.DataFrame) -> pd.DataFrame:
    """The kernels that did not compile or spill registers."""
    return distinct[(distinct["error"] != "") | (distinct["spill_bytes"].fillna(0) > 0)]
