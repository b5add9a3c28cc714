"""Protocol v2's paging RTL units against the reference model's rules, in the Amaranth
simulator: the page pool (paged mode) and the hub's page supply (several takes a cycle)."""
import random

import pytest
from amaranth.sim import Simulator

from moehub.spec.config import load_hub_config
from moehub.spec.formats import Reason
from moehub.rtl.layouts import page_takes
from moehub.rtl.paging.pool import PagePool
from moehub.rtl.paging.regions import PageSupply
from moehub.spec.model import HubModel

TINY = load_hub_config("tiny")


def _run(dut, bench, monitor=None):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    if monitor is not None:
        sim.add_testbench(monitor, background=True)
    sim.run()


@pytest.mark.parametrize("pages, seed", [(1, 0), (5, 1), (8, 2), (13, 3), (3, 4), (16, 5)])
def test_page_pool_hands_out_and_takes_back_pages_as_the_model(pages, seed):
    """Layers of takes (one per cycle at most, random gaps, until the pool runs dry) and,
    between them, returns as software writes them -- good ones, twice, never handed out,
    out of range: every page taken, every refusal (PAGE_BAD) and POOL_FREE equal the
    model's pool (``HubModel._take_page`` / ``return_page``), cycle by cycle."""
    cfg = TINY.replace(pool_pages=pages)
    pool = PagePool(cfg)
    model = HubModel(cfg)
    rng = random.Random(seed)

    bad = [0]

    async def monitor(ctx):
        async for _, _, pulse in ctx.tick().sample(pool.bad):
            bad[0] += pulse

    async def bench(ctx):
        assert ctx.get(pool.free) == pages          # (from reset on: found by the formal harness)
        for layer in range(10):
            for _ in range(rng.randrange(pages + 3)):                 # a layer's takes
                if rng.random() < 0.3:
                    await ctx.tick()
                avail = ctx.get(pool.avail)
                assert avail == (model.pages_free() > 0), (seed, layer)
                if not avail:
                    break
                assert ctx.get(pool.page) == model._take_page(), (seed, layer)
                ctx.set(pool.take, 1)
                await ctx.tick()
                ctx.set(pool.take, 0)
            await ctx.tick().repeat(2)
            assert ctx.get(pool.free) == model.pages_free(), (seed, layer)
            for _ in range(rng.randrange(pages + 2)):                 # returns between layers,
                p = rng.choice(sorted(model.in_use) + [rng.randrange(pages + 2), 0xFFFF]) \
                    if rng.random() < 0.8 else rng.randrange(pages)   # back to back
                model.return_page(p)
                ctx.set(pool.ret, 1)
                ctx.set(pool.ret_page, p)
                await ctx.tick()
            ctx.set(pool.ret, 0)
            await ctx.tick().repeat(5)                                # (through the stages)
            assert ctx.get(pool.free) == model.pages_free(), (seed, layer)
            assert bad[0] == model.drop_counts[Reason.PAGE_BAD], (seed, layer)
        assert bad[0] > 0, seed

    _run(pool, bench, monitor)


#: cycles from a PAGE_FREE write to the cycle whose takes can get the page (the return
#: check's stages, the ring's write, the registered order)
RETURN_CYCLES = 4


def _slow(*values):
    """A parametrization in the slow set only."""
    return pytest.param(*values, marks=pytest.mark.slow)


#: the fast set keeps one pool of each shape: a single page, small pools of the plain ring,
#: the banked ring at a pool that is no power of two (and a multicast arena's, one take a
#: cycle), one expert's 2-entry window; the
#: other sizes and the banked one-expert pools (10-20 s each on the loaded 2-core machine)
#: are the slow set's
@pytest.mark.parametrize("pages, seed", [(1, 0), _slow(3, 1), (6, 2), _slow(8, 3), (13, 4), _slow(16, 5),
                                         _slow(7, 6), _slow(11, 7),
                                         # (the banked ring, rtl/paging/ring.py: a pool of 32 or more)
                                         _slow(32, 8), (37, 9), _slow(64, 10),
                                         # (one expert of 4-row tiles on 4 lanes: 1 take a
                                         # cycle, a 2-entry window, banked from 32 pages)
                                         (6, "one-11"), _slow(37, "one-12"), _slow(64, "one-13"),
                                         # (a multicast arena's supply: 1 take a cycle, banked)
                                         (40, "mc-14"), _slow(513, "mc-15")])
