"""The ASIC flow's constraints file (``moehub.sdc``) and its OpenROAD-flow-scripts style
``metrics.json``, without synthesis: the SDC's text and the STA script, the SDC read by
OpenSTA on a four-cell netlist (skipped without the tools), the parsing of port delays,
and the metric key mapping on a synthetic report."""
import json
import subprocess
from pathlib import Path

import pytest

from moehub.spec.config import load_hub_config
from moehub.synth import asic, report, tools
from moehub.synth.verilog import TOP


def test_sdc_constrains_the_clock_and_the_ports():
    text = asic.sdc(2.5, 0.2, "first line\nsecond line")
    assert text.startswith("# first line\n# second line\n")
    assert "set clk_period 2.5\n" in text and "set clk_io_pct 0.2\n" in text
    assert "create_clock -name $clk_name -period $clk_period $clk_port" in text
    assert "set_input_delay [expr {$clk_period * $clk_io_pct}] -clock $clk_name $non_clock_inputs" in text
    assert "set_output_delay [expr {$clk_period * $clk_io_pct}] -clock $clk_name [all_outputs]" in text
    assert "ASSUMPTION" in text
    # ABC's port assumptions are listed, not applied (the timing has ideal drivers)
    assert "\n#   set_driving_cell -lib_cell BUFX2" in text and "\n#   set_load 0.02" in text
    assert f"set clk_io_pct {asic.IO_PCT}\n" in asic.sdc(3.0)


def test_sta_script_reads_the_sdc_after_each_link():
    tcl = asic.sta_script(Path("lib.lib"), None, [TOP, "moehub_pm"])
    lines = tcl.splitlines()
    links = [i for i, ln in enumerate(lines) if ln.startswith("link_design")]
    assert len(links) == 2 and all(lines[i + 1] == f"read_sdc {asic.SDC_NAME}" for i in links)
    assert "create_clock" not in tcl and "set_input_delay" not in tcl


STA_PORTS = """@@@ MODULE moehub_alloc
Startpoint: a (input port clocked by clk)
Endpoint: y (output port clocked by clk)
Path Group: clk
Path Type: max

    Delay      Time   Description
-------------------------------------------------------------
   0.0000    0.0000   clock clk (rise edge)
   0.0000    0.0000   clock network delay (ideal)
   0.6000    0.6000 ^ input external delay
   0.0000    0.6000 ^ a (in)
   0.2000    0.8000 ^ _1_/Y (BUFX2)
   0.0000    0.8000 ^ y (out)
             0.8000   data arrival time

   3.0000    3.0000   clock clk (rise edge)
   0.0000    3.0000   clock network delay (ideal)
  -0.6000    2.4000   output external delay
             2.4000   data required time
-------------------------------------------------------------
             1.6000   slack (MET)
"""


def test_parse_sta_takes_port_delays_as_launch_and_setup():
    t = asic.parse_sta(STA_PORTS, 3.0)["moehub_alloc"]
    assert t.launch_ns == pytest.approx(0.6) and t.setup_ns == pytest.approx(0.6)
    assert t.logic_ns == pytest.approx(0.2) and t.min_period_ns == pytest.approx(1.4)
    zero = STA_PORTS.replace("0.6000    0.6000 ^ input", "0.0000    0.0000 ^ input") \
                    .replace("-0.6000    2.4000   output", "0.0000    3.0000   output")
    t = asic.parse_sta(zero, 3.0)["moehub_alloc"]
    assert t.launch_ns == 0.0 and str(t.setup_ns) == "0.0"      # no negative zero in reports


NETLIST = """module m(clk, a, y);
  input clk; input a; output y;
  wire n, q;
  INVX1 i0 (.A(a), .Y(n));
  DFFPOSX1 r0 (.CLK(clk), .D(n), .Q(q));
  BUFX2 b0 (.A(q), .Y(y));
endmodule
"""


