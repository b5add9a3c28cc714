"""Causality checker for a system's timeline: the rules no mechanism may break.

* No GEMM work starts before its rows have landed and the consumer knows they are
  complete (by a flag, a counter, a precomputed layout or the end of a bulk transfer),
  nor before the time the system said it was ready.
* No tile's outputs leave before its GEMM can have computed them (its start in its pass
  plus its own share of the pass's work; a bulk system's whole GEMM).
* No port of the layer's network carries more than its bandwidth at any instant (every
  flow of every phase's network, background included) -- or, where the network thinned
  its curves (a coalescing network keeps each curve within a time tolerance tau of the
  full one), no more than its bandwidth allows over any interval stretched by 2 tau.
* The layer ends after every phase.

:func:`check` returns the violations as readable strings (empty: causal).
"""
from __future__ import annotations

import numpy as np

from .layer import SystemResult

EPS_US = 1e-6


def gemm_violations(res: SystemResult) -> list:
    out = []
    for d, it, start, _end in res.gemm_log:
        for what, t in (("its rows landed", it.landed), ("it was known complete", it.known),
                        ("it was ready", it.ready)):
            if start < t - EPS_US:
                out.append(f"{res.name}: GPU {d} GEMM item {it.key} starts at {start:.3f} us, "
                           f"before {what} ({t:.3f} us)")
    return out


def combine_violations(res: SystemResult) -> list:
    return [f"{res.name}: GPU {d} sends outputs of {key} at {sent:.3f} us, before its GEMM "
            f"can have finished it ({end:.3f} us)"
            for d, key, sent, end in res.combine_log if sent < end - EPS_US]


def port_violations(name: str, phase: str, net, curves) -> list:
    """Sum the rates of every flow crossing each port over time; compare with its cap.

    The test is on the bytes: with D(t) = bytes the port carried by t - cap x t, D may rise
    by at most cap x 2 tau between any two times (tau = the network's curve tolerance,
    :meth:`.network.FluidNetwork.curve_tolerance_us`). For tau = 0 that is the instantaneous
    test (the load is constant between breakpoints, so D rises exactly where the load exceeds
    the cap); a thinned curve is within tau of the full one, so the full curves' bytes over
    [t1 - tau, t2 + tau] bound the thinned ones' over [t1, t2]."""
    caps = net.caps
    starts, ends, rates, ports = [], [], [], []
    t_end = 0.0
    for f, c in zip(net.flows, curves):
        if len(c.t) < 2:
            continue
        t_end = max(t_end, float(c.t[-1]))
        dt, db = np.diff(c.t), np.diff(c.b)
        ok = dt > 1e-12
        for p in (f.p0, f.p1, f.p2):
            if p == net.NONE:
                continue
            starts.append(c.t[:-1][ok])
            ends.append(c.t[1:][ok])
            rates.append(db[ok] / dt[ok])
            ports.append(np.full(int(ok.sum()), p))
    if not starts:
        return []
    tau = net.curve_tolerance_us(t_end) if hasattr(net, "curve_tolerance_us") else 0.0
    t = np.concatenate(starts + ends)
    r = np.concatenate(rates + [-x for x in rates])
    p = np.concatenate(ports + ports)
    out = []
    for port in np.unique(p):
        m = p == port
        order = np.lexsort((r[m], t[m]))       # at equal times, decrements first
        tp = t[m][order]
        load = np.cumsum(r[m][order])           # from each breakpoint to the next
        cap = caps[port]
        # D at each breakpoint (after it): the excess bytes accumulated so far
        D = np.concatenate([[0.0], np.cumsum((load[:-1] - cap) * np.diff(tp))])
        rise = float(np.max(D - np.minimum.accumulate(D)))
        slack = cap * (2 * tau + 1e-6 * (tp[-1] - tp[0])) + 1e-6
        if rise > slack:
            worst = float(load.max())
            out.append(f"{name}: {phase} network port {port} carries {worst / 1000:.1f} GB/s "
                       f"over its {cap / 1000:.1f} GB/s ({rise:.1f} bytes beyond what it can "
                       f"carry, {slack:.1f} allowed)")
    return out


def check(res: SystemResult) -> list:
    out = gemm_violations(res) + combine_violations(res)
    for phase, (net, curves) in res.nets.items():
        out += port_violations(res.name, phase, net, curves)
    for p in res.phases:
        if p.end > res.latency_us + EPS_US:
            out.append(f"{res.name}: GPU {p.gpu} phase {p.name} ends at {p.end:.3f} us, after "
                       f"the layer's end ({res.latency_us:.3f} us)")
    return out
