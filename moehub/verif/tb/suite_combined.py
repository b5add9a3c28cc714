"""Protocol v2's features together: paged regions with count packets, multicast rows with
count packets, multicast rows in a paged arena, and all three.

Where two features meet the refusals meet: a row of an expert whose counts are met is
COUNT_MISMATCH (checked before OVERFLOW) and takes no page, no arena row, no place; a row
that starts a tile when the pool is empty is OVERFLOW. Each suite borrows the helpers of
the single-feature suites it extends; every test ends with ``tb.check()`` against the
reference model (every write, every control write in order, every credit and every status
register).
"""
from __future__ import annotations

import random
from collections import Counter

import cocotb

from ...spec.formats import CtlKind, Reason
from ..count_traffic import CountFeeder
from ..traffic import LaneFeeder
from .context import COUNTS, MULTICAST, PAGED
from .env import pool_hub_tb, random_returns, return_pages
from .library import hub_test
from .suite_counts import CountTests
from .suite_multicast import MulticastTests
from .suite_paged import PagedTests


async def _each_seed(suite, test: str, run, dut, **kwargs) -> None:
    """Await ``run(dut, seed, **kwargs)`` for ``suite.seeds`` consecutive seeds from
    ``suite.seed * 1000`` (``+ 500`` with ``errors=True``, so a test and its variant with
    errors never share a seed), logging each seed under the test's name: a failing run is
    reproduced from the log."""
    for k in range(suite.seeds):
        seed = suite.seed * 1000 + (500 if kwargs["errors"] else 0) + k
        cocotb.log.info(f"{test} seed {seed}")
        await run(dut, seed, **kwargs)

