"""``moehub synth-unit``: protocol v2's units through the hub's ASIC flow -- the expert
count unit keeps its state in flops, the page pool its returned pages in SRAM.

Needs Debian yosys, OpenSTA and the OSU018 library; skips with the reason otherwise."""
import pytest

from moehub.spec.config import field_bits, load_hub_config
from moehub.synth import tools
from moehub.synth.units import run_unit

MISSING = tools.asic_tools_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"ASIC flow tools missing: {MISSING}")


def test_expert_counts_unit_synthesises_with_its_state_in_flops(tmp_path, monkeypatch):
    """The unit keeps its state in flops: a seen bit per (source, expert), a total, an
    announced count and a completed count per expert (and the hand-off's final bits). Its
    summary names the RTL sources as the run wrote its RTL, not as they are when it ends
    (a run of an hour may outlive an edit), and the digest of the RTLIL it synthesised."""
    from moehub import runinfo
    from moehub.synth import units
    sources = {"hash": "as-written"}
    monkeypatch.setattr(runinfo, "rtl_sources_hash", lambda *a, **k: sources["hash"])
    flow = units.asic.run

    def edited_during_the_run(*a, **k):
        sources["hash"] = "edited-during-the-run"
        return flow(*a, **k)
    monkeypatch.setattr(units.asic, "run", edited_during_the_run)
    cfg = load_hub_config("tiny").replace(count_packets=True)
    r = run_unit("expert_counts", cfg, tmp_path / "u")
    S, E = cfg.sources, cfg.experts
    total_bits = field_bits(S * ((1 << cfg.count_bits) - 1))
    state = S * E + E * (total_bits + field_bits(S) + cfg.cap_bits + 1)
    assert r["flops"] >= state and r["sram_bits"] == 0
    assert 0 < r["fo4"] < 40 and r["n5_mm2"] > 0 and "->" in r["path"]
    # the run's summary for `moehub report --collect synth-unit`: the figures, the
    # config's features and the run's record
    import json
    doc = json.loads((tmp_path / "u" / "unit.json").read_text())
    assert doc["gate_equivalents"] == r["gate_equivalents"] and doc["unit"] == "expert_counts"
    assert doc["features"]["count_packets"] is True and doc["record"]["command"]
    assert doc["rtl_sha256"] == "as-written"
    # (and the digest of the RTLIL it synthesised: the working tree's, nothing edited since)
    assert doc["rtlil_sha256"] == units.unit_rtlil_digest("expert_counts", cfg)


def test_page_pool_keeps_returned_pages_in_sram(tmp_path):
    """A pool large enough puts its FIFO of returned pages in an SRAM macro (pages x page
    bits), its in_use bits in flops."""
    cfg = load_hub_config("tiny").replace(pool_pages=512)
    r = run_unit("page_pool", cfg, tmp_path / "u")
    assert r["sram_bits"] == (512 - 1) * cfg.page_bits and r["flops"] >= 512   # (one entry in its output register)

