"""``moehub explore``: the design-space exploration command (registered by scripts/cli.py).

Every axis key and value, every point's configuration, the cluster options and the
results folder are checked before the first point runs (exit 2 naming the key and value);
a missing synthesis tool is exit 3, a failed point exit 1 (the others still run and are
cached and written).
"""
from __future__ import annotations

import importlib

from ..paths import HELP
from ..argcheck import UsageError, float_above, int_at_least
from .. import cluster as clusters
from .space import (DEFAULTS, FEATURE_AXES, HUB_AXES, features_text, LAYER_AXES, MAX_POINTS, REFUSED, SYNTH_CHUNKS,
                    SYNTH_DATA_BITS, WORKLOAD_AXES, Spec, load_spec_file, parse_axis, points)

AXES_HELP = "; ".join([*(f"{k}: {d}" for k, (_, d) in HUB_AXES.items()),
                       *(f"{k}: {d}" for k, d in LAYER_AXES.items()),
                       *(f"{k}: {d}" for k, d in WORKLOAD_AXES.items()),
                       *(f"{k}: {d}" for k, d in FEATURE_AXES.items())])

DESCRIPTION = (
    "Explore the hub's design space: every point of a grid over hub parameters and "
    "workloads is synthesized (N5 area, deepest stage in FO4, its verdict at 1.98 GHz) and "
    "co-simulated (the hub's layer speedup over the best software baseline, its receive "
    "memory), on Dask; results are cached per point and the Pareto set (area, speedup, "
    "memory) is marked and drawn. Synthesis uses the synthesis sweep's reduced hub (rows "
    f"cut to {SYNTH_CHUNKS} chunks, a {SYNTH_DATA_BITS}-bit datapath) so that a point "
    "takes minutes; the co-simulation uses the full hub. Co-simulated hub parameters: "
    "lanes and clock (the ingress port), chunk bytes (headers, padding), tags (the credit "
    "window), tile rows (flags and GEMM tiles), sources and experts (the layer); lanes and "
    "tags change the layer only where they limit the rate.")
EPILOG = (
    f"Page size is not an axis: {REFUSED['page_bytes']}. Cache: <build>/explore/points/"
    f"<hash>.json (<build> is {HELP}); a rerun skips cached points, so an interrupted run "
    "resumes. Results: <build>/results/explore-<name>/ (points.csv, pareto.csv, "
    "pareto.png/.svg, spec.yaml, run.json), replaced only with --force.")


def _evaluator(text: str):
    """``module:function`` -> the function (a picklable evaluator(point, work_dir))."""
    mod, sep, fn = text.partition(":")
    if not sep or not mod or not fn:
        raise UsageError("--evaluator", text, "expected MODULE:FUNCTION")
    try:
        obj = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise UsageError("--evaluator", text, f"cannot be imported ({e})") from None
    if not callable(obj):
        raise UsageError("--evaluator", text, "is not callable")
    return obj


def build_spec(args) -> Spec:
    """The spec from --grid, then --axis and the fixed-value options over it."""
    spec = load_spec_file(args.grid) if args.grid else Spec()
    for text in args.axis or ():
        key, values = parse_axis(text)
        spec.add_axis(key, values)
    for key in ("model", "system", "workload", "tokens", "hub", "features"):
        value = getattr(args, key)
        if value is not None:
            spec.set_fixed(key, value)
    if args.name:
        spec.name = args.name
    if args.synth_chunks is not None:
        spec.synth_chunks = args.synth_chunks
    if args.data_bits is not None:
        spec.data_bits = args.data_bits
    if args.clock_ns is not None:
        spec.period_ns = args.clock_ns
    spec.synth_lib = args.synth_lib
    return spec


def cmd_explore(args) -> int:
    from .runner import run
    spec = build_spec(args)
    evaluator = _evaluator(args.evaluator) if args.evaluator else None
    options = clusters.parse_options(args.cluster_opt)
    if args.list:
        for i, p in enumerate(points(spec, args.max_points)):
            h = p.hub
            print(f"{i:3d}  {p.label:40s} {p.workload_label}: hub {h.sources} sources x "
                  f"{h.experts} experts, {h.lanes} lanes x {h.chunk_bytes} B, {h.tags_per_source} "
                  f"tags, {h.tile_rows}-row tiles, {h.receive_bytes / 2**20:.1f} MiB regions"
                  + (f"; features {features_text(p.hub_features)}" if p.hub_features else ""))
        return 0
    res = run(spec, evaluator=evaluator, scheduler=args.scheduler, cluster=args.cluster,
              workers=args.workers, cluster_options=options, out=args.out, force=args.force,
              use_cache=not args.no_cache, max_points=args.max_points)
    if res.rows:
        print(res.table())
        print(f"explore {spec.name}: {len(res.rows)} points ({res.evaluated} evaluated, "
              f"{res.cached} cached), {len(res.pareto)} on the Pareto front (*)")
        print(f"  table:  {res.folder / 'points.csv'} (Pareto set: pareto.csv)")
        print(f"  figure: {res.folder / 'pareto.png'} (and .svg)")
        print(f"  run:    {res.folder / 'run.json'}")
    for label, err in res.failures:
        print(f"explore: point {label} failed: {err}")
    return 1 if res.failures else 0


