"""Triton variants (`triton_fused`, `triton_split`, `triton_auto`) against the float64 reference.

On a machine without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set below before
Triton is imported): slow, so the shapes are small and the tile / split sizes are overridden to exercise
several tiles per row, several splits per row and rows shorter than one tile.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from perfsuite import kernels, variants  # noqa: E402
from perfsuite.correctness import parity  # noqa: E402
from perfsuite.kernels import plan as plans  # noqa: E402
from perfsuite.kernels import topk_softmax as ts  # noqa: E402
from perfsuite.kernels import triton_code as device_code  # noqa: E402
from perfsuite.scenario.inputs import make_logits  # noqa: E402
from perfsuite.variants.base import ideal_traffic  # noqa: E402

pytestmark = pytest.mark.triton

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
_REASON = kernels.availability(DEVICE)
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
INF, NAN = float("inf"), float("nan")


def fused(block: int, prefetch: bool = True):
    plan = plans.Plan("fused", block, plans.FUSED_NUM_WARPS, prefetch=prefetch)
    return lambda x, k: ts.run_plan(x, k, plan)


def split(chunk: int, block: int, prefetch: bool = True):
    plan = plans.Plan("split", block, plans.SPLIT_NUM_WARPS, chunk=chunk, prefetch=prefetch)
    return lambda x, k: ts.run_plan(x, k, plan)


def assert_exact(logits: torch.Tensor, k: int, topk_p: torch.Tensor, topk_index: torch.Tensor) -> None:
    ref = parity.truth(logits, k)
    verdict = parity.check("exact", topk_p, topk_index, ref)
    assert verdict.verdict == "pass", verdict.problem
    assert torch.equal(topk_index.cpu(), ref.index.cpu())


# (batch, vocab, k, dtype, kind, row_pad, fused tile, split chunk, split tile)
CASES = [
    (2, 1, 1, F32, "gaussian", 0, 16, 16, 16),  # V == k == 1
    (3, 3, 2, BF16, "gaussian", 5, 16, 16, 16),  # V smaller than a tile, poisoned padding
    (2, 3, 3, F16, "peaked", 2, 16, 16, 16),  # V == k
    (2, 16, 16, F32, "ties", 1, 16, 16, 16),  # V == k == 16
    (3, 127, 8, F32, "gaussian", 1, 64, 48, 16),  # misaligned V: 2 tiles; 3 splits of 3 tiles
    (4, 1000, 16, BF16, "peaked", 3, 128, 256, 64),  # 8 tiles; 4 splits of 4 tiles
    (2, 1000, 2, F16, "zipf", 0, 256, 200, 64),  # chunk not a multiple of the tile
    (2, 1000, 8, BF16, "near_ties", 4, 128, 128, 128),
    (2, 8193, 16, F32, "gaussian", 7, 1024, 2048, 512),  # one column past a power of two
    (2, 8193, 1, BF16, "ties", 3, 512, 1000, 256),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-V{c[1]}-k{c[2]}-{c[3]}-{c[4]}-pad{c[5]}")
def test_kernels_match_reference(case):
    batch, vocab, k, dtype, kind, row_pad, block, chunk, split_block = case
    logits = make_logits(kind, batch, vocab, dtype, seed=vocab + k, device=DEVICE, row_pad=row_pad)
    assert logits.is_contiguous() == (row_pad == 0)
    for select in (fused(block), split(chunk, split_block)):
        assert_exact(logits, k, *select(logits, k))


@pytest.mark.parametrize("name", ["triton_fused", "triton_split", "triton_auto"])
def test_registered_variants(name):
    variant = variants.get(name)
    assert name in variants.names()
    assert variant.exact and variant.lowest_index_ties
    assert variant.available(DEVICE) is None
    logits = make_logits("peaked", 2, 5000, BF16, seed=3, device=DEVICE, row_pad=9)
    assert_exact(logits, 4, *variant(logits, 4))
    p, idx = variant(logits[:0], 4)
    assert p.shape == idx.shape == (0, 4) and p.dtype == torch.float32 and idx.dtype == torch.int64


def test_auto_runs_split_at_batch_one_and_agrees_with_fused():
    logits = make_logits("zipf", 1, 8193, F16, seed=5, device=DEVICE, row_pad=3)
    assert plans.choose(1, 8193, 2, plans.hardware(DEVICE)).kernel == "split"
    auto = variants.get("triton_auto")(logits, 2)
    assert_exact(logits, 2, *auto)
    assert torch.equal(auto[1], ts.run_plan(logits, 2, plans.fused_plan(plans.hardware(DEVICE), 2))[1])


@pytest.mark.parametrize("k", [1, 8, 16])
def test_ties_same_answer_for_any_tiling(k):
    """Lowest index first whatever the tile size or number of splits (1, 4, 16, 32 splits)."""
    logits = make_logits("ties", 2, 500, BF16, seed=k, device=DEVICE, row_pad=2)
    ref = parity.truth(logits, k)
    selectors = [fused(16), fused(128), fused(512), split(500, 256), split(125, 32), split(32, 32)]
    selectors.append(split(16, 16))
    results = [select(logits, k) for select in selectors]
    for p, idx in results:
        assert torch.equal(idx, ref.index)
        assert parity.check("exact", p, idx, ref).verdict == "pass"
        torch.testing.assert_close(p, results[0][0], rtol=parity.EXACT_RTOL, atol=0)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_all_equal_rows(dtype):
    logits = torch.full((2, 300), 1.5, dtype=dtype, device=DEVICE)
    logits[1] = -0.0  # -0.0 and +0.0 tie
    logits[1, ::2] = 0.0
    for select in (fused(64), split(100, 32)):
        p, idx = select(logits, 16)
        assert torch.equal(idx.cpu(), torch.arange(16).expand(2, 16))
        torch.testing.assert_close(p.cpu(), torch.full((2, 16), 1 / 300), rtol=parity.EXACT_RTOL, atol=0)


def _nonfinite_rows(dtype: torch.dtype) -> torch.Tensor:
    vocab = 200
    rows = make_logits("gaussian", 6, vocab, F32, seed=11)
    rows[0, [150, 40, 90]] = NAN  # NaN ranks first, lowest index first
    rows[1, [120, 7]] = INF  # +inf next
    rows[2] = -INF  # all -inf
    rows[3] = -INF  # only two finite values
    rows[3, 170], rows[3, 60] = 2.0, 3.0
    rows[4, 130], rows[4, 30] = INF, NAN  # NaN above +inf
    rows[5, [5, 180]] = -INF  # -inf inside a finite row
    return rows.to(dtype)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # interpreter: inf - inf
@pytest.mark.parametrize("dtype", [F32, BF16, F16])
def test_nonfinite_rows(dtype):
    """Documented semantics: NaN > +inf > finite > -inf, lowest index first; p NaN for rows with a NaN or
    +inf and for all -inf rows; -inf entries of a finite row get p = 0. Identical for fused and split."""
    logits = _nonfinite_rows(dtype).to(DEVICE)
    k = 4
    ref = parity.truth(logits, k)
    results = [select(logits, k) for select in (fused(16), fused(256), split(32, 16), split(200, 64))]
    for p, idx in results:
        p, idx = p.cpu(), idx.cpu()
        assert bool(((idx >= 0) & (idx < logits.shape[1])).all())
        assert idx[0, :3].tolist() == [40, 90, 150] and idx[0, 3] == ref.index[0, 3]
        assert idx[1, :2].tolist() == [7, 120] and idx[1, 2:].tolist() == ref.index[1, 2:].tolist()
        assert idx[2].tolist() == [0, 1, 2, 3]
        assert idx[3].tolist() == [60, 170, 0, 1]
        assert idx[4, :2].tolist() == [30, 130]
        assert torch.isnan(p[:3]).all() and torch.isnan(p[4]).all()
        assert p[3, 2:].tolist() == [0.0, 0.0]
        assert torch.equal(idx[[3, 5]], ref.index[[3, 5]].cpu())  # rows with -inf but no NaN / +inf
        truth = ref.prob_at(idx.to(DEVICE)).cpu()[[3, 5]]
        torch.testing.assert_close(p[[3, 5]].double(), truth, rtol=parity.EXACT_RTOL, atol=1e-38)
        assert torch.equal(idx, results[0][1].cpu())
        torch.testing.assert_close(p, results[0][0].cpu(), rtol=parity.EXACT_RTOL, atol=0, equal_nan=True)


@pytest.mark.parametrize("k", [1, 2, 8, 16])
def test_each_k(k):
    logits = make_logits("gaussian", 2, 700, F16, seed=k, device=DEVICE, row_pad=1)
    for select in (fused(128), split(128, 64)):
        assert_exact(logits, k, *select(logits, k))


def test_partials_merge_across_ranks():
    """Partials of column shards (tensor-parallel ranks, indices offset to global columns) merge exactly."""
    logits = make_logits("ties", 2, 1000, F32, seed=2, device=DEVICE)
    cuts = [0, 300, 301, 1000]
    parts = [
        ts.row_partials(logits[:, a:b], min(8, b - a), chunk=128, block=64, index_offset=a)
        for a, b in itertools.pairwise(cuts)
    ]
    # a partial per chunk of 128 columns (the 300-column rank: 3, the 699-column rank: 6)
    assert [p.max.shape for p in parts] == [(2, 3), (2, 1), (2, 6)]
    # the 1-column rank carries only one slot, its global column; pad it to k = 8 with empty (-inf, -1) slots
    single = parts[1]
    assert single.values.shape == single.indices.shape == (2, 1, 1)
    assert single.indices.flatten().tolist() == [300, 300]
    pad = 8 - single.values.shape[2]
    parts[1] = ts.Partials(
        single.max,
        single.sumexp,
        torch.nn.functional.pad(single.values, (0, pad), value=-INF),
        torch.nn.functional.pad(single.indices, (0, pad), value=-1),
    )
    merged = ts.Partials(*(torch.cat([vars(p)[name] for p in parts], dim=1) for name in vars(parts[0])))
    assert_exact(logits, 8, *ts.merge_partials(merged))
    assert_exact(logits, 3, *ts.merge_partials(merged, 3))  # fewer than the partials carry


@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_unaligned_views_use_head_body_tail(dtype, offset, prefetch):
    """A view starting `offset` columns into a wider buffer (rows not 16-byte aligned, different per row):
    a head up to the first aligned column, aligned whole tiles (loaded one ahead with `prefetch`), a tail;
    NaN and +inf in head and tail."""
    vocab, stride = 203, 211
    buffer = make_logits("gaussian", 4, stride, F32, seed=offset).to(dtype)
    buffer[:, offset + vocab :] = 1e30  # padding past the row: must never be read
    logits = buffer[:, offset : offset + vocab]
    logits[1, 0] = NAN  # head
    logits[2, vocab - 1] = INF  # tail
    layout = ts.RowLayout.of(logits)
    vec = plans.LOAD_BYTES // layout.element_size
    assert layout.shift == (buffer.data_ptr() // logits.element_size() + offset) % vec
    for select in (
        fused(32, prefetch),
        split(64, 16, prefetch),
        split(203, 64, prefetch),
        fused(256, prefetch),
    ):
        p, idx = select(logits, 4)
        ref = parity.truth(logits, 4)
        assert torch.equal(idx.cpu(), ref.index.cpu()), select
        finite = [0, 3]
        expected = ref.prob[finite].float().cpu()
        torch.testing.assert_close(p[finite].cpu(), expected, rtol=parity.EXACT_RTOL, atol=0)
        assert idx[1, 0] == 0 and idx[2, 0] == vocab - 1 and p[1:3].isnan().all()


@triton.jit
def _first_aligned_kernel(out_ptr, stride_row, shift, col_start, col_end, VEC: tl.constexpr):
    row = tl.program_id(0)
    col = device_code.first_aligned(
        device_code._row_start(row, stride_row, shift) % VEC, col_start, col_end, VEC
    )
    tl.store(out_ptr + row, col)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_first_aligned_column_is_16_byte_aligned(dtype):
    """The scans' aligned tiles start where the address really is a multiple of 16 bytes (on a GPU a wrong
    `tl.multiple_of` claim is a misaligned-address fault; the interpreter would not notice)."""
    buffer = torch.zeros(9, 211, dtype=dtype, device=DEVICE)
    for offset, col_start in [(0, 0), (1, 0), (3, 5), (5, 64)]:
        view = buffer[:, offset : offset + 150]
        layout = ts.RowLayout.of(view)
        cols = torch.zeros(9, dtype=torch.int64, device=DEVICE)
        vec = plans.LOAD_BYTES // layout.element_size
        _first_aligned_kernel[(9,)](cols, layout.stride, layout.shift, col_start, 150, VEC=vec)
        for row, col in enumerate(cols.tolist()):
            assert col_start <= col < col_start + vec
            address = view.data_ptr() + (row * view.stride(0) + col) * view.element_size()
            assert address % plans.LOAD_BYTES == 0, (offset, row, col)


ELEMENT_OFFSETS = [(dtype, offset) for dtype in (BF16, F16) for offset in range(8)]
ELEMENT_OFFSETS += [(F32, offset) for offset in range(4)]


@pytest.mark.parametrize(("dtype", "offset"), ELEMENT_OFFSETS, ids=lambda v: str(v).removeprefix("torch."))
def test_any_data_pointer_offset_gives_the_aligned_results(dtype, offset):
    """Logits whose data pointer sits `offset` elements past a 16-byte boundary (`buf.view(-1)[offset:]`,
    and column `offset` of a wider buffer): the kernels get that boundary as their base pointer and the
    shift, and return what they return for an aligned copy: the same indices, the same probabilities
    within fp32 rounding (the rows' 16-byte boundaries, so the lanes' summation order, differ). The
    elements around the rows are poisoned (NaN, +inf: either would rank first if read)."""
    batch, vocab, width = 2, 101, 109  # V and the row stride not multiples of 16 bytes
    aligned = make_logits("gaussian", batch, vocab, dtype, seed=offset, device=DEVICE)
    flat = torch.full((offset + batch * vocab + 8,), NAN, dtype=dtype, device=DEVICE)
    flat_view = flat[offset : offset + batch * vocab].view(batch, vocab)
    wide = torch.full((batch, width), INF, dtype=dtype, device=DEVICE)
    strided = wide[:, offset : offset + vocab]
    for view in (flat_view, strided):
        view.copy_(aligned)
        layout = ts.RowLayout.of(view)
        assert layout.shift == offset  # fresh buffers start on a 16-byte boundary
        assert ts.aligned_base(view, layout).data_ptr() % plans.LOAD_BYTES == 0
    for select in (fused(32), split(48, 16)):  # several tiles; several splits, the last one short
        topk_p, topk_index = select(aligned, 4)
        for view in (flat_view, strided):
            p, idx = select(view, 4)
            assert torch.equal(idx, topk_index), view.stride()
            torch.testing.assert_close(p, topk_p, rtol=parity.EXACT_RTOL, atol=0)
    assert_exact(aligned, 4, topk_p, topk_index)


def test_storage_past_a_16_byte_boundary_falls_back_to_the_logits_pointer():
    """Memory from outside torch's allocators can start past a 16-byte boundary: the boundary below the
    logits is then outside their storage, so the kernels get the logits' own pointer (shift 0): narrower
    loads, the same results (run here when the kernels run on the CPU: such storage is host memory)."""
    raw = bytearray(4096)
    start = torch.frombuffer(raw, dtype=torch.uint8).data_ptr()
    skew = (2 - start) % plans.LOAD_BYTES  # the storage starts one bf16 past a 16-byte boundary
    logits = torch.frombuffer(raw, dtype=BF16, offset=skew, count=2 * 300).view(2, 300)
    logits.copy_(make_logits("peaked", 2, 300, BF16, seed=8))
    layout = ts.RowLayout.of(logits)
    assert logits.storage_offset() == 0 and logits.data_ptr() % plans.LOAD_BYTES == 2
    assert layout.shift == 0 and ts.aligned_base(logits, layout) is logits
    if DEVICE.type == "cpu":
        copy = logits.clone()
        for select in (fused(64), split(128, 32)):
            (p, idx), (p_copy, idx_copy) = select(logits, 3), select(copy, 3)
            assert torch.equal(idx, idx_copy) and torch.equal(p, p_copy)


def test_launches_describe_the_plan():
    layout = ts.RowLayout.contiguous(151936, 2)
    fused_only = ts.plan_launches(64, 151936, 8, plans.Plan("fused", 4096, 8), layout)
    assert [(x.kernel, x.grid) for x in fused_only] == [("fused", (64,))]
    assert fused_only[0].constants == {"K": 8, "KP": 8, "BLOCK": 4096, "VEC": 8, "PREFETCH": True}
    plan = plans.split_plan(1, 151936, 8, plans.Hardware())
    stage1, merge = ts.plan_launches(1, 151936, 8, plan, layout)
    assert stage1.grid == (1, plan.n_splits) and stage1.scalars["chunk"] == plan.chunk
    assert merge.kernel == "merge" and merge.scalars == {"n_parts": plan.n_splits, "part_k": 8}
    assert set(ts.KERNELS[stage1.kernel].arg_names) >= {*stage1.scalars, *stage1.constants}


def test_partials_layout():
    logits = make_logits("gaussian", 2, 300, BF16, seed=4, device=DEVICE, row_pad=5)
    parts = ts.row_partials(logits, 4, chunk=128, block=32)
    assert parts.max.shape == parts.sumexp.shape == (2, 3)
    assert parts.values.shape == parts.indices.shape == (2, 3, 4)
    x = logits.double().cpu()
    for s, (a, b) in enumerate([(0, 128), (128, 256), (256, 300)]):
        chunk_max = x[:, a:b].max(dim=1).values
        assert torch.equal(parts.max[:, s].double().cpu(), chunk_max)
        sumexp = torch.exp(x[:, a:b] - chunk_max[:, None]).sum(dim=1)
        torch.testing.assert_close(parts.sumexp[:, s].double().cpu(), sumexp, rtol=parity.EXACT_RTOL, atol=0)
        assert bool(((parts.indices[:, s] >= a) & (parts.indices[:, s] < b)).all())


@triton.jit
def _row_offsets_kernel(out_ptr, stride):
    row = tl.program_id(0)
    tl.store(out_ptr + row, device_code.row_offset(row, stride))


def test_row_offsets_are_int64():
    """Row offsets past 2^31 elements (row * stride with an int32 stride) do not wrap.

    A real tensor with such offsets needs 8 GB or more (torch checks a strided view against its storage), so
    this runs the kernels' own offset helper with an int32 stride of 2^30 + 3 for rows 0..3.
    """
    stride = 2**30 + 3
    out = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    _row_offsets_kernel[(4,)](out, stride)
    assert out.cpu().tolist() == [row * stride for row in range(4)]
    assert out[3] > 2**31


def test_auto_picker():
    hw = plans.Hardware(sms=132)
    sms = hw.sms
    assert plans.choose(1, 151936, 1, hw).kernel == "split"
    assert plans.choose(16, 248320, 8, hw).kernel == "split"
    assert plans.choose(int(plans.SPLIT_MAX_BATCH_FRACTION * sms), 129280, 1, hw).kernel == "split"
    assert plans.choose(int(plans.SPLIT_MAX_BATCH_FRACTION * sms) + 1, 129280, 1, hw).kernel == "fused"
    assert plans.choose(256, 151936, 1, hw).kernel == "fused"
    assert plans.choose(1, 2 * plans.SPLIT_MIN_CHUNK - 1, 1, hw).kernel == "fused"  # too short to split
    assert plans.choose(8, 151936, 1, plans.Hardware(sms=16)).kernel == "fused"  # a small GPU fills sooner
    assert plans.hardware(torch.device("cpu")) == plans.Hardware()
    for batch, vocab, k in [(1, 151666, 1), (1, 151936, 16), (4, 248320, 8), (30, 8193, 2), (1, 262144, 64)]:
        plan = plans.split_plan(batch, vocab, k, hw)
        assert plan.chunk % plan.block == 0 and plan.chunk >= plans.SPLIT_MIN_CHUNK
        assert (plan.n_splits - 1) * plan.chunk < vocab <= plan.n_splits * plan.chunk
        assert plan.n_splits * k <= max(plans.SPLIT_MAX_CANDIDATES, k)
        assert plan.n_splits <= plans.SPLIT_MAX_SPLITS
    assert plans.split_plan(1, 151936, 1, hw).n_splits >= sms // 2  # spread over most SMs


@pytest.mark.parametrize("element_size", [2, 4])
@pytest.mark.parametrize("warp_size", [32, 64])
def test_plans_give_every_thread_a_16_byte_load(element_size, warp_size):
    """On ROCm (wavefronts of 64) a bf16 tile of 1024 columns over 4 wavefronts would leave 8 bytes per
    thread: the plans grow the tile instead."""
    hw = plans.Hardware(sms=304, warp_size=warp_size)
    for batch in (1, 16, 64, 512):
        plan = plans.choose(batch, 151936, 8, hw, element_size)
        assert plan.block * element_size >= plans.LOAD_BYTES * warp_size * plan.num_warps
        assert plan.kernel != "split" or plan.chunk % plan.block == 0


def test_traffic_models():
    batch, vocab, k = 2, 151936, 8
    ideal = ideal_traffic(batch, vocab, k, BF16)
    assert variants.get("triton_fused").traffic(batch, vocab, k, BF16) == ideal
    split_traffic = variants.get("triton_split").traffic(batch, vocab, k, BF16)
    n_splits = plans.split_plan(batch, vocab, k, plans.hardware(DEVICE), 2).n_splits
    extra = plans.partial_bytes(batch, n_splits, k)
    assert split_traffic.read == ideal.read + extra and split_traffic.write == ideal.write + extra
    assert variants.get("triton_auto").traffic(512, vocab, k, BF16) == ideal_traffic(512, vocab, k, BF16)


def test_availability(monkeypatch):
    monkeypatch.setattr(kernels, "triton_installed", lambda: True)
    assert kernels.availability(torch.device("cuda")) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernels.availability(torch.device("cpu")) is None
    monkeypatch.delenv("TRITON_INTERPRET")
    assert kernels.availability(torch.device("cpu")) == kernels.NEEDS_GPU
    monkeypatch.setattr(kernels, "triton_installed", lambda: False)
    assert kernels.availability(torch.device("cuda")) == "triton is not installed"


def test_variants_import_without_triton():
    code = (
        "import sys, torch; sys.modules['triton'] = None\n"
        "from perfsuite import variants\n"
        "v = variants.get('triton_auto')\n"
        "assert 'triton_fused' in variants.names() and 'triton_split' in variants.names()\n"
        "print(v.available(torch.device('cpu')))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == kernels.NO_TRITON
