"""Simulator speed of the co-simulation (not a test): the hub stage and whole layers.

    .venv/bin/python scripts/bench_cosim.py [--point MODEL:SYSTEM:WORKLOAD:TOKENS ...]
                                            [--reference-rows 1000] [--repeat 3]

For each point it prints one row of a Markdown table: the routed rows; the hub stage's
speed in rows per second -- the vectorised fast path (``run_hub_fast``, every destination
GPU) and the packet-by-packet reference (``run_hub_reference``, on the first
``--reference-rows`` rows of GPU 0) -- and the whole layer: the wall seconds of each
system (as ``moehub cosim`` runs them, on one shared layer) and the total, wall and CPU
(``time.process_time``). Times are the best of ``--repeat`` runs; on a shared machine
quote the CPU column. It only uses interfaces that predate the fast path, so the same
script measures an older checkout (``PYTHONPATH`` pointing at it).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from moehub.cosim.experiment import load_configs
from moehub.cosim.hub_stage import HubArrivals, run_hub_fast, run_hub_reference
from moehub.cosim.layer import Layer
from moehub.cosim.systems import SYSTEMS, hub_schedule, run_system
from moehub.cosim.workload import make_routing

POINTS = ["mixtral-8x7b:h100x8:default:1024", "mixtral-8x7b:h100x8:default:4096",
          "deepseek-v3:h100x8:default:512", "mixtral-8x7b:h100x16-ib:skewed-mmlu:1024",
          "qwen2-57b-a14b:b200x8:skewed-sst2:1024"]


def _slice(arr: HubArrivals, n: int) -> HubArrivals:
    """The first n rows (by arrival) of one destination, with consistent EOS counts."""
    keep = np.sort(np.argsort(arr.first_cycle, kind="stable")[:n])
    src = arr.src[keep]
    lc = arr.last_cycle[keep]
    eos = [(int(lc[src == s].max()) + 1 if (src == s).any() else 0, s % arr.cfg.lanes, s,
            int((src == s).sum())) for s in range(arr.cfg.sources)]
    return HubArrivals(arr.cfg, src, arr.tag[keep], arr.expert[keep], arr.token[keep],
                       arr.slot[keep], arr.first_cycle[keep], arr.first_lane[keep], lc,
                       arr.last_lane[keep], eos)


def _timed(fn, repeat: int) -> tuple:
    """(best wall s, best CPU s, last result) of ``repeat`` calls."""
    wall, cpu, out = np.inf, np.inf, None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return wall, cpu, out


def _layer(point: str):
    model, system, workload, tokens = point.split(":")
    s, m, w = load_configs(system, model, workload, int(tokens))
    return Layer(s, m, w, make_routing(m, w, s.gpus))


def hub_stage(point: str, ref_rows: int, repeat: int) -> dict:
    """Rows/s of the hub stage on the layer's own arrival schedules."""
    L = _layer(point)
    arrivals, *_ = hub_schedule(L, 0.0)
    wall, cpu, _ = _timed(lambda: [run_hub_fast(L.hub, a) for a in arrivals], repeat)
    small = _slice(arrivals[0], ref_rows)
    rwall, rcpu, _ = _timed(lambda: run_hub_reference(L.hub, small), 1)
    return {"rows": L.N, "fast": L.N / wall, "fast_cpu": L.N / cpu,
            "ref": len(small) / rwall, "ref_cpu": len(small) / rcpu}


def whole_layer(point: str, repeat: int) -> dict:
    """Wall s of every system and the total (wall and CPU), as ``moehub cosim`` runs them:
    routing, one layer, the systems in order on it."""
    best = None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        L = _layer(point)
        per = {}
        for name in SYSTEMS:
            t1 = time.perf_counter()
            run_system(name, L)
            per[name] = time.perf_counter() - t1
        row = {"systems": per, "wall": time.perf_counter() - t, "cpu": time.process_time() - c}
        best = row if best is None or row["cpu"] < best["cpu"] else best
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--point", action="append",
                   help=f"MODEL:SYSTEM:WORKLOAD:TOKENS (repeatable; default {', '.join(POINTS)})")
    p.add_argument("--reference-rows", type=int, default=1000,
                   help="rows of GPU 0 replayed packet by packet by the reference")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (the best counts)")
    a = p.parse_args(argv)
    head = ["configuration", "rows", "hub stage rows/s (CPU)", "reference rows/s (CPU)",
            *[f"{s} s" for s in SYSTEMS], "layer wall s", "layer CPU s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for point in a.point or POINTS:
        h = hub_stage(point, a.reference_rows, a.repeat)
        w = whole_layer(point, a.repeat)
        cells = [point.replace(":", " "), f"{h['rows']:,}",
                 f"{h['fast']:,.0f} ({h['fast_cpu']:,.0f})", f"{h['ref']:,.0f} ({h['ref_cpu']:,.0f})",
                 *[f"{w['systems'][s]:.2f}" for s in SYSTEMS], f"{w['wall']:.2f}", f"{w['cpu']:.2f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    print("rows/s: routed rows (all destination GPUs) per wall second, CPU seconds in "
          "brackets; the reference runs on the first rows of GPU 0. System columns: wall s of "
          "each system on the shared layer; layer wall/CPU: routing, layer and every system.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
