"""The Triton kernels compiled ahead of time for a GPU target, without a GPU: what each launch costs in
registers, spills, shared memory and occupancy, and how wide its global loads are.

Triton's interpreter (how the tests run the kernels on a CPU) checks what the kernels compute, not that
they compile: a kernel can pass there and fail on a device. This module compiles the launches a launch plan
makes, for NVIDIA (PTX and cubin, through the ptxas Triton ships) and AMD (AMDGCN) targets, specialised as
Triton specialises them at run time (16-byte aligned pointers, integers divisible by 16), and reads the
resources back: `cuobjdump -res-usage` on the cubin, the metadata the AMDGPU backend writes into the
assembly. The width of the loads shows whether the hot loop reads 16 bytes per instruction.

Needs Triton and its compiler (not the interpreter): call it with TRITON_INTERPRET unset.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import pandas as pd
import torch

from perfsuite.kernels import plan as plans

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
    registers: int | None = None  # per thread (CUDA) or VGPRs per lane (AMD)
    spill_bytes: int | None = None  # local memory / scratch per thread
    shared_bytes: int | None = None  # shared memory / LDS per block
    occupancy: float | None = None  # resident warps per SM / 64 (CUDA), waves per SIMD / 8 (AMD)
    widest_load_bytes: int | None = None  # the widest global load: 16 when the hot loop is vectorised
    error: str = ""


def cuobjdump() -> str | None:
    """The cuobjdump Triton ships (or one on PATH), to read a cubin's registers and spills."""
    import triton.backends.nvidia as nvidia

    bundled = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    return bundled if os.access(bundled, os.X_OK) else shutil.which("cuobjdump")


def _int_type(value: int) -> str:
    return "i32" if -(2**31) <= value < 2**31 else "i64"


def _signature(fn, scalars: dict, element_type: str) -> tuple[dict, dict]:
    """Triton's signature and specialisation attributes, as its launcher derives them at run time.

    `scalars`: each integer argument's (type, divisible by 16).
    """
    from perfsuite.kernels import topk_softmax

    signature, attrs = {}, {}
    for index, name in enumerate(fn.arg_names):
        if name in topk_softmax.POINTER_TYPES:
            kind = topk_softmax.POINTER_TYPES[name]
            signature[name] = "*" + (element_type if kind == "input" else kind)
            divisible = True  # fresh allocations are 16-byte aligned
        elif name in scalars:
            signature[name], divisible = scalars[name]
        else:
            signature[name] = "constexpr"
            divisible = False
        if divisible:
            attrs[(index,)] = [["tt.divisibility", 16]]
    return signature, attrs


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
    shared = int(compiled.metadata.shared)
    found = {"shared_bytes": shared, "widest_load_bytes": widest_load_ptx(compiled.asm["ptx"])}
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
    }


def _root_cause(error: BaseException) -> str:
    """The innermost exception of a chain, on one line: Triton wraps it in source excerpts."""
    while error.__cause__ is not None:
        error = error.__cause__
    return f"{type(error).__name__}: {' '.join(str(error).split())}"[:300]


@cache
def _compile(
    target_name: str, kernel: str, dtype: str, scalars: tuple, constants: tuple, num_warps: int
) -> tuple[Resources, dict[str, str]]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from perfsuite.kernels import topk_softmax

    constants = dict(constants)
    target = TARGETS[target_name]
    fn = topk_softmax.KERNELS[kernel]
    signature, attrs = _signature(fn, dict(scalars), dtype)
    shown = ", ".join(f"{k}={v}" for k, v in constants.items())
    row = Resources(target_name, kernel, dtype, constants["K"], shown, num_warps)
    try:
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs=constants, attrs=attrs),
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


def _compiled(target: str, launch, dtype: torch.dtype) -> tuple[Resources, dict[str, str]]:
    # integers enter the compiled kernel only through their type and divisibility by 16: one compile each
    scalars = tuple((name, (_int_type(v), v % 16 == 0)) for name, v in sorted(launch.scalars.items()))
    constants = tuple(launch.constants.items())
    return _compile(target, launch.kernel, TRITON_TYPES[dtype], scalars, constants, launch.num_warps)


def compile_launch(target: str, launch, dtype: torch.dtype) -> Resources:
    """Compile one `topk_softmax.Launch` for `target` with logits of `dtype` (pointers 16-byte aligned, as
    fresh allocations are)."""
    return _compiled(target, launch, dtype)[0]


def write_assembly(folder: Path, row: dict, texts: dict[str, str]) -> None:
    """`folder/<target>/<kernel>-<dtype>-<constants>-w<warps>[-unaligned-rows].<ext>` for each text."""
    constants = row["constants"].replace("=", "").replace(", ", "-")
    layout = "" if row["rows_aligned"] else "-unaligned-rows"
    stem = f"{row['kernel']}-{row['dtype']}-{constants}-w{row['num_warps']}{layout}"
    (folder / row["target"]).mkdir(parents=True, exist_ok=True)
    for ext, text in texts.items():
        (folder / row["target"] / f"{stem}.{ext}").write_text(text)


def plan_resources(
    shapes: Iterable[tuple[torch.dtype, int, int, int]],
    targets: Iterable[str] = DEFAULT_TARGETS,
    asm_dir: Path | None = None,
) -> pd.DataFrame:
    """One row per target, shape `(dtype, batch, vocab, k)` and launch: the plan `triton_auto` picks on
    that target for that shape, and each of its launches' resources. Launches that compile the same share
    one compile. With `asm_dir`, each distinct kernel's code is written there too (`write_assembly`).
    """
    from perfsuite.kernels import topk_softmax

    rows = []
    shapes = sorted(set(shapes), key=str)
    for target_name in targets:
        target = TARGETS[target_name]
        for dtype, batch, vocab, k in shapes:
            element_size = dtype.itemsize
            plan = plans.choose(batch, vocab, k, target.hardware, element_size)
            layout = topk_softmax.RowLayout.contiguous(vocab, element_size)
            for launch in topk_softmax.plan_launches(batch, vocab, k, plan, layout):
                found, texts = _compiled(target_name, launch, dtype)
                shape = {"batch": batch, "vocab": vocab, "plan": plan.kernel, "grid": launch.grid}
                shape["rows_aligned"] = vocab * element_size % 16 == 0  # every row starts 16-byte aligned
                rows.append({**shape, **asdict(found)})
                if asm_dir is not None:
                    write_assembly(asm_dir, rows[-1], texts)
    columns = ["target", "dtype", "batch", "vocab", "rows_aligned", "k", "plan", "kernel", "grid"]
    columns += ["num_warps", "constants"]
    frame = pd.DataFrame(rows)
    rest = [c for c in frame.columns if c not in columns]
    return frame[columns + rest] if len(frame) else frame
