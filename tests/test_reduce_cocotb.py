"""The relay's reduce-on-combine (moehub/rtl/relay/reduce_path.py ``ReducePath``: the reduce
unit, its engine, the accumulate datapath) as generated Verilog on Icarus, under the cocotb
testbench moehub/verif/tb/reduce.py, against the reference model (moehub/spec/relay.py
``ReduceModel``) on real BF16 data.

The config: R2 (2 nodes x 4 GPUs) with a record table of 4 of 8 token ids and chunks of 4
BF16 elements, 4 to a row (``ReducePath(cfg)``'s defaults: ``data_bits / 16`` elements,
``chunks_per_row`` chunks). Fast set: one seed. Slow set: more seeds, and planted bugs that
must fail the run naming the seed, where the same seeds pass unplanted.
"""
import pytest

from conftest import needs
from test_rtl_relay import R2

MODULE = "moehub.verif.tb.reduce"
CFG = R2.replace(token_bits=3, reduce_tokens=4, data_bits=64, row_bytes=64)
pytestmark = needs("icarus")


def _run(*, tag, seed=1, seeds=1, rows=40, design=None):
    from moehub.rtl.relay.reduce_path import ReducePath
    from moehub.verif.cocotb_runner import run_hub_cocotb
    return run_hub_cocotb(CFG, ["reduce_random"], module=MODULE, design=design or ReducePath, tag=tag,
                          seed=seed, seeds=seeds, sim="icarus", extra_env={"MOEHUB_REDUCE_ROWS": str(rows)})


def _log(res):
    return res["results"].parent / "sim-reduce.log"


def test_reduce_cocotb_random():
    """40 partial rows and their opens at seed 1: every reduced row the model's to the bit,
    the counters the model's."""
    res = _run(tag="reduce")
    assert res["failed"] == 0 and res["passed"] == 1, f"{res} (log {_log(res)})"


@pytest.mark.slow
def test_reduce_cocotb_random_seeds():
    res = _run(tag="reduce-seeds", seed=2, seeds=4, rows=80)
    assert res["failed"] == 0 and res["passed"] == 1, f"{res} (log {_log(res)})"


#: planted bugs: (module, class, old, new), each must fail the random test
PLANTS = {
    # the read-after-write hazard ignored: a sum's next part reads before the write-back
    "no-hazard": ("moehub.rtl.relay.reduce_engine", "ReduceEngine",
                  "m.d.comb += hazard.eq(_reads(o.kind, o.parts) & Cat(", "m.d.comb += hazard.eq(0 & Cat("),
    # the slot's weight of the record's first slot for every part
    "first-weight": ("moehub.rtl.relay.reduce_unit", "ReduceUnit",
                     "part_op.weight.eq(select([(sbit[s], rec.weight[s]) for s in range(K)], WEIGHT_BITS))",
                     "part_op.weight.eq(rec.weight[0])"),
}


@pytest.mark.slow
@pytest.mark.parametrize("plant", list(PLANTS))
def test_reduce_cocotb_planted_bug_is_caught(plant):
    """The bug goes into an in-memory copy of the RTL before the Verilog is generated; the
    random test fails and names the seed."""
    from moehub.rtl.relay.reduce_path import ReducePath
    from moehub.verif.formal.plant import Plant, planted
    module, cls, old, new = PLANTS[plant]
    host = None if cls == "ReducePath" else ("moehub.rtl.relay.reduce_path", "ReducePath")
    design = planted(ReducePath, {plant: Plant(module, old, new, cls, (), "", host=host)}, plant)
    res = _run(tag=f"reduce-plant-{plant}", design=design)
    assert res["failures"] == ["reduce_random"], f"plant {plant} not caught: {res}"
    assert " seed 1 " in _log(res).read_text(), f"the failure names no seed (log {_log(res)})"
