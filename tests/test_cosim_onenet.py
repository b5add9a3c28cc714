"""One network per layer, causality of every system's timeline, deduplication arithmetic."""
import dataclasses

import numpy as np
import pytest

from moehub.cosim.config import load_model_config, load_system_config, load_workload_config
from moehub.cosim.causality import check
from moehub.cosim.layer import Layer
from moehub.cosim.systems import SYSTEMS, run_system
from moehub.cosim.workload import Routing

from cosim_helpers import layer


@pytest.fixture(scope="module")
def two_nodes():
    L = layer("deepseek-v3", "h100x16-ib", tokens=32)
    return L, {n: run_system(n, L) for n in SYSTEMS}


def _nic_bytes(res, G):
    """Bytes each GPU's NIC sends, over every network of the system's last pass."""
    out = np.zeros(G)
    for net, curves in {ph: v for ph, v in res.nets.items()}.values():
        for f, c in zip(net.flows[:net.own], curves[:net.own]):
            if len(c.b) and f.p0 % 5 == 2:       # NIC egress port of GPU p0 // 5
                out[f.p0 // 5] += c.b[-1]
    return out


def test_nic_bytes_bound_the_layer_from_below(two_nodes):
    """Dispatch, combine and control traffic share each NIC: the layer cannot end before
    the busiest NIC has sent all of its bytes."""
    L, res = two_nodes
    bw = L.sys.inter_bw_GBps * 1000.0
    for name, r in res.items():
        if name == "ideal":
            continue
        nic = _nic_bytes(r, L.G)
        assert nic.max() > 0, name
        assert r.latency_us >= nic.max() / bw, name


def test_combine_and_dispatch_compete_for_the_same_ports(two_nodes):
    """In the overlapping systems, the combine network carries the dispatch as background
    flows on the same ports (and the other way round)."""
    L, res = two_nodes
    for name in ("comet", "fused", "hub"):
        nets = res[name].nets
        assert {"dispatch", "combine"} <= set(nets), name
        for phase in ("dispatch", "combine"):
            net, _ = nets[phase]
            assert len(net.flows) > net.own, (name, phase)      # others' traffic is there
        assert res[name].extra["converged"], name


def test_every_system_timeline_is_causal(two_nodes):
    L, res = two_nodes
    for name, r in res.items():
        assert check(r) == [], name
    L8 = layer("qwen2-57b-a14b", tokens=128)
    for name in SYSTEMS:
        assert check(run_system(name, L8)) == [], name


def test_the_checker_catches_a_tile_started_before_its_rows(two_nodes):
    _, res = two_nodes
    r = res["comet"]
    d, it, start, end = r.gemm_log[0]
    bad = dataclasses.replace(r, gemm_log=[(d, dataclasses.replace(it, landed=start + 1.0),
                                            start, end)], combine_log=[], nets={})
    assert any("before its rows landed" in v for v in check(bad))
    late = dataclasses.replace(r, gemm_log=[], combine_log=[(0, "t", 1.0, 2.0)], nets={})
    assert any("before its GEMM can have finished it" in v for v in check(late))


def test_the_checker_catches_an_overloaded_port(two_nodes):
    _, res = two_nodes
    net, curves = res["hub"].nets["dispatch"]
    c = curves[0]
    fast = dataclasses.replace(c, b=c.b * 1e3)       # 1000x the bytes in the same time
    bad = dataclasses.replace(res["hub"], gemm_log=[], combine_log=[],
                              nets={"dispatch": (net, [fast] + list(curves[1:]))})
    assert any("carries" in v for v in check(bad))


def _hand_layer():
    """2 nodes x 2 GPUs, 4 experts (one per GPU), top-4: GPU 0's token 0 picks experts
    0, 1, 2, 3 (its own, its node peer, both GPUs of node 1)."""
    s = load_system_config("h100x16-ib").replace(gpus=4, gpus_per_node=2)
    m = load_model_config("mixtral-8x7b").replace(experts=4, topk=4)
    w = load_workload_config("default").replace(tokens_per_gpu=1)
    ex = np.array([[[0, 1, 2, 3]], [[0, 1, 2, 3]], [[2, 3, 0, 1]], [[3, 2, 1, 0]]])
    return Layer(s, m, w, Routing(ex, 4))


def test_dedup_per_gpu_and_per_node_with_forwarding():
    L = _hand_layer()
    assert L.counts.sum() == 16                 # one row per (token, expert)
    assert (L.gpu_rows == 1).all()             # every token reaches every GPU once
    # one RDMA copy per (token, remote node), to the GPU with the source's local rank,
    # which forwards to its node peer
    assert L.node_rows.tolist() == [[1, 1], [1, 1], [1, 1], [1, 1]]
    assert L.fwd_rows.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]
    r = run_system("deepep", L)
    assert r.extra["rows_sent"] == 4 * (2 + 1 + 1)   # own node 2 GPUs, 1 RDMA, 1 forward
    assert check(r) == []


def test_dedup_never_sends_more_than_per_row():
    L = layer("deepseek-v3", "h100x16-ib", tokens=32)
    assert (L.gpu_rows <= L.counts).all()
    pairs = {(s, t, d) for s, t, d in zip(L.src, L.tok, L.dest)}
    assert L.gpu_rows.sum() == len(pairs)
    assert L.node_rows.sum() <= L.gpu_rows.sum()
