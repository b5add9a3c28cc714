"""Synthesis reports: ``report.json`` (every figure, machine-readable) and ``report.md``.

Figures come from the tool logs parsed in :mod:`moehub.synth.asic` and
:mod:`moehub.synth.ecp5`; the projection constants and their sources are those of
:mod:`moehub.synth.project` (FACTS.md). Ranges are written as {low, nominal, high}.
``metrics.json`` repeats the hub's ASIC figures under OpenROAD-flow-scripts metric names
(:func:`orfs_metrics`).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from . import project, sram
from .blocks import MODULE_ORDER, _r, macro_bits, module_results
from .verilog import MODULE_ROLES, TOP

CAVEATS = [
    "OSU018 cells are about 2x the area of a foundry 180 nm library, so projected areas err large (FACTS.md).",
    "Yosys/ABC area is typically 10-50 % above commercial synthesis (FACTS.md).",
    "Typical corner only; no placement, routing or clock tree: wires enter only as the 20-30 % margin of the N5 projection.",
    "FO4 scaling assumes the critical path stays gate-dominated; at N5 long wires scale worse than gates.",
    "SRAM macros are black boxes: area from bit count x N5 bitcell x periphery factor; access time an assumed "
    f"{sram.SRAM_ACCESS_FO4:g} FO4 (setup {sram.SRAM_SETUP_FO4:g} FO4) in the OpenSTA model.",
    "Per-module timing treats the module's ports as ideal registers (zero input/output delay); only the "
    "top-level figure contains paths that cross modules.",
    "Stillmaker & Baas scaling (delay / 24, 180 nm -> 7 nm) is quoted only as an optimistic bound (FACTS.md).",
]


def build_asic(cfg, res: dict, fo4_ns: float, period_ns: float, macros, sram_opts: dict,
               flop_arrays=(), candidates=()) -> dict:
    """The ``asic`` section of report.json from the parsed results of one flow run.

    ``macros``: arrays mapped to SRAM macros; ``flop_arrays``: the other arrays (built
    from flops), each with the reason; ``candidates``: arrays large enough for a macro.
    """
    cand = {(m.module, m.name) for m in candidates}

    def why(m):
        if (m.module, m.name) in cand:
            return "multi-ported or asynchronous read: no 1R1W macro fits, built from flops"
        return "below the SRAM threshold: flops"
    areas, timing = res["areas"], res["timing"]
    modules = {}
    for key, mod, a, t in module_results(areas, timing):
        sram_bits = macro_bits(a.macros)
        proj = project.project(a.area_um2, sram_bits, t.logic_ns, fo4_ns)
        modules[key] = _r({
            "module": mod,
            "role": "whole hub" if key == "top" else MODULE_ROLES.get(key, key),
            "cells": a.cells, "flops": a.flops, "area_um2": a.area_um2,
            "gate_equivalents": proj["gate_equivalents"],
            "array_bits": a.memory_bits, "sram_bits": sram_bits,
            "sram_macros": a.macros,
            "critical_path_ns": t.min_period_ns, "logic_ns": t.logic_ns,
            "launch_ns": t.launch_ns, "setup_ns": t.setup_ns,
            "fo4": proj["fo4"], "fmax_MHz": t.fmax_MHz,
            "wns_ns": t.slack_ns, "tns_ns": t.tns_ns,
            "path": {"from": t.start_reg or t.startpoint, "to": t.end_reg or t.endpoint,
                     "from_kind": t.start_kind, "to_kind": t.end_kind,
                     "cells": len(t.cells),
                     "modules": sorted({c[0].split("/")[0] for c in t.cells if "/" in c[0]})},
            "n5": {k: v for k, v in proj.items() if k not in ("gate_equivalents", "fo4")},
        })
    top = modules["top"]
    return {
        "flow": "yosys 0.23 + ABC (&nf, buffer -p, upsize, dnsize) -> OSU018; OpenSTA 2.0.17",
        "clock_constraint_ns": period_ns,
        "fo4_osu018_ns": round(fo4_ns, 5),
        "sram": {**sram_opts, "access_fo4": sram.SRAM_ACCESS_FO4, "setup_fo4": sram.SRAM_SETUP_FO4,
                 "macros": [{"name": sram.macro_name(m), "module": m.module, "array": m.name,
                             "depth": m.depth, "width": m.width, "bits": m.bits} for m in macros],
                 "flop_arrays": [{"module": m.module, "array": m.name, "depth": m.depth, "width": m.width,
                                  "bits": m.bits, "why": why(m)} for m in flop_arrays]},
        "modules": modules,
        "line_rate": _r(project.line_rate(cfg.lanes, cfg.chunk_bytes, top["fo4"], cfg.link_GBps)),
        "projection_sources": project.SOURCES,
        "caveats": CAVEATS,
        "wall_s": {k: round(v, 1) for k, v in res["wall_s"].items()},
    }


#: platform name in ``metrics.json`` (``run__flow__platform``)
PLATFORM = "osu018"


def orfs_metrics(rep: dict) -> dict:
    """The hub's figures of ``rep["asic"]`` under OpenROAD-flow-scripts metric names
    (METRICS2.1: ``stage__category__subcategory``, ``__class:`` qualifiers), so that ORFS
    tooling and dashboards read them; ORFS's units: ns, um^2, Hz. Timing is the whole hub
    after synthesis (no placement). Macros have no area at OSU018 (their N5 area is
    projected in report.json), so ``__area__macros`` is 0 and the SRAM is counted in bits."""
    from .. import __version__
    a = rep["asic"]
    top, period = a["modules"]["top"], a["clock_constraint_ns"]
    clock = a.get("sdc", {}).get("clock_port", "clk")
    macros = sum(top["sram_macros"].values())
    return _r({
        "run__flow__design": TOP, "run__flow__platform": PLATFORM,
        "run__flow__variant": rep["config"], "run__flow__generator": f"moehub {__version__}",
        "constraints__clocks__count": 1,
        "constraints__clocks__details": [f"{clock}: {period:.4f}"],
        "clock__period": period, "clock__frequency": 1e9 / period,
        "synth__design__instance__count": top["cells"] + macros,
        "synth__design__instance__count__stdcell": top["cells"],
        "synth__design__instance__count__macros": macros,
        "synth__design__instance__count__class:sequential_cell": top["flops"],
        "synth__design__instance__area": top["area_um2"],
        "synth__design__instance__area__stdcell": top["area_um2"],
        "synth__design__instance__area__macros": 0.0,
        "synth__design__memory__sram_bits": top["sram_bits"],
        "timing__setup__ws": top["wns_ns"], "timing__setup__tns": top["tns_ns"],
        "timing__fmax": top["fmax_MHz"] * 1e6,
    })


def write_metrics(out_dir: Path, rep: dict) -> None:
    """``metrics.json`` beside report.json while it has an ``asic`` section (removed when
    a new configuration's report has none, so that it never describes another run)."""
    path = out_dir / "metrics.json"
    if "asic" in rep:
        path.write_text(json.dumps(orfs_metrics(rep), indent=2))
    elif path.exists():
        path.unlink()


def merge_write(out_dir: Path, cfg, section: str, data: dict, extra: dict | None = None) -> Path:
    """Add ``section`` (``asic`` or ``ecp5``) to ``out_dir/report.json``; rewrite report.md
    and metrics.json."""
    path = out_dir / "report.json"
    rep = {}
    if path.exists():
        try:
            rep = json.loads(path.read_text())
        except json.JSONDecodeError:
            rep = {}
    hub = dict(asdict(cfg))
    if rep.get("hub") != hub:
        rep = {}
    rep.update({"config": cfg.name, "hub": hub, **(extra or {})})
    rep[section] = data
    path.write_text(json.dumps(rep, indent=2))
    (out_dir / "report.md").write_text(markdown(rep))
    write_metrics(out_dir, rep)
    return path


# ------------------------------------------------------------------ Markdown
def _f(x, spec=".3g"):
    if isinstance(x, dict) and "nominal" in x:
        return f"{x['nominal']:{spec}} ({x['low']:{spec}}–{x['high']:{spec}})"
    if isinstance(x, float):
        return f"{x:{spec}}"
    return str(x)


def markdown(rep: dict) -> str:
    hub = rep["hub"]
    out = [f"# Synthesis report: `{rep['config']}`", ""]
    out.append(f"Hub: {hub['sources']} sources, {hub['experts']} experts, {hub['lanes']} lanes, "
               f"{hub['chunk_bytes']} B chunks ({hub['row_bytes'] // hub['chunk_bytes']} per row), "
               f"{hub['tags_per_source']} tags per source, {hub['max_rows_per_expert']} rows per expert; "
               f"synthesised with a {hub['data_bits']}-bit datapath.")
    out.append("")
    a = rep.get("asic")
    if a:
        out += _asic_md(rep, a)
    for key in ("asap7_tt", "asap7_ss"):     # moehub synth --lib asap7 (beside the projection)
        if rep.get(key):
            from . import asap7_report
            out += asap7_report.markdown(rep[key])
    e = rep.get("ecp5")
    if e:
        out += _ecp5_md(e)
    return "\n".join(out) + "\n"


def _asic_md(rep, a):
    mods = a["modules"]
    top = mods["top"]
    lr = a["line_rate"]
    fo4ps = a["fo4_osu018_ns"] * 1e3
    out = ["## ASIC: OSU 0.18 µm (Yosys + ABC, OpenSTA)", "",
           f"Clock constraint {a['clock_constraint_ns']} ns (also the ABC delay target; ABC effort "
           f"{a.get('abc_effort', 'normal')}); FO4 (OSU018, measured by OpenSTA) = "
           f"{fo4ps:.1f} ps; gate equivalent = NAND2X1 = 24 µm². Arrays of at least "
           f"{a['sram']['min_bits']} bits and {a['sram']['min_depth']} words are SRAM macros "
           "(counted in bits, area 0 at OSU018); smaller ones are flops.", ""]
    for m in a["sram"]["macros"]:
        out.append(f"* SRAM macro `{m['name']}`: `{m['module']}.{m['array']}`, {m['depth']} × {m['width']} = "
                   f"{m['bits']} bits.")
    for m in a["sram"].get("flop_arrays", []):
        out.append(f"* flop array `{m['module']}.{m['array']}`: {m['depth']} × {m['width']} = {m['bits']} bits "
                   f"({m['why']}).")
    out += ["",
           "| module | cells | flops | area µm² | GE | array bits | SRAM bits | critical path ns | logic FO4 | fmax MHz |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in MODULE_ORDER:
        m = mods.get(key)
        if not m:
            continue
        out.append(f"| {m['role']} (`{m['module']}`) | {m['cells']} | {m['flops']} | {m['area_um2']:.0f} | "
                   f"{m['gate_equivalents']:.0f} | {m['array_bits']} | {m['sram_bits']} | "
                   f"{m['critical_path_ns']:.2f} | {m['fo4']:.1f} | {m['fmax_MHz']:.0f} |")
    out += ["", "Critical path = clock-to-output + logic + setup (period − worst slack); logic FO4 = "
            "(arrival − clock-to-output) / FO4. Per-module rows: ports taken as ideal registers.", ""]
    out += ["### Critical paths", ""]
    for key in MODULE_ORDER:
        m = mods.get(key)
        if m:
            p = m["path"]
            via = f" through {', '.join(p['modules'])}" if p["modules"] else ""
            out.append(f"* **{m['role']}**: `{p['from']}` → `{p['to']}`, {p['cells']} cells{via}, "
                       f"{m['logic_ns']:.2f} ns of logic = {m['fo4']:.1f} FO4.")
    n5 = top["n5"]
    out += ["", "## Projection to a 5 nm-class node", "",
            "Method (FACTS.md): FO4 count × FO4_N5 (12–17 ps, 15 nominal) × (1 + wire margin 0.2–0.3) "
            "+ 3.6 FO4 flop overhead, + 5–10 % uncertainty; area = GE × 0.032 µm² / utilization (0.6–0.7) "
            "+ SRAM bits × 0.021 µm² × periphery factor (1.42–4). Values: nominal (low–high).", "",
            "| module | logic mm² | SRAM mm² | total mm² | % of H100 die | % of NVSwitch port | N5 fmax GHz |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for key in MODULE_ORDER:
        m = mods.get(key)
        if m:
            q = m["n5"]
            out.append(f"| {m['role']} | {_f(q['logic_mm2'])} | {_f(q['sram_mm2'])} | {_f(q['total_mm2'])} | "
                       f"{_f(q['h100_pct'])} | {_f(q['nvswitch_port_pct'])} | {_f(q['fmax_n5_GHz'])} |")
    out += ["", f"Optimistic bound (Stillmaker & Baas, delay ÷ 24): {n5['fmax_stillmaker_GHz']:.2f} GHz for the hub.", ""]
    pf, h = lr["at_projected_fmax"], lr["at_h100_clock"]
    verdict = lambda ok: "**PASS**" if ok else "**FAIL**"
    target = lr["target_GBps"]
    link = "NVLink4" if target == project.NVLINK4_GBPS else "the config's link, `link_GBps`"
    out += [f"## Line-rate verdict ({link}: {target:.0f} GB/s per direction)", "",
            f"* Needed: lanes × chunk bytes × clock ≥ {target:.0f} GB/s, i.e. a clock of at least "
            f"{lr['needed_clock_GHz']:.3f} GHz for {rep['hub']['lanes']} × {rep['hub']['chunk_bytes']} B.",
            f"* At the projected N5 fmax of this RTL ({_f(n5['fmax_n5_GHz'])} GHz): "
            f"{_f(pf['GBps'], '.0f')} GB/s → {verdict(pf['pass'])} (margin {pf['margin_pct']:+.0f} %).",
            f"* At the H100 clock ({h['clock_GHz']} GHz): {h['GBps']:.0f} GB/s "
            f"({h['bandwidth_margin_pct']:+.0f} %); the critical stage has {h['stage_fo4']:.1f} FO4 of logic: "
            f"**{h['timing']}** against the projection's budget of {_f(h['budget_fo4'], '.1f')} FO4 "
            f"(margin {h['fo4_margin']:+.1f} FO4) and FACTS.md's rule of ≲{h['rule_fo4']:.0f} FO4 "
            f"(margin {h['rule_margin']:+.1f} FO4) → {verdict(h['pass'])}"
            + (f"; that path would need ≈{h['stages_needed']:.0f} pipeline stages." if not h["timing_pass"]
               else "."),
            "  (PASS: within the nominal budget, which includes a 20–30 % wire margin and 5–10 % "
            "uncertainty; MARGINAL: within the rule of thumb and the budget's range but not its "
            "nominal value; FAIL: beyond the rule.)", ""]
    out += ["## Caveats", ""] + [f"* {c}" for c in a["caveats"]]
    out += ["", "Sources of the projection constants:", ""]
    out += [f"* {k}: {v}" for k, v in a["projection_sources"].items()]
    out += ["", f"Wall time: {', '.join(f'{k} {v:.0f} s' for k, v in a['wall_s'].items())}.", "",
            "The hub's figures under OpenROAD-flow-scripts metric names: `metrics.json`"
            + (f"; constraints: `{a['sdc']['file']}`." if a.get("sdc") else "."), ""]
    return out


def _ecp5_md(e):
    out = ["## FPGA prototype: Lattice ECP5 (Yosys synth_ecp5 + nextpnr-ecp5)", ""]
    if e.get("error"):
        return out + [f"Not run: {e['error']}", ""]
    if not e.get("fits", True):
        return out + [f"Device {e['device']} ({e['package']}), {e['data_bits']}-bit datapath: the hub needs "
                      f"{e['luts']} LUT4 and {e['flops']} flops ({e['lut_util_pct']:.0f} % of the device's LUTs "
                      "with the harness): it does not fit, so no place and route was run.", ""]
    out += [f"Device {e['device']} ({e['package']}), {e['data_bits']}-bit datapath.", "",
            "| LUT4 | flops | block RAMs (DP16KD) | DSPs (MULT18X18D) | post-route fmax MHz | utilisation of LUTs |",
            "|---:|---:|---:|---:|---:|---:|",
            f"| {e['luts']} | {e['flops']} | {e['brams']} | {e.get('dsps', 0)} | {e['fmax_MHz']:.1f} | "
            f"{e['lut_util_pct']:.0f} % |", "",
            f"Post-route fmax is nextpnr's last \"Max frequency\" line; the constraint was "
            f"{e['target_MHz']} MHz.", ""]
    return out
