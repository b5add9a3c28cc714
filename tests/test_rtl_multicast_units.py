"""Protocol v2's multicast units against the reference model, in the Amaranth
simulator: the target decode (A stage), the multicast allocators (T stage; the hub's,
:class:`MulticastAllocatorAdmitted`, under the input admission) and the event expander
(between the event queue and the tracker).

The bench drives :class:`~moehub.spec.model.HubModel` itself with the same rows: each
cycle's opening rows go to the model in lane order (one ``cycle``), and the RTL must agree
on every verdict (BAD_EXPERT from the decode, OVERFLOW from the allocator), on every
granted row's (expert, row) per target -- the model's ``Entry.rows``, hence its metadata
words' addresses -- and its place in the arena (``Entry.loc``), and, after each cycle, on
ROWS and the arena's fill.
"""
import random

import pytest
from amaranth import Cat, Elaboratable, Module, Mux, Signal
from amaranth.sim import Simulator

from moehub.spec.config import load_hub_config
from moehub.spec.csr_map import CTRL_START
from moehub.spec.formats import HubFormats, Reason
from moehub.rtl.multicast_allocator import (MulticastAllocator, MulticastAllocatorAdmitted,
                                            MulticastAllocatorByTargets, MulticastAllocatorSameCycle,
                                            MulticastPrerank)
from moehub.rtl.target_decode import TargetDecode
from moehub.spec.model import ALLOC, HubModel, Packet

TINY = load_hub_config("tiny")
#: 3 experts, a row names up to all 3 (as tests/test_model_v2.py); 4 lanes
MC3 = TINY.replace(topk=3, max_targets=3)
#: 5 experts (3-bit fields: 5, 6, 7 out of range), up to 4 targets, 4 lanes
MC4 = TINY.replace(experts=5, topk=4, max_targets=4)
#: 8 experts, 2 targets, 4 lanes (sparser sets: more rows per cycle fit)
MC2 = TINY.replace(experts=8, topk=2, max_targets=2)


class DecodeAlloc(Elaboratable):
    """A decode per lane in front of the allocator, as the packet manager chains them: the
    decode (A), the pre-rank registers (R -> T; with an allocator that takes its counts
    pre-ranked, else plain registers) and the allocator (T). A lane requests when it opens
    a row and its target set is good: ``opens`` and the registered ``bad``, a cycle after
    the targets."""

    def __init__(self, cfg, alloc_cls=MulticastAllocator, decode_cls=TargetDecode):
        self.cfg = cfg
        self.dec = [decode_cls(cfg) for _ in range(cfg.lanes)]
        self.alloc = alloc_cls(cfg)
        self.pre = MulticastPrerank(cfg)
        self.opens = Signal(cfg.lanes)
        self.bad = Signal(cfg.lanes)
        self.risky = Signal(cfg.lanes)      # (the admitted allocator: set with the targets)

    def elaborate(self, platform):
        m = Module()
        cfg, g, pre = self.cfg, self.alloc.grant, self.pre
        L, T = cfg.lanes, cfg.max_targets
        m.submodules.alloc, m.submodules.pre = self.alloc, pre
        for j, d in enumerate(self.dec):
            m.submodules[f"dec{j}"] = d
            m.d.comb += [pre.tv[j].eq(d.tv)] + [pre.oh[j][t].eq(d.oh[t]) for t in range(T)]
        m.d.sync += self.bad.eq(Cat(d.bad for d in self.dec))
        if hasattr(self.alloc, "risky"):
            m.d.sync += self.alloc.risky.eq(self.risky)
        m.d.comb += [g.tv[j].eq(pre.q_tv[j]) for j in range(L)]
        m.d.comb += [g.oh[j][t].eq(pre.q_oh[j][t]) for j in range(L) for t in range(T)]
        if self.alloc.PRERANK:
            m.d.comb += [self.alloc.pre_mask[j].eq(pre.q_mask[j]) for j in range(L)]
            m.d.comb += self.alloc.pre_counts.eq(pre.q_counts)
        if hasattr(self.alloc, "pre_oh_next"):
            m.d.comb += [self.alloc.pre_oh_next[j][t].eq(pre.oh[j][t]) for j in range(L) for t in range(T)]
        if hasattr(self.alloc, "sure_named"):       # (the packet manager's registers)
            m.d.comb += [self.alloc.sure_named[j].eq(Mux(g.req[j] & ~self.alloc.risky[j], pre.q_mask[j], 0))
                         for j in range(L)]
        m.d.comb += g.req.eq(self.opens & ~self.bad)
        return m


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _place(targets, T, rng):
    """A target tuple as the packet's entries: [(valid, expert)] * T, the targets in order
    at random positions (gaps between them), junk in the entries not valid."""
    pos = sorted(rng.sample(range(T), len(targets))) if rng else list(range(len(targets)))
    entries = [(0, rng.randrange(8) if rng else 0) for _ in range(T)]
    for p, (x, _) in zip(pos, targets):
        entries[p] = (1, x)
    return entries


