"""The design space of ``moehub explore``: its axes, the grid, and every point resolved to
the configurations it runs, all checked before any work.

A point is a hub (lanes, chunk bytes, tags per source, tile rows, experts per GPU, GPUs =
sources) on a workload (model, system, workload, tokens per GPU). It resolves to

* the **co-simulated hub**: the base hub config (``--hub``, else the model's
  ``hub_config``) with the hub axes applied, then the layer's derivation
  (:func:`moehub.cosim.layer.derive_hub`: sources = GPUs, experts = experts per GPU, rows of
  the dispatch datatype, region capacity a power of two >= GPUs x tokens). This is the hub
  the co-simulation runs and whose receive memory is reported;
* the **synthesized hub**: the same config with the synthesis sweep's reduction
  (:data:`moehub.synth.sweep.SWEEP_BASE`: rows cut to 8 chunks) and a narrow datapath
  (32 bits), so that a point synthesises in minutes, not tens of minutes. Row length and
  data width add flops per table entry and per lane but do not change the control paths
  that set the deepest stage (docs/synthesis.md, Sweeps); the area is therefore that of the
  reduced hub, and the tables say so.

* the **protocol features** (``features``: ``v1``, or protocol v2's ``multicast``,
  ``early_counts``, ``paged`` and protocol v3's ``relay``, ``reduce`` joined by ``+``): the
  co-simulation runs the hub with them (:mod:`moehub.cosim.systems.hub`), and the
  synthesized hub has their protocol-v2 fields as the co-simulation derives them
  (:func:`~moehub.cosim.systems.hub.hub_config_v2`: the multicast width, count packets, the
  page pool). A relay point needs a multi-node system; its relay and reduce units are
  synthesised on their own (``moehub synth-unit relay_control --nodes N``), not in the
  point's hub, and its ``synth_scope`` says so.

The page size is not an axis: a paged hub's page is its tile (``tile_rows``), and the pool
is sized by the layer (enough pages that no row can drop).
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from ..cosim.config import (ModelConfig, SystemConfig, WorkloadConfig, load_model_config,
                                   load_system_config, load_workload_config)
from ..spec.config import ConfigError, HubConfig, load_hub_config

#: hub axes: command-line key -> (HubConfig field, what it is)
HUB_AXES = {
    "lanes": ("lanes", "packet input lanes (packets per cycle; queue depths grow with them)"),
    "chunk_bytes": ("chunk_bytes", "payload bytes of one packet (power of two)"),
    "tags": ("tags_per_source", "row tags per source (rows in flight per source)"),
    "tile_rows": ("tile_rows", "rows per tile flag (within the base hub's min/max tile rows)"),
}
#: layer axes: they set the hub's experts and sources through the co-simulated layer
LAYER_AXES = {
    "experts": "local experts per GPU (the hub's experts); the model gets experts x GPUs routed "
               "experts of its own shape (hidden, FFN, top-k kept)",
    "sources": "GPUs of the layer (the hub's sources, one per GPU); nodes of the system's size",
}
#: workload axes: names of configs (or YAML paths) and the token count
WORKLOAD_AXES = {
    "model": "model config (config/model)",
    "system": "system config (config/system)",
    "workload": "workload config (config/workload)",
    "tokens": "tokens per GPU",
    "hub": "base hub config (config/hub)",
}
#: the protocol axis: the hub's features, ``v1`` or names joined by ``+``
FEATURE_AXES = {
    "features": "hub protocol features: v1, or multicast, early_counts, paged (protocol v2) and "
                "relay, reduce (protocol v3, multi-node systems) joined by '+'",
}
#: the value of ``features`` that names no feature
V1 = "v1"
INT_AXES = ("lanes", "chunk_bytes", "tags", "tile_rows", "experts", "sources", "tokens")
AXES = (*HUB_AXES, *LAYER_AXES, *WORKLOAD_AXES, *FEATURE_AXES)
#: keys refused with a reason (they would change nothing, or are another axis)
REFUSED = {
    key: "a paged hub's page is its tile (the tile_rows axis, with features=paged) and its "
         "pool is sized by the layer (no row can drop), so there is no page size to sweep"
    for key in ("page_bytes", "page_size", "page", "page_rows")
}

#: the synthesized hub: rows cut to this many chunks (the synthesis sweep's reduction)
SYNTH_CHUNKS = 8
#: ... and this datapath width (at most 8 x chunk bytes; the sweep's default)
SYNTH_DATA_BITS = 32

#: defaults of the fixed (non-swept) values
DEFAULTS = {"model": "mixtral-8x7b", "system": "h100x8", "workload": "small", "tokens": None,
            "hub": None, "features": V1}
#: the largest grid run without --max-points
MAX_POINTS = 256


@dataclass(frozen=True)
class Point:
    """One design point, resolved. ``values`` are the swept axes' values (in axis order)."""
    values: tuple
    system: SystemConfig
    model: ModelConfig
    workload: WorkloadConfig
    hub_base: HubConfig        #: what the co-simulation is given (hub axes applied)
    hub: HubConfig             #: the hub of every GPU in the co-simulated layer
    synth: HubConfig           #: the reduced hub that is synthesized
    period_ns: float
    meta: dict = field(default_factory=dict, compare=False)
    synth_lib: str = "osu018"  #: cell library of the synthesis (moehub synth --lib)
    hub_features: frozenset = frozenset()   #: the hub's protocol features (none: v1)

    @property
    def label(self) -> str:
        """``lanes=4 tags=8``: the swept values (``base`` when nothing is swept)."""
        return " ".join(f"{k}={_short(v)}" for k, v in self.values) or "base"

    @property
    def workload_label(self) -> str:
        """The workload the point runs: model, system, workload and tokens per GPU. Points
        are compared within one workload; experts per GPU and GPUs (sources) are design
        axes, compared within it (a speedup is over the best baseline on the same layer)."""
        s, m, w = self.system, self.model, self.workload
        return f"{m.name} on {s.name}, {w.name} {w.tokens_per_gpu} tok/GPU"


