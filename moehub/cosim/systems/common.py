"""Pieces every system shares: gate, GEMM queue, tile-wise combine, reduce, control traffic.

Each helper records, besides the timeline phases, the facts the causality checker
(:mod:`moehub.cosim.causality`) needs: when every GEMM work item started, when its rows
had landed and when the consumer knew they were complete; when each tile's outputs were
handed to the network.
"""
from __future__ import annotations

import numpy as np

from ..gpu import ExpertQueue, WorkItem
from ..layer import Layer, SystemResult


def shared_item(L: Layer, t_gate: float) -> list:
    """The shared expert (if any): local work on every GPU, ready after the gate."""
    m = L.model
    if not m.shared_experts:
        return []
    return [WorkItem(t_gate, -1, L.T, L.gpu.padded(L.T), m.shared_expert_ffn * m.shared_experts,
                     key="shared")]


def run_queue(L: Layer, res: SystemResult, d: int, items: list, start: float, share_at,
              complete_at=None, hbm_at=None, gpu=None):
    """Run GPU d's GEMM queue; add its passes to the timeline and its item starts to the
    causality record. Returns (batches, end of routed GEMMs, end of shared expert).
    ``gpu``: a cost model other than the layer's (e.g. a gathering GEMM)."""
    hbm_at = hbm_share(L, d) if hbm_at is None else hbm_at
    batches = ExpertQueue(gpu or L.gpu, start, share_at, complete_at, hbm_at).run(items)
    for b in batches:
        routed = [it for it in b.items if it.expert >= 0]
        res.add(d, "gemm", "expert GEMM" if routed else "shared expert", b.start, b.end)
        for it in routed:
            res.gemm_log.append((d, it, b.start if it.joined_at is None else it.joined_at, b.end))
    routed_end = max([b.end for b in batches if any(it.expert >= 0 for it in b.items)],
                     default=start)
    shared_end = max([b.end for b in batches if any(it.expert < 0 for it in b.items)],
                     default=start)
    return batches, routed_end, shared_end


def full_share(_t: float) -> float:
    return 1.0


def reserved_share(L: Layer, sms: int, until: float):
    """SM share left to the GEMMs while a communication kernel holds ``sms`` SMs (until
    ``until``): the GEMM's CTAs run on the rest."""
    share = (L.sys.sms - sms) / L.sys.sms
    return lambda t: share if t < until else 1.0


def gate(L: Layer, res: SystemResult) -> float:
    t = L.gpu.gate_us(L.T)
    for g in range(L.G):
        res.add(g, "control", "gate", 0.0, t)
    return t


def count_exchange_us(L: Layer) -> float:
    """Count exchange among the GPUs (an all-gather of a few bytes per peer; nothing on
    one GPU)."""
    if L.G == 1:
        return 0.0
    return L.comp.small_collective_us(L.G, L.nodes, 4.0 * L.E)


def control_traffic(L: Layer, phase: str, t: np.ndarray, nbytes: np.ndarray) -> None:
    """Small messages (counts, notifications, credits) that share the layer's ports:
    nbytes[s, d] sent at t[s] (arrays over source GPUs)."""
    control_messages(L, phase, [(t, nbytes)])


def control_messages(L: Layer, phase: str, messages) -> None:
    """Several rounds of small messages on one network of ``phase``: each ``(t, nbytes)``
    as :func:`control_traffic`'s (a system's count and metadata exchanges)."""
    net, flows = L.network(phase)
    off = ~np.eye(L.G, dtype=bool)
    for t, nbytes in messages:
        nbytes = np.asarray(nbytes)
        ss, dd = np.nonzero((nbytes > 0) & off)
        t = np.broadcast_to(np.asarray(t, dtype=float), (L.G,)).tolist()
        for s, d, b in zip(ss.tolist(), dd.tolist(), nbytes[ss, dd].tolist()):
            net.inject(flows[s][d], t[s], float(b))
    L.record_net(net)


