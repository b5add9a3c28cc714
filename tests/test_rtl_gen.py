"""Verilog generation (moehub.rtl.gen): the stamp that skips an unchanged conversion."""
import dataclasses
import types

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from moehub.spec.config import load_hub_config
from moehub.rtl import gen


def test_convert_regenerates_only_when_the_sources_or_config_change(tmp_path, monkeypatch):
    """A second conversion of the same sources and config is skipped (the stamp matches);
    a changed config, a changed RTL source or ``force`` converts again. (Found by mutation
    testing: with the stamp compare inverted every test still passed, each run simply
    regenerating -- and a stale Verilog would have been reused after an RTL change.)"""
    calls = []

    class Fake(wiring.Component):
        o: Out(1)

        def __init__(self, cfg):
            calls.append(cfg.name)
            super().__init__()
            self.csr_map = types.SimpleNamespace(to_json=lambda: "{}", to_c_header=lambda: "")

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.o.eq(1)
            return m

    src = tmp_path / "src"
    (src / "rtl").mkdir(parents=True)
    (src / "spec").mkdir()
    (src / "rtl" / "block.py").write_text("x = 1\n")
    (src / "spec" / "formats.py").write_text("")
    monkeypatch.setattr(gen, "MoEHub", Fake)
    monkeypatch.setattr(gen, "RTL_DIR", src / "rtl")
    cfg, out = load_hub_config("tiny"), tmp_path / "out"
    v = gen.convert(cfg, out_dir=out)
    assert v.exists() and "module moehub" in v.read_text() and len(calls) == 1
    gen.convert(cfg, out_dir=out)
    assert len(calls) == 1
    gen.convert(dataclasses.replace(cfg, timeout_cycles=5), out_dir=out)
    assert len(calls) == 2
    (src / "rtl" / "block.py").write_text("x = 2\n")
    gen.convert(dataclasses.replace(cfg, timeout_cycles=5), out_dir=out)
    assert len(calls) == 3
    gen.convert(dataclasses.replace(cfg, timeout_cycles=5), out_dir=out, force=True)
    assert len(calls) == 4
    (src / "spec" / "formats.py").write_text("y = 1\n")     # the contract changed: rebuilt
    gen.convert(dataclasses.replace(cfg, timeout_cycles=5), out_dir=out)
    assert len(calls) == 5
    (src / "rtl" / "counts").mkdir()
    (src / "rtl" / "counts" / "gate.py").write_text("z = 1\n")   # a sub-package's file: rebuilt
    gen.convert(dataclasses.replace(cfg, timeout_cycles=5), out_dir=out)
    assert len(calls) == 6


def test_the_test_sessions_yosys_cache_is_keyed_by_rtlil_and_passes(tmp_path):
    """The test session's Yosys cache (tests/conftest.py) answers a repeated conversion from
    its file without running Yosys, and runs it again for other RTLIL or other passes (a
    key without the passes would hand the quick netlist to a run that wants the optimised
    one)."""
    from conftest import yosys_cache
    runs = []

    def fake_yosys(il, passes):
        runs.append((il, passes))
        return f"// {len(runs)} {il} {' '.join(passes)}\n"
    cached = yosys_cache(fake_yosys, tmp_path / "cache")
    a = cached("module a", gen.SIM_PASSES)
    assert cached("module a", gen.SIM_PASSES) == a and len(runs) == 1
    assert cached("module a", gen.QUICK_PASSES) != a and len(runs) == 2
    assert cached("module b", gen.SIM_PASSES) != a and len(runs) == 3
    again = yosys_cache(fake_yosys, tmp_path / "cache")      # another worker, same folder
    assert again("module a") == a and len(runs) == 3
    assert not list((tmp_path / "cache").glob("*.tmp*"))
