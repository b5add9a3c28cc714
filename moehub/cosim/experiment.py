"""One co-simulation run: configs in, every system on the same layer, stats and files out.

:func:`run_experiment` builds the routing and the :class:`~.layer.Layer` once, runs each
system of :mod:`.systems` on it and returns an :class:`ExperimentResult`;
:func:`write_outputs` writes ``results/<run>/`` in the build folder (``--out``,
``$MOEHUB_BUILD`` or ``./build``: :mod:`moehub.paths`), whole or not at all (a temporary
sibling renamed into place, :func:`moehub.paths.writing`):

* ``config.yaml``   the fully resolved configs (system, model, workload, derived hub);
* ``stats.json``    layer latency per system, phases, speedups, end-to-end estimate, hub stats;
* ``stats.csv``     one line per system; ``phases.csv`` one line per (system, phase);
* ``timeline.png``  (and ``timeline.svg``) the layer time per system split by phase kind,
  the hub's first tiles, and per-GPU tracks (routing, sends, hub, GEMM tiles, combine),
  one panel per system on one time axis (:mod:`.plots`);
* ``run.json``      the command line, versions, git commit, start, wall and CPU time, and
  ``convergence``: per system its passes, whether they settled and their residuals
  (:func:`convergence`).

End-to-end estimate (per GPU, prefill of ``tokens_per_gpu`` tokens): every layer runs its
attention block (roofline of projections and causal scores, see :meth:`GpuModel.attention_us`),
MoE layers add the simulated MoE layer, dense layers a dense FFN roofline. Embedding and
LM head are left out (the same for every system).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from .config import (ModelConfig, SystemConfig, WorkloadConfig, effective_dtypes,
                                   load_model_config, load_system_config, load_workload_config)
from .. import progress
from ..spec.config import ConfigError, HubConfig
from ..paths import output_dir, writing
from .layer import Layer, SystemResult

#: how the table names a simulator
SIM_NAMES = {"icarus": "Icarus", "verilator": "Verilator"}
from .systems import PHASES, SYSTEMS, run_system
from .workload import make_routing



#: what a system's passes report (:func:`.systems.run_system`) that goes to ``run.json``
#: only: how close the layer is to its fixed point is about the run, not the layer
RUN_ONLY = ("residual_us", "traffic_residual_us")


def convergence(er: "ExperimentResult") -> dict:
    """Per system: passes run, whether the end times settled, and the residuals of the
    last pass (how far it moved any GPU's end time; how far its traffic lay from the
    background it ran on, :mod:`.systems.passes`), for ``run.json``."""
    out = {}
    for name, r in er.results.items():
        ex = r.extra
        out[name] = {"passes": ex.get("passes"), "converged": ex.get("converged"),
                     **{k: _finite(ex.get(k)) for k in RUN_ONLY}}
    return out


def _finite(x):
    """JSON has no infinity: a residual after a single pass is written as null."""
    return None if x is None or not np.isfinite(x) else float(x)


def results_dir(out: Path | str | None = None) -> Path:
    """``out``, else ``results/`` in the build folder (:mod:`moehub.paths`), resolved now."""
    return output_dir("results", out=out)


@dataclass
class ExperimentResult:
    system: SystemConfig
    model: ModelConfig
    workload: WorkloadConfig
    layer: Layer
    results: dict                   #: system name -> SystemResult
    e2e: dict                       #: system name -> end-to-end ms
    wall_s: float
    hub_backend: str = "model"
    timings: dict = field(default_factory=dict)
    hub_order: str = "token"
    hub_features: frozenset = frozenset()

    def latency(self, name: str) -> float:
        return self.results[name].latency_us

    def speedup(self, name: str) -> float:
        """How much faster the hub is than ``name`` (baseline latency / hub latency)."""
        return self.latency(name) / self.latency("hub")


def load_configs(system: str, model: str, workload: str, tokens: int | None = None,
                 gpus: int | None = None, seed: int | None = None, *,
                 dispatch_dtype: str | None = None, combine_dtype: str | None = None):
    """Load the three configs and apply the command-line overrides.

    Datatype overrides go into the workload (so ``config.yaml`` records them) and the
    effective datatypes are folded into the returned model, so that
    ``model.dispatch_row_bytes`` / ``combine_row_bytes`` are the run's wire rows."""
    s = load_system_config(system)
    m = load_model_config(model)
    w = load_workload_config(workload)
    if tokens is not None:
        w = w.replace(tokens_per_gpu=tokens)
    if seed is not None:
        w = w.replace(seed=seed)
    if dispatch_dtype is not None:
        w = w.replace(dispatch_dtype=dispatch_dtype)
    if combine_dtype is not None:
        w = w.replace(combine_dtype=combine_dtype)
    d, c = effective_dtypes(m, w)
    if (d, c) != (m.dispatch_dtype, m.combine_dtype):
        m = m.replace(dispatch_dtype=d, combine_dtype=c)
    if gpus is not None and gpus != s.gpus:
        s = s.replace(gpus=gpus, gpus_per_node=min(gpus, s.gpus_per_node))
    return s, m, w


