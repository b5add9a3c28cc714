"""Sweeps: area and fmax of the hub against experts per GPU, lanes, tags per source and
GPU count (sources), as CSV and matplotlib figures.

Each point is the base configuration with one parameter changed (``cfg.replace``), run
through the full ASIC flow; points run in parallel (default 2 jobs, the machine's cores).
The datapath is narrow (``data_bits``, default 32) to keep a full sweep near 15 minutes:
data width adds flops and area linearly per lane but does not change the control paths
whose FO4 depth sets fmax; the figures say so.
"""
from __future__ import annotations

import csv
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .. import progress
from ..spec.config import QUEUE_GROUPS, ConfigError, HubConfig, load_hub_config
from ..paths import output_dir
from . import flow

#: changes to the base config for all points, so that a point synthesises in about a
#: minute: the row table (tags x sources entries of chunks_per_row bits) dominates the
#: run time, so rows are cut to 8 chunks and 4 tags per source unless a sweep varies them
SWEEP_BASE = {"chunks_per_row": 8, "tags_per_source": 4}

#: parameter values of each sweep (the base config's own value is added if missing)
SWEEPS = {
    "experts": ("experts", [1, 4, 8, 16, 32]),
    "lanes": ("lanes", [1, 2, 4, 8]),
    "tags": ("tags_per_source", [4, 8, 16, 32]),
    "sources": ("sources", [2, 4, 8, 16]),
}
LABELS = {"experts": "experts per GPU", "lanes": "lanes (packets / cycle)",
          "tags": "tags per source (row-table entries / source)", "sources": "GPUs (sources)"}
COLUMNS = ["sweep", "param", "value", "cells", "flops", "area_um2", "gate_equivalents", "sram_bits",
           "array_bits", "pm_area_um2", "alloc_area_um2", "tracker_area_um2", "csr_area_um2",
           "queues_area_um2", "critical_path_ns", "fo4", "fmax_MHz", "n5_mm2", "n5_mm2_low",
           "n5_mm2_high", "n5_fmax_GHz", "n5_fmax_GHz_low", "n5_fmax_GHz_high", "path_from", "path_to",
           "wall_s"]


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def queue_depths(base: HubConfig, lanes: int) -> dict:
    """Event and credit queue depths for ``lanes``: ``base``'s, grown to the schema's
    minimum (:data:`QUEUE_GROUPS` groups of ``lanes`` packets, a power of two)."""
    need = _pow2_at_least(QUEUE_GROUPS * lanes)
    return {"event_queue_depth": max(base.event_queue_depth, need),
            "credit_queue_depth": max(base.credit_queue_depth, need)}


def point_config(base: HubConfig, key: str, value: int, data_bits: int) -> HubConfig:
    """``base`` with ``key = value``; queue depths grow with the lanes as the schema requires."""
    changes = {key: value, "data_bits": data_bits,
               "name": f"{base.name}-{key}{value}"}
    changes.update(queue_depths(base, value if key == "lanes" else base.lanes))
    return base.replace(**changes)


def _run_point(args):
    sweep, key, value, cfg, out_dir, period_ns = args
    t0 = time.monotonic()
    sec = flow.run_asic(cfg, out_dir, period_ns=period_ns, write_report=False)
    return {"sweep": sweep, "param": key, "value": value, **point_metrics(sec),
            "wall_s": round(time.monotonic() - t0, 1)}


def point_metrics(sec: dict) -> dict:
    """The whole hub's figures from an ASIC report section (:func:`flow.run_asic`): cells,
    flops, area per block, critical path and FO4, N5 area and fmax with their ranges."""
    m = sec["modules"]
    top = m["top"]
    area = lambda k: m[k]["area_um2"] if k in m else 0.0
    n5 = top["n5"]
    return {
        "cells": top["cells"], "flops": top["flops"],
        "area_um2": top["area_um2"], "gate_equivalents": round(top["gate_equivalents"]),
        "sram_bits": top["sram_bits"], "array_bits": top["array_bits"],
        "pm_area_um2": area("pm"), "alloc_area_um2": area("alloc"), "tracker_area_um2": area("tracker"),
        "csr_area_um2": area("csr"), "queues_area_um2": area("events") + area("credits"),
        "critical_path_ns": top["critical_path_ns"], "fo4": top["fo4"], "fmax_MHz": top["fmax_MHz"],
        "n5_mm2": n5["total_mm2"]["nominal"], "n5_mm2_low": n5["total_mm2"]["low"],
        "n5_mm2_high": n5["total_mm2"]["high"], "n5_fmax_GHz": n5["fmax_n5_GHz"]["nominal"],
        "n5_fmax_GHz_low": n5["fmax_n5_GHz"]["low"], "n5_fmax_GHz_high": n5["fmax_n5_GHz"]["high"],
        "path_from": top["path"]["from"], "path_to": top["path"]["to"],
    }


