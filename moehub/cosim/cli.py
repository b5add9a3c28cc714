"""``moehub cosim`` and ``moehub sweep``: co-simulated MoE layers against the baselines.

    moehub cosim                         # Mixtral-8x7B on 8x H100, 4096 tokens/GPU, uniform
    moehub cosim --model deepseek-v3 --tokens 1024 --workload skewed-mmlu
    moehub sweep tokens                  # 128 .. 32K tokens per GPU
    moehub sweep gpus                    # 1, 2, 4, 8, 16 GPUs
    moehub sweep models                  # every model in config/model

Results folders are named by everything that changes the result (``--run`` overrides):
``<model>_<system>[-g<gpus>]_<workload>_t<tokens>`` for ``cosim``, then, for every value
that differs from the defaults of the named configs (or from the command's), in this
order: ``_seed<N>``, ``_dispatch-<dtype>``, ``_combine-<dtype>``, ``_weights-<dtype>``,
``_launch-<mode>``, ``_hub-expert-order``,
``_hub-<backend>``, ``_rtl<0+3>`` or ``_rtl-all``, ``_sys-<a+b>`` (a ``--systems``
subset). ``sweep`` folders: ``sweep-<what>_<model|all>_<system>_<workload>``, then
``_t<tokens>``, ``_v<values>`` and the same suffixes. An existing folder is replaced only
with ``--force``; every value is checked before the first simulation.
"""
from __future__ import annotations

import argparse
import csv
import json
import time

from .. import progress
from .config import (DTYPES, LAUNCH_MODES, WEIGHT_DTYPES, available,
                                   load_model_config, load_system_config, load_workload_config)
from ..paths import HELP, claim, writing
from ..argcheck import UsageError, int_at_least, load_config_flag, name_list
from .experiment import load_configs, results_dir, run_experiment, table, write_outputs
from .hub_stage import backend_available, known_backends
from .systems import SYSTEMS
from .systems.hub import ALL_FEATURES, FEATURES, V3_FEATURES, check_features
from ..verif.sim import add_argument as add_sim_argument, choose as choose_sim

DEFAULT_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
DEFAULT_GPUS = (1, 2, 4, 8, 16)


def _dtype(value: str) -> str:
    """argparse type of a wire datatype: argparse exits 2 with 'argument --<flag>-dtype:
    <value>: must be one of ...' (the flag and the value) on a bad one."""
    if value not in DTYPES:
        raise argparse.ArgumentTypeError(f"{value!r}: must be one of {', '.join(DTYPES)}")
    return value


def _choice(choices, what: str):
    """argparse type of a word among ``choices``: a bad one exits 2 naming the flag and the
    value ('argument --launch: 'x': must be one of eager, graph')."""
    def check(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError(f"{value!r}: must be one of {', '.join(choices)} "
                                             f"({what})")
        return value
    return check


def _decode_options(args, s, m):
    """--weight-dtype and --launch applied to the loaded model and system (both recorded in
    config.yaml): FP8 weights are weight_bytes 1, which the GPU model runs as FP8 GEMMs."""
    if getattr(args, "weight_dtype", None):
        m = m.replace(weight_bytes=WEIGHT_DTYPES[args.weight_dtype])
    if getattr(args, "launch", None):
        s = s.replace_software(launch_mode=args.launch)
    return s, m


def _decode_suffix(args, s0=None, m0=None) -> list:
    """Name parts of --weight-dtype / --launch when they differ from the named configs
    (always when given, without configs to compare: sweeps)."""
    parts = []
    wd = getattr(args, "weight_dtype", None)
    if wd and (m0 is None or WEIGHT_DTYPES[wd] != m0.weight_bytes):
        parts.append(f"weights-{wd}")
    lm = getattr(args, "launch", None)
    if lm and (s0 is None or lm != s0.software.launch_mode):
        parts.append(f"launch-{lm}")
    return parts


def _hub(value: str) -> str:
    """argparse type of --hub: an available backend, else the list of all of them."""
    if backend_available(value):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: not a hub backend (known: "
                                     f"{', '.join(known_backends())})")


def _rtl_spec(value: str) -> str:
    """argparse type of --rtl-gpus: 'all' or GPU numbers (the range is checked against the
    system once it is loaded, by :func:`_rtl_gpus`)."""
    if value in ("", "all"):
        return value
    try:
        gpus = [int(x) for x in value.split(",")]
    except ValueError:
        gpus = [-1]
    if min(gpus) < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: must be 'all' or GPU numbers >= 0 "
                                         "like 0 or 0,3")
    return value


