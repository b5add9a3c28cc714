"""One point of ``moehub headline`` evaluated, on Dask, and cached per run.

A point (:class:`.headline_grid.Point`) runs a list of *runs* on one layer (one routing):
the software baselines by system name (``comet``, ``deepep_ll``, ...) and the hub variants
as ``hub:<variant>`` (``hub:v1``, ``hub:multicast+early_counts``). A run's record keeps
only numbers: its latency and end-to-end time, and the few timeline facts the report's
"why the hub loses" needs (:func:`summary`), so that the best-variant and best-baseline
picks (:mod:`.headline_pick`) work on cached records alone, without the timelines.

The **cache**: one JSON file per (point, run) in ``<build>/headline/points/``, keyed by a
SHA-256 of the point's resolved configs (the compute-to-link override applied), the run's
name and a digest of the code that makes the figures (:func:`code_digest`: the sources a
run imports and the configs and calibration data it reads). A record is
written whole (renamed into place) as soon as its point finishes, so a killed run resumes
where it stopped, and a grid that adds a hub variant or a system reruns only that run.
The points run on the cluster of ``moehub explore`` (:mod:`moehub.cluster`: a
local cluster, ``--scheduler`` or ``--cluster slurm|pbs``), or in this process with
``--scheduler synchronous`` (no Dask: tests, debugging).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import socket
import time

import numpy as np

from .. import progress

#: bump when what a run records changes without a change of the hashed sources
EVAL_VERSION = 1
#: ``--scheduler`` value that runs the points in this process, one after another
SYNCHRONOUS = "synchronous"
#: the modules a point's runs import (in a fresh interpreter: the command has imported
#: much more) ...
RUN_MODULES = ("moehub.cosim.experiment", "moehub.cosim.layer", "moehub.cosim.systems",
               "moehub.cosim.workload", "moehub.cosim.headline_eval")
#: ... every module of the co-simulation and its systems (some are imported lazily, when a
#: run needs them: the network's compiled kernels) and the data they read: every config (a hub config
#: is read by name inside the layer) and the calibration points
STATIC_GLOBS = ("cosim/*.py", "cosim/systems/*.py", "config/**/*.yaml",
                "cosim/data/calibration_points.yaml")
#: what only presents the figures (tables, figures, the command), never hashed
PRESENTATION = ("cosim/plots.py", "cosim/cli.py", "cosim/headline.py",
                "cosim/headline_grid.py", "cosim/headline_pick.py")
HUB = "hub:"
DISPATCH = ("dispatch", "all-to-all dispatch")
GEMM = ("expert GEMM",)


@functools.lru_cache(maxsize=1)
def _run_sources() -> tuple:
    """The package's source files a point's runs import, found in a fresh interpreter that
    imports :data:`RUN_MODULES` (so that an edit elsewhere, a testbench or a synthesis
    script, does not invalidate the map)."""
    import subprocess
    import sys
    code = ("import importlib, sys\n"
            f"for m in {RUN_MODULES!r}: importlib.import_module(m)\n"
            "print('\\n'.join(sorted(getattr(m, '__file__', None) or '' for n, m in "
            "list(sys.modules.items()) if n.startswith('moehub.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300)
    return tuple(line for line in out.stdout.splitlines() if line.endswith(".py"))


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of what makes a run's figures: the sources its modules import
    (:func:`_run_sources`), the co-simulation's modules and the data they read
    (:data:`STATIC_GLOBS`), less :data:`PRESENTATION`. Computed once per process."""
    from pathlib import Path
    from ..runinfo import PACKAGE_DIR
    files = {Path(f).resolve() for f in _run_sources()}
    for pattern in STATIC_GLOBS:
        files |= {p.resolve() for p in PACKAGE_DIR.glob(pattern)}
    h = hashlib.sha256()
    for p in sorted(files):
        rel = p.relative_to(PACKAGE_DIR).as_posix()
        if rel not in PRESENTATION:
            h.update(rel.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _configs(point) -> dict:
    def strip(obj):
        d = dataclasses.asdict(obj)
        d.pop("name", None)
        d.pop("description", None)
        return d
    return {"system": strip(point.system), "model": strip(point.model),
            "workload": strip(point.workload)}


def run_key(point, run: str, digest: str) -> str:
    """The cache key of ``run`` on ``point``."""
    doc = {"configs": _configs(point), "run": run, "code": digest, "version": EVAL_VERSION}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------------------- one point
def _phase_end(res, gpu: int, names) -> float | None:
    ends = [p.end for p in res.phases if p.gpu == gpu and p.name in names]
    return max(ends) if ends else None


def summary(res, L, e2e_ms: float) -> dict:
    """What a run's record keeps: latency, end to end, and on its critical GPU (the last
    to finish) the dispatch end, the expert GEMMs' busy time and end; the first GEMM's
    start on any GPU; the passes of the shared-network fixed point."""
    crit = int(np.argmax(res.gpu_end))
    starts = [p.start for p in res.phases if p.name in GEMM]
    return {"latency_us": float(res.latency_us), "e2e_ms": float(e2e_ms), "critical_gpu": crit,
            "dispatch_end_us": _phase_end(res, crit, DISPATCH),
            "gemm_end_us": _phase_end(res, crit, GEMM),
            "gemm_busy_us": float(sum(p.end - p.start for p in res.phases
                                      if p.gpu == crit and p.name in GEMM)),
            "gemm_first_us": min(starts) if starts else None,
            "passes": res.extra.get("passes"), "converged": res.extra.get("converged"),
            "band_us": res.extra.get("band_us")}


def layer_facts(L) -> dict:
    """The layer's numbers the report quotes: GPUs, experts per GPU, the wire bytes of one
    copy per (token, expert) as the hub sends them, per (token, GPU) with multicast, and of
    DeepEP's deduplicated rows."""
    return {"gpus": L.G, "experts_per_gpu": L.E_local, "rows": int(L.N),
            "hub_wire_bytes": float(L.counts.sum() * L.row_wire_hub),
            "hub_multicast_wire_bytes": float(L.gpu_rows.sum() * L.row_wire_hub),
            "dedup_wire_bytes": float(L.gpu_rows.sum() * L.row_wire_sw),
            "header_bytes": L.sys.link_header_bytes, "chunk_bytes": L.hub.chunk_bytes,
            "comm_sms_hub": L.sys.software.comm_sms_hub}


def features_of(run: str) -> frozenset:
    from .headline_grid import parse_variant
    return parse_variant(run[len(HUB):])


def applies(point, run: str) -> bool:
    """Whether ``run`` runs on ``point`` (a relay hub variant only across nodes)."""
    from .headline_grid import applies as variant_applies
    return not run.startswith(HUB) or variant_applies(point, features_of(run))


def evaluate_point(point, runs) -> dict:
    """Every run of ``runs`` on one layer of ``point``: ``{"runs": {run: summary},
    "facts": layer_facts}`` (what a Dask task returns)."""
    from .experiment import end_to_end
    from .layer import Layer
    from .systems import run_system
    from .workload import make_routing
    s, m, w = point.system, point.model, point.workload
    L = Layer(s, m, w, make_routing(m, w, s.gpus))
    out = {}
    for run in runs:
        t0, c0 = time.perf_counter(), time.process_time()
        if run.startswith(HUB):
            res = run_system("hub", L, hub_features=features_of(run))
        else:
            res = run_system(run, L)
        out[run] = {**summary(res, L, end_to_end(L, res.latency_us)),
                    "wall_s": round(time.perf_counter() - t0, 3),
                    "cpu_s": round(time.process_time() - c0, 3)}
    return {"runs": out, "facts": layer_facts(L)}


def point_task(point, runs) -> dict:
    """What a Dask task runs: :func:`evaluate_point` with where and how long."""
    t0, c0 = time.perf_counter(), time.process_time()
    res = evaluate_point(point, runs)
    return {**res, "wall_s": round(time.perf_counter() - t0, 3),
            "cpu_s": round(time.process_time() - c0, 3), "host": socket.gethostname(),
            "pid": os.getpid()}


# ---------------------------------------------------------------------------- the run
@dataclasses.dataclass
class Evaluated:
    """Records by point label: ``{run: metrics}`` and the layer facts; the counts."""
    runs: dict
    facts: dict
    evaluated: int = 0
    cached: int = 0
    failures: list = dataclasses.field(default_factory=list)
    wall_s: dict = dataclasses.field(default_factory=dict)


def evaluate(points, runs, cache, *, scheduler=None, cluster="local", workers=None,
             options=None, use_cache: bool = True) -> Evaluated:
    """Every run of ``runs`` on every point: cached ones read from ``cache`` (an
    :class:`moehub.explore.evaluator.Cache`), the rest evaluated (one task
    per point with missing runs, the costliest first) and cached as each point finishes."""
    digest = code_digest()
    ev = Evaluated({}, {})
    todo = {}
    for p in points:
        keys = {r: run_key(p, r, digest) for r in runs if applies(p, r)}
        recs = {r: cache.get(k) if use_cache else None for r, k in keys.items()}
        ev.runs[p.label] = {r: rec["metrics"] for r, rec in recs.items() if rec}
        facts = next((rec["facts"] for rec in recs.values() if rec and "facts" in rec), None)
        if facts:
            ev.facts[p.label] = facts
        missing = [r for r in keys if recs[r] is None]
        if missing:
            todo[p.label] = (p, missing, keys)
    ev.cached = len(points) - len(todo)
    progress.info(f"headline: {len(points)} points, {ev.cached} cached ({cache.folder}), "
                  f"{len(todo)} to evaluate")
    if todo:
        # the widest layers first (their networks cost most: flows grow as GPUs^2), then
        # the most rows, so that the last task to finish is a short one
        order = sorted(todo.values(), key=lambda t: (-t[0].system.gpus, -t[0].rows))
        for label, res in _run_tasks(order, scheduler, cluster, workers, options, ev):
            p, missing, keys = todo[label]
            for r in missing:
                cache.put(keys[r], {"point": label, "run": r, "metrics": res["runs"][r],
                                    "facts": res["facts"], "host": res["host"],
                                    "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            ev.runs[label].update(res["runs"])
            ev.facts[label] = res["facts"]
            ev.wall_s[label] = res["wall_s"]
            ev.evaluated += 1
    return ev


def _run_tasks(order, scheduler, cluster, workers, options, ev):
    """Yield (label, result) as points finish, on Dask or (synchronous) here; a failed
    point is reported and recorded in ``ev.failures``, the others go on."""
    with progress.stage("headline: points evaluated", total=len(order), unit="points",
                        heartbeat=True) as st:
        for label, res, err in _results(order, scheduler, cluster, workers, options):
            if err is not None:
                ev.failures.append((label, err))
                print(f"headline: {label}: FAILED: {err}", flush=True)
                st.advance(note=f"{label} failed")
                continue
            print(f"headline: {label}: {_brief(res)} ({res['wall_s']:.1f} s, {res['cpu_s']:.1f} "
                  f"CPU s on {res['host']})", flush=True)
            st.advance(note=label)
            yield label, res


def _results(order, scheduler, cluster, workers, options):
    if scheduler == SYNCHRONOUS:
        for p, missing, _ in order:
            try:
                yield p.label, point_task(p, missing), None
            except Exception as e:       # a failed point is reported; the others go on
                yield p.label, None, f"{type(e).__name__}: {e}"
        return
    from distributed import as_completed
    from .. import cluster as clusters
    clusters.check(scheduler, cluster, options or {})
    with clusters.client(len(order), scheduler, cluster, workers, options) as c:
        futures = {c.submit(point_task, p, missing, pure=False,
                            key=f"headline-{i}-{hashlib.sha1(p.label.encode()).hexdigest()[:10]}"):
                   p.label for i, (p, missing, _) in enumerate(order)}
        for fut in as_completed(futures):
            try:
                yield futures[fut], fut.result(), None
            except Exception as e:
                yield futures[fut], None, f"{type(e).__name__}: {e}"


def _brief(res) -> str:
    runs = res["runs"]
    return ", ".join(f"{r} {m['latency_us']:.0f} us" for r, m in runs.items())
