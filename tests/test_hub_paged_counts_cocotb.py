"""pytest wrappers of the cocotb tests of paged regions with count packets together
(protocol v2, issue 14): the hub of ``tests/data/tiny-paged-counts.yaml`` (tiny with a pool
of 6 pages and count packets) against the reference model.

Fast set: every directed test, on Icarus. Slow set: both random tests (clean, and with
v1's bad input) over many seeds.
"""
from pathlib import Path

import pytest

from conftest import needs

CONFIG = str(Path(__file__).parent / "data" / "tiny-paged-counts.yaml")
MODULE = "tb_hub_paged_counts"


def _run(testcases=None, **kw):
    from moehub.verif.runner import run_hub_cocotb
    res = run_hub_cocotb(CONFIG, testcases, module=MODULE, sim="icarus", **kw)
    assert res["failed"] == 0, f"failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, "no cocotb test ran"
    return res


@needs("icarus")
def test_hub_paged_counts():
    """Every directed test of the combination (the random ones: slow set)."""
    from moehub.verif.tb_hub_names import cocotb_tests
    names = [n for n in cocotb_tests(Path(__file__).parents[1] / "verif" / f"{MODULE}.py")
             if not n.startswith("test_random")]
    res = _run(names, tag="paged-counts")
    assert res["passed"] == len(names), f"expected {len(names)} tests, {res['passed']} passed"


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_paged_counts_random_many_seeds(base_seed):
    """The random tests over 20 consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    _run(["test_random_paged_counts", "test_random_paged_counts_with_errors"],
         seed=base_seed, seeds=20, tag=f"paged-counts-slow{base_seed}")
