"""Figures: the layer timeline, the sweep plots and the calibration plots.

A reader of an architecture paper should see at a glance where each system spends the
layer and why the hub's expert GEMMs start early, so the timeline (:func:`timeline_figure`)
colours every phase by its *kind* (:func:`phase_kind`: dispatch, combine, expert GEMM,
layout, sync/wait, hub, gate/reduce), the same colour in every system; a bar panel splits
each system's layer time by kind on its critical GPU (:func:`critical_breakdown`) with the
hub's speedup written on the bars; a zoom panel shows the hub's first tile flags and GEMM
passes against the start of every system's first expert GEMM; and one panel per system
draws a few GPUs (:func:`shown_gpus`) with tracks thick enough to read, the GPUs whose hub
ran as RTL marked (:func:`rtl_gpus`). The sweep plots (:func:`speedup_plot`,
:func:`model_bar_plot`) divide every latency by the communication-free ``ideal`` system's
(:func:`normalise`): on a log latency axis the systems' lines lie on top of each other.
Every timeline and sweep figure is written as PNG and as SVG beside it (same stem).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import numpy as np  # noqa: E402

US = "µs"
SYSTEM_ORDER = ("bulk", "comet", "deepep", "deepep_ll", "fused", "hub", "ideal")
SYSTEM_COLORS = {"bulk": "#c44e52", "comet": "#dd8452", "deepep": "#8172b3",
                 "deepep_ll": "#937860", "fused": "#1f77b4", "hub": "#2ca02c", "ideal": "#333333"}
#: marker and line style per system, so that lines differ in more than colour (print,
#: colour-blind readers) and the hub stands out
SYSTEM_STYLE = {
    "bulk": {"marker": "o", "ls": "-"},
    "comet": {"marker": "s", "ls": "--"},
    "deepep": {"marker": "^", "ls": "-."},
    "deepep_ll": {"marker": "v", "ls": ":"},
    "fused": {"marker": "D", "ls": (0, (6, 2, 1, 2, 1, 2)), "ms": 5},
    "hub": {"marker": "*", "ls": "-", "lw": 2.6, "ms": 11},
    "ideal": {"marker": "", "ls": (0, (2, 2)), "lw": 1.3},
}
SYSTEM_HATCH = {"bulk": "", "comet": "//", "deepep": "\\\\", "deepep_ll": "..", "fused": "xx",
                "hub": "", "ideal": "--"}


def _style(system: str) -> dict:
    """Plot keywords of a system's line (colour, marker, line style)."""
    st = {"marker": "o", "ls": "-", "lw": 1.6, "ms": 6, **SYSTEM_STYLE.get(system, {})}
    return {"color": SYSTEM_COLORS.get(system, "#777777"), **st}


def _fmt_us(us: float) -> str:
    """Always µs (the axes are in µs); thousands separated, a decimal below 100."""
    return f"{us:,.0f} {US}" if us >= 100 else f"{us:.1f} {US}"


def _save_both(fig, path: Path, dpi: int = 110) -> Path:
    """PNG at ``path`` and an SVG of the same stem beside it (vector, for papers)."""
    path = Path(path)
    fig.savefig(path, dpi=dpi)
    fig.savefig(path.with_suffix(".svg"))
    plt.close(fig)
    return path


def _save(fig, title: str, path: Path) -> Path:
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


# ---------------------------------------------------------------------------- phase kinds
GEMM, GATE, LAYOUT, HUB, DISPATCH, COMBINE, SYNC, OTHER, IDLE = (
    "expert GEMM", "gate / reduce", "layout / permute", "hub", "dispatch", "combine",
    "sync / wait", "other", "idle")
#: phase kinds, in the order a bar stacks them: GEMM first, so that the overheads the
#: systems differ by sit at the end of each bar, beside its numbers
KINDS = (GEMM, GATE, LAYOUT, HUB, DISPATCH, COMBINE, SYNC)
#: Okabe-Ito colours (distinct for colour-blind readers); sync/wait, the cost the hub
#: removes, in the loudest one
KIND_COLORS = {GEMM: "#009E73", GATE: "#999999", LAYOUT: "#0072B2", HUB: "#56B4E9",
               DISPATCH: "#E69F00", COMBINE: "#CC79A7", SYNC: "#D55E00", OTHER: "#DDDDDD",
               IDLE: "#F2F2F2"}
KIND_LABEL = {GEMM: "expert GEMM (routed; shared hatched)", GATE: "gate / reduce",
              LAYOUT: "layout / permute / sort / pack", HUB: "hub: rows arriving, tile flags",
              DISPATCH: "dispatch: rows out", COMBINE: "combine: outputs back",
              SYNC: "count exchange / sync / wait", OTHER: "other",
              IDLE: "idle: waiting for other GPUs (bars only)"}
