"""Measure the library's FO4 delay with OpenSTA (the unit of every delay we project).

A chain of INVX1 inverters, each driving four INVX1 inputs (the next stage and three
dummies), is timed; the FO4 delay is the mean of a rising and a falling stage in the
middle of the chain, where the input slew has settled (FACTS.md: ~99 ps measured).
"""
from __future__ import annotations

import re
from pathlib import Path

from . import tools

STAGES = 8


def _netlist() -> str:
    lines = ["module fo4_chain (a, y);", "  input a;", "  output y;",
             f"  wire [{STAGES}:0] n;", "  assign n[0] = a;", "  assign y = n[" + str(STAGES) + "];"]
    for k in range(STAGES):
        lines.append(f"  INVX1 s{k} (.A(n[{k}]), .Y(n[{k + 1}]));")
        for d in range(3):
            lines.append(f"  INVX1 d{k}_{d} (.A(n[{k + 1}]), .Y());")
    return "\n".join(lines + ["endmodule", ""])


def measure(work: Path) -> float:
    """FO4 delay in ns of the OSU018 library, from an OpenSTA report written under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "fo4_chain.v").write_text(_netlist())
    (work / "fo4.tcl").write_text("\n".join([
        f"read_liberty {tools.osu018_lib()}", "read_verilog fo4_chain.v", "link_design fo4_chain",
        "set_input_transition 0.1 [get_ports a]",
        "report_checks -unconstrained -from [get_ports a] -to [get_ports y] -digits 4", "exit", ""]))
    log = work / "fo4.log"
    tools.run_logged([tools.sta(), "-no_splash", "-exit", "fo4.tcl"], log, work)
    return parse(log.read_text())


def parse(text: str) -> float:
    delays = [float(d) for d, inst in re.findall(r"^\s*([\d.]+)\s+[\d.]+\s+[\^v]\s+(s\d+)/Y", text, re.M)]
    if len(delays) < 4:
        raise RuntimeError(f"FO4 measurement: could not parse the inverter chain delays")
    mid = len(delays) // 2
    return (delays[mid - 1] + delays[mid]) / 2
