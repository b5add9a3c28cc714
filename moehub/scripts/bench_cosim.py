"""Simulator speed of the co-simulation (not a test): the hub stage and whole layers.

    .venv/bin/python scripts/bench_cosim.py [--point MODEL:SYSTEM:WORKLOAD:TOKENS ...]
                                            [--reference-rows 1000] [--repeat 3]
    .venv/bin/python scripts/bench_cosim.py --scaling [--gpus 8,16,...] [--tokens 128,4096]
                                            [--systems hub,bulk,...] [--engine reference]
    .venv/bin/python scripts/bench_cosim.py --window-error [--point MODEL:SYSTEM:WORKLOAD:TOKENS ...]
                                            [--systems hub,bulk,...]

For each point it prints one row of a Markdown table: the routed rows; the hub stage's
speed in rows per second -- the vectorised fast path (``run_hub_fast``, every destination
GPU) and the packet-by-packet reference (``run_hub_reference``, on the first
``--reference-rows`` rows of GPU 0) -- and the whole layer: the wall seconds of each
system (as ``moehub cosim`` runs them, on one shared layer) and the total, wall and CPU
(``time.process_time``). Times are the best of ``--repeat`` runs; on a shared machine
quote the CPU column. It only uses interfaces that predate the fast path, so the same
script measures an older checkout (``PYTHONPATH`` pointing at it).

``--scaling``: the fluid network's cost as the layer widens -- DeepSeek-V3 on H100 nodes
of 8 GPUs joined by InfiniBand (``h100x8`` for 8 GPUs, ``h100x32-ib`` with its GPU count
overridden above; one layer per row, ``moehub cosim``'s systems on it, run once): the
largest network's flows, the events (injection boundaries), rate steps and rate changes
summed over every network the systems ran, the network seconds (CPU) and the whole
layer's wall and CPU seconds, each system's wall seconds, and the engine's drain window.
It prints the machine's load (``os.getloadavg``) before every row. Each row is also
written to ``--out`` (default ``<build>/results/bench-scaling/scaling.json``; a row of the
same GPUs, tokens and systems replaces the older one, others are kept, so runs of a few
rows add up), with the run record; ``moehub report --collect bench-scaling`` makes the
record the docs' scaling tables are generated from.

``--window-error``: the error of the coalesced queue drains (layers above ``EXACT_GPUS``
GPUs, ``cosim/layer.py``) against the exact engine. Each point (default
``deepseek-v4-flash:gb200-nvl72:default:32`` and ``deepseek-v3:h100x32-ib:default:128``)
runs twice as ``moehub cosim`` runs it (``run_experiment``, every system of ``--systems``):
exact (``MOEHUB_NETWORK_WINDOW_US=0`` for the run) and as shipped (the variable unset).
Per point and system it prints and records both layer times (us), their difference (%),
each run's passes and the CPU seconds of each whole run, the windows (``WINDOW_US``,
``WINDOW_REL``) and the 1-minute load before the point; the rows go to ``--out`` (default
``<build>/results/bench-window/window.json``; a row of the same point and system replaces
the older one, others are kept), with the run record; ``moehub report --collect
bench-window`` makes the record the docs' ``cosim-window-error`` table is generated from.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from moehub.cosim.experiment import load_configs
from moehub.cosim.hub_stage import HubArrivals, run_hub_fast, run_hub_reference
from moehub.cosim.layer import WINDOW_REL, Layer
from moehub.cosim.systems import SYSTEMS, hub_schedule, run_system
from moehub.cosim.workload import make_routing
from moehub import runinfo
from moehub.paths import build_root

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


SCALING_GPUS = (8, 16, 32, 64, 72, 128, 256)
SCALING_TOKENS = (128, 4096)     #: decode, prefill (tokens per GPU)


def _scaling_layer(gpus: int, tokens: int):
    import dataclasses
    system = "h100x8" if gpus == 8 else "h100x32-ib"
    s, m, w = load_configs(system, "deepseek-v3", "default", tokens)
    s = dataclasses.replace(s, gpus=gpus)
    return Layer(s, m, w, make_routing(m, w, s.gpus))


def scaling_row(gpus: int, tokens: int, systems) -> dict:
    """One layer of the scaling table: its systems run once, every network's stats summed."""
    from moehub.cosim import network as N
    nets = []
    run = N.FluidNetwork.run

    def counted(net):
        c = time.process_time()
        out = run(net)
        nets.append((net.stats, time.process_time() - c, net.window_us))
        return out
    N.FluidNetwork.run = counted
    try:
        t, c = time.perf_counter(), time.process_time()
        L = _scaling_layer(gpus, tokens)
        per = {}
        for name in systems:
            t1 = time.perf_counter()
            run_system(name, L)
            per[name] = time.perf_counter() - t1
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    finally:
        N.FluidNetwork.run = run
    tot = lambda k: sum(st.get(k, 0) for st, _, _ in nets)
    return {"flows": max((st.get("flows", 0) for st, _, _ in nets), default=0),
            "networks": len(nets), "events": tot("events"), "steps": tot("steps"),
            "changes": tot("rate_changes"), "net_cpu": sum(x for _, x, _ in nets),
            "window": max((w for _, _, w in nets), default=0.0),
            "wall": wall, "cpu": cpu, "systems": per}