def _short(v) -> str:
    return Path(v).stem if isinstance(v, str) and ("/" in v or v.endswith((".yaml", ".yml"))) else str(v)


# ---------------------------------------------------------------------------- the spec
def _int_value(key: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ConfigError(f"axis {key} = {v!r}: must be an integer >= 1")
    try:
        n = int(v)
    except ValueError:
        raise ConfigError(f"axis {key} = {v!r}: must be an integer >= 1") from None
    if n < 1:
        raise ConfigError(f"axis {key} = {v!r}: must be an integer >= 1")
    return n


_LOADERS = {"model": load_model_config, "system": load_system_config,
            "workload": load_workload_config, "hub": load_hub_config}


def _name_value(key: str, v) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(f"axis {key} = {v!r}: must be a config name or YAML path")
    try:
        _LOADERS[key](v)
    except ConfigError as e:
        raise ConfigError(f"axis {key} = {v!r}: {e}") from None
    return v


def check_key(key) -> str:
    """``key`` if it is an axis; a :class:`ConfigError` naming it otherwise."""
    if key in REFUSED:
        raise ConfigError(f"axis {key}: not an axis: {REFUSED[key]}")
    if key not in AXES:
        raise ConfigError(f"axis {key!r}: unknown (known: {', '.join(AXES)})")
    return key


def features_of(text: str) -> frozenset:
    """The hub features a ``features`` value names (``v1``: none)."""
    return frozenset() if text == V1 else frozenset(text.split("+"))


def features_text(feats: frozenset) -> str:
    """A feature set as a ``features`` value: ``v1``, or the names in the table's order."""
    from ..cosim.systems.hub import ALL_FEATURES
    return "+".join(n for n in ALL_FEATURES if n in feats) or V1


def _features_value(key: str, v) -> str:
    """A ``features`` value checked (known names, ``reduce`` with ``relay``) and written
    in one order (``multicast+paged``, ``v1``), so two spellings are one point."""
    from ..cosim.systems.hub import ALL_FEATURES, check_features
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"axis {key} = {v!r}: must be {V1} or features joined by '+' "
                          f"(known: {', '.join(ALL_FEATURES)})")
    names = [n.strip() for n in v.split("+")]
    if names == [V1]:
        return V1
    try:
        check_features(names)
    except ValueError as e:
        raise ConfigError(f"axis {key} = {v!r}: {e}") from None
    return features_text(frozenset(names))


