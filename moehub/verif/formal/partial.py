"""Property harness of the relay hub's partial feed (:class:`moehub.rtl.relay.partial_feed.PartialFeed`):
each whole partial row read back from the staging in chunk order, handed to the reduce
with its header, its P credit returned once.

Environment: whole rows (``row``) of any content -- any slot, dropped or not, any header
-- offered at any time, held valid with the payload stable until taken (the partial
staging's row queue); ``base`` a constant (PARTIAL_STAGE_BASE, written before the
combine); ``rd``'s, ``out``'s and ``pcredit``'s ready free; the staging's memory answers
the reads in order, each some cycles later: ``rdata.valid`` only while a read issued is
not yet answered (the harness counts them), its data free.

Reference state (the harness's own registers, from the feed's contract in
:mod:`moehub.rtl.relay.partial_feed` and the reduce path's): the reads owed (``C`` =
``chunks_per_row`` per good row taken, less the reads issued), the out chunks owed (the
same, less the chunks sent), the credits owed (one per row taken, less the credits sent)
and the reads not yet answered. One **tracked** row: any row taken may become it (a free
choice, ``track_pick``, while none is tracked; so every property below holds for every
row): its header, how many reads, out chunks and credits are owed ahead of it (by the rows
taken before it) at its take, less those issued since, and its own reads and chunks so
far. Once the credits ahead of it have gone and its own has, the next row taken may be
tracked.

Properties (for the tracked row, so for every row):

* a credit only while one is owed (none for a row not taken, none twice); the tracked
  row's credit the first after the credits ahead of it (the rows' order), carrying its
  (sender, P tag); a good row's only once its ``C`` chunks have gone out;
* a read only while one is owed (a dropped row has none; a good row no more than ``C``);
  the tracked good row's reads, once those ahead are issued, at ``base`` + slot x
  row stride + k x ``chunk_bytes`` for k = 0 .. C - 1 in order (modulo 2^addr_bits, as the
  RTL's adders);
* an out chunk only while one is owed (none for a dropped row); the tracked good row's
  ``C`` chunks, once those ahead have gone, with its header (owner's node, token, slot);
* each out chunk carries the memory's answer taken with it, and an answer is taken
  exactly when a chunk goes out. With the memory answering in order, the n-th chunk out
  is the n-th read's data; by the counts above the reads and the chunks follow the same
  rows in the same order, ``C`` of each per good row, so each chunk carries the answer to
  its own row's read of that chunk;
* no hang: a row offered waits at most ``HANG_WAIT`` = 4 cycles in a row in which ``rd``,
  ``out`` and ``pcredit`` are ready and the memory answers whenever a read is owed an
  answer (4 is reached, 5 is not: the bound is exact, so a feed that stops overlapping
  rows fails it too).

Unbounded (k-induction, ``prove``, closes at k = 5 = ``HANG_WAIT`` + 1 for the no-hang
property, whose whole wait then lies in the induction's path; every other property closes
at k = 1): the properties alone are not
inductive (a state whose FIFOs hold a header, a last-chunk bit or a credit the reference
does not expect satisfies them until it leaves, and a stalled output can hold it there
for any k). The strengthening invariants (:meth:`PartialFeedHarness._invariants`) tie the
feed's registers and its three FIFOs (``SyncFIFOBuffered``: each an output register and a
memory whose words ``common.memory_words`` names as flops after ``memory_map``) to the
reference: the FIFOs' pointers (``produce = consume + inner_level``, the output register
empty only before a just-written entry moves into it); reads not answered = the ``lasts`` FIFO's level; credits owed = rows in
flight + credits queued (at most :data:`~moehub.rtl.relay.partial_feed.CREDITS`); the
preparation's step and chunk (reads owed = ``C - chunk`` while a row is prepared or read,
else none -- so a row is taken only with no read owed) and the row being read the newest
in flight and good; the chunks owed = reads owed + reads not answered, those of the row
behind the front ``C`` (if good), the front's between 1 and ``C`` if good, else none, and
the ``lasts`` FIFO's level = the front's chunks read not sent + the reads of the row
behind; each ``lasts`` entry's bit = its read was a row's last chunk (the reads in flight
are consecutive chunks ending at ``chunk - 1``, mod ``C``); the tracked row: at its place
among the rows owing a credit (credits queued first), its header there (or its credit in
the credit queue, a good row's only with its ``C`` chunks out), the reads and chunks ahead
of it, and, while it is read, ``offset`` and ``addr`` its slot's and chunk's.
"""
from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.lib import data

