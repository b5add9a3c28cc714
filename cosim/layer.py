"""One MoE layer on one system: placement, rows, the network and shared helpers.

:class:`Layer` turns (system, model, workload) configs and a routing into the arrays every
system model uses: one entry per routed row (source GPU, token, top-k slot, expert,
destination GPU, local expert), the hub config of the destination GPUs, the GPU cost
model, and a factory for the fluid network (:meth:`Layer.network`).

Expert placement: with G <= E GPUs, GPU g holds experts g*E/G .. (g+1)*E/G - 1. With more
GPUs than experts (G = R x E), every expert has R replicas and source s sends to replica
floor(s R / G), which keeps a node's traffic inside the node when nodes hold whole copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config.schema import ConfigError, HubConfig, load_hub_config
from ..config.cosim_schema import ModelConfig, SystemConfig, WorkloadConfig
from .gpu import GpuModel
from .network import GBps, FluidNetwork, flow_wire_bytes
from .workload import Routing


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


@dataclass
class Phase:
    gpu: int
    track: str      #: control | send | hub | gemm | combine
    name: str
    start: float
    end: float


@dataclass
class SystemResult:
    name: str
    label: str
    phases: list = field(default_factory=list)
    markers: list = field(default_factory=list)    #: (gpu, track, time) e.g. tile-ready flags
    gpu_end: np.ndarray | None = None               #: when each GPU's layer output is complete
    extra: dict = field(default_factory=dict)

    @property
    def latency_us(self) -> float:
        return float(np.max(self.gpu_end))

    def add(self, gpu, track, name, start, end):
        if end > start:
            self.phases.append(Phase(int(gpu), track, name, float(start), float(end)))


class Layer:
    def __init__(self, system: SystemConfig, model: ModelConfig, workload: WorkloadConfig,
                 routing: Routing, hub_base: HubConfig | None = None):
        self.sys, self.model, self.wl, self.routing = system, model, workload, routing
        G, E, k, T = system.gpus, model.experts, model.topk, workload.tokens_per_gpu
        if routing.gpus != G or routing.tokens != T or routing.topk != k:
            raise ConfigError(f"routing shape {routing.experts.shape} does not match "
                              f"{G} GPUs x {T} tokens x top-{k}")
        self.G, self.E, self.k, self.T = G, E, k, T
        if G <= E:
            if E % G:
                raise ConfigError(f"system.gpus = {G}: {E} experts of {model.name} do not divide "
                                  f"evenly over {G} GPUs")
            self.E_local, self.replicas = E // G, 1
        else:
            if G % E:
                raise ConfigError(f"system.gpus = {G}: not a multiple of the {E} experts of "
                                  f"{model.name} (needed to replicate experts)")
            self.E_local, self.replicas = 1, G // E
        # one entry per routed row, sources in order, tokens in order, slots in order
        src = np.repeat(np.arange(G), T * k)
        tok = np.tile(np.repeat(np.arange(T), k), G)
        slot = np.tile(np.arange(k), G * T)
        exp = routing.experts.reshape(-1).astype(np.int64)
        if self.replicas == 1:
            dest, lexp = exp // self.E_local, exp % self.E_local
        else:
            dest, lexp = exp + E * ((src * self.replicas) // G), np.zeros_like(exp)
        self.src, self.tok, self.slot, self.exp, self.dest, self.lexp = src, tok, slot, exp, dest, lexp
        self.N = len(src)
        self.counts = np.zeros((G, G), dtype=np.int64)       # rows src -> dest
        np.add.at(self.counts, (src, dest), 1)
        self.expert_rows = np.zeros((G, self.E_local), dtype=np.int64)  # rows per (dest, local expert)
        np.add.at(self.expert_rows, (dest, lexp), 1)
        # hub config of every destination GPU
        base = hub_base or load_hub_config(model.hub_config)
        max_rows = max(_pow2_at_least(G * T), base.max_tile_rows, base.tile_rows)
        token_bits = max(base.token_bits, int(T - 1).bit_length())
        self.hub = base.replace(sources=G, experts=self.E_local, row_bytes=model.row_bytes,
                                topk=k, max_rows_per_expert=max_rows, token_bits=token_bits,
                                name=f"{base.name}@{model.name}x{G}")
        self.tile_rows = self.hub.tile_rows
        self.gpu = GpuModel(system, model, self.tile_rows)
        sw = system.software
        self.row_bytes = model.row_bytes
        # wire bytes of one row: software puts/copies use the link's largest payload,
        # the hub's producers send chunk_bytes packets (one per hub chunk)
        self.row_wire_sw = float(flow_wire_bytes(self.row_bytes, system.link_max_payload_bytes,
                                                 system.link_header_bytes))
        self.pkt_wire_hub = self.hub.chunk_bytes + system.link_header_bytes
        self.row_wire_hub = float(self.hub.chunks_per_row * self.pkt_wire_hub)
        self.issue_rate = sw.send_issue_GBps * GBps

    # ------------------------------------------------------------------ network
    def latency(self, s: int, d: int) -> float:
        if s == d:
            return 0.0
        if self.sys.node_of(s) == self.sys.node_of(d):
            return self.sys.intra_latency_us
        return self.sys.inter_latency_us

    def network(self, hub_ingress: bool = False, flow_cap=None):
        """A fluid network with one flow per (src, dst) pair; returns (net, flow[s][d]).

        Ports per GPU: scale-up egress/ingress (NVLink or PCIe), NIC egress/ingress, local
        copy; with ``hub_ingress`` every flow into a GPU also passes its hub, whose packet
        rate is lanes x clock (one packet per lane per cycle)."""
        G, sys = self.G, self.sys
        caps = []
        for _ in range(G):
            caps += [sys.intra_bw_GBps * GBps, sys.intra_bw_GBps * GBps,
                     sys.inter_bw_GBps * GBps, sys.inter_bw_GBps * GBps,
                     sys.local_copy_GBps * GBps]
        hub_port0 = len(caps)
        if hub_ingress:
            h = self.hub
            caps += [h.lanes * h.hub_clock_GHz * self.pkt_wire_hub * GBps] * G
        net = FluidNetwork(caps)
        flows = [[0] * G for _ in range(G)]
        for s in range(G):
            for d in range(G):
                hp = hub_port0 + d if hub_ingress else None
                cap = np.inf if flow_cap is None else flow_cap(s, d)
                if s == d:
                    f = net.add_flow(5 * s + 4, None, 0.0, cap, p2=hp)
                elif sys.node_of(s) == sys.node_of(d):
                    f = net.add_flow(5 * s + 0, 5 * d + 1, self.latency(s, d), cap, p2=hp)
                else:
                    f = net.add_flow(5 * s + 2, 5 * d + 3, self.latency(s, d), cap, p2=hp)
                flows[s][d] = f
        return net, flows

    def flow_order(self, *keys) -> tuple[np.ndarray, np.ndarray]:
        """Rows sorted by (src, dest, *keys, token, slot); returns (order, position in flow)."""
        order = np.lexsort((self.slot, self.tok) + tuple(reversed(keys)) + (self.dest, self.src))
        pair = self.src[order] * self.G + self.dest[order]
        starts = np.r_[0, np.nonzero(np.diff(pair))[0] + 1]
        pos = np.arange(self.N) - np.repeat(starts, np.diff(np.r_[starts, self.N]))
        position = np.empty(self.N, dtype=np.int64)
        position[order] = pos
        return order, position

    def dispatch(self, t0, row_wire: float, pkt_wire: float, position: np.ndarray,
                 hub_ingress: bool = False, flow_cap=None):
        """Fine-grained dispatch: every source issues its rows from t0[s] at the send issue
        rate, interleaved over destinations; returns per-row (first packet arrival, last
        packet arrival, last packet departure) and the flow curves."""
        net, flows = self.network(hub_ingress, flow_cap)
        G = self.G
        for s in range(G):
            total = self.counts[s].sum() * row_wire
            t1 = t0[s] + total / self.issue_rate
            for d in range(G):
                net.inject_rate(flows[s][d], t0[s], t1, self.counts[s, d] * row_wire)
        curves = net.run()
        first = np.empty(self.N)
        last = np.empty(self.N)
        for (s, d), idx in self.pair_groups():
            c = curves[flows[s][d]]
            off = position[idx] * row_wire
            first[idx] = c.arrive(off + pkt_wire)
            last[idx] = c.arrive(off + row_wire)
        return first, last, curves, flows

    def pair_groups(self):
        """(src, dest) -> indices of its rows, for every pair with rows."""
        if not hasattr(self, "_groups"):
            pair = self.src * self.G + self.dest
            order = np.argsort(pair, kind="stable")
            bounds = np.r_[0, np.cumsum(np.bincount(pair, minlength=self.G * self.G))]
            self._groups = [((p // self.G, p % self.G), order[bounds[p]:bounds[p + 1]])
                            for p in range(self.G * self.G) if bounds[p + 1] > bounds[p]]
        return self._groups

    def bulk_flows(self, t_start, nbytes: np.ndarray):
        """Bulk transfer: nbytes[s, d] all sendable at t_start[s]; returns the curves."""
        net, flows = self.network()
        for s in range(self.G):
            for d in range(self.G):
                net.inject(flows[s][d], t_start[s], nbytes[s, d])
        curves = net.run()
        return curves, flows

    def owner_rows(self, mask: np.ndarray) -> np.ndarray:
        """Rows per source GPU among ``mask``."""
        return np.bincount(self.src[mask], minlength=self.G)
