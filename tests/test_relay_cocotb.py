"""The relay's control path (moehub/rtl/relay/hub.py ``RelayControl``: the row FIFO, the
forward unit, the forward check, the relay counters) as generated Verilog on Icarus,
under the cocotb testbench moehub/verif/tb/relay.py, against the reference model
(moehub/spec/relay.py) cycle by cycle.

The component's Verilog is made by ``run_hub_cocotb(cfg, design=RelayControl)`` under the
hub's top name; the relay config (a ``replace`` of tiny, not a shipped YAML) is written to
``config.yaml`` in the run folder and reaches the testbench as that file.

Fast set: the directed cases and one random seed on R2 (2 nodes x 4 GPUs), one simulator
run. Slow set: more seeds on R2, on R3 (3 nodes x 3 GPUs, 2 forward tags) and on tiny's
two-node relay config (one expert per GPU: forward rows of one target); and planted bugs
(a broken in-memory copy of the RTL, built into the Verilog) that must fail the run,
naming the seed, where the same seeds pass on the unplanted RTL.
"""
import pytest

from conftest import needs
from moehub.spec.config import load_hub_config
from moehub.spec.relay import nodes_config
from test_rtl_relay import PLANTS as UNIT_PLANTS
from test_rtl_relay import R2, R3
from test_rtl_relay_hub import PLANTS as HUB_PLANTS

MODULE = "moehub.verif.tb.relay"
#: tiny's two-node relay config, as the co-simulation derives it (one expert per GPU)
TINY_NODES = nodes_config(load_hub_config("tiny"), 2)
pytestmark = needs("icarus")


def _run(cfg, testcases=None, *, tag, seed=1, seeds=1, rows=120, design=None):
    from moehub.rtl.relay.hub import RelayControl
    from moehub.verif.cocotb_runner import run_hub_cocotb
    return run_hub_cocotb(cfg, testcases, module=MODULE, design=design or RelayControl, tag=tag,
                          seed=seed, seeds=seeds, sim="icarus", extra_env={"MOEHUB_RELAY_ROWS": str(rows)})


def _passed(res, n):
    log = res["results"].parent / "sim-relay.log"
    assert res["failed"] == 0, f"failing cocotb tests {res['failures']} (log {log})"
    assert res["passed"] == n, res


def test_relay_cocotb_directed_and_random():
    """The directed cases (a row only for this GPU; one for two other GPUs, the credit
    after both forwards; one waiting for a forward credit; each drop reason; received
    forward rows; the window overrun) and 120 random rows at seed 1."""
    _passed(_run(R2, ["relay_directed", "relay_random"], tag="relay"), 2)


@pytest.mark.slow
@pytest.mark.parametrize("name, cfg", [("2x4", R2), ("3x3", R3), ("tiny-nodes-2", TINY_NODES)])
def test_relay_cocotb_random_seeds(name, cfg):
    """Five seeds of 200 rows (each at its own node and rank)."""
    _passed(_run(cfg, ["relay_random"], tag=f"relay-random-{name}", seed=2, seeds=5, rows=200), 1)


#: planted bugs: (module, class, old, new); each must fail the random test (the first two
#: also fail the directed one)
PLANTS = {
    # two forward rows' destinations swapped (the pick's GPU reported as the next one up)
    "dst-swapped": ("moehub.rtl.relay.forward_unit", "ForwardUnit", *HUB_PLANTS["dst-swapped"]),
    # a relay row's credit never returned
    "credit-dropped": ("moehub.rtl.relay.forward_unit", "ForwardUnit", *HUB_PLANTS["credit-dropped"]),
    # a relay row's tag outside its source's window accepted
    "tag-unchecked": ("moehub.rtl.relay.forward_unit", "ForwardUnit", *UNIT_PLANTS["tag-unchecked"]),
    # the forward-rows-in counter counts the rows the forward check dropped too
    "fwd-in-counts-drops": ("moehub.rtl.relay.hub", "RelayControl",
                            "ev_fin_in.eq(self.fin.valid & ~chk.bad_source & ~chk.bad_targets)",
                            "ev_fin_in.eq(self.fin.valid)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("plant", list(PLANTS))
def test_relay_cocotb_planted_bug_is_caught(plant, monkeypatch):
    """The bug goes into an in-memory copy of the RTL before the Verilog is generated; the
    random test fails on seed 1 or 2 and names the seed (both pass unplanted, below)."""
    import moehub.rtl.relay.hub as hub_mod
    from moehub.rtl.relay.hub import RelayControl
    from moehub.verif.formal.plant import broken_class
    module, cls, old, new = PLANTS[plant]
    broken = broken_class(module, old, new, cls)
    design = RelayControl
    if cls == "ForwardUnit":
        monkeypatch.setattr(hub_mod, "ForwardUnit", broken)
    else:
        design = broken
    res = _run(R2, ["relay_random"], tag=f"relay-plant-{plant}", seed=1, seeds=2, rows=60, design=design)
    assert res["failures"] == ["relay_random"], f"plant {plant} not caught: {res}"
    log = (res["results"].parent / "sim-relay.log").read_text()
    assert "AssertionError: tiny seed " in log, f"the failure names no seed (log next to {res['results']})"


@pytest.mark.slow
def test_relay_cocotb_unplanted_passes_plant_seeds():
    """The planted-bug runs' seeds and rows, unplanted: they pass."""
    _passed(_run(R2, ["relay_random"], tag="relay-plant-none", seed=1, seeds=2, rows=60), 1)
