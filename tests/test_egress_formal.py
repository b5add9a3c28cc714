"""The relay forward egress's formal properties (moehub/verif/formal/egress.py, set
``relay-egress``): each planted bug
(:data:`moehub.verif.formal.egress.PLANTS`) makes a BMC FAIL, with a trace, on the property
it breaks -- with the strengthening invariants off, so the property itself, not an
invariant, catches it. The set's own jobs run in tests/test_formal.py: its smoke job (the
k-induction, k = 9, about 9 s) in the fast set, BMC 14 (about 35 s under load) and the covers
(reached by step 26: a command held back the full 8 cycles) in the slow set.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, formal_file

from moehub.verif.formal.egress import PLANTS, EgressHarness, small_config
from moehub.verif.formal.sets import run_harness

pytestmark = formal_file()


#: each plant's BMC depth: its failure's step (measured, in the comment) and a little more
DEPTHS = {"slot-no-node": 9,          # 7: a read at another row's slot
          "addr-stuck": 10,           # 8: a read not at the forward's next chunk
          "credit-early": 12,         # 10: a credit before the forwards ahead went out
          "held-overwritten": 13,     # 11: a held command lost, a credit before its chunks
          "header-early": 16,         # 14: a chunk with the next forward's header (about 30 s)
          "ready-ignores-taken": 13,  # 11: a sixth command taken and lost, a credit before its chunks
          "one-read-in-flight": 17}   # 15: a command offered waits a ninth cycle (about 35 s)

@pytest.mark.plants
@pytest.mark.slow          # (the fast set plants a bug in the unit's simulation bench)
@pytest.mark.parametrize("plant", list(DEPTHS))
def test_egress_plant_fails(plant):
    r = run_harness(f"egress-{plant}", EgressHarness(small_config(), plant, invariants=False),
                    "bmc", DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS)


def test_egress_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        EgressHarness(small_config(), "nonesuch")
