"""Benchmark: co-simulation speed of one GPU's hub in RTL mode and in model mode.

The same arrival schedule (one destination GPU of a co-simulated layer) is run through

* ``verilog``  -- the Verilog player as a plain testbench with its own clock: the
                  ceiling of the simulator (``--sim icarus|verilator``) on this design;
* ``rtl``      -- the same player under cocotb, clock in C, Python woken once (RTL mode);
* ``model``    -- the reference model's row-level fast path (model mode);
* ``reference``-- the reference model packet by packet,

and a table of simulated hub cycles per wall second and rows per second is printed.
The RTL runs are also checked against the model (outputs identical, tile-ready times).

    .venv/bin/python scripts/bench_rtl.py [--model mixtral-8x7b] [--tokens 1024] [--gpu 0] [--sim icarus]
"""
from __future__ import annotations

import argparse
import time

from moehub.cosim.experiment import load_configs
from moehub.cosim.hub_rtl import compare, run_hub_rtl
from moehub.cosim.hub_stage import run_hub_fast, run_hub_reference
from moehub.cosim.layer import Layer
from moehub.cosim.systems import hub_schedule
from moehub.cosim.workload import make_routing
from moehub.verif.sim import NAMES, SIMULATORS, choose


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="h100x8")
    ap.add_argument("--model", default="mixtral-8x7b")
    ap.add_argument("--workload", default="default")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per GPU (default 1024)")
    ap.add_argument("--gpu", type=int, default=0, help="destination GPU whose hub is timed")
    ap.add_argument("--skip-reference", action="store_true", help="skip the slow packet-by-packet model")
    ap.add_argument("--sim", choices=SIMULATORS, default=None,
                    help="simulator of the RTL runs (default $MOEHUB_SIM, else Verilator when "
                         "installed, else Icarus)")
    args = ap.parse_args(argv)
    sim = choose(args.sim, prefer="verilator")
    name = NAMES[sim]

    s, m, w = load_configs(args.system, args.model, args.workload, args.tokens)
    L = Layer(s, m, w, make_routing(m, w, s.gpus), None)
    arrivals, *_ = hub_schedule(L, t0=0.0)
    arr = arrivals[args.gpu]
    cfg = L.hub
    rows = len(arr)
    print(f"{m.name} on {s.name}, {w.tokens_per_gpu} tokens/GPU: GPU {args.gpu}'s hub "
          f"({cfg.name}) receives {rows:,} rows = {rows * cfg.chunks_per_row:,} packets")

    t = time.perf_counter()
    model = run_hub_fast(cfg, arr)
    t_model = time.perf_counter() - t
    cycles = model.done_cycle - int(arr.first_cycle.min()) if rows else 0
    table = [("model (reference model, row-level fast path)", t_model, cycles, "")]
    if not args.skip_reference:
        t = time.perf_counter()
        run_hub_reference(cfg, arr)
        table.append(("reference (model, packet by packet)", time.perf_counter() - t, cycles, ""))
    for mode, label in (("verilog", f"plain Verilog testbench ({name} ceiling)"),
                        ("cocotb", f"RTL mode: cocotb + {name}, clock in C")):
        t = time.perf_counter()
        r = run_hub_rtl(cfg, arr, mode=mode, tag=f"bench-{mode}", sim=sim)
        total = time.perf_counter() - t
        c = compare(cfg, arr, model, r)
        note = (f"outputs {'identical' if c.functional_equal else 'DIFFER'}, tile-ready max diff "
                f"{c.tile_ready_max_diff}; sim {r.player.wall_s:.1f} s + build/IO "
                f"{total - r.player.wall_s:.1f} s")
        table.append((label, r.player.wall_s, r.player.cycles, note))
    print(f"{'mode':<48} {'wall s':>8} {'hub cycles':>11} {'cycles/s':>10} {'rows/s':>9}  notes")
    for label, wall, cyc, note in table:
        print(f"{label:<48} {wall:>8.2f} {cyc:>11,} {cyc / wall:>10,.0f} {rows / wall:>9,.0f}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
