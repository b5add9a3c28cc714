"""One design point evaluated, and the cache of evaluated points.

:func:`evaluate` is the default *evaluator*: :func:`synthesize` (the reduced hub through
the ASIC flow: N5 area, deepest stage in FO4 and its verdict at 1.98 GHz) then
:func:`cosimulate` (the layer with the point's hub: the hub's speedup over the best
software baseline, and its receive memory). An evaluator is any picklable function
``evaluator(point, work_dir) -> dict`` of metrics; :func:`moehub.explore.run` takes
another one (a surrogate model, a test's fast stand-in) through its ``evaluator``
argument, and ``moehub explore --evaluator MODULE:FUNCTION`` names one.

Which hub parameters the co-simulation reads (``cosim/layer.py``, ``cosim/systems/hub.py``):
``lanes`` and ``hub_clock_GHz`` (the hub's ingress port: lanes x clock packets per second,
and the lane each chunk arrives on), ``chunk_bytes`` (a header per packet, rows padded to
whole chunks), ``tags_per_source`` (the tag window: a source reuses a tag only after its
credit returned, which bounds each flow to tags rows per credit round trip), ``tile_rows``
(the flag and GEMM tile), ``sources`` and ``experts`` (set by the layer: GPUs, experts per
GPU). The rest (queue depths, widths, timeout) change no co-simulated time. Lanes matter
only while the port is the bottleneck (lanes x chunk x clock below the senders' rate) and
tags only while the window is (tags x row below rate x round trip).

The **cache**: one JSON file per point, ``<build>/explore/points/<key>.json``, where the
key hashes the point's resolved configurations (:func:`moehub.explore.space.config_dicts`),
the evaluator, and the versions of everything that makes the figures: moehub, Amaranth,
Yosys, OpenSTA and a digest of the sources that synthesize and co-simulate (rtl, synth,
cosim, config, verif and this module). A file is written whole (renamed into
place), so an interrupted run leaves complete points only, and the next run skips them.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

from .space import Point, config_dicts

#: bump when what an evaluation computes changes without a change of the hashed sources
EVALUATOR_VERSION = 1

#: sources whose content is hashed into every key (relative to the package folder)
SOURCE_DIRS = ("rtl", "synth", "cosim", "config", "verif")
SOURCE_FILES = ("explore/evaluator.py",)


def _tool_version(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else None


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of the sources that make a point's figures (``.py`` and ``.yaml``)."""
    from ..runinfo import PACKAGE_DIR
    h = hashlib.sha256()
    files = [PACKAGE_DIR / f for f in SOURCE_FILES]
    for d in SOURCE_DIRS:
        files += sorted(p for p in (PACKAGE_DIR / d).rglob("*") if p.suffix in (".py", ".yaml")
                        and "__pycache__" not in p.parts)
    for f in files:
        h.update(f.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0")
        h.update(f.read_bytes() if f.exists() else b"")
    return h.hexdigest()


def tool_versions() -> dict:
    """Versions that go into every cache key (read once per run, in the client)."""
    from ..runinfo import _dist_version, version
    from ..synth import tools
    try:
        yosys = _tool_version([tools.yosys(), "-V"])
    except tools.ToolMissing:
        yosys = None
    try:
        sta = _tool_version([tools.sta(), "-version"])
    except tools.ToolMissing:
        sta = None
    return {"moehub": version(), "amaranth": _dist_version("amaranth"), "yosys": yosys,
            "opensta": sta, "sources": code_digest()}


def evaluator_name(evaluator) -> str:
    return f"{evaluator.__module__}:{evaluator.__qualname__}"


def cache_key(point: Point, versions: dict, evaluator=None) -> str:
    """The point's key: a SHA-256 of its configurations, the evaluator and ``versions``."""
    doc = {"configs": config_dicts(point), "tools": versions,
           "evaluator": [evaluator_name(evaluator or evaluate), EVALUATOR_VERSION]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------------------- evaluation
def synthesize(point: Point, work_dir: Path) -> dict:
    """The reduced hub through the ASIC flow (files in ``work_dir``): its whole-hub figures
    (:func:`moehub.synth.sweep.point_metrics`) and the verdict at 1.98 GHz."""
    from ..synth import flow
    from ..synth.sweep import point_metrics
    t0 = time.monotonic()
    if getattr(point, "synth_lib", "osu018") == "asap7":      # moehub explore --synth-lib asap7
        from ..synth import asap7, asap7_report
        sec = asap7.run_asap7(point.synth, Path(work_dir), period_ns=point.period_ns)
        return {**asap7_report.point_metrics(sec), "synth_s": round(time.monotonic() - t0, 1),
                "synth_scope": synth_scope(point)}
    sec = flow.run_asic(point.synth, Path(work_dir), period_ns=point.period_ns)
    lr = sec["line_rate"]["at_h100_clock"]
    return {**point_metrics(sec), "timing": lr["timing"], "bandwidth_pass": lr["bandwidth_pass"],
            "line_rate_pass": lr["pass"], "synth_s": round(time.monotonic() - t0, 1),
            "synth_scope": synth_scope(point)}


def synth_scope(point: Point) -> str:
    """What the synthesized hub holds: the whole hub, or (relay points) the hub without
    the relay's units, which ``moehub synth-unit`` synthesises on their own."""
    feats = getattr(point, "hub_features", frozenset())
    if "relay" in feats:
        return ("hub without the relay units (moehub synth-unit relay_control"
                + (", reduce_unit" if "reduce" in feats else "") + " --nodes N)")
    return "hub"


def cosimulate(point: Point) -> dict:
    """One layer with the point's hub (model backend, token-order sends, every system):
    the hub's speedup over the best software baseline and the receive memory."""
    from ..cosim.experiment import run_experiment
    from ..cosim.headline import point_row
    t0 = time.monotonic()
    feats = getattr(point, "hub_features", frozenset())
    er = run_experiment(point.system, point.model, point.workload, hub_base=point.hub_base,
                        hub_features=feats)
    if er.layer.hub != point.hub:
        raise RuntimeError(f"the co-simulated hub {er.layer.hub} is not the point's {point.hub}")
    row = point_row(er)
    hub = er.results["hub"]
    ll = er.results.get("deepep_ll")
    return {"hub_us": row["hub_us"], "best_baseline": row["best_baseline"], "best_us": row["best_us"],
            "speedup": row["speedup_layer"], "speedup_e2e": row["speedup_e2e"],
            "ideal_us": row["ideal_us"], "tag_stalls": int(hub.extra.get("tag_stalls", 0)),
            "receive_bytes": _receive_bytes(point, er.layer, feats),
            "deepep_ll_receive_bytes": ll.extra.get("recv_buffer_bytes") if ll else None,
            "cosim_s": round(time.monotonic() - t0, 2)}


def _receive_bytes(point: Point, L, feats: frozenset) -> int:
    """The hub's receive memory per GPU: protocol v1's static regions, or with features
    the memory model's figure for them (pages, the multicast pool, the relay's staging:
    :func:`moehub.cosim.memory.hub_memory`)."""
    if not feats:
        return point.hub.receive_bytes
    from ..cosim.memory import hub_memory
    return hub_memory(L, feats)["bytes"]


def evaluate(point: Point, work_dir: Path) -> dict:
    """The default evaluator: :func:`synthesize` and :func:`cosimulate`."""
    return {**synthesize(point, work_dir), **cosimulate(point)}


def run_point(point: Point, work_dir: str, evaluator=None) -> dict:
    """What a Dask task runs: the evaluator's metrics with where and how long. The work
    folder (on a cluster, the client's build folder) falls back to a temporary one when
    this worker cannot create it (no shared file system)."""
    import tempfile
    t0 = time.monotonic()
    work = Path(work_dir)
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError:
        work = Path(tempfile.mkdtemp(prefix="moehub-explore-"))
    metrics = (evaluator or evaluate)(point, work)
    return {"metrics": metrics, "wall_s": round(time.monotonic() - t0, 2),
            "host": socket.gethostname(), "pid": os.getpid(), "work_dir": str(work)}
