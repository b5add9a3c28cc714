"""Protocol v2's paged regions (``pool_pages`` > 0) on a unicast hub without count packets.

Every test ends as the rules' do, with ``tb.check()``: every data write (its address in
the tile's page), every control write in order (flags naming their page), every credit and
every status register (POOL_FREE, DROPS per reason, OVERFLOW) compared with the reference
model. The directed tests also assert what the protocol promises on their own: which page
each tile got, the drops by reason.

Software hands pages back between layers (PAGE_FREE): the hub queues a good return four
cycles after the write (the model at once), so the tests wait a few cycles before the
next START or a read of POOL_FREE.
"""
from __future__ import annotations

import random

import cocotb

from ...spec.formats import CtlKind, Reason
from ..traffic import LaneFeeder, random_rows
from .context import COUNTS, MULTICAST, PAGED
from .env import HubTB, pool_hub_tb, random_returns, return_pages
from .library import HubTests, hub_test


class PagedTests(HubTests):
    """See the module docstring."""

    requires = frozenset({PAGED})
    excludes = frozenset({MULTICAST, COUNTS})

    def __init__(self, ctx):
        super().__init__(ctx)
        #: (src, tag) pairs in turn: every source's tag 0, then every source's tag 1, ...
        self.PAIRS = [(s, t) for t in range(self.cfg.tags_per_source) for s in range(self.S)]

    async def make_paged_tb(self, dut, **configure) -> HubTB:
        """:meth:`make_tb` with the pool at POOL_BASE (not 0: a base left out shows)."""
        tb = await self.make_tb(dut, start=False, **configure)
        await tb.csr_write("POOL_BASE", self.POOL_BASE)
        await tb.start_layer()
        return tb

    def flags(self, tb: HubTB, model, since: int = 0) -> dict:
        """{(expert, tile): page} of every tile flag written from cycle ``since`` on (the last
        layer's)."""
        out = {}
        for cyc, w in tb.ctl_out:
            if w.kind != CtlKind.FLAG or cyc < since:
                continue
            x, t = divmod((w.addr - model.layer_flag_base) // 4, self.cfg.tiles_per_expert)
            f = tb.fmt.flag_word.unpack(w.data)
            assert f["epoch"] == model.layer_epoch & 0xFFFF
            out[(x, t)] = f["page"]
        return out

    def pages_written(self, tb: HubTB, model, since: int = 0) -> dict:
        """{page: rows-in-page written} of the data writes from cycle ``since`` on: a page is
        ``tile rows x stride`` bytes at ``POOL_BASE + page x that`` (model-independent)."""
        size = model.tile_rows * self.cfg.stride_bytes
        out = {}
        for lane in tb.wr_out:
            for cyc, a, _ in lane:
                if cyc >= since:
                    page, off = divmod(a - model.pool_base, size)
                    out.setdefault(page, set()).add(off // self.cfg.stride_bytes)
        return out

    def first_chunks_together(self, rows_tags):
        """The rows' first chunks in one cycle (lane order), then their other chunks, all
        lanes busy: the rows are opened together."""
        firsts, rest = [], []
        for r, (s, t) in rows_tags:
            c = self.chunks(r, tag=t)
            firsts.append(c[0])
            rest += c[1:]
        return [firsts] + self.wide(rest)

    # ---------------------------------------------------------------------------- directed
    @hub_test()
    async def test_pages_taken_at_tile_boundaries(self, dut):
        """Tiles of 2 rows. One cycle opens a row of each expert and a second of expert 0:
        three pages taken in that cycle, in lane order (0, 1, 2), the second row of expert 0
        in expert 0's page. Then one cycle opens four rows of expert 0 (rows 2-5): two tiles
        start in the cycle, pages 3 and 4. Every flag names its tile's page, the partial last
        tiles' (at the sweep) too."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        a, b, c, d = self.row(0, 0, token=1), self.row(1, 1, token=1), self.row(2, 2, token=1), self.row(0, 0, token=2)
        e, f, g, h = (self.row(s, 0, token=10 + s) for s in (0, 1, 2, 1))
        sched = self.first_chunks_together([(a, (0, 0)), (b, (1, 0)), (c, (2, 0)), (d, (0, 1))]) + self.IDLE
        sched += self.first_chunks_together([(e, (0, 2)), (f, (1, 1)), (g, (2, 1)), (h, (1, 2))])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 3, 1: 3, 2: 2})])
        model = await self.finish(tb)
        assert self.flags(tb, model) == {(0, 0): 0, (1, 0): 1, (2, 0): 2, (0, 1): 3, (0, 2): 4}
        # the data: two rows in expert 0's pages, one in experts 1's and 2's
        assert self.pages_written(tb, model) == {0: {0, 1}, 1: {0}, 2: {0}, 3: {0, 1}, 4: {0, 1}}
        assert await tb.csr_read("POOL_FREE") == self.P - 5
        assert await tb.csr_read("ROWS", 0) == 6

    @hub_test()
    async def test_pool_exhausted(self, dut):
        """Tiles of 2 rows, 6 pages: 11 rows of expert 0 take all six. Then one cycle opens
        a row of expert 0 (row 11: in its page, granted), a row of expert 1 (needs a page:
        OVERFLOW), and two more of expert 0 (row 12 needs a page: OVERFLOW, and the next one
        with it); in the very next cycle another row of expert 0 (refused: the pool is still
        empty -- the allocator's counters are corrected meanwhile). Each refused row's chunks
        are absorbed and its credit returns; nothing else changes; POOL_FREE reads 0."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        first = [self.row(*self.PAIRS[k % len(self.PAIRS)][:1], 0, token=k) for k in range(11)]
        sched = []
        for k, r in enumerate(first):
            sched += self.wide(self.chunks(r, tag=self.PAIRS[k % len(self.PAIRS)][1]))
        sched += self.IDLE
        last = [(self.row(0, 0, token=50), (0, 0)), (self.row(1, 1, token=50), (1, 0)),
                (self.row(2, 0, token=50), (2, 0)), (self.row(0, 0, token=51), (0, 1))]
        nxt = self.chunks(self.row(2, 0, token=51), tag=1)     # (opened in the very next cycle)
        together = self.first_chunks_together(last)
        sched += together[:1] + [[nxt[0]]] + together[1:] + self.wide(nxt[1:])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 6, 1: 5, 2: 5})])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 4
        assert await tb.csr_read("OVERFLOW", 0) == 3 and await tb.csr_read("OVERFLOW", 1) == 1
        assert await tb.csr_read("ROWS", 0) == 12 and await tb.csr_read("ROWS", 1) == 0
        assert await tb.csr_read("POOL_FREE") == 0
        assert len(tb.credit_out) == 16
        assert sorted(set(self.flags(tb, model).values())) == list(range(self.P))

    @hub_test()
    async def test_pool_exhausted_on_the_last_lane(self, dut):
        """As test_pool_exhausted, with an expert's first refused row on the last lane: after
        11 rows of expert 0 (all six pages), one cycle opens a row of expert 0 (row 11, in its
        page), rows of experts 1 and 2 (each needs a page: OVERFLOW) and, on the last lane,
        row 12 of expert 0 (OVERFLOW); the very next cycle's row of expert 0 is refused too --
        the gate holds it by the last lane's refusal register (the allocator's counters for
        expert 0 are a cycle wrong then, and the pool is still empty)."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        sched = []
        for k in range(11):
            s, tag = self.PAIRS[k % len(self.PAIRS)]
            sched += self.wide(self.chunks(self.row(s, 0, token=k), tag=tag))
        sched += self.IDLE
        last = [(self.row(0, 0, token=50), (0, 0)), (self.row(1, 1, token=50), (1, 0)),
                (self.row(2, 2, token=50), (2, 0)), (self.row(0, 0, token=51), (0, 1))]
        assert len(last) == self.L
        nxt = self.chunks(self.row(2, 0, token=51), tag=1)     # (opened in the very next cycle, lane 0)
        together = self.first_chunks_together(last)
        sched += together[:1] + [[nxt[0]]] + together[1:] + self.wide(nxt[1:])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 6, 1: 5, 2: 5})])
        await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 4
        assert [await tb.csr_read("OVERFLOW", x) for x in range(self.E)] == [2, 1, 1]
        assert await tb.csr_read("ROWS", 0) == 12
        assert await tb.csr_read("POOL_FREE") == 0

    @hub_test()
    async def test_page_taken_the_cycle_before(self, dut):
        """Tiles of 2 rows. One cycle opens two rows of expert 1 (one tile, page 0), a row of
        expert 2 (page 1) and, on the last lane, expert 0's first row (page 2); the very next
        cycle opens expert 0's second row on lane 0: it lands in page 2, which its expert's
        current page names only a cycle later -- the gate reads the cycle before's take for
        it (through T's registered expert match), and a third row of expert 0 in that cycle,
        on lane 1, starts tile 1 (page 3)."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        first = [(self.row(0, 1, token=1), (0, 0)), (self.row(1, 1, token=1), (1, 0)),
                 (self.row(2, 2, token=1), (2, 0)), (self.row(0, 0, token=2), (0, 1))]
        nxt = [(self.row(1, 0, token=3), (1, 1)), (self.row(2, 0, token=3), (2, 1))]
        together, after = self.first_chunks_together(first), self.first_chunks_together(nxt)
        sched = together[:1] + after[:1] + together[1:] + after[1:]
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 2, 1: 2, 2: 2})])
        model = await self.finish(tb)
        assert self.flags(tb, model) == {(1, 0): 0, (2, 0): 1, (0, 0): 2, (0, 1): 3}
        assert self.pages_written(tb, model) == {0: {0, 1}, 1: {0}, 2: {0, 1}, 3: {0}}

    @hub_test()
    async def test_page_free_and_reuse(self, dut):
        """Layer 1 (tiles of 4) takes pages 0-2. Software hands back 1 and 0 (good), 1 again
        (PAGE_BAD), 5 (never taken: PAGE_BAD) and 40 (no such page: PAGE_BAD): three
        PAGE_BAD, POOL_FREE 5. Layer 2 takes the returned pages first, oldest first (1, then
        0), then the next fresh one (3)."""
        tb = await self.make_paged_tb(dut, tile_rows=4)
        rows = [self.row(0, 0, token=k) for k in range(5)] + [self.row(1, 1, token=k) for k in range(2)]
        sched = []
        for k, r in enumerate(rows):
            sched += self.wide(self.chunks(r, tag=k % 3))
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 5, 1: 2})])
        model = await self.finish(tb)
        assert self.flags(tb, model) == {(0, 0): 0, (0, 1): 1, (1, 0): 2}
        await return_pages(tb, [1, 0, 1, 5, 40])
        assert await self.drops(tb, Reason.PAGE_BAD) == 3
        assert await tb.csr_read("ERRORS") >> Reason.PAGE_BAD & 1
        assert await tb.csr_read("POOL_FREE") == self.P - 1
        await tb.check()
        # layer 2
        since = tb.now()
        await tb.csr_write("EPOCH", 2)
        await tb.start_layer()
        rows2 = [self.row(2, 2, token=1), self.row(0, 0, token=9), self.row(1, 1, token=9)]
        sched = []
        for k, r in enumerate(rows2):
            sched += self.wide(self.chunks(r, tag=k))
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1, 1: 1, 2: 1})])
        model = await self.finish(tb)
        assert self.flags(tb, model, since) == {(2, 0): 1, (0, 0): 0, (1, 0): 3}
        assert await self.drops(tb, Reason.PAGE_BAD) == 0        # (DROPS restart with the layer)
        assert await tb.csr_read("POOL_FREE") == self.P - 4

    @hub_test()
    async def test_pages_across_layers_until_empty(self, dut):
        """Four layers of a row per expert (tiles of 4) with no page handed back: each takes
        fresh pages where the last stopped, until the pool is empty (the last two layers'
        rows are all OVERFLOW); then every page handed back in some order, and the next layer
        runs on the returned pages in that order."""
        tb = await self.make_paged_tb(dut, tile_rows=4)
        for layer in range(4):
            if layer:
                await tb.csr_write("EPOCH", layer + 1)
                await tb.start_layer()
            rows = [self.row(layer % self.S, x, token=16 * layer + x) for x in range(self.E)]
            sched = []
            for k, r in enumerate(rows):
                sched += self.wide(self.chunks(r, tag=k))
            await tb.send_schedule(sched + self.IDLE + [self.eos_all({layer % self.S: len(rows)})])
            await self.finish(tb)
        model = tb.replay()
        assert model.pages_free() == 0 and await tb.csr_read("POOL_FREE") == 0
        assert model.drop_counts[Reason.OVERFLOW] == 3       # the fourth layer: no page left
        order = [5, 2, 0, 4, 1, 3]
        await return_pages(tb, order)
        assert await tb.csr_read("POOL_FREE") == self.P
        since = tb.now()
        await tb.csr_write("EPOCH", 9)
        await tb.start_layer()
        rows = [self.row(0, x, token=100 + x) for x in range(self.E)]
        sched = self.first_chunks_together([(r, (0, k)) for k, r in enumerate(rows)])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: self.E})])
        model = await self.finish(tb)
        assert self.flags(tb, model, since) == {(x, 0): order[x] for x in range(self.E)}

    # ---------------------------------------------------------------------------- random
    def lane_feeder(self, rng: random.Random, rows, errors: bool) -> LaneFeeder:
        """The random tests' feeder of ``rows`` (idle lanes, early EOS, v1's bad input with
        ``errors``)."""
        return LaneFeeder(self.cfg, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                          errors=0.15 if errors else 0.0)

    async def random_paged_layers(self, dut, seed: int, *, layers: int, errors: bool, feeder=None):
        """``layers`` layers of random rows on one hub (random tile sizes; between layers a
        random part of the pages in use handed back in random order, sometimes a bad return)
        against the model (print the seed on failure: every assertion message carries it).
        ``feeder(rng, rows, errors)`` makes each layer's traffic (with count
        packets)."""
        feeder = feeder or self.lane_feeder
        rng = random.Random(seed)
        tb = await pool_hub_tb(dut, self.cfg, seed, rng)
        overflowed = 0
        for layer in range(layers):
            tile = rng.choice([2, 4, 8])
            await tb.csr_write("TILE_ROWS_LOG2", tile.bit_length() - 1)
            await tb.csr_write("EPOCH", (seed + layer) & 0xFFFF)
            await tb.start_layer()
            n_rows = rng.randrange(6, 4 * tile + 8)
            rows = random_rows(self.cfg, rng, n_rows, skew=rng.choice([0, 0.5]))
            tb.feed(feeder(rng, rows, errors), credit_delay=rng.randrange(0, 8))
            model = await tb.finish_layer(flush_if_open=errors)
            assert model.done, (f"layer {layer} did not finish (seed {seed}): inflight {model.inflight}, "
                                f"EOS seen {model.eos_seen}, rows {model.src_rows} of {model.src_eos}; open "
                                f"{[(i, e.state, bin(e.bitmap), e.dests) for i, e in enumerate(model.table) if e.state]}; "
                                f"{[(c, l, p) for c, l, p in tb.accepted if p.kind == 0][-12:]}")
            overflowed += model.drop_counts[Reason.OVERFLOW]
            await return_pages(tb, random_returns(model, rng, self.P))
        await tb.check()
        tb.stop()
        cocotb.log.info(f"seed {seed}: {overflowed} rows refused for want of room or a page")
        return overflowed

    @hub_test(ms=400, random=True)
    async def test_random_paged(self, dut):
        """Random rows over three layers, pages handed back between them; back-pressure, idle
        lanes, early EOS, credit delay; ``seeds`` consecutive seeds from ``seed``."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + k
            cocotb.log.info(f"test_random_paged seed {seed}")
            await self.random_paged_layers(dut, seed, layers=3, errors=False)

    @hub_test(ms=400, random=True)
    async def test_random_paged_with_errors(self, dut):
        """As test_random_paged, with v1's bad input mixed in (duplicate chunks, bad experts,
        ...)."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + 500 + k
            cocotb.log.info(f"test_random_paged_with_errors seed {seed}")
            await self.random_paged_layers(dut, seed, layers=3, errors=True)

