"""The passes of a system reach the fixed point of its shared network: averaging keeps the
fixed point, the residual measures the distance to it, a two-node layer settles, and
run.json reports passes and residuals."""
import json

import numpy as np
import pytest

from moehub.cosim.systems import MAX_PASSES, passes as P, run_system

from cosim_helpers import layer

REC = (0, 1, None, 0.5, np.inf)      # a flow's ports, latency and cap


def flow(imp=(), seg=()):
    return REC + (list(imp), list(seg))


def total(rec):
    return sum(b for _, b in rec[5]) + sum(r * (t1 - t0) for t0, t1, r in rec[6])


def as_lists(traffic: dict) -> dict:
    """Traffic with every flow's impulses as a list of (t, bytes) tuples (a blended
    background holds them as an array)."""
    return {ph: [r[:5] + ([tuple(map(float, x)) for x in r[5]], list(r[6])) for r in recs]
            for ph, recs in traffic.items()}


def test_averaging_keeps_a_fixed_point_for_any_weight():
    x = {"combine": [flow([(3.0, 100.0)], [(1.0, 2.0, 50.0)])]}
    for a in (1.0, 0.5, 0.125):
        assert as_lists(P.blend(x, x, a)) == x    # (1 - a) x* + a F(x*) = x*


def test_averaging_is_one_flow_per_path_with_the_weighted_bytes():
    new = {"dispatch": [flow([(1.0, 100.0)])]}
    old = {"dispatch": [flow([(5.0, 100.0)])]}
    got = P.blend(new, old, 0.25)["dispatch"]
    assert len(got) == 1                          # one flow: one max-min share, not two
    assert got[0][5].tolist() == [[1.0, 25.0], [5.0, 75.0]]
    assert total(got[0]) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="damping a = 0"):
        P.blend(new, old, 0)


def test_blended_impulses_are_the_running_sums_of_each_instant_to_the_bit():
    """The blend sums the bytes of each instant as a running sum from 0 would, the new
    pass's impulses first, then the background's (so the passes of a recorded layer
    are unchanged by how the background is stored), over several passes of blending,
    with repeated instants and bytes that cancel to nothing left out."""
    rng = np.random.default_rng(11)

    def imp(k):
        return [(float(t), float(b)) for t, b in zip(rng.integers(0, 12, k) * 0.25,
                                                      rng.uniform(0.1, 99, k))]

    def running(parts):
        acc = {}
        for t, b in parts:
            acc[t] = acc.get(t, 0.0) + b
        return [(t, b) for t, b in sorted(acc.items()) if b > 0]

    bg, expect = None, None
    for a in (1.0, 0.5, 0.25, 0.5, 0.125):
        new = {"combine": [flow(imp(7)), flow(imp(3))]}
        bg = P.blend(new, bg, a)
        if expect is None:
            expect = [list(r[5]) for r in new["combine"]]
        else:
            expect = [running([(t, b * a) for t, b in n[5]] + [(t, b * (1 - a)) for t, b in e])
                      for n, e in zip(new["combine"], expect)]
        assert [[tuple(x) for x in r[5].tolist()] if isinstance(r[5], np.ndarray) else r[5]
                for r in bg["combine"]] == expect
    assert isinstance(bg["combine"][0][5], np.ndarray)
    assert all(b > 0 for r in bg["combine"] for _, b in r[5])


def test_a_network_runs_the_same_on_a_background_held_as_arrays():
    """A background flow's impulses as an array or as a list of tuples: the same curves,
    on both engines."""
    from moehub.cosim.network import FluidNetwork
    rng = np.random.default_rng(5)
    sink = FluidNetwork([1e3] * 6).NONE          # (a record names the unused port so)
    bg = [(p, p % 3 + 3, sink, 0.5, np.inf,
           [(float(t), float(b)) for t, b in zip(rng.uniform(0, 20, 6), rng.uniform(1e3, 1e4, 6))],
           [(2.0, 9.0, 500.0)] if p == 1 else []) for p in range(3)]
    arrays = [r[:5] + (np.array(r[5]), r[6]) for r in bg]
    for engine in ("compiled", "reference"):
        runs = []
        for records in (bg, arrays):
            net = FluidNetwork([1e3] * 6, engine=engine)
            f = net.add_flow(0, 3, 0.5)
            net.inject(f, 1.0, 5e3)
            net.add_background(records)
            curves = net.run()
            runs.append([(c.t.tolist(), c.b.tolist()) for c in curves])
        assert runs[0] == runs[1], engine


