"""Layer-time models of the X-MoE study: X-MoE's RBD in software and the hub's dispatch,
plain and through relay hubs, on the co-simulation's layer (:class:`~..layer.Layer`).

Each is a system like those of :mod:`moehub.cosim.systems` (``run(L) -> SystemResult``,
named, costed phases on the layer's one network) and runs with
:func:`~moehub.cosim.systems.run_system` (``module=``). The plain software version is the
co-simulation's ``bulk`` system itself.

* :class:`RbdSoftware`: X-MoE's redundancy-bypassing dispatch as its code runs it, the
  co-simulation's ``xmoe_rbd`` system (:mod:`moehub.cosim.systems.xmoe_rbd`: pilots over
  every GPU's all-to-all, replicas over the node's, the metadata's count and index
  exchanges and host syncs, the combine reduced at the pilot).
* :class:`HubPhase`: the hub on its *phase model*, plain (``scheme="plain"``) or through
  relay hubs (``"relay"``). Rows leave right after the gate at the rate of the hub's
  sender SMs (:meth:`Layer.send_rate`), as hub packets (``chunk_bytes`` + header), through
  each destination's hub port, bounded by the tag window (:func:`hub_flow_cap`); a relay
  hub forwards a row's copies ``WRITE_LATENCY`` cycles after they land (ASSUMPTION: its
  write stage feeds an NVLink egress queue of the same width instead of memory; the
  forwarded copies share the relay's NVLink egress port with its own sends). Tiles become
  ready as rows land, spread evenly over the GPU's arrival window (token-order sends),
  plus the flag latency and a poll; each expert is known complete at the done word; one
  persistent grouped-GEMM queue serves the tiles (the co-simulation's
  :class:`~..gpu.ExpertQueue`). Outputs stream back over the GEMM passes; through relays
  they are summed per (token, node) by the relay's reduce kernel (a streaming copy-rate
  kernel: read the partial rows, write one; ASSUMPTION: no reduction hardware in the
  hub) before one row crosses the NIC.

The hub's phase model stands in for the co-simulation's ``hub`` system, which replays
every row through the hub model and is too slow on 16-32 GPUs for a study (minutes per
layer); docs/studies.md compares the two where both run.
"""
from __future__ import annotations

import numpy as np

from ...spec.timing import FLAG_LATENCY, WRITE_LATENCY
from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from ..systems import xmoe_rbd
from ..systems import common as C
from ..systems.deepep import combine_routes
from ..systems.hub import hub_flow_cap
from .xmoe_dispatch import routes


class RbdSoftware:
    """X-MoE's redundancy-bypassing dispatch and combine: the co-simulation's ``xmoe_rbd``
    system (:mod:`moehub.cosim.systems.xmoe_rbd`), under the study's version name."""
    name = "sw_rbd"
    LABEL = xmoe_rbd.LABEL
    PHASES = xmoe_rbd.PHASES

    def run(self, L: Layer) -> SystemResult:
        res = xmoe_rbd.run(L)
        res.name = self.name
        return res


