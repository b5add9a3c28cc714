"""The grid of ``moehub headline``: which points run, with which systems, checked before
any work.

A *point* is one MoE layer: a system config, a model, tokens per GPU and a
**compute-to-link ratio** (:func:`scale_compute_to_link`). On every point the software
baselines and every *hub variant* run on the same routing; the hub row of the table is
the fastest variant (:mod:`.headline_pick`).

A grid is a list of *blocks*, each a product of systems x models x tokens x ratios, so
that a preset can pair the cheap 8-GPU boxes with every size and the wide-EP systems with
the sizes where they are affordable (:data:`PRESETS`). The command line builds one block
(``--systems``, ``--models``, ``--tokens``, ``--compute-link-ratio``) or starts from a
preset (``--grid default|full|quick``) and replaces its axes with the given ones.

Every value is checked here: a bad one is a :class:`UsageError` naming the option and the
value (``moehub`` exits 2) before the first point runs.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from .config import ModelConfig, SystemConfig, WorkloadConfig
from ..spec.config import ConfigError
from ..argcheck import UsageError
from .systems.hub import ALL_FEATURES, V3_FEATURES, check_features

#: hub variants run by default: protocol v1 and the protocol-v2 features that change the
#: layer's time. ``paged`` is left out: page allocation is in the hub's pipeline and
#: changes receive memory, not time (:mod:`.systems.hub`), so a paged variant's latency
#: equals the same variant without pages; name it in ``--hub-variants`` to run it anyway
DEFAULT_VARIANTS = ("v1", "early_counts", "multicast", "multicast+early_counts", "relay",
                    "relay+reduce")
#: points with more routed rows (GPUs x tokens x top-k) are skipped and listed: the hub
#: model takes about a second per 100k rows and a system runs 2-8 passes (a 32K-token
#: DeepSeek-V3 layer on 8 GPUs is 2.1M rows); ``--max-rows`` moves the limit
MAX_ROWS = 600_000
#: the largest grid run without ``--max-points``
MAX_POINTS = 2000


@dataclass(frozen=True)
class Block:
    """A product of axes: every system x model x tokens x compute-to-link ratio."""
    systems: tuple
    models: tuple
    tokens: tuple
    ratios: tuple = (1.0,)


#: the grids by name.
#:
#: ``default``: the map, sized to finish within half an hour on 2 cores (7 minutes idle;
#: the measured figure is in ``docs/headline.md``). 8-GPU boxes (H100, B200) from decode (1 token per
#: GPU) to prefill (32768), Mixtral-8x7B and DeepSeek-V3 (its released FP8 checkpoint, as
#: served); wide expert parallelism with DeepSeek-V3 (256 experts: the model deployed that
#: way) at decode and small prefill sizes, where the hub's case is (fixed costs are most
#: of the layer): GB200 NVL72 as EP64 and EP72 (redundant expert slots) and H100 clusters
#: of 4 and 8 nodes over InfiniBand (EP32, EP64). Points over ``MAX_ROWS`` are skipped
#: and listed.
#:
#: ``full``: the default and the widest systems: two NVL72 racks over InfiniBand as EP128
#: and 32 H100 nodes as EP256, and the 8-node cluster at 512 tokens per GPU. Hours on 2
#: cores: a 256-GPU layer costs minutes per system and pass (``docs/cosim.md``, "How the
#: cost grows"), so this grid is for a cluster (``--cluster``, ``--scheduler``).
#:
#: ``quick``: about a minute on 2 cores today: the 8-GPU boxes at three sizes and the
#: NVL72 at one token per GPU, Mixtral-8x7B; for tests, CI and a first look.
_BOXES = Block(("h100x8", "b200x8"), ("mixtral-8x7b", "deepseek-v3-fp8"),
               (1, 8, 32, 128, 512, 2048, 8192, 32768))
_WIDE = Block(("gb200-nvl72", "gb200-nvl72-ep72", "h100x32-ib"), ("deepseek-v3-fp8",),
              (1, 8, 32, 128, 512))
_EP64_IB = Block(("h100x64-ib",), ("deepseek-v3-fp8",), (1, 8, 32, 128))
PRESETS = {
    "default": (_BOXES, _WIDE, _EP64_IB),
    "full": (_BOXES, _WIDE, Block(("h100x64-ib",), ("deepseek-v3-fp8",), (1, 8, 32, 128, 512)),
             Block(("gb200-nvl72x2-ep128-ib", "h100x256-ib"), ("deepseek-v3-fp8",),
                   (1, 8, 32, 128, 512))),
    "quick": (
        Block(("h100x8", "b200x8"), ("mixtral-8x7b",), (1, 32, 512)),
        Block(("gb200-nvl72",), ("mixtral-8x7b",), (1,)),
    ),
}


# ---------------------------------------------------------------------------- the override
def scale_compute_to_link(system: SystemConfig, ratio: float) -> SystemConfig:
    """``system`` with its compute ``ratio`` times faster against its links: the dense
    BF16 and FP8 peaks (every GEMM's compute-bound rate, :meth:`Components.peak_TFLOPs`)
    scaled by ``ratio``; link bandwidths and latencies, HBM, copy rates and software costs
    kept. The published claims come from simulated or older GPUs whose compute-to-link
    ratio is not H100's 989 TFLOP/s against 450 GB/s; this is the one knob that moves a
    system along that axis. HBM is kept on purpose: a decode layer's GEMMs stream weights,
    so at small sizes the ratio changes little (the map shows where it matters). The name
    gets ``@cl<ratio>`` so that tables and cache records say which one ran."""
    if ratio == 1.0:
        return system
    return system.replace(name=f"{system.name}@cl{ratio:g}",
                          peak_bf16_TFLOPs=system.peak_bf16_TFLOPs * ratio,
                          peak_fp8_TFLOPs=system.peak_fp8_TFLOPs * ratio)


# ---------------------------------------------------------------------------- values
def parse_names(flag: str, text: str) -> tuple:
    """``a,b`` -> ("a", "b"); empty is refused."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError(flag, text, "no values (expected comma-separated names)")
    return names


def parse_ints(flag: str, text: str, low: int = 1) -> tuple:
    """``1,32,512`` -> (1, 32, 512), each an integer >= ``low``."""
    out = []
    for item in parse_names(flag, text):
        try:
            v = int(item)
        except ValueError:
            raise UsageError(flag, item, f"must be an integer >= {low}") from None
        if v < low:
            raise UsageError(flag, item, f"must be an integer >= {low}")
        out.append(v)
    return tuple(out)


def parse_ratios(flag: str, text: str) -> tuple:
    """``0.25,0.5,1,2`` -> (0.25, 0.5, 1.0, 2.0), each a finite number > 0."""
    out = []
    for item in parse_names(flag, text):
        try:
            v = float(item)
        except ValueError:
            v = None
        if v is None or not 0 < v < float("inf"):
            raise UsageError(flag, item, "must be a number > 0 (compute scaled by it "
                             "against the links; 1: the system as configured)")
        out.append(v)
    return tuple(out)


def parse_variant(text: str) -> frozenset:
    """A hub variant: ``v1`` (no protocol-v2 feature) or features joined by ``+``
    (protocol v2's and v3's: ``relay``, ``relay+reduce``)."""
    name = text.strip()
    if name == "v1":
        return frozenset()
    feats = [f for f in name.split("+") if f]
    bad = [f for f in feats if f not in ALL_FEATURES]
    if bad or not feats:
        what = f"unknown hub feature {bad[0]!r}" if bad else "empty"
        raise UsageError("--hub-variants", name, f"{what} (a variant is v1 or features joined "
                         f"by '+': {', '.join(ALL_FEATURES)})")
    try:
        check_features(feats)
    except ValueError as e:
        raise UsageError("--hub-variants", name, str(e)) from None
    return frozenset(feats)


def variant_name(features) -> str:
    """The canonical name of a feature set: ``v1``, ``early_counts``, ``multicast+early_counts``,
    ``relay+reduce`` (features in :data:`ALL_FEATURES` order)."""
    return "+".join(f for f in ALL_FEATURES if f in features) or "v1"


def applies(point: "Point", features) -> bool:
    """Whether a hub variant runs on the point: protocol v3's relay hubs need a layer over
    two or more nodes (on one node there is nothing to relay) and at least two experts of
    a token able to land on one GPU (the relay row is protocol v2's multicast row,
    ``max_targets`` = min(experts per GPU, top-k) >= 2); elsewhere a cell is the best of
    the other variants."""
    if not set(features) & set(V3_FEATURES):
        return True
    s, m = point.system, point.model
    per_gpu = m.experts // s.gpus if s.gpus <= m.experts else 1
    return -(-s.gpus // s.gpus_per_node) >= 2 and min(per_gpu, m.topk) >= 2


def parse_variants(text: str) -> tuple:
    """``v1,multicast+early_counts`` -> canonical variant names, duplicates dropped."""
    return tuple(dict.fromkeys(variant_name(parse_variant(v))
                               for v in parse_names("--hub-variants", text)))


# ---------------------------------------------------------------------------- points
@dataclass(frozen=True)
class Point:
    """One layer of the grid, resolved to the configs it runs."""
    system_config: str         #: the name given (config name or YAML path)
    model_name: str
    tokens: int
    ratio: float
    system: SystemConfig       #: loaded, the compute-to-link override applied
    model: ModelConfig
    workload: WorkloadConfig
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def rows(self) -> int:
        return self.system.gpus * self.tokens * self.model.topk

    @property
    def system_short(self) -> str:
        """The system config as tables name it: a YAML path by its file's stem."""
        v = self.system_config
        return Path(v).stem if "/" in v or v.endswith((".yaml", ".yml")) else v

    @property
    def label(self) -> str:
        cl = "" if self.ratio == 1.0 else f" cl{self.ratio:g}"
        return f"{self.system_config} {self.model_name} {self.tokens} tok/GPU{cl}"


def _load(flag: str, name: str, fn):
    try:
        return fn()
    except ConfigError as e:
        raise UsageError(flag, name, str(e)) from None


def resolve(system: str, model: str, tokens: int, ratio: float,
            workload: str = "default") -> Point:
    """The configs of one point (names checked: a bad one names its option)."""
    from .experiment import load_configs
    from .config import load_model_config, load_system_config
    _load("--systems", system, lambda: load_system_config(system))
    _load("--models", model, lambda: load_model_config(model))
    s, m, w = _load("--workload", workload, lambda: load_configs(system, model, workload, tokens))
    G, E = s.gpus, m.experts
    unfit = ""
    if G > E and G % E:       # the layer's rule: fewer GPUs take redundant expert slots
        unfit = (f"the {E} experts of {m.name} do not replicate evenly onto {G} GPUs")
    return Point(system, model, tokens, ratio, scale_compute_to_link(s, ratio), m, w,
                 {"unfit": unfit})


def points(blocks, workload: str = "default", max_points: int = MAX_POINTS) -> list:
    """Every point of ``blocks`` (in block order, then system, model, ratio, tokens),
    resolved and checked; duplicates dropped."""
    combos = list(dict.fromkeys(
        (s, m, r, t) for b in blocks
        for s, m, r, t in itertools.product(b.systems, b.models, b.ratios, b.tokens)))
    if len(combos) > max_points:
        raise UsageError("--max-points", max_points, f"the grid has {len(combos)} points")
    return [resolve(s, m, t, r, workload) for s, m, r, t in combos]


def skip_reason(p: Point, max_rows: int) -> str:
    """Why ``p`` is not run (empty: it is): a model whose experts do not fit the system's
    GPUs, or more routed rows than ``max_rows``."""
    if p.meta.get("unfit"):
        return p.meta["unfit"]
    if p.rows > max_rows:
        return f"{p.rows:,} routed rows > --max-rows {max_rows:,}"
    return ""


def split(pts: list, max_rows: int) -> tuple[list, list]:
    """(points to run, [(point, why it is skipped)]); a grid with nothing to run is a
    :class:`UsageError` naming the first point's reason."""
    run = [p for p in pts if not skip_reason(p, max_rows)]
    skipped = [(p, skip_reason(p, max_rows)) for p in pts if skip_reason(p, max_rows)]
    if pts and not run:
        p, why = skipped[0]
        raise UsageError("--systems", p.system_config, f"no point of the grid can run: "
                         f"{p.label}: {why}")
    return run, skipped


def build_blocks(preset: str | None, systems=None, models=None, tokens=None,
                 ratios=None) -> tuple:
    """The grid: a preset's blocks with any given axis replacing that axis in every block,
    or (no preset) one block of the given axes over the default preset's systems, models
    and tokens where an axis is not given."""
    if preset is not None and preset not in PRESETS:
        raise UsageError("--grid", preset, f"unknown (known: {', '.join(PRESETS)})")
    base = PRESETS[preset or "default"]
    if preset is None and (systems or models or tokens):
        base = (Block(tuple(dict.fromkeys(s for b in base for s in b.systems)),
                      tuple(dict.fromkeys(m for b in base for m in b.models)),
                      tuple(sorted({t for b in base for t in b.tokens}))),)
    out = []
    for b in base:
        out.append(Block(systems or b.systems, models or b.models, tokens or b.tokens,
                         ratios or b.ratios))
    return tuple(dict.fromkeys(out))
