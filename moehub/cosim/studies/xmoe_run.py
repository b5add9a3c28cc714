"""The X-MoE study's computations: each part as rows of plain values (one dict a row),
written by :mod:`.xmoe_report` and drawn by :mod:`.xmoe_plots`.

Kept apart from the command line (:mod:`.xmoe`) so that tests and notebooks call the
parts directly. Every time comes from one pass of a system over a co-simulated layer
(:func:`layer_time`): the bulk-synchronous software versions end their phases before the
next starts, so a pass is their fixed point; the hub's streaming combine would slow its
own dispatch in later passes (on 16 GPUs, 1024 tokens, X-MoE Large the co-simulation's
passes swing +-10 % without settling), so its one-pass times lean optimistic by up to that.
"""
from __future__ import annotations

from ... import progress
from ..experiment import load_configs, phase_stats
from ..layer import Layer
from ..systems import bulk
from ..workload import make_routing
from . import xmoe_dispatch as D
from . import xmoe_memory as M
from . import xmoe_ssmb as S
from .xmoe_systems import HubPhase, RbdSoftware

#: the versions whose layer time the study models, and the system each runs
TIME_VERSIONS = ("sw", "sw_rbd", "hub", "hub_rbd")
#: the memory sweeps: tokens per GPU (multiples of the study's tokens) and top-k
SWEEP_TOKENS = (0.25, 0.5, 1, 2)
SWEEP_TOPK = (1, 2, 4, 6, 8, 12, 16)
#: the phases that make a version's dispatch (from the gate's end to the rows landing)
DISPATCH_PHASES = {"sw": ("all-to-all dispatch",),
                   "sw_rbd": ("all-to-all global", "gather replicas", "all-to-all node"),
                   "hub": ("dispatch",), "hub_rbd": ("dispatch",)}
#: the all-to-all that crosses the nodes (X-MoE's "inter-node all-to-all time")
GLOBAL_A2A = {"sw": "all-to-all dispatch", "sw_rbd": "all-to-all global"}


def version_module(version: str):
    """The system that plays a version (see :mod:`.xmoe_systems`)."""
    return {"sw": bulk, "sw_rbd": RbdSoftware(), "hub": HubPhase("plain"),
            "hub_rbd": HubPhase("relay")}[version]


def layer_time(L: Layer, version: str) -> dict:
    """One pass of ``version`` over the layer: its latency and the span of its dispatch."""
    L.begin_run()
    res = version_module(version).run(L)
    res.nets = L.nets
    ps = phase_stats(res, L.G)
    return {"layer_us": res.latency_us, "dispatch_us": _span(ps, DISPATCH_PHASES[version]),
            "global_a2a_us": _span(ps, GLOBAL_A2A.get(version, ())), "result": res}


def _span(ps: dict, names) -> float:
    """From the first start to the last end of these phases over all GPUs."""
    names = (names,) if isinstance(names, str) else names
    got = [ps[p] for p in names if p in ps]
    return (max(p["end_us"] for p in got) - min(p["start_us"] for p in got)) if got else 0.0


# ---------------------------------------------------------------------------- memory
def memory_rows(model: str, system: str, workload: str, tokens: int, seed=None,
                topk: int | None = None) -> list:
    """One row per memory system for one (model, tokens, top-k) point."""
    s, m, w = load_configs(system, model, workload, tokens, seed=seed)
    if topk is not None and topk != m.topk:
        m = m.replace(topk=topk)
    c = M.routed(m, s, w)
    rows = []
    for name in M.SYSTEMS:
        r = M.summary(c, name)
        r.pop("buffers")
        rows.append({"model": m.name, "system_config": s.name, "gpus": s.gpus,
                     "tokens_per_gpu": tokens, "topk": m.topk, **r})
    return rows


def memory_sweep(models, system: str, workload: str, tokens: int, seed=None) -> list:
    """Memory against tokens per GPU (a quarter to twice ``tokens``, at each model's
    top-k) and against top-k (at ``tokens``), every model; one routing per point."""
    points = []
    for model in models:
        _, m, _ = load_configs(system, model, workload, tokens)
        for t in sorted({max(1, int(tokens * f)) for f in SWEEP_TOKENS}):
            points.append((model, t, None, "tokens"))
        for k in SWEEP_TOPK:
            if k <= m.experts:
                points.append((model, tokens, k, "topk"))
    rows = []
    with progress.stage("study xmoe: memory sweeps", total=len(points), unit="points") as st:
        for model, t, k, axis in points:
            st.update(note=f"{model} {t} tok/GPU" + (f" top-{k}" if k else ""), force=True)
            rows += [{**r, "sweep": axis} for r in memory_rows(model, system, workload, t,
                                                                seed, k)]
            st.advance()
    return rows