class Bench:
    """The model and the unit side by side, a layer at a time."""

    def __init__(self, cfg, dut, ctx, caps, pool_cap):
        self.cfg, self.dut, self.ctx = cfg, dut, ctx
        self.cycle = 0
        self.log = []                  # per cycle, per lane: (ok, rows, loc) or None / "bad"
        self.start(caps, pool_cap)

    def start(self, caps, pool_cap):
        cfg, m = self.cfg, HubModel(self.cfg)
        for x, c in enumerate(caps):
            m.write("REGION_CAP", c, x)
        m.write("POOL_CAP", pool_cap)
        m.write("CTRL", CTRL_START)
        self.model = m
        return m

    async def clear(self):
        ctx, a = self.ctx, self.dut.alloc
        for x in range(self.cfg.experts):
            ctx.set(a.cap[x], self.model.layer_region_cap[x])
        ctx.set(a.pool_cap, self.model.layer_pool_cap)
        ctx.set(a.grant.clear, 1)
        await ctx.tick()
        ctx.set(a.grant.clear, 0)

    def _present(self, rows, rng):
        """Drive the decode with the rows' target sets (registered at the next tick, a
        stage ahead of their requests); returns per lane the entries that are valid."""
        ctx, dut, T = self.ctx, self.dut, self.cfg.max_targets
        entries = []
        for j, r in enumerate(rows):
            ent = _place(r or (), T, rng)
            entries.append([p for p, (v, _) in enumerate(ent) if v])
            for t, (v, x) in enumerate(ent):
                ctx.set(dut.dec[j].valid[t], v)
                ctx.set(dut.dec[j].expert[t], x)
        return entries

    async def stream(self, cycles, rng=None, admit=None):
        """Back-to-back cycles: ``cycles[c][j]`` is lane j's opening row in cycle c -- a
        tuple of (expert, slot), or None (no row) -- while the targets of cycle c + 1 enter
        the pre-rank registers; each cycle checked against the model, then its rows
        completed (in the model only, between two cycles: their table entries are free
        again). ``admit(rows)``: the rows of a cycle the input would take, applied as the
        cycle enters the pre-rank. Returns the outcomes per cycle."""
        ctx = self.ctx
        cycles = [admit(c) for c in cycles[:1]] + list(cycles[1:]) if admit else cycles
        entries = self._present(cycles[0], rng)
        await ctx.tick()
        outs = []
        for c, rows in enumerate(cycles):
            if admit and c + 1 < len(cycles):
                cycles[c + 1] = admit(cycles[c + 1])
            nxt = self._present(cycles[c + 1] if c + 1 < len(cycles) else [None] * len(rows), rng)
            outs.append(await self._cycle(rows, entries))
            entries = nxt
        return outs

    async def _cycle(self, rows, entries):
        cfg, ctx, dut, m = self.cfg, self.ctx, self.dut, self.model
        Tg = cfg.tags_per_source
        self.cycle += 1
        before = list(m.rows), m.pool_rows          # (ROWS is registered: read a cycle late)
        ctx.set(dut.opens, sum(1 << j for j, r in enumerate(rows) if r is not None))
        g = dut.alloc.grant
        ok = ctx.get(g.ok)
        out = []
        for j, r in enumerate(rows):
            if r is None:
                out.append(None)
                assert not ok >> j & 1
                continue
            src, tag = divmod(j, Tg)           # (distinct entries: lanes <= sources x tags)
            fx = m.packet(Packet(src=src, tag=tag, chunk=0, token=j, targets=tuple(r)), j, self.cycle)
            bad = ctx.get(dut.bad) >> j & 1
            assert bad == (fx.drop == Reason.BAD_EXPERT), (self.cycle, j, r)
            granted = bool(ok >> j & 1)
            assert granted == (fx.drop is None), (self.cycle, j, r, fx.drop)
            if not granted:
                out.append("bad" if bad else "overflow")
                continue
            e = m.table[src * Tg + tag]
            assert e.state == ALLOC
            got_rows = tuple(ctx.get(g.row[j][t]) for t in entries[j])
            got_loc = ctx.get(g.loc[j])
            assert got_rows == e.rows and got_loc == e.loc, (self.cycle, j, r, got_rows, e.rows, got_loc, e.loc)
            # (the model's META word names that row and loc)
            out.append((got_rows, got_loc))
        await ctx.tick()
        ctx.set(dut.opens, 0)
        for x in range(cfg.experts):
            assert ctx.get(dut.alloc.rows[x]) == before[0][x], (self.cycle, x)
        assert ctx.get(dut.alloc.pool_rows) == before[1], self.cycle
        self.cycle += 1                         # complete every row opened, in the model
        for j, r in enumerate(rows):
            if r is not None:
                src, tag = divmod(j, Tg)
                for c in range(1, cfg.chunks_per_row):
                    m.packet(Packet(src=src, tag=tag, chunk=c, token=j, targets=tuple(r)), 0, self.cycle)
        m.end()
        assert m.inflight == 0
        self.log.append(out)
        return out


