"""The relay forward unit's formal properties (moehub/verif/formal/relay.py) are not
vacuous: each planted bug (:data:`moehub.verif.formal.relay.PLANTS`) makes a short BMC
FAIL, with a trace, on the property it breaks -- with the strengthening invariants off, so
the property itself, not an invariant, catches it. The unplanted harness passes its smoke
proof (k-induction, k = 2) in tests/test_formal.py (set ``relay-forward``) and here.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, formal_file

from moehub.verif.formal.relay import PLANTS, ForwardUnitHarness, small_config
from moehub.verif.formal.sets import run_harness

pytestmark = formal_file()


@pytest.mark.parametrize("plant", ["credit-early", pytest.param("forwarded-twice", marks=pytest.mark.slow)])
def test_relay_plant_fails(plant):
    """``credit-early`` fails at step 2, ``forwarded-twice`` at step 4 (measured; 15-20 s each)."""
    r = run_harness(f"relay-{plant}", ForwardUnitHarness(small_config(), plant, invariants=False), "bmc", 6)
    assert_fails_on(r, PLANTS[plant].fails)


def test_relay_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        ForwardUnitHarness(small_config(), "nonesuch")