def _rtl_gpus(spec, system) -> tuple:
    """``--rtl-gpus 0,3`` or ``all`` -> the destination GPUs of ``system`` whose hub runs in
    RTL; a GPU the system does not have is a usage error naming the range."""
    if not spec:
        return ()
    gpus = system.gpus
    if spec == "all":
        return tuple(range(gpus))
    out = tuple(sorted({int(x) for x in spec.split(",")}))
    bad = [g for g in out if not 0 <= g < gpus]
    if bad:
        raise UsageError("--rtl-gpus", spec, f"GPU {bad[0]} does not exist: must be 'all' or "
                         f"GPU numbers 0..{gpus - 1} ({system.name} with {gpus} GPUs)")
    return out


def _hub_features(args, rtl) -> frozenset:
    """--hub-features as a set; with RTL hubs (--rtl-gpus, --hub rtl) only those the RTL
    has, else a usage error naming them (before any simulation)."""
    features = frozenset(args.hub_features or ())
    try:
        check_features(features, rtl=bool(rtl) or args.hub == "rtl")
    except ValueError as e:
        raise UsageError("--hub-features", ",".join(sorted(features)), str(e)) from None
    return features


def _load(args, tokens=None, gpus=None, model=None, system=None):
    """The run's configs; an unknown name or a bad key is a configuration error naming
    its flag (checked before any simulation)."""
    model, system = model or args.model, system or args.system
    load_config_flag("--system", load_system_config, system)
    load_config_flag("--model", load_model_config, model)
    load_config_flag("--workload", load_workload_config, args.workload)
    s, m, w = load_configs(system, model, args.workload, tokens, gpus, args.seed,
                           **_dtype_overrides(args))
    s, m = _decode_options(args, s, m)
    return s, m, w


def _dtype_overrides(args) -> dict:
    """--dispatch-dtype / --combine-dtype as load_configs keyword overrides."""
    return dict(dispatch_dtype=args.dispatch_dtype, combine_dtype=args.combine_dtype)


def _suffix(args, gpus: int, seed_default: int, dtypes, dtypes_default, s0=None,
            m0=None) -> str:
    """The name parts of every result-changing value that is not the default (see the
    module docstring); ``dtypes_default`` None: a given dtype flag always shows."""
    parts = []
    if args.seed is not None and args.seed != seed_default:
        parts.append(f"seed{args.seed}")
    for i, flag in enumerate(("dispatch", "combine")):
        given = getattr(args, flag + "_dtype")
        if given and (dtypes_default is None or dtypes[i] != dtypes_default[i]):
            parts.append(f"{flag}-{given}")
    parts += _decode_suffix(args, s0, m0)
    if args.hub_order == "expert":
        parts.append("hub-expert-order")
    features = getattr(args, "hub_features", None)
    if features:
        v2 = "+".join(f for f in FEATURES if f in features)
        if v2:
            parts.append("v2-" + v2)
        if set(V3_FEATURES) & set(features):
            parts.append("v3-" + "+".join(f for f in V3_FEATURES if f in features))
    if args.hub != "model":
        parts.append(f"hub-{args.hub}")
    if args.rtl_gpus:
        rtl = "all" if args.rtl_gpus == "all" else "+".join(map(str, sorted(
            {int(x) for x in args.rtl_gpus.split(",")})))
        parts.append("rtl-all" if rtl == "all" or rtl == "+".join(map(str, range(gpus)))
                     else f"rtl{rtl}")
    systems = getattr(args, "systems", None)
    if systems and set(systems) | {"hub"} != set(SYSTEMS):
        parts.append("sys-" + "+".join(n for n in SYSTEMS if n in systems))
    return "".join("_" + p for p in parts)


