"""pytest wrappers that build the hub's Verilog and run the cocotb regression.

Icarus is the reference: the fast set runs every cocotb test of verif/tb_hub.py once on
tiny and the default config (deepseek-v3 in the slow set). Verilator runs the same
regression: on tiny in the fast set (a smoke test, skipped when Verilator is not
installed), on every config in the slow set. The slow set (``-m slow``) also repeats the
constrained-random tests over many seeds, on both simulators.
"""
import pytest

from conftest import on
from moehub.config.schema import HUB_CONFIGS


def _run(config, testcases=None, **kw):
    from moehub.verif.runner import run_hub_cocotb
    res = run_hub_cocotb(config, testcases, **kw)
    assert res["failed"] == 0, f"{config}: failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, f"{config}: no cocotb test ran"
    return res


#: Icarus runs the regression on tiny and the default config in the fast set; deepseek-v3
#: (the default's shape with more experts, ~50 s) joins them in the slow set. Verilator
#: runs tiny in the fast set (a ~25 s build, cached by content, then about a second) and
#: the other configs (a minute's build each) in the slow set.
REGRESSION_RUNS = ([on("icarus", c, slow=c == "deepseek-v3-8gpu") for c in HUB_CONFIGS]
                   + [on("verilator", c, slow=c != "tiny") for c in HUB_CONFIGS])


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