def _random_set(cfg, rng):
    """A target set, mostly good: 1..max_targets distinct experts in range, skewed to low
    experts (contention); sometimes empty, out of range or with an expert twice."""
    T, E = cfg.max_targets, cfg.experts
    k = rng.random()
    n = rng.randint(1, T)
    xs = rng.sample(range(E), n) if rng.random() < 0.5 else \
        sorted(set(min(int(rng.expovariate(0.7)), E - 1) for _ in range(n)))
    if k < 0.04:
        xs = []
    elif k < 0.08:
        xs = xs[:T - 1] + [rng.randrange(E, 1 << cfg.expert_bits)]
    elif k < 0.12 and T > 1:
        xs = xs[:T - 1] + [xs[0]]
    return tuple((x, rng.randrange(cfg.topk)) for x in xs)


@pytest.mark.parametrize("cfg, seed, cls", [(MC3, 0, MulticastAllocator), (MC3, 1, MulticastAllocatorByTargets),
                                            (MC4, 2, MulticastAllocator), (MC4, 3, MulticastAllocatorSameCycle),
                                            (MC2, 4, MulticastAllocator)],
                         ids=["mc3-0", "mc3-1-by-targets", "mc4-2", "mc4-3-same-cycle", "mc2-4"])
def test_multicast_allocation_follows_the_model(cfg, seed, cls):
    """Random layers: back-to-back cycles of 0..lanes opening rows (target sets skewed to a
    few experts, some bad; now and then a cycle without any), with small random
    capacities and arenas so regions and the arena fill mid-cycle; the decode's BAD_EXPERT and the allocator's grants, rows per target, arena
    places and counters equal the model's, cycle by cycle (every form of the verdict)."""
    rng = random.Random(seed)
    dut = DecodeAlloc(cfg, cls)
    seen = {"ok": 0, "overflow": 0, "bad": 0, "mixed": 0}
    _random_layers(cfg, dut, rng, seen, layers=4, n_cycles=25, empty=0.1,
                   caps=[0, 1, 2, 3, 5, 8, 30], pool_caps=[2, 5, 9, 40, cfg.pool_rows])
    assert all(seen.values()), seen


