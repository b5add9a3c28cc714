"""The five systems compared on the same layer, each a list of named, costed phases.

All systems share the GPU cost model (:mod:`.gpu`), the fluid network (:mod:`.network`),
the routing and the placement (:class:`.layer.Layer`); they differ only in the mechanism
that gets each row to its expert and back (FACTS.md, "How software systems resolve
addresses today"). Times are microseconds from the start of the layer; a layer ends when
the last GPU has reduced its tokens' k expert outputs.

``bulk``    Bulk-synchronous all-to-all (Megatron-Core / DeepSpeed / Tutel style):
            gate -> layout (one-hot counts) -> count exchange (collective) -> host sync
            (D2H of splits) -> permute -> all-to-all-v dispatch (starts when every GPU has
            joined) -> sort rows by local expert (if >1 local expert) -> grouped GEMM ->
            unsort -> all-to-all-v combine -> unpermute + weighted reduce.
``comet``   Fine-grained overlap with a precomputed layout (Comet style): gate -> layout
            -> count exchange -> scatter-index kernel -> one fused kernel in which comm
            SMs send rows to resolved addresses (per destination, sorted by local expert)
            while the other SMs run each GEMM tile as soon as all its rows (sorted by source
            rank) have landed, and tile outputs go back to the owners as tiles finish ->
            reduce at the owner. ``comm_sms_overlap`` SMs are lost to compute while this
            GPU's rows are still leaving or landing.
``onesided`` One-sided puts into pre-partitioned buffers (DeepEP low-latency style): gate ->
            dispatch kernel puts each row into [local expert][source][slot] (slot from a
            local atomic) -> per-source count flag after a fence (one round trip) -> the
            receiver waits for every source's flag and packs rows per expert -> grouped
            GEMM -> combine kernel puts outputs back -> flags -> reduce.
``hub``     MoE-Hub: the routing kernel sends every row right after routing with only its
            expert id; the destination hub (the reference model :class:`HubModel`, or the
            RTL later, behind :data:`.hub_stage.BACKENDS`) allocates rows and raises tile
            flags; a persistent expert kernel polls flags and runs tiles; outputs go back as
            tiles finish -> reduce at the owner. Tags: a source reuses a row tag only after
            its credit returned (hub completion + one link latency).
``ideal``   Communication free (a bound): rows are at their experts when routing ends and
            outputs at their owners when GEMMs end; gate, GEMM and reduce remain.

The shared expert (if the model has one) is local work on every GPU, ready after the gate;
it shares the GPU's GEMM queue in every system.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .gpu import ExpertQueue, WorkItem
from .hub_stage import BACKENDS, HubArrivals
from .layer import Layer, SystemResult
from .network import GBps, flow_wire_bytes

SYSTEMS = ("bulk", "comet", "onesided", "hub", "ideal")
LABELS = {
    "bulk": "Bulk all-to-all (Megatron/DeepSpeed/Tutel)",
    "comet": "Fine-grained overlap, precomputed layout (Comet)",
    "onesided": "One-sided puts, partitioned buffers (DeepEP-LL)",
    "hub": "MoE-Hub (hub reference model)",
    "ideal": "Ideal: communication free",
}
#: the phases each system is made of, in order (tests check this list)
PHASES = {
    "bulk": ["gate", "layout", "count exchange", "host sync", "permute", "all-to-all dispatch",
             "sort by expert", "expert GEMM", "unsort", "all-to-all combine", "unpermute+reduce"],
    "comet": ["gate", "layout", "count exchange", "scatter index", "dispatch", "expert GEMM",
              "combine", "reduce"],
    "onesided": ["gate", "dispatch", "notify", "recv pack", "expert GEMM", "combine", "reduce"],
    "hub": ["gate", "dispatch", "hub", "expert GEMM", "combine", "reduce"],  # + "layout" (expert order)
    "ideal": ["gate", "expert GEMM", "reduce"],
}


# ---------------------------------------------------------------------------- helpers
def _shared_item(L: Layer, t_gate: float):
    m = L.model
    if not m.shared_experts:
        return []
    return [WorkItem(t_gate, -1, L.T, L.gpu.padded(L.T), m.shared_expert_ffn * m.shared_experts,
                     key="shared")]


def _run_queue(L, res, d, items, start, share_at, complete_at=None, hbm_at=None):
    batches = ExpertQueue(L.gpu, start, share_at, complete_at, hbm_at).run(items)
    for b in batches:
        routed = [it for it in b.items if it.expert >= 0]
        name = "expert GEMM" if routed else "shared expert"
        res.add(d, "gemm", name, b.start, b.end)
    routed_end = max([b.end for b in batches if any(it.expert >= 0 for it in b.items)],
                     default=start)
    shared_end = max([b.end for b in batches if any(it.expert < 0 for it in b.items)],
                     default=start)
    return batches, routed_end, shared_end


def _combine_tilewise(L: Layer, res: SystemResult, batches_by_gpu, owners_of):
    """Each finished batch sends its rows' outputs back to their owners at once."""
    net, flows = L.network()
    first = np.full(L.G, np.inf)
    for d, batches in enumerate(batches_by_gpu):
        for b in batches:
            rows = np.zeros(L.G)
            for it in b.items:
                if it.expert >= 0 and it.final:      # a tile's outputs are complete
                    rows += owners_of[(d, it.key)]
            for o in np.nonzero(rows)[0]:
                net.inject(flows[d][o], b.end, rows[o] * L.row_wire_sw)
            if rows.any():
                first[d] = min(first[d], b.end)
    curves = net.run()
    return _combine_done(L, res, curves, flows, first)


