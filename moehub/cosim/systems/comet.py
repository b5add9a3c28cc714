"""Fine-grained overlap with a precomputed layout (Comet style).

gate -> layout -> count exchange -> scatter-index kernel -> one fused kernel in which
communication SMs send rows to resolved addresses (per destination, sorted by local
expert) while the other SMs run each GEMM tile as soon as all its rows (sorted by source
rank) have landed; tile outputs go back to the owners as tiles finish -> reduce at the
owner. The communication SMs are lost to compute while this GPU's rows are still
leaving or landing.
"""
from __future__ import annotations

import numpy as np

from ..layer import Layer, SystemResult
from . import common as C

PHASES = ["gate", "layout", "count exchange", "scatter index", "dispatch", "expert GEMM",
          "combine", "reduce"]
LABEL = "Fine-grained overlap, precomputed layout (Comet)"
KIND = "today"     #: a software baseline of today (see :mod:`moehub.cosim.systems`)


def run(L: Layer) -> SystemResult:
    res = SystemResult("comet", LABEL)
    g, sw, G, T, k = L.gpu, L.sys.software, L.G, L.T, L.k
    t_gate = C.gate(L, res)
    t_layout = t_gate + g.small_kernel_us(T * L.E * 4 + T * k * 8)
    t_cx = t_layout + C.count_exchange_us(L)
    C.control_traffic(L, "counts", np.full(G, t_layout), np.full((G, G), 4.0 * L.E))
    t_idx = t_cx + g.small_kernel_us(T * k * 8 * 2)
    t0 = t_idx + L.comp.launch_us
    for d in range(G):
        res.add(d, "control", "layout", t_gate, t_layout)
        res.add(d, "control", "count exchange", t_layout, t_cx)
        res.add(d, "control", "scatter index", t_cx, t_idx)
    _, pos = L.flow_order(L.lexp)       # a source sends each destination's rows by expert
    pkt = min(L.sys.link_max_payload_bytes, L.disp_bytes) + L.sys.link_header_bytes
    sms = L.comp.sms_for("comet")
    first, last, curves, flows = L.dispatch(np.full(G, t0), L.row_wire_sw, pkt, pos,
                                            issue_rate=L.send_rate(sms, L.disp_bytes))
    ready_row = last + sw.flag_poll_us
    batches_by_gpu, owners, shared_end = [], {}, np.zeros(G)
    for d in range(G):
        busy = max(C.send_phase(L, res, d, t0, curves, flows), C.recv_end(L, d, curves, flows, t0))
        rows = np.nonzero(L.dest == d)[0]
        rows = rows[np.lexsort((L.slot[rows], L.tok[rows], L.src[rows], L.lexp[rows]))]
        items, own = C.receive_tiles(L, d, ready_row, rows, L.tile_rows, landed_row=last)
        owners.update(own)
        for it in items:
            res.markers.append((d, "hub", it.ready))
        batches, _, shared_end[d] = C.run_queue(
            L, res, d, C.shared_item(L, t_gate) + items, t_gate, C.reserved_share(L, sms, busy))
        batches_by_gpu.append(batches)
    recv = C.combine_tilewise(L, res, batches_by_gpu, owners)
    res.gpu_end = C.reduce(L, res, recv, shared_end)
    return res
