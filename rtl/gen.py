"""Verilog generation for a hub configuration (``moehub rtl``).

Amaranth's RTLIL is passed through Yosys ``proc; opt_clean`` before ``write_verilog`` so
that the Verilog has no ``always @*`` blocks with initialisers, which Icarus under
``-g2012`` never evaluates (TOOLCHAIN.md pitfall 1). The CSR map is exported next to the
Verilog as JSON and as a C header, so software and tests never restate an address.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from amaranth._toolchain.yosys import find_yosys
from amaranth.back import rtlil

from ..config.schema import HubConfig
from .hub import MoEHub

TOP = "moehub"
REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"


def rtlil_to_verilog(il_text: str) -> str:
    """RTLIL -> Verilog with every process lowered to cells (no ``always @*``)."""
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = "\n".join([f"read_rtlil <<rtlil\n{il_text}\nrtlil", "proc", "opt_clean",
                        "memory_collect", "write_verilog -noattr"])
    return yosys.run(["-q", "-"], script, ignore_warnings=True)


def convert(cfg: HubConfig, out_dir: Path | None = None, top: str = TOP) -> Path:
    """Write ``<out_dir>/<top>.v`` (+ CSR map JSON and header) and return the Verilog path."""
    out_dir = Path(out_dir) if out_dir else BUILD / "rtl" / cfg.name
    out_dir.mkdir(parents=True, exist_ok=True)
    hub = MoEHub(cfg)
    il = rtlil.convert(hub, name=top)
    (out_dir / f"{top}.il").write_text(il)
    v_path = out_dir / f"{top}.v"
    v_path.write_text(rtlil_to_verilog(il))
    (out_dir / "csr_map.json").write_text(hub.csr_map.to_json())
    (out_dir / "moehub_csr.h").write_text(hub.csr_map.to_c_header())
    (out_dir / "config.json").write_text(json.dumps(cfg.__dict__, indent=2))
    return v_path
