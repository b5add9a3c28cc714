"""The relay-hub ablation: the protocol-v2 hub, + relay, + relay + reduce, against DeepEP
normal mode, on multi-node layers, decode and prefill sizes.

    .venv/bin/python -m moehub.cosim.studies.relay                       # 2 and 4 nodes, 128 and 4096 tokens
    .venv/bin/python -m moehub.cosim.studies.relay --system h100x16-ib --tokens 128 --csv out.csv

Every row runs in the full co-simulation (:func:`~moehub.cosim.systems.run_system`: the
hub's reference model per GPU, the layer's one network, passes to a fixed point), on the
same routing. Bytes are read from the networks of the converged pass (each data phase's
own flows: what left every source, packet headers included), split by the link a pair
uses: NIC (another node) or NVLink (same node; a GPU's own rows use neither), for the
dispatch (first hop and forwards) and the combine (straight to owners, to relays, and
the relays' reduced rows).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time

import numpy as np

from ..experiment import load_configs
from ..layer import Layer
from ..systems import common as C
from ..systems import run_system
from ..systems.hub import FEATURES
from ..workload import make_routing

V2 = frozenset(FEATURES)
ROWS = (("hub v2", "hub", V2), ("hub v2 + relay", "hub", V2 | {"relay"}),
        ("hub v2 + relay + reduce", "hub", V2 | {"relay", "reduce"}),
        ("DeepEP normal", "deepep", frozenset()))
DISPATCH_PHASES = ("dispatch", "forward")
COMBINE_PHASES = ("combine", "combine_relay")
COLUMNS = ["system_config", "nodes", "gpus", "tokens_per_gpu", "row", "layer_us",
           "vs_hub_v2", "vs_deepep", "dispatch_nic_GB", "dispatch_nvlink_GB", "combine_nic_GB",
           "combine_nvlink_GB", "passes", "converged", "residual_us", "traffic_residual_us",
           "wall_s", "notes"]


def link_bytes(L: Layer, res, phases) -> tuple:
    """(NIC, NVLink) bytes the ``phases``' own flows carried in the result's last pass."""
    G = L.G
    node = np.arange(G) // min(L.sys.gpus_per_node, G)
    inter = node[:, None] != node[None, :]
    intra = ~inter & ~np.eye(G, dtype=bool)
    nic = nvl = 0.0
    own = np.arange(G * G).reshape(G, G)          # a layer network's own flows come first
    for ph in phases:
        if ph not in res.nets:
            continue
        _, curves = res.nets[ph]
        sent = C.pair_curves(curves, own)[1]
        nic += float(sent[inter].sum())
        nvl += float(sent[intra].sum())
    return nic, nvl


def point(system: str, model: str, tokens: int, seed=None, log=print) -> list:
    """Every row of one (system, tokens) point."""
    s, m, w = load_configs(system, model, "default", tokens, seed=seed)
    L = Layer(s, m, w, make_routing(m, w, s.gpus))
    out = []
    for name, sysname, f in ROWS:
        t = time.time()
        res = run_system(sysname, L, hub_features=f) if sysname == "hub" else run_system(sysname, L)
        wall = time.time() - t
        dn, dv = link_bytes(L, res, DISPATCH_PHASES)
        cn, cv = link_bytes(L, res, COMBINE_PHASES)
        ex = res.extra
        notes = ""
        if "relay" in ex:
            r = ex["relay"]
            notes = (f"{r['nic_rows']} relay rows, {r['forward_rows']} forwards, "
                     f"{r['relay_local_rows']} relay-local")
            if "parts_per_sum" in r:
                notes += (f"; {r['parts_per_sum']:.2f} parts/sum, RMW {r['rmw_GB']:.3f} GB "
                          f"({r['rmw_us_max']:.0f} us max per relay)")
        row = {"system_config": s.name, "nodes": L.nodes, "gpus": L.G, "tokens_per_gpu": L.T,
               "row": name, "layer_us": res.latency_us, "dispatch_nic_GB": dn / 1e9,
               "dispatch_nvlink_GB": dv / 1e9, "combine_nic_GB": cn / 1e9,
               "combine_nvlink_GB": cv / 1e9, "passes": ex.get("passes"),
               "converged": ex.get("converged"), "residual_us": ex.get("residual_us"),
               "traffic_residual_us": ex.get("traffic_residual_us"), "wall_s": wall,
               "notes": notes}
        log(f"  {s.name} t{L.T} {name}: {res.latency_us:.1f} us, {ex.get('passes')} passes, "
            f"residual {ex.get('residual_us'):.3f} us (traffic {ex.get('traffic_residual_us'):.3f}), "
            f"{wall:.0f} s")
        out.append(row)
    v2 = out[0]["layer_us"]
    dp = out[-1]["layer_us"]
    for r in out:
        r["vs_hub_v2"], r["vs_deepep"] = v2 / r["layer_us"], dp / r["layer_us"]
    return out


def table(rows: list) -> str:
    lines = ["| system | tokens/GPU | row | layer µs | vs v2 hub | vs DeepEP | dispatch NIC GB "
             "| dispatch NVLink GB | combine NIC GB | combine NVLink GB | passes (residual µs) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['system_config']} ({r['nodes']}x{r['gpus'] // r['nodes']}) | "
                     f"{r['tokens_per_gpu']} | {r['row']} | {r['layer_us']:.0f} | "
                     f"{r['vs_hub_v2']:.3f} | {r['vs_deepep']:.3f} | {r['dispatch_nic_GB']:.4f} | "
                     f"{r['dispatch_nvlink_GB']:.4f} | {r['combine_nic_GB']:.4f} | "
                     f"{r['combine_nvlink_GB']:.4f} | {r['passes']} ({r['residual_us']:.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", action="append", help="system configs (default h100x16-ib, "
                   "h100x32-ib)")
    p.add_argument("--tokens", action="append", type=int, help="tokens per GPU (default 128, 4096)")
    p.add_argument("--model", default="deepseek-v3")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--csv", help="write the rows here")
    a = p.parse_args(argv)
    systems = a.system or ["h100x16-ib", "h100x32-ib"]
    tokens = a.tokens or [128, 4096]
    if any(t < 1 for t in tokens):
        p.error(f"--tokens {tokens}: must be >= 1")
    rows = []
    for s in systems:
        for t in tokens:
            rows += point(s, a.model, t, a.seed, log=lambda x: print(x, file=sys.stderr, flush=True))
            if a.csv:
                with open(a.csv, "w", newline="") as f:
                    wr = csv.DictWriter(f, fieldnames=COLUMNS)
                    wr.writeheader()
                    wr.writerows(rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
