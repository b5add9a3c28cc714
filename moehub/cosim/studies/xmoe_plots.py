"""Figures of the X-MoE study, each as PNG and SVG (:func:`moehub.cosim.plots._save_both`).

* ``memory.png``: peak bytes per GPU while one MoE layer runs, per system, one panel per
  model (log axis: the worst-case buffers are 10-50x the rest), the saved-per-layer part
  marked;
* ``memory_sweep.png``: peak per GPU against tokens per GPU and against top-k, per model;
* ``rbd.png``: inter-node bytes of the dispatch per version at 2 and 4 nodes, and the
  layer time of the four versions;
* ``ssmb.png``: saved memory per layer and layer time against the TP degree, plain TP
  block against sequence-sharded MoE blocks.
"""
from __future__ import annotations

from pathlib import Path

from ..plots import _save_both, plt
from . import xmoe_memory as M
from .xmoe_dispatch import LABELS as VERSION_LABELS

COLORS = {"deepspeed": "#c44e52", "tutel": "#dd8452", "megablocks": "#8172b3",
          "pft": "#1f77b4", "deepep_ll": "#937860", "hub": "#98df8a", "hub_cf": "#2ca02c",
          "hub_paged": "#17becf"}
VERSION_COLORS = {"sw": "#c44e52", "sw_rbd": "#1f77b4", "hub": "#98df8a", "hub_rbd": "#2ca02c"}


def memory_figure(rows: list, path: Path) -> Path:
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 4.2), squeeze=False,
                             sharey=True)
    names = list(M.SYSTEMS)
    for ax, model in zip(axes[0], models):
        sub = {r["system"]: r for r in rows if r["model"] == model}
        peak = [sub[n]["peak_bytes"] / M.GiB for n in names]
        saved = [sub[n]["saved_bytes"] / M.GiB for n in names]
        y = range(len(names))
        ax.barh(y, peak, color=[COLORS[n] for n in names], alpha=0.85, label="peak per GPU")
        ax.plot(saved, y, "k|", ms=14, mew=2, label="saved per layer (kept for backward)")
        for i, v in enumerate(peak):
            ax.text(v * 1.08, i, f"{v:.2f}", va="center", fontsize=7)
        ax.set_xscale("log")
        ax.set_xlim(min(saved + peak) / 2, max(peak) * 4)
        ax.set_xlabel("GiB per GPU (log)")
        r0 = next(iter(sub.values()))
        ax.set_title(f"{model}: {r0['tokens_per_gpu']} tok/GPU, top-{r0['topk']}, "
                     f"{r0['gpus']} GPUs", fontsize=9)
        ax.grid(axis="x", alpha=0.3, which="both")
    axes[0][0].set_yticks(range(len(names)))
    axes[0][0].set_yticklabels([M.SYSTEMS[n][0] for n in names], fontsize=8)
    axes[0][0].invert_yaxis()
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Activation memory of one MoE layer per GPU (dispatch, experts, combine; "
                 "bf16 rows)", fontsize=11)
    fig.tight_layout()
    return _save_both(fig, path)


