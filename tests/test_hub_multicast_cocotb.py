"""pytest wrappers of the multicast cocotb tests (protocol v2, issue 14): the hub of
``tests/data/tiny-multicast.yaml`` (tiny with rows to up to 3 experts) against the
reference model.

Fast set: every directed test, on Icarus (the random tests' seeds went to the slow set, for
the fast set's 5 minutes). Slow set: both random tests over many seeds.
"""
import pytest

import feature_tb
from conftest import needs


@needs("icarus")
def test_hub_multicast():
    """Every directed multicast test (the random ones: slow set)."""
    feature_tb.run_directed("tiny-multicast", "tb_hub_multicast", "multicast")


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_multicast_random_many_seeds(base_seed):
    """The random multicast tests over 20 consecutive seeds each (the failing seed is in
    the assertion message and in the log)."""
    feature_tb.run("tiny-multicast", ["test_random_multicast", "test_random_multicast_with_errors"],
                   module="tb_hub_multicast", seed=base_seed, seeds=20, tag=f"multicast-slow{base_seed}")
