"""The deepest register-to-register paths of a synthesised hub, one per endpoint family.

``moehub synth`` reports the single worst path of each module; closing timing needs the
next ones too. This re-times ``netlist.v`` of a synthesis folder with OpenSTA (the run's own
SDC), asks for the worst path to each of the ``--endpoints`` worst endpoints, names both
ends by the RTL register their Q drives (as the report does) and prints one line per
(start family -> end family), families being register names without bit indices, deepest
first, in FO4 of logic (arrival minus the launching clock-to-output, over the run's FO4).

    .venv/bin/python scripts/sta_paths.py build/synth/b200-nvlink5 [--endpoints 3000] [--top 25] [--json]

Why beside the report: the report's FO4 is the logic of the path with the worst slack. With
SRAM macros (a slow clock-to-output) that path can start at a macro and hide deeper
flop-to-flop logic; the deepest family here is the logic depth the FO4 budget is about.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from moehub.synth import asic


#: where ``--json`` writes the families, deepest first
DEEPEST_JSON = "deepest_paths.json"


def family(name: str) -> str:
    return re.sub(r"\d+", "#", re.sub(r"\[\d+\]", "", name))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--endpoints", type=int, default=3000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cells", action="store_true", help="print the cells of the deepest path of each family")
    ap.add_argument("--json", action="store_true",
                    help=f"also write the families to <folder>/{DEEPEST_JSON} (moehub study v2 reads the deepest)")
    args = ap.parse_args(argv)
    d = args.folder
    rep = json.loads((d / "report.json").read_text())["asic"]
    fo4 = rep["fo4_osu018_ns"]
    period = rep["clock_constraint_ns"]
    lib = "/usr/share/qflow/tech/osu018/osu018_stdcells.lib"
    sram = "read_liberty sram.lib\n" if (d / "sram.lib").exists() else ""
    tcl = (f"read_liberty {lib}\n{sram}read_verilog netlist.v\nlink_design moehub\n"
           f"read_sdc moehub.sdc\nputs \"@@@ MODULE moehub\"\n"
           f"report_checks -path_delay max -digits 4 -group_count {args.endpoints} -endpoint_count 1\nexit\n")
    with tempfile.NamedTemporaryFile("w", suffix=".tcl", delete=False) as f:
        f.write(tcl)
    out = subprocess.run(["sta", "-no_splash", f.name], cwd=d, capture_output=True, text=True).stdout
    netlist = (d / "netlist.v").read_text()
    seq = asic.sequential_cells(Path(lib).read_text())
    qnets, children = asic.register_names(netlist, seq)
    best: dict = {}
    for chunk in out.split("Startpoint:")[1:]:
        p = asic.parse_sta("@@@ MODULE moehub\nStartpoint:" + chunk, period)["moehub"]
        s = asic.describe_point(p.startpoint, "moehub", qnets, children)
        e = asic.describe_point(p.endpoint, "moehub", qnets, children)
        key = (family(s), family(e))
        fo = p.logic_ns / fo4
        if key not in best or fo > best[key][0]:
            best[key] = (fo, s, e, p)
    rows = sorted(best.values(), key=lambda r: -r[0])[:args.top]
    if args.json:
        (d / DEEPEST_JSON).write_text(json.dumps(
            {"endpoints": args.endpoints, "fo4_ns": fo4,
             "families": [{"fo4": round(fo, 2), "from": s, "to": e, "cells": len(p.cells)} for fo, s, e, p in rows]},
            indent=1))
    for fo, s, e, p in rows:
        print(f"{fo:5.1f} FO4  {len(p.cells):3d} cells  {s} -> {e}")
        if args.cells:
            for inst, cell, dly in p.cells:
                print(f"              {dly:7.3f}  {cell:10s} {inst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
