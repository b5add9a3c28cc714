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

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..spec.config import ConfigError, HubConfig, experts_per_gpu, load_hub_config
from .config import ModelConfig, SystemConfig, WorkloadConfig, effective_row_bytes
from . import dedup
from .components import Components
from .gpu import GpuModel
from .network import GBps, FluidNetwork, RateMemo, RunMemo, flow_wire_bytes
from .placement import needs_slots, redundant_slots
from .workload import Routing


#: networks of layers with up to this many GPUs run exact (every queue drain is an event)
EXACT_GPUS = 16
#: above, queue drains closer than this coalesce (us; a queue that would drain inside a
#: step is paced to drain at its end, :func:`.network_kernels.simulate`) ...
WINDOW_US = 0.01
#: ... or than this fraction of the time since the layer's start. Measured against the
#: exact engine, every system's layer time: DeepSeek-V3 on 64 H100s over InfiniBand at 128
#: tokens/GPU within 0.039 % (hub +0.020 %; 2e-4: 0.003 %, 1e-3: 0.153 %), the GB200
#: NVL72 EP64 decode layer (DeepSeek-V4-Flash, 32 tokens/GPU) within 0.026 % (see
#: docs/cosim.md, "Simulator speed")
WINDOW_REL = 5e-4


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


def derive_hub(base: HubConfig, model: ModelConfig, gpus: int, tokens: int,
               dispatch_row_bytes: int, rows_bound: int | None = None) -> HubConfig:
    """The hub config of every destination GPU of a layer: ``sources`` = GPUs, ``experts``
    = experts per GPU, a row in whole chunks (FP8 scales padded), and a static region per
    expert of a power-of-two capacity >= ``rows_bound`` rows (default GPUs x tokens: a
    source sends a token to an expert at most once, so no row can overflow).

    One rule for the co-simulation (:class:`Layer`) and the memory study, which sizes the
    regions it reserves (:mod:`moehub.cosim.studies.xmoe_memory`)."""
    G, T = gpus, tokens
    E_local = experts_per_gpu(model.experts, G)
    bound = G * T if rows_bound is None else rows_bound
    max_rows = max(_pow2_at_least(bound), base.max_tile_rows, base.tile_rows)
    token_bits = max(base.token_bits, int(T - 1).bit_length())
    hub_row = -(-dispatch_row_bytes // base.chunk_bytes) * base.chunk_bytes
    return base.replace(sources=G, experts=E_local, row_bytes=hub_row, topk=model.topk,
                        max_rows_per_expert=max_rows, token_bits=token_bits,
                        name=f"{base.name}@{model.name}x{G}")


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
    gemm_log: list = field(default_factory=list)   #: (gpu, WorkItem part, start, pass end)
    combine_log: list = field(default_factory=list)  #: (gpu, item key, sent at, its GEMM end)
    nets: dict = field(default_factory=dict)       #: phase -> (network, curves) of the last pass
    gpu_end: np.ndarray | None = None               #: when each GPU's layer output is complete
    extra: dict = field(default_factory=dict)

    @property
    def latency_us(self) -> float:
        return float(np.max(self.gpu_end))

    def add(self, gpu, track, name, start, end):
        if end > start:
            self.phases.append(Phase(int(gpu), track, name, float(start), float(end)))


class LazyCurves(Sequence):
    """A network's flow curves, simulated on first read (see :meth:`Layer.record_net`)."""

    def __init__(self, net: FluidNetwork):
        self._net, self._curves = net, None

    def _get(self) -> list:
        if self._curves is None:
            self._curves = self._net.run()
        return self._curves

    def __getitem__(self, i):
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())