def memory_sweep_figure(rows: list, path: Path) -> Path:
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 3.2 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for j, (axis, key, xlabel) in enumerate((("tokens", "tokens_per_gpu", "tokens per GPU"),
                                                 ("topk", "topk", "top-k"))):
            ax = axes[i][j]
            for name in M.SYSTEMS:
                pts = sorted((r[key], r["peak_bytes"] / M.GiB) for r in rows
                             if r["model"] == model and r["sweep"] == axis and r["system"] == name)
                if pts:
                    x, v = zip(*pts)
                    ax.plot(x, v, marker="o", ms=3, color=COLORS[name], label=M.SYSTEMS[name][0])
            ax.set_yscale("log")
            if axis == "tokens":
                ax.set_xscale("log", base=2)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("peak GiB per GPU (log)")
            ax.set_title(f"{model}: peak vs {xlabel}", fontsize=9)
            ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=4)
    fig.suptitle("MoE-layer activation memory per GPU against tokens and top-k", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _save_both(fig, path)


def rbd_figure(traffic: list, times: list, path: Path) -> Path:
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
    keys = list(dict.fromkeys((r["nodes"], r["model"]) for r in traffic))
    versions = list(VERSION_LABELS)
    w = 0.8 / len(versions)
    for j, v in enumerate(versions):
        vals = [next(r["nic_dispatch_bytes"] for r in traffic if (r["nodes"], r["model"]) == k
                     and r["version"] == v) / 1e9 for k in keys]
        ax0.bar([i + (j - 1.5) * w for i in range(len(keys))], vals, w, color=VERSION_COLORS[v],
                label=VERSION_LABELS[v])
    ax0.set_xticks(range(len(keys)))
    ax0.set_xticklabels([f"{m}\n{n} nodes" for n, m in keys], fontsize=7)
    ax0.set_ylabel("inter-node bytes of one dispatch (GB, all NICs)")
    ax0.set_title("NIC traffic: plain vs hierarchical dispatch", fontsize=9)
    ax0.legend(fontsize=7)
    ax0.grid(axis="y", alpha=0.3)
    tkeys = list(dict.fromkeys((r["nodes"], r["system_config"]) for r in times))
    for j, v in enumerate(versions):
        vals = [next(r["layer_us"] for r in times if (r["nodes"], r["system_config"]) == k
                     and r["version"] == v) for k in tkeys]
        bars = ax1.bar([i + (j - 1.5) * w for i in range(len(tkeys))], vals, w,
                       color=VERSION_COLORS[v], label=VERSION_LABELS[v])
        for b, val in zip(bars, vals):
            ax1.text(b.get_x() + b.get_width() / 2, val, f"{val:.0f}", ha="center",
                     va="bottom", fontsize=6)
    ax1.set_xticks(range(len(tkeys)))
    ax1.set_xticklabels([f"{s}\n{n} nodes" for n, s in tkeys], fontsize=8)
    ax1.set_ylabel("MoE layer time (µs)")
    r0 = times[0]
    ax1.set_title(f"layer time: {r0['model']}, {r0['tokens_per_gpu']} tokens/GPU", fontsize=9)
    ax1.grid(axis="y", alpha=0.3)
    fig.suptitle("Redundancy-bypassing hierarchical dispatch (X-MoE RBD) and relay hubs",
                 fontsize=11)
    fig.tight_layout()
    return _save_both(fig, path)


def ssmb_figure(rows: list, path: Path) -> Path:
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    for model in dict.fromkeys(r["model"] for r in rows):
        sub = [r for r in rows if r["model"] == model]
        tp = [r["tp"] for r in sub]
        line, = ax0.plot(tp, [r["pft_saved_GiB_ssmb"] for r in sub], marker="o",
                         label=f"{model}, SSMB (PFT)")
        ax0.plot(tp, [r["pft_saved_GiB_tp"] for r in sub], ls="--", color=line.get_color(),
                 label=f"{model}, plain TP block (PFT)")
    ax0.set_xscale("log", base=2)
    ax0.set_xlabel("tensor-parallel degree TP")
    ax0.set_ylabel("saved activation memory per MoE layer (GiB/GPU)")
    ax0.legend(fontsize=6)
    ax0.grid(alpha=0.3)
    timed = [r for r in rows if "sw_layer_us_tp" in r]
    for v, label in (("sw", "software, plain all-to-all"), ("hub", "MoE-Hub")):
        if not timed:
            break
        tp = [r["tp"] for r in timed]
        line, = ax1.plot(tp, [r[f"{v}_layer_us_ssmb"] for r in timed], marker="o",
                         label=f"{label}, SSMB (+ all-gather)")
        ax1.plot(tp, [r[f"{v}_layer_us_tp"] for r in timed], ls="--", color=line.get_color(),
                 label=f"{label}, plain TP block")
    if timed:
        ax1.set_title(f"{timed[0]['model']}, {timed[0]['time_tokens_per_gpu']} tokens per TP group",
                      fontsize=9)
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("tensor-parallel degree TP")
    ax1.set_ylabel("MoE layer time per rank (µs)")
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    fig.suptitle("Sequence-sharded MoE blocks: memory and time against TP", fontsize=11)
    fig.tight_layout()
    return _save_both(fig, path)
