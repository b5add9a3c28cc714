"""``moehub study v2``: the ablation of hub protocol v2 on the co-simulation.

    moehub study v2                                   # DeepSeek-V3, Mixtral-8x7B on h100x8, h100x16-ib
    moehub study v2 --model deepseek-v3 --system h100x8 --tokens 512
    moehub study v2 --hub-features multicast,early_counts --force

For every (system config, model): the hub as today (protocol v1), the hub with each
protocol-v2 feature of ``--hub-features`` alone, with all of them, and the software
baselines (DeepEP normal and low-latency, Comet, the fused kernel, the bulk all-to-all)
on the same layer (same routing, network, GEMM model). Per row: layer time, speedup over
today's hub and over the best software system, NVLink and inter-node bytes of the
dispatch (wire bytes: payload and packet headers), receive-buffer memory per GPU
(:mod:`..memory`). Hub rows take the area (N5 mm², gate equivalents) and deepest stage
(FO4) of the hub config the layer's hub derives from, with the row's protocol-v2 keys, from
its synthesis report when one was run (``moehub synth --config <hub> [--set
count_packets=1] [--set pool_pages=N] [--set max_targets=N]``, and ``--set sources=N --set
experts=N`` where the layer's hub has other sources or experts per GPU -- two nodes --
:func:`synthesis`: the
sizes the co-simulation fits to the layer, row bytes and region rows, are the config's,
and listed). ``--synthesis-only`` re-reads them into an existing run (a hub synthesised
after the run) without re-running its layers.

Writes ``<build>/results/study-v2[_<non-default values>]/``: ``ablation.csv``,
``ablation.md``, ``ablation.png`` (+ ``.svg``) and ``run.json``; refused if present
without ``--force``.
"""
from __future__ import annotations

import csv
import shutil

import numpy as np

from ... import progress
from ..config import available, load_system_config, load_workload_config
from ...argcheck import UsageError, int_at_least, load_config_flag, name_list
from ..cli import add_results_options
from ..experiment import load_configs
from ..layer import Layer
from ..memory import capacity_padded
from ..systems import BASELINES, receive_memory, run_system
from ..systems import deepep as deepep_mod
from ..systems import hybridep as hybridep_mod
from ..systems.hub import FEATURES, hub_config_v2, wire_rows
from ..workload import make_routing
from . import publish

DEFAULT_MODELS = ("deepseek-v3", "mixtral-8x7b")
DEFAULT_SYSTEMS = ("h100x8", "h100x16-ib")
#: co-simulated layers with more routed rows are refused (minutes per layer on a slow core)
MAX_ROWS = 600_000
COLUMNS = ["system_config", "model", "tokens_per_gpu", "row", "system", "kind", "layer_us",
           "speedup_vs_hub_today", "speedup_vs_best_sw", "nvlink_GB", "internode_GB",
           "recv_MiB_per_gpu", "wire_rows", "area_mm2_n5", "gate_equivalents", "deepest_fo4",
           "synthesis", "notes"]
#: hub config fields a synthesis report need not share with the layer's hub: names, the
#: datapath width (synthesis sets its own) and what the co-simulation sizes to the layer
#: (:func:`..layer.derive_hub`: row bytes, region rows, token bits, top-k), which the
#: row's ``synthesis`` cell lists where they differ
_SYNTH_IGNORED = ("name", "description", "data_bits")
_SYNTH_SIZED = ("row_bytes", "max_rows_per_expert", "token_bits", "topk")


def _synthesis_report(name: str):
    """The synthesis report of hub ``name`` and its deepest paths (or None): from the build
    folder ``moehub synth`` writes (``<build>/synth/<name>/``), else from the repository's
    synthesis record (``records/synth/<name>.json``, which a fresh clone has); and where it
    came from."""
    import json
    from ... import runinfo
    from ...paths import output_dir
    folder = output_dir("synth") / name
    if (folder / "report.json").exists():
        deepest = folder / "deepest_paths.json"          # (scripts/sta_paths.py --json)
        return (json.loads((folder / "report.json").read_text()),
                json.loads(deepest.read_text()) if deepest.exists() else None, "report")
    record = runinfo.PACKAGE_DIR.parent / "records" / "synth" / f"{name}.json"
    if record.exists():
        data = json.loads(record.read_text()).get("data") or {}
        if data.get("report"):
            return data["report"], data.get("deepest_paths"), "record"
    return None, None, None


