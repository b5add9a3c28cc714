"""DeepEP normal mode (high-throughput kernels), as Megatron-Core's flex dispatcher uses it.

gate -> layout kernel (per-rank / per-expert counts, which ranks need each token) ->
notify (counts written into the peers over NVLink/RDMA plus a barrier; the CPU waits for
the received count to size its receive tensor: a host sync) -> dispatch kernel: each
token crosses NVLink once per destination GPU (per-rank deduplication); across nodes
one RDMA copy per destination node goes to the GPU with the source's local rank, which
forwards it over NVLink to the GPUs of its node that need it. The kernel's send rate is
bounded by the SMs it holds -> the receiver permutes the received rows (grouped by
source) into per-expert layout -> grouped GEMM (contiguous) -> unpermute + local reduce
(one row per token and GPU) -> combine kernel, the mirror of the dispatch (NVLink to the
forwarder, one RDMA copy per node) -> reduce at the owner.
"""
from __future__ import annotations

import numpy as np

from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from . import common as C

PHASES = ["gate", "layout", "notify", "host sync", "dispatch", "permute", "expert GEMM",
          "unpermute", "combine", "reduce"]
LABEL = "DeepEP normal mode (dedup per GPU/node)"
KIND = "today"     #: a software baseline of today (see :mod:`moehub.cosim.systems`)


def _routes(L: Layer, rows_gpu: np.ndarray, rows_node: np.ndarray, fwd: np.ndarray):
    """Bytes per (s, d) pair on the first hop (direct NVLink inside a node, RDMA to the
    same-local-rank GPU of a remote node) and on the forwarding hop (r -> d)."""
    G, gpn = L.G, L.sys.gpus_per_node
    first = np.zeros((G, G))
    for s in range(G):
        for d in range(G):
            if not L.inter_node(s, d):
                first[s, d] = rows_gpu[s, d]
        for n in range(rows_node.shape[1]):
            if n != s // gpn and rows_node[s, n]:
                first[s, n * gpn + s % gpn] += rows_node[s, n]
    return first, fwd.astype(float)


def transfer(L: Layer, t0: np.ndarray, first: np.ndarray, second: np.ndarray, row_wire: float,
             phase: str, feeds):
    """DeepEP's two-hop transfer (:func:`.common.two_hop`): rows issued at the rate of
    the kernel's SMs, each flow bounded by the calibrated put efficiency."""
    return C.two_hop(L, t0, first, second, row_wire, phase, feeds,
                     L.send_rate(L.comp.sms_for("deepep"), row_wire), L.put_cap(row_wire))


def receive_compute(L: Layer, res: SystemResult, recv, rows_in, t_gate: float, sms) -> tuple:
    """Each GPU once its rows have landed (``recv``; ``rows_in`` deduplicated rows): permute
    them into expert-major rows, the grouped GEMM beside the shared expert on the SMs the
    communication kernel leaves (``sms``), unpermute; (GEMM end, shared expert's end,
    unpermute end) per GPU. Shared by the systems with DeepEP's receive side."""
    g, G = L.gpu, L.G
    gemm_end, shared_end, unperm_end = np.zeros(G), np.zeros(G), np.zeros(G)
    for d in range(G):
        expanded = int(L.expert_rows[d].sum())
        t_perm = recv[d] + g.launch + g.copy_us((rows_in[d] * L.disp_bytes + expanded * L.row_bytes))
        res.add(d, "control", "permute", recv[d], t_perm)
        items = C.shared_item(L, t_gate) + [
            WorkItem(t_perm + g.launch, e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e,
                     landed=recv[d], known=t_perm)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, gemm_end[d], shared_end[d] = C.run_queue(
            L, res, d, items, t_gate, C.reserved_share(L, sms, recv[d]))
        unperm_end[d] = gemm_end[d] + g.launch + g.copy_us(
            (expanded + rows_in[d]) * L.row_bytes)
        res.add(d, "control", "unpermute", gemm_end[d], unperm_end[d])
        res.combine_log.append((d, "all", unperm_end[d] + g.launch, gemm_end[d]))
    return gemm_end, shared_end, unperm_end


def run(L: Layer) -> SystemResult:
    res = SystemResult("deepep", LABEL)
    g, comp, G, T = L.gpu, L.comp, L.G, L.T
    t_gate = C.gate(L, res)
    t_layout = t_gate + g.small_kernel_us(T * L.E * 4 + T * G)
    t_notify = t_layout + comp.launch_us + C.count_exchange_us(L)
    C.control_traffic(L, "counts", np.full(G, t_layout), np.full((G, G), 4.0 * (L.E + G)))
    t_sync = t_notify + comp.host_sync_us
    t0 = t_sync + comp.launch_us
    for d in range(G):
        res.add(d, "control", "layout", t_gate, t_layout)
        res.add(d, "control", "notify", t_layout, t_notify)
        res.add(d, "control", "host sync", t_notify, t_sync)
    first, fwd = _routes(L, L.gpu_rows, L.node_rows, L.fwd_rows)
    curves, flows, recv = transfer(L, np.full(G, t0), first, fwd, L.row_wire_sw, "dispatch",
                                   L.inter_node)
    for s in range(G):
        C.send_phase(L, res, s, t0, curves, flows, counts=first + fwd)
    rows_in = (first + fwd).sum(axis=0)          # deduplicated rows landing on each GPU
    gemm_end, shared_end, unperm_end = receive_compute(L, res, recv, rows_in, t_gate,
                                                       comp.sms_for("deepep"))
    # combine: the mirror image (forwarders gather and reduce, then one RDMA copy per node)
    c_first, c_fwd = combine_routes(L, first, fwd)
    tc = unperm_end + comp.launch_us
    curves, flows, crecv = transfer(L, tc, c_first, c_fwd, L.comb_wire_sw, "combine",
                                    lambda s, r: not L.inter_node(s, r))
    for d in range(G):
        C.send_phase(L, res, d, tc[d], curves, flows, name="combine", counts=c_first + c_fwd,
                     track="combine")
    res.gpu_end = C.reduce(L, res, crecv, shared_end)
    res.extra["rows_sent"] = int(first.sum() + fwd.sum())
    return res


def combine_routes(L: Layer, first: np.ndarray, fwd: np.ndarray):
    """Combine hops, the dispatch reversed: inside a node each GPU sends its reduced rows
    straight to the owner, or to the owner's local-rank relay in its own node (the
    forwarding hop reversed); each relay sends one RDMA copy per token to the owner."""
    G = L.G
    inter = np.array([[L.inter_node(s, d) for d in range(G)] for s in range(G)])
    c_first = np.where(inter, 0.0, first.T) + fwd.T
    c_second = np.where(inter, first.T, 0.0)
    return c_first, c_second
