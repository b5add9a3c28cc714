"""Calibrated component models: launches, host syncs, collectives, puts, GEMMs and HBM.

Each method turns a few constants of :class:`SoftwareCosts` (``config/system/*.yaml``,
where every constant cites a public measurement in ``/work/shared/CALIBRATION.md`` or
says ASSUMPTION) into a cost. ``moehub calibrate`` (:mod:`.calibration`) compares every
model with the published points in ``cosim/data/calibration_points.yaml``.

Models (why each shape):

* Launch / sync: constants; a CUDA graph replaces the per-launch driver work by a cheaper
  per-node dispatch; a host sync is a small D2H copy + stream sync + host split math.
  The system's ``launch_mode`` decides, once, what every kernel of the layer pays
  (:attr:`Components.launch_us`, which the GPU model reads too): ``eager`` the driver launch
  (``kernel_launch_us``), ``graph`` the replay of a captured node (``graph_launch_us``), as
  serving engines capture decode (vLLM, SGLang, TensorRT-LLM). A host sync cannot be
  captured: the layer splits there into pieces (vLLM's piecewise graphs; SGLang refuses
  graphs with DeepEP normal mode), so each sync also pays the relaunch of the next piece
  from the host (:attr:`Components.graph_break_us`; :data:`GRAPH_BREAKS` counts them).
* Collective latency (NCCL-like): a collective that carries data pays a base latency, one
  hop (scale-up, plus one network hop when it spans nodes) and, for an all-to-all, a cost
  per peer (one send/recv pair each); an all-gather is a ring: one hop per step.
  A 0-byte collective enqueues nothing and costs only ``coll_empty_us``.
* Collective bandwidth vs message size: with the Simple protocol a flow reaches ``eff_max``
  of the port for large messages and every message pays one pipeline step, so the fraction
  is ``eff_max x m / (m + eff_max x port x step)``; small messages use LL instead (the
  small-message bandwidth, at most half the port), whichever is faster.
* Puts: each put carries a fixed overhead (flag/metadata write on NVLink, work request
  on the NIC) expressed in bytes at the port rate: ``eff_max x m / (m + overhead)``.
* SMs vs bandwidth: a communication SM spends a fixed time per row plus the row's bytes at
  a per-SM rate; S SMs reach S times that, softly capped by the port's put rate.
* GEMM: a tiled kernel with an M block (64 or 128 rows) and an N block it picks to fit
  the SMs; a tile's time grows by ``(1 + n_half/BN)(1 + k_half/K)`` (operand reuse and
  per-tile prologue/epilogue); tiles run in waves over the SMs it has. The body is
  ``gemm_fixed_us + max(compute, bytes / achievable HBM)``.
"""
from __future__ import annotations

import math

import numpy as np

from .config import LAUNCH_MODES, ConfigError, SystemConfig

GBps = 1e3          #: bytes per microsecond in one GB/s
LAYOUTS = ("contiguous", "masked", "padded", "loop")
COLLECTIVES = ("alltoall", "allgather")
#: host syncs per layer of each system: each is a graph break in ``graph`` launch mode (the
#: host reads counts to size the next kernels, so those cannot be captured). Bulk: the D2H of
#: the all-to-all-v splits; DeepEP normal mode: the received count that sizes the receive
#: tensor (DeepEP normal mode is incompatible with CUDA graphs, sglang PR #5014); HybridEP
#: in its default blocking mode: the dispatched-token count read to size the permuted output
#: (Megatron-Core passes no upper bound, which "causes a D2H synchronization"); the others
#: size everything on the device. The systems charge a break through
#: :attr:`Components.host_sync_us`; tests check this table against their timelines.
#: Systems written as eager PyTorch code (host syncs between their ops, ``systems.eager``)
#: launch eagerly in either mode and are not listed.
GRAPH_BREAKS = {"bulk": 1, "comet": 0, "deepep": 1, "deepep_ll": 0, "fused": 0, "hub": 0,
                "ideal": 0, "hybridep": 1}
SMS_KEYS = {"deepep": "comm_sms_deepep", "deepep_ll": "comm_sms_deepep_ll",
            "comet": "comm_sms_overlap", "fused": "comm_sms_fused", "hub": "comm_sms_hub",
            "onesided": "comm_sms_overlap", "hybridep": "comm_sms_hybridep"}
