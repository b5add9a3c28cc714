"""Fluid model of the GPU interconnect: per-GPU egress and ingress ports shared by flows.

A *flow* carries bytes from one GPU to another through two or three *ports* (the source's egress
port and the destination's ingress port of the link it uses: NVLink/PCIe inside a node, the
NIC between nodes, or a local-copy port for a GPU's rows to itself). Bytes enter a flow by
*injections*: an impulse (``inject``: B bytes become sendable at time t, e.g. a finished
GEMM tile) or a uniform rate over an interval (``inject_rate``: rows issued by SMs at a
bounded rate). A flow may also carry a static rate cap (the tag/credit window).

At every instant the port bandwidth is shared max-min fairly (progressive filling) among
the flows that have bytes waiting; a flow whose queue is empty is limited to the rate its
bytes arrive at. Between events (an injection starts or ends, a queue drains) all rates are
constant, so the simulation is exact and event driven: a lone transfer of B bytes started at
t takes exactly B / bandwidth, and arrives ``latency`` later.

Two engines run the same algorithm with the same floating-point operations and give the
same curves to the bit: ``compiled`` (default; :mod:`.network_kernels`, numba: it visits
only the flows that carry bytes and indexes ports to flows, so a 64-GPU layer runs in
seconds) and ``reference`` (the numpy event loop below, with its :class:`RateMemo`), kept as
the oracle of the tests.

Units: time in microseconds, sizes in bytes, rates in bytes per microsecond
(1 GB/s = 1000 B/us).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from itertools import chain
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

GBps = 1000.0  #: bytes per microsecond in one GB/s
_min, _any_row = np.minimum.reduce, np.logical_or.reduce   # (no method wrappers: hot loops)
_EPS_B = 1e-6  #: bytes treated as zero
#: a coalescing network's curves stay within this fraction of a step window of the exact
#: curve through every rate change (in time, at the flow's rate): a quarter keeps the
#: thinning's error well inside the coalescing's own (up to a window per drain)
DOOR_FRAC = 0.25


@dataclass
class FlowCurve:
    """Cumulative bytes that left the source of one flow, as a piecewise-linear curve."""
    t: np.ndarray        #: breakpoint times (us), increasing
    b: np.ndarray        #: cumulative bytes sent at those times, non-decreasing
    latency_us: float    #: one-way latency added to every byte

    def depart(self, x) -> np.ndarray:
        """Earliest time the x-th byte (cumulative) has left the source."""
        x = np.asarray(x, dtype=float)
        b, t = self.b, self.t
        if len(b) == 0:
            return np.full_like(x, np.nan)
        x = np.minimum(x, b[-1])
        i = np.searchsorted(b, x - 1e-9, side="left")
        i = np.clip(i, 1, len(b) - 1) if len(b) > 1 else np.zeros_like(i)
        if len(b) == 1:
            return np.full_like(x, t[0])
        b0, b1, t0, t1 = b[i - 1], b[i], t[i - 1], t[i]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(b1 > b0, (x - b0) / (b1 - b0), 1.0)
        return t0 + np.clip(frac, 0.0, 1.0) * (t1 - t0)

    def arrive(self, x) -> np.ndarray:
        """Time the x-th byte (cumulative) has arrived at the destination."""
        return self.depart(x) + self.latency_us

    @property
    def end(self) -> float:
        """Time the last byte arrives (latency included)."""
        return float(self.t[-1]) + self.latency_us if len(self.t) else float("nan")


class _Flow(tuple):
    """One flow: ``(p0, p1, p2, latency_us, cap, impulses, segments)``, the shape of the
    records a network hands to another (:meth:`FluidNetwork.records`). A tuple with named
    read access: a wide network has tens of thousands of flows per phase and rebuilds the
    other phases' as background flows in every pass, and a tuple is made without a Python
    call (a dataclass's ``__init__`` was most of the co-simulation's own time at NVL72
    size). ``impulses``: (t, bytes); ``segments``: (t0, t1, rate); lists that grow as bytes
    are injected."""
    __slots__ = ()
    p0 = property(itemgetter(0))
    p1 = property(itemgetter(1))
    p2 = property(itemgetter(2))
    latency_us = property(itemgetter(3))
    cap = property(itemgetter(4))
    impulses = property(itemgetter(5))
    segments = property(itemgetter(6))


ENGINES = ("compiled", "reference")


def _floats(lists: list, n: int) -> np.ndarray:
    """The floats of every tuple of every list of ``lists``, in order, as one array of
    ``n``."""
    return np.fromiter(chain.from_iterable(chain.from_iterable(lists)), dtype=float, count=n)


def _impulse_rows(imps: list, counts: np.ndarray, ids: np.ndarray) -> tuple:
    """Every flow's impulses as one (n, 2) array and the flow of each: the lists of
    tuples a network's own flows grow, the arrays a blended background holds
    (:func:`.systems.passes.blend`). The two kinds are stacked apart -- the events are
    sorted on all their fields after, so the order here changes nothing."""
    arrays = np.fromiter((isinstance(x, np.ndarray) for x in imps), dtype=bool, count=len(imps))
    lists = ~arrays
    # (the tuples' floats streamed into one array: np.array on a list of tuples
    # costs about twice as much, most of a wide layer's event building)
    rows = [_floats([x for x, a in zip(imps, arrays) if not a] if arrays.any() else imps,
                    2 * int(counts[lists].sum())).reshape(-1, 2)]
    flows = [np.repeat(ids[lists], counts[lists])]
    if arrays.any():
        rows.append(np.concatenate([imps[i] for i in np.flatnonzero(arrays)]).reshape(-1, 2))
        flows.append(np.repeat(ids[arrays], counts[arrays]))
    return np.concatenate(rows), np.concatenate(flows)


class FluidNetwork:
    """Ports with capacities (bytes/us) and flows between them; see the module docstring.
    ``engine``: ``compiled`` or ``reference`` (same curves, see the module docstring); by
    default ``$MOEHUB_NETWORK_ENGINE``, else ``compiled``."""

    def __init__(self, port_caps: np.ndarray | list, engine: str | None = None):
        engine = engine or os.environ.get("MOEHUB_NETWORK_ENGINE") or "compiled"
        if engine not in ENGINES:
            raise ValueError(f"engine = {engine!r}: expected one of {', '.join(ENGINES)}")
        # the last port is a sink with infinite capacity (flows that use only one port)
        self.caps = np.append(np.asarray(port_caps, dtype=float), np.inf)
        self.NONE = len(self.caps) - 1
        self._flows: list[_Flow] = []
        self._pending: list = []            #: background records not yet made flows
        self.engine = engine
        #: compiled engine: coalesce queue drains closer than this (us; 0 = exact, see
        #: :func:`.network_kernels.simulate` for what it changes)
        self.window_us = 0.0
        #: ... or than this fraction of the time (when ``window_us`` > 0)
        self.window_rel = 0.0
        #: with a window, a flow's curve may leave out a rate change while it stays within
        #: this fraction of the window's worth of the flow's rate (see
        #: :func:`.network_kernels.simulate`)
        self.door_frac = DOOR_FRAC
        self.memo: RateMemo | None = None   #: fair rates shared with like networks (reference engine)
        self.run_memo: RunMemo | None = None  #: whole runs shared with equal networks (compiled)
        self.stats: dict = {}               #: of the last run: flows, events, rate changes

    def add_flow(self, p0: int, p1: int | None, latency_us: float, cap: float = np.inf,
                 p2: int | None = None) -> int:
        """A flow through ports p0, p1 (and p2); ``cap`` bounds its rate (bytes/us)."""
        none = self.NONE
        self.flows.append(_Flow((p0, none if p1 is None else p1, none if p2 is None else p2,
                                 latency_us, cap, [], [])))
        return len(self.flows) - 1

    def inject(self, flow: int, t: float, nbytes: float) -> None:
        if nbytes > 0:
            self._flows[flow][5].append((float(t), float(nbytes)))

    def inject_rate(self, flow: int, t0: float, t1: float, nbytes: float) -> None:
        """``nbytes`` become sendable uniformly over [t0, t1] (an impulse if t1 <= t0)."""
        if nbytes <= 0:
            return
        if t1 <= t0:
            self.inject(flow, t0, nbytes)
        else:
            self._flows[flow][6].append((float(t0), float(t1), nbytes / (t1 - t0)))

    def records(self, n: int | None = None) -> list:
        """The first ``n`` flows (all by default) as plain records that
        :meth:`add_background` can replay into another network with the same ports. The
        records share the flows' injection lists: take them once the network's
        injections are done (the layer records a network when it runs it)."""
        return (self._flows if n is not None and n <= len(self._flows) else self.flows)[:n]

    def add_background(self, records: list) -> None:
        """Flows of another phase that share this network's ports (their curves are not
        read): they take their fair share of every port they cross. They become flows
        (after every flow added before them) when the network runs or its flows are read:
        a control phase's network is often only recorded, never run."""
        self._pending.append(records)

    @property
    def flows(self) -> list:
        """Every flow: those added, then the background flows, in the order added."""
        if self._pending:
            pending, self._pending = self._pending, []
            # (the injection lists are shared with the records, not copied: nothing
            # injects into a background flow; a missing port is the sink of every
            # network with the same ports)
            for records in pending:
                self._flows += map(_Flow, (r for r in records if len(r[5]) or len(r[6])))
        return self._flows

    @flows.setter
    def flows(self, value: list) -> None:
        self._flows, self._pending = value, []

    def add_flows(self, p0, p1, latency_us, cap, p2=None) -> np.ndarray:
        """:meth:`add_flow` for many flows at once (arrays; ``None`` entries of p1 / p2, or
        p2 = None for all: no port); returns their indices."""
        none, n0 = self.NONE, len(self.flows)
        n = len(p0)

        def port(x):                     # plain ints, a missing port as the sink
            if x is None:
                return [none] * n
            if not isinstance(x, np.ndarray):
                x = [none if v is None else v for v in x]
            return np.asarray(x, dtype=np.int64).tolist()
        num = lambda x: np.asarray(x, dtype=float).tolist()               # plain floats
        self.flows += map(_Flow, zip(port(p0), port(p1), port(p2), num(latency_us), num(cap),
                                     [[] for _ in range(n)], [[] for _ in range(n)]))
        return np.arange(n0, len(self.flows))

    # ------------------------------------------------------------------ rates
    def _prepare(self) -> None:
        """Per-run arrays of the flows' ports and static caps (the hot loops below index
        them), a column each, read from the flows."""
        fl, n = self.flows, len(self.flows)
        col = lambda i, dt: np.fromiter(map(itemgetter(i), fl), dtype=dt, count=n)
        self.p0, self.p1, self.p2 = (col(i, np.int64) for i in range(3))
        self._ports = np.stack([self.p0, self.p1, self.p2], axis=1)
        self._lat, self._static_cap = col(3, float), col(4, float)
        self._finite = np.isfinite(self.caps)
        self._tol = 1e-9 * np.maximum(np.where(self._finite, self.caps, 1.0), 1.0)

    def _fair_rates(self, want: np.ndarray, caps: np.ndarray) -> np.ndarray:
        """Max-min fair rates by progressive filling. ``want``: flows asking for bandwidth;
        ``caps``: per-flow upper bounds (inf = link limited).

        Every live flow rises by the same amount (``level``) until a port saturates; its
        flows then freeze. A flow whose own cap lies below the level at which the next port
        would saturate reaches its cap first whatever the others do, so all such flows are
        frozen at their caps in one step (the result is the same max-min allocation as
        raising them one by one, in far fewer steps).

        Written for few array operations per step (the co-simulation calls it at every
        event): the live flows and their per-port counts are kept as flows freeze
        (integers: exact), and a step tests the lowest cap before it builds the capped
        set; the floating-point operations on rates, levels and capacities are the same,
        in the same order, as in the plain algorithm."""
        rate = np.zeros(len(want))
        rem = self.caps.copy()
        none, tol, P = self.NONE, self._tol, len(rem)
        level = 0.0
        idx = want.nonzero()[0]             # live flows, their caps and their ports
        c, pl = caps[idx], self._ports[idx]
        cnt = np.bincount(pl.ravel(), minlength=P)
        while idx.size:
            used = cnt > 0
            s_min = float(_min(rem[used] / cnt[used]))
            thr = s_min * (1 + 1e-12)
            if _min(c) - level <= thr:     # some flows reach their caps first
                head = c - level
                out = head <= thr
                f = idx[out]
                rate[f] = c[out]
                rem -= self._use(f, head[out])
                rem[none] = np.inf
            else:
                if not np.isfinite(s_min):
                    raise ValueError("a flow has no finite bandwidth limit")
                level += max(s_min, 0.0)
                rem -= max(s_min, 0.0) * cnt
                out = _any_row((rem <= tol)[pl], axis=1)
                n_out = np.count_nonzero(out)
                if n_out == idx.size:       # the last flows freeze: nothing left to update
                    rate[idx] = level
                    break
                if not n_out:
                    raise ValueError("progressive filling made no progress")
                rate[idx[out]] = level
            cnt -= np.bincount(pl[out].ravel(), minlength=P)
            keep = ~out
            idx, c, pl = idx[keep], c[keep], pl[keep]
        return rate

    def _use(self, f: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Capacity taken at each port by flows ``f`` at rates ``w`` (summed in flow
        order per port role, as the rates are frozen)."""
        P = len(self.caps)
        return (np.bincount(self.p0[f], w, minlength=P) + np.bincount(self.p1[f], w, minlength=P)
                + np.bincount(self.p2[f], w, minlength=P))

    # ------------------------------------------------------------------ simulation
    def _event_arrays(self) -> tuple:
        """:meth:`_events` as arrays (time, kind, flow, value), in the same order, a flow's
        impulses at one time merged into one."""
        # every impulse, then every segment's start and end (entries equal in all four
        # fields are interchangeable, so the order before the sort does not matter)
        fl = self.flows
        imps, segs = list(map(itemgetter(5), fl)), list(map(itemgetter(6), fl))
        ni = np.fromiter(map(len, imps), dtype=np.int64, count=len(fl))
        ns = np.fromiter(map(len, segs), dtype=np.int64, count=len(fl))
        ids = np.arange(len(fl), dtype=np.int64)
        imp, imp_flow = _impulse_rows(imps, ni, ids)
        seg = _floats(segs, 3 * int(ns.sum())).reshape(-1, 3)
        sf = np.repeat(ids, ns)
        t = np.concatenate([imp[:, 0], seg[:, 0], seg[:, 1]])
        kind = np.repeat(np.array([0, 1, 2], dtype=np.int64), [len(imp), len(seg), len(seg)])
        flow = np.concatenate([imp_flow, sf, sf])
        val = np.concatenate([imp[:, 1], seg[:, 2], seg[:, 2]])
        return sorted_events(t, kind, flow, val)

    def run(self) -> Sequence:
        """Simulate until every injected byte has been sent; one curve per flow (a
        sequence that builds a flow's :class:`FlowCurve` when it is read). With a
        :class:`RunMemo` (``run_memo``), a network whose flows equal, as a set, those of one
        it already ran takes that run's result instead of simulating again."""
        if self.engine == "reference":
            return self.run_reference()
        from . import network_kernels as K
        F = len(self.flows)
        if F == 0:
            return []
        self._prepare()
        ev = self._event_arrays()
        if self.window_us > 0:
            ev = snap_events(*ev, float(self.window_us), float(self.window_rel))
        key = order = None
        if self.run_memo is not None:
            key, order = self._content(ev)
            hit = self.run_memo.get(key, order)
            if hit is not None:
                out, self.stats = hit
                return Curves(self, *out)
        rec_t, rec_f, rec_b, t_end, sent, steps, changes = K.simulate(
            *ev, self._ports, self.caps, self._tol, self.NONE, self._static_cap,
            K.scratch(self._ports, len(self.caps), self.NONE), float(self.window_us),
            float(self.window_rel) if self.window_us > 0 else 0.0, K.door_state(F),
            float(self.door_frac))
        self.stats = {"flows": F, "events": len(ev[0]), "steps": steps,
                      "rate_changes": changes, "points": len(rec_f)}
        if key is not None:
            self.run_memo.put(key, order, (rec_t, rec_f, rec_b, t_end, sent), self.stats)
        return Curves(self, rec_t, rec_f, rec_b, t_end, sent)

    def curve_tolerance_us(self, t_end: float) -> float:
        """How far in time a run's curves may lie from those that record every rate change
        (a byte's time, either way): ``door_frac`` x the largest step window up to ``t_end``
        when the network coalesces, else 0 (see :func:`.network_kernels.simulate`)."""
        if self.engine != "compiled" or self.window_us <= 0 or self.door_frac < 0:
            return 0.0
        return self.door_frac * max(self.window_us, self.window_rel * abs(t_end))

    def _content(self, ev: tuple) -> tuple:
        """(key, order) of this network for :class:`RunMemo`: ``key`` names the set of flows
        (each flow's ports, cap, latency and injections, hashed; the port capacities; the
        engine's window), ``order`` lists the flows in a canonical order (by hash), so that
        flow ``order[r]`` of one network and of another with the same key are alike (equal
        flows get equal curves, so ties do not matter)."""
        t, kind, flow, val = ev
        F = len(self._static_cap)
        lat = self._lat
        h = np.zeros((2, F), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for seed, row in zip((0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F), h):
                e = _mix(_mix(t.view(np.uint64) ^ np.uint64(seed)) ^ kind.astype(np.uint64))
                e = _mix(e ^ val.view(np.uint64))
                np.add.at(row, flow, e)
                for col in (*self._ports.T.astype(np.uint64), self._static_cap.view(np.uint64),
                            lat.view(np.uint64)):
                    row[:] = _mix(row ^ _mix(col ^ np.uint64(seed)))
        order = np.lexsort((h[1], h[0]))
        key = (h[:, order].tobytes(), self.caps.tobytes(), float(self.window_us),
               float(self.window_rel), float(self.door_frac))
        return key, order

    def _events(self) -> list:
        """Every injection boundary ``(time, kind, flow, value)`` in time order (kind 0
        impulse, 1 segment start, 2 segment end): the order a heap would pop them in."""
        events = []
        for i, f in enumerate(self.flows):
            for t, b in f.impulses:
                events.append((t, 0, i, b))
            for t0, t1, r in f.segments:
                events.append((t0, 1, i, r))
                events.append((t1, 2, i, r))
        events.sort()
        return events

    def run_reference(self) -> list[FlowCurve]:
        """The numpy event loop (the ``reference`` engine); one curve per flow."""
        F = len(self.flows)
        if F == 0:
            return []
        self._prepare()
        static_cap = self._static_cap
        events = self._events()
        n_ev, k = len(events), 0
        backlog = np.zeros(F)
        inrate = np.zeros(F)
        sent = np.zeros(F)
        rate = np.zeros(F)
        rec_t, rec_i, rec_b = [], [], []       # rate changes: time, flows, bytes sent by then
        rates = (self.memo or RateMemo(32e6)).rates(self)
        n_steps = 0
        t = events[0][0] if events else 0.0
        while True:
            k = _apply_events(events, k, t, backlog, inrate)
            queued = backlog > _EPS_B
            active = queued | (inrate > 0)
            if k >= n_ev and not np.count_nonzero(active):
                break
            caps = np.where(queued, static_cap, np.minimum(static_cap, inrate))
            new_rate = rates(active & (caps > 0), caps)
            n_steps += 1
            changed = (np.abs(new_rate - rate) > 1e-12).nonzero()[0]
            if changed.size:
                rec_t.append(t)
                rec_i.append(changed)
                rec_b.append(sent[changed])
            rate = new_rate
            # next event: an injection boundary or a queue draining
            t_next = events[k][0] if k < n_ev else np.inf
            net = rate - inrate
            drain = queued & (net > 1e-12)
            if np.count_nonzero(drain):
                t_next = min(t_next, t + float((backlog[drain] / net[drain]).min()))
            if not np.isfinite(t_next):
                # nothing will ever change: rates are zero with a backlog (no capacity)
                if np.count_nonzero(queued):
                    raise ValueError("flows with a backlog but no bandwidth")
                break
            dt = t_next - t
            sent += rate * dt
            backlog -= net * dt                  # (inrate - rate) * dt, exactly
            # round-off: a queue within a few ulps of its flow's bytes is empty
            backlog[backlog < np.maximum(_EPS_B, 1e-12 * (sent + backlog))] = 0.0
            if dt <= 1e-9 * max(1.0, abs(t)):
                # no measurable progress: the queue that was about to drain is empty now
                backlog[drain & (backlog / np.maximum(net, 1e-300) <= 1e-9 * max(1.0, abs(t)))] = 0.0
            t = t_next
        self.stats = {"flows": F, "events": n_ev, "steps": n_steps,
                      "rate_changes": int(sum(len(i) for i in rec_i))}
        times = np.repeat(np.array(rec_t), [len(i) for i in rec_i])
        cat = (lambda x, dt: np.concatenate(x) if x else np.zeros(0, dtype=dt))
        return list(Curves(self, times, cat(rec_i, np.int64), cat(rec_b, float), t, sent))


class Curves(Sequence):
    """Each flow's breakpoints (the times its rate changed and the bytes it had sent by
    then, plus the end), its flat tail after the last byte trimmed; a flow's
    :class:`FlowCurve` is built when it is read (a layer reads its own flows, not the
    background's). ``times``, ``ids``, ``sent_at``: one entry per rate change, in time
    order."""

    def __init__(self, net: FluidNetwork, times, ids, sent_at, t_end: float, sent):
        F = len(sent)
        ids = np.concatenate([ids, np.arange(F)])
        ts = np.concatenate([times, np.full(F, t_end)])
        bs = np.concatenate([sent_at, sent])
        order = np.argsort(ids, kind="stable")           # by flow, in time order
        self._t, self._b = ts[order], bs[order]
        self._bounds = np.searchsorted(ids[order], np.arange(F + 1))
        self._lat = (net._lat.tolist() if len(getattr(net, "_lat", ())) == F
                     else [f[3] for f in net.flows])
        self._cache: dict = {}

    def __len__(self) -> int:
        return len(self._lat)

    def _trimmed(self) -> np.ndarray:
        """Each flow's end index after trimming its flat tail (see :meth:`__getitem__`)."""
        if not hasattr(self, "_hi"):
            lo, hi = self._bounds[:-1], self._bounds[1:]
            last_b = self._b[hi - 1]
            # searchsorted(cb, cb[-1] - 1e-9, left) within each flow: the first point of
            # the flow with b >= its total - 1e-9 (b is non-decreasing in a flow)
            flow = np.repeat(np.arange(len(lo)), hi - lo)
            idx = np.nonzero(self._b >= (last_b - 1e-9)[flow])[0]
            fi = np.full(len(lo), np.iinfo(np.int64).max)
            np.minimum.at(fi, flow[idx], idx)
            self._hi = fi + 1
        return self._hi

    def flow_ends(self) -> tuple:
        """Every flow's (last byte's arrival, bytes sent, first breakpoint's arrival): its
        :class:`FlowCurve`'s ``end``, ``b[-1]`` and ``t[0] + latency_us``, as arrays over
        the flows without building the curves (each flow has at least its end point)."""
        if not hasattr(self, "_ends"):
            hi, lat = self._trimmed(), np.asarray(self._lat, dtype=float)
            self._ends = (self._t[hi - 1] + lat, self._b[hi - 1].copy(),
                          self._t[self._bounds[:-1]] + lat)
        return self._ends

    def arrive_many(self, flows: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``self[flows[j]].arrive(x[j])`` for every j, in one compiled pass."""
        from .network_kernels import depart_many
        flows = np.asarray(flows, dtype=np.int64)
        lat = np.asarray(self._lat)[flows]
        return depart_many(self._t, self._b, self._bounds[flows], self._trimmed()[flows],
                           np.asarray(x, dtype=float)) + lat

    def __iter__(self):
        if len(self._cache) < len(self):       # every curve at once: one slice per flow
            hi, lat = self._trimmed(), self._lat
            self._cache = {i: FlowCurve(self._t[lo:h], self._b[lo:h], lat[i])
                           for i, (lo, h) in enumerate(zip(self._bounds[:-1].tolist(), hi.tolist()))}
        return iter(self._cache[i] for i in range(len(self)))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        c = self._cache.get(i)
        if c is None:
            if i < 0:
                i += len(self)
            lo, hi = self._bounds[i], self._bounds[i + 1]
            ct, cb = self._t[lo:hi], self._b[lo:hi]
            # keep the first time the total is reached
            last = int(np.searchsorted(cb, cb[-1] - 1e-9, side="left"))
            c = self._cache[i] = FlowCurve(ct[:last + 1], cb[:last + 1], self._lat[i])
        return c


#: the injection grid's spacing is the step window over this (:func:`snap_events`)
SNAP_DIV = 4


def step_grid(t0: float, t1: float, window: float, window_rel: float) -> np.ndarray:
    """The instants ``g_0 = t0``, ``g_{n+1} = g_n + max(window, window_rel * g_n)`` up to the
    first at or after ``t1``: the coalesced network's step window laid end to end. In closed
    form (tens of thousands of instants a network; a loop cost 25-50 ms each): evenly spaced
    by ``window`` up to ``window / window_rel``, geometric (ratio ``1 + window_rel``) after.
    Times are never negative."""
    knee = window / window_rel if window_rel > 0 else np.inf
    lin_end = min(t1, knee)
    n = int(np.ceil((lin_end - t0) / window)) if t0 < lin_end else 0
    g = t0 + window * np.arange(n + 1)
    if g[-1] >= t1:
        return g
    ratio = 1.0 + window_rel
    steps = int(np.ceil(np.log(t1 / g[-1]) / np.log(ratio))) + 1
    geo = g[-1] * ratio ** np.arange(1, steps + 1)
    return np.concatenate([g, geo[:np.searchsorted(geo, t1, side="left") + 1]])


def snap_events(t, kind, flow, val, window: float, window_rel: float) -> tuple:
    """Injection boundaries moved late onto :func:`step_grid` (every boundary to the first
    grid instant at or after it), so that a coalesced network takes at most a few steps per
    window for its injections, however finely its flows' schedules are cut (the background
    of a pass blended from earlier ones has a boundary wherever any of them had one: a
    relay layer's networks at 128 GPUs held 8.8 k distinct times in 440 us, and every one
    was a rate step). Every flow injects the same bytes: an impulse keeps its bytes; a
    segment keeps its bytes over its moved ends (its rate scaled by old over new length),
    or becomes an impulse when both ends fall in one grid cell. The grid's spacing is the
    window over :data:`SNAP_DIV`: no byte is injected earlier, or later than a quarter of
    the paced drains' bound (:func:`.network_kernels.simulate`; a grid of the window
    itself doubled the layers' measured error). Events as
    :meth:`FluidNetwork._event_arrays` gives them; returned in the same form and order."""
    if len(t) == 0:
        return t, kind, flow, val
    grid = step_grid(float(t.min()), float(t.max()), window / SNAP_DIV, window_rel / SNAP_DIV)
    st = grid[np.searchsorted(grid, t, side="left")]
    kind, flow, val = kind.copy(), flow.copy(), val.copy()
    # a segment's start and end are the same (flow, rate) pair: the k-th start of a pair
    # with its k-th end in time order (for overlapping segments of one rate another
    # pairing than the injected one, with the same bytes)
    starts, ends = np.flatnonzero(kind == 1), np.flatnonzero(kind == 2)
    ks = np.lexsort((t[starts], val[starts], flow[starts]))
    ke = np.lexsort((t[ends], val[ends], flow[ends]))
    a, b = starts[ks], ends[ke]
    length, moved = t[b] - t[a], st[b] - st[a]
    point = moved <= 0.0
    val[a[~point]] = val[b[~point]] = val[a[~point]] * length[~point] / moved[~point]
    # a segment within one grid cell: its bytes as one impulse at the cell's end (its end
    # event dropped)
    kind[a[point]] = 0
    val[a[point]] = val[a[point]] * length[point]
    keep = np.ones(len(t), dtype=bool)
    keep[b[point]] = False
    keep[a[point & (length <= 0.0)]] = False       # (an empty segment injects nothing)
    return sorted_events(st[keep], kind[keep], flow[keep], val[keep])


def sorted_events(t, kind, flow, val) -> tuple:
    """Events (time, kind, flow, value) in the kernel's order -- by time, kind, flow and
    value -- with a flow's impulses at one time merged into one (their bytes summed): a
    network that splits a tile's bytes differently is then the same set of flows
    (:class:`RunMemo`) and the kernel pops fewer events; the flow's backlog is the same sum."""
    order = np.lexsort((val, flow, kind, t))
    t, kind, flow, val = t[order], kind[order], flow[order], val[order]
    imp = kind == 0
    same = imp[1:] & imp[:-1] & (t[1:] == t[:-1]) & (flow[1:] == flow[:-1])
    if same.any():
        first = np.concatenate([[True], ~same])
        starts = np.flatnonzero(first)
        val = np.add.reduceat(val, starts)
        t, kind, flow = t[starts], kind[starts], flow[starts]
    return t, kind, flow, val


def _apply_events(events: list, k: int, t: float, backlog, inrate) -> int:
    """Apply the injection boundaries due at ``t`` (from index ``k``, in order); returns
    the index of the first one still ahead."""
    n = len(events)
    while k < n and events[k][0] <= t + 1e-12:
        _, kind, i, v = events[k]
        k += 1
        if kind == 0:
            backlog[i] += v
        elif kind == 1:
            inrate[i] += v
        else:
            inrate[i] -= v
            if abs(inrate[i]) < 1e-9:
                inrate[i] = 0.0
    return k


class RateMemo:
    """:meth:`FluidNetwork._fair_rates` remembered by its inputs. The rates are a function
    of the network's structure (every flow's ports, the port capacities) and of the flows
    asking with their caps, so they are kept per structure: within one run a queue that
    empties and refills brings back an earlier state, and the networks a system builds in
    each of its passes share their structure and often their first states (a dispatch
    before the background combine starts). A third to two thirds of a layer's events
    find their rates here. Bounded to ``budget`` bytes of rate vectors (then it only
    answers what it holds). :meth:`Layer.network` gives each layer one."""

    def __init__(self, budget: float = 64e6):
        self.tables: dict = {}
        self.left = budget

    def rates(self, net: "FluidNetwork"):
        """The function ``(want, caps) -> rates`` for one run of ``net``."""
        table = self.tables.setdefault((net._ports.tobytes(), net.caps.tobytes()), {})
        size = 16 * len(net.flows) + 64

        def rates(want: np.ndarray, caps: np.ndarray) -> np.ndarray:
            key = want.tobytes() + caps[want].tobytes()
            rate = table.get(key)
            if rate is None:
                rate = net._fair_rates(want, caps)
                if self.left >= size:
                    table[key] = rate
                    self.left -= size
            return rate
        return rates


def _mix(x: np.ndarray) -> np.ndarray:
    """A 64-bit finaliser (the splitmix64 steps): every input bit moves every output bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class RunMemo:
    """Runs of the compiled engine remembered by the network's content (:meth:`FluidNetwork._content`).
    A system's passes build one network per phase, each holding every phase's flows (its
    own and the others' as background), so the combine network of one pass and the
    dispatch network of the next are often the same set of flows in another order: the
    second takes the first's curves, re-indexed. Holds the last ``size`` runs.
    (A re-indexed run can differ from a fresh one in the last bits: progressive filling
    sums in flow order.)"""

    def __init__(self, size: int = 4):
        self.size = size
        self.runs: dict = {}
        self.hits = 0

    def get(self, key: tuple, order: np.ndarray):
        """((rate-change points, end, bytes sent), stats) re-indexed to a network whose
        canonical order is ``order``, or None."""
        got = self.runs.get(key)
        if got is None:
            return None
        (rec_t, rank_f, rec_b, t_end, sent_c), stats = got
        sent = np.empty_like(sent_c)
        sent[order] = sent_c
        self.hits += 1
        return (rec_t, order[rank_f], rec_b, t_end, sent), dict(stats, reused=True)

    def put(self, key: tuple, order: np.ndarray, run: tuple, stats: dict) -> None:
        rec_t, rec_f, rec_b, t_end, sent = run
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        self.runs.pop(key, None)
        self.runs[key] = ((rec_t, rank[rec_f], rec_b, t_end, sent[order]), stats)
        while len(self.runs) > self.size:
            self.runs.pop(next(iter(self.runs)))


def flow_wire_bytes(payload: np.ndarray | float, max_payload: int, header: int):
    """Bytes on the wire for ``payload`` bytes sent as packets of at most ``max_payload``."""
    payload = np.asarray(payload, dtype=float)
    return payload + np.ceil(payload / max_payload) * header


def compile_kernels() -> float:
    """Run a two-flow network through the compiled engine and read its curves, so that
    numba compiles (and caches next to :mod:`.network_kernels`) every kernel once.
    ``make venv`` calls it at install, keeping the ~20 CPU-second compile out of the first
    co-simulation and out of every test worker. Returns the last byte's arrival (us)."""
    net = FluidNetwork([1000.0, 1000.0, 1000.0], engine="compiled")
    a = net.add_flow(0, 1, 1.0)
    b = net.add_flow(0, 2, 1.0)
    net.inject(a, 0.0, 1000.0)
    net.inject_rate(b, 0.0, 2.0, 1000.0)
    curves = net.run()
    return float(curves.arrive_many(np.array([a, b]), np.array([1000.0, 1000.0])).max())