def run_name(args, s, m, w) -> str:
    """The results folder of a ``moehub cosim`` run (``--run`` overrides)."""
    if args.run:
        return args.run
    s0, m0, w0 = load_configs(args.system, args.model, args.workload)
    system = s.name + (f"-g{s.gpus}" if s.gpus != s0.gpus else "")
    return (f"{m.name}_{system}_{w.name}_t{w.tokens_per_gpu}"
            + _suffix(args, s.gpus, w0.seed, (m.dispatch_dtype, m.combine_dtype),
                      (m0.dispatch_dtype, m0.combine_dtype), s0, m0))


def _rtl_options(args, rtl) -> None:
    """--waves and --sim for the RTL hubs; the simulator is checked now, before the model
    systems run (a missing Verilator named at once, not after the first minute)."""
    from . import hub_rtl
    hub_rtl.WAVES = bool(args.waves)
    hub_rtl.SIM = args.sim
    if rtl or args.hub == "rtl":
        hub_rtl.SIM = choose_sim(args.sim, prefer="verilator")


def cmd_cosim(args) -> int:
    s, m, w = _load(args, args.tokens, args.gpus)
    rtl = _rtl_gpus(args.rtl_gpus, s)
    features = _hub_features(args, rtl)
    folder = claim(results_dir(args.out) / run_name(args, s, m, w), args.force)
    _rtl_options(args, rtl)
    er = run_experiment(s, m, w, args.systems or SYSTEMS, hub_backend=args.hub,
                        hub_order=args.hub_order, rtl_gpus=rtl, hub_features=features)
    paths = write_outputs(er, folder.name, folder.parent, figure=not args.no_figure,
                          force=args.force)
    print(table(er))
    for k, p in paths.items():
        print(f"{k:>11}: {p}")
    return 0


def _values(args, convert, flag="--values"):
    try:
        vals = [convert(v) for v in args.values.split(",")]
    except ValueError:
        vals = [0]
    if not vals or min(vals) < 1:
        raise UsageError(flag, args.values, "must be comma-separated integers >= 1")
    return vals


def _sweep_points(args):
    if args.what == "tokens":
        toks = _values(args, int) if args.values else list(DEFAULT_TOKENS)
        return [dict(model=args.model, system=args.system, tokens=t, gpus=None) for t in toks]
    if args.what == "gpus":
        gs = _values(args, int) if args.values else list(DEFAULT_GPUS)
        system = args.system if args.system != "h100x8" else "h100x16-ib"
        return [dict(model=args.model, system=system, tokens=args.tokens, gpus=g) for g in gs]
    models = args.values.split(",") if args.values else available("model")
    return [dict(model=m, system=args.system, tokens=args.tokens, gpus=None) for m in models]


def sweep_name(args, points) -> str:
    """The results folder of a ``moehub sweep`` (``--run`` overrides)."""
    if args.run:
        return args.run
    w0 = load_workload_config(args.workload)
    name = (f"sweep-{args.what}_{args.model if args.what != 'models' else 'all'}"
            f"_{points[0]['system']}_{args.workload}")
    if args.tokens is not None and args.what != "tokens":
        name += f"_t{args.tokens}"
    if args.values:
        name += "_v" + args.values.replace(",", "+")
    return name + _suffix(args, -1, w0.seed, None, None)


def cmd_sweep(args) -> int:
    points = _sweep_points(args)
    runs = []
    for pt in points:          # every configuration checked before the first simulation
        s, m, w = _load(args, pt["tokens"], pt["gpus"], pt["model"], pt["system"])
        runs.append((s, m, w, _rtl_gpus(args.rtl_gpus, s)))
    folder = claim(results_dir(args.out) / sweep_name(args, points), args.force)
    _rtl_options(args, any(r for *_, r in runs))
    t_all = time.perf_counter()
    with writing(folder, args.force, run=folder.name) as tmp:
        rows = _run_sweep(args, runs, tmp)
        fig = _sweep_outputs(args, rows, tmp)
    print(f"sweep of {len(points)} runs in {time.perf_counter() - t_all:.1f} s")
    print(f"      table: {folder / 'sweep.csv'}")
    print(f"     figure: {folder / fig.name}")
    print(f"        run: {folder / 'run.json'}")
    return 0