#: every phase name of cosim/systems (``PHASES``) -> its kind (tests check the cover)
PHASE_KIND = {
    "gate": GATE, "reduce": GATE, "unpermute+reduce": GATE, "scale+sum at pilot": GATE,
    "layout": LAYOUT, "scatter index": LAYOUT, "permute": LAYOUT, "sort by expert": LAYOUT,
    "unsort": LAYOUT, "recv pack": LAYOUT, "unpermute": LAYOUT, "gather pilots": LAYOUT,
    "gather replicas": LAYOUT, "local order": LAYOUT,
    "count exchange": SYNC, "host sync": SYNC, "notify": SYNC, "combine wait": SYNC,
    "index exchange": SYNC, "weights exchange": SYNC,
    "dispatch": DISPATCH, "all-to-all dispatch": DISPATCH, "all-to-all global": DISPATCH,
    "all-to-all node": DISPATCH,
    "combine": COMBINE, "all-to-all combine": COMBINE, "all-to-all node back": COMBINE,
    "all-to-all global back": COMBINE,
    "expert GEMM": GEMM, "shared expert": GEMM,
    "hub": HUB, "credits": HUB,
}
#: which kind an instant of the critical GPU counts as when several run at once: work
#: hidden under the GEMMs is not on the critical path
EXPOSED_PRIORITY = (GEMM, GATE, LAYOUT, DISPATCH, COMBINE, HUB, SYNC)


def phase_kind(name: str) -> str:
    """The kind of a phase, from its name alone: the same in every system."""
    return PHASE_KIND.get(name, OTHER)


def phase_color(name: str) -> str:
    """The colour of a phase is its kind's: the same in every system."""
    return KIND_COLORS[phase_kind(name)]


#: phase name -> colour (the table before phase kinds; kept for other callers)
COLORS = {n: phase_color(n) for n in PHASE_KIND}


#: the segments of a bar, in stacking order
BAR_KINDS = KINDS + (OTHER, IDLE)


def critical_breakdown(r) -> tuple[int, dict]:
    """(critical GPU, {kind: µs}) of a SystemResult: every instant of the GPU that ends
    last is given to the first kind of ``EXPOSED_PRIORITY`` running then, time with no
    phase to ``IDLE`` (waiting for other GPUs' rows or outputs); the parts sum to the
    layer time, so the bars of all systems compare."""
    c = int(np.argmax(r.gpu_end))
    end = float(r.gpu_end[c])
    spans = [(max(p.start, 0.0), min(p.end, end), phase_kind(p.name))
             for p in r.phases if p.gpu == c and p.end > p.start]
    edges = np.unique(np.clip([0.0, end] + [t for s in spans for t in s[:2]], 0.0, end))
    mids, widths = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    taken = np.zeros(len(mids), bool)
    out = dict.fromkeys(BAR_KINDS, 0.0)
    for kind in EXPOSED_PRIORITY + (OTHER,):
        cover = np.zeros(len(mids), bool)
        for s, e, k in spans:
            if k == kind:
                cover |= (mids >= s) & (mids < e)
        out[kind] += float(widths[cover & ~taken].sum())
        taken |= cover
    out[IDLE] = float(widths[~taken].sum())
    return c, out


# ---------------------------------------------------------------------------- timeline
TRACKS = ("control", "send", "hub", "gemm", "combine")
TRACK_LABEL = {"control": "ctl", "send": "send", "hub": "recv/hub", "gemm": "GEMM",
               "combine": "combine"}
TRACK_IN = 0.09      #: inches per track: ~10 pixels at the PNG's dpi
GPU_GAP = 0.8        #: space between two GPUs' tracks, in tracks
RTL_COLOR = "#C00000"
HUB_END_COLOR = "#0072B2"
FIG_W = 15.0
DPI = 110


def rtl_gpus(er) -> list:
    """GPUs whose hub ran as the Verilog (cocotb + Icarus): one RTL-versus-model check
    per such GPU in the hub result's ``extra['rtl']`` (:func:`.systems.hub.run_hub`)."""
    return sorted({int(c["gpu"]) for c in er.results["hub"].extra.get("rtl", []) if c.get("unit") is None})


def shown_gpus(er, max_gpus: int | None = 3) -> list:
    """The GPUs drawn in the per-system panels: all of them up to ``max_gpus``, else the
    RTL ones, the GPUs that end last in the most systems (hub first), then the lowest
    numbers. Their tracks stay thick enough to read; the bars cover every GPU."""
    G = er.layer.G
    if max_gpus is None or G <= max_gpus:
        return list(range(G))
    crit = [int(np.argmax(er.results["hub"].gpu_end))]
    votes = [int(np.argmax(r.gpu_end)) for r in er.results.values()]
    crit += sorted(set(votes), key=lambda g: (-votes.count(g), g))
    pick = []
    for g in rtl_gpus(er) + crit + list(range(G)):
        if g not in pick and len(pick) < max(max_gpus, len(rtl_gpus(er))):
            pick.append(g)
    return sorted(pick)


def system_tracks(r) -> tuple:
    """The tracks a system uses (its phases' and its ready markers'), in TRACKS order."""
    used = {p.track for p in r.phases} | {m[1] for m in r.markers}
    return tuple(t for t in TRACKS if t in used)


def _track_rows(gpus, tracks) -> dict:
    """(gpu, track) -> y of the track's bottom; the first GPU on top."""
    nt, n = len(tracks), len(gpus)
    return {(g, t): (n - 1 - i) * (nt + GPU_GAP) + (nt - 1 - j)
            for i, g in enumerate(gpus) for j, t in enumerate(tracks)}


