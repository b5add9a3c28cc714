"""A fused single-kernel MoE layer with per-block readiness counters (DeepGEMM Mega MoE
style): the software analogue closest to the hub's tile flags.

One persistent kernel, launched once after the gate: its communication SMs count the
rows per destination expert, exchange the counts with the peers inside the kernel (a
device-side barrier over the scale-up fabric, no host sync, no extra launches), then put
every row to its resolved address (each destination's rows grouped by expert, a block's
rows sorted by source) and, after each row, increment that block's arrival counter in
the destination (a remote atomic ordered after the data: one more link latency). The
other SMs run an expert block as soon as its counter reaches the expected count (known
from the exchange) and write each finished block's outputs straight to the owners; a
final barrier precedes the owners' weighted reduce. The SM split is fixed for the
kernel's life: the communication SMs never compute.
"""
from __future__ import annotations

import numpy as np

from ..layer import Layer, SystemResult
from . import common as C

PHASES = ["gate", "count exchange", "dispatch", "expert GEMM", "combine", "reduce"]
LABEL = "Fused MoE kernel, per-block counters (Mega MoE)"
KIND = "today"     #: a software baseline of today (see :mod:`moehub.cosim.systems`)


def run(L: Layer) -> SystemResult:
    res = SystemResult("fused", LABEL)
    sw, G = L.sys.software, L.G
    t_gate = C.gate(L, res)
    t_start = t_gate + L.comp.launch_us
    t_count = t_start + L.gpu.copy_us(L.T * L.k * 8)          # rows per destination expert
    t0 = t_count + (sw.device_barrier_us if G > 1 else 0.0)   # in-kernel count exchange
    C.control_traffic(L, "counts", np.full(G, t_count), np.full((G, G), 4.0 * L.E_local))
    for d in range(G):
        res.add(d, "control", "count exchange", t_start, t0)
    _, pos = L.flow_order(L.lexp)
    pkt = min(L.sys.link_max_payload_bytes, L.disp_bytes) + L.sys.link_header_bytes
    sms = L.comp.sms_for("fused")
    first, last, curves, flows = L.dispatch(np.full(G, t0), L.row_wire_sw, pkt, pos,
                                            issue_rate=L.send_rate(sms, L.disp_bytes))
    lat = L.latency_matrix()[L.src, L.dest]
    counter = last + lat                       # the block counter's atomic lands after the row
    ready_row = counter + sw.flag_poll_us
    share = C.reserved_share(L, sms, np.inf)
    batches_by_gpu, owners, shared_end = [], {}, np.zeros(G)
    for d in range(G):
        C.send_phase(L, res, d, t0, curves, flows)
        rows = np.nonzero(L.dest == d)[0]
        rows = rows[np.lexsort((L.slot[rows], L.tok[rows], L.src[rows], L.lexp[rows]))]
        items, own = C.receive_tiles(L, d, ready_row, rows, L.tile_rows, landed_row=last)
        for it in items:
            res.markers.append((d, "hub", it.ready))
        owners.update(own)
        complete = {e: t0 for e in range(L.E_local)}         # counts known from the exchange
        batches, _, shared_end[d] = C.run_queue(L, res, d, C.shared_item(L, t_gate) + items,
                                                t_start, share, complete)
        batches_by_gpu.append(batches)
    recv = C.combine_tilewise(L, res, batches_by_gpu, owners)
    barrier = sw.device_barrier_us if G > 1 else 0.0
    res.gpu_end = C.reduce(L, res, recv + barrier, shared_end)
    return res
