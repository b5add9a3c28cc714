"""The relay reduce path's formal properties (moehub/verif/formal/reduce_path.py, set
``relay-reduce-path``): the set's k-induction and covers pass, the pairing properties are
inductive alone at k = 1 with the invariants, each planted bug
(:data:`moehub.verif.formal.reduce_path.PLANTS`) makes a BMC FAIL, with a trace, on the
property it breaks, and each no-hang bound is the least the induction proves (one less
fails it). The set's smoke job (a BMC 12, 9 s) runs in tests/test_formal.py's slow set; the fast set
checks the harness by the pairing's induction at k = 1.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, assert_set_passes, formal_file

from moehub.verif.formal import reduce_path
from moehub.verif.formal.reduce_path import PLANTS, ReducePathHarness, small_config
from moehub.verif.formal.sets import run_harness

pytestmark = formal_file()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prove", "cover"])
def test_reduce_path_set_passes(mode):
    """The k-induction (k = 24: about 2.5-3 min) and the covers within 30 cycles (about
    15-20 s). (The set's smoke job, a BMC of 12, runs in tests/test_formal.py's slow set.)"""
    assert_set_passes("relay-reduce-path", mode)


def test_reduce_path_pairing_is_inductive():
    """The pairing properties alone close at k = 1 with the invariants (a few seconds): the
    set's k is the no-hang bounds' window, not theirs."""
    r = run_harness("reduce-path-pairing", ReducePathHarness(small_config(), invariants=True, hangs=()),
                    "prove", 1)
    assert r.status == "PASS", f"{r.status} {r.failed} ({r.log})"


#: each plant's BMC depth: its failure's step (measured, in the comment) and a little more
DEPTHS = {"refused-stuck": 20,       # 18: a partial beat held back past HANG_WAIT (a hang)
          "header-early": 11,        # 9: a header taken while the last row owes beats
          "refused-passed": 12,      # 10: a y beat no passed row owes
          "op-ready-ignored": 29,    # 27: a partial beat held back past HANG_WAIT (a hang: the lost
                                     # op's beats never taken)
          "verdict-ignored": 20}     # 18: a partial beat held back past HANG_WAIT (a hang)
#: the fast set's plant: one hang (2-3 s, invariants off); the rest in the slow set
FAST = {"refused-stuck"}


@pytest.mark.plants
@pytest.mark.parametrize("plant", [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in DEPTHS])
def test_reduce_path_plant_fails(plant):
    r = run_harness(f"reduce-path-{plant}", ReducePathHarness(small_config(), plant), "bmc", DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


#: each no-hang bound's property, by the harness's name for it, and its message
BOUNDS = {"HANG_WAIT": ("partial", "a partial beat held back"), "OPEN_WAIT": ("open", "an open held back"),
          "SWEEP_WAIT": ("sweep", "a sweep longer")}


@pytest.mark.slow
@pytest.mark.parametrize("bound", list(BOUNDS))
def test_reduce_path_bounds_are_least(bound, monkeypatch):
    """One cycle less than a no-hang bound fails the k-induction (its property alone, k =
    the bound: the window of one cycle more) from a state every invariant allows: the
    bound is the least the invariants prove (about 50-125 s each). The covers reach
    shorter waits within 30 cycles (reduce_path.py: the longest ones take runs past any
    affordable cover)."""
    monkeypatch.setattr(reduce_path, bound, getattr(reduce_path, bound) - 1)
    name, text = BOUNDS[bound]
    r = run_harness(f"reduce-path-least-{bound}", ReducePathHarness(small_config(), invariants=True, hangs=(name,)),
                    "prove", getattr(reduce_path, bound))
    assert r.status == "UNKNOWN", f"{r.status}, expected the induction to fail ({r.log})"
    assert any(text in f for f in r.failed), r.failed


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS)


def test_reduce_path_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        ReducePathHarness(small_config(), "nonesuch")
