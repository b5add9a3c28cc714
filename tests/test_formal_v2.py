"""Protocol v2's formal properties fail on planted bugs (``moehub formal``): the page
supply (its pool and ring: a page handed out at most once until returned, a
returned-twice page refused, none lost), the unicast page gate (a grant exactly the
model's, a row on its tile's page) and the multicast count limit (a row refused exactly
when its expert's announced count is met; no row of a dead expert granted).

Each plant is a harness option (:mod:`moehub.verif.formal.plant`): the component is built
from a broken in-memory copy of its RTL, and a short BMC must FAIL on the property the
plant breaks, with a trace. The unplanted harness passes the same BMC (the smoke set,
tests/test_formal.py), so the failure is the bug's. Fast: one plant per harness (< 20 s
together); the rest are slow.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_fails_on, formal_file

from moehub.verif.formal.common import formal_config
from moehub.verif.formal.sets import MCAST_COUNTS, run_harness

pytestmark = formal_file()


def _supply(plant):
    from moehub.verif.formal.page_supply import PageSupplyHarness
    return PageSupplyHarness(formal_config("tiny").replace(pool_pages=4), plant)


def _counts(plant):
    from moehub.verif.formal.multicast_v2 import CountsAllocatorHarness
    return CountsAllocatorHarness(formal_config("tiny/alloc-small").replace(**MCAST_COUNTS), plant)


SLOW = pytest.mark.slow
SUPPLY = [("joined-return-unseen", 7), pytest.param("double-return-accepted", 7, marks=SLOW),
          pytest.param("free-count-misses-return", 7, marks=SLOW),
          pytest.param("avail-misses-return", 7, marks=SLOW)]


@pytest.mark.parametrize("plant,depth", SUPPLY)
def test_page_supply_plant_fails(plant, depth):
    """(tiny, 4 pages, 4 takes a cycle) Each plant fails within 7 steps (step 6 measured), on
    the property it breaks (an invariant may fail beside it)."""
    from moehub.verif.formal.page_supply import PLANTS
    r = run_harness(f"supply-{plant}", _supply(plant), "bmc", depth)
    assert_fails_on(r, PLANTS[plant].fails)


@pytest.mark.slow
@pytest.mark.parametrize("plant,depth", [("met-one-late", 6), ("late-verdict-ignored", 8)])
def test_count_limit_plant_fails(plant, depth):
    """(alloc-small, 2 lanes, 2 sources) ``late-verdict-ignored`` fails first on "a row
    naming a dead expert granted" (step 7, ~30 s loaded: slow set)."""
    from moehub.verif.formal.multicast_v2 import COUNT_PLANTS
    r = run_harness(f"counts-{plant}", _counts(plant), "bmc", depth)
    assert_fails_on(r, COUNT_PLANTS[plant].fails)


GATE = [("same-cycle-page-ignored", 5), pytest.param("later-not-vetoed", 7, marks=SLOW),
        pytest.param("not-held", 8, marks=SLOW)]


@pytest.mark.parametrize("plant,depth", GATE)
def test_page_gate_plant_fails(plant, depth):
    """(alloc-small, 2 lanes, 4 pages) The unicast page gate's plants fail within
    ``depth`` steps (measured: steps 4, 6, 7) on the property each breaks: a row on the
    page its expert had before a lane ahead took a new one this cycle; a later lane of a
    refused lane's expert granted; an expert's rows granted the cycle after its refusal."""
    from moehub.verif.formal.page_gate import PLANTS, PageGateHarness
    from moehub.verif.formal.sets import PAGE_GATE
    h = PageGateHarness(formal_config("tiny/alloc-small").replace(**PAGE_GATE), plant)
    assert_fails_on(run_harness(f"gate-{plant}", h, "bmc", depth), PLANTS[plant].fails)


def test_page_gate_harness_refuses_other_configs():
    """The unicast gate's harness on a config without pages (or multicast) says why."""
    from moehub.verif.formal.page_gate import PageGateHarness
    with pytest.raises(ValueError, match="'tiny'.*pool_pages > 0"):
        PageGateHarness(formal_config("tiny"))


def test_unknown_plant_is_refused():
    from moehub.verif.formal.page_supply import PageSupplyHarness
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        PageSupplyHarness(formal_config("tiny").replace(pool_pages=4), "nonesuch")


def test_stale_plant_is_refused():
    """A plant whose source text is no longer in the RTL says so (not a silent no-op)."""
    from moehub.verif.formal.plant import broken_class
    with pytest.raises(ValueError, match="found 0 times"):
        broken_class("moehub.rtl.paging.regions", "no such text", "x", "PageSupply")
