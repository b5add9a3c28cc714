"""The co-simulation's own layer on a study placement: the check of :mod:`.gps_time`.

:class:`PlacedLayer` is a :class:`~moehub.cosim.layer.Layer` whose rows go where a
placement sends them (replicas included) instead of to the expert's home: each GPU's
local experts are the replicas it holds, so the co-simulation's systems (the ``bulk``
system here: the Megatron-Core dispatcher the study's cost model follows) run the layer
through the fluid network, the GEMM queue and the HBM model unchanged.
"""
from __future__ import annotations

import numpy as np

from ..config import ModelConfig, SystemConfig, WorkloadConfig
from ..layer import Layer
from ..systems import run_system
from ..workload import Routing


class PlacedLayer(Layer):
    """A layer whose row i (source, token, slot order, as :class:`Layer`) goes to GPU
    ``dest[i]``; ``held[e, g]``: GPU g holds a replica of expert e."""

    def __init__(self, system: SystemConfig, model: ModelConfig, workload: WorkloadConfig,
                 routing: Routing, dest: np.ndarray, held: np.ndarray):
        super().__init__(system, model, workload, routing)
        dest = np.asarray(dest, dtype=np.int64)
        if not held[self.exp, dest].all():
            raise ValueError("a row goes to a GPU that holds no replica of its expert")
        slot = np.cumsum(held, axis=0) - 1                # local index of (expert, GPU)
        self.dest, self.lexp = dest, slot[self.exp, dest]
        self.E_local = int(held.sum(axis=0).max())
        G = self.G
        self.counts = np.zeros((G, G), dtype=np.int64)
        np.add.at(self.counts, (self.src, self.dest), 1)
        self.expert_rows = np.zeros((G, self.E_local), dtype=np.int64)
        np.add.at(self.expert_rows, (self.dest, self.lexp), 1)
        for cache in ("_groups", "_flow_orders", "_rate_memo"):
            self.__dict__.pop(cache, None)
        self._dedup()


def bulk_us(system, model, workload, routing, dest, held) -> float:
    """The co-simulation's bulk system on the placed layer (layer latency, us)."""
    L = PlacedLayer(system, model, workload, routing, dest, held)
    return run_system("bulk", L).latency_us
