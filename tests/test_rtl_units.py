"""Amaranth-simulator unit tests of the small RTL blocks (fast, no Icarus)."""
import random

from amaranth.lib import data
from amaranth.sim import Simulator

from moehub.config.schema import load_hub_config
from moehub.rtl.allocator import AddressAllocator
from moehub.rtl.event_queue import EventQueue


def _run(dut, *benches):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for b in benches:
        sim.add_testbench(b)
    sim.run()


def test_event_queue_keeps_slot_order_and_never_overflows():
    layout = data.StructLayout({"v": 8})
    q = EventQueue(layout, push_slots=4, depth=8)
    rng = random.Random(3)
    sent, got = [], []
    counter = iter(range(10_000))

    async def producer(ctx):
        for cyc in range(300):
            free = 8 - (len(sent) - len(got))      # the producer reserves: pushes minus pops
            # (sparse pushes in the first half keep the queue nearly empty: a push into
            # an empty queue, or into one whose only event leaves, becomes the head)
            rate = 0.1 if cyc < 150 else 0.5
            valid = [rng.random() < rate for _ in range(4)] if free >= 4 else [False] * 4
            mask = 0
            for i, v in enumerate(valid):
                if v:
                    n = next(counter) & 0xFF
                    ctx.set(q.push.data[i], {"v": n})
                    sent.append(n)
                    mask |= 1 << i
            ctx.set(q.push.valid, mask)
            await ctx.tick()
        ctx.set(q.push.valid, 0)
        for _ in range(20):
            await ctx.tick()

    async def consumer(ctx):
        for _ in range(330):
            ctx.set(q.o.ready, rng.random() < 0.6)
            await ctx.tick()

    async def monitor(ctx):
        for _ in range(330):
            _, _, valid, ready, payload, pop = await ctx.tick().sample(
                q.o.valid, q.o.ready, q.o.payload, q.push.pop)
            assert pop == (valid and ready)
            if valid and ready:
                got.append(payload.v)

    _run(q, producer, consumer, monitor)
    assert got == sent[:len(got)] and len(got) > 100


def test_allocator_same_expert_all_lanes_and_overflow():
    cfg = load_hub_config("tiny")
    a = AddressAllocator(cfg)

    async def bench(ctx):
        for e in range(cfg.experts):
            ctx.set(a.cap[e], 6)
        ctx.set(a.grant.clear, 1)          # layer start: the capacities are latched
        await ctx.tick()
        ctx.set(a.grant.clear, 0)
        ctx.set(a.cap[1], 100)       # ... so a change now waits for the next layer
        # all four lanes ask for expert 1 in one cycle: rows 0..3 in lane order
        ctx.set(a.grant.req, 0b1111)
        for j in range(4):
            ctx.set(a.grant.expert[j], 1 << 1)
        assert [ctx.get(a.grant.row[j]) for j in range(4)] == [0, 1, 2, 3]
        assert ctx.get(a.grant.ok) == 0b1111
        await ctx.tick()
        # again: rows 4, 5 fit the capacity of 6, lanes 2 and 3 overflow
        assert [ctx.get(a.grant.row[j]) for j in range(2)] == [4, 5]
        assert ctx.get(a.grant.ok) == 0b0011
        await ctx.tick()
        assert ctx.get(a.rows[1]) == 6 and ctx.get(a.rows[0]) == 0
        # mixed experts, lane 1 idle
        ctx.set(a.grant.req, 0b1101)
        ctx.set(a.grant.expert[0], 1 << 0)
        ctx.set(a.grant.expert[2], 1 << 2)
        ctx.set(a.grant.expert[3], 1 << 0)
        assert (ctx.get(a.grant.row[0]), ctx.get(a.grant.row[2]), ctx.get(a.grant.row[3])) == (0, 0, 1)
        await ctx.tick()
        assert ctx.get(a.rows[0]) == 2 and ctx.get(a.rows[2]) == 1
        ctx.set(a.grant.clear, 1)
        await ctx.tick()
        assert [ctx.get(a.rows[e]) for e in range(cfg.experts)] == [0, 0, 0]
        # the next layer has expert 1's new capacity
        ctx.set(a.grant.clear, 0)
        ctx.set(a.grant.req, 0b1111)
        for j in range(4):
            ctx.set(a.grant.expert[j], 1 << 1)
        for _ in range(2):
            await ctx.tick()
        assert ctx.get(a.grant.ok) == 0b1111 and ctx.get(a.rows[1]) == 8

    _run(a, bench)


def test_split_difference_matches_subtraction():
    from amaranth import Module, Signal
    from moehub.rtl.logic import SplitDifference
    m = Module()
    a, b, sel = Signal(10), Signal(11), Signal(5)
    ks = [0, 3, 17, 20, 31]
    diff = SplitDifference(m, a, b, 13, 5, "d", registered=False, seg_bits=3)   # 3 high segments
    out = diff.select_minus(m, [(sel[i], k) for i, k in enumerate(ks)], "d_out")
    rng = random.Random(5)
    pairs = [(0, 0), (0, 1), (1023, 0), (0, 2047), (32, 31), (64, 70), (20, 0), (21, 1), (256, 257)]
    pairs += [(rng.randrange(1024), rng.randrange(2048)) for _ in range(300)]

    async def bench(ctx):
        for va, vb in pairs:
            ctx.set(a, va)
            ctx.set(b, vb)
            for i, k in enumerate(ks):
                ctx.set(sel, 1 << i)
                want = ((va - vb - k + 4096) % 8192) - 4096     # 13-bit two's complement
                assert ctx.get(out) == want, (va, vb, k, ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_naf_terms_rebuild_the_constant():
    from moehub.rtl.logic import naf
    for c in [1, 2, 3, 7, 256, 8192, 14336, 12345, (1 << 20) - 1]:
        terms = naf(c)
        assert sum(s << k for s, k in terms) == c
        assert all(abs(k1 - k2) > 1 for (_, k1), (_, k2) in zip(terms, terms[1:]))   # non-adjacent
    assert naf(14336) == [(-1, 11), (1, 14)]