def synthesis(cfg) -> dict:
    """Area and deepest stage of the hub config ``cfg`` comes from (its name before ``@``),
    with ``cfg``'s protocol-v2 keys, from the synthesis of ``<name>[_<v2 keys>]`` (the
    folder ``moehub synth --config <name> --set KEY=VALUE`` writes, else its record in
    ``records/synth/``), when that report shares every field with ``cfg`` but the datapath
    width and the layer-sized ones (listed in ``synthesis`` where they differ); else the
    reason it is missing."""
    from ...synth.flow import with_changes
    changes = {k: getattr(cfg, k) for k in ("count_packets", "pool_pages", "max_targets")
               if getattr(cfg, k) and (k != "max_targets" or cfg.multicast)}
    base = cfg.replace(name=cfg.name.split("@")[0])
    changes.update(_scale_changes(base))
    name = with_changes(base, changes).name if changes else base.name
    rep, deepest, source = _synthesis_report(name)
    if rep is None:
        return {"synthesis": f"not synthesised ({name})"}
    hub = rep.get("hub", {})
    differ = [k for k, v in hub.items()
              if k not in _SYNTH_IGNORED + _SYNTH_SIZED and getattr(cfg, k, v) != v]
    if differ or "asic" not in rep:
        return {"synthesis": f"{name}: report of another hub ({', '.join(differ) or 'no asic section'})"}
    sized = [f"{k} {hub[k]}" for k in _SYNTH_SIZED if k in hub and hub[k] != getattr(cfg, k)]
    top = rep["asic"]["modules"]["top"]
    fo4, how = top["fo4"], source
    if isinstance(deepest, dict):
        fams = deepest.get("families") or [{"fo4": 0.0}]
        if fams[0]["fo4"] > fo4:
            fo4, how = fams[0]["fo4"], f"sta_paths: {fams[0]['from']} -> {fams[0]['to']}"
    return {"area_mm2_n5": top["n5"]["total_mm2"]["nominal"], "gate_equivalents": top["gate_equivalents"],
            "deepest_fo4": fo4,
            "synthesis": name + (f" (synthesised with {', '.join(sized)})" if sized else "") + f"; FO4 {how}"}


def _scale_changes(cfg) -> dict:
    """The sources and experts per GPU where the layer's hub differs from the config it
    derives from (a two-node layer: 16 sources; ``moehub synth --set sources=16 --set
    experts=N`` makes that hub's report)."""
    from ...spec.config import ConfigError, load_hub_config
    try:
        named = load_hub_config(cfg.name)
    except ConfigError:
        return {}
    return {k: getattr(cfg, k) for k in ("sources", "experts") if getattr(cfg, k) != getattr(named, k)}


def variants(features) -> list:
    """(name, feature set) of the hub rows: today, each feature alone, all together."""
    f = [x for x in FEATURES if x in features]
    out = [("hub today (v1)", frozenset())] + [(f"hub + {x}", frozenset({x})) for x in f]
    if len(f) > 1:
        out.append(("hub + all: " + " + ".join(f), frozenset(f)))
    return out


def link_bytes(L: Layer, counts: np.ndarray, row_wire: float) -> tuple:
    """(NVLink, inter-node) wire bytes of ``counts[s, d]`` rows; a GPU's own rows use neither."""
    G = L.G
    node = np.array([L.sys.node_of(g) for g in range(G)])
    same = node[:, None] == node[None, :]
    off = ~np.eye(G, dtype=bool)
    return (float((counts * same * off).sum() * row_wire),
            float((counts * ~same).sum() * row_wire))


def _wire(L: Layer, name: str, features=frozenset()) -> tuple:
    """(wire rows matrix, wire bytes per row) of a system's dispatch."""
    if name == "hub":
        mc = hub_config_v2(L, features).multicast if features else False
        return wire_rows(L, mc).counts, L.row_wire_hub
    if name in ("deepep", "hybridep"):          # the same routes; HybridEP's rows carry probs
        first, fwd = deepep_mod._routes(L, L.gpu_rows, L.node_rows, L.fwd_rows)
        return first + fwd, (L.row_wire_sw if name == "deepep" else hybridep_mod.dispatch_wire(L))
    return L.counts, L.row_wire_sw


