"""Hub RTL -> plain Verilog with the module hierarchy kept, for the synthesis flows.

``moehub.rtl.gen.convert`` writes the simulation Verilog; synthesis needs the same text
but with submodule names that every tool accepts: Amaranth names them ``moehub.pm``,
which Debian Yosys 0.23 reads but OpenSTA and nextpnr reports mangle. The RTLIL module
names are rewritten to ``moehub_pm`` (and so on) before Amaranth's bundled Yosys lowers
processes (``proc; opt_clean; memory_collect; write_verilog -noattr``), the same steps as
``moehub rtl``, so the synthesised logic is the simulated logic. Debian Yosys 0.23 does
not read Amaranth 0.5 RTLIL; plain Verilog is the hand-over format (TOOLCHAIN.md).
"""
from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from amaranth._toolchain.yosys import find_yosys
from amaranth.back import rtlil

from ..spec.config import HubConfig
from ..rtl.hub import MoEHub

TOP = "moehub"

#: submodule instance -> the report's name for it (hub.py's ``m.submodules``)
MODULE_ROLES = {
    "pm": "packet manager", "alloc": "allocator", "tracker": "tracker", "csr": "CSR bank",
    "events": "event queue", "credits": "credit queue",
}


@dataclass(frozen=True)
class MemoryArray:
    """One ``reg [W-1:0] name [D-1:0]`` array of the generated Verilog."""
    module: str
    name: str
    width: int
    depth: int

    @property
    def bits(self) -> int:
        return self.width * self.depth


def _flatten_names(il_text: str) -> str:
    """``module \\moehub.pm`` / ``cell \\moehub.pm`` -> ``moehub_pm`` (declarations and uses)."""
    return re.sub(r"^(module |\s*cell )\\(\S+)",
                  lambda m: m.group(1) + "\\" + (m.group(2).replace(".", "_")
                                                  if m.group(2).startswith(TOP + ".") else m.group(2)),
                  il_text, flags=re.M)


#: Python recursion limit while Amaranth lowers the hub: its transformers recurse once per
#: operator of an expression, and a left-leaning chain over the chunk-table entries (512
#: at 16 sources x 32 tags, Mixtral on two nodes) is ~500 operators deep, past the
#: default 1,000 frames (measured: the conversion then takes 75 s and succeeds)
RECURSION_LIMIT = 20_000


@contextmanager
def _deep_expressions():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def hub_rtlil(cfg: HubConfig, design=None) -> str:
    """The hub's RTLIL for ``cfg`` as the flow writes it (``moehub.il``: the top named
    :data:`TOP`, sub-module names flattened); ``design``: another component in the hub's
    place (a unit synthesised on its own)."""
    with _deep_expressions():
        return _flatten_names(rtlil.convert(MoEHub(cfg) if design is None else design, name=TOP))


def write_verilog(cfg: HubConfig, out_dir: Path, design=None, il_filter=None) -> Path:
    """Write ``<out_dir>/moehub.il`` and ``<out_dir>/moehub.v``; return the Verilog path.
    ``design``: another component to synthesise in the hub's place (a unit on its own,
    :mod:`moehub.synth.units`), under the same top name; ``il_filter``: a function of
    the RTLIL text applied before it is written (a unit's, :mod:`moehub.synth.units`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    il = hub_rtlil(cfg, design)
    if il_filter is not None:
        il = il_filter(il)
    il_path = out_dir / f"{TOP}.il"
    il_path.write_text(il)
    v_path = out_dir / f"{TOP}.v"
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    # The bundled Yosys is WebAssembly without file access: RTLIL in, Verilog out on stdio.
    script = "\n".join([f"read_rtlil <<rtlil\n{il}\nrtlil", "proc", "opt_clean", "memory_collect",
                        "write_verilog -noattr"])
    v_path.write_text(yosys.run(["-q", "-"], script, ignore_warnings=True))
    return v_path


_MODULE_RE = re.compile(r"^module\s+(\S+?)\s*\(", re.M)
_ARRAY_RE = re.compile(r"^\s*reg\s+\[(\d+):(\d+)\]\s+(\S+)\s+\[(\d+):(\d+)\]\s*;", re.M)


def find_memories(verilog: str) -> list[MemoryArray]:
    """Every memory array the Verilog declares, with its module (parsed from Yosys' output)."""
    out = []
    starts = [(m.start(), m.group(1)) for m in _MODULE_RE.finditer(verilog)]
    for k, (pos, mod) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(verilog)
        for a in _ARRAY_RE.finditer(verilog, pos, end):
            hi, lo, name, d0, d1 = a.groups()
            out.append(MemoryArray(mod, name.lstrip("\\"), abs(int(hi) - int(lo)) + 1,
                                   abs(int(d1) - int(d0)) + 1))
    return out