from ...rtl.relay.partial_feed import CREDITS, READS, ROWS_IN_FLIGHT, PartialFeed
from .common import any_const, any_seq, pick
from .plant import Plant, PlantedHarness

#: the reduced config on the forward unit's relay-small (2 nodes x 3 GPUs, 2 P tags per
#: sender: a window of 6 slots, slot codes 6 and 7 out of range representable): rows of 3
#: chunks of 16 bytes (a first, a middle and a last chunk; a row stride of 48 bytes, not
#: a power of two), tiny's 32-bit addresses
PARTIAL_SMALL = dict(row_bytes=48)

#: the FIFOs' memories as flip-flops, before their words are connected (common.memory_words)
SCRIPT = ("memory_map", "opt_clean")
#: the most cycles in a row a row offered waits while every output is ready and the memory
#: answers each read owed (no hang; 4 is reached, at step 6, 5 is not within 24 steps)
HANG_WAIT = 4
#: k of the k-induction (the no-hang property's window: its wait fits in the induction's
#: path; every other property closes at k = 1 with the invariants), the BMC's and the
#: covers' depths (cycles from reset)
PROVE_K, BMC_DEPTH, COVER_DEPTH = HANG_WAIT + 1, 16, 12

MOD = "moehub.rtl.relay.partial_feed"
#: planted bugs (each a one-line edit of the feed's source, in memory)
PLANTS = {
    "credit-first-chunk": Plant(MOD, "xq.w_en.eq(self.rd.valid & self.rd.ready), xq.w_data.eq(last)]",
                                "xq.w_en.eq(self.rd.valid & self.rd.ready), xq.w_data.eq(chunk == 0)]",
                                "PartialFeed", ("a good row's credit before its last chunk went out",),
                                "a row's first read marked its last: the row leaves, its credit pushed, "
                                "at its first chunk"),
    "addr-stuck": Plant(MOD, "chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr + cfg.chunk_bytes)]",
                        "chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr)]", "PartialFeed",
                        ("a read not at the row's next chunk",),
                        "the address not stepped by chunk_bytes: every chunk read at the row's first"),
    "dropped-reads": Plant(MOD, "with m.If(start & ~head.drop):", "with m.If(start):", "PartialFeed",
                           ("a read no row owes",), "a dropped row's chunks read"),
    "credit-sender": Plant(MOD, "cr.sender.eq(front.sender)", "cr.sender.eq(front.src_node)", "PartialFeed",
                           ("the tracked row's credit out of order or naming another row",),
                           "the credit carries the owner's node, not the sender"),
    "header-offered": Plant(MOD, "o.src_node.eq(front.src_node)", "o.src_node.eq(head.src_node)", "PartialFeed",
                            ("an out chunk with another row's header",),
                            "an out chunk's owner node taken from the row offered, not the row in front"),
    "room-ignored": Plant(MOD, "m.d.comb += room.eq(cq.level + hq.level < CREDITS)", "m.d.comb += room.eq(1)",
                          "PartialFeed", ("the tracked row's credit out of order or naming another row",),
                          "a row taken with no place for its credit: a credit pushed into a full queue is lost"),
    "one-row-in-flight": Plant(MOD, "start.eq((step == 0) & self.row.valid & hq.w_rdy & room)",
                               "start.eq((step == 0) & self.row.valid & hq.w_rdy & room & ~hq.r_rdy)",
                               "PartialFeed", ("a hang",),
                               "a row taken only once the row in front has left: the rows' reads no longer "
                               "overlap the answers, and a row offered waits past the bound"),
}


