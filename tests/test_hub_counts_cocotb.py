"""pytest wrappers of the count-packet cocotb tests (protocol v2, issue 14): the hub of
``tests/data/tiny-counts.yaml`` (tiny with ``count_packets``) against the reference model.

Fast set: every directed test, on Icarus (the random tests' one seed went to the slow set
for the fast set's 5 minutes). Slow set: the
random tests over many seeds, and tb_hub's whole v1 regression on the same hub (no count
packet sent: a hub with the feature behaves as one without).
"""
from pathlib import Path

import pytest

from conftest import needs

CONFIG = str(Path(__file__).parent / "data" / "tiny-counts.yaml")


def _run(testcases=None, **kw):
    from moehub.verif.runner import run_hub_cocotb
    res = run_hub_cocotb(CONFIG, testcases, **kw)
    assert res["failed"] == 0, f"failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, "no cocotb test ran"
    return res


@needs("icarus")
def test_hub_counts():
    """Every directed count-packet test (the random ones: slow set)."""
    from moehub.verif.tb_hub_names import cocotb_tests
    names = [n for n in cocotb_tests(Path(__file__).parents[1] / "verif" / "tb_hub_counts.py")
             if not n.startswith("test_random")]
    res = _run(names, module="tb_hub_counts", tag="counts", sim="icarus")
    assert res["passed"] == len(names), f"expected {len(names)} tests, {res['passed']} passed"


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_counts_random_many_seeds(base_seed):
    """The random count tests over 20 consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    _run(["test_random_counts", "test_random_counts_with_errors"], module="tb_hub_counts",
         seed=base_seed, seeds=20, tag=f"counts-slow{base_seed}", sim="icarus")


@pytest.mark.slow
@needs("icarus")
def test_hub_v1_regression_with_count_packets_enabled():
    """tb_hub's regression (no count packets) on the hub with the feature: unchanged."""
    _run(module="tb_hub", seed=1, tag="counts-v1", sim="icarus")
