"""Communication free (a bound): rows are at their experts when routing ends and outputs
at their owners when the GEMMs end; gate, GEMMs and reduce remain."""
from __future__ import annotations

import numpy as np

from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from . import common as C

PHASES = ["gate", "expert GEMM", "reduce"]
LABEL = "Ideal: communication free"
KIND = "bound"     #: a bound, not a system (see :mod:`moehub.cosim.systems`)


def run(L: Layer) -> SystemResult:
    res = SystemResult("ideal", LABEL)
    g, G = L.gpu, L.G
    t_gate = C.gate(L, res)
    gemm_end, shared_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        items = C.shared_item(L, t_gate) + [
            WorkItem(t_gate, e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e,
                     landed=t_gate, known=t_gate)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, gemm_end[d], shared_end[d] = C.run_queue(L, res, d, items, t_gate, C.full_share)
    recv = np.zeros(G)
    for o in range(G):
        ds = np.nonzero(L.counts[o])[0]
        recv[o] = gemm_end[ds].max() if len(ds) else t_gate
    res.gpu_end = C.reduce(L, res, recv, shared_end, poll=False)
    return res
