"""pytest wrappers of the count-packet cocotb tests (protocol v2, issue 14): the hub of
``tests/data/tiny-counts.yaml`` (tiny with ``count_packets``) against the reference model.

Fast set: every directed test, on Icarus (the random tests' one seed went to the slow set
for the fast set's 5 minutes). Slow set: the
random tests over many seeds, and tb_hub's whole v1 regression on the same hub (no count
packet sent: a hub with the feature behaves as one without).
"""
import pytest

import feature_tb
from conftest import needs


@needs("icarus")
def test_hub_counts():
    """Every directed count-packet test (the random ones: slow set)."""
    feature_tb.run_directed("tiny-counts", "tb_hub_counts", "counts")


@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("base_seed", [11, 23])
def test_hub_counts_random_many_seeds(base_seed):
    """The random count tests over 20 consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    feature_tb.run("tiny-counts", ["test_random_counts", "test_random_counts_with_errors"],
                   module="tb_hub_counts", seed=base_seed, seeds=20, tag=f"counts-slow{base_seed}")


@pytest.mark.slow
@needs("icarus")
def test_hub_v1_regression_with_count_packets_enabled():
    """tb_hub's regression (no count packets) on the hub with the feature: unchanged."""
    feature_tb.run("tiny-counts", module="tb_hub", seed=1, tag="counts-v1")
