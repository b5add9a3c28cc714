"""The relay's reduce unit (moehub/rtl/relay/reduce_unit.py) against the reference model
(:class:`~moehub.spec.relay.ReduceModel`) in the Amaranth simulator: its op stream and
counters against the model's ``ops`` with random opens, parts and flushes, with planted
bugs (a sum never final; an open reading the last operation's record).
"""
import random

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from moehub.verif.formal.plant import broken_class
from test_rtl_relay import R2, R3


def reduce_sim(cfg, seed, steps=900, unit_cls=None, node=0, junk=False):
    """The reduce unit of a relay in ``node`` beside :class:`ReduceModel`: random opens
    (sometimes of a sum still open, of a source in this node or in none, of a token beyond
    the record table), partial rows (sometimes for no sum, a slot not expected or already
    in, a sum with no record), flushes, the op stream backpressured; every op must be the
    model's next (kind, record, slot, weight, parts), the counters the model's. ``junk``:
    the record SRAM powers up with random contents (the clearing sweep must close them)."""
    from moehub.rtl.relay.reduce_unit import Op, ReduceUnit
    from moehub.spec.relay import ReduceModel, bf16_bits, bf16_value, global_gpu
    unit_cls = unit_cls or ReduceUnit
    rng = random.Random(seed)
    size = 1 + 2 * cfg.topk + 16 * cfg.topk
    dut = unit_cls(cfg, power_up=[rng.getrandbits(size) | 1 for _ in range(cfg.reduce_records)] if junk else ())
    model = ReduceModel(cfg, node=node)
    G, T, K, rank = cfg.node_gpus, cfg.relay_targets, cfg.topk, 0
    kinds = {"write": Op.WRITE, "add": Op.ADD, "last": Op.LAST, "only": Op.ONLY, "flush": Op.FLUSH}
    stats = {k: 0 for k in kinds}

    def any_node():
        return rng.randrange(1 << cfg.node_bits) if rng.random() < 0.1 else rng.randrange(cfg.nodes)

    async def bench(ctx):
        ctx.set(dut.node, node)
        k, flushes = 0, 0
        offer_open = offer_part = None
        for cycle in range(steps):
            if offer_open is None and rng.random() < 0.25:
                n = any_node()
                tok = rng.randrange(1 << cfg.token_bits)
                slots = rng.sample(range(K), rng.randint(1, T))
                ws = [bf16_bits(rng.choice([0.125, 0.25, 0.3, 0.7, 1.5])) for _ in slots]
                offer_open = (n, tok, slots, ws)
                p = dut.open.payload
                ctx.set(p.src_node, n)
                ctx.set(p.token, tok)
                ctx.set(p.valid, (1 << len(slots)) - 1)
                for j in range(T):
                    ctx.set(p.slot[j], slots[j] if j < len(slots) else 0)
                    ctx.set(p.weight[j], ws[j] if j < len(slots) else 0)
            if offer_part is None and rng.random() < 0.5:
                if model.acc and rng.random() < 0.85:
                    (src, tok) = rng.choice(sorted(model.acc))
                    n = src // G
                    s = rng.choice(sorted(model.acc[(src, tok)]["weights"]))
                else:
                    n, tok, s = any_node(), rng.randrange(1 << cfg.token_bits), rng.randrange(K)
                offer_part = (n, tok, s)
                p = dut.part.payload
                ctx.set(p.src_node, n)
                ctx.set(p.token, tok)
                ctx.set(p.slot, s)
            ctx.set(dut.open.valid, offer_open is not None)
            ctx.set(dut.part.valid, offer_part is not None)
            ctx.set(dut.op.ready, rng.random() < 0.7)
            fl = cycle > 0 and rng.random() < 0.01
            ctx.set(dut.flush, fl)
            if ctx.get(dut.op.valid) and ctx.get(dut.op.ready):
                assert k < len(model.ops), (seed, cycle, "an op the model does not have")
                kind, key, slot, parts = model.ops[k]
                o = dut.op.payload
                idx = model.record_index(*key)
                assert (ctx.get(o.kind), ctx.get(o.index), ctx.get(o.parts)) == (kinds[kind], idx, parts), \
                    (seed, cycle, model.ops[k], ctx.get(o.kind), ctx.get(o.index), ctx.get(o.parts))
                if kind != "flush":
                    assert ctx.get(o.slot) == slot
                    w = bf16_bits(float(model_weights[(key, slot)]))
                    assert ctx.get(o.weight) == w, (seed, cycle, model.ops[k])
                stats[kind] += 1
                k += 1
            if offer_open is not None and ctx.get(dut.open.ready):
                n, tok, slots, ws = offer_open
                key = (global_gpu(cfg, n, rank), tok)
                fresh = key not in model.acc
                model.open(key[0], tok, tuple((s, float(bf16_value(w))) for s, w in zip(slots, ws)))
                if fresh:
                    for s, w in zip(slots, ws):
                        model_weights[(key, s)] = bf16_value(w)
                offer_open = None
            if offer_part is not None and ctx.get(dut.part.ready):
                n, tok, s = offer_part
                model.partial(global_gpu(cfg, n, rank), tok, s, np.ones(1, np.float32))
                offer_part = None
            if fl:
                flushes += 1
                model.flush()
            await ctx.tick()
        ctx.set(dut.open.valid, 0)
        ctx.set(dut.part.valid, 0)
        ctx.set(dut.op.ready, 1)
        ctx.set(dut.flush, 0)
        for _ in range(4 * cfg.reduce_records + 10):
            if ctx.get(dut.op.valid):
                assert k < len(model.ops), (seed, "drain", "an op the model does not have")
                kind, key, slot, parts = model.ops[k]
                assert (ctx.get(dut.op.payload.kind), ctx.get(dut.op.payload.index)) == \
                    (kinds[kind], model.record_index(*key)), (seed, "drain")
                stats[kind] += 1
                k += 1
            await ctx.tick()
        assert k == len(model.ops), (seed, k, len(model.ops))
        assert (ctx.get(dut.red_rows), ctx.get(dut.red_open), ctx.get(dut.red_incomplete),
                [ctx.get(d) for d in dut.drops]) == \
            (len(model.out), len(model.acc), model.incomplete, model.drops()), seed
        stats["flushes"] = flushes

    model_weights = {}
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return stats, model


