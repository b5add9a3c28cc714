"""Redundant expert slots: expert parallelism over a GPU count that does not divide the experts.

The layer (:class:`~.layer.Layer`) places ``E / G`` experts on each GPU, or replicates them
when there are more GPUs than experts; a count in between (DeepSeek-V3's 256 experts on
the 72 GPUs of a GB200 NVL72) has no placement. Deployments fill the gap with redundant
experts: every GPU gets the same number of *slots*, ``S = ceil(E / G)``, the spare
``R = S x G - E`` slots hold a second copy of the most loaded experts, and the copies are
arranged so that every GPU gets about the same load (DeepSeek-V3 technical report,
arXiv 2412.19437 sec 3.4: 'duplicates high-load experts', 32 redundant experts in
prefill, 'besides the original 8 experts it hosts, it will also host one additional
redundant expert' -- 256 + 32 = 288 slots -- experts rearranged among GPUs 'based on the
observed loads'). :func:`redundant_slots` does the same and returns a model of ``S x G``
slots and the routing rewritten to slot ids, which the layer then places ``S`` per GPU
like any other model.

What stays an ASSUMPTION: the load statistics a deployment collects are this batch's own routing
(an ideal predictor of the hot experts); a hot expert's rows alternate between its two
copies in token order (deployments pick a copy per token; either way each copy gets half);
the gate is priced over the slots (``S x G`` logits instead of ``E``: 12 % more router
weights for DeepSeek-V3 at EP72, a fraction of a microsecond at decode).
"""
from __future__ import annotations

import numpy as np

from .config import ModelConfig
from .workload import Routing


def needs_slots(experts: int, gpus: int) -> bool:
    """True when ``experts`` neither divide over ``gpus`` nor ``gpus`` over ``experts``."""
    return gpus < experts and experts % gpus != 0


def pack(load: np.ndarray, gpus: int) -> list:
    """EPLB-style balanced packing: the ``R`` most loaded experts get a second copy, then
    every copy (heaviest first, each carrying its expert's load / copies) goes to the GPU
    with the least load that has a free slot and no copy of that expert yet.
    Returns ``slots[e]``: the slot ids (``gpu x S + i``) of expert e's copies."""
    E = len(load)
    S = -(-E // gpus)
    copies = np.ones(E, dtype=np.int64)
    copies[np.argsort(-load, kind="stable")[:S * gpus - E]] += 1
    units = sorted(((load[e] / copies[e], e) for e in range(E) for _ in range(copies[e])),
                   key=lambda u: (-u[0], u[1]))
    gpu_load, used = np.zeros(gpus), np.zeros(gpus, dtype=np.int64)
    slots: list = [[] for _ in range(E)]
    for w, e in units:
        taken = {s // S for s in slots[e]}
        free = [g for g in range(gpus) if used[g] < S and g not in taken]
        g = min(free, key=lambda x: (gpu_load[x], x))
        slots[e].append(g * S + int(used[g]))
        used[g] += 1
        gpu_load[g] += w
    return slots


def to_slots(experts: np.ndarray, slots: list) -> np.ndarray:
    """Expert ids -> slot ids: the rows of an expert go to its copies in turn (row order)."""
    flat = experts.reshape(-1)
    order = np.argsort(flat, kind="stable")              # rows of each expert, in row order
    counts = np.bincount(flat, minlength=len(slots))
    starts = np.cumsum(counts) - counts
    out = np.empty_like(flat)
    for e, s in enumerate(slots):
        idx = order[starts[e]:starts[e] + counts[e]]
        out[idx] = np.asarray(s)[np.arange(counts[e]) % len(s)]
    return out.reshape(experts.shape)


def redundant_slots(model: ModelConfig, routing: Routing, gpus: int):
    """(model, routing) as the layer needs them on ``gpus`` GPUs: unchanged when the experts
    place evenly, else a model of ``ceil(E / G) x G`` slots and the routing in slot ids
    (see the module docstring). The slot model keeps every other number of the model."""
    E = model.experts
    if not needs_slots(E, gpus):
        return model, routing
    slots = pack(routing.load().astype(float), gpus)
    n = -(-E // gpus) * gpus
    slot_model = model.replace(experts=n, routing_groups=1, routing_topk_groups=1,
                               description=f"{model.description} [{E} experts in {n} slots, "
                                           f"{n - E} redundant]")
    return slot_model, Routing(to_slots(routing.experts, slots), n)
