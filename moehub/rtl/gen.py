"""Verilog generation for a hub configuration (``moehub rtl``).

Amaranth's RTLIL goes through Yosys before ``write_verilog``:

* ``proc`` lowers every process to cells, so the Verilog has no ``always @*`` blocks with
  initialisers, which Icarus under ``-g2012`` never evaluates (TOOLCHAIN.md pitfall 1);
* ``flatten; opt; wreduce`` merges and narrows cells: Icarus spends its time per evaluated
  cell, and the optimised netlist simulates about 2x faster (measured on ``mixtral-8gpu``,
  16k cycles of saturating traffic: 6 s of CPU instead of 14 s; ``opt -full`` costs 40 s
  more generation time on ``deepseek-v3-8gpu`` and simulates no faster).

The module hierarchy is kept in ``<top>.il`` (RTLIL) for synthesis. The CSR map is
exported next to the Verilog as JSON and as a C header, so software and tests never
restate an address. Generation is skipped when neither the RTL sources nor the config
changed (a stamp file holds their hash).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from amaranth._toolchain.yosys import find_yosys
from amaranth.back import rtlil

from .. import __version__
from ..spec.config import HubConfig
from ..paths import output_dir
from .hub import MoEHub

TOP = "moehub"
RTL_DIR = Path(__file__).resolve().parent

SIM_PASSES = ("proc", "flatten", "opt", "wreduce", "opt_clean", "memory_collect")
#: The quick netlist for short simulations (the fast set's directed tests): ``opt`` and
#: ``wreduce`` take about two thirds of Yosys's time (PyPI's WebAssembly build: 25 s of a
#: tiny multicast hub's 33 s on the loaded 2-core machine, 8 s without) and pay back only
#: over many simulated cycles.
QUICK_PASSES = ("proc", "flatten", "opt_clean", "memory_collect")


def rtlil_to_verilog(il_text: str, passes=SIM_PASSES) -> str:
    """RTLIL -> Verilog through the given Yosys passes (default: the simulation netlist)."""
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = "\n".join([f"read_rtlil <<rtlil\n{il_text}\nrtlil", *passes,
                        "write_verilog -noattr"])
    return yosys.run(["-q", "-"], script, ignore_warnings=True)


def _stamp(cfg: HubConfig, top: str, passes) -> str:
    h = hashlib.sha256()
    # the hardware and the contract it is built from (formats, registers, timing: spec/)
    for p in sorted(RTL_DIR.rglob("*.py")) + sorted((RTL_DIR.parent / "spec").glob("*.py")):
        h.update(p.read_bytes())
    h.update(json.dumps(dataclasses.asdict(cfg), sort_keys=True).encode())
    h.update(repr((top, tuple(passes), __version__)).encode())   # the C header names the version
    return h.hexdigest()


def component_verilog(component, out_dir: Path, top: str = TOP, passes=SIM_PASSES) -> Path:
    """``<out_dir>/<top>.v``: any Amaranth component's Verilog (its RTLIL through the Yosys
    ``passes``, as :func:`convert` makes the hub's), e.g. a relay unit under the hub's top
    name for a cocotb testbench. Written on every call (cheap for a unit; a simulator's
    build is cached by the Verilog's content, :func:`moehub.verif.sim.build`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    v_path = out_dir / f"{top}.v"
    v_path.write_text(rtlil_to_verilog(rtlil.convert(component, name=top), passes))
    return v_path


def hub_component(cfg: HubConfig):
    """The hub of ``cfg``: :class:`~.relay.hub.RelayHub` for a relay config (protocol v3:
    ``MoEHub`` behind the relay input, the relay and combine sides beside it), else
    :class:`~.hub.MoEHub`."""
    if cfg.relay:
        from .relay.hub import RelayHub
        return RelayHub(cfg)
    return MoEHub(cfg)


def convert(cfg: HubConfig, out_dir: Path | None = None, top: str = TOP, force: bool = False,
            passes=SIM_PASSES) -> Path:
    """Write ``<out_dir>/<top>.v`` (+ RTLIL, CSR map JSON and header) of the hub of ``cfg``
    (:func:`hub_component`); return the Verilog path.

    ``out_dir`` defaults to ``rtl/<config>/`` in the build folder (:mod:`moehub.paths`);
    ``passes``: the Yosys passes of the Verilog (:data:`SIM_PASSES` or :data:`QUICK_PASSES`)."""
    out_dir = output_dir("rtl", cfg.name, out=out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    v_path = out_dir / f"{top}.v"
    stamp_path = out_dir / f".{top}.stamp"
    stamp = _stamp(cfg, top, passes)
    if not force and v_path.exists() and stamp_path.exists() and stamp_path.read_text() == stamp:
        return v_path
    hub = hub_component(cfg)
    il = rtlil.convert(hub, name=top)
    (out_dir / f"{top}.il").write_text(il)
    v_path.write_text(rtlil_to_verilog(il, passes))
    csr_map = (hub.hub if cfg.relay else hub).csr_map
    (out_dir / "csr_map.json").write_text(csr_map.to_json())
    (out_dir / "moehub_csr.h").write_text(csr_map.to_c_header())
    (out_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    stamp_path.write_text(stamp)
    return v_path
