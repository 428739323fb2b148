"""The Triton kernels compiled ahead of time for a GPU target, without a GPU: what each launch costs in
registers, spills, shared memory and occupancy, and how wide its global loads are.

Triton's interpreter (how the tests run the kernels on a CPU) checks what the kernels compute, not that
they compile: a kernel can pass there and fail on a device. This module compiles the launches a launch plan
makes, for NVIDIA (PTX and cubin, through the ptxas Triton ships) and AMD (AMDGCN) targets, specialised as
Triton specialises them at run time (`Launch.specialisation`: 16-byte aligned pointers, the logits'
base pointer included for every view; integers by value where the kernel lets Triton), and reads the
resources back: `cuobjdump -res-usage` on the cubin, the metadata the AMDGPU backend writes into the
assembly. The width of the loads, overall and inside loops, shows whether the hot loop reads 16 bytes
per instruction.

Needs Triton and its compiler (not the interpreter): call it with TRITON_INTERPRET unset.
"""

from __future__ import annotations

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch

from perfsuite.kernels import plan as plans

if TYPE_CHECKING:
    from perfsuite.kernels.topk_softmax import Launch, RowLayout

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

    @property
    def hardware(self) -> plans.Hardware:
        """What the launch plan sees of this target (no name: the heuristic plan, never a tuned one)."""
        return plans.Hardware(self.sms, self.warp_size)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("sm_80", "cuda", 80, 32, 108, "A100", shared_bytes=164 << 10),
        Target("sm_90", "cuda", 90, 32, 132, "H100, H200", shared_bytes=228 << 10),
        Target("sm_100", "cuda", 100, 32, 148, "B200", shared_bytes=228 << 10),
        Target("gfx90a", "hip", "gfx90a", 64, 110, "MI250X (one GCD)"),
        Target("gfx942", "hip", "gfx942", 64, 304, "MI300X, MI325X"),
        Target("gfx950", "hip", "gfx950", 64, 256, "MI355X"),
    )
}
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


def cuobjdump() -> str | None:
    """The cuobjdump Triton ships (or one on PATH), to read a cubin's registers and spills."""
    import triton.backends.nvidia as nvidia

    bundled = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    return bundled if os.access(bundled, os.X_OK) else shutil.which("cuobjdump")


