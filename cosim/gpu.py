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
* :class:`ExpertQueue` serves work items (expert, rows, ready time) on one GPU as a
  persistent grouped-GEMM kernel working in passes (see its docstring): weights are read
  once per pass, so a backlog amortises them the way a large grouped GEMM does, while an
  expert started before its rows are all in pays for reading part of them again.
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
        """One grouped GEMM pass over items: GEMM1 + act + GEMM2 of each; each expert's
        weights are streamed once per pass (the largest share any of its items needs)."""
        m = self.model
        H = m.hidden
        flops = 0.0
        abytes = 0.0
        wshare: dict = {}
        for it in items:
            flops += 6.0 * it.padded_rows * H * it.ffn * it.frac
            abytes += it.rows * (2 * H + 3 * it.ffn) * m.act_bytes * it.frac
            wshare[it.expert] = max(wshare.get(it.expert, 0.0), it.wfrac)
        ffn_of = {it.expert: it.ffn for it in items}
        wbytes = sum(3.0 * H * ffn_of[e] * m.weight_bytes * w for e, w in wshare.items())
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
    """

    def __init__(self, gpu: GpuModel, start: float, share_at, complete_at: dict | None = None):
        self.gpu, self.start, self.share_at = gpu, start, share_at
        self.complete_at = complete_at or {}

    def cap(self, ffn: int, share: float) -> int:
        g = self.gpu
        m = g.model
        t_w = 3.0 * m.hidden * ffn * m.weight_bytes / g.hbm
        rows = t_w * g.peak * g.gemm_eff(g.tile_rows, min(2 * ffn, m.hidden)) * share \
            / (6.0 * m.hidden * ffn)
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
            share = self.share_at(t)
            group, taken = [], {}
            for e, its in list(waiting.items()):
                cap = self.cap(its[0].ffn, share)
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
            d = self.gpu.expert_batch_us(group, share)
            # items of these experts that land while the pass runs join it (cap allowing)
            held = []
            while heap and heap[0][0] < t + d:
                r, i, it = heapq.heappop(heap)
                e = it.expert
                # the expert's last few rows (counts known before this pass ends): ride along
                tail = e in taken and complete_at[e] < t + d and \
                    left[e] - taken[e] <= self.cap(it.ffn, share) + 1e-9
                if e not in taken or waiting.get(e) or (
                        not tail and taken[e] + it.padded_rows * it.frac > self.cap(it.ffn, share) + 1e-9):
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
                d = self.gpu.expert_batch_us(group, share)
            for h in held:
                heapq.heappush(heap, h)
            for e, n in taken.items():
                left[e] -= n
            batches.append(Batch(t, t + d, group))
            t += d
        return batches
