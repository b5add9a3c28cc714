"""Amaranth-simulator unit tests of the small RTL blocks (fast, no Icarus)."""
import random

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from moehub.spec.config import load_hub_config
from moehub.rtl.allocator import AddressAllocator
from moehub.rtl.event_queue import EventQueue


def _run(dut, *benches):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for b in benches:
        sim.add_testbench(b)
    sim.run()


@pytest.mark.parametrize("copies", [1, 2])
def test_event_queue_keeps_slot_order_and_never_overflows(copies):
    """(``copies``: the takes of each half of the entries read a copy of the valid and
    rank bits of their own, as a multicast hub's event queue's groups do)"""
    layout = data.StructLayout({"v": 8})
    q = EventQueue(layout, push_slots=4, depth=8, take_copies=copies)
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
                ctx.set(q.push.rank[i], 1 << sum(valid[:i]))      # (the producer's one-hots)
                if v:
                    n = next(counter) & 0xFF
                    ctx.set(q.push.data[i], {"v": n})
                    sent.append(n)
                    mask |= 1 << i
            ctx.set(q.push.count, 1 << sum(valid))
            ctx.set(q.push.valid, mask)
            if copies > 1:                                  # (the producer's copies, per group)
                for g in range(copies):
                    ctx.set(q.push.take_valid[g], mask)
                    for i in range(4):
                        ctx.set(q.push.take_rank[g][i], 1 << sum(valid[:i]))
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
    from amaranth import Cat, Module
    cfg = load_hub_config("tiny")
    a = AddressAllocator(cfg)
    top = Module()
    top.submodules.a = a
    # (the pairwise same-expert bits, as the packet manager decodes them a stage ahead)
    for j in range(cfg.lanes):
        top.d.comb += a.grant.same[j].eq(Cat(*((a.grant.expert[i] & a.grant.expert[j]).any() for i in range(j))))

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
        ctx.set(a.grant.expert[1], 0)            # (no request: no expert)
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

    _run(top, bench)


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