def test_flow_distance_is_the_time_the_bytes_moved():
    a = flow([(1.0, 100.0)])
    assert P.flow_distance_us(a, a)[0] == 0.0
    assert P.flow_distance_us(a, flow([(4.0, 100.0)]))[0] == pytest.approx(3.0)
    seg = flow(seg=[(0.0, 2.0, 50.0)])            # 100 B spread over [0, 2]: mean time 1
    assert P.flow_distance_us(seg, flow(seg=[(2.0, 4.0, 50.0)]))[0] == pytest.approx(2.0)
    # half the bytes moved by 2 us: 1 us on average
    assert P.flow_distance_us(flow([(0.0, 50.0), (1.0, 50.0)]),
                              flow([(0.0, 50.0), (3.0, 50.0)]))[0] == pytest.approx(1.0)


def test_traffic_residual_is_zero_only_at_a_fixed_point():
    x = {"combine": [flow([(3.0, 100.0)])], "dispatch": [flow(seg=[(0.0, 1.0, 10.0)])]}
    assert P.traffic_residual_us(x, x) == 0.0
    moved = {"combine": [flow([(5.0, 100.0)])], "dispatch": x["dispatch"]}
    assert P.traffic_residual_us(moved, x) == pytest.approx(2.0 * 100 / 110)
    assert P.traffic_residual_us(x, {}) == np.inf     # the first pass: no background yet
    assert P.traffic_residual_us({}, {}) == 0.0       # no traffic at all (the ideal bound)


def test_residual_skipping_equal_flows_equals_integrating_every_flow():
    """The residual skips flows whose injections equal their background's; it must give
    the number the integral over every flow gives, to the bit (the recorded layers hold
    it), with flows equal, moved, new and gone."""
    rng = np.random.default_rng(7)

    def rec(p, k):
        return (p, p + 1, None, 0.5, np.inf,
                [(float(t), float(b)) for t, b in zip(rng.uniform(0, 9, k), rng.uniform(1, 99, k))],
                [(1.0, 2.0 + p, float(rng.uniform(1, 9)))] if p % 3 == 0 else [])
    bg = {"combine": [rec(p, 3) for p in range(40)], "dispatch": [rec(p, 1) for p in range(9)]}
    prod = {"combine": [r if p % 4 else rec(p, 2) for p, r in enumerate(bg["combine"][:36])]
            + [rec(99, 2)], "dispatch": list(bg["dispatch"])}
    num = den = 0.0
    for ph, recs in prod.items():
        kp, kb = P._keyed(recs), P._keyed(bg.get(ph, []))
        for key in dict.fromkeys(list(kp) + list(kb)):
            dist, nbytes = P.flow_distance_us(kp.get(key), kb.get(key))
            num += dist * nbytes
            den += nbytes
    got = P.traffic_residual_us(prod, bg)
    assert got == num / den and got > 0


def test_damping_halves_at_a_swing_or_a_growing_residual_and_recovers():
    d = P.Damping()
    assert d.next(np.inf, [10.0, 10.0]) == 1.0
    assert d.next(50.0, [12.0, 10.0]) == 1.0           # moved up
    assert d.next(45.0, [10.0, 10.0]) == 0.5           # moved back down: a swing
    assert d.next(40.0, [9.0, 10.0]) == 1.0            # same direction, residual fell
    assert d.next(41.0, [8.0, 10.0]) == 0.5            # the residual grew
    assert d.next(30.0, [8.5, 10.2]) == 0.25           # reversed again (cosine -0.93)
    # jitter of a GPU off the critical path (cosine -0.08) is no swing
    assert d.next(29.0, [8.45, 10.3]) == 0.5


def test_a_two_node_hub_layer_reaches_its_fixed_point():
    """Two HGX nodes over InfiniBand (h100x16-ib), a small layer: the hub's streaming
    combine shares the NICs with its dispatch; the passes settle within the limit and
    the last pass's traffic is (within the tolerance) the background it ran on."""
    L = layer("mixtral-8x7b", "h100x16-ib", tokens=256)
    r = run_system("hub", L)
    ex = r.extra
    assert ex["converged"] and 2 <= ex["passes"] <= MAX_PASSES
    tol = max(0.05, 1e-3 * r.latency_us)
    assert ex["traffic_residual_us"] <= tol          # |F(x) - x|: at the fixed point
    assert ex["residual_us"] <= 0.01 * r.latency_us  # the last pass moved no GPU by 1 %


