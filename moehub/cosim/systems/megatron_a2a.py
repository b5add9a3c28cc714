"""The papers' kind of baseline: Megatron-Core's AlltoAll token dispatcher as of v0.8,
eager, with per-expert sequential GEMMs (``SequentialMLP``).

What Comet (Megatron-Cutlass / Megatron-TE), FlashDMoE (Megatron-TE, Megatron-CUTLASS)
and MoE-Hub's "state-of-the-art systems" ran is Megatron-LM's MoE layer of 2024: this
dispatcher (``megatron/core/transformer/moe/legacy_a2a_token_dispatcher.py``, "a replica
of the MoEAlltoAllTokenDispatcher from version 0.8", NVIDIA/Megatron-LM @ 2659630)
in front of a per-expert loop (``experts.py`` ``SequentialMLP``). Every step below is an
eager PyTorch op of that code, costed by :mod:`.eager` (launches, host syncs, copies:
calibrated components, no constant of its own):

gate -> layout: ``routing_map.sum(0)``, the per-rank split sums and their non-blocking
D2H copies (4 kernels) -> count exchange: an NCCL all-gather of every rank's per-expert
counts, then the per-local-expert sums and their D2H copies (4 kernels) -> permute:
``moe_utils.permute`` (two ``masked_select`` -- each a host sync -- and an
``index_select`` of the rows) -> host sync: ``torch.cuda.current_stream().synchronize()``
("before_ep_alltoall": the splits must be on the host) -> all-to-all dispatch: NCCL
all-to-all-v of the rows (BF16 activations: the v0.8 dispatcher has no FP8 dispatch),
then a second all-to-all-v of the probs -> sort by expert (``sort_chunks_by_idxs``:
split + cat, rows and probs) -> expert GEMM: one GEMM1 / activation / GEMM2 per local
expert, one after another (:class:`~..gpu.GpuModel` layout ``loop``: each its own ramp,
wave tail and launches), then ``torch.cat`` of the outputs -> unsort -> all-to-all
combine -> unpermute+reduce (probs multiply, zeros, ``scatter_add``; 3 kernels).

Every GPU joins each collective when all have reached it (NCCL); the rows are sent once
per (token, expert), no deduplication.
"""
from __future__ import annotations

import numpy as np

from ..gpu import GpuModel, WorkItem
from ..layer import Layer, SystemResult
from ..network import flow_wire_bytes
from . import bulk
from . import common as C
from . import eager as X

PHASES = ["gate", "layout", "count exchange", "permute", "host sync", "all-to-all dispatch",
          "sort by expert", "expert GEMM", "unsort", "all-to-all combine", "unpermute+reduce"]
LABEL = "Megatron-Core v0.8 all-to-all dispatcher, eager, per-expert GEMMs (papers' kind)"
KIND = "paper"     #: a baseline of the kind the published speedups were measured against


def _preamble(L: Layer, res: SystemResult, t_gate: float) -> float:
    """Layout, count exchange, permute and the stream sync: when the all-to-all starts."""
    T, E, G = L.T, L.E, L.G
    t1 = t_gate + X.kernels_us(L, 4, T * E * 9 + 8 * E)            # counts, split sums, D2H
    t2 = t1 + X.allgather_us(L, 8.0 * E) + X.kernels_us(L, 4, 8.0 * E * G)
    C.control_traffic(L, "counts", np.full(G, t1), np.full((G, G), 8.0 * E))
    for d in range(G):
        res.add(d, "control", "layout", t_gate, t1)
        res.add(d, "control", "count exchange", t1, t2)
    steps = X.permute_steps(L, T, E, T * L.k, L.row_bytes, with_probs=True) \
        + [("host sync", X.syncs_us(L, 1))]                       # before_ep_alltoall
    res.extra["host_syncs"] = X.sync_count(steps)
    return X.lay(res, range(G), t2, steps)


def _experts(L: Layer, res: SystemResult, d: int, t0: float, t_gate: float) -> tuple:
    """GPU d's per-expert GEMM loop from ``t0``: (end of its outputs' cat, shared end)."""
    loop = GpuModel(L.sys, L.model, L.tile_rows, "loop")
    items = C.shared_item(L, t_gate) + [
        WorkItem(t0, e, int(r), loop.padded(int(r)), L.model.expert_ffn, key=e,
                 landed=t0, known=t0)
        for e, r in enumerate(L.expert_rows[d]) if r]
    _, end, shared_end = C.run_queue(L, res, d, items, t_gate, C.full_share, gpu=loop)
    cat = X.kernels_us(L, 1, 2.0 * L.expert_rows[d].sum() * L.row_bytes)
    res.add(d, "gemm", "expert GEMM", end, end + cat)       # torch.cat of the expert outputs
    return end + cat, shared_end


def run(L: Layer) -> SystemResult:
    res = SystemResult("megatron_a2a", LABEL)
    G, comp = L.G, L.comp
    t_gate = C.gate(L, res)
    a2a = _preamble(L, res, t_gate)
    mp, hd = L.sys.link_max_payload_bytes, L.sys.link_header_bytes
    nbytes = flow_wire_bytes(L.counts * L.row_bytes, mp, hd)
    curves, flows = bulk.alltoall(L, res, a2a, nbytes, "dispatch", "send", "all-to-all dispatch")
    probs = comp.small_collective_us(G, L.nodes, 4.0 * L.counts.sum() / max(G * G, 1))
    recv = np.array([C.recv_end(L, d, curves, flows, a2a) for d in range(G)]) + probs
    rows_d = L.counts.sum(axis=0)
    sorts = L.E_local > 1
    unsort_end, shared_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        t0 = recv[d]
        if sorts:                                   # sort_chunks_by_idxs: rows and probs
            t0 = recv[d] + X.kernels_us(L, 2, 2.0 * rows_d[d] * (L.row_bytes + 4))
            res.add(d, "control", "sort by expert", recv[d], t0)
        end, shared_end[d] = _experts(L, res, d, t0, t_gate)
        unsort_end[d] = end + (X.kernels_us(L, 1, 2.0 * rows_d[d] * L.row_bytes) if sorts else 0)
        if sorts:
            res.add(d, "control", "unsort", end, unsort_end[d])
    a2a2 = unsort_end.max()
    cbytes = flow_wire_bytes(L.counts.T * L.row_bytes, mp, hd)
    recv2 = np.maximum(bulk.combine_alltoall(L, res, a2a2, cbytes, unsort_end), a2a2)
    T, k = L.T, L.k
    unperm = X.kernels_us(L, 3, (5.0 * k + 1) * T * L.row_bytes)
    start = np.maximum(recv2, shared_end)
    res.gpu_end = start + unperm
    for o in range(G):
        res.add(o, "control", "unpermute+reduce", start[o], res.gpu_end[o])
    return res


def receive_memory(L: Layer) -> dict:
    """Receive buffers per GPU: the all-to-all's output (BF16 rows, exactly sized from the
    host-side splits) and the copy ``sort_chunks_by_idxs`` makes (several local experts)."""
    recv = L.counts.sum(axis=0)
    return X.worst_memory([{"recv": int(r) * L.row_bytes,
                            **({"sorted copy": int(r) * L.row_bytes} if L.E_local > 1 else {})}
                           for r in recv])
