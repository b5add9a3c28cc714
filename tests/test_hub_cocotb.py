"""pytest wrappers that build the hub's Verilog and run the cocotb regression on Icarus.

The fast set runs every cocotb test of verif/tb_hub.py once on tiny and the default config
(deepseek-v3 in the slow set); the slow set (``-m slow``) also repeats the constrained-random
tests over many seeds.
"""
import shutil

import pytest

from moehub.config.schema import HUB_CONFIGS

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None,
                                reason="Icarus Verilog (iverilog) is not installed: run scripts/setup_tools.sh")


def _run(config, testcases=None, **kw):
    from moehub.verif.runner import run_hub_cocotb
    res = run_hub_cocotb(config, testcases, **kw)
    assert res["failed"] == 0, f"{config}: failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, f"{config}: no cocotb test ran"
    return res


#: The fast set runs the regression on tiny and the default config; deepseek-v3 (the
#: default's shape with more experts, ~50 s) joins them in the slow set.
REGRESSION_CONFIGS = [pytest.param(c, marks=pytest.mark.slow) if c == "deepseek-v3-8gpu" else c
                      for c in HUB_CONFIGS]


@pytest.mark.parametrize("config", REGRESSION_CONFIGS)
def test_hub_regression(config):
    """Every directed, random (one seed) and performance test on one config."""
    res = _run(config, seed=1)
    from moehub.verif.tb_hub_names import TEST_NAMES
    assert res["passed"] == len(TEST_NAMES), f"expected {len(TEST_NAMES)} tests, {res['passed']} passed"


@pytest.mark.slow
@pytest.mark.parametrize("config", HUB_CONFIGS)
@pytest.mark.parametrize("base_seed", [11, 23, 37])
def test_hub_random_many_seeds(config, base_seed):
    """Constrained-random tests over 10 consecutive seeds each (print the seed on failure)."""
    _run(config, ["test_random_clean", "test_random_with_errors"], seed=base_seed, seeds=10,
         tag=f"slow{base_seed}")
