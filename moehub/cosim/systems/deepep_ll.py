"""DeepEP-style low-latency kernels (one-sided puts into worst-case buffers), with the
mechanism that differs between the libraries that publish such kernels.

gate -> dispatch kernel: every (token, expert) row is put straight into the destination's
receive buffer ``[local expert][source][max tokens]`` (slot from a local atomic; no
count exchange, no deduplication) -> after a fence each source writes a per-expert count
flag -> the receiver waits for every source's flags and packs the rows per expert (the
dispatch kernel's receive half; each call also pays a fixed cost beyond its launch,
``ll_call_*_us``: the 1-token time of a published low-latency kernel) -> masked grouped GEMM -> combine kernel puts each
output back to its owner's ``[token][slot]`` buffer -> flags -> weighted reduce.
The receive buffers are sized for the worst case (every source sends every token to
every local expert); their size is reported in ``extra['recv_buffer_bytes']``.

Libraries (:data:`LIBRARIES`) share that protocol and differ in three mechanisms, each
chosen by the library's profile, never by the case that measures it:

* the path to a peer in the same node: NVLink loads/stores (DeepEP V1 since its NVLink
  support, NCCL EP's LSA path, NVSHMEM's P2P transport under pplx-kernels) or RDMA
  through the NIC and the rail switch (DeepEP's low-latency kernels at their first
  release: "pure RDMA"), where same-node rows share the NIC with the remote ones;
* the fixed cost of one call across nodes: pplx-kernels' own 1-token time over IBGDA
  (``ll_call_inter_us``), or, for libraries that publish no 1-token time, the in-node
  floor (``ll_call_intra_us``) plus what the model charges for the network itself
  (put latency, the fence's round trip, the flags). ASSUMPTION, see :data:`LIBRARIES`;
* who posts the RDMA work: the GPU itself (IBGDA / GDAKI: the per-message cost is in the
  NIC's put efficiency) or a CPU proxy thread (NVSHMEM IBRC and other proxy transports),
  which posts every message of its GPU in turn at ``ll_proxy_msg_us`` each (a row's put,
  its signal where the library signals per row, one count per remote expert).
"""
from __future__ import annotations

import inspect
import types
from dataclasses import dataclass

import numpy as np

from ...spec.config import ConfigError
from ..gpu import WorkItem
from ..layer import Layer, SystemResult
from ..network import GBps
from . import common as C

PHASES = ["gate", "dispatch", "notify", "recv pack", "expert GEMM", "combine", "combine wait",
          "reduce"]
LABEL = "DeepEP low-latency (one-sided puts, worst-case buffers)"
INTRA_PATHS = ("nvlink", "rdma")
INITIATORS = ("gpu", "proxy")


