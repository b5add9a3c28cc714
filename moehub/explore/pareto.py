"""The Pareto set of explored points and its figure.

Objectives: N5 area (smaller is better), the hub's layer speedup over the best software
baseline (larger), receive memory (smaller). A point is on the front when no other point
of the same workload is at least as good in all three and better in one; points whose
deepest stage does not fit a 1.98 GHz cycle (timing FAIL) are not candidates. Points of
different workloads (model, system, workload, tokens per GPU) are never compared; experts
per GPU and GPUs are design axes, compared within a workload (each speedup is over the
best baseline of the point's own layer).
"""
from __future__ import annotations

from pathlib import Path

#: (metric, +1 larger is better / -1 smaller is better)
OBJECTIVES = (("n5_mm2", -1), ("speedup", +1), ("receive_bytes", -1))


def dominates(a, b, senses) -> bool:
    """``a`` at least as good as ``b`` in every objective and better in one."""
    better = False
    for x, y, s in zip(a, b, senses):
        if s * x < s * y:
            return False
        if s * x > s * y:
            better = True
    return better


def front(values: list, senses) -> list[bool]:
    """Non-dominated flags of ``values`` (tuples of objectives; equal points all stay)."""
    return [not any(dominates(o, v, senses) for j, o in enumerate(values) if j != i)
            for i, v in enumerate(values)]


def feasible(row: dict) -> bool:
    """A candidate for the front: evaluated, and its deepest stage not a timing FAIL."""
    return row.get("timing") != "FAIL" and all(row.get(k) is not None for k, _ in OBJECTIVES)


def mark(rows: list, objectives=OBJECTIVES) -> list:
    """Set ``row["pareto"]`` (True / False) on every row, per workload
    (``row["workload"]``); rows that are not candidates get False."""
    senses = [s for _, s in objectives]
    groups: dict = {}
    for r in rows:
        r["pareto"] = False
        if feasible(r):
            groups.setdefault(r["workload"], []).append(r)
    for group in groups.values():
        flags = front([tuple(r[k] for k, _ in objectives) for r in group], senses)
        for r, f in zip(group, flags):
            r["pareto"] = f
    return rows


def front_2d(rows: list) -> list:
    """The area-speedup front of ``rows`` (feasible ones), by area: the staircase drawn."""
    cand = [r for r in rows if feasible(r)]
    flags = front([(r["n5_mm2"], r["speedup"]) for r in cand], (-1, +1))
    return sorted((r for r, f in zip(cand, flags) if f), key=lambda r: (r["n5_mm2"], -r["speedup"]))


def figure(rows: list, path: Path, title: str) -> Path:
    """Area vs speedup, colour = receive memory, one panel per workload; the 3-objective
    front ringed, the area-speedup front drawn as a staircase, timing FAILs as grey x.
    PNG at ``path`` and SVG beside it."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, Normalize
    from ..cosim.plots import _save_both
    groups: dict = {}
    for r in rows:
        if r.get("n5_mm2") is not None and r.get("speedup") is not None:
            groups.setdefault(r["workload"], []).append(r)
    n = max(1, len(groups))
    cols = min(n, 2)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 4.6 * nrows), squeeze=False)
    mem = [r["receive_bytes"] / 2**20 for r in rows if r.get("receive_bytes")]
    lo, hi = (min(mem), max(mem)) if mem else (1.0, 2.0)
    norm = (LogNorm(lo, hi) if hi > 4 * lo else Normalize(lo, hi) if hi > lo
            else Normalize(0.95 * lo, 1.05 * lo))
    sc = None
    for ax, (wl, group) in zip(axes.flat, groups.items()):
        ok = [r for r in group if feasible(r)]
        bad = [r for r in group if not feasible(r)]
        if ok:
            sc = ax.scatter([r["n5_mm2"] for r in ok], [r["speedup"] for r in ok],
                            c=[r["receive_bytes"] / 2**20 for r in ok], cmap="viridis", norm=norm,
                            s=46, zorder=3)
            par = [r for r in ok if r.get("pareto")]
            ax.scatter([r["n5_mm2"] for r in par], [r["speedup"] for r in par], s=160,
                       facecolors="none", edgecolors="black", linewidths=1.4, zorder=4,
                       label="Pareto (area, speedup, memory)")
            st = front_2d(ok)
            ax.step([r["n5_mm2"] for r in st], [r["speedup"] for r in st], where="post",
                    color="black", lw=1, ls="--", zorder=2, label="area-speedup front")
        if bad:
            ax.scatter([r["n5_mm2"] for r in bad], [r["speedup"] for r in bad], marker="x",
                       color="0.55", zorder=3, label="deepest stage > 26 FO4 (timing FAIL)")
        for i, r in enumerate(sorted(group, key=lambda r: (r["n5_mm2"], r["speedup"]))):
            ax.annotate(r["label"], (r["n5_mm2"], r["speedup"]), fontsize=6.5,   # neighbours
                        xytext=(4, 4 if i % 2 else -10), textcoords="offset points",  # alternate
                        color="0.25")
        ax.margins(0.15, 0.1)               # room for the labels
        ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
        ax.set_title(wl, fontsize=9)
        ax.set_xlabel("hub area at N5 (mm², reduced rows and datapath)")
        ax.set_ylabel("layer speedup over the best baseline")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    if sc is not None:
        fig.colorbar(sc, ax=axes.ravel().tolist(), label="receive memory per GPU (MiB)")
    fig.suptitle(title, fontsize=10)
    return _save_both(fig, Path(path))
