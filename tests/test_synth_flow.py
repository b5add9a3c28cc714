"""The ASIC synthesis flow on the ``tiny`` hub (one lane in the fast set): it runs, and its
report is sane.

Needs Debian yosys, OpenSTA and the OSU018 library; skips with the reason otherwise.
Wall times are not checked here (scripts/bench_synth.py measures them).
"""
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from amaranth.lib import data

from moehub.spec.config import field_bits, load_hub_config
from moehub.rtl.layouts import HubLayouts
from moehub.synth import flow, tools

MISSING = tools.asic_tools_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"ASIC flow tools missing: {MISSING}")

MODULES = ("top", "pm", "alloc", "tracker", "csr")
#: thresholds low enough that tiny's tile counters become a macro (the default keeps them flops)
SRAM_LOW = {"sram_min_bits": 64, "sram_min_depth": 16}
FIGURES = ("cells", "flops", "area_um2", "gate_equivalents", "critical_path_ns", "fo4", "fmax_MHz")


def tracker_bits(cfg) -> int:
    """The tracker's tile-counter memory: experts x tiles per expert x counter width."""
    return cfg.experts * cfg.tiles_per_expert * field_bits(cfg.max_tile_rows)


def row_table_bits(cfg) -> int:
    """Memory arrays of the packet manager: none. Its two row tables, (sources x tags)
    entries each -- the chunk table (expert, chunk bitmap) and the row-info table (granted
    row, allocated) -- are registers in the RTL, written through one-hot decodes of their
    indices (every lane reads and writes them in the same cycle: no macro would fit)."""
    return 0


def _flow(tmp_path_factory, cfg):
    """The flow on ``cfg`` (its own narrow datapath, to stay fast); the counters forced into
    an SRAM macro so that the macro path of the flow is exercised too."""
    out = tmp_path_factory.mktemp(f"synth_{cfg.name}_{cfg.lanes}")
    flow.run_asic(cfg, out, **SRAM_LOW)
    return cfg, out, json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    """The flow on tiny with one of its four lanes and queues of 8 (the least for one lane
    is 6): every module, figure and file of the flow, in about a fifth of tiny's synthesis
    time (the fast set's longest setup; two lanes took 47 s of Yosys and OpenSTA CPU, one
    27 s, one with 32-entry queues 31 s and with 8-entry ones 27 s under load 3)."""
    cfg = flow.synth_config(load_hub_config("tiny"), "config")
    return _flow(tmp_path_factory, cfg.replace(lanes=1, event_queue_depth=8, credit_queue_depth=8))


@pytest.fixture(scope="module")
def tiny_full_report(tmp_path_factory):
    """The flow on tiny itself (slow set: its testbench runs on the netlist)."""
    return _flow(tmp_path_factory, flow.synth_config(load_hub_config("tiny"), "config"))


def test_report_has_every_figure(tiny_report):
    cfg, out, rep = tiny_report
    a = rep["asic"]
    assert rep["config"] == "tiny" and rep["hub"]["data_bits"] == cfg.data_bits
    for key in MODULES:
        m = a["modules"][key]
        for fig in FIGURES:
            assert m[fig] > 0, f"{key}.{fig} = {m[fig]}"
        assert m["n5"]["total_mm2"]["nominal"] > 0
        assert m["gate_equivalents"] == pytest.approx(m["area_um2"] / 24.0, rel=1e-3)
        assert m["fmax_MHz"] == pytest.approx(1e3 / m["critical_path_ns"], rel=1e-3)
    assert 0.08 < a["fo4_osu018_ns"] < 0.12          # FACTS.md: ~99 ps
    top = a["modules"]["top"]
    assert top["area_um2"] >= sum(a["modules"][k]["area_um2"] for k in MODULES[1:])
    assert top["critical_path_ns"] >= max(a["modules"][k]["logic_ns"] for k in MODULES[1:])
    n5 = top["n5"]["total_mm2"]
    assert n5["low"] <= n5["nominal"] <= n5["high"]
    assert top["n5"]["h100_pct"]["nominal"] == pytest.approx(100 * n5["nominal"] / 814.0, rel=1e-2)
    lr = a["line_rate"]["at_h100_clock"]
    assert lr["GBps"] == pytest.approx(cfg.lanes * cfg.chunk_bytes * 1.98)
    assert isinstance(lr["pass"], bool)
    assert len(a["load_at_start"]) == 3 and min(a["load_at_start"]) >= 0   # (for the wall times)
    assert (out / "report.md").read_text().startswith("# Synthesis report: `tiny`")


