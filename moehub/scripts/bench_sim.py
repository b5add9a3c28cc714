"""Benchmark: Icarus against Verilator on RTL-in-the-loop runs, one per hub config.

For each hub config the same arrival schedule goes through the Verilog player under
cocotb (clock in C, Python woken once) on each simulator, and a table gives the build
time (from a cold build cache), the cycles simulated and the simulated cycles per wall
second; the two simulators' outputs (every control write, credit, data write, stall and
the cycle count) must be identical. Schedules:

* ``tiny``              -- synthetic rows from every source (LaneFeeder), a row every few cycles;
* ``mixtral-8gpu``      -- the default RTL-in-the-loop layer: Mixtral-8x7B on 8x H100,
                           4096 tokens/GPU, GPU 0's hub (``make run``);
* ``deepseek-v3-8gpu``  -- DeepSeek-V3 on 8x H100, 256 tokens/GPU, GPU 0's hub.

Builds go to ``<build>/bench_sim/`` (its build cache is emptied first unless ``--warm``);
the Verilog of each config is generated before the clock starts (column ``rtl s``).
Each (config, simulator) is also a row of ``<build>/results/bench-sim/sim.json`` (or
``--out``; a new measurement replaces the older, others are kept), with the load before
it and the run record: ``moehub report --collect bench-sim`` makes the record the docs'
``sim-speed`` table is generated from. Icarus takes tens of minutes on the layer
schedules, so a run of some configs or one simulator adds only those rows.

    .venv/bin/python -m moehub.scripts.bench_sim [--configs tiny,mixtral-8gpu] [--sims verilator]
        [--tokens mixtral-8gpu=1024] [--warm] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

from moehub.paths import build_root

CONFIGS = ("tiny", "mixtral-8gpu", "deepseek-v3-8gpu")
#: (model, tokens per GPU) of the co-simulated layer whose GPU 0 hub is played
LAYERS = {"mixtral-8gpu": ("mixtral-8x7b", 4096), "deepseek-v3-8gpu": ("deepseek-v3", 256)}


def tiny_schedule(rows: int = 700, spacing: int = 6, seed: int = 1):
    """(cfg, packets, csr writes): credit-respecting traffic into the tiny hub, the feeder
    stepped every ``spacing`` cycles so the run is long enough to time."""
    from moehub.spec.config import load_hub_config
    from moehub.verif.traffic import LaneFeeder, random_rows
    cfg = load_hub_config("tiny")
    rng = random.Random(seed)
    f = LaneFeeder(cfg, random_rows(cfg, rng, rows), rng, early_eos=True)
    sched, step = [], 0
    while not f.done():
        for lane, p in enumerate(f.offer()):
            if p is not None:
                sched.append((step * spacing, lane, p))
                f.accepted(lane)
        step += 1
        for s in f.sources:
            used = {a.tag for a in s.active}
            s.free_tags = [t for t in range(cfg.tags_per_source) if t not in used]
    return cfg, sched, None


def layer_schedule(model: str, tokens: int):
    """(cfg, packets, csr writes) of GPU 0's hub in a co-simulated layer on 8x H100."""
    from moehub.cosim.experiment import load_configs
    from moehub.cosim.layer import Layer
    from moehub.cosim.systems import hub_schedule
    from moehub.cosim.workload import make_routing
    from moehub.spec.program import csr_program
    s, m, w = load_configs("h100x8", model, "default", tokens)
    L = Layer(s, m, w, make_routing(m, w, s.gpus), None)
    arr = hub_schedule(L, t0=0.0)[0][0]
    return L.hub, list(arr.packets()), csr_program(L.hub, caps=arr.region_cap)


def schedule(config: str, tokens: dict):
    if config == "tiny":
        return tiny_schedule()
    model, n = LAYERS[config]
    return layer_schedule(model, tokens.get(config, n))


def describe(config: str, tokens: dict) -> str:
    """The schedule of ``config`` in words (the table's column)."""
    if config == "tiny":
        return "700 synthetic rows"
    model, n = LAYERS[config]
    return f"{model}, {tokens.get(config, n)} tokens/GPU on h100x8, GPU 0's hub"


def rows_path(out=None) -> Path:
    return Path(out) if out else build_root() / "results" / "bench-sim" / "sim.json"


