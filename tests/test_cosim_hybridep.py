"""HybridEP (cosim/systems/hybridep.py): it runs on one node and on two, crosses the NIC
once per (token, remote node) as DeepEP normal mode does (fewer bytes than the bulk
all-to-all), is never faster than the communication-free bound, gives the GEMMs the SMs its
kernels do not hold, its SM curve is the fit of its published tables, and the relay
study carries its row. Expected counts come from the routing (numpy on the destinations),
not from the system's code."""
import dataclasses

import numpy as np
import pytest

from cosim_helpers import layer, own_bytes, remote_token_nodes, two_nodes
from moehub.cosim import calibration as cal
from moehub.cosim.config import load_system_config
from moehub.cosim.systems import BASELINES, KINDS, PHASES, run_system
from moehub.cosim.systems import hybridep as H
from moehub.cosim.studies import relay


@pytest.fixture(scope="module")
def ib():
    L = two_nodes()
    return L, {n: run_system(n, L) for n in ("hybridep", "deepep", "bulk", "ideal")}


def test_registered_as_a_software_baseline_of_today():
    assert KINDS["hybridep"] == "today" and "hybridep" in BASELINES


@pytest.mark.parametrize("kw", [dict(), dict(model="deepseek-v3", system="h100x16-ib", tokens=64)],
                         ids=["8-gpu", "2-node"])
def test_runs_on_one_node_and_on_two_with_its_phases(kw):
    L = layer(**kw)
    r = run_system("hybridep", L)
    assert np.isfinite(r.latency_us) and r.extra["converged"]
    assert {p.name for p in r.phases if p.name != "shared expert"} == set(PHASES["hybridep"])
    for g in range(L.G):
        ph = {p.name: p for p in r.phases if p.gpu == g}
        order = ["gate", "layout", "count exchange", "scatter index", "host sync", "dispatch"]
        for a, b in zip(order, order[1:]):       # nothing is sent before the host sync
            assert ph[a].end <= ph[b].start + 1e-9, (g, a, b)
        assert ph["permute"].end <= ph["expert GEMM"].start + 1e-9
        assert ph["unpermute"].end <= ph["combine"].start + 1e-9


def test_nic_rows_are_deepeps_per_token_node_dedup_and_below_the_bulk_all_to_all(ib):
    L, res = ib
    node = np.arange(L.G) // L.sys.gpus_per_node
    inter = node[:, None] != node[None, :]
    dedup = remote_token_nodes(L)
    assert res["hybridep"].extra["rdma_rows"] == dedup
    nic = {n: own_bytes(L, res[n], "dispatch")[inter].sum() for n in ("hybridep", "deepep", "bulk")}
    assert nic["hybridep"] == pytest.approx(dedup * H.dispatch_wire(L), rel=1e-9)
    assert nic["deepep"] == pytest.approx(dedup * L.row_wire_sw, rel=1e-9)
    # the rows are DeepEP's; each also carries the probs of the node's experts
    assert H.dispatch_wire(L) > L.row_wire_sw
    assert H.prob_bytes(L) == 4 * L.E_local * L.sys.gpus_per_node
    remote_rows = int(L.counts[inter].sum())              # one per (token, remote expert)
    assert remote_rows > 2 * dedup and nic["bulk"] > 1.5 * nic["hybridep"]
    # the combine sends one reduced row per (token, node) back
    comb = own_bytes(L, res["hybridep"], "combine")[inter].sum()
    assert comb == pytest.approx(dedup * L.comb_wire_sw, rel=1e-9)
    assert comb == pytest.approx(own_bytes(L, res["deepep"], "combine")[inter].sum(), rel=1e-9)


@pytest.mark.parametrize("kw", [dict(tokens=1), dict(), dict(model="deepseek-v3", tokens=512),
                                dict(model="deepseek-v3", system="h100x16-ib", tokens=16)])