# ---------------------------------------------------------------------------- RBD
def rbd_traffic_rows(models, systems, workload: str, tokens: int, seed=None) -> list:
    """Inter-node and NVLink row copies and bytes per version, every (system, model)."""
    rows = []
    with progress.stage("study xmoe: inter-node traffic",
                        total=len(models) * len(systems), unit="points") as st:
        for sname in systems:
            for model in models:
                st.update(note=f"{model} on {sname}", force=True)
                s, m, w = load_configs(sname, model, workload, tokens, seed=seed)
                rows += [{"model": m.name, "system_config": s.name, **r}
                         for r in D.traffic(m, s, w)]
                st.advance()
    return rows


def rbd_time_rows(model: str, systems, workload: str, tokens: int, seed=None) -> list:
    """Layer and dispatch time of the four versions on each system (one model)."""
    rows = []
    with progress.stage("study xmoe: layer time, hierarchical dispatch",
                        total=len(systems) * len(TIME_VERSIONS), unit="layers") as st:
        for sname in systems:
            s, m, w = load_configs(sname, model, workload, tokens, seed=seed)
            L = Layer(s, m, w, make_routing(m, w, s.gpus))
            for v in TIME_VERSIONS:
                st.update(note=f"{sname} {v}", force=True)
                t = layer_time(L, v)
                rows.append({"model": m.name, "system_config": s.name, "gpus": s.gpus,
                             "nodes": s.nodes, "tokens_per_gpu": tokens, "version": v,
                             "label": D.LABELS[v], "layer_us": t["layer_us"],
                             "dispatch_us": t["dispatch_us"],
                             "global_a2a_us": t["global_a2a_us"]})
                st.advance()
    for r in rows:
        base = next(x for x in rows if x["system_config"] == r["system_config"]
                    and x["version"] == ("sw" if r["version"].startswith("sw") else "hub"))
        r["speedup_vs_plain"] = base["layer_us"] / r["layer_us"]
        r["dispatch_speedup_vs_plain"] = base["dispatch_us"] / max(r["dispatch_us"], 1e-9)
    return rows


# ---------------------------------------------------------------------------- SSMB
def ssmb_rows(models, system: str, workload: str, tokens: int, time_model: str,
              seed=None, time_tokens: int | None = None) -> list:
    """Per model and TP degree: the MoE block's peak and saved memory per GPU at
    tokens/TP (SSMB) and at tokens (plain TP block); for ``time_model`` also the layer
    time of the plain software and hub versions at ``time_tokens`` (default ``tokens``)
    per TP group, plus SSMB's all-gather."""
    time_tokens = time_tokens or tokens
    tps = S.degrees(tokens)
    rows = []
    with progress.stage("study xmoe: sequence-sharded MoE blocks",
                        total=len(models) * len(tps), unit="points") as st:
        for model in models:
            full = {r["system"]: r for r in memory_rows(model, system, workload, tokens, seed)}
            for tp in tps:
                st.update(note=f"{model} TP={tp}", force=True)
                shard = {r["system"]: r for r in
                         memory_rows(model, system, workload, tokens // tp, seed)}
                row = {"model": model, "system_config": system, "tokens_per_gpu": tokens,
                       "tp": tp}
                for name in M.SYSTEMS:
                    row[f"{name}_peak_GiB_tp"] = full[name]["peak_bytes"] / M.GiB
                    row[f"{name}_peak_GiB_ssmb"] = shard[name]["peak_bytes"] / M.GiB
                    row[f"{name}_saved_GiB_tp"] = full[name]["saved_bytes"] / M.GiB
                    row[f"{name}_saved_GiB_ssmb"] = shard[name]["saved_bytes"] / M.GiB
                if model == time_model and time_tokens % tp == 0:
                    row["time_tokens_per_gpu"] = time_tokens
                    row.update(_ssmb_times(model, system, workload, time_tokens, tp, seed))
                rows.append(row)
                st.advance()
    return rows


def _ssmb_times(model, system, workload, tokens, tp, seed) -> dict:
    out = {}
    for t, tag in ((tokens, "tp"), (tokens // tp, "ssmb")):
        s, m, w = load_configs(system, model, workload, t, seed=seed)
        L = Layer(s, m, w, make_routing(m, w, s.gpus))
        for v in ("sw", "hub"):
            out[f"{v}_layer_us_{tag}"] = layer_time(L, v)["layer_us"]
    gather = S.allgather_us(L.comp, tp, tokens, m.row_bytes)
    out["allgather_us"] = gather
    for v in ("sw", "hub"):
        out[f"{v}_layer_us_ssmb"] += gather
    return out
