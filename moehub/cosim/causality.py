"""Causality checker for a system's timeline: the rules no mechanism may break.

* No GEMM work starts before its rows have landed and the consumer knows they are
  complete (by a flag, a counter, a precomputed layout or the end of a bulk transfer),
  nor before the time the system said it was ready.
* No tile's outputs leave before its GEMM can have computed them (its start in its pass
  plus its own share of the pass's work; a bulk system's whole GEMM).
* No port of the layer's network carries more than its bandwidth at any instant (every
  flow of every phase's network, background included).
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
    """Sum the rates of every flow crossing each port over time; compare with its cap."""
    caps = net.caps
    starts, ends, rates, ports = [], [], [], []
    for f, c in zip(net.flows, curves):
        if len(c.t) < 2:
            continue
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
    t = np.concatenate(starts + ends)
    r = np.concatenate(rates + [-x for x in rates])
    p = np.concatenate(ports + ports)
    out = []
    for port in np.unique(p):
        m = p == port
        order = np.lexsort((r[m], t[m]))       # at equal times, decrements first
        load = np.cumsum(r[m][order])
        worst = float(load.max())
        if worst > caps[port] * (1 + 1e-6) + 1e-6:
            out.append(f"{name}: {phase} network port {port} carries {worst / 1000:.1f} GB/s "
                       f"over its {caps[port] / 1000:.1f} GB/s")
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
