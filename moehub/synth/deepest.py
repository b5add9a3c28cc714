"""The deepest register-to-register path of each pair of register families of a timed hub.

``moehub synth`` reports the single worst path of each module; closing timing needs the
next ones too, and with SRAM macros (a slow clock-to-output) the worst-slack path can
start at a macro and hide deeper flop-to-flop logic. This re-times a synthesis folder's
``netlist.v`` with OpenSTA (the run's own SDC and Liberty files), asks for the worst path
to each of the ``endpoints`` worst endpoints, names both ends by their RTL register (as
the report does) and keeps, per (start family -> end family) -- register names without
bit indices -- the path with the most logic, in FO4 (arrival minus the launching
clock-to-output, over the library's FO4). ``scripts/sta_paths.py`` prints it; the ASAP7
flow (:mod:`moehub.synth.asap7`) judges its cycle on it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import asic, tools
from .verilog import TOP

#: endpoints asked of OpenSTA (each its worst path): enough to reach every family of the
#: large hubs (scripts/sta_paths.py's default since the families were first listed)
ENDPOINTS = 3000


@dataclass
class Family:
    fo4: float              # logic of the deepest path of the family pair, in FO4
    start: str              # its ends, named by register
    end: str
    path: asic.PathTiming   # in ns

    def cycle_ns(self, wire_margin: float = 0.0) -> float:
        """Launch + logic x (1 + wire margin) + setup: the cycle this path needs."""
        return self.path.launch_ns + self.path.setup_ns + self.path.logic_ns * (1 + wire_margin)

    def as_dict(self) -> dict:
        p = self.path
        return {"fo4": round(self.fo4, 2), "from": self.start, "to": self.end, "cells": len(p.cells),
                "logic_ns": round(p.logic_ns, 5), "launch_ns": round(p.launch_ns, 5),
                "setup_ns": round(p.setup_ns, 5)}


def family(name: str) -> str:
    """A register name without its indices: ``pm/rows[3].tag[1]`` -> ``pm/rows.tag``."""
    return re.sub(r"\d+", "#", re.sub(r"\[\d+\]", "", name))


def sta_tcl(libs, sram_lib: bool, endpoints: int, sdc: str = asic.SDC_NAME) -> str:
    lines = [f"read_liberty {p}" for p in libs]
    if sram_lib:
        lines.append("read_liberty sram.lib")
    return "\n".join(lines + [
        "read_verilog netlist.v", f"link_design {TOP}", f"read_sdc {sdc}", f'puts "@@@ MODULE {TOP}"',
        f"report_checks -path_delay max -digits 4 -group_count {endpoints} -endpoint_count 1",
        "exit", ""])


def families(folder: Path, libs, seq_liberty: Path, fo4_ns: float, period_ns: float,
             unit_ns: float = 1.0, endpoints: int = ENDPOINTS, log: str = "sta_paths.log") -> list[Family]:
    """Every family pair of ``folder``'s netlist with its deepest path, deepest first.
    ``libs``: the Liberty files the run was timed with; ``unit_ns``: their time unit."""
    folder = Path(folder)
    (folder / "sta_paths.tcl").write_text(sta_tcl(libs, (folder / "sram.lib").exists(), endpoints))
    tools.run_logged([tools.sta(), "-no_splash", "-exit", "sta_paths.tcl"], folder / log, folder)
    out = (folder / log).read_text()
    seq = asic.sequential_cells(Path(seq_liberty).read_text())
    qnets, children = asic.register_names((folder / "netlist.v").read_text(), seq)
    best: dict = {}
    for chunk in out.split("Startpoint:")[1:]:
        p = asic.parse_sta(f"@@@ MODULE {TOP}\nStartpoint:" + chunk, period_ns / unit_ns)[TOP]
        p = asic.to_ns(p, unit_ns)
        s = asic.describe_point(p.startpoint, TOP, qnets, children)
        e = asic.describe_point(p.endpoint, TOP, qnets, children)
        key = (family(s), family(e))
        fo = p.logic_ns / fo4_ns
        if key not in best or fo > best[key].fo4:
            best[key] = Family(fo, s, e, p)
    return sorted(best.values(), key=lambda r: -r.fo4)
