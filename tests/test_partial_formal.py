"""The relay partial feed's formal properties (moehub/verif/formal/partial.py, set
``relay-partial-feed``): the set's k-induction and covers pass, and each planted bug
(:data:`moehub.verif.formal.partial.PLANTS`) makes a BMC FAIL, with a trace, on the
property it breaks -- with the strengthening invariants off, so the property itself, not an
invariant, catches it. The set's smoke job (k-induction, k = 5) also runs in
tests/test_formal.py.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, assert_set_passes, formal_file

from moehub.verif.formal.partial import PLANTS, PartialFeedHarness, small_config
from moehub.verif.formal.sets import run_harness

pytestmark = formal_file()


@pytest.mark.parametrize("mode", [pytest.param("prove", marks=pytest.mark.slow), "cover"])
def test_partial_feed_set_passes(mode):
    """k-induction closes at k = 5 (the no-hang property's window; the rest at 1); every
    cover is reached by step 10 (about 2-3 s each). (The
    k-induction is the set's smoke job, which tests/test_formal.py runs in the fast set:
    here, slow set only.)"""
    assert_set_passes("relay-partial-feed", mode)


@pytest.mark.slow
def test_partial_feed_bmc_passes():
    """The BMC of 16 cycles from reset (about 15 s)."""
    assert_set_passes("relay-partial-feed", "bmc")


#: each plant's BMC depth: its failure's step (measured, in the comment) and a little more
DEPTHS = {"dropped-reads": 5,        # 3: a read no row owes
          "addr-stuck": 6,           # 4: a read not at the row's next chunk
          "credit-sender": 7,        # 5: the tracked row's credit naming another row
          "header-offered": 7,       # 5: an out chunk with another row's header
          "credit-first-chunk": 9,   # 7: a good row's credit before its last chunk went out
          "room-ignored": 16,        # 15: a credit lost in a full queue, the next row's comes first
          "one-row-in-flight": 9}    # 7: a row offered waits a fifth cycle (a hang)
#: the credit queue must fill before the lost credit shows (about 25 s)
SLOW = {"room-ignored"}


@pytest.mark.plants
@pytest.mark.parametrize("plant", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in DEPTHS])
def test_partial_plant_fails(plant):
    r = run_harness(f"partial-{plant}", PartialFeedHarness(small_config(), plant, invariants=False),
                    "bmc", DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS)


def test_partial_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        PartialFeedHarness(small_config(), "nonesuch")