#: the per-SM constants (fixed time per row, bytes per second between rows) of each kernel
#: family :meth:`Components.comm_GBps` models: "" the load/store kernels of DeepEP and the
#: others (fit on DeepEP V1), "hybridep" HybridEP's TMA kernels (fit on its own tables)
SM_CONSTANTS = {"": ("comm_sm_row_us", "comm_sm_GBps"),
                "hybridep": ("hybridep_sm_row_us", "hybridep_sm_GBps")}


class Components:
    """Component costs of one system (times in microseconds, sizes in bytes)."""

    def __init__(self, system: SystemConfig):
        self.sys = system
        self.sw = sw = system.software
        self.launch_mode = sw.launch_mode
        self.graph_launch_us = sw.graph_launch_us
        self.d2h_sync_us = sw.d2h_sync_us
        self.launch_us, self.graph_break_us = self.launch_costs(sw.launch_mode)
        self.host_sync_us = sw.d2h_sync_us + sw.host_split_us + self.graph_break_us

    def launch_costs(self, mode: str) -> tuple:
        """(cost of one kernel launch, extra cost of a host sync) in launch ``mode``.

        eager: every kernel pays the driver launch; a sync adds nothing (the next kernel's
        launch is already counted). graph: a kernel pays the replay of a captured node; a
        sync ends the graph, and the piece after it is relaunched from the host: its first
        kernel waits for a host launch, ``kernel_launch_us`` instead of the node's
        ``graph_launch_us`` (ASSUMPTION: relaunching a graph piece from an idle host costs
        one driver launch; the measured graph gain is per node, dogacel.github.io
        2026-03-14, CALIBRATION.md sec 2)."""
        sw = self.sw
        if mode == "eager":
            return sw.kernel_launch_us, 0.0
        if mode == "graph":
            return sw.graph_launch_us, sw.kernel_launch_us - sw.graph_launch_us
        raise ConfigError(f"system[{self.sys.name}].software.launch_mode = {mode!r}: must be "
                          f"one of {', '.join(LAUNCH_MODES)}")

    # ------------------------------------------------------------------ collectives
    def _split_peers(self, peers: int, nodes: int) -> tuple:
        """(peers inside my node, peers in other nodes) of a rank, GPUs spread evenly."""
        nodes = max(1, min(nodes, peers))
        local = -(-peers // nodes)
        return local - 1, peers - local

    def collective_latency_us(self, kind: str, peers: int, nodes: int) -> float:
        """Fixed part of one collective across ``peers`` GPUs on ``nodes`` nodes."""
        if kind not in COLLECTIVES:
            raise ValueError(f"collective kind {kind!r}: expected one of {', '.join(COLLECTIVES)}")
        if peers <= 1:
            return 0.0
        sw = self.sw
        intra, inter = self._split_peers(peers, nodes)
        multi = nodes > 1
        if kind == "alltoall":
            return (sw.coll_base_us + sw.coll_hop_intra_us + multi * sw.coll_hop_inter_us
                    + sw.a2a_peer_intra_us * intra + sw.a2a_peer_inter_us * inter)
        inter_steps = nodes - 1 if multi else 0          # ring: one step per rank
        return (sw.coll_base_us + sw.coll_hop_intra_us * (peers - 1 - inter_steps)
                + sw.coll_hop_inter_us * inter_steps)

    def port_GBps(self, inter_node: bool) -> float:
        return self.sys.inter_bw_GBps if inter_node else self.sys.intra_bw_GBps

    def collective_efficiency(self, msg_bytes_per_peer, inter_node):
        """Fraction of the port a collective flow of this message size reaches: the
        better of the two protocols NCCL picks between, Simple (``eff_max`` of the port,
        minus one pipeline step per message) and LL (the small-message bandwidth, at most
        half the port: LL sends an 8-byte flag with every 8 bytes of data). Scalars give a
        float; arrays (message sizes and inter-node flags, e.g. per (src, dst) pair) an
        array, element by element the same arithmetic."""
        sw = self.sw
        inter = np.asarray(inter_node, dtype=bool)
        e = np.where(inter, sw.inter_eff_max, sw.intra_eff_max)
        step = np.where(inter, sw.coll_step_inter_us, sw.coll_step_intra_us)
        port = np.where(inter, self.sys.inter_bw_GBps, self.sys.intra_bw_GBps)
        m = np.maximum(np.asarray(msg_bytes_per_peer, dtype=float), 1.0)
        simple = e * m / (m + e * port * GBps * step)
        small = np.where(inter, sw.coll_small_inter_GBps, sw.coll_small_intra_GBps)
        out = np.maximum(simple, np.minimum(small, 0.5 * port) / port)
        return float(out) if out.ndim == 0 else out

    def small_collective_us(self, peers: int, nodes: int, bytes_per_peer: float = 64.0) -> float:
        """A count exchange (all-to-all of a few bytes per peer): latency + bytes at the
        small-message (LL) bandwidth; 0 bytes enqueue nothing."""
        if peers <= 1:
            return 0.0
        if bytes_per_peer <= 0:
            return self.sw.coll_empty_us
        bw = self.sw.coll_small_inter_GBps if nodes > 1 else self.sw.coll_small_intra_GBps
        return self.collective_latency_us("alltoall", peers, nodes) \
            + bytes_per_peer * (peers - 1) / (bw * GBps)

    def alltoall_us(self, bytes_per_peer: float, peers: int, nodes: int) -> float:
        """A whole all-to-all: latency + the busiest port's bytes at the curve's rate.
        The NIC carries the inter-node peers, NVLink the rest, in parallel; the peers of
        one port share its pipeline steps, so the curve is read at the port's total bytes."""
        if peers <= 1 or bytes_per_peer <= 0:
            return self.small_collective_us(peers, nodes, bytes_per_peer)
        intra, inter = self._split_peers(peers, nodes)
        t = 0.0
        for n, remote in ((intra, False), (inter, True)):
            if n:
                total = n * bytes_per_peer
                bw = self.port_GBps(remote) * GBps * self.collective_efficiency(total, remote)
                t = max(t, total / bw)
        return self.collective_latency_us("alltoall", peers, nodes) + t

    # ------------------------------------------------------------------ puts
    def put_efficiency(self, msg_bytes: float, inter_node: bool) -> float:
        """Fraction of the port reached by a stream of one-sided puts of ``msg_bytes``."""
        sw = self.sw
        e, o = (sw.inter_eff_max, sw.put_overhead_inter_bytes) if inter_node else \
            (sw.intra_eff_max, sw.put_overhead_intra_bytes)
        m = max(float(msg_bytes), 1.0)
        return e * m / (m + o)

    def sm_GBps(self, row_bytes: float, kernel: str = "") -> float:
        """Bytes per second one communication SM moves with rows of ``row_bytes`` (GB/s):
        ``comm_sm_row_us`` of fixed work per row plus the bytes at ``comm_sm_GBps``
        (``kernel``: the per-SM constants of another kernel family, :data:`SM_CONSTANTS`)."""
        row_us, sm_bw = (getattr(self.sw, k) for k in SM_CONSTANTS[kernel])
        return row_bytes / (row_us + row_bytes / (sm_bw * GBps)) / GBps

    deepep_sm_GBps = sm_GBps     #: the name cosim/systems/deepep.py looks for on main

    def comm_GBps(self, sms: int, msg_bytes: float, inter_node: bool, kernel: str = "") -> float:
        """Bandwidth a communication kernel holding ``sms`` SMs reaches with rows of
        ``msg_bytes``: each SM spends ``comm_sm_row_us`` per row plus the row's bytes at
        ``comm_sm_GBps``; S SMs reach S times that until the port's put rate bounds them.
        The two bounds meet in a soft minimum (``1/bw^2 = 1/sm^2 + 1/port^2``): measured
        bandwidth bends from linear to flat over a range of SMs, not at one point.
        ``kernel``: a kernel family with its own per-SM constants (:data:`SM_CONSTANTS`,
        e.g. ``"hybridep"``: TMA copies); the default is DeepEP-style load/store kernels."""
        port = self.port_GBps(inter_node) * self.put_efficiency(msg_bytes, inter_node)
        per_sm = self.sm_GBps(msg_bytes, kernel)
        if sms <= 0:
            return 0.0
        return 1.0 / math.hypot(1.0 / (sms * per_sm), 1.0 / port)

    # ------------------------------------------------------------------ HBM
    def hbm_ceiling_GBps(self) -> float:
        return self.sys.hbm_GBps * self.sw.hbm_gemm_efficiency

    def hbm_effective_GBps(self, concurrent_GBps: float = 0.0) -> float:
        """HBM left to a kernel while ``concurrent_GBps`` of other traffic shares it."""
        ceil = self.hbm_ceiling_GBps()
        return max(ceil - max(concurrent_GBps, 0.0), ceil * self.sw.hbm_floor_frac)

    def copy_GBps(self) -> float:
        """Copy / elementwise kernels (permute, reduce): the copy-kernel efficiency."""
        return self.sys.hbm_GBps * self.sw.hbm_efficiency

    # ------------------------------------------------------------------ GEMM
    def peak_TFLOPs(self, dtype: str) -> float:
        if dtype == "bf16":
            return self.sys.peak_bf16_TFLOPs
        if dtype == "fp8":
            if self.sys.peak_fp8_TFLOPs <= 0:
                raise ConfigError(f"system[{self.sys.name}].peak_fp8_TFLOPs = "
                                  f"{self.sys.peak_fp8_TFLOPs!r}: this GPU has no FP8 GEMMs")
            return self.sys.peak_fp8_TFLOPs
        raise ValueError(f"dtype {dtype!r}: expected 'bf16' or 'fp8'")

    def _eff_max(self, dtype: str) -> float:
        return self.sw.gemm_eff_max_fp8 if dtype == "fp8" else self.sw.gemm_eff_max

    def block_m(self, rows: float) -> int:
        sw = self.sw
        return sw.gemm_block_m_small if rows <= sw.gemm_block_m_small else sw.gemm_block_m

    def tile_eff(self, bn: float, k: float, dtype: str = "bf16") -> float:
        """Efficiency of a full tile of N block ``bn`` over a K loop of ``k`` (no waves).
        A tile's fixed prologue/epilogue time is the same for both dtypes, but an FP8 K
        step takes half as long, so FP8 amortises it over twice as many K elements."""
        sw = self.sw
        k_half = sw.gemm_k_half * (2.0 if dtype == "fp8" else 1.0)
        return self._eff_max(dtype) * bn / (bn + sw.gemm_n_half) * k / (k + k_half)

    def _block_ns(self, n: float) -> list:
        sw = self.sw
        step = sw.gemm_block_n_step
        top = min(sw.gemm_block_n_max, -(-int(math.ceil(n)) // step) * step)
        return list(range(step, max(top, step) + 1, step))

    def compute_us(self, m_blocks: float, bm: int, n: float, k: float, dtype: str = "bf16",
                   sm_share: float = 1.0, whole_waves: bool = True) -> float:
        """Time of ``m_blocks`` row blocks of ``bm`` rows times N x K on the SMs left,
        the kernel picking the N block that minimises waves x tile time."""
        if m_blocks <= 0 or n <= 0 or k <= 0:
            return 0.0
        sms = max(1, int(self.sys.sms * sm_share + 1e-9))
        per_sm = self.peak_TFLOPs(dtype) * 1e6 / self.sys.sms        # flop/us per SM
        best = math.inf
        for bn in self._block_ns(n):
            tiles = m_blocks * math.ceil(n / bn)
            waves = math.ceil(tiles / sms - 1e-9) if whole_waves else tiles / sms
            t_tile = 2.0 * bm * bn * k / (per_sm * self.tile_eff(bn, k, dtype))
            best = min(best, waves * t_tile)
        return best

    def gemm_eff(self, m: float, n: float, k: float, dtype: str = "bf16") -> float:
        """Fraction of dense peak one M x N x K GEMM reaches when compute bound (row
        padding to the M block and wave quantization over all SMs included)."""
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        bm = self.block_m(m)
        t = self.compute_us(math.ceil(m / bm), bm, n, k, dtype)
        return 2.0 * m * n * k / (t * self.peak_TFLOPs(dtype) * 1e6)

    def steady_eff(self, n: float, k: float, dtype: str = "bf16") -> float:
        """Efficiency of a long persistent GEMM (many row blocks: no wave tail) with N
        output columns: the best N block that divides the columns into whole blocks."""
        best = 0.0
        for bn in self._block_ns(n):
            best = max(best, self.tile_eff(bn, k, dtype) * n / (math.ceil(n / bn) * bn))
        return best

    def gemm_us(self, m: float, n: float, k: float, dtype: str = "bf16", sm_share: float = 1.0,
                hbm_share: float = 1.0, a_bytes: float = 2, b_bytes: float = 2,
                c_bytes: float = 2) -> float:
        """Body of one dense GEMM (no launch): fixed ramp + max(compute, memory)."""
        bm = self.block_m(m)
        comp = self.compute_us(math.ceil(m / bm), bm, n, k, dtype, sm_share)
        nbytes = m * k * a_bytes + n * k * b_bytes + m * n * c_bytes
        mem = nbytes / (self.hbm_effective_GBps() * hbm_share * GBps)
        return self.sw.gemm_fixed_us + max(comp, mem)

    def _blocks(self, rows: list, layout: str) -> tuple:
        """(M block, row blocks per expert) of a grouped GEMM in this layout."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
        if layout == "contiguous":      # experts padded to the contiguous alignment
            bm = self.sw.gemm_block_m
        else:                           # the kernel picks its M block for the largest expert
            bm = self.block_m(max(rows, default=0))
        return bm, [math.ceil(r / bm) for r in rows]

    def grouped_single_us(self, rows: list, n: int, k: int, layout: str, dtype: str = "bf16",
                          sm_share: float = 1.0, hbm_share: float = 1.0, weight_bytes: float = 2,
                          act_bytes: float = 2, out_bytes: float = 2) -> float:
        """One grouped GEMM (rows_e x k) @ (k x n) per expert, no launches; ``loop``
        runs one GEMM per expert (each with its own ramp and wave tail)."""
        rows = [int(r) for r in rows]
        if layout == "loop":
            return sum(self.gemm_us(r, n, k, dtype, sm_share, hbm_share, act_bytes,
                                    weight_bytes, out_bytes) for r in rows if r > 0)
        bm, blocks = self._blocks(rows, layout)
        if not sum(blocks):
            return 0.0
        comp = self.compute_us(sum(blocks), bm, n, k, dtype, sm_share)
        used = sum(1 for r in rows if r > 0)
        nbytes = used * n * k * weight_bytes + sum(rows) * (k * act_bytes + n * out_bytes)
        mem = nbytes / (self.hbm_effective_GBps() * hbm_share * GBps)
        return self.sw.gemm_fixed_us + max(comp, mem)

    def grouped_gemm_us(self, rows: list, hidden: int, ffn: int, layout: str,
                        dtype: str = "bf16", sm_share: float = 1.0, hbm_share: float = 1.0,
                        weight_bytes: int = 2, act_bytes: int = 2) -> float:
        """SwiGLU experts: GEMM1 (rows x hidden -> 2 ffn), activation (read 2 ffn, write
        ffn), GEMM2 (rows x ffn -> hidden), with their launches (3, or 3 per expert for
        ``loop``)."""
        rows = [int(r) for r in rows]
        g1 = self.grouped_single_us(rows, 2 * ffn, hidden, layout, dtype, sm_share, hbm_share,
                                    weight_bytes, act_bytes, 2)
        g2 = self.grouped_single_us(rows, hidden, ffn, layout, dtype, sm_share, hbm_share,
                                    weight_bytes, act_bytes, 2)
        act = sum(rows) * ffn * (2 * 2 + act_bytes) / (self.copy_GBps() * hbm_share * GBps)
        kernels = 3 * sum(1 for r in rows if r > 0) if layout == "loop" else 3
        return g1 + act + g2 + kernels * self.launch_us

    # ------------------------------------------------------------------ SMs
    def sms_for(self, system_name: str) -> int:
        """SMs a system's communication kernels hold while they run (from config)."""
        key = SMS_KEYS.get(system_name)
        if key is None:
            raise ValueError(f"system {system_name!r}: expected one of {', '.join(SMS_KEYS)}")
        return int(getattr(self.sw, key))