def save_rows(path: Path, new: list) -> None:
    """Add ``new`` (dicts) to the rows at ``path`` with this run's record: a row of the same
    config and simulator replaces the older one, the others are kept (a run of one
    simulator, or of some configs, completes the file)."""
    from moehub import runinfo
    from moehub.spec.config import load_hub_config
    from moehub.synth.digest import hardware_of
    path = Path(path)
    doc = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    key = lambda r: (r["config"], r["simulator"])
    # (the hardware the cycles are of: the hub and the sources' hash, which the record's
    # collection completes with the hub's RTLIL digest)
    new = [{**r, "git": runinfo.git_describe(), **hardware_of(load_hub_config(r["config"]))} for r in new]
    rows = [r for r in doc.get("rows", []) if key(r) not in {key(n) for n in new}] + new
    rows.sort(key=lambda r: (CONFIGS.index(r["config"]) if r["config"] in CONFIGS else len(CONFIGS),
                             r["config"], r["simulator"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"record": runinfo.record(), "rows": rows}, indent=1) + "\n")
    os.replace(tmp, path)


def observed(res) -> tuple:
    """What must be identical on both simulators."""
    return (res.cycles, res.ctl, res.credits, res.writes, res.write_hash, res.stalls, res.csr)


def bench_config(config: str, sims: list, tokens: dict, warm: bool = False) -> list:
    """One row per simulator (a dict: what the rows file keeps); ``outputs``: identical or
    DIFFER against the first simulator's run, None with one simulator (nothing compared)."""
    from moehub.rtl.gen import convert
    from moehub.verif.player import run_player
    cfg, packets, csr = schedule(config, tokens)
    t = time.perf_counter()
    convert(cfg)
    rtl_s = time.perf_counter() - t
    rows, first = [], None
    for sim in sims:
        load0 = round(os.getloadavg()[0], 2)
        res = run_player(cfg, packets, csr_writes=csr, tag=f"bench-{sim}", sim=sim,
                         label=f"{config} [{sim}]")
        first = first or observed(res)
        rows.append({"config": config, "schedule": describe(config, tokens), "simulator": sim,
                     "rtl_s": round(rtl_s, 2), "build_s": round(res.build_s, 2), "warm": warm,
                     "packets": len(packets), "cycles": res.cycles, "sim_s": round(res.wall_s, 2),
                     "outputs": (None if len(sims) == 1 else
                                 "identical" if observed(res) == first else "DIFFER"),
                     "load": load0})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--sims", default="icarus,verilator")
    ap.add_argument("--tokens", action="append", default=[], metavar="CONFIG=N",
                    help="tokens per GPU of a layer config (default mixtral-8gpu=4096, "
                         "deepseek-v3-8gpu=256)")
    ap.add_argument("--warm", action="store_true", help="keep earlier builds (build s ~ 0)")
    ap.add_argument("--out", default=None, help="the rows file (default "
                    "<build>/results/bench-sim/sim.json)")
    args = ap.parse_args(argv)
    from moehub import progress, runinfo
    runinfo.begin([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)])
    runinfo.git_describe()          # (the code this run imported, before any row is measured)
    progress.configure(progress.NORMAL)
    tokens = {k: int(v) for k, v in (t.split("=") for t in args.tokens)}
    out = rows_path(args.out)                   # (before MOEHUB_BUILD moves the build folder)
    os.environ["MOEHUB_BUILD"] = str(build_root() / "bench_sim")
    if not args.warm:
        shutil.rmtree(build_root() / "sim" / "builds", ignore_errors=True)
    table = []
    for c in args.configs.split(","):
        rows = bench_config(c, args.sims.split(","), tokens, args.warm)
        save_rows(out, rows)                    # (each config as it ends: Icarus runs are long)
        table += rows
    print(f"{'config':<18} {'simulator':<10} {'rtl s':>6} {'build s':>8} {'packets':>10} "
          f"{'cycles':>10} {'sim s':>8} {'cycles/s':>10}  outputs")
    for r in table:
        print(f"{r['config']:<18} {r['simulator']:<10} {r['rtl_s']:>6.1f} {r['build_s']:>8.1f} "
              f"{r['packets']:>10,} {r['cycles']:>10,} {r['sim_s']:>8.1f} "
              f"{r['cycles'] / max(r['sim_s'], 1e-9):>10,.0f}  {r['outputs'] or '(one simulator)'}")
    print(f"rows: {out}")
    return 0 if all(r["outputs"] != "DIFFER" for r in table) else 1


if __name__ == "__main__":
    raise SystemExit(main())
