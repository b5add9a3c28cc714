"""The hub's rules on a protocol-v1 hub: every directed test of the README's packet, CSR,
end-of-stream and watchdog rules, the constrained-random tests, the boundary-knob test and
the performance tests (throughput, latency).

Every test starts from reset, drives traffic, waits until the hub is idle, and ends with
``tb.check()``: every data write, control write, credit and status register compared with
the reference model. Clean-traffic tests also run the model-independent invariants. The
suite also runs on a hub with count packets enabled (none sent: such a hub behaves as one
without); its checks place rows in the static regions, so not on a paged or multicast hub.
"""
from __future__ import annotations

import json
import random

from cocotb.triggers import RisingEdge

from ...spec.csr_map import (CTRL_FLUSH, CTRL_START, HUB_ID, STATUS_ARMED,
                             STATUS_CLEARING, STATUS_DONE, STATUS_ERROR, STATUS_SWEEPING)
from ...spec.formats import CtlKind, Reason
from ...spec.model import HubModel, Packet
from ...spec.timing import CREDIT_LATENCY, FLAG_LATENCY, WRITE_LATENCY
from ..knobs import KnobFeeder, draw_knobs
from ..traffic import LaneFeeder, random_rows
from .context import MULTICAST, PAGED
from .env import HubTB
from .library import HubTests, hub_test