def _combine_done(L, res, curves, flows, first, flag_extra=None):
    G = L.G
    recv = np.zeros(G)
    for d in range(G):
        send_end = first[d] if np.isfinite(first[d]) else 0.0
        for o in range(G):
            c = curves[flows[d][o]]
            if len(c.b) and c.b[-1] > 0:
                end = c.end + (flag_extra(d, o) if flag_extra else 0.0)
                recv[o] = max(recv[o], end)
                send_end = max(send_end, c.end)
        if np.isfinite(first[d]):
            res.add(d, "combine", "combine", first[d], send_end)
    return recv


def _reduce(L, res, recv_done, shared_end, poll=True):
    sw = L.sys.software
    start = np.maximum(recv_done + (sw.flag_poll_us if poll else 0.0), shared_end)
    end = start + L.gpu.reduce_us(L.T)
    for o in range(L.G):
        res.add(o, "control", "reduce", start[o], end[o])
    return end


def _gate(L, res):
    t = L.gpu.gate_us(L.T)
    for g in range(L.G):
        res.add(g, "control", "gate", 0.0, t)
    return t


def _collective_us(L) -> float:
    """Count exchange among the GPUs: an all-to-all of each peer's local-expert counts
    (int32) at the calibrated small-collective cost (nothing to exchange on one GPU)."""
    return L.gpu.comp.small_collective_us(L.G, L.sys.nodes, 4.0 * L.E_local)


def _full(_t):
    return 1.0


