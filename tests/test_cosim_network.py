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
