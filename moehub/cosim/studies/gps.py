"""``moehub study gps``: the MoE-GPS half of the studies (docs/studies.md, "Study: MoE-GPS").

Which prediction strategy for dynamic expert duplication wins, over skewness x
interconnect x tokens per GPU: MoE-GPS's greedy duplication (:mod:`.gps_place`), its
Distribution-Only and Token-to-Expert predictions under its three scalar error models and
realized on routing sampled by the co-simulation's workload sampler (:mod:`.gps_predict`,
:mod:`.gps_study`), costed with the co-simulation's calibrated components
(:mod:`.gps_time`, checked against the co-simulation's own bulk layer,
:mod:`.gps_cosim`), and where the hub's exact counters and per-row replica choice land.

Writes ``<build>/results/study-gps[_<non-default values>]/`` whole or not at all (as
``moehub cosim``: ``--force`` to replace, ``run.json``): ``cells.csv`` (every strategy,
mode and accuracy per cell), ``guideline.csv``, ``errors.csv``, ``hub.csv``,
``duplication.csv``, ``t2e_accuracy.csv``, ``drift.csv``, ``crosscheck.csv``,
``paper.csv``, and the figures ``guideline_map``, ``t2e_accuracy``, ``drift`` (PNG + SVG).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import time
from pathlib import Path

from ... import progress
from ..config import available, load_model_config, load_system_config
from ...paths import HELP, claim, writing
from ...argcheck import UsageError, int_at_least, load_config_flag
from ..experiment import results_dir
from . import gps_report as rep
from .gps_drift import crosscheck, drift
from .gps_place import home_of
from .gps_study import Cell, Settings, duplication, run_cell

DEFAULTS = {"model": "mixtral-8x7b", "system": "h100x8,a100x4-pcie", "tokens": "128,512,2048",
            "skew": "1.0,1.2,1.39,1.7,1.99,2.5", "epsilon": 0.05, "batches": 4, "slots": 1,
            "seed": 1}
#: MoE-GPS's own platform and operating point (FACTS.md): 4x A100 over NVLink3, batch 1 x
#: 512-token prefill (128 tokens per GPU), MMLU skewness 1.39, dist-only error 1.8 %
PAPER_SYSTEM, PAPER_GPUS, PAPER_TOKENS = "a100x8", 4, 128
CSV_FILES = ("cells", "guideline", "errors", "hub", "duplication", "t2e_accuracy", "drift",
             "crosscheck", "paper")


# ---------------------------------------------------------------------------- values
def _number_list(kind, low: float, what: str):
    """argparse type: comma-separated numbers >= ``low`` (exit 2 naming the value)."""
    def check(text: str) -> tuple:
        try:
            vals = tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            vals = ()
        if not vals or min(vals) < low:
            raise argparse.ArgumentTypeError(f"{text!r}: must be comma-separated {what} >= {low:g}")
        return tuple(sorted(set(vals)))
    return check


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number in [0, 1)")
    return v


def _settings(args) -> Settings:
    """Every value checked against the configs before any work (exit 2 otherwise)."""
    model = load_config_flag("--model", load_model_config, args.model)
    systems = tuple(load_config_flag("--system", load_system_config, s)
                    for s in args.system.split(",") if s)
    if not systems:
        raise UsageError("--system", args.system, "must name at least one system config")
    for s in systems:
        try:
            home_of(model.experts, s.gpus)
        except Exception:
            raise UsageError("--system", args.system, f"{s.name} has {s.gpus} GPUs: the "
                             f"{model.experts} experts of {model.name} must divide evenly") from None
    top = model.experts / model.topk
    bad = [k for k in args.skew if k >= top]
    if bad:
        raise UsageError("--skew", ",".join(f"{k:g}" for k in args.skew),
                         f"{bad[0]:g} is unreachable: {model.name} (top-{model.topk} of "
                         f"{model.experts}) allows skewness < {top:g}")
    return Settings(model=model, systems=systems, tokens=args.tokens, skews=args.skew,
                    epsilon=args.epsilon, batches=args.batches, seed=args.seed,
                    slots=args.slots)


def run_name(args) -> str:
    """``study-gps`` plus a part for every value that differs from the defaults."""
    parts = []
    for key, tag in (("model", "m"), ("system", "s"), ("tokens", "t"), ("skew", "k"),
                     ("epsilon", "eps"), ("batches", "b"), ("slots", "slots"), ("seed", "seed")):
        v = getattr(args, key)
        default = DEFAULTS[key]
        norm = lambda x: ",".join(f"{y:g}" for y in x) if isinstance(x, tuple) else x  # noqa: E731
        if isinstance(default, str) and key in ("tokens", "skew"):
            same = norm(v) == ",".join(f"{float(y):g}" for y in default.split(","))
        else:
            same = v == default
        if not same:
            parts.append(f"{tag}{str(norm(v)).replace(',', '+')}")
    return "study-gps" + "".join("_" + p for p in parts)


# ---------------------------------------------------------------------------- run
def run_study(st: Settings, figures: bool = True) -> dict:
    """Every cell, the paper's own point, the drift prefill and the co-simulation check;
    returns the tables (lists of dict rows) by file name."""
    cells = [(s, t, k) for s in st.systems for t in st.tokens for k in st.skews]
    rows, dup, check = [], [], []
    with progress.stage("study gps: cells", total=len(cells), unit="cells") as bar:
        for s, t, k in cells:
            bar.update(note=f"{s.name} {t} tok/GPU skew {k:g}", force=True)
            cell = Cell(st, s, t, k)
            rows += run_cell(cell)
            dup.append(duplication(cell))
            if k in (min(st.skews), max(st.skews)):
                check += crosscheck(cell)
            bar.advance()
    paper_rows = _paper_point(st)
    mid = st.tokens[len(st.tokens) // 2]
    with progress.stage("study gps: drift", total=len(st.systems), unit="systems") as bar:
        dr = []
        for s in st.systems:
            dr += drift(Cell(st, s, mid, 1.39 if 1.39 < st.model.experts / st.model.topk
                             else max(st.skews), batches=0))
            bar.advance()
    g = rep.guideline(rows)
    return {"cells": rows, "guideline": g, "errors": rep.error_models(rows),
            "hub": rep.hub_table(rows), "duplication": dup,
            "t2e_accuracy": rep.t2e_curve(rows) + rep.t2e_curve(paper_rows), "drift": dr,
            "crosscheck": check, "paper": rep.paper(rows, {"rows": paper_rows}),
            "_paper_rows": paper_rows}


def _paper_point(st: Settings) -> list:
    """MoE-GPS's own operating point (:data:`PAPER_SYSTEM`), with its MMLU error rate."""
    model = st.model
    if model.name != "mixtral-8x7b":
        return []
    s = load_system_config(PAPER_SYSTEM)
    s = s.replace(gpus=PAPER_GPUS, gpus_per_node=PAPER_GPUS)
    s = dataclasses.replace(s, name=f"{PAPER_SYSTEM}-g{PAPER_GPUS}")
    skew, eps = rep.PAPER_POINTS["MMLU"]
    with progress.stage("study gps: the paper's point (4x A100 NVLink)"):
        return run_cell(Cell(dataclasses.replace(st, epsilon=eps), s, PAPER_TOKENS, skew))