def _random_layers(cfg, dut, rng, seen, *, layers, n_cycles, empty, caps, pool_caps, admit=None):
    """Run ``layers`` random layers (capacities drawn from ``caps`` / ``pool_caps``; per
    cycle each lane opening a random set with probability 0.85, a cycle of none with
    probability ``empty``) through :class:`Bench`, counting the outcomes in ``seen``
    ("ok", "overflow", "bad", and "mixed": a cycle with a grant and an overflow).
    ``admit(cfg, ctx, dut)``: the input admission to apply, if any."""
    L, E = cfg.lanes, cfg.experts

    async def bench(ctx):
        b = None
        for layer in range(layers):
            layer_caps, pool_cap = [rng.choice(caps) for _ in range(E)], rng.choice(pool_caps)
            if b is None:
                b = Bench(cfg, dut, ctx, layer_caps, pool_cap)
            else:
                b.start(layer_caps, pool_cap)
            await b.clear()
            cycles = [[_random_set(cfg, rng) if rng.random() < 0.85 else None for _ in range(L)]
                      if rng.random() >= empty else [None] * L for _ in range(n_cycles)]
            for out in await b.stream(cycles, rng, admit=admit(cfg, ctx, dut) if admit else None):
                kinds = {o if isinstance(o, str) else "ok" for o in out if o is not None}
                for k in kinds & set(seen):
                    seen[k] += 1
                seen["mixed"] += {"ok", "overflow"} <= kinds
    _run(dut, bench)


def _admission(cfg, ctx, dut):
    """The packet manager's input admission for a cycle's rows: while the allocator is
    tight, the lanes up to the second row, the one row risky; the rest held (None). The
    admitted risky lane goes to the allocator with the targets."""
    def admit(rows):
        tight = ctx.get(dut.alloc.tight)
        out, risky_seen, bits = [], 0, 0
        for j, r in enumerate(rows):
            risky = r is not None and tight
            risky_seen += risky
            out.append(r if risky_seen < 2 else None)
            bits |= (risky and risky_seen < 2) << j
        ctx.set(dut.risky, bits)
        return out
    return admit


@pytest.mark.parametrize("cfg, seed", [(MC3, 5), (MC2, 6), (MC4, 7)], ids=["mc3", "mc2", "mc4"])
def test_admitted_allocation_follows_the_model(cfg, seed):
    """The hub's allocator (verdicts by the requests ahead) under the input admission:
    random layers as above -- capacities from empty to roomy, so experts and the arena
    turn tight mid-layer -- each cycle's rows cut to the lanes the admission takes: every
    grant, row per target, arena place and counter equals the model's, cycle by cycle;
    grants and refusals both occur, and a refused row is alone in its cycle (the
    admission's promise: while rows can be refused, one a cycle)."""
    rng = random.Random(seed)
    dut = DecodeAlloc(cfg, MulticastAllocatorAdmitted)
    seen = {"ok": 0, "overflow": 0, "mixed": 0}
    _random_layers(cfg, dut, rng, seen, layers=6, n_cycles=30, empty=0.0,
                   caps=[0, 1, 2, 5, 8, 30, 60], pool_caps=[3, 9, 40, cfg.pool_rows],
                   admit=_admission)
    assert seen["ok"] and seen["overflow"] and not seen["mixed"], seen


def _directed(cfg, *layers):
    """Run layers of ``(caps, pool_cap, cycles)`` (cycles: lists of per-lane target sets,
    experts only, slot 0) one after another on one allocator, each from its START;
    returns each layer's per-cycle outcomes (checked against the model on the way)."""
    dut = DecodeAlloc(cfg)
    res = []

    async def bench(ctx):
        b = None
        for caps, pool_cap, cycles in layers:
            if b is None:
                b = Bench(cfg, dut, ctx, caps, pool_cap)
            else:
                b.start(caps, pool_cap)
            await b.clear()
            res.append(await b.stream([[None if r is None else tuple((x, 0) for x in r) for r in rows]
                                       for rows in cycles]))
    _run(dut, bench)
    return res


def test_all_lanes_naming_the_same_full_target_set():
    """Every lane names every expert (max_targets of them): each expert's rows 0..3 in lane
    order, the arena rows 0..3; the next cycle continues from 4."""
    [res] = _directed(MC3, ([30] * 3, 64, [[(0, 1, 2)] * 4, [(2, 1, 0)] * 4]))
    assert res[0] == [((j, j, j), j) for j in range(4)]
    assert res[1] == [((4 + j,) * 3, 4 + j) for j in range(4)]
    [res] = _directed(MC4, ([30] * 5, 64, [[(4, 3, 2, 1)] * 4]))      # max_targets = 4 on every lane
    assert res[0] == [((j,) * 4, j) for j in range(4)]


