"""Protocol v2's multicast rows (``max_targets`` > 1) in a static arena, without count
packets.

A multicast row names up to ``max_targets`` experts of this GPU, each with its top-k slot.
The hub writes its data once, into the arena (``POOL_BASE`` + its place ``loc`` x the row
stride; ``POOL_CAP`` rows, latched at START), gives each target a dense row of that expert
(its metadata word there names ``loc``), counts a completion in every target's tile and
returns one credit.

Every test ends with ``tb.check()``: every data write, every control write in order,
every credit and every status register (ROWS, OVERFLOW, DROPS per reason) compared with
the reference model; a tile flag after its rows' data (through the model's arena places).
The directed tests also assert what the protocol promises on their own
(:meth:`MulticastTests.check_multicast`, independent of the model): each row's data once in
the arena, one metadata word per target naming its place, rows dense per expert, every
tile flagged, one credit per row.
"""
from __future__ import annotations

import random
from collections import defaultdict

import cocotb
from cocotb.triggers import RisingEdge

from ...spec.csr_map import CTRL_START
from ...spec.formats import CtlKind, Reason, data_addr, flag_addr
from ...spec.model import Packet
from ..traffic import LaneFeeder, Row
from .context import COUNTS, MULTICAST, PAGED
from .env import HubTB, pool_hub_tb
from .library import HubTests, hub_test