def points(base: HubConfig, sweeps, data_bits: int, out: Path, period_ns: float):
    jobs = []
    for sweep in sweeps:
        key, values = SWEEPS[sweep]
        for v in sorted(set(values) | {getattr(base, key)}):
            try:
                cfg = point_config(base, key, v, data_bits)
            except ConfigError as e:
                print(f"synth-sweep: skipping {key} = {v}: {e}")
                continue
            jobs.append((sweep, key, v, cfg, out / sweep / f"{key}{v}", period_ns))
    return jobs


def sweep_base(cfg: HubConfig, changes: dict | None = None) -> HubConfig:
    """``cfg`` with the sweep-wide changes (``chunks_per_row`` is applied to ``row_bytes``)."""
    changes = dict(SWEEP_BASE if changes is None else changes)
    cpr = changes.pop("chunks_per_row", None)
    if cpr is not None:
        changes["row_bytes"] = int(cpr) * cfg.chunk_bytes
        changes.setdefault("row_stride_bytes", 0)
    return cfg.replace(**changes) if changes else cfg


def run_sweeps(base_name: str = "mixtral-8gpu", sweeps=None, jobs: int = 2, data_bits: int = 32,
               period_ns: float = flow.DEFAULT_PERIOD_NS, out=None, base_changes: dict | None = None) -> int:
    base = sweep_base(load_hub_config(base_name), base_changes)
    sweeps = list(sweeps or SWEEPS)
    for s in sweeps:
        if s not in SWEEPS:
            raise ConfigError(f"sweep = {s!r}: must be one of {', '.join(SWEEPS)}")
    if jobs < 1:
        raise ConfigError(f"jobs = {jobs}: must be >= 1")
    out = output_dir("synth", "sweep", out=out)
    out.mkdir(parents=True, exist_ok=True)
    todo = points(base, sweeps, data_bits, out, period_ns)
    # big points first so the two workers finish together
    todo.sort(key=lambda j: -(j[3].entries * j[3].chunks_per_row * j[3].lanes + j[3].experts))
    # the base point appears in every sweep: synthesise each distinct configuration once
    key = lambda j: tuple(sorted((k, v) for k, v in j[3].__dict__.items() if k not in ("name", "description")))
    unique = {}
    for j in todo:
        unique.setdefault(key(j), j)
    t0 = time.monotonic()
    done = {}
    with ProcessPoolExecutor(max_workers=min(jobs, len(unique), os.cpu_count() or 1)) as ex, \
            progress.stage("synth-sweep: points synthesised", total=len(unique), heartbeat=True) as st:
        for k, row in zip(unique, ex.map(_run_point, unique.values())):
            done[k] = row
            st.advance(note=f"{row['param']} = {row['value']}")
            print(f"  {row['param']:>16} = {row['value']:<3}  {row['area_um2'] / 1e6:7.2f} mm2 OSU018  "
                  f"{row['fmax_MHz']:6.1f} MHz  {row['fo4']:6.1f} FO4  ({row['wall_s']:.0f} s)", flush=True)
    rows = [{**done[key(j)], "sweep": j[0], "param": j[1], "value": j[2]} for j in todo]
    for sweep in sweeps:
        sel = sorted((r for r in rows if r["sweep"] == sweep), key=lambda r: r["value"])
        path = out / f"{sweep}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(sel)
    from .plots import plot_sweeps      # (matplotlib: imported only to draw)
    pngs = plot_sweeps(out, sweeps, base, data_bits, LABELS)
    print(f"synth-sweep: {len(rows)} points ({len(unique)} distinct) in {time.monotonic() - t0:.0f} s; "
          f"CSV and PNG under {out} ({', '.join(p.name for p in pngs)})")
    return 0


def replot(base_name: str = "mixtral-8gpu", sweeps=None, data_bits: int = 32, out=None,
           base_changes: dict | None = None) -> int:
    """Redraw the figures from the CSV files of an earlier sweep."""
    from .plots import plot_sweeps      # (matplotlib: imported only to draw)
    base = sweep_base(load_hub_config(base_name), base_changes)
    out = output_dir("synth", "sweep", out=out)
    sweeps = [s for s in (sweeps or SWEEPS) if (out / f"{s}.csv").exists()]
    if not sweeps:
        print(f"synth-sweep: no sweep CSV under {out}")
        return 1
    pngs = plot_sweeps(out, sweeps, base, data_bits, LABELS)
    print(f"synth-sweep: {', '.join(str(p) for p in pngs)}")
    return 0
