"""pytest wrappers of the paged-region cocotb tests (protocol v2, issue 14): the hub of
``tests/data/tiny-paged.yaml`` (tiny with a pool of 6 pages) against the reference model.

Fast set: every directed test, on Icarus (the fast set's 5 minutes: the random tests'
one seed went to the slow set). Slow set: both random tests (clean, and with v1's bad
input) over many seeds. (tb_hub's v1 regression does not run on this hub: its checks
place rows in the static regions, the paged hub places them in pages.)
"""
from pathlib import Path

import pytest

from conftest import needs

CONFIG = str(Path(__file__).parent / "data" / "tiny-paged.yaml")


def _run(testcases=None, **kw):
    from moehub.verif.runner import run_hub_cocotb
    res = run_hub_cocotb(CONFIG, testcases, **kw)
    assert res["failed"] == 0, f"failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, "no cocotb test ran"
    return res


@needs("icarus")
def test_hub_paged():
    """Every directed paged test (the random ones: slow set)."""
    from moehub.verif.tb_hub_names import cocotb_tests
    names = [n for n in cocotb_tests(Path(__file__).parents[1] / "verif" / "tb_hub_paged.py")
             if not n.startswith("test_random")]
    res = _run(names, module="tb_hub_paged", tag="paged", sim="icarus")
    assert res["passed"] == len(names), f"expected {len(names)} tests, {res['passed']} passed"


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_paged_random_many_seeds(base_seed):
    """The random paged tests over 20 consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    _run(["test_random_paged", "test_random_paged_with_errors"], module="tb_hub_paged",
         seed=base_seed, seeds=20, tag=f"paged-slow{base_seed}", sim="icarus")