def end_to_end(L: Layer, moe_layer_us: float) -> float:
    m, g = L.model, L.gpu
    attn = g.attention_us(L.T, L.wl.seq_len)
    dense = g.dense_ffn_us(L.T, m.dense_ffn) if m.dense_layers else 0.0
    total = m.layers * attn + m.moe_layers * moe_layer_us + m.dense_layers * dense
    return total / 1000.0


def run_experiment(system: SystemConfig, model: ModelConfig, workload: WorkloadConfig,
                   systems=SYSTEMS, hub_backend: str = "model",
                   hub_base: HubConfig | None = None, hub_order: str = "token",
                   rtl_gpus: tuple = (), hub_features=frozenset()) -> ExperimentResult:
    """Every system of ``systems`` on one layer (the hub always). ``hub_features``: the
    hub's protocol-v2 features (:mod:`.systems.hub`; none: protocol v1)."""
    for name in systems:
        if name not in SYSTEMS:
            raise ConfigError(f"systems = {name!r}: unknown (known: {', '.join(SYSTEMS)})")
    if "hub" not in systems:
        systems = tuple(systems) + ("hub",)
    t0 = time.perf_counter()
    routing = make_routing(model, workload, system.gpus)
    L = Layer(system, model, workload, routing, hub_base)
    results, timings = {}, {}
    with progress.stage(f"cosim {model.name} on {system.name}, {workload.tokens_per_gpu} "
                        "tokens/GPU", total=len(systems), unit="systems", eta=False,
                        heartbeat=True) as st:
        for name in SYSTEMS:
            if name in systems:
                st.update(note=name, force=True)
                t = time.perf_counter()
                results[name] = run_system(name, L, hub_backend, hub_order, rtl_gpus,
                                           hub_features=frozenset(hub_features))
                timings[name] = time.perf_counter() - t
                st.advance()
    e2e = {n: end_to_end(L, r.latency_us) for n, r in results.items()}
    return ExperimentResult(system, model, workload, L, results, e2e,
                            time.perf_counter() - t0, hub_backend, timings, hub_order,
                            frozenset(hub_features))


# ---------------------------------------------------------------------------- stats
def phase_stats(res: SystemResult, G: int) -> dict:
    crit = int(np.argmax(res.gpu_end))
    out = {}
    for p in res.phases:
        d = out.setdefault(p.name, {"track": p.track, "start_us": np.inf, "end_us": 0.0,
                                    "busy": np.zeros(G), "critical_gpu_us": 0.0})
        d["start_us"] = min(d["start_us"], p.start)
        d["end_us"] = max(d["end_us"], p.end)
        d["busy"][p.gpu] += p.end - p.start
        if p.gpu == crit:
            d["critical_gpu_us"] += p.end - p.start
    for d in out.values():
        busy = d.pop("busy")
        d["mean_per_gpu_us"] = float(busy.mean())
        d["max_per_gpu_us"] = float(busy.max())
    return out


