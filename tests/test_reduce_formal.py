"""The relay reduce engine's formal properties (moehub/verif/formal/reduce.py, sets
``relay-reduce`` and ``relay-reduce-hub-depths``) are not vacuous: each planted bug
(:data:`moehub.verif.formal.reduce.PLANTS`) makes a BMC FAIL, with a trace, on the property
it breaks -- with the strengthening invariants off, so the property itself, not an
invariant, catches it -- on the hub's own depths and on the proof's reduced ones. The
proof's stand-in for the datapath (:class:`~moehub.verif.formal.reduce.DatapathControl`)
is the datapath's control, cycle by cycle. The unplanted harnesses' smoke jobs run in
tests/test_formal.py.
"""
from __future__ import annotations

import random

import pytest

from conftest import assert_fails_on, formal_file
from amaranth import Module
from amaranth.sim import Simulator

from moehub.rtl.relay.accumulate import LATENCY, ReduceDatapath
from moehub.rtl.relay.reduce_engine import ReduceEngine
from moehub.verif.formal.reduce import PLANTS, PROOF_DEPTHS, DatapathControl, ReduceEngineHarness, small_config
from moehub.verif.formal.sets import SETS, run_harness

pytestmark = formal_file()


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
#: (the fast set keeps one plant the hazard check catches and one the read order does)
SLOW = {"flush-writes", "pop-first-chunk", "add-sent", "rank-lost", "take-mid-issue", "write-reads"}


@pytest.mark.plants
@pytest.mark.parametrize("plant", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in DEPTHS])
def test_reduce_plant_fails(plant):
    r = run_harness(f"reduce-{plant}", ReduceEngineHarness(small_config(), plant, invariants=False),
                    "bmc", DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


#: each plant's BMC depth on the proof's reduced depths (PROOF_DEPTHS: the datapath's
#: control 4 cycles long, so the failures through it come 16 cycles sooner; measured step
#: in the comment; about 2 s each)
REDUCED_DEPTHS = {"no-hazard": 8,           # 6
                  "write-reads": 6,         # 3
                  "addr-stuck": 6,          # 4
                  "take-mid-issue": 7,      # 5
                  "flush-writes": 11,       # 9
                  "pop-first-chunk": 13,    # 11
                  "add-sent": 11,           # 9
                  "rank-lost": 11}          # 9


@pytest.mark.plants
@pytest.mark.slow
@pytest.mark.parametrize("plant", list(REDUCED_DEPTHS))
def test_reduce_plant_fails_on_the_reduced_depths(plant):
    r = run_harness(f"reduce-small-{plant}",
                    ReduceEngineHarness(small_config(), plant, invariants=False, **PROOF_DEPTHS),
                    "bmc", REDUCED_DEPTHS[plant])
    assert_fails_on(r, PLANTS[plant].fails)


def test_every_plant_is_tried():
    assert set(DEPTHS) == set(PLANTS) == set(REDUCED_DEPTHS)


def test_reduce_sets_are_registered():
    s, hub = SETS["relay-reduce"], SETS["relay-reduce-hub-depths"]
    assert s.component == hub.component == "relay reduce engine"
    assert "prove" in s.modes and "cover" in s.modes and "bmc" in hub.modes and "cover" in hub.modes


def test_datapath_control_is_the_datapath():
    """The proof's datapath (its control at the datapath's latency) and the datapath agree
    on every signal the engine reads of it, cycle by cycle, under random beats and stalls."""
    cfg = small_config()
    m = Module()
    m.submodules.real = real = ReduceDatapath(cfg, 1, 7)
    m.submodules.model = model = DatapathControl(cfg, 1, 7, LATENCY, free=False)
    rng = random.Random(1)

    async def bench(ctx):
        for c in range(300):
            valid, kind, tag, ready = rng.random() < 0.7, rng.randrange(5), rng.randrange(128), rng.random() < 0.6
            for d in (real, model):
                ctx.set(d.i.valid, valid)
                ctx.set(d.i.payload.kind, kind)
                ctx.set(d.i.payload.tag, tag)
                ctx.set(d.o.ready, ready)
            for get in (lambda d: d.i.ready, lambda d: d.o.valid, lambda d: d.o.payload.tag,
                        lambda d: d.o.payload.kind):
                assert ctx.get(get(real)) == ctx.get(get(model)), f"cycle {c}"
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_engine_refuses_depths_too_small():
    with pytest.raises(ValueError, match="contexts = 2"):
        ReduceEngine(small_config(), 1, 2, contexts=2)
    with pytest.raises(ValueError, match="ops_in_flight = 1"):
        ReduceEngine(small_config(), 1, 2, ops_in_flight=1)


def test_reduce_unknown_plant_is_refused():
    with pytest.raises(ValueError, match="plant = 'nonesuch': unknown"):
        ReduceEngineHarness(small_config(), "nonesuch")