class PagedCountTests(PagedTests, CountTests):
    """Paged regions and count packets: a row past its count takes no page; a row that
    starts a tile when the pool is empty is OVERFLOW, and so is every later row of its
    expert in the cycle -- they see the rows held before it, not the requests ahead of
    them, also when a count packet between them completes the expert; in the cycle after,
    the hub still refuses the expert's rows (the pool is empty) and its counters and its
    count limit are a cycle late, which the verdicts of that cycle must not show. Tiles of
    2 rows and the 6-page pool of the config, so that 12 rows of one expert empty the pool."""

    requires = frozenset({PAGED, COUNTS})
    excludes = frozenset({MULTICAST})

    def fill(self, expert: int, n: int, token0: int = 0) -> list:
        """``n`` rows of ``expert``, one row at a time on all lanes, sources and tags in turn
        (each row completes before the next starts: the tags are free again)."""
        sched = []
        for k in range(n):
            s, t = self.PAIRS[k % len(self.PAIRS)]
            sched += self.wide(self.chunks(self.row(s, expert, token=token0 + k), tag=t))
        return sched

    def firsts_then_rest(self, group: list) -> list:
        """One cycle of ``group`` -- rows ``(row, (src, tag))`` and count packets, in lane
        order -- then the rows' other chunks, all lanes busy."""
        first, rest = [], []
        for item in group:
            if isinstance(item, tuple):
                r, (s, t) = item
                c = self.chunks(r, tag=t)
                first.append(c[0])
                rest += c[1:]
            else:
                first.append(item)
        return [first] + self.wide(rest)

    def in_turn(self, *scheds) -> list:
        """The first cycles of ``scheds`` in consecutive cycles, then the rest of each."""
        return [s[0] for s in scheds] + [c for s in scheds for c in s[1:]]

    def rows_of(self, expert: int, pairs, token0: int) -> list:
        """One cycle of rows of ``expert`` from the (src, tag) ``pairs``, then their chunks."""
        return self.firsts_then_rest([(self.row(s, expert, token=token0 + k), (s, t))
                                      for k, (s, t) in enumerate(pairs)])

    def eos_for(self, sched: list) -> list:
        """End-of-stream from every source, counting the rows ``sched`` opens (every row
        here sends its chunk 0 first)."""
        n = Counter(p.src for cyc in sched for p in cyc if p is not None and p.kind == 0 and p.chunk == 0)
        return self.eos_all(dict(n))

    async def next_layer(self, tb, epoch: int):
        """Every page handed back (return_pages), then the next layer."""
        await return_pages(tb, range(self.P))
        await tb.csr_write("EPOCH", epoch)
        await tb.start_layer()

    # ---------------------------------------------------------------------------- directed
    @hub_test()
    async def test_row_refused_for_counts_takes_no_page(self, dut):
        """Expert 1 announced 3 rows (1 + 2 + 0); its rows 0 and 1 fill its first tile (page
        0). One cycle: its row 2 (starts a tile: page 1), a row past its count (COUNT_MISMATCH),
        a row of expert 2 (page 2), expert 1 again (COUNT_MISMATCH); then a row of expert 1 on
        its own (COUNT_MISMATCH). Then, every count of expert 0 in at 0 rows, one cycle: a row
        of expert 0 (it would start a tile: refused for counts, it takes no page), rows 1 and 2
        of expert 2 (row 2 starts a tile: page 3, the next one, not 4). POOL_FREE 6 - 4;
        COUNT_MISMATCH 4, no OVERFLOW."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        sched = self.serial([self.cnt(0, 1, 1), self.cnt(1, 1, 2), self.cnt(2, 1, 0)], lanes=[3])
        sched += self.fill(1, 2) + self.IDLE
        sched += self.firsts_then_rest([(self.row(0, 1, token=20), (0, 0)), (self.row(1, 1, token=21), (1, 0)),
                                   (self.row(2, 2, token=22), (2, 0)), (self.row(1, 1, token=23), (1, 1))]) + self.IDLE
        sched += self.wide(self.chunks(self.row(2, 1, token=24), tag=1)) + self.IDLE
        sched += self.serial([self.cnt(0, 0, 0), self.cnt(1, 0, 0), self.cnt(2, 0, 0)], lanes=[1])
        sched += self.firsts_then_rest([(self.row(0, 0, token=30), (0, 1)), (self.row(1, 2, token=31), (1, 2)),
                                   (self.row(2, 2, token=32), (2, 2))])
        await tb.send_schedule(sched + self.IDLE + [self.eos_for(sched)])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 4
        assert await self.drops(tb, Reason.OVERFLOW) == 0
        assert await tb.csr_read("POOL_FREE") == self.P - 4
        assert self.flags(tb, model) == {(1, 0): 0, (1, 1): 1, (2, 0): 2, (2, 1): 3}, self.flags(tb, model)
        assert model.final[0] and model.final[1]

    @hub_test()
    async def test_pool_runs_out_before_the_counts_are_met(self, dut):
        """Expert 0 announced by sources 0 and 1 (6 + 4 rows), source 2's count held back; 10
        rows of it and 2 of expert 1 take the six pages. One cycle: expert 0's row 10 (a tile
        start, no page: OVERFLOW, its counts not all in), expert 0 again (OVERFLOW with it),
        expert 1's row 2 (no page: OVERFLOW), expert 0 (OVERFLOW); the very next cycle another
        row of expert 0 (the pool still empty: OVERFLOW). Then source 2's count (0) completes
        expert 0 at the 10 rows it holds: its final count is written at once, before any
        end-of-stream; a row of it after that is COUNT_MISMATCH."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        sched = self.serial([self.cnt(0, 0, 6), self.cnt(1, 0, 4)], lanes=[2])
        sched += self.fill(0, 10) + self.fill(1, 2, token0=40) + self.IDLE
        group = self.firsts_then_rest([(self.row(0, 0, token=50), (0, 0)), (self.row(1, 0, token=51), (1, 0)),
                                  (self.row(2, 1, token=52), (2, 0)), (self.row(0, 0, token=53), (0, 1))])
        sched += self.in_turn(group, self.wide(self.chunks(self.row(1, 0, token=54), tag=1))) + self.IDLE
        sched += self.serial([self.cnt(2, 0, 0)], lanes=[1]) + self.IDLE
        sched += self.wide(self.chunks(self.row(2, 0, token=55), tag=1))
        await tb.send_schedule(sched + self.IDLE + [self.eos_for(sched)])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 5
        assert await tb.csr_read("OVERFLOW", 0) == 4 and await tb.csr_read("OVERFLOW", 1) == 1
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1
        assert await tb.csr_read("POOL_FREE") == 0 and await tb.csr_read("ROWS", 0) == 10
        assert model.final[0] and self.count_word_cycle(tb, model, 0) < self.first_eos_cycle(tb)

    @hub_test()
    async def test_count_and_page_refusals_of_one_expert_in_one_group(self, dut):
        """Same-cycle mixes on all lanes, the pool empty at a tile start of expert 0 (12 rows
        of it hold the six pages), one of its counts still out. Layer 1, one cycle: a row of
        expert 0 (no page: OVERFLOW), the last count of expert 0 making its total the 12 rows
        it holds, two rows of expert 0 (its counts now met: COUNT_MISMATCH, though the row
        refused for want of a page sat ahead); the next cycle, four rows of expert 0, the
        cycle after, two (COUNT_MISMATCH). Layer 2 (pages back), again 12 rows, the total
        to be 13: one cycle of two rows of expert 0 (OVERFLOW), its last count -- one row more
        than it holds: neither below the rows held (though two requests sat ahead) nor met --
        and a row (OVERFLOW: the rows held are 12, not the three requests ahead); the next
        cycle four rows (OVERFLOW: the hub's count limit is a cycle behind there), the cycle
        after two (OVERFLOW); at the sweep expert 0 is short (COUNT_MISMATCH)."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        later = [(0, 1), (1, 1), (2, 1), (0, 2)]
        # ---- layer 1: the counts met between a page refusal and the rows behind it
        sched = self.serial([self.cnt(0, 0, 12), self.cnt(1, 0, 0)], lanes=[3]) + self.fill(0, 12) + self.IDLE
        group = self.firsts_then_rest([(self.row(0, 0, token=60), (0, 0)), self.cnt(2, 0, 0),
                                  (self.row(1, 0, token=61), (1, 0)), (self.row(2, 0, token=62), (2, 0))])
        sched += self.in_turn(group, self.rows_of(0, later, 63), self.rows_of(0, [(1, 2), (2, 2)], 67))
        await tb.send_schedule(sched + self.IDLE + [self.eos_for(sched)])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 1
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 8
        assert model.final[0]
        # ---- layer 2: the counts not met behind the page refusal, nor in the cycles after
        await self.next_layer(tb, 2)
        sched = self.serial([self.cnt(0, 0, 13), self.cnt(1, 0, 0)], lanes=[0])
        sched += self.fill(0, 12, token0=100) + self.IDLE
        group = self.firsts_then_rest([(self.row(0, 0, token=70), (0, 0)), (self.row(1, 0, token=71), (1, 0)),
                                  self.cnt(2, 0, 0), (self.row(2, 0, token=72), (2, 0))])
        sched += self.in_turn(group, self.rows_of(0, later, 73), self.rows_of(0, [(1, 2), (2, 2)], 77))
        await tb.send_schedule(sched + self.IDLE + [self.eos_for(sched)])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 9 and await tb.csr_read("OVERFLOW", 0) == 9
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1        # (the sweep: short)
        assert not model.final[0]

    @hub_test()
    async def test_count_packet_behind_a_page_refusal(self, dut):
        """The pool empty at a tile start of expert 2 (12 rows), two of its sources' counts in
        (10 + 2). One cycle: two rows of expert 2 (OVERFLOW), source 2's count of 0 -- the rows
        held are 12, the total 12: not below it, though two requests sat ahead; the expert is
        final there -- and a row of expert 1 (it starts a tile, no page: OVERFLOW). Layer 2
        (pages back), the same with a total of 11 and a row of expert 2 behind the count: the
        count is below the rows held (COUNT_MISMATCH), the row behind it and the two of the
        next cycle are past the count (COUNT_MISMATCH)."""
        tb = await self.make_paged_tb(dut, tile_rows=2)
        sched = self.serial([self.cnt(0, 2, 10), self.cnt(1, 2, 2)], lanes=[1]) + self.fill(2, 12) + self.IDLE
        sched += self.firsts_then_rest([(self.row(0, 2, token=90), (0, 0)), (self.row(1, 2, token=91), (1, 0)),
                                   self.cnt(2, 2, 0), (self.row(2, 1, token=92), (2, 0))])
        await tb.send_schedule(sched + self.IDLE + [self.eos_for(sched)])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 3 and await self.drops(tb, Reason.COUNT_MISMATCH) == 0
        assert model.final[2]
        await self.next_layer(tb, 2)
        sched = self.serial([self.cnt(0, 2, 9), self.cnt(1, 2, 2)], lanes=[1])
        sched += self.fill(2, 12, token0=120) + self.IDLE
        group = self.firsts_then_rest([(self.row(0, 2, token=93), (0, 0)), (self.row(1, 2, token=94), (1, 0)),
                                  self.cnt(2, 2, 0), (self.row(2, 2, token=95), (2, 0))])
        sched += self.in_turn(group, self.rows_of(2, [(0, 1), (1, 1)], 96))
        await tb.send_schedule(sched + self.IDLE + [self.eos_for(sched)])
        await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 2
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 4

    # ---------------------------------------------------------------------------- random
    def count_feeder(self, rng, rows, errors: bool) -> CountFeeder:
        """The paged layers with count packets: announcements before and among the rows,
        sometimes one row off (rows past their count refused beside rows without a page)."""
        return CountFeeder(self.cfg, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                           p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                           count_errors=rng.choice([0.0, 0.15, 0.4]))

    @hub_test(ms=400, random=True)
    async def test_random_paged_counts(self, dut):
        """Random rows and count packets over three layers on the small pool (random tile
        sizes; pages handed back between layers), back-pressure, idle lanes, early EOS,
        credit delay; ``seeds`` consecutive seeds from ``seed``."""
        await _each_seed(self, "test_random_paged_counts", self.random_paged_layers, dut,
                         layers=3, errors=False, feeder=self.count_feeder)

    @hub_test(ms=400, random=True)
    async def test_random_paged_counts_with_errors(self, dut):
        """As test_random_paged_counts, with v1's bad input mixed in."""
        await _each_seed(self, "test_random_paged_counts_with_errors", self.random_paged_layers, dut,
                         layers=3, errors=True, feeder=self.count_feeder)



