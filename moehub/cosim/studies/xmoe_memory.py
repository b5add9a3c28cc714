"""Activation memory of one MoE layer on one GPU, per dispatch system (X-MoE study, part 1).

X-MoE's first claim (the X-MoE paper, Sec. 3.2) is that fine-grained, large-top-k MoEs run out of
*activation* memory in dispatch and combine, because the buffers grow with top-k and the
usual layouts pad them. This module sizes every buffer a system keeps for one MoE layer
on each GPU, from the routing the co-simulation samples (:func:`routed`), so that drops
and padding come from real per-expert counts, not from the mean.

Each system is a function ``(Routed) -> list[Buffer]``; a :class:`Buffer` holds, per GPU,
the bytes *reserved* (allocated for the layer: what decides an out-of-memory) and the
bytes *used* by routed rows (what a padding-free layout would need). The peak per GPU is
the sum of the reserved bytes, maximised over GPUs: in training the forward keeps every
one of these tensors for the backward (ASSUMPTION: no activation checkpointing, as in
X-MoE's memory analysis). Rows are ``hidden x act_bytes`` in memory; "expert
activations" are the SwiGLU intermediates a GEMM writes (``rows x 3 ffn``: GEMM1's gate
and up outputs, 2 ffn, and the activation's output, ffn). The layer input and output
(``tokens x hidden``) are the same for every system and left out.

The systems (buffer by buffer in each function's docstring):

* ``deepspeed``: capacity-padded buffers ``[E, C, H]`` and the dense gate tensors
  ``combine_weights`` (fp32) and ``dispatch_mask`` (bool) of shape ``[S, E, C]``, with
  ``C = max(ceil(S x k x 1.25 / E), 8)`` per source GPU; rows past ``C`` are dropped in
  token order (DeepSpeed ``deepspeed/moe/sharded_moe.py`` ``topkgating``: ``_capacity``
  with ``capacity_factor * k``, ``min_capacity`` 8, drop policy "position"; X-MoE's
  capacity factor 1.25, FACTS.md).
* ``tutel``: the same padded buffers with sparse routing indices instead of the dense
  gate tensors (Tutel's ``indices`` / ``locations`` / ``gates``, 12 B per row).
* ``megablocks``: dropless; exact all-to-all rows, then each expert's rows padded to a
  multiple of 128 for the block-sparse GEMMs (FACTS.md: MegaBlocks rounds to 128 rows).
* ``pft``: X-MoE's padding-free token buffers: only kept rows (capacity 1.25 drops, as
  X-MoE applies them) plus the ERI arrays (token ids, expert ids, combine weights,
  tokens per expert; X-MoE blog, "What we fixed" 1).
* ``deepep_ll``: DeepEP low-latency worst-case buffers: the RDMA receive buffer
  ``[local experts][sources][max tokens]`` of messages (16 B source index + row), the
  packed receive tensor and the masked-layout GEMM tensors of shape ``[local experts,
  sources x max tokens, .]``, the combine buffers ``[experts][max tokens]`` (DeepEP
  ``csrc/deep_ep.cpp`` ``low_latency_dispatch``: ``packed_recv_x``,
  ``packed_recv_src_info``, ``packed_recv_layout_range``; ``internode_ll.cu`` receive
  offsets; FACTS.md).
* ``hub``: the hub's static regions as the co-simulation derives them
  (:func:`moehub.cosim.layer.derive_hub`): per local expert a region of a power-of-two
  capacity >= GPUs x tokens, its metadata index array (one word per row slot, addressed
  ``expert x max_rows + row``: ``spec/formats.py`` ``meta_addr``), tile flags and counts.
  The rows it writes are padding-free by construction (dense from 0); the reservation is
  the worst case, like DeepEP's.
* ``hub_cf``: the same hub with each region's capacity set through its CSR to capacity
  factor 1.25 of the mean rows per expert (ASSUMPTION: the runtime chooses so; the RTL
  allows any capacity up to ``max_rows_per_expert``); rows past it are dropped and counted
  by the hub (region overflow, ``DropReason.OVERFLOW``), per expert over all sources.
* ``hub_paged``: hub protocol v2's page pool (DESIGN.md sec 6, "regions become a pool of
  tile-sized pages"): one pool per GPU of 1.25 x tokens x top-k rows plus one partial page
  per expert (ASSUMPTION: sized like the capacity factor, pooled over the GPU's experts);
  a row is dropped only when the GPU's whole pool is full.

The hub kernels never stage a send buffer (producers store rows straight from the layer
input) and the GEMM epilogue writes outputs into the owner's ``[tokens][k]`` combine
buffer (no expert-output copy). Their expert activations follow the regions (the GEMM
starts before the counts are known; ASSUMPTION: its intermediates are region-shaped, or
page-shaped for the pool).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig, SystemConfig, WorkloadConfig, effective_row_bytes
from ...spec.config import ConfigError, load_hub_config
from ..layer import derive_hub
from ..workload import Routing, make_routing

#: X-MoE's capacity factor (FACTS.md; GShard's 1.25)
CAPACITY_FACTOR = 1.25
#: DeepSpeed ``TopKGate(min_capacity=8)`` (deepspeed/moe/sharded_moe.py)
MIN_CAPACITY = 8
#: MegaBlocks' block: each expert's rows padded to a multiple of 128 (FACTS.md)
MEGABLOCKS_BLOCK = 128
#: DeepEP low-latency message header: one int4 (16 B) source-token index per row
#: (``num_bytes_per_msg = sizeof(int4) + hidden bytes``, csrc/kernels/internode_ll.cu)
DEEPEP_MSG_HEADER = 16
#: bytes per routed row of sparse routing metadata: an int32 index, an int32 expert id or
#: location and an fp32 combine weight (Tutel, MegaBlocks, X-MoE's ERI arrays)
SPARSE_INDEX_BYTES = 12
#: bytes per received row of the receiver's own index (int32 token id + int32 expert id)
RECV_INDEX_BYTES = 8
GiB = float(1 << 30)


@dataclass(frozen=True)
class Buffer:
    """One tensor a system keeps for the layer: bytes per GPU (arrays over GPUs).

    ``life`` says how long it lives, which decides how it adds up over a model:
    ``saved`` tensors are kept until the layer's backward (GEMM inputs, expert
    activations, the combine's inputs, routing tensors: one set per MoE layer);
    ``transient`` ones only while the layer runs (send and receive staging);
    ``static`` ones are allocated once and reused by every layer (DeepEP's RDMA
    buffers, the hub's regions, index arrays and flags)."""
    name: str
    life: str                 #: saved | transient | static
    reserved: np.ndarray      #: bytes allocated on each GPU
    used: np.ndarray          #: bytes holding routed rows (no padding, no empty slots)


LIVES = ("saved", "transient", "static")


@dataclass
class Routed:
    """The routing facts memory depends on: rows per (source GPU, expert), the shapes."""
    model: ModelConfig
    gpus: int
    tokens: int
    counts: np.ndarray        #: [G sources, E experts] rows routed
    disp_bytes: int           #: a dispatched row on the wire (dtype of the model/workload)
    comb_bytes: int           #: a combined row on the wire
    capacity_factor: float = CAPACITY_FACTOR

    def __post_init__(self):
        G, E = self.gpus, self.model.experts
        if G > E or E % G:
            raise ConfigError(f"system.gpus = {G}: the memory study places whole experts "
                              f"on GPUs, so it needs the {E} experts of {self.model.name} "
                              "to divide evenly over the GPUs")
        if self.counts.shape != (G, E):
            raise ValueError(f"counts of shape {self.counts.shape}, expected {(G, E)}")

    # shapes ------------------------------------------------------------------------
    @property
    def E(self) -> int:
        return self.model.experts

    @property
    def E_local(self) -> int:
        return self.E // self.gpus

    @property
    def k(self) -> int:
        return self.model.topk

    @property
    def row(self) -> int:
        """A token row in memory (hidden x act_bytes)."""
        return self.model.row_bytes

    @property
    def expert_row(self) -> int:
        """Expert activations of one row: GEMM1 out (2 ffn) + activation out (ffn)."""
        return 3 * self.model.expert_ffn * self.model.act_bytes

    # capacity ----------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """DeepSpeed's per-expert capacity of one GPU's tokens (``_capacity``)."""
        return max(math.ceil(self.tokens * self.k * self.capacity_factor / self.E),
                   MIN_CAPACITY)

    @property
    def kept(self) -> np.ndarray:
        """Rows kept under a per-(source, expert) capacity (DeepSpeed, Tutel, X-MoE)."""
        return np.minimum(self.counts, self.capacity)

    # per GPU -----------------------------------------------------------------------
    def on_gpu(self, per_expert: np.ndarray) -> np.ndarray:
        """Sum a per-expert quantity over each GPU's experts (whole experts, in order)."""
        return np.asarray(per_expert, float).reshape(self.gpus, self.E_local).sum(axis=1)

    def sent(self, kept: bool = False) -> np.ndarray:
        """Rows each GPU sends (as source)."""
        return (self.kept if kept else self.counts).sum(axis=1).astype(float)

    def received(self, kept: bool = False) -> np.ndarray:
        """Rows each GPU receives (as the home of its experts)."""
        return self.on_gpu((self.kept if kept else self.counts).sum(axis=0))

    def expert_rows(self) -> np.ndarray:
        """Rows per expert over all sources."""
        return self.counts.sum(axis=0)


def routed(model: ModelConfig, system: SystemConfig, workload: WorkloadConfig,
           routing: Routing | None = None) -> Routed:
    """The routing of ``workload`` on ``system`` (sampled as the co-simulation samples it,
    :func:`moehub.cosim.workload.make_routing`, unless given) as per-(source, expert) rows."""
    G = system.gpus
    routing = routing or make_routing(model, workload, G)
    E = model.experts
    src = np.repeat(np.arange(G), routing.tokens * routing.topk)
    counts = np.bincount(src * E + routing.experts.reshape(-1).astype(np.int64),
                         minlength=G * E).reshape(G, E)
    disp, comb = effective_row_bytes(model, workload)
    return Routed(model, G, routing.tokens, counts, disp, comb)


def _full(c: Routed, value) -> np.ndarray:
    return np.full(c.gpus, float(value))


def _capacity_buffers(c: Routed, index: Buffer) -> list:
    """Capacity-padded layouts: every buffer holds E x C rows on every GPU (E/G local
    experts x G sources x C on the receiver, E experts x C on the sender). Saved: the
    GEMM input (the all-to-all's output), the expert activations and the combine's input
    (the combine needs the expert outputs for the gate gradient)."""
    slots = c.E * c.capacity
    s_kept, r_kept = c.sent(kept=True), c.received(kept=True)
    return [index,
            Buffer("dispatch send [E,C,H]", "transient", _full(c, slots * c.row), s_kept * c.row),
            Buffer("expert input [E/G,G*C,H]", "saved", _full(c, slots * c.row), r_kept * c.row),
            Buffer("expert activations", "saved", _full(c, slots * c.expert_row),
                   r_kept * c.expert_row),
            Buffer("expert output [E/G,G*C,H]", "transient", _full(c, slots * c.row),
                   r_kept * c.row),
            Buffer("combine recv [E,C,H]", "saved", _full(c, slots * c.row), s_kept * c.row)]


def deepspeed(c: Routed) -> list:
    """DeepSpeed-MoE: the padded buffers and the dense ``[S, E, C]`` gate tensors, both
    saved by the dispatch and combine einsums: fp32 ``combine_weights`` and the
    ``dispatch_mask`` cast to the activation dtype (``type_as(input)``)."""
    dense = c.tokens * c.E * c.capacity * (4 + c.model.act_bytes)
    return _capacity_buffers(c, Buffer("gate masks [S,E,C]", "saved", _full(c, dense),
                                       _full(c, dense)))


def tutel(c: Routed) -> list:
    """Tutel: the padded buffers, sparse routing indices (12 B per (token, expert))."""
    idx = c.tokens * c.k * SPARSE_INDEX_BYTES
    return _capacity_buffers(c, Buffer("routing indices", "saved", _full(c, idx),
                                       _full(c, idx)))


def _dropless(c: Routed, send: np.ndarray, recv: np.ndarray, padded: np.ndarray) -> list:
    """Exact all-to-all rows (staging); the expert-major copy the GEMMs read and their
    activations hold ``padded`` rows (the GEMM layout) and are saved; outputs are
    scattered back to exact rows for the combine all-to-all, and the owner keeps the
    returned rows for the weighted sum's backward."""
    index = send * SPARSE_INDEX_BYTES + c.E * 8 + recv * RECV_INDEX_BYTES
    return [Buffer("index arrays", "saved", index, index),
            Buffer("dispatch send", "transient", send * c.row, send * c.row),
            Buffer("dispatch recv", "transient", recv * c.row, recv * c.row),
            Buffer("expert input (by expert)", "saved", padded * c.row, recv * c.row),
            Buffer("expert activations", "saved", padded * c.expert_row, recv * c.expert_row),
            Buffer("expert output", "transient", padded * c.row, recv * c.row),
            Buffer("combine send", "transient", recv * c.row, recv * c.row),
            Buffer("combine recv", "saved", send * c.row, send * c.row)]


def megablocks(c: Routed) -> list:
    """MegaBlocks (dropless): every expert's rows padded to a multiple of 128."""
    blk = MEGABLOCKS_BLOCK
    padded = c.on_gpu(-(-c.expert_rows() // blk) * blk)
    return _dropless(c, c.sent(), c.received(), padded)


def pft(c: Routed) -> list:
    """X-MoE's padding-free token buffers: kept rows only, nothing padded."""
    recv = c.received(kept=True)
    return _dropless(c, c.sent(kept=True), recv, recv)


def deepep_ll(c: Routed) -> list:
    """DeepEP low-latency: every receive-side tensor is sized for the worst case, each
    source sending every token to every local expert (E/G x G x T = E x T slots). The
    RDMA buffers are allocated once (static); the packed receive tensor, the masked GEMM
    tensors and the index tensors are allocated per call and saved."""
    slots = c.E * c.tokens
    msg = DEEPEP_MSG_HEADER + c.disp_bytes
    recv, T, k = c.received(), c.tokens, c.k
    fixed = c.E_local * c.gpus * 8 + T * k * (8 + 4)          # layout range, topk ids+weights
    return [Buffer("index arrays", "saved", _full(c, slots * 4 + fixed), recv * 4 + fixed),
            Buffer("RDMA dispatch send [T]", "static", _full(c, T * msg), _full(c, T * msg)),
            Buffer("RDMA dispatch recv [E/G][G][T]", "static", _full(c, slots * msg), recv * msg),
            Buffer("packed recv [E/G,G*T,H]", "saved", _full(c, slots * c.disp_bytes),
                   recv * c.disp_bytes),
            Buffer("expert activations (masked)", "saved", _full(c, slots * c.expert_row),
                   recv * c.expert_row),
            Buffer("expert output [E/G,G*T,H]", "saved", _full(c, slots * c.comb_bytes),
                   recv * c.comb_bytes),
            Buffer("RDMA combine recv [E][T]", "static", _full(c, slots * c.comb_bytes),
                   _full(c, T * k * c.comb_bytes))]


def hub_config(c: Routed, rows_bound: int | None = None):
    """The derived hub config of the layer (:func:`derive_hub`), regions of at least
    ``rows_bound`` rows (default: GPUs x tokens, no drops possible)."""
    base = load_hub_config(c.model.hub_config)
    return derive_hub(base, c.model, c.gpus, c.tokens, c.disp_bytes, rows_bound)


def _hub_buffers(c: Routed, cfg, region_rows: int, slot_rows: int, flag_words: int,
                 name: str, kept: np.ndarray) -> list:
    """A hub's buffers. Static, reused by every layer: ``region_rows`` data rows and as
    many rows of expert activations (the expert kernel starts tiles before the counts are
    known, so its intermediates follow the regions: ASSUMPTION), ``slot_rows`` metadata
    words, ``flag_words`` flag, count and page-table words. Saved per layer: the ``kept``
    rows the hub wrote and their activations, copied out exactly once the done word gives
    the counts (ASSUMPTION: the regions are reused by the next layer), the owner's
    ``[T][k]`` combine buffer and the routing decisions (int32 expert + fp32 weight)."""
    meta, stride = cfg.meta_word_bytes, cfg.stride_bytes
    routing = c.tokens * c.k * 8
    comb = _full(c, c.tokens * c.k * c.row)
    return [Buffer("metadata + flags", "static", _full(c, slot_rows * meta + 4 * flag_words),
                   kept * meta + 4 * flag_words),
            Buffer(name, "static", _full(c, region_rows * stride), kept * stride),
            Buffer("GEMM workspace (region-shaped)", "static",
                   _full(c, region_rows * c.expert_row), kept * c.expert_row),
            Buffer("routing (ids, weights)", "saved", _full(c, routing), _full(c, routing)),
            Buffer("expert input (exact copy)", "saved", kept * c.row, kept * c.row),
            Buffer("expert activations", "saved", kept * c.expert_row, kept * c.expert_row),
            Buffer("combine recv [T][k]", "saved", comb, comb)]


def hub(c: Routed) -> list:
    """The hub's static regions (the co-simulation's derivation, no drops possible)."""
    cfg = hub_config(c)
    rows = c.E_local * cfg.max_rows_per_expert
    flags = c.E_local * cfg.tiles_per_expert + c.E_local + 1
    return _hub_buffers(c, cfg, rows, rows, flags, "regions [E/G][max rows]", c.received())


def hub_cf_capacity(c: Routed) -> int:
    """Rows per expert region at the capacity factor: 1.25 x the mean rows per expert."""
    return math.ceil(c.capacity_factor * c.gpus * c.tokens * c.k / c.E)


def hub_cf(c: Routed) -> list:
    """The hub with each region's capacity set (CSR) to the capacity factor; the index
    array keeps the hardware's ``expert x max_rows`` address space."""
    cap = hub_cf_capacity(c)
    cfg = hub_config(c, rows_bound=cap)
    flags = c.E_local * cfg.tiles_per_expert + c.E_local + 1
    kept = c.on_gpu(np.minimum(c.expert_rows(), cap))
    return _hub_buffers(c, cfg, c.E_local * cap, c.E_local * cfg.max_rows_per_expert, flags,
                        "regions [E/G][1.25 x mean]", kept)


def hub_pool_rows(c: Routed) -> int:
    """Rows of a GPU's page pool: 1.25 x tokens x top-k in whole tiles, plus one partial
    page per local expert."""
    tile = hub_config(c).tile_rows
    rows = math.ceil(c.capacity_factor * c.tokens * c.k / tile) * tile
    return rows + c.E_local * tile


def _pool_overflow(c: Routed) -> np.ndarray:
    """Rows each GPU's pool cannot take (its experts' rows in whole pages past the pool)."""
    tile = hub_config(c).tile_rows
    need = c.on_gpu(-(-c.expert_rows() // tile) * tile)
    return np.minimum(np.maximum(need - hub_pool_rows(c), 0), c.received())


def hub_paged(c: Routed) -> list:
    """Hub protocol v2: one page pool per GPU; a flag per page and a page table per
    expert (4 B per page)."""
    cfg = hub_config(c)
    rows = hub_pool_rows(c)
    pages = rows // cfg.tile_rows
    flags = pages + c.E_local * pages + c.E_local + 1
    kept = c.received() - _pool_overflow(c)
    return _hub_buffers(c, cfg, rows, rows, flags, "page pool", kept)


#: system -> (label, buffer function)
SYSTEMS = {
    "deepspeed": ("capacity-padded (DeepSpeed-MoE, C=1.25)", deepspeed),
    "tutel": ("capacity-padded (Tutel, C=1.25)", tutel),
    "megablocks": ("tile-padded (MegaBlocks, 128 rows)", megablocks),
    "pft": ("padding-free (X-MoE PFT, C=1.25)", pft),
    "deepep_ll": ("DeepEP low-latency (worst-case buffers)", deepep_ll),
    "hub": ("MoE-Hub, static regions", hub),
    "hub_cf": ("MoE-Hub, regions at C=1.25 (CSR)", hub_cf),
    "hub_paged": ("MoE-Hub v2, page pool at 1.25", hub_paged),
}


def dropped(c: Routed, system: str) -> int:
    """Rows the system drops on this routing (every other row reaches its expert)."""
    if system in ("deepspeed", "tutel", "pft"):
        return int((c.counts - c.kept).sum())
    if system == "hub_cf":
        return int(np.maximum(c.expert_rows() - hub_cf_capacity(c), 0).sum())
    if system == "hub_paged":
        return int(_pool_overflow(c).sum())
    return 0


def summary(c: Routed, system: str) -> dict:
    """The GPU with the most reserved bytes: its peak while one layer runs (every
    buffer alive), its split by life, its bytes used by routed rows, and a training
    estimate over the model's MoE layers (``moe_layers x saved + transient + static``);
    the rows dropped on the whole layer."""
    label, fn = SYSTEMS[system]
    bufs = fn(c)
    total = sum(b.reserved for b in bufs)
    g = int(np.argmax(total))
    life = {lf: float(sum(b.reserved[g] for b in bufs if b.life == lf)) for lf in LIVES}
    rows = c.gpus * c.tokens * c.k
    drops = dropped(c, system)
    return {"system": system, "label": label, "gpu": g, "peak_bytes": float(total[g]),
            "used_bytes": float(sum(b.used[g] for b in bufs)),
            **{f"{lf}_bytes": v for lf, v in life.items()},
            "model_bytes": c.model.moe_layers * life["saved"] + life["transient"] + life["static"],
            "dropped_rows": drops, "dropped_frac": drops / rows, "kept_rows": rows - drops,
            "buffers": {b.name: float(b.reserved[g]) for b in bufs}}