def test_add_narrow_matches_wrapping_addition():
    """add_narrow (the status counters' add: a narrow low add, the high bits +1 chosen by
    its carry) is ``wide + narrow`` modulo 2**len(wide): carries out of the low part, the
    high part's own carry chain (all ones) and the wrap of the whole counter."""
    from amaranth import Module, Signal
    from moehub.rtl.logic import add_narrow
    m = Module()
    wide, narrow = Signal(12), Signal(3)
    out = Signal(12)
    m.d.comb += out.eq(add_narrow(wide, narrow))
    rng = random.Random(11)
    edges = [0, 1, 7, 8, 12, 13, 15, 16, 0xF0, 0xFF, 0xFFC, 0xFFD, 0xFFF, 0x7FF, 0x7F8, 0x80F]
    cases = [(w, n) for w in edges for n in range(8)] + [(rng.randrange(4096), rng.randrange(8)) for _ in range(300)]

    async def bench(ctx):
        for w, n in cases:
            ctx.set(wide, w)
            ctx.set(narrow, n)
            assert ctx.get(out) == (w + n) % 4096, (w, n, ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_sum3_flags_match_addition():
    """sum3_flags: a + b + c + bias (a signed register, b a wider unsigned count, c a small
    unsigned offset, bias a negative or positive constant) equals the sum wrapped to the
    width, and its high bits above ``lo`` are all zero / all one exactly when it is in
    [0, 2**lo) / [-2**lo, 0) -- at the low part's carry edges, the width's edges and at
    random."""
    from amaranth import Module, Signal, signed
    from moehub.rtl.logic import sum3_flags
    rng = random.Random(7)
    for width, lo, cbits, bias in ((12, 4, 4, -8), (9, 3, 3, -5), (14, 5, 5, 3)):
        m = Module()
        a, b, c = Signal(signed(width)), Signal(width - 2), Signal(cbits)
        total, hz, ho = sum3_flags(m, a, b, c, bias, width, lo, "s")
        cs = range(1 << cbits)
        edge_a = (0, 1, (1 << lo) - 1, 1 << lo, -1, -(1 << lo), -(1 << lo) - 1, (1 << width - 1) - 1,
                  -(1 << width - 1))
        edge_b = (0, 1, (1 << lo) - 1, 1 << lo, (1 << width - 2) - 1)
        cases = [(va, vb, vc) for va in edge_a for vb in edge_b for vc in cs]
        cases += [(rng.randrange(-(1 << width - 1), 1 << width - 1), rng.randrange(1 << width - 2),
                   rng.choice(cs)) for _ in range(300)]

        async def bench(ctx):
            for va, vb, vc in cases:
                ctx.set(a, va)
                ctx.set(b, vb)
                ctx.set(c, vc)
                want = ((va + vb + vc + bias + (1 << width - 1)) % (1 << width)) - (1 << width - 1)
                assert ctx.get(total) == want % (1 << width), (width, va, vb, vc)
                assert ctx.get(hz) == (0 <= want < 1 << lo), (width, va, vb, vc)
                assert ctx.get(ho) == (-(1 << lo) <= want < 0), (width, va, vb, vc)

        sim = Simulator(m)
        sim.add_testbench(bench)
        sim.run()


def test_split_difference_with_b_choices_matches_subtraction():
    """``b`` as (one-hot select, value) pairs: the low difference is formed per candidate
    and chosen after; the result equals that of the chosen ``b``."""
    from amaranth import Module, Signal
    from moehub.rtl.logic import SplitDifference
    m = Module()
    a, bsel, sel = Signal(10), Signal(3), Signal(3)
    bs = [Signal(11, name=f"b{i}") for i in range(3)]
    ks = [0, 5, 31]
    diff = SplitDifference(m, a, [(bsel[i], bs[i]) for i in range(3)], 13, 5, "d", registered=False, seg_bits=3)
    out = diff.select_minus(m, [(sel[i], k) for i, k in enumerate(ks)], "d_out")
    rng = random.Random(7)
    cases = [(rng.randrange(1024), [rng.randrange(2048) for _ in range(3)]) for _ in range(150)]
    cases += [(0, [0, 2047, 31]), (31, [32, 0, 1]), (1023, [0, 1, 2])]

    async def bench(ctx):
        for va, vbs in cases:
            ctx.set(a, va)
            for b, vb in zip(bs, vbs):
                ctx.set(b, vb)
            for ib in range(3):
                ctx.set(bsel, 1 << ib)
                for i, k in enumerate(ks):
                    ctx.set(sel, 1 << i)
                    want = ((va - vbs[ib] - k + 4096) % 8192) - 4096
                    assert ctx.get(out) == want, (va, vbs[ib], k, ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_counts_and_newest_of():
    """popcount (a tree), count_onehot (by halves) and exactly() agree with counting, for
    every input up to 9 bits (exactly() switches to count_onehot above 6); newest_of picks
    the first group with a select set, in order."""
    from amaranth import Cat, Module, Signal
    from moehub.rtl.logic import count_onehot, exactly, newest_of, popcount
    for n in (1, 2, 3, 6, 7, 9):
        m = Module()
        bits = Signal(n)
        pc, oh, ex = Signal(8), Signal(n + 1), Signal(n + 1)
        m.d.comb += [pc.eq(popcount(list(bits))), oh.eq(Cat(*count_onehot(list(bits)))),
                     ex.eq(Cat(*(exactly(list(bits), k) for k in range(n + 1))))]

        async def bench(ctx, n=n, bits=bits, pc=pc, oh=oh, ex=ex):
            for v in range(1 << n):
                ctx.set(bits, v)
                c = bin(v).count("1")
                assert (ctx.get(pc), ctx.get(oh), ctx.get(ex)) == (c, 1 << c, 1 << c), (n, v)

        sim = Simulator(m)
        sim.add_testbench(bench)
        sim.run()
    m = Module()
    sel, out = Signal(4), Signal(8)
    vals = [11, 22, 33, 44]
    m.d.comb += out.eq(newest_of([[(sel[0], vals[0]), (sel[1], vals[1])], [(sel[2], vals[2])], [(sel[3], vals[3])]],
                                 99, 8))

    async def pick(ctx):
        for v in range(16):
            ctx.set(sel, v)
            want = (11 if v & 1 else 22) if v & 3 else 33 if v & 4 else 44 if v & 8 else 99
            if v & 3 == 3:
                continue                        # two selects in one group: not allowed
            assert ctx.get(out) == want, (v, ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(pick)
    sim.run()


def test_split_difference_checks_its_arguments():
    """The low part is 1 .. width - 1 bits (0 would leave no low part to subtract k from,
    width no high part); k must fit the low part. (Found by mutation testing: the bound
    check's ``0 <`` could become ``0 <=`` unnoticed.)"""
    import pytest
    from amaranth import Module, Signal
    from moehub.rtl.logic import SplitDifference
    m = Module()
    m._MustUse__silence = True          # (built only for its checks, never elaborated)
    a, b = Signal(10), Signal(10)
    for lo in (0, 12, 13):
        with pytest.raises(ValueError, match="lo_bits"):
            SplitDifference(m, a, b, 12, lo, f"bad{lo}")
    for lo in (1, 11):
        d = SplitDifference(m, a, b, 12, lo, f"ok{lo}")
        with pytest.raises(ValueError, match="k = "):
            d.select_minus(m, [(Signal(), 1 << lo)], f"ok{lo}_k")


def test_naf_terms_rebuild_the_constant():
    from moehub.rtl.logic import naf
    for c in [1, 2, 3, 7, 256, 8192, 14336, 12345, (1 << 20) - 1]:
        terms = naf(c)
        assert sum(s << k for s, k in terms) == c
        assert all(abs(k1 - k2) > 1 for (_, k1), (_, k2) in zip(terms, terms[1:]))   # non-adjacent
    assert naf(14336) == [(-1, 11), (1, 14)]


def test_tracker_metadata_flags_guard_and_sweep():
    """The tracker alone: after its clearing sweep, metadata words and tile flags in event
    order (a flag held by the ordering guard while a write of its group is in B), then
    the end-of-layer sweep: counts, the last partial tile's flag, the layer-done word."""
    from moehub.spec.formats import CtlKind
    from moehub.rtl.tracker import AvailabilityTracker
    cfg = load_hub_config("tiny")
    tr = AvailabilityTracker(cfg)
    rng = random.Random(5)
    EPOCH, FLAG, META, COUNT, TILE_LOG2, GROUP = 0x55, 0x1000, 0x20000, 0x3000, 2, 5
    rows = [6, 4, 0]
    tile_rows, tiles = 1 << TILE_LOG2, cfg.tiles_per_expert

    def flag(e, r):
        return (CtlKind.FLAG, FLAG + 4 * (e * tiles + (r >> TILE_LOG2)), EPOCH)

    events, want = [], []
    for e, n in enumerate(rows):
        for r in range(n):
            src, token, slot = r % cfg.sources, 7 * r + e, r & 1
            events.append({"complete": 0, "expert": e, "row": r, "src": src, "token": token,
                           "slot": slot, "group": 0})
            data = src | token << cfg.src_bits | slot << (cfg.src_bits + cfg.token_bits)
            want.append((CtlKind.META,
                         META + (e * cfg.max_rows_per_expert + r) * cfg.meta_word_bytes, data))
        for r in range(n):
            events.append({"complete": 1, "expert": e, "row": r, "src": 0, "token": 0,
                           "slot": 0, "group": GROUP})
            if r % tile_rows == tile_rows - 1:
                want.append(flag(e, r))
    for e, n in enumerate(rows):
        want.append((CtlKind.COUNT, COUNT + 4 * e, n))
        if n % tile_rows:
            want.append(flag(e, n - 1))
    want.append((CtlKind.DONE, COUNT + 4 * cfg.experts, EPOCH))
    got, busy = [], [0]

    async def driver(ctx):
        for name, v in (("epoch", EPOCH), ("tile_rows_log2", TILE_LOG2), ("flag_base", FLAG),
                        ("meta_base", META), ("count_base", COUNT)):
            ctx.set(getattr(tr.csr, name), v)
        for e, n in enumerate(rows):
            ctx.set(tr.rows[e], n)
        ctx.set(tr.layer.layer_start, 1)
        await ctx.tick()
        ctx.set(tr.layer.layer_start, 0)
        await ctx.tick().until(~tr.layer.clearing)
        for ev in events:
            guarded = ev["complete"] and (ev["expert"], ev["row"]) == (0, tile_rows - 1)
            if guarded:                    # a write of the flag's group still in B
                ctx.set(tr.guard.b_busy, 1)
                ctx.set(tr.guard.b_group, GROUP)
            ctx.set(tr.ev.payload, ev)
            ctx.set(tr.ev.valid, 1)
            await ctx.tick().until(tr.ev.ready)
            ctx.set(tr.ev.valid, 0)
            if guarded:
                await ctx.tick().repeat(20)
                ctx.set(tr.guard.b_busy, 0)
        await ctx.tick().until(tr.layer.idle)
        await ctx.tick().repeat(10)
        ctx.set(tr.layer.sweep_req, 1)
        await ctx.tick()
        ctx.set(tr.layer.sweep_req, 0)
        await ctx.tick().until(tr.layer.sweep_done)

    async def monitor(ctx):
        async for _, _, valid, ready, word, b_busy in ctx.tick().sample(
                tr.ctl.valid, tr.ctl.ready, tr.ctl.payload, tr.guard.b_busy):
            if valid and ready:
                got.append((CtlKind(word.kind), word.addr, word.data))
                assert not (word.kind == CtlKind.FLAG and busy[-1]), \
                    "a flag left while a write of its group was in B"
            busy.append(b_busy)
            ctx.set(tr.ctl.ready, rng.random() < 0.7)

    sim = Simulator(tr)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor, background=True)
    sim.run()
    assert got == want and sum(busy) >= 20


def test_eos_tracker_counts_openers_up_to_every_lane():
    """The EOS tracker alone: ``p_sel`` is the one-hot of the rows each source opened in
    the group before (0 .. lanes: every lane may open a row of one source, when it has
    the tags), ``opened`` the rows before that group; an EOS shows in ``seen`` a cycle
    later and in ``got_eos``/``count`` two; ``clear`` forgets all of it. (Found by mutation
    testing: a p_sel port one bit short, unreachable on tiny, whose 3 tags per source never
    fill 4 lanes.)"""
    from moehub.rtl.eos_tracker import EosTracker
    cfg = load_hub_config("mixtral-8gpu")
    L, S = cfg.lanes, 3                      # (the first three sources are watched)
    eos = EosTracker(cfg)
    rng = random.Random(7)

    async def bench(ctx):
        opened = [0] * S
        for cyc in range(40):
            n = [L if cyc % 5 == s else rng.randrange(L + 1) for s in range(S)]
            for s in range(S):
                ctx.set(eos.nxt_sel[s], 1 << n[s])
            await ctx.tick()
            for s in range(S):
                assert ctx.get(eos.p_sel[s]) == 1 << n[s], (cyc, s)
                assert ctx.get(eos.opened[s]) == opened[s], (cyc, s)
                opened[s] += n[s]
        for s in range(S):
            ctx.set(eos.nxt_sel[s], 1)
        ctx.set(eos.nxt_eos, 0b010)
        ctx.set(eos.nxt_lane[1], 1 << (L - 1))  # (source 1's EOS came on the last lane,
        ctx.set(eos.nxt_cnt[L - 1], 77)         # whose count register carries it)
        await ctx.tick()
        ctx.set(eos.nxt_eos, 0)
        ctx.set(eos.nxt_cnt[L - 1], 0)
        assert ctx.get(eos.seen) & 0b111 == 0b010 and ctx.get(eos.got_eos) & 0b111 == 0
        await ctx.tick()
        assert ctx.get(eos.got_eos) & 0b111 == 0b010 and ctx.get(eos.count[1]) == 77
        assert [ctx.get(eos.opened[s]) for s in range(S)] == opened
        ctx.set(eos.clear, 1)
        await ctx.tick()
        ctx.set(eos.clear, 0)
        assert ctx.get(eos.seen) == 0 and ctx.get(eos.got_eos) == 0 and ctx.get(eos.count[1]) == 0
        assert [ctx.get(eos.opened[s]) for s in range(S)] == [0] * S
        assert [ctx.get(eos.p_sel[s]) for s in range(S)] == [1] * S

    _run(eos, bench)


def test_at_most_consts_matches_the_compare():
    """at_most_consts (sign, high-bits zero, narrow compare): x <= c for every signed x of
    a few widths and every constant up to 2**w, against Python's compare."""
    from amaranth import Module, Signal, signed
    from moehub.rtl.logic import at_most_consts
    for width in (4, 7, 9):
        m = Module()
        x = Signal(signed(width), name="x")
        consts = list(range(0, 24))
        le = at_most_consts(m, x, consts, "x_le")
        outs = {c: Signal(name=f"le{c}") for c in consts}
        m.d.comb += [outs[c].eq(le[c]) for c in consts]

        async def bench(ctx):
            for v in range(-(1 << (width - 1)), 1 << (width - 1)):
                ctx.set(x, v)
                got = [ctx.get(outs[c]) for c in consts]
                assert got == [int(v <= c) for c in consts], (width, v, got)

        sim = Simulator(m)
        sim.add_testbench(bench)
        sim.run()


def test_packet_manager_features_chosen_by_config():
    """The packet manager's protocol-v2 strategies (rtl/pm_features) follow the config, and
    each adds its ports only where the feature is on: a v1 hub has none of them; paged and
    counted, the page gate's and the sweep's; multicast with counts, the arena's, the
    pre-rank's and the count refusal's copies."""
    from pathlib import Path
    from moehub.rtl.packet_manager import PacketManager
    from moehub.rtl.pm_features.counts import CountPackets, NoCounts
    from moehub.rtl.pm_features.rows import MulticastRows, PagedRows, RegionRows
    data_dir = Path(__file__).parent / "data"
    cases = [("tiny", RegionRows, NoCounts, set(), {"sweep_short", "alloc_page", "alloc_pre_mask", "pool_base"}),
             (data_dir / "tiny-paged-counts.yaml", PagedRows, CountPackets,
              {"sweep_short", "alloc_page", "tile_sh", "pool_base", "page_bad", "alloc_ahead"},
              {"alloc_pre_mask", "alloc_cnt_dead_q", "ev_held"}),
             (data_dir / "tiny-multicast-counts.yaml", MulticastRows, CountPackets,
              {"sweep_short", "alloc_pre_mask", "alloc_cnt_dead_q", "ev_held", "pool_base"},
              {"alloc_page", "tile_sh", "alloc_ahead"}),
             (data_dir / "tiny-multicast.yaml", MulticastRows, NoCounts, {"alloc_pre_mask", "ev_held"},
              {"sweep_short", "alloc_cnt_dead_q"})]
    for name, rows, counts, has, lacks in cases:
        pm = PacketManager(load_hub_config(str(name)))
        pm._MustUse__silence = True                 # (only its signature is read)
        assert type(pm.rows) is rows and type(pm.counts) is counts, name
        members = set(pm.signature.members.keys())
        assert has <= members and not (lacks & members), (name, has - members, lacks & members)


def test_eos_tracker_copies_of_p_sel_are_not_merged_by_synthesis():
    """Each source's ``p_sel`` has two copies (``n_sel_le``, ``p_sel_fin``) that exist only
    to drive their readers off ``p_sel``'s fan-out; Yosys merges flops whose next state and
    reset value agree (``opt_merge``), so after it every copy still has flops of its own,
    no bit shared with ``p_sel`` or with the other copy. (Found by mutation testing:
    ``p_sel_fin`` reset to ``p_sel``'s value is a duplicate that no simulation can tell
    apart -- nothing reads a copy before the first EOS -- and synthesis folds it away.)"""
    import json
    from amaranth.back import rtlil
    from amaranth._toolchain.yosys import find_yosys
    from moehub.rtl.eos_tracker import EosTracker
    cfg = load_hub_config("tiny")
    il = rtlil.convert(EosTracker(cfg), name="eos")
    script = "\n".join([f"read_rtlil <<rtlil\n{il}\nrtlil", "proc", "opt_clean",
                        "opt_merge -share_all", "opt_clean", "write_json"])
    out = find_yosys(lambda ver: ver >= (0, 40)).run(["-q", "-"], script, ignore_warnings=True)
    nets = json.loads(out[out.index("{"):])["modules"]["eos"]["netnames"]
    for s in range(cfg.sources):
        regs = {name: set(nets[f"{name}{s}"]["bits"]) for name in ("p_sel", "n_sel_le", "p_sel_fin")}
        for a, b in (("p_sel", "n_sel_le"), ("p_sel", "p_sel_fin"), ("n_sel_le", "p_sel_fin")):
            assert not regs[a] & regs[b], f"source {s}: {b} merged with {a}"
