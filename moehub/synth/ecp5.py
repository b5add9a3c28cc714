"""FPGA prototype flow: Lattice ECP5 with Yosys ``synth_ecp5`` and nextpnr-ecp5.

The hub has thousands of port bits (every lane carries a full chunk), far more than any
ECP5 package has pins, so it is placed inside a small harness (``moehub_fpga``): one
serial input shifts through a register chain that drives every hub input, and every hub
output is registered and folded by XOR into one pin, so no logic is optimised away.
The harness's own flops and LUTs are counted separately (Yosys ``-noflatten`` keeps the
hierarchy) and subtracted from the hub's figures.

Figures: LUT4s, flops and DP16KD block RAMs of the hub (Yosys ``stat``), and the
post-route fmax (nextpnr prints several "Max frequency" lines; the last one is
post-route, TOOLCHAIN.md pitfall 9).
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict
from pathlib import Path

from ..spec.config import HubConfig
from . import report, tools, verilog

DEVICE_FLAG, DEVICE, PACKAGE, DEVICE_LUTS = "--85k", "LFE5U-85F", "CABGA381", 83640
DEFAULT_TARGET_MHZ = 50.0

_PORT_RE = re.compile(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):(\d+)\]\s+)?(\w+)\s*;", re.M)


def hub_ports(v_text: str) -> list[tuple[str, str, int]]:
    """(direction, name, width) of the ``moehub`` module's ports, from the Verilog."""
    body = re.search(rf"^module\s+{verilog.TOP}\s*\(.*?\);(.*?)^endmodule", v_text, re.M | re.S).group(1)
    return [(d, n, abs(int(hi) - int(lo)) + 1 if hi else 1) for d, hi, lo, n in _PORT_RE.findall(body)]


def harness(ports) -> str:
    ins = [(n, w) for d, n, w in ports if d == "input" and n not in ("clk", "rst")]
    outs = [(n, w) for d, n, w in ports if d == "output"]
    n_in = sum(w for _, w in ins)
    n_out = sum(w for _, w in outs)
    lines = ["module moehub_fpga (input clk, input rst, input sin, output sout);",
             f"  reg [{n_in - 1}:0] chain;",
             f"  always @(posedge clk) chain <= {{chain[{n_in - 2}:0], sin}};" if n_in > 1 else
             "  always @(posedge clk) chain <= sin;",
             f"  wire [{n_out - 1}:0] hub_out;", f"  reg [{n_out - 1}:0] out_q;",
             "  always @(posedge clk) out_q <= hub_out;", "  assign sout = ^out_q;",
             f"  {verilog.TOP} hub (", "    .clk(clk), .rst(rst),"]
    conns, k = [], 0
    for n, w in ins:
        conns.append(f"    .{n}(chain[{k + w - 1}:{k}])")
        k += w
    k = 0
    for n, w in outs:
        conns.append(f"    .{n}(hub_out[{k + w - 1}:{k}])")
        k += w
    return "\n".join(lines + [",\n".join(conns), "  );", "endmodule", ""])


def _count(by_type: dict, prefix: str) -> int:
    return sum(n for t, n in by_type.items() if t.startswith(prefix))


def run_ecp5(cfg: HubConfig, out_dir: Path, target_MHz: float = DEFAULT_TARGET_MHZ,
             seed: int = 1, write_report: bool = True, sta_only: bool = False, **_ignored) -> dict:
    """Run synth_ecp5 + nextpnr-ecp5 for ``cfg``; return the report's ``ecp5`` section.

    ``sta_only``: re-read the logs of the last run in ``out_dir/ecp5`` (no tool runs).
    """
    nextpnr = tools.nextpnr_ecp5()        # fails first, with the install hint, if missing
    work = out_dir / "ecp5"
    work.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    t0 = time.monotonic()
    reuse = sta_only and (work / "stat.json").exists() and (work / "nextpnr.log").exists()
    if reuse:
        t_yosys = 0.0
    else:
        v = verilog.write_verilog(cfg, work)
        (work / "moehub_fpga.v").write_text(harness(hub_ports(v.read_text())))
        (work / "synth.ys").write_text("\n".join([
            f"read_verilog {verilog.TOP}.v moehub_fpga.v",
            "synth_ecp5 -top moehub_fpga -noflatten -json moehub_fpga.json",
            "tee -q -o stat.json stat -json",
            "tee -q -o stat.txt stat", ""]))
        t_yosys = tools.run_logged([tools.yosys(), "-q", "-l", "yosys.log", "-s", "synth.ys"],
                                   work / "yosys.stdout", work)
    stat = tools.load_yosys_stat_json(work / "stat.json")["modules"]
    totals = {"luts": 0, "flops": 0, "brams": 0, "dsps": 0}
    harness_own = dict(totals)
    for name, d in stat.items():
        by = d["num_cells_by_type"]
        c = {"luts": _count(by, "LUT4"), "flops": _count(by, "TRELLIS_FF"), "brams": _count(by, "DP16KD"),
             "dsps": _count(by, "MULT18X18D")}
        for k in totals:
            totals[k] += c[k]
            if name.lstrip("\\") == "moehub_fpga":
                harness_own[k] += c[k]
    section = {
        "flow": "yosys synth_ecp5 -noflatten + nextpnr-ecp5 (yowasp)",
        "device": DEVICE, "package": PACKAGE, "data_bits": cfg.data_bits, "target_MHz": target_MHz,
        "luts": totals["luts"] - harness_own["luts"],
        "flops": totals["flops"] - harness_own["flops"],
        "brams": totals["brams"] - harness_own["brams"],
        "dsps": totals["dsps"] - harness_own["dsps"],
        "harness": harness_own,
        "lut_util_pct": round(100 * totals["luts"] / DEVICE_LUTS, 1),
        "fits": totals["luts"] <= DEVICE_LUTS,
    }
    if not section["fits"]:
        # no place and route: the design does not fit the largest ECP5
        section.update(fmax_MHz=None, wall_s={"yosys": round(t_yosys, 1),
                                              "total": round(time.monotonic() - t0, 1)})
        if write_report:
            report.merge_write(out_dir, cfg, "ecp5", section)
        return section
    t1 = time.monotonic()
    if not reuse:
        # --timing-allow-fail: a missed target is a result here, not an error
        tools.run_logged([nextpnr, DEVICE_FLAG, "--package", PACKAGE, "--json", "moehub_fpga.json",
                          "--freq", str(target_MHz), "--seed", str(seed), "--timing-allow-fail",
                          "--report", "nextpnr_report.json", "--textcfg", "moehub_fpga.config"],
                         work / "nextpnr.log", work)
    t_pnr = time.monotonic() - t1
    log = (work / "nextpnr.log").read_text(errors="replace")
    fmax = re.findall(r"Max frequency for clock\s+'[^']*':\s*([\d.]+)\s*MHz", log)
    if not fmax or "Program finished normally" not in log:
        raise RuntimeError(f"nextpnr: no post-route 'Max frequency' line in {work / 'nextpnr.log'}")
    section.update(fmax_MHz=float(fmax[-1]), timing_met=float(fmax[-1]) >= target_MHz,
                   wall_s={"yosys": round(t_yosys, 1), "nextpnr": round(t_pnr, 1),
                           "total": round(time.monotonic() - t0, 1)})
    if write_report:
        report.merge_write(out_dir, cfg, "ecp5", section)
    return section
