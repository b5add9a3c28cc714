"""The papers' kind of baseline (eager Megatron-Core dispatchers): registered with their
kind, costed by their mechanisms, causal, and slower than today's software for the
reasons their code gives."""
import dataclasses

import numpy as np
import pytest

from moehub.cosim.causality import check
from moehub.cosim.headline_grid import scale_compute_to_link
from moehub.cosim.systems import (BASELINES, KINDS, MODULES, PAPER_BASELINES, PHASES,
                                  SYSTEMS, eager, run_system)
from moehub.cosim.config import load_model_config, load_system_config, load_workload_config
from moehub.cosim.layer import Layer
from moehub.cosim.workload import make_routing

from cosim_helpers import layer

PAPER = ("megatron_a2a", "megatron_ag", "deepspeed_moe")
SYNCS = {"megatron_a2a": 3, "megatron_ag": 3, "deepspeed_moe": 1}


def _layer(system, model="mixtral-8x7b", tokens=64):
    m = load_model_config(model)
    w = load_workload_config("default").replace(tokens_per_gpu=tokens, seed=1)
    return Layer(system, m, w, make_routing(m, w, system.gpus))


def _busy(r, gpu, name):
    return sum(p.end - p.start for p in r.phases if p.gpu == gpu and p.name == name)


def test_registry_tells_the_papers_kind_from_todays_software():
    from moehub.cosim.headline_pick import baseline_sets
    assert PAPER_BASELINES == PAPER and set(PAPER) <= set(SYSTEMS)
    assert all(MODULES[n].KIND == "paper" == KINDS[n] for n in PAPER)
    assert not set(PAPER) & set(BASELINES)
    assert KINDS["hub"] == "hub" and KINDS["ideal"] == "bound" and KINDS["bulk"] == "today"
    assert baseline_sets() == (BASELINES, PAPER)


@pytest.fixture(scope="module")
def mixtral_128():
    L = layer(tokens=128)
    return L, {n: run_system(n, L) for n in (*PAPER, "bulk", "hub", "ideal")}


def test_phases_host_syncs_and_causality(mixtral_128):
    L, res = mixtral_128
    for n in PAPER:
        r = res[n]
        assert {p.name for p in r.phases} == set(PHASES[n]) - {"sort by expert", "unsort"}
        # a2a: two masked_selects + the stream sync; all-gather: .cpu() + two
        # masked_selects; DeepSpeed: exp_counts .to("cpu")
        assert sum(1 for p in r.phases if p.name == "host sync" and p.gpu == 0) == SYNCS[n], n
        assert check(r) == [], n


def test_eager_dispatcher_pays_its_syncs_and_launches_over_bulk(mixtral_128):
    """Same rows on the same all-to-all as the bulk system; the difference is what the
    eager code adds before the all-to-all: three host syncs and the unfused permute."""
    L, res = mixtral_128
    a2a, bulk = res["megatron_a2a"], res["bulk"]
    syncs = _busy(a2a, 0, "host sync")
    assert syncs == pytest.approx(3 * L.sys.software.d2h_sync_us)
    start = lambda r, n: min(p.start for p in r.phases if p.name == n)
    assert start(a2a, "all-to-all dispatch") > start(bulk, "all-to-all dispatch") + syncs / 2
    assert a2a.latency_us > bulk.latency_us > res["hub"].latency_us > res["ideal"].latency_us


