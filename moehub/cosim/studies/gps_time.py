"""The time of one MoE layer under a placement: the co-simulation's bulk expert-parallel
path, phase by phase, from the same calibrated components.

The guideline map needs thousands of layers, so the study costs each phase directly
(:class:`CostModel`) with the co-simulation's calibrated parts instead of running the
fluid network: the gate, layout, count exchange, host sync and permute of the bulk system
(:mod:`moehub.cosim.systems.bulk`, Megatron-Core dispatcher), an all-to-all as NCCL
latency plus the busiest port's bytes at the collective's efficiency for each flow's size
(:class:`~moehub.cosim.components.Components`), each GPU's experts as a grouped SwiGLU GEMM
(contiguous layout; every replica streams its own weights), the combine and the reduce.
Phases are bulk-synchronous: a phase ends on its slowest GPU. :mod:`.gps_cosim` checks
this model against the co-simulation's ``bulk`` system on the same placement.

Three additions carry the study:

* **Weight copies** (a new replica): the expert's weight bytes from its home GPU over the
  link at the collective efficiency of a large message; with ``copy="hidden"`` they are
  free (the paper's assumption), with ``"exposed"`` they run during the attention block
  and whatever does not fit is on the critical path.
* **Token-to-Expert pre-dispatch** (ASSUMPTION, the paper's premise that token-level
  prediction saves communication): a row whose destination was predicted leaves during
  the attention block (its output projection's epilogue stores it at the predicted GPU);
  it shares the attention window with the weight copies; a wrong prediction's row was
  sent for nothing and its real row goes after the gate.
* **The replica split**: software with replicas runs one more index kernel to assign rows
  to replicas (ASSUMPTION: a layout-sized kernel); the hub's per-row choice needs none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config import ModelConfig, SystemConfig
from ...spec.config import load_hub_config
from ..components import Components
from ..gpu import GpuModel
from ..network import GBps, flow_wire_bytes

COPY_MODES = ("hidden", "exposed")


@dataclass
class LayerTime:
    """A layer's phases (us) on the critical path, and what caused them."""
    phases: dict = field(default_factory=dict)
    max_mean_rows: float = 1.0       #: busiest GPU's rows / mean rows
    remote_fraction: float = 0.0     #: rows that crossed a link / all rows
    copies: int = 0                  #: weight copies this layer needed

    @property
    def total_us(self) -> float:
        return float(sum(self.phases.values()))


