"""GPU cost model: kernels as rooflines, expert GEMMs as a queue of tile batches.

Every parameter comes from :class:`SystemConfig` (and its ``software`` costs) or the model
config; nothing here is a tuning constant.

* A kernel costs ``kernel_launch_us`` plus its body.
* A copy / elementwise body moves bytes at ``hbm_GBps x hbm_efficiency``.
* A GEMM body is ``max(flops / (peak x eff x SM share), bytes / HBM)`` where
  ``eff = gemm_eff_max x M/(M + half_m) x N/(N + half_n)`` depends on the tile shape
  (M = the tile's rows, N = the output width of the GEMM) and the SM share is the part of
  the GPU left to compute while communication kernels hold ``comm_sms`` SMs.
* An expert of a SwiGLU MoE does GEMM1 (rows x hidden -> rows x 2 ffn, gate and up), the
  activation, and GEMM2 (rows x ffn -> rows x hidden): 6 x rows x hidden x ffn flops on
  rows padded to whole tiles; it reads its 3 x hidden x ffn weights once per batch.
* :class:`ExpertQueue` serves work items (expert, rows, ready time) on one GPU in order
  of readiness; when the GPU is free it takes *every* item already ready as one grouped
  GEMM batch (weights read once per expert in the batch), so a backlog amortises the weight
  traffic the way a large grouped GEMM does, while a lone early tile pays it in full.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.cosim_schema import ModelConfig, SystemConfig
from .network import GBps


@dataclass
class WorkItem:
    ready: float        #: earliest start (us)
    expert: int         #: local expert index (-1: shared expert / dense work)
    rows: int           #: real rows
    padded_rows: int    #: rows the tensor cores compute (whole tiles)
    ffn: int            #: intermediate size of this expert
    key: object = None  #: caller's handle (e.g. (expert, tile))


@dataclass
class Batch:
    start: float
    end: float
    items: list


class GpuModel:
    def __init__(self, system: SystemConfig, model: ModelConfig, tile_rows: int):
        self.sys, self.model, self.tile_rows = system, model, tile_rows
        sw = system.software
        self.launch = sw.kernel_launch_us
        self.hbm = system.hbm_GBps * GBps                      # B/us
        self.copy_bw = self.hbm * sw.hbm_efficiency            # B/us
        self.peak = system.peak_bf16_TFLOPs * 1e6              # flop/us

    # ------------------------------------------------------------------ basics
    def gemm_eff(self, m: float, n: float) -> float:
        sw = self.sys.software
        return sw.gemm_eff_max * m / (m + sw.gemm_eff_half_m) * n / (n + sw.gemm_eff_half_n)

    def copy_us(self, nbytes: float) -> float:
        """Body of a copy/elementwise kernel moving ``nbytes`` (reads + writes)."""
        return nbytes / self.copy_bw

    def gemm_us(self, flops: float, nbytes: float, m: float, n: float, sm_share: float = 1.0) -> float:
        return max(flops / (self.peak * self.gemm_eff(m, n) * sm_share), nbytes / self.hbm)

    # ------------------------------------------------------------------ MoE kernels
    def gate_us(self, tokens: int) -> float:
        """Router: logits GEMM (tokens x hidden x experts), softmax and top-k (one kernel)."""
        m = self.model
        flops = 2.0 * tokens * m.hidden * m.experts
        nbytes = tokens * m.row_bytes + m.hidden * m.experts * m.weight_bytes \
            + tokens * m.experts * 4 + tokens * m.topk * 8
        return self.launch + self.gemm_us(flops, nbytes, min(tokens, self.tile_rows), m.experts)

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

    def expert_batch_us(self, items: list, sm_share: float) -> float:
        """One grouped GEMM over ready items: GEMM1 + act + GEMM2 of each, weights once per expert."""
        m = self.model
        H = m.hidden
        flops = 0.0
        wbytes = 0.0
        abytes = 0.0
        seen = set()
        for it in items:
            flops += 6.0 * it.padded_rows * H * it.ffn
            abytes += it.rows * (2 * H + 3 * it.ffn) * m.act_bytes  # in, out, act round trip
            if it.expert not in seen:
                seen.add(it.expert)
                wbytes += 3.0 * H * it.ffn * m.weight_bytes
        ffn = max(it.ffn for it in items)
        eff_m = min(self.tile_rows, max(it.padded_rows for it in items))
        return self.gemm_us(flops, wbytes + abytes, eff_m, min(2 * ffn, H), sm_share)

    def dense_ffn_us(self, tokens: int, ffn: int) -> float:
        m = self.model
        flops = 6.0 * self.padded(tokens) * m.hidden * ffn
        nbytes = 3.0 * m.hidden * ffn * m.weight_bytes + tokens * (2 * m.hidden + 3 * ffn) * m.act_bytes
        return self.launch + self.gemm_us(flops, nbytes, min(tokens, 128), min(2 * ffn, m.hidden))

    def attention_us(self, tokens: int, seq_len: int) -> float:
        """Prefill attention block: projections (a GEMM on the attention weights) and the
        causal score/context products over sequences of ``min(seq_len, tokens)`` tokens."""
        m = self.model
        s = min(seq_len, tokens)
        proj = 2.0 * tokens * m.attn_params
        ctx = (s + 1) / 2.0
        score = 2.0 * tokens * ctx * m.attn_heads * (m.attn_qk_head_dim + m.attn_v_head_dim)
        nbytes = m.attn_params * m.weight_bytes + 4.0 * tokens * m.row_bytes
        t_proj = self.gemm_us(proj, nbytes, min(tokens, 128), m.hidden)
        t_score = self.gemm_us(score, 4.0 * tokens * m.row_bytes, min(s, 128), 128)
        norms = self.copy_us(4.0 * tokens * m.row_bytes)   # two RMSNorms + residual adds
        return 4 * self.launch + t_proj + t_score + norms


class ExpertQueue:
    """The list scheduler described in the module docstring.

    When the GPU is free it runs, as one batch, the ready rows of every expert that is
    *runnable*: its ready rows make its GEMM compute bound (``compute_bound``), or no more
    rows will come for it (``complete_at[expert]``: when the kernel can know its rows are all
    in -- a precomputed layout knows the counts, the hub says so with its done word). An
    expert with only a few early rows waits: run alone they would stream its whole weights,
    which its later rows would then read again. If nothing is runnable the GPU waits for
    the next arrival.
    """

    def __init__(self, gpu: GpuModel, start: float, share_at, complete_at: dict | None = None):
        self.gpu, self.start, self.share_at = gpu, start, share_at
        self.complete_at = complete_at

    def _min_rows(self, ffn: int, share: float) -> float:
        """Rows at which an expert's GEMM does as much compute time as weight reading."""
        g = self.gpu
        m = g.model
        t_w = 3.0 * m.hidden * ffn * m.weight_bytes / g.hbm
        return t_w * g.peak * g.sys.software.gemm_eff_max * share / (6.0 * m.hidden * ffn)

    def run(self, items: list) -> list:
        items = sorted(items, key=lambda it: it.ready)
        complete_at = dict(self.complete_at or {})
        for it in items:
            complete_at[it.expert] = max(complete_at.get(it.expert, it.ready), it.ready)
        batches = []
        waiting: dict = {}      # expert -> ready items not yet run
        rows: dict = {}
        t, ptr, n = self.start, 0, len(items)
        while ptr < n or waiting:
            if not waiting:
                t = max(t, items[ptr].ready)
            while ptr < n and items[ptr].ready <= t:
                it = items[ptr]
                waiting.setdefault(it.expert, []).append(it)
                rows[it.expert] = rows.get(it.expert, 0) + it.padded_rows
                ptr += 1
            share = self.share_at(t)
            run = [e for e, its in waiting.items()
                   if complete_at[e] <= t or rows[e] >= self._min_rows(its[0].ffn, share)]
            if not run:
                later = [complete_at[e] for e in waiting if complete_at[e] > t]
                if ptr < n:
                    later.append(items[ptr].ready)
                t = min(later)
                continue
            group = [it for e in run for it in waiting.pop(e)]
            for e in run:
                rows.pop(e)
            d = self.gpu.expert_batch_us(group, share)
            batches.append(Batch(t, t + d, group))
            t += d
        return batches
