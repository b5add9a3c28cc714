"""The relay-hub ablation: the protocol-v2 hub, + relay, + relay + reduce, against DeepEP
normal mode, HybridEP and X-MoE's RBD (the software systems that send one row per (token,
node) across the NIC and copy it on inside the node over NVLink), and the
communication-free bound (no system can beat it: its ratio to DeepEP is the most any
transport could gain), on multi-node layers, decode and prefill sizes.

    .venv/bin/python -m moehub.cosim.studies.relay                       # 2 and 4 nodes, 128 and 4096 tokens
    .venv/bin/python -m moehub.cosim.studies.relay --system h100x16-ib --tokens 128 --out DIR

Every row runs in the full co-simulation (:func:`~moehub.cosim.systems.run_system`: the
hub's reference model per GPU, the layer's one network, passes to a fixed point), on the
same routing. Bytes are read from the networks of the converged pass (each data phase's
own flows: what left every source, packet headers included), split by the link a pair
uses: NIC (another node) or NVLink (same node; a GPU's own rows use neither), for the
dispatch (first hop and forwards) and the combine (straight to owners, to relays, and
the relays' reduced rows).

The rows go to ``relay.csv`` in ``--out`` (default ``<build>/results/study-relay/``),
written after every point, with ``run.json`` next to it (:func:`moehub.runinfo.record`:
command, git, start, wall and CPU time, plus the 1-minute load average before the run and
before each point). A point (system config, tokens/GPU) run again replaces its rows; the
other points' rows are kept, so runs of a few points add up; ``run.json`` then lists the
earlier runs whose points are still in the CSV under ``earlier``. ``moehub report
--collect study-relay`` makes the record the docs' ``relay-ablation`` table is generated
from.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ... import runinfo
from ...paths import build_root
from ..experiment import load_configs
from ..layer import Layer
from ..systems import common as C
from ..systems import run_system
from ..systems.hub import FEATURES
from ..workload import make_routing

V2 = frozenset(FEATURES)
ROWS = (("hub v2", "hub", V2), ("hub v2 + relay", "hub", V2 | {"relay"}),
        ("hub v2 + relay + reduce", "hub", V2 | {"relay", "reduce"}),
        ("DeepEP normal", "deepep", frozenset()), ("HybridEP", "hybridep", frozenset()),
        ("X-MoE RBD", "xmoe_rbd", frozenset()),
        # the bound: the same layer with every transfer free (its GEMMs, gate and hub work)
        ("communication-free", "ideal", frozenset()))
#: the rows the speedup columns divide by (``vs_hub_v2``, ``vs_deepep``)
HUB_V2_ROW, DEEPEP_ROW = "hub v2", "DeepEP normal"
DISPATCH_PHASES = ("dispatch", "forward")
COMBINE_PHASES = ("combine", "combine_partial", "combine_relay")
#: where the layer time goes on the GPU that ends last (:func:`..plots.critical_breakdown`):
#: column slug per phase kind, in the bars' order
CRITICAL = {"expert GEMM": "gemm", "gate / reduce": "gate_reduce", "layout / permute": "layout",
            "hub": "hub", "dispatch": "dispatch", "combine": "combine", "sync / wait": "sync",
            "other": "other", "idle": "idle"}
#: the model the study runs unless told (rows without a ``model`` column are of it)
DEFAULT_MODEL = "deepseek-v3"
COLUMNS = ["system_config", "nodes", "gpus", "tokens_per_gpu", "model", "row", "layer_us",
           "vs_hub_v2", "vs_deepep", "dispatch_nic_GB", "dispatch_nvlink_GB", "combine_nic_GB",
           "combine_nvlink_GB", "passes", "converged", "residual_us", "traffic_residual_us",
           "wall_s", "notes", "critical_gpu", *(f"critical_{k}_us" for k in CRITICAL.values())]
CSV_NAME = "relay.csv"


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


def critical(res) -> dict:
    """The layer time on the GPU that ends last, split by what it was doing (the first of
    the phases running at each instant, in :data:`..plots.EXPOSED_PRIORITY` order; idle:
    waiting for other GPUs' rows or outputs): ``critical_gpu`` and a column per kind."""
    from ..plots import critical_breakdown
    gpu, parts = critical_breakdown(res)
    return {"critical_gpu": gpu, **{f"critical_{slug}_us": parts.get(kind, 0.0)
                                    for kind, slug in CRITICAL.items()}}


def point(system: str, model: str, tokens: int, seed=None, log=print, rows=None) -> list:
    """The rows of one (system, tokens) point: every row of :data:`ROWS`, or those named
    in ``rows`` (a speedup column is empty without the row it divides by)."""
    s, m, w = load_configs(system, model, "default", tokens, seed=seed)
    L = Layer(s, m, w, make_routing(m, w, s.gpus))
    out = []
    for name, sysname, f in ROWS:
        if rows is not None and name not in rows:
            continue
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
                notes += (f"; {r['parts_per_sum']:.2f} parts/sum, reduce HBM "
                          f"{r['reduce_hbm_GB']:.3f} GB (accumulator {r['rmw_GB']:.3f}, staging "
                          f"{r['stage_GB']:.3f}; {r['reduce_hbm_us_max']:.0f} us max per relay)")
        row = {"system_config": s.name, "nodes": L.nodes, "gpus": L.G, "tokens_per_gpu": L.T,
               "model": model, "row": name, "layer_us": res.latency_us, "dispatch_nic_GB": dn / 1e9,
               "dispatch_nvlink_GB": dv / 1e9, "combine_nic_GB": cn / 1e9,
               "combine_nvlink_GB": cv / 1e9, "passes": ex.get("passes"),
               "converged": ex.get("converged"), "residual_us": ex.get("residual_us"),
               "traffic_residual_us": ex.get("traffic_residual_us"), "wall_s": wall,
               "notes": notes, **critical(res)}
        log(f"  {s.name} t{L.T} {name}: {res.latency_us:.1f} us, {ex.get('passes')} passes, "
            f"residual {ex.get('residual_us'):.3f} us (traffic {ex.get('traffic_residual_us'):.3f}), "
            f"{wall:.0f} s")
        out.append(row)
    set_speedups(out)
    return out


def set_speedups(rows: list) -> None:
    """Each row's ``vs_hub_v2`` / ``vs_deepep``: the layer time of its point's hub v2 /
    DeepEP normal row over its own (empty where the point has no such row)."""
    by_point = {}
    for r in rows:
        by_point.setdefault(_key(r), {})[r["row"]] = float(r["layer_us"])
    for r in rows:
        mine = by_point[_key(r)]
        v2, dp = mine.get(HUB_V2_ROW), mine.get(DEEPEP_ROW)
        r["vs_hub_v2"] = None if v2 is None else v2 / float(r["layer_us"])
        r["vs_deepep"] = None if dp is None else dp / float(r["layer_us"])


def table(rows: list) -> str:
    lines = ["| system | tokens/GPU | row | layer µs | vs v2 hub | vs DeepEP | dispatch NIC GB "
             "| dispatch NVLink GB | combine NIC GB | combine NVLink GB | passes (residual µs) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratio = lambda x: "—" if x is None else f"{x:.3f}"   # (its row not run: --rows)
    for r in rows:
        lines.append(f"| {r['system_config']} ({r['nodes']}x{r['gpus'] // r['nodes']}) | "
                     f"{r['tokens_per_gpu']} | {r['row']} | {r['layer_us']:.0f} | "
                     f"{ratio(r['vs_hub_v2'])} | {ratio(r['vs_deepep'])} | {r['dispatch_nic_GB']:.4f} | "
                     f"{r['dispatch_nvlink_GB']:.4f} | {r['combine_nic_GB']:.4f} | "
                     f"{r['combine_nvlink_GB']:.4f} | {r['passes']} ({r['residual_us']:.2f}) |")
    return "\n".join(lines)


def output_dir(out=None) -> Path:
    """The folder the study writes to: ``out``, else ``<build>/results/study-relay``."""
    return Path(out) if out else build_root() / "results" / "study-relay"


#: the CSV's text columns (the others are numbers; ``converged`` a bool)
TEXT_COLUMNS = ("system_config", "model", "row", "notes")
#: the points ``main`` runs when none are named: (system configs, tokens per GPU)
DEFAULT_SYSTEMS, DEFAULT_TOKENS = ("h100x16-ib", "h100x32-ib"), (128, 4096)


def read_rows(path) -> list:
    """The rows of a ``relay.csv`` with their numbers as numbers (empty: NaN), ``converged``
    as a bool (None when empty)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in COLUMNS:
            v = r.get(k, "")
            if k in TEXT_COLUMNS:
                r[k] = v or ""
            elif k == "converged":
                r[k] = {"True": True, "False": False}.get(v)
            elif k in ("nodes", "gpus", "tokens_per_gpu", "passes", "critical_gpu"):
                r[k] = int(v) if v not in ("", "None") else None
            else:
                r[k] = float(v) if v not in ("", "nan", "None") else float("nan")
    return rows


def _key(r: dict) -> tuple:
    return (r["system_config"], int(r["tokens_per_gpu"]), r.get("model") or DEFAULT_MODEL)


class Results:
    """``relay.csv`` and ``run.json`` of one folder: the rows of earlier runs that this run
    does not redo are kept, with those runs' records. A run redoes its points' (system,
    tokens/GPU[, model]) rows -- every row, or with ``rows`` only those named -- so a point
    can be run row by row; the speedup columns are recomputed over each point's rows."""

    def __init__(self, folder: Path, points: list, load_1m: float, rows=None):
        self.folder, self.load_1m = Path(folder), load_1m
        redo = {(p[0], int(p[1]), p[2] if len(p) > 2 else DEFAULT_MODEL) for p in points}
        redone = lambda r: _key(r) in redo and (rows is None or r["row"] in rows)
        self.kept, self.earlier, self.points, self.rows = [], [], [], []
        csv_path, run_path = self.folder / CSV_NAME, self.folder / "run.json"
        if csv_path.is_file():
            with open(csv_path, newline="") as f:
                self.kept = [r for r in csv.DictReader(f) if not redone(r)]
        if self.kept and run_path.is_file():
            old = json.loads(run_path.read_text())
            left = {_key(r) for r in self.kept}
            for run in old.pop("earlier", []) + [old]:
                pts = [p for p in run.get("points", []) if _key(p) in left]
                if pts:
                    self.earlier.append({**run, "points": pts})

    def add(self, rows: list, point_load_1m: float, **about) -> None:
        self.rows += rows
        self.points.append({"system_config": rows[0]["system_config"],
                            "tokens_per_gpu": rows[0]["tokens_per_gpu"], **about,
                            "load_avg_1m": point_load_1m})
        self.write()

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        order = lambda r: (int(r["gpus"]), int(r["tokens_per_gpu"]))
        rows = sorted(self.kept + self.rows, key=order)   # stable: a point's rows keep their order
        set_speedups(rows)
        tmp = self.folder / (CSV_NAME + ".tmp")
        with open(tmp, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=COLUMNS)
            wr.writeheader()
            wr.writerows(rows)
        os.replace(tmp, self.folder / CSV_NAME)
        run = runinfo.record(load_avg_1m=self.load_1m, points=self.points,
                             earlier=self.earlier)
        tmp = self.folder / "run.json.tmp"
        tmp.write_text(json.dumps(run, indent=1) + "\n")
        os.replace(tmp, self.folder / "run.json")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    runinfo.begin(["python -m moehub.cosim.studies.relay", *argv])
    runinfo.git_describe()          # the commit at the start (cached), not after later edits
    load_1m = round(os.getloadavg()[0], 2)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", action="append", help="system configs (default "
                   f"{', '.join(DEFAULT_SYSTEMS)})")
    p.add_argument("--tokens", action="append", type=int, help="tokens per GPU (default "
                   f"{', '.join(map(str, DEFAULT_TOKENS))})")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", help=f"the folder of {CSV_NAME} and run.json (default "
                   "<build>/results/study-relay)")
    p.add_argument("--csv", help="also write this run's rows here")
    p.add_argument("--rows", help="only these rows, comma-separated (default every row: "
                   f"{', '.join(n for n, _, _ in ROWS)})")
    a = p.parse_args(argv)
    names = [n for n, _, _ in ROWS]
    picked = None if a.rows is None else [x.strip() for x in a.rows.split(",")]
    bad = [x for x in picked or () if x not in names]
    if bad or picked == []:
        p.error(f"--rows {a.rows!r}: {bad[0] if bad else '(none)'!r} is no row "
                f"(rows: {', '.join(names)})")
    systems = a.system or list(DEFAULT_SYSTEMS)
    tokens = a.tokens or list(DEFAULT_TOKENS)
    if any(t < 1 for t in tokens):
        p.error(f"--tokens {tokens}: must be >= 1")
    res = Results(output_dir(a.out), [(s, t, a.model) for s in systems for t in tokens], load_1m,
                  rows=picked)
    for s in systems:
        for t in tokens:
            before = round(os.getloadavg()[0], 2)
            res.add(point(s, a.model, t, a.seed, log=lambda x: print(x, file=sys.stderr, flush=True),
                          rows=picked),
                    before, model=a.model, seed=a.seed)
            if a.csv:
                with open(a.csv, "w", newline="") as f:
                    wr = csv.DictWriter(f, fieldnames=COLUMNS)
                    wr.writeheader()
                    wr.writerows(res.rows)
    print(table(res.rows))
    print(f"  {res.folder / CSV_NAME}\n  {res.folder / 'run.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