# ---------------------------------------------------------------------------- systems
def run_bulk(L: Layer) -> SystemResult:
    res = SystemResult("bulk", LABELS["bulk"])
    g, sw, G, T, k = L.gpu, L.sys.software, L.G, L.T, L.k
    t_gate = _gate(L, res)
    t_layout = t_gate + g.small_kernel_us(T * L.E * 4 + T * k * 8)
    t_cx = t_layout + _collective_us(L)               # every GPU joins at the same time
    t_sync = t_cx + g.comp.host_sync_us
    t_perm = t_sync + g.permute_us(T * k)
    a2a = t_perm + g.launch
    for d in range(G):
        res.add(d, "control", "layout", t_gate, t_layout)
        res.add(d, "control", "count exchange", t_layout, t_cx)
        res.add(d, "control", "host sync", t_cx, t_sync)
        res.add(d, "control", "permute", t_sync, t_perm)
    nbytes = flow_wire_bytes(L.counts * L.row_bytes, L.sys.link_max_payload_bytes,
                             L.sys.link_header_bytes)
    curves, flows = L.bulk_flows(np.full(G, a2a), nbytes)
    recv = np.array([max([curves[flows[s][d]].end for s in range(G) if L.counts[s, d]] or [a2a])
                     for d in range(G)])
    for s in range(G):
        end = max([curves[flows[s][d]].end for d in range(G) if L.counts[s, d]] or [a2a])
        res.add(s, "send", "all-to-all dispatch", a2a, end)
    rows_d = L.counts.sum(axis=0)
    sort_end = recv + (np.array([g.permute_us(r) for r in rows_d]) if L.E_local > 1 else 0.0)
    gemm_ready = sort_end + g.launch
    unsort_end = np.zeros(G)
    shared_end = np.zeros(G)
    for d in range(G):
        if L.E_local > 1:
            res.add(d, "control", "sort by expert", recv[d], sort_end[d])
        items = _shared_item(L, t_gate) + [
            WorkItem(gemm_ready[d], e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, routed_end, shared_end[d] = _run_queue(L, res, d, items, t_gate, _full)
        unsort_end[d] = routed_end + (g.permute_us(rows_d[d]) if L.E_local > 1 else 0.0)
        if L.E_local > 1:
            res.add(d, "control", "unsort", routed_end, unsort_end[d])
    a2a2 = unsort_end.max() + g.launch
    curves, flows = L.bulk_flows(np.full(G, a2a2), nbytes.T.copy())
    recv2 = np.zeros(G)
    for d in range(G):
        end = max([curves[flows[d][o]].end for o in range(G) if L.counts[o, d]] or [a2a2])
        res.add(d, "combine", "all-to-all combine", a2a2, end)
        for o in range(G):
            if L.counts[o, d]:
                recv2[o] = max(recv2[o], curves[flows[d][o]].end)
    end = np.maximum(recv2, shared_end) + g.reduce_us(T)
    for o in range(G):
        res.add(o, "control", "unpermute+reduce", max(recv2[o], shared_end[o]), end[o])
    res.gpu_end = end
    return res


def _receive_tiles(L: Layer, d: int, ready_row: np.ndarray, rows: np.ndarray, tile_rows: int):
    """Tiles of GPU d's experts when each expert's rows are stored in ``rows`` order
    (indices into the layer's row arrays, grouped by local expert); returns items and
    their owners."""
    items, owners = [], {}
    le = L.lexp[rows]
    for e in range(L.E_local):
        r = rows[le == e]
        for t0 in range(0, len(r), tile_rows):
            part = r[t0:t0 + tile_rows]
            key = (e, t0 // tile_rows)
            items.append(WorkItem(float(ready_row[part].max()), e, len(part), tile_rows,
                                  L.model.expert_ffn, key=key))
            owners[(d, key)] = np.bincount(L.src[part], minlength=L.G)
    return items, owners


def run_comet(L: Layer) -> SystemResult:
    res = SystemResult("comet", LABELS["comet"])
    g, sw, G, T, k = L.gpu, L.sys.software, L.G, L.T, L.k
    t_gate = _gate(L, res)
    t_layout = t_gate + g.small_kernel_us(T * L.E * 4 + T * k * 8)
    t_cx = t_layout + _collective_us(L)
    t_idx = t_cx + g.small_kernel_us(T * k * 8 * 2)
    t0 = t_idx + g.launch
    for d in range(G):
        res.add(d, "control", "layout", t_gate, t_layout)
        res.add(d, "control", "count exchange", t_layout, t_cx)
        res.add(d, "control", "scatter index", t_cx, t_idx)
    _, pos = L.flow_order(L.lexp)       # a source sends each destination's rows by expert
    pkt = min(L.sys.link_max_payload_bytes, L.row_bytes) + L.sys.link_header_bytes
    first, last, curves, flows = L.dispatch(np.full(G, t0), L.row_wire_sw, pkt, pos)
    ready_row = last + sw.flag_poll_us
    share_c = (L.sys.sms - g.comp.sms_for("comet")) / L.sys.sms
    # comm SMs are held while rows leave or land on this GPU; outputs then go back from the
    # GEMM epilogue (Comet's adaptive assignment gives the SMs back to compute)
    recv_end = [max([curves[flows[s][d]].end for s in range(G) if L.counts[s, d]] or [t0])
                for d in range(G)]
    batches_by_gpu, owners, shared_end = [], {}, np.zeros(G)
    for d in range(G):
        busy = max(_send_phase(L, res, d, t0, curves, flows), recv_end[d])
        rows = np.nonzero(L.dest == d)[0]
        rows = rows[np.lexsort((L.slot[rows], L.tok[rows], L.src[rows], L.lexp[rows]))]
        items, own = _receive_tiles(L, d, ready_row, rows, L.tile_rows)
        owners.update(own)
        for it in items:
            res.markers.append((d, "hub", it.ready))
        batches, _, shared_end[d] = _run_queue(
            L, res, d, _shared_item(L, t_gate) + items, t_gate,
            lambda t, busy=busy: share_c if t < busy else 1.0)
        batches_by_gpu.append(batches)
    recv = _combine_tilewise(L, res, batches_by_gpu, owners)
    res.gpu_end = _reduce(L, res, recv, shared_end)
    return res


def _send_phase(L, res, s, t0, curves, flows):
    ends = [curves[flows[s][d]].end for d in range(L.G) if L.counts[s, d]]
    if ends:
        res.add(s, "send", "dispatch", t0, max(ends))
    return max(ends, default=t0)


def run_onesided(L: Layer) -> SystemResult:
    res = SystemResult("onesided", LABELS["onesided"])
    g, sw, G, T = L.gpu, L.sys.software, L.G, L.T
    t_gate = _gate(L, res)
    t0 = t_gate + g.launch
    _, pos = L.flow_order()
    pkt = min(L.sys.link_max_payload_bytes, L.row_bytes) + L.sys.link_header_bytes
    first, last, curves, flows = L.dispatch(np.full(G, t0), L.row_wire_sw, pkt, pos)
    shared_end = np.zeros(G)
    gemm_end = np.zeros(G)
    for d in range(G):
        _send_phase(L, res, d, t0, curves, flows)
        flags = []
        for s in range(G):
            lat = L.latency(s, d)
            if L.counts[s, d]:
                # fence: wait for the puts' acknowledgements, then write the count flag
                flags.append(curves[flows[s][d]].end + 2 * lat)
            else:
                flags.append(t0 + lat)
            res.markers.append((d, "hub", flags[-1]))
        t_flags = max(flags) + sw.flag_poll_us
        data_end = max([curves[flows[s][d]].end for s in range(G) if L.counts[s, d]] or [t0])
        res.add(d, "hub", "notify", min(data_end, t_flags), t_flags)
        t_pack = t_flags + g.copy_us(2.0 * L.counts[:, d].sum() * L.row_bytes)
        res.add(d, "control", "recv pack", t_flags, t_pack)
        items = _shared_item(L, t_gate) + [
            WorkItem(t_pack + g.launch, e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, gemm_end[d], shared_end[d] = _run_queue(L, res, d, items, t_gate, _full)
    # combine kernel: puts back to the owners' [token][slot] buffers
    net, cflows = L.network()
    tc = gemm_end + g.launch
    for d in range(G):
        total = L.counts[:, d].sum() * L.row_wire_sw
        for o in range(G):
            net.inject_rate(cflows[d][o], tc[d], tc[d] + total / L.issue_rate,
                            L.counts[o, d] * L.row_wire_sw)
    ccurves = net.run()
    recv = _combine_done(L, res, ccurves, cflows, tc,
                         flag_extra=lambda d, o: 2 * L.latency(d, o))
    res.gpu_end = _reduce(L, res, recv, shared_end)
    return res


def hub_flow_cap(L: Layer):
    """Rate bound of one (src, dst) flow from the tag window: tags rows in flight per
    credit round trip (two link latencies plus the hub's flag/credit delay)."""
    h = L.hub
    hub_us = 8 / (h.hub_clock_GHz * 1000.0)

    def cap(s, d):
        rtt = 2 * L.latency(s, d) + hub_us
        return h.tags_per_source * L.row_wire_hub / rtt
    return cap


def _enforce_tags(L: Layer, first, last, position, ret_us):
    """A source reuses tag (i mod tags) of a flow only after row i - tags's credit is back:
    row i's first packet leaves no earlier than that credit arrives; a late credit pauses
    the flow (all later rows shift). Returns (first, last, stall count)."""
    tags = L.hub.tags_per_source
    stalls = 0
    for (s, d), idx in L.pair_groups():
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


def hub_schedule(L: Layer, t0: float, order: str = "token"):
    """Dispatch of every row to its destination hub, from t0 (all sources): returns the
    per-destination :class:`HubArrivals`, the network curves and flows, and the stall count
    of the tag window. ``order``: rows of a flow leave in token order, or grouped by
    destination expert (``expert``)."""
    h = L.hub
    G = L.G
    _, pos = L.flow_order(L.lexp) if order == "expert" else L.flow_order()
    first, last, curves, flows = L.dispatch(np.full(G, t0), L.row_wire_hub, L.pkt_wire_hub,
                                            pos, hub_ingress=True, flow_cap=hub_flow_cap(L))
    clk = h.hub_clock_GHz * 1000.0                       # cycles per us
    ret_us = (8 + 1) / clk                                # completion + credit queue (cycles)
    first, last, stalls = _enforce_tags(L, first, last, pos, ret_us)
    cpr, lanes = h.chunks_per_row, h.lanes
    arrivals = []
    for d in range(G):
        rows = np.nonzero(L.dest == d)[0]
        fc = np.ceil(first[rows] * clk - 1e-9).astype(np.int64)
        lc = np.ceil(last[rows] * clk - 1e-9).astype(np.int64)
        fl = (L.src[rows] + pos[rows] * cpr) % lanes
        ll = (fl + cpr - 1) % lanes
        lc = np.maximum(lc, fc)
        lc = lc + ((cpr > 1) & (lc == fc) & (ll <= fl))
        eos = []
        for s in range(G):
            m = L.src[rows] == s
            cyc = int(lc[m].max()) + 1 if m.any() else int(np.ceil((t0 + L.latency(s, d)) * clk))
            eos.append((cyc, s % lanes, s, int(m.sum())))
        arrivals.append(HubArrivals(h, L.src[rows], pos[rows] % h.tags_per_source, L.lexp[rows],
                                    L.tok[rows], L.slot[rows], fc, fl, lc, ll, eos))
    return arrivals, curves, flows, stalls


def run_hub(L: Layer, backend: str = "model", order: str = "token",
            rtl_gpus: tuple = ()) -> SystemResult:
    """MoE-Hub. ``order="token"``: the routing kernel sends each row as soon as the token is
    routed (the paper's design). ``order="expert"``: a local layout kernel (no exchange)
    first groups each destination's rows by expert, so experts fill one after another.
    ``rtl_gpus``: destination GPUs whose hub is the Verilog (the others use ``backend``);
    each of them is also run in model mode and the two are compared (``extra['rtl']``)."""
    label = LABELS["hub"] if backend in ("model", "reference") else f"MoE-Hub ({backend} hub)"
    if rtl_gpus:
        label += f", GPU {','.join(map(str, rtl_gpus))} hub in RTL"
    res = SystemResult("hub", label + (", expert-ordered sends" if order == "expert" else ""))
    g, sw, G, h = L.gpu, L.sys.software, L.G, L.hub
    run_backend = BACKENDS[backend]
    rtl_checks = []
    t_gate = _gate(L, res)
    t0 = t_gate
    if order == "expert":
        t0 = t_gate + g.small_kernel_us(L.T * L.E * 4 + L.T * L.k * 8)
        for d in range(G):
            res.add(d, "control", "layout", t_gate, t0)
    arrivals, curves, flows, stalls = hub_schedule(L, t0, order)
    clk = h.hub_clock_GHz * 1000.0
    send_end = np.zeros(G)
    for s in range(G):
        send_end[s] = _send_phase(L, res, s, t0, curves, flows)
    batches_by_gpu, owners, shared_end = [], {}, np.zeros(G)
    hub_stats = {"drops": 0, "packets": 0, "tag_stalls": stalls, "rows": 0,
                 "rows_allocated": 0}
    for d in range(G):
        arr = arrivals[d]
        if d in rtl_gpus:
            from .hub_rtl import compare, run_hub_rtl
            hr = run_hub_rtl(h, arr, tag=f"cosim-gpu{d}")
            cmp = compare(h, arr, BACKENDS["model"](h, arr), hr)
            rtl_checks.append({"gpu": d, "rows": len(arr), "cycles": hr.player.cycles,
                               "sim_s": hr.player.wall_s,
                               "cycles_per_s": hr.player.cycles / max(hr.player.wall_s, 1e-9),
                               **dataclasses.asdict(cmp)})
        else:
            hr = run_backend(h, arr)
        hub_stats["drops"] += hr.drops
        hub_stats["packets"] += hr.packets
        hub_stats["rows"] += len(arr)
        hub_stats["rows_allocated"] += len(hr.alloc)
        # tile items from the hub's allocation and flags
        owners_e = {}
        for (s, tok, slot), (e, r) in hr.alloc.items():
            key = (e, r // L.tile_rows)
            owners_e.setdefault(key, np.zeros(G, dtype=np.int64))[s] += 1
        items = []
        for key, cyc in hr.tile_ready.items():
            e, tile = key
            n = min(L.tile_rows, hr.counts[e] - tile * L.tile_rows)
            ready = cyc / clk + sw.flag_poll_us
            items.append(WorkItem(ready, e, int(n), L.tile_rows, L.model.expert_ffn, key=key))
            owners[(d, key)] = owners_e[key]
            res.markers.append((d, "hub", cyc / clk))
        if len(arr):
            res.add(d, "hub", "hub", float(arr.first_cycle.min()) / clk, hr.done_cycle / clk)
        share_d = (L.sys.sms - g.comp.sms_for("hub")) / L.sys.sms
        se = send_end[d]   # the hub's receive side needs no SMs: only this GPU's sends count
        t_done = hr.done_cycle / clk + sw.flag_poll_us    # counts known: the done word
        batches, _, shared_end[d] = _run_queue(L, res, d, _shared_item(L, t_gate) + items,
                                               max(t_gate, g.launch),
                                               lambda t, se=se, sh=share_d: sh if t < se else 1.0,
                                               {e: t_done for e in range(L.E_local)})
        batches_by_gpu.append(batches)
    recv = _combine_tilewise(L, res, batches_by_gpu, owners)
    res.gpu_end = _reduce(L, res, recv, shared_end)
    res.extra.update(hub_stats)
    if rtl_checks:
        res.extra["rtl"] = rtl_checks
    return res


def run_ideal(L: Layer) -> SystemResult:
    res = SystemResult("ideal", LABELS["ideal"])
    g, G = L.gpu, L.G
    t_gate = _gate(L, res)
    gemm_end, shared_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        items = _shared_item(L, t_gate) + [
            WorkItem(t_gate, e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, gemm_end[d], shared_end[d] = _run_queue(L, res, d, items, t_gate, _full)
    recv = np.zeros(G)
    for o in range(G):
        ds = np.nonzero(L.counts[o])[0]
        recv[o] = gemm_end[ds].max() if len(ds) else t_gate
    res.gpu_end = _reduce(L, res, recv, shared_end, poll=False)
    return res


RUNNERS = {"bulk": run_bulk, "comet": run_comet, "onesided": run_onesided, "hub": run_hub,
           "ideal": run_ideal}


def run_system(name: str, L: Layer, hub_backend: str = "model",
               hub_order: str = "token", rtl_gpus: tuple = ()) -> SystemResult:
    if name == "hub":
        return run_hub(L, hub_backend, hub_order, rtl_gpus)
    return RUNNERS[name](L)