@dataclass(frozen=True)
class Library:
    """The mechanisms one low-latency library uses (see the module docstring)."""
    name: str
    intra: str            #: "nvlink": same-node peers by NVLink; "rdma": through the NIC
    inter_floor: bool     #: pays pplx's measured 1-token IBGDA time per call across nodes
    source: str           #: where the mechanism is documented
    initiator: str = "gpu"        #: "gpu": the GPU posts RDMA work (IBGDA); "proxy": a CPU thread
    signal_per_row: bool = False  #: every RDMA row is a put plus a signal (two messages)

    def __post_init__(self):
        for key, allowed in (("intra", INTRA_PATHS), ("initiator", INITIATORS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"library[{self.name}].{key} = {getattr(self, key)!r}: must be "
                                  f"one of {', '.join(allowed)}")


LIBRARIES = {
    "deepep": Library(
        "deepep", "nvlink", False,
        "DeepEP V1 low-latency kernels since their NVLink support: same-node peers by NVLink "
        "(github.com/deepseek-ai/DeepEP docs/legacy.md @ 0297fc80); no 1-token time is "
        "published, so the fixed cost across nodes is the in-node floor plus the modelled "
        "network latency (ASSUMPTION)"),
    "deepep-rdma": Library(
        "deepep-rdma", "rdma", False,
        "DeepEP low-latency kernels at their first release (2025-02-25): 'low-latency kernels "
        "with pure RDMA', every peer, same node included, through the NIC (DeepEP README.md "
        "at release); fixed cost as for deepep (ASSUMPTION)"),
    "nccl-ep": Library(
        "nccl-ep", "nvlink", False,
        "NCCL EP low-latency mode: LSA loads/stores over NVLink, GIN put/signal over RDMA "
        "with GDAKI (GPU-initiated) (github.com/NVIDIA/nccl contrib/nccl_ep/README.md); no "
        "1-token time published: fixed cost as for deepep (ASSUMPTION)"),
    "pplx": Library(
        "pplx", "nvlink", True,
        "pplx-kernels: NVSHMEM putmem_signal per (token, expert) (csrc/all_to_all/"
        "internode_dispatch.cu), P2P (NVLink) inside a node, IBGDA across nodes; its measured "
        "1-token times are ll_call_intra_us / ll_call_inter_us (github.com/ppl-ai/pplx-kernels "
        "README.md @ 12cecfda)", signal_per_row=True),
    "pplx-ibrc": Library(
        "pplx-ibrc", "nvlink", True,
        "pplx-kernels over NVSHMEM's IBRC transport: the same kernel, its RDMA messages (each "
        "row's put and signal, one count signal per remote expert) posted by a CPU proxy "
        "thread at ll_proxy_msg_us each (README.md @ 12cecfda: IBRC vs IBGDA rows)",
        initiator="proxy", signal_per_row=True),
}


def library(name: str, key: str = "library") -> Library:
    """The profile of library ``name``; ``key`` names where the name came from."""
    if name not in LIBRARIES:
        raise ConfigError(f"{key} = {name!r}: unknown low-latency library (known: "
                          f"{', '.join(LIBRARIES)})")
    return LIBRARIES[name]


def system_library(L: Layer) -> Library:
    """The library the ``deepep_ll`` baseline plays on this system (``software.ll_library``)."""
    return library(L.sys.software.ll_library, f"system[{L.sys.name}].software.ll_library")


class RdmaPaths:
    """The layer as a pure-RDMA library sees it: every peer other than the GPU itself is
    reached through the GPU's NIC and the destination's NIC (on a rail-optimised cluster
    the same-node peer sits behind the rail switch, so the put pays the network latency
    and the NIC's put efficiency). Everything else is the layer's: the view re-binds the
    layer's methods to itself, so the layer's network builder routes through these paths
    and records its traffic in the layer's own pass records."""

    #: what a pass records lives in the layer (every network of the pass sees it); the
    #: view keeps only its own caches (paths, latencies, rate memo), which differ from the layer's
    PASS_STATE = ("traffic", "nets", "_background")

    def __init__(self, L: Layer):
        object.__setattr__(self, "_L", L)

    def __setattr__(self, name, value):
        if name in self.PASS_STATE:
            setattr(self._L, name, value)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        attr = inspect.getattr_static(type(self._L), name, None)
        if inspect.isfunction(attr):
            return types.MethodType(attr, self)
        return getattr(self._L, name)

    def path(self, s: int, d: int) -> tuple:
        """NIC egress of s, NIC ingress of d (the port order of :meth:`Layer.ports`)."""
        if s == d:
            return self._L.path(s, d)
        return 5 * s + 2, 5 * d + 3

    def inter_node(self, s: int, d: int) -> bool:
        return s != d

    def latency(self, s: int, d: int) -> float:
        return 0.0 if s == d else self._L.sys.inter_latency_us

    def link_bw(self, s: int, d: int) -> float:
        if s == d:
            return self._L.link_bw(s, d)
        return self._L.sys.inter_bw_GBps * GBps


def paths(L: Layer, lib: Library):
    """The layer as ``lib`` routes it (the layer itself for NVLink inside a node)."""
    return RdmaPaths(L) if lib.intra == "rdma" and L.G > 1 else L


def call_us(L: Layer, lib: Library | None = None) -> float:
    """Fixed cost of one low-latency call beyond its launch (count signals to every peer's
    experts, their polling, the kernel's own setup): the 1-token time of a published
    low-latency kernel (pplx-kernels'); across nodes pplx's own IBGDA floor for a library
    that pays it (:attr:`Library.inter_floor`), else the in-node floor."""
    lib = lib or system_library(L)
    sw = L.sys.software
    return sw.ll_call_inter_us if (L.nodes > 1 and lib.inter_floor) else sw.ll_call_intra_us


def nic_pairs(L: Layer, V) -> np.ndarray:
    """(source, destination) pairs whose rows go through the NIC as ``V`` routes them."""
    G = L.G
    return np.array([[s != d and V.inter_node(s, d) for d in range(G)] for s in range(G)])


def proxy_cost(L: Layer, lib: Library, nic: np.ndarray, rows: np.ndarray):
    """A CPU proxy thread posts every RDMA message of its GPU one after another at
    ``ll_proxy_msg_us`` each: the rows (``rows[s, d]`` through the NIC, one or two
    messages each) and one count signal per expert of every NIC-reached peer. Returns
    (per-flow rate bound in bytes/us for the rows, when each source's proxy has posted its
    last message, relative to the kernel's start); no bound for a GPU-initiated library."""
    c = L.sys.software.ll_proxy_msg_us if lib.initiator == "proxy" else 0.0
    per_row = 2 if lib.signal_per_row else 1
    row_msgs = (rows * nic).sum(axis=1) * per_row
    done = (row_msgs + L.E_local * nic.sum(axis=1)) * c
    busy = np.maximum((rows * nic > 0).sum(axis=1), 1)    # NIC flows that carry rows

    def cap(s: int, d: int) -> float:
        if c == 0.0 or not nic[s, d]:
            return np.inf
        return L.row_wire_sw / (per_row * c) / busy[s]      # the proxy's rate, shared
    return cap, done


def _capped(a, b):
    return lambda s, d: min(a(s, d), b(s, d))


class Variant:
    """``deepep_ll`` as one library plays it: an object :func:`run_system` can run."""

    def __init__(self, name: str):
        self.lib = library(name)

    def run(self, L: Layer) -> SystemResult:
        return run(L, self.lib.name)


def run(L: Layer, library_name: str | None = None) -> SystemResult:
    """One layer with ``library_name``'s mechanisms (default: the system's ``ll_library``)."""
    lib = library(library_name) if library_name else system_library(L)
    V = paths(L, lib)
    res = SystemResult("deepep_ll", LABEL)
    res.extra["library"] = lib.name
    g, sw, G = L.gpu, L.sys.software, L.G
    t_gate = C.gate(L, res)
    t0 = t_gate + L.comp.launch_us
    _, pos = L.flow_order()
    pkt = min(L.sys.link_max_payload_bytes, L.disp_bytes) + L.sys.link_header_bytes
    # the send half of the kernel runs on every SM, then returns (hook mode)
    nic = nic_pairs(L, V)
    pcap, pdone = proxy_cost(L, lib, nic, L.counts)
    first, last, curves, flows = V.dispatch(np.full(G, t0), L.row_wire_sw, pkt, pos,
                                            flow_cap=_capped(V.put_cap(L.disp_bytes), pcap),
                                            issue_rate=L.send_rate(L.sys.sms, L.disp_bytes))
    sms = L.comp.sms_for("deepep_ll")
    fixed = call_us(L, lib)
    flag_t = np.zeros((G, G))
    ends = C.pair_curves(curves, flows)[0]
    for s in range(G):
        C.send_phase(L, res, s, t0, curves, flows)
        for d in range(G):
            # fence: wait for the puts' acknowledgements, then write the count flags
            lat = V.latency(s, d)
            flag_t[s, d] = (ends[s, d] + 2 * lat) if L.counts[s, d] else t0 + lat
            if nic[s, d]:                   # the count signal leaves when the proxy posts it
                flag_t[s, d] = max(flag_t[s, d], t0 + pdone[s] + lat)
    C.control_traffic(V, "flags", np.full(G, t0), np.full((G, G), 4.0 * L.E_local))
    shared_end, gemm_end = np.zeros(G), np.zeros(G)
    for d in range(G):
        for s in range(G):
            res.markers.append((d, "hub", flag_t[s, d]))
        t_flags = flag_t[:, d].max() + sw.flag_poll_us + fixed
        data_end = C.recv_end(L, d, curves, flows, t0)
        res.add(d, "hub", "notify", min(data_end, t_flags), t_flags)
        t_pack = t_flags + g.copy_us(2.0 * L.counts[:, d].sum() * L.disp_bytes)
        res.add(d, "control", "recv pack", t_flags, t_pack)
        items = C.shared_item(L, t_gate) + [
            WorkItem(t_pack + L.comp.launch_us, e, int(r), g.padded(int(r)), L.model.expert_ffn,
                     key=e, landed=data_end, known=t_flags)
            for e, r in enumerate(L.expert_rows[d]) if r]
        _, gemm_end[d], shared_end[d] = C.run_queue(L, res, d, items, t_gate,
                                                    C.reserved_share(L, sms, t_pack))
        res.combine_log.append((d, "all", gemm_end[d] + L.comp.launch_us, gemm_end[d]))
    # combine kernel: puts back to the owners' [token][slot] buffers
    ccap, cdone = proxy_cost(L, lib, nic, L.counts.T)
    net, cflows = V.network("combine", flow_cap=_capped(V.put_cap(L.comb_bytes), ccap))
    tc = gemm_end + L.comp.launch_us
    for d in range(G):
        total = L.counts[:, d].sum() * L.comb_wire_sw
        for o in range(G):
            net.inject_rate(cflows[d][o], tc[d], tc[d] + total / L.send_rate(L.sys.sms, L.comb_bytes),
                            L.counts[o, d] * L.comb_wire_sw)
    ccurves = V.run_net(net)
    recv = C.combine_done(L, res, ccurves, cflows, tc,
                          flag_extra=lambda d, o: 2 * V.latency(d, o) + fixed)
    for d in range(G):                          # a proxy posts each source's last signal
        for o in range(G):
            if nic[d, o] and L.counts[o, d] and cdone[d] > 0:
                recv[o] = max(recv[o], tc[d] + cdone[d] + 2 * V.latency(d, o) + fixed)
    cends = C.pair_curves(ccurves, cflows)[0]
    for o in range(G):
        m = L.counts[o] != 0                    # the GPUs o's tokens went to
        last = float(cends[m, o].max()) if m.any() else recv[o]
        res.add(o, "combine", "combine wait", last, recv[o])
    res.gpu_end = C.reduce(L, res, recv, shared_end)
    res.extra["recv_buffer_bytes"] = int(L.E_local * G * L.T * L.disp_bytes)
    return res
