"""``moehub synth --lib asap7 --corner ss`` re-times the TT netlist that is there and
current, and maps at TT first only where that netlist is absent or stale (the config, the
RTL or a netlist-shaping option changed) -- the flow's decisions, with the expensive steps
(Verilog, Yosys/ABC, OpenSTA) replaced by stand-ins that record what ran. No synthesis."""
from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from moehub.spec.config import load_hub_config
from moehub.synth import asap7, asic, report, verilog
from moehub.synth.blocks import _r

RTLIL = "module \\moehub\nend\n"


@pytest.fixture
def flow(monkeypatch):
    """The stand-ins: ``calls`` lists ('verilog',) and ('corner', corner, sta_only)."""
    calls = []
    state = {"rtlil": RTLIL}

    def write_verilog(cfg, out_dir):
        calls.append(("verilog",))
        (out_dir / f"{verilog.TOP}.il").write_text(state["rtlil"])
        v = out_dir / f"{verilog.TOP}.v"
        v.write_text("module moehub(); endmodule\n")
        return v

    def corner(cfg, out_dir, lib, work, v, *, sta_only, write_report, sram_opts, period_ns, abc_effort, **_):
        calls.append(("corner", lib.corner, sta_only))
        work.mkdir(parents=True, exist_ok=True)
        if not sta_only:                      # a synthesis: its outputs
            for f in asic.SYNTH_OUTPUTS:
                (work / f).write_text("")
        # (rounded as the real section is: asap7_report.build)
        section = _r({"corner": lib.corner, "clock_constraint_ns": period_ns, "abc_effort": abc_effort,
                      "sram": {**sram_opts, "macros": []}})
        if write_report:
            report.merge_write(out_dir, cfg, asap7.SECTION.format(corner=lib.corner), section)
        return section

    monkeypatch.setattr(asap7, "tools_missing", lambda: None)
    monkeypatch.setattr(report, "markdown", lambda rep: "")
    monkeypatch.setattr(report, "write_metrics", lambda out, rep: None)
    monkeypatch.setattr(verilog, "write_verilog", write_verilog)
    monkeypatch.setattr(verilog, "hub_rtlil", lambda cfg, design=None: state["rtlil"])
    monkeypatch.setattr(verilog, "find_memories", lambda text: [])
    monkeypatch.setattr(asap7, "_corner", corner)
    # (the Liberty files are not read: a corner is its name here, so the test needs no PDK)
    monkeypatch.setattr(asap7.library, "asap7", lambda c: SimpleNamespace(corner=c))
    return calls, state


CFG = load_hub_config("tiny")


def test_ss_retimes_a_current_tt_netlist(flow, tmp_path):
    calls, _ = flow
    asap7.run_asap7(CFG, tmp_path)                           # TT: mapped and timed
    assert calls == [("verilog",), ("corner", "tt", False)]
    calls.clear()
    sec = asap7.run_asap7(CFG, tmp_path, corner="ss")       # SS: re-times it, nothing else
    assert calls == [("corner", "ss", True)]
    assert sec["corner"] == "ss"
    assert (tmp_path / "asap7-ss" / "netlist.v").exists()   # the TT netlist shared


def test_ss_maps_at_tt_first_when_absent(flow, tmp_path):
    calls, _ = flow
    asap7.run_asap7(CFG, tmp_path, corner="ss")
    assert calls == [("verilog",), ("corner", "tt", False), ("corner", "ss", True)]


@pytest.mark.parametrize("change", ["config", "rtl", "clock", "sram", "effort", "netlist"])
def test_ss_maps_at_tt_first_when_stale(flow, tmp_path, change):
    calls, state = flow
    asap7.run_asap7(CFG, tmp_path)
    cfg, kw = CFG, {}
    if change == "config":         # (a report of another hub is another config's)
        cfg = CFG.replace(tags_per_source=CFG.tags_per_source + 1)
    elif change == "rtl":
        state["rtlil"] = RTLIL + "# changed\n"
    elif change == "clock":
        kw["period_ns"] = 0.8
    elif change == "sram":
        kw["sram_min_bits"] = 1
    elif change == "effort":
        kw["abc_effort"] = "high"
    else:
        (tmp_path / "asap7-tt" / "netlist.v").unlink()
    calls.clear()
    asap7.run_asap7(cfg, tmp_path, corner="ss", **kw)
    assert calls == [("verilog",), ("corner", "tt", False), ("corner", "ss", True)]


def test_ss_netlist_of_another_config_is_stale(flow, tmp_path):
    calls, _ = flow
    asap7.run_asap7(CFG, tmp_path)
    made = tmp_path / "asap7-tt" / "config.json"
    made.write_text(json.dumps({**asdict(CFG), "tags_per_source": 99}))
    calls.clear()
    asap7.run_asap7(CFG, tmp_path, corner="ss")
    assert calls[:2] == [("verilog",), ("corner", "tt", False)]


def test_tt_without_sta_only_always_maps(flow, tmp_path):
    calls, _ = flow
    asap7.run_asap7(CFG, tmp_path)
    calls.clear()
    asap7.run_asap7(CFG, tmp_path)
    assert calls == [("verilog",), ("corner", "tt", False)]
    calls.clear()
    asap7.run_asap7(CFG, tmp_path, sta_only=True)           # --sta-only: re-times it at TT
    assert calls == [("corner", "tt", True)]
