"""``moehub study xmoe``: the X-MoE study (the X-MoE paper's three ideas) on the co-simulation.

    moehub study xmoe                                   # the three X-MoE models, ~1 min
    moehub study xmoe --model x-moe-large --tokens 8192 --force
    moehub study xmoe --rbd-systems h100x32-ib --time-tokens 512

Three parts, each from the routing the co-simulation samples:

1. **Activation memory** per GPU of one MoE layer for eight dispatch layouts
   (:mod:`.xmoe_memory`): capacity-padded (DeepSpeed-MoE, Tutel), tile-padded
   (MegaBlocks), padding-free (X-MoE's PFT), DeepEP low-latency's worst-case buffers and
   the hub's regions (static as derived today, at a capacity factor, and protocol v2's
   page pool); at ``--tokens`` on ``--system`` and swept over tokens and top-k.
2. **Redundancy-bypassing hierarchical dispatch** (:mod:`.xmoe_dispatch`,
   :mod:`.xmoe_systems`): inter-node bytes of the plain and hierarchical dispatch, in
   software (X-MoE's pilots) and with the hub (relay hubs), on ``--rbd-systems``; the
   layer time of the four versions for ``--time-model`` at ``--time-tokens``.
3. **Sequence-sharded MoE blocks** (:mod:`.xmoe_ssmb`): memory and time against the TP
   degree, plain TP block against SSMB.

Writes ``<build>/results/study-xmoe[...]/`` (``--out`` replaces ``<build>/results``):
``memory.csv``, ``memory_sweep.csv``, ``rbd_traffic.csv``, ``rbd_time.csv``,
``ssmb.csv``, ``validation.csv`` (against X-MoE's published figures), ``tables.md``,
``results.json`` (every row at full precision: what ``moehub report --collect study-xmoe``
records), the
figures ``memory``, ``memory_sweep``, ``rbd``, ``ssmb`` (PNG + SVG) and ``run.json``. The
folder's name carries every value that differs from the defaults (``_m<models>``,
``_<system>``, ``_rbd-<systems>``, ``_<workload>``, ``_t<tokens>``, ``_tt<time tokens>``,
``_time-<model>``, ``_seed<N>``); an existing folder is replaced only with ``--force``.
"""
from __future__ import annotations

import json

from ... import progress
from ..config import (available, load_model_config, load_system_config,
                                    load_workload_config)
from ...argcheck import UsageError, int_at_least, load_config_flag, name_list
from ..cli import add_results_options
from . import publish
from . import xmoe_report as R
from . import xmoe_run as X

DEFAULT_MODELS = ("x-moe-small", "x-moe-medium", "x-moe-large")
DEFAULT_SYSTEM = "h100x8"
DEFAULT_RBD = ("h100x16-ib", "h100x32-ib")
DEFAULT_TOKENS = 4096
DEFAULT_TIME_TOKENS = 1024
#: co-simulated layers with more routed rows are refused (a 32-GPU layer of 600k rows
#: takes tens of seconds per version on a slow core)
MAX_TIME_ROWS = 600_000
#: the tokens per GPU of the published memory comparison (the Small model's sequence)
SMALL_TOKENS = 2048


def _time_model(args) -> str:
    if args.time_model:
        return args.time_model
    return "x-moe-large" if "x-moe-large" in args.model else args.model[0]


def _check_divides(flag: str, system, model) -> None:
    E, G = model.experts, system.gpus
    if G > E or E % G:
        raise UsageError(flag, system.name, f"its {G} GPUs must hold whole experts: the "
                         f"{E} experts of {model.name} do not divide over them")


def check(args) -> dict:
    """Every value checked before any work: configs load, GPUs hold whole experts, the
    hierarchical systems span nodes, the co-simulated layers stay bounded."""
    load_config_flag("--workload", load_workload_config, args.workload)
    models = {m: load_config_flag("--model", load_model_config, m) for m in args.model}
    system = load_config_flag("--system", load_system_config, args.system)
    rbd = [load_config_flag("--rbd-systems", load_system_config, s) for s in args.rbd_systems]
    for m in models.values():
        _check_divides("--system", system, m)
        for s in rbd:
            _check_divides("--rbd-systems", s, m)
    for s in rbd:
        if s.nodes < 2:
            raise UsageError("--rbd-systems", s.name, f"spans {s.nodes} node: hierarchical "
                             "dispatch needs >= 2 nodes (e.g. h100x16-ib, h100x32-ib)")
    tm = _time_model(args)
    if tm not in models:
        raise UsageError("--time-model", tm, f"must be one of --model ({', '.join(models)})")
    for s in rbd + [system]:
        rows = s.gpus * args.time_tokens * models[tm].topk
        if rows > MAX_TIME_ROWS:
            raise UsageError("--time-tokens", args.time_tokens,
                             f"{tm} on {s.name} would route {rows:,} rows per layer, more "
                             f"than {MAX_TIME_ROWS:,}: use at most "
                             f"{MAX_TIME_ROWS // (s.gpus * models[tm].topk)}")
    return {"time_model": tm}