class MulticastCountTests(MulticastTests, CountTests):
    """Multicast rows with count packets. A count packet announces a source's rows for one
    expert; a multicast row counts toward each of its targets. A row naming *any* expert
    whose counts are all in and met is refused (COUNT_MISMATCH, before OVERFLOW) and takes
    no row of its other targets; a completing count below the rows an expert holds is a
    COUNT_MISMATCH; an expert whose counts are met and whose rows are complete gets its
    final count word (and its partial last tile's flag) at once. Under the multicast
    admission the allocator is tight while an expert is within ``ADMISSION_GROUPS x lanes``
    rows of its count and not met, roomy again once it is met."""

    requires = frozenset({MULTICAST, COUNTS})
    excludes = frozenset({PAGED})

    def announce(self, rows, extra=None) -> list:
        """Every source's count packet for every expert: the rows of ``rows`` naming it (plus
        ``extra[(src, expert)]``)."""
        n = {}
        for r in rows:
            for x, _ in r.targets:
                n[(r.src, x)] = n.get((r.src, x), 0) + 1
        for k, v in (extra or {}).items():
            n[k] = n.get(k, 0) + v
        return [self.cnt(s, x, n.get((s, x), 0)) for s in range(self.S) for x in range(self.E)]

    # ---------------------------------------------------------------------------- directed
    @hub_test()
    async def test_counts_first_every_expert_final_early(self, dut):
        """Every count first, then rows to one, two and three experts: each expert's final
        count and partial flag leave before any end-of-stream, with the data written once per
        row and one metadata word per target."""
        tb = await self.make_mc_tb(dut)
        rows = [self.mrow(0, [(0, 0), (1, 1)], token=1), self.mrow(1, [(2, 0)], token=2),
                self.mrow(2, [(1, 0), (2, 1), (0, 2)], token=3), self.mrow(0, [(2, 2), (0, 0)], token=4)]
        sched = self.spread(self.announce(rows)) + self.rows_in_one_cycle(list(zip(rows, [0, 0, 0, 1])))
        await tb.send_schedule(sched + self.IDLE + [self.eos_of(rows)])
        model = await self.finish(tb, rows)
        assert model.final == [True] * self.E
        assert self.early(tb, model) == list(range(self.E)), \
            [self.count_word_cycle(tb, model, x) for x in range(self.E)]

    @hub_test()
    async def test_row_refused_when_any_target_is_met(self, dut):
        """Expert 0 announced one row, expert 1 three. A row to (0, 1) takes them; then, in one
        cycle, a row to (1, 0) -- refused, COUNT_MISMATCH: expert 0's count is met -- and a row
        to (1): it takes expert 1's row 1, not 2 (the refused row took nothing); then two rows
        to (1, 2) ... the second refused too (expert 1 met at 3). ROWS 1, 3, 1."""
        tb = await self.make_mc_tb(dut)
        a = self.mrow(0, [(0, 0), (1, 1)], token=1)
        b, c = self.mrow(1, [(1, 0), (0, 1)], token=2), self.mrow(2, [(1, 2)], token=3)
        d, e = self.mrow(0, [(1, 0), (2, 1)], token=5), self.mrow(1, [(2, 0), (1, 2)], token=6)
        counts = [self.cnt(0, 0, 1), self.cnt(1, 0, 0), self.cnt(2, 0, 0),
                  self.cnt(0, 1, 2), self.cnt(1, 1, 0), self.cnt(2, 1, 1),
                  self.cnt(0, 2, 1), self.cnt(1, 2, 0), self.cnt(2, 2, 0)]
        sched = self.spread(counts) + self.one_at_a_time([a]) + self.rows_in_one_cycle([(b, 0), (c, 0)]) + self.IDLE
        sched += self.rows_in_one_cycle([(d, 1), (e, 1)])
        await tb.send_schedule(sched + self.IDLE + [self.eos_of([a, b, c, d, e])])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 2
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [1, 3, 1]
        assert await self.drops(tb, Reason.OVERFLOW) == 0
        assert model.final == [True] * self.E

    @hub_test()
    async def test_count_and_row_in_one_cycle(self, dut):
        """Order within a cycle. Expert 2 holds one row, sources 0 and 1 announced 1 and 0:
        source 2's count (0) on lane 0 completes it; a row naming (0, 2) offered on lane 1 in
        the same cycle waits a cycle (the input ends a group at a count packet) and is then
        refused (COUNT_MISMATCH). Expert 1 holds one row, sources 0 and 1 announced 0: a row
        naming (1, 0) on lane 0 is granted (expert 1's count still open), then source 2's count
        of 1 on lane 1, taken in the same cycle, completes expert 1 below its two rows
        (COUNT_MISMATCH: it ends at the sweep). Expert 0 (1 announced) takes that row: final
        at once."""
        tb = await self.make_mc_tb(dut)
        r1, r2 = self.mrow(0, [(2, 0)], token=1), self.mrow(1, [(1, 0)], token=2)
        pre = [self.cnt(0, 2, 1), self.cnt(1, 2, 0), self.cnt(0, 1, 0), self.cnt(1, 1, 0), self.cnt(0, 0, 1),
               self.cnt(1, 0, 0), self.cnt(2, 0, 0)]
        sched = self.spread(pre) + self.one_at_a_time([r1, r2])
        x = self.mrow(2, [(0, 0), (2, 1)], token=3)
        cnt_x, x0 = self.cnt(2, 2, 0), self.chunks(x, 0, [0])[0]
        sched += self.IDLE + [[cnt_x, x0, None, None]]
        sched += self.spread(self.chunks(x, 0, range(1, self.cfg.chunks_per_row)))
        y = self.mrow(0, [(1, 0), (0, 1)], token=4)
        cnt_y, y0 = self.cnt(2, 1, 1), self.chunks(y, 1, [0])[0]
        sched += self.IDLE + [[y0, cnt_y, None, None]]
        sched += self.spread(self.chunks(y, 1, range(1, self.cfg.chunks_per_row)))
        await tb.send_schedule(sched + self.IDLE + [self.eos_of([r1, r2, x, y])])
        model = await self.finish(tb)
        at = {k: [c for c, _, p in tb.accepted if p == q]
              for k, q in (("x", x0), ("cx", cnt_x), ("y", y0), ("cy", cnt_y))}
        assert at["x"] == [at["cx"][0] + 1], \
            f"the row behind a count packet: taken in cycle {at['x']}, count {at['cx']}"
        assert at["y"] == at["cy"], f"a count packet behind a row: taken in cycle {at['cy']}, the row {at['y']}"
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [1, 2, 1]
        assert model.final == [True, False, True], "expert 1, past its count, ends at the sweep"

    @hub_test()
    async def test_met_expert_beside_roomy_ones(self, dut):
        """Expert 0 announced 0 rows by every source (met from the start); experts 1 and 2
        25 each (far from their counts: the allocator is not tight). One cycle of four rows --
        (1), (0, 1), (2), (1, 2): all four taken in that cycle, the one naming expert 0
        refused for counts and taking no row of expert 1; experts 1 and 2 get rows 0, 1 in
        lane order; then 23 rows to (1, 2) complete both, final before the end-of-stream."""
        tb = await self.make_mc_tb(dut)
        first = [self.mrow(0, [(1, 0)], token=1), self.mrow(1, [(0, 0), (1, 1)], token=2),
                 self.mrow(2, [(2, 0)], token=3), self.mrow(0, [(1, 2), (2, 1)], token=4)]
        rest = [self.mrow(k % self.S, [(1, 0), (2, 1)], token=10 + k) for k in range(23)]
        counts = self.announce([first[0], first[2], first[3]] + rest)
        sched = self.spread(counts) + self.IDLE + self.rows_in_one_cycle(list(zip(first, [0, 0, 0, 1])))
        sched += self.IDLE + self.one_at_a_time(rest)
        await tb.send_schedule(sched + self.IDLE + [self.eos_of(first + rest)])
        model = await self.finish(tb)
        heads = [self.chunks(r, t, [0])[0] for r, t in zip(first, [0, 0, 0, 1])]
        took = {c for c, _, p in tb.accepted if p in heads}
        assert len(took) == 1, f"the four rows were taken in cycles {sorted(took)}, not one"
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [0, 25, 25]
        assert model.final == [True] * self.E and self.early(tb, model) == [0, 1, 2]

    # ---------------------------------------------------------------------------- random
    async def random_mc_count_layer(self, dut, seed: int, *, errors: bool):
        """One layer of random multicast rows with count packets (before, among and after the
        rows; with ``errors`` wrong, repeated and out-of-range counts and v1's bad input),
        random region capacities sometimes small, against the model."""
        rng = random.Random(seed)
        tb = await pool_hub_tb(dut, self.cfg, seed, rng)
        await tb.csr_write("TILE_ROWS_LOG2", rng.choice([1, 2, 3]))
        await tb.csr_write("POOL_CAP", self.cfg.pool_rows)
        small = rng.random() < 0.3
        for x in range(self.E):
            await tb.csr_write("REGION_CAP", rng.randrange(4, 20) if small else self.cfg.max_rows_per_expert, x)
        await tb.start_layer()
        rows = self.random_mc_rows(rng, rng.randrange(8, 40), self.cfg.max_rows_per_expert)
        feeder = CountFeeder(self.cfg, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                             p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                             count_errors=0.15 if errors else 0.0)
        tb.feed(feeder, credit_delay=rng.randrange(0, 8))
        model = await tb.finish_layer(flush_if_open=errors)
        assert model.done, f"layer did not finish (seed {seed})"
        if not errors and not small:
            self.check_multicast(tb, model, rows)
            assert model.final == [True] * self.E, f"an expert did not end early (seed {seed})"
        tb.stop()

    @hub_test(ms=400, random=True)
    async def test_random_multicast_counts(self, dut):
        """Random multicast rows with count packets; ``seeds`` consecutive seeds
        from ``seed``."""
        await _each_seed(self, "test_random_multicast_counts", self.random_mc_count_layer, dut, errors=False)

    @hub_test(ms=400, random=True)
    async def test_random_multicast_counts_with_errors(self, dut):
        """As test_random_multicast_counts, with count errors and v1's bad input."""
        await _each_seed(self, "test_random_multicast_counts_with_errors", self.random_mc_count_layer, dut,
                         errors=True)