def _run_sweep(args, runs, out) -> list:
    rows = []
    with progress.stage(f"sweep {args.what}", total=len(runs), unit="runs") as st:
        for i, (s, m, w, rtl) in enumerate(runs):
            label = f"{m.name} {s.gpus}x{s.gpu_name} {w.tokens_per_gpu} tok/GPU"
            st.update(note=label, force=True)
            er = run_experiment(s, m, w, hub_backend=args.hub, hub_order=args.hub_order,
                                rtl_gpus=rtl)
            if args.figures:
                write_outputs(er, f"{m.name}_g{s.gpus}_t{w.tokens_per_gpu}", out, record=False)
            rows += _sweep_rows(er)
            hub = er.latency("hub")
            sp = "  ".join(f"{n} {er.speedup(n):.2f}x" for n in er.results if n != "hub")
            print(f"[{i + 1}/{len(runs)}] {label}: hub {hub:.0f} us; {sp}  ({er.wall_s:.1f} s)",
                  flush=True)
            st.advance()
    return rows


def _sweep_rows(er) -> list:
    s, m, w = er.system, er.model, er.workload
    hub = er.latency("hub")
    return [{"model": m.name, "system_config": s.name, "gpus": s.gpus,
             "tokens_per_gpu": w.tokens_per_gpu, "system": sys_name,
             "layer_us": r.latency_us, "hub_speedup": r.latency_us / hub,
             "e2e_ms": er.e2e[sys_name], "e2e_hub_speedup": er.e2e[sys_name] / er.e2e["hub"]}
            for sys_name, r in er.results.items()]