def _panel_height(n_gpus: int, n_tracks: int) -> float:
    """Inches for a system panel: tracks keep TRACK_IN whatever the figure holds."""
    return TRACK_IN * (n_gpus * (n_tracks + GPU_GAP) - GPU_GAP + 0.4)


def _draw_phases(ax, r, rows: dict) -> None:
    """One bar per phase, coloured by kind; GEMM passes edged white so each pass shows."""
    spans: dict = {}
    for p in r.phases:
        if (p.gpu, p.track) in rows:
            key = (rows[(p.gpu, p.track)], phase_kind(p.name), p.name == "shared expert")
            spans.setdefault(key, []).append((p.start, p.end - p.start))
    for (y, kind, shared), lst in spans.items():
        ax.broken_barh(lst, (y + 0.08, 0.84), facecolors=KIND_COLORS[kind],
                       edgecolors="white" if kind == GEMM else "none", linewidth=0.5,
                       hatch="////" if shared else None)


def _draw_markers(ax, r, rows: dict) -> None:
    """Tile/block-ready flags: black ticks in the upper half of their track, so that
    the bar under them still shows where they stream densely."""
    mk = [(rows[(g, tr)], t) for g, tr, t in r.markers if (g, tr) in rows]
    if mk:
        y, t = np.array(mk).T
        ax.vlines(t, y + 0.45, y + 0.95, color="k", lw=0.6, zorder=3)


def _mark_rtl(ax, rows: dict, rtl) -> None:
    """A red band behind the tracks of each GPU whose hub ran as RTL."""
    for g in rtl:
        ys = [y for (gg, _), y in rows.items() if gg == g]
        if ys:
            ax.axhspan(min(ys) - 0.25, max(ys) + 1.25, color=RTL_COLOR, alpha=0.10, lw=0,
                       zorder=0)


def gpu_labels(gpus, rtl=()) -> list:
    """Y labels of a system panel: the RTL GPUs say so (the hub that ran as Verilog)."""
    return [f"GPU {g}\nRTL hub" if g in rtl else f"GPU {g}" for g in gpus]


def _label_gpus(ax, gpus, tracks, rows, rtl) -> None:
    """GPU names left of the full-layer column, the RTL ones in bold red."""
    ys = [np.mean([rows[(g, t)] for t in tracks]) + 0.5 for g in gpus]
    ax.set_yticks(ys, gpu_labels(gpus, rtl), fontsize=8)
    for lab, g in zip(ax.get_yticklabels(), gpus):
        if g in rtl:
            lab.set_color(RTL_COLOR)
            lab.set_fontweight("bold")


def _label_tracks(ax, tracks, rows) -> None:
    """Track names on the right of the zoom column."""
    ys = sorted((y + 0.5, TRACK_LABEL[t]) for (g, t), y in rows.items())
    ax.yaxis.tick_right()
    ax.set_yticks([y for y, _ in ys], [t for _, t in ys], fontsize=6)
    ax.tick_params(axis="y", length=0, pad=2)


def _system_panels(ax_full, ax_zoom, r, gpus, rtl, hub_us, tmax, tz) -> None:
    """One system: the whole layer (left) and its start (right), same tracks."""
    tracks = system_tracks(r)
    rows = _track_rows(gpus, tracks)
    top = max(rows.values()) + 1.2
    for ax, xmax in ((ax_full, tmax * 1.02), (ax_zoom, tz)):
        _mark_rtl(ax, rows, rtl)
        _draw_phases(ax, r, rows)
        _draw_markers(ax, r, rows)
        ax.axvline(r.latency_us, color="k", lw=1.1, ls="--")
        if r.name != "hub":
            ax.axvline(hub_us, color=HUB_END_COLOR, lw=1.4, ls=":")
        ax.set_xlim(0, xmax)
        ax.set_ylim(-0.2, top)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7, pad=1)
    _label_gpus(ax_full, gpus, tracks, rows, rtl)
    _label_tracks(ax_zoom, tracks, rows)
    rel = "" if r.name == "hub" else f", {r.latency_us / hub_us:.2f}× the hub's time"
    ax_full.set_title(f"{r.name}: {r.label}  —  layer {_fmt_us(r.latency_us)}{rel}",
                      fontsize=9, loc="left", pad=3,
                      fontweight="bold" if r.name == "hub" else "normal")


_IDLE_LOOK = {IDLE: {"hatch": "xxxx", "edgecolor": "#BBBBBB", "lw": 0}}


def _bar_note(name: str, lat: float, hub_us: float) -> str:
    """The words at a bar's end: its latency and the hub's speedup over it."""
    if name == "hub":
        return f"{_fmt_us(lat)}  MoE-Hub"
    if name == "ideal":
        return f"{_fmt_us(lat)}  bound (hub at {hub_us / lat:.2f}×)"
    sp = lat / hub_us
    verdict = "faster" if sp >= 1.005 else "(slower)" if sp <= 0.995 else "(a tie)"
    return f"{_fmt_us(lat)}  hub {sp:.2f}× {verdict}"