class MulticastTests(HubTests):
    """See the module docstring."""

    requires = frozenset({MULTICAST})
    excludes = frozenset({PAGED, COUNTS})

    async def make_mc_tb(self, dut, *, pool_cap=None, seed=None, bp=0.0, **configure) -> HubTB:
        """:meth:`make_tb` with the arena at POOL_BASE (not 0: a base left out shows) of
        ``pool_cap`` rows (default: all the pool addresses)."""
        tb = await self.make_tb(dut, seed=seed, bp=bp, start=False, **configure)
        await tb.csr_write("POOL_BASE", self.POOL_BASE)
        await tb.csr_write("POOL_CAP", self.cfg.pool_rows if pool_cap is None else pool_cap)
        await tb.start_layer()
        return tb

    def mrow(self, src, targets, token=0, seed=0) -> Row:
        """A multicast row: ``targets`` = ((expert, slot), ...) (experts first-listed first)."""
        rng = random.Random(hash((src, tuple(targets), token, seed)))
        return Row(src, targets[0][0] if targets else 0, token, 0,
                   [rng.getrandbits(self.cfg.data_bits) for _ in range(self.cfg.chunks_per_row)], tuple(targets))

    def chunks(self, r: Row, tag: int, order=None, targets=None):
        """The row's packets (``targets``: another target set for all of them)."""
        order = range(self.cfg.chunks_per_row) if order is None else order
        t = r.targets if targets is None else tuple(targets)
        return [Packet(src=r.src, tag=tag, targets=t, token=r.token, chunk=c, data=r.data[c]) for c in order]

    def rows_in_one_cycle(self, rows_tags):
        """Each row's first chunk together in one cycle (lane k: the k-th row), then the rest
        of every row, one packet per lane per cycle."""
        heads = [self.chunks(r, t, [0])[0] for r, t in rows_tags]
        rest = [p for r, t in rows_tags for p in self.chunks(r, t, range(1, self.cfg.chunks_per_row))]
        sched = [heads + [None] * (self.L - len(heads))]
        sched += self.spread(rest)
        return sched

    def spread(self, pkts) -> list:
        """Packets over the lanes, ``lanes`` a cycle, in order."""
        L = self.L
        return [list(pkts[k:k + L]) + [None] * (L - len(pkts[k:k + L])) for k in range(0, len(pkts), L)]

    def one_at_a_time(self, rows, tag=0) -> list:
        """Each row on its own, its chunks over the lanes (a row completes before the next
        starts: tags stay free, the rows are granted in list order)."""
        return [cyc for r in rows for cyc in self.spread(self.chunks(r, tag))]

    def eos_of(self, rows) -> list:
        """End-of-stream from every source, counting its rows among ``rows``."""
        n = {}
        for r in rows:
            n[r.src] = n.get(r.src, 0) + 1
        return self.eos_all(n)

    async def finish(self, tb: HubTB, rows=None):
        await tb.wait_idle()
        model = await tb.check()
        if rows is not None:
            self.check_multicast(tb, model, rows)
        return model

    def check_multicast(self, tb: HubTB, model, rows):
        """Model-independent checks of a layer whose ``rows`` were all granted: each row's data
        written once, in one place of the arena; one metadata word per target, in that expert's
        index array, naming the place; rows dense and unique per expert; every tile of every
        expert flagged once; one credit per row."""
        metas = [c for _, c in tb.ctl_out if c.kind == CtlKind.META]
        assert len(metas) == sum(len(r.targets) for r in rows), \
            f"{len(metas)} metadata words for {sum(len(r.targets) for r in rows)} targets"
        sent = {(r.src, r.token): r for r in rows}
        loc_of, per_expert, seen = {}, defaultdict(list), set()
        for c in metas:
            x, rr = divmod((c.addr - model.layer_meta_base) // self.cfg.meta_word_bytes, self.cfg.max_rows_per_expert)
            f = tb.fmt.meta_word.unpack(c.data)
            r = sent[(f["src"], f["token"])]
            assert (x, f["slot"]) in r.targets and (r.src, r.token, x) not in seen, \
                f"metadata of row {(r.src, r.token)} in expert {x} slot {f['slot']}: not one of {r.targets}"
            seen.add((r.src, r.token, x))
            assert loc_of.setdefault((r.src, r.token), f["loc"]) == f["loc"], "targets name different places"
            per_expert[x].append(rr)
        for x, rs in per_expert.items():
            assert sorted(rs) == list(range(len(rs))), f"expert {x} rows not dense/unique: {sorted(rs)}"
        assert len(set(loc_of.values())) == len(rows), "two rows share a place in the arena"
        writes = defaultdict(list)
        for lane in tb.wr_out:
            for _, a, d in lane:
                writes[a].append(d)
        want = {data_addr(self.cfg, model.pool_base, loc_of[(r.src, r.token)], c): d
                for r in rows for c, d in enumerate(r.data)}
        assert set(writes) == set(want), "data written outside the rows' places in the arena"
        for a, vals in writes.items():
            assert vals == [want[a]], f"address {a:#x} written {vals}, want {want[a]} (once)"
        tr = 1 << model.layer_tile_rows_log2
        want_flags = sorted(flag_addr(self.cfg, model.layer_flag_base, x, t)
                            for x, rs in per_expert.items() for t in range(-(-len(rs) // tr)))
        got_flags = sorted(c.addr for _, c in tb.ctl_out if c.kind == CtlKind.FLAG)
        assert got_flags == want_flags, "tiles not flagged exactly once"
        assert len(tb.credit_out) == len(rows), "one credit per row"

    # ---------------------------------------------------------------------------- directed
    @hub_test()
    async def test_row_to_every_expert_written_once(self, dut):
        """One row to all three experts: its 16 chunks written once, at the arena's first
        place; a metadata word per target (entry order), each naming place 0; one credit; each
        expert's partial tile flagged at the end of the layer."""
        tb = await self.make_mc_tb(dut)
        r = self.mrow(0, [(2, 0), (0, 1), (1, 2)], token=5)
        await tb.send_schedule([[p] + [None] * (self.L - 1) for p in self.chunks(r, 0)]
                               + self.IDLE + [self.eos_all({0: 1})])
        model = await self.finish(tb, [r])
        metas = [c for _, c in tb.ctl_out if c.kind == CtlKind.META]
        assert [(c.addr - model.layer_meta_base) // self.cfg.meta_word_bytes // self.cfg.max_rows_per_expert
                for c in metas] == [2, 0, 1], "metadata not in entry order"
        assert {tb.fmt.meta_word.unpack(c.data)["loc"] for c in metas} == {0}
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [1, 1, 1]
        assert sum(len(w) for w in tb.wr_out) == self.cfg.chunks_per_row

    @hub_test()
    async def test_rows_on_all_lanes_share_experts(self, dut):
        """Four rows open in one cycle, with overlapping target sets: each expert's rows are
        dense in lane order, the arena places 0..3 in lane order."""
        tb = await self.make_mc_tb(dut)
        sets = [[(0, 0), (1, 1)], [(1, 0)], [(2, 2), (0, 1), (1, 0)], [(0, 2)]]
        rows = [self.mrow(s, t, token=10 + k) for k, (s, t) in enumerate(zip([0, 1, 2, 0], sets))]
        tags = [0, 0, 0, 1]
        await tb.send_schedule(self.rows_in_one_cycle(list(zip(rows, tags))) + self.IDLE
                               + [self.eos_all({0: 2, 1: 1, 2: 1})])
        model = await self.finish(tb, rows)
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [3, 3, 1]
        got = {}
        for _, c in tb.ctl_out:
            if c.kind == CtlKind.META:
                f = tb.fmt.meta_word.unpack(c.data)
                x, rr = divmod((c.addr - model.layer_meta_base) // self.cfg.meta_word_bytes,
                               self.cfg.max_rows_per_expert)
                got[(f["src"], f["token"], x)] = (rr, f["loc"])
        assert got[(0, 10, 1)] == (0, 0) and got[(1, 11, 1)] == (1, 1) and got[(2, 12, 1)] == (2, 2)
        assert got[(0, 13, 0)] == (2, 3), "the last lane's row of expert 0 follows two rows ahead"

    @hub_test()
    async def test_full_region_refuses_the_whole_row(self, dut):
        """Experts 0 and 1 hold one row each, and expert 1's is taken: a row naming experts 0
        and 1 is refused (OVERFLOW, counted for both experts) and takes no row of expert 0.
        Two such rows and a row of expert 0 alone offered in one cycle: that row gets expert
        0's only row. (The admission takes them over three cycles, both regions being tight;
        without it, a verdict counting the refused rows ahead as requests refuses it.)"""
        tb = await self.make_mc_tb(dut, caps=[1, 1, self.cfg.max_rows_per_expert])
        a = self.mrow(0, [(1, 0)], token=1)
        b = self.mrow(1, [(0, 0), (1, 1)], token=2)        # refused: expert 1 is full
        c = self.mrow(2, [(0, 1)], token=3)                # expert 0's second row
        d = self.mrow(0, [(1, 1), (0, 0)], token=4)        # refused, same cycle as c's neighbours
        await tb.send_schedule([[p] + [None] * (self.L - 1) for p in self.chunks(a, 0)] + self.IDLE
                               + self.rows_in_one_cycle([(b, 0), (d, 1), (c, 0)]) + self.IDLE
                               + [self.eos_all({0: 2, 1: 1, 2: 1})])
        model = await self.finish(tb)
        assert model.drop_counts[Reason.OVERFLOW] == 2
        assert [await tb.csr_read("OVERFLOW", x) for x in range(self.E)] == [2, 2, 0]
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [1, 1, 0]
        assert len(tb.credit_out) == 4, "a refused row still returns its credit"
        written = sum(len(w) for w in tb.wr_out)
        assert written == 2 * self.cfg.chunks_per_row, "a refused row's data is not written"

    @hub_test()
    async def test_full_arena_refuses_rows(self, dut):
        """POOL_CAP = 2: the third and fourth rows are refused (OVERFLOW for every target),
        whatever room their experts have; the next layer's START takes a new POOL_CAP."""
        tb = await self.make_mc_tb(dut, pool_cap=2)
        rows = [self.mrow(k % self.S, [(k % self.E, 0), ((k + 1) % self.E, 1)], token=k) for k in range(4)]
        await tb.send_schedule(self.rows_in_one_cycle([(r, k // self.S) for k, r in enumerate(rows)]) + self.IDLE
                               + [self.eos_all({0: 2, 1: 1, 2: 1})])
        model = await self.finish(tb)
        assert model.drop_counts[Reason.OVERFLOW] == 2
        assert [await tb.csr_read("OVERFLOW", x) for x in range(self.E)] == [2, 1, 1]
        assert sum(len(w) for w in tb.wr_out) == 2 * self.cfg.chunks_per_row
        await tb.csr_write("POOL_CAP", self.cfg.pool_rows + 5)     # clamped to the pool's rows
        assert await tb.csr_read("POOL_CAP") == self.cfg.pool_rows
        await tb.csr_write("CTRL", CTRL_START)
        more = [self.mrow(0, [(0, 0)], token=50)]
        await tb.send_schedule([[p] + [None] * (self.L - 1) for p in self.chunks(more[0], 0)]
                               + self.IDLE + [self.eos_all({0: 1})])
        await self.finish(tb)

    @hub_test()
    async def test_bad_target_sets(self, dut):
        """An empty set, an expert out of range, one expert named twice: each row dropped as
        BAD_EXPERT (its later chunks absorbed, its credit returned), no row taken, no write."""
        tb = await self.make_mc_tb(dut)
        bad = [self.mrow(0, [], token=1), self.mrow(1, [(0, 0), (self.E, 1)], token=2),
               self.mrow(2, [(1, 0), (1, 1)], token=3)]
        good = self.mrow(0, [(2, 0), (1, 1)], token=4)
        sched = self.rows_in_one_cycle([(bad[0], 0), (bad[1], 0), (bad[2], 0), (good, 1)])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 2, 1: 1, 2: 1})])
        model = await self.finish(tb)
        assert model.drop_counts[Reason.BAD_EXPERT] == 3
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [0, 1, 1]
        assert len(tb.credit_out) == 4
        assert sum(len(w) for w in tb.wr_out) == self.cfg.chunks_per_row

    @hub_test()
    async def test_chunk_naming_another_target_set(self, dut):
        """A later chunk naming other experts (one fewer, or another order) is PROTOCOL;
        one naming the same experts with other slots is the row's (slots come from the first
        chunk only)."""
        tb = await self.make_mc_tb(dut)
        r = self.mrow(0, [(0, 0), (2, 1)], token=7)
        pk = self.chunks(r, 0)
        wrong = [self.chunks(r, 0, [3], targets=[(0, 0)])[0], self.chunks(r, 0, [4], targets=[(2, 1), (0, 0)])[0]]
        slots = self.chunks(r, 0, [5], targets=[(0, 2), (2, 2)])[0]
        sched = [[p, None, None, None] for p in pk[:5]] + [[w, None, None, None] for w in wrong] \
            + [[slots, None, None, None]] + [[p, None, None, None] for p in pk[6:]]
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1})])
        model = await self.finish(tb, [r])
        assert model.drop_counts[Reason.PROTOCOL] == 2 and model.drop_counts[Reason.DUPLICATE] == 0

    @hub_test()
    async def test_page_free_without_pages(self, dut):
        """A static arena hands out no page: every PAGE_FREE write is PAGE_BAD, counted, and
        changes nothing else; POOL_FREE reads 0."""
        tb = await self.make_mc_tb(dut)
        for p in (0, 3):
            await tb.csr_write("PAGE_FREE", p)
        for _ in range(6):
            await RisingEdge(tb.dut.clk)
        assert await tb.csr_read("DROPS", Reason.PAGE_BAD) == 2
        assert await tb.csr_read("POOL_FREE") == 0
        r = self.mrow(1, [(1, 0)], token=2)
        await tb.send_schedule([[p] + [None] * (self.L - 1) for p in self.chunks(r, 0)]
                               + self.IDLE + [self.eos_all({1: 1})])
        await self.finish(tb, [r])

    @hub_test()
    async def test_admission_when_room_is_tight(self, dut):
        """The input admission (MulticastAllocatorAdmitted's condition): with every region and
        the arena roomy, a group of four data packets is taken in one cycle; with expert 1's
        region below 5 x lanes rows, one data packet a cycle, in lane order (whatever experts
        they name), an end-of-stream beside it; with the arena below 5 x lanes rows, the same.
        The rows are granted as the model grants them in that order."""
        tb = await self.make_mc_tb(dut)
        rows = [self.mrow(s, [(s, 0)], token=30 + s) for s in range(self.S)] + [self.mrow(0, [(1, 1)], token=33)]
        heads = [self.chunks(r, t, [0])[0] for r, t in zip(rows, [0, 0, 0, 1])]
        await tb.send_schedule([heads])
        took = {j: c for c, j, p in tb.accepted if p in heads}
        assert len(set(took.values())) == 1, f"roomy: accepted at {took}"
        rest = [p for r, t in zip(rows, [0, 0, 0, 1]) for p in self.chunks(r, t, range(1, self.cfg.chunks_per_row))]
        await tb.send_schedule([rest[k:k + self.L] for k in range(0, len(rest), self.L)] + self.IDLE
                               + [self.eos_all({0: 2, 1: 1, 2: 1})])
        await self.finish(tb, rows)
        await tb.csr_write("REGION_CAP", 8, 1)
        await tb.start_layer()
        first = len(tb.accepted)
        rows = [self.mrow(0, [(0, 0)], token=1), self.mrow(1, [(1, 0)], token=2), self.mrow(2, [(0, 1)], token=3),
                self.mrow(0, [(1, 1), (2, 0)], token=4)]
        heads = [self.chunks(r, t, [0])[0] for r, t in zip(rows, [0, 0, 0, 1])]
        await tb.send_schedule([heads[:3] + [Packet.eos(2, 1)]] + [[heads[3]] + [None] * (self.L - 1)])
        took = {heads.index(p): c for c, _, p in tb.accepted[first:] if p in heads}
        eos_at = [c for c, _, p in tb.accepted[first:] if p.kind == 1]
        assert [took[j] - took[0] for j in range(4)] == [0, 1, 2, 3], f"tight: accepted at {took}"
        assert eos_at == [took[2]], f"the end-of-stream taken at {eos_at}, the data packet ahead of it at {took}"
        rest = [p for r, t in zip(rows, [0, 0, 0, 1]) for p in self.chunks(r, t, range(1, self.cfg.chunks_per_row))]
        await tb.send_schedule([rest[k:k + self.L] for k in range(0, len(rest), self.L)] + self.IDLE
                               + [[Packet.eos(0, 2), Packet.eos(1, 1)]])
        assert (await self.finish(tb)).rows == [2, 2, 1]
        await tb.csr_write("POOL_CAP", 5 * self.L - 1)
        await tb.start_layer()
        rows = [self.mrow(s, [(s, 0)], token=20 + s) for s in range(self.S)]
        first = len(tb.accepted)
        await tb.send_schedule(self.rows_in_one_cycle([(r, 0) for r in rows]) + self.IDLE
                               + [self.eos_all({s: 1 for s in range(self.S)})])
        model = await self.finish(tb)
        cycles = [c for c, _, p in tb.accepted[first:] if p.kind == 0]
        assert len(set(cycles)) == len(cycles), "two data packets taken in one cycle with the arena tight"
        assert model.rows == [1, 1, 1]

    # ---------------------------------------------------------------------------- random
    def random_mc_rows(self, rng: random.Random, n_rows: int, max_per_expert: int) -> list[Row]:
        """``n_rows`` rows from random sources, each to 1..max_targets distinct random experts
        in random order with random slots; at most ``max_per_expert`` rows name an expert."""
        per = [0] * self.E
        rows, token = [], [0] * self.S
        for _ in range(n_rows):
            s = rng.randrange(self.S)
            free = [x for x in range(self.E) if per[x] < max_per_expert]
            if not free:
                break
            xs = rng.sample(free, rng.randint(1, min(self.MT, len(free))))
            for x in xs:
                per[x] += 1
            tok = token[s] % (1 << self.cfg.token_bits)
            token[s] += 1
            rows.append(self.mrow(s, [(x, rng.randrange(self.cfg.topk)) for x in xs], token=tok, seed=rng.random()))
        return rows

    async def random_mc_layers(self, dut, seed: int, *, layers: int, errors: bool):
        """``layers`` layers of random multicast rows on one hub (random tile sizes, arena and
        region capacities that sometimes refuse rows; back-pressure, idle lanes, early EOS,
        credit delay; v1's bad input with ``errors``) against the model; the seed is in every
        assertion message."""
        rng = random.Random(seed)
        tb = await pool_hub_tb(dut, self.cfg, seed, rng)
        refused = 0
        for layer in range(layers):
            tile = rng.choice([2, 4, 8])
            n_rows = rng.randrange(8, 40)
            tight = rng.random() < 0.4
            await tb.csr_write("TILE_ROWS_LOG2", tile.bit_length() - 1)
            await tb.csr_write("EPOCH", (seed + layer) & 0xFFFF)
            await tb.csr_write("POOL_CAP", rng.randrange(n_rows // 2, n_rows) if tight else self.cfg.pool_rows)
            for x in range(self.E):
                await tb.csr_write("REGION_CAP", rng.randrange(1, 12) if tight else self.cfg.max_rows_per_expert, x)
            await tb.start_layer()
            rows = self.random_mc_rows(rng, n_rows, self.cfg.max_rows_per_expert)
            tb.feed(LaneFeeder(self.cfg, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                               errors=0.15 if errors else 0.0), credit_delay=rng.randrange(0, 8))
            model = await tb.finish_layer(flush_if_open=errors)
            assert model.done, f"layer {layer} did not finish (seed {seed})"
            if layer == 0 and not tight and not errors:
                self.check_multicast(tb, model, rows)
            refused += model.drop_counts[Reason.OVERFLOW]
        tb.stop()
        cocotb.log.info(f"seed {seed}: {refused} rows refused for want of room")

    @hub_test(ms=400, random=True)
    async def test_random_multicast(self, dut):
        """Random multicast rows over three layers; ``seeds`` consecutive seeds
        from ``seed``."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + k
            cocotb.log.info(f"test_random_multicast seed {seed}")
            await self.random_mc_layers(dut, seed, layers=3, errors=False)

    @hub_test(ms=400, random=True)
    async def test_random_multicast_with_errors(self, dut):
        """As test_random_multicast, with v1's bad input mixed in (duplicate chunks, chunks
        naming another target set, unknown sources, chunk indices out of range, second EOS)."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + 500 + k
            cocotb.log.info(f"test_random_multicast_with_errors seed {seed}")
            await self.random_mc_layers(dut, seed, layers=3, errors=True)

    # ---------------------------------------------------------------------------- performance
    def expected_rate(self, n_targets: int) -> float:
        """Packets a cycle the hub can take with rows of ``n_targets`` targets: every lane,
        unless the tracker -- one event a cycle, two per target of a row (its metadata, its
        completion) -- is slower: ``chunks_per_row / (2 n)`` packets a cycle."""
        return min(float(self.L), self.cfg.chunks_per_row / (2.0 * n_targets))

    @hub_test(ms=100)
    async def test_throughput_by_fan_out(self, dut):
        """Saturating traffic of rows to 1, 2 and 3 experts (all lanes busy, no back-pressure,
        every expert far from full, so the input admission takes every lane):
        the data packets a cycle are at least 0.95 of :func:`expected_rate` -- every lane while
        the fan-out's events fit the tracker's one a cycle, the tracker's rate beyond -- and
        each row's data is written once whatever its fan-out (the write ports carry one chunk
        per packet)."""
        for n in (1, 2, 3):
            tb = await self.make_mc_tb(dut, seed=self.seed + n, tile_rows=self.cfg.min_tile_rows)
            rng = random.Random(self.seed * 10 + n)
            rows = []
            for k in range(40):         # (40 rows an expert: never tight, at 64-row regions)
                xs = rng.sample(range(self.E), n)
                targets = [(x, rng.randrange(self.cfg.topk)) for x in xs]
                rows.append(self.mrow(k % self.S, targets, token=k // self.S, seed=k))
            tb.feed(LaneFeeder(self.cfg, rows, rng, idle=0.0, shuffle_chunks=False))
            await tb.wait_idle()
            model = await tb.check()
            self.check_multicast(tb, model, rows)
            data = [c for c, _, p in tb.accepted if p.kind == 0]
            cycles = data[-1] - data[0] + 1
            rate = len(data) / cycles
            want = self.expected_rate(n)
            dut._log.info(f"PERF config={self.cfg.name} targets={n} packets={len(data)} cycles={cycles} "
                          f"rate={rate:.3f}/cycle ({rate / self.L:.3f} x lanes; bound {want:.2f}) "
                          f"writes={sum(len(w) for w in tb.wr_out)} meta={n * len(rows)}")
            assert rate >= 0.95 * want, f"{n} targets: {rate:.3f} packets/cycle < 0.95 x {want:.2f} (seed {self.seed})"
            assert sum(len(w) for w in tb.wr_out) == len(rows) * self.cfg.chunks_per_row
            tb.stop()