def test_memory_bits_match_config(tiny_report):
    cfg, out, rep = tiny_report
    mods = rep["asic"]["modules"]
    want = tracker_bits(cfg)
    assert mods["tracker"]["array_bits"] == want
    assert mods["pm"]["array_bits"] == row_table_bits(cfg)
    assert mods["top"]["array_bits"] == want + row_table_bits(cfg)
    assert mods["tracker"]["sram_bits"] == want      # kept as a macro, not built from flops
    assert mods["pm"]["sram_bits"] == 0              # the row tables are registers
    macro = rep["asic"]["sram"]["macros"][0]
    assert macro["depth"] * macro["width"] == want


def test_gate_level_files_written(tiny_report):
    cfg, out, rep = tiny_report
    sim = (out / "netlist_sim.v").read_text()
    assert "module moehub(" in sim and "module moehub_pm" not in sim     # flattened
    for port in ("i__0__valid", "i__0__payload", "wr__0__ready", "csr__addr", "layer_done"):
        assert port in sim
    models = (out / "sram_models.v").read_text()
    assert f"module {rep['asic']['sram']['macros'][0]['name']}" in models


TOY = """module moehub_blk(input clk, input [7:0] a, input [7:0] b, output reg [8:0] y);
  always @(posedge clk) y <= a + b;
endmodule
module moehub(input clk, input [7:0] a, input [7:0] b, output [8:0] y);
  moehub_blk blk(.clk(clk), .a(a), .b(b), .y(y));
endmodule
"""


def test_a_toy_design_maps_from_its_checkpoint_to_the_same_netlist(tmp_path, monkeypatch):
    """The checkpoint's two paths on a design of a few cells (the fast set's check; the
    test below does it on tiny): the first run writes it and maps it read back, the second
    starts from it, and both write the same netlist."""
    from moehub.synth import asic
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))
    runs = []
    for name in ("first", "second"):
        work = tmp_path / name
        work.mkdir()
        (work / "moehub.v").write_text(TOY)
        (work / "abc.script").write_text(asic.abc_script(3000))
        (work / "abc.constr").write_text(asic.ABC_CONSTR)
        asic._yosys_run(work, None, tools.osu018_lib(), [], ["moehub_blk"], "toy")
        runs.append(work)
    first, second = ((w / "synth.ys").read_text() for w in runs)
    assert "write_rtlil" in first and "design -reset" in first and "synth -top" in first
    assert second.startswith("read_rtlil ") and "synth -top" not in second
    assert (runs[0] / "netlist.v").read_text() == (runs[1] / "netlist.v").read_text()
    assert (runs[1] / "stat_rtl.json").read_text() == (runs[0] / "stat_rtl.json").read_text()
    assert len(list((tmp_path / "build" / "synth" / "generic").glob("*.il"))) == 1


@pytest.mark.slow
def test_a_second_run_maps_from_the_generic_checkpoint_to_the_same_netlist(tiny_report, tmp_path):
    """The library-independent part is kept and a run of the same design starts from it:
    the same netlist (the run that writes the checkpoint maps from it read back too)."""
    from moehub.synth import asic
    cfg, out, rep = tiny_report
    again = tmp_path / "again"
    flow.run_asic(cfg, again, **SRAM_LOW)
    script = (again / "synth.ys").read_text()
    assert script.startswith("read_rtlil ") and "synth -top" not in script
    assert (again / "netlist.v").read_text() == (out / "netlist.v").read_text()
    assert (again / "stat_rtl.json").read_text() == (out / "stat_rtl.json").read_text()
    # the run that writes it maps the netlist read back, not the one in memory
    fresh = asic.yosys_script(tools.osu018_lib(), [], False, ["moehub_pm"], tmp_path,
                              asic.GenericCheckpoint(tmp_path, "k"))
    lines = fresh.splitlines()
    w = lines.index(f"write_rtlil {tmp_path / 'k.il.partial'}")
    assert lines[w + 1:w + 3] == ["design -reset", f"read_rtlil {tmp_path / 'k.il.partial'}"]
    assert lines[w + 3].startswith("dfflibmap")


