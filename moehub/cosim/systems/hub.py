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
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...spec.timing import CREDIT_LATENCY
from ..gpu import WorkItem
from ..hub_stage import BACKENDS, WRITE_DELAY, HubArrivals, alloc_rows
from ..layer import Layer, SystemResult
from . import common as C

PHASES = ["gate", "dispatch", "hub", "expert GEMM", "combine", "reduce"]  # + "layout" (expert order)
LABEL = "MoE-Hub (hub reference model)"
KIND = "hub"     #: the system under study (see :mod:`moehub.cosim.systems`)


def _tile_owners(L: Layer, arr: HubArrivals, hr, keys):
    """Per tile of the hub's allocation (for ``keys``, the flagged tiles): rows per source,
    and the cycle its last row's last chunk was written (accept + write latency). Arrays
    over the rows: a dict per row would cost more than the hub stage itself."""
    expert, row = alloc_rows(hr, arr)
    ok = row >= 0
    per = int(row.max()) // L.tile_rows + 1 if ok.any() else 1
    tile = (expert * per + row // L.tile_rows)[ok]
    n = (int(expert.max()) + 1) * per if ok.any() else 0
    rows = np.bincount(tile * L.G + arr.src[ok], minlength=n * L.G).reshape(n, L.G)
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, tile, np.asarray(arr.last_cycle, np.int64)[ok] + WRITE_DELAY)
    owners = {(e, t): rows[e * per + t] for e, t in keys}
    landed = {(e, t): int(last[e * per + t]) for e, t in keys}
    return owners, landed


def _cached(L: Layer, backend: str, d: int, arr: HubArrivals, run_backend, cfg=None):
    """The hub's result for these arrivals: the passes of :func:`..systems.run_system`
    often hand a hub the same schedule again (its traffic settled before the combine's
    did), and a hub's outputs depend on its arrivals alone."""
    import hashlib
    key = hashlib.sha1()
    for a in (arr.src, arr.tag, arr.expert, arr.token, arr.slot, arr.first_cycle,
              arr.first_lane, arr.last_cycle, arr.last_lane):
        key.update(np.ascontiguousarray(a).tobytes())
    key.update(repr(arr.eos).encode())
    if cfg is not None:                  # a protocol-v2 hub: its config, targets, counts
        key.update(repr(cfg).encode() + repr(arr.counts).encode())
        for a in (arr.tgt_row, arr.tgt_expert, arr.tgt_slot):
            if a is not None:
                key.update(np.ascontiguousarray(a).tobytes())
    cache = L.__dict__.setdefault("_hub_cache", {})
    k = (backend, d, key.hexdigest())
    if k not in cache:
        cache[k] = run_backend(L.hub if cfg is None else cfg, arr)
    return cache[k]


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


def hub_schedule(L: Layer, t0: float, order: str = "token"):
    """Dispatch of every row to its destination hub, from t0 (all sources): returns the
    per-destination :class:`HubArrivals`, the network curves and flows, and the stall count
    of the tag window. ``order``: rows of a flow leave in token order, or grouped by
    destination expert (``expert``)."""
    h = L.hub
    G = L.G
    _, pos = L.flow_order(L.lexp) if order == "expert" else L.flow_order()
    rate = L.send_rate(L.comp.sms_for("hub"), L.disp_bytes)
    first, last, curves, flows = L.dispatch(np.full(G, t0), L.row_wire_hub, L.pkt_wire_hub,
                                            pos, hub_ingress=True, flow_cap=hub_flow_cap(L),
                                            issue_rate=rate)
    clk = h.hub_clock_GHz * 1000.0                       # cycles per us
    ret_us = CREDIT_LATENCY / clk                         # completion + credit queue (cycles)
    first, last, stalls = _enforce_tags(L, first, last, pos, ret_us)
    cpr, lanes = h.chunks_per_row, h.lanes
    arrivals = []
    for d in range(G):
        rows = np.nonzero(L.dest == d)[0]
        fc, fl, lc, ll = row_cycles(L.src[rows], pos[rows], first[rows], last[rows], clk, cpr, lanes)
        eos = []
        for s in range(G):
            m = L.src[rows] == s
            eos.append((eos_cycle(L, lc[m], t0, s, d, clk), s % lanes, s, int(m.sum())))
        arrivals.append(HubArrivals(h, L.src[rows], pos[rows] % h.tags_per_source, L.lexp[rows],
                                    L.tok[rows], L.slot[rows], fc, fl, lc, ll, eos))
    return arrivals, curves, flows, stalls