def test_page_supply_hands_out_several_pages_a_cycle_as_the_model(pages, seed):
    """Up to ``lanes`` takes a cycle, with returns of pages in use (and out of range) in the
    same cycles: the i-th take of a cycle gets the model's next page, ``avail`` says how
    many the model has, cycle by cycle. (The hub returns pages between layers; the order's
    shift with a return landing among the takes is checked here.) Phases of 50 cycles:
    mixed, returns with few takes (the ring fills), then every page the pool has, ``lanes``
    a cycle, from a full ring (the banked ring's window at its widest)."""
    cfg = TINY.replace(pool_pages=pages)
    if isinstance(seed, str):
        kind, seed = seed.split("-")[0], int(seed.split("-")[1])
        cfg = (cfg.replace(experts=1, min_tile_rows=4, tile_rows=4) if kind == "one" else
               load_hub_config("tests/data/tiny-multicast-paged.yaml").replace(pool_pages=pages))
    L = page_takes(cfg)                   # (the takes a cycle the supply serves)
    sup, model, rng = PageSupply(cfg), HubModel(cfg), random.Random(seed)
    returned = [0]

    async def bench(ctx):
        due, pending, fresh = {}, set(), {}       # cycle -> pages whose return lands then
        for c in range(600):
            for p in due.pop(c, []):
                model.return_page(p)
                pending.discard(p)
            free = model.pages_free()
            assert ctx.get(sup.avail) == sum(1 << i for i in range(L) if free > i), (seed, c)
            phase = c // 50 % 3                   # mixed, fill the ring, drain it
            k = (min(free, L) if phase == 2 else rng.randrange(min(free, L) + 1)) \
                if rng.random() < (0.8, 0.05, 1)[phase] else 0
            took = [model._take_page() for _ in range(k)]
            assert [ctx.get(sup.page[i]) for i in range(k)] == took, (seed, c)
            ctx.set(sup.take, 1 << k)
            fresh[c] = set(took)      # (the return check reads in_use two cycles after a take)
            choices = sorted(model.in_use - pending - fresh.get(c - 1, set()) - fresh[c])
            ret = rng.random() < (0.3, 0.9, 0.3)[phase] and bool(choices)
            p = (rng.choice(choices) if rng.random() < 0.9 else pages + rng.randrange(3)) if ret else 0
            ctx.set(sup.ret, ret)
            ctx.set(sup.ret_page, p)
            if ret:
                due.setdefault(c + RETURN_CYCLES, []).append(p)
                pending.add(p)
                returned[0] += p < pages
            await ctx.tick()

    _run(sup, bench)
    assert returned[0] > 0 or pages == 1, seed


def test_page_pool_and_expert_counts_need_their_feature():
    from moehub.rtl.counts.expert_totals import ExpertCounts
    for unit, key in ((PagePool, "pool_pages"), (ExpertCounts, "count_packets")):
        with pytest.raises(ValueError, match=key):
            unit(TINY)


