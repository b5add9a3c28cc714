"""``moehub validate``: the co-simulation against published end-to-end figures.

Every published figure lives as data in ``cosim/data/published.yaml`` with its source, the
configuration it was measured in, the metric (and how the publisher defined it) and a
tolerance. :func:`run_case` builds that configuration (system, model, tokens per GPU,
datatypes, SM budget), runs the matching system of :mod:`.systems` on it and measures the
same quantity on the simulated timeline; the report prints model vs published with the
ratio, writes ``validation.csv`` and ``validation.png``, and for every miss prints what
the model lacks (the case's ``gap`` note). Nothing here is tuned per case: a case only
selects a configuration; the mechanisms and their calibration are shared by every case.
"""
from __future__ import annotations

import csv
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ..spec.config import ConfigError
from .. import progress
from ..paths import HELP, output_dir
from .experiment import load_configs
from .layer import Layer, SystemResult
from .systems import SYSTEMS, run_system
from .workload import make_routing

DATA = Path(__file__).resolve().parent / "data" / "published.yaml"
METRICS = ("dispatch_us", "combine_us", "layer_us", "dispatch_GBps", "combine_GBps")
BW_DEFS = ("rdma", "rdma_logical", "logical", "send_rows")
SCOPES = ("kernel", "api")
PHASE_NAMES = {"dispatch": ("dispatch", "all-to-all dispatch", "notify"),
               "combine": ("combine", "all-to-all combine", "combine wait")}


@dataclass(frozen=True)
class Case:
    id: str
    what: str
    source: str
    hardware: str
    run: str                   #: the system of cosim/systems that plays the published one
    system: str
    model: str
    tokens: int
    metric: str
    published: float
    tolerance: float           #: accepted |model / published - 1|
    gpus: int = 0              #: 0: the system config's count
    scope: str = "kernel"      #: kernel: the transfer alone; api: from the end of the gate
    bw_def: str = "logical"    #: bytes counted by a *_GBps metric (see bytes_moved)
    dispatch_dtype: str = ""
    combine_dtype: str = ""
    experts: int = 0           #: 0: the model's; else override (benchmark routers)
    topk: int = 0
    unrestricted: bool = False  #: drop the model's group limit (random benchmark routers)
    sms: int = 0               #: SMs the benchmark gave the system under test (0: config)
    library: str = ""          #: deepep_ll only: the low-latency library measured (its mechanisms)
    slow: bool = False         #: the point's network takes minutes: run only with --slow / --only
    use: str = "validation"    #: validation | calibration (a point a constant was fitted to)
    gap: str = ""              #: what the model lacks when this case misses

    @classmethod
    def from_dict(cls, raw: dict) -> "Case":
        known = {f.name for f in dataclasses.fields(cls)}
        bad = [k for k in raw if k not in known]
        cid = raw.get("id", "?")
        if bad:
            raise ConfigError(f"published[{cid}].{bad[0]} = {raw[bad[0]]!r}: unknown key")
        c = cls(**raw)
        for key, allowed in (("metric", METRICS), ("bw_def", BW_DEFS), ("scope", SCOPES),
                             ("run", SYSTEMS)):
            if getattr(c, key) not in allowed:
                raise ConfigError(f"published[{cid}].{key} = {getattr(c, key)!r}: must be one "
                                  f"of {', '.join(allowed)}")
        if c.library:
            from .systems.deepep_ll import LIBRARIES
            if c.run != "deepep_ll":
                raise ConfigError(f"published[{cid}].library = {c.library!r}: only a "
                                  f"deepep_ll case names a low-latency library (run = {c.run!r})")
            if c.library not in LIBRARIES:
                raise ConfigError(f"published[{cid}].library = {c.library!r}: must be one of "
                                  f"{', '.join(LIBRARIES)}")
        if not (c.published > 0 and 0 < c.tolerance < 10):
            raise ConfigError(f"published[{cid}]: published and tolerance must be > 0")
        return c


def load_cases(path: Path = DATA) -> list:
    return [Case.from_dict(c) for c in yaml.safe_load(Path(path).read_text())["cases"]]


