"""X-MoE's Redundancy-Bypassing Dispatch (RBD) as its code runs it: eager PyTorch over
NCCL/RCCL all-to-all-v collectives, on the layer's GPUs.

The mechanism (X-MoE, arXiv 2508.13337, Fig. 7 and its RBD section; the X-MoE repository,
``deepspeed/moe/moe_rbd.py``, ``deepspeed/moe/v2opt/metadata.py``, ``v2opt/rbd.py``,
``v2opt/rbd_gating.py``, ``v2opt/a2a_single.py``, ``deepspeed/moe/layer.py``): of each
(token, destination node) group of a token's experts one row, the *pilot*, crosses the
network to the GPU of one of those experts (every node, the source's own too); that GPU
makes a *replica* for each other expert of the token in its node and sends it over the
node's links. The pilot is the group's first row under a random permutation
(``torch.randperm`` in ``TopKGateRBD.forward``, ``map_dup_tokens``): the GPU of a random
one of the token's experts there (:func:`..dedup.pilots`, drawn from the workload's
seed). The node is X-MoE's ``mesh``: ``min(EP size, rbd_mesh_size = 8)`` consecutive
ranks, here the system's GPUs per node. One node is one mesh: X-MoE runs RBD there too
(the global and the node all-to-all span the same GPUs; nothing is saved, a second
all-to-all is paid), so this system does the same.

gate -> layout (``indices_and_bins``, ``randperm``, ``map_dup_tokens``, ``get_bins``) ->
count exchange (pilots' per-expert counts, an all-to-all over every GPU; ``.tolist()``
of the in and out splits) -> layout (``map_s1_to_s2_indices_to_relative``) -> count
exchange (the replicas' counts per pilot GPU, the "virtual dispatch") -> index exchange
(two all-to-all-v of every replica's pilot-row index, int64, and expert id, int32, from
its source to its pilot's GPU) -> layout (``..._relative_to_abs``, sort, ``histc``) ->
count exchange (the node's replica counts, an all-to-all inside the node) -> gather
pilots (Triton gather) -> all-to-all global (the pilots) -> gather replicas
(``s1_to_s2_gather``) -> all-to-all node (the replicas) -> local order (``torch.cat``)
-> host sync (the experts' splits, ``.tolist()``) -> sort by expert -> expert GEMM
(X-MoE's grouped GEMM) -> unsort -> weights exchange (two all-to-all-v of the combine
weights, one per pilot and per replica, to the pilot's GPU) -> all-to-all node back (the
replicas' outputs to the pilot's GPU) -> scale+sum at pilot (two multiplies, then
``scatter_add_`` of the replicas' weighted outputs into the pilot's: one row per (token,
node)) -> all-to-all global back -> unpermute+reduce (``scatter_with_token_drop`` sums a
token's rows, one per node, at its owner).

So X-MoE's combine is the dispatch reversed with the reduction at the pilot: the NIC
carries one combine row per (token, node), as DeepEP's and HybridEP's combines, but the
sum is done by a separate eager kernel after a node all-to-all, not by the relay as rows
arrive, and the combine weights travel in their own all-to-alls.

Costs, each a count read from the code times a calibrated component (:mod:`.eager`):
every eager op is a kernel launch plus its bytes at the copy rate; every ``.tolist()``,
``torch.unique``, boolean-mask index and ``repeat_interleave`` without an output size
makes the host wait (``d2h_sync_us``: 14 in one forward, :data:`SYNCS`); every
collective is an NCCL all-to-all-v (:func:`.bulk.alltoall`: the calibrated latency for
its peers and nodes, then its bytes on the layer's network at the collective's
efficiency for the message size; it starts when its last GPU is ready, a global one
when every GPU is); the small count, index and weight exchanges take the calibrated
small-collective / all-to-all time (:meth:`~..components.Components.alltoall_us`) and
put their bytes on the layer's network (phase ``counts``).

ASSUMPTIONs:

* The kernel counts of the metadata steps (:data:`KERNELS`) are counted by hand from the
  code (a ``torch.unique`` as 4 kernels, a boolean index as 2); each moves ``T x k``
  int32/int64 indices.
* X-MoE measured on AMD MI250X (ROCm, RCCL, Slingshot); here the same code runs on the
  layer's GPUs with their calibrated launches, syncs, copies and NCCL collectives.
* Rows travel in the layer's dispatch/combine datatypes (FP8 with its 1x128 scales where
  the model uses it) as for every system here; X-MoE trains in BF16.
* No token is dropped (X-MoE drops at capacity factor 1.25; none of the systems compared
  drops).
* With several experts per GPU the received rows are regrouped by expert before the
  grouped GEMM and back after it (one copy each, as the bulk system's sort and unsort):
  X-MoE's RBD layer prints "uneven all-to-all for num_local_experts > 1 is not
  implemented", and its experts' ``split`` + ``cat`` is that regrouping.
* A layer with fewer experts than GPUs runs the mechanism on its replica placement
  (X-MoE asserts experts % EP size == 0).
"""
from __future__ import annotations