def check_value(key: str, v):
    """One value of axis ``key``, converted (integers) and checked (config names load,
    features are known)."""
    check_key(key)
    if key in FEATURE_AXES:
        return _features_value(key, v)
    return _int_value(key, v) if key in INT_AXES else _name_value(key, v)


def parse_axis(text: str) -> tuple[str, list]:
    """``lanes=2,4,8`` -> ("lanes", [2, 4, 8]) (values checked)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep:
        raise ConfigError(f"axis {text!r}: expected KEY=V1,V2,... (keys: {', '.join(AXES)})")
    check_key(key)
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not vals:
        raise ConfigError(f"axis {key}: no values")
    return key, [check_value(key, v) for v in vals]


@dataclass
class Spec:
    """What to explore: the swept axes (in order), the fixed values, synthesis options."""
    axes: dict = field(default_factory=dict)
    fixed: dict = field(default_factory=lambda: dict(DEFAULTS))
    name: str | None = None
    synth_chunks: int = SYNTH_CHUNKS
    data_bits: int = SYNTH_DATA_BITS
    period_ns: float | None = None
    synth_lib: str = "osu018"

    def add_axis(self, key: str, values: list) -> None:
        """Set axis ``key`` (a later definition replaces an earlier one, e.g. the command
        line over the YAML file); duplicate values are dropped, the order kept."""
        check_key(key)
        self.axes[key] = list(dict.fromkeys(check_value(key, v) for v in values))

    def set_fixed(self, key: str, value) -> None:
        check_key(key)
        self.fixed[key] = None if value is None else check_value(key, value)

    def combos(self) -> list[dict]:
        """Every combination of the axes' values (the first axis varies slowest)."""
        keys = list(self.axes)
        return [dict(zip(keys, vals)) for vals in itertools.product(*self.axes.values())]


#: keys of a YAML spec file
SPEC_KEYS = ("name", "axes", "fixed", "synth_chunks", "data_bits", "clock_ns")


