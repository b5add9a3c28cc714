"""MoE-Hub: rows leave right after routing with only their expert id.

The routing kernel's SMs send every row (``chunk_bytes`` packets, each with its header)
as soon as its token is routed; the destination hub (the reference model
:class:`~moehub.spec.model.HubModel`, or the RTL, behind
:data:`~moehub.cosim.hub_stage.BACKENDS`) allocates rows and raises tile flags; a
persistent expert kernel polls the flags and runs tiles; outputs go back as tiles
finish -> reduce at the owner. Tags: a source reuses a row tag only after its credit
returned (hub completion + one link latency); credits cross the same ports. The hub
pays its own costs: packet headers, the tag window, flag polling, and the SMs that send
(their rate from the calibrated SM curve, held while this GPU sends).

Protocol v2: three features, each switchable, chosen once per run
(``run_hub(L, ..., features=frozenset({"multicast", "early_counts", "paged"}))``, any
subset: an ablation; none: protocol v1). The features are options of the run, not hub
config keys: the derived hub config of the layer gets the matching protocol-v2 fields
(:func:`hub_config_v2`: ``max_targets``, ``count_packets``, ``pool_pages``), so that the
reference model (:class:`~moehub.spec.model.HubModel`) and the vectorised hub stage
(:func:`~moehub.cosim.hub_stage.run_hub_fast`) behave as the v2 hub does.

* **multicast**: a source sends a token's row once per destination GPU (DeepEP normal
  mode's per-GPU deduplication, :attr:`Layer.gpu_rows`), naming that GPU's experts the
  token chose (each with its top-k slot). The hub writes the data once into its arena and
  writes one index entry per target; each target's tile counter counts the row when it
  completes; one credit per wire row. Across nodes the hub sends one copy per destination
  *GPU* over the NIC (no per-node copy and NVLink forward as DeepEP does). The expert
  GEMM reads its tile's rows by index (:func:`gather_row_us`): either GEMM1 gathers its A
  rows itself (at :data:`GATHER_EFF` of a contiguous A operand) or the kernel first copies
  the tile's rows together (read + write at the calibrated copy rate, as DeepEP's permute);
  the cheaper of the two per row (GEMM2 reads GEMM1's own output, contiguous).
* **early_counts**: right after routing each source sends one header-sized count packet
  per expert of each destination (its rows for that expert, 0 included); the routing
  kernel counts its rows per expert as it routes (ASSUMPTION: fused into the routing
  kernel, the ids read once at the copy rate; no extra launch). An expert is final when
  all its counts are in and its rows complete: its count word and last partial tile's
  flag then, and its GEMM knows it has every row (per expert, instead of the done word).
* **paged**: rows land in a pool of tile-sized pages handed out as rows arrive; the page
  allocation is in the hub's pipeline (no cycle more: the reference model allocates a page
  in the same step as the row), so it changes memory (:mod:`..memory`), not time.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib

import numpy as np

from ...spec.relay import record_table_bits
from ...spec.timing import ADMISSION_GROUPS, CREDIT_LATENCY
from ..gpu import WorkItem
from ..hub_stage import BACKENDS, WRITE_DELAY, HubArrivals, target_alloc
from ..layer import Layer, SystemResult
from . import common as C
from . import relay as R

PHASES = ["gate", "dispatch", "hub", "expert GEMM", "combine", "reduce"]  # + "layout" (expert order)
LABEL = "MoE-Hub (hub reference model)"
KIND = "hub"     #: the system under study (see :mod:`moehub.cosim.systems`)

FEATURES = ("multicast", "early_counts", "paged")
#: protocol v3's features (:mod:`.relay`): ``relay`` (one row per (token, remote node)
#: to a relay hub that forwards in its node; implies ``multicast``) and ``reduce`` (the
#: relay sums a (token, node)'s outputs before one row crosses the NIC back; needs
#: ``relay``). Multi-node layers only.
V3_FEATURES = ("relay", "reduce")
ALL_FEATURES = FEATURES + V3_FEATURES   #: every feature a run may name, in table order
#: the features the hub's RTL has (``--rtl-gpus``, ``--hub rtl``): count packets
#: (``count_packets``, README "Count packets in the hub RTL"), paged regions (README
#: "Paged regions in the hub RTL") and multicast rows (README "Multicast rows in the hub
#: RTL"), in any combination; and protocol v3's relay and reduce, whose control path and
#: reduce control run in RTL beside an RTL GPU's hub (:mod:`..relay_rtl`)
RTL_FEATURES = frozenset({"early_counts", "paged", "multicast", "relay", "reduce"})
#: GEMM1 efficiency of a gathering A load relative to a contiguous (TMA) one. ASSUMPTION,
#: from the nearest public measurement: on Hopper a GEMM that gathers A rows by index
#: cannot load them as TMA tiles and uses per-row pointer loads; TileOPs PR #1567 (H200,
#: BF16 grouped GEMM, M = 262144, N = 4096, K = 6144, 256 experts) measures the same Triton
#: kernel at 469 TFLOPS with pointer loads against 564 with TMA loads: 0.83. Both operands
#: were pointer-loaded there, the hub gathers only A: read as a pessimistic bound. The
#: vLLM-style fused MoE kernel that gathers A by sorted_token_ids reaches 0.89 of
#: torch._grouped_mm's whole MoE forward (VeOmni PR #460, H100, CALIBRATION.md sec 4),
#: whose contiguous path also pays a permute copy: consistent with ~0.83 for the GEMM.
GATHER_EFF = 469.0 / 564.0


def gather_row_us(L: Layer, row_bytes: int) -> float:
    """Extra GEMM time per row of a multicast arena: the cheaper of a gathering GEMM1
    (its time x (1 / GATHER_EFF - 1)) and a gather copy of the row (read and write its
    ``row_bytes`` at the calibrated copy rate, :meth:`GpuModel.copy_us`)."""
    g, m = L.gpu, L.model
    H, f = m.hidden, m.expert_ffn
    gemm1 = 4.0 * H * f / g.steady_eff(2 * f, H) / g.peak
    return min(gemm1 * (1.0 / GATHER_EFF - 1.0), g.copy_us(2.0 * row_bytes))


def check_features(features, rtl: bool = False) -> frozenset:
    """The features as a set; unknown ones, ``reduce`` without ``relay``, or (``rtl``)
    ones the RTL lacks, refused. ``relay`` brings ``multicast`` (the relay and forward
    rows are protocol v2's multicast rows)."""
    f = frozenset(features or ())
    bad = sorted(f - set(ALL_FEATURES))
    if bad:
        raise ValueError(f"hub features {bad}: unknown (known: {', '.join(ALL_FEATURES)})")
    if "reduce" in f and "relay" not in f:
        raise ValueError("hub features ['reduce']: the reduce on combine runs in the relay "
                         "hubs; it needs 'relay' too")
    if "relay" in f:
        f = f | {"multicast"}
    missing = sorted(f - RTL_FEATURES) if rtl else []
    if missing:
        raise ValueError(f"hub features {missing}: not in the hub RTL yet (an RTL hub runs "
                         f"{', '.join(sorted(RTL_FEATURES)) or 'none of them'}); use the model hub")
    return f


def pool_pages(L: Layer, multicast: bool) -> int:
    """Pages of the pool: enough for the worst case, so no row can drop (every source
    sending every token to every local expert, or once per GPU with multicast), plus one
    partial page per stream; the 16-bit page field of a flag caps it. What a layer really
    takes is what :mod:`..memory` reports."""
    h = L.hub
    rows = L.G * L.T * (1 if multicast else min(L.k, L.E_local))
    streams = 1 if multicast else L.E_local
    return min((1 << 16) - 1, -(-rows // h.tile_rows) + streams)


def hub_config_v2(L: Layer, features: frozenset):
    """The layer's derived hub config with the protocol-v2 fields of ``features``
    (``max_targets`` = the experts a row can name on one GPU: min(E/G, top-k))."""
    if not features:
        return L.hub
    mc = "multicast" in features and min(L.E_local, L.k) > 1
    kw = {"max_targets": min(L.E_local, L.k) if mc else 1,
          "count_packets": "early_counts" in features,
          "pool_pages": pool_pages(L, mc) if "paged" in features else 0}
    return L.hub.replace(**kw)


@dataclasses.dataclass
class WireRows:
    """The rows on the wire: one per routed row (unicast), or one per (source, token,
    destination GPU) with its targets (multicast)."""
    src: np.ndarray
    tok: np.ndarray
    dest: np.ndarray
    of: np.ndarray          #: per routed row: its wire row
    counts: np.ndarray      #: [G, G] wire rows per (src, dst)
    order_key: np.ndarray   #: per wire row: its place key inside its flow (token or expert)

    def __len__(self) -> int:
        return len(self.src)


def wire_rows(L: Layer, multicast: bool, order: str = "token") -> WireRows:
    """The layer's rows on the wire: the routed rows themselves, or (``multicast``) one per
    (source, token, destination GPU); ``order`` ("token" or "expert") sets the order key
    of each wire row inside its flow."""
    if not multicast:
        key = L.lexp if order == "expert" else np.zeros(L.N, np.int64)
        return WireRows(L.src, L.tok, L.dest, np.arange(L.N), L.counts, key)
    key = (L.src * L.T + L.tok) * L.G + L.dest
    o = np.argsort(key, kind="stable")
    ks = key[o]
    start = np.r_[True, ks[1:] != ks[:-1]]
    of = np.empty(L.N, np.int64)
    of[o] = np.cumsum(start) - 1
    first = o[start]
    n = len(first)
    counts = np.bincount(L.src[first] * L.G + L.dest[first], minlength=L.G * L.G).reshape(L.G, L.G)
    okey = np.zeros(n, np.int64)
    if order == "expert":              # a wire row goes with the first of its experts
        okey = np.full(n, np.iinfo(np.int64).max)
        np.minimum.at(okey, of, L.lexp)
    return WireRows(L.src[first], L.tok[first], L.dest[first], of, counts, okey)


def _flow_positions(L: Layer, w: WireRows):
    """Each wire row's place in its (src, dst) flow (by order key, then token) and the
    rows of each flow (the tag window's groups)."""
    o = np.lexsort((w.tok, w.order_key, w.dest, w.src))
    pair = w.src[o] * L.G + w.dest[o]
    starts = np.r_[0, np.nonzero(np.diff(pair))[0] + 1]
    n = len(w)
    pos = np.empty(n, np.int64)
    pos[o] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    bounds = np.r_[starts, n]
    groups = [((int(pair[a]) // L.G, int(pair[a]) % L.G), o[a:b])
              for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return pos, groups


def hub_flow_cap(L: Layer):
    """Rate bound of one (src, dst) flow from the tag window: tags rows in flight per
    credit round trip (two link latencies plus the hub's credit latency: a row's last
    chunk in, its credit out)."""
    h = L.hub
    hub_us = CREDIT_LATENCY / (h.hub_clock_GHz * 1000.0)

    def cap(s, d):
        rtt = 2 * L.latency(s, d) + hub_us
        return h.tags_per_source * L.row_wire_hub / rtt
    return cap


def _enforce_tags(L: Layer, first, last, position, ret_us, groups=None):
    """A source reuses tag (i mod tags) of a flow only after row i - tags's credit is back:
    row i's first packet leaves no earlier than that credit arrives; a late credit pauses
    the flow (all later rows shift). Returns (first, last, stall count). ``groups``: the
    rows of each (src, dst) flow (default the layer's routed rows)."""
    tags = L.hub.tags_per_source
    stalls = 0
    for (s, d), idx in (L.pair_groups() if groups is None else groups):
        if len(idx) <= tags:
            continue
        idx = idx[np.argsort(position[idx])]
        lat = L.latency(s, d)
        f, l = first[idx] - lat, last[idx] - lat             # departures
        back = l + lat + ret_us + lat                        # credit back at the source
        if not (f[tags:] < back[:-tags] - 1e-9).any():
            continue
        f, l = f.tolist(), l.tolist()
        shift = 0.0
        back = [0.0] * len(f)
        for i in range(len(f)):
            fi, li = f[i] + shift, l[i] + shift
            if i >= tags and fi < back[i - tags]:
                delta = back[i - tags] - fi
                shift += delta
                fi += delta
                li += delta
                stalls += 1
            f[i], l[i] = fi, li
            back[i] = li + 2 * lat + ret_us
        first[idx] = np.array(f) + lat
        last[idx] = np.array(l) + lat
    return first, last, stalls


def row_cycles(src, pos, first, last, clk: float, cpr: int, lanes: int):
    """Hub cycles and lanes of each row's first and last chunk ``(fc, fl, lc, ll)``: arrival
    times (us) to cycles at ``clk`` cycles/us; a source's rows start on lane ``src + pos x
    chunks per row`` (lanes taken in turn); a row whose chunks wrap past its first lane within
    one cycle ends a cycle later."""
    fc = np.ceil(first * clk - 1e-9).astype(np.int64)
    lc = np.ceil(last * clk - 1e-9).astype(np.int64)
    fl = (src + pos * cpr) % lanes
    ll = (fl + cpr - 1) % lanes
    lc = np.maximum(lc, fc)
    return fc, fl, lc + ((cpr > 1) & (lc == fc) & (ll <= fl)), ll


def eos_cycle(L: Layer, last_cycles, t0: float, s: int, d: int, clk: float) -> int:
    """Source ``s``'s end-of-stream at hub ``d``: the cycle after its last row's last chunk,
    or (no rows) its first packet's latency after ``t0``."""
    if len(last_cycles):
        return int(last_cycles.max()) + 1
    return int(np.ceil((t0 + L.latency(s, d)) * clk))


def rtl_hub(cfg, arr: HubArrivals, d: int, checks: list):
    """GPU ``d``'s hub in RTL: its result, and (appended to ``checks``) its comparison
    with the reference model (:func:`..hub_rtl.compare`) and the simulator's speed."""
    from ..hub_rtl import compare, run_hub_rtl
    hr = run_hub_rtl(cfg, arr, tag=f"cosim-gpu{d}")
    cmp = compare(cfg, arr, BACKENDS["model"](cfg, arr), hr)
    checks.append({"gpu": d, "sim": hr.player.sim, "rows": len(arr), "cycles": hr.player.cycles,
                   "sim_s": hr.player.wall_s,
                   "cycles_per_s": hr.player.cycles / max(hr.player.wall_s, 1e-9),
                   **dataclasses.asdict(cmp)})
    return hr


def relay_rtl_checks(L: Layer, rcfg, rd: R.Dispatch, parts, gpus) -> list:
    """The relay control path (and with ``parts``, the reduce control) of each GPU of
    ``gpus`` in RTL against the model and this pass's routes (:mod:`..relay_rtl`; a
    disagreement raises); one summary per GPU."""
    if not gpus:
        return []
    from ..relay_rtl import check_relay_gpu
    return [check_relay_gpu(L, rcfg, rd.routes, rd.hop1_last, d, parts) for d in gpus]


def hub_label(backend: str, rtl_gpus: tuple) -> str:
    """The hub system's name in tables: its hub stage, and the GPUs whose hub is RTL."""
    label = LABEL if backend in ("model", "reference") else f"MoE-Hub ({backend} hub)"
    if rtl_gpus:
        gpus = ",".join(map(str, rtl_gpus))
        label = f"MoE-Hub (GPU {gpus} hub in RTL, the others the reference model)" \
            if backend in ("model", "reference") else f"{label[:-1]}, GPU {gpus} in RTL)"
    return label


def _positions(L: Layer, w: WireRows, order: str, multicast: bool):
    """Each wire row's place in its (src, dst) flow and the rows of each flow (the tag
    window's groups): the layer's own (remembered) flow order when the wire rows are the
    routed rows (by token and top-k slot, or by local expert first), else sorted here by
    order key, then token."""
    if not multicast:
        _, pos = L.flow_order(L.lexp) if order == "expert" else L.flow_order()
        return pos, L.pair_groups()
    return _flow_positions(L, w)


def schedule(L: Layer, t0: float, cfg=None, order: str = "token"):
    """Dispatch of every wire row to its destination hub, from t0 (all sources), over the
    layer's network (hub ingress, the tag window). ``cfg``: the hub config with its
    protocol-v2 fields (:func:`hub_config_v2`; default the layer's, protocol v1).
    Returns (per-destination :class:`HubArrivals` with targets and count packets, wire
    rows, curves, flows, tag stalls, count send time). ``order``: rows of a flow leave in
    token order, or grouped by destination expert (``expert``)."""
    cfg = L.hub if cfg is None else cfg
    G = L.G
    w = wire_rows(L, cfg.multicast, order)
    pos, groups = _positions(L, w, order, cfg.multicast)
    curves, flows = C.paced_dispatch(L, t0, w.counts, hub_flow_cap(L))
    row_wire, pkt_wire = L.row_wire_hub, L.pkt_wire_hub
    off = pos * row_wire
    if hasattr(curves, "arrive_many"):          # every row at once (compiled engine)
        f = np.asarray(flows, dtype=np.int64)[w.src, w.dest]
        first, last = curves.arrive_many(f, off + pkt_wire), curves.arrive_many(f, off + row_wire)
    else:
        first, last = np.empty(len(w)), np.empty(len(w))
        for (s, d), idx in groups:
            c = curves[flows[s][d]]
            first[idx] = c.arrive(off[idx] + pkt_wire)
            last[idx] = c.arrive(off[idx] + row_wire)
    clk = cfg.hub_clock_GHz * 1000.0                       # cycles per us
    first, last, stalls = _enforce_tags(L, first, last, pos, CREDIT_LATENCY / clk, groups)
    t_cnt = count_send_us(L, t0)
    arrivals = assemble(L, cfg, w, pos, first, last, t0, t_cnt)
    return arrivals, w, curves, flows, stalls, t_cnt


def count_send_us(L: Layer, t0: float) -> float:
    """When the count packets leave: the routing kernel counts its rows per expert while
    it routes (the ids read once at the copy rate), then sends them ahead of its rows."""
    return t0 + L.gpu.copy_us(L.T * L.k * 8.0)


def assemble(L: Layer, cfg, w: WireRows, pos, first, last, t0: float, t_cnt: float) -> list:
    """Per destination GPU, the :class:`HubArrivals` of the wire rows ``w`` that land on it:
    each row's first and last packet arrival (us, ``first``/``last``), its place ``pos`` in
    its (source, destination) sequence (its tag and lanes), the end-of-stream and (count
    packets) count packets of every source, and (multicast) its targets in top-k order.
    The relay (:mod:`.relay`) hands its hubs the same rows with the arrival times of their
    path (direct, relayed or forwarded)."""
    G = L.G
    clk = cfg.hub_clock_GHz * 1000.0                       # cycles per us
    cpr, lanes = cfg.chunks_per_row, cfg.lanes
    if cfg.count_packets:
        per_x = np.zeros((G, G, L.E_local), np.int64)        # routed rows (s, d, expert)
        np.add.at(per_x, (L.src, L.dest, L.lexp), 1)
    arrivals = []
    for d in range(G):
        rows = np.nonzero(w.dest == d)[0]
        fc, fl, lc, ll = row_cycles(w.src[rows], pos[rows], first[rows], last[rows], clk, cpr, lanes)
        counts, eos = [], []
        for s in range(G):
            m = w.src[rows] == s
            cyc = eos_cycle(L, lc[m], t0, s, d, clk)
            if cfg.count_packets:
                cc = int(np.ceil((t_cnt + L.latency(s, d)) * clk))
                counts += [(cc, s % lanes, s, x, int(per_x[s, d, x])) for x in range(L.E_local)]
                cyc = max(cyc, cc)
            eos.append((cyc, s % lanes, s, int(m.sum())))
        mc = {}
        if cfg.multicast:        # targets: the routed rows of each wire row, in top-k order
            routed = np.nonzero(L.dest == d)[0]
            local = np.full(len(w), -1, np.int64)
            local[rows] = np.arange(len(rows))
            tr = local[w.of[routed]]
            o = np.lexsort((L.slot[routed], tr))
            routed, tr = routed[o], tr[o]
            head = np.r_[True, tr[1:] != tr[:-1]] if len(tr) else np.zeros(0, bool)
            x1 = np.zeros(len(rows), np.int64)
            s1 = np.zeros(len(rows), np.int64)
            x1[tr[head]], s1[tr[head]] = L.lexp[routed[head]], L.slot[routed[head]]
            mc = dict(tgt_row=tr, tgt_expert=L.lexp[routed], tgt_slot=L.slot[routed])
        else:                    # one target per row: its own expert and slot
            x1, s1 = L.lexp[rows], L.slot[rows]
        arrivals.append(HubArrivals(cfg, w.src[rows], pos[rows] % cfg.tags_per_source, x1,
                                    w.tok[rows], s1, fc, fl, lc, ll, eos, counts=counts, **mc))
    return arrivals


def relay_schedule(L: Layer, t0: float, cfg, rcfg, order: str = "token") -> R.Dispatch:
    """Protocol v3's dispatch (:mod:`.relay`): the v2 wire rows, each on its path -- direct
    (same node), with its relay row (the relay's own targets) or forwarded by the relay --
    the first hop under its tag windows (a relay row's credit after its forward starts),
    and each destination hub's arrivals as :func:`assemble` lays them out."""
    w = wire_rows(L, True, order)
    rt = R.routes(L, w)
    pos1, groups1 = _flow_positions(L, rt.hop1)
    curves, flows, first1, last1 = R.first_hop(L, t0, cfg, rt, pos1)
    stalls = 0
    for inter in (False, True):
        first1, last1, n = _enforce_tags(L, first1, last1, pos1, R.credit_return_us(L, cfg, inter),
                                         [g for g in groups1 if L.inter_node(*g[0]) == inter])
        stalls += n
    fi, firstf, lastf, fcounts = R.forward(L, cfg, rcfg, rt, last1)
    first, last = first1[rt.hop1_of], last1[rt.hop1_of]
    first[fi], last[fi] = firstf, lastf
    pos, _ = _flow_positions(L, w)
    t_cnt = count_send_us(L, t0)
    arrivals = assemble(L, cfg, w, pos, first, last, t0, t_cnt)
    return R.Dispatch(arrivals, rt, curves, flows, rt.hop1.counts, fcounts, stalls, t_cnt,
                      R.dispatch_stats(L, rt, len(fi), rcfg), last1, first)


def hub_schedule(L: Layer, t0: float, order: str = "token"):
    """The protocol-v1 dispatch (:func:`schedule` with the layer's hub config): the
    per-destination :class:`HubArrivals`, the network curves and flows, and the stall
    count of the tag window."""
    arrivals, _, curves, flows, stalls, _ = schedule(L, t0, L.hub, order)
    return arrivals, curves, flows, stalls


def admission_tight(cfg, arr: HubArrivals) -> int:
    """(multicast with count packets) The wire rows of one destination that the input
    admission takes one data packet a cycle (:mod:`moehub.rtl.counts.multicast_limit`): rows
    whose first packet comes before every count packet is in, or while some expert is
    within ``ADMISSION_GROUPS x lanes`` rows of its announced total and not met -- from
    the arrival (in first-packet order) after its row ``total - margin`` to its last row.
    The model hub grants rows without this rate limit; the study reports the rows and a
    bound on the time they cost. (The margin's one-cycle lags are left out.)"""
    n = len(arr)
    if not n or not (cfg.multicast and cfg.count_packets):
        return 0
    K = ADMISSION_GROUPS * cfg.lanes
    rank = np.empty(n, np.int64)
    rank[np.argsort(arr.first_cycle, kind="stable")] = np.arange(n)
    totals = np.zeros(cfg.experts, np.int64)
    for _, _, _, x, c in arr.counts:
        totals[x] += c
    tight = np.zeros(n + 1, np.int64)                  # +1 / -1 at window edges, in rank order
    for x in range(cfg.experts):
        r = np.sort(rank[np.asarray(arr.tgt_row)[np.asarray(arr.tgt_expert) == x]])
        if totals[x] == 0 or not len(r):
            continue
        lo = int(r[totals[x] - K]) + 1 if totals[x] - K >= 0 and totals[x] - K < len(r) else 0
        hi = int(r[min(totals[x], len(r)) - 1]) + 1
        if lo < hi:
            tight[lo] += 1
            tight[hi] -= 1
    marked = np.cumsum(tight)[:n] > 0
    counts_in = max((c[0] for c in arr.counts), default=0)
    marked |= np.sort(arr.first_cycle, kind="stable") < counts_in
    return int(marked.sum())


def _tile_owners(L: Layer, arr: HubArrivals, hr, keys):
    """Per tile of the hub's allocation (for ``keys``, the flagged tiles): rows per source,
    and the cycle its last row's last chunk was written (accept + write latency); and the
    target entries allocated. Arrays over the target entries (:func:`target_alloc`): a
    dict per row would cost more than the hub stage itself."""
    trow, tx, rank = target_alloc(hr, arr)
    ok = rank >= 0
    per = int(rank.max()) // L.tile_rows + 1 if ok.any() else 1
    tile = (tx * per + rank // L.tile_rows)[ok]
    n = (int(tx.max()) + 1) * per if ok.any() else 0
    src = np.asarray(arr.src, np.int64)[trow][ok]
    rows = np.bincount(tile * L.G + src, minlength=n * L.G).reshape(n, L.G)
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, tile, np.asarray(arr.last_cycle, np.int64)[trow][ok] + WRITE_DELAY)
    return ({(e, t): rows[e * per + t] for e, t in keys},
            {(e, t): int(last[e * per + t]) for e, t in keys}, int(ok.sum()))


#: the hub results a layer keeps (:func:`_cached`), in passes' worth of its GPUs: a pass
#: finds the last pass's schedule or, when the damping averages two states, the one
#: before. Kept unbounded, a layer held every pass's arrivals and results (every
#: system's, when several run on one layer): 0.12 GB a pass at 32 GPUs and 4096 tokens
#: per GPU (traced), so about 1 GB a pass at 256 GPUs (the same rows per GPU), which
#: with the passes' backgrounds took the 32-node relay layer past 24 GB. A result left
#: out is computed again: the same, since it depends on the config and arrivals alone.
HUB_CACHE_PASSES = 2


def _cached(L: Layer, backend: str, d: int, arr: HubArrivals, run_backend, cfg):
    """The hub's result for these arrivals: the passes of :func:`..systems.run_system`
    often hand a hub the same schedule again (its traffic settled before the combine's
    did), and a hub's outputs depend on its config and arrivals alone. The most recently
    used :data:`HUB_CACHE_PASSES` x GPUs results are kept."""
    key = hashlib.sha1()
    for a in (arr.src, arr.tag, arr.expert, arr.token, arr.slot, arr.first_cycle,
              arr.first_lane, arr.last_cycle, arr.last_lane):
        key.update(np.ascontiguousarray(a).tobytes())
    key.update(repr(arr.eos).encode() + repr(cfg).encode() + repr(arr.counts).encode())
    for a in (arr.tgt_row, arr.tgt_expert, arr.tgt_slot):
        if a is not None:
            key.update(np.ascontiguousarray(a).tobytes())
    cache = L.__dict__.setdefault("_hub_cache", {})
    k = (backend, d, key.hexdigest())
    out = cache.pop(k, None)
    if out is None:
        out = run_backend(cfg, arr)
    cache[k] = out                       # (the most recently used last)
    while len(cache) > HUB_CACHE_PASSES * L.G:
        del cache[next(iter(cache))]
    return out


def run_hub(L: Layer, backend: str = "model", order: str = "token",
            rtl_gpus: tuple = (), features=frozenset()) -> SystemResult:
    """MoE-Hub. ``order="token"``: the routing kernel sends each row as soon as the token is
    routed (the paper's design). ``order="expert"``: a local layout kernel (no exchange)
    first groups each destination's rows by expert, so experts fill one after another.
    ``rtl_gpus``: destination GPUs whose hub is the Verilog (the others use ``backend``);
    each of them is also run in model mode and the two are compared (``extra['rtl']``).
    ``features``: protocol v2, any of :data:`FEATURES` (see the module docstring); an RTL
    hub (``rtl_gpus`` or ``backend`` "rtl") only those in :data:`RTL_FEATURES`. With none
    the statistics are protocol v1's (no v2 keys, no v2 label)."""
    features = check_features(features, rtl=bool(rtl_gpus) or backend == "rtl")
    cfg = hub_config_v2(L, features)
    relay = "relay" in features
    rcfg = R.check_layer(L, cfg) if relay else None
    label = hub_label(backend, rtl_gpus)
    if features:
        label += f", protocol v2: {'+'.join(f for f in FEATURES if f in features)}"
    if relay:
        label += f", protocol v3: {'+'.join(f for f in V3_FEATURES if f in features)}"
    res = SystemResult("hub", label + (", expert-ordered sends" if order == "expert" else ""))
    g, sw, G = L.gpu, L.sys.software, L.G
    run_backend = BACKENDS[backend]
    t_gate = C.gate(L, res)
    t0 = t_gate
    if order == "expert":
        t0 = t_gate + g.small_kernel_us(L.T * L.E * 4 + L.T * L.k * 8)
        for d in range(G):
            res.add(d, "control", "layout", t_gate, t0)
    if relay:                            # first hop, relay forwards (protocol v3)
        rd = relay_schedule(L, t0, cfg, rcfg, order)
        arrivals, w, curves, flows, stalls, t_cnt = (rd.arrivals, rd.routes.w, rd.curves,
                                                     rd.flows, rd.stalls, rd.t_cnt)
        sent, back = rd.counts1, rd.counts1 + rd.fcounts
    else:
        arrivals, w, curves, flows, stalls, t_cnt = schedule(L, t0, cfg, order)
        sent = back = w.counts
    clk = cfg.hub_clock_GHz * 1000.0
    send_end = np.array([C.send_phase(L, res, s, t0, curves, flows, counts=sent)
                         for s in range(G)])
    # credits: one header-sized packet per wire row (and forward) back to its sender
    hdr = float(L.sys.link_header_bytes)
    C.control_traffic(L, "credits", np.full(G, t0), back.T * hdr)
    if cfg.count_packets:
        C.control_traffic(L, "counts", np.full(G, t_cnt), np.full((G, G), L.E_local * hdr))
    gpu = g
    if cfg.multicast:                    # the expert GEMM gathers its A rows from the arena
        gpu = copy.copy(g)
        gpu.gather_row_us = gather_row_us(L, cfg.stride_bytes)
    batches_by_gpu, owners, shared_end = [], {}, np.zeros(G)
    sms = L.comp.sms_for("hub")
    st = {"drops": 0, "packets": 0, "tag_stalls": stalls, "rows": 0, "rows_allocated": 0}
    if features:
        st.update({"features": sorted(features), "wire_rows": int(len(w)),
                   "max_targets": cfg.max_targets, "pages": [], "gather_row_us": gpu.gather_row_us,
                   "early_final_us": [], "admission_tight_rows": 0, "admission_tight_us": []})
    rtl_checks, results = [], []
    for d in range(G):
        arr = arrivals[d]
        hr = rtl_hub(cfg, arr, d, rtl_checks) if d in rtl_gpus \
            else _cached(L, backend, d, arr, run_backend, cfg)
        results.append(hr)
        st["drops"] += hr.drops
        st["packets"] += hr.packets
        st["rows"] += len(arr)
        if features:
            st["pages"].append(int(hr.pages))
        if cfg.multicast and cfg.count_packets:     # (one data packet a cycle for them: a bound)
            tight = admission_tight(cfg, arr)
            st["admission_tight_rows"] += tight
            st["admission_tight_us"].append(tight * cfg.chunks_per_row * (1 - 1 / cfg.lanes) / clk)
        # tile items from the hub's allocation and flags
        owners_e, landed, n_alloc = _tile_owners(L, arr, hr, hr.tile_ready)
        st["rows_allocated"] += n_alloc
        items = []
        for key, cyc in hr.tile_ready.items():
            e, tile = key
            n = min(L.tile_rows, hr.counts[e] - tile * L.tile_rows)
            items.append(WorkItem(cyc / clk + sw.flag_poll_us, e, int(n), L.tile_rows,
                                  L.model.expert_ffn, key=key, landed=landed[key] / clk,
                                  known=cyc / clk))
            owners[(d, key)] = owners_e[key]
            res.markers.append((d, "hub", cyc / clk))
        if len(arr):
            res.add(d, "hub", "hub", float(arr.first_cycle.min()) / clk, hr.done_cycle / clk)
        # the SMs that issue this GPU's sends are held until they end (the combine stores
        # come from the GEMM epilogue, as in Comet and the fused kernel); the hub's
        # receive side needs no SM
        t_done = hr.done_cycle / clk + sw.flag_poll_us    # counts known: the done word
        if cfg.count_packets:            # each expert known complete at its own count word
            known = {e: hr.count_cycle[e] / clk + sw.flag_poll_us for e in range(L.E_local)}
            st["early_final_us"].append(float(t_done - np.mean(list(known.values()))))
        else:
            known = {e: t_done for e in range(L.E_local)}
        # (relay: the forward network carries every link byte of the dispatch, its own
        # forwards and the other phases as background: the HBM traffic the GEMMs share)
        hbm_at = C.hbm_share(L, d, ("forward",)) if relay else None
        batches, _, shared_end[d] = C.run_queue(L, res, d, C.shared_item(L, t_gate) + items,
                                                max(t_gate, L.comp.launch_us),
                                                C.reserved_share(L, sms, send_end[d]), known,
                                                hbm_at=hbm_at, gpu=gpu)
        batches_by_gpu.append(batches)
    parts = None
    if "reduce" in features:
        recv, rst, parts = R.combine_reduce(L, res, batches_by_gpu, arrivals, results, rcfg)
        rst["record_table_KiB"] = record_table_bits(rcfg) / 8192
    else:
        recv = C.combine_tilewise(L, res, batches_by_gpu, owners)
        rst = R.combine_nic_plain(L) if relay else {}
    if relay:
        rtl_checks += relay_rtl_checks(L, rcfg, rd, parts, range(G) if backend == "rtl" else rtl_gpus)
    res.gpu_end = C.reduce(L, res, recv, shared_end)
    res.extra.update(st)
    if relay:
        res.extra["relay"] = {**rd.stats, **rst}
    if rtl_checks:
        res.extra["rtl"] = rtl_checks
    return res