def stats(er: ExperimentResult) -> dict:
    L = er.layer
    hub = er.results["hub"]
    out = {
        "system": er.system.name, "model": er.model.name, "workload": er.workload.name,
        "gpus": L.G, "tokens_per_gpu": L.T, "topk": L.k, "experts": L.E,
        "experts_per_gpu": L.E_local, "expert_replicas": L.replicas,
        "routing": {"kind": er.workload.routing, "seed": er.workload.seed,
                    "skewness": L.routing.skewness(),
                    "rows": int(L.N), "rows_received_per_gpu": L.counts.sum(axis=0).tolist(),
                    "rows_remote_fraction": float(1 - np.trace(L.counts) / L.N)},
        "hub": {"config": L.hub.name, "backend": er.hub_backend, "send_order": er.hub_order,
                "lanes": L.hub.lanes,
                "chunk_bytes": L.hub.chunk_bytes, "hub_clock_GHz": L.hub.hub_clock_GHz,
                "tile_rows": L.hub.tile_rows, "tags_per_source": L.hub.tags_per_source,
                **{k: v for k, v in hub.extra.items() if k not in RUN_ONLY}},
        "systems": {},
        "wall_s": er.wall_s,
        "wall_s_per_system": er.timings,
        "receive_memory": receive_memory(er),
    }
    for name, r in er.results.items():
        out["systems"][name] = {
            "label": r.label,
            "layer_us": r.latency_us,
            "hub_speedup": r.latency_us / hub.latency_us,
            "vs_ideal": r.latency_us / er.results["ideal"].latency_us if "ideal" in er.results else None,
            "end_to_end_ms": er.e2e[name],
            "end_to_end_hub_speedup": er.e2e[name] / er.e2e["hub"],
            "phase_list": PHASES[name],
            "phases": phase_stats(r, L.G),
            "gpu_end_us": [float(x) for x in r.gpu_end],
        }
    return out


def receive_memory(er: ExperimentResult) -> dict:
    """Receive-buffer memory per GPU of every system run (:mod:`.memory`; the GPU with the
    most), the hub's for its features, the static and paged hub and the capacity-padded
    layout besides."""
    from .memory import capacity_padded, hub_memory
    from .systems import receive_memory as system_receive_memory
    L = er.layer
    out = {n: system_receive_memory(L, n, er.hub_features) for n in er.results}
    out["hub (static regions, v1)"] = hub_memory(L)
    out["hub (paged)"] = hub_memory(L, er.hub_features | {"paged"})
    out["capacity-padded (C=1.25)"] = capacity_padded(L)
    return out


def resolved_config(er: ExperimentResult) -> dict:
    return {"system": dataclasses.asdict(er.system), "model": dataclasses.asdict(er.model),
            "workload": dataclasses.asdict(er.workload),
            "hub": dataclasses.asdict(er.layer.hub), "hub_backend": er.hub_backend,
            "hub_send_order": er.hub_order,
            "systems": list(er.results)}


def write_outputs(er: ExperimentResult, run: str, out_root: Path | None = None,
                  figure: bool = True, *, force: bool = True, record: bool = True) -> dict:
    """Write ``<results>/<run>/`` whole (see the module docstring) and return the paths of
    its files. ``force``: replace an existing folder of that name (the ``moehub`` commands
    pass ``--force`` and check before they simulate); ``record``: add ``run.json``."""
    final = results_dir(out_root) / run
    with writing(final, force, record=record, run=run, convergence=convergence(er)) as tmp:
        paths = _write_files(er, tmp, figure)
        if record:
            paths["run"] = tmp / "run.json"
    return {k: final / p.relative_to(tmp) for k, p in paths.items()}


def _write_files(er: ExperimentResult, out: Path, figure: bool) -> dict:
    st = stats(er)
    paths = {}
    p = out / "config.yaml"
    p.write_text(yaml.safe_dump(resolved_config(er), sort_keys=False))
    paths["config"] = p
    p = out / "stats.json"
    p.write_text(json.dumps(st, indent=1, default=float))
    paths["stats_json"] = p
    p = out / "stats.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["system", "label", "layer_us", "hub_speedup", "end_to_end_ms",
                    "end_to_end_hub_speedup"])
        for name, s in st["systems"].items():
            w.writerow([name, s["label"], f"{s['layer_us']:.3f}", f"{s['hub_speedup']:.4f}",
                        f"{s['end_to_end_ms']:.4f}", f"{s['end_to_end_hub_speedup']:.4f}"])
    paths["stats_csv"] = p
    p = out / "phases.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["system", "phase", "track", "start_us", "end_us", "mean_per_gpu_us",
                    "max_per_gpu_us", "critical_gpu_us"])
        for name, s in st["systems"].items():
            for ph, d in s["phases"].items():
                w.writerow([name, ph, d["track"], f"{d['start_us']:.3f}", f"{d['end_us']:.3f}",
                            f"{d['mean_per_gpu_us']:.3f}", f"{d['max_per_gpu_us']:.3f}",
                            f"{d['critical_gpu_us']:.3f}"])
    paths["phases_csv"] = p
    if figure:
        from .plots import timeline_figure
        with progress.stage("timeline figure", heartbeat=True):
            paths["timeline"] = timeline_figure(er, out / "timeline.png")
        paths["timeline_svg"] = paths["timeline"].with_suffix(".svg")
    return paths