class _RowTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise _RowTimeout()


def scaling_rows_path(out) -> Path:
    return Path(out) if out else build_root() / "results" / "bench-scaling" / "scaling.json"


def save_row(path: Path, row: dict, key, order) -> None:
    """Add ``row`` to the rows at ``path`` with this run's record (``record``): a row of the
    same ``key(row)`` replaces the older one, others are kept; the rows sorted by ``order``."""
    path = Path(path)
    doc = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    row = {**row, "git": runinfo.git_describe()}
    rows = [r for r in doc.get("rows", []) if key(r) != key(row)] + [row]
    rows.sort(key=order)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"record": runinfo.record(), "rows": rows}, indent=1) + "\n")
    os.replace(tmp, path)


def save_scaling_row(path: Path, row: dict) -> None:
    """Add ``row`` to the scaling results at ``path`` (one row per GPUs, tokens and
    systems: a new measurement replaces the old), with this run's record."""
    save_row(path, row, lambda r: (r["gpus"], r["tokens"], tuple(r["systems_run"])),
             lambda r: (len(r["systems_run"]), r["systems_run"], r["gpus"], r["tokens"]))


def scaling(gpus, tokens, systems, row_timeout: int = 0, out=None) -> None:
    runinfo.git_describe()          # the code this run imported (remembered before any row)
    head = ["GPUs", "tokens/GPU", "largest network (flows)", "networks", "events",
            "rate steps", "rate changes", "window us", "network CPU s", "layer wall s",
            "layer CPU s", *[f"{s} s" for s in systems], "load"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head), flush=True)
    for g in gpus:
        for tok in tokens:
            load = "%.1f" % os.getloadavg()[0]
            signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(row_timeout)
            t0 = time.perf_counter()
            try:
                try:
                    r = scaling_row(g, tok, systems)
                except SystemError:
                    # the alarm fired inside a compiled kernel: numba reports it this way
                    if row_timeout and time.perf_counter() - t0 >= row_timeout:
                        raise _RowTimeout() from None
                    raise
            except _RowTimeout:
                print(f"| {g} | {tok} | stopped after {row_timeout} s (--row-timeout) | | | | | | | "
                      f"| | {' | '.join('' for _ in systems)} | {load} |", flush=True)
                save_scaling_row(scaling_rows_path(out), {
                    "gpus": g, "tokens": tok, "systems_run": list(systems), "load": float(load),
                    "stopped_after_s": row_timeout, "window_us": _scaling_window(g)})
                continue
            except Exception as e:                 # a row that cannot run says why
                print(f"| {g} | {tok} | {type(e).__name__}: {e} |", flush=True)
                continue
            finally:
                signal.alarm(0)
            cells = [str(g), str(tok), f"{r['flows']:,}", str(r["networks"]), f"{r['events']:,}",
                     f"{r['steps']:,}", f"{r['changes']:,}", f"{r['window']:g}",
                     f"{r['net_cpu']:.2f}", f"{r['wall']:.2f}", f"{r['cpu']:.2f}",
                     *[f"{r['systems'][s]:.2f}" for s in systems], load]
            print("| " + " | ".join(cells) + " |", flush=True)
            save_scaling_row(scaling_rows_path(out), {
                "gpus": g, "tokens": tok, "systems_run": list(systems), "load": float(load),
                "largest_flows": r["flows"], "networks": r["networks"], "events": r["events"],
                "steps": r["steps"], "rate_changes": r["changes"], "window_us": r["window"],
                **({"window_rel": WINDOW_REL} if r["window"] else {}),
                "network_cpu_s": round(r["net_cpu"], 3), "layer_wall_s": round(r["wall"], 3),
                "layer_cpu_s": round(r["cpu"], 3),
                "system_wall_s": {k: round(v, 3) for k, v in r["systems"].items()}})


