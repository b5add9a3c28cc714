"""The relay reduce engine's formal properties (moehub/verif/formal/reduce.py, set
``relay-reduce``) are not vacuous: each planted bug (:data:`moehub.verif.formal.reduce.PLANTS`)
makes a BMC FAIL, with a trace, on the property it breaks -- with the strengthening
invariants off, so the property itself, not an invariant, catches it. The unplanted
harness's smoke job runs in tests/test_formal.py (set ``relay-reduce``).
"""
from __future__ import annotations

import pytest

from moehub.verif.formal import sby
from moehub.verif.formal.reduce import PLANTS, ReduceEngineHarness, small_config
from moehub.verif.formal.sets import SETS, run_harness

try:
    sby.check_tools()
    _MISSING = None
except sby.ToolMissing as e:
    _MISSING = str(e)
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"formal tools missing: {_MISSING}")


@pytest.fixture(autouse=True)
def _build(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))


#: each plant's BMC depth: its failure's step (measured, in the comment) and a little more;
#: the ones whose failure is a result through the datapath's 20 cycles are slow (17-35 s)
DEPTHS = {"no-hazard": 8,            # 6: read after write
          "write-reads": 6,          # 3: a read for an op that does not read
          "addr-stuck": 6,           # 4: a read not at the next chunk; a read no op owes
          "take-mid-issue": 7,       # 5: a read not at the next chunk
          "flush-writes": 27,        # 25: a write no op owes
          "pop-first-chunk": 29,     # 27: write after read
          "add-sent": 27,            # 25: a reduced row's chunk no op owes
          "rank-lost": 27}           # 25: a reduced row without this hub's rank
SLOW = {"flush-writes", "pop-first-chunk", "add-sent", "rank-lost"}


@pytest.mark.plants
@pytest.mark.parametrize("plant", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in DEPTHS])
def test_reduce_plant_fails(plant):
    r = run_harness(f"reduce-{plant}", ReduceEngineHarness(small_config(), plant, invariants=False),
                    "bmc", DEPTHS[plant])
    assert r.status == "FAIL", f"{plant}: {r.status}, expected FAIL ({r.log})"
    assert r.trace is not None and r.trace.exists()
    assert any(t in f for f in r.failed for t in PLANTS[plant].fails), r.failed


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS)


def test_reduce_set_is_registered():
    s = SETS["relay-reduce"]
    assert s.component == "relay reduce engine" and "cover" in s.modes


def test_reduce_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        ReduceEngineHarness(small_config(), "nonesuch")
