"""Arithmetic of the fluid interconnect model (cosim/network.py)."""
import numpy as np
import pytest

from moehub.cosim.network import GBps, FluidNetwork, flow_wire_bytes


def test_lone_transfer_takes_bytes_over_bandwidth_plus_latency():
    bw, lat, B, t0 = 450.0, 0.7, 3_000_000.0, 5.0
    net = FluidNetwork([bw * GBps, bw * GBps])
    f = net.add_flow(0, 1, lat)
    net.inject(f, t0, B)
    c = net.run()[0]
    assert c.end == pytest.approx(t0 + B / (bw * GBps) + lat, rel=1e-12)
    # the first half of the bytes arrives half-way
    assert c.arrive(B / 2) == pytest.approx(t0 + B / 2 / (bw * GBps) + lat, rel=1e-12)


def test_shared_egress_splits_bandwidth_fairly():
    net = FluidNetwork([100 * GBps, 1e12, 1e12])
    a = net.add_flow(0, 1, 0.0)
    b = net.add_flow(0, 2, 0.0)
    net.inject(a, 0.0, 100e3)      # 1 us alone
    net.inject(b, 0.0, 300e3)      # 3 us alone
    ca, cb = net.run()
    # both at 50 GB/s until a finishes (2 us), then b alone at 100 GB/s: 2 + 2 us
    assert ca.end == pytest.approx(2.0)
    assert cb.end == pytest.approx(4.0)


def test_shared_ingress_is_the_bottleneck_of_an_incast():
    n = 4
    caps = [100 * GBps] * n + [100 * GBps]       # n egress ports, one ingress port
    net = FluidNetwork(caps)
    flows = [net.add_flow(s, n, 0.0) for s in range(n)]
    for f in flows:
        net.inject(f, 0.0, 100e3)
    curves = net.run()
    assert max(c.end for c in curves) == pytest.approx(n * 1.0)   # n x 100 KB at 100 GB/s


def test_max_min_fairness_gives_unused_share_to_others():
    # flow a is limited to 20 GB/s by its own cap; b gets the other 80
    net = FluidNetwork([100 * GBps, 1e12, 1e12])
    a = net.add_flow(0, 1, 0.0, cap=20 * GBps)
    b = net.add_flow(0, 2, 0.0)
    net.inject(a, 0.0, 20e3)
    net.inject(b, 0.0, 80e3)
    ca, cb = net.run()
    assert ca.end == pytest.approx(1.0)
    assert cb.end == pytest.approx(1.0)


def test_rate_injection_limits_a_fast_link():
    net = FluidNetwork([450 * GBps, 450 * GBps])
    f = net.add_flow(0, 1, 0.5)
    net.inject_rate(f, 1.0, 11.0, 1_000_000.0)   # issued at 100 GB/s over 10 us
    c = net.run()[0]
    assert c.end == pytest.approx(11.5)
    assert c.arrive(500_000.0) == pytest.approx(6.5)


def test_more_bandwidth_never_takes_longer():
    rng = np.random.default_rng(3)
    events = [(int(rng.integers(0, 4)), int(rng.integers(0, 4)), float(rng.random() * 10),
               float(rng.integers(1, 100) * 1e3)) for _ in range(60)]
    ends = []
    for bw in (50, 100, 200, 400):
        net = FluidNetwork([bw * GBps] * 8)
        flows = {(s, d): net.add_flow(s, 4 + d, 0.3) for s in range(4) for d in range(4)}
        for s, d, t, b in events:
            net.inject(flows[(s, d)], t, b)
        ends.append(max(c.end for c in net.run() if len(c.b) and c.b[-1] > 0))
    assert all(a >= b - 1e-9 for a, b in zip(ends, ends[1:]))
    assert ends[0] > ends[-1]


def test_every_injected_byte_is_delivered():
    net = FluidNetwork([10 * GBps, 10 * GBps, 10 * GBps])
    a = net.add_flow(0, 1, 0.1)
    b = net.add_flow(2, 1, 0.1)
    net.inject(a, 0.0, 5e3)
    net.inject(a, 3.0, 7e3)
    net.inject_rate(b, 0.5, 2.5, 4e3)
    ca, cb = net.run()
    assert ca.b[-1] == pytest.approx(12e3)
    assert cb.b[-1] == pytest.approx(4e3)