class CostModel:
    """Phase costs of one MoE layer of ``model`` on ``system`` with ``tokens`` per GPU."""

    def __init__(self, system: SystemConfig, model: ModelConfig, tokens: int, seq_len: int):
        self.sys, self.model, self.T = system, model, tokens
        self.G, self.E, self.k = system.gpus, model.experts, model.topk
        self.comp = Components(system)
        self.gpu = GpuModel(system, model, load_hub_config(model.hub_config).tile_rows)
        self.window_us = self.gpu.attention_us(tokens, seq_len)
        self.expert_bytes = 3.0 * model.hidden * model.expert_ffn * model.weight_bytes
        self.nodes = system.nodes
        node = np.array([system.node_of(g) for g in range(self.G)])
        self.inter = node[:, None] != node[None, :]
        self.fixed_us = self._fixed()

    # ------------------------------------------------------------------ fixed phases
    def _fixed(self) -> dict:
        """The bulk system's phases before its all-to-all (same for every placement)."""
        g, comp, T, k, E, G = self.gpu, self.comp, self.T, self.k, self.E, self.G
        return {"gate": g.gate_us(T),
                "layout": g.small_kernel_us(T * E * 4 + T * k * 8),
                "count exchange": comp.small_collective_us(G, self.nodes, 4.0 * E) if G > 1 else 0.0,
                "host sync": comp.host_sync_us,
                "permute": g.permute_us(T * k) + comp.launch_us}

    def split_us(self) -> float:
        """ASSUMPTION: assigning rows to replicas is one more layout-sized index kernel."""
        return self.gpu.small_kernel_us(self.T * self.k * 8)

    # ------------------------------------------------------------------ links
    def port_us(self, nbytes: np.ndarray, eff) -> float:
        """Time of the busiest port for ``nbytes[s, d]`` (payload; wire headers added),
        each flow at ``eff(bytes, inter_node)`` of its port; rows to the same GPU are a
        local copy."""
        sys = self.sys
        wire = flow_wire_bytes(nbytes, sys.link_max_payload_bytes, sys.link_header_bytes)
        local = np.diag(wire) / (sys.local_copy_GBps * GBps)
        off = ~np.eye(self.G, dtype=bool) & (wire > 0)
        t = np.zeros_like(wire)
        for inter in (False, True):
            m = off & (self.inter == inter)
            if not m.any():
                continue
            e = np.array([eff(b, inter) for b in wire[m]])
            t[m] = wire[m] / (e * self.comp.port_GBps(inter) * GBps)
        ports = [local.max(initial=0.0)]
        for inter in (False, True):
            tt = np.where(self.inter == inter, t, 0.0)
            ports += [tt.sum(axis=1).max(initial=0.0), tt.sum(axis=0).max(initial=0.0)]
        return float(max(ports))

    def alltoall_us(self, rows: np.ndarray, row_bytes: float) -> float:
        """An all-to-all of ``rows[s, d]``: NCCL latency + the busiest port's bytes."""
        if self.G <= 1 or not rows.any():
            return 0.0
        lat = self.comp.collective_latency_us("alltoall", self.G, self.nodes)
        return lat + self.port_us(rows * row_bytes, self.comp.collective_efficiency)

    def copy_bytes(self, copies: list, home: np.ndarray) -> np.ndarray:
        """Weight bytes[s, d] of the copies (expert, GPU), each from the expert's home."""
        out = np.zeros((self.G, self.G))
        for e, g in copies:
            out[home[e], g] += self.expert_bytes
        return out

    # ------------------------------------------------------------------ GPUs
    def gemm_us(self, rows: np.ndarray) -> float:
        """One GPU's experts (rows per replica it holds) as the bulk system runs them: sort
        by expert, a grouped SwiGLU GEMM, unsort."""
        m, g = self.model, self.gpu
        r = [float(x) for x in rows if x > 0]
        if not r:
            return 0.0
        t = self.comp.grouped_gemm_us([int(round(x)) for x in r], m.hidden, m.expert_ffn,
                                      "contiguous", g.dtype, weight_bytes=m.weight_bytes,
                                      act_bytes=m.act_bytes)
        if len(r) > 1:
            t += 2 * g.permute_us(int(round(sum(r))))
        return t

    # ------------------------------------------------------------------ a layer
    def layer(self, flow: np.ndarray, *, pre: np.ndarray | None = None,
              wasted: np.ndarray | None = None, copies: list = (), home=None,
              predictor_us: float = 0.0, split: bool = False, copy: str = "exposed",
              gemm_rows: np.ndarray | None = None, post: np.ndarray | None = None) -> LayerTime:
        """Time of a layer whose rows go ``flow[s, e, g]`` (source, expert, GPU).

        ``pre``: the part of ``flow`` sent during attention (Token-to-Expert), ``wasted``
        rows[s, d] pre-sent to a wrong GPU; ``copies`` (expert, GPU) weight copies from
        ``home``; ``split``: software assigns rows to replicas. ``gemm_rows`` (experts x
        GPUs) and ``post`` (rows[s, d] after the gate) override what ``flow`` implies
        (the scalar error models scale them)."""
        G = self.G
        m = self.model
        rows_eg = flow.sum(axis=0) if gemm_rows is None else gemm_rows
        traffic = flow.sum(axis=1)
        early = pre.sum(axis=1) if pre is not None else np.zeros((G, G))
        late = traffic - early if post is None else post
        ph = {}
        if predictor_us:
            ph["predictor"] = predictor_us
        win = early * m.dispatch_row_bytes
        if wasted is not None:
            win = win + wasted * m.dispatch_row_bytes
        if copy == "exposed" and copies:
            win = win + self.copy_bytes(list(copies), home)
        if win.any():
            busy = self.port_us(win, lambda b, inter: self.comp.put_efficiency(
                m.dispatch_row_bytes if b < self.expert_bytes else b, inter))
            ph["exposed window"] = max(0.0, busy - self.window_us)
        ph.update(self.fixed_us)
        if split:
            ph["replica split"] = self.split_us()
        ph["dispatch"] = self.alltoall_us(late, m.dispatch_row_bytes)
        ph["expert GEMM"] = max(self.gemm_us(rows_eg[:, g]) for g in range(G))
        ph["combine"] = self.alltoall_us(traffic.T, m.combine_row_bytes)
        ph["reduce"] = self.gpu.reduce_us(self.T)
        per_gpu = rows_eg.sum(axis=0)
        total = float(traffic.sum())
        return LayerTime(ph, float(per_gpu.max() / max(total / G, 1e-12)),
                         float((total - np.trace(traffic)) / max(total, 1e-12)), len(copies))
