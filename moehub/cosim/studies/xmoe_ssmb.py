"""Sequence-sharded MoE blocks (X-MoE study, part 3): memory and time against the
tensor-parallel block that runs the whole sequence on every rank.

With tensor parallelism of degree TP the attention block leaves every TP rank with the
whole sequence. The plain TP block runs the MoE block on all of it on every rank (its
dispatch and combine tensors are the full size on each). X-MoE's SSMB splits the sequence
over the TP ranks inside the MoE block (each routes, dispatches, computes and combines
1/TP of the tokens) and all-gathers the outputs before the next dense block (X-MoE blog,
"What we fixed" 3; the review's "cutting the memory of dispatch/combine activations by
the tensor-parallel group size").

* memory: the MoE layer's buffers (:mod:`.xmoe_memory`) at tokens/TP against tokens;
* time: the MoE layer at tokens/TP plus the all-gather of the outputs over the TP ranks
  of a node (an NCCL-style all-gather on the calibrated collective model:
  :meth:`~moehub.cosim.components.Components.collective_latency_us` and
  :meth:`~moehub.cosim.components.Components.collective_efficiency`), against the layer
  at the whole sequence. ASSUMPTION: the TP ranks sit in one node and the expert-parallel
  group is the system's GPUs in both cases.
"""
from __future__ import annotations

from ..components import GBps, Components


def allgather_us(comp: Components, tp: int, tokens: int, row_bytes: int) -> float:
    """All-gather of ``tokens / tp`` output rows from each of ``tp`` ranks in one node:
    latency (a ring: one hop per rank) + the bytes every rank receives at the collective's
    efficiency for its message size on the scale-up link."""
    if tp <= 1:
        return 0.0
    part = tokens / tp * row_bytes
    recv = (tp - 1) * part
    bw = comp.port_GBps(False) * GBps * comp.collective_efficiency(part, False)
    return comp.collective_latency_us("allgather", tp, 1) + recv / bw


def degrees(tokens: int, tps=(1, 2, 4, 8)) -> list:
    """The TP degrees that split ``tokens`` into whole shards."""
    return [tp for tp in tps if tokens % tp == 0 and tokens // tp >= 1]