class PartialFeedHarness(PlantedHarness):
    """A :class:`PartialFeed` of ``cfg`` under its environment (module docstring)."""
    unit = PartialFeed
    plants = PLANTS


    def elaborate(self, platform):
        m = Module()
        cfg, C = self.cfg, self.cfg.chunks_per_row
        aw = cfg.addr_bits
        p, dut, regs = self.elaborate_dut(m, platform, into=("hdrs", "lasts", "credits"))

        # ---- environment
        base = any_const(m, aw, "base")
        m.d.comb += dut.base.eq(base)
        rv = any_seq(m, 1, "row_valid")
        rp = any_seq(m, dut.row.payload.shape(), "row_payload")
        m.d.comb += [dut.row.valid.eq(rv), dut.row.payload.eq(rp)]
        held = Signal(name="env_row_held")                  # offered and not taken last cycle
        last_row = Signal(dut.row.payload.shape(), name="env_row_last")
        m.d.sync += [held.eq(dut.row.valid & ~dut.row.ready), last_row.eq(dut.row.payload)]
        p.assume(~held | (rv & (rp == last_row)))
        for name in ("rd", "out", "pcredit"):
            m.d.comb += getattr(dut, name).ready.eq(any_seq(m, 1, f"{name}_ready"))
        m.d.comb += [dut.rdata.valid.eq(any_seq(m, 1, "rdata_valid")),
                     dut.rdata.payload.eq(any_seq(m, cfg.data_bits, "rdata_payload"))]
        take = dut.row.valid & dut.row.ready
        row = dut.row.payload
        good = take & ~row.drop
        rd_fire = dut.rd.valid & dut.rd.ready
        out_fire = dut.out.valid & dut.out.ready
        ans_fire = dut.rdata.valid & dut.rdata.ready
        pc_fire = dut.pcredit.valid & dut.pcredit.ready
        pend = Signal(5, name="env_reads_pending")          # reads issued, not answered
        m.d.sync += pend.eq(pend + rd_fire - ans_fire)
        p.assume(~dut.rdata.valid | (pend != 0))

        # ---- no hang: a row offered waits at most HANG_WAIT cycles in a row in which every
        # output is ready and the memory answers the reads owed
        free = dut.rd.ready & dut.out.ready & dut.pcredit.ready & (dut.rdata.valid | (pend == 0))
        wait = Signal(range(HANG_WAIT + 2), name="env_wait")
        m.d.sync += wait.eq(Mux(free & rv & ~dut.row.ready, wait + 1, 0))
        p.check(wait <= HANG_WAIT, "a row held back more than HANG_WAIT cycles in a row with every output "
                                   "ready and the memory answering (a hang)")
        p.cover(wait == HANG_WAIT, "a row held back HANG_WAIT cycles in a row with every output ready")

        # ---- reference: what the rows taken owe
        r_owed = Signal(5, name="ref_reads_owed")
        o_owed = Signal(5, name="ref_chunks_owed")
        c_owed = Signal(4, name="ref_credits_owed")
        m.d.sync += [r_owed.eq(r_owed + Mux(good, C, 0) - rd_fire),
                     o_owed.eq(o_owed + Mux(good, C, 0) - out_fire),
                     c_owed.eq(c_owed + take - pc_fire)]
        # the tracked row
        trk = Signal(name="ref_tracking")
        th = Signal(dut.row.payload.shape(), name="ref_row")
        a_rd = Signal(5, name="ref_reads_ahead")
        a_out = Signal(5, name="ref_chunks_ahead")
        a_cr = Signal(4, name="ref_credits_ahead")
        t_rd = Signal(range(C + 1), name="ref_reads")
        t_out = Signal(range(C + 1), name="ref_chunks")
        mine_rd = trk & (a_rd == 0) & ~th.drop & (t_rd < C)     # a read now is the tracked row's
        mine_out = trk & (a_out == 0) & ~th.drop & (t_out < C)
        mine_cr = trk & (a_cr == 0)

        def addr_of(at, k):
            return (base + at * cfg.stride_bytes + k * cfg.chunk_bytes)[:aw]

        # ---- properties
        p.check(~dut.pcredit.valid | (c_owed != 0), "a credit no row owes (a row not taken, or twice)")
        pc = dut.pcredit.payload
        p.check(~(mine_cr & dut.pcredit.valid) | ((pc.sender == th.sender) & (pc.ptag == th.ptag)),
                "the tracked row's credit out of order or naming another row")
        p.check(~(mine_cr & dut.pcredit.valid) | th.drop | (t_out == C),
                "a good row's credit before its last chunk went out")
        p.check(~dut.rd.valid | (r_owed != 0), "a read no row owes (a dropped row's, or past a row's chunks)")
        p.check(~(mine_rd & dut.rd.valid) | (dut.rd.payload == addr_of(th.at, t_rd)),
                "a read not at the row's next chunk (base + slot x stride + chunk x chunk_bytes)")
        p.check(~dut.out.valid | (o_owed != 0), "an out chunk no row owes (a dropped row's, or past a row's chunks)")
        o = dut.out.payload
        p.check(~(mine_out & dut.out.valid) | ((o.src_node == th.src_node) & (o.token == th.token)
                                               & (o.slot == th.slot)),
                "an out chunk with another row's header (or out of the rows' order)")
        p.check(~dut.out.valid | (dut.rdata.valid & (o.data == dut.rdata.payload)),
                "an out chunk without the memory's answer as its data")
        p.check(out_fire == ans_fire, "an answer taken without its chunk going out")

        # ---- reference updates
        pick = any_seq(m, 1, "track_pick")
        with m.If(trk):
            m.d.sync += [a_rd.eq(a_rd - (rd_fire & (a_rd != 0))), a_out.eq(a_out - (out_fire & (a_out != 0))),
                         a_cr.eq(a_cr - (pc_fire & (a_cr != 0))),
                         t_rd.eq(t_rd + (mine_rd & rd_fire)), t_out.eq(t_out + (mine_out & out_fire))]
            with m.If(mine_cr & pc_fire):
                m.d.sync += trk.eq(0)
        with m.Elif(take & pick):
            m.d.sync += [trk.eq(1), th.eq(row), a_rd.eq(r_owed - rd_fire), a_out.eq(o_owed - out_fire),
                         a_cr.eq(c_owed - pc_fire), t_rd.eq(0), t_out.eq(0)]

        # ---- covers
        p.cover(mine_cr & pc_fire & ~th.drop, "a good row read whole, its credit out")
        p.cover(mine_cr & pc_fire & th.drop, "a dropped row's credit out")
        p.cover(rd_fire & (o_owed > C), "a row read while the row ahead still owes chunks (two rows in flight)")
        p.cover(regs["credits.level"] == CREDITS, "the credit queue full")

        if self.invariants:         # (off: a plant must fail on the properties themselves)
            self._invariants(m, p, regs, locals())
        return m

    def _invariants(self, m, p, regs, e):
        """The strengthening invariants (module docstring)."""
        cfg, C = self.cfg, self.cfg.chunks_per_row
        self.script = SCRIPT
        dut = e["dut"]
        row_w, cr_w = len(Value.cast(e["th"])), len(Value.cast(dut.pcredit.payload))
        H, hl, h_ok = self.fifo(m, regs, "hdrs", ROWS_IN_FLIGHT, row_w)
        X, xl, x_ok = self.fifo(m, regs, "lasts", READS, 1)
        Q, ql, q_ok = self.fifo(m, regs, "credits", CREDITS, cr_w)
        p.check(h_ok & x_ok & q_ok, "invariant: a FIFO's pointers are not consume + inner_level")
        step, chunk = regs["prep_step"], regs["chunk"]
        off, addr = regs["offset"], regs["addr"]
        pend, r_owed, o_owed, c_owed = e["pend"], e["r_owed"], e["o_owed"], e["c_owed"]
        reading = step != 0
        lay = dut.row_layout
        hd = [data.View(lay, d) for _, d in H]
        p.check((step <= 2) & ((step == 2) | (chunk == 0)), "invariant: the step, or a chunk while not reading")
        p.check(pend == xl, "invariant: the reads not answered are not the lasts FIFO's level")
        p.check((c_owed == hl + ql) & (c_owed <= CREDITS),
                "invariant: the credits owed are not the rows in flight and the credits queued")
        p.check(r_owed == Mux(reading, C - chunk, 0), "invariant: the reads owed are not the row being read's")
        p.check(o_owed == r_owed + pend, "invariant: the chunks owed are not the reads owed and not answered")
        newest_good = Mux(hl == 2, ~hd[1].drop, (hl == 1) & ~hd[0].drop)
        p.check(~reading | newest_good, "invariant: a row read that is not the newest in flight, or dropped")
        front_good = (hl >= 1) & ~hd[0].drop
        behind_good = (hl == 2) & ~hd[1].drop
        behind_owed = Mux(behind_good, C, 0)
        front_owed = Signal(6, name="inv_front_owed")
        m.d.comb += front_owed.eq(o_owed - behind_owed)
        p.check(Mux(front_good, (front_owed >= 1) & (front_owed <= C), front_owed == 0),
                "invariant: the front row's chunks owed are not 1 .. C (a good row), else none")
        front_rd_owed = Mux((hl == 1) & reading, C - chunk, 0)
        behind_reads = Mux(behind_good, Mux(reading, chunk, C), 0)
        p.check(xl == front_owed - front_rd_owed + behind_reads,
                "invariant: the lasts FIFO does not hold the front row's reads not sent and the reads behind")
        lasts = []
        for q, (live, d) in enumerate(X):
            idx = Cat((chunk == c) & (xl == n) & ((c - n + q) % C == C - 1)
                      for c in range(C) for n in range(READS + 1)).any()
            lasts.append(~live | (d[0] == idx))
        p.check(Cat(*lasts).all(), "invariant: a lasts entry's bit is not its read's chunk == C - 1")
        # -- the tracked row
        trk, th, a_rd, a_out, a_cr = (e[k] for k in ("trk", "th", "a_rd", "a_out", "a_cr"))
        t_rd, t_out = e["t_rd"], e["t_out"]
        p.check(~trk | (a_cr < c_owed), "invariant: the tracked row owes no credit")
        in_q = a_cr < ql
        hpos = Signal(4, name="inv_tracked_at")
        m.d.comb += hpos.eq(a_cr - ql)
        own = Mux(th.drop, 0, C - t_out)
        cr = data.View(dut.pcredit.payload.shape(), pick([d for _, d in Q], a_cr))
        p.check(~trk | (a_rd == 0) & (t_rd <= C) & (t_out <= t_rd) & (~th.drop | (t_rd == 0) & (t_out == 0)),
                "invariant: the tracked row's reads and chunks")
        p.check(~(trk & in_q) | ((cr.sender == th.sender) & (cr.ptag == th.ptag) & (a_out == 0)
                                 & (th.drop | (t_out == C) & (t_rd == C))),
                "invariant: the tracked row's credit queued is not its own, or early")
        p.check(~(trk & ~in_q) | (hpos < hl) & (pick([Value.cast(h) for h in hd], hpos) == Value.cast(th)),
                "invariant: the tracked row in flight is not in its place")
        p.check(~(trk & ~in_q) | Mux(hpos == 0, (a_out == 0) & (th.drop | (front_owed == C - t_out)),
                                     (a_out == o_owed - own) & (t_out == 0)),
                "invariant: the chunks ahead of the tracked row")
        being_read = trk & ~in_q & ~th.drop & (t_rd < C)
        p.check(~being_read | reading & (hpos == hl - 1) & (chunk == t_rd),
                "invariant: the tracked row not the row being read, at its chunk")
        p.check(~(trk & ~in_q & ~th.drop & (t_rd == C)) | ~reading | (hpos == 0) & (hl == 2),
                "invariant: a row read while the tracked row, read whole, is not the front")
        at_off = (th.at * cfg.stride_bytes)[:cfg.addr_bits]
        p.check(~being_read | Mux(step == 1, off == at_off, addr == e["addr_of"](th.at, t_rd)),
                "invariant: the tracked row's offset or address")


