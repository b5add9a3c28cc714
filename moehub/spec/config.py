"""The one configuration schema of moehub.

Configs are YAML files loaded into typed, frozen dataclasses. Units live in key names
(``chunk_bytes``, ``hub_clock_GHz``). Every part of the kit -- the RTL generator, the
reference model, the testbenches, synthesis and the co-simulation -- reads the same
:class:`HubConfig`, so a parameter change reaches all of them.

Validation errors are :class:`ConfigError` and always name the key and the bad value.
"""
from __future__ import annotations

import dataclasses
import math
from functools import cached_property
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

#: the YAML configs (data, not code): moehub/config/{hub,system,model,workload}
CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range."""


def field_bits(count: int) -> int:
    """Width of a packet field that indexes ``count`` things *and* can hold an
    out-of-range value (so the hub's range checks are exercisable for any count)."""
    return max(1, int(count).bit_length())


def index_bits(count: int) -> int:
    """Width that exactly indexes ``count`` things (0 .. count-1)."""
    return max(1, (int(count) - 1).bit_length())


def experts_per_gpu(experts: int, gpus: int) -> int:
    """The experts of a model of ``experts`` on each of ``gpus`` GPUs (expert parallelism:
    spread evenly; one each, replicated, when there are more GPUs than experts). The one
    rule of the co-simulation's layers and of the relay configs ``synth-unit`` derives."""
    return experts // gpus if gpus <= experts else 1


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _require(cond: bool, key: str, value: Any, why: str) -> None:
    if not cond:
        raise ConfigError(f"{key} = {value!r}: {why}")


def _check_types(cls, prefix: str, raw: Mapping[str, Any]) -> dict:
    """Reject unknown keys, missing required keys and values of the wrong type."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{prefix}: expected a mapping, got {type(raw).__name__}")
    known = {f.name: f for f in fields(cls)}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{prefix}.{key} = {raw[key]!r}: unknown key "
                              f"(known: {', '.join(sorted(known))})")
    out = {}
    for name, f in known.items():
        if name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{prefix}.{name}: missing required key")
            continue
        value = raw[name]
        want = f.type if isinstance(f.type, type) else {"int": int, "float": float,
                                                         "str": str, "bool": bool}.get(f.type)
        if want is int:
            _require(isinstance(value, int) and not isinstance(value, bool),
                     f"{prefix}.{name}", value, "must be an integer")
        elif want is float:
            _require(isinstance(value, (int, float)) and not isinstance(value, bool),
                     f"{prefix}.{name}", value, "must be a number")
            value = float(value)
        elif want is str:
            _require(isinstance(value, str), f"{prefix}.{name}", value, "must be a string")
        elif want is bool:
            _require(isinstance(value, bool), f"{prefix}.{name}", value, "must be true or false")
        out[name] = value
    return out


#: Groups of `lanes` packets the event and credit queues must hold: the packet manager's
#: five pipeline registers before its B stage plus the group it accepts
#: (moehub.spec.timing.IN_FLIGHT_GROUPS + 1).
QUEUE_GROUPS = 6


@dataclass(frozen=True)
class HubConfig:
    """Parameters of one GPU's receive hub.

    Structural parameters (widths, table sizes, lanes) are fixed at RTL generation;
    run-time parameters (region bases and capacities, tile size, timeout) are written
    through the CSR port, and the values here are their defaults.
    """

    name: str
    sources: int                 #: GPUs that send rows to this hub (this GPU included)
    experts: int                 #: local experts on this GPU (logical destinations)
    lanes: int                   #: packet input lanes (packets accepted per cycle)
    chunk_bytes: int             #: payload bytes of one data packet
    row_bytes: int               #: bytes of one token row (hidden x dtype bytes)
    tags_per_source: int         #: in-flight rows per source (row-table entries per source)
    max_rows_per_expert: int     #: largest region capacity in rows (power of two)
    tile_rows: int               #: default rows per tile (the expert GEMM's M tile)
    min_tile_rows: int           #: smallest tile the tracker supports (sizes its counters)
    max_tile_rows: int           #: largest tile the tracker supports (counter width)
    token_bits: int              #: width of the source token id
    topk: int                    #: experts per token (range of the top-k slot field)
    addr_bits: int               #: physical address width of memory writes
    data_bits: int               #: chunk data width carried through the RTL (narrow in simulation)
    hub_clock_GHz: float         #: clock the hub is evaluated at
    description: str = ""
    link_GBps: float = 450.0     #: payload bandwidth per direction the hub must absorb (its GPU's NVLink; NVLink4 by default)
    row_stride_bytes: int = 0    #: distance between rows in a region; 0 means row_bytes
    event_queue_depth: int = 32  #: control-event queue (metadata, completions) entries
    credit_queue_depth: int = 32 #: credit-return queue entries
    timeout_cycles: int = 1 << 20  #: default watchdog: idle cycles before a forced flush (0 = off)
    # ---- protocol v2; the defaults are protocol v1 ----
    max_targets: int = 1         #: experts of this GPU one row may name (multicast; 1 = one row per (token, expert))
    count_packets: bool = False  #: per-(source, expert) count packets: an expert completes the moment its counts are met
    pool_pages: int = 0          #: pages of the receive pool (paged mode, one page = one tile of rows); 0 = static regions
    # ---- protocol v3: relay hubs across nodes; the defaults are one node, no relay ----
    nodes: int = 1               #: nodes of the system; the sources are nodes x gpus_per_node GPUs
    gpus_per_node: int = 0       #: GPUs of one node (0: every source in one node)
    relay: bool = False          #: relay hub: one row per (token, remote node) arrives here and is written or forwarded in the node
    forward_tags: int = 0        #: (relay) tags of the forward credit class, per (relay, destination GPU) pair of a node
    reduce_tokens: int = 0       #: (relay) tokens per remote source the reduce keeps a record for (a power of two; 0: every token id)
    partial_tags: int = 0        #: (relay) tags of the partial credit class, per (sender GPU, relay) pair of a node; 0: tags_per_source

    # ---- derived quantities (one place, used by RTL, model and tests) ----
    @cached_property
    def chunks_per_row(self) -> int:
        return self.row_bytes // self.chunk_bytes

    @cached_property
    def stride_bytes(self) -> int:
        return self.row_stride_bytes or self.row_bytes

    @cached_property
    def src_bits(self) -> int:
        return field_bits(self.sources)

    @cached_property
    def tag_bits(self) -> int:
        return field_bits(self.tags_per_source)

    @cached_property
    def expert_bits(self) -> int:
        return field_bits(self.experts)

    @cached_property
    def chunk_bits(self) -> int:
        return field_bits(self.chunks_per_row)

    @cached_property
    def slot_bits(self) -> int:
        return index_bits(self.topk)

    @cached_property
    def row_bits(self) -> int:
        """Width of a row index inside one expert region (0 .. max_rows_per_expert-1)."""
        return index_bits(self.max_rows_per_expert)

    @cached_property
    def cap_bits(self) -> int:
        """Width of a capacity / row count (0 .. max_rows_per_expert)."""
        return field_bits(self.max_rows_per_expert)

    @cached_property
    def count_bits(self) -> int:
        """Width of a per-source row count (end-of-stream packets, per-source counters)."""
        return field_bits(self.experts * self.max_rows_per_expert)

    @cached_property
    def entries(self) -> int:
        """Row-table entries: one per (source, tag)."""
        return self.sources * self.tags_per_source

    @cached_property
    def tiles_per_expert(self) -> int:
        return self.max_rows_per_expert // self.min_tile_rows

    @cached_property
    def tile_count_bits(self) -> int:
        return field_bits(self.max_tile_rows)

    @cached_property
    def multicast(self) -> bool:
        """Rows name a set of experts (protocol v2): the data lands once, in the pool."""
        return self.max_targets > 1

    @cached_property
    def node_gpus(self) -> int:
        """GPUs of one node (``gpus_per_node``, or every source when it is 0)."""
        return self.gpus_per_node or self.sources

    @cached_property
    def node_bits(self) -> int:
        """Width of a node id in the relay formats (holds an out-of-range node too)."""
        return field_bits(self.nodes)

    @cached_property
    def gpu_bits(self) -> int:
        """Width of a GPU's local rank in its node (holds an out-of-range rank too)."""
        return field_bits(self.node_gpus)

    @cached_property
    def relay_targets(self) -> int:
        """(Protocol v3) target entries of a relay row: a token's top-k experts may all sit in
        one remote node, and one row per (token, node) carries every one of them."""
        return self.topk

    @cached_property
    def relay_window(self) -> int:
        """(Protocol v3) relay rows a relay hub can hold at once: the remote GPUs of its
        local rank (one per other node) each hold ``tags_per_source`` of its tags. Its row
        queue and its staging buffer are this deep, so accepting a relay row never waits."""
        return (self.nodes - 1) * self.tags_per_source

    @cached_property
    def partial_span(self) -> int:
        """(Protocol v3) partial output rows one GPU of the node may have in flight to one
        relay: ``partial_tags``, or ``tags_per_source`` when it is 0 (ASSUMPTION: the
        partial class sized as the direct class, as the forward class is)."""
        return self.partial_tags or self.tags_per_source

    @cached_property
    def partial_window(self) -> int:
        """(Protocol v3) partial rows a relay hub can hold at once: every GPU of its node
        (itself included: its own experts' partial rows come through its input too) holds
        ``partial_span`` of its P tags. Its partial staging has this many row slots."""
        return self.node_gpus * self.partial_span

    @cached_property
    def reduce_token_span(self) -> int:
        """(Protocol v3) tokens per remote source the reduce's record table holds:
        ``reduce_tokens``, or every token id when it is 0."""
        return self.reduce_tokens or 1 << self.token_bits

    @cached_property
    def reduce_records(self) -> int:
        """(Protocol v3) records of the reduce's table: one per (remote source of this
        hub's local rank, token) -- ``(nodes - 1) x reduce_token_span`` (a sum's source is
        in another node; none comes from this one)."""
        return (self.nodes - 1) * self.reduce_token_span

    @cached_property
    def paged(self) -> bool:
        return self.pool_pages > 0

    @cached_property
    def pool_rows(self) -> int:
        """Rows the pool addresses: the paged pool at the largest tile, or (multicast,
        static) one arena as large as all the static regions together."""
        return self.pool_pages * self.max_tile_rows if self.paged else self.experts * self.max_rows_per_expert

    @cached_property
    def loc_bits(self) -> int:
        """Width of a row's place in the pool (multicast metadata words point there)."""
        return index_bits(self.pool_rows)

    @cached_property
    def page_bits(self) -> int:
        return index_bits(max(self.pool_pages, 1))

    @cached_property
    def meta_word_bytes(self) -> int:
        """Bytes of one metadata entry ({slot, token, source} packed, source in the low bits;
        with multicast the row's place in the pool above them)."""
        bits = self.src_bits + self.token_bits + self.slot_bits + (self.loc_bits if self.multicast else 0)
        return 4 if bits <= 32 else 8 if bits <= 64 else 16

    @cached_property
    def line_rate_GBps(self) -> float:
        """Payload bandwidth the hub absorbs at one packet per lane per cycle."""
        return self.lanes * self.chunk_bytes * self.hub_clock_GHz

    @cached_property
    def receive_bytes(self) -> int:
        """Receive memory reserved for one layer at the largest region capacity (regions are
        reserved once, ``rowspMalloc``-style, for the worst case): every expert's region of
        ``max_rows_per_expert`` rows of ``stride_bytes``, its metadata array (one word per
        row), the tile flags (one 4-byte word per tile of the smallest size) and the count
        and done words (docs/hub.md, the outputs)."""
        e, rows = self.experts, self.max_rows_per_expert
        return (e * rows * (self.stride_bytes + self.meta_word_bytes)
                + 4 * e * self.tiles_per_expert + 4 * (e + 1))

    def replace(self, **changes) -> "HubConfig":
        """A validated copy with some fields changed (sweeps, synthesis data width)."""
        return HubConfig.from_dict({**dataclasses.asdict(self), **changes})

    # ---- validation ----
    def __post_init__(self):
        p = f"hub[{self.name}]"
        for key in ("sources", "experts", "lanes", "chunk_bytes", "row_bytes", "tags_per_source",
                    "token_bits", "topk", "addr_bits", "data_bits", "max_rows_per_expert",
                    "tile_rows", "min_tile_rows", "max_tile_rows", "event_queue_depth",
                    "credit_queue_depth"):
            _require(getattr(self, key) >= 1, f"{p}.{key}", getattr(self, key), "must be >= 1")
        _require(self.lanes <= 16, f"{p}.lanes", self.lanes, "at most 16 lanes are supported")
        _require(_is_pow2(self.chunk_bytes), f"{p}.chunk_bytes", self.chunk_bytes,
                 "must be a power of two")
        _require(self.row_bytes % self.chunk_bytes == 0, f"{p}.row_bytes", self.row_bytes,
                 f"must be a multiple of chunk_bytes ({self.chunk_bytes})")
        _require(self.row_stride_bytes == 0 or self.row_stride_bytes >= self.row_bytes,
                 f"{p}.row_stride_bytes", self.row_stride_bytes,
                 f"must be 0 or at least row_bytes ({self.row_bytes})")
        _require(self.row_stride_bytes % self.chunk_bytes == 0, f"{p}.row_stride_bytes",
                 self.row_stride_bytes, f"must be a multiple of chunk_bytes ({self.chunk_bytes})")
        for key in ("max_rows_per_expert", "tile_rows", "min_tile_rows", "max_tile_rows",
                    "event_queue_depth", "credit_queue_depth"):
            _require(_is_pow2(getattr(self, key)), f"{p}.{key}", getattr(self, key),
                     "must be a power of two")
        _require(self.min_tile_rows <= self.tile_rows <= self.max_tile_rows, f"{p}.tile_rows",
                 self.tile_rows, f"must lie in [min_tile_rows={self.min_tile_rows}, "
                 f"max_tile_rows={self.max_tile_rows}]")
        _require(self.max_tile_rows <= self.max_rows_per_expert, f"{p}.max_tile_rows",
                 self.max_tile_rows, f"must be <= max_rows_per_expert ({self.max_rows_per_expert})")
        _require(8 <= self.addr_bits <= 64, f"{p}.addr_bits", self.addr_bits, "must be in 8..64")
        _require(self.data_bits <= 8 * self.chunk_bytes, f"{p}.data_bits", self.data_bits,
                 f"must be <= 8 x chunk_bytes ({8 * self.chunk_bytes})")
        _require(self.token_bits <= 32, f"{p}.token_bits", self.token_bits, "must be <= 32")
        _require(self.row_bytes >= 2 * self.chunk_bytes, f"{p}.row_bytes", self.row_bytes,
                 f"must be at least two chunks (2 x {self.chunk_bytes}): a packet then never "
                 "both opens and completes a row")
        _require(1 <= self.max_targets <= min(self.experts, self.topk), f"{p}.max_targets",
                 self.max_targets, f"must be in 1..min(experts, topk) = {min(self.experts, self.topk)}")
        _require(self.pool_pages >= 0, f"{p}.pool_pages", self.pool_pages, "must be >= 0 (0 = static regions)")
        _require(self.pool_pages < 1 << 16, f"{p}.pool_pages", self.pool_pages,
                 "a tile flag names its page in 16 bits: at most 65535 pages")
        # The packet manager accepts a group only when the queues have room for one event
        # and one credit per packet in flight: QUEUE_GROUPS groups of `lanes` packets.
        q = QUEUE_GROUPS * self.lanes
        _require(self.event_queue_depth >= q, f"{p}.event_queue_depth", self.event_queue_depth,
                 f"must be >= {QUEUE_GROUPS} x lanes ({q}) for the hub to accept a group every cycle")
        _require(self.credit_queue_depth >= q, f"{p}.credit_queue_depth", self.credit_queue_depth,
                 f"must be >= {QUEUE_GROUPS} x lanes ({q}) for the hub to accept a group every cycle")
        _require(self.timeout_cycles >= 0, f"{p}.timeout_cycles", self.timeout_cycles,
                 "must be >= 0 (0 disables the watchdog)")
        _require(self.hub_clock_GHz > 0, f"{p}.hub_clock_GHz", self.hub_clock_GHz, "must be > 0")
        _require(self.link_GBps > 0, f"{p}.link_GBps", self.link_GBps, "must be > 0")
        self._check_relay(p)
        # The largest address the hub can form must fit addr_bits.
        need = (self.max_rows_per_expert * self.stride_bytes).bit_length()
        _require(need <= self.addr_bits, f"{p}.addr_bits", self.addr_bits,
                 f"a region of max_rows_per_expert x row stride needs {need} bits")

    def _check_relay(self, p: str) -> None:
        """Protocol v3's keys: the node shape, and what a relay hub needs (the v2 multicast
        row wide enough for all of a token's experts on one GPU, and forward tags)."""
        _require(self.nodes >= 1, f"{p}.nodes", self.nodes, "must be >= 1")
        _require(self.gpus_per_node >= 0, f"{p}.gpus_per_node", self.gpus_per_node,
                 "must be >= 0 (0 = every source in one node)")
        _require(self.forward_tags >= 0, f"{p}.forward_tags", self.forward_tags, "must be >= 0")
        _require(self.partial_tags >= 0, f"{p}.partial_tags", self.partial_tags,
                 "must be >= 0 (0 = tags_per_source)")
        if self.gpus_per_node:
            _require(self.nodes * self.gpus_per_node == self.sources, f"{p}.gpus_per_node",
                     self.gpus_per_node, f"nodes ({self.nodes}) x gpus_per_node must equal "
                     f"sources ({self.sources}): a hub hears from every GPU")
        else:
            _require(self.nodes == 1, f"{p}.nodes", self.nodes,
                     "more than one node needs gpus_per_node (nodes x gpus_per_node = sources)")
        if not self.relay:
            _require(self.forward_tags == 0, f"{p}.forward_tags", self.forward_tags,
                     "forward tags exist only with relay: true (must be 0)")
            _require(self.reduce_tokens == 0, f"{p}.reduce_tokens", self.reduce_tokens,
                     "the reduce's record table exists only with relay: true (must be 0)")
            _require(self.partial_tags == 0, f"{p}.partial_tags", self.partial_tags,
                     "partial tags exist only with relay: true (must be 0)")
            return
        r = self.reduce_tokens
        _require(r >= 0 and r & (r - 1) == 0 and r <= 1 << self.token_bits, f"{p}.reduce_tokens", r,
                 f"must be 0 (every token id) or a power of two <= 2**token_bits = {1 << self.token_bits}")
        _require(self.nodes >= 2, f"{p}.relay", self.relay,
                 f"a relay hub needs >= 2 nodes (nodes = {self.nodes})")
        want = min(self.experts, self.topk)
        _require(self.max_targets == want, f"{p}.max_targets", self.max_targets,
                 f"relay: true implies rows carrying every expert of a token on one GPU (protocol "
                 f"v2's multicast row; one expert per GPU: a plain row): max_targets must be "
                 f"min(experts, topk) = {want}")
        _require(self.forward_tags >= 1, f"{p}.forward_tags", self.forward_tags,
                 "relay: true needs >= 1 forward tag per (relay, destination GPU) pair")
        _require(self.forward_tags <= self.tags_per_source, f"{p}.forward_tags", self.forward_tags,
                 f"a forward row is the packet manager's row of (original source, forward tag): "
                 f"at most tags_per_source = {self.tags_per_source} forward tags")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], prefix: str = "hub") -> "HubConfig":
        return cls(**_check_types(cls, prefix, raw))


def _load_yaml(path: Path) -> dict:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r}: expected a mapping at top level")
    return data


def resolve_config_path(kind: str, name_or_path: str) -> Path:
    """``tiny`` -> ``config/hub/tiny.yaml``; an existing path is returned as is."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    return CONFIG_DIR / kind / f"{name_or_path}.yaml"


def available(kind: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / kind).glob("*.yaml"))


def load_config(kind: str, cls, name_or_path: str):
    """Load a config of one kind (a folder of config/) by name or path into ``cls``."""
    path = resolve_config_path(kind, name_or_path)
    if not path.exists():
        raise ConfigError(f"{kind} config {name_or_path!r} not found (known: "
                          f"{', '.join(available(kind))})")
    data = _load_yaml(path)
    data.setdefault("name", path.stem)
    return cls.from_dict(data, prefix=f"{kind}[{path.stem}]")


def load_hub_config(name_or_path: str) -> HubConfig:
    """Load a hub config by name (``tiny``, ``mixtral-8gpu``, ...) or by path."""
    return load_config("hub", HubConfig, name_or_path)


HUB_CONFIGS = ("tiny", "mixtral-8gpu", "deepseek-v3-8gpu", "b200-nvlink5", "nvl72")