class Layer:
    def __init__(self, system: SystemConfig, model: ModelConfig, workload: WorkloadConfig,
                 routing: Routing, hub_base: HubConfig | None = None):
        self.sys, self.model, self.wl, self.routing = system, model, workload, routing
        G, E, k, T = system.gpus, model.experts, model.topk, workload.tokens_per_gpu
        if routing.gpus != G or routing.tokens != T or routing.topk != k:
            raise ConfigError(f"routing shape {routing.experts.shape} does not match "
                              f"{G} GPUs x {T} tokens x top-{k}")
        if needs_slots(E, G):      # e.g. 256 experts on 72 GPUs: redundant expert slots
            model, routing = redundant_slots(model, routing, G)
            self.model, self.routing, E = model, routing, model.experts
        self.G, self.E, self.k, self.T = G, E, k, T
        self.nodes = -(-G // system.gpus_per_node)
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
        self.comp = Components(system)
        # wire bytes per row: dispatch and combine datatypes may differ (FP8 + scales / BF16)
        self.disp_bytes, self.comb_bytes = effective_row_bytes(model, workload)
        # hub config of every destination GPU: a row is whole chunks (FP8 scales padded)
        base = hub_base or load_hub_config(model.hub_config)
        self.hub = derive_hub(base, model, G, T, self.disp_bytes)
        self.tile_rows = self.hub.tile_rows
        self.gpu = GpuModel(system, model, self.tile_rows)
        sw = system.software
        self.row_bytes = model.row_bytes
        mp, hd = system.link_max_payload_bytes, system.link_header_bytes
        # wire bytes of one row: software puts/copies use the link's largest payload,
        # the hub's producers send chunk_bytes packets (one per hub chunk)
        self.row_wire_sw = float(flow_wire_bytes(self.disp_bytes, mp, hd))
        self.comb_wire_sw = float(flow_wire_bytes(self.comb_bytes, mp, hd))
        self.pkt_wire_hub = self.hub.chunk_bytes + hd
        self.row_wire_hub = float(self.hub.chunks_per_row * self.pkt_wire_hub)
        self.issue_rate = sw.send_issue_GBps * GBps
        self._dedup()

    def send_rate(self, sms: int, row_bytes: float) -> float:
        """Bytes/us a kernel holding ``sms`` SMs issues as row puts/stores: the calibrated
        SM curve (:meth:`Components.comm_GBps`, per-row work plus bytes per SM, bounded by
        the port's put rate), never above the SMs' store issue rate."""
        return min(self.issue_rate, self.comp.comm_GBps(sms, row_bytes, False) * GBps)

    def _dedup(self) -> None:
        """Per-destination deduplication (DeepEP normal mode, :mod:`.dedup`): ``gpu_rows[s,
        d]`` one copy per (token, destination GPU); ``node_rows[s, n]`` one copy per (token,
        destination node); ``fwd_rows[r, d]`` the copies GPU r (same local rank as the
        source, in a *remote* source's destination node) forwards over NVLink to the other
        GPUs of its node (a source's own node gets direct copies, ``gpu_rows``)."""
        G, gpn = self.G, self.sys.gpus_per_node
        dest = self.dest.reshape(G, self.T, self.k)
        self.gpu_rows = dedup.unique_gpu_rows(dest, G)
        self.node_rows = dedup.unique_node_rows(dest, G, gpn)
        same = np.equal.outer(np.arange(G) // gpn, np.arange(G) // gpn) & ~np.eye(G, dtype=bool)
        self.fwd_rows = dedup.forward_rows(dest, G, gpn) - np.where(same, self.gpu_rows, 0)

    # ------------------------------------------------------------------ network
    def latency(self, s: int, d: int) -> float:
        if s == d:
            return 0.0
        if self.sys.node_of(s) == self.sys.node_of(d):
            return self.sys.intra_latency_us
        return self.sys.inter_latency_us

    def latency_matrix(self) -> np.ndarray:
        """:meth:`latency` of every (src, dst) pair, to index with per-row arrays."""
        if not hasattr(self, "_latency"):
            G = self.G
            self._latency = np.array([[self.latency(s, d) for d in range(G)] for s in range(G)])
        return self._latency

    def ports(self) -> list:
        """Port capacities (bytes/us): five per GPU -- scale-up egress/ingress (NVLink or
        PCIe), NIC egress/ingress, local copy -- then one hub packet port per GPU (lanes x
        clock packets of the hub's chunk size; used only by flows into a hub)."""
        sys, h = self.sys, self.hub
        caps = []
        for _ in range(self.G):
            caps += [sys.intra_bw_GBps * GBps, sys.intra_bw_GBps * GBps,
                     sys.inter_bw_GBps * GBps, sys.inter_bw_GBps * GBps,
                     sys.local_copy_GBps * GBps]
        caps += [h.lanes * h.hub_clock_GHz * self.pkt_wire_hub * GBps] * self.G
        return caps

    def path(self, s: int, d: int) -> tuple:
        """(egress port, ingress port) of a transfer from GPU s to GPU d."""
        if s == d:
            return 5 * s + 4, None
        if self.sys.node_of(s) == self.sys.node_of(d):
            return 5 * s + 0, 5 * d + 1
        return 5 * s + 2, 5 * d + 3

    def hub_port(self, d: int) -> int:
        return 5 * self.G + d

    def _paths(self) -> tuple:
        """:meth:`path` of every (src, dst) pair, src-major: (egress ports, ingress ports or
        None)."""
        if not hasattr(self, "_path_list"):
            pairs = [self.path(s, d) for s in range(self.G) for d in range(self.G)]
            self._path_list = ([p[0] for p in pairs], [p[1] for p in pairs])
        return self._path_list

    def network_window_us(self) -> float:
        """Queue drains closer than this are coalesced in this layer's networks
        (:func:`.network_kernels.simulate`): 0 (exact) up to ``EXACT_GPUS`` GPUs, else
        ``WINDOW_US``; ``$MOEHUB_NETWORK_WINDOW_US`` overrides both (0: always exact);
        0 while ``exact_drains`` is set (a system's passes that do not settle coalesced,
        :func:`.systems.run_system`)."""
        if getattr(self, "exact_drains", False):
            return 0.0
        env = os.environ.get("MOEHUB_NETWORK_WINDOW_US")
        if env is not None:
            try:
                w = float(env)
            except ValueError:
                w = -1.0
            if not w >= 0:
                raise ConfigError(f"MOEHUB_NETWORK_WINDOW_US = {env!r}: expected a number of "
                                  "microseconds >= 0")
            return w
        return 0.0 if self.G <= EXACT_GPUS else WINDOW_US

    # ------------------------------------------------------------------ one network per layer
    def begin_run(self, background: dict | None = None) -> None:
        """Start one pass of a system over the layer. Every network built in the pass
        carries, besides its own flows, the traffic of the system's *other* phases
        (dispatch, combine, notifications, credits): from this pass when that phase has
        already run, else from ``background`` (the previous pass). Iterating passes until
        the layer time settles (:func:`.systems.run_system`) makes every phase see every
        other phase on the same ports: one network per layer."""
        self._background = dict(background or {})
        self.traffic: dict = {}      #: phase -> flow records of this pass
        self.nets: dict = {}         #: phase -> (FluidNetwork, curves) of this pass

    def network(self, phase: str = "dispatch", hub_ingress: bool = False, flow_cap=None):
        """A fluid network with one flow per (src, dst) pair for ``phase``, plus the other
        phases' traffic as background flows on the same ports; returns (net, flow[s][d]).
        ``flow_cap``: each flow's rate bound, ``flow_cap(s, d)`` or a G x G array.
        With ``hub_ingress`` every flow into a GPU also passes its hub's packet port."""
        if not hasattr(self, "traffic"):
            self.begin_run()
        G = self.G
        net = FluidNetwork(self.ports())
        net.phase = phase
        net.memo = self.__dict__.setdefault("_rate_memo", RateMemo())
        net.run_memo = self.__dict__.setdefault("_run_memo", RunMemo())
        net.window_us = self.network_window_us()
        net.window_rel = WINDOW_REL
        p0, p1 = self._paths()
        if flow_cap is None:
            caps = [np.inf] * (G * G)
        elif callable(flow_cap):
            caps = [flow_cap(s, d) for s in range(G) for d in range(G)]
        else:                                       # a G x G array of per-pair caps
            caps = np.asarray(flow_cap, dtype=float).ravel()
        p2 = np.tile(self.hub_port(np.arange(G)), G) if hub_ingress else None
        ids = net.add_flows(p0, p1, self.latency_matrix().ravel(), caps, p2)
        flows = ids.reshape(G, G).tolist()
        net.own = len(net.flows)
        for other, records in {**self._background, **self.traffic}.items():
            if other != phase:
                net.add_background(records)
        return net, flows

    def run_net(self, net) -> list:
        """Run a network built by :meth:`network`; record its own flows as this pass's
        traffic of its phase (the background of every later network)."""
        curves = net.run()
        self.traffic[net.phase] = net.records(net.own)
        self.nets[net.phase] = (net, curves)
        return curves

    def record_net(self, net) -> None:
        """Record a network's own flows as this pass's traffic of its phase, as
        :meth:`run_net` does, but simulate it only when its curves are read: the model
        needs a control phase (counts, credits, flags) only as the other phases'
        background, and only checks and figures read its own curves."""
        self.traffic[net.phase] = net.records(net.own)
        self.nets[net.phase] = (net, LazyCurves(net))

    def flow_order(self, *keys) -> tuple[np.ndarray, np.ndarray]:
        """Rows sorted by (src, dest, *keys, token, slot); returns (order, position in flow).
        Remembered per key arrays: every pass of a system asks again."""
        cache = self.__dict__.setdefault("_flow_orders", {})
        hit = cache.get(tuple(map(id, keys)))
        if hit is None or any(a is not b for a, b in zip(hit[0], keys)):
            out = self._flow_order(*keys)
            for a in out:
                a.setflags(write=False)
            hit = cache[tuple(map(id, keys))] = (keys, out)
        return hit[1]

    def _flow_order(self, *keys) -> tuple[np.ndarray, np.ndarray]:
        order = np.lexsort((self.slot, self.tok) + tuple(reversed(keys)) + (self.dest, self.src))
        pair = self.src[order] * self.G + self.dest[order]
        starts = np.r_[0, np.nonzero(np.diff(pair))[0] + 1]
        pos = np.arange(self.N) - np.repeat(starts, np.diff(np.r_[starts, self.N]))
        position = np.empty(self.N, dtype=np.int64)
        position[order] = pos
        return order, position

    def dispatch(self, t0, row_wire: float, pkt_wire: float, position: np.ndarray,
                 hub_ingress: bool = False, flow_cap=None, issue_rate: float | None = None):
        """Fine-grained dispatch: every source issues its rows from t0[s] at the send issue
        rate, interleaved over destinations; returns per-row (first packet arrival, last
        packet arrival, last packet departure) and the flow curves."""
        net, flows = self.network("dispatch", hub_ingress, flow_cap)
        G = self.G
        for s in range(G):
            total = self.counts[s].sum() * row_wire
            t1 = t0[s] + total / (issue_rate or self.issue_rate)
            for d in range(G):
                net.inject_rate(flows[s][d], t0[s], t1, self.counts[s, d] * row_wire)
        curves = self.run_net(net)
        if hasattr(curves, "arrive_many"):          # every row at once (compiled engine)
            f = np.asarray(flows, dtype=np.int64)[self.src, self.dest]
            off = position * row_wire
            return (curves.arrive_many(f, off + pkt_wire), curves.arrive_many(f, off + row_wire),
                    curves, flows)
        first = np.empty(self.N)
        last = np.empty(self.N)
        for (s, d), idx in self.pair_groups():
            c = curves[flows[s][d]]
            off = position[idx] * row_wire
            first[idx] = c.arrive(off + pkt_wire)
            last[idx] = c.arrive(off + row_wire)
        return first, last, curves, flows

    def link_bw(self, s: int, d: int) -> float:
        """Port bandwidth (bytes/us) of the path from s to d."""
        if s == d:
            return self.sys.local_copy_GBps * GBps
        if self.sys.node_of(s) == self.sys.node_of(d):
            return self.sys.intra_bw_GBps * GBps
        return self.sys.inter_bw_GBps * GBps

    def put_cap(self, msg_bytes: float):
        """Per-flow rate bound of ``msg_bytes`` puts (one message per row): the port
        bandwidth times the calibrated put efficiency of that message size."""
        return lambda s, d: np.inf if s == d else \
            self.link_bw(s, d) * self.comp.put_efficiency(msg_bytes, self.inter_node(s, d))

    def inter_node(self, s: int, d: int) -> bool:
        return self.sys.node_of(s) != self.sys.node_of(d)

    def pair_links(self) -> tuple[np.ndarray, np.ndarray]:
        """(port bandwidth, crosses nodes) of every (src, dst) pair as G x G arrays:
        :meth:`link_bw` and :meth:`inter_node` at once (remembered)."""
        if not hasattr(self, "_pair_links"):
            node = np.arange(self.G) // self.sys.gpus_per_node
            inter = node[:, None] != node[None, :]
            bw = np.where(inter, self.sys.inter_bw_GBps * GBps, self.sys.intra_bw_GBps * GBps)
            np.fill_diagonal(bw, self.sys.local_copy_GBps * GBps)
            self._pair_links = (bw, inter)
        return self._pair_links

    def pair_groups(self):
        """(src, dest) -> indices of its rows, for every pair with rows."""
        if not hasattr(self, "_groups"):
            pair = self.src * self.G + self.dest
            order = np.argsort(pair, kind="stable")
            bounds = np.r_[0, np.cumsum(np.bincount(pair, minlength=self.G * self.G))]
            self._groups = [((p // self.G, p % self.G), order[bounds[p]:bounds[p + 1]])
                            for p in range(self.G * self.G) if bounds[p + 1] > bounds[p]]
        return self._groups

    def bulk_flows(self, t_start, nbytes: np.ndarray, phase: str, flow_cap=None):
        """Bulk transfer: nbytes[s, d] all sendable at t_start[s]; returns the curves."""
        net, flows = self.network(phase, flow_cap=flow_cap)
        for s in range(self.G):
            for d in range(self.G):
                net.inject(flows[s][d], t_start[s], nbytes[s, d])
        curves = self.run_net(net)
        return curves, flows

    def owner_rows(self, mask: np.ndarray) -> np.ndarray:
        """Rows per source GPU among ``mask``."""
        return np.bincount(self.src[mask], minlength=self.G)