def small_config():
    """The reduced config of the partial feed's property set (:data:`PARTIAL_SMALL` on the
    forward unit's ``tiny/relay-small``)."""
    from .relay import small_config as relay_small
    return relay_small().replace(name="tiny/partial-small", **PARTIAL_SMALL)


def property_set() -> dict:
    """The partial feed's property set, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists it; kept here so that file holds one line of it). Measured on the 2-core machine
    under load (~2-3): k-induction k=5 3 s (without the no-hang property it closes at k=1
    with 2, 3 and 4 chunks a row), BMC 16 14 s, the covers within 12 steps 2 s (reached at
    steps 5, 6, 8, 9 and 10)."""
    return dict(name="relay-partial-feed", component="relay partial feed",
                config="tiny/partial-small: 2 nodes x 3 GPUs, 2 P tags, 3-chunk rows (48-byte stride)",
                build=lambda: PartialFeedHarness(small_config()),
                modes={"prove": PROVE_K, "bmc": BMC_DEPTH, "cover": COVER_DEPTH}, smoke={"prove": PROVE_K},
                note="protocol v3: every partial row taken returns one credit, in order, with its (sender, "
                     "P tag), a good row's after its last chunk; a good row's C reads at base + slot x "
                     "stride + k x chunk_bytes in order, its C chunks out with its header and the "
                     "memory's answers; nothing read or sent for a dropped row; a row offered taken within 4 "
                     "cycles with the outputs ready and the memory answering (partial.py)")