def test_run_json_reports_passes_and_residuals(tmp_path):
    from moehub.cosim.experiment import load_configs, run_experiment, write_outputs
    er = run_experiment(*load_configs("h100x8", "mixtral-8x7b", "default", 32),
                        systems=("bulk", "hub"))
    paths = write_outputs(er, "conv", tmp_path, figure=False)
    run = json.loads(paths["run"].read_text())
    conv = run["convergence"]
    assert set(conv) == {"bulk", "hub"}
    for name, c in conv.items():
        assert c["passes"] == er.results[name].extra["passes"] >= 2
        assert c["converged"] is True
        assert c["residual_us"] == pytest.approx(er.results[name].extra["residual_us"])
        assert c["traffic_residual_us"] is not None and c["traffic_residual_us"] >= 0
    stats = json.loads(paths["stats_json"].read_text())
    assert "residual_us" not in stats["hub"]          # about the run, not the layer


@pytest.mark.slow
def test_the_xmoe_hub_phase_model_settles_on_two_nodes():
    """The X-MoE study's hub phase model on two nodes (X-MoE Small, 512 tokens per GPU):
    its streaming combine and its dispatch share the NICs; with the background averaged
    as two half-weight flows per path (the scheme before :mod:`.passes`) its passes did
    not settle within 8 (323 us, the last pass still moving a GPU by 3.4 us); now they
    reach the fixed point."""
    from moehub.cosim.studies.xmoe_systems import HubPhase
    L = layer("x-moe-small", "h100x16-ib", tokens=512)
    r = run_system("hub", L, module=HubPhase("plain"))
    assert r.extra["converged"] and r.extra["passes"] <= MAX_PASSES
    assert r.extra["traffic_residual_us"] <= 0.01 * r.latency_us


class _Cycle:
    """A system whose pass map has a period-2 cycle with equal end times: its one flow
    injects at ``100 - x`` (``x``: the background's mean injection time; 0 on the first
    pass) and the layer ends at ``200 + x (100 - x) / 100`` -- 200 us at both states of
    the cycle (x = 0, 100), 225 us at the fixed point x = 50."""

    def run(self, L):
        from moehub.cosim.layer import SystemResult
        bg = L._background.get("combine")
        x = None
        if bg:
            imp = [tb for r in bg for tb in r[5]]
            x = sum(t * b for t, b in imp) / sum(b for _, b in imp)
        net, flows = L.network("combine")
        net.inject(flows[0][1], 0.0 if x is None else 100.0 - x, 1e3)
        L.run_net(net)
        res = SystemResult("cycle", "cycle")
        end = 200.0 if x is None else 200.0 + x * (100.0 - x) / 100.0
        res.gpu_end = np.full(L.G, end)
        return res


def test_equal_end_times_of_two_passes_are_no_fixed_point():
    """Two passes on different backgrounds may leave every GPU's end time where it was
    while the traffic lies far from its background (DeepSeek-V3 on 4 x 8 H100 over
    InfiniBand, 4096 tokens per GPU, hub v2: pass 2 moved no end time by more than 1.6 us,
    its combine lay 165 us from its background). Such passes once stopped at pass 2 with
    the cycle's layer time; now the damping averages the cycle's two states and the
    passes reach the fixed point."""
    L = layer("mixtral-8x7b", "h100x8", tokens=32)
    r = run_system("cycle", L, module=_Cycle())
    ex = r.extra
    assert ex["converged"] and ex["passes"] > 2
    assert ex["traffic_residual_us"] <= 0.05 * 2
    assert r.latency_us == pytest.approx(225.0, abs=0.5)


def test_the_end_time_test_needs_two_still_passes_and_falling_traffic():
    from moehub.cosim.systems import _settled
    from moehub.cosim.layer import SystemResult

    def res(end):
        r = SystemResult("x", "x")
        r.gpu_end = np.array([end, end - 5.0])
        return r
    a, b = res(1000.0), res(1000.5)                  # moved 0.5 us <= tol 1 us
    assert not _settled(b, a, 165.0, False)          # the first still pass: not yet
    assert _settled(b, a, 18.0, True, 165.0)         # a second one, the traffic nearer
    assert not _settled(b, a, 165.0, True, 165.0)    # ... not nearer: maybe a cycle
    assert _settled(b, a, 0.9, False)                # the traffic within the tolerance
    assert not _settled(res(1002.0), a, 18.0, True, 165.0)   # moved 2 us


