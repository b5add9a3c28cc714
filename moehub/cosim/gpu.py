"""GPU cost model: kernels as rooflines, expert GEMMs as a queue of tile batches.

Every parameter comes from :class:`SystemConfig` (and its ``software`` costs) or the model
config; the GEMM and HBM numbers come from the calibrated component models of
:mod:`.components` (``moehub calibrate`` shows them against published measurements).

* A kernel costs one launch plus its body: the system's ``launch_mode`` decides which
  (:attr:`.components.Components.launch_us`: ``kernel_launch_us`` eager,
  ``graph_launch_us`` when the layer is replayed from CUDA graphs).
* Weights of ``weight_bytes`` 1 are FP8 and run FP8 GEMMs (FP8 peak and tile efficiency,
  DeepGEMM-style); otherwise BF16. Activations stay BF16 (``act_bytes``).
* A copy / elementwise body moves bytes at ``hbm_GBps x hbm_efficiency``.
* A GEMM body is ``gemm_fixed_us + max(flops / (peak x eff x SM share), bytes / HBM)``
  where HBM is the achievable weight-streaming bandwidth (``hbm_gemm_efficiency`` of
  nominal, times the share other traffic leaves) and ``eff`` is the steady-state tile
  efficiency for the GEMM's N (output columns) and K (reduction), times the row padding
  of a short M; the SM share is the part of the GPU left to compute while communication
  kernels hold SMs.
* An expert of a SwiGLU MoE does GEMM1 (rows x hidden -> rows x 2 ffn, gate and up), the
  activation, and GEMM2 (rows x ffn -> rows x hidden): 6 x rows x hidden x ffn flops on
  rows padded to whole tiles (GEMM1 at the efficiency of N = 2 ffn, K = hidden, GEMM2 at
  N = hidden, K = ffn); it reads its 3 x hidden x ffn weights once per batch.
* :class:`ExpertQueue` serves work items (expert, rows, ready time) on one GPU as a
  persistent grouped-GEMM kernel working in passes (see its docstring): weights are read
  once per pass, so a backlog amortises them the way a large grouped GEMM does, while an
  expert started before its rows are all in pays for reading part of them again.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ModelConfig, SystemConfig
from .components import LAYOUTS, Components
from .network import GBps


@dataclass
class WorkItem:
    ready: float        #: earliest start (us)
    expert: int         #: local expert index (-1: shared expert / dense work)
    rows: int           #: real rows
    padded_rows: int    #: rows the tensor cores compute (whole tiles)
    ffn: int            #: intermediate size of this expert
    key: object = None  #: caller's handle (e.g. (expert, tile))
    frac: float = 1.0   #: share of the item's work (N blocks) still to do
    wfrac: float = 1.0  #: share of its expert's weights this part must read itself
    final: bool = True  #: this part finishes the item (its outputs are then complete)
    landed: float = -np.inf  #: when the item's last row has landed in the GPU's memory
    known: float = -np.inf   #: when the consumer knows the rows are complete (flag, counter, layout)
    joined_at: float | None = None  #: a part that joined a running pass starts at this time


@dataclass
class Batch:
    start: float
    end: float
    items: list


class GpuModel:
    """Kernel costs of one GPU. ``layout`` is how the expert GEMM gets its rows
    (:data:`.components.LAYOUTS`; "contiguous" = expert rows back to back, padded to
    tiles); ``dtype`` is the GEMMs' datatype: FP8 with FP8 weights, else BF16."""

    def __init__(self, system: SystemConfig, model: ModelConfig, tile_rows: int,
                 layout: str = "contiguous"):
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
        self.sys, self.model, self.tile_rows, self.layout = system, model, tile_rows, layout
        self.comp = Components(system)
        # FP8 expert weights (weight_bytes = 1) run FP8 GEMMs (DeepGEMM); else BF16
        self.dtype = "fp8" if model.weight_bytes == 1 else "bf16"
        self.launch = self.comp.launch_us
        self.hbm = self.comp.hbm_effective_GBps() * GBps       # B/us, achievable for GEMMs
        self.copy_bw = self.comp.copy_GBps() * GBps            # B/us
        self.peak = self.comp.peak_TFLOPs(self.dtype) * 1e6    # flop/us
        self.fixed = system.software.gemm_fixed_us
        self._eff: dict = {}
        #: time per real row a pass spends gathering its A rows by index before its GEMMs
        #: (the hub's multicast arena, protocol v2; :func:`..systems.hub.gather_row_us`);
        #: added to the pass, not to the row's compute (so it does not change the rows a
        #: pass needs to be compute bound)
        self.gather_row_us = 0.0

    # ------------------------------------------------------------------ basics
    def steady_eff(self, n: float, k: float) -> float:
        """Tile efficiency of a long GEMM with N output columns and K reduction (cached:
        the queue asks for the same few shapes many times)."""
        key = (n, k)
        if key not in self._eff:
            self._eff[key] = self.comp.steady_eff(n, k, self.dtype)
        return self._eff[key]

    def gemm_eff(self, m: float, n: float, k: float | None = None) -> float:
        """Efficiency of a GEMM of tiles with ``m`` real rows (padded to the kernel's M
        block), N output columns and K reduction (default: the model's hidden size)."""
        k = self.model.hidden if k is None else k
        bm = self.comp.block_m(m)
        pad = m / (np.ceil(m / bm) * bm) if m > 0 else 1.0
        return self.steady_eff(n, k) * pad

    def copy_us(self, nbytes: float) -> float:
        """Body of a copy/elementwise kernel moving ``nbytes`` (reads + writes)."""
        return nbytes / self.copy_bw

    def gemm_us(self, flops: float, nbytes: float, m: float, n: float, sm_share: float = 1.0,
                k: float | None = None, hbm_share: float = 1.0) -> float:
        """Body of a GEMM: ramp + max(compute at the shape's efficiency, bytes at the
        achievable HBM left to it)."""
        return self.fixed + max(flops / (self.peak * self.gemm_eff(m, n, k) * sm_share),
                                nbytes / (self.hbm * hbm_share))

    # ------------------------------------------------------------------ MoE kernels
    def gate_us(self, tokens: int) -> float:
        """Router: logits GEMM (tokens x hidden x experts), softmax and top-k (one kernel)."""
        m = self.model
        flops = 2.0 * tokens * m.hidden * m.experts
        nbytes = tokens * m.row_bytes + m.hidden * m.experts * m.weight_bytes \
            + tokens * m.experts * 4 + tokens * m.topk * 8
        return self.launch + self.gemm_us(flops, nbytes, min(tokens, self.tile_rows), m.experts,
                                          k=m.hidden)

    def small_kernel_us(self, nbytes: float) -> float:
        return self.launch + self.copy_us(nbytes)

    def permute_us(self, rows: int) -> float:
        """Gather rows into a new order (read + write each row)."""
        return self.launch + self.copy_us(2.0 * rows * self.model.row_bytes)

    def reduce_us(self, tokens: int) -> float:
        """Combine at the token owner: weighted sum of k expert outputs per token."""
        m = self.model
        return self.launch + self.copy_us((m.topk + 1.0) * tokens * m.row_bytes)

    def padded(self, rows: int) -> int:
        t = self.tile_rows
        return -(-rows // t) * t

    def row_us(self, ffn: int) -> float:
        """Compute time of one (padded) row through a SwiGLU expert on the whole GPU:
        GEMM1 (N = 2 ffn, K = hidden) + GEMM2 (N = hidden, K = ffn)."""
        H = self.model.hidden
        return (4.0 * H * ffn / self.steady_eff(2 * ffn, H)
                + 2.0 * H * ffn / self.steady_eff(H, ffn)) / self.peak

    def _expert_rows(self, items: list, layout: str) -> dict:
        """expert -> (real rows, computed rows, weight share, ffn) of a pass."""
        per: dict = {}
        for it in items:
            r, p, w, _ = per.get(it.expert, (0.0, 0.0, 0.0, it.ffn))
            per[it.expert] = (r + it.rows * it.frac, p + it.padded_rows * it.frac,
                              max(w, it.wfrac), it.ffn)
        if layout == "masked":       # the kernel computes ceil(count / BLOCK_M) blocks
            bm = self.comp.block_m(max(v[0] for v in per.values()))
            per = {e: (r, np.ceil(r / bm - 1e-9) * bm if r > 0 else 0.0, w, f)
                   for e, (r, p, w, f) in per.items()}
        return per

    def expert_batch_us(self, items: list, sm_share: float, hbm_share: float = 1.0,
                        layout: str | None = None) -> float:
        """One grouped GEMM pass over items: GEMM1 + act + GEMM2 of each; each expert's
        weights are streamed once per pass (the largest share any of its items needs).
        ``layout`` (default ``self.layout``): "contiguous"/"padded" compute the items'
        padded rows, "masked" ceil(rows / BLOCK_M) blocks per expert, "loop" one GEMM
        pair per expert (a ramp and 3 launches each, no overlap between experts)."""
        layout = layout or self.layout
        m = self.model
        H = m.hidden
        parts = []
        for e, (r, p, w, f) in self._expert_rows(items, layout).items():
            comp = p * self.row_us(f) / sm_share
            mem = (3.0 * H * f * m.weight_bytes * w + r * (2 * H + 3 * f) * m.act_bytes) \
                / (self.hbm * hbm_share)
            parts.append((comp, mem))
        if self.gather_row_us:         # the pass first gathers its rows (a serial step)
            gather = self.gather_row_us * sum(r for r, _, _, _ in
                                              self._expert_rows(items, layout).values())
        else:
            gather = 0.0
        if layout == "loop":
            return sum(self.fixed + max(c, b) + 3 * self.launch for c, b in parts) + gather
        return self.fixed + max(sum(c for c, _ in parts), sum(b for _, b in parts)) + gather

    def dense_ffn_us(self, tokens: int, ffn: int) -> float:
        """A dense SwiGLU FFN over ``tokens`` rows (one fused launch, as before)."""
        m = self.model
        nbytes = 3.0 * m.hidden * ffn * m.weight_bytes \
            + tokens * (2 * m.hidden + 3 * ffn) * m.act_bytes
        bm = self.comp.block_m(tokens)
        comp = self.row_us(ffn) * np.ceil(tokens / bm) * bm      # rows padded to the M block
        return self.launch + self.fixed + max(comp, nbytes / self.hbm)

    def attention_us(self, tokens: int, seq_len: int) -> float:
        """Prefill attention block: projections (a GEMM on the attention weights) and the
        causal score/context products over sequences of ``min(seq_len, tokens)`` tokens.
        The score/context products run as a flash-style kernel: a tile of 128 queries stays
        on chip while it loops over the keys, so its per-tile overhead amortises over the
        context length (the K of the tile model), not over the head dimension."""
        m = self.model
        s = min(seq_len, tokens)
        proj = 2.0 * tokens * m.attn_params
        ctx = (s + 1) / 2.0
        score = 2.0 * tokens * ctx * m.attn_heads * (m.attn_qk_head_dim + m.attn_v_head_dim)
        nbytes = m.attn_params * m.weight_bytes + 4.0 * tokens * m.row_bytes
        t_proj = self.gemm_us(proj, nbytes, min(tokens, 128), m.hidden, k=m.hidden)
        t_score = self.gemm_us(score, 4.0 * tokens * m.row_bytes, min(s, 128), 128,
                               k=max(s, m.attn_qk_head_dim))
        norms = self.copy_us(4.0 * tokens * m.row_bytes)   # two RMSNorms + residual adds
        return 4 * self.launch + t_proj + t_score + norms


class ExpertQueue:
    """The GEMM queue of one GPU: a persistent grouped-GEMM kernel working in *passes*.

    A pass streams the weights of its experts once and applies them to up to ``cap(e)``
    rows of each expert: the fewest whole tiles that make that expert's GEMM compute
    bound (more rows per pass gain nothing, fewer would be limited by weight traffic).
    An expert enters a pass when its ready rows fill ``cap(e)``, or when no more rows will
    come for it (``complete_at[e]``: a precomputed layout knows its counts; the hub says so
    with its done word); its ready rows beyond the cap wait for the next pass, and a
    remainder smaller than a cap rides along when the expert is complete. An item of an
    expert in the running pass that lands while the pass runs joins it (if the cap allows,
    or if it is among the expert's last rows) for the part still ahead, fraction 1 - f (f = elapsed / pass length), and leaves a
    residual f that reads that share of the weights again in a later pass.

    ``share_at(t)`` is the SM share and ``hbm_at(t)`` the HBM share (other traffic such as
    incoming NVLink writes takes the rest; default 1.0) the GEMM has when a pass starts at t.
    """

    def __init__(self, gpu: GpuModel, start: float, share_at, complete_at: dict | None = None,
                 hbm_at=None):
        self.gpu, self.start, self.share_at = gpu, start, share_at
        self.complete_at = complete_at or {}
        self.hbm_at = hbm_at or (lambda _t: 1.0)

    def cap(self, ffn: int, share: float, hbm_share: float = 1.0) -> int:
        """Rows per pass that make an expert compute bound: weight time / row time."""
        g = self.gpu
        m = g.model
        t_w = 3.0 * m.hidden * ffn * m.weight_bytes / (g.hbm * hbm_share)
        rows = t_w * share / g.row_us(ffn)
        return max(1, int(np.ceil(rows / g.tile_rows))) * g.tile_rows

    def run(self, items: list) -> list:
        import dataclasses
        import heapq
        complete_at = dict(self.complete_at)
        for it in items:
            complete_at[it.expert] = max(complete_at.get(it.expert, it.ready), it.ready)
        left: dict = {}              # expert -> rows (x work share) not yet in a pass
        for it in items:
            left[it.expert] = left.get(it.expert, 0.0) + it.padded_rows * it.frac
        heap = [(it.ready, i, it) for i, it in enumerate(items)]
        heapq.heapify(heap)
        seq = len(items)
        waiting: dict = {}           # expert -> ready items (in ready order)
        batches = []
        t = self.start
        while heap or waiting:
            if not waiting:
                t = max(t, heap[0][0])
            while heap and heap[0][0] <= t:
                it = heapq.heappop(heap)[2]
                waiting.setdefault(it.expert, []).append(it)
            share, hshare = self.share_at(t), self.hbm_at(t)
            group, taken = [], {}
            for e, its in list(waiting.items()):
                cap = self.cap(its[0].ffn, share, hshare)
                rows = sum(it.padded_rows * it.frac for it in its)
                done = complete_at[e] <= t
                if rows < cap - 1e-9 and not done:
                    continue
                take, n = [], 0.0
                for it in its:
                    if n >= cap - 1e-9 and not (done and rows - n < cap):
                        break
                    take.append(it)
                    n += it.padded_rows * it.frac
                rest = its[len(take):]
                if rest:
                    waiting[e] = rest
                else:
                    del waiting[e]
                group += take
                taken[e] = n
            if not group:
                later = [complete_at[e] for e in waiting if complete_at[e] > t]
                if heap:
                    later.append(heap[0][0])
                t = min(later)
                continue
            d = self.gpu.expert_batch_us(group, share, hshare)
            if hasattr(self.hbm_at, "mean"):       # the HBM share seen over the whole pass
                hshare = self.hbm_at.mean(t, t + d)
                d = self.gpu.expert_batch_us(group, share, hshare)
            # items of these experts that land while the pass runs join it (cap allowing)
            held = []
            while heap and heap[0][0] < t + d:
                r, i, it = heapq.heappop(heap)
                e = it.expert
                # the expert's last few rows (counts known before this pass ends): ride along
                tail = e in taken and complete_at[e] < t + d and \
                    left[e] - taken[e] <= self.cap(it.ffn, share, hshare) + 1e-9
                over = taken.get(e, 0.0) + it.padded_rows * it.frac \
                    > self.cap(it.ffn, share, hshare) + 1e-9
                if e not in taken or waiting.get(e) or (not tail and over):
                    held.append((r, i, it))
                    continue
                f = min(1.0, max(0.0, (r - t) / d))
                group.append(dataclasses.replace(it, frac=it.frac * (1 - f), wfrac=0.0,
                                                 final=f <= 0.0, joined_at=max(r, t)))
                taken[e] += it.padded_rows * it.frac * (1 - f)
                if f > 0.0:
                    seq += 1
                    held.append((r, seq, dataclasses.replace(it, frac=it.frac * f,
                                                             wfrac=min(it.wfrac, f))))
                d = self.gpu.expert_batch_us(group, share, hshare)
            for h in held:
                heapq.heappush(heap, h)
            for e, n in taken.items():
                left[e] -= n
            batches.append(Batch(t, t + d, group))
            t += d
        return batches
