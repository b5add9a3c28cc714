"""Relay hubs (protocol v3) in the co-simulation's ``hub`` system: the NIC carries one row
per (token, destination node), the relays forward the rest over NVLink, the reduce sends
one row per (token, node) back; feature validation; convergence on a two-node layer.
Small layers: DeepSeek-V3 on 2 nodes x 4 GPUs, 32 tokens per GPU (2048 routed rows).
Expected counts come from the routing itself (:mod:`moehub.cosim.dedup`, numpy on the
destinations), not from the relay code."""
import numpy as np
import pytest

from cosim_helpers import layer
from moehub.cosim.causality import check
from moehub.cosim.layer import Layer
from moehub.cosim.workload import make_routing
from moehub.cosim.hub_stage import WRITE_DELAY
from moehub.cosim.systems import MAX_PASSES, TOL_REL, TOL_US, run_system
from moehub.cosim.systems import common as C
from moehub.cosim.systems import hub as H
from moehub.cosim.systems import relay as R
from moehub.spec.config import ConfigError

V2 = frozenset(H.FEATURES)
RELAY = V2 | {"relay"}
REDUCE = RELAY | {"reduce"}


def two_nodes(tokens=32):
    return layer(model="deepseek-v3", system="h100x16-ib", tokens=tokens, gpus=8, gpus_per_node=4)


@pytest.fixture(scope="module")
def L():
    return two_nodes()


@pytest.fixture(scope="module")
def runs(L):
    return {f: run_system("hub", L, hub_features=f) for f in (V2, RELAY, REDUCE)}


def masks(L):
    node = np.arange(L.G) // 4
    inter = node[:, None] != node[None, :]
    return inter, ~inter & ~np.eye(L.G, dtype=bool)


def sent(res, phase, L):
    """[G, G] bytes the phase's own flows carried in the result's last pass."""
    if phase not in res.nets:
        return np.zeros((L.G, L.G))
    return C.pair_curves(res.nets[phase][1], np.arange(L.G * L.G).reshape(L.G, L.G))[1]


