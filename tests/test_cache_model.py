"""The cache-aware bytes model (variants.cache, Traffic.hbm) and the row columns it feeds."""

from __future__ import annotations

import pytest
import torch

from perfsuite import variants
from perfsuite.measure import timing
from perfsuite.measure.device import DeviceInfo
from perfsuite.results import rows
from perfsuite.variants.base import ideal_traffic
from perfsuite.variants.cache import hbm_bytes, sweep

H200_L2 = 60 << 20  # what torch reports on the project's H200
MI300X_LLC = 256 << 20  # the Infinity Cache
V, BF16 = 151936, torch.bfloat16
TORCH_OPS = ("full_softmax", "identity", "identity_engine_order", "argmax_ones")


def _traffic(name: str, batch: int, k: int = 8, dtype: torch.dtype = BF16) -> variants.Traffic:
    return variants.get(name).traffic(batch, V, k, dtype)


def _read_once(batch: int, k: int) -> int:
    """full_softmax's bytes when the probabilities never leave the cache: one read of the bf16 logits,
    the [B, k] bf16 values and int64 indices written, the values read and written again as fp32."""
    return batch * V * 2 + batch * k * (2 + 8) + batch * k * (2 + 4)


@pytest.mark.parametrize("name", [*TORCH_OPS, "triton_split", "triton_auto", "triton_fused"])
@pytest.mark.parametrize(("batch", "k", "dtype"), [(1, 1, BF16), (64, 8, BF16), (256, 8, torch.float32)])
def test_no_cache_is_every_pass_from_hbm_and_more_cache_never_costs_more(name, batch, k, dtype):
    model = _traffic(name, batch, k, dtype)
    ideal = ideal_traffic(batch, V, k, dtype).total
    figures = [model.hbm(c) for c in (0, 4 << 20, H200_L2, MI300X_LLC, 1 << 40)]
    assert figures[0] == model.total  # the uncached figure, bytes_model before the model was cache-aware
    assert figures == sorted(figures, reverse=True) and figures[-1] >= ideal


def test_full_softmax_probabilities_stay_in_the_h200_l2_where_they_fit_beside_the_logits():
    fits, spills = _traffic("full_softmax", 64), _traffic("full_softmax", 256)
    # B 64: logits 19.4 MB + probabilities 19.4 MB in 60 MiB: only the first read and the outputs reach HBM
    assert fits.hbm(H200_L2) == _read_once(64, 8)
    assert fits.total - fits.hbm(H200_L2) == 2 * 64 * V * 2  # the write and the re-read stay in L2
    # B 256: 77.8 MB + 77.8 MB do not fit: every pass from HBM
    assert spills.hbm(H200_L2) == spills.total


def test_the_mi300x_infinity_cache_keeps_what_the_h200_l2_cannot():
    b256, b1024 = _traffic("full_softmax", 256), _traffic("full_softmax", 1024)
    assert b256.hbm(MI300X_LLC) == _read_once(256, 8)  # 156 MB fits
    assert b1024.hbm(MI300X_LLC) == b1024.total  # 622 MB does not


def test_identity_keeps_its_fp32_temporary_in_cache_where_it_fits():
    engine = _traffic("identity_engine_order", 64)  # logits 19.4 MB + fp32 shifted 38.9 MB: 58.3 MB
    outputs = 64 * 8 * (2 + 8) + 64 * 8 * (8 + 4)  # top-k values and indices, then the probabilities
    assert engine.hbm(H200_L2) == 64 * V * 2 + outputs  # one read of the logits
    # H100's 50 MiB: logits and temporary no longer fit together: the logits are read twice, the
    # temporary is written back and read once, and only the sum re-reads it from the cache
    assert engine.hbm(50 << 20) == 2 * 64 * V * 2 + 2 * 64 * V * 4 + outputs
    ident = _traffic("identity", 64)  # the tie repair's bools and int32 counts crowd the cache out
    assert engine.hbm(H200_L2) < ident.hbm(H200_L2) < ident.total
    assert _traffic("identity", 256).hbm(MI300X_LLC) < _traffic("identity", 256).total


def test_lru_at_tensor_granularity():
    a, t = 10, 20  # bytes of an input and a temporary
    passes = [sweep({"x": a}, {"t": t}), sweep({"t": t}, {"t": t}), sweep({"t": t})]
    assert hbm_bytes(passes, a + t) == a  # everything stays; t left dirty when the call ends
    assert hbm_bytes(passes, t) == a + t + t  # x evicts t: written back, re-read; the last pass hits
    assert hbm_bytes(passes, 0) == sum(p.bytes for p in passes)
    reread = [sweep({"x": a}), sweep({"y": t}), sweep({"x": a})]
    assert hbm_bytes(reread, a + t) == a + t and hbm_bytes(reread, a + t - 1) == 2 * a + t
    assert hbm_bytes([], 1 << 30) == 0


def _samples(us: float) -> timing.Samples:
    return timing.Samples((us * 1e-6,) * 3, "test")


def test_rows_carry_the_cache_aware_model_the_uncached_one_and_the_copy_flag():
    traffic, ideal = _traffic("full_softmax", 64), ideal_traffic(64, V, 8, BF16)
    seconds = 10e-6
    cols = rows.figures(_samples(10.0), traffic, ideal, 0, 4800.0, 4000.0, H200_L2)
    assert cols["bytes_model"] == traffic.hbm(H200_L2) and cols["bytes_model_uncached"] == traffic.total
    assert cols["gbps"] == pytest.approx(traffic.hbm(H200_L2) / seconds / 1e9)
    assert cols["pct_copy"] == pytest.approx(100 * cols["gbps"] / 4000.0) and not cols["above_copy"]
    old = rows.figures(_samples(10.0), traffic, ideal, 0, 4800.0, 4000.0)  # no cache: as before
    assert old["bytes_model"] == old["bytes_model_uncached"] == traffic.total
    assert old["above_copy"] and old["pct_copy"] > 100  # 5.8 TB/s counted against a 4 TB/s copy
    assert not rows.figures(_samples(10.0), traffic, ideal, 0, None, None)["above_copy"]  # no copy figure


def test_the_model_cache_is_the_gpus_last_level_cache_and_none_on_a_cpu():
    h200 = DeviceInfo("cuda", "cuda:0", "NVIDIA H200", "CUDA 13.0", 4800.0, 64 << 20, llc_bytes=H200_L2)
    cpu = DeviceInfo("cpu", "cpu", "cpu", "cpu", None, 32 << 20, llc_bytes=32 << 20)
    assert h200.model_cache_bytes == H200_L2 and cpu.model_cache_bytes == 0
    assert timing.flush_bytes(h200) == 128 << 20  # twice the flush's cache, no 256 MiB floor


def test_simulated_gpus_report_their_last_level_caches_and_model_none(simulated):
    """A simulated GPU's figures are host times on the host's caches: its rows keep the uncached model,
    as a CPU's do, while its llc_bytes is the real device's."""
    from perfsuite.measure import device

    info = device.detect("cuda:0")
    expected = {"h200": H200_L2, "mi300x": MI300X_LLC}[simulated.key]
    assert info.llc_bytes == expected and info.model_cache_bytes == 0
    assert info.cache_bytes == max(expected, device.MIN_FLUSH_CACHE_BYTES)
    assert timing.flush_bytes(info) == timing.SIMULATED_FLUSH_BYTES  # the host keeps a small flush
