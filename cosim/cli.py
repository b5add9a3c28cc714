"""``moehub cosim`` and ``moehub sweep``: co-simulated MoE layers against the baselines.

    moehub cosim                         # Mixtral-8x7B on 8x H100, 4096 tokens/GPU, uniform
    moehub cosim --model deepseek-v3 --tokens 1024 --workload skewed-mmlu
    moehub sweep tokens                  # 128 .. 32K tokens per GPU
    moehub sweep gpus                    # 1, 2, 4, 8, 16 GPUs
    moehub sweep models                  # every model in config/model
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time

from ..config.cosim_schema import DTYPES, available
from ..paths import HELP
from .experiment import load_configs, results_dir, run_experiment, table, write_outputs
from .hub_stage import BACKENDS, register_backend
from .systems import SYSTEMS

DEFAULT_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
DEFAULT_GPUS = (1, 2, 4, 8, 16)


def _dtype(value: str) -> str:
    """argparse type of a wire datatype: argparse exits 2 with 'argument --<flag>-dtype:
    <value>: must be one of ...' (the flag and the value) on a bad one."""
    if value not in DTYPES:
        raise argparse.ArgumentTypeError(f"{value!r}: must be one of {', '.join(DTYPES)}")
    return value


def _backend_available(name: str) -> bool:
    """Backends beyond model/reference live in ``moehub.cosim.hub_<name>`` as
    ``run_hub_<name>(cfg, arrivals)`` and are registered on first use (e.g. ``rtl``)."""
    if name in BACKENDS:
        return True
    import importlib
    try:
        mod = importlib.import_module(f"moehub.cosim.hub_{name}")
    except ImportError:
        return False
    fn = getattr(mod, f"run_hub_{name}", None)
    if fn is None:
        return False
    register_backend(name, fn)
    return True


def _rtl_gpus(spec, gpus: int) -> tuple:
    """``--rtl-gpus 0,3`` or ``all`` -> the destination GPUs whose hub runs in RTL."""
    if not spec:
        return ()
    if spec == "all":
        return tuple(range(gpus))
    try:
        out = tuple(sorted({int(x) for x in spec.split(",")}))
    except ValueError:
        raise SystemExit(f"moehub cosim: --rtl-gpus {spec!r}: expected 'all' or GPU numbers "
                         "like 0,3") from None
    bad = [g for g in out if not 0 <= g < gpus]
    if bad:
        raise SystemExit(f"moehub cosim: --rtl-gpus {spec!r}: GPU {bad[0]} does not exist "
                         f"(0..{gpus - 1})")
    return out


def _dtype_suffix(args) -> str:
    """Runs with overridden wire datatypes get their own results folder."""
    return "".join(f"_{f}-{getattr(args, f + '_dtype')}" for f in ("dispatch", "combine")
                   if getattr(args, f + "_dtype", None))


def _run_name(args, model, system, tokens, workload) -> str:
    sfx = "_hub-expert-order" if getattr(args, "hub_order", "token") == "expert" else ""
    sfx += _dtype_suffix(args)
    return args.run or f"{model}_{system}_{workload}_t{tokens}{sfx}"


def _dtype_overrides(args) -> dict:
    """--dispatch-dtype / --combine-dtype as load_configs keyword overrides."""
    return dict(dispatch_dtype=args.dispatch_dtype, combine_dtype=args.combine_dtype)


def cmd_cosim(args) -> int:
    s, m, w = load_configs(args.system, args.model, args.workload, args.tokens, args.gpus,
                           args.seed, **_dtype_overrides(args))
    systems = tuple(args.systems.split(",")) if args.systems else SYSTEMS
    if not _backend_available(args.hub):
        print(f"moehub cosim: --hub {args.hub} is not available (known: "
              f"{', '.join(BACKENDS)})", file=sys.stderr)
        return 2
    if args.waves:
        from . import hub_rtl
        hub_rtl.WAVES = True
    er = run_experiment(s, m, w, systems, hub_backend=args.hub, hub_order=args.hub_order,
                        rtl_gpus=_rtl_gpus(args.rtl_gpus, s.gpus))
    run = _run_name(args, m.name, s.name if args.gpus is None else f"{s.name}-g{s.gpus}",
                    w.tokens_per_gpu, w.name)
    paths = write_outputs(er, run, args.out,
                          figure=not args.no_figure)
    print(table(er))
    for k, p in paths.items():
        print(f"{k:>11}: {p}")
    return 0


def _sweep_points(args):
    if args.what == "tokens":
        toks = [int(t) for t in args.values.split(",")] if args.values else list(DEFAULT_TOKENS)
        return [dict(model=args.model, system=args.system, tokens=t, gpus=None) for t in toks]
    if args.what == "gpus":
        gs = [int(g) for g in args.values.split(",")] if args.values else list(DEFAULT_GPUS)
        system = args.system if args.system != "h100x8" else "h100x16-ib"
        return [dict(model=args.model, system=system, tokens=args.tokens, gpus=g) for g in gs]
    models = args.values.split(",") if args.values else available("model")
    return [dict(model=m, system=args.system, tokens=args.tokens, gpus=None) for m in models]


