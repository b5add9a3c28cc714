"""GPU cost model: roofline arithmetic and the GEMM queue's bookkeeping."""
from collections import defaultdict

import pytest

from moehub.config.cosim_schema import load_model_config, load_system_config
from moehub.cosim.gpu import ExpertQueue, GpuModel, WorkItem


@pytest.fixture
def gpu():
    return GpuModel(load_system_config("h100x8"), load_model_config("mixtral-8x7b"), 128)


def test_roofline_is_max_of_compute_and_memory(gpu):
    s = gpu.sys
    flops, nbytes = 1e12, 1e9
    eff = gpu.gemm_eff(128, 4096)
    assert eff == pytest.approx(s.software.gemm_eff_max * 128 / 144 * 4096 / 4160)
    assert gpu.gemm_us(flops, nbytes, 128, 4096) == pytest.approx(
        max(flops / (s.peak_bf16_TFLOPs * 1e6 * eff), nbytes / (s.hbm_GBps * 1e3)))
    # a copy kernel: launch + bytes at the efficient HBM rate
    assert gpu.permute_us(1000) == pytest.approx(
        s.software.kernel_launch_us + 2 * 1000 * 8192 / (s.hbm_GBps * 1e3 * s.software.hbm_efficiency))


def test_weights_are_read_once_per_pass(gpu):
    one = WorkItem(0, 0, 8, 128, 14336)
    t1 = gpu.expert_batch_us([one], 1.0)
    w = 3 * 4096 * 14336 * 2 / (gpu.sys.hbm_GBps * 1e3)
    assert t1 == pytest.approx(w + 8 * (2 * 4096 + 3 * 14336) * 2 / (gpu.sys.hbm_GBps * 1e3))
    # a lone small tile is weight bound; more SMs do not help it
    assert gpu.expert_batch_us([one], 0.9) == pytest.approx(t1)


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
    flops = 6.0 * rows * 4096 * 14336
    compute = flops / (gpu.peak * gpu.gemm_eff(128, 4096))
    assert compute * (1 - 1e-9) <= total <= compute * 1.01
    assert len(batches) > 1       # passes are bounded, so outputs can leave early
