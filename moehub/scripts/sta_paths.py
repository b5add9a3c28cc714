"""The deepest register-to-register paths of a synthesised hub, one per endpoint family.

``moehub synth`` reports the single worst path of each module; closing timing needs the
next ones too. This re-times ``netlist.v`` of a synthesis folder with OpenSTA (the run's own
SDC and Liberty), asks for the worst path to each of the ``--endpoints`` worst endpoints,
names both ends by the RTL register their Q drives (as the report does) and prints one line
per (start family -> end family), families being register names without bit indices,
deepest first, in FO4 of logic (arrival minus the launching clock-to-output, over the run's
FO4). The work is :func:`moehub.synth.deepest.families`.

    .venv/bin/python scripts/sta_paths.py build/synth/b200-nvlink5 [--endpoints 3000] [--top 25] [--json]
    .venv/bin/python scripts/sta_paths.py build/synth/tiny/asap7-tt      # an ASAP7 run (its corner)

Why beside the report: the report's FO4 is the logic of the path with the worst slack. With
SRAM macros (a slow clock-to-output) that path can start at a macro and hide deeper
flop-to-flop logic; the deepest family here is the logic depth the FO4 budget is about.
An ASAP7 folder (``asap7-<corner>/``, written by ``moehub synth --lib asap7``) holds a
``library.json`` naming its library, corner, FO4 and clock; the others are OSU018 runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from moehub.synth import deepest, library, tools


#: where ``--json`` writes the families, deepest first
DEEPEST_JSON = "deepest_paths.json"
family = deepest.family


def folder_library(d: Path) -> tuple:
    """(CellLibrary or None for OSU018, FO4 ns, clock period ns) of a synthesis folder."""
    info = d / library.INFO_JSON
    if info.exists():
        rec = json.loads(info.read_text())
        return library.get(rec["lib"], rec["corner"]), rec["fo4_ns"], rec["period_ns"]
    rep = json.loads((d / "report.json").read_text())["asic"]
    return None, rep["fo4_osu018_ns"], rep["clock_constraint_ns"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--endpoints", type=int, default=deepest.ENDPOINTS)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cells", action="store_true", help="print the cells of the deepest path of each family")
    ap.add_argument("--json", action="store_true",
                    help=f"also write the families to <folder>/{DEEPEST_JSON} (moehub study v2 reads the deepest)")
    args = ap.parse_args(argv)
    d = args.folder
    lib, fo4, period = folder_library(d)
    libs = lib.liberty if lib else (tools.osu018_lib(),)
    rows = deepest.families(d, libs, lib.seq_liberty if lib else libs[0], fo4, period,
                            lib.time_unit_ns if lib else 1.0, args.endpoints)[:args.top]
    if args.json:
        (d / DEEPEST_JSON).write_text(json.dumps(
            {"endpoints": args.endpoints, "fo4_ns": fo4,
             "families": [{"fo4": round(r.fo4, 2), "from": r.start, "to": r.end, "cells": len(r.path.cells)}
                          for r in rows]}, indent=1))
    for r in rows:
        print(f"{r.fo4:5.1f} FO4  {len(r.path.cells):3d} cells  {r.start} -> {r.end}")
        if args.cells:
            for inst, cell, dly in r.path.cells:
                print(f"              {dly:7.3f}  {cell:10s} {inst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