def hub_label(backend: str, rtl_gpus: tuple) -> str:
    """The hub system's name in tables: its hub stage, and the GPUs whose hub is RTL."""
    label = LABEL if backend in ("model", "reference") else f"MoE-Hub ({backend} hub)"
    if rtl_gpus:
        gpus = ",".join(map(str, rtl_gpus))
        label = f"MoE-Hub (GPU {gpus} hub in RTL, the others the reference model)" \
            if backend in ("model", "reference") else f"{label[:-1]}, GPU {gpus} in RTL)"
    return label


def run_hub(L: Layer, backend: str = "model", order: str = "token",
            rtl_gpus: tuple = (), features=frozenset()) -> SystemResult:
    """MoE-Hub. ``order="token"``: the routing kernel sends each row as soon as the token is
    routed (the paper's design). ``order="expert"``: a local layout kernel (no exchange)
    first groups each destination's rows by expert, so experts fill one after another.
    ``rtl_gpus``: destination GPUs whose hub is the Verilog (the others use ``backend``);
    each of them is also run in model mode and the two are compared (``extra['rtl']``).
    ``features``: protocol v2 (issue 14), any of "multicast", "early_counts", "paged"
    (:mod:`.hub_v2`); none: protocol v1, this function."""
    if features:
        from .hub_v2 import run_hub as run_hub_v2
        return run_hub_v2(L, features, backend, order, rtl_gpus)
    res = SystemResult("hub", hub_label(backend, rtl_gpus)
                       + (", expert-ordered sends" if order == "expert" else ""))
    g, sw, G, h = L.gpu, L.sys.software, L.G, L.hub
    run_backend = BACKENDS[backend]
    rtl_checks = []
    t_gate = C.gate(L, res)
    t0 = t_gate
    if order == "expert":
        t0 = t_gate + g.small_kernel_us(L.T * L.E * 4 + L.T * L.k * 8)
        for d in range(G):
            res.add(d, "control", "layout", t_gate, t0)
    arrivals, curves, flows, stalls = hub_schedule(L, t0, order)
    clk = h.hub_clock_GHz * 1000.0
    send_end = np.zeros(G)
    for s in range(G):
        send_end[s] = C.send_phase(L, res, s, t0, curves, flows)
    # credits: one header-sized packet per row back to its source
    C.control_traffic(L, "credits", np.full(G, t0), L.counts.T * float(L.sys.link_header_bytes))
    batches_by_gpu, owners, shared_end = [], {}, np.zeros(G)
    sms = L.comp.sms_for("hub")
    hub_stats = {"drops": 0, "packets": 0, "tag_stalls": stalls, "rows": 0,
                 "rows_allocated": 0}
    for d in range(G):
        arr = arrivals[d]
        if d in rtl_gpus:
            hr = rtl_hub(h, arr, d, rtl_checks)
        else:
            hr = _cached(L, backend, d, arr, run_backend)
        hub_stats["drops"] += hr.drops
        hub_stats["packets"] += hr.packets
        hub_stats["rows"] += len(arr)
        # tile items from the hub's allocation and flags
        owners_e, landed = _tile_owners(L, arr, hr, hr.tile_ready)
        hub_stats["rows_allocated"] += int((alloc_rows(hr, arr)[1] >= 0).sum())
        items = []
        for key, cyc in hr.tile_ready.items():
            e, tile = key
            n = min(L.tile_rows, hr.counts[e] - tile * L.tile_rows)
            ready = cyc / clk + sw.flag_poll_us
            items.append(WorkItem(ready, e, int(n), L.tile_rows, L.model.expert_ffn, key=key,
                                  landed=landed[key] / clk, known=cyc / clk))
            owners[(d, key)] = owners_e[key]
            res.markers.append((d, "hub", cyc / clk))
        if len(arr):
            res.add(d, "hub", "hub", float(arr.first_cycle.min()) / clk, hr.done_cycle / clk)
        # the SMs that issue this GPU's sends are held until they end (the combine stores
        # come from the GEMM epilogue, as in Comet and the fused kernel); the hub's
        # receive side needs no SM
        t_done = hr.done_cycle / clk + sw.flag_poll_us    # counts known: the done word
        batches, _, shared_end[d] = C.run_queue(L, res, d, C.shared_item(L, t_gate) + items,
                                                max(t_gate, L.comp.launch_us),
                                                C.reserved_share(L, sms, send_end[d]),
                                                {e: t_done for e in range(L.E_local)})
        batches_by_gpu.append(batches)
    recv = C.combine_tilewise(L, res, batches_by_gpu, owners)
    res.gpu_end = C.reduce(L, res, recv, shared_end)
    res.extra.update(hub_stats)
    if rtl_checks:
        res.extra["rtl"] = rtl_checks
    return res
