"""DeepEP low-latency mode (one-sided puts into worst-case buffers).

gate -> dispatch kernel: every (token, expert) row is put straight into the destination's
receive buffer ``[local expert][source][max tokens]`` (slot from a local atomic; no
count exchange, no deduplication) -> after a fence each source writes a per-expert count
flag -> the receiver waits for every source's flags and packs the rows per expert (the
dispatch kernel's receive half; each call also pays a fixed cost beyond its launch,
``ll_call_*_us``: the 1-token time of a published low-latency kernel) -> masked grouped GEMM -> combine kernel puts each
output back to its owner's ``[token][slot]`` buffer -> flags -> weighted reduce.
The receive buffers are sized for the worst case (every source sends every token to
every local expert); their size is reported in ``extra['recv_buffer_bytes']``.
"""
from __future__ import annotations

import numpy as np

from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from . import common as C

PHASES = ["gate", "dispatch", "notify", "recv pack", "expert GEMM", "combine", "combine wait",
          "reduce"]
LABEL = "DeepEP low-latency (one-sided puts, worst-case buffers)"


def call_us(L: Layer) -> float:
    """Fixed cost of one low-latency call beyond its launch (count signals to every peer's
    experts, their polling, the kernel's own setup): the 1-token time of a published
    low-latency kernel; across nodes when any peer is remote."""
    sw = L.sys.software
    return sw.ll_call_inter_us if L.nodes > 1 else sw.ll_call_intra_us


def run(L: Layer) -> SystemResult:
    res = SystemResult("deepep_ll", LABEL)
    g, sw, G = L.gpu, L.sys.software, L.G
    t_gate = C.gate(L, res)
    t0 = t_gate + L.comp.launch_us
    _, pos = L.flow_order()
    pkt = min(L.sys.link_max_payload_bytes, L.disp_bytes) + L.sys.link_header_bytes
    # the send half of the kernel runs on every SM, then returns (hook mode)
    first, last, curves, flows = L.dispatch(np.full(G, t0), L.row_wire_sw, pkt, pos,
                                            flow_cap=L.put_cap(L.disp_bytes),
                                            issue_rate=L.send_rate(L.sys.sms, L.disp_bytes))
    sms = L.comp.sms_for("deepep_ll")
    flag_t = np.zeros((G, G))
    for s in range(G):
        C.send_phase(L, res, s, t0, curves, flows)
        for d in range(G):
            # fence: wait for the puts' acknowledgements, then write the count flags
            lat = L.latency(s, d)
            flag_t[s, d] = (curves[flows[s][d]].end + 2 * lat) if L.counts[s, d] else t0 + lat
    C.control_traffic(L, "flags", np.full(G, t0), np.full((G, G), 4.0 * L.E_local))
    shared_end, gemm_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        for s in range(G):
            res.markers.append((d, "hub", flag_t[s, d]))
        t_flags = flag_t[:, d].max() + sw.flag_poll_us + call_us(L)
        data_end = C.recv_end(L, d, curves, flows, t0)
        res.add(d, "hub", "notify", min(data_end, t_flags), t_flags)
        t_pack = t_flags + g.copy_us(2.0 * L.counts[:, d].sum() * L.disp_bytes)
        res.add(d, "control", "recv pack", t_flags, t_pack)
        items = C.shared_item(L, t_gate) + [
            WorkItem(t_pack + L.comp.launch_us, e, int(r), g.padded(int(r)), L.model.expert_ffn,
                     key=e, landed=data_end, known=t_flags)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, gemm_end[d], shared_end[d] = C.run_queue(L, res, d, items, t_gate,
                                                    C.reserved_share(L, sms, t_pack))
        res.combine_log.append((d, "all", gemm_end[d] + L.comp.launch_us, gemm_end[d]))
    # combine kernel: puts back to the owners' [token][slot] buffers
    net, cflows = L.network("combine", flow_cap=L.put_cap(L.comb_bytes))
    tc = gemm_end + L.comp.launch_us
    for d in range(G):
        total = L.counts[:, d].sum() * L.comb_wire_sw
        for o in range(G):
            net.inject_rate(cflows[d][o], tc[d], tc[d] + total / L.send_rate(L.sys.sms, L.comb_bytes),
                            L.counts[o, d] * L.comb_wire_sw)
    ccurves = L.run_net(net)
    recv = C.combine_done(L, res, ccurves, cflows, tc,
                          flag_extra=lambda d, o: 2 * L.latency(d, o) + call_us(L))
    for o in range(G):
        last = max([ccurves[cflows[d][o]].end for d in range(G) if L.counts[o, d]] or [recv[o]])
        res.add(o, "combine", "combine wait", last, recv[o])
    res.gpu_end = C.reduce(L, res, recv, shared_end)
    res.extra["recv_buffer_bytes"] = int(L.E_local * G * L.T * L.disp_bytes)
    return res
