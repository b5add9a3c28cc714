"""The relay hub's combine side before the reduce (moehub/rtl/relay/stage.py's
PartialStage, moehub/rtl/relay/partial_feed.py), in the Amaranth simulator: partial rows
arrive chunk by chunk, interleaved and in any chunk order, and must reach the reduce
whole, one after another, each chunk in order with its row's header -- the reduce path's
contract (moehub/rtl/relay/reduce_path.py).

The bench plays the node's GPUs: each sender keeps its P window (a (sender, P tag) pair
sends its next row only after the feed returned the pair's credit), sends rows' chunks in
random order interleaved with the other rows', now and then a chunk twice, some rows
dropped (their owner is not served here: ``drop``, only the credit owed). The staging's
HBM is a memory whose reads answer in order after a random latency; every port is
back-pressured at random. Checked: every good row leaves the feed whole -- its chunks in
order, back to back, each with its row's header and the data that chunk was sent with; a
dropped row never does; every row's credit exactly once, a good row's after its last chunk
has left; duplicate chunks counted (PARTIAL_STAGE_DROPS), not written; staging writes
only at the row's slot (PARTIAL_STAGE_BASE + slot x stride + chunk x chunk_bytes); at
the end nothing is left inside. A failure names the seed.
"""
import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from moehub.rtl.relay.partial_feed import PartialFeed
from moehub.rtl.relay.side import connect_combine_side
from moehub.rtl.relay.stage import PartialStage
from moehub.spec.formats import RelayPorts, pack_fields
from moehub.verif.formal.plant import broken_class
from test_rtl_relay_ingress import R22, R33

BASE = 0x2000_0000


class _Side(Elaboratable):
    """The partial staging and its feed, wired as in the relay hub (its rows left to the
    bench, not the reduce)."""

    def __init__(self, cfg, stage=PartialStage, feed=PartialFeed):
        self.stage, self.feed = stage(cfg), feed(cfg)
        self.base = Signal(cfg.addr_bits)

    def elaborate(self, platform):
        m = Module()
        m.submodules.stage, m.submodules.feed = self.stage, self.feed
        connect_combine_side(m, None, self.stage, self.feed, None, base=self.base)
        return m


