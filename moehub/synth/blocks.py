"""The hub's blocks as every synthesis report lists them, and the rounding of its figures.

Shared by the projection report (:mod:`.report`) and the ASAP7 one (:mod:`.asap7_report`),
so that both tabulate the same blocks in the same order.
"""
from __future__ import annotations

import re

from . import project
from .verilog import TOP

#: order of the per-module tables
MODULE_ORDER = ["top", "pm", "alloc", "tracker", "csr", "events", "credits"]

def _r(x, digits=6):
    """Round every float of ``x`` to ``digits`` significant digits (ranges to 5)."""
    if isinstance(x, project.Range):
        return x.as_dict()
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: _r(v, digits) for k, v in x.items()}
    return x


def module_results(areas: dict, timing: dict):
    """(key, module name, area, timing) of every block in report order that has both an
    area and a timing result (the whole hub's area is the netlist's total)."""
    for key in MODULE_ORDER:
        mod = TOP if key == "top" else f"{TOP}_{key}"
        a = areas["__total__"] if key == "top" else areas.get(mod)
        t = timing.get(mod)
        if a is not None and t is not None:
            yield key, mod, a, t


def macro_bits(macros: dict) -> int:
    bits = 0
    for name, n in macros.items():
        m = re.match(r"moehub_sram_(\d+)x(\d+)$", name)
        if m:
            bits += n * int(m.group(1)) * int(m.group(2))
    return bits