def test_allgather_sends_every_token_to_every_gpu(mixtral_128):
    """The all-gather dispatcher's wire bytes do not depend on the routing: T rows from
    every GPU to every other, (G - 1) x T per GPU, four times a top-2 all-to-all's on 8."""
    L, res = mixtral_128
    net, curves = res["megatron_ag"].nets["dispatch"]
    sent = np.zeros(L.G)
    for f, c in zip(net.flows[:net.own], curves[:net.own]):
        if len(c.b):
            sent[f.p0 // 5] += c.b[-1]
    row = L.row_bytes + np.ceil(L.row_bytes / L.sys.link_max_payload_bytes) * L.sys.link_header_bytes
    assert sent == pytest.approx(np.full(L.G, (L.G - 1) * L.T * row))
    a2a_rows = (L.counts.sum() - np.trace(L.counts)) / L.G
    assert (L.G - 1) * L.T / a2a_rows > 3.5


def test_per_expert_loop_costs_more_with_many_experts_per_gpu():
    """DeepSeek-V3 on 8 GPUs: 32 experts per GPU run one after another, each with its own
    ramp, wave tail and launches (SequentialMLP), against one grouped GEMM."""
    L = layer("deepseek-v3", tokens=64)
    a2a, bulk = run_system("megatron_a2a", L), run_system("bulk", L)
    gemm = lambda r: _busy(r, 0, "expert GEMM")
    assert gemm(a2a) > gemm(bulk) + 32 * 3 * L.sys.software.kernel_launch_us * 0.9


def test_faster_compute_shrinks_gemms_not_the_hosts_costs():
    """The compute-to-link axis: 4x the GPU's peaks shortens the GEMMs; launches, host
    syncs and collectives stay (they run on the host and the links)."""
    s = load_system_config("h100x8")
    base, fast = _layer(s, tokens=1024), _layer(scale_compute_to_link(s, 4.0), tokens=1024)
    for n in PAPER:
        r0, r1 = run_system(n, base), run_system(n, fast)
        assert _busy(r1, 0, "expert GEMM") < 0.6 * _busy(r0, 0, "expert GEMM"), n
        assert _busy(r1, 0, "host sync") == pytest.approx(_busy(r0, 0, "host sync")), n
        assert r1.latency_us < r0.latency_us, n


def test_eager_kernels_launch_eagerly_even_in_graph_mode():
    s = load_system_config("h100x8")
    sw = s.software
    graph = s.replace(software={**dataclasses.asdict(sw), "launch_mode": "graph"})
    L = _layer(graph, tokens=8)
    assert eager.kernels_us(L, 3) == pytest.approx(3 * sw.kernel_launch_us)
    assert eager.syncs_us(L, 2) == pytest.approx(2 * sw.d2h_sync_us)


def test_two_nodes_run_causally():
    L = layer("mixtral-8x7b", "h100x16-ib", tokens=64)
    for n in PAPER:
        r = run_system(n, L)
        assert check(r) == [], n
        assert r.extra["converged"], n


def test_study_row_puts_the_papers_kind_behind_todays_best():
    from moehub.cosim.studies.paper_band import point, table
    r = point("h100x8", "mixtral-8x7b", 64, 1.0)
    assert r["vs_paper"] > r["vs_today"]
    assert r["paper"] in PAPER and r["today"] in BASELINES
    assert r["in_band"] == (1.40 <= r["vs_paper"] <= 3.08)
    assert "| mixtral-8x7b | 64 | 1 |" in table([r])


def test_capacity_padding_sends_and_computes_whole_buffers(mixtral_128):
    """DeepSpeed-MoE: every GPU sends each other GPU its experts' whole capacity buffers
    (E/G x C rows, C = ceil(k T 1.25 / E)) and each expert computes G x C rows, padding
    included, whatever was routed; its einsums grow with the square of the tokens."""
    from moehub.cosim.systems import deepspeed_moe as D
    L, res = mixtral_128
    C = D.capacity(L)
    assert C == int(np.ceil(128 * 2 * 1.25 / 8))
    net, curves = res["deepspeed_moe"].nets["dispatch"]
    sent = sum(c.b[-1] for f, c in zip(net.flows[:net.own], curves[:net.own])
               if len(c.b) and f.p0 // 5 == 0)
    row = L.row_bytes + np.ceil(L.row_bytes / L.sys.link_max_payload_bytes) * L.sys.link_header_bytes
    assert sent == pytest.approx((L.G - 1) * L.E_local * C * row)
    small, big = (D.einsum_us(layer(tokens=t), 8 * D.capacity(layer(tokens=t)), t, 0.0)
                  for t in (1024, 4096))
    assert big > 8 * small            # 4x the tokens: ~16x the einsum's flops