class _Jitter:
    """A system whose passes jump while the layer's networks coalesce queue drains (its
    flow injects at 0 or 10 us, the layer ends at 200 or 210, pass after pass: its
    traffic's distance from the averaged background stops falling) and sit still once
    every drain is exact (5 us, 205): what coalesced drains did to the 4-node relay
    layers."""

    def __init__(self):
        self.n = 0

    def offset(self, L) -> float:
        """The flow's injection time (us) in this pass."""
        return 5.0 if L.network_window_us() == 0 else 10.0 * (self.n % 2)

    def run(self, L):
        from moehub.cosim.layer import SystemResult
        self.n += 1
        x = self.offset(L)
        net, flows = L.network("combine")
        net.inject(flows[0][1], x, 1e3)
        L.run_net(net)
        res = SystemResult("jitter", "jitter")
        res.gpu_end = np.full(L.G, 200.0 + x)
        return res


def test_passes_that_do_not_settle_coalesced_run_exact(monkeypatch):
    from moehub.cosim.systems import EXACT_AFTER
    monkeypatch.setenv("MOEHUB_NETWORK_WINDOW_US", "0.01")     # an 8-GPU layer coalescing
    L = layer("mixtral-8x7b", "h100x8", tokens=32)
    r = run_system("jitter", L, module=_Jitter())
    ex = r.extra
    assert ex["exact_drains_from_pass"] > EXACT_AFTER      # once the traffic came no nearer
    assert ex["converged"] and ex["passes"] <= MAX_PASSES
    assert r.latency_us == pytest.approx(205.0)
    assert L.network_window_us() == 0.01                         # the next system coalesces


def test_a_layer_too_wide_for_exact_drains_stops_coalesced_with_its_band(monkeypatch):
    """Above EXACT_DRAINS_GPUS a layer that does not settle is never switched to exact
    drains (their cost there is hours): it stops at the pass limit, unconverged, with the
    band of its last passes."""
    from moehub.cosim import systems
    monkeypatch.setenv("MOEHUB_NETWORK_WINDOW_US", "0.01")
    monkeypatch.setattr(systems, "EXACT_DRAINS_GPUS", 4)          # the 8-GPU layer is "wide"
    L = layer("mixtral-8x7b", "h100x8", tokens=32)
    r = run_system("jitter", L, module=_Jitter())
    ex = r.extra
    assert "exact_drains_from_pass" not in ex and not ex["converged"]
    assert ex["passes"] == MAX_PASSES and ex["band_us"] == [200.0, 210.0]


class _Still(_Jitter):
    """The same flow at 10 us every pass: settled at once."""

    def run(self, L):
        self.n = 0
        return super().run(L)


def test_a_layer_that_settles_coalesced_stays_coalesced(monkeypatch):
    monkeypatch.setenv("MOEHUB_NETWORK_WINDOW_US", "0.01")
    L = layer("mixtral-8x7b", "h100x8", tokens=32)
    r = run_system("still", L, module=_Still())
    assert r.extra["converged"] and r.extra["passes"] == 2
    assert "exact_drains_from_pass" not in r.extra and r.latency_us == pytest.approx(210.0)


class _Flip(_Jitter):
    """Passes that never settle: the flow injects at 0 or 10 us and the layer ends at
    200 or 210, pass after pass, drains exact or not (a discontinuous pass map with no
    fixed point: a GEMM pass that a row misses by a hair runs a whole pass later)."""

    def offset(self, L) -> float:
        return 10.0 * (self.n % 2)


def test_an_unconverged_layer_reports_the_band_of_its_last_passes():
    from moehub.cosim.systems import BAND_PASSES, pass_band
    assert BAND_PASSES == 4
    assert pass_band([300.0, 150.0, 205.0, 201.0, 210.0]) == [150.0, 210.0]
    assert pass_band([300.0, 250.0, 205.0, 201.0, 210.0, 208.0]) == [201.0, 210.0]
    L = layer("mixtral-8x7b", "h100x8", tokens=32)
    r = run_system("flip", L, module=_Flip())
    assert not r.extra["converged"] and r.extra["passes"] == MAX_PASSES
    assert r.extra["band_us"] == [200.0, 210.0] and r.latency_us == 200.0
    still = run_system("still", layer("mixtral-8x7b", "h100x8", tokens=32), module=_Still())
    assert "band_us" not in still.extra