def test_wire_bytes_add_one_header_per_packet():
    assert flow_wire_bytes(8192, 256, 16) == 8192 + 32 * 16
    assert flow_wire_bytes(100, 256, 16) == 116


# ---------------------------------------------------------------- coalesced drains (window)
def test_a_coalesced_drain_is_paced_to_the_end_of_its_step():
    """Two flows share a 100 GB/s egress: exact, a (100 KB) drains at 2 us and b (300 KB)
    ends at 4 us. With a 3 us window the step runs 0 -> 3 us and a, which would drain inside
    it, is paced to drain at its end (33.3 GB/s: its 100 KB over 3 us); b takes the rest of
    the port from the start (66.7 GB/s), so the port never idles: a ends at 3 us (a window
    late) and b at 4 us, exactly on time."""
    net = FluidNetwork([100 * GBps, 1e12, 1e12])
    a = net.add_flow(0, 1, 0.0)
    b = net.add_flow(0, 2, 0.0)
    net.inject(a, 0.0, 100e3)
    net.inject(b, 0.0, 300e3)
    net.window_us, net.door_frac = 3.0, -1.0        # (every rate change kept)
    ca, cb = net.run()
    assert ca.end == pytest.approx(3.0)
    assert ca.depart(50e3) == pytest.approx(1.5)
    assert cb.end == pytest.approx(4.0)
    assert cb.depart(200e3) == pytest.approx(3.0)


def _paced_net():
    net = FluidNetwork([100 * GBps, 100 * GBps, 1e12, 1e12])
    a = net.add_flow(0, 2, 0.0)
    c = net.add_flow(0, 3, 0.0)
    b = net.add_flow(1, 2, 0.0)
    net.inject(a, 0.0, 25e3)
    net.inject(c, 0.0, 300e3)
    net.inject(b, 1.0, 10e3)
    net.window_us, net.door_frac = 3.0, -1.0
    return net


def test_a_paced_step_ends_at_the_next_injection():
    """The kernel sets the pace for the step as it will be: an injection 1 us ahead (on
    another port) ends the step there, so a (25 KB, sharing the port with c) is paced over
    1 us, not over the 3 us window, and drains at the injection's time; c takes the rest of
    the port and ends when it would exactly (3.25 us). (The kernel alone, on events not
    snapped to the step grid: a network snaps them first, see the next test, and then
    meets this case after a step that a drain ended between grid instants.)"""
    from moehub.cosim import network_kernels as K
    from moehub.cosim.network import Curves
    net = _paced_net()
    net._prepare()
    out = K.simulate(*net._event_arrays(), net._ports, net.caps, net._tol, net.NONE,
                     net._static_cap, K.scratch(net._ports, len(net.caps), net.NONE), 3.0, 0.0,
                     K.door_state(3), -1.0)
    ca, cc, cb = Curves(net, *out[:5])
    assert ca.end == pytest.approx(1.0)
    assert cc.end == pytest.approx(3.25)


def test_a_coalescing_network_injects_late_onto_its_step_grid():
    """With a 3 us window the network's injections move late onto the grid of W/4: 0, 0.75,
    1.5 us ...: b's 10 KB injected at 1 us enter at 1.5 us (ending at 1.6 us on its own
    port), and a is paced to drain there, at the step's end."""
    ca, cc, cb = _paced_net().run()
    assert cb.depart(0.0) == pytest.approx(1.5) and cb.end == pytest.approx(1.6)
    assert ca.end == pytest.approx(1.5)
    assert cc.end == pytest.approx(3.25)