def _bar_panel(ax, er) -> None:
    """Stacked bars: each system's layer time split by phase kind on its critical GPU,
    the hub's speedup over it written at the bar's end."""
    names = list(er.results)
    hub_us = er.latency("hub")
    labels = []
    for i, name in enumerate(names):
        r, y = er.results[name], len(names) - 1 - i
        c, parts = critical_breakdown(r)
        left = 0.0
        for kind in BAR_KINDS:
            if parts[kind] > 0:
                ax.barh(y, parts[kind], left=left, height=0.68, color=KIND_COLORS[kind],
                        **_IDLE_LOOK.get(kind, {"lw": 0}))
                left += parts[kind]
        ax.text(left + 0.01 * hub_us, y, _bar_note(name, r.latency_us, hub_us),
                va="center", fontsize=8, fontweight="bold" if name == "hub" else "normal")
        labels.append((y, f"{name} (GPU {c})"))
    ax.axvline(hub_us, color=HUB_END_COLOR, lw=1.4, ls=":")
    ax.set_yticks(*zip(*labels), fontsize=8)
    ax.set_xlim(0, max(r.latency_us for r in er.results.values()) * 1.36)
    ax.set_xlabel(f"layer time ({US}) on each system's critical GPU (in brackets); "
                  "overlapped work counted once,\nin the order GEMM, gate/reduce, layout, "
                  "dispatch, combine, hub, sync; the rest idle", fontsize=7.5)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title("Where the layer time goes, and the hub's speedup", fontsize=10, loc="left")


def first_gemm_starts(er, gpu: int) -> dict:
    """system -> when its first routed expert GEMM starts on ``gpu`` (None: never)."""
    out = {}
    for name, r in er.results.items():
        ts = [p.start for p in r.phases if p.gpu == gpu and p.name == "expert GEMM"]
        out[name] = min(ts) if ts else None
    return out


def hub_zoom_window(er, gpu: int, first_tiles: int = 8) -> float:
    """End of the zoom on the hub's first tiles: 1.5 x the later of its first routed GEMM
    pass and its ``first_tiles``-th tile flag on ``gpu`` (capped at the layer)."""
    hub = er.results["hub"]
    flags = sorted(t for g, tr, t in hub.markers if g == gpu and tr == "hub")
    t_gemm = first_gemm_starts(er, gpu)["hub"]
    t_flag = flags[min(first_tiles, len(flags)) - 1] if flags else 0.0
    end = 1.5 * max(t_gemm or 0.0, t_flag)
    return min(hub.latency_us, end) if end > 0 else hub.latency_us


ZOOM_ROWS = ((("control", "send"), "gate, sends"), (("hub",), "rows in,\ntile flags"),
             (("gemm",), "expert GEMM\npasses"), (("combine",), "combine out"))
ZOOM_BASE = 2.0      #: rows 0..2 of the zoom panel: every system's first expert GEMM


def _zoom_tracks(ax, hub, gpu: int, tz: float) -> list:
    """The hub's tracks of one GPU that start inside the window, stacked up from
    ZOOM_BASE, each with its end written at the right edge when it runs on; returns
    [(y, label)] of the rows drawn."""
    used = [(tracks, lab) for tracks, lab in ZOOM_ROWS
            if any(p.gpu == gpu and p.track in tracks and p.start < tz for p in hub.phases)]
    ticks = []
    for i, (tracks, lab) in enumerate(used):
        y = ZOOM_BASE + len(used) - 1 - i
        rows = {(gpu, t): y for t in tracks}
        _draw_phases(ax, hub, rows)
        _draw_markers(ax, hub, rows)
        ends = [p.end for p in hub.phases if p.gpu == gpu and p.track in tracks
                and p.start < tz < p.end]
        if ends:
            ax.text(tz * 0.995, y + 0.5, f"until {_fmt_us(max(ends))} →", ha="right",
                    va="center", fontsize=7, bbox=dict(fc="white", ec="none", alpha=0.8, pad=1))
        ticks.append((y + 0.5, lab))
    return ticks


def _zoom_first_gemms(ax, er, gpu: int, tz: float) -> list:
    """Rows 0..2: one marker per system where its first expert GEMM starts on this GPU,
    names alternately above and below; returns the starts after the window."""
    later, taken = [], []
    starts = sorted((t, n) for n, t in first_gemm_starts(er, gpu).items() if t is not None)
    for t, name in starts:
        if t > tz:
            later.append(f"{name} {_fmt_us(t)}")
            continue
        st = _style(name)
        ax.plot([t], [1.0], ls="", marker=st["marker"] or "P", ms=9 if name == "hub" else 6,
                color=st["color"], mec="k", mew=0.5, zorder=4)
        y = _free_level(taken, t, 0.012 * tz * (len(name) + 2))
        ax.text(t, y, name, ha="center", va="bottom" if y > 1 else "top", fontsize=7,
                fontweight="bold" if name == "hub" else "normal")
    return later


def _free_level(taken: list, x: float, width: float) -> float:
    """The first label height (above, below, further above, further below the marker
    row) where a label of ``width`` centred at ``x`` overlaps none already placed."""
    for y in (1.3, 0.7, 1.62, 0.38):
        if all(yy != y or abs(xx - x) > (w + width) / 2 for xx, yy, w in taken):
            break
    taken.append((x, y, width))
    return y


