"""Figures: the layer timeline (one panel per system) and sweep speedup plots."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import numpy as np  # noqa: E402

SYSTEM_COLORS = {"bulk": "#c44e52", "comet": "#dd8452", "deepep": "#8172b3",
                 "deepep_ll": "#937860", "fused": "#1f77b4", "hub": "#2ca02c", "ideal": "#333333"}
TRACKS = ("control", "send", "hub", "gemm", "combine")
TRACK_LABEL = {"control": "routing/ctl", "send": "send", "hub": "recv/hub", "gemm": "GEMM",
               "combine": "combine"}
COLORS = {
    "gate": "#4c72b0", "layout": "#8172b3", "count exchange": "#c44e52", "host sync": "#e377c2",
    "permute": "#937860", "scatter index": "#8c564b", "sort by expert": "#937860",
    "unsort": "#937860", "recv pack": "#937860", "unpermute+reduce": "#17becf",
    "reduce": "#17becf", "all-to-all dispatch": "#dd8452", "dispatch": "#dd8452",
    "hub": "#e6ab02", "notify": "#bcbd22", "expert GEMM": "#55a868", "shared expert": "#a6d854",
    "all-to-all combine": "#da8bc3", "combine": "#da8bc3", "unpermute": "#937860",
    "credits": "#999999",
}


def _draw_system(ax, r, G, hub_latency, used, labels=True):
    nt = len(TRACKS)
    bars: dict = {}
    for p in r.phases:
        y = (G - 1 - p.gpu) * (nt + 1) + (nt - 1 - TRACKS.index(p.track))
        bars.setdefault(p.name, []).append((p.start, p.end - p.start, y))
    for ph, lst in bars.items():
        used.add(ph)
        col = COLORS.get(ph, "#999999")
        edge = "white" if ph in ("expert GEMM", "shared expert") else col
        for x, w, y in lst:
            ax.broken_barh([(x, w)], (y + 0.1, 0.8), facecolors=col, edgecolors=edge,
                           linewidth=0.3)
    mk = [(g, t) for g, tr, t in r.markers if tr == "hub"]
    if mk:
        g_arr = np.array([m[0] for m in mk])
        t_arr = np.array([m[1] for m in mk])
        y = (G - 1 - g_arr) * (nt + 1) + (nt - 1 - TRACKS.index("hub")) + 0.5
        ax.scatter(t_arr, y, marker="|", s=14, c="k", linewidths=0.5, zorder=3)
    ax.axvline(r.latency_us, color="k", lw=1, ls="--")
    yt = [(G - 1 - g) * (nt + 1) + nt / 2 for g in range(G)]
    ax.set_yticks(yt, [f"GPU {g}" for g in range(G)] if labels else [""] * G,
                  fontsize=6 if G > 8 else 7)
    ax.set_ylim(-0.5, G * (nt + 1) - 0.5)
    ax.grid(axis="x", alpha=0.3)


def timeline_figure(er, path: Path) -> Path:
    """Per-GPU rows (tracks: routing/ctl, send, recv/hub, GEMM, combine), one panel per
    system, on one time axis (left: the whole layer; right: a zoom on its start, where
    the systems differ); tile/block-ready flags are black ticks on the recv/hub track."""
    res = er.results
    G = er.layer.G
    nt = len(TRACKS)
    names = list(res)
    panel_h = max(1.8, G * (nt + 1) * 0.06)
    fig_h = 1.4 + panel_h * len(names)
    fig, axes = plt.subplots(len(names), 2, figsize=(15, fig_h), sharex="col",
                             gridspec_kw={"hspace": 0.45, "wspace": 0.04,
                                          "width_ratios": [1.35, 1]}, squeeze=False)
    tmax = max(r.latency_us for r in res.values())
    # zoom: until the last dispatch/notify/hub phase of any system ends, plus a margin
    tz = max([p.end for r in res.values() for p in r.phases
              if p.track in ("send", "hub") or p.name in ("gate",)] + [tmax * 0.02])
    tz = min(tmax, tz * 1.6)
    used: set = set()
    hub_lat = res["hub"].latency_us
    for row, name in enumerate(names):
        r = res[name]
        _draw_system(axes[row, 0], r, G, hub_lat, used)
        _draw_system(axes[row, 1], r, G, hub_lat, used, labels=False)
        axes[row, 0].set_title(f"{r.label}: layer {r.latency_us:.1f} us "
                               f"({r.latency_us / hub_lat:.2f}x the hub's time)",
                               fontsize=9, loc="left")
        axes[row, 1].set_title(f"zoom on the first {tz:.0f} us", fontsize=8, loc="right")
    axes[-1, 0].set_xlabel("time since the layer started (us)")
    axes[-1, 1].set_xlabel("time since the layer started (us), zoom")
    axes[-1, 0].set_xlim(0, tmax * 1.03)
    axes[-1, 1].set_xlim(0, tz)
    handles = [Patch(color=COLORS.get(n, "#999"), label=n) for n in COLORS if n in used]
    handles.append(plt.Line2D([], [], color="k", marker="|", ls="", label="tile/block ready"))
    handles.append(plt.Line2D([], [], color="k", ls="--", label="layer end"))
    L = er.layer
    fig.suptitle(f"{er.model.name} on {er.system.name}: {L.T} tokens/GPU, top-{L.k}, "
                 f"{er.workload.routing} routing.  Each GPU has five tracks, top to bottom: "
                 f"{', '.join(TRACK_LABEL[t] for t in TRACKS)}", fontsize=10, y=1 - 0.1 / fig_h)
    fig.legend(handles=handles, loc="upper center", ncol=min(9, len(handles)), fontsize=8,
               bbox_to_anchor=(0.5, 1 - 0.35 / fig_h), frameon=False)
    fig.subplots_adjust(top=1 - 1.25 / fig_h, bottom=0.55 / fig_h, left=0.05, right=0.99)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def speedup_plot(rows: list, x_key: str, path: Path, title: str, xlabel: str,
                 logx: bool = True, group_key: str | None = None) -> Path:
    """rows: dicts with x_key, 'system', 'hub_speedup', 'layer_us' (and group_key)."""
    groups = sorted({r[group_key] for r in rows}) if group_key else [None]
    fig, axes = plt.subplots(len(groups), 2, figsize=(12, 3.6 * len(groups)), squeeze=False)
    systems = [s for s in ("bulk", "comet", "deepep", "deepep_ll", "fused", "hub", "ideal")
               if any(r["system"] == s for r in rows)]
    colors = SYSTEM_COLORS
    for gi, grp in enumerate(groups):
        sub = [r for r in rows if group_key is None or r[group_key] == grp]
        ax1, ax2 = axes[gi]
        for s in systems:
            pts = sorted((r[x_key], r["layer_us"], r["hub_speedup"]) for r in sub if r["system"] == s)
            if not pts:
                continue
            x, lat, sp = zip(*pts)
            ls = "--" if s == "ideal" else "-"
            ax1.plot(x, lat, marker="o", ls=ls, color=colors[s], label=s)
            if s != "hub":
                ax2.plot(x, sp, marker="o", ls=ls, color=colors[s],
                         label=f"{s} / hub" if s != "ideal" else "ideal / hub (bound)")
        for ax in (ax1, ax2):
            if logx:
                ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            ax.set_xlabel(xlabel)
        ax1.set_yscale("log")
        ax1.set_ylabel("MoE layer latency (us)")
        ax2.axhline(1.0, color="k", lw=0.8)
        ax2.set_ylabel("speedup of MoE-Hub (baseline / hub)")
        sfx = f" - {grp}" if grp is not None else ""
        ax1.set_title(f"layer latency{sfx}", fontsize=10)
        ax2.set_title(f"hub speedup{sfx}", fontsize=10)
        ax1.legend(fontsize=8)
        ax2.legend(fontsize=8)
    return _save(fig, title, path)


def _save(fig, title: str, path: Path) -> Path:
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def model_bar_plot(rows: list, path: Path, title: str) -> Path:
    """Grouped bars: hub speedup over each baseline, per model (layer and end-to-end)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    base = [s for s in SYSTEM_COLORS if s != "hub" and any(r["system"] == s for r in rows)]
    colors = SYSTEM_COLORS
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    w = 0.8 / len(base)
    for ax, key, lab in ((axes[0], "hub_speedup", "MoE layer"),
                         (axes[1], "e2e_hub_speedup", "end to end")):
        for i, s in enumerate(base):
            vals = [next((r[key] for r in rows if r["model"] == m and r["system"] == s), np.nan)
                    for m in models]
            ax.bar(np.arange(len(models)) + (i - (len(base) - 1) / 2) * w, vals, w, color=colors[s],
                   label=f"{s} / hub")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(np.arange(len(models)), models, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel(f"speedup of MoE-Hub, {lab}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, title, path)


# ---------------------------------------------------------------------------- calibration
def _gemm_panel(ax, comp, pts):
    """TFLOP/s vs M: model curves for each published (N, K, dtype) with its points."""
    ms = np.unique(np.round(np.logspace(0, 13, 80, base=2)).astype(int))
    shapes = {}
    for p in pts:
        if p.metric == "gemm_TFLOPs":
            i = p.inputs
            shapes.setdefault((i["n"], i["k"], i["dtype"]), []).append((i["m"], p.published))
    for idx, ((n, k, dt), pub) in enumerate(sorted(shapes.items())):
        b = 1.0 if dt == "fp8" else 2.0
        tf = [2.0 * m * n * k / comp.gemm_us(m, n, k, dt, a_bytes=b, b_bytes=b) / 1e6 for m in ms]
        color = plt.cm.tab10(idx % 10)
        ax.plot(ms, tf, color=color, lw=1.2, label=f"{dt.upper()} N={n} K={k}")
        x, y = zip(*pub)
        ax.scatter(x, y, color=color, marker="o", edgecolor="k", zorder=3, s=28)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M (rows)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"GEMM model (lines) vs published (dots), {comp.sys.name}")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")


def _collective_panels(ax_t, ax_b, comp, pts):
    """Small-collective time vs bytes per peer; port fraction vs message size."""
    sizes = np.logspace(0, 9, 60)
    for peers, nodes, color in ((8, 1, "C0"), (16, 2, "C1")):
        t = [comp.alltoall_us(s, peers, nodes) for s in sizes]
        ax_t.plot(sizes, t, color=color, label=f"alltoall model, {peers} GPUs / {nodes} node(s)")
    for p in pts:
        if p.metric == "small_collective_us" and p.inputs["bytes_per_peer"] > 0:
            color = "C0" if p.inputs["nodes"] == 1 else "C1"
            ax_t.scatter(p.inputs["bytes_per_peer"], p.published, color=color, edgecolor="k",
                         zorder=3)
    ax_t.set_xscale("log")
    ax_t.set_yscale("log")
    ax_t.set_xlabel("bytes per peer")
    ax_t.set_ylabel("time (us)")
    ax_t.set_title("all-to-all time (dots: published small-message points)")
    ax_t.legend(fontsize=7)
    ax_t.grid(alpha=0.3, which="both")
    for inter, color, name in ((False, "C2", "scale-up"), (True, "C3", "NIC")):
        ax_b.plot(sizes, [comp.collective_efficiency(s, inter) for s in sizes], color=color,
                  label=f"collective, {name}")
        ax_b.plot(sizes, [comp.put_efficiency(s, inter) for s in sizes], color=color, ls="--",
                  label=f"puts, {name}")
    for p in pts:
        if p.metric in ("port_GBps_at", "put_GBps"):
            inter = p.inputs["inter_node"]
            from ..config.cosim_schema import load_system_config
            s = load_system_config(p.system)
            port = s.inter_bw_GBps if inter else s.intra_bw_GBps
            ax_b.scatter(p.inputs["msg_bytes"], p.published / port, color="C3" if inter else "C2",
                         marker="o" if p.metric == "port_GBps_at" else "^", edgecolor="k", zorder=3)
    ax_b.set_xscale("log")
    ax_b.set_ylim(0, 1.05)
    ax_b.set_xlabel("message bytes")
    ax_b.set_ylabel("fraction of port bandwidth")
    ax_b.set_title("bandwidth curves (o collective, ^ puts: published)")
    ax_b.legend(fontsize=7)
    ax_b.grid(alpha=0.3, which="both")


def _sm_panel(ax, pts):
    """Communication bandwidth vs SMs given to it, model curves and published points."""
    from ..config.cosim_schema import load_system_config
    from .components import Components
    sel = [p for p in pts if p.metric == "comm_GBps"]
    if not sel:
        ax.set_visible(False)
        return
    shapes = sorted({(p.system, p.inputs["msg_bytes"], p.inputs["inter_node"]) for p in sel})
    sms = np.arange(1, 133)
    for idx, (system, m, inter) in enumerate(shapes):
        comp = Components(load_system_config(system))
        color = plt.cm.tab10(idx % 10)
        ax.plot(sms, [comp.comm_GBps(s, m, inter) for s in sms], color=color,
                label=f"{system}, {m} B rows")
        for p in sel:
            if (p.system, p.inputs["msg_bytes"], p.inputs["inter_node"]) == (system, m, inter):
                ax.scatter(p.inputs["sms"], p.published, color=color, edgecolor="k", zorder=3)
    ax.set_xlabel("SMs given to communication")
    ax.set_ylabel("GB/s")
    ax.set_title("comm bandwidth vs SMs (dots: published)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _ratio_panel(ax, pts):
    comps = list(dict.fromkeys(p.component for p in pts))
    for x, c in enumerate(comps):
        sel = [p for p in pts if p.component == c]
        for j, p in enumerate(sel):
            xx = x + (j - len(sel) / 2) * 0.6 / max(len(sel), 1)
            marker = "o" if p.ok else ("x" if p.expected_miss else "s")
            ax.scatter(xx, p.ratio, marker=marker, color="C2" if p.ok else "C3", zorder=3)
        tol = sel[0].tolerance
        ax.fill_between([x - 0.4, x + 0.4], 1 - tol, 1 + tol, color="0.85")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(comps)), comps)
    ax.set_yscale("log")
    ax.set_ylabel("model / published")
    ax.set_title("every point: o ok, x expected MISS, s MISS (band: tolerance)")
    ax.grid(alpha=0.3, axis="y", which="both")


def calibration_plots(points, out: Path, system: str = "h100x8") -> list:
    """Writes gemm.png, collectives.png (time and bandwidth vs message size, bandwidth vs
    SMs) and ratios.png under ``out``; returns the paths."""
    from ..config.cosim_schema import load_system_config
    from .components import Components
    out = Path(out)
    paths = []
    gpts = [p for p in points if p.system == system and p.metric == "gemm_TFLOPs"]
    comp = Components(load_system_config(system))
    if gpts or system == "h100x8":
        fig, ax = plt.subplots(figsize=(8, 5.5))
        _gemm_panel(ax, comp, gpts)
        fig.tight_layout()
        fig.savefig(out / "gemm.png", dpi=110)
        plt.close(fig)
        paths.append(out / "gemm.png")
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(19, 5))
    _collective_panels(a, b, comp, points)
    _sm_panel(c, points)
    fig.tight_layout()
    fig.savefig(out / "collectives.png", dpi=110)
    plt.close(fig)
    paths.append(out / "collectives.png")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    _ratio_panel(ax, points)
    fig.tight_layout()
    fig.savefig(out / "ratios.png", dpi=110)
    plt.close(fig)
    paths.append(out / "ratios.png")
    return paths
