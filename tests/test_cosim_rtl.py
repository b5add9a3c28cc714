"""Co-simulated MoE traffic through the hub's RTL (the RTL hub backend in the loop).

Arrival schedules from the NVLink model (Mixtral-like: 1 expert/GPU, top-2; DeepSeek-V3-
like: 32 experts/GPU, top-8; uniform and skewed routing) are played into the Verilog and
checked with the scoreboard: the reference model fed the RTL's accept order reproduces
every control write, credit and data write. Model mode (the cosim's annotated reference
model) and RTL mode must agree on allocation, counts and flagged tiles, and on tile-ready
times within a bound (they are equal unless the RTL stalls its lanes).
"""
import pytest

from conftest import needs, on
from moehub.cosim.experiment import load_configs
from moehub.cosim.hub_rtl import compare, run_hub_rtl
from moehub.cosim.hub_stage import run_hub_fast
from moehub.cosim.layer import Layer
from moehub.cosim.systems import hub_schedule
from moehub.cosim.workload import make_routing

#: tile-ready difference allowed between model mode and RTL mode, in hub cycles
TILE_READY_BOUND = 4


def _layer(model, tokens, workload, seed=1):
    s, m, w = load_configs("h100x8", model, workload, tokens, seed=seed)
    return Layer(s, m, w, make_routing(m, w, s.gpus), None)


#: every layer here runs in the slow set (DeepSeek-V3's hub on Verilator: 112 s of the fast
#: set's 8 min 40 s idle, with its build; Mixtral's 24-token layers: 79 s each on Icarus),
#: and so does the main job's own path below (94 s: the default config's Verilog and its
#: Icarus run); the fast set drives the RTL with the same player on tiny
#: (tests/test_player.py) and checks the co-simulation's RTL options up front (below)
FAST_RTL: set = set()


@pytest.mark.parametrize("sim, model, tokens, workload", [
    on(sim, model, tokens, workload, slow=(model, sim, workload) not in FAST_RTL)
    for model, tokens in (("mixtral-8x7b", 24), ("deepseek-v3", 8)) for sim in ("icarus", "verilator")
    for workload in ("default", "skewed-sst2")])
def test_cosim_traffic_through_rtl(model, tokens, workload, sim):
    L = _layer(model, tokens, workload)
    arrivals, *_ = hub_schedule(L, t0=0.0)
    gpu = 0
    arr = arrivals[gpu]
    assert len(arr) > 0
    model_res = run_hub_fast(L.hub, arr)
    rtl_res = run_hub_rtl(L.hub, arr, tag=f"test-{model}-{workload}-{sim}", sim=sim)
    assert rtl_res.player.sim == sim
    c = compare(L.hub, arr, model_res, rtl_res)
    assert c.functional_equal, "RTL outputs differ from the scoreboard"
    assert c.alloc_equal and c.counts_equal and c.tiles_equal, c
    assert rtl_res.drops == 0 and sum(rtl_res.counts) == len(arr)
    assert len(rtl_res.credits) == len(arr)
    assert c.tile_ready_max_diff <= TILE_READY_BOUND, c
    if c.stall_cycles == 0:
        assert c.tile_ready_max_diff == 0 and c.done_diff == 0, c


@pytest.mark.slow
@needs("icarus")
def test_cosim_command_with_an_rtl_hub_matches_the_model(tmp_path, capsys):
    """The main job's path (``moehub cosim --rtl-gpus 0``, run to its fixed point first
    with the model, then once with GPU 0's hub in RTL), on a few tokens."""
    from moehub.scripts.cli import main
    assert main(["cosim", "--tokens", "4", "--rtl-gpus", "0", "--no-figure",
                 "--out", str(tmp_path), "--run", "rtl"]) == 0
    out = capsys.readouterr().out
    assert "GPU 0 hub in RTL (cocotb + Icarus)" in out
    assert "outputs identical" in out and "allocation same" in out


def test_unknown_hub_features_are_refused_up_front(tmp_path, capsys):
    """Protocol-v2 features with an RTL hub: the RTL has all three, in any combination
    (README "Multicast rows with count packets"), and protocol v3's relay and reduce (their
    control in RTL beside the hub); an unknown one is a usage error naming the flag and the
    value, before any simulation."""
    from moehub.scripts.cli import main
    from moehub.cosim.systems.hub import ALL_FEATURES, FEATURES, RTL_FEATURES, check_features
    assert RTL_FEATURES == set(ALL_FEATURES)
    assert check_features(FEATURES, rtl=True) == set(FEATURES)
    for flags in (["--rtl-gpus", "0"], ["--hub", "rtl"]):
        assert main(["cosim", "--tokens", "4", *flags, "--hub-features", "early_counts,multicasts",
                     "--no-figure", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "--hub-features" in err and "multicasts" in err, err
    assert not any(tmp_path.iterdir())              # nothing written


def test_cosim_command_with_hub_features(tmp_path, capsys):
    """``--hub-features`` runs the protocol-v2 hub (model hub); the run folder says so."""
    from moehub.scripts.cli import main
    assert main(["cosim", "--tokens", "4", "--hub-features", "early_counts", "--no-figure",
                 "--systems", "bulk", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "MoE-Hub (hub reference model), protocol v2: early_counts" in out
    assert (tmp_path / "mixtral-8x7b_h100x8_default_t4_v2-early_counts_sys-bulk" / "run.json").exists()


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("feature", ["early_counts", "paged", "early_counts,paged"])
def test_v2_features_through_the_rtl_in_the_loop(tmp_path, capsys, feature):
    """The main job with a protocol-v2 feature (count packets; paged regions) and GPU 0's
    hub in RTL: the co-simulation's v2 traffic goes through the Verilog, whose control
    writes, credits and data writes equal the reference model's (a ~60 s build and ~20 s
    of Icarus each: slow set)."""
    from moehub.scripts.cli import main
    assert main(["cosim", "--tokens", "4", "--rtl-gpus", "0", "--hub-features", feature,
                 "--sim", "icarus", "--systems", "bulk", "--no-figure", "--out", str(tmp_path),
                 "--run", "rtl"]) == 0
    out = capsys.readouterr().out
    assert "GPU 0 hub in RTL (cocotb + Icarus)" in out and f"protocol v2: {feature.replace(',', '+')}" in out
    assert "outputs identical" in out and "allocation same" in out


@pytest.mark.slow
@needs("icarus")
def test_multicast_through_the_rtl_in_the_loop(tmp_path, capsys):
    """The main job with multicast rows on DeepSeek-V3 (32 experts a GPU, rows to up to 8
    of them; Mixtral's one expert a GPU has no multicast) and GPU 0's hub in RTL: its
    control writes, credits and data writes equal the reference model's (a ~4 min build
    and ~2 min of Icarus: slow set)."""
    from moehub.scripts.cli import main
    assert main(["cosim", "--tokens", "4", "--model", "deepseek-v3", "--rtl-gpus", "0",
                 "--hub-features", "multicast", "--sim", "icarus", "--systems", "bulk", "--no-figure",
                 "--out", str(tmp_path), "--run", "rtl"]) == 0
    out = capsys.readouterr().out
    assert "GPU 0 hub in RTL (cocotb + Icarus)" in out and "protocol v2: multicast" in out
    assert "outputs identical" in out and "allocation same" in out