def cmd_sweep(args) -> int:
    from .plots import model_bar_plot, speedup_plot
    if not _backend_available(args.hub):
        print(f"moehub sweep: --hub {args.hub} is not available", file=sys.stderr)
        return 2
    if args.waves:
        from . import hub_rtl
        hub_rtl.WAVES = True
    points = _sweep_points(args)
    out = results_dir(args.out)
    name = args.run or f"sweep-{args.what}_{args.model if args.what != 'models' else 'all'}" \
        f"_{points[0]['system']}_{args.workload}" \
        f"{'_hub-expert-order' if args.hub_order == 'expert' else ''}" \
        f"{_dtype_suffix(args)}"
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    t_all = time.perf_counter()
    for i, pt in enumerate(points):
        s, m, w = load_configs(pt["system"], pt["model"], args.workload, pt["tokens"], pt["gpus"],
                               args.seed, **_dtype_overrides(args))
        label = f"{m.name} {s.gpus}x{s.gpu_name} {w.tokens_per_gpu} tok/GPU"
        print(f"[{i + 1}/{len(points)}] {label} ...", end="", flush=True)
        er = run_experiment(s, m, w, hub_backend=args.hub, hub_order=args.hub_order,
                            rtl_gpus=_rtl_gpus(args.rtl_gpus, s.gpus))
        sub = f"{m.name}_g{s.gpus}_t{w.tokens_per_gpu}"
        if args.figures:
            write_outputs(er, sub, folder)
        hub = er.latency("hub")
        for sys_name, r in er.results.items():
            rows.append({"model": m.name, "system_config": s.name, "gpus": s.gpus,
                         "tokens_per_gpu": w.tokens_per_gpu, "system": sys_name,
                         "layer_us": r.latency_us, "hub_speedup": r.latency_us / hub,
                         "e2e_ms": er.e2e[sys_name],
                         "e2e_hub_speedup": er.e2e[sys_name] / er.e2e["hub"]})
        sp = "  ".join(f"{n} {er.speedup(n):.2f}x" for n in er.results if n != "hub")
        print(f" hub {hub:.0f} us; {sp}  ({er.wall_s:.1f} s)", flush=True)
    with open(folder / "sweep.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    (folder / "sweep.json").write_text(json.dumps(rows, indent=1))
    title = f"MoE-Hub vs baselines, workload {args.workload!r}"
    if args.what == "tokens":
        fig = speedup_plot(rows, "tokens_per_gpu", folder / "speedup_tokens.png",
                           f"{title}: {args.model} on {args.system}", "tokens per GPU")
    elif args.what == "gpus":
        fig = speedup_plot(rows, "gpus", folder / "speedup_gpus.png",
                           f"{title}: {args.model}, {args.tokens} tokens/GPU "
                           f"(H100 nodes of 8, InfiniBand NDR between nodes)", "GPUs")
    else:
        fig = model_bar_plot(rows, folder / "speedup_models.png",
                             f"{title}: every model on {args.system}, {args.tokens} tokens/GPU")
    print(f"sweep of {len(points)} runs in {time.perf_counter() - t_all:.1f} s")
    print(f"      table: {folder / 'sweep.csv'}")
    print(f"     figure: {fig}")
    return 0


def _common(p, tokens_default=None):
    p.add_argument("--system", default="h100x8",
                   help=f"system config (config/system: {', '.join(available('system'))})")
    p.add_argument("--model", default="mixtral-8x7b",
                   help=f"model config (config/model: {', '.join(available('model'))})")
    p.add_argument("--workload", default="default",
                   help=f"workload config (config/workload: {', '.join(available('workload'))})")
    p.add_argument("--tokens", type=int, default=tokens_default,
                   help="tokens per GPU (overrides the workload)")
    p.add_argument("--seed", type=int, default=None, help="routing seed (overrides the workload)")
    for flag in ("dispatch", "combine"):
        p.add_argument(f"--{flag}-dtype", type=_dtype, default=None, metavar="|".join(DTYPES),
                       help=f"datatype of {flag} rows on the wire ({' or '.join(DTYPES)}; "
                            "overrides the model and the workload)")
    p.add_argument("--hub", default="model", help="hub stage: model (reference model, fast "
                   "path), reference (packet by packet, slow), or any cosim/hub_<name>.py "
                   "backend such as rtl (the Verilog, slow: use few tokens)")
    p.add_argument("--rtl-gpus", default="", help="put these destination GPUs' hubs in RTL "
                   "(the Verilog under cocotb + Icarus; e.g. 0 or 0,3 or all) and compare each "
                   "with the reference model")
    p.add_argument("--waves", action="store_true", help="with --rtl-gpus or --hub rtl: dump an "
                   "FST waveform of each RTL hub (<build>/player/<hub>-cosim-gpu<N>/cocotb/)")
    p.add_argument("--hub-order", default="token", choices=("token", "expert"),
                   help="hub producers send rows in token order right after routing (default, "
                        "the paper's design) or grouped by destination expert after a local "
                        "layout kernel")
    p.add_argument("--out", default=None, help=f"results folder (default <build>/results; "
                   f"<build> is {HELP})")
    p.add_argument("--run", default=None, help="run name (sub-folder of the results folder)")


def add_parser(subparsers) -> None:
    c = subparsers.add_parser("cosim", help="co-simulate one MoE layer: the hub against the "
                              "software baselines (default Mixtral-8x7B on 8x H100)")
    _common(c)
    c.add_argument("--gpus", type=int, default=None, help="GPU count (overrides the system)")
    c.add_argument("--systems", default=None,
                   help=f"comma-separated subset of {','.join(SYSTEMS)} (hub always runs)")
    c.add_argument("--no-figure", action="store_true", help="skip the timeline figure")
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