def test_a_full_target_refuses_the_whole_row_and_later_rows_rank_as_if_it_were_absent():
    """Expert 1 has no room: rows naming it are refused and take no row of their other
    targets, and no arena row; the rows after them rank as if they were absent."""
    r1, r2, r3 = _directed(
        MC3,
        ([8, 0, 8], 64, [[(0, 1), (0,), (1, 2), (2, 0)]]),
        # one row of room left in expert 0: lane 0 takes it, lane 1 (also 0) is refused,
        # lane 2 (expert 2 only) is granted with the next arena row, lane 3 (0 again) refused
        ([1, 4, 4], 64, [[(0, 2), (1, 0), (2,), (0,)]]),
        # the refused row ahead would have taken expert 0's last row: the next row gets it
        # (and expert 2's for lane 3)
        ([1, 0, 1], 64, [[(0, 1), (0,), (2, 1), (2,)]]))
    assert r1[0] == ["overflow", ((0,), 0), "overflow", ((0, 1), 1)]
    assert r2[0] == [((0, 0), 0), "overflow", ((1,), 1), "overflow"]
    assert r3[0] == ["overflow", ((0,), 0), "overflow", ((0,), 1)]


def test_the_arena_fills_mid_cycle():
    """Two arena rows: lanes 0 and 1 are granted, 2 and 3 refused (OVERFLOW of each target);
    a bad row ahead takes no arena row."""
    r1, r2 = _directed(MC3, ([30] * 3, 2, [[(0,), (1, 2), (0, 1), (2,)]]),
                       ([30] * 3, 2, [[(), (1, 1), (0, 3), (2,)], [(0,), (1,), (2,), None]]))
    assert r1[0] == [((0,), 0), ((0, 0), 1), "overflow", "overflow"]
    assert r2[0] == ["bad", "bad", "bad", ((0,), 0)]
    assert r2[1] == [((0,), 1), "overflow", "overflow", None]


def test_bad_target_sets_request_nothing():
    """Empty, an expert out of range, an expert twice: BAD_EXPERT, and the lanes after
    rank as if the bad rows were absent."""
    [res] = _directed(MC4, ([30] * 5, 64, [[(), (0, 5), (3, 1, 3), (7,)], [(0, 0), (1,), (6, 1), (1, 2)]]))
    assert res[0] == ["bad"] * 4
    assert res[1] == ["bad", ((0,), 0), "bad", ((1, 0), 1)]


def test_target_decode_follows_the_model_on_every_small_packet():
    """Every valid pattern and every expert value of a 3-entry, 2-bit packet (gaps between
    valid entries too): BAD_EXPERT is the model's ``_bad_dests`` of the valid entries in
    order, each valid entry's one-hot names its expert, ``mask`` is their union. A set of
    more than max_targets cannot be carried: the packet format packs the first ones only."""
    cfg = MC3
    T, E = cfg.max_targets, cfg.experts
    dec, model = TargetDecode(cfg), HubModel(cfg)
    fmt = HubFormats(cfg)
    too_many = Packet(targets=((0, 0), (1, 0), (2, 0), (0, 1))).fields()
    assert model._bad_dests(tuple(Packet(targets=((0, 0),) * 4).targets)) and \
        sum(fmt.packet.unpack(fmt.packet.pack(**too_many))[f"valid{i}"] for i in range(T)) == T

    async def bench(ctx):
        n = 0
        for valid in range(1 << T):
            for code in range(1 << (2 * T)):
                xs = [code >> (2 * i) & 3 for i in range(T)]
                for i in range(T):
                    ctx.set(dec.valid[i], valid >> i & 1)
                    ctx.set(dec.expert[i], xs[i])
                dests = tuple((xs[i], 0) for i in range(T) if valid >> i & 1)
                assert ctx.get(dec.bad) == model._bad_dests(dests), (valid, xs)
                assert ctx.get(dec.tv) == valid
                ohs = [ctx.get(dec.oh[i]) for i in range(T)]
                for i in range(T):
                    want = 1 << xs[i] if valid >> i & 1 and xs[i] < E else 0
                    assert ohs[i] == want, (valid, xs, i)
                mask = 0
                for o in ohs:
                    mask |= o
                assert ctx.get(dec.mask) == mask
                n += 1
        assert n == (1 << T) * (1 << 2 * T)

    sim = Simulator(dec)
    sim.add_testbench(bench)
    sim.run()


