"""Layer-time models of the X-MoE study: X-MoE's RBD in software and the hub's dispatch,
plain and through relay hubs, on the co-simulation's layer (:class:`~..layer.Layer`).

Each is a system like those of :mod:`moehub.cosim.systems` (``run(L) -> SystemResult``,
named, costed phases on the layer's one network) and runs with
:func:`~moehub.cosim.systems.run_system` (``module=``). The plain software version is the
co-simulation's ``bulk`` system itself.

* :class:`RbdSoftware`: X-MoE's redundancy-bypassing dispatch as its code runs it
  (``RBDispatcher`` / ``RBCombiner``): gate -> layout -> count exchanges (all GPUs for the
  pilots, the node for the replicas) -> host sync -> gather pilots -> global all-to-all
  of pilots -> ``s1_to_s2`` gather of replicas -> node all-to-all of replicas -> local
  order (``torch.cat``) -> sort by expert -> grouped GEMM -> unsort -> node all-to-all of
  the replicas' outputs back to the pilots -> scale and scatter-sum at the pilot (one row
  per (token, node)) -> global all-to-all back -> unpermute + reduce. Every collective is
  a bulk NCCL-style all-to-all-v (:func:`moehub.cosim.systems.bulk.alltoall`: calibrated
  latency per peer and node, collective efficiency for the message size); a node's
  collective starts when its last GPU is ready, a global one when every GPU is.
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
from ..network import flow_wire_bytes
from ..systems import bulk
from ..systems import common as C
from ..systems.deepep import combine_routes
from ..systems.hub import hub_flow_cap
from .xmoe_dispatch import routes


def _node_max(L: Layer, t: np.ndarray) -> np.ndarray:
    """Per GPU, the latest of ``t`` over its node (a node collective's start)."""
    gpn = min(L.sys.gpus_per_node, L.G)
    return np.repeat(np.asarray(t, float).reshape(-1, gpn).max(axis=1), gpn)


def _wire(L: Layer, rows: np.ndarray, row_bytes: int) -> np.ndarray:
    """Software wire bytes of row copies (largest link payload, a header per packet)."""
    return flow_wire_bytes(rows * row_bytes, L.sys.link_max_payload_bytes,
                           L.sys.link_header_bytes)


def _recv(L: Layer, curves, flows, t0, counts) -> np.ndarray:
    return np.array([C.recv_end(L, d, curves, flows, float(np.max(t0)), counts=counts)
                     for d in range(L.G)])


def _expert_items(L: Layer, d: int, ready: float, known: float) -> list:
    """Bulk systems' GEMM work of GPU d: one item per local expert with rows."""
    g = L.gpu
    return [WorkItem(ready, e, int(r), g.padded(int(r)), L.model.expert_ffn, key=e,
                     landed=known, known=known)
            for e, r in enumerate(L.expert_rows[d]) if r]


class RbdSoftware:
    """X-MoE's redundancy-bypassing dispatch and combine (see the module docstring)."""
    name = "sw_rbd"
    LABEL = "X-MoE RBD (pilot all-to-all + node all-to-all)"
    PHASES = ["gate", "layout", "count exchange", "host sync", "gather pilots",
              "all-to-all global", "gather replicas", "all-to-all node", "local order",
              "sort by expert", "expert GEMM", "unsort", "all-to-all node back",
              "scale+sum at pilot", "all-to-all global back", "unpermute+reduce"]

    def run(self, L: Layer) -> SystemResult:
        res = SystemResult(self.name, self.LABEL)
        G, gpn = L.G, min(L.sys.gpus_per_node, L.G)
        first, second = routes("pilot", L.dest.reshape(G, L.T, L.k), G, gpn)
        t_gate, t_a2a = self._prologue(L, res, first)
        recv = self._dispatch(L, res, first, second, t_a2a)
        unsort_end, shared_end = self._experts(L, res, recv, t_gate)
        recv_owner = self._combine(L, res, first, second, unsort_end)
        res.gpu_end = C.reduce(L, res, recv_owner, shared_end, poll=False,
                               name="unpermute+reduce")
        return res

    def _prologue(self, L: Layer, res: SystemResult, first: np.ndarray):
        """gate, layout, the two count exchanges, host sync, the pilots' gather kernel."""
        g, comp, G = L.gpu, L.comp, L.G
        t_gate = C.gate(L, res)
        t_layout = t_gate + g.small_kernel_us(L.T * L.E * 4 + L.T * L.k * 8)
        gpn = min(L.sys.gpus_per_node, G)
        t_cx = t_layout + C.count_exchange_us(L) + comp.small_collective_us(gpn, 1, 4.0 * L.E)
        C.control_traffic(L, "counts", np.full(G, t_layout), np.full((G, G), 4.0 * L.E))
        t_sync = t_cx + comp.host_sync_us
        t_perm = t_sync + np.array([g.permute_us(int(first[s].sum())) for s in range(G)])
        for d in range(G):
            res.add(d, "control", "layout", t_gate, t_layout)
            res.add(d, "control", "count exchange", t_layout, t_cx)
            res.add(d, "control", "host sync", t_cx, t_sync)
            res.add(d, "control", "gather pilots", t_sync, t_perm[d])
        return t_gate, float(t_perm.max()) + comp.launch_us

    def _dispatch(self, L: Layer, res: SystemResult, first, second, t_a2a: float):
        """Pilots over every GPU's all-to-all, then replicas inside each node."""
        g, gpn = L.gpu, min(L.sys.gpus_per_node, L.G)
        curves, flows = bulk.alltoall(L, res, t_a2a, _wire(L, first, L.disp_bytes),
                                      "dispatch", "send", "all-to-all global")
        recv1 = _recv(L, curves, flows, t_a2a, first)
        t_fwd = recv1 + np.array([g.permute_us(int(second[d].sum())) for d in range(L.G)])
        t_node = _node_max(L, t_fwd) + L.comp.launch_us
        curves, flows = bulk.alltoall(L, res, t_node, _wire(L, second, L.disp_bytes),
                                      "dispatch node", "send", "all-to-all node",
                                      peers=gpn, nodes=1)
        recv2 = np.maximum(_recv(L, curves, flows, t_node, second), t_node)
        for d in range(L.G):
            res.add(d, "control", "gather replicas", recv1[d], t_fwd[d])
        return recv2

    def _experts(self, L: Layer, res: SystemResult, recv: np.ndarray, t_gate: float):
        """local order (cat of pilots and replicas), sort by expert, GEMM, unsort."""
        g, G = L.gpu, L.G
        rows_d = L.counts.sum(axis=0)
        t_cat = recv + np.array([g.copy_us(2.0 * r * L.row_bytes) for r in rows_d])
        sort_end = t_cat + (np.array([g.permute_us(r) for r in rows_d]) if L.E_local > 1 else 0.0)
        unsort_end, shared_end = np.zeros(G), np.zeros(G)
        for d in range(G):
            res.add(d, "control", "local order", recv[d], t_cat[d])
            if L.E_local > 1:
                res.add(d, "control", "sort by expert", t_cat[d], sort_end[d])
            ready = sort_end[d] + L.comp.launch_us
            items = C.shared_item(L, t_gate) + _expert_items(L, d, ready, float(recv[d]))
            _, routed_end, shared_end[d] = C.run_queue(L, res, d, items, t_gate, C.full_share)
            unsort_end[d] = routed_end + (g.permute_us(rows_d[d]) if L.E_local > 1 else 0.0)
            if L.E_local > 1:
                res.add(d, "control", "unsort", routed_end, unsort_end[d])
            res.combine_log.append((d, "all", unsort_end[d] + L.comp.launch_us, routed_end))
        return unsort_end, shared_end

    def _combine(self, L: Layer, res: SystemResult, first, second, unsort_end: np.ndarray):
        """Replicas' outputs back to the pilots (node all-to-all), the pilots' scale and
        scatter-sum into one row per (token, node), then every GPU's all-to-all back."""
        g, comp, gpn = L.gpu, L.comp, min(L.sys.gpus_per_node, L.G)
        t_node = _node_max(L, unsort_end) + comp.launch_us
        curves, flows = bulk.alltoall(L, res, t_node, _wire(L, second.T, L.comb_bytes),
                                      "combine node", "combine", "all-to-all node back",
                                      peers=gpn, nodes=1)
        back = np.maximum(_recv(L, curves, flows, t_node, second.T), t_node)
        pilots = first.sum(axis=0)
        t_sum = back + np.array([g.launch + g.copy_us((second[p].sum() + 2.0 * pilots[p])
                                                      * L.row_bytes) for p in range(L.G)])
        for p in range(L.G):
            res.add(p, "control", "scale+sum at pilot", back[p], t_sum[p])
        t_a2a = float(t_sum.max()) + comp.launch_us
        curves, flows = bulk.alltoall(L, res, t_a2a, _wire(L, first.T, L.comb_bytes), "combine",
                                      "combine", "all-to-all global back")
        return _recv(L, curves, flows, t_a2a, first.T)


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