def _zoom_title(er, gpu: int, rtl) -> str:
    """The zoom's point in words: how long before its last row the hub's GEMMs start."""
    hub = er.results["hub"]
    t_gemm = first_gemm_starts(er, gpu)["hub"]
    rows_end = max([p.end for p in hub.phases if p.gpu == gpu and p.name == "hub"] or [0.0])
    who = f"GPU {gpu}" + (" (RTL hub)" if gpu in rtl else "")
    if t_gemm is None:
        return f"MoE-Hub's first tiles on {who}: no routed expert GEMM"
    lead = rows_end - t_gemm
    when = (f"{_fmt_us(lead)} before its last row arrives" if lead > 0
            else f"{_fmt_us(-lead)} after its last row arrived")
    return (f"MoE-Hub's first tiles on {who}:\nits expert GEMMs start at "
            f"{t_gemm:,.1f} {US}, {when}")


def _hub_zoom_panel(ax, er, gpu: int, rtl) -> None:
    """The hub's first tiles on one GPU: tile flags arriving while the sends still run,
    the GEMM passes they start, and when every system's first expert GEMM starts."""
    tz = hub_zoom_window(er, gpu)
    ticks = _zoom_tracks(ax, er.results["hub"], gpu, tz) + [(1.0, "first expert\nGEMM starts")]
    top = ZOOM_BASE + len(ticks) - 1
    if gpu in rtl:
        ax.axhspan(ZOOM_BASE, top, color=RTL_COLOR, alpha=0.08, lw=0, zorder=0)
    later = _zoom_first_gemms(ax, er, gpu, tz)
    ax.set_xlim(0, tz)
    ax.set_ylim(0, top + 0.1)
    ax.set_yticks(*zip(*ticks), fontsize=7)
    ax.axhline(ZOOM_BASE, color="0.6", lw=0.6)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=7)
    note = f"\nfirst expert GEMM after this window: {', '.join(later)}" if later else ""
    ax.set_xlabel(f"time since the layer started ({US}); black ticks: tile flags{note}",
                  fontsize=7.5)
    ax.set_title(_zoom_title(er, gpu, rtl), fontsize=9.5, loc="left")


# --------------------------------------------------------------- timeline: the figure
HEAD_IN, TOP_IN, TOP_GAP_IN, TITLE_IN, GAP_IN, FOOT_IN = 1.3, 3.0, 0.85, 0.3, 0.3, 0.45
FULL_X, ZOOM_X = (0.06, 0.585), (0.605, 0.945)


def _figure_axes(er, gpus):
    """A figure with the bar and zoom panels on top and two axes per system below, laid
    out in inches so tracks keep their height whatever the number of systems."""
    names = list(er.results)
    heights = [_panel_height(len(gpus), len(system_tracks(er.results[n]))) for n in names]
    H = HEAD_IN + TOP_IN + TOP_GAP_IN + sum(h + TITLE_IN + GAP_IN for h in heights) + FOOT_IN
    fig = plt.figure(figsize=(FIG_W, H))

    def rect(x, top_in, h_in):
        return [x[0], 1 - (top_in + h_in) / H, x[1] - x[0], h_in / H]

    ax_bar = fig.add_axes(rect((0.085, 0.50), HEAD_IN, TOP_IN))
    ax_zoom = fig.add_axes(rect((0.60, 0.985), HEAD_IN, TOP_IN))
    y, pairs = HEAD_IN + TOP_IN + TOP_GAP_IN, []
    for h in heights:
        y += TITLE_IN
        a = fig.add_axes(rect(FULL_X, y, h))
        pairs.append((a, fig.add_axes(rect(ZOOM_X, y, h))))
        y += h + GAP_IN
    return fig, ax_bar, ax_zoom, pairs, H


def _start_window(er) -> float:
    """End of the right column: every system's sends and receives have ended (x1.08)."""
    res = er.results.values()
    tmax = max(r.latency_us for r in res)
    ends = [p.end for r in res for p in r.phases if p.track in ("send", "hub")]
    return min(tmax, 1.08 * max(ends + [0.02 * tmax]))


def _legend(fig, er, rtl, H) -> None:
    """One legend for the figure: the phase kinds present, the markers and lines."""
    used = {phase_kind(p.name) for r in er.results.values() for p in r.phases}
    h = [Patch(color=KIND_COLORS[k], label=KIND_LABEL[k]) for k in KINDS + (OTHER,) if k in used]
    h.append(Patch(facecolor=KIND_COLORS[IDLE], hatch="xxxx", edgecolor="#BBBBBB",
                   label=KIND_LABEL[IDLE]))
    h += [Line2D([], [], color="k", marker="|", ls="", ms=9, label="tile / block ready flag"),
          Line2D([], [], color="k", ls="--", label="layer end"),
          Line2D([], [], color=HUB_END_COLOR, ls=":", lw=1.4, label="hub's layer end")]
    if rtl:
        h.append(Patch(color=RTL_COLOR, alpha=0.25, label="GPU whose hub ran as RTL"))
    fig.legend(handles=h, loc="upper center", ncol=6, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.38 / H))


