"""Measurements taken on a real GPU, set beside the co-simulation's component models.

``cosim/data/gpu_measured/<gpu>-<date>-run<N>/`` holds what ``scripts/gpu/measure.sh``
wrote on a GPU machine (its README says how): ``launch_sync.json`` (launch, CUDA-graph
and host-sync latencies from a plain CUDA program), ``gemm_sweep.json`` (the two GEMMs of
every configured expert shape at M = 16 ... 8192 rows, dense and grouped, BF16 and FP8,
through PyTorch's kernels) and ``nvidia_smi.csv``. This module reads those records and
evaluates the model (:class:`.components.Components` with a system's constants) on the
same inputs, so the gap between model and silicon is a table, not a guess.

The model is *not* fitted to these records here: the GEMM model is calibrated on
DeepGEMM/cuBLAS figures (CALIBRATION.md sec 4), which production expert-parallel stacks
run, while the sweep times PyTorch's own kernels. Where the two disagree the table says
by how much and in which regime; :func:`summary` groups the ratios by kernel kind and
by decode-like (M <= 128) against prefill-like rows.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from .config import load_system_config
from .components import Components

DATA = Path(__file__).parent / "data" / "gpu_measured"
SMALL_M = 128       #: rows per expert at or below which a GEMM is decode-like (weight bound)


def runs(gpu: str = "h200") -> list[Path]:
    """Folders of the recorded runs of one GPU kind, oldest first."""
    return sorted(p for p in DATA.glob(f"{gpu}-*-run*") if p.is_dir())


def load(run: Path) -> dict:
    """One run's records: ``launch`` (launch_sync.json) and ``gemm`` (gemm_sweep.json)."""
    with open(run / "launch_sync.json") as f:
        launch = json.load(f)
    with open(run / "gemm_sweep.json") as f:
        gemm = json.load(f)
    return {"launch": launch, "gemm": gemm, "name": run.name}


def model_gemm_us(c: Components, row: dict) -> float:
    """The model's time for one measured GEMM row (no launch: the sweep times the GPU's
    back-to-back work). FP8 rows move 1-byte operands; outputs are BF16."""
    fp8 = "fp8" in row["kind"]
    dtype, b = ("fp8", 1) if fp8 else ("bf16", 2)
    if row["groups"] == 1:
        return c.gemm_us(row["m"], row["n"], row["k"], dtype, a_bytes=b, b_bytes=b, c_bytes=2)
    return c.grouped_single_us([row["m"]] * row["groups"], row["n"], row["k"], "contiguous",
                               dtype, weight_bytes=b, act_bytes=b, out_bytes=2)


def gemm_comparison(rec: dict, system: str = "h200x8") -> list[dict]:
    """Every GEMM row of a run with the model's time and the ratio model / measured
    (< 1: the model is faster than the silicon, i.e. optimistic)."""
    c = Components(load_system_config(system))
    out = []
    for row in rec["gemm"]["rows"]:
        model = model_gemm_us(c, row)
        out.append({**row, "model_us": round(model, 3), "ratio": round(model / row["us"], 3)})
    return out


def summary(rows: list[dict]) -> list[dict]:
    """Median, min and max of model / measured per kernel kind and regime."""
    groups = defaultdict(list)
    for r in rows:
        regime = "decode (M <= %d)" % SMALL_M if r["m"] <= SMALL_M else "prefill (M > %d)" % SMALL_M
        groups[(r["kind"], regime)].append(r["ratio"])
    return [{"kind": k, "regime": g, "n": len(v), "median": round(statistics.median(v), 2),
             "min": round(min(v), 2), "max": round(max(v), 2)}
            for (k, g), v in sorted(groups.items())]


#: the model constant each launch/sync reading stands for, and how the reading maps to it
LAUNCH_MAP = (
    ("kernel_launch_us", "host_launch_us", "host cost of one eager launch (batch of 100)"),
    ("graph_launch_us", "gpu_graph_per_kernel_us", "GPU time per kernel inside a CUDA graph"),
    ("d2h_sync_us", "d2h4_pinned_sync_us", "4-byte D2H copy + stream synchronize"),
)


def launch_comparison(recs: list[dict], system: str = "h200x8") -> list[dict]:
    """The system's launch/sync constants beside every run's reading of the same thing."""
    sw = load_system_config(system).software
    out = []
    for const, key, what in LAUNCH_MAP:
        readings = [r["launch"][key] for r in recs]
        model = getattr(sw, const)
        out.append({"constant": const, "what": what, "model": model, "measured": readings,
                    "ratio": round(model / statistics.median(readings), 2)})
    return out


def markdown(system: str = "h200x8", gpu: str = "h200") -> str:
    """The comparison tables (launch/sync, GEMM summary) of every recorded run."""
    recs = [load(p) for p in runs(gpu)]
    if not recs:
        raise FileNotFoundError(f"no recorded runs for {gpu!r} under {DATA}")
    lines = [f"Model constants of `{system}` against {len(recs)} recorded runs on "
             f"{recs[0]['launch']['device']} ({', '.join(r['name'] for r in recs)}).", "",
             "| constant | what the reading is | model (us) | measured (us) | model / measured |",
             "|---|---|---|---|---|"]
    for r in launch_comparison(recs, system):
        meas = " / ".join(f"{m:.2f}" for m in r["measured"])
        lines.append(f"| `{r['constant']}` | {r['what']} | {r['model']:g} | {meas} | {r['ratio']:.2f} |")
    rows = [row for rec in recs for row in gemm_comparison(rec, system)]
    lines += ["", "GEMM time, model / measured (< 1: the model is optimistic), all expert shapes:",
              "", "| kernel | regime | rows | median | min | max |", "|---|---|---|---|---|---|"]
    for s in summary(rows):
        lines.append(f"| {s['kind']} | {s['regime']} | {s['n']} | {s['median']:.2f} | "
                     f"{s['min']:.2f} | {s['max']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", default="h200x8", help="system config whose constants are compared")
    p.add_argument("--gpu", default="h200", help="GPU kind of the recorded runs")
    a = p.parse_args(argv)
    print(markdown(a.system, a.gpu))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
