"""``moehub headline``: the best hub against the best software baseline over the whole
map: 8-GPU boxes, NVL72 and multi-node systems, decode to prefill sizes, and a
compute-to-link ratio axis.

For every point of the grid (:mod:`.headline_grid`: system config x model x tokens per
GPU x compute-to-link ratio) the software baselines and every hub variant (protocol v1
and the protocol-v2 features, :mod:`.systems.hub`) run on the same routing, on Dask,
each run cached by content (:mod:`.headline_eval`). The table's hub is the fastest variant
and says which one it was; the baseline is the fastest of today's software and is named;
beside it, the speedup against the fastest of the papers' kind of baseline where such
systems are registered (:mod:`.headline_pick`). Where the hub loses, the report says why.

Writes ``headline.csv``, ``headline.md`` (the map as a table and every point), ``headline.json``
(the rows and the run's record: command, commit, date, machine, load), ``headline.png``
and ``.svg`` (the heat map "where the hub pays off"), ``run.json``; with ``--timelines``
the timelines of each system's best and worst point.
"""
from __future__ import annotations

import csv
import json
import os
import platform
import socket
import time
from pathlib import Path

from ..paths import HELP, output_dir
from ..argcheck import UsageError, int_at_least
from . import headline_grid as grid
from .headline_eval import HUB, SYNCHRONOUS, applies, evaluate, layer_facts, summary
from .headline_pick import baseline_sets, row, why as why_from

#: the short names of the table's cells (a baseline not listed is written out)
SHORT = {"bulk": "B", "comet": "C", "deepep": "D", "deepep_ll": "LL", "fused": "F", "hybridep": "H"}
VARIANT_SHORT = {"multicast": "mc", "early_counts": "ec", "paged": "pg", "relay": "rl",
                 "reduce": "rd"}
#: columns of headline.csv first (every run's latency follows)
COLUMNS = ("system_config", "system", "gpus", "model", "tokens_per_gpu", "compute_link_ratio",
           "hub_us", "hub_variant", "best_baseline", "best_us", "speedup_layer", "speedup_e2e",
           "paper_baseline", "paper_us", "speedup_paper", "ideal_us")


# ---------------------------------------------------------------------------- one experiment
def why(er, best: str) -> str:
    """Why the hub of ``er`` (an :class:`~.experiment.ExperimentResult`) is slower than
    ``best`` (empty when it is not): :func:`.headline_pick.why` on its two timelines."""
    from .headline_grid import variant_name
    L = er.layer
    hub = summary(er.results["hub"], L, er.e2e["hub"])
    base = summary(er.results[best], L, er.e2e[best])
    variant = variant_name(er.hub_features)
    return why_from(hub, base, best, layer_facts(L), variant)


def point_row(er) -> dict:
    """One experiment's hub against its best software baseline (``moehub explore``'s
    co-simulated metrics)."""
    today, _ = baseline_sets()
    base = {n: r.latency_us for n, r in er.results.items() if n in today}
    best = min(base, key=base.get)
    hub = er.latency("hub")
    return {"system_config": er.system.name, "gpus": er.layer.G, "model": er.model.name,
            "tokens_per_gpu": er.layer.T, "hub_us": hub, "best_baseline": best,
            "best_us": base[best], "speedup_layer": base[best] / hub,
            "speedup_e2e": er.e2e[best] / er.e2e["hub"], "ideal_us": er.latency("ideal"),
            **{f"{n}_us": v for n, v in base.items()}, "why_hub_loses": why(er, best)}


# ---------------------------------------------------------------------------- tables
def _short_variant(v: str) -> str:
    return "v1" if v == "v1" else "+".join(VARIANT_SHORT.get(f, f) for f in v.split("+"))


def _line_key(r: dict) -> tuple:
    return r["system_config"], r["model"], r["compute_link_ratio"]


