"""``moehub headline``: the hub against the best software baseline, across models, systems
and tokens per GPU, per MoE layer and end to end.

For every (system config, model, tokens per GPU) point every system of :mod:`.systems`
runs on the same routing; the *best baseline* is the fastest real software system
(:data:`.systems.BASELINES`: bulk, Comet, DeepEP normal and low-latency, the fused
kernel), and the hub's speedup is its latency over the hub's. Where the hub loses, the
report says why, from the two timelines: which of its phases on the critical GPU ends
later than the best baseline's (:func:`why`). Writes ``headline.csv``, ``headline.md``
(the tables), ``headline.png`` and, for each system config, the timelines of the hub's
best and worst point.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np

from .. import progress
from ..paths import HELP, output_dir
from .experiment import load_configs, run_experiment, write_outputs
from .systems import BASELINES

SYSTEM_CONFIGS = ("h100x8", "b200x8", "gb200-nvl72")
MODELS = ("mixtral-8x7b", "qwen2-57b-a14b", "phi-3.5-moe", "deepseek-v3")
TOKENS = (128, 512, 2048, 8192, 32768)
#: points with more routed rows are skipped (and printed): the hub model takes about a
#: second per 100k rows and a system runs 2-8 passes, and a 64-GPU network has 4096
#: flows; a 32K-token DeepSeek-V3 layer on 8 GPUs is 2.1M rows
MAX_ROWS = 600_000


def _phase_end(res, gpu: int, names) -> float:
    ends = [p.end for p in res.phases if p.gpu == gpu and p.name in names]
    return max(ends) if ends else float("nan")


def _first_start(res, names) -> float:
    starts = [p.start for p in res.phases if p.name in names]
    return min(starts) if starts else float("nan")


def _busy(res, gpu: int, names) -> float:
    return sum(p.end - p.start for p in res.phases if p.gpu == gpu and p.name in names)


def why(er, best: str) -> str:
    """Why the hub is slower than ``best`` (empty when it is not), from the two timelines:
    a later first GEMM, longer GEMM busy time or a later dispatch end on each one's
    critical GPU (each named when it explains a good part of the difference)."""
    hub, base = er.results["hub"], er.results[best]
    if hub.latency_us <= base.latency_us:
        return ""
    gh, gb = int(np.argmax(hub.gpu_end)), int(np.argmax(base.gpu_end))
    disp = ("dispatch", "all-to-all dispatch")
    gemm = ("expert GEMM",)
    d_send = _phase_end(hub, gh, disp) - _phase_end(base, gb, disp)
    d_busy = _busy(hub, gh, gemm) - _busy(base, gb, gemm)
    d_gemm = _phase_end(hub, gh, gemm) - _phase_end(base, gb, gemm)
    d_start = _first_start(hub, gemm) - _first_start(base, gemm)
    L = er.layer
    parts = []
    if d_start > 0.3 * (hub.latency_us - base.latency_us):
        parts.append(f"its GEMMs start {d_start:.0f} us later: with token-order sends no "
                     f"expert fills a compute-bound pass or is known complete before the "
                     f"done word at the end of the dispatch, while {best} knows each "
                     f"expert's count before it starts (hub protocol v2's per-expert counts)")
    if d_busy > 0.3 * (hub.latency_us - base.latency_us):
        parts.append(f"its GEMMs are busy {d_busy:.0f} us longer (tile-granular passes re-read "
                     f"weights; its {L.sys.software.comm_sms_hub} sender SMs are held while it sends)")
    if np.isfinite(d_send) and d_send > 0:
        ratio = (L.counts.sum() * L.row_wire_hub) / max(1.0, L.gpu_rows.sum() * L.row_wire_sw)
        parts.append(f"its dispatch ends {d_send:.0f} us later ({ratio:.2f}x the wire bytes "
                     f"of DeepEP's deduplicated rows: one copy per (token, expert), "
                     f"{L.sys.link_header_bytes} B header per {L.hub.chunk_bytes} B packet)")
    if not parts and d_gemm > 0:
        parts.append(f"its last GEMM ends {d_gemm:.0f} us later (experts finish late: "
                     f"the last partial tiles wait for the end-of-layer done word)")
    return "; ".join(parts) or "combine/reduce ends later"


def run_point(system: str, model: str, tokens: int, workload: str = "default"):
    s, m, w = load_configs(system, model, workload, tokens)
    return run_experiment(s, m, w)


def point_row(er) -> dict:
    base = {n: r.latency_us for n, r in er.results.items() if n in BASELINES}
    best = min(base, key=base.get)
    hub = er.latency("hub")
    return {"system_config": er.system.name, "gpus": er.layer.G, "model": er.model.name,
            "tokens_per_gpu": er.layer.T, "hub_us": hub, "best_baseline": best,
            "best_us": base[best], "speedup_layer": base[best] / hub,
            "speedup_e2e": er.e2e[best] / er.e2e["hub"], "ideal_us": er.latency("ideal"),
            **{f"{n}_us": v for n, v in base.items()}, "why_hub_loses": why(er, best)}


def table_md(rows: list) -> str:
    out = ["| system | model | tokens/GPU | hub µs | best baseline | its µs | hub speedup "
           "(layer) | (end to end) | why the hub loses |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['system_config']} | {r['model']} | {r['tokens_per_gpu']} | "
                   f"{r['hub_us']:.0f} | {r['best_baseline']} | {r['best_us']:.0f} | "
                   f"{r['speedup_layer']:.2f}x | {r['speedup_e2e']:.2f}x | {r['why_hub_loses']} |")
    return "\n".join(out)


SHORT = {"bulk": "B", "comet": "C", "deepep": "D", "deepep_ll": "LL", "fused": "F"}


def pivot_md(rows: list) -> str:
    """One line per (system, model), one column per tokens/GPU: hub speedup over the best
    baseline, layer / end to end, and which baseline was best (B bulk, C Comet, D DeepEP
    normal, LL DeepEP low-latency, F fused)."""
    toks = sorted({r["tokens_per_gpu"] for r in rows})
    out = ["| system | model | " + " | ".join(f"{t} tok/GPU" for t in toks) + " |",
           "|---|---|" + "---|" * len(toks)]
    for key in dict.fromkeys((r["system_config"], r["model"]) for r in rows):
        cells = []
        for t in toks:
            r = next((r for r in rows if (r["system_config"], r["model"]) == key
                      and r["tokens_per_gpu"] == t), None)
            cells.append("—" if r is None else f"{float(r['speedup_layer']):.2f} / "
                         f"{float(r['speedup_e2e']):.2f} {SHORT[r['best_baseline']]}")
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(rows: list, path: Path) -> Path:
    from .plots import _save
    import matplotlib.pyplot as plt
    systems = list(dict.fromkeys(r["system_config"] for r in rows))
    fig, axes = plt.subplots(1, len(systems), figsize=(5 * len(systems), 3.8), squeeze=False)
    for ax, sname in zip(axes[0], systems):
        for model in dict.fromkeys(r["model"] for r in rows):
            pts = sorted((r["tokens_per_gpu"], r["speedup_layer"], r["speedup_e2e"])
                         for r in rows if r["system_config"] == sname and r["model"] == model)
            if not pts:
                continue
            x, sl, se = zip(*pts)
            line, = ax.plot(x, sl, marker="o", label=f"{model} (layer)")
            ax.plot(x, se, marker=".", ls=":", color=line.get_color(), label=f"{model} (e2e)")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per GPU")
        ax.set_title(sname, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("best baseline / MoE-Hub")
    axes[0][-1].legend(fontsize=6, ncol=2)
    return _save(fig, "MoE-Hub speedup over the best software baseline (solid: MoE layer, "
                 "dotted: end to end)", path)


def cmd_headline(args) -> int:
    systems = args.systems.split(",") if args.systems else list(SYSTEM_CONFIGS)
    models = args.models.split(",") if args.models else list(MODELS)
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else list(TOKENS)
    out = output_dir("results", "headline", out=args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, ers, t_all = [], {}, time.perf_counter()
    todo = []
    for sname in systems:
        for model in models:
            for t in tokens:
                s, m, _ = load_configs(sname, model, "default", t)
                if s.gpus * t * m.topk > MAX_ROWS:
                    print(f"skip {sname} {model} {t} tok/GPU: {s.gpus * t * m.topk:,} rows "
                          f"> {MAX_ROWS:,}", flush=True)
                else:
                    todo.append((sname, model, t))
    with progress.stage("headline", total=len(todo), unit="points") as st:
        for sname, model, t in todo:
            st.update(note=f"{sname} {model} {t} tok/GPU", force=True)
            t0 = time.perf_counter()
            er = run_point(sname, model, t)
            rows.append(point_row(er))
            ers[(sname, model, t)] = er
            r = rows[-1]
            print(f"{sname} {model} {t} tok/GPU: hub {r['hub_us']:.0f} us, best "
                  f"{r['best_baseline']} {r['best_us']:.0f} us -> {r['speedup_layer']:.2f}x "
                  f"layer, {r['speedup_e2e']:.2f}x e2e ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
            _write(rows, ers, out, figures=False)      # tables survive an interruption
            st.advance()
    _write(rows, ers, out, figures=not args.no_figure)
    print(table_md(rows))
    print(f"{len(rows)} points in {time.perf_counter() - t_all:.0f} s")
    print(f"      table: {out / 'headline.csv'} and {out / 'headline.md'}")
    if not args.no_figure:
        print(f"     figure: {out / 'headline.png'} (timelines: {out}/<point>/timeline.png)")
    return 0


def _write(rows, ers, out: Path, figures: bool) -> None:
    with open(out / "headline.csv", "w", newline="") as f:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    (out / "headline.md").write_text(pivot_md(rows) + "\n\n" + table_md(rows) + "\n")
    if not figures or not rows:
        return
    plot(rows, out / "headline.png")
    for sname in dict.fromkeys(r["system_config"] for r in rows):
        sub = [r for r in rows if r["system_config"] == sname]
        for r in (max(sub, key=lambda r: r["speedup_layer"]),
                  min(sub, key=lambda r: r["speedup_layer"])):
            key = (sname, r["model"], r["tokens_per_gpu"])
            write_outputs(ers[key], f"{sname}_{r['model']}_t{r['tokens_per_gpu']}", out)


def add_parser(subparsers) -> None:
    h = subparsers.add_parser("headline", help="MoE-Hub vs the best software baseline: every "
                              "model x system x tokens/GPU, per layer and end to end")
    h.add_argument("--systems", default=None, help=f"system configs (default "
                   f"{','.join(SYSTEM_CONFIGS)})")
    h.add_argument("--models", default=None, help=f"models (default {','.join(MODELS)})")
    h.add_argument("--tokens", default=None, help="tokens per GPU (default "
                   f"{','.join(map(str, TOKENS))})")
    h.add_argument("--out", default=None, help=f"output folder (default <build>/results/headline; <build> is {HELP})")
    h.add_argument("--no-figure", action="store_true", help="skip the plot and timelines")
    h.set_defaults(func=cmd_headline)