def test_units_need_multicast():
    for unit in (TargetDecode, MulticastAllocator):
        with pytest.raises(ValueError, match="max_targets"):
            unit(TINY)
    # (the comparison variants take neither v2 feature: they would never refuse for counts)
    for cls in (MulticastAllocator, MulticastAllocatorSameCycle, MulticastAllocatorByTargets):
        for key, val in (("pool_pages", 4), ("count_packets", True)):
            with pytest.raises(ValueError, match=key):
                cls(MC3.replace(**{key: val}))
    hubs = MulticastAllocatorAdmitted(MC3.replace(count_packets=True))     # (the hub's takes both)
    hubs._MustUse__silence = True                                            # (built, not elaborated)


def _formal_tools():
    from moehub.verif.formal import sby
    try:
        sby.check_tools()
        return None
    except sby.ToolMissing as e:
        return str(e)


@pytest.mark.plants
@pytest.mark.skipif(_formal_tools() is not None, reason="formal tools missing")
def test_broken_multicast_allocator_fails_its_proof(tmp_path, monkeypatch):
    """The formal harness (``moehub formal mcast-allocator``) is not vacuous: with the
    arena's room checked one row too late, a short BMC finds a grant beyond the arena."""
    import importlib
    import types
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.multicast_allocator import MulticastAllocatorHarness
    from moehub.verif.formal.sets import MCAST, run_harness
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    mod = importlib.import_module("moehub.rtl.multicast_allocator")
    src = open(mod.__file__).read()
    old, new = 'arena["gt"][len(ahead)]', 'arena["gt"][max(len(ahead) - 1, 0)]'
    assert src.count(old) == 1
    copy = types.ModuleType("moehub.rtl.multicast_allocator_mutant")
    copy.__package__ = mod.__package__
    exec(compile(src.replace(old, new), mod.__file__, "exec"), copy.__dict__)
    cfg = formal_config("tiny/alloc-small").replace(**MCAST)
    r = run_harness("broken-mcast", MulticastAllocatorHarness(cfg, copy.MulticastAllocator), "bmc", 4)
    assert r.status == "FAIL", r.status
    assert any("arena" in f for f in r.failed), r.failed


def _random_row_events(cfg, rng, n, targets=None):
    """``n`` row events as the packet manager pushes them: random target sets (gaps
    allowed, never empty; ``targets``: that many, entries 0..), random fields."""
    T = cfg.max_targets
    return [dict(complete=rng.randrange(2), tv=rng.randrange(1, 1 << T) if targets is None else (1 << targets) - 1,
                 loc=rng.randrange(cfg.pool_rows), src=rng.randrange(3), token=k % 256, group=rng.randrange(1 << 4),
                 expert=[rng.randrange(cfg.experts) for _ in range(T)],
                 row=[rng.randrange(cfg.max_rows_per_expert) for _ in range(T)],
                 slot=[rng.randrange(cfg.topk) for _ in range(T)]) for k in range(n)]


def _expand(events, p_valid, p_ready, rng, cfg=MC3):
    """Run events through an :class:`EventExpander` (the queue showing its head with
    probability ``p_valid`` a cycle, the tracker ready with ``p_ready``); returns what the
    tracker took (with its cycle) and the cycles the queue was popped. Checks on the way:
    ``i.ready`` does not depend on the tracker's ready in the same cycle, ``busy`` is
    exactly "a popped event has targets not yet taken", and (count packets) the expert's
    one-hot names the expert handed out."""
    from moehub.rtl.event_expander import EventExpander
    from moehub.rtl.layouts import HubLayouts
    lay, dut = HubLayouts(cfg), EventExpander(cfg)
    got, popped = [], []

    async def bench(ctx):
        k, cycle, out = 0, 0, 0
        while out < sum(bin(e["tv"]).count("1") for e in events):
            shown = k < len(events) and rng.random() < p_valid
            ctx.set(dut.i.valid, shown)
            if k < len(events):
                ctx.set(dut.i.payload, lay.event.const(events[k]))
            readies = []
            for r in (0, 1):
                ctx.set(dut.o.ready, r)
                await ctx.delay(1e-9)
                readies.append(ctx.get(dut.i.ready))
            assert readies[0] == readies[1], "the queue's pop waits for the tracker's ready"
            pending = sum(bin(e["tv"]).count("1") for e in events[:k]) - out
            assert ctx.get(dut.busy) == (pending > 0), (cycle, pending)
            ready = rng.random() < p_ready
            ctx.set(dut.o.ready, ready)
            await ctx.delay(1e-9)
            if ctx.get(dut.o.valid) and ready:
                o = ctx.get(dut.o.payload)
                got.append((o.complete, o.expert, o.row, o.slot, o.loc, o.src, o.token, o.group, cycle))
                out += 1
            if shown and ctx.get(dut.i.ready):
                popped.append(cycle)
                k += 1
            await ctx.tick()
            cycle += 1
            assert cycle < 20 * len(events) + 50, "the expander stalled"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got, popped


