"""Measure a library's FO4 delay with OpenSTA (the unit of every delay we project), and
the clock-to-output plus setup of its flop (the fixed part of every cycle).

A chain of inverters (OSU018 INVX1, ASAP7 INVx1), each driving four of them (the next
stage and three dummies), is timed; the FO4 delay is the mean of a rising and a falling
stage in the middle of the chain, where the input slew has settled (FACTS.md: ~99 ps
measured at OSU018). The flop pair: one flop drives the D input of a second and three
inverters (a fan-out of four); its clock-to-output and the second flop's setup time are
what a register-to-register path pays besides its logic.
"""
from __future__ import annotations

import re
from pathlib import Path

from . import tools

STAGES = 8
#: input transition of the chain's first stage, in ns (the middle of the
#: chain does not depend on it: the slew settles within two stages)
INPUT_SLEW_NS = 0.1


def _netlist(inv=("INVX1", "A", "Y"), flop=None) -> str:
    cell, a, y = inv
    ports = "a, y" + (", clk, d" if flop else "")
    lines = [f"module fo4_chain ({ports});", "  input a;", "  output y;",
             f"  wire [{STAGES}:0] n;", "  assign n[0] = a;", "  assign y = n[" + str(STAGES) + "];"]
    for k in range(STAGES):
        lines.append(f"  {cell} s{k} (.{a}(n[{k}]), .{y}(n[{k + 1}]));")
        for d in range(3):
            lines.append(f"  {cell} d{k}_{d} (.{a}(n[{k + 1}]), .{y}());")
    if flop:
        fcell, ck, dpin, q = flop
        lines += ["  input clk, d;", "  wire q0;",
                  f"  {fcell} f0 (.{ck}(clk), .{dpin}(d), .{q}(q0));",
                  f"  {fcell} f1 (.{ck}(clk), .{dpin}(q0), .{q}());"]
        lines += [f"  {cell} fl{k} (.{a}(q0), .{y}());" for k in range(3)]
    return "\n".join(lines + ["endmodule", ""])


def _script(libs, unit_ns: float, flop: bool) -> str:
    slew = INPUT_SLEW_NS / unit_ns
    lines = [f"read_liberty {p}" for p in libs] + [
        "read_verilog fo4_chain.v", "link_design fo4_chain",
        f"set_input_transition {slew:g} [get_ports a]",
        "report_checks -unconstrained -from [get_ports a] -to [get_ports y] -digits 4"]
    if flop:
        lines += [f"create_clock -name clk -period {1000 * slew:g} [get_ports clk]",
                  'puts "@@@ FLOP"', "report_checks -from [get_pins f0/*] -to [get_pins f1/*] -digits 4"]
    return "\n".join(lines + ["exit", ""])


def measure(work: Path, lib=None) -> float:
    """FO4 delay in ns of ``lib`` (a :class:`~moehub.synth.library.CellLibrary`; default
    the OSU018 library), from an OpenSTA report written under ``work``."""
    return measure_all(work, lib)["fo4_ns"]


def measure_all(work: Path, lib=None) -> dict:
    """``fo4_ns`` of ``lib`` and, for a library (not the OSU018 default, whose flop
    overhead FACTS.md fixes at 3.6 FO4), ``clk_q_ns`` and ``setup_ns`` of its flop."""
    work.mkdir(parents=True, exist_ok=True)
    libs = lib.liberty if lib else (tools.osu018_lib(),)
    unit = lib.time_unit_ns if lib else 1.0
    (work / "fo4_chain.v").write_text(_netlist(lib.inverter if lib else ("INVX1", "A", "Y"),
                                               lib.flop if lib else None))
    (work / "fo4.tcl").write_text(_script(libs, unit, lib is not None))
    log = work / "fo4.log"
    tools.run_logged([tools.sta(), "-no_splash", "-exit", "fo4.tcl"], log, work)
    text = log.read_text()
    out = {"fo4_ns": parse(text.split("@@@ FLOP")[0]) * unit}
    if lib is not None:
        clk_q, setup = parse_flop(text.split("@@@ FLOP")[1], lib.flop[3])
        out.update(clk_q_ns=clk_q * unit, setup_ns=setup * unit)
    return out


def parse(text: str) -> float:
    delays = [float(d) for d, inst in re.findall(r"^\s*([\d.]+)\s+[\d.]+\s+[\^v]\s+(s\d+)/\w+", text, re.M)]
    if len(delays) < 4:
        raise RuntimeError(f"FO4 measurement: could not parse the inverter chain delays")
    mid = len(delays) // 2
    return (delays[mid - 1] + delays[mid]) / 2


def parse_flop(text: str, q_pin: str = "Q") -> tuple[float, float]:
    """(clock-to-output, setup) of the flop pair's report, in the Liberty's unit."""
    q = re.search(rf"^\s*([\d.]+)\s+[\d.]+\s+[\^v]\s+f0/{q_pin}\s", text, re.M)
    s = re.search(r"^\s*(-?[\d.]+)\s+-?[\d.]+\s+library setup time", text, re.M)
    if not (q and s):
        raise RuntimeError("flop measurement: could not parse clock-to-output and setup")
    return float(q.group(1)), -float(s.group(1))