def _scaling_window(gpus: int) -> float:
    """The drain window the layer's networks use at this many GPUs (a row stopped before
    any network ran still says it)."""
    from moehub.cosim.layer import EXACT_GPUS, WINDOW_US
    return 0.0 if gpus <= EXACT_GPUS else WINDOW_US


# ----------------------------------------------------------------------------- window error
WINDOW_POINTS = ("deepseek-v4-flash:gb200-nvl72:default:32", "deepseek-v3:h100x32-ib:default:128")
WINDOW_ENV = "MOEHUB_NETWORK_WINDOW_US"


def window_rows_path(out) -> Path:
    return Path(out) if out else build_root() / "results" / "bench-window" / "window.json"


def save_window_row(path: Path, row: dict) -> None:
    """Add ``row`` to the window-error results at ``path`` (one row per point and system:
    a new measurement replaces the old), with this run's record."""
    save_row(path, row, lambda r: (r["point"], r["system"]), lambda r: (r["point"], r["system"]))


def _run_point(point: str, systems, window_env):
    """``run_experiment`` of the point's layer with ``$MOEHUB_NETWORK_WINDOW_US`` set to
    ``window_env`` (``None``: unset, the shipped windows) for the run, restored after;
    returns (result, CPU s of the whole run)."""
    from moehub.cosim.experiment import run_experiment
    model, system, workload, tokens = point.split(":")
    saved = os.environ.pop(WINDOW_ENV, None)
    if window_env is not None:
        os.environ[WINDOW_ENV] = window_env
    try:
        c = time.process_time()
        res = run_experiment(*load_configs(system, model, workload, int(tokens)),
                             systems=tuple(systems))
        return res, time.process_time() - c
    finally:
        os.environ.pop(WINDOW_ENV, None)
        if saved is not None:
            os.environ[WINDOW_ENV] = saved


def window_point(point: str, systems) -> list:
    """The rows of one point: each system's layer time exact (every drain an event) and
    as shipped (coalesced above ``EXACT_GPUS``), their difference, passes and the CPU
    seconds of each whole run."""
    from moehub.cosim import layer as LY
    load = round(os.getloadavg()[0], 2)
    exact, cpu_exact = _run_point(point, systems, "0")
    coal, cpu_coal = _run_point(point, systems, None)
    model, system, workload, tokens = point.split(":")
    rows = []
    for name in systems:
        e, c = exact.results[name], coal.results[name]
        ex, co = float(e.latency_us), float(c.latency_us)
        rows.append({
            "point": point, "model": model, "system_config": system, "workload": workload,
            "tokens": int(tokens), "gpus": int(coal.layer.G), "system": name,
            "systems_run": list(systems), "load": load,
            "exact_us": round(ex, 4), "coalesced_us": round(co, 4),
            "difference_pct": (co - ex) / ex * 100 if ex else 0.0,
            "passes_exact": e.extra.get("passes"), "passes_coalesced": c.extra.get("passes"),
            "converged_exact": e.extra.get("converged"),
            "converged_coalesced": c.extra.get("converged"),
            "exact_drains_from_pass": c.extra.get("exact_drains_from_pass"),
            "window_us": coal.layer.network_window_us(), "window_const_us": LY.WINDOW_US,
            "window_rel": LY.WINDOW_REL, "exact_gpus": LY.EXACT_GPUS,
            "cpu_exact_s": round(cpu_exact, 3), "cpu_coalesced_s": round(cpu_coal, 3)})
    return rows


