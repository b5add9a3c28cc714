"""HybridEP (NVIDIA's Hybrid-EP, DeepEP's hybrid-ep branch), as Megatron-Core's flex
dispatcher runs it (``moe_flex_dispatcher_backend="hybridep"``, forward, blocking mode).

gate -> multihot: the top-k indices and probs become a dense ``[tokens, experts]`` routing
map (bool) and probs (fp32) -> count exchange: an NCCL all-gather of every GPU's routing
map, so that each GPU holds the global map -> scatter index: the metadata preprocessing
kernel computes from it each token's slot in each destination GPU (``sparse_to_dense_map``),
which nodes need it (``rdma_to_attn_map``) and the received count -> host sync: Megatron
gives no bound on the permuted size, so the count is copied to the host to size the output
(the opt-in non-blocking mode sizes it in advance and has none) -> dispatch kernel (TMA
copies, ``comm_sms_hybridep`` SMs): across nodes one RDMA write per (token, node) into the
RDMA buffer of the GPU with the source's local rank; every GPU then copies its own tokens,
and those its RDMA buffer received, into the GPUs of its node that need them (a TMA load to
shared memory, one TMA store per destination GPU): one copy per (token, destination GPU)
over NVLink and one per (token, remote node) over the NIC, DeepEP normal mode's routes.
Each row carries the token (FP8: its 1x128 scales) and the fp32 probs of the node's
experts -> permute (expert-major layout) -> grouped GEMM -> unpermute (one row per token
and GPU) -> combine kernel, the mirror: the GPU with the owner's local rank in each node
pulls the node's rows of a token over NVLink, sums them (intra-node reduction) and writes
one RDMA row per (token, node) to the owner, which sums the nodes' partial sums with its
own node's rows (inter-node reduction) -> reduce.

The bytes on the links are DeepEP normal mode's (:func:`.deepep._routes`,
:func:`.deepep.combine_routes`, :func:`.common.two_hop`) plus the probs; what differs:

* control: multihot + routing-map all-gather + preprocessing instead of DeepEP's layout +
  notify (both then pay one host sync);
* SMs: the kernels hold ``comm_sms_hybridep`` SMs (Megatron-Core's default 16; DeepEP V1's
  normal kernels 24), so a GEMM that overlaps the dispatch (the shared expert) gets more;
* the rate those SMs reach: HybridEP's own SM curve (``Components.comm_GBps(...,
  "hybridep")``: TMA copies, fit on its kernel-only tables), about twice DeepEP V1's per
  SM on B200 at 16 SMs (735 vs 348 GB/s BF16 dispatch).

Sources: DeepEP hybrid-ep branch -- docs/README_Hybrid-EP.md (hierarchical RDMA + NVLink
TMA design, the B200 / GB200 / H100 tables), docs/Hybrid-EP_Implementation.md (handle,
non-blocking mode), deep_ep/hybrid_ep_buffer.py (routing-map all_gather_into_tensor,
metadata_preprocessing, the count read with ``.item()`` / ``.cpu()``),
csrc/hybrid_ep/backend/hybrid_ep_backend.cuh (RDMA inter-node group buffers of the same
local rank, the prob vector of ``experts per rank x ranks per node`` floats per row,
intra-node G2S/S2G warps, intra- and inter-node reduction warp groups); Megatron-LM
megatron/core/transformer/moe/fused_a2a.py and token_dispatcher.py (``_HybridEPManager``:
``num_permuted_tokens=None`` "will cause a CPU sync"; TransformerConfig
``moe_hybridep_num_sms`` = 16).
"""
from __future__ import annotations

import numpy as np

from ..layer import Layer, SystemResult
from ..network import GBps, flow_wire_bytes
from . import common as C
from . import deepep as D

PHASES = ["gate", "layout", "count exchange", "scatter index", "host sync", "dispatch",
          "permute", "expert GEMM", "unpermute", "combine", "reduce"]
