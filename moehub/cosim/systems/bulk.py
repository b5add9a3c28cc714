"""Bulk-synchronous all-to-all (Megatron-Core all-to-all dispatcher / DeepSpeed / Tutel).

gate -> layout (one-hot counts) -> count exchange (a small collective) -> host sync (D2H
of the splits, the CPU sizes the receive buffer) -> permute (rows grouped by
destination) -> NCCL all-to-all-v (its latency, then the bytes at the collective's
efficiency for the message size; every GPU joins at the same time) -> sort rows by local
expert -> grouped GEMM (contiguous layout) -> unsort -> all-to-all-v back -> unpermute +
weighted reduce. Rows are sent once per (token, expert): no deduplication.
"""
from __future__ import annotations

import numpy as np

from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from ..network import flow_wire_bytes
from . import common as C

PHASES = ["gate", "layout", "count exchange", "host sync", "permute", "all-to-all dispatch",
          "sort by expert", "expert GEMM", "unsort", "all-to-all combine", "unpermute+reduce"]
LABEL = "Bulk all-to-all (Megatron-Core dispatcher)"
KIND = "today"     #: a software baseline of today (see :mod:`moehub.cosim.systems`)


def collective_cap(L: Layer, nbytes: np.ndarray) -> np.ndarray:
    """Per-flow rate of an NCCL all-to-all (G x G): the port bandwidth times the
    collective's efficiency at this flow's message size (protocol and chunking
    overheads); a GPU's own rows unbounded."""
    bw, inter = L.pair_links()
    cap = bw * L.comp.collective_efficiency(np.asarray(nbytes, dtype=float), inter)
    np.fill_diagonal(cap, np.inf)
    return cap


def alltoall(L: Layer, res: SystemResult, t, nbytes: np.ndarray, phase: str, track: str,
             name: str, peers: int | None = None, nodes: int | None = None,
             kind: str = "alltoall"):
    """An all-to-all-v started by every GPU at ``t`` (one time, or one per GPU when the
    collectives of sub-groups start apart); ``peers`` / ``nodes``: the group whose
    latency it pays (default every GPU of the layer). ``kind="allgather"``: an all-gather
    or reduce-scatter (``nbytes[s, d]`` what s's chunk puts on the s -> d path; a ring's
    latency). Returns (curves, flows)."""
    t = np.broadcast_to(np.asarray(t, dtype=float), (L.G,))
    t1 = t + L.comp.collective_latency_us(kind, peers or L.G, nodes or L.nodes)
    curves, flows = L.bulk_flows(t1, nbytes, phase, collective_cap(L, nbytes))
    ends = C.pair_curves(curves, flows)[0]
    sent = np.asarray(nbytes) != 0
    for s in range(L.G):
        end = float(ends[s, sent[s]].max()) if sent[s].any() else t1[s]
        res.add(s, track, name, t[s], end)
    return curves, flows


def combine_alltoall(L: Layer, res: SystemResult, t, cbytes: np.ndarray,
                     outputs_at: np.ndarray) -> np.ndarray:
    """The all-to-all that returns expert outputs (all sendable at ``t``; GPU d's were
    ready at ``outputs_at[d]``): the time each token owner has received its last row."""
    G = L.G
    curves, flows = alltoall(L, res, t, cbytes, "combine", "combine", "all-to-all combine")
    for d in range(G):
        res.combine_log.append((d, "all", t, outputs_at[d]))
    ends = C.pair_curves(curves, flows)[0]               # [d, o]: GPU d's outputs to owner o
    return np.where(L.counts.T != 0, ends, 0.0).max(axis=0) if G else np.zeros(0)


def run(L: Layer) -> SystemResult:
    res = SystemResult("bulk", LABEL)
    g, comp, G, T, k = L.gpu, L.comp, L.G, L.T, L.k
    t_gate = C.gate(L, res)
    t_layout = t_gate + g.small_kernel_us(T * L.E * 4 + T * k * 8)
    t_cx = t_layout + C.count_exchange_us(L)
    C.control_traffic(L, "counts", np.full(G, t_layout), np.full((G, G), 4.0 * L.E))
    t_sync = t_cx + comp.host_sync_us
    t_perm = t_sync + g.permute_us(T * k)
    a2a = t_perm + comp.launch_us
    for d in range(G):
        res.add(d, "control", "layout", t_gate, t_layout)
        res.add(d, "control", "count exchange", t_layout, t_cx)
        res.add(d, "control", "host sync", t_cx, t_sync)
        res.add(d, "control", "permute", t_sync, t_perm)
    mp, hd = L.sys.link_max_payload_bytes, L.sys.link_header_bytes
    nbytes = flow_wire_bytes(L.counts * L.disp_bytes, mp, hd)
    curves, flows = alltoall(L, res, a2a, nbytes, "dispatch", "send", "all-to-all dispatch")
    recv = np.array([C.recv_end(L, d, curves, flows, a2a) for d in range(G)])
    rows_d = L.counts.sum(axis=0)
    sort_end = recv + (np.array([g.permute_us(r) for r in rows_d]) if L.E_local > 1 else 0.0)
    gemm_ready = sort_end + comp.launch_us
    unsort_end, shared_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        if L.E_local > 1:
            res.add(d, "control", "sort by expert", recv[d], sort_end[d])
        items = C.shared_item(L, t_gate) + [
            WorkItem(gemm_ready[d], e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e,
                     landed=recv[d], known=recv[d])
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, routed_end, shared_end[d] = C.run_queue(L, res, d, items, t_gate, C.full_share)
        unsort_end[d] = routed_end + (g.permute_us(rows_d[d]) if L.E_local > 1 else 0.0)
        if L.E_local > 1:
            res.add(d, "control", "unsort", routed_end, unsort_end[d])
    a2a2 = unsort_end.max() + comp.launch_us
    cbytes = flow_wire_bytes(L.counts.T * L.comb_bytes, mp, hd)
    recv2 = combine_alltoall(L, res, a2a2, cbytes, unsort_end)
    res.gpu_end = C.reduce(L, res, recv2, shared_end, poll=False, name="unpermute+reduce")
    return res