def case_layer(c: Case) -> Layer:
    s, m, w = load_configs(c.system, c.model, "default", tokens=c.tokens,
                           gpus=c.gpus or None, dispatch_dtype=c.dispatch_dtype or None,
                           combine_dtype=c.combine_dtype or None)
    changes = {}
    if c.experts:
        changes["experts"] = c.experts
    if c.topk:
        changes["topk"] = c.topk
    if c.unrestricted:
        changes.update(routing_groups=1, routing_topk_groups=1)
    if changes:
        m = m.replace(**changes)
    if c.sms:
        from .components import SMS_KEYS
        key = SMS_KEYS[c.run]
        s = s.replace(software={**dataclasses.asdict(s.software), key: c.sms})
    w = w.replace(routing="uniform")
    return Layer(s, m, w, make_routing(m, w, s.gpus))


def _span(res: SystemResult, kind: str, scope: str) -> float:
    ph = [p for p in res.phases if p.name in PHASE_NAMES[kind] and
          p.track in (("send", "hub") if kind == "dispatch" else ("combine", "send"))]
    if not ph:
        raise ValueError(f"{res.name}: no {kind} phase on its timeline")
    start = min(p.start for p in ph)
    if scope == "api":
        start = _gate_end(res) if kind == "dispatch" else start
    return max(p.end for p in ph) - start


def _gate_end(res: SystemResult) -> float:
    return max(p.end for p in res.phases if p.name == "gate")


def bytes_moved(L: Layer, res: SystemResult, kind: str, bw_def: str) -> float:
    """Bytes per GPU (mean) that a published bandwidth divides by the time.

    ``rdma``: row copies that cross a NIC (one per (token, remote node) for a
    deduplicating system, else per (token, remote expert)); ``rdma_logical``: DeepEP V2's
    "logical" RDMA bandwidth, which also counts the copy to the source's own node;
    ``logical``: rows a GPU receives, its own included (DeepEP's logical bandwidth; per
    destination GPU for a deduplicating system); ``send_rows``: one row per (token,
    expert), local ones included (a per-row low-latency benchmark)."""
    row = L.disp_bytes if kind == "dispatch" else L.comb_bytes
    dedup = res.name in ("deepep", "hybridep")      # one copy per (token, node) / (token, GPU)
    gpn = L.sys.gpus_per_node
    if bw_def == "rdma_logical":
        rows = L.node_rows.sum() if dedup else L.counts.sum()
    elif bw_def == "rdma":
        if dedup:
            own = np.arange(L.G) // gpn
            rows = L.node_rows.sum() - L.node_rows[np.arange(L.G), own].sum()
        else:
            rows = sum(L.counts[s, d] for s in range(L.G) for d in range(L.G)
                       if L.inter_node(s, d))
    elif bw_def == "logical":
        rows = (L.gpu_rows if dedup else L.counts).sum()
    else:
        rows = L.counts.sum()
    return rows * row / L.G


def measure(L: Layer, res: SystemResult, c: Case) -> float:
    if c.metric == "layer_us":
        return res.latency_us - _gate_end(res)
    kind = c.metric.split("_")[0]
    span = _span(res, kind, c.scope)
    if c.metric.endswith("_us"):
        return span
    return bytes_moved(L, res, kind, c.bw_def) / span / 1000.0


@dataclass
class Row:
    case: Case
    model: float
    wall_s: float

    @property
    def ratio(self) -> float:
        return self.model / self.case.published

    @property
    def ok(self) -> bool:
        return abs(self.ratio - 1.0) <= self.case.tolerance


def _library_variant(c: Case):
    """The low-latency library the case measured, as a runnable variant of ``deepep_ll``
    (its mechanisms come from the library's profile, not from the case); None: the
    system's default."""
    if not c.library:
        return None
    from .systems.deepep_ll import Variant
    return Variant(c.library)


def run_case(c: Case) -> Row:
    t = time.perf_counter()
    L = case_layer(c)
    res = run_system(c.run, L, module=_library_variant(c))
    return Row(c, measure(L, res, c), time.perf_counter() - t)