def point(system: str, model: str, workload: str, tokens: int | None, features,
          seed=None) -> list:
    """Every row of one (system config, model) point."""
    s, m, w = load_configs(system, model, workload, tokens, seed=seed)
    L = Layer(s, m, w, make_routing(m, w, s.gpus))
    rows = []
    with progress.stage(f"study v2: {m.name} on {s.name}", total=len(BASELINES)
                        + len(variants(features)), unit="layers") as st:
        base = {}
        for n in BASELINES:
            st.update(note=n, force=True)
            base[n] = run_system(n, L)
            st.advance()
        hubs = {}
        for name, f in variants(features):
            st.update(note=name, force=True)
            hubs[name] = (f, run_system("hub", L, hub_features=f))
            st.advance()
    best = min(BASELINES, key=lambda n: base[n].latency_us)
    today = hubs["hub today (v1)"][1].latency_us
    common = {"system_config": s.name, "model": m.name, "tokens_per_gpu": L.T}

    def row(label, kind, res, sysname, f=frozenset(), notes=""):
        counts, rw = _wire(L, sysname, f)
        nvl, nic = link_bytes(L, counts, rw)
        mem = receive_memory(L, sysname, f)
        return {**common, "row": label, "system": sysname, "kind": kind,
                "layer_us": res.latency_us,
                "speedup_vs_hub_today": today / res.latency_us,
                "speedup_vs_best_sw": base[best].latency_us / res.latency_us,
                "nvlink_GB": nvl / 1e9, "internode_GB": nic / 1e9,
                "recv_MiB_per_gpu": mem["bytes"] / 2 ** 20, "wire_rows": int(counts.sum()),
                **_no_synthesis(), **(synthesis(hub_config_v2(L, f)) if sysname == "hub" else {}),
                "notes": notes}
    for name, (f, res) in hubs.items():
        ex = res.extra
        notes = []
        if "multicast" in f:
            notes.append(f"max {ex.get('max_targets')} targets/row, gather "
                         f"{1e3 * ex.get('gather_row_us', 0.0):.1f} ns/row")
        if "early_counts" in f and ex.get("early_final_us"):
            notes.append(f"experts final {np.mean(ex['early_final_us']):.0f} us before done")
        if ex.get("admission_tight_us"):
            notes.append(f"admission one packet a cycle for {100 * ex['admission_tight_rows'] / max(ex['wire_rows'], 1):.1f} % "
                         f"of rows (<= {max(ex['admission_tight_us']):.0f} us a GPU, not in the layer time)")
        if "paged" in f and ex.get("pages"):
            notes.append(f"{max(ex['pages'])} pages max")
        rows.append(row(name, "hub", res, "hub", f, "; ".join(notes)))
    for n in BASELINES:
        rows.append(row(base[n].label, "software" + (" (best)" if n == best else ""), base[n], n))
    cp = capacity_padded(L)
    rows.append({**common, "row": f"capacity-padded buffers (C=1.25, {cp['capacity']} rows)",
                 "system": "capacity-padded", "kind": "memory only", "layer_us": float("nan"),
                 "speedup_vs_hub_today": float("nan"), "speedup_vs_best_sw": float("nan"),
                 "nvlink_GB": float("nan"), "internode_GB": float("nan"),
                 "recv_MiB_per_gpu": cp["bytes"] / 2 ** 20, "wire_rows": 0, **_no_synthesis(),
                 "notes": ""})
    return rows


def _no_synthesis() -> dict:
    return {"area_mm2_n5": float("nan"), "gate_equivalents": float("nan"), "deepest_fo4": float("nan"),
            "synthesis": ""}


def check(args) -> None:
    load_config_flag("--workload", load_workload_config, args.workload)
    for sname in args.system:
        s = load_config_flag("--system", load_system_config, sname)
        for mname in args.model:
            _, m, w = load_configs(sname, mname, args.workload, args.tokens)
            rows = s.gpus * w.tokens_per_gpu * m.topk
            if rows > MAX_ROWS:
                raise UsageError("--tokens", w.tokens_per_gpu, f"{mname} on {sname} would "
                                 f"route {rows:,} rows per layer, more than {MAX_ROWS:,}")
            if (s.gpus <= m.experts and m.experts % s.gpus) or \
                    (s.gpus > m.experts and s.gpus % m.experts):
                raise UsageError("--system", sname, f"{mname}'s {m.experts} experts do not "
                                 f"place on its {s.gpus} GPUs")


