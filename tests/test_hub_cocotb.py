"""pytest wrappers that build the hub's Verilog and run the cocotb regression.

The fast set runs every cocotb test of verif/tb_hub.py once on tiny, on Verilator (on Icarus,
the reference, where Verilator is missing); the slow set (``-m slow``) runs every config on
both simulators and repeats the constrained-random tests over many seeds.
"""
import shutil

import pytest

from conftest import needs, on
from moehub.spec.config import HUB_CONFIGS
from moehub.verif import sim


def _run(config, testcases=None, **kw):
    from moehub.verif.runner import run_hub_cocotb
    res = run_hub_cocotb(config, testcases, **kw)
    assert res["failed"] == 0, f"{config}: failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, f"{config}: no cocotb test ran"
    return res


#: The fast set runs every test of the regression once on tiny: on Verilator, or on Icarus
#: (the reference) where Verilator is missing; the default config's RTL runs in the fast set
#: through the co-simulation's traffic (tests/test_cosim_rtl.py). The slow set adds tiny on
#: Icarus (92 s of the fast set's 6 minutes on two cores, whose tests the Verilator run
#: repeats; it stays in the mutation kill suite, ``kill``) and every other config on both
#: simulators (the default config's regression: a ~45 s Verilator build and ~40 s of
#: tests, about 4 minutes on Icarus).
FAST_RUNS = {("verilator" if sim.missing("verilator") is None else "icarus", "tiny")}
REGRESSION_RUNS = [on(s, c, slow=(s, c) not in FAST_RUNS, kill=(s, c) == ("icarus", "tiny"))
                   for s in ("icarus", "verilator") for c in HUB_CONFIGS]


@pytest.mark.parametrize("sim, config", REGRESSION_RUNS)
def test_hub_regression(sim, config):
    """Every directed, random (one seed) and performance test on one config."""
    res = _run(config, seed=1, sim=sim)
    assert res["sim"] == sim
    from moehub.verif.tb_hub_names import TEST_NAMES
    assert res["passed"] == len(TEST_NAMES), f"expected {len(TEST_NAMES)} tests, {res['passed']} passed"


@pytest.mark.slow
@pytest.mark.parametrize("sim, config", [on(s, c) for s in ("icarus", "verilator")
                                         for c in HUB_CONFIGS])
@pytest.mark.parametrize("base_seed", [11, 23, 37])
def test_hub_random_many_seeds(sim, config, base_seed):
    """Constrained-random tests over 10 consecutive seeds each (print the seed on failure)."""
    _run(config, ["test_random_clean", "test_random_with_errors"], seed=base_seed, seeds=10,
         tag=f"slow{base_seed}", sim=sim)


#: The coverage run of each config (slow set): every cocotb test once (the two seeded random
#: tests have their many-seeds run above), the knob test over ``seeds`` layers of about
#: ``packets`` packets, every tile size, and -- where ``full_region`` -- one expert's whole
#: max_rows_per_expert region filled (tiny 4k packets, deepseek-v3 459k; mixtral's 32768-row
#: region, 2.1M packets, is out of Icarus' reach: its full-region bins stay open). Measured
#: on the shared 2-core machine: tiny ~2 min, mixtral-8gpu ~9 min, deepseek-v3 ~24 min (10 of
#: them filling the region).
COVERAGE_RUNS = {
    "tiny": dict(seeds=30, packets=1500, full_region=True),
    "mixtral-8gpu": dict(seeds=20, packets=2500, full_region=False),
    "deepseek-v3-8gpu": dict(seeds=16, packets=2500, full_region=True),
    # (8 lanes and 900 GB/s: fewer layers; their 4096/32768-row regions are not filled)
    "b200-nvlink5": dict(seeds=8, packets=2500, full_region=False),
    "nvl72": dict(seeds=8, packets=2500, full_region=False),
}
#: the share of the bins each coverage run must hit
COVERAGE_GOAL = 95.0


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("config", HUB_CONFIGS)
def test_hub_coverage(config):
    """The coverage run (see COVERAGE_RUNS) hits >= COVERAGE_GOAL % of the functional
    coverage bins (verif/coverage.py); its report goes to <build>/coverage/. On Icarus: the
    queue and watchdog bins read hub-internal signals a ports-only Verilator build hides."""
    from moehub.paths import build_root
    from moehub.verif import coverage
    from moehub.verif.tb_hub_names import TEST_NAMES
    run = COVERAGE_RUNS[config]
    folder = build_root() / "sim" / f"{config}-cov"
    shutil.rmtree(folder / "coverage", ignore_errors=True)
    tests = [t for t in TEST_NAMES if t not in ("test_random_clean", "test_random_with_errors")]
    env = {"MOEHUB_KNOB_PACKETS": str(run["packets"]), "MOEHUB_TILE_SIZES": "all",
           "MOEHUB_FULL_REGION": "1" if run["full_region"] else "0"}
    _run(config, tests, seed=3, seeds=run["seeds"], tag="cov", extra_env=env, sim="icarus")
    s = coverage.report([folder], build_root() / "coverage", [config])[config]
    assert s["percent"] >= COVERAGE_GOAL, \
        f"{config}: coverage {s['hit']}/{s['bins']} = {s['percent']} % < {COVERAGE_GOAL} % " \
        f"(missed: {[(g, d['missed']) for g, d in s['groups'].items() if d['missed']]})"