def window_error(points, systems, out=None) -> None:
    """``--window-error``: per point and system, the coalesced engine against the exact one."""
    runinfo.git_describe()          # the code this run imported (remembered before any row)
    head = ["point", "system", "exact us", "coalesced us", "difference %", "passes exact",
            "passes coalesced", "window", "CPU s exact", "CPU s coalesced", "load"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head), flush=True)
    for point in points:
        for r in window_point(point, systems):
            win = (f"max({r['window_const_us']:g} us, {r['window_rel']:g} x t)"
                   if r["window_us"] else "exact")
            cells = [point, r["system"], f"{r['exact_us']:.4f}", f"{r['coalesced_us']:.4f}",
                     f"{r['difference_pct']:+.3f}", str(r["passes_exact"]),
                     str(r["passes_coalesced"]), win, f"{r['cpu_exact_s']:.2f}",
                     f"{r['cpu_coalesced_s']:.2f}", f"{r['load']:.1f}"]
            print("| " + " | ".join(cells) + " |", flush=True)
            save_window_row(window_rows_path(out), r)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--point", action="append",
                   help=f"MODEL:SYSTEM:WORKLOAD:TOKENS (repeatable; default {', '.join(POINTS)})")
    p.add_argument("--reference-rows", type=int, default=1000,
                   help="rows of GPU 0 replayed packet by packet by the reference")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (the best counts)")
    p.add_argument("--scaling", action="store_true",
                   help="the network's cost from 8 to 256 GPUs (see the module docstring)")
    p.add_argument("--gpus", default=",".join(map(str, SCALING_GPUS)),
                   help="--scaling: GPU counts (comma-separated)")
    p.add_argument("--tokens", default=",".join(map(str, SCALING_TOKENS)),
                   help="--scaling: tokens per GPU (comma-separated)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="--scaling, --window-error: systems to run on each layer (comma-separated)")
    p.add_argument("--window-error", action="store_true",
                   help="the coalesced network engine against the exact one, per point and "
                   f"system (default points: {', '.join(WINDOW_POINTS)}; see the module docstring)")
    p.add_argument("--row-timeout", type=int, default=0,
                   help="--scaling: stop a row after this many wall seconds (0: never)")
    p.add_argument("--out", default=None, help="--scaling, --window-error: the JSON file the "
                   "rows are added to (default <build>/results/bench-scaling/scaling.json, "
                   "<build>/results/bench-window/window.json)")
    p.add_argument("--engine", choices=("compiled", "reference"),
                   help="network engine (default: $MOEHUB_NETWORK_ENGINE, else compiled)")
    a = p.parse_args(argv)
    if a.engine:
        os.environ["MOEHUB_NETWORK_ENGINE"] = a.engine
    if a.scaling and a.window_error:
        p.error("--scaling and --window-error: one at a time")
    systems = a.systems.split(",")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        p.error(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
    if a.window_error:
        window_error(a.point or list(WINDOW_POINTS), systems, a.out)
        return 0
    if a.scaling:
        scaling([int(x) for x in a.gpus.split(",")], [int(x) for x in a.tokens.split(",")],
                systems, a.row_timeout, a.out)
        return 0
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