class MulticastPagedTests(MulticastTests):
    """Multicast rows in a paged arena. A row's data lands once, in the pool: the arena's
    rows fill pages one tile at a time, in the order the rows are granted (one stream for
    every expert: the index arrays are per expert, the data is not), row ``n`` of the arena
    at ``page << log2(tile rows) | n mod tile rows`` -- its place ``loc``, which each
    target's metadata word names. A row that starts a tile when the pool has no page left
    is refused (OVERFLOW, counted for each of its targets); software hands pages back with
    PAGE_FREE (one not handed out: PAGE_BAD). The directed tests also assert the pages on
    their own, from the writes and metadata words (:meth:`pages_of`, independent of the
    model)."""

    requires = frozenset({MULTICAST, PAGED})
    excludes = frozenset({COUNTS})

    def locs(self, tb, model, since: int = 0) -> dict:
        """{(src, token): loc} of the metadata words written from cycle ``since`` on."""
        out = {}
        for cyc, c in tb.ctl_out:
            if c.kind == CtlKind.META and cyc >= since:
                f = tb.fmt.meta_word.unpack(c.data)
                out.setdefault((f["src"], f["token"]), f["loc"])
        return out

    def pages_of(self, tb, model, rows, since: int = 0) -> list:
        """The page of each of ``rows`` (None: refused), from its metadata words' ``loc`` at the
        layer's tile size; asserts each granted row's data was written there."""
        at = self.locs(tb, model, since)
        writes = {a for lane in tb.wr_out for cyc, a, _ in lane if cyc >= since}
        out = []
        for r in rows:
            loc = at.get((r.src, r.token))
            if loc is not None:
                base = model.pool_base + loc * self.cfg.stride_bytes
                assert {base + c * self.cfg.chunk_bytes for c in range(self.cfg.chunks_per_row)} <= writes, \
                    f"row {(r.src, r.token)}: data not at its place {loc}"
            out.append(None if loc is None else loc >> model.layer_tile_rows_log2)
        return out

    # ---------------------------------------------------------------------------- directed
    @hub_test()
    async def test_arena_pages_in_grant_order(self, dut):
        """Tiles of 4 rows: four rows opened in one cycle (overlapping target sets) take arena
        rows 0..3 of page 0 in lane order; two more rows take page 1; each row's data lands
        once at ``page x 4 + row mod 4``, every target's metadata word names it; POOL_FREE
        12 - 2. At tiles of 8 rows (the next layer, pages handed back) the six rows share page
        1 -- the first page handed back."""
        tb = await self.make_mc_tb(dut, tile_rows=4)
        sets = [[(0, 0), (1, 1)], [(1, 0)], [(2, 2), (0, 1), (1, 0)], [(0, 2)]]
        rows = [self.mrow(s, t, token=10 + k) for k, (s, t) in enumerate(zip([0, 1, 2, 0], sets))]
        more = [self.mrow(1, [(2, 0)], token=20), self.mrow(2, [(0, 0), (2, 1)], token=21)]
        await tb.send_schedule(self.rows_in_one_cycle(list(zip(rows, [0, 0, 0, 1]))) + self.IDLE
                               + self.one_at_a_time(more)
                               + self.IDLE + [self.eos_of(rows + more)])
        model = await self.finish(tb, rows + more)
        assert self.pages_of(tb, model, rows + more) == [0, 0, 0, 0, 1, 1]
        assert [self.locs(tb, model)[(r.src, r.token)] for r in rows + more] == [0, 1, 2, 3, 4, 5]
        assert await tb.csr_read("POOL_FREE") == self.P - 2
        await return_pages(tb, [1, 0])
        assert await tb.csr_read("POOL_FREE") == self.P
        await tb.csr_write("TILE_ROWS_LOG2", 3)
        await tb.start_layer()
        since = tb.cycle
        again = [self.mrow(s % self.S, [(s % self.E, 0)], token=40 + s) for s in range(6)]
        await tb.send_schedule(self.one_at_a_time(again) + self.IDLE + [self.eos_of(again)])
        model = await self.finish(tb)
        assert self.pages_of(tb, model, again, since) == [1] * 6, "the oldest page handed back is taken first"
        assert await tb.csr_read("POOL_FREE") == self.P - 1

    @hub_test()
    async def test_pool_exhausted_refuses_rows(self, dut):
        """Tiles of 4 rows, 12 pages: 48 arena rows. 47 rows fill 11 pages and 3 rows of the
        last; then, one cycle, a row that fits in the last page's last row, two rows that would
        start a tile (OVERFLOW, counted for every target: no page) and, last, a row naming an
        expert whose region is full (OVERFLOW for that). The pool's margin makes the
        admission tight on the way (one data packet a cycle): the rows are still granted
        exactly as the model grants them in lane order. POOL_FREE 0; no data of a refused row."""
        full = self.cfg.max_rows_per_expert
        tb = await self.make_mc_tb(dut, tile_rows=4, caps=[full, full, 16])
        fill = [self.mrow(k % self.S, [(k % 2, 0)] + ([(2, 1)] if k < 16 else []), token=k) for k in range(47)]
        last = [self.mrow(0, [(0, 1), (1, 2)], token=60), self.mrow(1, [(1, 0)], token=61),
                self.mrow(2, [(0, 0), (1, 1)], token=62), self.mrow(0, [(2, 0)], token=63)]
        await tb.send_schedule(self.one_at_a_time(fill) + self.IDLE
                               + self.rows_in_one_cycle(list(zip(last, [0, 0, 0, 1])))
                               + self.IDLE + [self.eos_of(fill + last)])
        model = await self.finish(tb)
        assert self.pages_of(tb, model, last) == [11, None, None, None]
        assert await self.drops(tb, Reason.OVERFLOW) == 3
        assert [await tb.csr_read("OVERFLOW", x) for x in range(self.E)] == [1, 2, 1]
        assert await tb.csr_read("POOL_FREE") == 0
        assert sum(len(w) for w in tb.wr_out) == 48 * self.cfg.chunks_per_row

    @hub_test()
    async def test_rows_on_every_lane_as_the_pool_runs_out(self, dut):
        """40 rows take 10 of the 12 pages; then nine rows open on every lane, four a cycle
        offered (every source's tags): eight fit the last two pages, the ninth is OVERFLOW.
        With two pages left the arena is below its admission margin (6 pages at 4-row tiles),
        so the input takes one data packet a cycle and the rows are granted as the model
        grants them; an arena that counted itself roomy here would grant all nine (a hub
        granting a row no page: the writes and POOL_FREE would differ)."""
        tb = await self.make_mc_tb(dut, tile_rows=4)
        fill = [self.mrow(k % self.S, [(k % self.E, 0)], token=k) for k in range(40)]
        burst = [self.mrow(k % self.S, [((k + 1) % self.E, 0), ((k + 2) % self.E, 1)], token=100 + k) for k in range(9)]
        tags = [k // self.S for k in range(9)]
        heads = [self.chunks(r, t, [0])[0] for r, t in zip(burst, tags)]
        rest = [p for r, t in zip(burst, tags) for p in self.chunks(r, t, range(1, self.cfg.chunks_per_row))]
        sched = [heads[k:k + self.L] + [None] * (self.L - len(heads[k:k + self.L])) for k in range(0, 9, self.L)]
        sched += [rest[k:k + self.L] + [None] * (self.L - len(rest[k:k + self.L])) for k in range(0, len(rest), self.L)]
        await tb.send_schedule(self.one_at_a_time(fill) + self.IDLE + sched + self.IDLE + [self.eos_of(fill + burst)])
        model = await self.finish(tb)
        assert sorted(p for p in self.pages_of(tb, model, burst) if p is not None) == [10] * 4 + [11] * 4
        assert await self.drops(tb, Reason.OVERFLOW) == 1
        assert await tb.csr_read("POOL_FREE") == 0

    @hub_test()
    async def test_page_returns(self, dut):
        """A layer takes pages 0..2; PAGE_FREE of 2, of 2 again (PAGE_BAD), of 9 (never handed
        out: PAGE_BAD) and of 0; the next layer's rows take 2, then 0, then the fresh page 3.
        POOL_FREE follows every step."""
        tb = await self.make_mc_tb(dut, tile_rows=4)
        first = [self.mrow(k % self.S, [(k % self.E, 0)], token=k) for k in range(10)]
        await tb.send_schedule(self.one_at_a_time(first) + self.IDLE + [self.eos_of(first)])
        await self.finish(tb, first)
        assert await tb.csr_read("POOL_FREE") == self.P - 3
        await return_pages(tb, [2, 2, 9, 0])
        assert await self.drops(tb, Reason.PAGE_BAD) == 2
        assert await tb.csr_read("POOL_FREE") == self.P - 1
        await tb.start_layer()
        since = tb.cycle
        second = [self.mrow(k % self.S, [((k + 1) % self.E, 0), ((k + 2) % self.E, 1)], token=20 + k) for k in range(9)]
        await tb.send_schedule(self.one_at_a_time(second) + self.IDLE + [self.eos_of(second)])
        model = await self.finish(tb)
        assert self.pages_of(tb, model, second, since) == [2] * 4 + [0] * 4 + [3]
        assert await tb.csr_read("POOL_FREE") == self.P - 4

    # ---------------------------------------------------------------------------- random
    def lane_feeder(self, rng: random.Random, rows, errors: bool) -> LaneFeeder:
        """The random tests' feeder of ``rows`` (idle lanes, early EOS, v1's bad input with
        ``errors``)."""
        return LaneFeeder(self.cfg, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                          errors=0.15 if errors else 0.0)

    async def random_mc_paged_layers(self, dut, seed: int, *, layers: int, errors: bool, feeder=None):
        """``layers`` layers of random multicast rows (random tile sizes, sometimes more rows
        than the pool holds, sometimes small regions; back-pressure, idle lanes, early EOS,
        credit delay; v1's bad input with ``errors``), a random part of the pages handed back
        between layers (sometimes a bad return), against the model; the seed is in every
        assertion message. ``feeder(rng, rows, errors)`` makes each layer's traffic
        (with count packets: :class:`MulticastPagedCountTests`)."""
        feeder = feeder or self.lane_feeder
        rng = random.Random(seed)
        tb = await pool_hub_tb(dut, self.cfg, seed, rng)
        refused = 0
        for layer in range(layers):
            tile = rng.choice([4, 8, 16])
            await tb.csr_write("TILE_ROWS_LOG2", tile.bit_length() - 1)
            await tb.csr_write("EPOCH", (seed + layer) & 0xFFFF)
            small = rng.random() < 0.3
            for x in range(self.E):
                await tb.csr_write("REGION_CAP", rng.randrange(4, 20) if small else self.cfg.max_rows_per_expert, x)
            await tb.start_layer()
            rows = self.random_mc_rows(rng, rng.randrange(8, 60), self.cfg.max_rows_per_expert)
            tb.feed(feeder(rng, rows, errors), credit_delay=rng.randrange(0, 8))
            model = await tb.finish_layer(flush_if_open=errors)
            assert model.done, f"layer {layer} did not finish (seed {seed})"
            refused += model.drop_counts[Reason.OVERFLOW]
            await return_pages(tb, random_returns(model, rng, self.P))
        await tb.check()
        tb.stop()
        cocotb.log.info(f"seed {seed}: {refused} rows refused for want of room or a page")

    @hub_test(ms=400, random=True)
    async def test_random_multicast_paged(self, dut):
        """Random multicast rows in pages over three layers; ``seeds``
        consecutive seeds from ``seed``."""
        await _each_seed(self, "test_random_multicast_paged", self.random_mc_paged_layers, dut,
                         layers=3, errors=False)

    @hub_test(ms=400, random=True)
    async def test_random_multicast_paged_with_errors(self, dut):
        """As test_random_multicast_paged, with v1's bad input mixed in."""
        await _each_seed(self, "test_random_multicast_paged_with_errors", self.random_mc_paged_layers, dut,
                         layers=3, errors=True)



class MulticastPagedCountTests(MulticastPagedTests, CountTests):
    """The three features together: a row refused for counts (any target met:
    COUNT_MISMATCH, checked before OVERFLOW) takes no arena row, so no page and no place --
    the next granted row takes the place it would have had; experts end early (final count,
    partial flag) while the arena's pages fill in grant order."""

    requires = frozenset({MULTICAST, PAGED, COUNTS})
    excludes = frozenset()

    @hub_test()
    async def test_row_refused_for_counts_takes_no_arena_row(self, dut):
        """Tiles of 4 rows. Expert 0 announced one row, expert 1 five, expert 2 none (met
        from the start). Rows one at a time: (0) takes arena row 0; (0, 1) is refused (expert
        0 met) and takes no arena row; four rows of (1) take arena rows 1..4 -- row 4 the
        first of page 1; (2, 1) is refused (expert 2 met); the last row of (1) arena row 5.
        Every expert final before the end-of-stream; POOL_FREE 12 - 2."""
        tb = await self.make_mc_tb(dut, tile_rows=4)
        a, b = self.mrow(0, [(0, 0)], token=1), self.mrow(1, [(0, 1), (1, 0)], token=2)
        ones = [self.mrow(k % 2, [(1, 0)], token=10 + k) for k in range(5)]
        h = self.mrow(2, [(2, 0), (1, 1)], token=20)
        counts = [self.cnt(0, 0, 1), self.cnt(1, 0, 0), self.cnt(2, 0, 0),
                  self.cnt(0, 1, 3), self.cnt(1, 1, 2), self.cnt(2, 1, 0),
                  self.cnt(0, 2, 0), self.cnt(1, 2, 0), self.cnt(2, 2, 0)]
        order = [a, b] + ones[:4] + [h, ones[4]]
        await tb.send_schedule(self.spread(counts) + self.IDLE + self.one_at_a_time(order) + self.IDLE
                               + [self.eos_of(order)])
        model = await self.finish(tb)
        granted = [a] + ones
        assert [self.locs(tb, model)[(r.src, r.token)] for r in granted] == [0, 1, 2, 3, 4, 5]
        assert self.pages_of(tb, model, granted) == [0, 0, 0, 0, 1, 1]
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 2
        assert await tb.csr_read("POOL_FREE") == self.P - 2
        assert model.final == [True] * self.E and self.early(tb, model) == list(range(self.E))

    @hub_test()
    async def test_late_grant_counts_only_on_its_own_experts(self, dut):
        """The risky lane's grant counts toward the experts it names and no other. Experts 0
        and 1 announced two rows each, expert 2 none (the allocator is tight: every row is
        risky). A row to (1) leaves expert 1 one row short of its count; then a row to (0)
        and, a cycle later, a row to (1): the second is decided the cycle after the first
        was granted, from the refusal registered for that grant -- expert 1 is not met by
        a grant to expert 0, so it takes its last row. Then the last row to (0). ROWS 2, 2,
        0, nothing refused, every expert final before the end-of-stream."""
        tb = await self.make_mc_tb(dut)
        first, last = self.mrow(1, [(1, 0)], token=1), self.mrow(1, [(0, 0)], token=4)
        a, b = self.mrow(0, [(0, 0)], token=2), self.mrow(2, [(1, 0)], token=3)
        heads = [self.chunks(a, 0, [0])[0], self.chunks(b, 0, [0])[0]]
        rest = [p for r in (a, b) for p in self.chunks(r, 0, range(1, self.cfg.chunks_per_row))]
        pair = [[heads[0]] + [None] * (self.L - 1), [None, heads[1]] + [None] * (self.L - 2)]
        rows = [first, a, b, last]
        counts = [self.cnt(0, 0, 1), self.cnt(1, 0, 1), self.cnt(2, 0, 0),
                  self.cnt(0, 1, 0), self.cnt(1, 1, 1), self.cnt(2, 1, 1),
                  self.cnt(0, 2, 0), self.cnt(1, 2, 0), self.cnt(2, 2, 0)]
        sched = (self.spread(counts) + self.IDLE + self.one_at_a_time([first]) + self.IDLE
                 + pair + self.spread(rest) + self.IDLE + self.one_at_a_time([last]))
        await tb.send_schedule(sched + self.IDLE + [self.eos_of(rows)])
        model = await self.finish(tb)
        took = [c for h in heads for c, _, p in tb.accepted if p == h]
        assert took[1] == took[0] + 1, f"the two rows were taken in cycles {took}, not one after the other"
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 0
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [2, 2, 0]
        assert model.final == [True] * self.E and self.early(tb, model) == list(range(self.E))

    def count_feeder(self, rng: random.Random, rows, errors: bool) -> CountFeeder:
        """Random traffic with count packets (some wrong, repeated or out of range with
        ``errors``)."""
        return CountFeeder(self.cfg, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                           p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                           count_errors=0.15 if errors else 0.0)

    @hub_test(ms=400, random=True)
    async def test_random_multicast_paged_counts(self, dut):
        """Random multicast rows with count packets in a paged arena over three layers, pages
        handed back between them; ``seeds`` consecutive seeds from ``seed``."""
        await _each_seed(self, "test_random_multicast_paged_counts", self.random_mc_paged_layers, dut,
                         layers=3, errors=False, feeder=self.count_feeder)

    @hub_test(ms=400, random=True)
    async def test_random_multicast_paged_counts_with_errors(self, dut):
        """As test_random_multicast_paged_counts, with count errors and v1's bad input."""
        await _each_seed(self, "test_random_multicast_paged_counts_with_errors", self.random_mc_paged_layers, dut,
                         layers=3, errors=True, feeder=self.count_feeder)