def add_parser(sub) -> None:
    p = sub.add_parser("explore", help="design-space exploration: a grid of hub parameters "
                       "and workloads, synthesized and co-simulated on Dask, with the Pareto set",
                       description=DESCRIPTION, epilog=EPILOG)
    g = p.add_argument_group("the grid")
    g.add_argument("--axis", action="append", metavar="KEY=V1,V2,...",
                   help=f"an axis and its values (repeatable; over --grid's). Keys: {AXES_HELP}")
    g.add_argument("--grid", metavar="FILE.yaml", help="YAML spec: name, axes {KEY: [values]}, "
                   "fixed {KEY: value}, synth_chunks, data_bits, clock_ns")
    g.add_argument("--name", help="results folder name explore-NAME (default: the grid file's "
                   "stem, else the axes and values)")
    for key in ("model", "system", "workload", "hub"):
        g.add_argument(f"--{key}", default=None, help=f"fixed {WORKLOAD_AXES[key]} when not an "
                       f"axis (default {DEFAULTS[key] or 'the model' + chr(39) + 's hub_config'})")
    g.add_argument("--tokens", type=int_at_least(1), default=None,
                   help="fixed tokens per GPU when not an axis (default: the workload's)")
    g.add_argument("--features", default=None, help="fixed hub protocol features when not an "
                   "axis: v1, or multicast, early_counts, paged, relay, reduce joined by '+' "
                   "(default v1)")
    g.add_argument("--max-points", type=int_at_least(1), default=MAX_POINTS,
                   help=f"refuse a grid with more points (default {MAX_POINTS})")
    g.add_argument("--list", action="store_true", help="print the resolved points and exit")
    s = p.add_argument_group("synthesis of a point")
    s.add_argument("--synth-chunks", type=int_at_least(2), default=None,
                   help=f"rows of the synthesized hub cut to this many chunks (default {SYNTH_CHUNKS})")
    s.add_argument("--data-bits", type=int_at_least(1), default=None,
                   help=f"datapath of the synthesized hub (default {SYNTH_DATA_BITS}, at most "
                        "8 x chunk bytes)")
    s.add_argument("--clock-ns", type=float_above(0), default=None,
                   help="clock constraint and ABC delay target (default 3.0, as moehub synth; asap7: 1/1.98 GHz)")
    s.add_argument("--synth-lib", choices=("osu018", "asap7"), default="osu018",
                   help="cell library of the synthesis, as moehub synth --lib (asap7: TT, measured at 7 nm)")
    c = p.add_argument_group("where the points run (Dask)")
    c.add_argument("--workers", type=int_at_least(1), default=None,
                   help="local worker processes (default: one per core, at most one per point); "
                        "with --cluster, the workers to scale to (default min(points, 4))")
    c.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="a running Dask scheduler")
    c.add_argument("--cluster", choices=clusters.CLUSTERS, default="local",
                   help="local (default), or a dask-jobqueue cluster: "
                        f"{clusters.HPC_PIP}")
    c.add_argument("--cluster-opt", action="append", metavar="KEY=VALUE",
                   help="dask-jobqueue option, repeatable (queue=, account=, cores=, memory=, "
                        "walltime=, job_extra_directives=[...], ...)")
    c.add_argument("--evaluator", metavar="MODULE:FUNCTION",
                   help="evaluate points with this function(point, work_dir) -> metrics instead "
                        "of synthesis + co-simulation (a surrogate model; tests)")
    o = p.add_argument_group("results")
    o.add_argument("--no-cache", action="store_true", help="evaluate every point again "
                   "(the cache is rewritten)")
    o.add_argument("--out", default=None, help=f"folder of the results folder (default "
                   f"<build>/results; <build> is {HELP})")
    o.add_argument("--force", action="store_true", help="replace an existing results folder")
    p.set_defaults(func=cmd_explore)
    return p