#: (config, the relay's node): a table of 4 of 8 token ids on the last node of 2; every
#: token id on the middle node of 3 (the other nodes' records either side of it)
REDUCE_CASES = {"2x4": (R2.replace(token_bits=3, reduce_tokens=4), 1), "3x3": (R3.replace(token_bits=2), 1)}


@pytest.mark.parametrize("case", list(REDUCE_CASES))
@pytest.mark.parametrize("seed", range(2))
def test_reduce_unit_against_model(case, seed):
    """Every kind of op, flushes, and every refusal reached; the record SRAM powers up
    with junk (seed 1), which the clearing sweep closes."""
    cfg, node = REDUCE_CASES[case]
    stats, model = reduce_sim(cfg, seed, node=node, junk=seed == 1)
    assert all(stats[k] for k in ("write", "add", "last", "only", "flush")), stats
    assert model.bad_partials and model.bad_opens and model.no_record and model.incomplete, stats


REDUCE_PLANTS = {
    # the final test made without the new part's slot: no sum ever becomes final
    "never-final": ("first, final = rec.seen == 0, seen2 == rec.expect",
                    "first, final = rec.seen == 0, (rec.seen | (sbit & (sbit - 1))) == rec.expect"),
    # an open reads the record of the index held (the last operation's), not its own: the
    # bug the bench found in the first version
    "open-reads-old-record": ("                    m.d.comb += rd.addr.eq(at)\n                    m.d.sync += [index.eq(at), o.eq(",
                              "                    m.d.sync += [index.eq(at), o.eq("),
    # a source of this node given a record: its index aliases the next node's sum
    "own-node-aliases": ("(src_node < cfg.nodes) & (src_node != self.node) & tok_ok",
                         "(src_node < cfg.nodes) & tok_ok"),
    # no clearing sweep: the records keep their power-up contents (the plants run on junk)
    "no-clear": ("m.d.comb += [self.clearing.eq(1), wr.en.eq(1), wr.data.eq(0)]",
                 "m.d.comb += [self.clearing.eq(1), wr.en.eq(0), wr.data.eq(0)]"),
    # a token beyond the table given a record: its index wraps onto a lower token's sum
    "token-wraps": ("(src_node < cfg.nodes) & (src_node != self.node) & tok_ok",
                    "(src_node < cfg.nodes) & (src_node != self.node)"),
}


@pytest.mark.plants
@pytest.mark.parametrize("plant", list(REDUCE_PLANTS))
def test_reduce_unit_planted_bug_is_caught(plant):
    old, new = REDUCE_PLANTS[plant]
    cls = broken_class("moehub.rtl.relay.reduce_unit", old, new, "ReduceUnit")
    with pytest.raises(AssertionError):
        reduce_sim(*REDUCE_CASES["2x4"][:1], 0, unit_cls=cls, node=REDUCE_CASES["2x4"][1], junk=True)


@pytest.mark.parametrize("case", sorted(REDUCE_CASES))
def test_record_table_is_the_specs_size(case):
    """The unit's record memory is what spec.relay sizes (the co-simulation's record table
    and the docs' SRAM figures come from the spec)."""
    from moehub.rtl.relay.reduce_unit import ReduceUnit
    from moehub.spec.relay import record_table_bits
    cfg = REDUCE_CASES[case][0]
    unit = ReduceUnit(cfg)
    Fragment.get(unit, None)            # (elaborated: its memory is the one sized here)
    assert unit.depth * unit.record.size == record_table_bits(cfg)
