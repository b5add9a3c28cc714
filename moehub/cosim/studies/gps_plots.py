"""Figures of the MoE-GPS study (PNG + SVG of the same stem, via the co-simulation's
:func:`moehub.cosim.plots._save_both`).

* ``guideline_map``: per system (column) a grid of skewness (x) x tokens per GPU (y),
  each cell coloured by the fastest strategy and labelled with it and its margin over
  the runner-up. Rows: the paper's pair under its typical error model (copies free);
  the same pair realized on sampled routing (copies free); every strategy realized with
  weight copies over the link, the hub's included.
* ``t2e_accuracy``: Token-to-Expert layer time against its accuracy (the U-shape), with
  dist-only and the hub as lines, per system, typical and realized.
* ``drift``: the busiest GPU's rows over the mean along a drifting prefill.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..plots import _save_both, plt
from .gps_report import ABBREV

COLORS = {"none": "#bbbbbb", "dist-only": "#4c72b0", "token-to-expert": "#dd8452",
          "hub-counts": "#8fd18f", "hub-choice": "#55a868", "hub-both": "#1b7a33",
          "oracle": "#333333"}
MAP_ROWS = (("typical_winner", "typical_margin", "paper's pair, typical error model (copies free)"),
            ("realized-hidden_winner", "realized-hidden_margin",
             "paper's pair, realized routing (copies free)"),
            ("all_winner", "all_margin", "every strategy, realized, weight copies over the link"))


def guideline_map(g: list, path: Path, title: str) -> Path:
    systems = list(dict.fromkeys(r["system"] for r in g))
    fig, axes = plt.subplots(len(MAP_ROWS), len(systems), squeeze=False,
                             figsize=(5.2 * len(systems) + 1.5, 3.1 * len(MAP_ROWS) + 1.2))
    for j, system in enumerate(systems):
        cells = [r for r in g if r["system"] == system]
        skews = sorted({r["skew"] for r in cells})
        tokens = sorted({r["tokens"] for r in cells})
        for i, (wk, mk, label) in enumerate(MAP_ROWS):
            ax = axes[i][j]
            for r in cells:
                x, y = skews.index(r["skew"]), tokens.index(r["tokens"])
                ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=COLORS[r[wk]], ec="white"))
                dark = r[wk] in ("dist-only", "hub-both", "oracle")
                ax.text(x, y, f"{ABBREV[r[wk]]}\n+{100 * r[mk]:.0f}%", ha="center", va="center",
                        fontsize=8, color="white" if dark else "black")
            ax.set_xlim(-0.5, len(skews) - 0.5)
            ax.set_ylim(-0.5, len(tokens) - 0.5)
            ax.set_xticks(range(len(skews)), [f"{s:g}" for s in skews])
            ax.set_yticks(range(len(tokens)), [str(t) for t in tokens])
            ax.set_xlabel("skewness (tokens of the hottest expert / mean)")
            ax.set_ylabel("tokens per GPU")
            ax.set_title(f"{system} ({cells[0]['link']}): {label}", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, [f"{ABBREV[s]} = {s}" for s in COLORS], loc="lower center",
               ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title + "\ncell: fastest strategy, + how much slower the runner-up is",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return _save_both(fig, path)


def t2e_accuracy(curve: list, rows: list, path: Path, points: dict) -> Path:
    """Layer time vs Token-to-Expert accuracy, one panel per system at its (tokens, skew)
    of ``points``."""
    fig, axes = plt.subplots(1, len(points), squeeze=False, figsize=(5.5 * len(points), 4.2))
    for j, (system, (tokens, skew)) in enumerate(points.items()):
        ax = axes[0][j]
        for mode, ls in (("typical", "--"), ("realized", "-")):
            pts = sorted((r for r in curve if r["system"] == system and r["mode"] == mode
                          and r["tokens"] == tokens and r["skew"] == skew),
                         key=lambda r: r["accuracy"])
            if not pts:
                continue
            ax.plot([p["accuracy"] for p in pts], [p["layer_us"] for p in pts], ls,
                    marker="o", color=COLORS["token-to-expert"], label=f"token-to-expert, {mode}")
            for s in ("dist-only", "hub-both"):
                ref = [r for r in rows if r["system"] == system and r["mode"] == mode
                       and r["strategy"] == s and r["tokens"] == tokens and r["skew"] == skew]
                if ref:
                    ax.axhline(ref[0]["layer_us"], ls=ls, color=COLORS[s], lw=1.2,
                               label=f"{s}, {mode}")
        ax.set_xlabel("Token-to-Expert accuracy a (predictor width grows exponentially)")
        ax.set_ylabel("MoE layer time (µs)")
        ax.set_title(f"{system}: {tokens} tokens/GPU, skewness {skew:g}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save_both(fig, path)


def drift_figure(rows: list, path: Path) -> Path:
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, axes = plt.subplots(1, len(systems), squeeze=False, figsize=(5.5 * len(systems), 4.0))
    for j, system in enumerate(systems):
        ax = axes[0][j]
        sr = [r for r in rows if r["system"] == system]
        for s in dict.fromkeys(r["strategy"] for r in sr):
            pts = [r for r in sr if r["strategy"] == s]
            ax.plot([p["chunk"] for p in pts], [p["max_mean_rows"] for p in pts], marker=".",
                    color=COLORS[s], label=f"{s} (mean {np.mean([p['layer_us'] for p in pts]):,.0f} µs)")
        ax.set_xlabel("prefill chunk (popularity drifts between chunks)")
        ax.set_ylabel("busiest GPU's rows / mean")
        ax.set_title(f"{system}: {sr[0]['tokens']} tokens/GPU per chunk, start skewness "
                     f"{sr[0]['skew']:g}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save_both(fig, path)