def test_snapped_events_keep_every_flows_bytes_and_move_them_late_by_under_a_window():
    """:func:`snap_events`: impulses and segment ends move to the first grid instant at or
    after them; a segment keeps its bytes over its moved ends (rate scaled), or becomes one
    impulse when both ends fall in one window; random schedules keep each flow's bytes, and
    no byte enters earlier or later by more than one window."""
    from moehub.cosim.network import SNAP_DIV, snap_events, step_grid
    assert np.allclose(step_grid(0.0, 100.0, 10.0, 0.05), [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    assert np.allclose(step_grid(0.0, 260.0, 10.0, 0.05)[-4:], [231.525, 243.10125, 255.2563125, 268.019128125])
    t = np.array([0.0, 1.0, 2.0, 4.0, 5.0])            # impulse, segment 1-4, segment 2-5 ...
    kind = np.array([0, 1, 1, 2, 2])
    flow = np.array([0, 1, 2, 1, 2])
    val = np.array([7.0, 2.0, 3.0, 2.0, 3.0])
    st, k, f, v = snap_events(t, kind, flow, val, 3.0 * SNAP_DIV, 0.0)      # a 3 us grid
    got = sorted(zip(st, k, f, v))
    # flow 1: 1-4 (6 B) -> 3-6 (rate 2); flow 2: 2-5 (9 B) -> 3-6 (rate 3)
    assert got == [(0.0, 0, 0, 7.0), (3.0, 1, 1, 2.0), (3.0, 1, 2, 3.0), (6.0, 2, 1, 2.0),
                   (6.0, 2, 2, 3.0)]
    st, k, f, v = snap_events(np.array([0.0, 3.5, 4.5]), np.array([0, 1, 2]),
                              np.array([0, 1, 1]), np.array([1.0, 4.0, 4.0]), 3.0 * SNAP_DIV, 0.0)
    assert sorted(zip(st, k, f, v)) == [(0.0, 0, 0, 1.0), (6.0, 0, 1, 4.0)]    # 1 us x 4 B/us
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = 40
        fl = rng.integers(0, 5, n)
        a = np.sort(rng.uniform(0, 50, n))
        imp = rng.random(n) < 0.4
        ev = []
        last = {}
        for x, g, i in zip(a, fl, imp):         # a flow's segments do not overlap
            x = max(x, last.get(g, 0.0))
            if i:
                ev.append((x, 0, g, rng.uniform(1, 9)))
            else:
                y, r = x + rng.uniform(0, 8), rng.uniform(1, 9)
                ev += [(x, 1, g, r), (y, 2, g, r)]
                last[g] = y
        ev.sort()
        t, kind, flow, val = (np.array(c) for c in zip(*ev))
        st, k, f, v = snap_events(t, kind, flow, val, 2.0, 0.03)
        assert np.all(np.diff(st) >= 0)
        for g in range(5):
            def total(tt, kk, ff, vv):
                m = ff == g
                seg = np.where(kk[m] == 1, -tt[m] * vv[m], np.where(kk[m] == 2, tt[m] * vv[m], vv[m]))
                return seg.sum()
            assert total(st, k, f, v) == pytest.approx(total(t, kind, flow, val), rel=1e-9)
        grid = step_grid(t.min(), t.max(), 2.0 / SNAP_DIV, 0.03 / SNAP_DIV)
        assert set(np.round(st, 9)) <= set(np.round(grid, 9))
        late = st.min() - t.min()
        assert late == 0.0 and np.all(np.diff(grid) <= (2.0 + 0.03 * 60) / SNAP_DIV)


def test_a_paced_flow_alone_on_its_port_is_not_slowed():
    """Pacing never leaves a port idle: a flow alone on its port, which would drain inside
    the step, gets the whole port back (what the fair rates left there) and drains at
    its exact time, as do the bytes injected after it (at a grid instant: 3 us, W/4 = 0.75)."""
    net = FluidNetwork([100 * GBps, 1e12])
    a = net.add_flow(0, 1, 0.0)
    net.inject(a, 0.0, 50e3)
    net.inject(a, 3.0, 50e3)
    net.window_us, net.door_frac = 3.0, -1.0
    (ca,) = net.run()
    assert ca.depart(50e3) == pytest.approx(0.5)
    assert ca.end == pytest.approx(3.5)


def _random_net(seed, window):
    rng = np.random.default_rng(seed)
    net = FluidNetwork([float(c) * GBps for c in rng.choice([50, 100, 400], 8)])
    flows = [net.add_flow(int(s), 4 + int(d), 0.3, cap=float(rng.choice([np.inf, 30 * GBps])))
             for s in range(4) for d in range(4) for s, d in [(s, d)]]
    for _ in range(60):
        f = flows[int(rng.integers(len(flows)))]
        t = float(rng.random() * 10)
        if rng.random() < 0.5:
            net.inject(f, t, float(rng.integers(1, 100) * 1e3))
        else:
            net.inject_rate(f, t, t + float(rng.random() * 5), float(rng.integers(1, 100) * 1e3))
    net.window_us = window
    return net


@pytest.mark.parametrize("seed", range(6))
def test_coalesced_drains_deliver_every_byte_and_never_overbook_a_port(seed):
    from moehub.cosim.causality import port_violations
    exact = _random_net(seed, 0.0).run()
    net = _random_net(seed, 0.05)
    curves = net.run()
    for e, c in zip(exact, curves):
        assert c.b[-1] == pytest.approx(e.b[-1], rel=1e-12)
        # a flow finishes within a few windows of exact: paced (later) or given a paced
        # flow's share from its step's start (earlier); the error does not add up
        assert abs(c.end - e.end) <= 4 * 0.05
    assert port_violations("random", "x", net, curves) == []


def test_the_window_is_what_changes_the_curves():
    """The window is not a no-op (the tests above would pass on an exact loop too)."""
    exact = _random_net(0, 0.0).run()
    coarse = _random_net(0, 0.5).run()
    assert max(abs(c.end - e.end) for c, e in zip(coarse, exact)) > 1e-6


def _wide_net(seed, window, door_frac):
    """An 8 x 8 all-to-all through shared egress and ingress ports with many small
    injections: every drain moves most flows' rates (what the swing door thins)."""
    rng = np.random.default_rng(seed)
    net = FluidNetwork([100 * GBps] * 16)
    for s in range(8):
        for d in range(8):
            f = net.add_flow(s, 8 + d, 0.5)
            for t in np.sort(rng.random(4) * 20):
                net.inject(f, float(t), float(rng.integers(1, 60) * 1e3))
    net.window_us, net.window_rel, net.door_frac = window, 0.0, door_frac
    return net


@pytest.mark.parametrize("seed", range(3))
def test_thinned_curves_stay_within_their_time_tolerance(seed):
    """The swing door drops most rate changes of a coalescing network, yet every byte's
    time on a thinned curve is within door_frac x window of the curve that kept every
    change (the same run otherwise), and the port check with that tolerance passes."""
    from moehub.cosim.causality import port_violations
    full_net, thin_net = _wide_net(seed, 0.2, -1.0), _wide_net(seed, 0.2, 0.25)
    full, thin = full_net.run(), thin_net.run()
    assert thin_net.stats["points"] < 0.75 * full_net.stats["points"]
    assert thin_net.stats["rate_changes"] == full_net.stats["rate_changes"]
    tau = thin_net.curve_tolerance_us(max(c.end for c in thin))
    assert tau == pytest.approx(0.05)
    worst = 0.0
    for f, c in zip(full, thin):
        assert c.b[-1] == pytest.approx(f.b[-1], rel=1e-12)
        x = np.linspace(0.0, f.b[-1], 200)[1:-1]
        # (a byte at a flat part's edge has two times; both curves keep the corners)
        worst = max(worst, float(np.max(np.abs(c.depart(x) - f.depart(x)))))
    assert 0 < worst <= tau * (1 + 1e-9)
    assert port_violations("thin", "x", thin_net, thin) == []


def test_the_port_check_catches_an_overbooked_thinned_port():
    """The tolerance of a thinned network is a bound, not a pass: a curve sped up by
    more than 2 tau's worth of bytes is reported."""
    from moehub.cosim.causality import port_violations
    net = _wide_net(0, 0.2, 0.25)
    curves = list(net.run())
    c = curves[3]
    c.t = c.t[0] + (c.t - c.t[0]) * 0.7            # flow 3 sends 1/0.7 x faster
    bad = port_violations("thin", "x", net, curves)
    assert bad and " carries " in bad[0] and "allowed" in bad[0]


def test_an_equal_network_in_another_order_reuses_the_run():
    """RunMemo: a network whose flows are, as a set, those of one already run (flows added
    in another order) takes its curves, re-indexed; a changed injection misses."""
    from moehub.cosim.network import RunMemo
    memo = RunMemo()

    def build(order, extra=0.0):
        rng = np.random.default_rng(7)
        specs = [(s, 8 + d, float(rng.integers(1, 60) * 1e3), float(rng.random() * 5))
                 for s in range(8) for d in range(8)]
        net = FluidNetwork([100 * GBps] * 16)
        net.run_memo = memo
        net.window_us, net.window_rel = 0.05, 1e-3
        for i in order:
            p0, p1, b, t = specs[i]
            net.inject(net.add_flow(p0, p1, 0.5), t, b + (extra if i == 5 else 0.0))
        return net, specs
    a, _ = build(range(64))
    ca = a.run()
    perm = np.random.default_rng(1).permutation(64)
    b, _ = build(perm)
    cb = b.run()
    assert b.stats.get("reused") and memo.hits == 1
    for j, i in enumerate(perm):
        np.testing.assert_allclose(cb[j].t, ca[int(i)].t, rtol=0, atol=0)
        np.testing.assert_allclose(cb[j].b, ca[int(i)].b, rtol=0, atol=0)
    c, _ = build(perm, extra=1.0)
    c.run()
    assert not c.stats.get("reused") and memo.hits == 1


def test_a_tile_split_into_impulses_is_the_same_network():
    """Impulses of one flow at one time are one event (their bytes summed): a network that
    sends a flow's bytes at time t in two pieces has the curves of one that sends them in
    one, and the RunMemo takes it for the same network."""
    from moehub.cosim.network import RunMemo
    memo = RunMemo()

    def build(split):
        net = FluidNetwork([100 * GBps] * 4)
        net.run_memo = memo
        net.window_us = 0.01
        for s, d, b in ((0, 2, 6e4), (1, 2, 3e4), (0, 3, 2e4), (1, 3, 5e4)):
            f = net.add_flow(s, d, 0.5)
            if split and s == 0:
                net.inject(f, 1.0, b / 3)
                net.inject(f, 1.0, 2 * b / 3)
            else:
                net.inject(f, 1.0, b)
            net.inject(f, 4.0, 1e4)
        return net
    one = build(False)
    c1 = list(one.run())
    assert len(one._event_arrays()[0]) == 8
    two = build(True)
    assert len(two._event_arrays()[0]) == 8                  # the pieces are one event
    c2 = list(two.run())
    assert two.stats.get("reused") and memo.hits == 1
    for a, b in zip(c1, c2):
        np.testing.assert_array_equal(a.t, b.t)
        np.testing.assert_array_equal(a.b, b.b)


def test_layers_run_exact_up_to_16_gpus_and_coalesce_above(monkeypatch):
    from moehub.spec.config import ConfigError
    from moehub.cosim import layer
    monkeypatch.delenv("MOEHUB_NETWORK_WINDOW_US", raising=False)

    class L:
        network_window_us = layer.Layer.network_window_us
    small, wide = L(), L()
    small.G, wide.G = layer.EXACT_GPUS, layer.EXACT_GPUS + 1
    assert small.network_window_us() == 0.0
    assert wide.network_window_us() == layer.WINDOW_US > 0
    monkeypatch.setenv("MOEHUB_NETWORK_WINDOW_US", "0")
    assert wide.network_window_us() == 0.0
    monkeypatch.setenv("MOEHUB_NETWORK_WINDOW_US", "-1")
    with pytest.raises(ConfigError, match="MOEHUB_NETWORK_WINDOW_US = '-1'"):
        wide.network_window_us()


def test_compile_kernels_runs_a_hand_computed_network():
    """The install-time warm-up (``make venv``) runs every compiled kernel on a network
    whose answer is known: a 1000-byte impulse and 1000 bytes injected over 2 us share a
    1000 B/us port; the paced flow takes its 500 B/us, the impulse the other half, both
    finish at 2 us and arrive 1 us later."""
    from moehub.cosim.network import compile_kernels
    assert compile_kernels() == pytest.approx(3.0, rel=1e-12)


def test_flow_ends_are_each_flow_curves_end_bytes_and_first_arrival():
    """``Curves.flow_ends`` (read by the systems for every (src, dst) pair at once) gives,
    to the bit, what each flow's own :class:`FlowCurve` says: ``end``, ``b[-1]``,
    ``t[0] + latency`` -- flows sharing ports, capped, with a flat tail and none at all."""
    rng = np.random.default_rng(3)
    net = FluidNetwork([100 * GBps] * 6)
    for i in range(30):
        f = net.add_flow(int(rng.integers(0, 3)), int(rng.integers(3, 6)), float(rng.uniform(0, 2)),
                         cap=float(rng.uniform(10, 90) * GBps) if i % 4 == 0 else np.inf)
        for _ in range(int(rng.integers(0, 4))):
            net.inject(f, float(rng.uniform(0, 20)), float(rng.uniform(1e3, 1e5)))
        if i % 5 == 0:
            net.inject_rate(f, 1.0, 9.0, 4e4)
    curves = net.run()
    end, sent, start = curves.flow_ends()
    for i in range(len(curves)):
        c = curves[i]
        assert end[i] == c.end and sent[i] == c.b[-1] and start[i] == c.t[0] + c.latency_us
    assert (sent == 0).any() and (sent > 0).any()
