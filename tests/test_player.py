"""RTL in the loop: the Verilog player replays a schedule into the hub; the reference
model fed the RTL's accept order reproduces every output (equivalence), in both the
plain-Verilog and the cocotb (clock in C) modes, on Icarus (fast set) and Verilator (slow
set; the fast set's Verilator smoke test is in test_sim_verilator.py)."""
import io
import random
import shutil

import pytest

from conftest import on
from moehub import progress
from moehub.paths import output_dir
from moehub.spec.config import load_hub_config
from moehub.verif.player import (PROGRESS_CYCLES, accept_schedule, model_write_hash,
                                 replay_into_model, run_player)
from moehub.verif.traffic import LaneFeeder, random_rows


def demand_schedule(cfg, n_rows, seed, burst=1):
    """Arrivals from a credit-respecting feeder; ``burst`` > 1 names more packets per cycle
    than the hub has lanes (the player must queue them in order)."""
    rng = random.Random(seed)
    rows = random_rows(cfg, rng, n_rows, skew=0.3)
    f = LaneFeeder(cfg, rows, rng, early_eos=True)
    sched, cyc = [], 0
    while not f.done():
        for _ in range(burst):
            for lane, p in enumerate(f.offer()):
                if p is not None:
                    sched.append((cyc // burst * burst, lane, p))
                    f.accepted(lane)
            cyc += 1
        for s in f.sources:   # a tag is free again once its row has been sent
            used = {a.tag for a in s.active}
            s.free_tags = [t for t in range(cfg.tags_per_source) if t not in used]
    return sched


def check_equivalent(cfg, res):
    m = replay_into_model(cfg, res)
    assert [w for _, w in res.ctl] == m.ctl
    assert [(s, t) for _, s, t in res.credits] == m.credits
    assert (res.writes, res.write_hash) == model_write_hash(cfg, m)
    assert res.csr[("STATUS", 0)] & 0x8, "layer not done"
    assert all(v == 0 for (name, _), v in res.csr.items() if name == "DROPS")
    return m


@pytest.mark.parametrize("sim", [on("icarus"), on("verilator", slow=True)])
@pytest.mark.parametrize("mode", ["verilog", "cocotb"])
def test_player_equivalence(mode, sim):
    cfg = load_hub_config("tiny")
    sched = demand_schedule(cfg, 40, seed=3, burst=2)
    res = run_player(cfg, sched, mode=mode, tag=f"test-{mode}-{sim}", sim=sim)
    m = check_equivalent(cfg, res)
    assert sum(m.rows) == 40 and res.cycles > 0 and res.sim == sim


@pytest.mark.parametrize("sim", [on("icarus"), on("verilator", slow=True)])
def test_player_backpressure_delays_arrivals(sim):
    """With back-pressure on the write ports the hub stalls; the stall log reconstructs the
    accept cycles exactly (checked against the player's own accept log)."""
    cfg = load_hub_config("tiny")
    sched = demand_schedule(cfg, 30, seed=4)
    res = run_player(cfg, sched, mode="verilog", bp=0.4, tag=f"test-bp-{sim}", log_accepts=True,
                     sim=sim)
    assert res.stalls, "back-pressure should stall the hub"
    check_equivalent(cfg, res)
    arrivals = sorted(sched, key=lambda x: (x[0], x[1]))
    rebuilt = accept_schedule([c for c, _, _ in arrivals], [p for _, _, p in arrivals],
                              res.stalls, cfg.lanes)
    assert [(c, j) for c, j, _ in rebuilt] == [(c, j) for c, j, _ in res.accepted]


def test_accept_schedule_queues_bursts_in_order():
    pk = list(range(7))
    out = accept_schedule([0, 0, 0, 0, 0, 0, 5], pk, [(1, 2)], lanes=4)
    assert [(c, j) for c, j, _ in out] == [(0, 0), (0, 1), (0, 2), (0, 3), (3, 0), (3, 1), (5, 0)]


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) is not installed")
def test_player_reports_cycles_and_packets():
    """Progress of an RTL run: the Verilog player appends ``<cycle> <packets accepted>`` to
    progress.txt every PROGRESS_CYCLES cycles while Icarus runs, and run_player reports
    them as simulated cycles per second and packets of the total (in this file: the same
    worker's build folder as the tests above, so the hub's RTL is built once). The plain
    testbench: the progress lines are the player's in either mode, and the idle cycles
    between the spread-out packets cost seconds under cocotb's clock."""
    cfg = load_hub_config("tiny")
    # (spread over about 1,300 cycles: two progress lines, at cycles 0 and 1,024)
    sched = [(c * 16, lane, p) for c, lane, p in demand_schedule(cfg, 20, seed=5)]
    err = io.StringIO()
    previous = progress.get()
    progress.configure(progress.NORMAL, stream=err, tty=False, interval=0.0)
    try:
        res = run_player(cfg, sched, mode="verilog", tag="progress")
    finally:
        progress.set_reporter(previous)
    check_equivalent(cfg, res)
    lines = (output_dir("player", "tiny-progress") / "progress.txt").read_text().split("\n")
    pts = [tuple(map(int, line.split())) for line in lines if line]
    assert len(pts) >= 2 and pts == sorted(pts), pts
    assert all(t % PROGRESS_CYCLES == 0 for t, _ in pts) and pts[-1][0] <= res.cycles
    text = err.getvalue()
    assert "RTL hub tiny [progress]: build (Amaranth -> Verilog, Icarus): done in" in text
    assert f"/{len(sched):,} packets" in text and " cycles at " in text
    assert "RTL hub tiny [progress]: simulate: done in" in text
    assert f"({len(sched):,}/{len(sched):,} packets, {res.cycles:,} cycles at " in text
