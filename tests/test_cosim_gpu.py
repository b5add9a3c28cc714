"""GPU cost model: roofline arithmetic and the GEMM queue's bookkeeping."""
from collections import defaultdict

import pytest

from moehub.cosim.config import load_model_config, load_system_config
from moehub.cosim.gpu import ExpertQueue, GpuModel, WorkItem


@pytest.fixture
def gpu():
    return GpuModel(load_system_config("h100x8"), load_model_config("mixtral-8x7b"), 128)


def test_roofline_is_max_of_compute_and_memory(gpu):
    """GEMM body = ramp + max(compute at the calibrated tile efficiency, bytes at the
    achievable HBM rate: hbm_gemm_efficiency of nominal)."""
    s = gpu.sys
    sw = s.software
    flops, nbytes = 1e12, 1e9
    eff = gpu.gemm_eff(128, 4096)
    assert eff == pytest.approx(gpu.comp.steady_eff(4096, 4096))
    assert 0.5 < eff <= sw.gemm_eff_max
    assert gpu.gemm_eff(64, 4096) == pytest.approx(gpu.comp.steady_eff(4096, 4096))
    assert gpu.gemm_eff(32, 4096) == pytest.approx(eff / 2)      # half a 64-row block
    assert gpu.gemm_us(flops, nbytes, 128, 4096) == pytest.approx(sw.gemm_fixed_us + max(
        flops / (s.peak_bf16_TFLOPs * 1e6 * eff),
        nbytes / (s.hbm_GBps * 1e3 * sw.hbm_gemm_efficiency)))
    # a copy kernel: launch + bytes at the copy-kernel HBM rate
    assert gpu.permute_us(1000) == pytest.approx(
        sw.kernel_launch_us + 2 * 1000 * 8192 / (s.hbm_GBps * 1e3 * sw.hbm_efficiency))


def test_weights_are_read_once_per_pass(gpu):
    one = WorkItem(0, 0, 8, 128, 14336)
    t1 = gpu.expert_batch_us([one], 1.0)
    hbm = gpu.sys.hbm_GBps * 1e3 * gpu.sys.software.hbm_gemm_efficiency
    w = 3 * 4096 * 14336 * 2 / hbm
    assert t1 == pytest.approx(gpu.fixed + w + 8 * (2 * 4096 + 3 * 14336) * 2 / hbm)
    # a lone small tile is weight bound; more SMs do not help it, less HBM slows it
    assert gpu.expert_batch_us([one], 0.9) == pytest.approx(t1)
    assert gpu.expert_batch_us([one], 1.0, hbm_share=0.5) == pytest.approx(2 * t1 - gpu.fixed)


def test_layouts_of_the_expert_gemm(gpu):
    items = [WorkItem(0, e, 40, 128, 14336) for e in range(4)]
    cont = gpu.expert_batch_us(items, 1.0, layout="contiguous")
    assert gpu.expert_batch_us(items, 1.0, layout="masked") <= cont
    assert gpu.expert_batch_us(items, 1.0, layout="loop") > cont + 4 * gpu.launch


def test_hbm_share_slows_a_weight_bound_queue(gpu):
    items = [WorkItem(0.0, e, 16, 128, 14336, key=e) for e in range(8)]
    full = ExpertQueue(gpu, 0.0, lambda t: 1.0).run(items)[-1].end
    half = ExpertQueue(gpu, 0.0, lambda t: 1.0, hbm_at=lambda t: 0.5).run(items)[-1].end
    assert half > 1.8 * full

def test_queue_finishes_every_item_exactly_once_with_all_its_work(gpu):
    items = [WorkItem(5.0 + 3.0 * i, i % 2, 128, 128, 14336, key=i) for i in range(12)]
    batches = ExpertQueue(gpu, 0.0, lambda t: 1.0).run(items)
    done = defaultdict(float)
    finals = defaultdict(int)
    for b in batches:
        for it in b.items:
            done[it.key] += it.frac
            finals[it.key] += it.final
            assert b.start >= it.ready - 1e-9 or not it.final
    assert all(v == pytest.approx(1.0) for v in done.values()) and len(done) == 12
    assert all(v == 1 for v in finals.values())
    assert all(a.end <= b.start + 1e-9 for a, b in zip(batches, batches[1:]))


def test_all_ready_at_once_runs_in_compute_bound_passes(gpu):
    rows = 4096
    items = [WorkItem(0.0, 0, 128, 128, 14336, key=i) for i in range(rows // 128)]
    batches = ExpertQueue(gpu, 0.0, lambda t: 1.0).run(items)
    total = batches[-1].end
    compute = rows * gpu.row_us(14336)
    ramps = len(batches) * gpu.fixed
    assert compute * (1 - 1e-9) <= total <= compute * 1.01 + ramps
    assert len(batches) > 1       # passes are bounded, so outputs can leave early