def report(rows: list) -> str:
    lines = [f"{'case':<34} {'system':<20} {'metric':<14} {'model':>9} {'published':>10} "
             f"{'ratio':>6} {'tol':>5}  verdict"]
    for r in rows:
        c = r.case
        tag = "ok" if r.ok else "MISS"
        if c.use == "calibration":
            tag += " (calibration point)"
        played = f"{c.run}/{c.library}" if c.library else c.run
        lines.append(f"{c.id:<34} {played:<20} {c.metric:<14} {r.model:>9.1f} "
                     f"{c.published:>10.1f} {r.ratio:>6.2f} {c.tolerance:>5.2f}  {tag}")
    val = [r for r in rows if r.case.use == "validation"]
    miss = [r for r in val if not r.ok]
    lines.append(f"{len(val) - len(miss)} of {len(val)} validation cases within tolerance "
                 f"(+{sum(r.case.use == 'calibration' for r in rows)} calibration points)")
    if miss:
        lines.append("where the model misses, and what it lacks:")
        for r in miss:
            lines.append(f"  {r.case.id} (x{r.ratio:.2f}): {r.case.gap or 'no note'}")
    return "\n".join(lines)


def write_csv(rows: list, path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "use", "system", "metric", "model", "published", "ratio", "tolerance",
                    "ok", "hardware", "config", "source", "gap"])
        for r in rows:
            c = r.case
            w.writerow([c.id, c.use, c.run, c.metric, f"{r.model:.3f}", c.published,
                        f"{r.ratio:.3f}", c.tolerance, r.ok, c.hardware,
                        f"{c.system} {c.model} {c.tokens} tok/GPU {c.scope} {c.bw_def}"
                        + (f" library={c.library}" if c.library else ""),
                        c.source, c.gap])
    return path


def plot(rows: list, path: Path) -> Path:
    from .plots import SYSTEM_COLORS, _save
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(12, 0.28 * len(rows) + 1.6))
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows):
        c = r.case
        ax.plot([1 - c.tolerance, 1 + c.tolerance], [yi, yi], color="#bbbbbb", lw=6,
                solid_capstyle="butt")
        ax.plot([r.ratio], [yi], marker="s" if c.use == "calibration" else "o", ms=7,
                color=SYSTEM_COLORS.get(c.run, "#999"), markeredgecolor="k")
        if not r.ok:
            ax.text(r.ratio * 1.04, yi, f"miss x{r.ratio:.2f}", va="center", fontsize=7)
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xscale("log")
    ax.set_yticks(y, [f"{r.case.id} [{r.case.run}]" for r in rows], fontsize=7)
    ax.set_xlabel("model / published (log); grey band: the case's tolerance; square: "
                  "calibration point; colour: the system that plays it")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, "moehub validate: co-simulation vs published figures", path)


def cmd_validate(args) -> int:
    cases = load_cases(Path(args.data) if args.data else DATA)
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {c.id for c in cases}
        if unknown:
            raise ConfigError(f"--only {args.only!r}: unknown case {sorted(unknown)[0]!r}")
        cases = [c for c in cases if c.id in want]
    skipped = [] if (args.only or args.slow) else [c for c in cases if c.slow]
    cases = [c for c in cases if c not in skipped]
    out = output_dir("results", "validate", out=args.out)    # checked before the cases run
    rows = []
    with progress.stage("validate", total=len(cases), unit="cases") as st:
        for i, c in enumerate(cases):
            st.update(note=c.id, force=True)
            rows.append(run_case(c))
            print(f"[{i + 1}/{len(cases)}] {c.id}: {rows[-1].model:.1f} vs {c.published} "
                  f"({rows[-1].wall_s:.1f} s)", flush=True)
            st.advance()
    out.mkdir(parents=True, exist_ok=True)
    print(report(rows))
    if skipped:
        print(f"{len(skipped)} slow cases not run (--slow runs them): "
              f"{', '.join(c.id for c in skipped)}")
    print(f"      table: {write_csv(rows, out / 'validation.csv')}")
    print(f"     figure: {plot(rows, out / 'validation.png')}")
    return 0


def add_parser(subparsers) -> None:
    v = subparsers.add_parser("validate", help="the co-simulation against published "
                              "end-to-end figures (cosim/data/published.yaml)")
    v.add_argument("--only", default=None, help="comma-separated case ids")
    v.add_argument("--data", default=None, help="another published-figures YAML")
    v.add_argument("--slow", action="store_true", help="also run the cases marked slow "
                   "(wide-EP points whose network takes minutes)")
    v.add_argument("--out", default=None, help=f"output folder (default <build>/results/validate; <build> is {HELP})")
    v.set_defaults(func=cmd_validate)
