"""pytest wrappers of the cocotb tests of multicast rows in a paged arena (protocol v2,
issue 14): the hub of ``tests/data/tiny-multicast-paged.yaml`` (tiny-multicast with a pool
of 12 pages) against the reference model.

Fast set: every directed test, on Icarus. Slow set: both random tests (clean, and with
v1's bad input) over many seeds.
"""
import pytest

import feature_tb
from conftest import needs


@needs("icarus")
def test_hub_multicast_paged():
    """Every directed test of multicast rows in pages (the random ones: slow set)."""
    feature_tb.run_directed("tiny-multicast-paged", "tb_hub_multicast_paged", "multicast-paged")


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_multicast_paged_random_many_seeds(base_seed):
    """The random tests over 20 consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    feature_tb.run("tiny-multicast-paged", ["test_random_multicast_paged",
                                            "test_random_multicast_paged_with_errors"],
                   module="tb_hub_multicast_paged", seed=base_seed, seeds=20,
                   tag=f"multicast-paged-slow{base_seed}")