def remote_token_nodes(L) -> int:
    """(source, token, node) triples with the node not the source's: one NIC row each."""
    node = L.dest // 4
    keys = np.unique((L.src * L.T + L.tok) * 2 + node)
    s = keys // 2 // L.T
    return int(((keys % 2) != s // 4).sum())


def test_layer_is_two_nodes(L):
    assert (L.G, L.nodes, L.sys.gpus_per_node) == (8, 2, 4)
    assert L.E_local == 32 and L.k == 8


def test_nic_bytes_with_relay_are_the_token_node_dedup(L, runs):
    inter, _ = masks(L)
    dedup = int(L.node_rows.sum() - L.node_rows[np.arange(L.G), np.arange(L.G) // 4].sum())
    assert dedup == remote_token_nodes(L)
    nic = sent(runs[RELAY], "dispatch", L)[inter].sum()
    assert nic == pytest.approx(dedup * L.row_wire_hub, rel=1e-9)
    assert runs[RELAY].extra["relay"]["nic_rows"] == dedup
    # the v2 hub sends one copy per (token, destination GPU) across the NIC: more
    v2 = sent(runs[V2], "dispatch", L)[inter].sum()
    per_gpu = int((L.gpu_rows * inter).sum())
    assert v2 == pytest.approx(per_gpu * L.row_wire_hub, rel=1e-9)
    assert per_gpu > 1.5 * dedup
    assert "forward" not in runs[V2].nets


def test_forwarded_nvlink_bytes_per_relay_and_destination(L, runs):
    """The forward network carries L.fwd_rows[r, d] rows from relay r to GPU d (DeepEP's
    per-node forwarding count, from the routing), all inside a node."""
    inter, intra = masks(L)
    fwd = sent(runs[RELAY], "forward", L)
    np.testing.assert_allclose(fwd, L.fwd_rows * L.row_wire_hub, rtol=1e-9)
    assert fwd[~intra].sum() == 0 and fwd.sum() > 0
    assert runs[RELAY].extra["relay"]["forward_rows"] == int(L.fwd_rows.sum())
    # a row for a remote GPU reaches it through exactly one of: relay-local or forward
    w = H.wire_rows(L, True)
    remote = (w.src // 4 != w.dest // 4).sum()
    ex = runs[RELAY].extra["relay"]
    assert ex["relay_local_rows"] + ex["forward_rows"] == remote
    # first-hop NVLink: the direct rows (same node), one per (token, GPU) as in v2
    np.testing.assert_allclose(sent(runs[RELAY], "dispatch", L)[intra],
                               (L.gpu_rows * L.row_wire_hub)[intra], rtol=1e-9)


def test_receiving_hubs_write_the_same_rows_as_v2(L, runs):
    """Relayed or forwarded, every GPU's hub allocates what the v2 hub's did, no drop."""
    for f in (RELAY, REDUCE):
        assert runs[f].extra["drops"] == 0
        assert runs[f].extra["rows_allocated"] == runs[V2].extra["rows_allocated"] == L.N
        assert runs[f].extra["rows"] == runs[V2].extra["rows"]


def test_forwards_leave_after_their_relay_row_landed(L):
    cfg = H.hub_config_v2(L, H.check_features(RELAY))
    L.begin_run()
    d = H.relay_schedule(L, 10.0, cfg, R.check_layer(L, cfg))
    rt = d.routes
    fi = np.nonzero(rt.fwd)[0]
    assert len(fi)
    relay_last = d.hop1_last[rt.hop1_of[fi]]
    clk = cfg.hub_clock_GHz * 1000.0
    assert (d.first[fi] >= relay_last + WRITE_DELAY / clk + L.sys.intra_latency_us - 1e-9).all()
    # the relay's own targets arrive with the relay row (no second hop)
    own = np.nonzero(rt.remote & ~rt.fwd)[0]
    assert (rt.relay[own] == rt.w.dest[own]).all()
    assert (rt.relay[fi] // 4 == rt.w.dest[fi] // 4).all()
    assert (rt.relay[fi] % 4 == rt.w.src[fi] % 4).all()       # the source's local rank


def test_reduce_cuts_combine_nic_bytes_by_the_experts_per_token_node(L, runs):
    inter, _ = masks(L)
    remote_rows = int(((L.src // 4) != (L.dest // 4)).sum())
    sums = remote_token_nodes(L)
    plain = sent(runs[RELAY], "combine", L)[inter].sum()
    assert plain == pytest.approx(remote_rows * L.comb_wire_sw, rel=1e-9)
    red = sent(runs[REDUCE], "combine", L)[inter].sum() + sent(runs[REDUCE], "combine_relay", L)[inter].sum()
    assert sent(runs[REDUCE], "combine", L)[inter].sum() == 0      # partials stay in the node
    assert red == pytest.approx(sums * L.comb_wire_sw, rel=1e-9)
    assert plain / red == pytest.approx(remote_rows / sums, rel=1e-9)
    assert remote_rows / sums > 2                  # top-8 over two nodes: several per node
    ex = runs[REDUCE].extra["relay"]
    assert ex["combine_nic_rows"] == sums and ex["reduce_parts"] == remote_rows
    assert ex["parts_per_sum"] == pytest.approx(remote_rows / sums)


def test_reduce_hbm_bytes_are_the_reference_models(L, runs):
    """The accumulate datapath's bytes, summed part by part, equal spec.relay's closed form
    per sum (FP32: first part written, middle read and written, last read)."""
    ex = runs[REDUCE].extra["relay"]
    assert ex["rmw_GB"] == pytest.approx(ex["rmw_GB_check"], rel=1e-12)
    assert ex["rmw_GB"] > 0
    # its time at the achievable HBM bandwidth bounds what it can take from the GEMMs
    assert ex["rmw_us_max"] * L.gpu.hbm >= ex["rmw_GB"] * 1e9 / L.G
    # the record table the relay config sizes: (nodes - 1) x 4096 records of 1 + 2k + 4 + 16k bits
    assert ex["record_table_KiB"] == pytest.approx(1 * 4096 * (1 + 2 * 8 + 4 + 16 * 8) / 8192)


def partial_parts(L):
    """From the routing alone: per partial row (a routed row whose owner is in another
    node) its relay (the GPU of the expert's node with the owner's local rank), and the
    parts of each (relay, owner, token) sum."""
    remote = (L.src // 4) != (L.dest // 4)
    relay = (L.dest[remote] // 4) * 4 + L.src[remote] % 4
    key = (relay * L.G + L.src[remote]) * L.T + L.tok[remote]
    _, sid, parts = np.unique(key, return_inverse=True, return_counts=True)
    return relay, sid, parts


def test_reduce_hbm_bytes_include_the_partial_staging(L, runs):
    """Every partial row is written to the relay's staging and read back (2 x hidden x 2
    bytes), on top of the FP32 accumulator's bytes (2 (p - 1) x hidden x 4 per sum of p
    parts); the reduce's HBM time per relay streams both at the achievable HBM bandwidth.
    Expected bytes from the routing, not from the relay code."""
    ex = runs[REDUCE].extra["relay"]
    Hd = L.model.hidden
    relay, sid, parts = partial_parts(L)
    acc = 2 * (parts - 1) * Hd * 4
    stage = 2 * Hd * 2
    assert ex["stage_GB"] * 1e9 == pytest.approx(len(relay) * stage, rel=1e-12)
    assert ex["rmw_GB"] * 1e9 == pytest.approx(acc.sum(), rel=1e-12)
    assert ex["reduce_hbm_GB"] * 1e9 == pytest.approx(acc.sum() + len(relay) * stage, rel=1e-12)
    per_relay = np.bincount(relay, minlength=L.G) * stage \
        + np.bincount(relay, weights=(acc / parts)[sid], minlength=L.G)
    assert ex["reduce_hbm_us_max"] == pytest.approx(per_relay.max() / L.gpu.hbm, rel=1e-9)
    # per part, what the accumulate datapath streams (the FIFO's service): the same split
    n = np.array([1, 3, 3, 3]); nth = np.array([0, 0, 1, 2])
    rmw, st = R.part_hbm_bytes(n, nth, Hd)
    np.testing.assert_allclose(rmw, [0, 4 * Hd, 8 * Hd, 4 * Hd])
    np.testing.assert_allclose(st, [stage] * 4)


def _reduce_run(monkeypatch, span):
    """The two-node layer with relay + reduce, the P window ``span`` rows per (sender,
    relay) pair (a fresh layer: its own passes)."""
    orig = R.check_layer
    monkeypatch.setattr(R, "check_layer", lambda L, cfg: orig(L, cfg).replace(partial_tags=span))
    Lp = two_nodes()
    return Lp, run_system("hub", Lp, hub_features=REDUCE)


def test_partial_flows_are_bounded_by_their_p_window(monkeypatch):
    """A (sender, relay) partial flow holds at most ``partial_span`` rows per credit round
    trip (link latency there and back, the staging's write and read of the row, the hub's
    credit latency): with one P tag each flow takes at least its bytes over that rate, and
    the partial rows reach their relays later than with a wide window."""
    from moehub.spec.timing import CREDIT_LATENCY
    Lp, one = _reduce_run(monkeypatch, 1)
    _, wide = _reduce_run(monkeypatch, 256)
    assert one.extra["relay"]["partial_span"] == 1 and wide.extra["relay"]["partial_span"] == 256
    clk = Lp.hub.hub_clock_GHz * 1000.0
    Hd = Lp.model.hidden
    _, intra = masks(Lp)
    same_node = intra | np.eye(Lp.G, dtype=bool)
    lat = Lp.latency_matrix()
    rtt = 2 * lat + (WRITE_DELAY + CREDIT_LATENCY) / clk + 2 * Hd * 2 / Lp.gpu.hbm
    cap = Lp.comb_wire_sw / rtt
    net, curves = one.nets["combine_partial"]
    own = np.arange(Lp.G * Lp.G).reshape(Lp.G, Lp.G)
    ends, nbytes, _ = C.pair_curves(curves, own)
    assert nbytes[same_node].sum() > 0 and nbytes[~same_node].sum() == 0
    for s_, r_ in zip(*np.nonzero(nbytes > 0)):
        c = curves[own[s_, r_]]
        assert ends[s_, r_] - c.t[0] >= nbytes[s_, r_] / cap[s_, r_] * (1 - 1e-6) - 1e-6
    ends_w, nbytes_w, _ = C.pair_curves(wide.nets["combine_partial"][1], own)
    np.testing.assert_allclose(nbytes_w, nbytes, rtol=1e-9)
    busy = nbytes > 0
    assert ends[busy].max() > ends_w[busy].max() + 1.0


def test_reduce_is_no_faster_than_its_datapath(L, runs):
    """The reduce takes a partial row a chunk a cycle and a cycle between rows (the RTL's
    rate, :func:`reduce_row_us`): each part's service in the relay's accumulate queue is
    the longer of that and its HBM bytes' time -- the busiest relay's busy time, from the
    routing, is the sum of those (at 32 tokens per GPU the datapath's is the longer for
    every part)."""
    row_us = R.reduce_row_us(L.hub, L.model.hidden)
    assert row_us == pytest.approx((2 * L.model.hidden // L.hub.chunk_bytes + 1) / (L.hub.hub_clock_GHz * 1e3))
    # a part's HBM bytes are at most a middle part's accumulator read and write (8 x
    # hidden) and its staging write and read (4 x hidden): shorter than the datapath's row
    assert 12 * L.model.hidden / L.gpu.hbm < row_us
    relay, _, _ = partial_parts(L)
    busy = np.bincount(relay, minlength=L.G) * row_us
    assert runs[REDUCE].extra["relay"]["reduce_busy_us_max"] == pytest.approx(busy.max(), rel=1e-9)


def test_fifo_accumulate_order():
    a = np.array([0.0, 0.0, 5.0, 5.5])
    s = np.array([1.0, 2.0, 1.0, 1.0])
    np.testing.assert_allclose(R._fifo_done(a, s), [1.0, 3.0, 6.0, 7.0])


def test_relay_converges_and_keeps_causality(L, runs):
    for f in (RELAY, REDUCE):
        res = runs[f]
        ex = res.extra
        tol = max(TOL_US, TOL_REL * res.latency_us)
        assert ex["converged"] and ex["passes"] <= MAX_PASSES
        assert min(ex["residual_us"], ex["traffic_residual_us"]) <= tol
        assert check(res) == []
        assert "protocol v3: relay" in res.label


def test_reduced_rows_leave_after_their_parts(L, runs):
    """No reduced row crosses the NIC before any GEMM tile has finished, and each owner's
    layer ends after its last reduced row landed."""
    res = runs[REDUCE]
    net, curves = res.nets["combine_relay"]
    first_gemm = min(t for _, _, t, _ in res.combine_log)
    starts = [c.t[0] for c in list(curves)[:L.G * L.G] if len(c.t)]
    assert starts and min(starts) >= first_gemm - 1e-9
    ends = C.pair_curves(curves, np.arange(L.G * L.G).reshape(L.G, L.G))[0]
    s = sent(res, "combine_relay", L)
    last = np.where(s > 0, ends, 0).max(axis=0)
    assert (res.gpu_end >= last).all()


def test_relay_with_one_expert_per_gpu():
    """Mixtral (8 experts, top-2) on 2 x 4 GPUs, one expert per GPU (as DeepSeek-V3 on 256
    GPUs): the relay's rows to a GPU are plain rows; the NIC still carries one row per
    (token, remote node), the reduce one row per (token, node) back."""
    Lm = layer(model="mixtral-8x7b", system="h100x16-ib", tokens=32, gpus=8, gpus_per_node=4)
    res = run_system("hub", Lm, hub_features=REDUCE)
    assert (Lm.E_local, res.extra["relay"]["nic_rows"]) == (1, remote_token_nodes(Lm))
    assert res.extra["relay"]["combine_nic_rows"] == remote_token_nodes(Lm)


def test_relay_on_one_node_is_a_config_error():
    one = layer(model="deepseek-v3", system="h100x8", tokens=8)
    assert one.nodes == 1
    with pytest.raises(ConfigError, match="relay.*>= 2 nodes"):
        run_system("hub", one, hub_features=RELAY)


@pytest.mark.parametrize("features, match", [
    ({"reduce"}, "needs 'relay'"),
    ({"multicast", "reduce"}, "needs 'relay'"),
    ({"relay", "teleport"}, "unknown"),
])
def test_bad_feature_values_are_refused(features, match):
    with pytest.raises(ValueError, match=match):
        H.check_features(features)


def test_relay_brings_multicast_and_runs_with_rtl_hubs():
    assert H.check_features({"relay"}) == {"relay", "multicast"}
    assert H.check_features({"relay", "reduce"}) == {"relay", "reduce", "multicast"}
    assert H.check_features({"relay", "reduce"}, rtl=True) == {"relay", "reduce", "multicast"}
    assert set(H.ALL_FEATURES) == set(H.FEATURES) | {"relay", "reduce"}


# ------------------------------------------------------------------ RTL in the loop
def _model_hub_for_rtl(monkeypatch):
    """The RTL GPU's hub played by the model (its Verilog is tested elsewhere): only the
    relay's RTL runs."""
    monkeypatch.setattr(H, "rtl_hub", lambda cfg, arr, d, checks: H.BACKENDS["model"](cfg, arr))


def relay_counts(L, g):
    """From the routing alone: relay rows GPU g receives (remote (source, token) of its rank
    with a target in its node), those with a target on g, forwards (per other GPU of the
    node with a target), and the partial rows that come back (one per target)."""
    node, rank = g // 4, g % 4
    sel = (L.src % 4 == rank) & (L.src // 4 != node) & (L.dest // 4 == node)
    keys = L.src[sel] * L.T + L.tok[sel]
    rows = len(np.unique(keys))
    local = len(np.unique(keys[L.dest[sel] == g]))
    fwd = len(np.unique(keys[L.dest[sel] != g] * 8 + L.dest[sel][L.dest[sel] != g]))
    return rows, local, fwd, int(sel.sum())


@pytest.mark.slow
def test_relay_rtl_in_the_loop_agrees_with_the_routes(L, monkeypatch, g=6):
    """An RTL relay GPU (--rtl-gpus with relay + reduce): its control path, its relay side
    and its reduce control agree with the model and the co-simulation row for row, and its
    summary holds the counts the routing gives."""
    from moehub.cosim.relay_rtl import LOOP_CHUNKS, LOOP_STAGE_CHUNKS
    _model_hub_for_rtl(monkeypatch)
    res = H.run_hub(L, features=H.check_features(REDUCE), rtl_gpus=(g,))
    (s,) = [c for c in res.extra["rtl"] if c.get("unit") == "relay"]
    rows, local, fwd, parts = relay_counts(L, g)
    assert (s["gpu"], s["relay_rows"], s["relay_local"], s["forward_rows"]) == (g, rows, local, fwd)
    assert (s["partial_rows"], s["reduced_rows"]) == (parts, rows) and rows > 10
    # the relay side: each forward's chunks read back from the staging, every row naming
    # another GPU staged whole (check_side raised where a chunk or a credit disagreed)
    assert s["forward_chunks"] == fwd * LOOP_STAGE_CHUNKS and 0 < s["staged_chunks"] <= rows * LOOP_STAGE_CHUNKS
    # the input: a packet for the packet manager per chunk of a row naming this GPU
    assert s["own_packets"] == local * LOOP_STAGE_CHUNKS
    # the combine side: every partial row staged whole before the reduce took it
    assert s["partial_staged_chunks"] == parts * LOOP_CHUNKS
    # (the accumulators' traffic the co-simulation charges: more parts than sums, so > 0)
    assert s["reduce_hbm_bytes"] > 0 and parts > rows


#: relay rows for GPU 6 (node 1, rank 2) of the two-node layer, from GPU 2: (source, token,
#: ((rank, expert, slot), ...)) -- forwards and a target here, forwards only, this GPU only
SIDE_ROWS = [(2, 0, ((0, 1, 0), (2, 0, 1))), (2, 1, ((1, 3, 0), (3, 2, 1), (0, 0, 2))),
             (2, 2, ((2, 1, 0),)), (2, 3, ((3, 0, 0), (2, 2, 1))), (2, 4, ((2, 0, 0), (2, 3, 1))),
             (2, 5, ((1, 1, 1),)), (2, 6, ((2, 2, 0),))]


def _side(L, monkeypatch=None, module=None, cls=None, plant=None):
    from moehub.cosim import relay_rtl as RR
    from moehub.verif.formal.plant import broken_class
    rcfg = R.check_layer(L, H.hub_config_v2(L, H.check_features(RELAY)))
    if plant:
        monkeypatch.setattr(f"moehub.rtl.relay.{module}.{cls}",
                            broken_class(f"moehub.rtl.relay.{module}", *plant, cls))
    return RR.check_side(rcfg, 6, SIDE_ROWS, RR.expected_routes(SIDE_ROWS, 2))


@pytest.mark.slow
def test_relay_side_in_the_loop_forwards_every_row(L):
    """The relay side in RTL behind the relay input on hand-made rows (slow set, with the
    layer's loop; the fast set runs the combine side behind the input): every forward the routes name with the staged data,
    a packet per chunk of a row naming this GPU, every row credited (check_side raised
    otherwise)."""
    from moehub.cosim.relay_rtl import LOOP_STAGE_CHUNKS
    s = _side(L)
    local = sum(any(r == 2 for r, _, _ in t) for _, _, t in SIDE_ROWS)
    fwd = sum(len({r for r, _, _ in t} - {2}) for _, _, t in SIDE_ROWS)
    assert (s["own_packets"], s["forward_chunks"]) == (local * LOOP_STAGE_CHUNKS, fwd * LOOP_STAGE_CHUNKS)


@pytest.mark.plants
@pytest.mark.parametrize("module, cls, plant, match", [
    # the egress's reads not stepped: every chunk of a forward is the row's first (slow set:
    # the egress's own bench and formal set catch it in the fast set)
    pytest.param("egress", "ForwardEgress", ("chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr + cfg.chunk_bytes)]",
                                 "chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr)]"), r"forward of source 2",
                 marks=pytest.mark.slow),
    # the join crediting a row on its forwards alone: a row naming this GPU credited before
    # the packet manager wrote its targets
    # (slow set: the fast set catches it in tests/test_rtl_relay_stage.py)
    pytest.param("credit_join", "RelayCredits", ("f_now = ((~need | pm_in) & fu.oh).any()", "f_now = fu.oh.any()"),
                 r"relay row \d+ .*its own targets' credit", marks=pytest.mark.slow),
    # the input's packet of a row's own targets every chunk the row's first (slow set: the
    # input's own bench catches it in the fast set)
    pytest.param("ingress", "RelayIngress", ("own.chunk.eq(rr.chunk)", "own.chunk.eq(0)"),
                 r"own targets of source 2", marks=pytest.mark.slow),
])
def test_relay_side_in_the_loop_catches_planted_bugs(L, monkeypatch, module, cls, plant, match):
    """The relay side in RTL (the staging, the control path, the egress, the credit join) on
    hand-made rows, a bug planted in one part: the loop stops, naming the row."""
    from moehub.cosim.relay_rtl import RelayDisagrees
    with pytest.raises(RelayDisagrees, match=match):
        _side(L, monkeypatch, module, cls, plant)


def _combine(L, monkeypatch=None, module=None, cls=None, plant=None):
    """The combine side in RTL (the partial staging, its feed, the reduce) of GPU 6 on the
    partial rows of :data:`SIDE_ROWS` (one per target, sent by the target's rank)."""
    from moehub.cosim import relay_rtl as RR
    from moehub.verif.formal.plant import broken_class
    rcfg = R.check_layer(L, H.hub_config_v2(L, H.check_features(REDUCE)))
    if plant:
        monkeypatch.setattr(f"moehub.rtl.relay.{module}.{cls}",
                            broken_class(f"moehub.rtl.relay.{module}", *plant, cls))
    parts = [(src, tok, slot, r) for src, tok, targets in SIDE_ROWS for r, _, slot in targets]
    return RR.check_reduce(L, rcfg, 6, SIDE_ROWS, parts), len(parts)


def test_combine_side_in_the_loop_stages_every_partial_row(L):
    """The combine side on hand-made partial rows: each staged whole (its chunks
    interleaved with other rows', in any order), read back into the reduce, every P credit
    returned, every sum the model's to the bit (check_reduce raised otherwise)."""
    from moehub.cosim.relay_rtl import LOOP_CHUNKS
    s, n = _combine(L)
    assert (s["partial_rows"], s["partial_staged_chunks"], s["reduced_rows"]) == (n, n * LOOP_CHUNKS, len(SIDE_ROWS))


@pytest.mark.plants
@pytest.mark.parametrize("module, cls, plant, match", [
    # the feed reads every row back at the staging's first slot: another row's data summed
    # (slow set: the partial staging's and feed's own bench plants feed bugs in the fast set)
    pytest.param("partial_feed", "PartialFeed", ("off.eq((head.at * cfg.stride_bytes)[:cfg.addr_bits])", "off.eq(0)"),
                 r"relay GPU 6: reduced row \d+", marks=pytest.mark.slow),
])
def test_combine_side_in_the_loop_catches_planted_bugs(L, monkeypatch, module, cls, plant, match):
    """A bug planted in the combine side's staging or feed: the loop stops, naming what
    disagrees."""
    from moehub.cosim.relay_rtl import RelayDisagrees
    with pytest.raises(RelayDisagrees, match=match):
        _combine(L, monkeypatch, module, cls, plant)


@pytest.mark.parametrize("plant, match", [
    # a first part read-modify-written: the HBM bytes are not the co-simulation's (slow set:
    # a whole co-simulated layer, 12 s; the reduce path's own bench catches it in the fast set)
    pytest.param(("return (kind == Op.ADD) | (kind == Op.LAST)",
                  "return (kind == Op.ADD) | (kind == Op.LAST) | (kind == Op.WRITE)"), r"relay GPU 6: .*HBM bytes",
                 marks=pytest.mark.slow),
    # the read-after-write hazard ignored: a sum's next part reads before the write-back
    # (slow set: the fast set catches it in tests/test_rtl_relay_reduce_path.py)
    pytest.param(("m.d.comb += hazard.eq(_reads(o.kind, o.parts) & Cat(", "m.d.comb += hazard.eq(0 & Cat("),
                 r"relay GPU 6: reduced row \d+", marks=pytest.mark.slow),
])
def test_relay_rtl_in_the_loop_checks_the_reduce_data_path(L, monkeypatch, plant, match):
    """The reduce path in the loop is checked on its data and its memory traffic: a planted
    bug in its engine stops the run, naming what disagrees."""
    import moehub.rtl.relay.reduce_path as path_mod
    from moehub.cosim.relay_rtl import RelayDisagrees
    from moehub.verif.formal.plant import broken_class
    _model_hub_for_rtl(monkeypatch)
    monkeypatch.setattr(path_mod, "ReduceEngine",
                        broken_class("moehub.rtl.relay.reduce_engine", *plant, "ReduceEngine"))
    with pytest.raises(RelayDisagrees, match=match):
        H.run_hub(L, features=H.check_features(REDUCE), rtl_gpus=(6,))


@pytest.mark.slow
def test_relay_rtl_in_the_loop_catches_a_planted_bug(L, monkeypatch):
    """Two forward rows' destinations swapped in the forward unit: the loop names the row."""
    import moehub.rtl.relay.hub as hub_mod
    from moehub.cosim.relay_rtl import RelayDisagrees
    from moehub.verif.formal.plant import broken_class
    _model_hub_for_rtl(monkeypatch)
    G = "cfg.gpu_bits)) for g in range(G)], cfg.gpu_bits)),"
    monkeypatch.setattr(hub_mod, "ForwardUnit", broken_class(
        "moehub.rtl.relay.forward_unit", "fp.dst.eq(select([(pick[g], Const(g, " + G,
        "fp.dst.eq(select([(pick[g], Const((g + 1) % G, " + G, "ForwardUnit"))
    with pytest.raises(RelayDisagrees, match=r"relay GPU 1 .*forward"):
        H.run_hub(L, features=H.check_features(RELAY), rtl_gpus=(1,))


def test_relay_config_passes_the_contract(L):
    cfg = R.check_layer(L, H.hub_config_v2(L, H.check_features(RELAY)))
    assert (cfg.relay, cfg.nodes, cfg.gpus_per_node) == (True, 2, 4)
    assert cfg.forward_tags == cfg.tags_per_source and cfg.max_targets == min(L.E_local, L.k)


def test_cosim_command_runs_the_relay_hub(tmp_path, capsys):
    """``moehub cosim --hub-features relay,reduce`` on a two-node system: the protocol-v3
    hub, named in the table and the run folder."""
    from moehub.scripts.cli import main
    assert main(["cosim", "--tokens", "4", "--model", "deepseek-v3", "--system", "h100x16-ib",
                 "--hub-features", "relay,reduce", "--systems", "bulk", "--no-figure",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "protocol v2: multicast, protocol v3: relay+reduce" in out
    assert (tmp_path / "deepseek-v3_h100x16-ib_default_t4_v3-relay+reduce_sys-bulk"
            / "run.json").exists()


@pytest.mark.parametrize("value, word", [("reduce", "relay"), ("relay,telepathy", "telepathy")])
def test_cosim_command_refuses_bad_v3_features_up_front(tmp_path, capsys, value, word):
    from moehub.scripts.cli import main
    assert main(["cosim", "--tokens", "4", "--hub-features", value, "--no-figure",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--hub-features" in err and word in err, err
    assert not any(tmp_path.iterdir())


def test_ablation_rows_match_deepep_per_node_dedup():
    """The ablation script's rows on a two-node layer: the relay hub's NIC rows are DeepEP
    normal mode's (one per (token, node)) both ways -- the dispatch bytes differ only by
    the wire bytes per row (hub packets vs the software's puts), the reduced combine's
    equal DeepEP's -- and the v2 hub sends more."""
    from moehub.cosim.studies import relay as study
    rows = {r["row"]: r for r in study.point("h100x16-ib", "deepseek-v3", 4, log=lambda _: None)}
    assert list(rows) == [n for n, _, _ in study.ROWS]
    s, m, w = study.load_configs("h100x16-ib", "deepseek-v3", "default", 4)
    L = Layer(s, m, w, make_routing(m, w, s.gpus))
    hub, red, dp = rows["hub v2 + relay"], rows["hub v2 + relay + reduce"], rows["DeepEP normal"]
    assert hub["dispatch_nic_GB"] / dp["dispatch_nic_GB"] == pytest.approx(
        L.row_wire_hub / L.row_wire_sw, rel=1e-9)
    assert red["combine_nic_GB"] == pytest.approx(dp["combine_nic_GB"], rel=1e-9)
    assert hub["combine_nic_GB"] > 1.5 * red["combine_nic_GB"]
    assert rows["hub v2"]["dispatch_nic_GB"] > 1.5 * hub["dispatch_nic_GB"]
    assert rows["hub v2"]["vs_hub_v2"] == 1.0 and dp["vs_deepep"] == 1.0
    assert "| hub v2 + relay + reduce |" in study.table(list(rows.values()))


def test_ablation_runs_the_rows_asked_for(tmp_path, capsys):
    """``--rows``: only the rows named, in table order, a speedup empty without the row it
    divides by; an unknown row is a usage error naming it, before any simulation."""
    from moehub.cosim.studies import relay as study
    rows = study.point("h100x16-ib", "deepseek-v3", 4, log=lambda _: None,
                       rows=["DeepEP normal", "hub v2 + relay + reduce"])
    assert [r["row"] for r in rows] == ["hub v2 + relay + reduce", "DeepEP normal"]
    assert rows[0]["vs_hub_v2"] is None and rows[1]["vs_deepep"] == 1.0
    assert "| hub v2 + relay + reduce | " in study.table(rows)      # a "—" where it is empty
    with pytest.raises(SystemExit) as e:
        study.main(["--rows", "DeepEP normal,hub v9", "--out", str(tmp_path)])
    assert e.value.code == 2 and "'hub v9' is no row" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_cosim_table_names_a_relay_gpu_in_rtl():
    """``moehub cosim``'s table prints a relay GPU's RTL summary as its own line (the hub
    RTL's line needs keys a relay summary has not)."""
    from moehub.cosim.experiment import relay_rtl_line
    line = relay_rtl_line({"gpu": 5, "unit": "relay", "relay_rows": 31, "relay_local": 13,
                           "forward_rows": 52, "partial_rows": 133, "reduced_rows": 31,
                           "reduce_hbm_bytes": 5849088, "sim_s": 5.21, "staged_chunks": 120,
                           "forward_chunks": 208, "partial_staged_chunks": 266, "own_packets": 52})
    assert line == ("GPU 5 relay in RTL (Amaranth simulator): 31 relay rows (13 with targets here, "
                    "52 forwards, 120 chunks staged and 208 read back for the forwards) through the input "
                    "lanes (52 packets to the packet manager); reduce: 133 "
                    "partial rows (266 chunks staged) into 31 sums, 5.8 MB of accumulator traffic; the "
                    "same as the reference model and the routes, row for row, in 5.2 s")