def build_timeline(er, max_gpus: int | None = 3):
    """The timeline figure (see the module docstring); returns the matplotlib Figure."""
    gpus, rtl = shown_gpus(er, max_gpus), rtl_gpus(er)
    fig, ax_bar, ax_zoom, pairs, H = _figure_axes(er, gpus)
    _bar_panel(ax_bar, er)
    _hub_zoom_panel(ax_zoom, er, rtl[0] if rtl else int(np.argmax(er.results["hub"].gpu_end)),
                    rtl)
    tmax, tz = max(r.latency_us for r in er.results.values()), _start_window(er)
    hub_us = er.latency("hub")
    for (a, b), (name, r) in zip(pairs, er.results.items()):
        _system_panels(a, b, r, gpus, rtl if name == "hub" else (), hub_us, tmax, tz)
    pairs[-1][0].set_xlabel(f"time since the layer started ({US})", fontsize=8)
    pairs[-1][1].set_xlabel(f"the first {_fmt_us(tz)} (all sends and receives)", fontsize=8)
    L = er.layer
    shown = ("1 GPU" if L.G == 1 else f"all {L.G} GPUs" if len(gpus) == L.G
             else f"GPUs {', '.join(map(str, gpus))} of {L.G}")
    fig.suptitle(f"{er.model.name} on {er.system.name}: {L.T} tokens/GPU, top-{L.k}, "
                 f"{er.workload.routing} routing, hub send order {er.hub_order}.  "
                 f"Timelines: {shown}, tracks {', '.join(TRACK_LABEL[t] for t in TRACKS)}",
                 fontsize=10.5, y=1 - 0.12 / H)
    _legend(fig, er, rtl, H)
    return fig


def timeline_figure(er, path: Path, *, max_gpus: int | None = 3) -> Path:
    """Writes the timeline of an ExperimentResult as ``path`` (PNG) and the SVG beside
    it; ``max_gpus`` GPUs per system panel (None: all). Returns ``path``."""
    return _save_both(build_timeline(er, max_gpus), path, dpi=DPI)


# ---------------------------------------------------------------------------- sweeps
IDEAL_LABEL = "ideal (communication free: gate, expert GEMMs, reduce)"
FASTEST_LABEL = "fastest system at that point"


def normalise(rows: list, x_key: str, group_key: str | None = None) -> tuple[list, str]:
    """Copies of ``rows`` with ``vs_ideal`` = ``layer_us`` / the reference latency of the
    same point (same ``group_key`` and ``x_key``), and the reference's label. The
    reference is the ``ideal`` system (communication free on the same cost model, a
    lower bound) where every point has one, else the fastest system of each point."""
    def key(r):
        return (r[group_key] if group_key else None, r[x_key])
    ideal = {key(r): r["layer_us"] for r in rows if r["system"] == "ideal"}
    if {key(r) for r in rows} <= set(ideal):
        ref, label = ideal, IDEAL_LABEL
    else:
        ref, label = {}, FASTEST_LABEL
        for r in rows:
            ref[key(r)] = min(ref.get(key(r), np.inf), r["layer_us"])
    return [dict(r, vs_ideal=r["layer_us"] / ref[key(r)]) for r in rows], label


def _systems(rows: list) -> list:
    """The systems in the rows, in the fixed order (the same in every figure)."""
    return [s for s in SYSTEM_ORDER if any(r["system"] == s for r in rows)] + sorted(
        {r["system"] for r in rows} - set(SYSTEM_ORDER))


def _series(rows: list, system: str, x_key: str, y_key: str):
    """(xs, ys) of one system, sorted by x."""
    pts = sorted((r[x_key], r[y_key]) for r in rows if r["system"] == system)
    return zip(*pts) if pts else ((), ())


def _norm_panel(ax, sub: list, x_key: str, ref_label: str) -> dict:
    """Latency / reference per system; returns {x: the ideal's own latency} for the
    tick labels (empty when the reference is the fastest system)."""
    for s in _systems(sub):
        x, y = _series(sub, s, x_key, "vs_ideal")
        ax.plot(x, y, label=s, zorder=4 if s == "hub" else 3, **_style(s))
    ref = "ideal" if ref_label == IDEAL_LABEL else None
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel(f"layer latency / {'ideal' if ref else 'fastest'}", fontsize=9)
    ax.set_title(f"latency relative to {ref_label}", fontsize=9)
    return dict(zip(*_series(sub, ref, x_key, "layer_us"))) if ref else {}


def _speedup_panel(ax, sub: list, x_key: str) -> None:
    """Baseline latency / hub latency; below 1 (shaded) the hub is slower."""
    for s in _systems(sub):
        if s == "hub":
            continue
        x, y = _series(sub, s, x_key, "hub_speedup")
        lab = "ideal / hub (bound)" if s == "ideal" else f"{s} / hub"
        ax.plot(x, y, label=lab, **_style(s))
    ax.axhline(1.0, color=SYSTEM_COLORS["hub"], lw=1.4, label="hub")
    lo = min([r["hub_speedup"] for r in sub] + [0.95])
    ax.axhspan(min(lo, 0.95) * 0.98, 1.0, color="#f2d7d5", alpha=0.5, lw=0, zorder=0)
    ax.set_ylabel("speedup of MoE-Hub (baseline / hub)", fontsize=9)
    ax.set_title("hub speedup (shaded: the hub is slower)", fontsize=9)