def _signature(fn, scalars: tuple, element_type: str, constants: dict) -> tuple[dict, dict, dict]:
    """Triton's signature, constants and specialisation attributes, as its launcher derives them at run
    time for `scalars` (`Launch.specialisation`). Pointers are 16-byte aligned: the outputs are fresh
    allocations, the logits' base pointer is the 16-byte boundary below any view (`aligned_base`)."""
    from perfsuite.kernels import topk_softmax

    by_name = {name: (kind, attr) for name, kind, attr in scalars}
    signature, constants, attrs = {}, dict(constants), {}
    for index, name in enumerate(fn.arg_names):
        if name in topk_softmax.POINTER_TYPES:
            kind = topk_softmax.POINTER_TYPES[name]
            signature[name] = "*" + (element_type if kind == "input" else kind)
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif name in by_name:
            kind, attr = by_name[name]
            signature[name] = kind
            if kind == "constexpr":
                constants[name] = int(attr)
            elif attr == "D":
                attrs[(index,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "constexpr"
    return signature, constants, attrs


LOAD_BYTES_PTX = re.compile(r"\bld\.global\S*?(?:\.v(\d))?\.[bfsu](\d+)\b")
LOAD_BYTES_AMDGCN = re.compile(
    r"\b(?:global|buffer)_load_(dwordx[234]|dword|b128|b96|b64|b32|u?short|u16|b16|s?byte)"
)
AMDGCN_WIDTHS = {
    "dwordx4": 16,
    "b128": 16,
    "dwordx3": 12,
    "b96": 12,
    "dwordx2": 8,
    "b64": 8,
    "dword": 4,
    "b32": 4,
    "ushort": 2,
    "short": 2,
    "u16": 2,
    "b16": 2,
    "ubyte": 1,
    "byte": 1,
    "sbyte": 1,
}


def widest_load_ptx(ptx: str) -> int | None:
    """Bytes of the widest `ld.global` in PTX (`ld.global.v4.b32` -> 16)."""
    widths = [int(v or 1) * int(bits) // 8 for v, bits in LOAD_BYTES_PTX.findall(ptx)]
    return max(widths, default=None)


def widest_load_amdgcn(asm: str) -> int | None:
    """Bytes of the widest global or buffer load in AMDGCN assembly."""
    return max((AMDGCN_WIDTHS[w] for w in LOAD_BYTES_AMDGCN.findall(asm)), default=None)


BLOCK_LABEL = re.compile(r"^\s*(?:\$L__BB\d+_\d+:|\.LBB\d+_\d+:|(?://|;)\s*%bb\.\d+:)")
"""The first line of a basic block in LLVM's PTX or AMDGCN output; LLVM's comment on it names the loop
the block belongs to ("Loop Header", "in Loop", "Parent Loop")."""


LABEL_NAME = re.compile(r"^\s*(\$L__BB\d+_\d+|\.LBB\d+_\d+):")
BRANCH_TARGET = re.compile(r"\b(?:bra(?:\.uni)?|s_branch|s_cbranch_\w+)\s+(\$L__BB\d+_\d+|\.LBB\d+_\d+)")
"""A block's label and a branch's target: a branch back to a label above it closes a loop (LLVM does not
always comment a loop of one block, e.g. `$L__BB0_2: // %.lr.ph`)."""


def loop_code(asm: str) -> str:
    """The lines of `asm` (PTX or AMDGCN) inside loops: the blocks LLVM's comments place in a loop, and the
    lines from a label to a branch back to it."""
    lines = asm.splitlines()
    looped = [False] * len(lines)
    inside, labels = False, {}
    for i, line in enumerate(lines):
        if BLOCK_LABEL.match(line):
            inside = "Loop" in line
        else:
            looped[i] = inside
        named = LABEL_NAME.match(line)
        if named:
            labels[named.group(1)] = i
        target = BRANCH_TARGET.search(line)
        if target and target.group(1) in labels:  # a backward branch: the lines since its label loop
            for j in range(labels[target.group(1)] + 1, i + 1):
                looped[j] = looped[j] or not BLOCK_LABEL.match(lines[j])
    return "\n".join(line for line, kept in zip(lines, looped, strict=True) if kept)


def narrowest_loop_load(asm: str, backend: str) -> int | None:
    """Bytes of the narrowest global load inside a loop (`ld.global.b16` / `global_load_ushort` -> 2)."""
    code = loop_code(asm)
    if backend == "cuda":
        widths = [int(v or 1) * int(bits) // 8 for v, bits in LOAD_BYTES_PTX.findall(code)]
    else:
        widths = [AMDGCN_WIDTHS[w] for w in LOAD_BYTES_AMDGCN.findall(code)]
    return min(widths, default=None)


def _amdgcn_field(asm: str, pattern: str) -> int | None:
    found = re.search(pattern, asm)
    return int(found.group(1)) if found else None


def cuda_occupancy(target: Target, registers: int, shared: int, num_warps: int) -> float:
    """Theoretical occupancy (resident warps / max warps per SM), as CUDA's occupancy calculator gives it."""
    per_warp = math.ceil(registers * target.warp_size / CUDA_REGISTER_GRANULE) * CUDA_REGISTER_GRANULE
    by_registers = target.registers // max(per_warp * num_warps, 1)
    by_warps = target.max_warps // num_warps
    by_shared = target.shared_bytes // (shared + CUDA_RESERVED_SHARED) if shared else CUDA_BLOCKS_PER_SM
    blocks = min(by_registers, by_warps, by_shared, CUDA_BLOCKS_PER_SM)
    return blocks * num_warps / target.max_warps


def _sass(cubin: bytes) -> str:
    """The cubin's SASS (`cuobjdump -sass`), "" without cuobjdump."""
    tool = cuobjdump()
    if tool is None:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        return subprocess.run([tool, "-sass", file.name], capture_output=True, text=True).stdout


def _assembly(compiled, target: Target) -> dict[str, str]:
    """What a kernel engineer reads, by file extension: Triton's GPU IR, then PTX and SASS or AMDGCN."""
    texts = {"ttgir": compiled.asm["ttgir"]}
    if target.backend == "cuda":
        return {**texts, "ptx": compiled.asm["ptx"], "sass": _sass(compiled.asm["cubin"])}
    return {**texts, "amdgcn": compiled.asm["amdgcn"]}


def _cuda_resources(compiled, target: Target, num_warps: int) -> dict:
    shared, ptx = int(compiled.metadata.shared), compiled.asm["ptx"]
    found = {
        "shared_bytes": shared,
        "widest_load_bytes": widest_load_ptx(ptx),
        "loop_load_bytes": narrowest_loop_load(ptx, "cuda"),
    }
    tool = cuobjdump()
    if tool is None:
        return found
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([tool, "-res-usage", cubin.name], capture_output=True, text=True).stdout
    match = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", usage)
    if match:
        registers, stack, local = (int(g) for g in match.groups())
        found |= {
            "registers": registers,
            "spill_bytes": stack + local,
            "occupancy": cuda_occupancy(target, registers, shared, num_warps),
        }
    return found


def _amd_resources(compiled, target: Target) -> dict:
    asm = compiled.asm["amdgcn"]
    spills = [_amdgcn_field(asm, rf"\.{kind}_spill_count:\s+(\d+)") for kind in ("vgpr", "sgpr")]
    scratch = _amdgcn_field(asm, r"; ScratchSize: (\d+)")
    waves = _amdgcn_field(asm, r"; Occupancy: (\d+)")
    return {
        "registers": _amdgcn_field(asm, r"\.vgpr_count:\s+(\d+)"),
        "spill_bytes": max(scratch or 0, sum(s or 0 for s in spills)),
        "shared_bytes": int(compiled.metadata.shared),
        "occupancy": None if waves is None else waves / target.max_waves,
        "widest_load_bytes": widest_load_amdgcn(asm),
        "loop_load_bytes": narrowest_loop_load(asm, "hip"),
    }


def _root_cause(error: BaseException) -> str:
    """The innermost exception of a chain, on one line: Triton wraps it in source excerpts."""
    while error.__cause__ is not None:
        error = error.__cause__
    return f"{type(error).__name__}: {' '.join(str(error).split())}"[:300]


CompileKey = tuple[str, str, str, tuple, tuple, int]
"""(target, kernel, logits type, integer specialisation, constants, warps): one compiled kernel."""

_COMPILED: dict[CompileKey, tuple[Resources, dict[str, str]]] = {}
"""Every kernel compiled in this process (or by `compile_ahead`'s workers), with its code."""


def _compile_now(key: CompileKey) -> tuple[Resources, dict[str, str]]:
    """Compile one key with Triton's compiler: its resources and its code (`_assembly`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from perfsuite.kernels import topk_softmax

    target_name, kernel, dtype, scalars, constants, num_warps = key
    constants = dict(constants)
    target = TARGETS[target_name]
    fn = topk_softmax.KERNELS[kernel]
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
        return Resources(**{**asdict(row), "error": _root_cause(error)}), {}
    found = (
        _cuda_resources(compiled, target, num_warps)
        if target.backend == "cuda"
        else _amd_resources(compiled, target)
    )
    return Resources(**{**asdict(row), **found}), _assembly(compiled, target)


def compile_key(target: str, launch, dtype: torch.dtype) -> CompileKey:
    """The key one `topk_softmax.Launch` compiles under for `target` with logits of `dtype`: integers enter
    the compiled kernel only through their specialisation (`Launch.specialisation`)."""
    constants = tuple(launch.constants.items())
    return (target, launch.kernel, TRITON_TYPES[dtype], launch.specialisation(), constants, launch.num_warps)


def _compiled(key: CompileKey) -> tuple[Resources, dict[str, str]]:
    if key not in _COMPILED:
        _COMPILED[key] = _compile_now(key)
    return _COMPILED[key]


def compile_launch(target: str, launch, dtype: torch.dtype) -> Resources:
    """Compile one `topk_softmax.Launch` for `target` with logits of `dtype`, as Triton specialises it at
    run time (`Launch.specialisation`; pointers 16-byte aligned)."""
    return _compiled(compile_key(target, launch, dtype))[0]


def write_assembly(folder: Path, row: dict, texts: dict[str, str]) -> None:
    """`folder/<target>/<kernel>-<dtype>-<constants>-w<warps>[-unaligned-rows][-shift<n>].<ext>` for each
    text."""
    constants = row["constants"].replace("=", "").replace(", ", "-")
    layout = "" if row["rows_aligned"] else "-unaligned-rows"
    layout += f"-shift{row['shift']}" if row["shift"] else ""
    stem = f"{row['kernel']}-{row['dtype']}-{constants}-w{row['num_warps']}{layout}"
    (folder / row["target"]).mkdir(parents=True, exist_ok=True)
    for ext, text in texts.items():
        (folder / row["target"] / f"{stem}.{ext}").write_text(text)


ODD_VIEW_SHIFT = 3
"""The report's second view of each shape starts 3 elements past a 16-byte boundary (`buf[:, 3:3 + V]`,
`buf.view(-1)[3:]`): Triton sees the logits' own pointer as unaligned there, the kernels' base pointer
as aligned (`aligned_base`)."""


def layouts(vocab: int, element_size: int) -> list[RowLayout]:
    """The views the report compiles each shape for: a fresh `[B, V]` tensor, and the same rows starting
    ODD_VIEW_SHIFT elements past a 16-byte boundary."""
    from perfsuite.kernels import topk_softmax

    fresh = topk_softmax.RowLayout.contiguous(vocab, element_size)
    return [fresh, topk_softmax.RowLayout(vocab, ODD_VIEW_SHIFT, element_size)]


Shape = tuple[torch.dtype, int, int, int]
"""(dtype, batch, vocab, k)"""


def _planned(shapes: Iterable[Shape], targets: Iterable[str]) -> Iterator[tuple[str, Shape, dict, Launch]]:
    """(target, shape, row fields, launch) for every launch the report compiles: the plan `triton_auto`
    picks on each target for each shape, and at k = 1 also `triton_argmax`'s (the same plan on the argmax
    kernels), over each view (`layouts`)."""
    from perfsuite.kernels import topk_softmax

    for target_name in targets:
        target = TARGETS[target_name]
        for shape in sorted(set(shapes), key=str):
            dtype, batch, vocab, k = shape
            element_size = dtype.itemsize
            selections: tuple[plans.Selection, ...] = ("topk", "argmax") if k == 1 else ("topk",)
            for selection in selections:
                plan = plans.choose(batch, vocab, k, target.hardware, element_size, selection)
                for layout in layouts(vocab, element_size):
                    fields = {"batch": batch, "vocab": vocab, "shift": layout.shift, "plan": plan.kernel}
                    fields["selection"] = selection
                    # every row starts on a 16-byte boundary
                    fields["rows_aligned"] = layout.shift == 0 and vocab * element_size % 16 == 0
                    for launch in topk_softmax.plan_launches(batch, vocab, k, plan, layout):
                        yield target_name, shape, fields, launch


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool


def compile_all(keys: Iterable[CompileKey], jobs: int | None = None) -> int:
    """Compile each of `keys` not compiled yet in this process, in `jobs` processes (default: the CPU
    count; 1: here). Returns how many were compiled.

    Interrupted (KeyboardInterrupt), it keeps what finished, cancels the rest and re-raises.
    """
    keys = [key for key in dict.fromkeys(keys) if key not in _COMPILED]
    jobs = min(jobs or os.cpu_count() or 1, len(keys))
    if jobs <= 1:
        for key in keys:
            _compiled(key)
        return len(keys)
    context = multiprocessing.get_context("spawn")  # no state of this process in the workers
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_ignore_interrupts)
    try:
        futures = {pool.submit(_compile_now, key): key for key in keys}
        for future in as_completed(futures):
            _COMPILED[futures[future]] = future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return len(keys)


def compile_ahead(
    shapes: Iterable[Shape], targets: Iterable[str] = DEFAULT_TARGETS, jobs: int | None = None
) -> int:
    """Compile the distinct kernels `plan_resources(shapes, targets)` needs (`compile_all`), so that it
    then only reads them back. Returns how many were compiled."""
    shapes = list(shapes)
    return compile_all((compile_key(t, x, shape[0]) for t, shape, _, x in _planned(shapes, targets)), jobs)


def plan_resources(
    shapes: Iterable[Shape],
    targets: Iterable[str] = DEFAULT_TARGETS,
    asm_dir: Path | None = None,
) -> pd.DataFrame:
    """One row per target, shape `(dtype, batch, vocab, k)`, view (`layouts`: `shift` 0 and
    ODD_VIEW_SHIFT) and launch: the plan `triton_auto` picks on that target for that shape (at k = 1 also
    `triton_argmax`'s: `selection` "argmax"), and each of its launches' resources. Launches that Triton
    specialises the same share one compile (`compile_ahead` compiles them in parallel first). With
    `asm_dir`, each distinct kernel's code is written there too (`write_assembly`).
    """
    rows = []
    for target_name, shape, fields, launch in _planned(shapes, targets):
        found, texts = _compiled(compile_key(target_name, launch, shape[0]))
        rows.append({**fields, "grid": launch.grid, **asdict(found)})
        if asm_dir is not None:
            write_assembly(asm_dir, rows[-1], texts)
    columns = ["target", "dtype", "batch", "vocab", "shift", "rows_aligned", "k", "selection", "plan"]
    columns += ["kernel", "grid"]
    columns += ["num_warps", "constants"]
    frame = pd.DataFrame(rows)
    rest = [c for c in frame.columns if c not in columns]
    return frame[columns + rest] if len(frame) else frame


REPORT_COLUMNS = [
    "target",
    "dtype",
    "kernel",
    "constants",
    "shift",
    "integers",
    "num_warps",
    "rows_aligned",
    "registers",
    "spill_bytes",
    "shared_bytes",
    "occupancy",
    "widest_load_bytes",
    "loop_load_bytes",
    "error",
]
"""What makes a compiled kernel distinct in the printed report: its configuration and its findings."""


def compile_report(
    shapes: Iterable[Shape], targets: Iterable[str], asm_dir: Path | None = None, jobs: int | None = None
) -> tuple[pd.DataFrame, bool]:
    """`perfsuite kernels`: every distinct kernel compiled in parallel (`compile_ahead`), then read back
    one target and shape at a time; an interruption keeps the rows so far. Returns (rows, interrupted)."""
    shapes, targets = sorted(set(shapes), key=str), list(targets)
    frames: list[pd.DataFrame] = []
    try:
        compile_ahead(shapes, targets, jobs)
        for target in targets:
            for shape in shapes:
                frames.append(plan_resources([shape], [target], asm_dir))
    except KeyboardInterrupt:
        return _concat(frames), True
    return _concat(frames), False


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=REPORT_COLUMNS)


def distinct_kernels(table: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct kernel (`REPORT_COLUMNS`), with how many (target, shape, view) rows share it."""
    columns = [c for c in REPORT_COLUMNS if c in table]
    shapes = table.groupby(columns, sort=False, dropna=False).size().rename("shapes")
    return table.drop_duplicates(columns).join(shapes, on=columns)[[*columns, "shapes"]]


def problems(distinct: pd.DataFrame) -> pd.DataFrame:
    """The kernels that did not compile or spill registers."""
    return distinct[(distinct["error"] != "") | (distinct["spill_bytes"].fillna(0) > 0)]