import numpy as np

from .. import dedup
from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from ..network import flow_wire_bytes
from . import bulk
from . import common as C
from . import eager as X

PHASES = ["gate", "layout", "count exchange", "host sync", "index exchange", "gather pilots",
          "all-to-all global", "gather replicas", "all-to-all node", "local order",
          "sort by expert", "expert GEMM", "unsort", "weights exchange",
          "all-to-all node back", "scale+sum at pilot", "all-to-all global back",
          "unpermute+reduce"]
LABEL = "X-MoE RBD (pilots over the NIC, replicas in the node, eager all-to-alls)"
KIND = "today"     #: a software baseline of today (see :mod:`moehub.cosim.systems`)

#: eager kernels of each metadata step (ASSUMPTION: counted from the code, see the
#: module docstring): ``indices_and_bins`` + ``randperm`` + ``map_dup_tokens`` +
#: ``get_bins``; one count exchange's split sums; ``map_s1_to_s2_indices_to_relative``;
#: ``..._relative_to_abs`` + the sort of the replicas' expert ids + ``histc`` + ``cumsum``
#: + the shift; the experts' splits; the combine weights' cast and two gathers
KERNELS = {"layout": 4 + 1 + 44 + 3, "splits": 2, "relative": 11, "absolute": 8 + 2 + 3 + 1,
           "expert splits": 3, "weights": 3}
#: host syncs of each step: ``torch.unique`` and two boolean-mask selections in
#: ``map_dup_tokens``; ``.tolist()`` of the in and out splits after each count exchange;
#: three boolean-mask ops in ``map_s1_to_s2_indices_to_relative``; ``repeat_interleave``
#: in ``..._relative_to_abs``; the experts' splits ``.tolist()`` -- 14 in all
SYNCS = {"layout": 3, "splits": 2, "relative": 3, "absolute": 1, "expert splits": 1}
HOST_SYNCS = sum(SYNCS.values()) + 2 * SYNCS["splits"]   #: (three count exchanges)
#: bytes of one replica's metadata in the index exchange: its pilot-row index (int64)
#: and its expert id (int32), two all-to-all-v
INDEX_BYTES = (8.0, 4.0)
WEIGHT_BYTES = 2.0     #: a combine weight, cast to the expert outputs' BF16


def node_size(L: Layer) -> int:
    """X-MoE's mesh: ``min(EP size, 8)`` consecutive ranks (``rbd_mesh_size``), the GPUs of
    one node here."""
    return min(L.sys.gpus_per_node, L.G)


def routes(L: Layer):
    """(first, second, virtual) row copies of RBD on this layer (:func:`..dedup.pilot_routes`),
    pilots chosen at random (X-MoE's ``randperm``) from the workload's seed."""
    dest = L.dest.reshape(L.G, L.T, L.k)
    rng = np.random.default_rng([int(L.wl.seed), 0x58_4D6F45])       # "XMoE"
    return dedup.pilot_routes(dest, L.G, node_size(L), rng.random(dest.shape))


def node_max(L: Layer, t: np.ndarray) -> np.ndarray:
    """Per GPU, the latest of ``t`` over its node (a node collective's start)."""
    gpn = node_size(L)
    return np.repeat(np.asarray(t, float).reshape(-1, gpn).max(axis=1), gpn)


def wire(L: Layer, rows: np.ndarray, row_bytes: int) -> np.ndarray:
    """Software wire bytes of row copies (largest link payload, a header per packet)."""
    return flow_wire_bytes(rows * row_bytes, L.sys.link_max_payload_bytes,
                           L.sys.link_header_bytes)


def recv_ends(L: Layer, curves, flows, t0, counts) -> np.ndarray:
    """When each GPU's last row of ``counts`` has landed (``max(t0)`` if none)."""
    return np.array([C.recv_end(L, d, curves, flows, float(np.max(t0)), counts=counts)
                     for d in range(L.G)])


def small_a2a_us(L: Layer, nbytes: np.ndarray, node: bool = False) -> float:
    """A small all-to-all-v (counts, indices, weights): the calibrated all-to-all time for
    the busiest GPU's bytes per peer, over every GPU or over one node."""
    peers, nodes = (node_size(L), 1) if node else (L.G, L.nodes)
    if peers <= 1:
        return 0.0
    off = np.where(np.eye(L.G, dtype=bool), 0.0, np.asarray(nbytes, dtype=float))
    return L.comp.alltoall_us(float(off.sum(axis=1).max()) / (peers - 1), peers, nodes)


