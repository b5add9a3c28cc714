"""Relay hubs (protocol v3) in the ``hub`` system: the dispatch crosses the NIC once per
(token, destination node) and the combine, with ``reduce``, once per (token, node) back.

The mechanism is the reference model's (:mod:`moehub.spec.relay`), on the layer's network
(every phase its own flows, the other phases as background, passes to a fixed point:
:mod:`.passes`):

* **Who relays.** A row of source ``s`` for a GPU ``d`` of another node goes to the *relay*
  of that node: the GPU with ``s``'s local rank there (``RelayRow``: one per (s, token,
  node), naming every target the token has in the node). Rows for ``s``'s own node go
  straight to their GPU as protocol v2's multicast rows (``direct``). The ``dispatch``
  network carries both kinds (one flow per (source, first-hop GPU), each into that GPU's
  hub packet port, in token order) at the rate of the sender SMs, as :func:`.hub.schedule`.
  A relay row's longer target list (``relay_targets`` entries with their BF16 gate
  weights, :class:`~moehub.spec.formats.RelayFormats`) rides in the packet headers as
  protocol v2's targets do: the same wire bytes per row (ASSUMPTION).
* **What is forwarded.** The relay hub writes its own targets (a ``LocalRow``: its hub
  sees the relay row's arrival) and emits one ``ForwardRow`` per other destination GPU of
  its node, keeping the original source and token: a row of ``row_wire_hub`` bytes on the
  ``forward`` network (relay -> GPU over NVLink, into that GPU's hub packet port), in the
  order the relay rows finished arriving. A forward leaves ``WRITE_DELAY`` cycles after
  its relay row's last chunk was accepted (ASSUMPTION, as the X-MoE study's phase model:
  the staged row is read by the NVLink egress DMA as soon as its write completes); the
  forward unit emits one row a cycle (:mod:`moehub.rtl.relay.forward_unit`), far above a
  link's row rate, so the link and the forward credits bound it. The forwarded bytes are
  read from the relay's HBM and written into the destination's: the GEMMs' HBM share
  (:func:`.common.hbm_share`) counts them as it counts every link byte.
* **Credits.** A source's direct and relay rows each hold a tag of their window
  (``tags_per_source`` per pair); a relay row's credit returns when its forwards have
  left (``WRITE_DELAY`` + ``CREDIT_LATENCY`` cycles after its last chunk: the forward's
  wait for its link is not added, ASSUMPTION). Forward rows hold an F tag of their
  (relay, destination) pair, ``forward_tags`` of them, returned as the destination
  writes the row: each forward flow is bounded by ``forward_tags`` rows per credit round
  trip. ``forward_tags`` = ``tags_per_source`` (ASSUMPTION: the F class sized as the
  direct class; the contract needs >= 1). Credit packets (one header per row and hop)
  travel on the ``credits`` network.
* **The receiving hubs.** Every GPU's hub sees the same multicast rows as protocol v2's
  (original source, token, its targets; :func:`.hub.assemble`), each at the time its path
  delivers it: direct, with its relay row (the relay's own targets), or forwarded.
* **Reduce on combine** (feature ``reduce``; without it the expert outputs return as
  protocol v2's do, one row per (token, expert) straight to the owner, each crossing the
  NIC). With it, an expert GPU sends a partial row whose owner is in another node to the
  relay of its own node for that owner (the GPU with the owner's local rank): protocol
  v3's class PARTIAL rows (:attr:`~moehub.spec.formats.RelayFormats.partial_row`) on the
  relay hub's input lanes, over NVLink, the relay's own GPU's through its own hub input
  too (``combine_partial`` network, every flow into the relay's hub packet port, shared
  with the dispatch's rows there; the rows to owners of the node stay on the
  ``combine`` network). Chunks of different rows interleave on the lanes and the reduce
  takes a row whole, its chunks in order, so the relay writes every partial row into an
  HBM staging as it arrives and reads it back once whole
  (:func:`~moehub.spec.relay.partial_stage_bytes`: 2 x hidden x 2 bytes per row, a
  single-part sum's row too). It multiplies each by its gate weight and adds it into an
  FP32 accumulator in HBM (:class:`~moehub.spec.relay.ReduceModel`): the first part
  written (4 x hidden bytes), every middle one read and written (8 x hidden), the last
  read (4 x hidden, its sum then leaves), a single part passing straight through (0) --
  the bytes of :func:`~moehub.spec.relay.reduce_hbm_bytes` (:func:`part_hbm_bytes` per
  part, both kinds). The accumulate datapath streams the staging's and the accumulator's
  bytes at the GPU's achievable HBM bandwidth (:attr:`~..gpu.GpuModel.hbm`; ASSUMPTION:
  the whole of it, not shared), but no faster than its datapath: a chunk of the row a
  hub cycle and a cycle between rows (:func:`reduce_row_us`, the RTL's rate: at 128-byte
  chunks and 1.98 GHz, 253 GB/s of partial rows per relay -- below an H100's NVLink, so
  a relay that receives partial rows from every GPU of its node can be the combine's
  bottleneck), one part after another in arrival order, so a sum is
  final when its last part has been accumulated; its one reduced row (BF16) then crosses
  the NIC to the owner (``combine_relay`` network, on the ``COMBINE_GRID_US`` grid).
  ASSUMPTION: the reduce's HBM traffic takes no HBM bandwidth from the relay GPU's
  concurrent GEMMs (it is counted -- ``extra['relay']``: ``rmw_GB`` the accumulator's,
  ``stage_GB`` the staging's, ``reduce_hbm_GB`` both -- and its time bounds that effect:
  ``rmw_us_max`` the accumulator's, ``reduce_hbm_us_max`` both, per relay, and
  ``reduce_busy_us_max`` the busiest relay's reduce with its datapath's bound); the partial
  rows enter the staging at link rate (the hub's packet port, lanes x clock x chunk,
  is sized to absorb its link; the staging takes a chunk a cycle, as the reduce does).
* **Partial credits** (``reduce``). Each (sender GPU, relay) pair of a node holds at
  most ``partial_span`` partial rows in flight (the P credit class, ``partial_tags``; 0 =
  ``tags_per_source``, :attr:`~moehub.spec.config.HubConfig.partial_span`; the relay's
  staging has ``partial_window`` = GPUs per node x ``partial_span`` slots); a P credit
  returns once its row has been read out of the staging into the reduce. As the forward
  flows by ``forward_tags``, each partial flow is bounded by ``partial_span`` rows per
  credit round trip (:func:`partial_flow_cap`): the link latency to the relay, the last
  chunk's write to the staging (``WRITE_DELAY``), the row's read out of the staging (its
  BF16 bytes at the HBM bandwidth), ``CREDIT_LATENCY``, and the credit's link latency back
  (0 for the relay's own GPU). ASSUMPTION: a row's wait in the reduce's queue before its
  read-out is not added (as a relay row's credit does not wait for its forward's link):
  the bound is the window's rate with an idle reduce. Credit packets of partial rows are
  not on the ``credits`` network (one header per row, as the dispatch's; ASSUMPTION:
  negligible beside the rows).

:func:`.hub.relay_schedule` runs the dispatch's steps (:func:`routes`, :func:`first_hop`,
the tag windows, :func:`forward`) with the hub's flow positions and arrival layout;
:func:`combine_reduce` is the combine with ``reduce``.

Single-node layers: the feature is refused (:class:`~moehub.spec.config.ConfigError`), as
the contract refuses ``relay: true`` with fewer than two nodes: there is no NIC hop to
deduplicate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.config import ConfigError
from ...spec.relay import partial_stage_bytes, reduce_hbm_bytes, relay_config
from ...spec.timing import CREDIT_LATENCY
from ..hub_stage import WRITE_DELAY, target_alloc
from ..layer import Layer, SystemResult
from ..network import GBps
from . import common as C

#: segments of a relay's forward injection per (relay, destination): the forwards become
#: sendable as their relay rows land; this many pieces of constant rate follow that
#: arrival profile (each row's own readiness is then enforced per row)
FORWARD_PIECES = 16


def check_layer(L: Layer, cfg) -> object:
    """The protocol-v3 hub config of the layer (the contract's check of the relay keys:
    nodes, gpus_per_node, forward tags, multicast width), its reduce's record table sized
    for the layer's tokens per GPU; a single-node layer is a :class:`ConfigError` naming
    the system."""
    gpn = min(L.sys.gpus_per_node, L.G)
    if L.nodes < 2:
        raise ConfigError(f"hub features relay: system {L.sys.name!r} is one node "
                          f"({L.G} GPUs, gpus_per_node = {L.sys.gpus_per_node}); a relay hub "
                          "needs >= 2 nodes")
    return relay_config(cfg, L.nodes, gpn, tokens=L.T)


@dataclass
class Routes:
    """Where each protocol-v2 wire row (one per (source, token, destination GPU)) goes."""
    w: object               #: the v2 wire rows (:class:`.hub.WireRows`)
    relay: np.ndarray       #: per wire row: its first-hop GPU (the relay, or its destination)
    remote: np.ndarray      #: per wire row: its destination is in another node
    fwd: np.ndarray         #: per wire row: forwarded by the relay (remote, not the relay's own)
    hop1: object            #: first-hop rows: the direct wire rows, one relay row per (s, token, node)
    hop1_of: np.ndarray     #: per wire row: its first-hop row


@dataclass
class Hop1:
    """First-hop rows, laid out as :class:`.hub.WireRows` (the hub's flow positions and
    tag windows read them): per row its source, token, first-hop GPU and order key."""
    src: np.ndarray
    tok: np.ndarray
    dest: np.ndarray
    of: np.ndarray          #: per wire row: its first-hop row
    counts: np.ndarray      #: [G, G] first-hop rows per (source, GPU)
    order_key: np.ndarray

    def __len__(self) -> int:
        return len(self.src)


def routes(L: Layer, w) -> Routes:
    """The relay routes of the layer's protocol-v2 wire rows ``w`` (one per (source,
    token, destination GPU); see the module docstring)."""
    gpn = min(L.sys.gpus_per_node, L.G)
    remote = (w.src // gpn) != (w.dest // gpn)
    relay = np.where(remote, (w.dest // gpn) * gpn + w.src % gpn, w.dest)
    key = (w.src * L.T + w.tok) * L.G + relay
    uniq, first, of = np.unique(key, return_index=True, return_inverse=True)
    okey = np.full(len(uniq), np.iinfo(np.int64).max)
    np.minimum.at(okey, of, w.order_key)            # a relay row goes with its first target
    src1, dst1 = w.src[first], relay[first]
    counts = np.bincount(src1 * L.G + dst1, minlength=L.G * L.G).reshape(L.G, L.G)
    hop1 = Hop1(src1, w.tok[first], dst1, of, counts, okey)
    return Routes(w, relay, remote, remote & (w.dest != relay), hop1, of)


def _flow_cap(L: Layer, cfg, extra_us: float):
    """A first-hop flow's rate bound from its tag window: ``tags_per_source`` rows per
    credit round trip (two link latencies, the credit latency, and for a relay row the
    forward's ``extra_us`` before its credit can return)."""
    hub_us = CREDIT_LATENCY / (cfg.hub_clock_GHz * 1000.0)

    def cap(s, d):
        rtt = 2 * L.latency(s, d) + hub_us + (extra_us if L.inter_node(s, d) else 0.0)
        return cfg.tags_per_source * L.row_wire_hub / rtt
    return cap


def _arrive(curves, flows, src, dst, off):
    """Arrival time of byte ``off`` of flow (src, dst), per row."""
    if hasattr(curves, "arrive_many"):
        return curves.arrive_many(np.asarray(flows, dtype=np.int64)[src, dst], off)
    out = np.empty(len(off))
    for (s, d) in set(zip(src.tolist(), dst.tolist())):
        m = (src == s) & (dst == d)
        out[m] = curves[flows[s][d]].arrive(off[m])
    return out


@dataclass
class ReduceParts:
    """The partial output rows of a combine with ``reduce``, in the order each relay
    accumulates them: per part its relay, owner (the token's source), token, and the GPU
    and local expert that computed it (:mod:`..relay_rtl` replays them)."""
    relay: np.ndarray
    owner: np.ndarray
    tok: np.ndarray
    gpu: np.ndarray
    expert: np.ndarray


@dataclass
class Dispatch:
    """The relay dispatch of one pass: what :func:`.hub.run_hub` needs, and the byte counts."""
    arrivals: list
    routes: Routes
    curves: object          #: the dispatch network's curves (first hop)
    flows: list
    counts1: np.ndarray     #: first-hop rows per (source, GPU)
    fcounts: np.ndarray     #: forwarded rows per (relay, GPU)
    stalls: int
    t_cnt: float
    stats: dict
    hop1_last: np.ndarray   #: per first-hop row: its last chunk's arrival (us, tags applied)
    first: np.ndarray       #: per wire row: its first chunk's arrival at its destination hub


def first_hop(L: Layer, t0: float, cfg, R: Routes, pos1):
    """The first hop on the ``dispatch`` network: direct and relay rows, each source at its
    sender SMs' rate, each flow into its GPU's hub packet port under its tag window; rows
    of a flow in ``pos1`` order. Returns (curves, flows, first and last chunk arrival per
    first-hop row, before the tag window's stalls)."""
    h1 = R.hop1
    clk = cfg.hub_clock_GHz * 1000.0
    row_wire, pkt_wire = L.row_wire_hub, L.pkt_wire_hub
    curves, flows = C.paced_dispatch(L, t0, h1.counts, _flow_cap(L, cfg, WRITE_DELAY / clk))
    off = pos1 * row_wire
    return (curves, flows, _arrive(curves, flows, h1.src, h1.dest, off + pkt_wire),
            _arrive(curves, flows, h1.src, h1.dest, off + row_wire))


def credit_return_us(L: Layer, cfg, inter: bool) -> float:
    """A first-hop row's credit after its last chunk: the hub's credit latency, and for a
    relay row the forward's start before it (``WRITE_DELAY``; the module docstring)."""
    return (CREDIT_LATENCY + (WRITE_DELAY if inter else 0)) / (cfg.hub_clock_GHz * 1000.0)


def forward(L: Layer, cfg, rcfg, R: Routes, last1):
    """The relays' forwards on the ``forward`` network, each ``WRITE_DELAY`` cycles after
    its relay row's last chunk (``last1``, per first-hop row). Returns (forwarded wire
    rows, their first and last chunk arrival at their GPU, forwarded rows per (relay,
    GPU))."""
    G, w = L.G, R.w
    clk = cfg.hub_clock_GHz * 1000.0
    row_wire, pkt_wire = L.row_wire_hub, L.pkt_wire_hub
    fi = np.nonzero(R.fwd)[0]
    fr, fd = R.relay[fi], w.dest[fi]
    ready = last1[R.hop1_of[fi]] + WRITE_DELAY / clk
    o = np.lexsort((w.tok[fi], w.src[fi], ready, fd, fr))
    fi, fr, fd, ready = fi[o], fr[o], fd[o], ready[o]
    pair = fr * G + fd
    starts = np.r_[0, np.nonzero(np.diff(pair))[0] + 1] if len(pair) else np.zeros(0, np.int64)
    bounds = np.r_[starts, len(pair)]
    posf = np.arange(len(pair)) - np.repeat(starts, np.diff(bounds))
    hub_us = CREDIT_LATENCY / clk
    ftags = rcfg.forward_tags
    fnet, fflows = L.network("forward", True, lambda r, d: np.inf if L.inter_node(r, d) or r == d
                             else ftags * row_wire / (2 * L.latency(r, d) + hub_us))
    for a, b in zip(bounds[:-1], bounds[1:]):
        r, d = int(fr[a]), int(fd[a])
        cuts = np.unique(np.linspace(a, b, min(FORWARD_PIECES, b - a) + 1).astype(np.int64))
        for c0, c1 in zip(cuts[:-1], cuts[1:]):       # rows c0..c1-1 sendable over their span
            fnet.inject_rate(fflows[r][d], float(ready[c0]), float(ready[c1 - 1]),
                             (c1 - c0) * row_wire)
    fcurves = L.run_net(fnet)
    firstf, lastf = np.empty(len(fi)), np.empty(len(fi))
    if len(fi):                          # never before the row itself could cross the link
        lat = L.latency_matrix()[fr, fd]
        bw = L.sys.intra_bw_GBps * GBps                  # (a forward stays in its node)
        offf = posf * row_wire
        firstf = np.maximum(_arrive(fcurves, fflows, fr, fd, offf + pkt_wire),
                            ready + lat + pkt_wire / bw)
        lastf = np.maximum(_arrive(fcurves, fflows, fr, fd, offf + row_wire),
                           ready + lat + row_wire / bw)
    return fi, firstf, lastf, np.bincount(pair, minlength=G * G).reshape(G, G)


def dispatch_stats(L: Layer, R: Routes, n_forward: int, rcfg) -> dict:
    """Rows and bytes of the relay dispatch: NIC (relay rows), NVLink (direct and forwarded)."""
    G, c = L.G, R.hop1.counts
    nic = np.array([[L.inter_node(s, d) for d in range(G)] for s in range(G)])
    direct = c[~nic & ~np.eye(G, dtype=bool)].sum()
    return {"nic_rows": int(c[nic].sum()), "nic_GB": float(c[nic].sum() * L.row_wire_hub / 1e9),
            "direct_nvlink_rows": int(direct), "forward_rows": int(n_forward),
            "nvlink_GB": float((direct + n_forward) * L.row_wire_hub / 1e9),
            "relay_local_rows": int((R.remote & ~R.fwd).sum()),
            "forward_tags": int(rcfg.forward_tags)}


def reduce_row_us(rcfg, hidden: int) -> float:
    """The reduce datapath's time for one partial row: its BF16 row in chunks of the hub's
    ``chunk_bytes``, one a cycle, and a cycle between rows (the partial feed reads the
    staged row a chunk a cycle; the reduce engine takes a chunk a cycle and a cycle
    between ops: :mod:`moehub.rtl.relay.partial_feed`, :mod:`moehub.rtl.relay.reduce_engine`),
    at the hub's clock. A part's service time is the longer of this and its HBM bytes'
    time."""
    chunks = -(-2 * hidden // rcfg.chunk_bytes)
    return (chunks + 1) / (rcfg.hub_clock_GHz * 1000.0)


def _fifo_done(arrive: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Completion times of jobs served one after another in the given order:
    c_i = max(a_i, c_{i-1}) + s_i = S_i + max_{j <= i} (a_j - S_{j-1}), S the running sum."""
    S = np.cumsum(service)
    return S + np.maximum.accumulate(arrive - (S - service))


def _impulse_arrivals(curves, flows, src, dst, t, nbytes):
    """Impulses ``nbytes`` at ``t`` on flows (src, dst): when each one's last byte arrives
    (a flow serves its bytes in injection order; impulses at one instant arrive together)."""
    n = len(t)
    if not n:
        return np.zeros(0)
    G = len(flows)
    o = np.lexsort((t, dst, src))
    pair = (src * G + dst)[o]
    cum = np.cumsum(nbytes[o])
    starts = np.r_[0, np.nonzero(np.diff(pair))[0] + 1]
    base = np.repeat(np.r_[0.0, cum[starts[1:] - 1]], np.diff(np.r_[starts, n]))
    within = cum - base
    # impulses at the same instant on one flow: all arrive with the last of them
    grp = np.r_[True, (np.diff(pair) != 0) | (np.diff(t[o]) != 0)]
    gid = np.cumsum(grp) - 1
    last_of = np.zeros(gid[-1] + 1)
    np.maximum.at(last_of, gid, within)
    at = _arrive(curves, flows, src[o], dst[o], last_of[gid])
    out = np.empty(n)
    out[o] = at
    return out


def partial_flow_cap(L: Layer, rcfg):
    """A partial flow's rate bound from its P window (the module docstring): ``partial_span``
    rows per credit round trip -- the row's link latency there, its last chunk written to
    the staging (``WRITE_DELAY``), the row read out of the staging into the reduce (its
    BF16 bytes at the relay's HBM bandwidth), the hub's credit latency, and the credit's
    link latency back -- for every (sender, relay) pair of a node, the relay's own GPU
    included (latency 0); pairs across nodes carry no partial rows (no bound)."""
    clk = rcfg.hub_clock_GHz * 1000.0
    fixed = (WRITE_DELAY + CREDIT_LATENCY) / clk + 2.0 * L.model.hidden / L.gpu.hbm
    span, wire = rcfg.partial_span, L.comb_wire_sw
    return lambda s, r: np.inf if L.inter_node(s, r) else \
        span * wire / (2 * L.latency(s, r) + fixed)


def part_hbm_bytes(parts: np.ndarray, nth: np.ndarray, hidden: int) -> tuple:
    """The relay's HBM bytes per partial row, ``(accumulator, staging)``, for a part that is
    the ``nth`` (from 0) of its sum of ``parts``: the FP32 accumulator's (the first part
    written, a middle one read and written, the last read, a single part none: their sum
    over a sum is :func:`~moehub.spec.relay.reduce_hbm_bytes`), and the partial staging's
    (:func:`~moehub.spec.relay.partial_stage_bytes`: every part written as it arrives and
    read back once whole, the single part of a sum too). The reduce's datapath streams both
    at the relay's HBM bandwidth."""
    H = float(hidden)
    rmw = np.where(parts == 1, 0.0, np.where(nth == 0, 4.0 * H,
                                             np.where(nth == parts - 1, 4.0 * H, 8.0 * H)))
    return rmw, np.full(len(parts), float(partial_stage_bytes(hidden)))


def combine_reduce(L: Layer, res: SystemResult, batches_by_gpu, arrivals, results,
                   rcfg) -> tuple:
    """The combine with the relays' reduction (module docstring): returns (when each owner
    has all its outputs, statistics, the partial rows in accumulate order). ``results``:
    each GPU's hub result (its allocation places every target entry in a tile); ``rcfg``:
    the relay hub config (its P window, ``partial_span``)."""
    G, gpn, H = L.G, min(L.sys.gpus_per_node, L.G), L.model.hidden
    wire = L.comb_wire_sw
    src_l, dst_l, t_l, n_l, kind_l = [], [], [], [], []     # per (tile, next hop) impulse
    part_relay, part_owner, part_tok, part_gpu, part_t, part_x = [], [], [], [], [], []
    first_send = np.full(G, np.inf)
    for d in range(G):
        arr, hr = arrivals[d], results[d]
        done = {}
        for b in batches_by_gpu[d]:
            for it, t_done in C.item_finish_times(b):
                if not it.final:
                    continue
                t_done = np.ceil(t_done / C.COMBINE_GRID_US - 1e-9) * C.COMBINE_GRID_US
                res.combine_log.append((d, it.key, t_done, C.earliest_finish(b, it)))
                done[it.key] = t_done
        trow, tx, rank = target_alloc(hr, arr)
        ok = rank >= 0
        trow, tx, tile = trow[ok], tx[ok], rank[ok] // L.tile_rows
        owner = np.asarray(arr.src, np.int64)[trow]
        tok = np.asarray(arr.token, np.int64)[trow]
        t_of = np.zeros(len(tx))
        if len(tx):                          # each target entry's tile finish time
            per = int(tile.max()) + 1
            lut = np.full((L.E_local, per), np.nan)
            for (e, j), tt in done.items():
                if j < per:
                    lut[e, j] = tt
            t_of = lut[tx, tile]
            if np.isnan(t_of).any():
                raise AssertionError(f"GPU {d}: a target entry's tile never finished its GEMM")
        remote = owner // gpn != d // gpn
        hop = np.where(remote, (d // gpn) * gpn + owner % gpn, owner)
        # one impulse per (tile finish time, next hop, kind): bytes of its rows
        key = np.stack([t_of, hop.astype(float), remote.astype(float)], axis=1) if len(tx) \
            else np.zeros((0, 3))
        if len(key):
            uk, cnt = np.unique(key, axis=0, return_counts=True)
            src_l.append(np.full(len(uk), d))
            dst_l.append(uk[:, 1].astype(np.int64))
            t_l.append(uk[:, 0])
            n_l.append(cnt * wire)
            kind_l.append(uk[:, 2] > 0)
            first_send[d] = float(t_of.min())
        part_relay.append(hop[remote])
        part_owner.append(owner[remote])
        part_tok.append(tok[remote])
        part_gpu.append(np.full(int(remote.sum()), d))
        part_t.append(t_of[remote])
        part_x.append(tx[remote])
    cat = lambda xs, dt=float: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)
    src, dst, t, nb = cat(src_l, np.int64), cat(dst_l, np.int64), cat(t_l), cat(n_l)
    is_part = cat(kind_l, bool)
    # rows to owners of the node on the combine network; partial rows to the relays on
    # their own, into the relay's hub input (its packet port), each (sender, relay) flow
    # under its P window
    at = np.zeros(len(t))
    for phase, sel, ingress, cap in (("combine", ~is_part, False, None),
                                     ("combine_partial", is_part, True, partial_flow_cap(L, rcfg))):
        net, flows = L.network(phase, ingress, cap)
        for s, d, tt, b in zip(src[sel].tolist(), dst[sel].tolist(), t[sel].tolist(),
                               nb[sel].tolist()):
            net.inject(flows[s][d], tt, b)
        curves = L.run_net(net)
        at[sel] = _impulse_arrivals(curves, flows, src[sel], dst[sel], t[sel], nb[sel])
    recv = np.zeros(G)
    np.maximum.at(recv, dst[~is_part], at[~is_part])
    send_end = np.full(G, -np.inf)
    np.maximum.at(send_end, src, at)
    # each partial row's arrival at its relay: its impulse's
    imp = {(int(s), int(d), float(tt)): a for s, d, tt, a, p in
           zip(src, dst, t, at, is_part) if p}
    prelay, powner, ptok = cat(part_relay, np.int64), cat(part_owner, np.int64), cat(part_tok, np.int64)
    pgpu, pt, px = cat(part_gpu, np.int64), cat(part_t), cat(part_x, np.int64)
    parr = np.array([imp[(int(g), int(r), float(tt))] for g, r, tt in zip(pgpu, prelay, pt)]) \
        if len(pt) else np.zeros(0)
    part_nvlink = int((pgpu != prelay).sum())                 # (a relay's own parts: local)
    # the reduction: per relay, parts accumulated one after another in arrival order
    o = np.lexsort((ptok, powner, parr, prelay))
    prelay, powner, ptok, parr = prelay[o], powner[o], ptok[o], parr[o]
    order = ReduceParts(prelay, powner, ptok, pgpu[o], px[o])
    skey = (prelay * G + powner) * L.T + ptok                 # the sum a part belongs to
    us, sid, parts = np.unique(skey, return_inverse=True, return_counts=True)
    nth = np.zeros(len(sid), np.int64)                        # a part's place in its sum
    if len(sid):
        oo = np.argsort(sid, kind="stable")                   # (arrival order kept per sum)
        st = np.r_[0, np.cumsum(parts)[:-1]]
        nth[oo] = np.arange(len(sid)) - np.repeat(st, parts)
    n = parts[sid]
    rmw, stage = part_hbm_bytes(n, nth, H)
    hbm = L.gpu.hbm
    cdone = np.empty(len(sid))
    rmw_us, red_us, busy_us = np.zeros(G), np.zeros(G), np.zeros(G)
    # a part's service: its HBM bytes' time, no shorter than the datapath's row
    service = np.maximum((rmw + stage) / hbm, reduce_row_us(rcfg, H))
    for r in np.unique(prelay).tolist():
        m = prelay == r
        cdone[m] = _fifo_done(parr[m], service[m])
        rmw_us[r] = float(rmw[m].sum() / hbm)
        red_us[r] = float((rmw[m] + stage[m]).sum() / hbm)
        busy_us[r] = float(service[m].sum())
    final = np.zeros(len(us))
    np.maximum.at(final, sid, cdone)
    final = np.ceil(final / C.COMBINE_GRID_US - 1e-9) * C.COMBINE_GRID_US
    srelay, sowner = us // L.T // G, us // L.T % G
    # one reduced row per sum across the NIC to its owner
    rnet, rflows = L.network("combine_relay")
    rk = np.stack([srelay, sowner, final], axis=1) if len(us) else np.zeros((0, 3))
    rrecv_src = rrecv_dst = np.zeros(0, np.int64)
    if len(rk):
        uk, cnt = np.unique(rk, axis=0, return_counts=True)
        rrecv_src, rrecv_dst = uk[:, 0].astype(np.int64), uk[:, 1].astype(np.int64)
        for s, d, tt, c in zip(rrecv_src.tolist(), rrecv_dst.tolist(), uk[:, 2].tolist(),
                               cnt.tolist()):
            rnet.inject(rflows[s][d], tt, c * wire)
    rcurves = L.run_net(rnet)
    if len(rk):
        ends, sent, _ = C.pair_curves(rcurves, rflows)
        has = sent > 0
        recv = np.maximum(recv, np.where(has, ends, 0.0).max(axis=0))
        send_end = np.maximum(send_end, np.where(has, ends, -np.inf).max(axis=1))
        rfirst = np.full(G, np.inf)
        np.minimum.at(rfirst, rrecv_src, uk[:, 2])
        first_send = np.minimum(first_send, rfirst)
    for d in range(G):
        if np.isfinite(first_send[d]):
            res.add(d, "combine", "combine", first_send[d], max(first_send[d], send_end[d]))
    stats = {"combine_nic_rows": int(len(us)), "combine_nic_GB": float(len(us) * wire / 1e9),
             "reduce_parts": int(len(sid)),
             "parts_per_sum": float(len(sid) / max(len(us), 1)),
             "combine_nvlink_GB": float((part_nvlink * wire
                                         + nb[~is_part & (src != dst)].sum()) / 1e9),
             "rmw_GB": float(rmw.sum() / 1e9),
             "rmw_GB_check": float(sum(reduce_hbm_bytes(int(p), H) for p in parts) / 1e9),
             "rmw_us_max": float(rmw_us.max()),
             "stage_GB": float(stage.sum() / 1e9),
             "reduce_hbm_GB": float((rmw.sum() + stage.sum()) / 1e9),
             "reduce_hbm_us_max": float(red_us.max()),
             "reduce_busy_us_max": float(busy_us.max()),
             "partial_span": int(rcfg.partial_span)}
    return recv, stats, order


def combine_nic_plain(L: Layer) -> dict:
    """(No reduce) the combine's NIC rows and bytes: one row per routed row whose owner is
    in another node, as protocol v2 returns them."""
    gpn = min(L.sys.gpus_per_node, L.G)
    remote = (L.src // gpn) != (L.dest // gpn)
    n = int(remote.sum())
    return {"combine_nic_rows": n, "combine_nic_GB": float(n * L.comb_wire_sw / 1e9)}
