"""Receive-buffer memory per GPU of every system of a co-simulated layer.

What a GPU reserves to *receive* one layer's dispatched rows (and the buffers its
mechanism needs for that: index arrays, flags, communication staging), on the GPU that
needs the most. Sized from the layer's routing (:class:`~.layer.Layer`), so exact
layouts follow the real per-expert counts. Expert activations and the combine are left
out (X-MoE study, :mod:`.studies.xmoe_memory`, for the whole activation memory).

* ``hub`` static regions (protocol v1, :func:`.layer.derive_hub`): per local expert a
  power-of-two region >= GPUs x tokens rows (no row can drop), its index array (one
  metadata word per row slot), tile flags and counts.
* ``hub`` multicast, static arena: one arena of GPUs x tokens rows (a (source, token)
  sends at most one row per GPU: the worst case), the per-expert index arrays (wider
  words: they hold the row's place in the arena), flags and counts.
* ``hub`` paged (unicast or multicast): the pages the layer takes (rows in whole tile
  pages per expert, or per arena), a page table entry per page (4 B), index arrays,
  flags and counts. Pages return only after the GEMM read them (PAGE_FREE), so within a
  layer the pages in use only grow: this is its peak.
* ``deepep``: DeepEP normal mode. Its static NVLink buffer
  (``Config.get_nvl_buffer_size_hint``: channels = SMs / 2, per channel and NVLink peer
  ``num_max_nvl_chunked_recv_tokens`` slots of hidden bytes + source meta + top-k ids and
  weights (128 each) + 128 scales) and, across nodes, its RDMA buffer
  (``get_rdma_buffer_size_hint``), with the recommended configs of
  ``Buffer.get_dispatch_config`` / ``get_combine_config`` (deepseek-ai/DeepEP
  ``csrc/config.hpp`` @ 030cdf0, ``deep_ep/buffer.py`` @ 04b06f7; the larger of the
  dispatch and combine hints, hidden bytes of a BF16 row); plus the receive tensor,
  exact after the host sync (deduplicated rows + top-k ids and weights) and the
  permuted per-expert copy the grouped GEMM reads. Normal mode needs no worst-case
  buffer: it pays the count exchange and host sync instead.
* ``deepep_ll``: DeepEP low-latency mode, worst case by construction: the RDMA buffer of
  ``get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank = tokens, hidden,
  ranks, experts)`` (``LowLatencyLayout``: two send, two receive and two signalling
  buffers; a dispatch message is 16 B + max(2 hidden, hidden + hidden/128 x 4), a combine
  message hidden/128 x 4 + 2 hidden; receive ``experts x tokens`` messages) plus the
  packed receive tensor ``[E/G, G x T, hidden]`` of the dispatch datatype
  (``low_latency_dispatch``'s ``packed_recv_x``, with its scales).
* ``bulk``, ``comet``, ``fused``: rows at exact, resolved addresses once the counts are
  exchanged (all-to-all-v receive tensor + the sorted copy for ``bulk``; the rows in
  per-expert layout for Comet; ASSUMPTION for the fused kernel: its symmetric buffer
  sized per layer from the exchanged counts, DeepGEMM Mega MoE's own sizing not read).
* ``ideal``: the padding-free rows (a bound).

Rows are counted in the dispatch datatype (FP8 + scales where the model sends FP8), the
bytes that land; copies a system makes into its GEMM layout in the activation datatype.
* capacity-padded (DeepSpeed / Tutel): ``[E/G, G, C, hidden]`` with ``C = max(ceil(T k
  1.25 / E), 8)`` rows per (source, expert) (capacity factor 1.25: FACTS.md, X-MoE; min
  capacity 8: DeepSpeed ``TopKGate``): a reference layout, not a co-simulated system.
"""
from __future__ import annotations

import math

import numpy as np

from .layer import Layer

