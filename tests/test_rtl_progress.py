"""Progress of RTL runs: the Verilog player appends ``<cycle> <packets accepted>`` to
progress.txt every PROGRESS_CYCLES cycles while Icarus runs, and run_player reports them
as simulated cycles per second and packets of the total (a short tiny-config run)."""
import io
import shutil

import pytest

from moehub import progress
from moehub.spec.config import load_hub_config
from moehub.paths import output_dir
from moehub.verif.player import PROGRESS_CYCLES, run_player
from test_player import check_equivalent, demand_schedule

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None,
                                reason="Icarus Verilog (iverilog) is not installed")


def test_player_reports_cycles_and_packets():
    cfg = load_hub_config("tiny")        # (the build folder as test_player's: RTL cached)
    sched = [(c * 40, lane, p) for c, lane, p in demand_schedule(cfg, 20, seed=5)]
    err = io.StringIO()
    previous = progress.get()
    progress.configure(progress.NORMAL, stream=err, tty=False, interval=0.0)
    try:
        res = run_player(cfg, sched, mode="cocotb", tag="progress")
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