def receive_tiles(L: Layer, d: int, ready_row: np.ndarray, rows: np.ndarray, tile_rows: int,
                  landed_row: np.ndarray | None = None):
    """Tiles of GPU d's experts when each expert's rows are stored in ``rows`` order
    (indices into the layer's row arrays); returns items and their owners."""
    items, owners = [], {}
    landed_row = ready_row if landed_row is None else landed_row
    le = L.lexp[rows]
    for e in range(L.E_local):
        r = rows[le == e]
        for t0 in range(0, len(r), tile_rows):
            part = r[t0:t0 + tile_rows]
            key = (e, t0 // tile_rows)
            ready = float(ready_row[part].max())
            items.append(WorkItem(ready, e, len(part), tile_rows, L.model.expert_ffn, key=key,
                                  landed=float(landed_row[part].max()), known=ready))
            owners[(d, key)] = np.bincount(L.src[part], minlength=L.G)
    return items, owners


def item_finish_times(b) -> list:
    """(item, finish time) of a pass's routed items: a persistent grouped GEMM runs its
    tiles in order (expert by expert), so an item's outputs are complete once the work
    before it and its own is done -- not only when the whole pass ends."""
    routed = sorted((it for it in b.items if it.expert >= 0), key=lambda it: (it.expert, str(it.key)))
    work = [it.padded_rows * it.frac * it.ffn for it in routed]
    total = sum(it.padded_rows * it.frac * it.ffn for it in b.items) or 1.0
    out, done = [], sum(it.padded_rows * it.frac * it.ffn for it in b.items if it.expert < 0)
    for it, w in zip(routed, work):
        done += w
        out.append((it, b.start + (b.end - b.start) * min(1.0, done / total)))
    return out


def earliest_finish(b, it) -> float:
    """The soonest an item of pass ``b`` can be computed: from when it started (the pass
    start, or when it joined) for its own share of the pass's work (causality check)."""
    total = sum(x.padded_rows * x.frac * x.ffn for x in b.items) or 1.0
    start = b.start if it.joined_at is None else it.joined_at
    return start + (b.end - b.start) * it.padded_rows * it.frac * it.ffn / total


#: tile outputs leave on this time grid (at most this long after their tile finished):
#: thousands of tiles finishing at distinct instants would each be a network event
COMBINE_GRID_US = 1.0


def combine_tilewise(L: Layer, res: SystemResult, batches_by_gpu, owners_of) -> np.ndarray:
    """Each tile's outputs go back to their owners as soon as the GEMM has finished it
    (from the GEMM epilogue, batched on a ``COMBINE_GRID_US`` grid); returns when each
    owner has received all of its outputs."""
    net, flows = L.network("combine")
    first = np.full(L.G, np.inf)
    for d, batches in enumerate(batches_by_gpu):
        for b in batches:
            for it, t_done in item_finish_times(b):
                if not it.final:                   # a tile's outputs are complete
                    continue
                t_done = np.ceil(t_done / COMBINE_GRID_US - 1e-9) * COMBINE_GRID_US
                rows = np.asarray(owners_of[(d, it.key)])
                res.combine_log.append((d, it.key, t_done, earliest_finish(b, it)))
                to = np.nonzero(rows)[0]
                for o, nb in zip(to.tolist(), (rows[to] * L.comb_wire_sw).tolist()):
                    net.inject(flows[d][o], t_done, nb)
                first[d] = min(first[d], t_done)
    curves = L.run_net(net)
    return combine_done(L, res, curves, flows, first)


def combine_done(L: Layer, res: SystemResult, curves, flows, first, flag_extra=None):
    """When each owner has every output (plus ``flag_extra`` for a completion flag)."""
    G = L.G
    ends, sent, _ = pair_curves(curves, flows)
    has = sent > 0                                   # flows that carried outputs
    arrive = ends
    if flag_extra:
        arrive = ends.copy()
        for d, o in zip(*np.nonzero(has)):
            arrive[d, o] = ends[d, o] + flag_extra(int(d), int(o))
    recv = np.where(has, arrive, 0.0).max(axis=0) if G else np.zeros(0)
    last = np.where(has, ends, -np.inf).max(axis=1) if G else np.zeros(0)
    for d in range(G):
        if np.isfinite(first[d]):
            res.add(d, "combine", "combine", first[d], max(first[d], last[d]))
    return recv


def reduce(L: Layer, res: SystemResult, recv_done, shared_end, poll=True, name="reduce"):
    """Weighted sum of each token's k expert outputs at its owner."""
    start = np.maximum(recv_done + (L.sys.software.flag_poll_us if poll else 0.0), shared_end)
    end = start + L.gpu.reduce_us(L.T)
    for o in range(L.G):
        res.add(o, "control", name, start[o], end[o])
    return end


def two_hop(L: Layer, t0: np.ndarray, first: np.ndarray, second: np.ndarray, row_wire: float,
            phase: str, feeds, rate: float, flow_cap=None, hub_ingress: bool = False,
            relay_window=None):
    """Two-hop transfer: first-hop rows (``first[s, d]``) issued from t0[s] at ``rate``
    (bytes/us); each relay GPU r sends its second-hop rows (``second[r, d]``) while the
    first-hop rows that feed it (``feeds(s, r)``) land, over that arrival window
    ``(a0, a1)``, or over ``relay_window(r, a0, a1)`` when the relay does work between
    the hops (a reduction). Returns (curves, flows, end of every GPU's inbound traffic).
    DeepEP's node-deduplicated dispatch and combine and the hierarchical dispatches of
    the X-MoE study use it. ``rate`` may be one per source (an array)."""
    G = L.G
    rates = np.broadcast_to(np.asarray(rate, dtype=float), (G,))

    def build():
        net, flows = L.network(phase, hub_ingress=hub_ingress, flow_cap=flow_cap)
        for s in range(G):
            total = first[s].sum() * row_wire
            t1 = t0[s] + total / rates[s]
            for d in range(G):
                net.inject_rate(flows[s][d], t0[s], t1, first[s, d] * row_wire)
        return net, flows
    net, flows = build()
    if second.any():
        probe = net.run()
        net, flows = build()
        for r in range(G):
            pe, _, ps = pair_curves(probe, flows)
            ins = [s for s in range(G) if s != r and feeds(s, r) and first[s, r]]
            a0 = min([float(ps[s, r]) for s in ins] or [t0[r]])
            a1 = max([float(pe[s, r]) for s in ins] or [t0[r]])
            if relay_window is not None:
                a0, a1 = relay_window(r, a0, a1)
            for d in range(G):
                net.inject_rate(flows[r][d], a0, a1, second[r, d] * row_wire)
    curves = L.run_net(net)
    both = first + second
    pe = pair_curves(curves, flows)[0]
    ends = np.array([float(pe[both[:, d] != 0, d].max()) if both[:, d].any() else t0.min()
                     for d in range(G)])
    return curves, flows, ends


def paced_dispatch(L: Layer, t0: float, counts: np.ndarray, flow_cap):
    """The hub's dispatch network: every source sends its rows (``counts[s, d]`` rows for
    GPU d) from ``t0`` at its sender SMs' rate, spread over its flows in proportion, each
    flow through its destination's hub packet port under ``flow_cap``; runs it and returns
    (curves, flows)."""
    row_wire = L.row_wire_hub
    rate = L.send_rate(L.comp.sms_for("hub"), L.disp_bytes)
    net, flows = L.network("dispatch", True, flow_cap)
    for s in range(L.G):
        t1 = t0 + counts[s].sum() * row_wire / rate
        for d in range(L.G):
            net.inject_rate(flows[s][d], t0, t1, counts[s, d] * row_wire)
    return L.run_net(net), flows


def send_phase(L: Layer, res: SystemResult, s: int, t0: float, curves, flows, name="dispatch",
               counts=None, track="send") -> float:
    """GPU s's transfer phase: from t0 until its last byte has landed (0 if none)."""
    counts = L.counts if counts is None else counts
    m = np.asarray(counts[s]) != 0
    if not m.any():
        return t0
    end = float(pair_curves(curves, flows)[0][s, m].max())
    res.add(s, track, name, t0, end)
    return end


def recv_end(L: Layer, d: int, curves, flows, t0: float, counts=None) -> float:
    """When GPU d's last inbound byte of these flows (pairs with ``counts``) has landed
    (``t0`` if none)."""
    counts = L.counts if counts is None else counts
    m = np.asarray(counts)[:, d] != 0
    return float(pair_curves(curves, flows)[0][m, d].max()) if m.any() else t0


def pair_curves(curves, flows) -> tuple:
    """[G, G] arrays over the (src, dst) flows ``flows[s][d]`` of one network run: when
    each flow's last byte arrives (``FlowCurve.end``), the bytes it sent, and when its
    first breakpoint's byte arrives (``t[0]`` + latency). Read from the engine's arrays
    at once (the same numbers as each flow's :class:`FlowCurve`; a per-pair loop over
    curves costs seconds at 64 GPUs), remembered per network run and flow table."""
    memo = getattr(curves, "_pair_memo", None)
    if memo is not None and memo[0] is flows:
        return memo[1]
    ids = np.asarray(flows, dtype=np.int64)
    if hasattr(curves, "flow_ends"):
        end, sent, start = (x[ids] for x in curves.flow_ends())
    else:                                   # a list of FlowCurve (the reference engine)
        cs = [[curves[i] for i in row] for row in flows]
        end = np.array([[c.end for c in row] for row in cs]).reshape(ids.shape)
        sent = np.array([[float(c.b[-1]) if len(c.b) else 0.0 for c in row] for row in cs]
                        ).reshape(ids.shape)
        start = np.array([[float(c.t[0]) + c.latency_us if len(c.t) else np.nan for c in row]
                          for row in cs]).reshape(ids.shape)
    out = (end, sent, start)
    try:
        curves._pair_memo = (flows, out)
    except AttributeError:                  # a plain list: no memo
        pass
    return out


def hbm_share(L: Layer, d: int, phases=("dispatch", "combine")):
    """Fraction of GPU d's HBM bandwidth left to its GEMMs over time: every byte its
    links write in or read out (the ``phases``' networks of this pass, their background
    flows included) also crosses its HBM (CALIBRATION.md sec 7: no isolated measurement;
    the mechanism is bytes, the ceiling the calibrated achievable HBM bandwidth)."""
    times, deltas = [], []
    for ph in phases:
        if ph not in L.nets:
            continue
        seg = _link_segments(*L.nets[ph])
        mine = seg.of_gpu(d)                              # its pieces, in piece order
        rd = seg.gpu_in[mine] == d                        # writes land a latency later
        lat = np.where(rd, seg.lat[seg.flow[mine]], 0.0)
        t, r = _per_flow_pairs(seg.flow[mine], seg.t0[mine] + lat, seg.t1[mine] + lat,
                               seg.rate[mine])
        times.append(t)
        deltas.append(r)
    if not sum(len(t) for t in times):
        return lambda t: 1.0
    t = np.concatenate(times)
    order = np.argsort(t, kind="stable")
    load = np.cumsum(np.concatenate(deltas)[order]) / 1000.0          # GB/s after each time
    return HbmShare(L.comp, t[order], load)


class _Segments:
    """Every flow's constant-rate pieces (start, end, bytes/us) of one network run, with
    the flow's ports and latency; computed once per network and shared by all GPUs."""

    def __init__(self, net, curves):
        if hasattr(curves, "_trimmed"):          # the engine's arrays: no curve objects
            lo, hi = curves._bounds[:-1], curves._trimmed()
            n = hi - lo
            flow = np.repeat(np.arange(len(curves)), n)
            at = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(lo, n)
            t, b = curves._t[at], curves._b[at]
            lat = np.asarray(curves._lat, dtype=float)
        else:
            n = np.array([len(c.t) for c in curves], dtype=np.int64)
            flow = np.repeat(np.arange(len(curves)), n)
            t = np.concatenate([c.t for c in curves] or [np.zeros(0)])
            b = np.concatenate([c.b for c in curves] or [np.zeros(0)])
            lat = np.array([c.latency_us for c in curves])
        same = flow[1:] == flow[:-1]                     # consecutive points of one flow
        dt, db = (t[1:] - t[:-1])[same], (b[1:] - b[:-1])[same]
        ok = dt > 1e-12
        self.flow = flow[1:][same][ok]
        self.t0, self.t1 = t[:-1][same][ok], t[1:][same][ok]
        self.rate = db[ok] / dt[ok]
        if len(getattr(net, "p0", ())) == len(net.flows):     # the run's port arrays
            self.p0, self.p1 = net.p0, net.p1
        else:
            self.p0 = np.array([f.p0 for f in net.flows])
            self.p1 = np.array([f.p1 for f in net.flows])
        self.lat = lat
        # each piece's GPU on the sending / receiving side of a link port (5 g + 0..3;
        # -1: a local copy, a hub port or no port), for hbm_share's per-GPU selection
        P = 5 * ((len(net.caps) - 1) // 6) if hasattr(net, "caps") else 0
        gpu = lambda p: np.where((p < P) & (p % 5 < 4), p // 5, -1)
        self.gpu_out, self.gpu_in = gpu(self.p0)[self.flow], gpu(self.p1)[self.flow]
        self._by_gpu = None

    def of_gpu(self, d: int) -> np.ndarray:
        """The pieces that leave or enter GPU d over a link, ascending (grouped for every
        GPU at once on the first call: a piece belongs to its sender and its receiver)."""
        if self._by_gpu is None:
            n = len(self.flow)
            gpu = np.concatenate([self.gpu_out, self.gpu_in])
            piece = np.concatenate([np.arange(n), np.arange(n)])
            keep = (gpu >= 0) & np.r_[np.ones(n, bool), self.gpu_in != self.gpu_out]  # once each
            o = np.lexsort((piece[keep], gpu[keep]))
            g, self._pieces = gpu[keep][o], piece[keep][o]
            self._by_gpu = np.searchsorted(g, np.arange(int(g.max(initial=-1)) + 2))
        b = self._by_gpu
        if d + 1 >= len(b):
            return np.zeros(0, dtype=np.int64)
        return self._pieces[b[d]:b[d + 1]]


def _link_segments(net, curves) -> _Segments:
    if getattr(net, "_segments", None) is None:
        net._segments = _Segments(net, curves)
    return net._segments


def _per_flow_pairs(flow, t0, t1, r):
    """[starts of flow a, ends of flow a, starts of flow b, ...] and the matching rate
    steps (+r at a start, -r at an end): the order a loop over flows builds, which the
    stable sort and the running sum of the load depend on."""
    n = np.bincount(flow, minlength=int(flow.max()) + 1 if len(flow) else 0)
    first = np.cumsum(n) - n                              # a flow's first piece
    i = np.arange(len(flow)) - first[flow]                # piece index within its flow
    at = 2 * first[flow] + i
    t, d = np.empty(2 * len(flow)), np.empty(2 * len(flow))
    t[at], t[at + n[flow]] = t0, t1
    d[at], d[at + n[flow]] = r, -r
    return t, d


class HbmShare:
    """Share of the achievable HBM bandwidth left to the GEMMs as a step function of time
    (``share(t)``), and its mean over a pass (``mean(t0, t1)``): a pass that starts inside
    a burst of link traffic gets the average of what it sees, not the burst's share."""

    def __init__(self, comp, t: np.ndarray, load_GBps: np.ndarray):
        full = comp.hbm_effective_GBps(0.0)
        floor = comp.hbm_effective_GBps(np.inf)          # the configured floor
        self.t = t
        self.s = np.maximum(full - np.maximum(load_GBps, 0.0), floor) / full
        self.cum = np.concatenate([[0.0], np.cumsum(self.s[:-1] * np.diff(t))])

    def __call__(self, x: float) -> float:
        i = int(np.searchsorted(self.t, x, side="right")) - 1
        return float(self.s[i]) if i >= 0 else 1.0

    def _integral(self, x: float) -> float:
        """Integral of the share from t[0] to x (the share is 1 before t[0])."""
        i = int(np.searchsorted(self.t, x, side="right")) - 1
        if i < 0:
            return x - self.t[0]
        return float(self.cum[i] + self.s[i] * (x - self.t[i]))

    def mean(self, t0: float, t1: float) -> float:
        if t1 <= t0:
            return self(t0)
        return (self._integral(t1) - self._integral(t0)) / (t1 - t0)
