"""`perfsuite kernels` and `perfsuite.kernels.resources`: the Triton kernels compiled ahead of time for
NVIDIA and AMD targets on this CPU machine (Triton's compiler, not its interpreter, in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli, kernels
from perfsuite.core import exits
from perfsuite.kernels import resources

needs_triton = pytest.mark.skipif(not kernels.triton_installed(), reason=kernels.NO_TRITON)

# The kernels the tests read, each compiled once for sm_90 and gfx942 (about 60: every bf16 plan,
# the fp32 fused kernel, the one that spilled once).
SCENARIO = """
name = "kernels"
[[sweep]]
variants = ["triton_auto"]
dtypes = ["bfloat16"]
vocab = [151666, 151936]   # misaligned and aligned rows
batch = [1, 256]           # split and fused
topk = [1, 16]
logits = ["gaussian"]
[[sweep]]
variants = ["triton_auto"]
dtypes = ["float32"]
vocab = [151666]
batch = [256]
topk = [16]
logits = ["gaussian"]
"""


def _compiler_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != kernels.INTERPRET_ENV}
    return {**env, "PYTHONPATH": str(Path(__file__).parents[1])}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[subprocess.CompletedProcess, pd.DataFrame, Path]:
    """`perfsuite kernels` over SCENARIO for sm_90 and gfx942: its output, CSV and assembly folder."""
    tmp_path = tmp_path_factory.mktemp("kernels")
    scenario, out = tmp_path / "k.toml", tmp_path / "kernels.csv"
    scenario.write_text(SCENARIO)
    asm = tmp_path / "asm"
    command = [
        sys.executable,
        "-m",
        "perfsuite",
        "kernels",
        str(scenario),
        "--csv",
        str(out),
        "--asm",
        str(asm),
    ]
    command += ["--target", "sm_90", "--target", "gfx942"]
    done = subprocess.run(command, capture_output=True, text=True, env=_compiler_env(), timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done, pd.read_csv(out, keep_default_na=False), asm


@needs_triton
def test_every_planned_kernel_compiles_without_spills_and_loads_16_bytes(report):
    done, table, asm = report
    assert set(table["target"]) == {"sm_90", "gfx942"}
    assert (table["error"] == "").all()
    assert (table["spill_bytes"] == 0).all() and (table["registers"] > 0).all()
    assert table["occupancy"].between(0, 1, inclusive="right").all()
    # the scans read 16 bytes per load in their loops, misaligned rows (V = 151666) included
    scans = table[~table["kernel"].str.endswith("merge")]
    assert (scans["widest_load_bytes"] == 16).all() and (scans["loop_load_bytes"] == 16).all(), scans
    shape = ["target", "dtype", "batch", "vocab", "k", "shift", "selection"]
    launches = table.groupby(shape)["kernel"].apply(tuple)
    argmax = {("argmax",), ("argmax_partials", "argmax_merge")}  # triton_argmax's, at k = 1
    assert set(launches) == {("fused",), ("partials", "merge"), *argmax}
    assert set(table.loc[table["batch"] == 1, "plan"]) == {"split"}
    assert "distinct kernels compiled" in done.stdout
    # the code itself: 128-bit loads in the SASS of the misaligned fused kernel, AMDGCN beside it
    sass = next((asm / "sm_90").glob("fused-bf16-K16-*-unaligned-rows.sass")).read_text()
    assert "LDG.E.128" in sass
    assert "buffer_load_dwordx4" in next((asm / "gfx942").glob("fused-bf16-K16-*.amdgcn")).read_text()
    assert len(list((asm / "sm_90").glob("*.ttgir"))) == len(list((asm / "sm_90").glob("*.ptx")))


@needs_triton
def test_an_odd_offset_view_still_loads_16_bytes(report):
    """Logits 3 elements past a 16-byte boundary (`buf[:, 3:3 + V]`): Triton sees the kernels' base pointer
    (the boundary) as aligned and the shift as a plain i32, so the scan loops keep their 16-byte loads:
    no `ld.global.b16` / `global_load_ushort` (what the logits' own pointer compiled to) in any loop."""
    _, table, asm = report
    odd = table[(table["shift"] == resources.ODD_VIEW_SHIFT) & ~table["kernel"].str.endswith("merge")]
    assert len(odd) and not odd["rows_aligned"].any()
    assert (odd["widest_load_bytes"] == 16).all() and (odd["loop_load_bytes"] == 16).all(), odd
    assert odd["integers"].str.contains("shift=i32").all()
    # triton_argmax's fused kernel over V 151666 bf16 rows: compiled for both targets, 16-byte loads
    argmax = odd[(odd["kernel"] == "argmax") & (odd["dtype"] == "bf16") & (odd["vocab"] == 151666)]
    assert set(argmax["target"]) == {"sm_90", "gfx942"}
    for kernel in ("fused", "partials"):
        ptx = next((asm / "sm_90").glob(f"{kernel}-bf16-K16-*-shift3.ptx")).read_text()
        loops = resources.loop_code(ptx)
        assert "ld.global.v4.b32" in loops and "ld.global.b16" not in loops
        assert resources.widest_load(ptx, "cuda") == 16
        sass = next((asm / "sm_90").glob(f"{kernel}-bf16-K16-*-shift3.sass")).read_text()
        assert "LDG.E.128" in sass
        amdgcn = next((asm / "gfx942").glob(f"{kernel}-bf16-K16-*-shift3.amdgcn")).read_text()
        loops = resources.loop_code(amdgcn)
        assert "_load_dwordx4" in loops and "_load_ushort" not in loops
        assert resources.narrowest_loop_load(amdgcn, "hip") == 16


@needs_triton
def test_compile_ahead_compiles_each_kernel_once_and_a_compile_error_is_a_finding():
    """`compile_ahead` compiles the distinct kernels of the shapes in a process pool; the report then only
    reads them back (a second compile here would fail). A kernel that does not compile is a finding (the
    row's error), not a crash."""
    code = (
        "import torch\n"
        "from perfsuite.kernels import resources, topk_softmax as ts\n"
        "shapes = [(torch.bfloat16, 256, 151936, 8)]\n"
        "if __name__ == '__main__':\n"
        "    scalars = {'V': 1000, 'stride_row': 1000, 'shift': 0}\n"
        "    bad = ts.Launch('fused', (1,), scalars, {'K': 1, 'KP': 2, 'BLOCK': 1000, 'VEC': 8}, 4)\n"
        "    print(resources._compile_now(resources.compile_key('sm_90', bad, torch.bfloat16))[0].error)\n"
        "    print(resources.compile_ahead(shapes, ['sm_90'], jobs=2))\n"
        "    resources._compile_now = None\n"
        "    table = resources.plan_resources(shapes, ['sm_90'])\n"
        "    print(len(table), sorted(set(table['shift'])), resources.compile_ahead(shapes, ['sm_90']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_compiler_env())
    assert done.returncode == 0, done.stderr[-2000:]
    error, *compiled = done.stdout.splitlines()
    assert "power of 2" in error or "arange" in error, done.stdout
    # a fresh tensor and an odd-offset view: two kernels, two rows, nothing left to compile
    assert " ".join(compiled).split() == ["2", "2", "[0,", f"{resources.ODD_VIEW_SHIFT}]", "0"], done.stdout


def test_unknown_target_is_a_usage_error(tmp_path, capsys):
    scenario = tmp_path / "k.toml"
    scenario.write_text(SCENARIO)
    assert cli.main(["kernels", str(scenario), "--target", "sm_9"]) == exits.EXIT_USAGE
    known = "sm_80, sm_90, sm_100, gfx90a, gfx942, gfx950"
    assert f"unknown target sm_9; known: {known}" in capsys.readouterr().err


def test_loop_loads_are_read_from_llvms_block_comments():
    """LLVM names each block's loop in a comment on its label (PTX `//`, AMDGCN `;`): loads after a label
    inside a loop count, loads outside do not."""
    ptx = (
        "// %bb.0:\n\tld.global.b16 {%rs1}, [%rd1];\n"
        "$L__BB0_2:   // =>This Inner Loop Header: Depth=1\n"
        "\tld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd2];\n"
        "$L__BB0_3:   // %._crit_edge\n\t@%p1 ld.global.b16 {%rs2}, [%rd3];\n"
    )
    assert resources.narrowest_loop_load(ptx, "cuda") == 16 and resources.widest_load(ptx, "cuda") == 16
    assert "ld.global.b16" not in resources.loop_code(ptx)
    amdgcn = (
        ".LBB0_5:   ; =>This Loop Header: Depth=1\n\tbuffer_load_dwordx4 v[0:3], v4, s[0:3], 0 offen\n"
        "; %bb.6:   ;   in Loop: Header=BB0_5 Depth=1\n\tglobal_load_ushort v5, v[6:7], off\n"
        ".LBB0_9:\n\tglobal_load_dword v1, v[2:3], off\n"
    )
    assert resources.narrowest_loop_load(amdgcn, "hip") == 2
    assert resources.narrowest_loop_load("// %bb.0:\n\tld.global.b32 {%r1}, [%rd1];", "cuda") is None


def test_load_width_parsers():
    ptx = "ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];\n@%p1 ld.global.b16 {%rs1}, [%rd2];"
    assert resources.widest_load(ptx, "cuda") == 16
    assert resources.widest_load("ld.global.L1::evict_last.v2.b32 {%r1, %r2}, [%rd3];", "cuda") == 8
    assert resources.widest_load("ld.shared.v4.b32 {%r1}, [%r2];", "cuda") is None
    amdgcn = "global_load_ushort v1, v[2:3], off\n buffer_load_dwordx4 v[4:7], v8, s[0:3], 0 offen"
    assert resources.widest_load(amdgcn, "hip") == 16
    assert resources.widest_load("global_load_dword v1, v[2:3], off", "hip") == 4


def test_cuda_occupancy_calculator():
    h100 = resources.TARGETS["sm_90"]
    assert resources.cuda_occupancy(h100, registers=64, shared=0, num_warps=4) == 0.5  # 8 blocks of 4
    assert resources.cuda_occupancy(h100, registers=32, shared=0, num_warps=4) == 1.0
    assert resources.cuda_occupancy(h100, registers=255, shared=0, num_warps=8) == 0.125
    # 100 KB of shared memory per block: two blocks of 4 warps fit in 228 KB
    assert resources.cuda_occupancy(h100, registers=32, shared=100 << 10, num_warps=4) == 0.125