def speedup_plot(rows: list, x_key: str, path: Path, title: str, xlabel: str,
                 logx: bool = True, group_key: str | None = None) -> Path:
    """rows: dicts with x_key, 'system', 'hub_speedup', 'layer_us' (and group_key). Left:
    latency over the ideal's (absolute latencies of all systems lie on top of each other
    on a log axis); right: the hub's speedup. PNG at ``path``, SVG beside it."""
    rows, ref_label = normalise(rows, x_key, group_key)
    groups = sorted({r[group_key] for r in rows}) if group_key else [None]
    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 4.2 * len(groups)), squeeze=False)
    for gi, grp in enumerate(groups):
        sub = [r for r in rows if group_key is None or r[group_key] == grp]
        ax1, ax2 = axes[gi]
        ideal_us = _norm_panel(ax1, sub, x_key, ref_label)
        _speedup_panel(ax2, sub, x_key)
        xs = sorted({r[x_key] for r in sub})
        for ax in (ax1, ax2):
            if logx:
                ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [f"{x:g}" + (f"\nideal {_fmt_us(ideal_us[x])}"
                                           if ax is ax1 and x in ideal_us else "") for x in xs])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.grid(alpha=0.3)
            ax.set_xlabel(xlabel)
            if grp is not None:
                ax.set_title(f"{ax.get_title()} - {grp}", fontsize=9)
        if gi == 0:
            ax1.legend(fontsize=8, ncol=2)
            ax2.legend(fontsize=8, ncol=2)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _save_both(fig, path)


def _grouped_bars(ax, rows: list, models: list, systems: list, key: str) -> None:
    """One bar per (model, system), colour and hatch per system, drawn from 1 (parity,
    or the ideal) up or down so that differences of a few percent show; value on it."""
    w = 0.84 / len(systems)
    for i, s in enumerate(systems):
        vals = np.array([next((r[key] for r in rows if r["model"] == m and r["system"] == s),
                              np.nan) for m in models])
        x = np.arange(len(models)) + (i - (len(systems) - 1) / 2) * w
        bars = ax.bar(x, vals - 1.0, w, bottom=1.0, color=SYSTEM_COLORS.get(s, "#777"),
                      label=s, hatch=SYSTEM_HATCH.get(s, ""), edgecolor="white", lw=0.4)
        ax.bar_label(bars, labels=[f"{v:.2f}" if np.isfinite(v) else "" for v in vals],
                     fontsize=6.5, rotation=90, padding=2,
                     fontweight="bold" if s == "hub" else "normal")
    ax.axhline(1.0, color="k", lw=0.9)
    ax.set_xticks(np.arange(len(models)), models, fontsize=8.5)
    ax.set_xlim(-0.55, len(models) - 0.45)
    lo, hi = np.nanmin([r[key] for r in rows] + [1.0]), np.nanmax([r[key] for r in rows] + [1.0])
    pad = 0.12 * (hi - lo) + 0.02
    ax.set_ylim(lo - pad, hi + pad)
    ax.grid(axis="y", alpha=0.3)


def model_bar_plot(rows: list, path: Path, title: str) -> Path:
    """Per model: every system's layer latency over the ideal's, and the hub's speedup
    over each baseline (MoE layer, end to end). PNG at ``path``, SVG beside it."""
    rows, ref_label = normalise(rows, "model")
    models = list(dict.fromkeys(r["model"] for r in rows))
    systems = [s for s in _systems(rows) if s != "ideal"]
    base = [s for s in systems if s != "hub"]
    fig, axes = plt.subplots(3, 1, figsize=(max(9.0, 1.5 * len(models) + 2), 11.5))
    ref = "ideal" if ref_label == IDEAL_LABEL else "fastest"
    _grouped_bars(axes[0], [r for r in rows if r["system"] != "ideal"], models, systems,
                  "vs_ideal")
    axes[0].set_ylabel(f"layer latency / {ref}")
    axes[0].set_title(f"MoE layer latency relative to {ref_label} (1 = {ref})", fontsize=9.5)
    for ax, key, lab in ((axes[1], "hub_speedup", "MoE layer"),
                         (axes[2], "e2e_hub_speedup", "end to end")):
        _grouped_bars(ax, [r for r in rows if r["system"] in base], models, base, key)
        ax.set_ylabel(f"baseline / hub, {lab}")
        ax.set_title(f"speedup of MoE-Hub over each baseline, {lab} (above 1: the hub is "
                     "faster)", fontsize=9.5)
    handles = [Patch(facecolor=SYSTEM_COLORS.get(s, "#777"), hatch=SYSTEM_HATCH.get(s, ""),
                     edgecolor="white", label=s) for s in systems]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=9,
               frameon=False, bbox_to_anchor=(0.5, 0.965))
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return _save_both(fig, path)


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
            from .config import load_system_config
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
    from .config import load_system_config
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
    from .config import load_system_config
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