def _sweep_outputs(args, rows, folder):
    from .plots import model_bar_plot, speedup_plot
    with open(folder / "sweep.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    (folder / "sweep.json").write_text(json.dumps(rows, indent=1))
    title = f"MoE-Hub vs baselines, workload {args.workload!r}"
    if args.what == "tokens":
        return speedup_plot(rows, "tokens_per_gpu", folder / "speedup_tokens.png",
                            f"{title}: {args.model} on {args.system}", "tokens per GPU")
    if args.what == "gpus":
        return speedup_plot(rows, "gpus", folder / "speedup_gpus.png",
                            f"{title}: {args.model}, {args.tokens} tokens/GPU "
                            f"(H100 nodes of 8, InfiniBand NDR between nodes)", "GPUs")
    return model_bar_plot(rows, folder / "speedup_models.png",
                          f"{title}: every model on {args.system}, {args.tokens} tokens/GPU")


def _common(p, tokens_default=None):
    p.add_argument("--system", default="h100x8",
                   help=f"system config (config/system: {', '.join(available('system'))})")
    p.add_argument("--model", default="mixtral-8x7b",
                   help=f"model config (config/model: {', '.join(available('model'))})")
    p.add_argument("--workload", default="default",
                   help=f"workload config (config/workload: {', '.join(available('workload'))})")
    p.add_argument("--tokens", type=int_at_least(1), default=tokens_default,
                   help="tokens per GPU, >= 1 (overrides the workload)")
    p.add_argument("--seed", type=int_at_least(0), default=None,
                   help="routing seed, >= 0 (overrides the workload)")
    for flag in ("dispatch", "combine"):
        p.add_argument(f"--{flag}-dtype", type=_dtype, default=None, metavar="|".join(DTYPES),
                       help=f"datatype of {flag} rows on the wire ({' or '.join(DTYPES)}; "
                            "overrides the model and the workload)")
    p.add_argument("--weight-dtype", type=_choice(tuple(WEIGHT_DTYPES), "expert weights"),
                   default=None, metavar="|".join(WEIGHT_DTYPES),
                   help="datatype of the weights (sets the model's weight_bytes: bf16 2, fp8 1, "
                        "run as FP8 GEMMs like DeepSeek-V3's block-scaled FP8 checkpoint; "
                        "overrides the model)")
    p.add_argument("--launch", type=_choice(LAUNCH_MODES, "kernel launch mode"), default=None,
                   metavar="|".join(LAUNCH_MODES),
                   help="how kernels are launched: eager (kernel_launch_us each) or graph "
                        "(CUDA graphs, as serving engines run decode: graph_launch_us each, "
                        "every host sync breaks the graph); overrides the system's "
                        "software.launch_mode")
    p.add_argument("--hub", default="model", type=_hub, help="hub stage: model (reference "
                   "model, fast path), reference (packet by packet, slow), or any "
                   "cosim/hub_<name>.py backend such as rtl (the Verilog, slow: use few tokens)")
    p.add_argument("--rtl-gpus", default="", type=_rtl_spec,
                   help="put these destination GPUs' hubs in RTL "
                   "(the Verilog under cocotb + Verilator or Icarus, see --sim; e.g. 0 or 0,3 "
                   "or all) and compare each with the reference model")
    add_sim_argument(p, "verilator", "the RTL hubs (--rtl-gpus, --hub rtl)")
    p.add_argument("--waves", action="store_true", help="with --rtl-gpus or --hub rtl: dump an "
                   "FST waveform (VCD on Verilator) of each RTL hub (<build>/player/<hub>-cosim-gpu<N>/)")
    p.add_argument("--hub-order", default="token", choices=("token", "expert"),
                   help="hub producers send rows in token order right after routing (default, "
                        "the paper's design) or grouped by destination expert after a local "
                        "layout kernel")
    add_results_options(p)


def add_results_options(p, run_default: str = "named by every value that changes the "
                        "result") -> None:
    """--out, --run and --force: where a results folder goes, its name, and whether an
    existing one may be replaced (``moehub cosim``, ``sweep`` and the studies)."""
    p.add_argument("--out", default=None, help=f"results folder (default <build>/results; "
                   f"<build> is {HELP})")
    p.add_argument("--run", default=None, help="run name (sub-folder of the results folder; "
                   f"default: {run_default})")
    p.add_argument("--force", action="store_true", help="replace an existing results folder "
                   "of the same name (otherwise refused before the run)")


def add_parser(subparsers) -> None:
    c = subparsers.add_parser("cosim", help="co-simulate one MoE layer: the hub against the "
                              "software baselines (default Mixtral-8x7B on 8x H100)")
    _common(c)
    c.add_argument("--gpus", type=int_at_least(1), default=None,
                   help="GPU count, >= 1 (overrides the system)")
    c.add_argument("--systems", default=None, type=name_list(SYSTEMS, "system"),
                   help=f"comma-separated subset of {','.join(SYSTEMS)} (hub always runs)")
    c.add_argument("--no-figure", action="store_true", help="skip the timeline figure")
    c.add_argument("--hub-features", default=None, type=name_list(ALL_FEATURES, "hub feature"),
                   help=f"hub protocol v2: comma-separated subset of {','.join(FEATURES)} "
                   "(default none: protocol v1; RTL hubs take any combination; "
                   "`moehub study v2` runs every combination); protocol v3 on multi-node "
                   "systems: relay (implies multicast), relay,reduce")
    c.set_defaults(func=cmd_cosim)

    s = subparsers.add_parser("sweep", help="sweep tokens per GPU, GPU count or models; "
                              "writes speedup plots")
    s.add_argument("what", choices=("tokens", "gpus", "models"))
    _common(s, tokens_default=None)
    s.add_argument("--values", default=None, help="comma-separated values (tokens, GPU counts "
                   "or model names) instead of the defaults")
    s.add_argument("--figures", action="store_true", help="also write each run's outputs "
                   "and timeline")
    s.set_defaults(func=cmd_sweep)

    from .headline import add_parser as add_headline
    from .validate import add_parser as add_validate
    add_validate(subparsers)
    add_headline(subparsers)