def test_never_faster_than_the_communication_free_bound(kw):
    L = layer(**kw)
    assert run_system("hybridep", L).latency_us >= run_system("ideal", L).latency_us - 1e-9


def test_fewer_sms_than_deepep_leave_the_overlapped_gemm_more():
    """The shared expert runs while the dispatch kernel holds its SMs: with HybridEP's 16
    SMs it gets 116 of 132, with DeepEP's 24 only 108 (compute-bound at 512 tokens)."""
    sw = load_system_config("h100x8").software
    span = {}
    for sms in (16, 24):
        L = layer(model="deepseek-v3", tokens=512,
                  software={**dataclasses.asdict(sw), "comm_sms_hybridep": sms})
        r = run_system("hybridep", L)
        shared = next(p for p in r.phases if p.name == "shared expert" and p.gpu == 0)
        send = next(p for p in r.phases if p.name == "dispatch" and p.gpu == 0)
        assert shared.end < send.end          # the whole shared expert under the reservation
        span[sms] = shared.end - shared.start
    assert L.comp.sms_for("deepep") == 24 and sw.comm_sms_hybridep == 16
    assert span[24] / span[16] == pytest.approx((132 - 16) / (132 - 24), rel=0.01)


def test_its_sm_curve_is_the_fit_of_its_own_tables_and_beats_deepeps():
    best, _ = cal.fit(cal.load_points(), cal.HYBRIDEP_SM_FIT, ("sm-hybridep",))
    sw = load_system_config("b200x8").software
    assert best == {k: getattr(sw, k) for k in best}
    pts = [p for p in cal.evaluate(cal.load_points()) if p.component == "sm-hybridep"]
    assert len(pts) == 9 and all(p.ok for p in pts)
    # the same SMs move about twice DeepEP V1's bytes (B200, 16 SMs, BF16 rows: 735 vs 348)
    c = layer(system="b200x8").comp
    assert c.comm_GBps(16, 14336, False, "hybridep") > 1.8 * c.comm_GBps(16, 14336, False)


def test_the_routing_map_all_gather_is_a_rail_ring():
    L = two_nodes(tokens=8)
    b = L.T * L.E
    t, sent = H.ring_allgather(L, b)
    node = np.arange(L.G) // 8
    inter = node[:, None] != node[None, :]
    assert sent.sum(axis=1) == pytest.approx(np.full(L.G, (L.G - 1) * b))
    assert (inter & (sent > 0)).sum(axis=1).tolist() == [1] * L.G     # one NIC channel each
    assert np.where(inter, sent, 0).sum(axis=1) == pytest.approx(np.full(L.G, (L.G - 1) * b / 8))
    assert t > L.comp.collective_latency_us("allgather", L.G, L.nodes)
    one = layer(tokens=8, gpus=1, gpus_per_node=1)
    assert H.ring_allgather(one, b) == (0.0, pytest.approx(np.zeros((1, 1))))
    r = run_system("hybridep", one)
    assert not [p for p in r.phases if p.name == "count exchange"]


def test_the_relay_study_has_a_hybridep_row_beside_deepep():
    rows = relay.point("h100x16-ib", "deepseek-v3", 8, log=lambda s: None)
    by = {r["row"]: r for r in rows}
    assert [r["row"] for r in rows] == [n for n, _, _ in relay.ROWS]
    assert "HybridEP" in by and by["DeepEP normal"]["vs_deepep"] == 1.0
    h, d = by["HybridEP"], by["DeepEP normal"]
    assert h["vs_deepep"] == pytest.approx(d["layer_us"] / h["layer_us"])
    assert h["vs_hub_v2"] == pytest.approx(by["hub v2"]["layer_us"] / h["layer_us"])
    assert h["combine_nic_GB"] == pytest.approx(d["combine_nic_GB"], rel=1e-9)
    assert d["dispatch_nic_GB"] < h["dispatch_nic_GB"] < by["hub v2"]["dispatch_nic_GB"]
    assert "| HybridEP |" in relay.table(rows)