def relay_rtl_line(c: dict) -> str:
    """The table's line of a relay GPU in RTL (:func:`.relay_rtl.check_relay_gpu`'s summary:
    it agreed, or the run would have stopped)."""
    staged = (f" ({c['partial_staged_chunks']:,} chunks staged)" if "partial_staged_chunks" in c else "")
    red = (f"; reduce: {c['partial_rows']:,} partial rows{staged} into {c['reduced_rows']:,} sums, "
           f"{c['reduce_hbm_bytes'] / 1e6:.1f} MB of accumulator traffic"
           if "partial_rows" in c else "")
    side = (f", {c['staged_chunks']:,} chunks staged and {c['forward_chunks']:,} read back for the "
            f"forwards" if "staged_chunks" in c else "")
    lanes = (f" through the input lanes ({c['own_packets']:,} packets to the packet manager)"
             if "own_packets" in c else "")
    return (f"GPU {c['gpu']} relay in RTL (Amaranth simulator): {c['relay_rows']:,} relay rows "
            f"({c['relay_local']:,} with targets here, {c['forward_rows']:,} forwards{side}){lanes}{red}; the "
            f"same as the reference model and the routes, row for row, in {c['sim_s']:.1f} s")


def table(er: ExperimentResult) -> str:
    """The per-system table printed by ``moehub cosim``."""
    L = er.layer
    w = max([52] + [len(r.label) for r in er.results.values()])
    lines = [f"{er.model.name} on {er.system.name} ({L.G} GPUs, {L.E_local if L.replicas == 1 else 1} "
             f"expert(s)/GPU{'' if L.replicas == 1 else f', {L.replicas} replicas'}), "
             f"{L.T} tokens/GPU, top-{L.k}, {er.workload.routing} routing "
             f"(skewness {L.routing.skewness():.2f}), seed {er.workload.seed}",
             f"{'system':<{w}} {'layer us':>10} {'hub speedup':>12} {'e2e ms':>9} {'e2e speedup':>12}"]
    for name, r in er.results.items():
        lines.append(f"{r.label:<{w}} {r.latency_us:>10.1f} {er.speedup(name):>11.2f}x "
                     f"{er.e2e[name]:>9.2f} {er.e2e[name] / er.e2e['hub']:>11.2f}x")
    ex = er.results["hub"].extra
    lines.append(f"hub: {ex.get('packets', 0):,} packets, {ex.get('rows', 0):,} rows, "
                 f"{ex.get('drops', 0)} drops, {ex.get('tag_stalls', 0)} tag-window stalls; "
                 f"simulated in {er.wall_s:.1f} s")
    for c in ex.get("rtl", []):
        if c.get("unit") == "relay":
            lines.append(relay_rtl_line(c))
            continue
        lines.append(
            f"GPU {c['gpu']} hub in RTL (cocotb + {SIM_NAMES.get(c.get('sim'), c.get('sim'))}): {c['rows']:,} rows, {c['cycles']:,} cycles "
            f"in {c['sim_s']:.1f} s ({c['cycles_per_s']:,.0f} cycles/s); vs reference model: "
            f"outputs {'identical' if c['functional_equal'] else 'DIFFER'}, allocation "
            f"{'same' if c['alloc_equal'] else 'DIFFERS'}, tile-ready max |diff| "
            f"{c['tile_ready_max_diff']} cycles, done {c['done_diff']:+d} cycles, "
            f"{c['stall_cycles']} stall cycles")
    return "\n".join(lines)
