"""X-MoE's redundancy-bypassing dispatch (cosim/systems/xmoe_rbd.py): one pilot row per
(token, destination node) crosses the NIC, to the GPU of one of the token's experts there,
which makes the node's other copies; the combine returns one row per (token, node); the
layer converges on two nodes; on one node X-MoE still runs both all-to-alls; the relay
study carries its row. Expected counts come from the routing (numpy on the destinations),
not from the system's code."""
import numpy as np
import pytest

from cosim_helpers import layer, own_bytes, remote_token_nodes, token_nodes, two_nodes
from moehub.cosim import causality, dedup
from moehub.cosim.systems import BASELINES, KINDS, PHASES, SYSTEMS, run_system
from moehub.cosim.systems import xmoe_rbd as R
from moehub.cosim.studies import relay


@pytest.fixture(scope="module")
def ib():
    L = two_nodes(tokens=32)
    return L, run_system("xmoe_rbd", L)


def test_registered_as_a_software_baseline_of_today():
    assert "xmoe_rbd" in SYSTEMS and KINDS["xmoe_rbd"] == "today" and "xmoe_rbd" in BASELINES
    assert PHASES["xmoe_rbd"] == R.PHASES


def test_nic_carries_one_row_per_token_and_remote_node(ib):
    L, r = ib
    remote = remote_token_nodes(L)
    assert r.extra["nic_rows"] == remote
    inter = L.pair_links()[1]
    hd, mp = L.sys.link_header_bytes, L.sys.link_max_payload_bytes
    for phase, row in (("dispatch", L.disp_bytes), ("combine", L.comb_bytes)):
        nic = own_bytes(L, r, phase)[inter].sum()
        # the rows' bytes plus a header per largest payload of each (src, dst) message
        assert remote * row <= nic <= remote * row * (1 + hd / mp) + inter.sum() * (mp + hd)
    for phase in ("forward", "combine_relay"):          # the replicas never leave a node
        assert own_bytes(L, r, phase)[inter].sum() == 0
    every_row = L.counts[inter].sum()
    assert every_row > 2 * remote                       # deepseek-v3's top-8 shares nodes


def test_runs_and_converges_on_two_nodes(ib):
    L, r = ib
    assert np.isfinite(r.latency_us) and r.extra["converged"]
    assert causality.check(r) == []
    assert {p.name for p in r.phases if p.name != "shared expert"} == set(PHASES["xmoe_rbd"])
    assert r.extra["host_syncs"] == 14
    order = ["gate", "index exchange", "gather pilots", "all-to-all global", "all-to-all node",
             "expert GEMM", "all-to-all node back", "all-to-all global back"]
    for g in range(L.G):
        first = {}
        for p in sorted(r.phases, key=lambda p: p.start):
            if p.gpu == g:
                first.setdefault(p.name, p)
        for a, b in zip(order, order[1:]):
            assert first[a].end <= first[b].start + 1e-9, (g, a, b)
    assert r.latency_us > run_system("ideal", L).latency_us


def test_pilots_land_on_a_gpu_of_the_tokens_experts_in_that_node():
    """Every pilot goes to a GPU that serves one of the token's experts in its node, so each
    GPU receives exactly its experts' rows (pilot + replicas), none more. A pilot sent to the
    source's local rank (DeepEP's relay) or to any other GPU breaks both."""
    L = two_nodes(tokens=16)
    G, gpn = L.G, L.sys.gpus_per_node
    dest = L.dest.reshape(G, L.T, L.k)
    first, second, virtual = R.routes(L)
    assert np.array_equal(first.sum(axis=0) + second.sum(axis=0), L.counts.sum(axis=0))
    pilot, is_pilot = dedup.pilots(dest, gpn, np.random.default_rng(0).random(dest.shape))
    assert (pilot // gpn == dest // gpn).all()
    assert (pilot[..., :, None] == dest[..., None, :]).any(axis=-1).all()
    assert np.array_equal(pilot[is_pilot], dest[is_pilot])
    src, node = token_nodes(L)
    assert is_pilot.sum() == len(src) == first.sum()
    assert virtual.sum() == second.sum() == L.counts.sum() - first.sum()
    # the system sends exactly these routes over the dispatch's two networks
    r = run_system("xmoe_rbd", L)
    assert np.allclose(own_bytes(L, r, "dispatch"), R.wire(L, first, L.disp_bytes), rtol=1e-9)
    assert np.allclose(own_bytes(L, r, "forward"), R.wire(L, second, L.disp_bytes), rtol=1e-9)


def test_the_pilot_is_a_random_one_of_the_group_as_x_moe_permutes():
    """X-MoE draws ``randperm`` over the rows: a two-row group's pilot is either row, about
    half the time the router's first; the study's phase model keeps the top-k order."""
    L = two_nodes(tokens=64)
    dest = L.dest.reshape(L.G, L.T, L.k)
    gpn = L.sys.gpus_per_node
    node = dest // gpn
    p_rand = dedup.pilots(dest, gpn, np.random.default_rng(1).random(dest.shape))[1]
    p_topk = dedup.pilots(dest, gpn)[1]
    both = (node[..., :, None] == node[..., None, :]).sum(axis=-1) >= 2   # in a shared group
    share = (p_rand & p_topk)[both].sum() / p_topk[both].sum()
    assert 0.2 < share < 0.8


def test_one_node_still_runs_both_all_to_alls():
    """X-MoE's mesh is min(EP size, 8): on one node the global and the node all-to-all span
    the same GPUs, RBD runs as on several (one pilot per token, the node's other copies as
    replicas); nothing crosses a NIC."""
    L = layer(tokens=64)
    assert L.nodes == 1
    r = run_system("xmoe_rbd", L)
    assert r.extra["converged"] and causality.check(r) == []
    first, second, _ = R.routes(L)
    assert first.sum() == L.G * L.T and second.sum() == L.counts.sum() - L.G * L.T
    assert r.extra["nic_rows"] == 0
    assert np.allclose(own_bytes(L, r, "dispatch"), R.wire(L, first, L.disp_bytes), rtol=1e-9)
    assert np.allclose(own_bytes(L, r, "forward"), R.wire(L, second, L.disp_bytes), rtol=1e-9)
    names = {p.name for p in r.phases}
    assert {"all-to-all global", "all-to-all node", "all-to-all node back",
            "all-to-all global back"} <= names
    assert r.latency_us > run_system("bulk", L).latency_us      # a second all-to-all, syncs


def test_the_relay_study_has_an_x_moe_row():
    rows = relay.point("h100x16-ib", "deepseek-v3", 8, log=lambda s: None)
    by = {r["row"]: r for r in rows}
    assert [r["row"] for r in rows] == [n for n, _, _ in relay.ROWS]
    x, d = by["X-MoE RBD"], by["DeepEP normal"]
    assert x["vs_deepep"] == pytest.approx(d["layer_us"] / x["layer_us"])
    # one row per (token, remote node) both ways, as DeepEP (its rows carry their own
    # packet headers, X-MoE's all-to-all messages one per largest payload)
    assert x["dispatch_nic_GB"] == pytest.approx(d["dispatch_nic_GB"], rel=0.03)
    assert x["combine_nic_GB"] == pytest.approx(d["combine_nic_GB"], rel=0.03)
    assert "| X-MoE RBD |" in relay.table(rows)