def write_tables(tables: dict, out: Path) -> dict:
    paths = {}
    for name in CSV_FILES:
        rows = tables[name]
        p = out / f"{name}.csv"
        keys = list(dict.fromkeys(k for r in rows for k in r)) or ["empty"]
        with open(p, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
        paths[name] = p
    return paths


def write_figures(st: Settings, tables: dict, out: Path) -> dict:
    from . import gps_plots as plots
    mid = st.tokens[len(st.tokens) // 2]
    skew = 1.39 if 1.39 in st.skews else st.skews[len(st.skews) // 2]
    points = {s.name: (mid, skew) for s in st.systems}
    if tables["_paper_rows"]:
        points[tables["_paper_rows"][0]["system"]] = (PAPER_TOKENS, rep.PAPER_POINTS["MMLU"][0])
    title = (f"MoE-GPS guideline map: {st.model.name}, dist-only error {st.epsilon:.0%}, "
             f"{st.batches} batches/cell, seed {st.seed}")
    with progress.stage("study gps: figures"):
        return {"guideline_map": plots.guideline_map(tables["guideline"], out / "guideline_map.png", title),
                "t2e_accuracy_fig": plots.t2e_accuracy(tables["t2e_accuracy"], tables["cells"]
                                                       + tables["_paper_rows"],
                                                       out / "t2e_accuracy.png", points),
                "drift_fig": plots.drift_figure(tables["drift"], out / "drift.png")}


def summary(st: Settings, tables: dict) -> str:
    g = tables["guideline"]
    out = [f"MoE-GPS study: {st.model.name}; systems {', '.join(s.name for s in st.systems)}; "
           f"tokens/GPU {', '.join(map(str, st.tokens))}; dist-only error {st.epsilon:.1%}; "
           f"{st.batches} batches per cell; seed {st.seed}", ""]
    for key in ("typical_winner", "realized_winner", "all_winner"):
        out += [rep.text_map(g, key), ""]
    out += ["The paper's conclusions (review) against this study:",
            rep.text_table(tables["paper"]), "",
            "Hub: static split vs the hub's per-row replica choice (realized, copies over the link):",
            rep.text_table(tables["hub"], ["system", "tokens", "skew", "dist-only_us",
                                           "hub-choice_us", "hub-counts_us", "hub-both_us",
                                           "choice_vs_static"]), "",
            "Error models (dist-only eps; token-to-expert a=0.9): busiest GPU rows / mean",
            rep.text_table([r for r in tables["errors"] if r["skew"] in (1.39, 1.99)],
                           ["system", "tokens", "skew", "strategy", "typical_max_mean",
                            "pessimistic_max_mean", "realized-hidden_max_mean",
                            "error_rate_realized"]), "",
            "Cost model vs the co-simulation's bulk layer (same rows and placement):",
            rep.text_table(tables["crosscheck"], ["system", "tokens", "skew", "strategy",
                                                  "model_us", "cosim_bulk_us", "ratio"])]
    return "\n".join(out)


def cmd_gps(args) -> int:
    st = _settings(args)
    folder = claim(results_dir(args.out) / run_name(args), args.force)
    print(f"seed {st.seed}", flush=True)
    t0 = time.perf_counter()
    with writing(folder, args.force, run=folder.name) as tmp:
        tables = run_study(st)
        paths = write_tables(tables, tmp)
        if not args.no_figure:
            paths.update(write_figures(st, tables, tmp))
    print(summary(st, tables))
    print(f"\nstudy in {time.perf_counter() - t0:.1f} s; results in {folder}")
    for k, p in paths.items():
        print(f"{k:>15}: {folder / p.name}")
    return 0


def add_parser(studies) -> None:
    p = studies.add_parser("gps", help="MoE-GPS: expert duplication, Distribution-Only vs "
                           "Token-to-Expert prediction (scalar error models and realized "
                           "routing), the guideline map, and the hub's counters and replica choice")
    p.add_argument("--model", default=DEFAULTS["model"],
                   help=f"model config (default {DEFAULTS['model']}; config/model: "
                        f"{', '.join(available('model'))})")
    p.add_argument("--system", default=DEFAULTS["system"],
                   help=f"comma-separated system configs, the map's interconnects (default "
                        f"{DEFAULTS['system']}; config/system: {', '.join(available('system'))})")
    p.add_argument("--tokens", default=_number_list(int, 1, "integers")(DEFAULTS["tokens"]),
                   type=_number_list(int, 1, "integers"),
                   help=f"comma-separated tokens per GPU (default {DEFAULTS['tokens']})")
    p.add_argument("--skew", default=_number_list(float, 1, "numbers")(DEFAULTS["skew"]),
                   type=_number_list(float, 1, "numbers"),
                   help=f"comma-separated skewness values, tokens of the hottest expert / mean, "
                        f">= 1 and below experts/top-k (default {DEFAULTS['skew']})")
    p.add_argument("--epsilon", type=_fraction, default=DEFAULTS["epsilon"],
                   help="Distribution-Only error rate, mean |p_hat - p| / (1/E), in [0, 1) "
                        "(default 0.05: ASSUMPTION between MoE-GPS's MMLU 1.8 %% and SST2 16 %%)")
    p.add_argument("--batches", type=int_at_least(1), default=DEFAULTS["batches"],
                   help="sampled batches per cell after one warm-up batch, >= 1 (default 4)")
    p.add_argument("--slots", type=int_at_least(1), default=DEFAULTS["slots"],
                   help="extra experts a GPU may hold per layer for replicas, >= 1 (default 1)")
    p.add_argument("--seed", type=int_at_least(0), default=DEFAULTS["seed"],
                   help="seed of every random draw, >= 0 (default 1; printed)")
    p.add_argument("--out", default=None, help=f"results folder (default <build>/results; "
                   f"<build> is {HELP}); the study goes to a sub-folder study-gps[...]")
    p.add_argument("--force", action="store_true", help="replace an existing results folder")
    p.add_argument("--no-figure", action="store_true", help="skip the figures")
    p.set_defaults(func=cmd_gps)
