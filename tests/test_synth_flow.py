"""The ASIC synthesis flow on the ``tiny`` hub: it runs, and its report is sane.

Needs Debian yosys, OpenSTA and the OSU018 library; skips with the reason otherwise.
Wall times are not checked here (scripts/bench_synth.py measures them).
"""
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from amaranth.lib import data

from moehub.config.schema import field_bits, load_hub_config
from moehub.rtl.layouts import HubLayouts
from moehub.synth import flow, tools

MISSING = tools.asic_tools_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"ASIC flow tools missing: {MISSING}")

MODULES = ("top", "pm", "alloc", "tracker", "csr")
FIGURES = ("cells", "flops", "area_um2", "gate_equivalents", "critical_path_ns", "fo4", "fmax_MHz")


def tracker_bits(cfg) -> int:
    """The tracker's tile-counter memory: experts x tiles per expert x counter width."""
    return cfg.experts * cfg.tiles_per_expert * field_bits(cfg.max_tile_rows)


def row_table_bits(cfg) -> int:
    """The packet manager's row-table memory: (sources x tags) entries of the entry body."""
    return cfg.entries * data.Layout.cast(HubLayouts(cfg).entry_body).size


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    """The flow on tiny with the realistic datapath; the counters forced into an SRAM macro."""
    cfg = flow.synth_config(load_hub_config("tiny"), "chunk")
    out = tmp_path_factory.mktemp("synth_tiny")
    flow.run_asic(cfg, out, sram_min_bits=64, sram_min_depth=16)
    return cfg, out, json.loads((out / "report.json").read_text())


def test_report_has_every_figure(tiny_report):
    cfg, out, rep = tiny_report
    a = rep["asic"]
    assert rep["config"] == "tiny" and rep["hub"]["data_bits"] == 8 * cfg.chunk_bytes
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
    assert (out / "report.md").read_text().startswith("# Synthesis report: `tiny`")


def test_memory_bits_match_config(tiny_report):
    cfg, out, rep = tiny_report
    mods = rep["asic"]["modules"]
    want = tracker_bits(cfg)
    assert mods["tracker"]["array_bits"] == want
    assert mods["pm"]["array_bits"] == row_table_bits(cfg)
    assert mods["top"]["array_bits"] == want + row_table_bits(cfg)
    assert mods["tracker"]["sram_bits"] == want      # kept as a macro, not built from flops
    assert mods["pm"]["sram_bits"] == 0              # the row table is read by every lane: flops
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


def test_area_grows_with_experts_and_lanes(tmp_path):
    """Three small variants of tiny (8-bit datapath), two at a time."""
    base = load_hub_config("tiny").replace(data_bits=8, lanes=2, experts=1)
    variants = {"base": base, "experts": base.replace(experts=3), "lanes": base.replace(lanes=4)}

    def one(item):
        name, cfg = item
        return name, flow.run_asic(cfg, tmp_path / name, write_report=False)

    with ThreadPoolExecutor(max_workers=2) as ex:
        res = dict(ex.map(one, variants.items()))
    area = {k: v["modules"]["top"]["area_um2"] for k, v in res.items()}
    bits = {k: v["modules"]["tracker"]["array_bits"] for k, v in res.items()}
    assert area["experts"] > area["base"] and area["lanes"] > area["base"]
    assert bits["experts"] == 3 * bits["base"] == tracker_bits(variants["experts"])
    for name, cfg in variants.items():
        assert res[name]["modules"]["top"]["array_bits"] == tracker_bits(cfg) + row_table_bits(cfg)
