"""The relay credit join's formal properties (moehub/verif/formal/join.py, set
``relay-join``): each planted bug (:data:`moehub.verif.formal.join.PLANTS`) makes a BMC
FAIL, with a trace, on the property it breaks -- with the strengthening invariants off, so
the property itself, not an invariant, catches it. The set's own jobs run in
tests/test_formal.py: its smoke job (the k-induction, k = 8, about 5 s) in the fast set,
BMC 12 and the covers (a credit owed held back the full 7 cycles at step 16) in the slow
set.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, formal_file

from moehub.verif.formal.join import PLANTS, JoinHarness, small_config
from moehub.verif.formal.sets import run_harness

pytestmark = formal_file()

#: each plant's BMC depth: its failure's step (measured, in the comment) and a little more
DEPTHS = {"forwards-alone": 7,        # 5: a row credited before the packet manager's half
          "dropped-kept": 9,          # 7: a dropped row credited twice
          "pm-kept": 11,              # 9: the slot's next row credited on its forwards alone
          "pass-swallowed": 7}        # 5: a pass-through credit never sent, the port taking a third


@pytest.mark.plants
@pytest.mark.slow          # (the fast set plants a bug in the unit's simulation bench)
@pytest.mark.parametrize("plant", list(DEPTHS))
def test_join_plant_fails(plant):
    r = run_harness(f"join-{plant}", JoinHarness(small_config(), plant, invariants=False), "bmc", DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS)


def test_join_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        JoinHarness(small_config(), "nonesuch")
