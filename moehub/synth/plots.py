"""Figures of the synthesis sweeps (matplotlib, PNG): what an architect would put in a paper.

Per sweep, two panels sharing the x axis: (a) area -- the hub at N5 in mm^2 with its
projection range, and its OSU018 breakdown by module in gate equivalents; (b) speed --
fmax at OSU018 and projected to N5 with its range, and the critical path in FO4 against
the FO4 budget of one H100 cycle.
"""
from __future__ import annotations

import csv
from pathlib import Path

from . import project

MODULE_COLS = [("pm_area_um2", "packet manager"), ("alloc_area_um2", "allocator"),
               ("tracker_area_um2", "tracker"), ("csr_area_um2", "CSR bank"),
               ("queues_area_um2", "event + credit queues")]


def _read(path: Path) -> list[dict]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            try:
                r[k] = float(v)
            except (TypeError, ValueError):
                pass
    return rows


def plot_sweeps(out: Path, sweeps, base, data_bits: int, labels: dict) -> list[Path]:
    """One figure per sweep and a summary; ``labels``: the swept parameter's axis label by sweep."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget = project.fo4_budget(project.H100_CLOCK_GHZ)
    note = (f"base: {base.name} ({base.sources} GPUs, {base.experts} experts, {base.lanes} lanes, "
            f"{base.tags_per_source} tags, {base.chunks_per_row} chunks/row),\n{data_bits}-bit datapath; "
            "OSU018 + Yosys/ABC + OpenSTA; N5 projection per FACTS.md")
    pngs = []
    summary, axes_all = plt.subplots(2, len(sweeps), figsize=(4.2 * len(sweeps), 7.5), squeeze=False)
    for col, sweep in enumerate(sweeps):
        rows = _read(out / f"{sweep}.csv")
        if not rows:
            continue
        x = [r["value"] for r in rows]
        fig, axes = plt.subplots(2, 1, figsize=(6, 7.5), sharex=True)
        for ax_pair in (axes, axes_all[:, col]):
            a, t = ax_pair
            bottom = [0.0] * len(rows)
            for key, label in MODULE_COLS:
                ge = [r[key] / project.GE_UM2_OSU018 / 1e3 for r in rows]
                a.bar([str(int(v)) for v in x], ge, bottom=bottom, label=label, alpha=0.8)
                bottom = [b + g for b, g in zip(bottom, ge)]
            a.set_ylabel("logic, kGE (OSU018 NAND2 = 24 µm²)")
            a2 = a.twinx()
            a2.errorbar([str(int(v)) for v in x], [r["n5_mm2"] for r in rows],
                        yerr=[[r["n5_mm2"] - r["n5_mm2_low"] for r in rows],
                              [r["n5_mm2_high"] - r["n5_mm2"] for r in rows]],
                        color="k", marker="o", capsize=3, label="hub at N5 (mm², range)")
            a2.set_ylabel("hub at N5, mm² (logic + SRAM)")
            a2.set_ylim(bottom=0)
            a.set_title(f"Area vs {labels[sweep]}", fontsize=10)
            if ax_pair is axes:
                h1, l1 = a.get_legend_handles_labels()
                h2, l2 = a2.get_legend_handles_labels()
                a.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left", framealpha=0.85)
            xs = [str(int(v)) for v in x]
            t.plot(xs, [r["fo4"] for r in rows], marker="s", color="tab:red", label="critical path, FO4 of logic")
            t.axhspan(budget.low, budget.high, color="tab:green", alpha=0.15,
                      label=f"1 cycle at {project.H100_CLOCK_GHZ} GHz (N5): {budget.nominal:.0f} FO4 "
                            f"({budget.low:.0f}–{budget.high:.0f})")
            t.axhline(project.STAGE_RULE_FO4, color="tab:green", ls="--", lw=1,
                      label=f"rule of thumb (FACTS.md): ≲{project.STAGE_RULE_FO4:.0f} FO4")
            t.set_ylabel("FO4 of logic on the critical path")
            t.set_ylim(bottom=0)
            t2 = t.twinx()
            t2.plot(xs, [r["n5_fmax_GHz"] for r in rows], marker="o", color="k",
                    label="fmax at N5 (GHz; label: OSU018 fmax)")
            t2.fill_between(xs, [r["n5_fmax_GHz_low"] for r in rows], [r["n5_fmax_GHz_high"] for r in rows],
                            color="k", alpha=0.06)
            t2.set_ylabel("projected fmax at N5, GHz (range shaded)")
            for xv, r in zip(xs, rows):     # the measured OSU018 fmax next to each point
                t2.annotate(f"{r['fmax_MHz']:.0f} MHz", (xv, r["n5_fmax_GHz"]), textcoords="offset points",
                            xytext=(0, 7), ha="center", fontsize=6, color="0.3")
            t2.set_ylim(bottom=0)
            t.set_xlabel(labels[sweep])
            t.set_title(f"Speed vs {labels[sweep]}", fontsize=10)
            if ax_pair is axes:
                h1, l1 = t.get_legend_handles_labels()
                h2, l2 = t2.get_legend_handles_labels()
                t.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left", framealpha=0.85)
        fig.text(0.01, 0.005, note, fontsize=6)
        fig.tight_layout(rect=(0, 0.035, 1, 1))
        p = out / f"{sweep}.png"
        fig.savefig(p, dpi=150)
        plt.close(fig)
        pngs.append(p)
    ha, la = axes_all[0, 0].get_legend_handles_labels()
    ht, lt = axes_all[1, 0].get_legend_handles_labels()
    if ha:
        summary.legend(ha + ht, la + lt, loc="lower right", fontsize=7, ncol=4)
    summary.text(0.01, 0.005, note, fontsize=7)
    summary.tight_layout(rect=(0, 0.05, 1, 1))
    p = out / "summary.png"
    summary.savefig(p, dpi=130)
    plt.close(summary)
    return pngs + [p]