def _bits(v: int, n: int) -> list:
    return [bool(v >> i & 1) for i in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_expert_counts_follow_the_model(seed):
    """A random layer on the reference model (count packets, some repeated or wrong, rows
    to random experts, some past their counts) and its events on the unit: after each
    event has passed the unit's stages its ``met``/``short`` equal the model's, its pulses
    add up to the model's COUNT_DUPLICATE / COUNT_MISMATCH events, and the experts it hands
    over as final (one a cycle) are the model's final experts."""
    from moehub.rtl.counts.expert_totals import ExpertCounts
    from moehub.spec.model import Packet
    from moehub.spec.csr_map import CTRL_START
    cfg = TINY.replace(count_packets=True)
    E, S, C = cfg.experts, cfg.sources, cfg.chunks_per_row
    unit = ExpertCounts(cfg)
    model = HubModel(cfg)
    for x in range(E):
        model.write("REGION_CAP", cfg.max_rows_per_expert, x)
    model.write("TILE_ROWS_LOG2", 1)
    model.write("CTRL", CTRL_START)
    rng = random.Random(seed)
    plan = {(s, x): rng.randrange(4) for s in range(S) for x in range(E)}
    events = [("cnt", s, x, n + (rng.random() < 0.1) * rng.choice([-1, 1])) for (s, x), n in plan.items()]
    events += [("cnt", s, x, 1) for s, x in rng.sample(sorted(plan), 3)]            # repeats
    events += [("row", s, x, 0) for (s, x), n in plan.items() for _ in range(n + (rng.random() < 0.1))]
    ordered = events + [("close", 0, 0, 0)] * sum(e[0] == "row" for e in events)
    rng.shuffle(ordered)          # (whichever count of a pair comes second is the repeat)
    handed, open_rows = [], []

    async def close(ctx):
        s, t, x, alloc = open_rows.pop(rng.randrange(len(open_rows)))
        for k in range(1, C):
            model.packet(Packet(src=s, tag=t, expert=x, chunk=k))
        if alloc:
            ctx.set(unit.done_valid, 1)
            ctx.set(unit.done_expert, x)
        await ctx.tick()
        ctx.set(unit.done_valid, 0)

    async def bench(ctx):
        ctx.set(unit.final_ready, 1)
        for kind, s, x, n in ordered:
            if kind == "cnt":
                model.packet(Packet.counts(s, x, max(n, 0)))
                ctx.set(unit.cnt_valid, 1)
                ctx.set(unit.cnt_src, s)
                ctx.set(unit.cnt_expert, x)
                ctx.set(unit.cnt_count, max(n, 0))
                await ctx.tick()
                ctx.set(unit.cnt_valid, 0)
            elif kind == "row":                          # a row opens; it completes later
                busy = {t for s2, t, _, _ in open_rows if s2 == s}
                if len(busy) == cfg.tags_per_source:
                    await close(ctx)
                    busy = {t for s2, t, _, _ in open_rows if s2 == s}
                tag = min(set(range(cfg.tags_per_source)) - busy)
                met = _bits(ctx.get(unit.met), E)[x]
                fx = model.packet(Packet(src=s, tag=tag, expert=x, chunk=0))
                assert met == (fx.drop == Reason.COUNT_MISMATCH), (seed, s, x)
                open_rows.append((s, tag, x, fx.drop is None))
                for k in range(E):
                    ctx.set(unit.rows[k], model.rows[k])
                await ctx.tick()
            elif open_rows:
                await close(ctx)
            await ctx.tick().repeat(E + 4)             # (through the unit's stages)
            assert pulses["dup"] == model.drop_counts[Reason.COUNT_DUPLICATE], seed
            assert pulses["over"] == model.drop_counts[Reason.COUNT_MISMATCH] - dropped_rows(), seed
            assert _bits(ctx.get(unit.final), E) == model.final, seed
            assert _bits(ctx.get(unit.met), E) == [model._counts_met(k) for k in range(E)], seed
            short = [model.count_sources[k] == S and model.rows[k] < model.expected[k] for k in range(E)]
            assert _bits(ctx.get(unit.short), E) == short, seed
        while open_rows:
            await close(ctx)
        await ctx.tick().repeat(E + 4)
        assert _bits(ctx.get(unit.final), E) == model.final, seed
        assert sorted(handed) == [k for k in range(E) if model.final[k]] and len(set(handed)) == len(handed)
        assert any(model.final), seed

    pulses = {"dup": 0, "over": 0}

    def dropped_rows():
        """COUNT_MISMATCH of rows refused (the allocator's, not this unit's pulse)."""
        return sum(1 for r, _ in model.drops if r == Reason.COUNT_MISMATCH)

    async def monitor(ctx):
        async for _, _, valid, x, dup, over in ctx.tick().sample(
                unit.final_valid, unit.final_expert, unit.dup, unit.over):
            if valid:
                handed.append(x)
            pulses["dup"] += dup
            pulses["over"] += over

    _run(unit, bench, monitor)


def test_expert_counts_layer_start_raises_no_mismatch():
    """``over`` (COUNT_MISMATCH) pulses only for an expert's last count below the rows it
    already has: once when every source announced 0 rows of expert 0 while it holds 3,
    never for a layer start (``clear``), whatever rows the allocator still shows in the
    cycles after (its counters clear on their own)."""
    from moehub.rtl.counts.expert_totals import ExpertCounts
    cfg = TINY.replace(count_packets=True)
    E, S = cfg.experts, cfg.sources
    unit = ExpertCounts(cfg)
    pulses = []

    async def announce(ctx, s, x):
        ctx.set(unit.cnt_valid, 1)
        ctx.set(unit.cnt_src, s)
        ctx.set(unit.cnt_expert, x)
        ctx.set(unit.cnt_count, 0)
        await ctx.tick()
        ctx.set(unit.cnt_valid, 0)

    async def bench(ctx):
        for x in range(E):
            ctx.set(unit.rows[x], 3)
        for s in range(S):
            await announce(ctx, s, 0)
        await ctx.tick().repeat(8)
        assert sum(pulses) == 1, "a last count below the rows held: one COUNT_MISMATCH"
        ctx.set(unit.clear, 1)
        await ctx.tick()
        ctx.set(unit.clear, 0)
        await ctx.tick().repeat(8)
        assert sum(pulses) == 1, "a layer start raised COUNT_MISMATCH"

    async def monitor(ctx):
        async for _, _, over in ctx.tick().sample(unit.over):
            pulses.append(over)

    _run(unit, bench, monitor)


@pytest.mark.parametrize("config", ["tiny", "deepseek-v3-8gpu", "nvl72"])
def test_count_totals_are_as_wide_as_the_largest_total(config):
    """An expert's announced total (the count gate's ``dtot``, the final counts' and the
    stand-alone unit's registers) is exactly as wide as every source announcing its
    largest count: narrower would wrap, wider is flip-flops and adder bits for nothing."""
    from amaranth.hdl import Shape
    from moehub.rtl.counts.expert_totals import ExpertCounts
    from moehub.rtl.counts.gate import CountGate, total_bits
    cfg = load_hub_config(config).replace(count_packets=True)
    largest = cfg.sources * ((1 << cfg.count_bits) - 1)
    tb = total_bits(cfg)
    assert 1 << (tb - 1) <= largest < 1 << tb, (config, tb, largest)
    gate, unit = CountGate(cfg), ExpertCounts(cfg)
    gate._MustUse__silence = unit._MustUse__silence = True                    # (built, not elaborated)
    assert Shape.cast(gate.dtot[0].shape()).width == tb
    assert unit.total_bits() == tb


def _final_stream(rng, E, S):
    """A layer's events in the tracker's order: per expert, one count event per source and
    rows (about the counts' sum, sometimes one more or fewer), each a metadata event and
    later its completion; interleaved at random, many back to back on one expert."""
    per = []
    for x in range(E):
        counts = [rng.randrange(4) for _ in range(S)]
        rows = max(0, sum(counts) + rng.choice([0, 0, 0, -1, 1]))
        per.append([("cnt", c) for c in counts] + [("meta", 0)] * rows + [("cpl", 0)] * rows)
    stream, opened = [], [0] * E
    left = [list(p) for p in per]
    for p in left:
        rng.shuffle(p)
    while any(left):
        x = rng.choice([k for k in range(E) if left[k]])
        for _ in range(rng.randrange(1, 4)):              # runs of one expert
            if not left[x]:
                break
            i = next(i for i, (k, _) in enumerate(left[x]) if k != "cpl" or opened[x] > 0)
            kind, c = left[x].pop(i)
            opened[x] += (kind == "meta") - (kind == "cpl")
            stream.append((kind, x, c))
    return stream


@pytest.mark.parametrize("seed", range(6))
def test_final_counts_fire_as_the_stream_says(seed):
    """FinalCounts against the rule it implements: an expert is final after the event that
    brings every source's count in and its completed rows to its rows and to their total --
    fired at that event, once, with its rows; checked for every event of random layers
    with runs of events on one expert (each event held a cycle and added from registers:
    the next event's checks see it; a count right behind a count stalls once)."""
    from moehub.rtl.counts.final import FinalCounts
    cfg = TINY.replace(count_packets=True)
    E, S = cfg.experts, cfg.sources
    dut = FinalCounts(cfg)
    rng = random.Random(seed)
    seen = {"fires": 0, "stalls": 0}

    async def bench(ctx):
        for layer in range(3):
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            st = [dict(rows=0, done=0, total=0, ann=0, final=False) for _ in range(E)]
            for kind, x, c in _final_stream(rng, E, S):
                ctx.set(dut.meta, kind == "meta")
                ctx.set(dut.cpl, kind == "cpl")
                ctx.set(dut.cnt, kind == "cnt")
                ctx.set(dut.expert, x)
                ctx.set(dut.count, c)
                while ctx.get(dut.stall):
                    assert kind == "cnt", (seed, kind, x)
                    seen["stalls"] += 1
                    await ctx.tick()
                e = st[x]
                e["rows"] += kind == "meta"
                e["done"] += kind == "cpl"
                e["total"] += c if kind == "cnt" else 0
                e["ann"] += kind == "cnt"
                fire = (not e["final"] and e["ann"] == S and e["done"] == e["rows"] == e["total"])
                e["final"] |= fire
                ctx.set(dut.pop, 1)
                assert ctx.get(dut.fire) == fire, (seed, layer, kind, x, e)
                if fire:
                    assert ctx.get(dut.rows_x) == e["rows"], (seed, x, e)
                    seen["fires"] += 1
                await ctx.tick()
                ctx.set(dut.pop, 0)
                if rng.random() < 0.3:
                    await ctx.tick()
            assert _bits(ctx.get(dut.final), E) == [e["final"] for e in st], seed

    _run(dut, bench)
    assert seen["fires"] > 0 and seen["stalls"] > 0, seen


def _comb_reach_from_memory_reads(unit, name):
    """The output port bits of ``unit`` that a memory read's data reaches through
    combinational cells only (Yosys ``proc; flatten``; a ``$dff`` or a memory ends a path),
    and the flop-input bits it reaches: (ports, flops)."""
    import json
    from amaranth.back import rtlil
    from amaranth._toolchain.yosys import find_yosys
    il = rtlil.convert(unit, name=name)
    script = "\n".join([f"read_rtlil <<rtlil\n{il}\nrtlil", "proc", "flatten", "opt_clean", "write_json"])
    out = find_yosys(lambda ver: ver >= (0, 40)).run(["-q", "-"], script, ignore_warnings=True)
    mod = json.loads(out[out.index("{"):])["modules"][name]
    seq = ("$dff", "$adff", "$sdff", "$dffe", "$adffe", "$sdffe", "$sdffce", "$aldff", "$dlatch")
    loads, start = {}, set()
    for cell in mod["cells"].values():
        dirs, conns = cell["port_directions"], cell["connections"]
        if cell["type"].startswith("$memrd"):
            start |= {b for b in conns["DATA"] if isinstance(b, int)}
        ins = [b for p, bits in conns.items() if dirs[p] == "input" for b in bits if isinstance(b, int)]
        outs = [b for p, bits in conns.items() if dirs[p] == "output" for b in bits if isinstance(b, int)]
        for b in ins:
            loads.setdefault(b, []).append((cell["type"], outs))
    ports = {b for p in mod["ports"].values() if p["direction"] == "output" for b in p["bits"]
             if isinstance(b, int)}
    seen, todo, flops = set(start), list(start), 0
    while todo:
        for typ, outs in loads.get(todo.pop(), []):
            if typ in seq or typ.startswith("$mem"):
                flops += 1
                continue
            for o in outs:
                if o not in seen:
                    seen.add(o)
                    todo.append(o)
    return seen & ports, flops


@pytest.mark.parametrize("config, pages", [("tests/data/tiny-multicast-paged.yaml", 40), ("tiny", 37)],
                         ids=["multicast-arena", "unicast"])
def test_banked_ring_read_data_reaches_only_flops(config, pages):
    """The banked ring's SRAM reads (``moehub.synth.sram``: 15 FO4 of the cycle) end at
    registers: no combinational path from a bank's read data to the ring's entries, so the
    takes' selects behind them (multicast: the arena's place select into the packet
    manager's row, 15 + 17.4 FO4 on ASAP7 at deepseek-v3-8gpu with every v2 feature when
    the read fed the window directly) start at flops."""
    from moehub.rtl.paging.ring import BankedRing, page_ring
    cfg = load_hub_config(config).replace(pool_pages=pages)
    ring = page_ring(cfg)
    assert isinstance(ring, BankedRing) and ring.banks() >= 3 * page_takes(cfg)
    ports, flops = _comb_reach_from_memory_reads(ring, "ring")
    assert not ports, f"{len(ports)} entry bits behind a bank's read data"
    assert flops, "no register behind the banks' read data"