def load_spec_file(path: str | Path, spec: Spec | None = None) -> Spec:
    """Read a YAML spec (``name``, ``axes: {lanes: [2, 4]}``, ``fixed: {model: ...}``,
    ``synth_chunks``, ``data_bits``, ``clock_ns``) into ``spec`` (a new one by default)."""
    spec = spec or Spec()
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError(f"grid file {str(p)!r}: cannot be read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"grid file {str(p)!r} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"grid file {str(p)!r}: expected a mapping with keys {', '.join(SPEC_KEYS)}")
    for key in raw:
        if key not in SPEC_KEYS:
            raise ConfigError(f"grid file {str(p)!r}: {key} = {raw[key]!r}: unknown key "
                              f"(known: {', '.join(SPEC_KEYS)})")
    axes, fixed = raw.get("axes") or {}, raw.get("fixed") or {}
    if not isinstance(axes, dict) or not isinstance(fixed, dict):
        raise ConfigError(f"grid file {str(p)!r}: axes and fixed must be mappings")
    for key, values in axes.items():
        spec.add_axis(key, values if isinstance(values, list) else [values])
    for key, value in fixed.items():
        spec.set_fixed(key, value)
    if raw.get("name") is not None:
        spec.name = str(raw["name"])
    for key, attr in (("synth_chunks", "synth_chunks"), ("data_bits", "data_bits")):
        if key in raw:
            setattr(spec, attr, _int_value(key, raw[key]))
    if "clock_ns" in raw:
        v = raw["clock_ns"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ConfigError(f"grid file {str(p)!r}: clock_ns = {v!r}: must be a number > 0")
        spec.period_ns = float(v)
    spec.name = spec.name or p.stem
    return spec


# ---------------------------------------------------------------------------- points
def resolve(values: dict, spec: Spec) -> Point:
    """The configurations of one point (``values``: swept axis -> value); a
    :class:`ConfigError` when the schema refuses the combination."""
    from ..cosim.config import effective_row_bytes
    from ..cosim.experiment import load_configs
    from ..cosim.layer import derive_hub
    from ..synth.flow import DEFAULT_PERIOD_NS
    from ..synth.sweep import queue_depths
    v = {**spec.fixed, **values}
    s, m, w = load_configs(v["system"], v["model"], v["workload"], v["tokens"], v.get("sources"))
    if v.get("experts") is not None:
        m = m.replace(experts=v["experts"] * s.gpus)
    base = load_hub_config(v["hub"] or m.hub_config)
    changes = {field_: v[key] for key, (field_, _) in HUB_AXES.items() if v.get(key) is not None}
    hub_base = base.replace(**changes, **queue_depths(base, changes.get("lanes", base.lanes)))
    G, E = s.gpus, m.experts
    if E % G if G <= E else G % E:        # the layer's placement rule (cosim/layer.py)
        raise ConfigError(f"system.gpus = {G}: the {E} experts of {m.name} neither divide "
                          f"evenly over {G} GPUs nor replicate onto them")
    hub = derive_hub(hub_base, m, G, w.tokens_per_gpu, effective_row_bytes(m, w)[0])
    feats = features_of(v.get("features") or V1)
    hub_v2 = _feature_hub(s, m, w, hub_base, feats) if feats else hub
    chunks = min(hub_v2.chunks_per_row, spec.synth_chunks)
    synth = hub_v2.replace(row_bytes=chunks * hub.chunk_bytes, row_stride_bytes=0,
                        data_bits=min(spec.data_bits, 8 * hub.chunk_bytes),
                        name=f"{hub.name}-synth")
    if spec.synth_lib == "asap7":             # its default clock: 1/1.98 GHz (synth/asap7.py)
        from ..synth import asap7
        default_period = asap7.DEFAULT_PERIOD_NS
    else:
        default_period = DEFAULT_PERIOD_NS
    return Point(tuple(values.items()), s, m, w, hub_base, hub, synth,
                 spec.period_ns or default_period, synth_lib=spec.synth_lib, hub_features=feats)


def _feature_hub(s, m, w, hub_base, feats: frozenset) -> HubConfig:
    """The co-simulated layer's hub with the protocol-v2 fields of ``feats`` (the layer
    itself decides them: experts per GPU, top-k, tokens; :func:`hub_config_v2`); a relay
    on one node is a :class:`ConfigError` naming the system."""
    from ..cosim.layer import Layer
    from ..cosim.systems.hub import check_features, hub_config_v2
    from ..cosim.systems.relay import check_layer
    from ..cosim.workload import make_routing
    feats = check_features(feats)
    L = Layer(s, m, w, make_routing(m, w, s.gpus), hub_base)
    cfg = hub_config_v2(L, feats)
    if "relay" in feats:
        check_layer(L, cfg)
    return cfg


def points(spec: Spec, max_points: int = MAX_POINTS) -> list[Point]:
    """Every point of the grid, resolved; the first refused combination is a
    :class:`ConfigError` naming the point and the key, before any work."""
    combos = spec.combos()
    if len(combos) > max_points:
        raise ConfigError(f"grid: {len(combos)} points ({' x '.join(f'{len(v)} {k}' for k, v in spec.axes.items())}) "
                          f"exceed --max-points {max_points}")
    out = []
    for values in combos:
        try:
            out.append(resolve(values, spec))
        except ConfigError as e:
            where = " ".join(f"{k}={_short(x)}" for k, x in values.items()) or "the base point"
            raise ConfigError(f"point {where}: {e}") from None
    return out


def config_dicts(p: Point) -> dict:
    """The resolved configurations of a point, without names and descriptions (they change
    no figure): what the cache key hashes, next to the evaluator and tool versions."""
    def strip(obj):
        d = asdict(obj)
        for k in ("name", "description"):
            d.pop(k, None)
        return d
    return {"system": strip(p.system), "model": strip(p.model), "workload": strip(p.workload),
            "hub": strip(p.hub), "hub_base": strip(p.hub_base), "synth": strip(p.synth),
            "period_ns": p.period_ns, **({"synth_lib": p.synth_lib} if p.synth_lib != "osu018" else {}),
            **({"hub_features": sorted(p.hub_features)} if p.hub_features else {})}
