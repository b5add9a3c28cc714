"""The comparison multicast allocators (kept for the synthesis comparison) refuse the
protocol-v2 configs they do not implement, at elaboration time, naming the key and its
value: without the refusal a count-packet config was accepted and its rows were never
refused for their counts (the allocator drives no ``met``/``over``), so a test on such a
hub would pass while the hub ignored the announced counts."""
from __future__ import annotations

import pytest

from moehub.spec.config import load_hub_config
from moehub.rtl.multicast_allocator import (MulticastAllocator, MulticastAllocatorAdmitted,
                                            MulticastAllocatorByTargets, MulticastAllocatorSameCycle)

MC3 = load_hub_config("tiny").replace(topk=3, max_targets=3)
COMPARISON = (MulticastAllocator, MulticastAllocatorSameCycle, MulticastAllocatorByTargets)


@pytest.mark.parametrize("cls", COMPARISON, ids=lambda c: c.__name__)
@pytest.mark.parametrize("key,val", [("count_packets", True), ("pool_pages", 4)])
def test_comparison_allocator_refuses_v2_config(cls, key, val):
    """The message names the key, the value given and the class that implements it."""
    with pytest.raises(ValueError) as e:
        cls(MC3.replace(**{key: val}))
    msg = str(e.value)
    assert f"{key} = {val!r}" in msg and cls.__name__ in msg and "MulticastAllocatorAdmitted" in msg


@pytest.mark.parametrize("cls", COMPARISON, ids=lambda c: c.__name__)
def test_comparison_allocator_names_both_keys(cls):
    with pytest.raises(ValueError, match=r"pool_pages = 4, count_packets = True"):
        cls(MC3.replace(pool_pages=4, count_packets=True))


def test_unicast_config_names_max_targets():
    with pytest.raises(ValueError, match=r"got max_targets = 1"):
        MulticastAllocator(load_hub_config("tiny"))


@pytest.mark.parametrize("key,val", [("count_packets", True), ("pool_pages", 4)])
def test_hub_allocator_takes_v2_config(key, val):
    """The hub's allocator implements both features: it is built (not refused)."""
    a = MulticastAllocatorAdmitted(MC3.replace(**{key: val}))
    a._MustUse__silence = True            # (built, not elaborated)
    assert a.cfg.max_targets == 3