def _eager(L: Layer, step: str, nbytes: float) -> list:
    """A metadata step's kernels and host syncs as ``(phase, us)`` steps (:func:`.eager.lay`)."""
    out = [("layout", X.kernels_us(L, KERNELS[step], nbytes))]
    if SYNCS.get(step):
        out.append(("host sync", X.syncs_us(L, SYNCS[step])))
    return out


def run(L: Layer) -> SystemResult:
    res = SystemResult("xmoe_rbd", LABEL)
    G = L.G
    first, second, virtual = routes(L)
    t_gate = C.gate(L, res)
    messages = []                        # (t, bytes[s, d]) of the small exchanges
    t_a2a = _metadata(L, res, t_gate, first, virtual, messages)
    recv = _dispatch(L, res, first, second, t_a2a)
    unsort_end, shared_end = _experts(L, res, recv, t_gate)
    recv_owner = _combine(L, res, first, second, virtual, unsort_end, messages)
    C.control_messages(L, "counts", messages)
    pieces = first.sum(axis=1)           # rows back at each owner: one per (token, node)
    start = np.maximum(recv_owner, shared_end)
    res.gpu_end = start + np.array([X.kernels_us(L, 1, (pieces[o] + L.T) * L.row_bytes)
                                    for o in range(G)])
    for o in range(G):
        res.add(o, "control", "unpermute+reduce", start[o], res.gpu_end[o])
    res.extra["rows_sent"] = int(first.sum() + second.sum())
    inter = L.pair_links()[1]
    res.extra["nic_rows"] = int(first[inter].sum())
    res.extra["host_syncs"] = HOST_SYNCS
    return res