#: DeepEP's top-k and scale slots per token in its NVLink/RDMA buffers (config.hpp)
DEEPEP_MAX_TOPK = 128
DEEPEP_MAX_SCALES = 128
#: sizeof(internode::SourceMeta): two ints (csrc/kernels/internode.cu)
DEEPEP_SOURCE_META = 8
DEEPEP_NVL_PEERS = 8
#: Buffer.get_dispatch_config / get_combine_config (deep_ep/buffer.py @ 04b06f7):
#: ranks -> (nvl send, nvl recv, rdma send, rdma recv) chunked tokens
DEEPEP_DISPATCH_CONFIG = {2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128),
                          16: (16, 288, 20, 128), 24: (8, 288, 32, 128), 32: (8, 288, 32, 128),
                          64: (20, 288, 28, 128), 128: (20, 560, 32, 128)}
DEEPEP_COMBINE_CONFIG = {2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128),
                         16: (2, 288, 28, 128), 24: (1, 288, 20, 128), 32: (1, 288, 20, 128),
                         64: (1, 288, 20, 128), 128: (1, 560, 12, 128)}
#: NUM_BUFFER_ALIGNMENT_BYTES of DeepEP (csrc/kernels/configs.cuh)
DEEPEP_ALIGN = 128
#: capacity factor of the padded reference layout (FACTS.md: X-MoE / GShard 1.25)
CAPACITY_FACTOR = 1.25
MIN_CAPACITY = 8
PAGE_TABLE_BYTES = 4


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def deepep_nvl_hint(hidden_bytes: int, ranks: int, sms: int, cfg: tuple) -> int:
    """``Config::get_nvl_buffer_size_hint`` (csrc/config.hpp)."""
    _, nvl_recv, _, _ = cfg
    rdma_ranks, nvl_ranks = max(ranks // DEEPEP_NVL_PEERS, 1), min(ranks, DEEPEP_NVL_PEERS)
    ch = sms // 2
    b = ch * nvl_ranks * (2 * rdma_ranks + 3) * 4
    per = hidden_bytes + DEEPEP_SOURCE_META + DEEPEP_MAX_TOPK * 8 + DEEPEP_MAX_TOPK * 4 \
        + DEEPEP_MAX_SCALES * 4
    b += ch * nvl_ranks * nvl_recv * per
    return _align(b, 128)


def deepep_rdma_hint(hidden_bytes: int, ranks: int, sms: int, cfg: tuple) -> int:
    """``Config::get_rdma_buffer_size_hint``: 0 inside one node."""
    if ranks <= DEEPEP_NVL_PEERS:
        return 0
    _, _, _, rdma_recv = cfg
    rdma_ranks, ch = ranks // DEEPEP_NVL_PEERS, sms // 2
    b = ch * rdma_ranks * (DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4
    per = hidden_bytes + DEEPEP_SOURCE_META + DEEPEP_MAX_TOPK * 8 + DEEPEP_MAX_TOPK * 4 \
        + DEEPEP_MAX_SCALES * 4 + 16
    b += ch * rdma_ranks * rdma_recv * per * 2 + 1048576
    return _align(b, 128)


def deepep_ll_hint(tokens: int, hidden: int, ranks: int, experts: int) -> int:
    """``get_low_latency_rdma_size_hint`` (``LowLatencyLayout``, csrc/config.hpp)."""
    scales = hidden // 128
    msg_d = 16 + max(hidden * 2, hidden + scales * 4)
    msg_c = scales * 4 + hidden * 2
    send = max(tokens * msg_d, experts * tokens * msg_c)
    recv = max(experts * tokens * msg_d, experts * tokens * msg_c)
    local = experts // ranks if ranks <= experts else 1
    signal = _align(experts * 8 + local * 4, 128)
    total = 2 * send + 2 * recv + 2 * signal
    return ((total + DEEPEP_ALIGN) // DEEPEP_ALIGN) * DEEPEP_ALIGN


def _nearest_config(table: dict, ranks: int) -> tuple:
    return table[min(table, key=lambda r: (abs(r - ranks), r))]


def _hub_fixed(L: Layer, cfg, slots: int) -> dict:
    """Index arrays (one metadata word per row slot of every expert), flags, counts."""
    E = L.E_local
    flags = (E * cfg.tiles_per_expert + E + 1) * 4
    return {"index": slots * cfg.meta_word_bytes, "flags": flags}


def hub_memory(L: Layer, features=frozenset()) -> dict:
    """The hub's receive memory (per GPU, the GPU with the most) for ``features``."""
    from .systems.hub import hub_config_v2
    cfg = hub_config_v2(L, frozenset(features))
    stride, E, tile = cfg.stride_bytes, L.E_local, cfg.tile_rows
    slots = E * cfg.max_rows_per_expert
    wire = L.gpu_rows.sum(axis=0) if cfg.multicast else L.counts.sum(axis=0)
    out = []
    for d in range(L.G):
        b = _hub_fixed(L, cfg, slots)
        if cfg.paged:
            pages = -(-int(wire[d]) // tile) if cfg.multicast else \
                int((-(-L.expert_rows[d] // tile)).sum())
            b["rows"] = pages * tile * stride
            b["page_table"] = pages * PAGE_TABLE_BYTES
        elif cfg.multicast:
            b["rows"] = min(cfg.pool_rows, L.G * L.T) * stride
        else:
            b["rows"] = slots * stride
        out.append(b)
    return _worst(out)


def _worst(per_gpu: list) -> dict:
    tot = [sum(b.values()) for b in per_gpu]
    g = int(np.argmax(tot))
    return {"bytes": int(tot[g]), "gpu": g, "parts": {k: int(v) for k, v in per_gpu[g].items()}}


def system_memory(L: Layer, name: str, hub_features=frozenset()) -> dict:
    """Receive memory per GPU of system ``name`` (see the module docstring)."""
    m, G, T, k = L.model, L.G, L.T, L.k
    recv = L.counts.sum(axis=0)
    exact = [{"rows": int(r) * L.disp_bytes} for r in recv]
    if name == "hub":
        return hub_memory(L, hub_features)
    if name == "ideal":
        return _worst(exact)
    if name == "bulk":
        return _worst([{"recv": int(r) * L.disp_bytes, "sorted copy": int(r) * m.row_bytes}
                       for r in recv])
    if name in ("comet", "fused"):
        return _worst([{"rows": int(r) * L.disp_bytes} for r in recv])
    if name == "deepep":
        sms = L.comp.sms_for("deepep")
        hb = m.hidden * 2
        dc, cc = (_nearest_config(t, G) for t in (DEEPEP_DISPATCH_CONFIG, DEEPEP_COMBINE_CONFIG))
        nvl = max(deepep_nvl_hint(hb, G, sms, dc), deepep_nvl_hint(hb, G, sms, cc))
        rdma = max(deepep_rdma_hint(hb, G, sms, dc), deepep_rdma_hint(hb, G, sms, cc))
        rows_in = L.gpu_rows.sum(axis=0)          # deduplicated rows landing on each GPU
        return _worst([{"nvl buffer": nvl, "rdma buffer": rdma,
                        "recv tensor": int(ri) * (L.disp_bytes + k * 12),
                        "permuted copy": int(int(L.expert_rows[d].sum()) * m.row_bytes)}
                       for d, ri in enumerate(rows_in)])
    if name == "deepep_ll":
        rdma = deepep_ll_hint(T, m.hidden, G, L.E)
        packed = L.E_local * G * T * L.disp_bytes     # FP8 rows carry their scales
        return _worst([{"rdma buffer": rdma, "packed recv": packed}] * G)
    raise ValueError(f"no receive-memory model for system {name!r} (a system that models its "
                     "own buffers: moehub.cosim.systems.receive_memory)")


def capacity_padded(L: Layer) -> dict:
    """The capacity-padded reference layout (DeepSpeed / Tutel, C = 1.25)."""
    C = max(math.ceil(L.T * L.k * CAPACITY_FACTOR / L.E), MIN_CAPACITY)
    b = int(L.E_local * L.G * C * L.disp_bytes)
    return {"bytes": b, "gpu": 0, "parts": {"[E/G, G, C, H]": b}, "capacity": C}
