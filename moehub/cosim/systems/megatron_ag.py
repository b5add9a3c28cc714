"""The papers' kind of baseline: Megatron-Core's AllGather token dispatcher, eager, with
a grouped expert GEMM (``GroupedMLP``).

Megatron-LM's first expert-parallel dispatcher (``MoEAllGatherTokenDispatcher`` in
``megatron/core/transformer/moe/token_dispatcher.py``, core v0.5-v0.10; the Mixtral
recipes used it with ``--moe-grouped-gemm``) sends every token to every GPU of the
expert-parallel group, whatever it routed to: each GPU all-gathers the routing map, the
router probs and the hidden states of all GPUs, keeps the rows of its own experts, and
after the GEMMs scatters them back into a full ``[GPUs x tokens, hidden]`` tensor that a
reduce-scatter returns to the owners (summing the k partial outputs on the way). Its
wire bytes are ``(G - 1) x tokens`` rows each way per GPU, not ``~k (G - 1) / G x
tokens``: with top-2 over 8 GPUs four times an all-to-all's.

Every step is an eager op of that code, costed by :mod:`.eager`:

gate -> count exchange: NCCL all-gathers of the routing map (bool) and the probs (fp32)
-> dispatch: NCCL all-gather of the BF16 hidden states -> layout: the local slices of map
and probs (2 kernels), ``local_map.sum(0).long().cpu()`` (2 kernels and a host sync) ->
permute: ``moe_utils.permute`` over the gathered map (one ``masked_select``: a host sync,
and the ``index_select`` of the local rows) -> expert GEMM (grouped, contiguous layout)
-> unpermute: the probs' ``masked_select`` (a host sync), the multiply, ``zeros`` of the
full gathered tensor and the ``scatter_add`` of the local rows -> combine: NCCL
reduce-scatter of the full tensor (its latency a ring's, as the all-gather's).
"""
from __future__ import annotations

import numpy as np

from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from ..network import flow_wire_bytes
from . import bulk
from . import common as C
from . import eager as X

PHASES = ["gate", "count exchange", "dispatch", "layout", "host sync", "permute",
          "expert GEMM", "unpermute", "combine"]
LABEL = "Megatron-Core all-gather dispatcher, eager, grouped GEMM (papers' kind)"
KIND = "paper"     #: a baseline of the kind the published speedups were measured against


def _everyone(L: Layer) -> np.ndarray:
    """``T`` rows from every GPU to every other GPU (an all-gather's, a reduce-scatter's)."""
    n = np.full((L.G, L.G), float(L.T))
    np.fill_diagonal(n, 0.0)
    return n


def _gathered_rows(L: Layer, res: SystemResult, t_gate: float) -> np.ndarray:
    """Count exchange and the hidden states' all-gather: when each GPU holds every row."""
    G, T, E = L.G, L.T, L.E
    t_meta = t_gate + X.allgather_us(L, T * E * 1.0) + X.allgather_us(L, T * E * 4.0)
    C.control_traffic(L, "counts", np.full(G, t_gate), np.full((G, G), T * E * 5.0))
    for d in range(G):
        res.add(d, "control", "count exchange", t_gate, t_meta)
    mp, hd = L.sys.link_max_payload_bytes, L.sys.link_header_bytes
    nbytes = flow_wire_bytes(_everyone(L) * L.row_bytes, mp, hd)
    curves, flows = bulk.alltoall(L, res, t_meta, nbytes, "dispatch", "send", "dispatch",
                                  kind="allgather")
    return np.array([C.recv_end(L, d, curves, flows, t_meta, counts=_everyone(L))
                     for d in range(G)])


def _local(L: Layer, res: SystemResult, d: int, t0: float) -> float:
    """GPU d's layout, host sync and permute of the gathered rows: when its GEMM starts."""
    GT, El = L.G * L.T, L.E_local
    rows = int(L.expert_rows[d].sum())
    steps = [("layout", X.kernels_us(L, 4, GT * El * (2 * 1 + 2 * 4) + GT * El)),
             ("host sync", X.syncs_us(L, 1))]                       # local_map.sum().cpu()
    steps += X.permute_steps(L, GT, El, rows, L.row_bytes, with_probs=False)
    return X.lay(res, (d,), t0, steps)


def _unpermute(L: Layer, res: SystemResult, d: int, t0: float) -> float:
    """GPU d's probs select, multiply, zeros of the gathered tensor, scatter_add."""
    GT, El = L.G * L.T, L.E_local
    rows = float(L.expert_rows[d].sum())
    steps = [("unpermute", X.kernels_us(L, 2, GT * El * 10.0))]     # .T.contiguous() x 2
    steps += [("unpermute" if n == "permute" else n, dt)
              for n, dt in X.masked_select_steps(L, GT * El * 5.0, 4 * rows)]
    steps += [("unpermute", X.kernels_us(L, 3, (2 * rows + GT + 3 * rows) * L.row_bytes))]
    return X.lay(res, (d,), t0, steps)


def run(L: Layer) -> SystemResult:
    res = SystemResult("megatron_ag", LABEL)
    g, G = L.gpu, L.G
    t_gate = C.gate(L, res)
    have = _gathered_rows(L, res, t_gate)
    unperm_end, shared_end, gemm_end = np.zeros(G), np.zeros(G), np.zeros(G)
    for d in range(G):
        ready = _local(L, res, d, have[d]) + L.comp.launch_us
        items = C.shared_item(L, t_gate) + [
            WorkItem(ready, e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e,
                     landed=have[d], known=ready)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, gemm_end[d], shared_end[d] = C.run_queue(L, res, d, items, t_gate, C.full_share)
        unperm_end[d] = _unpermute(L, res, d, gemm_end[d])
    t_rs = unperm_end.max()
    for d in range(G):
        res.combine_log.append((d, "all", t_rs, gemm_end[d]))
    mp, hd = L.sys.link_max_payload_bytes, L.sys.link_header_bytes
    nbytes = flow_wire_bytes(_everyone(L) * L.row_bytes, mp, hd)
    curves, flows = bulk.alltoall(L, res, t_rs, nbytes, "combine", "combine", "combine",
                                  kind="allgather")
    recv = np.array([C.recv_end(L, d, curves, flows, t_rs, counts=_everyone(L))
                     for d in range(G)])
    res.gpu_end = np.maximum(recv, shared_end)
    return res


def receive_memory(L: Layer) -> dict:
    """Receive buffers per GPU: every GPU's tokens (the all-gather's output, G x T BF16
    rows), the permuted copy of the local rows, and the full G x T output tensor the
    unpermute scatters into before the reduce-scatter."""
    full = L.G * L.T * L.row_bytes
    return X.worst_memory([{"gathered": full, "permuted": int(L.expert_rows[d].sum()) * L.row_bytes,
                            "unpermuted": full} for d in range(L.G)])
