"""The relay reduce path's formal properties (moehub/verif/formal/reduce_path.py, set
``relay-reduce-path``): the set's BMC and covers pass, each planted bug
(:data:`moehub.verif.formal.reduce_path.PLANTS`) makes a BMC FAIL, with a trace, on the
property it breaks, and the no-hang bounds are exact (one less fails). The set's smoke
job (its covers) also runs in tests/test_formal.py.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, assert_set_passes, formal_file

from moehub.verif.formal import reduce_path
from moehub.verif.formal.reduce_path import PLANTS, ReducePathHarness, small_config
from moehub.verif.formal.sets import run_harness

pytestmark = formal_file()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bmc", "cover"])
def test_reduce_path_set_passes(mode):
    """The BMC from reset and the covers (each bound reached) at the set's depths, 30
    cycles (about 35 s each). (The set's smoke job, a BMC of 12, runs in
    tests/test_formal.py's fast set.)"""
    assert_set_passes("relay-reduce-path", mode)


#: each plant's BMC depth: its failure's step (measured, in the comment) and a little more
DEPTHS = {"refused-stuck": 15,       # 13: a partial beat held back past HANG_WAIT (a hang)
          "header-early": 11,        # 9: a header taken while the last row owes beats
          "refused-passed": 12,      # 10: a y beat no passed row owes
          "op-ready-ignored": 24,    # 22: a partial beat held back past HANG_WAIT (a hang)
          "verdict-ignored": 15}     # 13: a partial beat held back past HANG_WAIT (a hang)
#: the fast set's plant: one hang (3-4 s); the rest in the slow set
FAST = {"refused-stuck"}


@pytest.mark.plants
@pytest.mark.parametrize("plant", [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in DEPTHS])
def test_reduce_path_plant_fails(plant):
    r = run_harness(f"reduce-path-{plant}", ReducePathHarness(small_config(), plant), "bmc", DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


@pytest.mark.slow
@pytest.mark.plants
@pytest.mark.parametrize("bound", ["HANG_WAIT", "OPEN_WAIT", "SWEEP_WAIT"])
def test_reduce_path_bounds_are_exact(bound, monkeypatch):
    """One cycle less than a no-hang bound fails within the set's BMC depth: the bounds the
    set proves are the least that hold to that depth (the covers show each is reached;
    about 15-35 s each)."""
    monkeypatch.setattr(reduce_path, bound, getattr(reduce_path, bound) - 1)
    text = {"HANG_WAIT": "a partial beat held back", "OPEN_WAIT": "an open held back",
            "SWEEP_WAIT": "a sweep longer"}[bound]
    r = run_harness(f"reduce-path-exact-{bound}", ReducePathHarness(small_config()), "bmc",
                    reduce_path.BMC_DEPTH)
    assert_fails_on(r, (text,))


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS)


def test_reduce_path_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        ReducePathHarness(small_config(), "nonesuch")