def run_name(args) -> str:
    if args.run:
        return args.run
    parts = ["study-v2"]
    if tuple(args.model) != DEFAULT_MODELS:
        parts.append("m" + "+".join(args.model))
    if tuple(args.system) != DEFAULT_SYSTEMS:
        parts.append("+".join(args.system))
    if args.workload != "default":
        parts.append(args.workload)
    if args.tokens is not None:
        parts.append(f"t{args.tokens}")
    if tuple(args.hub_features) != FEATURES:
        parts.append("f" + "+".join(args.hub_features))
    if args.seed is not None:
        parts.append(f"seed{args.seed}")
    return "_".join(parts)


def compute(args) -> list:
    return [r for s in args.system for m in args.model
            for r in point(s, m, args.workload, args.tokens, frozenset(args.hub_features),
                           args.seed)]


def _f(v, fmt):
    return "—" if v != v else format(v, fmt)


def table(rows: list) -> str:
    out = []
    for key in dict.fromkeys((r["system_config"], r["model"], r["tokens_per_gpu"]) for r in rows):
        out.append(f"### {key[1]} on {key[0]}, {key[2]} tokens/GPU\n")
        out.append("| row | layer µs | vs hub today | vs best SW | NVLink GB | inter-node GB "
                   "| recv MiB/GPU | area N5 mm² (GE) | deepest FO4 | notes |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if (r["system_config"], r["model"], r["tokens_per_gpu"]) != key:
                continue
            name = r["row"] + (" **(best SW)**" if r["kind"] == "software (best)" else "")
            out.append(f"| {name} | {_f(r['layer_us'], '.0f')} | "
                       f"{_f(r['speedup_vs_hub_today'], '.3f')} | "
                       f"{_f(r['speedup_vs_best_sw'], '.3f')} | {_f(r['nvlink_GB'], '.3f')} | "
                       f"{_f(r['internode_GB'], '.3f')} | {_f(r['recv_MiB_per_gpu'], '.1f')} | "
                       f"{_area(r)} | {_f(r['deepest_fo4'], '.1f')} | {_notes(r)} |")
        out.append("")
    return "\n".join(out)


def _area(r) -> str:
    """The area cell: N5 mm² and gate equivalents, or why there is none (hub rows)."""
    if r["area_mm2_n5"] == r["area_mm2_n5"]:
        return f"{r['area_mm2_n5']:.3f} ({r['gate_equivalents'] / 1e3:.0f}k)"
    return r["synthesis"] or "—"


def _notes(r) -> str:
    """The notes cell; a synthesised hub row names its synthesis."""
    synth = f"synthesis: {r['synthesis']}" if r["area_mm2_n5"] == r["area_mm2_n5"] else ""
    return "; ".join(x for x in (r["notes"], synth) if x)


def _short(r) -> str:
    if r["kind"] == "hub":
        return r["row"].replace("hub + all: ", "+all: ").replace("hub + ", "+") \
            .replace(" (v1)", "").replace("early_counts", "counts")
    return r["system"]


def figure(rows: list, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = list(dict.fromkeys((r["system_config"], r["model"]) for r in rows))
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 7.5), squeeze=False)
    for j, key in enumerate(keys):
        rs = [r for r in rows if (r["system_config"], r["model"]) == key]
        timed = [r for r in rs if r["layer_us"] == r["layer_us"]]
        names = [_short(r) for r in timed]
        col = ["tab:blue" if r["kind"] == "hub" else
               ("tab:red" if "best" in r["kind"] else "tab:gray") for r in timed]
        ax = axes[0][j]
        ax.barh(range(len(timed)), [r["layer_us"] for r in timed], color=col)
        ax.set_yticks(range(len(timed)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("layer time (µs)")
        ax.set_title(f"{key[1]} on {key[0]}", fontsize=9)
        for i, r in enumerate(timed):
            ax.text(r["layer_us"], i, f" {r['layer_us']:.0f}", va="center", fontsize=6)
        ax = axes[1][j]
        names = [_short(r) for r in rs]
        ax.barh(range(len(rs)), [r["recv_MiB_per_gpu"] for r in rs],
                color=["tab:blue" if r["kind"] == "hub" else "tab:gray" for r in rs])
        ax.set_xscale("log")
        ax.set_yticks(range(len(rs)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("receive memory per GPU (MiB, log)")
    fig.suptitle("Hub protocol v2 ablation (blue: hub, red: best software system)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    fig.savefig(path.with_suffix(".svg"))
    plt.close(fig)
    return path


def write(rows: list, folder, figures: bool) -> list:
    p = folder / "ablation.csv"
    with open(p, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    paths = [p, folder / "ablation.md"]
    paths[1].write_text(table(rows))
    if figures:
        paths.append(figure(rows, folder / "ablation.png"))
    return paths


def cmd_v2(args) -> int:
    check(args)
    if args.synthesis_only:
        return refresh_synthesis(args)
    return publish(args, run_name(args), lambda: compute(args), write, table)


def refresh_synthesis(args) -> int:
    """``--synthesis-only``: the run's hub rows take the synthesis reports as they are now
    (area, deepest stage; a hub synthesised since the run), the layers are not re-run --
    they do not depend on the syntheses. The run's other columns are kept as written."""
    from ...paths import writing
    from ..experiment import results_dir
    folder = results_dir(args.out) / run_name(args)
    path = folder / "ablation.csv"
    if not path.exists():
        raise UsageError("--synthesis-only", str(folder), "no ablation.csv there: run the study first")
    rows = read_rows(path)
    layers = {}
    for r in rows:
        if r["system"] != "hub":
            continue
        key = (r["system_config"], r["model"])
        if key not in layers:
            s, m, w = load_configs(key[0], key[1], args.workload, int(r["tokens_per_gpu"]), seed=args.seed)
            layers[key] = Layer(s, m, w, make_routing(m, w, s.gpus))
        feats = dict(variants(FEATURES)).get(r["row"])
        if feats is None:
            raise UsageError("--synthesis-only", str(path), f"unknown hub row {r['row']!r}")
        r.update(_no_synthesis(), **synthesis(hub_config_v2(layers[key], feats)))
    with writing(folder, True, run=folder.name, synthesis_only=True) as tmp:
        names = [p.name for p in write(rows, tmp, not args.no_figure)]
        for old in folder.iterdir():          # (the figure shows no synthesis: kept as it was)
            if old.is_file() and not (tmp / old.name).exists() and old.name != "run.json":
                shutil.copy2(old, tmp / old.name)
    print(table(rows))
    for n in names + ["run.json"]:
        print(f"  {folder / n}")
    return 0


def read_rows(path) -> list:
    """The rows of an ``ablation.csv`` with their numbers as numbers (empty: NaN)."""
    text = {"system_config", "model", "row", "system", "kind", "synthesis", "notes"}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in COLUMNS:
            if k not in text:
                r[k] = float(r[k]) if r[k] not in ("", "nan") else float("nan")
        r["tokens_per_gpu"], r["wire_rows"] = int(r["tokens_per_gpu"]), int(r["wire_rows"])
    return rows


def add_parser(studies) -> None:
    p = studies.add_parser("v2", help="hub protocol v2 ablation: multicast rows, per-expert "
                           "count packets, page pool, against today's hub and the software "
                           "systems (time, link bytes, receive memory)")
    p.add_argument("--model", type=name_list(lambda: available("model"), "model"),
                   default=DEFAULT_MODELS, help=f"comma-separated model configs (default "
                   f"{','.join(DEFAULT_MODELS)})")
    p.add_argument("--system", type=name_list(lambda: available("system"), "system"),
                   default=DEFAULT_SYSTEMS, help="comma-separated system configs (default "
                   f"{','.join(DEFAULT_SYSTEMS)})")
    p.add_argument("--workload", default="default", help="workload config (default 'default')")
    p.add_argument("--tokens", type=int_at_least(1), default=None,
                   help="tokens per GPU (default: the workload's, 4096 for 'default')")
    p.add_argument("--hub-features", type=name_list(lambda: FEATURES, "hub feature"),
                   default=FEATURES, help="protocol-v2 features of the ablation: each alone "
                   f"and all together (default {','.join(FEATURES)})")
    p.add_argument("--seed", type=int_at_least(0), default=None, help="routing seed")
    p.add_argument("--no-figure", action="store_true", help="skip the figure")
    p.add_argument("--synthesis-only", action="store_true",
                   help="re-read the synthesis reports into the run's existing tables (the "
                   "hub rows' area and deepest stage); the layers are not re-run")
    add_results_options(p, "study-v2 and every non-default value")
    p.set_defaults(func=cmd_v2)
