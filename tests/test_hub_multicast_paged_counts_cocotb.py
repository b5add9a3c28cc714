"""pytest wrappers of the cocotb tests of protocol v2's three features together (issue
14): the hub of ``tests/data/tiny-multicast-paged-counts.yaml`` (multicast rows in a
12-page arena, with count packets) against the reference model.

Slow set only (the fast set's 5 minutes: each feature pair has its directed tests there,
tests/test_hub_multicast_paged_cocotb.py and test_hub_multicast_counts_cocotb.py): the
directed test, and both random tests (clean, and with v1's bad input) over many seeds.
"""
import pytest

import feature_tb
from conftest import needs


@pytest.mark.slow
@needs("icarus")
def test_hub_multicast_paged_counts():
    """Every directed test of the three features together (the random ones: slow set)."""
    feature_tb.run_directed("tiny-multicast-paged-counts", "tb_hub_multicast_paged_counts", "multicast-paged-counts")


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_multicast_paged_counts_random_many_seeds(base_seed):
    """The random tests over 20 consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    feature_tb.run("tiny-multicast-paged-counts", ["test_random_multicast_paged_counts",
                                            "test_random_multicast_paged_counts_with_errors"],
                   module="tb_hub_multicast_paged_counts", seed=base_seed, seeds=20,
                   tag=f"multicast-paged-counts-slow{base_seed}")