class HubPhase:
    """The hub's phase model, plain or through relay hubs (see the module docstring)."""

    def __init__(self, scheme: str = "plain"):
        if scheme not in ("plain", "relay"):
            raise ValueError(f"scheme {scheme!r}: expected 'plain' or 'relay'")
        self.scheme = scheme
        self.name = "hub" if scheme == "plain" else "hub_rbd"
        self.LABEL = "MoE-Hub (phase model)" if scheme == "plain" else \
            "MoE-Hub, relay hubs (phase model)"
        self.PHASES = ["gate", "dispatch", "hub", "expert GEMM", "combine", "reduce"]

    def run(self, L: Layer) -> SystemResult:
        res = SystemResult(self.name, self.LABEL)
        G = L.G
        first, second = routes(self.scheme, L.dest.reshape(G, L.T, L.k), G,
                               min(L.sys.gpus_per_node, G))
        t_gate = C.gate(L, res)
        sms = L.comp.sms_for("hub")
        send_end, arrive = self._dispatch(L, res, first, second, t_gate, sms)
        g0, g1, shared_end = np.zeros(G), np.zeros(G), np.zeros(G)
        for d in range(G):
            g0[d], g1[d], shared_end[d] = self._experts(L, res, d, arrive[d], t_gate,
                                                        C.reserved_share(L, sms, send_end[d]))
        recv = self._combine(L, res, first, second, g0, g1)
        res.gpu_end = C.reduce(L, res, recv, shared_end)
        return res

    def _clock(self, L: Layer) -> float:
        return L.hub.hub_clock_GHz * 1000.0                 # hub cycles per us

    def _dispatch(self, L: Layer, res: SystemResult, first, second, t_gate: float, sms: int):
        """Rows (and relay copies) to the hubs; returns each GPU's send end and each
        destination's (first, last) arrival."""
        G = L.G
        fwd_us = WRITE_LATENCY / self._clock(L)
        curves, flows, recv = C.two_hop(
            L, np.full(G, t_gate), first, second, L.row_wire_hub, "dispatch", L.inter_node,
            L.send_rate(sms, L.disp_bytes), flow_cap=hub_flow_cap(L), hub_ingress=True,
            relay_window=lambda r, a0, a1: (a0 + fwd_us, a1 + fwd_us))
        both = first + second
        send_end = np.array([C.send_phase(L, res, s, t_gate, curves, flows, counts=both)
                             for s in range(G)])
        C.control_traffic(L, "credits", np.full(G, t_gate),
                          both.T * float(L.sys.link_header_bytes))
        arrive = []
        for d in range(G):
            starts = [float(curves[flows[s][d]].t[0]) + curves[flows[s][d]].latency_us
                      for s in range(G) if both[s, d]]
            arrive.append((min(starts or [t_gate]), float(recv[d])))
            res.add(d, "hub", "hub", *arrive[-1])
        return send_end, arrive

    def _experts(self, L: Layer, res: SystemResult, d: int, window, t_gate: float, share):
        """Tiles of GPU d ready as its rows land (evenly over the arrival window), each
        expert complete at the done word; returns (first GEMM pass, GEMM end, shared end)."""
        a0, a1 = window
        tile = L.tile_rows
        ready_lag = FLAG_LATENCY / self._clock(L) + L.sys.software.flag_poll_us
        items = C.shared_item(L, t_gate)
        for e, r in enumerate(L.expert_rows[d]):
            for j in range(-(-int(r) // tile)):
                n = min(tile, int(r) - j * tile)
                landed = a0 + (a1 - a0) * min(1.0, (j * tile + n) / r)
                items.append(WorkItem(landed + ready_lag, e, n, tile, L.model.expert_ffn,
                                      key=(e, j), landed=landed, known=landed + ready_lag))
        done = {e: a1 + ready_lag for e in range(L.E_local)}
        batches, g1, shared_end = C.run_queue(L, res, d, items, max(t_gate, L.comp.launch_us),
                                              share, done)
        routed = [b.start for b in batches if any(it.expert >= 0 for it in b.items)]
        g0 = min(routed or [g1])
        res.combine_log.append((d, "all", g1, g1))
        return g0, g1, shared_end

    def _combine(self, L: Layer, res: SystemResult, first, second, g0, g1) -> np.ndarray:
        """Outputs stream to their owners over the GEMM passes; through relays, each
        relay's reduce kernel sums a (token, node)'s outputs before one row crosses back."""
        G, g = L.G, L.gpu
        if self.scheme == "plain":
            c_first, c_second = first.T.astype(float), np.zeros((G, G))
        else:
            c_first, c_second = combine_routes(L, first, second)
        rate = c_first.sum(axis=1) * L.comb_wire_sw / np.maximum(g1 - g0, 1e-3)
        rate = np.maximum(rate, 1e-9)
        partials = c_first.sum(axis=0)

        def reduce_window(r, a0, a1):
            t_red = g.launch + g.copy_us((partials[r] + c_second[r].sum()) * L.row_bytes)
            return a0 + g.launch, max(a1, a0 + t_red) + g.launch
        curves, flows, recv = C.two_hop(L, g0, c_first, c_second, L.comb_wire_sw, "combine",
                                        lambda s, r: not L.inter_node(s, r), rate,
                                        relay_window=reduce_window)
        for d in range(G):
            C.send_phase(L, res, d, g0[d], curves, flows, name="combine",
                         counts=c_first + c_second, track="combine")
        return recv