LABEL = "HybridEP (TMA kernels, dedup per GPU/node)"
KIND = "today"     #: a software baseline of today (see :mod:`moehub.cosim.systems`)


def ranks_per_node(L: Layer) -> int:
    """HybridEP's ``num_of_ranks_per_node``: the GPUs of one NVLink domain in the group."""
    return min(L.sys.gpus_per_node, L.G)


def prob_bytes(L: Layer) -> float:
    """The fp32 probs a forward dispatch row carries: one per expert of the destination
    node (``NUM_OF_EXPERTS_PER_RANK x NUM_OF_RANKS_PER_NODE``, the kernel's per-row prob
    vector, copied by its own TMA op on both hops)."""
    return 4.0 * L.E_local * ranks_per_node(L)


def dispatch_wire(L: Layer) -> float:
    """Wire bytes of one dispatch row: the token (with its scales, as DeepEP's row) and
    the probs, each its own copy of link packets."""
    mp, hd = L.sys.link_max_payload_bytes, L.sys.link_header_bytes
    return L.row_wire_sw + float(flow_wire_bytes(prob_bytes(L), mp, hd))


def send_rate(L: Layer, row_wire: float) -> float:
    """Bytes/us the kernel's SMs issue: HybridEP's calibrated SM curve, never above the
    SMs' store issue rate (as :meth:`Layer.send_rate` for the load/store kernels)."""
    sms = L.comp.sms_for("hybridep")
    return min(L.issue_rate, L.comp.comm_GBps(sms, row_wire, False, "hybridep") * GBps)