def test_event_expander_hands_out_each_target_once_in_order():
    """The event expander (between the event queue and the tracker): random row events
    (random target sets, gaps allowed) behind a queue that is sometimes
    empty, a tracker that is sometimes not ready: the tracker sees, per event, its valid
    targets in entry order -- each once, with its expert, row and slot, the event's loc,
    source, token, kind and group; the queue's pop never waits for the tracker's ready,
    and ``busy`` tells exactly whether an event is held (with count packets, so the
    expert's one-hot is built and checked). 300 events, seeded. With
    one-target events, a queue always showing one and a tracker always ready: one a cycle
    (no bubble)."""
    rng = random.Random(5)
    T = MC3.max_targets
    events = _random_row_events(MC3, rng, 300)
    got, _ = _expand(events, 0.8, 0.7, rng, MC3.replace(count_packets=True))   # (with the expert's one-hot)
    want = [(e["complete"], e["expert"][t], e["row"][t], e["slot"][t], e["loc"], e["src"], e["token"], e["group"])
            for e in events for t in range(T) if e["tv"] >> t & 1]
    assert [g[:-1] for g in got] == want
    got, popped = _expand(_random_row_events(MC3, rng, 50, targets=1), 1.0, 1.0, rng)
    # (popped in cycle k, held from k + 1, in the output register from k + 2)
    assert [g[-1] for g in got] == list(range(2, 52)) and popped == list(range(50)), (got[:3], popped[:3])


@pytest.mark.slow
def test_event_take_copies_are_not_merged_by_synthesis():
    """A multicast hub's packet manager registers B's event valid and rank bits once more
    for the second half of the event queue's entries (``take_copies``: an inverted copy),
    so that each register drives half the entries' takes: the fan-out over all of them
    was the deepest path of the multicast hubs on ASAP7. Yosys merges flops whose next
    state and reset value agree (``opt_merge``); after it the inverted copies still have
    flops of their own, no bit shared with the plain copies or with B's registers (lane
    0's rank bit among them: a constant loaded at reset, merged with every such flop).
    (Slow set: 16 s of Yosys on the packet manager.)"""
    import json
    from amaranth.back import rtlil
    from amaranth._toolchain.yosys import find_yosys
    from moehub.rtl.interfaces import take_copies
    from moehub.rtl.packet_manager import PacketManager
    cfg = load_hub_config("tests/data/tiny-multicast.yaml")
    assert take_copies(cfg) == 2 and take_copies(TINY) == 1
    il = rtlil.convert(PacketManager(cfg), name="pm")
    script = "\n".join([f"read_rtlil <<rtlil\n{il}\nrtlil", "proc", "opt_clean",
                        "opt_merge -share_all", "opt_clean", "write_json"])
    out = find_yosys(lambda ver: ver >= (0, 40)).run(["-q", "-"], script, ignore_warnings=True)
    nets = json.loads(out[out.index("{"):])["modules"]["pm"]["netnames"]
    b_regs = {bit for j in range(cfg.lanes) for bit in nets[f"b{j}"]["bits"]}
    for name in ["b_ev_valid_copy"] + [f"b_ev_rank{j}_copy" for j in range(1, cfg.lanes)]:
        plain, inverted = (set(nets[f"{name}{c}"]["bits"]) for c in (0, 1))
        assert not plain & inverted, f"{name}1 merged with {name}0"
        assert not inverted & b_regs, f"{name}1 merged with B's registers"
    assert not set(nets["b_ev_rank0_copy1"]["bits"]) & b_regs, "lane 0's rank copy merged with B's registers"