def run_partials(cfg, seed, rows=40, stage=PartialStage, feed=PartialFeed):
    """Play ``rows`` partial rows through the staging and the feed (see the module
    docstring); returns what was reached (an AssertionError names the seed)."""
    side = _Side(cfg, stage, feed)
    st, fd = side.stage, side.feed
    C, span = cfg.chunks_per_row, cfg.partial_span
    pairs = [(s, t) for s in range(cfg.node_gpus) for t in range(span)]
    seen = {"good": 0, "dropped": 0, "credited": 0, "dups": 0}

    async def bench(ctx):
        rng = random.Random(seed)
        ctx.set(side.base, BASE)
        mem, answers = {}, []                  # the staging's HBM; reads in flight: [due, data]
        busy, inflight = set(), []             # pairs whose row is not credited; rows being sent
        left, credits, dups = rows, {}, 0
        expect = {}                            # pair -> (header, data per chunk, drop)
        current, beat = None, 0                # the row leaving the feed, its next chunk
        cycle = 0
        while left or inflight or busy:
            cycle += 1
            where = f"seed {seed} cycle {cycle}"
            assert cycle < 60 * rows * C, f"{where}: hangs ({len(busy)} rows owe a credit)"
            # a new row on a free pair
            free = [p for p in pairs if p not in busy]
            if left and free and rng.random() < 0.3:
                s_, t_ = rng.choice(free)
                hdr = dict(sender=s_, ptag=t_, src_node=rng.randrange(cfg.nodes),
                           token=rng.randrange(1 << cfg.token_bits), slot=rng.randrange(cfg.topk))
                drop = int(rng.random() < 0.2)
                data = [rng.getrandbits(cfg.data_bits) for _ in range(C)]
                order = rng.sample(range(C), C)
                if rng.random() < 0.3:         # a chunk twice (before the row is whole)
                    order.insert(rng.randrange(1, C), order[0])
                    dups += 1
                busy.add((s_, t_))
                expect[(s_, t_)] = (hdr, data, drop)
                inflight.append([(s_, t_), order])
                left -= 1
            # the input: a chunk of one of the rows being sent
            word = None
            if inflight and rng.random() < 0.8:
                k = rng.randrange(len(inflight))
                pair, order = inflight[k]
                hdr, data, drop = expect[pair]
                word = pack_fields(RelayPorts(cfg).pstage, dict(hdr, chunk=order[0], data=data[order[0]], drop=drop))
            ctx.set(st.i.valid, word is not None)
            ctx.set(st.i.payload.as_value(), word or 0)
            for s, p in ((st.wr, 0.8), (fd.rd, 0.7), (fd.out, 0.7), (fd.pcredit, 0.6)):
                ctx.set(s.ready, rng.random() < p)
            # the staging's memory: writes, reads answered in order after 1-6 cycles
            due = answers and answers[0][0] <= cycle
            ctx.set(fd.rdata.valid, bool(due))
            ctx.set(fd.rdata.payload, answers[0][1] if due else 0)
            if ctx.get(st.wr.valid) and ctx.get(st.wr.ready):
                a, d = ctx.get(st.wr.payload.addr), ctx.get(st.wr.payload.data)
                slot, off = divmod(a - BASE, cfg.stride_bytes)
                pair, c = divmod(slot, span), off // cfg.chunk_bytes
                assert a >= BASE and off % cfg.chunk_bytes == 0 and pair in busy, f"{where}: a write at {a:#x}"
                assert not expect[pair][2], f"{where}: dropped row {pair} written"
                assert d == expect[pair][1][c], f"{where}: chunk {c} of {pair} written with wrong data"
                mem[a] = d
            if due and ctx.get(fd.rdata.ready):
                answers.pop(0)
            if ctx.get(fd.rd.valid) and ctx.get(fd.rd.ready):
                a = ctx.get(fd.rd.payload)
                assert a in mem, f"{where}: a read of {a:#x}, never written"
                answers.append([max(cycle + rng.randint(1, 6), answers[-1][0] if answers else 0), mem[a]])
            # the feed's rows out: whole, in order, back to back
            if ctx.get(fd.out.valid) and ctx.get(fd.out.ready):
                o = fd.out.payload
                got = dict(src_node=ctx.get(o.src_node), token=ctx.get(o.token), slot=ctx.get(o.slot))
                if current is None:
                    cands = [p for p in busy if p not in credits and not expect[p][2]
                             and {k: expect[p][0][k] for k in got} == got and p not in [r[0] for r in inflight]]
                    assert cands, f"{where}: a row {got} that is no whole good row"
                    current, beat = cands[0], 0
                hdr, data, _ = expect[current]
                assert {k: hdr[k] for k in got} == got, f"{where}: beat {beat} of {current} carries {got}"
                assert ctx.get(o.data) == data[beat], f"{where}: chunk {beat} of {current}: wrong data"
                beat += 1
                if beat == C:
                    credits[current] = "out"
                    current = None
                    seen["good"] += 1
            if ctx.get(fd.pcredit.valid) and ctx.get(fd.pcredit.ready):
                pc = (ctx.get(fd.pcredit.payload.sender), ctx.get(fd.pcredit.payload.ptag))
                assert pc in busy, f"{where}: a credit {pc} no row owes"
                assert expect[pc][2] or credits.get(pc) == "out", f"{where}: {pc} credited before its row left"
                assert pc not in [r[0] for r in inflight], f"{where}: {pc} credited before its chunks are in"
                seen["credited"] += 1
                seen["dropped"] += expect[pc][2]
                busy.discard(pc)
                credits.pop(pc, None)
            # the chunk taken
            if word is not None and ctx.get(st.i.ready):
                order.pop(0)
                if not order:
                    inflight.pop(k)
            await ctx.tick()
        for _ in range(10):
            await ctx.tick()
        assert ctx.get(fd.out.valid) == 0 and current is None, f"seed {seed}: a row left inside"
        seen["dups"] = ctx.get(st.drops)
        assert seen["dups"] == dups, f"seed {seed}: {seen['dups']} chunks dropped, {dups} sent twice"
        assert seen["good"] + seen["dropped"] == seen["credited"] == rows, f"seed {seed}: {seen}"

    sim = Simulator(side)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


@pytest.mark.parametrize("cfg", [R22, R33], ids=["2x2", "3x3"])
def test_partial_rows_reach_the_reduce_whole(cfg):
    seen = run_partials(cfg, 1)
    assert seen["good"] > 20 and seen["dropped"] > 3 and seen["dups"] > 3, seen


PLANTS = {
    # the feed credits a row as its first chunk leaves, not its last
    "credit-early": ("partial_feed", "self.out.valid & self.out.ready & xq.r_data[0]",
                     "self.out.valid & self.out.ready", "PartialFeed"),
    # the feed reads a dropped row back, as a good one
    "dropped-read": ("partial_feed", "with m.If(start & ~head.drop):", "with m.If(start):", "PartialFeed"),
    # the staging writes a dropped row's chunks
    "dropped-written": ("stage", "        return (~s3.drop,)", "        return ()", "PartialStage"),
    # the staging takes a chunk it holds already for a new one
    "duplicate-kept": ("stage", "s3_dup.eq((have & s1_coh).any())", "s3_dup.eq(0)", "PartialStage"),
}


@pytest.mark.plants
@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_is_caught(plant):
    module, old, new, cls = PLANTS[plant]
    broken = broken_class(f"moehub.rtl.relay.{module}", old, new, cls)
    kw = {"feed": broken} if cls == "PartialFeed" else {"stage": broken}
    with pytest.raises(AssertionError, match="seed 1"):
        run_partials(R22, 1, rows=30, **kw)