@pytest.mark.skipif(bool(tools.asic_tools_missing()), reason="OpenSTA or the OSU018 library missing")
@pytest.mark.parametrize("io_pct", [0.0, 0.2])
def test_opensta_reads_the_sdc(tmp_path, io_pct):
    """The SDC as the flow writes it, read by OpenSTA: the port paths carry io_pct x period."""
    (tmp_path / "m.v").write_text(NETLIST)
    (tmp_path / asic.SDC_NAME).write_text(asic.sdc(3.0, io_pct))
    (tmp_path / "t.tcl").write_text("\n".join([
        f"read_liberty {tools.osu018_lib()}", "read_verilog m.v", "link_design m",
        f"read_sdc {asic.SDC_NAME}",
        'puts "@@@ MODULE in"', "report_checks -from [get_ports a] -digits 4",
        'puts "@@@ MODULE out"', "report_checks -to [get_ports y] -digits 4", "exit", ""]))
    out = subprocess.run([tools.sta(), "-no_splash", "-exit", "t.tcl"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert "Warning" not in out.stdout + out.stderr and "Error" not in out.stdout + out.stderr
    t = asic.parse_sta(out.stdout, 3.0)
    assert t["in"].launch_ns == pytest.approx(3.0 * io_pct)
    assert t["out"].setup_ns == pytest.approx(3.0 * io_pct)
    assert t["out"].start_kind.startswith("rising edge")         # the clock is a clock


SYNTH_TOP = {"cells": 1000, "flops": 120, "area_um2": 24000.0, "sram_bits": 4096,
             "sram_macros": {"moehub_sram_64x32": 2}, "wns_ns": 0.25, "tns_ns": 0.0,
             "fmax_MHz": 363.636}


def test_orfs_metric_keys_of_a_synthetic_report():
    rep = {"config": "tiny", "asic": {"clock_constraint_ns": 3.0, "modules": {"top": SYNTH_TOP}}}
    m = report.orfs_metrics(rep)
    assert m["synth__design__instance__count"] == 1002
    assert m["synth__design__instance__count__stdcell"] == 1000
    assert m["synth__design__instance__count__macros"] == 2
    assert m["synth__design__instance__count__class:sequential_cell"] == 120
    assert m["synth__design__instance__area"] == m["synth__design__instance__area__stdcell"] == 24000.0
    assert m["synth__design__instance__area__macros"] == 0.0
    assert m["synth__design__memory__sram_bits"] == 4096
    assert m["timing__setup__ws"] == 0.25 and m["timing__setup__tns"] == 0.0
    assert m["timing__fmax"] == pytest.approx(363.636e6)
    assert m["clock__period"] == 3.0 and m["clock__frequency"] == pytest.approx(1e9 / 3.0)
    assert m["constraints__clocks__count"] == 1
    assert m["constraints__clocks__details"] == ["clk: 3.0000"]
    assert m["run__flow__design"] == TOP and m["run__flow__variant"] == "tiny"


def _fake_results():
    area = asic.ModuleArea(TOP, 1000, 120, 24000.0, {"moehub_sram_64x32": 2}, 4096)
    path = asic.PathTiming(TOP, 3.0, 0.25, 2.5, 0.2, 0.25, "pm/_1_", "pm/_2_",
                           "rising edge-triggered flip-flop clocked by clk",
                           "rising edge-triggered flip-flop clocked by clk",
                           [("pm/_9_", "NAND2X1", 2.3)])
    return {"areas": {"__total__": area}, "timing": {TOP: path}, "wall_s": {"yosys": 1.0, "sta": 1.0}}


def test_merge_write_adds_metrics_json_and_keeps_report_keys(tmp_path):
    cfg = load_hub_config("tiny")
    section = report.build_asic(cfg, _fake_results(), 0.1, 3.0, [], {"min_bits": 1, "min_depth": 1})
    section["sdc"] = {"file": asic.SDC_NAME, "clock_port": "clk", "io_pct": 0.0}
    report.merge_write(tmp_path, cfg, "asic", section)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert {"modules", "line_rate", "clock_constraint_ns", "caveats"} <= set(rep["asic"])
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics == report.orfs_metrics(rep)
    assert metrics["synth__design__instance__area__stdcell"] == rep["asic"]["modules"]["top"]["area_um2"]
    assert metrics["timing__setup__ws"] == rep["asic"]["modules"]["top"]["wns_ns"] == 0.25
    assert "metrics.json" in (tmp_path / "report.md").read_text()
    # a report of another configuration without an ASIC section has no metrics
    report.merge_write(tmp_path, cfg.replace(data_bits=8), "ecp5", {"error": "not run"})
    assert not (tmp_path / "metrics.json").exists()
