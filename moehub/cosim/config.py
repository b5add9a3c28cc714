"""Configuration schema of the co-simulation: systems, models and workloads.

Same conventions as :mod:`moehub.spec.config`: YAML files in ``config/system``,
``config/model`` and ``config/workload`` load into frozen dataclasses, units live in key
names, and every validation error is a :class:`ConfigError` naming the key and the value.
The YAML files cite the source of every number (or label it an assumption).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from ..spec.config import ConfigError, _check_types, _require, available, load_config

__all__ = ["ConfigError", "SoftwareCosts", "SystemConfig", "ModelConfig", "WorkloadConfig",
           "DTYPES", "LAUNCH_MODES", "WEIGHT_DTYPES", "dtype_row_bytes", "effective_dtypes",
           "effective_row_bytes", "load_system_config", "load_model_config",
           "load_workload_config", "available"]

#: datatypes of the rows on the wire (dispatch: token rows to experts; combine: outputs back)
DTYPES = ("bf16", "fp8")
#: how a system's kernels are launched: one by one from the host, or replayed from CUDA graphs
LAUNCH_MODES = ("eager", "graph")
#: weight datatypes of the expert GEMMs and the bytes per weight element they stand for
WEIGHT_DTYPES = {"bf16": 2, "fp8": 1}
#: elements that share one fp32 scale in fp8 rows (DeepEP / DeepGEMM fine-grained 1x128 scaling)
FP8_SCALE_BLOCK = 128


def dtype_row_bytes(hidden: int, dtype: str) -> int:
    """Bytes of one token row of ``hidden`` elements on the wire.

    bf16: 2 bytes per element. fp8: 1 byte per element plus one fp32 scale per 128
    elements (the 1x128 per-token-group scaling DeepEP's fp8 dispatch carries), so the
    scales are part of what the link moves."""
    if dtype == "bf16":
        return 2 * hidden
    if dtype == "fp8":
        return hidden + 4 * (-(-hidden // FP8_SCALE_BLOCK))
    raise ConfigError(f"dtype = {dtype!r}: must be one of {', '.join(DTYPES)}")


def _positive(obj, prefix: str, keys, allow_zero: bool = False) -> None:
    for key in keys:
        v = getattr(obj, key)
        if allow_zero:
            _require(v >= 0, f"{prefix}.{key}", v, "must be >= 0")
        else:
            _require(v > 0, f"{prefix}.{key}", v, "must be > 0")


@dataclass(frozen=True)
class SoftwareCosts:
    """Costs of the software stack on a platform (launches, syncs, collectives, GEMM
    efficiency, HBM) and the share of SMs each system gives to communication. Each is a
    constant of a component model in :mod:`moehub.cosim.components`; the YAML cites the
    measurement it comes from (``/work/shared/CALIBRATION.md`` rows) or says ASSUMPTION."""

    # launches and host syncs
    kernel_launch_us: float        #: one eager kernel launch on a stream (driver + runtime)
    graph_launch_us: float         #: per kernel replayed inside a CUDA graph
    d2h_sync_us: float             #: small device->host copy + cudaStreamSynchronize
    host_split_us: float           #: host math on the copied counts (splits, Python)
    device_barrier_us: float       #: a device-side barrier across all GPUs of the layer
    flag_poll_us: float            #: delay from a flag landing in memory to a polling CTA seeing it
    # collectives (NCCL-style)
    coll_empty_us: float           #: a collective with 0 bytes (no transfer enqueued)
    coll_base_us: float            #: base latency of a collective carrying data
    coll_hop_intra_us: float       #: latency per scale-up hop (NVLink / PCIe)
    coll_hop_inter_us: float       #: latency per network hop
    a2a_peer_intra_us: float       #: all-to-all: extra cost per peer inside the node
    a2a_peer_inter_us: float       #: all-to-all: extra cost per peer in another node
    coll_small_intra_GBps: float   #: small-message (LL protocol) bandwidth, one node
    coll_small_inter_GBps: float   #: small-message (LL protocol) bandwidth, several nodes
    intra_eff_max: float           #: fraction of the scale-up port a large transfer reaches
    inter_eff_max: float           #: fraction of the NIC a large transfer reaches
    coll_step_intra_us: float      #: per-message pipeline step of a collective, scale-up
    coll_step_inter_us: float      #: per-message pipeline step of a collective, network
    put_overhead_intra_bytes: float  #: per-put overhead of a one-sided put, scale-up (bytes)
    put_overhead_inter_bytes: float  #: per-put overhead of an RDMA put (bytes at NIC rate)
    hbm_efficiency: float          #: fraction of HBM bandwidth a copy/elementwise kernel reaches
    send_issue_GBps: float         #: rate at which a GPU's SMs issue fine-grained row stores/puts
    # SMs held by communication while it overlaps compute
    comm_sms_overlap: int          #: SMs given to communication by Comet / one-sided systems
    comm_sms_hub: int              #: SMs that issue the hub's sends (receive side needs none)
    comm_sms_deepep: int           #: DeepEP normal (high-throughput) kernels
    comm_sms_deepep_ll: int        #: DeepEP low-latency kernels while compute overlaps
    comm_sms_fused: int            #: fused dispatch+GEMM+combine kernels (FlashDMoE / Mega MoE)
    comm_sm_row_us: float          #: per-row fixed work of one comm SM (index, flags, issue)
    ll_call_intra_us: float        #: fixed cost of one low-latency dispatch/combine call in a node (beyond the launch)
    ll_call_inter_us: float        #: the same across nodes (IBGDA)
    comm_sm_GBps: float            #: bytes one comm SM moves per second between its rows
    # GEMMs and HBM
    gemm_eff_max: float            #: efficiency of a large, well-shaped BF16 GEMM
    gemm_eff_max_fp8: float        #: same for FP8 (fine-grained scaling)
    gemm_block_m: int              #: M block of the GEMM kernel (contiguous-layout alignment)
    gemm_block_m_small: int        #: M block used when an expert/GEMM has at most this many rows
    gemm_block_n_max: int          #: largest N block the kernel may pick
    gemm_block_n_step: int         #: N blocks are multiples of this
    gemm_n_half: float             #: N block at which the per-tile N factor is 1/2
    gemm_k_half: float             #: K at which the per-tile prologue/epilogue factor is 1/2
    gemm_fixed_us: float           #: ramp-up/tail of one GEMM kernel body
    hbm_gemm_efficiency: float     #: fraction of HBM a GEMM streaming weights reaches
    hbm_floor_frac: float          #: share of that ceiling a kernel keeps under any contention
    # how the layer's kernels are launched (LAUNCH_MODES): "eager" (every kernel pays
    # kernel_launch_us) or "graph" (the layer is captured in CUDA graphs as serving engines
    # capture decode: a kernel pays graph_launch_us, a host sync breaks the graph)
    launch_mode: str = "eager"
    #: a CPU proxy thread's time to post one RDMA message for a GPU (NVSHMEM IBRC and other
    #: proxy-thread transports; GPU-initiated IBGDA pays none), used by the low-latency
    #: libraries that post through a proxy (cosim/systems/deepep_ll.py); the default is the
    #: H100 + ConnectX-7 fit the H100 IB system YAMLs cite
    ll_proxy_msg_us: float = 1.32
    #: the low-latency library the ``deepep_ll`` baseline plays (cosim/systems/deepep_ll.py
    #: LIBRARIES: deepep, deepep-rdma, nccl-ep, pplx, pplx-ibrc); DeepEP's own mechanisms by
    #: default, as the baseline's name says (its published EP8-EP256 tables validate them)
    ll_library: str = "deepep"
    #: SMs HybridEP's dispatch and combine kernels hold (cosim/systems/hybridep.py):
    #: Megatron-Core's default (TransformerConfig.moe_hybridep_num_sms = 16, "in pure NVL
    #: scenarios, 16 SMs can generally achieve good bandwidth"), on every platform
    comm_sms_hybridep: int = 16
    #: per-row time of one SM of HybridEP's TMA kernels (the SM curve of
    #: Components.comm_GBps with kernel="hybridep"): fit, like comm_sm_row_us, on HybridEP's
    #: own kernel-only NVLink tables at 16 and 32 SMs on B200 / GB200 (DeepEP hybrid-ep
    #: branch, docs/README_Hybrid-EP.md; cosim/data/calibration_points.yaml, component
    #: sm-hybridep; cosim.calibration.HYBRIDEP_SM_FIT reproduces it); ASSUMPTION on Hopper,
    #: as the DeepEP curve: no Hopper NVLink sweep is published
    hybridep_sm_row_us: float = 0.09
    #: bytes per second one such SM moves between rows: the tables barely bound it (every
    #: point lies within 7 % of the port for any value above ~300 GB/s: a TMA copy does not
    #: pass the bytes through the SM's registers); the fit's grid picks it with the row time
    hybridep_sm_GBps: float = 1000.0

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], prefix: str) -> "SoftwareCosts":
        obj = cls(**_check_types(cls, prefix, raw))
        _require(obj.ll_proxy_msg_us >= 0, f"{prefix}.ll_proxy_msg_us", obj.ll_proxy_msg_us,
                 "must be >= 0")
        _positive(obj, prefix, ("comm_sms_hybridep", "hybridep_sm_row_us"), allow_zero=True)
        _positive(obj, prefix, ("hybridep_sm_GBps",))
        _require(obj.launch_mode in LAUNCH_MODES, f"{prefix}.launch_mode", obj.launch_mode,
                 f"must be one of {', '.join(LAUNCH_MODES)}")
        _positive(obj, prefix, ("kernel_launch_us", "graph_launch_us", "d2h_sync_us",
                                "host_split_us", "device_barrier_us", "flag_poll_us",
                                "coll_empty_us", "coll_base_us", "coll_hop_intra_us",
                                "coll_hop_inter_us", "a2a_peer_intra_us", "a2a_peer_inter_us",
                                "coll_step_intra_us", "coll_step_inter_us",
                                "put_overhead_intra_bytes", "put_overhead_inter_bytes",
                                "comm_sms_overlap", "comm_sms_hub", "comm_sms_deepep",
                                "comm_sms_deepep_ll", "comm_sms_fused", "gemm_fixed_us",
                                "comm_sm_row_us", "ll_call_intra_us", "ll_call_inter_us"),
                  allow_zero=True)
        _positive(obj, prefix, ("send_issue_GBps", "comm_sm_GBps", "coll_small_intra_GBps",
                                "coll_small_inter_GBps", "gemm_block_m", "gemm_block_m_small",
                                "gemm_block_n_max", "gemm_block_n_step", "gemm_n_half",
                                "gemm_k_half"))
        for key in ("hbm_efficiency", "gemm_eff_max", "gemm_eff_max_fp8", "intra_eff_max",
                    "inter_eff_max", "hbm_gemm_efficiency", "hbm_floor_frac"):
            v = getattr(obj, key)
            _require(0 < v <= 1, f"{prefix}.{key}", v, "must lie in (0, 1]")
        _require(obj.graph_launch_us <= obj.kernel_launch_us, f"{prefix}.graph_launch_us",
                 obj.graph_launch_us,
                 f"must be <= kernel_launch_us ({obj.kernel_launch_us}): a graph replays what "
                 "an eager launch does")
        _require(obj.gemm_block_m_small <= obj.gemm_block_m, f"{prefix}.gemm_block_m_small",
                 obj.gemm_block_m_small, f"must be <= gemm_block_m ({obj.gemm_block_m})")
        _require(obj.gemm_block_n_max % obj.gemm_block_n_step == 0, f"{prefix}.gemm_block_n_max",
                 obj.gemm_block_n_max,
                 f"must be a multiple of gemm_block_n_step ({obj.gemm_block_n_step})")
        return obj


@dataclass(frozen=True)
class SystemConfig:
    """GPUs, links and software costs of one machine (or cluster)."""

    name: str
    gpus: int                      #: GPUs that hold experts (expert-parallel group)
    gpus_per_node: int             #: GPUs joined by the scale-up link (NVLink or PCIe)
    gpu_name: str
    sms: int                       #: streaming multiprocessors per GPU
    gpu_clock_GHz: float
    peak_bf16_TFLOPs: float        #: dense BF16 tensor-core peak
    peak_fp8_TFLOPs: float         #: dense FP8 tensor-core peak (0: the GPU has no FP8)
    hbm_GBps: float                #: HBM bandwidth
    intra_link: str                #: "nvlink" or "pcie" (label only)
    intra_bw_GBps: float           #: per-GPU bandwidth per direction inside a node
    intra_latency_us: float        #: one-way latency of a write between GPUs of a node
    inter_bw_GBps: float           #: per-GPU NIC bandwidth per direction between nodes
    inter_latency_us: float        #: one-way latency of an RDMA write between nodes
    link_header_bytes: int         #: header bytes added to every link packet
    link_max_payload_bytes: int    #: largest payload of one link packet (bulk copies use it)
    local_copy_GBps: float         #: a GPU writing rows into its own memory (read + write)
    software: SoftwareCosts
    description: str = ""

    @property
    def nodes(self) -> int:
        """Nodes the GPUs span (a partial node counts: 64 GPUs of an NVL72 are one)."""
        return -(-self.gpus // self.gpus_per_node)

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def replace(self, **changes) -> "SystemConfig":
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["software"] = dataclasses.asdict(self.software)
        d.update(changes)
        return SystemConfig.from_dict(d, prefix=f"system[{self.name}]")

    def replace_software(self, **changes) -> "SystemConfig":
        """A copy with some software costs changed (e.g. ``launch_mode``), validated."""
        return self.replace(software={**dataclasses.asdict(self.software), **changes})

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], prefix: str = "system") -> "SystemConfig":
        if isinstance(raw, Mapping) and "software" in raw and not isinstance(raw["software"], SoftwareCosts):
            raw = dict(raw)
            raw["software"] = SoftwareCosts.from_dict(raw["software"], prefix + ".software")
        # 'software' is a nested dataclass; _check_types only checks its presence
        vals = _check_types(cls, prefix, raw)
        _require(isinstance(vals["software"], SoftwareCosts), prefix + ".software",
                 vals["software"], "must be a mapping of software costs")
        obj = cls(**vals)
        _positive(obj, prefix, ("gpus", "gpus_per_node", "sms", "gpu_clock_GHz",
                                "peak_bf16_TFLOPs", "hbm_GBps", "intra_bw_GBps",
                                "inter_bw_GBps", "link_max_payload_bytes", "local_copy_GBps"))
        _positive(obj, prefix, ("intra_latency_us", "inter_latency_us", "link_header_bytes",
                                "peak_fp8_TFLOPs"), allow_zero=True)
        _require(obj.gpus % obj.gpus_per_node == 0 or obj.gpus < obj.gpus_per_node,
                 f"{prefix}.gpus", obj.gpus,
                 f"must be a multiple of gpus_per_node ({obj.gpus_per_node}) or fewer")
        _require(obj.intra_link in ("nvlink", "pcie"), f"{prefix}.intra_link", obj.intra_link,
                 "must be 'nvlink' or 'pcie'")
        sw = obj.software
        _require(sw.comm_sms_overlap < obj.sms, f"{prefix}.software.comm_sms_overlap",
                 sw.comm_sms_overlap, f"must be < sms ({obj.sms})")
        for key in ("comm_sms_deepep", "comm_sms_deepep_ll", "comm_sms_fused", "comm_sms_hybridep"):
            _require(getattr(sw, key) < obj.sms, f"{prefix}.software.{key}",
                     getattr(sw, key), f"must be < sms ({obj.sms})")
        _require(sw.comm_sms_hub < obj.sms, f"{prefix}.software.comm_sms_hub",
                 sw.comm_sms_hub, f"must be < sms ({obj.sms})")
        return obj


@dataclass(frozen=True)
class ModelConfig:
    """The MoE model: expert shapes and the non-MoE layers for the end-to-end estimate."""

    name: str
    hidden: int                    #: model width (token row = hidden x act_bytes)
    expert_ffn: int                #: intermediate size of one routed expert (SwiGLU)
    experts: int                   #: routed experts per MoE layer
    topk: int                      #: experts per token
    layers: int                    #: transformer layers
    dense_layers: int              #: layers with a dense FFN instead of an MoE block
    dense_ffn: int                 #: intermediate size of the dense FFN (0 if none)
    shared_experts: int            #: shared experts applied to every token (computed locally)
    shared_expert_ffn: int         #: intermediate size of one shared expert
    attn_params: int               #: weights of one attention block (projections)
    attn_heads: int                #: query heads
    attn_qk_head_dim: int          #: per-head q.k dimension
    attn_v_head_dim: int           #: per-head value dimension
    act_bytes: int                 #: bytes per activation element (bf16 = 2)
    weight_bytes: int              #: bytes per weight element
    hub_config: str                #: hub config (config/hub) whose lanes/chunk/clock/tags/tile are used
    description: str = ""
    routing_groups: int = 1        #: expert groups (contiguous blocks of experts); 1 = unrestricted
    routing_topk_groups: int = 1   #: groups a token may route into (DeepSeek-V3 topk_group)
    dispatch_dtype: str = "bf16"   #: datatype of dispatched token rows on the wire (bf16 | fp8)
    combine_dtype: str = "bf16"    #: datatype of returned expert outputs on the wire (bf16 | fp8)

    @property
    def row_bytes(self) -> int:
        """Activation row in memory (GEMM inputs, copies): hidden x act_bytes."""
        return self.hidden * self.act_bytes

    @property
    def dispatch_row_bytes(self) -> int:
        """One dispatched row on the wire in ``dispatch_dtype`` (fp8 rows carry their scales)."""
        return dtype_row_bytes(self.hidden, self.dispatch_dtype)

    @property
    def combine_row_bytes(self) -> int:
        """One combined (returned) row on the wire in ``combine_dtype``."""
        return dtype_row_bytes(self.hidden, self.combine_dtype)

    @property
    def experts_per_group(self) -> int:
        return self.experts // self.routing_groups

    @property
    def group_limited(self) -> bool:
        """True when a token may not reach every expert group (node-limited routing)."""
        return self.routing_topk_groups < self.routing_groups

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers

    def replace(self, **changes) -> "ModelConfig":
        return ModelConfig.from_dict({**dataclasses.asdict(self), **changes},
                                     prefix=f"model[{self.name}]")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], prefix: str = "model") -> "ModelConfig":
        obj = cls(**_check_types(cls, prefix, raw))
        _positive(obj, prefix, ("hidden", "expert_ffn", "experts", "topk", "layers",
                                "attn_params", "attn_heads", "attn_qk_head_dim",
                                "attn_v_head_dim", "act_bytes", "weight_bytes"))
        _positive(obj, prefix, ("dense_layers", "dense_ffn", "shared_experts",
                                "shared_expert_ffn"), allow_zero=True)
        _require(obj.topk <= obj.experts, f"{prefix}.topk", obj.topk,
                 f"must be <= experts ({obj.experts})")
        _require(obj.dense_layers < obj.layers, f"{prefix}.dense_layers", obj.dense_layers,
                 f"must be < layers ({obj.layers})")
        _require(obj.dense_layers == 0 or obj.dense_ffn > 0, f"{prefix}.dense_ffn",
                 obj.dense_ffn, "must be > 0 when dense_layers > 0")
        _require(obj.shared_experts == 0 or obj.shared_expert_ffn > 0,
                 f"{prefix}.shared_expert_ffn", obj.shared_expert_ffn,
                 "must be > 0 when shared_experts > 0")
        obj._check_routing_groups(prefix)
        for key in ("dispatch_dtype", "combine_dtype"):
            _require(getattr(obj, key) in DTYPES, f"{prefix}.{key}", getattr(obj, key),
                     f"must be one of {', '.join(DTYPES)}")
        return obj

    def _check_routing_groups(self, prefix: str) -> None:
        """Group-limited routing needs whole groups and enough experts in the chosen groups."""
        g, tg = self.routing_groups, self.routing_topk_groups
        _require(g >= 1 and self.experts % g == 0, f"{prefix}.routing_groups", g,
                 f"must be >= 1 and divide experts ({self.experts})")
        _require(1 <= tg <= g, f"{prefix}.routing_topk_groups", tg,
                 f"must lie in 1..routing_groups ({g})")
        _require(self.topk <= tg * (self.experts // g), f"{prefix}.topk", self.topk,
                 f"must be <= routing_topk_groups x experts per group "
                 f"({tg} x {self.experts // g})")


ROUTINGS = ("uniform", "skewed", "trace")


@dataclass(frozen=True)
class WorkloadConfig:
    """Tokens per GPU and how they are routed."""

    name: str
    tokens_per_gpu: int            #: tokens each GPU routes in one layer (batch x sequence)
    routing: str                   #: uniform | skewed | trace
    seed: int
    skewness: float = 1.0          #: target tokens(most loaded expert) / mean (routing: skewed)
    trace_path: str = ""           #: .npy/.txt/.csv of expert ids, one row of top-k per token
    seq_len: int = 4096            #: sequence length for the attention roofline
    dispatch_dtype: str = ""       #: overrides the model's dispatch_dtype ("" = the model's)
    combine_dtype: str = ""        #: overrides the model's combine_dtype ("" = the model's)
    description: str = ""

    def replace(self, **changes) -> "WorkloadConfig":
        return WorkloadConfig.from_dict({**dataclasses.asdict(self), **changes},
                                        prefix=f"workload[{self.name}]")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], prefix: str = "workload") -> "WorkloadConfig":
        obj = cls(**_check_types(cls, prefix, raw))
        _require(obj.tokens_per_gpu >= 1, f"{prefix}.tokens_per_gpu", obj.tokens_per_gpu,
                 "must be >= 1")
        _require(obj.routing in ROUTINGS, f"{prefix}.routing", obj.routing,
                 f"must be one of {', '.join(ROUTINGS)}")
        _require(obj.skewness >= 1.0, f"{prefix}.skewness", obj.skewness,
                 "must be >= 1 (1 = perfectly balanced)")
        _require(obj.routing != "trace" or obj.trace_path, f"{prefix}.trace_path",
                 obj.trace_path, "a trace file is required when routing = trace")
        _require(obj.seq_len >= 1, f"{prefix}.seq_len", obj.seq_len, "must be >= 1")
        _require(obj.seed >= 0, f"{prefix}.seed", obj.seed, "must be >= 0")
        for key in ("dispatch_dtype", "combine_dtype"):
            _require(getattr(obj, key) in ("",) + DTYPES, f"{prefix}.{key}", getattr(obj, key),
                     f"must be '' (the model's) or one of {', '.join(DTYPES)}")
        return obj


def effective_dtypes(model: ModelConfig, workload: WorkloadConfig) -> tuple[str, str]:
    """(dispatch, combine) datatypes of a run: the workload's override, else the model's."""
    return (workload.dispatch_dtype or model.dispatch_dtype,
            workload.combine_dtype or model.combine_dtype)


def effective_row_bytes(model: ModelConfig, workload: WorkloadConfig) -> tuple[int, int]:
    """(dispatch, combine) wire bytes of one row after the workload's overrides."""
    d, c = effective_dtypes(model, workload)
    return dtype_row_bytes(model.hidden, d), dtype_row_bytes(model.hidden, c)


_load = load_config


def load_system_config(name_or_path: str) -> SystemConfig:
    return _load("system", SystemConfig, name_or_path)


def load_model_config(name_or_path: str) -> ModelConfig:
    return _load("model", ModelConfig, name_or_path)


def load_workload_config(name_or_path: str) -> WorkloadConfig:
    return _load("workload", WorkloadConfig, name_or_path)
