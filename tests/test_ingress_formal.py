"""The relay input's formal properties (moehub/verif/formal/ingress.py, set
``relay-input``): the set's k-induction and covers pass, each planted bug
(:data:`moehub.verif.formal.ingress.PLANTS`) makes a BMC FAIL, with a trace, on the
property it breaks -- with the strengthening invariants off, so the property itself, not an
invariant, catches it -- and the no-hang and drain bounds are exact (one less fails). The
set's smoke job (k-induction, k = 3) also runs in tests/test_formal.py.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, assert_set_passes, formal_file

from moehub.verif.formal import ingress
from moehub.verif.formal.ingress import PLANTS, IngressHarness, small_config
from moehub.verif.formal.sets import run_harness

pytestmark = formal_file()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prove", "cover"])
def test_input_set_passes(mode):
    """k-induction closes at k = 3 (the longest bounded wait, a packet's 2 idle cycles,
    within the induction's path); every cover is reached by step 6 (about 5 s each). (The
    k-induction is the set's smoke job, which tests/test_formal.py runs in the fast set:
    here, slow set only.)"""
    assert_set_passes("relay-input", mode)


@pytest.mark.slow
def test_input_bmc_passes():
    """The BMC of 12 cycles from reset (about 30 s)."""
    assert_set_passes("relay-input", "bmc")


#: each plant's BMC depth: its failure's step (measured, in the comment) and a little more
DEPTHS = {"room-ignored": 6,             # 4: the relay chunk overwritten before taken
          "grant-every-lane": 8,         # 6: a relay chunk lost, its debt never drains
          "relay-part-skipped": 8,       # 6: a relay chunk lost, its debt never drains
          "hub-written-twice": 7,        # 5: a packet no word owes on a lane's output
          "unknown-source-relayed": 5,   # 3: an unknown source's chunk on the relay stream
          "hub-waits-relay": 7,          # 5: a word held back a second cycle (a hang)
          "stage-lane0": 5,              # 3: lane 1's relay chunk with lane 0's payload
          "stage-drop-gpu-only": 5,      # 3: a bad-targets chunk without drop
          "partial-owner-kept": 5,       # 3: a bad owner's partial chunk without drop
          "own-tag-token": 6}            # 4: a relay row's own packet with the wrong tag
#: the fast set's plants: none (the set's smoke proof runs in tests/test_formal.py's fast
#: set); each plant, 2-5 s, in the slow set
FAST = set()


@pytest.mark.plants
@pytest.mark.parametrize("plant", [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in DEPTHS])
def test_input_plant_fails(plant):
    r = run_harness(f"ingress-{plant}", IngressHarness(small_config(), plant, invariants=False),
                    "bmc", DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


@pytest.mark.plants
@pytest.mark.slow
@pytest.mark.parametrize("bound", ["hang", "o", "relay", "part"])
def test_input_bounds_are_exact(bound, monkeypatch):
    """One cycle less than HANG_WAIT (or an output's DRAIN_WAIT) fails: the bounds the
    set proves are the least that hold (the covers show each is reached)."""
    if bound == "hang":
        monkeypatch.setattr(ingress, "HANG_WAIT", ingress.HANG_WAIT - 1)
        text = "a hang"
    else:
        monkeypatch.setattr(ingress, "DRAIN_WAIT", {**ingress.DRAIN_WAIT, bound: ingress.DRAIN_WAIT[bound] - 1})
        text = f"{'o0' if bound == 'o' else bound}: owed transfers not coming out"
    r = run_harness(f"ingress-exact-{bound}", IngressHarness(small_config()), "bmc", 8)
    assert_fails_on(r, (text,))


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS)


def test_input_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        IngressHarness(small_config(), "nonesuch")
