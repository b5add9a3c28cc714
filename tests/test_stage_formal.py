"""The relay hub's chunk stagings' formal properties (moehub/verif/formal/stage.py, sets
``relay-stage`` and ``relay-partial-stage``): each set's k-induction and covers pass, and
each planted bug (:data:`moehub.verif.formal.stage.RELAY_PLANTS`,
:data:`~moehub.verif.formal.stage.PARTIAL_PLANTS`) makes a BMC FAIL, with a trace, on the
property it breaks -- with the strengthening invariants off, so the property itself, not an
invariant, catches it. The sets' covers (every one reached by step 11, 4-5 s each) are
their smoke jobs, in tests/test_formal.py's slow set; the plants here are the fast set's.
"""
from __future__ import annotations

import pytest

from conftest import assert_fails_on, assert_set_passes, formal_file

from moehub.verif.formal.sets import run_harness
from moehub.verif.formal.stage import (PARTIAL_PLANTS, RELAY_PLANTS, PartialStageHarness, RelayStageHarness,
                                       small_config)

pytestmark = formal_file()

HARNESS = {"relay-stage": RelayStageHarness, "relay-partial-stage": PartialStageHarness}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prove", "bmc"])
@pytest.mark.parametrize("name", list(HARNESS))
def test_stage_set_passes(name, mode):
    """k-induction closes at k = 1 (60-120 s each under load); the BMC of 9 cycles from
    reset, the invariants asserted too (15-20 s)."""
    assert_set_passes(name, mode)


#: each plant's BMC depth: its failure's step (measured, in the comment) plus one (the input's
#: ready, a register, is first set a cycle after reset)
DEPTHS = {
    "relay-stage": {"mark-dropped": 6,          # 5: a dropped row's first chunk marked
                    "whole-early": 7,           # 6: a row out (done) with two chunks in
                    "dup-missed": 8,            # 7: drops short of the duplicate
                    "addr-no-chunk": 8,         # 7: a write at its row's start
                    "local-written": 8,         # 7: a write no chunk owes (out of order)
                    "bitmap-kept": 12,          # 11: the slot's next row's first chunk unmarked
                    "ready-stuck": 5},          # 4: a chunk waits a third cycle, wr ready
    "relay-partial-stage": {"dup-missed": 8,    # 7: drops short of the duplicate
                            "addr-no-chunk": 8,  # 7: a write at its row's start
                            "drop-written": 8,  # 7: a dropped row's chunk written
                            "whole-early": 9,   # 8: a row out before its chunks are in
                            "at-ptag": 10,       # 9: a row out with another slot
                            "bitmap-kept": 15,  # 14: the slot reused after its row left
                            "ready-stuck": 5},  # 4: a chunk waits a third cycle, outputs ready
}
PLANTS = {"relay-stage": RELAY_PLANTS, "relay-partial-stage": PARTIAL_PLANTS}
#: the partial staging's row must leave its queue before its slot is reused (about 2 min);
#: of the plants of the code both stagings share (``ChunkStage``), the fast set tries each
#: once -- the duplicate, the hang and the bitmap on the relay staging's harness, the whole
#: test on the partial staging's -- and the address's on neither (1.5-3 s each)
SLOW = {("relay-partial-stage", "bitmap-kept"), ("relay-partial-stage", "dup-missed"),
        ("relay-partial-stage", "addr-no-chunk"), ("relay-partial-stage", "ready-stuck"),
        ("relay-stage", "whole-early"), ("relay-stage", "addr-no-chunk"), ("relay-stage", "local-written")}


@pytest.mark.plants
@pytest.mark.parametrize("name,plant", [pytest.param(n, k, marks=pytest.mark.slow) if (n, k) in SLOW else (n, k)
                                        for n in DEPTHS for k in DEPTHS[n]])
def test_stage_plant_fails(name, plant):
    r = run_harness(f"{name}-{plant}", HARNESS[name](small_config(), plant, invariants=False),
                    "bmc", DEPTHS[name][plant])
    assert_fails_on(r, PLANTS[name][plant].fails)


def test_every_plant_is_tried():
    for name in HARNESS:
        assert set(DEPTHS[name]) == set(PLANTS[name]) == set(HARNESS[name].plants)


@pytest.mark.parametrize("name", list(HARNESS))
def test_stage_unknown_plant_is_refused(name):
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        HARNESS[name](small_config(), "nonesuch")