def _metadata(L: Layer, res: SystemResult, t_gate: float, first, virtual, messages) -> float:
    """``TopKGateRBD``'s metadata (``rbd_metadata``) and the pilots' gather: when the
    global all-to-all starts. Every GPU runs the same steps; the global exchanges keep
    them in step."""
    G, T, k, comp = L.G, L.T, L.k, L.comp
    idx = T * k * 8.0                    # one int64 index per row, read and written
    E_peer = 4.0 * L.E_local             # a peer's float32 per-expert counts
    counts = np.full((G, G), E_peer)
    gpn = node_size(L)
    same = np.equal.outer(np.arange(G) // gpn, np.arange(G) // gpn)

    def exchange(t, name, nbytes, node=False):
        dt = small_a2a_us(L, nbytes, node)
        messages.append((np.full(G, t), np.where(same, nbytes, 0.0) if node else nbytes))
        return X.lay(res, range(G), t, [(name, dt)])

    t = X.lay(res, range(G), t_gate, _eager(L, "layout", KERNELS["layout"] * idx))
    t = exchange(t, "count exchange", counts)
    t = X.lay(res, range(G), t, _eager(L, "splits", 2 * 8.0 * L.E) + _eager(
        L, "relative", KERNELS["relative"] * idx))
    t = exchange(t, "count exchange", counts)
    t = X.lay(res, range(G), t, _eager(L, "splits", 2 * 8.0 * L.E))
    for b in INDEX_BYTES:
        t = exchange(t, "index exchange", virtual * b)
    t = X.lay(res, range(G), t, _eager(L, "absolute", KERNELS["absolute"] * idx))
    t = exchange(t, "count exchange", np.where(same, E_peer, 0.0), node=True)
    t = X.lay(res, range(G), t, _eager(L, "splits", 2 * 8.0 * L.E_local * gpn))
    gather = t + np.array([X.kernels_us(L, 1, 2.0 * first[s].sum() * L.row_bytes)
                           for s in range(G)])
    for s in range(G):
        res.add(s, "control", "gather pilots", t, gather[s])
    return float(gather.max())


def _dispatch(L: Layer, res: SystemResult, first, second, t_a2a: float) -> np.ndarray:
    """Pilots over every GPU's all-to-all, the replicas' gather at the pilot's GPU, the
    replicas over the node's all-to-all, the local order: when each GPU holds its rows."""
    G, gpn = L.G, node_size(L)
    curves, flows = bulk.alltoall(L, res, t_a2a, wire(L, first, L.disp_bytes),
                                  "dispatch", "send", "all-to-all global")
    recv1 = np.maximum(recv_ends(L, curves, flows, t_a2a, first), t_a2a)
    t_fwd = recv1 + np.array([X.kernels_us(L, 1, 2.0 * second[d].sum() * L.row_bytes)
                              for d in range(G)])
    t_node = node_max(L, t_fwd)
    curves, flows = bulk.alltoall(L, res, t_node, wire(L, second, L.disp_bytes),
                                  "forward", "send", "all-to-all node", peers=gpn, nodes=1)
    recv2 = np.maximum(recv_ends(L, curves, flows, t_node, second), t_node)
    rows_d = L.counts.sum(axis=0)
    t_cat = recv2 + np.array([X.kernels_us(L, 1, 2.0 * r * L.row_bytes) for r in rows_d])
    for d in range(G):
        res.add(d, "control", "gather replicas", recv1[d], t_fwd[d])
        res.add(d, "control", "local order", recv2[d], t_cat[d])
    return t_cat


def _experts(L: Layer, res: SystemResult, t_cat: np.ndarray, t_gate: float):
    """The experts' splits on the host, sort by expert, grouped GEMM, unsort."""
    g, G = L.gpu, L.G
    rows_d = L.counts.sum(axis=0)
    sorts = L.E_local > 1
    unsort_end, shared_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        t = X.lay(res, [d], float(t_cat[d]), _eager(L, "expert splits", 8.0 * L.E))
        if sorts:
            t = X.lay(res, [d], t, [("sort by expert", g.permute_us(int(rows_d[d])))])
        items = C.shared_item(L, t_gate) + [
            WorkItem(t + L.comp.launch_us, e, int(r), g.padded(int(r)), L.model.expert_ffn,
                     key=e, landed=float(t_cat[d]), known=float(t_cat[d]))
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, routed_end, shared_end[d] = C.run_queue(L, res, d, items, t_gate, C.full_share)
        unsort_end[d] = routed_end + (g.permute_us(int(rows_d[d])) if sorts else 0.0)
        if sorts:
            res.add(d, "control", "unsort", routed_end, unsort_end[d])
        res.combine_log.append((d, "all", unsort_end[d], routed_end))
    return unsort_end, shared_end


def _combine(L: Layer, res: SystemResult, first, second, virtual, unsort_end, messages):
    """``RBCombiner``: the weights' exchanges, the replicas' outputs back to the pilots
    (node all-to-all), scale and scatter-sum at the pilot (one row per (token, node)), the
    global all-to-all back: when each owner holds its rows."""
    G, gpn = L.G, node_size(L)
    t = float(unsort_end.max())          # the weights' all-to-alls span every GPU
    t = X.lay(res, range(G), t, [("weights exchange", X.kernels_us(
        L, KERNELS["weights"], 3.0 * L.T * L.k * (4 + WEIGHT_BYTES)))])
    for nbytes in (first * WEIGHT_BYTES, virtual * WEIGHT_BYTES):
        messages.append((np.full(G, t), nbytes))
        t = X.lay(res, range(G), t, [("weights exchange", small_a2a_us(L, nbytes))])
    t_node = node_max(L, np.full(G, t))
    curves, flows = bulk.alltoall(L, res, t_node, wire(L, second.T, L.comb_bytes),
                                  "combine_relay", "combine", "all-to-all node back",
                                  peers=gpn, nodes=1)
    back = np.maximum(recv_ends(L, curves, flows, t_node, second.T), t_node)
    pilots_in, replicas = first.sum(axis=0), second.sum(axis=1)
    rb = L.row_bytes
    t_sum = back + np.array([X.kernels_us(L, 2, 2.0 * (pilots_in[p] + replicas[p]) * rb)
                             + X.kernels_us(L, 1, (replicas[p] + 2.0 * pilots_in[p]) * rb)
                             for p in range(G)])
    for p in range(G):
        res.add(p, "control", "scale+sum at pilot", back[p], t_sum[p])
    t_a2a = float(t_sum.max())
    curves, flows = bulk.alltoall(L, res, t_a2a, wire(L, first.T, L.comb_bytes), "combine",
                                  "combine", "all-to-all global back")
    return np.maximum(recv_ends(L, curves, flows, t_a2a, first.T), t_a2a)


def receive_memory(L: Layer) -> dict:
    """Receive buffers per GPU: the pilots it receives, the replicas it makes and sends,
    the replicas it receives, their ``torch.cat`` (every routed row once more), all
    exactly sized from the host-side splits (X-MoE's padding-free buffers)."""
    first, second, _ = routes(L)
    rb = L.model.row_bytes
    return X.worst_memory([{"pilots": int(first[:, d].sum()) * rb,
                            "replicas made": int(second[d].sum()) * rb,
                            "replicas received": int(second[:, d].sum()) * rb,
                            "local order": int(L.counts[:, d].sum()) * rb}
                           for d in range(L.G)])
