"""Costs of eager PyTorch MoE code: the pieces the papers' baselines are made of.

The baselines MoE-Hub, Comet and FlashDMoE measured against (Megatron-LM's AllGather and
AlltoAll token dispatchers with per-expert or grouped GEMMs, FasterMoE, Tutel) run the
layer as eager PyTorch: every tensor op is a kernel launched by the host, and every op
whose output size depends on the data makes the host wait for the GPU. Each cost here is
a count read from the code times a calibrated component (:mod:`..components`,
``config/system/*.yaml``); no new constant:

* **kernels**: a chain of ``n`` small eager kernels costs ``n`` launches plus its bytes
  at the copy-kernel rate, as every system's small kernels do
  (:meth:`~..gpu.GpuModel.small_kernel_us`).
* **host syncs**: ``tensor.cpu()``, ``.tolist()``/``.item()``, ``torch.cuda.current_stream()
  .synchronize()`` and every ``masked_select``/``nonzero`` (its output size must reach
  the host before the output can be allocated) cost one ``d2h_sync_us`` each: the
  measured 4-byte D2H copy + ``cudaStreamSynchronize`` (CALIBRATION.md sec 2). The host
  also waits for all earlier work on the stream, which the timeline's order gives.
  ASSUMPTION: a bare stream synchronize costs what the measured D2H + sync costs.
* **Megatron's unfused permute** (``moe_utils.permute``, Megatron-LM core v0.8-v0.10):
  ``routing_map.bool().T.contiguous()``, ``torch.arange(...).expand``, ``masked_select``
  of the token indices (and of the probs), ``index_select`` of the rows -- kernels plus
  one host sync per ``masked_select``, the rows read and written once.
* **small collectives** (the count all-gather): NCCL's latency for the kind of
  collective (:meth:`~..components.Components.collective_latency_us`) plus the bytes at
  the small-message bandwidth.
"""
from __future__ import annotations

import numpy as np

from ..layer import Layer


def kernels_us(L: Layer, n: int, nbytes: float = 0.0) -> float:
    """``n`` eager kernels moving ``nbytes`` (reads + writes) in all. Eager whatever the
    system's ``launch_mode``: code that syncs with the host between its ops is not
    captured in a CUDA graph."""
    return n * L.comp.launch_costs("eager")[0] + L.gpu.copy_us(nbytes)


def syncs_us(L: Layer, n: int) -> float:
    """``n`` host syncs (D2H copy + stream synchronize each)."""
    return n * L.comp.d2h_sync_us


def masked_select_steps(L: Layer, mask_bytes: float, out_bytes: float) -> list:
    """One ``masked_select``: a count/nonzero kernel over the mask, the host sync for the
    output size, the gather kernel writing ``out_bytes``, as ``(phase, us)`` steps."""
    return [("permute", kernels_us(L, 1, mask_bytes)), ("host sync", syncs_us(L, 1)),
            ("permute", kernels_us(L, 1, mask_bytes + 2 * out_bytes))]


def permute_steps(L: Layer, tokens: int, experts: int, rows: int, row_bytes: float,
                  with_probs: bool) -> list:
    """Megatron's ``permute(tokens, routing_map, probs)`` over a ``tokens x experts``
    routing map selecting ``rows`` rows, as ``(phase, us)`` steps (its host syncs apart)."""
    mask = tokens * experts
    steps = [("permute", kernels_us(L, 3, 2 * mask + 8 * mask))]   # bool, .T.contiguous, arange
    steps += masked_select_steps(L, mask + 8 * mask, 8 * rows)     # the token indices
    if with_probs:                                                 # probs.T.contiguous, select
        steps += [("permute", kernels_us(L, 1, 8 * mask))]
        steps += masked_select_steps(L, mask + 4 * mask, 4 * rows)
    return steps + [("permute", kernels_us(L, 1, 2 * rows * row_bytes))]   # index_select


def lay(res, gpus, t: float, steps: list, track: str = "control") -> float:
    """Steps ``(phase, us)`` one after another from ``t`` on each of ``gpus`` (the same
    on each); returns when the last ends. Consecutive steps of one phase form one bar."""
    merged: list = []
    for name, dt in steps:
        if merged and merged[-1][0] == name:
            merged[-1][1] += dt
        else:
            merged.append([name, dt])
    for name, dt in merged:
        for g in gpus:
            res.add(g, track, name, t, t + dt)
        t += dt
    return t


def sync_count(steps: list) -> int:
    return sum(1 for name, _ in steps if name == "host sync")


def allgather_us(L: Layer, bytes_per_rank: float) -> float:
    """An NCCL all-gather of ``bytes_per_rank`` from every rank (counts, a routing map,
    router probs), off the layer's network: the all-gather's latency (a ring: one hop per
    rank) plus the busiest port's bytes at the collective's rate for that size -- the
    port bytes of an all-gather equal those of an all-to-all of the same bytes per peer
    (:meth:`~..components.Components.alltoall_us`, whose latency it replaces)."""
    if L.G <= 1:
        return 0.0
    comp = L.comp
    body = comp.alltoall_us(bytes_per_rank, L.G, L.nodes)
    if bytes_per_rank > 0:
        body -= comp.collective_latency_us("alltoall", L.G, L.nodes)
    return comp.collective_latency_us("allgather", L.G, L.nodes) + max(body, 0.0)


def worst_memory(per_gpu: list) -> dict:
    """Receive memory of the GPU that needs the most (the shape of
    :func:`moehub.cosim.memory.system_memory`'s answer): bytes, which GPU, the parts."""
    tot = [sum(b.values()) for b in per_gpu]
    g = int(np.argmax(tot))
    return {"bytes": int(tot[g]), "gpu": g, "parts": {k: int(v) for k, v in per_gpu[g].items()}}