class RuleTests(HubTests):
    """See the module docstring."""

    excludes = frozenset({PAGED, MULTICAST})
    #: watchdog of the knob layers that end by it (long enough that random stalls never fire it)
    KNOB_TIMEOUT = 600

    @property
    def KNOB_PACKETS(self) -> int:
        """Packets per knob layer: the fast set runs one small layer; the coverage run raises it."""
        return self.ctx.knob_packets

    @property
    def FULL_REGION(self) -> bool:
        """Fill a whole region (max_rows_per_expert rows; the coverage run: ~4k packets on
        tiny, 459k on deepseek-v3), else a programmed capacity."""
        return self.ctx.full_region

    @property
    def ALL_TILE_SIZES(self) -> bool:
        """Tile sizes whose boundary test runs: every size in the coverage run (and on
        configs where three tiles of the largest size are cheap), else the smallest."""
        cfg = self.cfg
        return self.ctx.tile_sizes == "all" or 3 * cfg.max_tile_rows * cfg.chunks_per_row <= 4096

    # ---------------------------------------------------------------------------- directed
    @hub_test()
    async def test_csr_registers(self, dut):
        """ID/PARAMS constants, read-back of rw registers (multi-word too), write clamps."""
        tb = await self.make_tb(dut, start=False)
        assert await tb.csr_read("ID") == HUB_ID
        assert await tb.csr_read("PARAMS") == tb.map.params_word()
        base = (0x12345678 << 4) % (1 << self.cfg.addr_bits)
        await tb.csr_write("REGION_BASE", base, self.cfg.experts - 1)
        assert await tb.csr_read("REGION_BASE", self.cfg.experts - 1) == base
        await tb.csr_write("TIMEOUT", 0xDEAD)
        assert await tb.csr_read("TIMEOUT") == 0xDEAD
        await tb.csr_write("TILE_ROWS_LOG2", 0)
        assert await tb.csr_read("TILE_ROWS_LOG2") == self.cfg.min_tile_rows.bit_length() - 1
        await tb.csr_write("TILE_ROWS_LOG2", 31)
        assert await tb.csr_read("TILE_ROWS_LOG2") == self.cfg.max_tile_rows.bit_length() - 1
        await tb.csr_write("REGION_CAP", (1 << self.cfg.cap_bits) - 1, 0)
        assert await tb.csr_read("REGION_CAP", 0) == self.cfg.max_rows_per_expert
        assert await tb.csr_read("STATUS") & STATUS_ARMED == 0
        if tb.map.size_words < (1 << tb.map.addr_bits):
            assert await tb.csr_read_raw(tb.map.size_words) == 0
        await self.finish(tb)

    @hub_test()
    async def test_single_row(self, dut):
        """One row, chunks in order on lane 0: writes, metadata, credit, partial tile flagged
        at the end-of-layer sweep, final counts, done word, layer_done pulse."""
        tb = await self.make_tb(dut)
        r = self.row(1, self.cfg.experts - 1, token=5, slot=1)
        await tb.send_schedule(self.serial(self.chunks(r, tag=2) + self.eos_all({1: 1})))
        model = await self.finish(tb, [r])
        assert [c.kind for _, c in tb.ctl_out][-1] == CtlKind.DONE
        assert len(tb.layer_done_cycles) == 1
        assert model.done and await tb.csr_read("STATUS") & STATUS_DONE

    @hub_test()
    async def test_chunks_of_one_row_on_all_lanes(self, dut):
        """The chunks of one row arrive in one or two cycles on every lane, in reverse and
        scrambled order; the first to arrive (any index, any lane) allocates the row."""
        tb = await self.make_tb(dut)
        r1, r2 = self.row(0, 0, token=1), self.row(0, 0, token=2)
        c = self.cfg.chunks_per_row
        rev = self.chunks(r1, tag=0, order=range(c - 1, -1, -1))
        scr = self.chunks(r2, tag=1, order=[(k * 5 + 3) % c for k in range(c)])
        await tb.send_schedule(self.wide(rev) + self.wide(scr) + self.wide(self.eos_all({0: 2})))
        await self.finish(tb, [r1, r2])

    @hub_test()
    async def test_same_expert_all_lanes(self, dut):
        """Every lane opens a new row of the same expert in the same cycle: distinct, dense
        rows in lane order; then the rows complete in the same cycles on all lanes."""
        tb = await self.make_tb(dut)
        L = self.cfg.lanes
        ids = [(s, t) for s in range(self.cfg.sources) for t in range(self.cfg.tags_per_source)][:L]
        rows = [self.row(s, 0, token=t) for s, t in ids]
        streams = [self.chunks(r, tag=t) for r, (s, t) in zip(rows, ids)]
        sched = [[streams[j][c] for j in range(L)] for c in range(self.cfg.chunks_per_row)]
        counts = {}
        for s, _ in ids:
            counts[s] = counts.get(s, 0) + 1
        await tb.send_schedule(sched + self.wide(self.eos_all(counts)))
        model = await self.finish(tb, rows)
        metas = [c for _, c in tb.ctl_out if c.kind == CtlKind.META]
        got_rows = [((m.addr - model.layer_meta_base) // self.cfg.meta_word_bytes) % self.cfg.max_rows_per_expert
                    for m in metas]
        assert got_rows == list(range(L)), f"rows in lane order expected, got {got_rows}"

    @hub_test()
    async def test_tiles_and_last_partial_tile(self, dut):
        """Tile flags exactly once when the tile's last row completes, the last partial tile at
        the sweep; a second layer with another tile size and epoch needs no counter clear."""
        tb = await self.make_tb(dut)
        tr = self.cfg.tile_rows
        n = 2 * tr + tr // 2
        rows = [self.row(k % self.cfg.sources, 1 % self.cfg.experts, token=k) for k in range(n)]
        feeder = LaneFeeder(self.cfg, rows, random.Random(self.seed))
        tb.feed(feeder)
        await self.finish(tb, rows)
        flags = [c for _, c in tb.ctl_out if c.kind == CtlKind.FLAG]
        assert len(flags) == 3 and all(f.data == 1 for f in flags)
        # layer 2: smallest tiles, epoch 2
        await tb.csr_write("EPOCH", 2)
        await tb.csr_write("TILE_ROWS_LOG2", self.cfg.min_tile_rows.bit_length() - 1)
        before = len(tb.ctl_out)
        await tb.start_layer()
        assert not (await tb.csr_read("STATUS") & 0x2), "a clean layer must not need a counter clear"
        rows2 = [self.row(k % self.cfg.sources, 0, token=100 + k) for k in range(3 * self.cfg.min_tile_rows + 1)]
        tb.feed(LaneFeeder(self.cfg, rows2, random.Random(self.seed + 1)))
        await tb.wait_idle()
        await tb.check()
        flags2 = [c for _, c in tb.ctl_out[before:] if c.kind == CtlKind.FLAG]
        assert len(flags2) == 4 and all(f.data == 2 for f in flags2)

    @hub_test()
    async def test_region_overflow(self, dut):
        """Rows beyond an expert's capacity are dropped whole (counted per expert), their
        credits still return, and no other row is touched."""
        cap = 3
        caps = [self.cfg.max_rows_per_expert] * self.cfg.experts
        caps[0] = cap
        tb = await self.make_tb(dut, caps=caps)
        rows = [self.row(k % self.cfg.sources, 0, token=k) for k in range(cap + 2)]
        if self.cfg.experts > 1:
            rows += [self.row(1, self.cfg.experts - 1, token=50 + k) for k in range(2)]
        tb.feed(LaneFeeder(self.cfg, rows, random.Random(self.seed)))
        model = await self.finish(tb, invariants=False)
        assert model.overflow[0] == 2 and model.drop_counts[Reason.OVERFLOW] == 2
        assert await tb.csr_read("OVERFLOW", 0) == 2
        assert len(tb.credit_out) == len(rows)
        assert model.rows[0] == cap

    @hub_test()
    async def test_bad_fields(self, dut):
        """Out-of-range expert (row dropped, chunks absorbed, credit returned), source, tag and
        chunk index (packets dropped) among good rows, which are unharmed."""
        tb = await self.make_tb(dut)
        good = [self.row(0, 0, token=1), self.row(2, self.cfg.experts - 1, token=2)]
        bad_expert = self.row(1, self.cfg.experts, token=3)   # expert id one past the last
        pk = self.chunks(good[0], 0)[:3] + self.chunks(bad_expert, 1)[:2] + self.chunks(good[0], 0)[3:]
        pk += [Packet(src=self.cfg.sources, tag=0, expert=0, chunk=0),          # bad source
               Packet(src=0, tag=self.cfg.tags_per_source, expert=0, chunk=0),  # bad tag
               Packet(src=2, tag=2, expert=self.cfg.experts - 1, chunk=self.cfg.chunks_per_row)]  # bad chunk
        pk += self.chunks(good[1], 2) + self.chunks(bad_expert, 1)[2:]
        await tb.send_schedule(self.serial(pk, lanes=list(range(self.cfg.lanes)))
                               + self.wide(self.eos_all({0: 1, 1: 1, 2: 1})))
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.BAD_EXPERT], d[Reason.BAD_SOURCE], d[Reason.BAD_CHUNK]) == (1, 2, 1)
        assert sorted(tb.credit_out[k][1:] for k in range(3)) == [(0, 0), (1, 1), (2, 2)]

    @hub_test()
    async def test_duplicate_and_protocol(self, dut):
        """Duplicate chunks (a later cycle; two lanes in one cycle; after the row completed in
        the same cycle) and a chunk naming another expert are dropped and counted."""
        tb = await self.make_tb(dut)
        r = self.row(0, 0, token=7)
        c = self.chunks(r, 1)
        bad_e = Packet(src=0, tag=1, expert=1 % self.cfg.experts if self.cfg.experts > 1 else 0, token=7,
                       chunk=1, data=0)
        C, L = self.cfg.chunks_per_row, self.cfg.lanes
        sched = [[c[0]], [c[0]], [c[1], c[1], bad_e]]                    # dup later, dup same cycle
        middle = c[2:C - 1]
        sched += [middle[k:k + L] for k in range(0, len(middle), L)]
        sched += [[c[C - 1], c[3]]]                      # completes the row, then a dup of it
        await tb.send_schedule(sched + self.wide(self.eos_all({0: 1})))
        model = await self.finish(tb)
        d = model.drop_counts
        exp_prot = 1 if self.cfg.experts > 1 else 0
        assert d[Reason.DUPLICATE] == 3 + (1 - exp_prot) and d[Reason.PROTOCOL] == exp_prot, d
        assert len(tb.credit_out) == 1

    @hub_test()
    async def test_completion_in_one_cycle_with_bad_chunks(self, dut):
        """Whether a row completes in a cycle, with other chunks of it in the same cycle that
        do not count: the last missing chunk arrives on one lane while another lane carries
        the other missing chunk under the wrong expert (PROTOCOL: the row stays open until
        that chunk comes right); and a row completed by one lane while a later lane repeats
        that chunk under the wrong expert (DUPLICATE: the row was already full)."""
        tb = await self.make_tb(dut)
        assert self.cfg.lanes >= 2 and self.cfg.chunks_per_row >= 3
        C = self.cfg.chunks_per_row
        a, b = self.row(0, 0, token=1), self.row(1, 1 % self.cfg.experts, token=2)
        pa, pb = self.chunks(a, 0), self.chunks(b, 0)

        def wrong(p):       # another expert (out of range if the hub has one): not the row's
            return Packet(src=p.src, tag=p.tag, expert=(p.expert + 1) % (1 << self.cfg.expert_bits),
                          token=p.token, chunk=p.chunk, data=p.data)
        await tb.send_schedule(self.wide(pa[:C - 2] + pb[:C - 1]))
        await tb.send_schedule([[wrong(pa[C - 2]), pa[C - 1]], [pb[C - 1], wrong(pb[C - 1])]])
        await tb.send_schedule([[pa[C - 2]]] + self.wide(self.eos_all({0: 1, 1: 1})))
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.PROTOCOL], d[Reason.DUPLICATE]) == (1, 1), d
        assert len(tb.credit_out) == 2 and model.done

    @hub_test()
    async def test_end_of_stream_rules(self, dut):
        """EOS may overtake rows; a row beyond the EOS count is dropped (POST_EOS) and does not
        count; a duplicate EOS is ignored; an EOS count below the rows received is flagged."""
        tb = await self.make_tb(dut)
        a1, a2 = self.row(0, 0, token=1), self.row(0, 0, token=2)
        b1, b2 = self.row(1, 0, token=1), self.row(1, 0, token=2)
        extra = self.row(0, 0, token=3)
        pk = [Packet.eos(0, 2)] + self.chunks(a1, 0) + self.chunks(b1, 0) + self.chunks(b2, 1)
        pk += [Packet.eos(1, 1)]                       # b has already sent 2 rows: mismatch
        pk += self.chunks(a2, 1) + [Packet.eos(0, 2)]       # duplicate EOS
        pk += self.chunks(extra, 2)                         # after a's EOS count is reached
        pk += [Packet.eos(s, 0) for s in range(2, self.cfg.sources)]
        await tb.send_schedule(self.serial(pk, lanes=[0, 1]))
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.EOS_MISMATCH], d[Reason.EOS_DUPLICATE], d[Reason.POST_EOS]) == (1, 1, 1), d
        assert model.rows[0] == 4 and model.done

    @hub_test()
    async def test_eos_and_rows_in_one_cycle(self, dut):
        """An end-of-stream takes effect at the end of its cycle: rows of the same source that
        open in that cycle, on lanes before and after it, still count; with them the source
        has more rows than its count, which is an EOS_MISMATCH (no row is dropped)."""
        tb = await self.make_tb(dut)
        r0, r1 = self.row(0, 0, token=1), self.row(0, 1 % self.cfg.experts, token=2)
        p0, p1 = self.chunks(r0, 0), self.chunks(r1, 1)
        pad = [None] * (self.cfg.lanes - 3)
        await tb.send_schedule([[p0[0], Packet.eos(0, 1), p1[0]] + pad])
        await tb.send_schedule(self.serial(p0[1:] + p1[1:]))
        await tb.send_schedule(self.wide([Packet.eos(s, 0) for s in range(1, self.cfg.sources)]))
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.POST_EOS], d[Reason.EOS_MISMATCH]) == (0, 1), d
        assert model.src_rows[0] == 2 and model.done

    @hub_test()
    async def test_rows_right_after_eos(self, dut):
        """Rows in the cycles right after their source's EOS (the hub checks them against a
        count it has not finished folding in): sources 0 and 1 each open one row in the EOS's
        cycle and two in the next, source 2 one row two cycles after its EOS and two in the
        next; each count is 2, so the first of the two counts and the second is dropped as
        POST_EOS (and, completing, does not hold the layer open)."""
        tb = await self.make_tb(dut)
        assert self.cfg.lanes >= 4 and self.cfg.sources >= 3 and self.cfg.tags_per_source >= 3
        rows = {(s, t): self.row(s, (s + t) % self.cfg.experts, token=10 * s + t) for s in (0, 1, 2) for t in range(3)}
        pk = {key: self.chunks(r, key[1]) for key, r in rows.items()}
        pad = [None] * (self.cfg.lanes - 4)
        await tb.send_schedule([
            [Packet.eos(2, 2), None, None, None] + pad,
            [pk[0, 0][0], Packet.eos(0, 2), pk[1, 0][0], Packet.eos(1, 2)] + pad,
            [pk[0, 1][0], pk[0, 2][0], pk[1, 1][0], pk[1, 2][0]] + pad,
            [pk[2, 0][0], None, None, None] + pad,
            [pk[2, 1][0], pk[2, 2][0], None, None] + pad])
        await tb.send_schedule(self.wide([p for key in rows for p in pk[key][1:]]))
        await tb.send_schedule(self.wide([Packet.eos(s, 0) for s in range(3, self.cfg.sources)]))
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.POST_EOS], d[Reason.EOS_MISMATCH]) == (3, 0), d
        assert model.src_rows[:3] == [2, 2, 2] and model.done

    @hub_test()
    async def test_junk_in_the_finishing_cycle(self, dut):
        """The cycle that completes a layer's last row also opens a row past its source's EOS
        count (POST_EOS): that row holds the layer open until it completes; the layer is
        finished at the end of that cycle, so a packet in the very next cycle is NOT_ARMED."""
        tb = await self.make_tb(dut)
        a, junk = self.row(0, 0, token=1), self.row(0, 0, token=2)
        pa, pj = self.chunks(a, 0), self.chunks(junk, 1)
        await tb.send_schedule(self.wide(self.eos_all({0: 1})))
        await tb.send_schedule(self.serial(pa[:-1]))
        pad = [None] * (self.cfg.lanes - 2)
        sched = [[pa[-1], pj[0]] + pad] + self.serial(pj[1:]) + [[Packet.eos(0, 1), None] + pad]
        await tb.send_schedule(sched)
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.POST_EOS], d[Reason.NOT_ARMED], d[Reason.EOS_DUPLICATE]) == (1, 1, 0), d
        assert model.done

    @hub_test()
    async def test_full_queues_hold_the_input(self, dut):
        """The control port, then the credit port, then the write ports are held not ready
        while one source sends many rows on one tag (each completes, so each returns a credit,
        as a source that ignores credits would): the event queue, the credit queue, the write
        FIFOs fill; the hub stops accepting input rather than lose an event, a credit or a
        write, and everything comes out in order once the port lets go."""
        tb = await self.make_tb(dut, tile_rows=self.cfg.min_tile_rows)
        n = max(self.cfg.event_queue_depth, self.cfg.credit_queue_depth) + 8
        for layer, sink in enumerate(("ctl", "credit", "wr")):
            if layer:
                await tb.start_layer()
            while (await tb.csr_read("STATUS")) & (STATUS_ARMED | STATUS_CLEARING) != STATUS_ARMED:
                pass                                      # (the counters are cleared first)
            rows = [self.row(0, k % self.cfg.experts, token=k, seed=layer) for k in range(n)]
            before = len(tb.accepted)
            tb.hold(sink)
            tb.offer(self.wide([p for r in rows for p in self.chunks(r, 0)]))
            for _ in range(n * self.cfg.chunks_per_row // self.cfg.lanes + 50):
                await RisingEdge(dut.clk)
            accepted = len(tb.accepted) - before
            assert 0 < accepted < n * self.cfg.chunks_per_row, f"{sink}: input not held back ({accepted})"
            tb.release()
            await tb.send_schedule(self.wide(self.eos_all({0: n})))
            model = await self.finish(tb)
            assert len(model.credits) == n * (layer + 1) and model.done

    @hub_test()
    async def test_watchdog_flush(self, dut):
        """A row that never completes and a source that never sends EOS: the watchdog flushes
        the layer (INCOMPLETE, TIMEOUT), its tile is never flagged, and the next layer works."""
        tb = await self.make_tb(dut, timeout=300)
        ok, broken = self.row(0, 0, token=1), self.row(1, 0, token=2)
        await tb.send_schedule(self.serial(self.chunks(ok, 0) + self.chunks(broken, 0)[:-1] + [Packet.eos(0, 1)]))
        await tb.wait_done()
        tb.note_timeout()
        model = await self.finish(tb)
        d = model.drop_counts
        assert d[Reason.INCOMPLETE] == 1 and d[Reason.TIMEOUT] == 1
        assert not any(c.kind == CtlKind.FLAG for _, c in tb.ctl_out), "incomplete tile was flagged"
        # next layer, after a counter clear
        await tb.clear_errors()
        await tb.start_layer()
        rows = [self.row(k % self.cfg.sources, k % self.cfg.experts, token=10 + k) for k in range(6)]
        tb.feed(LaneFeeder(self.cfg, rows, random.Random(self.seed)))
        await self.finish(tb)

    @hub_test()
    async def test_flush_and_abort(self, dut):
        """CTRL.FLUSH ends a layer with rows in flight; CTRL.START during a layer abandons it;
        both leave a hub that runs the next layer exactly."""
        tb = await self.make_tb(dut)
        r = self.row(0, 0, token=1)
        await tb.send_schedule(self.serial(self.chunks(r, 0)[:3]))
        await tb.wait_idle()
        await tb.flush()
        await tb.wait_done()
        await self.finish(tb)
        await tb.start_layer()
        await tb.send_schedule(self.serial(self.chunks(self.row(1, 0, token=4), 1)[:2]))
        await tb.wait_idle()
        await tb.start_layer()                         # abort the layer in flight
        rows = [self.row(k % self.cfg.sources, k % self.cfg.experts, token=20 + k) for k in range(5)]
        tb.feed(LaneFeeder(self.cfg, rows, random.Random(self.seed)))
        await self.finish(tb)

    @hub_test()
    async def test_packets_when_not_armed(self, dut):
        """Packets before START and after the layer ended are dropped as NOT_ARMED."""
        tb = await self.make_tb(dut, start=False)
        r = self.row(0, 0, token=1)
        await tb.send_schedule(self.serial(self.chunks(r, 0)[:2] + [Packet.eos(0, 0)]))
        await tb.start_layer()
        await tb.send_schedule(self.wide(self.eos_all({})))
        await tb.send_schedule(self.serial(self.chunks(r, 0)[:2]))
        model = await self.finish(tb)
        assert model.drop_counts[Reason.NOT_ARMED] == 2

    @hub_test()
    async def test_reset_mid_stream(self, dut):
        """Reset while packets stream in: after reset the hub is disarmed with defaults, and
        after reconfiguration a new layer is exact (no stale row, count or flag)."""
        tb = await self.make_tb(dut)
        rng = random.Random(self.seed)
        rows = random_rows(self.cfg, rng, 20)
        tb.feed(LaneFeeder(self.cfg, rows, rng))
        for _ in range(40):
            await RisingEdge(dut.clk)
        tb.stop_traffic()
        await tb.reset()
        assert await tb.csr_read("STATUS") == 0
        await tb.configure(epoch=9)
        await tb.start_layer()
        rows2 = random_rows(self.cfg, rng, 12)
        tb.feed(LaneFeeder(self.cfg, rows2, rng))
        await self.finish(tb, rows2)

    # ---------------------------------------------------------------------------- random
    async def random_layer(self, dut, seed, *, n_rows, bp, idle, early_eos, errors=False,
                           tile_rows=None, skew=0.0):
        rng = random.Random(seed)
        tb = HubTB(dut, self.cfg, seed, bp=bp)
        await tb.start()
        await tb.configure(tile_rows=tile_rows or self.cfg.min_tile_rows, epoch=seed & 0xFFFF)
        await tb.start_layer()
        rows = random_rows(self.cfg, rng, n_rows, skew=skew)
        feeder = LaneFeeder(self.cfg, rows, rng, idle=idle, early_eos=early_eos,
                            errors=0.15 if errors else 0.0)
        tb.feed(feeder, credit_delay=rng.randrange(0, 8))
        await tb.wait_idle()
        model = await tb.check()
        tb.check_invariants(model, rows)
        assert model.done, f"layer did not finish (seed {seed})"
        if errors:
            assert sum(model.drop_counts) > 0, f"no bad input was injected (seed {seed})"
        tb.stop()

    def _rows_for_random(self):
        return min(max(24, 2400 // self.cfg.chunks_per_row), self.cfg.max_rows_per_expert)

    @hub_test(ms=200, random=True)
    async def test_random_clean(self, dut):
        """Constrained-random MoE traffic, clean: random sources/experts/chunk order/lanes,
        idle cycles, back-pressure on every output, early EOS, credit delay."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + k
            rng = random.Random(seed)
            await self.random_layer(dut, seed, n_rows=self._rows_for_random(), bp=rng.choice([0, 0.2, 0.5]),
                               idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                               skew=rng.choice([0, 0.5, 0.9]))

    @hub_test(ms=200, random=True)
    async def test_random_with_errors(self, dut):
        """Constrained-random traffic with bad input mixed in (duplicate chunks, chunks naming
        another expert, unknown sources, chunk indices out of range, second EOS): every row
        still arrives intact and the model predicts every drop, write, flag and counter."""
        for k in range(self.seeds):
            seed = self.seed * 1000 + 500 + k
            rng = random.Random(seed)
            await self.random_layer(dut, seed, n_rows=self._rows_for_random() // 2, bp=rng.choice([0, 0.3]),
                               idle=0.2, early_eos=True, errors=True)

    # ---------------------------------------------------------------------------- performance
    async def saturate(self, dut, same_expert: bool, seed: int):
        tb = HubTB(dut, self.cfg, seed)
        await tb.start()
        await tb.configure(tile_rows=self.cfg.min_tile_rows)
        await tb.start_layer()
        rng = random.Random(seed)
        n = min(max(64, 6000 // self.cfg.chunks_per_row), self.cfg.max_rows_per_expert)
        rows = random_rows(self.cfg, rng, n, experts=[0] if same_expert else None)
        tb.feed(LaneFeeder(self.cfg, rows, rng, idle=0.0, max_active=self.cfg.tags_per_source))
        await tb.wait_idle()
        model = await tb.check()
        tb.check_invariants(model, rows)
        data = [(c, j) for c, j, p in tb.accepted if p.kind == 0]
        first, last = data[0][0], data[-1][0]
        rate = len(data) / (last - first + 1)
        lat_wr = self.write_latency(tb)
        lat_flag = self.flag_latency(tb)
        dut._log.info(f"PERF config={self.cfg.name} same_expert={same_expert} packets={len(data)} "
                      f"cycles={last - first + 1} rate={rate:.3f}/cycle ({rate / self.cfg.lanes:.3f} x lanes) "
                      f"write_latency={lat_wr} flag_latency={lat_flag}")
        self._perf_report(dict(config=self.cfg.name, same_expert=same_expert, packets=len(data),
                          cycles=last - first + 1, rate=rate, lanes=self.cfg.lanes,
                          write_latency=lat_wr, flag_latency=lat_flag))
        assert rate >= 0.95 * self.cfg.lanes, f"throughput {rate:.3f} < 0.95 x {self.cfg.lanes} lanes (seed {seed})"
        return tb

    def write_latency(self, tb):
        """(min, max) cycles from a data packet's acceptance to its write leaving the hub
        (clean traffic: every data packet writes, in acceptance order per lane)."""
        lat = []
        for j in range(self.cfg.lanes):
            acc = [c for c, lane, p in tb.accepted if lane == j and p.kind == 0]
            assert len(acc) == len(tb.wr_out[j]), "clean traffic: one write per data packet"
            lat += [w[0] - a for a, w in zip(acc, tb.wr_out[j])]
        return (min(lat), max(lat)) if lat else None

    def flag_latency(self, tb):
        """(min, max) cycles from the acceptance of the packet that completed a tile to the
        tile's flag write (tiles flagged during the layer, not at the sweep)."""
        model = HubModel(self.cfg)
        ready_at = {}
        for cyc, _, kind, args in sorted(tb.log, key=lambda e: (e[0], e[2] != "packet", e[1])):
            if kind == "packet":
                pkt, lane, c = args
                fx = model.packet(pkt, lane, c)
                if fx.tile_ready:
                    ready_at[fx.ctl[-1].addr] = c
            elif kind == "csr":
                model.write_addr(*args)
            elif kind == "reset":
                model.reset()
        lat = [cyc - ready_at[c.addr] for cyc, c in tb.ctl_out if c.kind == CtlKind.FLAG and c.addr in ready_at]
        return (min(lat), max(lat)) if lat else None

    def _perf_report(self, d: dict):
        """Append ``d`` as a JSON line to the run's ``perf_out`` file, if it names one."""
        if self.ctx.perf_out:
            with open(self.ctx.perf_out, "a") as f:
                f.write(json.dumps(d) + "\n")

    @hub_test(ms=200)
    async def test_throughput_random_experts(self, dut):
        """Saturating random traffic, no back-pressure: >= 0.95 x lanes packets per cycle."""
        await self.saturate(dut, same_expert=False, seed=self.seed)

    @hub_test(ms=200)
    async def test_throughput_same_expert(self, dut):
        """Saturating traffic where every lane targets the same expert every cycle."""
        tb = await self.saturate(dut, same_expert=True, seed=self.seed + 7)
        lo, hi = self.write_latency(tb)
        assert lo == WRITE_LATENCY, \
            f"packet-in -> write-out latency {lo}..{hi}, designed {WRITE_LATENCY} without stalls"

    @hub_test()
    async def test_latency(self, dut):
        """Design latencies with nothing queued: packet in -> data write out WRITE_LATENCY
        cycles; a row's last chunk -> its credit out CREDIT_LATENCY cycles; the last chunk of a
        tile's last row -> the tile's flag FLAG_LATENCY cycles (see moehub.spec.timing)."""
        tb = await self.make_tb(dut, tile_rows=self.cfg.min_tile_rows)
        rows = [self.row(k % self.cfg.sources, 0, token=k) for k in range(self.cfg.min_tile_rows)]
        tags = {}
        pk = []
        for r in rows:
            tags[r.src] = tags.get(r.src, -1) + 1
            assert tags[r.src] < self.cfg.tags_per_source, "one tile of rows must fit the tags"
            pk += self.chunks(r, tags[r.src])
        last = pk.pop()
        await tb.send_schedule(self.wide(pk))
        await tb.wait_idle()
        await tb.send_schedule([[last]])
        await tb.wait_idle()
        acc = tb.accepted[-1][0]
        flags = [cyc for cyc, c in tb.ctl_out if c.kind == CtlKind.FLAG]
        writes = [cyc for cyc, _, _ in tb.wr_out[0]]
        assert writes[-1] - acc == WRITE_LATENCY, f"write latency {writes[-1] - acc}"
        assert flags and flags[-1] - acc == FLAG_LATENCY, f"flag latency {flags[-1] - acc if flags else None}"
        credits = [cyc for cyc, _, _ in tb.credit_out]
        assert credits[-1] - acc == CREDIT_LATENCY, f"credit latency {credits[-1] - acc}"
        await tb.send_schedule(self.wide(self.eos_all(self._counts(rows))))
        await self.finish(tb, rows)

    def junk(self, rng, n=4):
        """Packets for a hub that is not armed: chunk index first/middle/last and an EOS."""
        C = self.cfg.chunks_per_row
        pk = [Packet(src=rng.randrange(self.cfg.sources), tag=rng.randrange(self.cfg.tags_per_source),
                     expert=rng.randrange(self.cfg.experts), chunk=c) for c in (0, C // 2, C - 1)]
        return (pk + [Packet.eos(rng.randrange(self.cfg.sources), rng.randrange(3))])[:n]

    async def until_offered(self, tb, feeder, fraction):
        """Wait until ``fraction`` of the layer's packets were offered (or the feeder is done)."""
        while feeder.n_offered < fraction * feeder.expected and not feeder.done():
            await RisingEdge(tb.dut.clk)

    async def end_knob_layer(self, tb, k, feeder, rng):
        """End the layer the way ``k.ending`` says (see moehub.verif.knobs.ENDINGS): by its
        counts; or, at a random point (or once the sources stop, for a source that never sends
        its EOS), by FLUSH / START written while packets stream in or on a quiet hub, or by the
        watchdog."""
        how = k.ending
        if how == "eos" or how.startswith("missing_eos"):
            await tb.wait_idle()
        else:
            await self.until_offered(tb, feeder, rng.uniform(0.2, 0.9))
        if how.endswith("_traffic"):           # the CTRL write lands while packets stream in
            await tb.csr_write("CTRL", CTRL_FLUSH if how.startswith("flush") else CTRL_START)
            for _ in range(rng.randrange(5, 40)):
                await RisingEdge(tb.dut.clk)
        if how == "eos":
            return
        tb.stop_sources()
        await tb.wait_idle()
        if how in ("flush_idle", "missing_eos_flush", "abort_traffic"):
            await tb.flush()
        elif how in ("abort_idle", "missing_eos_abort"):
            await tb.start_layer()
            await tb.send_schedule(self.wide(self.eos_all({})))
        await tb.wait_done()
        if how.endswith("watchdog"):
            tb.note_timeout()

    async def knob_layer(self, dut, seed: int, max_packets: int):
        """One layer drawn by draw_knobs(seed): configured, fed, ended, checked against the model
        (and, for clean traffic that ended by its counts, the invariants)."""
        rng = random.Random(seed)
        k = draw_knobs(self.cfg, rng, max_packets, full_region=rng.random() < 0.25 and
                       self.cfg.max_rows_per_expert * self.cfg.chunks_per_row <= 2 * max_packets)
        tb = HubTB(dut, self.cfg, seed, bp=k.bp)
        dut._log.info(f"knob layer seed={seed}: {k.describe()}")
        await tb.start()
        watchdog = "watchdog" in k.ending
        await tb.configure(caps=k.caps, tile_rows=k.tile_rows, epoch=seed & 0xFFFF,
                           timeout=self.KNOB_TIMEOUT if watchdog else 0)
        if k.junk_before:
            await tb.send_schedule(self.serial(self.junk(rng)))
        await tb.start_layer()
        feeder = KnobFeeder(self.cfg, k, rng)
        tb.feed(feeder, credit_delay=k.credit_delay)
        await self.end_knob_layer(tb, k, feeder, rng)
        await tb.wait_idle()
        model = await tb.check()
        if k.junk_after and model.done:
            tb.stop_sources()                   # (a schedule is offered only without a feeder)
            await tb.send_schedule(self.serial(self.junk(rng), lanes=list(range(self.cfg.lanes))))
            await tb.wait_idle()
            await tb.check()
        tb.stop()
        return model

    @hub_test(ms=2000, random=True)
    async def test_random_knobs(self, dut):
        """Constrained-random layers with boundary knobs (verif/knobs.py): every tile size,
        capacities at / near / below the rows sent, chunk orders sending the first or last
        index first or last, every kind of bad input anywhere in the layer, short EOS counts,
        bursts of rows on one expert, and endings by counts, FLUSH or START (with or without
        traffic) and the watchdog. The reference model checks everything; the seed and the
        knobs are logged."""
        for n in range(self.seeds):
            seed = self.seed * 1000 + 700 + n
            try:
                await self.knob_layer(dut, seed, self.KNOB_PACKETS)
            except AssertionError as e:
                raise AssertionError(f"{e} (knob seed {seed}: run seed {self.seed}, layer {n})") from e

    @hub_test()
    async def test_errors_sticky_until_clear(self, dut):
        """ERRORS keeps a bit per reason, and STATUS.ERROR, across a START (which resets
        DROPS) until CTRL.CLEAR_ERRORS, which clears them and nothing else."""
        tb = await self.make_tb(dut)
        C = self.cfg.chunks_per_row
        await tb.send_schedule(self.serial([Packet(src=0, tag=0, chunk=C), Packet(src=self.cfg.sources, chunk=0)]))
        await tb.send_schedule(self.wide(self.eos_all({})))
        await self.finish(tb)
        want = (1 << Reason.BAD_CHUNK) | (1 << Reason.BAD_SOURCE)
        assert await tb.csr_read("ERRORS") == want and await tb.csr_read("STATUS") & STATUS_ERROR
        await tb.start_layer()
        await self.wait_armed(tb)
        assert await tb.csr_read("DROPS", Reason.BAD_CHUNK) == 0, "DROPS not reset at START"
        assert await tb.csr_read("ERRORS") == want, "ERRORS must stay until CLEAR_ERRORS"
        r = self.row(1, 0, token=3)
        await tb.send_schedule(self.serial(self.chunks(r, 0)[:2]))
        await tb.clear_errors()
        assert await tb.csr_read("ERRORS") == 0 and not await tb.csr_read("STATUS") & STATUS_ERROR
        assert await tb.csr_read("INFLIGHT") == 1, "CLEAR_ERRORS touched the layer"
        await tb.send_schedule(self.serial(self.chunks(r, 0)[2:]) + self.wide(self.eos_all({1: 1})))
        await self.finish(tb)

    @hub_test()
    async def test_status_clearing_sweeping_and_the_sweep(self, dut):
        """STATUS.CLEARING while the counters are swept after a FLUSH; STATUS.SWEEPING (not
        ARMED, not DONE) while the end-of-layer sweep waits for the control port; a packet in
        the sweep is NOT_ARMED, a FLUSH in the sweep is ignored, a START in the sweep waits for
        it (its done word still goes out) and then arms the next layer, with no clearing sweep
        after a layer that ended by its counts."""
        tb = await self.make_tb(dut)
        await tb.send_schedule(self.serial(self.chunks(self.row(0, 0), 0)[:2]))
        await tb.wait_idle()
        await tb.flush()
        await tb.wait_done()
        await tb.start_layer()                               # dirty counters: clearing sweep
        seen = 0
        while (st := await tb.csr_read("STATUS")) & (STATUS_ARMED | STATUS_CLEARING) != STATUS_ARMED:
            seen |= st
        assert seen & STATUS_CLEARING, "STATUS.CLEARING never seen after a flushed layer"
        r = self.row(1, self.cfg.experts - 1, token=1)
        await tb.send_schedule(self.serial(self.chunks(r, 0)))
        await tb.wait_idle()
        tb.hold("ctl")                          # (a layer ends once its events have drained)
        await tb.send_schedule(self.wide(self.eos_all({1: 1})))
        await self.idle_cycles(tb, 20)
        st = await tb.csr_read("STATUS")
        assert st & STATUS_SWEEPING and not st & (STATUS_ARMED | STATUS_DONE), f"STATUS {st:#x} in the sweep"
        await tb.send_schedule(self.serial([self.chunks(self.row(2, 0, token=9), 0)[0]]))    # NOT_ARMED
        await tb.flush()                                                     # ignored
        await tb.start_layer()                                               # waits for the sweep
        assert not await tb.csr_read("STATUS") & STATUS_ARMED
        tb.release()
        seen = 0
        while (st := await tb.csr_read("STATUS")) & (STATUS_ARMED | STATUS_CLEARING) != STATUS_ARMED:
            seen |= st
        # (layer 2 ended by its counts, so its counters are back at zero: no clearing sweep;
        # found by mutation testing, a tracker that swept before every layer passed)
        assert not seen & STATUS_CLEARING, "a clearing sweep after a clean layer"
        await tb.send_schedule(self.wide(self.eos_all({})))
        model = await self.finish(tb)
        assert [r for r, _ in model.drops] == [Reason.NOT_ARMED]
        dones = [c for _, c in tb.ctl_out if c.kind == CtlKind.DONE]
        assert len(dones) == 3 == len(tb.layer_done_cycles), "a done word was lost"

    @hub_test()
    async def test_layer_registers_latched_at_start(self, dut):
        """EPOCH, TILE_ROWS_LOG2, FLAG_BASE, META_BASE, COUNT_BASE and REGION_CAP written
        during a layer change nothing in it (flags, metadata, counts, capacity stay the
        layer's) and take effect at the next START; REGION_BASE, changed between layers,
        moves the next layer's data."""
        tb = await self.make_tb(dut, tile_rows=self.cfg.min_tile_rows, epoch=5)
        rows = [self.row(k, 0, token=k) for k in range(2)]
        await self.wait_armed(tb)
        await tb.send_schedule(self.wide(self.chunks(rows[0], 0)))
        for name, value in (("EPOCH", 6), ("TILE_ROWS_LOG2", 31), ("FLAG_BASE", 0x5000_0000),
                            ("META_BASE", 0x5100_0000), ("COUNT_BASE", 0x5200_0000)):
            await tb.csr_write(name, value)
        await tb.csr_write("REGION_CAP", 1, 0)
        await tb.send_schedule(self.serial(self.chunks(rows[1], 0), lanes=[1])
                               + self.wide(self.eos_all(self._counts(rows))))
        model = await self.finish(tb)
        assert model.rows[0] == 2 and model.overflow[0] == 0, "REGION_CAP acted mid-layer"
        flags = [c for _, c in tb.ctl_out if c.kind == CtlKind.FLAG]
        assert len(flags) == 1 and flags[0].data == 5 and flags[0].addr >> 28 == 7, flags
        await tb.csr_write("REGION_BASE", 0x4000_0000 % (1 << self.cfg.addr_bits), 0)
        before = [len(w) for w in tb.wr_out]
        await tb.start_layer()
        r2 = [self.row(0, 0, token=40 + k) for k in range(2)]
        await tb.send_schedule(self.serial(self.chunks(r2[0], 0) + self.chunks(r2[1], 1))
                               + self.wide(self.eos_all({0: 2})))
        model = await self.finish(tb)
        assert model.layer_epoch == 6 and model.rows[0] == 1 and model.overflow[0] == 1
        new = [a for j, w in enumerate(tb.wr_out) for _, a, _ in w[before[j]:]]
        assert new and all(a >> 28 == 4 for a in new), "REGION_BASE did not move the next layer"

    def _counts(self, rows):
        out = {}
        for r in rows:
            out[r.src] = out.get(r.src, 0) + 1
        return out

    @hub_test()
    async def test_status_registers_mid_layer(self, dut):
        """INFLIGHT, EOS_SEEN, SRC_ROWS, SRC_EOS, ROWS, OVERFLOW, DROPS, ERRORS and STATUS read
        during a layer (rows open, some end-of-streams in, an overflow) equal the model's."""
        caps = [self.cfg.max_rows_per_expert] * self.cfg.experts
        caps[0] = 1 + (self.cfg.experts == 1)        # room for `full` (and `part` on a one-expert hub)
        tb = await self.make_tb(dut, caps=caps)
        full, part, over = self.row(0, 0, token=1), self.row(1, self.cfg.experts - 1, token=2), self.row(2, 0, token=3)
        await tb.send_schedule(self.serial(self.chunks(full, 0) + self.chunks(part, 0)[:3] + self.chunks(over, 0)[:1]
                                      + [Packet.eos(0, 1), Packet.eos(2, 1)]))
        await tb.wait_idle()
        model = await tb.check()
        assert model.inflight == 2 and model.eos_seen == [True, False, True] + [False] * (self.cfg.sources - 3)
        assert await tb.csr_read("INFLIGHT") == 2 and await tb.csr_read("OVERFLOW", 0) == 1
        rest = [Packet.eos(s, int(s == 1)) for s in range(1, self.cfg.sources) if s != 2]
        await tb.send_schedule(self.serial(self.chunks(part, 0)[3:] + self.chunks(over, 0)[1:]) + self.wide(rest))
        model = await self.finish(tb)
        assert model.done and model.drop_counts[Reason.EOS_DUPLICATE] == 0

    @hub_test()
    async def test_reset_restores_defaults(self, dut):
        """Reset after a layer with errors: every register reads its reset value (the
        register model's), the hub is disarmed, and a packet is NOT_ARMED."""
        tb = await self.make_tb(dut, tile_rows=self.cfg.max_tile_rows, epoch=77, timeout=1234)
        bad_chunk = Packet(src=0, tag=0, chunk=self.cfg.chunks_per_row)
        await tb.send_schedule(self.serial([bad_chunk] + self.chunks(self.row(0, 0), 1)[:2]))
        await tb.wait_idle()
        await tb.reset()
        fresh = HubModel(self.cfg)
        for reg in tb.map.registers.values():
            if reg.access == "wo":
                continue
            for i in range(reg.count):
                got, want = await tb.csr_read(reg.name, i), fresh.read(reg.name, i)
                assert got == want, f"{reg.name}[{i}] = {got:#x} after reset, default {want:#x}"
        await tb.send_schedule(self.serial(self.chunks(self.row(1, 0), 0)[:1]))
        model = await self.finish(tb)
        assert model.drop_counts[Reason.NOT_ARMED] == 1

    @hub_test()
    async def test_ctrl_strobes_and_read_only_registers(self, dut):
        """FLUSH with no layer armed and CTRL bits other than the three strobes do nothing;
        START and FLUSH in one write arm a layer (START wins); CTRL reads 0; writes to read-only
        registers are ignored."""
        tb = await self.make_tb(dut, start=False)
        await tb.flush()
        await tb.csr_write("CTRL", 0xFFFF_FFF8)
        await self.idle_cycles(tb, 10)
        assert await tb.csr_read("STATUS") == 0 and not tb.ctl_out, "FLUSH or junk CTRL bits acted"
        await tb.csr_write("CTRL", CTRL_START | CTRL_FLUSH)
        await self.wait_armed(tb)
        assert await tb.csr_read("CTRL") == 0
        for name in ("ID", "STATUS", "ROWS", "INFLIGHT", "DROPS"):
            before = await tb.csr_read(name)
            await tb.csr_write_raw(tb.map[name].addr(0, 0), 0x5A5A_5A5A)
            assert await tb.csr_read(name) == before, f"read-only {name} was written"
        await tb.send_schedule(self.serial(self.chunks(self.row(0, 0), 0)[:2]))
        await tb.wait_idle()
        await tb.csr_write("CTRL", CTRL_START | CTRL_FLUSH)   # a layer armed: START abandons it
        await self.wait_armed(tb)
        assert await tb.csr_read("INFLIGHT") == 0 and not [c for _, c in tb.ctl_out if c.kind == CtlKind.DONE]
        r = self.row(2, 0, token=4)
        await tb.send_schedule(self.serial(self.chunks(r, 1)) + self.wide(self.eos_all({2: 1})))
        model = await self.finish(tb)
        assert model.drop_counts[Reason.INCOMPLETE] == 0 and model.rows[0] == 1

    @hub_test()
    async def test_watchdog_while_traffic_in_flight(self, dut):
        """The watchdog counts cycles in which nothing is accepted, also while the hub holds
        its input back: with the control port, then the credit port, then the write ports held,
        packets wait on the lanes, events / credits / writes wait inside, and after TIMEOUT
        such cycles the layer is flushed (TIMEOUT, rows in flight INCOMPLETE) once the port
        lets go; the next layer is exact."""
        T = 200
        tb = await self.make_tb(dut, tile_rows=self.cfg.min_tile_rows, timeout=T)
        n = max(self.cfg.event_queue_depth, self.cfg.credit_queue_depth) + 8
        for layer, sink in enumerate(("ctl", "credit", "wr")):
            if layer:
                await self.new_flag_base(tb, layer)
                await tb.start_layer()
            await self.wait_armed(tb)
            rows = [self.row(0, k % self.cfg.experts, token=k, seed=10 + layer) for k in range(n)]
            tb.hold(sink)
            tb.offer(self.wide([p for r in rows for p in self.chunks(r, 0)]))
            await self.until_refused_for(tb, T + 40)
            assert tb.waiting(), f"{sink}: no packet waiting when the watchdog fired"
            tb.note_timeout()
            tb.release()            # the waiting packets find the layer flushed: NOT_ARMED
            await tb.wait_done()
            tb.stop_sources()
            model = await self.finish(tb)
            d = model.drop_counts
            assert d[Reason.TIMEOUT] == 1 and model.done, f"{sink}: {d}"
        await self.new_flag_base(tb, 3)
        await tb.start_layer()
        r = self.row(1, 0, token=99)
        await tb.send_schedule(self.serial(self.chunks(r, 0)) + self.wide(self.eos_all({1: 1})))
        await self.finish(tb)

    @hub_test()
    async def test_finished_layer_is_not_flushed_while_it_drains(self, dut):
        """A layer finished by its counts whose control words (metadata, tile flag) are held
        past TIMEOUT is not flushed: it ends when they drain (nothing TIMEOUT or INCOMPLETE;
        the control port, not the write ports: a row of the large configs does not fit the
        write buffers). Packets accepted
        between finishing and ending -- chunks of a row past its source's count, a repeated
        EOS -- are NOT_ARMED, and the layer stays finished (the EOS tracker goes on counting
        a finished layer's openers: its counts stay reached)."""
        T = 60
        tb = await self.make_tb(dut, timeout=T)
        r = self.row(0, 0, token=1)
        tb.hold("ctl")
        await tb.send_schedule(self.wide(self.chunks(r, 0)) + self.wide(self.eos_all({0: 1})))
        await self.idle_cycles(tb, 2 * T)                # finished, not drained: no flush
        stray = self.row(0, 1, token=2)
        tb.offer(self.wide(self.chunks(stray, 1)[:self.cfg.lanes]) + [[Packet.eos(0, 1)]])
        await self.idle_cycles(tb, 2 * T)
        assert tb.waiting() == 0, "the finished layer held its input back"
        assert not (await tb.csr_read("STATUS")) & STATUS_DONE, "the layer ended with its words held"
        tb.release()
        await tb.wait_done()
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.TIMEOUT], d[Reason.INCOMPLETE], d[Reason.NOT_ARMED]) == (0, 0, self.cfg.lanes + 1), d
        assert model.done and model.rows[0] == 1

    async def new_flag_base(self, tb, layer):
        """Flags of the next layer elsewhere: HubTB.check_ordering pairs flags and writes by
        address over all layers, so a tile a flush left unflagged would meet an earlier
        layer's flag of the same tile."""
        await tb.csr_write("FLAG_BASE", (0x7000_0000 + layer * 0x10_0000) % (1 << self.cfg.addr_bits))

    async def until_refused_for(self, tb, n):
        """Until nothing has been accepted for ``n`` cycles."""
        quiet, last = 0, len(tb.accepted)
        while quiet < n:
            await RisingEdge(tb.dut.clk)
            quiet = quiet + 1 if len(tb.accepted) == last else 0
            last = len(tb.accepted)

    async def gap_then_chunk(self, tb, first, gap, then):
        """``first``, exactly ``gap`` idle cycles, then ``then`` (offered, not awaited); returns
        the cycle ``first`` was accepted in."""
        before = len(tb.accepted)
        tb.offer([[first]] + [[None]] * gap + [[then]])
        while len(tb.accepted) == before:
            await RisingEdge(tb.dut.clk)
        return tb.accepted[before][0]

    @hub_test()
    async def test_watchdog_idle_count_exact(self, dut):
        """TIMEOUT is a count of idle cycles: TIMEOUT - 1 cycles without an accepted packet do
        not fire the watchdog (the layer completes normally), TIMEOUT cycles do: the packet
        after them finds the layer flushed (NOT_ARMED)."""
        T = 48
        tb = await self.make_tb(dut, timeout=T)
        await self.wait_armed(tb)
        r = self.row(0, 0, token=1)
        p = self.chunks(r, 0)
        await self.gap_then_chunk(tb, p[0], T - 1, p[1])
        await tb.send_schedule(self.serial(p[2:]) + self.wide(self.eos_all({0: 1})))
        model = await self.finish(tb)
        assert model.done and model.drop_counts[Reason.TIMEOUT] == 0, "fired after TIMEOUT - 1 idle cycles"
        await self.new_flag_base(tb, 1)
        await tb.start_layer()
        await self.wait_armed(tb)
        r2 = self.row(1, 0, token=2)
        p = self.chunks(r2, 0)
        a = await self.gap_then_chunk(tb, p[0], T, p[1])
        while tb.now() < a + T:
            await RisingEdge(dut.clk)
        tb.note_timeout()                       # the T-th idle cycle; the next packet is after it
        await tb.wait_done()
        model = await self.finish(tb)
        assert model.drop_counts[Reason.INCOMPLETE] == 1 and model.drops[-1][0] == Reason.NOT_ARMED

    @hub_test()
    async def test_watchdog_off_and_on_an_idle_hub(self, dut):
        """TIMEOUT = 0 turns the watchdog off (a stuck layer stays armed); a TIMEOUT written
        during the layer acts at once; and on an armed hub with no row in flight (a source's
        end-of-stream missing) the watchdog ends the layer with TIMEOUT and no INCOMPLETE."""
        tb = await self.make_tb(dut, timeout=0)
        await tb.send_schedule(self.serial(self.chunks(self.row(0, 0, token=1), 0)[:2]))
        await self.idle_cycles(tb, 500)
        assert await tb.csr_read("STATUS") & STATUS_ARMED, "the watchdog fired with TIMEOUT = 0"
        await tb.csr_write("TIMEOUT", 100)
        await tb.wait_done()
        tb.note_timeout()
        model = await self.finish(tb)
        assert model.drop_counts[Reason.INCOMPLETE] == 1 and model.drop_counts[Reason.TIMEOUT] == 1
        await tb.start_layer()
        rows = [self.row(s, s % self.cfg.experts, token=5) for s in range(self.cfg.sources)]
        pk = [p for r in rows for p in self.chunks(r, 0)]
        eos = [Packet.eos(s, 1) for s in range(1, self.cfg.sources)]   # source 0's EOS never comes
        await tb.send_schedule(self.serial(pk, lanes=list(range(self.cfg.lanes))) + self.wide(eos))
        await tb.wait_done()
        tb.note_timeout()
        model = await self.finish(tb)
        d = model.drop_counts
        assert (d[Reason.TIMEOUT], d[Reason.INCOMPLETE]) == (1, 0) and model.rows[0] >= 1

    @hub_test()
    async def test_flush_and_start_while_traffic_in_flight(self, dut):
        """CTRL.FLUSH written while rows stream in (packets accepted in the cycles before it):
        the input stops, the rows in flight are dropped INCOMPLETE, the layer ends, packets
        after it are NOT_ARMED; then a START written while rows stream in abandons the layer
        and the packets after it open rows in the new one."""
        tb = await self.make_tb(dut)
        rng = random.Random(self.seed)
        for ctrl in (CTRL_FLUSH, CTRL_START):
            tb.feed(LaneFeeder(self.cfg, random_rows(self.cfg, rng, 30), rng))
            start = len(tb.accepted)
            while len(tb.accepted) < start + 40:
                await RisingEdge(dut.clk)
            await tb.csr_write("CTRL", ctrl)
            wrote = max(c for c, _, k, _ in tb.log if k == "csr")
            assert tb.accepted[-1][0] > wrote - 8, "no packet in flight at the CTRL write"
            await self.idle_cycles(tb, 30)
            tb.stop_sources()
            await tb.wait_idle()
            if ctrl == CTRL_FLUSH:
                await tb.wait_done()
                model = await tb.check()
                assert model.drop_counts[Reason.INCOMPLETE] >= 1 and model.done
                await tb.start_layer()
        await tb.flush()
        await tb.wait_done()
        await self.finish(tb)

    @hub_test()
    async def test_flush_while_clearing(self, dut):
        """A FLUSH once STATUS shows the next layer ARMED while its counters are still being
        cleared (after a flushed layer) waits for the clearing and ends that layer cleanly."""
        tb = await self.make_tb(dut)
        await tb.send_schedule(self.serial(self.chunks(self.row(0, 0), 0)[:3]))
        await tb.wait_idle()
        await tb.flush()
        await tb.wait_done()
        await tb.start_layer()
        while not (st := await tb.csr_read("STATUS")) & STATUS_ARMED:
            pass
        await tb.flush()
        await tb.wait_done()
        model = await self.finish(tb)
        assert st & STATUS_CLEARING, f"STATUS {st:#x}: the clearing had ended"
        assert model.done and sum(1 for _, c in tb.ctl_out if c.kind == CtlKind.DONE) == 2

    @hub_test()
    async def test_post_eos_row_holds_the_layer_open(self, dut):
        """A row opened past its source's EOS count (POST_EOS, not counted toward the source)
        keeps the layer open while it is in flight, although every count is reached; its
        completion ends the layer."""
        tb = await self.make_tb(dut)
        a, j = self.row(0, 0, token=1), self.row(0, 0, token=2)
        pa, pj = self.chunks(a, 0), self.chunks(j, 1)
        await tb.send_schedule(self.wide(self.eos_all({0: 1})))
        await tb.send_schedule(self.serial(pa[:1] + pj[:1] + pa[1:]))
        await tb.wait_idle()
        st = await tb.csr_read("STATUS")
        assert st & STATUS_ARMED and not st & STATUS_DONE, f"STATUS {st:#x}: the layer did not wait"
        model = await tb.check()
        assert model.inflight == 1 and model.src_rows[0] == 1
        await tb.send_schedule(self.serial(pj[1:]))
        model = await self.finish(tb)
        assert model.done and model.drop_counts[Reason.POST_EOS] == 1 and len(model.credits) == 2

    @hub_test(ms=60_000)
    async def test_fill_region_to_capacity(self, dut):
        """One expert's region filled to its last row -- the whole region (max_rows_per_expert,
        the row index's top bit) where affordable, else a programmed capacity: the rows within
        a tile of it, the row that fills it, then one cycle whose four openers get the last
        two rows and two OVERFLOW drops (dense rows, lane order), credits for all."""
        cap = self.cfg.max_rows_per_expert if self.FULL_REGION else 6
        caps = [cap] + [self.cfg.max_rows_per_expert] * (self.cfg.experts - 1)
        tb = await self.make_tb(dut, caps=caps, tile_rows=self.cfg.min_tile_rows)
        ids = [(s, t) for s in range(self.cfg.sources) for t in range(self.cfg.tags_per_source)]
        sent = {}
        k = 0
        while k < cap + 2:
            batch = ids[:min(len(ids), cap - 2 - k)] if k < cap - 2 else ids[:4]
            rows = [self.row(s, 0, token=(k + i) % (1 << self.cfg.token_bits), seed=k + i)
                    for i, (s, _) in enumerate(batch)]
            pk = [self.chunks(r, t) for r, (_, t) in zip(rows, batch)]
            await tb.send_schedule(self.wide([p[c] for c in range(self.cfg.chunks_per_row) for p in pk]))
            for s, _ in batch:
                sent[s] = sent.get(s, 0) + 1
            k += len(batch)
        await tb.send_schedule(self.wide(self.eos_all(sent)))
        model = await self.finish(tb)
        assert model.rows[0] == cap and model.overflow[0] == 2 and len(model.credits) == cap + 2
        over = [p for r, p in model.drops if r == Reason.OVERFLOW]
        assert len(over) == 2, f"the last group did not split: {over}"

    def held_rows_schedule(self, n, expert, held, never=()):
        """Cycles sending ``n`` rows to ``expert``, opened in index order (so row k gets row
        index k), in batches that fit the tags (a batch completes before its tags are reused);
        the rows in ``held`` keep a tag of their own and send their last chunk after every
        other row, those also in ``never`` not at all. Returns (schedule, rows)."""
        ids = [(s, t) for s in range(self.cfg.sources) for t in range(self.cfg.tags_per_source)]
        own, free = dict(zip(sorted(held), ids)), ids[len(held):]
        rows, sched, batch, last = [], [], [], []
        for k in range(n):
            s, t = own.get(k) or free[sum(1 for j in range(k) if j not in held) % len(free)]
            rows.append(self.row(s, expert, token=k % (1 << self.cfg.token_bits), seed=k))
            batch.append(self.chunks(rows[-1], t))
            if k in held:
                p = batch[-1].pop()
                if k not in never:
                    last.append(p)
            full = sum(1 for p in batch if len(p) == self.cfg.chunks_per_row)
            if k == n - 1 or (k not in held and full == len(free)):
                sched += self.wide([p[c] for c in range(self.cfg.chunks_per_row) for p in batch if c < len(p)])
                batch = []
        return sched + self.wide(last), rows

    @hub_test(ms=60_000)
    async def test_tile_flagged_by_its_first_middle_or_last_row(self, dut):
        """Per tile size, three tiles whose flag is set by the completion of the tile's first
        row (held back while the others complete), a middle row, and (in order) its last row,
        and a last tile one row short: each tile is flagged once, when its last-completing row
        is in, never before; the short tile at the end-of-layer sweep, or -- in every other
        layer, which a FLUSH ends with one of its rows incomplete -- never."""
        sizes = [self.cfg.min_tile_rows]
        while self.ALL_TILE_SIZES and sizes[-1] < self.cfg.max_tile_rows:
            sizes.append(sizes[-1] * 2)
        tiles = 3 if self.ALL_TILE_SIZES else 1      # (the fast set on a large config: the first row)
        tb = await self.make_tb(dut, start=False)
        for layer, tr in enumerate(sizes):
            await self.new_flag_base(tb, layer)
            await tb.csr_write("TILE_ROWS_LOG2", tr.bit_length() - 1)
            await tb.start_layer()
            flush = tiles == 3 and layer % 2 == 1
            n = tiles * tr + (tr - 1 if tiles == 3 else 0)
            held = {0, tr + tr // 2, n - 1} if tiles == 3 else {0}
            sched, rows = self.held_rows_schedule(n, 0, held, never={n - 1} if flush else ())
            if flush:
                await tb.send_schedule(sched)
                await tb.wait_idle()
                await tb.flush()
                await tb.wait_done()
            else:
                await tb.send_schedule(sched + self.wide(self.eos_all(self._counts(rows))))
            model = await self.finish(tb)
            want = [2, 0, 1] + ([] if flush else [3]) if tiles == 3 else [0]
            order = [t for x, t in model.tiles_flagged]
            assert order == want, f"tile size {tr}: tiles flagged in order {order}, expected {want}"