def pivot_md(rows: list, skipped: list = ()) -> str:
    """One line per (system, model, compute-to-link ratio), one column per tokens/GPU:
    the best hub's speedup over the best baseline of today (its letter) and, where the
    papers' kind of baseline ran, over that one; the hub variant in brackets."""
    toks = sorted({r["tokens_per_gpu"] for r in [*rows, *skipped]})
    out = ["| system | model | compute × | " + " | ".join(f"{t} tok/GPU" for t in toks) + " |",
           "|---|---|---|" + "---|" * len(toks)]
    skip = {(*_line_key(s), s["tokens_per_gpu"]) for s in skipped}
    for key in dict.fromkeys(_line_key(r) for r in [*rows, *skipped]):
        cells = []
        for t in toks:
            r = next((r for r in rows if _line_key(r) == key and r["tokens_per_gpu"] == t), None)
            cells.append(_cell(r) if r else ("skip" if (*key, t) in skip else "—"))
        out.append(f"| {key[0]} | {key[1]} | {key[2]:g} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def unsettled(r: dict) -> bool:
    """Whether the cell's hub or best baseline stopped at the pass limit unconverged."""
    bad = set(filter(None, str(r.get("not_converged") or "").split(",")))
    return bool(bad & {r["best_baseline"], HUB + r["hub_variant"]})


def _cell(r: dict) -> str:
    text = f"{float(r['speedup_layer']):.2f} {SHORT.get(r['best_baseline'], r['best_baseline'])}"
    if r.get("speedup_paper") not in (None, ""):
        p = r["paper_baseline"]
        text += f" / {float(r['speedup_paper']):.2f} {SHORT.get(p, p)}"
    text += f" ({_short_variant(r['hub_variant'])})"
    if not unsettled(r):
        return text
    lo, hi = r.get("speedup_min"), r.get("speedup_max")
    return text + (f" † {float(lo):.2f}–{float(hi):.2f}" if lo not in (None, "") else " †")


def table_md(rows: list) -> str:
    """Every point: the hub's variant and latency, the best baseline, speedups, why the
    hub loses."""
    out = ["| system | model | tokens/GPU | compute × | hub variant | hub µs | best baseline | "
           "its µs | hub speedup (layer) | (end to end) | papers' kind | its speedup | "
           "why the hub loses |", "|---" * 13 + "|"]
    for r in rows:
        paper = (f"{r['paper_baseline']} | {float(r['speedup_paper']):.2f}x"
                 if r.get("paper_baseline") else "— | —")
        out.append(f"| {r['system_config']} | {r['model']} | {r['tokens_per_gpu']} | "
                   f"{r['compute_link_ratio']:g} | {r['hub_variant']} | {r['hub_us']:.1f} | "
                   f"{r['best_baseline']} | {r['best_us']:.1f} | {r['speedup_layer']:.2f}x | "
                   f"{r['speedup_e2e']:.2f}x | {paper} | {r['why_hub_loses']} |")
    return "\n".join(out)


def legend(today, paper, variants) -> str:
    letters = ", ".join(f"{SHORT[n]} {n}" for n in (*today, *paper) if n in SHORT)
    return (f"Cells: the best hub's speedup over the best of today's software baselines "
            f"({', '.join(today)}) and its letter; after '/', over the fastest of the papers' "
            f"kind ({', '.join(paper) or 'none registered'}); in brackets the hub variant that "
            f"was fastest (of {', '.join(variants)}; ec early counts, mc multicast, pg paged, "
            f"rl relay hubs, rd reduce on combine; relay variants run only across nodes). "
            f"Letters: {letters}. skip: not run (more routed rows than --max-rows, or the "
            f"model's experts do not fit the GPUs; the list below); —: not in the grid; †: the "
            f"hub or the best baseline stopped at the pass limit unconverged (headline.csv, "
            f"not_converged), followed by the speedup's band over their last passes' layer "
            f"times (speedup_min, speedup_max).")


# ---------------------------------------------------------------------------- outputs
def _put(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_csv(rows: list, path: Path) -> None:
    cols = list(dict.fromkeys([*COLUMNS, *(k for r in rows for k in r if k != "why_hub_loses"),
                               "why_hub_loses"]))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def machine() -> dict:
    """Where the run ran and how busy the machine was (the load average: other work on
    the cores stretches every point's wall time)."""
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def write_outputs(out: Path, rows: list, skipped: list, record: dict, figure: bool,
                  md_head: str) -> None:
    from .. import runinfo
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "headline.csv")
    skips = "".join(f"\n* skipped: {s['system_config']} {s['model']} {s['tokens_per_gpu']} "
                    f"tok/GPU (compute ×{s['compute_link_ratio']:g}): {s['reason']}"
                    for s in skipped)
    _put(out / "headline.md", md_head + "\n\n" + pivot_md(rows, skipped) + "\n"
         + skips + "\n\n" + table_md(rows) + "\n")
    rec = runinfo.record(**record, machine_end=machine())
    _put(out / "headline.json", json.dumps({"record": rec, "rows": rows, "skipped": skipped},
                                           indent=1, default=str) + "\n")
    _put(out / "run.json", json.dumps(rec, indent=1, default=str) + "\n")
    if figure and rows:
        from .plots import headline_heatmap
        short = dict(SHORT)
        headline_heatmap(rows, out / "headline.png", short=short, skipped=skipped,
                         variant_short=_short_variant,
                         title="Where the hub pays off: best hub / best software baseline "
                               "(MoE layer)")
        if any(r.get("speedup_paper") not in (None, "") for r in rows):
            headline_heatmap(rows, out / "headline_paper.png", key="speedup_paper",
                             short=short, skipped=skipped, variant_short=_short_variant,
                             title="Best hub / the papers' kind of baseline (MoE layer)")


def write_timelines(rows: list, pts: dict, out: Path) -> None:
    """The timelines of each system's best and worst point, rerun here with the best hub
    variant (every system, :func:`.experiment.run_experiment`)."""
    from .experiment import run_experiment, write_outputs as write_run
    for sname in dict.fromkeys(r["system_config"] for r in rows):
        sub = [r for r in rows if r["system_config"] == sname]
        ends = (max(sub, key=lambda r: r["speedup_layer"]),
                min(sub, key=lambda r: r["speedup_layer"]))
        for r in {r["label"]: r for r in ends}.values():
            p = pts[r["label"]]
            er = run_experiment(p.system, p.model, p.workload,
                                hub_features=grid.parse_variant(r["hub_variant"]))
            name = f"{sname}_{p.model.name}_t{p.tokens}_cl{p.ratio:g}"
            write_run(er, name, out)


# ---------------------------------------------------------------------------- the command
def _names(flag: str, text: str | None, known) -> tuple | None:
    """The systems named by ``flag`` (None: not given; ``none``: an empty tuple)."""
    if text is None:
        return None
    if text.strip() == "none":
        return ()
    names = grid.parse_names(flag, text)
    for n in names:
        if n not in known:
            raise UsageError(flag, n, f"unknown system (known: {', '.join(known)})")
    return names


def plan(args):
    """The checked grid: (points to run, points skipped, runs, today's baselines, the
    papers' kind, variants); every bad value a :class:`UsageError` before any work."""
    from .systems import SYSTEMS
    today, paper = baseline_sets()
    given = _names("--baselines", args.baselines, SYSTEMS)
    if given == ():
        raise UsageError("--baselines", args.baselines, "the hub needs a baseline to be "
                         "measured against")
    today = given or today
    given = _names("--paper-baselines", args.paper_baselines, SYSTEMS)
    paper = paper if given is None else given
    variants = (grid.parse_variants(args.hub_variants) if args.hub_variants
                else grid.DEFAULT_VARIANTS)
    blocks = grid.build_blocks(
        args.grid,
        args.systems and grid.parse_names("--systems", args.systems),
        args.models and grid.parse_names("--models", args.models),
        args.tokens and grid.parse_ints("--tokens", args.tokens),
        args.compute_link_ratio and grid.parse_ratios("--compute-link-ratio",
                                                      args.compute_link_ratio))
    pts = grid.points(blocks, max_points=args.max_points)
    run_pts, skipped = grid.split(pts, args.max_rows)
    runs = tuple(dict.fromkeys([*today, *paper, "ideal", *(HUB + v for v in variants)]))
    return run_pts, skipped, runs, today, paper, variants


def _cost(runs: dict) -> dict:
    """A point's wall and CPU seconds, summed over its runs' records (cached or not): the
    CPU seconds are what sizes a grid on a loaded machine."""
    return {k: round(sum(m.get(k) or 0.0 for m in runs.values()), 3) for k in ("wall_s", "cpu_s")}


def _skip_row(p, reason: str) -> dict:
    return {"system_config": p.system_short, "model": p.model.name, "tokens_per_gpu": p.tokens,
            "compute_link_ratio": p.ratio, "rows": p.rows, "reason": reason}


def cmd_headline(args) -> int:
    t0 = time.monotonic()
    start = machine()
    pts, skipped, runs, today, paper, variants = plan(args)
    if args.scheduler != SYNCHRONOUS:
        from .. import cluster as clusters
        clusters.check(args.scheduler, args.cluster, clusters.parse_options(args.cluster_opt))
    if args.list:
        for p in pts:
            print(f"{p.label}: {p.system.gpus} GPUs, {p.rows:,} rows")
        for p, why in skipped:
            print(f"{p.label}: skipped, {why}")
        return 0
    out = output_dir("results", "headline", out=args.out)
    for p, why in skipped:
        print(f"skip {p.label}: {why}", flush=True)
    from .. import cluster as clusters
    from ..cluster import Cache
    cache = Cache(output_dir("headline", "points"))
    ev = evaluate(pts, runs, cache, scheduler=args.scheduler, cluster=args.cluster,
                  workers=args.workers, options=clusters.parse_options(args.cluster_opt),
                  use_cache=not args.no_cache)
    rows, by_label = _rows(pts, ev, runs, today, paper)
    skip_rows = [_skip_row(p, why) for p, why in skipped]
    axes = any((args.systems, args.models, args.tokens, args.compute_link_ratio))
    record = {"grid": args.grid or ("command line" if axes else "default"), "points": len(pts) + len(skipped),
              "evaluated": ev.evaluated, "cached": ev.cached, "skipped": len(skipped),
              "failed": len(ev.failures), "failures": ev.failures, "runs": list(runs),
              "hub_variants": list(variants), "baselines": list(today),
              "paper_baselines": list(paper), "scheduler": args.scheduler or args.cluster,
              "machine_start": start, "results": str(out),
              "points_cpu_s": round(sum(r["cpu_s"] for r in rows), 1)}
    head = _head(record, len(rows), time.monotonic() - t0) + "\n\n" + legend(today, paper,
                                                                            variants)
    write_outputs(out, rows, skip_rows, record, not args.no_figure, head)
    if args.timelines and rows:
        write_timelines(rows, by_label, out)
    print(pivot_md(rows, skip_rows))
    print(f"{len(rows)} points ({ev.evaluated} evaluated, {ev.cached} cached, {len(skipped)} "
          f"skipped) in {time.monotonic() - t0:.0f} s; table: {out / 'headline.md'} and "
          f"headline.csv" + ("" if args.no_figure else "; figure: headline.png"))
    for label, err in ev.failures:
        print(f"headline: point {label} failed: {err}")
    return 1 if ev.failures else 0


def _rows(pts, ev, runs, today, paper) -> tuple[list, dict]:
    """The table's rows (points with every run done) and their points by label."""
    rows, by_label = [], {}
    for p in pts:
        if {r for r in runs if applies(p, r)} <= set(ev.runs.get(p.label, {})):
            rows.append({**row(p, ev.runs[p.label], ev.facts[p.label], today, paper),
                         "label": p.label, **_cost(ev.runs[p.label])})
            by_label[p.label] = p
    return rows, by_label


def _head(rec: dict, n_rows: int, wall_s: float) -> str:
    """The table's first line: the command, the counts, the time, the machine's load."""
    m = rec["machine_start"]
    return (f"`{' '.join(['moehub', 'headline', *_argv_tail()])}`: {n_rows} points "
            f"({rec['evaluated']} evaluated, {rec['cached']} cached, {rec['skipped']} skipped, "
            f"{rec['failed']} failed) in {wall_s:.0f} s on {m['cpus']} CPUs, load "
            f"{m['load_avg'][0]:.2f} at the start; the points' runs took "
            f"{rec['points_cpu_s']:.0f} CPU s in all (cached ones as recorded).")


def _argv_tail() -> list:
    from ..runinfo import _RUN
    argv = _RUN.get("argv") or []
    return list(argv[2:]) if argv[1:2] == ["headline"] else []


def add_parser(subparsers) -> None:
    from .. import cluster as clusters
    h = subparsers.add_parser(
        "headline", help="the best hub vs the best software baseline over the map: systems x "
        "models x tokens/GPU x compute-to-link ratio, on Dask, cached per point",
        description=__doc__.split("\n\n")[1])
    g = h.add_argument_group("the grid (a preset's axes are replaced by the ones given)")
    g.add_argument("--grid", choices=tuple(grid.PRESETS), default=None,
                   help="a preset grid: default (8-GPU boxes, NVL72, 4- and 8-node H100; 7-18 "
                        "min on 2 cores, idle to loaded; without --grid the axes given replace it "
                        "as one block), full (adds EP128 and EP256: hours, for a cluster) or "
                        "quick (1-3 min on 2 cores)")
    g.add_argument("--quick", action="store_const", const="quick", dest="grid",
                   help="the quick grid (the same as --grid quick)")
    g.add_argument("--systems", default=None, help="system configs (names or YAML paths), "
                   "comma-separated")
    g.add_argument("--models", default=None, help="models, comma-separated")
    g.add_argument("--tokens", default=None, help="tokens per GPU, comma-separated (1 ... 32768)")
    g.add_argument("--compute-link-ratio", default=None, metavar="R1,R2,...",
                   help="compute (peak TFLOP/s) scaled by each factor against the link "
                        "bandwidth (default 1: the system as configured)")
    g.add_argument("--hub-variants", default=None, metavar="V1,V2,...",
                   help=f"hub variants: v1 or protocol-v2 features joined by '+' (default "
                        f"{','.join(grid.DEFAULT_VARIANTS)})")
    g.add_argument("--baselines", default=None, help="today's software baselines whose best "
                   "the hub is measured against (default: the registry's BASELINES)")
    g.add_argument("--paper-baselines", default=None, help="the papers' kind of baselines, "
                   "or none (default: the registry's systems of KIND 'paper')")
    g.add_argument("--max-rows", type=int_at_least(1), default=grid.MAX_ROWS,
                   help=f"skip points with more routed rows (default {grid.MAX_ROWS:,})")
    g.add_argument("--max-points", type=int_at_least(1), default=grid.MAX_POINTS,
                   help=f"refuse a larger grid (default {grid.MAX_POINTS})")
    g.add_argument("--list", action="store_true", help="print the points and exit")
    c = h.add_argument_group("where the points run (Dask, as moehub explore)")
    c.add_argument("--workers", type=int_at_least(1), default=None,
                   help="local worker processes (default one per core)")
    c.add_argument("--scheduler", metavar="tcp://HOST:PORT|synchronous", default=None,
                   help="a running Dask scheduler, or 'synchronous': in this process, no Dask")
    c.add_argument("--cluster", choices=clusters.CLUSTERS, default="local",
                   help=f"local (default), or a dask-jobqueue cluster: {clusters.HPC_PIP}")
    c.add_argument("--cluster-opt", action="append", metavar="KEY=VALUE",
                   help="dask-jobqueue option, repeatable")
    c.add_argument("--no-cache", action="store_true", help="evaluate every run again "
                   "(the cache is rewritten)")
    o = h.add_argument_group("results")
    o.add_argument("--out", default=None, help=f"output folder (default <build>/results/"
                   f"headline; <build> is {HELP}); cache: <build>/headline/points/")
    o.add_argument("--no-figure", action="store_true", help="skip the heat map")
    o.add_argument("--timelines", action="store_true", help="also rerun each system's best "
                   "and worst point and write their timelines")
    h.set_defaults(func=cmd_headline)
