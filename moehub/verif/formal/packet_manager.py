"""Property harness of the packet manager (:class:`moehub.rtl.packet_manager.PacketManager`).

Environment (the hub around it, abstracted):

* the event and credit queues are their level counters (pushes in, a pop when the
  consumer's free ready meets a non-empty queue): exactly what the packet manager sees of
  them, ``pop`` and ``empty`` -- the queue proof shows the real queue behaves so;
* the allocator is free: any answer, a grant only to a request (paged, protocol v2: and the
  page gate -- any page for a grant, any tile size, pool base and PAGE_BAD pulses);
* the tracker: never clearing, idle when the event queue is empty (it is proven apart);
* one START at most (free otherwise), no FLUSH, watchdog off; region bases 0;
* the lanes are free: any packet, any field out of range, duplicates, protocol errors,
  end-of-stream packets from any source -- except the chosen row and the chosen packet:
* one chosen (source ``cs``, tag ``ct``) (``AnyConst``) behaves like a good source once
  the layer is armed: chunks of its row in range, each once, all with the row's expert
  (which may be out of range: the row is then dropped whole), a new row only after the
  last one's credit; no end-of-stream (nor count packet) from ``cs`` (so the layer never
  finishes and a row of ``cs`` is never POST_EOS or NOT_ARMED);
* on one chosen lane ``cl`` the packet accepted in the first cycle a free bit ``pick`` is
  set is the *chosen packet*: its data is 1, every other packet's on that lane 0.

Properties:

* every accepted row of (``cs``, ``ct``) returns exactly one credit, pushed exactly
  ``EVENT_LATENCY`` cycles after its last chunk was accepted, and no credit otherwise;
* the data lanes on one row in R read chunk-table entries that agree on ``open`` (T forms
  each lane's row-full for an open and a closed row and chooses by the lane's own entry);
* a dropped packet never writes: if the chosen packet is dropped -- not armed, source or
  tag out of range, chunk out of range, an end-of-stream or a count packet (count_packets),
  expert out of range, or its row refused by the allocator (overflow) -- no write with its
  data ever leaves lane ``cl``;
* the queues never overflow: a push never exceeds the room the consumer left;
* no hang: once the input stops (every write port and queue consumer ready), the
  pipeline stops pushing within ``EVENT_LATENCY + 1`` cycles, the writes have left
  ``WRITE_FIFO_DEPTH`` cycles later, and the input is ready again within
  ``EVENT_LATENCY + 1 + 2 x lanes + 2`` (the queues' own draining is the queue proof's).

Unbounded and bounded. With every property asserted the harness is a BMC from reset
(16 cycles on ``tiny/pm-small``). ``only`` selects one property group, asserted with its
strengthening invariants and *nothing else* -- the other properties are neither asserted
nor assumed, so what is proven stands alone (no circular assume-guarantee):

* ``queues`` -- **the queues never overflow**: k-induction closes at k = 4 (count
  packets: 6) with the input reservations' invariants (:class:`~moehub.rtl.reservations.
  InputReservations`, read by name): for each queue ``avail + pop (counted a cycle late) +
  level + the packets in R, T, AL and B == depth`` -- every packet after A holds one
  reservation, which B turns into a push or returns (``b_no_ev``/``b_no_cr`` are B's packets
  that push none, a push only from a lane with a packet) -- and ``n_acc`` is the packets
  in A. With the level bounded by ``depth - avail``, a push never passes the room.
* ``dropped`` -- **a dropped packet never writes**: k-induction closes at k = 6 (paged and
  with count packets too) with three sets of invariants:

  - the layer's (shared with ``credits`` and ``hang``): no end-of-stream of the chosen
    source seen or pending in the end-of-stream tracker (``eos_seen``, ``p_eos``), so its
    ``done`` bit and the layer's ``finished`` stay low and every group is live while
    armed (the layer's liveness: ``finished`` never blinks); one START: the harness's
    ``started`` is ``armed`` or START pending, ``start_go`` only with START pending and
    the layer not armed, armed never with START pending; nothing else pending (no flush,
    sweep, timeout, end of layer); no chunk of the chosen row sent unarmed;
  - the chunk table's (shared): R's entry of a data lane is the table's after W's pending
    write-back (while W is live); W writes only while live, its one-hot its index, at
    most one lane an entry; ``others_open`` is the open rows but those W writes;
  - its own: the write buffers (the slots in flight -- A to B, by their ``slot`` fields --
    distinct and not filled, ``wf_used`` = filled + in flight, the write slot ``rp +
    wf_used``, the live slots ``rp .. rp + wf_used``, ``room`` only below a full buffer);
    the chosen packet (a 1 in a live slot of its lane is its own: in flight until B, at
    the stage its age says, filled after; once dropped, not a write in B and its filled
    slot void); the harness's own registers (taken before dropped or aged); an open row
    with its expert out of range never allocated in the row-info table (once its
    opener's row-info write, a cycle after the table's, is done).

  The START ones were the last missing: without them the induction starts with START
  pending though the harness saw none, so a START the harness allows arms the layer with
  START still pending.
* ``credits`` -- **every accepted row of the chosen (source, tag) returns exactly one
  credit, ``EVENT_LATENCY`` cycles after its last chunk, and none otherwise**: k-induction
  closes at k = 5 (paged and with count packets too) with the layer's and the chunk
  table's invariants above (without the table's it needs k = 7) and its own: the
  chosen row's chunks in A, R, T and AL are among those sent (``row_sent``) with the row's
  expert (``row_expert``), once a stage, not in both A and R; its chunk-table entry after
  W's write-back is open exactly while some but not all of the chunks sent are past R,
  and then holds exactly those chunks and the row's expert; ``credit_due`` is one-hot at
  most, non-zero exactly while the row is full (sent, its credit not yet returned), at A
  only with a chunk of the row in A, at R only with the row's last group in R.
* ``hang`` -- **no hang** (the three bounds after the input stops): k-induction closes at
  k = 5 (paged and with count packets too) with the layer's invariants, the write
  buffers' (as ``dropped``, without the chosen packet's), the queues' (as ``queues``) and
  its own, on the quiet-cycle count ``n`` (``quiet_cycles``, saturating at 14): stage s
  (A = 0 .. B = 4) holds no packet (nor a verdict, an event or a credit) once ``n > s``;
  once ``n >= 5`` each write buffer holds at most ``D + 5 - n`` slots and each queue at
  most ``depth + 5 - n`` entries (or none); before START no stage after R is live, the
  queues are empty, and a write buffer holds no write and at most one filled (void) slot
  -- so START, pending, waits for nothing but the pipeline; the filled slots of a buffer
  are its oldest (B fills them in the order taken); a filled slot at position ``pos``
  from the head with ``pos + n >= D`` was filled since the input stopped and is at most
  ``n + 1`` groups old -- so the ordering guard's age limit lets the input in again.
* the credits group also proves the open agreement (the data lanes on one row in R read
  entries that agree on ``open``), with no more invariants; so every property above is
  unbounded in some group; with all of them asserted together the harness is the BMC.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Elaboratable, Module, Mux, Signal

from ...spec.formats import PacketKind
from ...rtl.packet_manager import PacketManager
from ...spec.timing import EVENT_LATENCY, WRITE_FIFO_DEPTH
from .common import Props, any_const, any_seq, count_ones, elaborate_into, reset_first
from .page_supply import Regs
from .plant import Plant, planted

PLANTS = {
    # the event reservations count half of an accepted group's packets: the input is let in
    # while the event queue has no room for every event in flight
    "events-half-reserved": Plant(
        "moehub.rtl.reservations", "ev_delta.eq(ev_pop + self.no_ev - n_acc)",
        "ev_delta.eq(ev_pop + self.no_ev - (n_acc >> 1))", "InputReservations",
        ("a queue overflows", "ev_avail + the pop"), "an accepted group reserves half its events",
        host=("moehub.rtl.packet_manager", "PacketManager")),
    # a chunk of a row refused or opened dropped is written: B ignores the row-info grant
    "dropped-row-written": Plant(
        "moehub.rtl.packet_manager", "b.valid.eq(al.setb & info.alloc)", "b.valid.eq(al.setb)",
        "PacketManager", ("dropped packet writes", "dropped chosen packet in B as a write"),
        "B writes a chunk of a row that has no allocation"),
    # a row opened dropped (expert out of range, refused for room) returns no credit: RI
    # gates the credit with the row-info grant, as it gates the write
    "dropped-row-no-credit": Plant(
        "moehub.rtl.packet_manager", "b.cr_valid.eq(al.comp)", "b.cr_valid.eq(al.comp & info.alloc)",
        "PacketManager", ("a credit not exactly",), "a row opened dropped returns no credit"),
    # a void slot leaving its write buffer does not return its reservation: every dropped
    # packet leaks a slot, until the input is never let in again
    "void-slot-kept": Plant(
        "moehub.rtl.packet_manager", "res.pop[j].eq(self.wbuf[j].pop)",
        "res.pop[j].eq(self.wbuf[j].pop & self.wbuf[j].wr.valid)", "PacketManager",
        ("the input not ready", "wf_used0 is not the slots", "wf_used1 is not the slots"),
        "a void slot's reservation never returns"),
}

#: the properties a set may prove alone (``only``), by a word of their messages
ONLY = {"queues": ("a queue overflows", "invariant:"), "dropped": ("a dropped packet writes", "invariant:"),
        "credits": ("two credits for one row", "a credit not exactly", "disagree on open", "invariant:"),
        "hang": ("after the input stopped", "after it stopped (a hang)", "invariant:")}


class _Only(Props):
    """The properties whose message holds one of ``keep``; the others (and the covers)
    left out -- neither asserted nor assumed, so what is proven stands alone."""

    def __init__(self, m, keep):
        super().__init__(m)
        self.keep = keep

    def check(self, cond, message, src_loc_at=0):
        if any(k in message for k in self.keep):
            super().check(cond, message, src_loc_at + 1)

    def cover(self, cond, message):
        pass


class PacketManagerHarness(Elaboratable):
    """The packet manager under its environment, with the properties of the module
    docstring."""

    def __init__(self, cfg, dut_cls=PacketManager, only: str | None = None, plant: str | None = None):
        try:
            if only is not None and only not in ONLY:
                raise ValueError(f"only = {only!r}: unknown; known: {', '.join(ONLY)}")
            self.dut_cls = planted(dut_cls, PLANTS, plant)
        except ValueError:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise
        self.cfg, self.only = cfg, only
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        p = Props(m) if self.only is None else _Only(m, ONLY[self.only])
        self.messages = p.messages
        pm = self.dut_cls(cfg, formal=True)
        self.regs = elaborate_into(m, "dut", pm, platform,
                                   into=("reserve", "table", "eos", *(f"wbuf{j}" for j in range(cfg.lanes))))
        reset_first(m)
        # (an invariant T's row-full relies on, which the equivalence induction of its
        # refactor -- T forming each lane's row-full for an open and a closed row and
        # choosing by the entry's open, checked against the revision before it -- could
        # not see: the lanes on one row read one entry)
        p.check(~pm.formal_open_split, "two lanes on one row read entries that disagree on open")
        self._control(m, p, pm)
        ev_lvl, ev_fill = self._queue(m, p, pm.ev, cfg.event_queue_depth, "ev")
        cr_lvl, cr_fill = self._queue(m, p, pm.cr, cfg.credit_queue_depth, "cr")
        m.d.comb += [pm.tracker.clearing.eq(0), pm.tracker.idle.eq(ev_lvl == 0),
                     pm.tracker.sweep_done.eq(pm.tracker.sweep_req)]
        self._allocator(m, p, pm)
        self.credit_now = Signal(name="chosen_credit")
        self._lanes(m, p, pm)
        self._credits(m, p, pm)
        self._chosen_packet(m, p, pm)
        self._drain(m, p, pm, ev_lvl, cr_lvl, ev_fill & cr_fill)
        if self.only == "queues":
            self._queue_invariants(m, p, pm, ev_lvl, cr_lvl)
        if self.only in ("dropped", "credits"):
            self._layer_invariants(m, p, pm)
            self._table_invariants(m, p, pm)
        if self.only == "dropped":
            self._buffer_invariants(m, p, pm)
        if self.only == "credits":
            self._credit_invariants(m, p, pm)
        if self.only == "hang":
            self._layer_invariants(m, p, pm)
            self._buffer_invariants(m, p, pm, chosen=False)
            self._queue_invariants(m, p, pm, ev_lvl, cr_lvl)
            self._drain_invariants(m, p, pm, ev_lvl, cr_lvl)
        return m

    def _buffer_invariants(self, m, p, pm, chosen=True):
        """The ``dropped`` group's own invariants (the module docstring): the write
        buffers, the chosen packet's data in its lane's buffer, the harness's own
        registers of the chosen packet, the row-info entries of rows opened with an expert
        out of range. ``chosen`` False: the write buffers' alone (the ``hang`` group)."""
        L, D = self.cfg.lanes, WRITE_FIFO_DEPTH
        ch = self.chosen
        stages = [("a", "valid"), ("r", "valid"), ("t", "pv"), ("al", "pv"), ("b", "pv")]
        for j in range(L):
            w = Regs(self.regs, f"wbuf{j}.")
            ready, void, rp, wa = w[f"wf_ready{j}"], w[f"wf_void{j}"], w[f"wf_rp{j}"], w[f"wf_wa{j}"]
            used = self.regs[f"reserve.wf_used{j}"]
            fly = [(getattr(getattr(pm, st)[j], v), getattr(pm, st)[j].slot) for st, v in stages]
            inflight = Signal(D, name=f"inv_inflight{j}")
            m.d.comb += inflight.eq(Cat(Cat(v & (sl == k) for v, sl in fly).any() for k in range(D)))
            p.check(count_ones([v for v, _ in fly]) == count_ones([inflight[k] for k in range(D)]),
                    f"invariant: two packets in flight on lane {j} share a slot")
            p.check((ready & inflight) == 0, f"invariant: a slot on lane {j} both in flight and filled")
            live = ready | inflight
            p.check(used == count_ones([live[k] for k in range(D)]),
                    f"invariant: wf_used{j} is not the slots filled and in flight")
            p.check(wa == (rp + used)[:len(wa)], f"invariant: lane {j}'s write slot is not rp + used")
            p.check(live == Cat(((k - rp)[:len(rp)] < used) for k in range(D)),
                    f"invariant: lane {j}'s live slots are not rp .. rp + used")
            p.check(~self.regs["reserve.room"] | (used < D), f"invariant: room with lane {j}'s buffer full")
            if not chosen:
                continue
            data = [w[f"wf_data{j}_{k}"] for k in range(D)]
            mine = (ch["lane"] == j)
            for k in range(D):
                p.check(~(mine & live[k] & (data[k] == 1)) | ((ch["state"] == 1) & (ch["slot"] == k)),
                        "invariant: data 1 in a live slot of the chosen lane is not the chosen packet's")
            p.check(~(mine & ch["dropped"] & ready.bit_select(ch["slot"], 1) & (Array(data)[ch["slot"]] == 1))
                    | void.bit_select(ch["slot"], 1),
                    "invariant: the dropped chosen packet's slot filled as a write")
            # (the chosen packet down the pipeline: in stage ``age`` (A at 0 .. B at 4) with
            # its slot, then out of it)
            for a, (st, v) in enumerate(stages):
                rec = getattr(pm, st)[j]
                here = mine & (ch["state"] == 1) & (ch["age"] == a)
                p.check(~here | (getattr(rec, v) & (rec.slot == ch["slot"])),
                        "invariant: the chosen packet not in the stage its age says")
            # (its data, 1, in flight only until B, then filled; a slot reused after its write
            # left holds another packet's 0)
            for k in range(D):
                p.check(~(mine & inflight[k] & (data[k] == 1)) | (ch["age"] < len(stages)),
                        "invariant: the chosen packet's data in flight after B")
                p.check(~(mine & ready[k] & (data[k] == 1)) | (ch["age"] >= len(stages)),
                        "invariant: the chosen packet's data filled before B")
            b = pm.b[j]
            p.check(~(mine & ch["dropped"] & (ch["age"] == 4)) | ~b.valid,
                    "invariant: the dropped chosen packet in B as a write")
        if not chosen:
            return
        # (a row opened with an expert out of range is opened dropped: its row-info entry is
        # never allocated while the chunk table holds it open -- once its opener's row-info
        # write, in AL a cycle after the table's, is done)
        tab = pm.table
        for e in range(self.cfg.entries):
            bad = tab.open_v[e] & (tab.body[e].expert >= self.cfg.experts)
            writing = Cat(pm.al_dec[j][e] & pm.al[j].opener for j in range(L)).any()
            p.check(~bad | writing | ~pm.rowinfo[e].alloc,
                    "invariant: an open row with its expert out of range allocated in the row-info table")
        # (the harness's own registers: taken before dropped, its age from its taking)
        ch_ok = ((ch["state"] == 0) & ~ch["dropped"] & (ch["age"] == 0) & ~Cat(*ch["why"].values()).any()) \
            | (ch["state"] == 1)
        p.check(ch_ok, "invariant: the chosen packet dropped or aged before it was taken")
        p.check(ch["dropped"] == Cat(*ch["why"].values()).any(), "invariant: dropped is not one of its reasons")

    def _layer_invariants(self, m, p, pm):
        """The layer's (both groups): no end-of-stream of the chosen source seen or
        pending (so ``finished`` stays low and every group is live while armed), one START
        (``started`` is ``armed`` or START pending), nothing else pending."""
        # (the layer's liveness: the chosen source sends no end-of-stream, so none is seen
        # or pending from it -- the layer never finishes)
        eos = Regs(self.regs, "eos.")
        p.check(~eos["eos_seen"].bit_select(self.cs, 1) & ~eos["p_eos"].bit_select(self.cs, 1),
                "invariant: an end-of-stream of the chosen source seen or pending")
        # (one START, no FLUSH, no watchdog: once armed the layer stays, nothing pending)
        p.check(~pm.armed | (self.started & ~pm.start_pending & ~pm.start_go), "invariant: armed before START or START pending")
        p.check(self.started == (pm.armed | pm.start_pending), "invariant: started is not armed or START pending")
        p.check(~pm.start_go | (pm.start_pending & ~pm.armed), "invariant: START going without START pending")
        p.check(~pm.flush_pending & ~pm.flush_go & ~self.regs["end_go"], "invariant: a flush or the layer's end pending")
        p.check(~pm.sweep_req & ~pm.flush_timeout, "invariant: a sweep or a timeout pending")
        p.check((self.row_sent == 0) | pm.armed, "invariant: chosen-row chunks sent while not armed")

    def _table_invariants(self, m, p, pm):
        """The chunk table's (both groups): R's entry of a data lane is the table's after
        W's pending write-back, W's write-back one-hot and live, ``others_open`` the open
        rows but W's."""
        L, tab = self.cfg.lanes, pm.table
        # (the chunk table's read side: R's entry of each data lane (in range) is its
        # row's entry as the table holds it once W's pending write-back is done; W writes
        # only while live, at most one lane an entry)
        N = self.cfg.entries
        for k in range(L):
            p.check(~tab.w_wen[k] | (tab.w_live & (tab.w_dec[k] == (1 << tab.w_idx[k])[:N])),
                    "invariant: W's write-back not live or its one-hot not its index")
            for k2 in range(k):
                p.check(~(tab.w_wen[k] & tab.w_wen[k2]) | (tab.w_idx[k] != tab.w_idx[k2]),
                        "invariant: two lanes of W write one entry")
        for j, r in enumerate(pm.r):
            want = self._entry_after_w(m, pm, r.idx, f"inv_stored{j}").as_value()
            ent = self.regs[f"table.r_ent{j}"]
            # (after a group T found not live, R's bypass took its write-back, which W
            # drops; every later group is not live either, so what R holds is never used)
            p.check(~(r.d & tab.w_live) | (ent == want),
                    "invariant: R's chunk-table entry is not the table's after W")
        wmask = Const(0, N)
        for k in range(L):
            wmask = wmask | tab.w_dec[k]
        p.check(self.regs["table.others_open"] == (tab.open_v & ~Mux(tab.w_live, wmask, 0)).any(),
                "invariant: others_open is not the open rows W does not write")

    def _entry_after_w(self, m, pm, idx, name):
        """Chunk-table entry ``idx`` as the table holds it once W's pending write-back is
        done (a signal of the harness named ``name``)."""
        tab = pm.table
        stored = Signal(tab.ent[0].shape(), name=f"{name}_stored")
        m.d.comb += [stored.open.eq(tab.open_v.bit_select(idx, 1)),
                     stored.as_value()[1:].eq(Array(tab.body)[idx])]
        want = stored.as_value()
        for k in range(self.cfg.lanes):
            want = Mux(tab.w_wen[k] & (tab.w_idx[k] == idx), tab.w_after[k].as_value(), want)
        ent = Signal(tab.ent[0].shape(), name=name)
        m.d.comb += ent.eq(want)
        return ent

    def _credit_invariants(self, m, p, pm):
        """The ``credits`` group's own invariants (the module docstring): the chosen row's
        chunks in A and R among those sent, each once, with the row's expert; its
        chunk-table entry (after W) open exactly while some but not all of the chunks sent
        are past R, holding those and the row's expert; ``credit_due`` one-hot at most, set
        exactly while the row is full, at the stage of its last group."""
        cfg, L, C = self.cfg, self.cfg.lanes, self.cfg.chunks_per_row
        cs, ct, sent, exp, due = self.cs, self.ct, self.row_sent, self.row_expert, self.credit_due
        full_mask = (1 << C) - 1

        def chosen(rec, v):
            q = rec.pkt
            return v & self._is_data(q) & (q.src == cs) & (q.tag == ct)

        def bits(recs, v):
            out = Const(0, C)
            for rec in recs:
                out = out | Mux(chosen(rec, getattr(rec, v)), (Const(1, C) << rec.pkt.chunk)[:C], 0)
            return out
        early = [(pm.a, "valid"), (pm.r, "valid")]
        for recs, v in early + [(pm.t, "pv"), (pm.al, "pv")]:
            for j, rec in enumerate(recs):
                here = chosen(rec, getattr(rec, v))
                p.check(~here | ((rec.pkt.chunk < C) & sent.bit_select(rec.pkt.chunk, 1) & (rec.pkt.expert == exp)),
                        "invariant: a chosen-row chunk in flight not sent or not of the row's expert")
                for i in range(j):
                    other = chosen(recs[i], getattr(recs[i], v))
                    p.check(~(here & other) | (rec.pkt.chunk != recs[i].pkt.chunk),
                            "invariant: a chosen-row chunk twice in one stage")
        a_bits, r_bits = bits(pm.a, "valid"), bits(pm.r, "valid")
        p.check((a_bits & r_bits) == 0, "invariant: a chosen-row chunk in both A and R")
        past = Signal(C, name="inv_row_past_r")
        m.d.comb += past.eq(sent & ~a_bits & ~r_bits)
        ent = self._entry_after_w(m, pm, cs * cfg.tags_per_source + ct, "inv_row_entry")
        p.check(ent.open == ((past != 0) & (past != full_mask)),
                "invariant: the chosen row's entry not open exactly while part of it is past R")
        p.check(~ent.open | ((ent.bitmap == past) & (ent.expert == exp)),
                "invariant: the chosen row's open entry not the chunks past R or not its expert")
        full = sent == full_mask
        p.check(full == due.any(), "invariant: credit_due set while the chosen row is not full, or not while it is")
        p.check((due & (due - 1)) == 0, "invariant: credit_due not one-hot")
        p.check(~due[0] | (a_bits != 0), "invariant: credit_due at A with no chunk of the row in A")
        p.check(~due[1] | ((a_bits == 0) & (r_bits != 0)), "invariant: credit_due at R but the row's last group not in R")

    def _drain_invariants(self, m, p, pm, ev_lvl, cr_lvl):
        """The ``hang`` group's own invariants (the module docstring): the pipeline empty
        stage by stage as the quiet cycles count, the write buffers and the queues draining
        one a cycle after it, nothing live or queued before START, the filled slots the
        oldest, a slot filled since the input stopped at most ``n + 1`` groups old."""
        cfg, L, D = self.cfg, self.cfg.lanes, WRITE_FIFO_DEPTH
        n = self.quiet_n
        stages = [[a.valid for a in pm.a], [r.valid for r in pm.r],
                  [x for t in pm.t for x in (t.pv, t.valid, t.opener, t.comp, t.setb)],
                  [x for al in pm.al for x in (al.pv, al.valid, al.opener, al.comp, al.setb)],
                  [x for b in pm.b for x in (b.pv, b.valid, b.ev_valid, b.cr_valid)]]
        for s_, bits in enumerate(stages):
            p.check((n <= s_) | ~Cat(*bits).any(), "invariant: a stage holds a packet after the input stopped")
        pipe = len(stages)
        GB = len(pm.group)
        for j in range(L):
            used = self.regs[f"reserve.wf_used{j}"]
            p.check((n < pipe) | (used == 0) | (used + n <= D + pipe),
                    "invariant: a write buffer drains slower than a slot a cycle once the pipeline is empty")
            w = Regs(self.regs, f"wbuf{j}.")
            ready, void, rp = w[f"wf_ready{j}"], w[f"wf_void{j}"], w[f"wf_rp{j}"]
            filled = count_ones([ready[k] for k in range(D)])
            # (B fills the slots in the order they were taken: the filled ones lead)
            p.check(ready == Cat(((k - rp)[:len(rp)] < filled) for k in range(D)),
                    "invariant: the filled slots of a write buffer not its oldest")
            # (before START every packet is dropped: its slot void, leaving as soon as it is
            # filled, one a cycle -- so at most one waits)
            p.check(pm.armed | (((ready & ~void) == 0) & (filled <= 1)),
                    "invariant: a write, or two filled slots, in a buffer before START")
            # (a slot filled since the input stopped is at most n + 1 groups old; the slots
            # filled before it (at most D) leave first, one a quiet cycle)
            for k in range(D):
                pos = (k - rp)[:len(rp)]
                age = (pm.group - w[f"wf_group{j}_{k}"])[:GB]
                p.check(~ready[k] | (pos + n < D) | (age <= n + 1),
                        "invariant: a slot filled since the input stopped older than the quiet cycles")
        for lvl, depth in ((ev_lvl, cfg.event_queue_depth), (cr_lvl, cfg.credit_queue_depth)):
            p.check((n < pipe) | (lvl == 0) | (lvl + n <= depth + pipe),
                    "invariant: a queue drains slower than an entry a cycle once the pipeline is empty")
            # (before START nothing pushes: the queues are empty, START never waits for them)
            p.check(pm.armed | (lvl == 0), "invariant: a queue holds entries before START")
        for t in pm.t:
            p.check(pm.armed | ~(t.valid | t.opener | t.comp | t.setb), "invariant: T live before START")
        for al in pm.al:
            p.check(pm.armed | ~(al.valid | al.opener | al.comp | al.setb), "invariant: AL live before START")
        for b in pm.b:
            p.check(pm.armed | ~(b.valid | b.ev_valid | b.cr_valid), "invariant: B live before START")

    def _queue_invariants(self, m, p, pm, ev_lvl, cr_lvl):
        """The reservations' strengthening invariants (the module docstring, "queues")."""
        cfg, L, res = self.cfg, self.cfg.lanes, Regs(self.regs, "reserve.")
        lanes = [[a.valid for a in pm.a], [r.valid for r in pm.r], [t.pv for t in pm.t],
                 [al.pv for al in pm.al], [b.pv for b in pm.b]]
        p.check(res["n_acc"] == count_ones(lanes[0]), "invariant: n_acc is not the packets in A")
        after_a = count_ones([x for stage in lanes[1:] for x in stage])
        for q, lvl, depth, no, field in ((pm.ev, ev_lvl, cfg.event_queue_depth, pm.b_no_ev, "ev_valid"),
                                         (pm.cr, cr_lvl, cfg.credit_queue_depth, pm.b_no_cr, "cr_valid")):
            name = "ev" if q is pm.ev else "cr"
            avail, popped = res[f"{name}_avail"], res[f"{name}_pop"]
            p.check(Cat(~getattr(b, field) | b.pv for b in pm.b).all(),
                    f"invariant: a {name} push from a lane of B without a packet")
            p.check(no == count_ones([b.pv & ~getattr(b, field) for b in pm.b]),
                    f"invariant: B's {name} reservations returned are not its packets that push none")
            p.check(avail + popped + lvl + after_a == depth,
                    f"invariant: {name}_avail + the pop counted late + level + packets after A is not the depth")

    # ------------------------------------------------------------------ environment
    def _control(self, m, p, pm):
        """One START at most; no FLUSH, no watchdog; bases 0."""
        start = any_seq(m, 1, "csr_start")
        once = Signal(name="started")
        with m.If(start):
            m.d.sync += once.eq(1)
        p.assume(~(start & once))
        for w in pm.wr:
            m.d.comb += w.ready.eq(any_seq(m, 1, "wr_ready"))
        m.d.comb += [pm.csr.start.eq(start), pm.csr.flush.eq(0), pm.csr.clear_errors.eq(0),
                     pm.csr.timeout.eq(0)]
        m.d.comb += [b.eq(0) for b in pm.region_base]
        self.armed, self.start, self.started = pm.status.armed, start, once

    def _queue(self, m, p, push, depth, name):
        """A queue as its level: pushes in, a pop when the free consumer is ready and the
        queue holds something. Asserts the pushes never exceed the room. Returns the level
        and whether the consumer took an entry whenever there was one (for the drain)."""
        lvl = Signal(range(depth + 1), name=f"{name}_level")
        ready = any_seq(m, 1, f"{name}_ready")
        pop = ready & (lvl != 0)
        n = count_ones(list(push.valid))
        m.d.comb += [push.pop.eq(pop), push.empty.eq(lvl == 0)]
        p.check(lvl + n - pop <= depth, "a queue overflows (pushes beyond the room)")
        m.d.sync += lvl.eq(lvl + n - pop)
        p.cover(lvl >= 2 * self.cfg.lanes, f"two groups in the {name} queue")
        return lvl, ready

    def _allocator(self, m, p, pm):
        """A free allocator: any row, a grant only to a request."""
        L = self.cfg.lanes
        ok = any_seq(m, L, "alloc_ok")
        m.d.comb += pm.alloc.ok.eq(ok)
        m.d.comb += [pm.alloc.row[j].eq(any_seq(m, self.cfg.row_bits, f"alloc_row{j}")) for j in range(L)]
        p.assume((ok & ~pm.alloc.req) == 0)
        if self.cfg.paged:
            # (paged: the page gate between the packet manager and the allocator is free too
            # -- any page for a grant (its refusals are the allocator's free ``ok``), any
            # supported tile size, any pool base, PAGE_BAD pulses)
            from ...rtl.paging.regions import tile_sizes
            m.d.comb += [pm.alloc_page[j].eq(any_seq(m, self.cfg.page_bits, f"alloc_page{j}")) for j in range(L)]
            sh = any_seq(m, len(tile_sizes(self.cfg)), "tile_sh")
            p.assume((sh != 0) & ((sh & (sh - 1)) == 0))
            m.d.comb += [pm.tile_sh.eq(sh), pm.pool_base.eq(any_seq(m, self.cfg.addr_bits, "pool_base")),
                         pm.page_bad.eq(any_seq(m, 1, "page_bad"))]

    def _is_data(self, q):
        """The packet is a chunk: not an end-of-stream, nor (count packets) a count packet
        (the packet format's kinds, decoded here, not by the packet manager's decoder)."""
        if not self.cfg.count_packets:
            return q.kind == PacketKind.DATA
        return (q.kind != PacketKind.EOS) & (q.kind != PacketKind.COUNT)

    def _lanes(self, m, p, pm):
        """Free packets; the chosen row's source behaves (see the module docstring)."""
        cfg = self.cfg
        L, C = cfg.lanes, cfg.chunks_per_row
        self.cs = cs = any_const(m, range(cfg.sources), "chosen_src")
        self.ct = ct = any_const(m, range(cfg.tags_per_source), "chosen_tag")
        p.assume((cs < cfg.sources) & (ct < cfg.tags_per_source))
        sent = Signal(C, name="row_sent")          # chunks of the chosen row accepted
        exp = Signal(cfg.expert_bits, name="row_expert")
        self.row_sent, self.row_expert = sent, exp
        new_bits = Const(0, C)
        for j in range(L):
            i = pm.i[j]
            m.d.comb += [i.valid.eq(any_seq(m, 1, f"in_valid{j}")),
                         i.payload.eq(any_seq(m, len(i.payload.as_value()), f"in_payload{j}"))]
            q = i.payload
            mine = i.valid & (q.src == cs) & ((q.tag == ct) | ~self._is_data(q))
            p.assume(~mine | (self._is_data(q) & self.armed & (q.chunk < C) & ~sent.bit_select(q.chunk, 1)))
            p.assume(~mine | (sent == 0) | (q.expert == exp))
            for k in range(j):
                qk = pm.i[k].payload
                other = pm.i[k].valid & (qk.src == cs) & ((qk.tag == ct) | ~self._is_data(qk))
                p.assume(~(mine & other) | ((q.chunk != qk.chunk) & (q.expert == qk.expert)))
            acc = mine & i.ready
            new_bits = new_bits | Mux(acc, Const(1, C) << q.chunk, 0)[:C]
            with m.If(acc & (sent == 0)):
                m.d.sync += exp.eq(q.expert)
        full = (sent | new_bits) == (1 << C) - 1
        self.row_done = Signal(name="row_last_accepted")
        m.d.comb += self.row_done.eq(full & (new_bits != 0))
        # (a new row only after the credit of the last one: the row stays "full" until then)
        with m.If(self.credit_now):
            m.d.sync += sent.eq(new_bits)
        with m.Else():
            m.d.sync += sent.eq(sent | new_bits)

    def _credits(self, m, p, pm):
        """Exactly one credit per accepted row, EVENT_LATENCY cycles after its last chunk."""
        L = self.cfg.lanes
        hits = [pm.cr.valid[j] & (pm.cr.data[j].src == self.cs) & (pm.cr.data[j].tag == self.ct)
                for j in range(L)]
        due = self.credit_due = Signal(EVENT_LATENCY, name="credit_due")
        m.d.sync += due.eq(Cat(self.row_done, due[:-1]))
        n = count_ones(hits)
        m.d.comb += self.credit_now.eq(n != 0)
        p.check(n <= 1, "two credits for one row in one cycle")
        p.check((n != 0) == due[-1], f"a credit not exactly {EVENT_LATENCY} cycles after the row's last chunk")
        p.cover((n != 0) & self.armed, "a credit returned for an accepted row")

    def _chosen_packet(self, m, p, pm):
        """The chosen packet's drop conditions; none of its data on the lane's writes."""
        cfg = self.cfg
        L = cfg.lanes
        cl = any_const(m, range(L), "chosen_lane")
        p.assume(cl < L)
        pick = any_seq(m, 1, "pick")
        state = Signal(2, name="chosen_state")             # 0 not yet, 1 taken
        valid = Array(i.valid for i in pm.i)[cl]
        ready = Array(i.ready for i in pm.i)[cl]          # (admission may hold lanes behind the first)
        q = Array(i.payload for i in pm.i)[cl]
        now = (state == 0) & pick & valid
        for j in range(L):
            p.assume(~(pm.i[j].valid & (cl == j) & ~now) | (pm.i[j].payload.data == 0))
        p.assume(~now | (q.data == 1))
        slot = Signal(range(WRITE_FIFO_DEPTH), name="chosen_slot")     # its write-buffer slot
        with m.If(now & ready):
            m.d.sync += [state.eq(1), slot.eq(Array(buf.slot for buf in pm.wbuf)[cl])]
        reasons = {
            "not armed": ~self.armed,
            "bad source": (q.src >= cfg.sources) | (self._is_data(q) & (q.tag >= cfg.tags_per_source)),
            "bad chunk": self._is_data(q) & (q.chunk >= cfg.chunks_per_row),
            "end-of-stream or count": ~self._is_data(q),
            "bad expert": q.expert >= cfg.experts,
        }
        dropped = Signal(name="chosen_dropped")
        why = {}
        for name, cond in reasons.items():
            why[name] = Signal(name=f"chosen_{name.replace(' ', '_').replace('-', '_')}")
            with m.If(now & ready & cond):
                m.d.sync += [dropped.eq(1), why[name].eq(1)]
        # overflow: its row's request refused, in T, 3 cycles after acceptance
        age = Signal(range(8), name="chosen_age")
        with m.If((state == 1) & (age != 7)):
            m.d.sync += age.eq(age + 1)
        req = Array(pm.alloc.req[j] & ~pm.alloc.ok[j] for j in range(L))[cl]
        why["overflow"] = Signal(name="chosen_overflow")
        with m.If((state == 1) & (age == 2) & req):
            m.d.sync += [dropped.eq(1), why["overflow"].eq(1)]
        wr = Array(w for w in pm.wr)[cl]
        p.check(~(dropped & wr.valid & (wr.payload.data == 1)), "a dropped packet writes")
        self.chosen = dict(lane=cl, state=state, slot=slot, dropped=dropped, age=age, why=why)
        for name, bit in why.items():
            p.cover(bit & (age == 6), f"the chosen packet dropped ({name}), its write time passed")
        p.cover((state == 1) & wr.valid & (wr.payload.data == 1) & wr.ready, "the chosen packet written")

    def _drain(self, m, p, pm, ev_lvl, cr_lvl, consumers):
        """No hang: with no input, every write port and queue consumer ready, and no START,
        the pipeline stops pushing after ``EVENT_LATENCY + 1`` cycles, the write buffers
        are empty ``WRITE_FIFO_DEPTH`` cycles later, and the input is ready again once the
        queues have room for two groups (``2 x lanes`` pops after the pipeline, plus the
        reservations' registered count and room)."""
        L = self.cfg.lanes
        pipe = EVENT_LATENCY + 1
        bounds = {"pipe": pipe, "writes": pipe + WRITE_FIFO_DEPTH, "ready": pipe + 2 * L + 2}
        quiet = (~Cat(i.valid for i in pm.i).any() & Cat(w.ready for w in pm.wr).all() & consumers
                 & ~self.start)
        top = max(bounds.values())
        n = self.quiet_n = Signal(range(top + 1), name="quiet_cycles")
        with m.If(~quiet):
            m.d.sync += n.eq(0)
        with m.Elif(n < top):
            m.d.sync += n.eq(n + 1)
        p.check((n < bounds["pipe"]) | ~(pm.ev.valid.any() | pm.cr.valid.any()),
                f"events or credits pushed {bounds['pipe']} cycles after the input stopped")
        p.check((n < bounds["writes"]) | ~Cat(w.valid for w in pm.wr).any(),
                f"a write left {bounds['writes']} cycles after the input stopped (a hang)")
        p.check((n < bounds["ready"]) | pm.i[0].ready,
                f"the input not ready {bounds['ready']} cycles after it stopped (a hang)")
        p.cover((n == bounds["pipe"]) & self.armed & (ev_lvl != 0), "the pipeline empty after traffic, events queued")