# ---------------------------------------------------------------------------- headline map
def _heat_labels(rows: list, ratios: set) -> list:
    """Each row's line label: its system config, with the compute-to-link ratio when the
    map has more than one."""
    return [r["system_config"] + (f" ×{r['compute_link_ratio']:g} compute" if len(ratios) > 1
                                  else "") for r in rows]


def headline_heatmap(rows: list, path: Path, key: str = "speedup_layer",
                     short: dict | None = None, skipped: list = (), title: str = "",
                     variant_short=None) -> Path:
    """"Where the hub pays off": the hub's speedup ``key`` by system (rows) x tokens per
    GPU (columns), one panel per model; a diverging colour centred at 1.0 (green: the hub
    wins, purple: it loses; log scale, so 2x and 0.5x are equally strong), the value and the
    baseline it is measured against (``short``: name -> a letter or two) in each cell, and
    the hub variant when it is not v1 (``variant_short``: its abbreviation).
    ``skipped``: rows (the same keys, no values) of points not run, hatched "skip"."""
    from matplotlib.colors import LogNorm
    short = short or {}
    every = [*rows, *skipped]
    ratios = {r["compute_link_ratio"] for r in every}
    models = list(dict.fromkeys(r["model"] for r in every))
    ylabels = list(dict.fromkeys(_heat_labels(every, ratios)))
    toks = sorted({r["tokens_per_gpu"] for r in every})
    vals = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    span = max([1.25, *(max(v, 1 / v) for v in vals if v > 0)])
    norm = LogNorm(vmin=1 / span, vmax=span)
    fig, axes = plt.subplots(1, len(models), squeeze=False, layout="constrained",
                             figsize=(max(6.0, 3.2 + (0.7 * len(toks) + 0.4) * len(models)),
                                      max(3.0, 1.6 + 0.45 * len(ylabels))))
    im = None
    for ax, model in zip(axes[0], models):
        im = _heat_panel(ax, [r for r in rows if r["model"] == model],
                         [r for r in skipped if r["model"] == model], ratios, ylabels, toks,
                         key, norm, short, variant_short or (lambda v: v))
        ax.set_title(model, fontsize=10)
    for ax in axes[0][1:]:
        ax.set_yticklabels([])
    cb = fig.colorbar(im, ax=list(axes[0]), shrink=0.95, pad=0.02)
    cb.set_label("baseline / hub latency\n(> 1: the hub wins)", fontsize=8)
    steps = ((0.8, 0.9, 1.0, 1.1, 1.25, 1.5) if span <= 1.6 else
             (0.5, 0.67, 1.0, 1.5, 2, 3) if span <= 3.2 else
             (0.125, 0.25, 0.5, 1.0, 2, 4, 8, 16))
    ticks = [t for t in steps if 1 / span <= t <= span]
    cb.set_ticks(ticks, labels=[f"{t:g}" for t in ticks], minor=False)
    cb.ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    if title:
        fig.suptitle(title, fontsize=10)
    return _save_both(fig, path)


def _heat_panel(ax, rows, skipped, ratios, ylabels, toks, key, norm, short, vshort):
    """One model's cells; returns the image (for the colour bar)."""
    grid = np.full((len(ylabels), len(toks)), np.nan)
    text = {}
    for r, y in zip(rows, _heat_labels(rows, ratios)):
        v = r.get(key)
        if v in (None, ""):
            continue
        i, j = ylabels.index(y), toks.index(r["tokens_per_gpu"])
        grid[i, j] = float(v)
        base = r.get("paper_baseline" if key == "speedup_paper" else "best_baseline") or ""
        variant = r.get("hub_variant", "v1")
        text[i, j] = (f"{float(v):.2f}\n{short.get(base, base)}"
                      + ("" if variant == "v1" else f" {vshort(variant)}"))
    cmap = plt.get_cmap("PRGn").with_extremes(bad="#e6e6e6")   # not run: grey, not 1.0's white
    im = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
    for (i, j), t in text.items():
        dark = abs(np.log(grid[i, j])) > 0.6 * np.log(norm.vmax)
        ax.text(j, i, t, ha="center", va="center", fontsize=7, linespacing=1.0,
                color="white" if dark else "black")
    for r, y in zip(skipped, _heat_labels(skipped, ratios)):
        i, j = ylabels.index(y), toks.index(r["tokens_per_gpu"])
        ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                                  hatch="///", edgecolor="#cccccc", lw=0))
        ax.text(j, i, "skip", ha="center", va="center", fontsize=6.5, color="#777777")
        text[i, j] = "skip"
    for i in range(len(ylabels)):
        for j in range(len(toks)):
            if (i, j) not in text:
                ax.text(j, i, "—", ha="center", va="center", fontsize=7, color="#999999")
    ax.set_xticks(range(len(toks)), [str(t) for t in toks], fontsize=7.5)
    ax.set_yticks(range(len(ylabels)), ylabels, fontsize=8)
    ax.set_xlabel("tokens per GPU")
    ax.set_xticks(np.arange(-0.5, len(toks)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(ylabels)), minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    ax.tick_params(which="minor", length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    return im