def ring_allgather(L: Layer, bytes_per_rank: float) -> tuple:
    """An NCCL ring all-gather of ``bytes_per_rank`` from every GPU: (time in us, bytes
    [s, d] each GPU sends its ring successors). ASSUMPTION: NCCL's ring with one channel
    per NIC (rail): channel c enters every node at local rank c and leaves it from local
    rank c - 1, so each GPU sends ``(G - 1) x bytes / ranks per node`` on each of its
    channels -- one channel over its NIC when the layer spans nodes, the rest over NVLink
    to its local successor. Time: the all-gather's latency (a ring: one hop per rank,
    :meth:`~..components.Components.collective_latency_us`) plus the busiest port's bytes
    at the collective's rate for that size (the channels of one port share its pipeline
    steps, as :meth:`~..components.Components.alltoall_us` reads the curve)."""
    G = L.G
    out = np.zeros((G, G))
    if G <= 1 or bytes_per_rank <= 0:
        return 0.0, out
    gpn = ranks_per_node(L)
    nodes = -(-G // gpn)
    chunk = (G - 1) * bytes_per_rank / gpn
    for c in range(gpn):
        ring = [n * gpn + (c + i) % gpn for n in range(nodes) for i in range(gpn)]
        for a, b in zip(ring, ring[1:] + ring[:1]):
            out[a, b] += chunk
    comp = L.comp
    node = np.arange(G) // gpn
    inter = node[:, None] != node[None, :]
    t = 0.0
    for mask, remote in ((~inter, False), (inter, True)):
        sent = np.where(mask, out, 0.0).sum(axis=1).max()
        if sent > 0:
            bw = comp.port_GBps(remote) * GBps * comp.collective_efficiency(sent, remote)
            t = max(t, sent / bw)
    return comp.collective_latency_us("allgather", G, L.nodes) + t, out


def run(L: Layer) -> SystemResult:
    res = SystemResult("hybridep", LABEL)
    g, comp, G, T, E = L.gpu, L.comp, L.G, L.T, L.E
    gpn = ranks_per_node(L)
    t_gate = C.gate(L, res)
    # multihot (Megatron's fused_indices_to_multihot): top-k ids (int64) and probs (fp32)
    # in, a bool map and fp32 probs over every expert out
    t_map = t_gate + g.small_kernel_us(T * L.k * 12.0 + T * E * 5.0)
    t_ag, ag_bytes = ring_allgather(L, T * E * 1.0)            # the bool map of every GPU
    t_gathered = t_map + t_ag
    C.control_traffic(L, "counts", np.full(G, t_map), ag_bytes)
    first, fwd = D._routes(L, L.gpu_rows, L.node_rows, L.fwd_rows)
    rows_in = (first + fwd).sum(axis=0)          # deduplicated rows landing on each GPU
    # metadata preprocessing (ASSUMPTION: one memory-bound pass, as DeepEP's layout kernel):
    # reads the global map, writes sparse_to_dense_map (an int32 slot per (token of a
    # same-local-rank GPU, GPU of the node)), rdma_to_attn / attn_to_rdma (a bool per (token,
    # node)) and the local experts' map of the received rows
    meta = G * T * E + L.nodes * T * gpn * 4.0 + 2.0 * L.nodes * T
    t_pre = t_gathered + np.array([g.small_kernel_us(meta + rows_in[d] * L.E_local)
                                   for d in range(G)])
    t_sync = t_pre + comp.host_sync_us           # the received count, read on the host
    t0 = t_sync + comp.launch_us
    for d in range(G):
        res.add(d, "control", "layout", t_gate, t_map)
        res.add(d, "control", "count exchange", t_map, t_gathered)
        res.add(d, "control", "scatter index", t_gathered, t_pre[d])
        res.add(d, "control", "host sync", t_pre[d], t_sync[d])
    wire = dispatch_wire(L)
    curves, flows, recv = C.two_hop(L, t0, first, fwd, wire, "dispatch", L.inter_node,
                                    send_rate(L, wire), L.put_cap(wire))
    for s in range(G):
        C.send_phase(L, res, s, t0[s], curves, flows, counts=first + fwd)
    # the permute extension: received rows (token + probs) to expert-major rows
    gemm_end, shared_end, unperm_end = D.receive_compute(L, res, recv, rows_in, t_gate,
                                                         comp.sms_for("hybridep"))
    # combine: the relays pull and sum their node's rows, one RDMA row per (token, node)
    c_first, c_fwd = D.combine_routes(L, first, fwd)
    tc = unperm_end + comp.launch_us
    wire_c = L.comb_wire_sw
    curves, flows, crecv = C.two_hop(L, tc, c_first, c_fwd, wire_c, "combine",
                                     lambda s, r: not L.inter_node(s, r),
                                     send_rate(L, wire_c), L.put_cap(wire_c))
    for d in range(G):
        C.send_phase(L, res, d, tc[d], curves, flows, name="combine", counts=c_first + c_fwd,
                     track="combine")
    # the owner's sum over nodes is the combine kernel's last step; the model charges it as
    # DeepEP normal mode's model does (the owner's reduce of its tokens' outputs)
    res.gpu_end = C.reduce(L, res, crecv, shared_end)
    inter = np.array([[L.inter_node(s, d) for d in range(G)] for s in range(G)])
    res.extra["rows_sent"] = int(first.sum() + fwd.sum())
    res.extra["rdma_rows"] = int(first[inter].sum())
    res.extra["dispatch_row_wire"] = wire
    return res


def receive_memory(L: Layer) -> dict:
    """Receive buffers per GPU: the intra-node buffer, shared by dispatch and combine and
    sized for the worst case ("all tokens are routed to the same expert": tokens per rank x
    ranks per node x nodes rows, HybridEPBuffer.allocate_buffer); the RDMA buffer (a tile of
    ``tokens`` rows per remote node); the gathered routing map; the permuted copy."""
    from .eager import worst_memory
    row = max(L.disp_bytes + prob_bytes(L), L.comb_bytes)
    remote = (L.nodes - 1) * L.T * row
    return worst_memory([{"intra-node buffer": L.G * L.T * row, "rdma buffer": remote,
                          "routing map": L.G * L.T * L.E,
                          "permuted copy": int(L.expert_rows[d].sum()) * L.model.row_bytes}
                         for d in range(L.G)])
