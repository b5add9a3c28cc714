"""Protocol v2's per-expert count packets (``count_packets``) on a hub without the other
features.

Every test ends as the rules' do, with ``tb.check()``: every data write, every control
write *in order* (an expert's early final count and last partial flag included), every
credit and every status register compared with the reference model. The directed tests
also assert what the protocol promises on their own: which experts end early (before any
end-of-stream), the drops counted by reason.
"""
from __future__ import annotations

import random

import cocotb
from cocotb.triggers import RisingEdge

from ...spec.formats import CtlKind, Reason, count_addr
from ...spec.model import Packet
from ..count_traffic import CountFeeder
from ..traffic import random_rows
from .context import COUNTS, MULTICAST, PAGED
from .env import HubTB
from .library import HubTests, hub_test


class CountTests(HubTests):
    """See the module docstring."""

    requires = frozenset({COUNTS})
    excludes = frozenset({PAGED, MULTICAST})

    def cnt(self, src, expert, n):
        return Packet.counts(src, expert, n)

    def count_word_cycle(self, tb: HubTB, model, x: int):
        """Cycle of expert x's final count word (None if it was not written)."""
        a = count_addr(self.cfg, model.layer_count_base, x)
        return next((c for c, w in tb.ctl_out if w.kind == CtlKind.COUNT and w.addr == a), None)

    def first_eos_cycle(self, tb: HubTB) -> int:
        return min(c for c, _, p in tb.accepted if p.kind == 1)

    def early(self, tb: HubTB, model) -> list:
        """Experts whose final count word left before the first end-of-stream was accepted."""
        eos = self.first_eos_cycle(tb)
        cycles = [self.count_word_cycle(tb, model, x) for x in range(self.E)]
        return [x for x, c in enumerate(cycles) if c is not None and c < eos]

    # ---------------------------------------------------------------------------- directed
    @hub_test()
    async def test_counts_before_rows(self, dut):
        """Every source announces every expert first; then the rows; the final count words
        and the last partial tiles' flags leave before any end-of-stream, the sweep only
        writes the done word."""
        tb = await self.make_tb(dut)
        rows = [self.row(0, 0, token=1), self.row(1, 0, token=2), self.row(2, 1, token=3)]
        n = {(r.src, r.expert): 1 for r in rows}
        counts = [self.cnt(s, x, n.get((s, x), 0)) for s in range(self.S) for x in range(self.E)]
        sched = [counts[k:k + self.L] for k in range(0, len(counts), self.L)]
        for t, r in enumerate(rows):
            sched += self.serial(self.chunks(r, tag=t), lanes=list(range(self.L)))
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1, 1: 1, 2: 1})])
        model = await self.finish(tb, rows)
        assert model.final == [True] * self.E
        assert self.early(tb, model) == list(range(self.E)), \
            [self.count_word_cycle(tb, model, x) for x in range(self.E)]
        last = [w.kind for _, w in tb.ctl_out][-1:]
        assert last == [CtlKind.DONE]

    @hub_test()
    async def test_counts_among_rows(self, dut):
        """Counts before, between and after the rows: an expert made final by its last
        row's completion (counts first), one by its last count packet (rows first), and one
        announced as 0 by all in mid-stream."""
        tb = await self.make_tb(dut)
        a, b, c = self.row(0, 0, token=1), self.row(1, 0, token=2), self.row(2, 1, token=3)
        sched = self.serial([self.cnt(0, 0, 1), self.cnt(1, 0, 1), self.cnt(2, 0, 0)])
        sched += self.serial(self.chunks(a, tag=0) + self.chunks(c, tag=1), lanes=[0, 1, 2, 3])
        sched += self.serial([self.cnt(0, 2, 0), self.cnt(1, 2, 0), self.cnt(2, 2, 0)], lanes=[3])
        sched += self.serial(self.chunks(b, tag=2), lanes=[1, 2])
        sched += self.IDLE + self.serial([self.cnt(0, 1, 0), self.cnt(1, 1, 0), self.cnt(2, 1, 1)])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1, 1: 1, 2: 1})])
        model = await self.finish(tb, [a, b, c])
        assert self.early(tb, model) == [0, 1, 2]
        # expert 1 (its one row complete long before) ends at its last count packet
        last_count = max(cyc for cyc, _, p in tb.accepted if p.kind == 2 and p.expert == 1)
        assert self.count_word_cycle(tb, model, 1) > last_count

    @hub_test()
    async def test_rows_beyond_their_count(self, dut):
        """Expert 0 announced 1 row, gets 2: the second is dropped as COUNT_MISMATCH (its
        credit returns). Expert 1 gets 2 rows, then counts of 1 in all: COUNT_MISMATCH at the
        last count, and the expert ends at the sweep (final count 2)."""
        tb = await self.make_tb(dut)
        r0, r1 = self.row(0, 0, token=1), self.row(0, 0, token=2)
        r2, r3 = self.row(1, 1, token=3), self.row(1, 1, token=4)
        sched = self.serial([self.cnt(0, 0, 1), self.cnt(1, 0, 0), self.cnt(2, 0, 0)])
        sched += self.serial(self.chunks(r0, tag=0) + self.chunks(r1, tag=1)
                             + self.chunks(r2, tag=0) + self.chunks(r3, tag=1),
                        lanes=[0, 1, 2, 3])
        sched += self.IDLE + self.serial([self.cnt(0, 1, 0), self.cnt(1, 1, 1), self.cnt(2, 1, 0)])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 2, 1: 2})])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 2
        assert await tb.csr_read("ERRORS") >> Reason.COUNT_MISMATCH & 1
        assert len(tb.credit_out) == 4 and await tb.csr_read("ROWS", 0) == 1
        assert model.final[0] and not model.final[1]
        assert self.count_word_cycle(tb, model, 1) > self.first_eos_cycle(tb)

    @hub_test()
    async def test_rows_past_the_count_in_the_next_cycle(self, dut):
        """Expert 0 announced 3 rows; three rows open in one cycle (granted: the count allows
        three), two more in the next cycle: both refused (COUNT_MISMATCH). The allowance after
        a cycle of several grants is the count less all of them (the count limit keeps it in
        registers, updated with the grants)."""
        tb = await self.make_tb(dut)
        rows = [self.row(s, 0, token=t) for t, s in enumerate([0, 1, 2, 0, 1], start=1)]
        cs = [self.chunks(r, tag=t) for r, t in zip(rows, [0, 0, 0, 1, 1])]
        sched = self.serial([self.cnt(0, 0, 3), self.cnt(1, 0, 0), self.cnt(2, 0, 0)]) + self.IDLE
        sched += [[c[0] for c in cs[:3]] + [None], [c[0] for c in cs[3:]] + [None, None]]
        sched += self.serial([x for c in cs for x in c[1:]], lanes=list(range(self.L)))
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 2, 1: 2, 2: 1})])
        model = await self.finish(tb)
        opened = {}
        for c, _, p in tb.accepted:
            for k, ch in enumerate(cs):
                if p == ch[0]:
                    opened[k] = c
        first, second = {opened[k] for k in range(3)}, {opened[k] for k in (3, 4)}
        assert len(first) == 1 and second == {first.pop() + 1}, f"rows not opened as scheduled: {opened}"
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 2
        assert await tb.csr_read("ROWS", 0) == 3 and model.final[0]

    @hub_test()
    async def test_many_rows_under_a_large_count(self, dut):
        """Expert 0 announced 21 rows (8 + 7 + 6) before any row: the count limit's rows left
        start far above a group's requests (its compares with the lanes' requests ahead come
        from its low bits and flags of its high bits, registered with it); 21 rows come in
        waves of four openers a cycle (every tag of every source), all granted, and a 22nd
        behind them is refused (COUNT_MISMATCH); the expert ends before any end-of-stream."""
        tb = await self.make_tb(dut)
        plan = [0] * 8 + [1] * 7 + [2] * 7                  # the rows' sources; the last is extra
        seen, rows, waves = {}, [], {}
        for k, s in enumerate(plan):
            i = seen[s] = seen.get(s, -1) + 1
            r = self.row(s, 0, token=k + 1)
            rows.append(r)
            waves.setdefault(i // 3, []).append(self.chunks(r, tag=i % 3))
        sched = self.serial([self.cnt(0, 0, 8), self.cnt(1, 0, 7), self.cnt(2, 0, 6)]) + self.IDLE
        for w in sorted(waves):
            cs = waves[w]
            sched += self.wide([c[0] for c in cs]) + self.wide([x for c in cs for x in c[1:]]) + self.IDLE
        await tb.send_schedule(sched + [self.eos_all({0: 8, 1: 7, 2: 7})])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1
        assert await tb.csr_read("ROWS", 0) == 21 and model.final[0]
        assert self.early(tb, model) == [0]

    @hub_test()
    async def test_repeated_count(self, dut):
        """A count packet repeated in the same cycle (next lane) and in a later cycle:
        COUNT_DUPLICATE twice, ignored (the expert's total stays the first count's: a second
        row after the repeats is refused, COUNT_MISMATCH -- a repeat's 5 added to the rows
        allowed would take it)."""
        tb = await self.make_tb(dut)
        r, extra = self.row(2, 2, token=7), self.row(1, 2, token=8)
        sched = [[self.cnt(2, 2, 1), self.cnt(2, 2, 5), self.cnt(0, 2, 0)]]
        sched += self.serial(self.chunks(r, tag=0), lanes=[1, 3]) + self.serial([self.cnt(2, 2, 0), self.cnt(1, 2, 0)])
        sched += self.IDLE + self.serial(self.chunks(extra, tag=0), lanes=[0, 2])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({2: 1, 1: 1})])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.COUNT_DUPLICATE) == 2
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1 and await tb.csr_read("ROWS", 2) == 1
        assert model.final[2] and self.early(tb, model) == [2]

    @hub_test()
    async def test_counts_short_at_the_sweep(self, dut):
        """Expert 0 announced 3 rows, only 2 come: no early end; the sweep writes its count
        (2) and flags its partial tile, and counts COUNT_MISMATCH once."""
        tb = await self.make_tb(dut)
        rows = [self.row(0, 0, token=1), self.row(1, 0, token=2)]
        sched = self.serial([self.cnt(0, 0, 2), self.cnt(1, 0, 1), self.cnt(2, 0, 0)], lanes=[2])
        for t, r in enumerate(rows):
            sched += self.serial(self.chunks(r, tag=t), lanes=[0, 1])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1, 1: 1})])
        model = await self.finish(tb, rows)
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1
        assert not model.final[0] and self.early(tb, model) == []

    @hub_test()
    async def test_counts_on_all_lanes_at_once(self, dut):
        """Four count packets in one cycle, and in another cycle: the last count of expert 0
        (its one row complete: it ends there), on the next lane the first chunk of a row to
        expert 0 (refused in the same cycle: COUNT_MISMATCH), a repeat of lane 0's count
        (COUNT_DUPLICATE) and the last count of expert 1 (which ends later, at its row). The
        input takes them one a cycle and ends a group at a count packet (the count gate's
        admission): the row's chunk comes in the cycle after its count."""
        tb = await self.make_tb(dut)
        a, q, b = self.row(0, 0, token=1), self.row(2, 0, token=2), self.row(2, 1, token=3)
        qc = self.chunks(q, tag=0)
        sched = [[self.cnt(0, 0, 1), self.cnt(1, 0, 0), self.cnt(0, 1, 0), self.cnt(1, 1, 0)]]
        sched += self.serial(self.chunks(a, tag=0), lanes=[0, 1, 2, 3]) + self.IDLE
        sched += [[self.cnt(2, 0, 0), qc[0], self.cnt(2, 0, 5), self.cnt(2, 1, 1)]]
        sched += self.serial(qc[1:] + self.chunks(b, tag=1), lanes=[3, 2, 1, 0])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1, 2: 2})])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1
        assert await self.drops(tb, Reason.COUNT_DUPLICATE) == 1
        assert model.final == [True, True, False] and self.early(tb, model) == [0, 1]
        assert len(tb.credit_out) == 3 and await tb.csr_read("ROWS", 0) == 1
        took = [c for c, _, p in tb.accepted if p.kind == 2]
        assert len(set(took)) == len(took) == 7, f"count packets taken at {took}"
        assert [c for c, _, p in tb.accepted if p == qc[0]] == [took[4] + 1], \
            "the row's chunk not a cycle behind its count"

    @hub_test()
    async def test_count_of_zero(self, dut):
        """Every source announces 0 rows for expert 2 (in one cycle): its final count 0 is
        written at once, with no flag; a row sent to it anyway is refused (COUNT_MISMATCH)."""
        tb = await self.make_tb(dut)
        r = self.row(1, 2, token=9)
        sched = [[None, self.cnt(0, 2, 0), self.cnt(1, 2, 0), self.cnt(2, 2, 0)]] + self.IDLE
        sched += self.serial(self.chunks(r, tag=1), lanes=[0, 1])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({1: 1})])
        model = await self.finish(tb)
        words = [w for _, w in tb.ctl_out]
        a = count_addr(self.cfg, model.layer_count_base, 2)
        assert words[0].kind == CtlKind.COUNT and words[0].addr == a and words[0].data == 0
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1 and await tb.csr_read("ROWS", 2) == 0
        assert self.early(tb, model) == [2]

    @hub_test()
    async def test_bad_count_packets(self, dut):
        """A count packet before START (NOT_ARMED), from a source that does not exist
        (BAD_SOURCE), for an expert that does not exist (BAD_EXPERT): each dropped, counted,
        nothing else changes."""
        tb = await self.make_tb(dut, start=False)
        await tb.send_schedule([[self.cnt(0, 0, 1)]] + self.IDLE)
        assert await self.drops(tb, Reason.NOT_ARMED) == 1
        await tb.start_layer()
        r = self.row(0, 0, token=4)
        bad = [self.cnt(self.S, 0, 1)] + ([self.cnt(0, self.E, 1)] if self.E < 1 << self.cfg.expert_bits else [])
        sched = self.serial(bad + [self.cnt(0, 0, 1), self.cnt(1, 0, 0), self.cnt(2, 0, 0)] + self.chunks(r, tag=0))
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1})])
        model = await self.finish(tb, [r])
        assert await self.drops(tb, Reason.BAD_SOURCE) == 1
        assert await self.drops(tb, Reason.BAD_EXPERT) == len(bad) - 1
        assert self.early(tb, model) == [0]

    @hub_test()
    async def test_rows_after_the_layer_finished(self, dut):
        """A layer finishes (expert 0's counts, its one row, every end-of-stream; no counts
        for the other experts, so nothing caps their grants); rows sent after it, before the
        next START, are dropped as NOT_ARMED and take nothing: ROWS stays as the layer left it.
        (Two rules keep them out of the requests the allocator counts: the layer is not live,
        and every source's end-of-stream is in with its count reached, so they are POST_EOS
        too; without both, they are granted.)"""
        tb = await self.make_tb(dut)
        r = self.row(0, 0, token=1)
        counts = [self.cnt(s, 0, int(s == 0)) for s in range(self.S)]
        sched = [counts[k:k + self.L] for k in range(0, len(counts), self.L)] + self.serial(self.chunks(r, tag=0))
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 1})])
        await self.finish(tb, [r])
        late = [self.row(1, 1, token=2), self.row(2, 1, token=3), self.row(0, self.E - 1, token=4)]
        await tb.send_schedule([[self.chunks(x, tag=1)[0] for x in late] + [None] * (self.L - len(late))] + self.IDLE)
        await self.finish(tb)
        assert await self.drops(tb, Reason.NOT_ARMED) == len(late)
        assert [await tb.csr_read("ROWS", x) for x in range(self.E)] == [1] + [0] * (self.E - 1)

    @hub_test()
    async def test_count_and_overflow_in_one_cycle(self, dut):
        """Expert 0's region holds 1 row, its counts say 2. In one cycle: a row (granted), a
        row (OVERFLOW), the last count, a row: the rows held are 1 (a refused request holds
        none), below the total, so the last row is an OVERFLOW too, not a COUNT_MISMATCH; at
        the sweep the expert is short (COUNT_MISMATCH)."""
        tb = await self.make_tb(dut, caps=[1] + [self.cfg.max_rows_per_expert] * (self.E - 1))
        a, b, c = self.row(0, 0, token=1), self.row(0, 0, token=2), self.row(1, 0, token=3)
        ca, cb, cc = self.chunks(a, tag=0), self.chunks(b, tag=1), self.chunks(c, tag=0)
        sched = self.serial([self.cnt(0, 0, 2), self.cnt(1, 0, 0)]) + [[ca[0], cb[0], self.cnt(2, 0, 0), cc[0]]]
        sched += self.serial(ca[1:] + cb[1:] + cc[1:], lanes=[0, 1, 2, 3])
        await tb.send_schedule(sched + self.IDLE + [self.eos_all({0: 2, 1: 1})])
        model = await self.finish(tb)
        assert await self.drops(tb, Reason.OVERFLOW) == 2 and await tb.csr_read("OVERFLOW", 0) == 2
        assert await self.drops(tb, Reason.COUNT_MISMATCH) == 1
        assert self.early(tb, model) == [] and await tb.csr_read("ROWS", 0) == 1

    @hub_test()
    async def test_early_flag_waits_for_its_writes(self, dut):
        """The data-write ports held: an expert's row completes and its counts are met, so its
        final count may leave, but its last partial tile's flag waits until the row's data
        writes are out (the ordering guard covers the early flag too)."""
        tb = await self.make_tb(dut)
        await self.wait_armed(tb)
        r = self.row(0, 1, token=3)
        tb.hold("wr")
        # (few cycles: the input stops once a held write is GROUP_AGE_LIMIT groups old)
        tb.offer([[self.cnt(0, 1, 1), self.cnt(1, 1, 0), self.cnt(2, 1, 0)]] + self.wide(self.chunks(r, tag=0)))
        for _ in range(200):
            await RisingEdge(dut.clk)
        kinds = [w.kind for _, w in tb.ctl_out]
        assert CtlKind.COUNT in kinds and CtlKind.FLAG not in kinds, kinds
        tb.release()
        await tb.send_schedule(self.IDLE + [self.eos_all({0: 1})])
        model = await self.finish(tb, [r])
        assert self.early(tb, model) == [1]
        flag = next(c for c, w in tb.ctl_out if w.kind == CtlKind.FLAG)
        assert flag > max(c for w in tb.wr_out for c, _, _ in w)

    # ---------------------------------------------------------------------------- random
    async def random_count_layer(self, dut, seed: int, *, n_rows: int, errors: bool):
        """One layer of random rows and count packets against the model (print the seed on
        failure: every assertion message carries it)."""
        rng = random.Random(seed)
        tb = HubTB(dut, self.cfg, seed, bp=rng.choice([0, 0.2, 0.4]))
        await tb.start()
        await tb.configure(tile_rows=rng.choice([2, 4, 8]), epoch=seed & 0xFFFF)
        await tb.start_layer()
        rows = random_rows(self.cfg, rng, n_rows, skew=rng.choice([0, 0.5]))
        feeder = CountFeeder(self.cfg, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                             p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                             count_errors=0.15 if errors else 0.0)
        tb.feed(feeder, credit_delay=rng.randrange(0, 8))
        await tb.wait_idle()
        model = await tb.check()
        assert model.done, f"layer did not finish (seed {seed})"
        if not errors:
            tb.check_invariants(model, rows)
            assert model.final == [True] * self.E, f"an expert did not end early (seed {seed})"
        else:
            bad = model.drop_counts[Reason.COUNT_MISMATCH] + model.drop_counts[Reason.COUNT_DUPLICATE]
            assert bad > 0, f"no count error was injected (seed {seed})"
        tb.stop()
        return model

    @hub_test(ms=400, random=True)
    async def test_random_counts(self, dut):
        """Random rows with count packets before and among them (clean: every expert ends
        before the end of the layer), back-pressure, idle lanes, early EOS, credit delay;
        ``seeds`` consecutive seeds from ``seed``."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + k
            cocotb.log.info(f"test_random_counts seed {seed}")
            await self.random_count_layer(dut, seed, n_rows=48, errors=False)

    @hub_test(ms=400, random=True)
    async def test_random_counts_with_errors(self, dut):
        """As test_random_counts, with wrong counts (one row off), repeated count packets,
        counts for experts out of range, and v1's bad input (duplicate chunks, ...)."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + 500 + k
            cocotb.log.info(f"test_random_counts_with_errors seed {seed}")
            await self.random_count_layer(dut, seed, n_rows=32, errors=True)