def test_the_generic_checkpoint_is_keyed_by_the_design_and_the_yosys(tmp_path, monkeypatch):
    from moehub.synth import asic
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))
    work = tmp_path / "w"
    work.mkdir()
    (work / "moehub.v").write_text("module moehub(); endmodule\n")
    key = lambda: asic.generic_checkpoint(work, tools.yosys(), [], False, ["moehub_pm"]).key
    k0 = key()
    assert key() == k0
    (work / "moehub.v").write_text("module moehub(input a); endmodule\n")
    k1 = key()
    assert k1 != k0
    assert asic.generic_checkpoint(work, tools.yosys(), [], False, ["moehub_alloc"]).key != k1
    monkeypatch.setattr(tools, "version_line", lambda b: "Yosys 9.99")
    assert key() != k1


@pytest.mark.slow
def test_area_grows_with_experts_and_lanes(tiny_report, tmp_path):
    """The one-lane tiny against two variants (one expert; two lanes), run two at a time.
    In the slow set: two more syntheses (about a minute) kept the fast set over 5 minutes."""
    cfg, out, rep = tiny_report
    variants = {"experts": cfg.replace(experts=1), "lanes": cfg.replace(lanes=2)}

    def one(item):
        name, c = item
        return name, flow.run_asic(c, tmp_path / name, write_report=False, **SRAM_LOW)

    with ThreadPoolExecutor(max_workers=2) as ex:
        res = dict(ex.map(one, variants.items()))
    res["tiny"] = rep["asic"]
    variants["tiny"] = cfg
    area = {k: v["modules"]["top"]["area_um2"] for k, v in res.items()}
    bits = {k: v["modules"]["tracker"]["array_bits"] for k, v in res.items()}
    assert area["lanes"] > area["tiny"] > area["experts"]
    assert bits["tiny"] == cfg.experts * bits["experts"] == tracker_bits(cfg)
    for name, c in variants.items():
        assert res[name]["modules"]["top"]["array_bits"] == tracker_bits(c) + row_table_bits(c)


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) not installed")
def test_gate_level_netlist_compiles(tiny_report):
    """netlist_sim.v + SRAM models + OSU018 cell models elaborate under Icarus (-g2012)."""
    cfg, out, rep = tiny_report
    gl = rep["asic"]["gate_level_sim"]
    files = [out / gl["netlist"], out / gl["sram_models"], gl["cell_models"]]
    proc = subprocess.run(["iverilog", "-g2012", "-s", "moehub", "-o", str(out / "gl.vvp")]
                          + [str(f) for f in files], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) not installed")
def test_gate_level_smoke(tiny_full_report):
    """cocotb tests of the hub on the synthesized OSU018 netlist (cell models, SRAM macro
    model): synthesis preserved behaviour, checked by the same scoreboard as the RTL.
    (Slow set: 23 s on Icarus; the fast set compiles the netlist, test above.)"""
    from moehub.verif.cocotb_runner import run_hub_cocotb
    cfg, out, rep = tiny_full_report
    gl = rep["asic"]["gate_level_sim"]
    files = [out / gl["netlist"], out / gl["sram_models"], gl["cell_models"]]
    assert cfg == load_hub_config("tiny"), "netlist = testbench's hub"
    tests = ["test_single_row", "test_same_expert_all_lanes", "test_region_overflow",
             "test_random_clean"]
    res = run_hub_cocotb("tiny", tests, verilog=files, tag="gate-level")
    assert res["failed"] == 0 and res["passed"] == len(tests), res
