"""Simulator speed of the co-simulation (not a test): rows/s and packets/s of the hub stage.

    .venv/bin/python scripts/bench_cosim.py [--model mixtral-8x7b] [--tokens 1024,4096]

For each point it times the hub's dispatch schedule (network model), the hub stage in
model mode (row-level fast path over HubModel), and -- on a small slice -- the packet by
packet reference path, and prints simulated rows, packets and hub cycles per wall second.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from moehub.cosim.experiment import load_configs
from moehub.cosim.hub_stage import HubArrivals, run_hub_fast, run_hub_reference
from moehub.cosim.layer import Layer
from moehub.cosim.systems import hub_schedule
from moehub.cosim.workload import make_routing


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mixtral-8x7b")
    p.add_argument("--system", default="h100x8")
    p.add_argument("--tokens", default="1024,4096")
    p.add_argument("--reference-rows", type=int, default=300,
                   help="rows of one destination replayed packet by packet")
    a = p.parse_args(argv)
    print(f"{'tokens/GPU':>10} {'rows':>9} {'packets':>11} {'schedule s':>10} {'hub s':>7} "
          f"{'rows/s':>9} {'packets/s':>11} {'cycles/s':>11} {'ref packets/s':>13}")
    for tok in (int(t) for t in a.tokens.split(",")):
        s, m, w = load_configs(a.system, a.model, "default", tok)
        L = Layer(s, m, w, make_routing(m, w, s.gpus))
        t0 = time.perf_counter()
        arrivals, *_ = hub_schedule(L, 0.0)
        t_sched = time.perf_counter() - t0
        t0 = time.perf_counter()
        packets = cycles = 0
        for arr in arrivals:
            r = run_hub_fast(L.hub, arr)
            packets += r.packets
            cycles = max(cycles, r.done_cycle)
        t_hub = time.perf_counter() - t0
        small = _slice(arrivals[0], a.reference_rows)
        t0 = time.perf_counter()
        ref = run_hub_reference(L.hub, small)
        t_ref = time.perf_counter() - t0
        print(f"{tok:>10} {L.N:>9,} {packets:>11,} {t_sched:>10.2f} {t_hub:>7.2f} "
              f"{L.N / t_hub:>9,.0f} {packets / t_hub:>11,.0f} {cycles * L.G / t_hub:>11,.0f} "
              f"{ref.packets / t_ref:>13,.0f}")
    print("packets/s counts every packet the hub accepted (middle chunks in bulk in the fast "
          "path); cycles/s = simulated hub cycles x GPUs per wall second")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
