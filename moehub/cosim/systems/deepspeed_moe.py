"""The papers' kind of baseline: DeepSpeed-MoE's capacity-padded layer (GShard style),
eager -- the baseline X-MoE (seed 002) validates and measures against.

``deepspeed/moe/sharded_moe.py`` (``MOELayer.forward`` and ``top2gating``; X-MoE's fork
runs the same einsum path) pads every expert's input to a fixed capacity
``C = ceil(k x tokens x capacity_factor / experts)`` (the padded reference layout of
:mod:`..memory`, factor 1.25) and moves tokens with dense einsums over one-hot tensors
of ``tokens x experts x C`` elements, which grow with the square of the tokens:

gate -> layout: the top-k gating's eager ops (softmax, argmax, one-hot, cumsum for the
capacity slots, masks, the aux loss, ``combine_weights`` [S, E, C] in fp32 and the
``dispatch_mask`` [S, E, C]; ASSUMPTION: 25 kernels, counted from ``top2gating``) ->
host sync: ``exp_counts = torch.sum(mask1, dim=0).detach().to("cpu")`` -> permute:
``einsum("sec,sm->ecm", dispatch_mask.type_as(x), x)``, a GEMM of ``E x C`` rows over a
K of the tokens (the cast of the mask first) -> all-to-all dispatch: a fixed-size NCCL
all-to-all, ``E/G x C`` rows to every GPU whatever was routed (no count exchange: the
sizes are static) -> expert GEMM: one expert after another over its ``G x C`` rows,
padding computed (``Experts.forward`` chunks the input and loops) -> all-to-all combine
(the same size) -> unpermute+reduce: ``einsum("sec,ecm->sm", combine_weights.type_as(y),
y)``, a GEMM with a K of ``E x C``. Tokens over capacity are dropped (their time does not
depend on which).
"""
from __future__ import annotations

import math

import numpy as np

from ..gpu import GpuModel, WorkItem
from ..layer import Layer, SystemResult
from ..memory import CAPACITY_FACTOR, MIN_CAPACITY
from ..network import flow_wire_bytes
from . import bulk
from . import common as C
from . import eager as X

PHASES = ["gate", "layout", "host sync", "permute", "all-to-all dispatch", "expert GEMM",
          "all-to-all combine", "unpermute+reduce"]
LABEL = "DeepSpeed-MoE, capacity-padded einsum dispatch, eager (papers' kind)"
KIND = "paper"     #: a baseline of the kind the published speedups were measured against
GATING_KERNELS = 25   #: ASSUMPTION: eager ops of top2gating (see the module docstring)


def capacity(L: Layer) -> int:
    """Rows each expert's buffer holds from one GPU (the padded layout's C)."""
    return max(math.ceil(L.T * L.k * CAPACITY_FACTOR / L.E), MIN_CAPACITY)


def einsum_us(L: Layer, rows: int, k: int, mask_bytes: float) -> float:
    """A dense einsum over the one-hot tensor: the cast of the mask to the activation
    dtype (a kernel), then a GEMM of ``rows`` x hidden over a K of ``k``."""
    H, a = L.model.hidden, L.model.act_bytes
    cast = X.kernels_us(L, 1, mask_bytes + L.T * L.E * capacity(L) * a)
    nbytes = rows * k * a + k * H * a + rows * H * a
    return cast + L.comp.launch_costs("eager")[0] + L.gpu.gemm_us(2.0 * rows * H * k, nbytes,
                                                                  rows, H, k=k)


def _layout(L: Layer, res: SystemResult, t_gate: float) -> float:
    """Gating tensors, the exp_counts sync and the dispatch einsum: when the a2a starts."""
    sec = L.T * L.E * capacity(L)
    steps = [("layout", X.kernels_us(L, GATING_KERNELS, sec * (4 + 1) + 8 * L.T * L.E)),
             ("host sync", X.syncs_us(L, 1)),
             ("permute", einsum_us(L, L.E * capacity(L), L.T, sec * 1))]
    return X.lay(res, range(L.G), t_gate, steps)


def _padded(L: Layer) -> np.ndarray:
    """Rows s sends d: d's experts' whole capacity buffers (its own stay local)."""
    n = np.full((L.G, L.G), float(L.E_local * capacity(L)))
    np.fill_diagonal(n, 0.0)
    return n


def run(L: Layer) -> SystemResult:
    res = SystemResult("deepspeed_moe", LABEL)
    G, cap = L.G, capacity(L)
    t_gate = C.gate(L, res)
    a2a = _layout(L, res, t_gate)
    mp, hd = L.sys.link_max_payload_bytes, L.sys.link_header_bytes
    nbytes = flow_wire_bytes(_padded(L) * L.row_bytes, mp, hd)
    curves, flows = bulk.alltoall(L, res, a2a, nbytes, "dispatch", "send", "all-to-all dispatch")
    recv = np.array([C.recv_end(L, d, curves, flows, a2a, counts=_padded(L)) for d in range(G)])
    loop = GpuModel(L.sys, L.model, L.tile_rows, "loop")
    rows = G * cap                                   # every expert computes its whole buffer
    gemm_end, shared_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        items = C.shared_item(L, t_gate) + [
            WorkItem(recv[d], e, rows, loop.padded(rows), L.model.expert_ffn, key=e,
                     landed=recv[d], known=recv[d]) for e in range(L.E_local)]
        _, gemm_end[d], shared_end[d] = C.run_queue(L, res, d, items, t_gate, C.full_share,
                                                    gpu=loop)
    t_c = gemm_end.max()
    res.combine_log += [(d, "all", t_c, gemm_end[d]) for d in range(G)]
    curves, flows = bulk.alltoall(L, res, t_c, nbytes, "combine", "combine", "all-to-all combine")
    back = np.array([C.recv_end(L, d, curves, flows, t_c, counts=_padded(L)) for d in range(G)])
    sec = L.T * L.E * cap
    comb = einsum_us(L, L.T, L.E * cap, sec * 4)
    start = np.maximum(back, shared_end)
    res.gpu_end = start + comb
    for d in range(G):
        res.add(d, "control", "unpermute+reduce", start[d], res.gpu_end[d])
    return res


def receive_memory(L: Layer) -> dict:
    """Receive buffers per GPU: the padded buffers of its experts from every GPU
    (``[E/G, G, C, H]``) and the one-hot tensors (``combine_weights`` fp32 and the
    ``dispatch_mask`` in the activation dtype, ``S x E x C`` each)."""
    sec = L.T * L.E * capacity(L)
    return X.worst_memory([{"[E/G, G, C, H]": L.E_local * L.G * capacity(L) * L.row_bytes,
                            "one-hot [S, E, C]": sec * (4 + L.model.act_bytes)}] * L.G)
