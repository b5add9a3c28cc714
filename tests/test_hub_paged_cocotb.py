"""pytest wrappers of the paged-region cocotb tests (protocol v2, issue 14): the hub of
``tests/data/tiny-paged.yaml`` (tiny with a pool of 6 pages) against the reference model.

Fast set: every directed test, on Icarus (the fast set's 5 minutes: the random tests'
one seed went to the slow set). Slow set: both random tests (clean, and with v1's bad
input) over many seeds. (tb_hub's v1 regression does not run on this hub: its checks
place rows in the static regions, the paged hub places them in pages.)
"""
import pytest

import feature_tb
from conftest import needs


@needs("icarus")
def test_hub_paged():
    """Every directed paged test (the random ones: slow set)."""
    feature_tb.run_directed("tiny-paged", "tb_hub_paged", "paged")


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_paged_random_many_seeds(base_seed):
    """The random paged tests over 20 consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    feature_tb.run("tiny-paged", ["test_random_paged", "test_random_paged_with_errors"],
                   module="tb_hub_paged", seed=base_seed, seeds=20, tag=f"paged-slow{base_seed}")


@pytest.mark.slow
@needs("icarus")
def test_hub_paged_banked_ring():
    """The paged tests that take any pool (tile boundaries, pages freed and reused, both
    random tests over 5 seeds; the others script a 6-page pool's exhaustion) on a pool of
    36 pages: the ring in banked memories (rtl/page_ring.py), read a cycle ahead, in the
    hub."""
    feature_tb.run("tiny-paged-banked", ["test_pages_taken_at_tile_boundaries", "test_page_free_and_reuse"],
                   module="tb_hub_paged", tag="paged-banked")
    feature_tb.run("tiny-paged-banked", ["test_random_paged", "test_random_paged_with_errors"],
                   module="tb_hub_paged", seed=5, seeds=5, tag="paged-banked-random")


@pytest.mark.slow
@needs("icarus")
def test_hub_paged_one_take_a_cycle_many_seeds():
    """One expert whose tiles are at least as long as the lanes (tiny-paged-one-expert):
    at most one page is taken a cycle, so the page supply serves one take and reads a
    2-entry window (rtl/layouts.py ``page_takes``); both random paged tests over 10 seeds.
    (The fast set checks the one-take supply in its unit test, tests/test_rtl_v2_units.py.)"""
    feature_tb.run("tiny-paged-one-expert", ["test_random_paged", "test_random_paged_with_errors"],
                   module="tb_hub_paged", seed=31, seeds=10, tag="paged-one-slow")