def run_name(args) -> str:
    """``study-xmoe`` plus a part for every value that differs from the defaults."""
    if args.run:
        return args.run
    parts = ["study-xmoe"]
    if tuple(args.model) != DEFAULT_MODELS:
        parts.append("m" + "+".join(args.model))
    if args.system != DEFAULT_SYSTEM:
        parts.append(args.system)
    if tuple(args.rbd_systems) != DEFAULT_RBD:
        parts.append("rbd-" + "+".join(args.rbd_systems))
    if args.workload != "default":
        parts.append(args.workload)
    if args.tokens != DEFAULT_TOKENS:
        parts.append(f"t{args.tokens}")
    if args.time_tokens != DEFAULT_TIME_TOKENS:
        parts.append(f"tt{args.time_tokens}")
    if args.time_model:
        parts.append(f"time-{args.time_model}")
    if args.seed is not None:
        parts.append(f"seed{args.seed}")
    return "_".join(parts)


def compute(args, time_model: str) -> dict:
    """Every part of the study (see the module docstring)."""
    models, w, seed = list(args.model), args.workload, args.seed
    out = {"memory": [r for m in models
                      for r in X.memory_rows(m, args.system, w, args.tokens, seed)]}
    out["memory_sweep"] = X.memory_sweep(models, args.system, w, args.tokens, seed)
    out["rbd_traffic"] = X.rbd_traffic_rows(models, args.rbd_systems, w, args.tokens, seed)
    out["rbd_time"] = X.rbd_time_rows(time_model, args.rbd_systems, w, args.time_tokens, seed)
    out["ssmb"] = X.ssmb_rows(models, args.system, w, args.tokens, time_model, seed,
                              time_tokens=args.time_tokens)
    small = X.memory_rows("x-moe-small", args.system, w, SMALL_TOKENS, seed) \
        if "x-moe-small" in models else []
    out["validation"] = R.validation_rows(small, out["rbd_traffic"], out["rbd_time"],
                                          out["ssmb"])
    return out


def tables(res: dict) -> str:
    return "\n\n".join([
        "## Activation memory per GPU (peak while the layer runs / saved per layer / "
        "rows dropped)", R.memory_table(res["memory"]),
        "## Inter-node bytes of one dispatch (all NICs)", R.traffic_table(res["rbd_traffic"]),
        "## Layer time, hierarchical dispatch", R.time_table(res["rbd_time"]),
        "## Sequence-sharded MoE blocks", R.ssmb_table(res["ssmb"]),
        "## Against X-MoE's published figures", R.validation_table(res["validation"])]) + "\n"


def _plain(v):
    """numpy scalars as JSON numbers (the rows keep full precision in ``results.json``;
    the CSVs round to 4 digits)."""
    return v.item() if hasattr(v, "item") else str(v)


def write(res: dict, folder, figures: bool) -> list:
    from . import xmoe_plots as P
    paths = [R.write_csv(res[k], folder / f"{k}.csv") for k in
             ("memory", "memory_sweep", "rbd_traffic", "rbd_time", "ssmb", "validation")]
    (folder / "tables.md").write_text(tables(res))
    paths.append(folder / "tables.md")
    (folder / "results.json").write_text(json.dumps(res, indent=1, default=_plain) + "\n")
    paths.append(folder / "results.json")
    if figures:
        with progress.stage("study xmoe: figures", heartbeat=True):
            paths += [P.memory_figure(res["memory"], folder / "memory.png"),
                      P.memory_sweep_figure(res["memory_sweep"], folder / "memory_sweep.png"),
                      P.rbd_figure(res["rbd_traffic"], res["rbd_time"], folder / "rbd.png"),
                      P.ssmb_figure(res["ssmb"], folder / "ssmb.png")]
    return paths


def cmd_xmoe(args) -> int:
    info = check(args)
    return publish(args, run_name(args), lambda: compute(args, info["time_model"]), write, tables)


def add_parser(studies) -> None:
    models = lambda: available("model")          # noqa: E731
    p = studies.add_parser("xmoe", help="X-MoE: activation memory per dispatch layout, "
                           "hierarchical (pilot / relay-hub) dispatch, sequence-sharded "
                           "MoE blocks")
    p.add_argument("--model", type=name_list(models, "model"), default=DEFAULT_MODELS,
                   help=f"comma-separated model configs (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--system", default=DEFAULT_SYSTEM, help="system config of the memory "
                   f"and SSMB parts (default {DEFAULT_SYSTEM}; config/system)")
    p.add_argument("--rbd-systems", type=name_list(lambda: available("system"), "system"),
                   default=DEFAULT_RBD, help="multi-node system configs of the hierarchical "
                   f"dispatch (default {','.join(DEFAULT_RBD)})")
    p.add_argument("--workload", default="default",
                   help=f"workload config (routing, seed; default 'default'; "
                        f"{', '.join(available('workload'))})")
    p.add_argument("--tokens", type=int_at_least(1), default=DEFAULT_TOKENS,
                   help=f"tokens per GPU of the memory and traffic parts (default {DEFAULT_TOKENS})")
    p.add_argument("--time-tokens", type=int_at_least(1), default=DEFAULT_TIME_TOKENS,
                   help="tokens per GPU of the co-simulated layers (layer times; default "
                        f"{DEFAULT_TIME_TOKENS})")
    p.add_argument("--time-model", default=None, help="the model whose layer times are "
                   "simulated (default x-moe-large if listed, else the first --model)")
    p.add_argument("--seed", type=int_at_least(0), default=None,
                   help="routing seed, >= 0 (overrides the workload)")
    p.add_argument("--no-figure", action="store_true", help="skip the figures")
    add_results_options(p, "study-xmoe and every non-default value")
    p.set_defaults(func=cmd_xmoe)
