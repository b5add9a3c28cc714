"""Property harness of the availability tracker (:class:`moehub.rtl.tracker.AvailabilityTracker`).

Environment (what the packet manager and the event queue guarantee in the hub):

* the event stream is a queue head: once valid it stays valid with the same payload until
  taken; experts are in range;
* for one chosen expert ``ce`` (``AnyConst``) the events are legal: metadata events name
  rows 0, 1, 2, ... in order (the allocator's dense rows, in the order they were granted),
  a completion names a row whose metadata came before and completes it once; the other
  experts' events are free (they must not disturb ``ce``'s tiles);
* ``layer_start`` and ``mark_dirty`` come only when the tracker is idle with no event
  waiting (START and FLUSH wait for a drained pipeline); ``layer_start`` also with the
  ctl port empty (a narrowing: the hub may START while the ctl register still holds the
  previous layer's last word); ``sweep_req`` rises only then,
  stays until ``sweep_done`` and falls the cycle after, and meanwhile no event and no START come; ``rows[ce]`` then
  equals the rows whose metadata arrived (the allocator's count; every grant makes a
  metadata event before the layer can end);
* the CSRs: ``tile_rows_log2`` within [min, max] (the CSR bank clamps), bases and epoch
  fixed (``AnyConst``, with the output arrays not wrapping the address space);
* the ctl port's ready and the ordering guard's inputs are free (a flag may wait any time);
* the counter memory starts with any contents (it has no reset; see ``SCRIPT``).

Reference state for ``ce`` in the current layer: the metadata events (``metas``), a bit per
completed row, and for one chosen tile ``ct``: whether its flag was written; whether the
count word of ``ce`` was written.

Properties: a flag of (``ce``, ``ct``) is written at most once per layer; during the layer
only when every row of the tile has completed, in the end-of-layer sweep only for the last
partial tile with all its rows completed (never before its rows' events arrived); when the
sweep is done, the tile was flagged exactly if it holds a row and all its rows completed;
the count word of ``ce`` carries ``metas`` (= ``rows[ce]``), once per sweep, before the
done word; every metadata word of ``ce`` goes to its row's entry, in order, once.

**Unbounded**: k-induction closes at k = 3 on ``tiny/trk-small`` (117 s at load ~13 on the
shared 2-core machine); the cover (26 steps) runs reset, START, the clearing of the 8
counters, a tile's events, its flag, the sweep and the done word. The properties alone are
not inductive at any k (the environment may hold the ctl port's ready low and send no event
for any number of cycles, so an induction trace can start in a state no run reaches and keep
it for k cycles), so the harness asserts the strengthening invariants below (messages
"invariant: ..."), relating the tracker's registers (read from its elaborated module,
:func:`.common.elaborate_into`) to the reference.

The counter memory is an ``amaranth.lib.memory.Memory`` (no reset, like an SRAM): its words
are no signals of the tracker's module. The harness names them with
:func:`.common.memory_words`: ``memory_map`` (in ``SCRIPT``) makes each word a flip-flop,
and Yosys connects each to a signal of the harness (``counter0`` ...), which the
invariants read; the RTL is unchanged. The invariants (``_invariants``):

* the layer: before the first START nothing is held and the reference is zero; SWEEP only
  after the sweep's rise (``sweep_q``, not armed), CLEAR only at a layer's start (armed, the
  ring empty, the reference zero), ``dirty`` exactly when the layer was flushed (past
  CLEAR), nothing held after the sweep, every row completed when a layer ended by its
  counts; the latched config (``sh_rel``, ``tile_m1``, epoch, bases) the harness's; the
  mode's copies (``mode_run_ev``, ``mode_clear``) agree with it;
* the words in flight, oldest first -- the ring's head and second (``ctl_count``,
  ``ctl_rp``/``ctl_wp`` consistent), S2's word, t1's: the metadata words of ``ce`` are rows
  ``ref_meta_words``, ``+ 1``, ... in that order, and ``ref_meta_words`` + those in flight
  == ``ref_metas``; each register's word is well formed (t1's kind one-hot, its offset its
  counter's, expert's or the done word's; t2's kind one of completion, last tile, clear or
  a word out whatever the count, a flag at its counter's address with the epoch, a count
  word at its expert's address, ``ce``'s carrying ``ref_metas``; the ring's flags carry the
  epoch, its count and done words their addresses); each mode holds only its words (RUN:
  events and the clearing's last two clears, CLEAR: clears following ``clear_addr``,
  SWEEP: the sequencer's words);
* the sweep: the sequencer's kind, ``ld_e`` one past its expert (every expert once the
  done word is due), its rows and partial bit for ``ce`` (``ref_metas``); the sweep's words
  in flight in sweep order (COUNT(e) = 2e, LAST(e) = 2e + 1, DONE = 2E, strictly
  increasing from the ring's head to the sequencer); ``ce``'s count word counted, or in
  flight exactly once, once the sequencer is past it;
* the chosen counter (``ce``, ``ct``): the value S1 would read for it (the memory word, or
  S2's write to it) is, during the layer, C - n1 modulo the tile (C: the completed rows of
  the tile, n1: a completion of it in t1), a completion in t2 read C - n1 - 1, and the
  flags of the tile issued (left, in the ring or leaving S2) number exactly ``C - n1 ==
  tile rows``; in the sweep the same with C, until ``ce``'s LAST reaches S2 (then 0, and a
  flag issued exactly when all the partial tile's rows completed); while clearing, zero
  once ``clear_addr`` is past it; after a clean layer zero.

The harness's reference keeps a FLUSH that comes with the sweep's rise (the prove found it
dropped), and ``sweep_req`` falls the cycle after ``sweep_done`` (the packet manager clears
it then; without it a second sweep could follow unasked).

Planted bugs (:data:`PLANTS`, ``tests/test_formal.py``): a tile flagged one completion
early (the properties alone fail: step 15); the clearing sweep starting a counter late
(step 14); S1 without S2's forwarding (the counter's invariant fails at step 16).
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import data

from ...spec.formats import CtlKind
from ...rtl.tracker import CLEAR, K_CLEAR, K_COUNT, K_CPL, K_DONE, K_LAST, K_META, RUN, SWEEP, AvailabilityTracker
from .plant import Plant, planted
from .common import Props, any_const, any_seq, count_ones, elaborate_into, memory_words, reset_first

#: Yosys commands after ``prep``: the tile-counter memory (no reset, like an SRAM) starts
#: with arbitrary contents instead of the zeros of its Amaranth ``init``. (The harness adds
#: the commands that connect the words to its signals: ``TrackerHarness.script``.)
SCRIPT = ("memory_map", "opt_clean", "setattr -unset init w:*counters*")

#: Planted bugs (:mod:`.plant`): with one, a BMC from reset must FAIL on the property named.
PLANTS = {
    # the tile's flag one completion early
    "flag-one-early": Plant(
        "moehub.rtl.tracker", "full.eq(t2.cnt == t2.target)", "full.eq(t2.cnt + 1 == t2.target)",
        "AvailabilityTracker", ("before all its rows completed",), "full compared one count short"),
    # S1 reads the counter without S2's write: back-to-back completions of a tile count once
    "no-forwarding": Plant(
        "moehub.rtl.tracker", "fwd = t2.we & (t2.addr == t1.addr)", "fwd = t2.we & (t2.addr == t1.addr) & 0",
        "AvailabilityTracker", ("flag is missing", "completions counted"),
        "the read port's forwarding from S2 left out"),
    # the clearing sweep starts a counter late: the first keeps its power-up value
    "clear-skips-first": Plant(
        "moehub.rtl.tracker", "m.d.sync += clear_addr.eq(0)", "m.d.sync += clear_addr.eq(1)",
        "AvailabilityTracker", ("before all its rows completed",), "the first counter is never cleared"),
}


class TrackerHarness(Elaboratable):
    """The tracker under its environment, with the properties of the module docstring."""

    def __init__(self, cfg, dut_cls=AvailabilityTracker, invariants=True, plant: str | None = None):
        self.cfg, self.invariants = cfg, invariants
        try:
            self.dut_cls = planted(dut_cls, PLANTS, plant)
        except ValueError:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise
        self.messages = {}
        self.script = SCRIPT

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        p = Props(m)
        self.messages = p.messages
        tr = self.dut_cls(cfg)
        self.regs = elaborate_into(m, "dut", tr, platform)
        self.script = SCRIPT
        if self.invariants:                 # (the words, read only by the invariants)
            self.words, connect = memory_words(m, "dut.counters", tr.tl.depth, tr.tl.count_bits, "counter")
            self.script = SCRIPT + connect
        reset_first(m)
        self.ce = ce = any_const(m, range(cfg.experts), "chosen_expert")
        p.assume(ce < cfg.experts)
        self._csr(m, p, tr)
        st = self._layer_env(m, p, tr)
        ref = self._events_env(m, p, tr, st)
        self._flag_props(m, p, tr, st, ref)
        self._sweep_props(m, p, tr, st, ref)
        if self.invariants:
            self._invariants(m, p, tr, st, ref)
        return m

    # ------------------------------------------------------------------ environment
    def _csr(self, m, p, tr):
        """Fixed bases and epoch (no wrap of the output arrays), a clamped tile size."""
        cfg, A = self.cfg, self.cfg.addr_bits
        lo, hi = cfg.min_tile_rows.bit_length() - 1, cfg.max_tile_rows.bit_length() - 1
        span = {"flag_base": 4 * cfg.experts * cfg.tiles_per_expert,
                "meta_base": cfg.experts * cfg.max_rows_per_expert * cfg.meta_word_bytes,
                "count_base": 4 * (cfg.experts + 1)}
        for name, size in span.items():
            v = any_const(m, A, name)
            m.d.comb += getattr(tr.csr, name).eq(v)
            p.assume(v <= (1 << A) - size)
        m.d.comb += tr.csr.epoch.eq(any_const(m, 32, "epoch"))
        tl = any_seq(m, 8, "tile_rows_log2")
        m.d.comb += tr.csr.tile_rows_log2.eq(tl)
        p.assume((tl >= lo) & (tl <= hi))
        m.d.comb += tr.ctl.ready.eq(any_seq(m, 1, "ctl_ready"))
        g = tr.guard
        m.d.comb += [g.b_busy.eq(any_seq(m, 1, "b_busy")), g.b_group.eq(any_seq(m, g.b_group.shape(), "b_group")),
                     g.c_busy.eq(any_seq(m, g.c_busy.shape(), "c_busy"))]
        m.d.comb += [g.c_group[j].eq(any_seq(m, g.c_group[j].shape(), f"c_group{j}"))
                     for j in range(len(g.c_group))]

    def _layer_env(self, m, p, tr):
        """Layer start, dirty marks and the sweep request, as the packet manager gives them.
        Returns a namespace of the layer's reference state."""
        cfg, ly = self.cfg, tr.layer
        start, dirty, sweep = any_seq(m, 1, "layer_start"), any_seq(m, 1, "mark_dirty"), any_seq(m, 1, "sweep_req")
        m.d.comb += [ly.layer_start.eq(start), ly.mark_dirty.eq(dirty), ly.sweep_req.eq(sweep)]
        quiet = ly.idle & ~tr.ev.valid
        sweep_q, done_q, started = Signal(name="sweep_q"), Signal(name="sweep_done_q"), Signal(name="started")
        m.d.sync += [sweep_q.eq(sweep), done_q.eq(ly.sweep_done)]
        # (and with the ctl port empty: the guard was quiet a cycle ago, so no word is held
        # unseen. The hub may START while its ctl register still holds the previous
        # layer's last word, which then leaves after the START: left out here.)
        g = tr.guard
        guard_quiet_q = Signal(name="guard_quiet_q")
        m.d.sync += guard_quiet_q.eq(~g.b_busy & ~g.c_busy.any())
        p.assume(~start | (quiet & ~sweep & ~tr.ctl.valid & guard_quiet_q))
        p.assume(~dirty | quiet)
        p.assume(~(sweep & ~sweep_q) | (quiet & started))          # rises only when drained
        p.assume(~(sweep_q & ~done_q) | sweep)                     # held until sweep_done
        p.assume(~(done_q & sweep))                                # and dropped after it
        p.assume(~(sweep & tr.ev.valid))
        tl_s = Signal(range(cfg.max_tile_rows.bit_length()), name="ref_tile_log2")
        armed, flushed = Signal(name="ref_armed"), Signal(name="ref_flushed")
        rise = sweep & ~sweep_q
        with m.If(start):
            m.d.sync += [started.eq(1), armed.eq(1), flushed.eq(0), tl_s.eq(tr.csr.tile_rows_log2)]
        with m.Else():
            with m.If(rise):
                m.d.sync += armed.eq(0)
            with m.If(dirty):                                      # (a FLUSH may come with the rise)
                m.d.sync += flushed.eq(1)
        p.assume(~rise | armed)                                    # a sweep ends an armed layer
        p.assume(~(dirty & ~start) | armed)                        # FLUSH only while armed
        p.assume(~(start & armed) | dirty)                         # START abandons: dirty
        p.assume(~tr.ev.valid | armed)                             # events only in a layer

        class St:
            pass
        st = St()
        st.start, st.sweep, st.tl, st.rise, st.flushed = start, sweep, tl_s, rise, flushed | dirty
        st.in_sweep = sweep & sweep_q                              # (sweep words leave only then)
        st.started, st.armed, st.flushed_q, st.sweep_q, st.done_q = started, armed, flushed, sweep_q, done_q
        return st

    def _events_env(self, m, p, tr, st):
        """Legal events for the chosen expert; the stream rules. Returns the reference."""
        cfg, ev, ce = self.cfg, self.dut_ev(tr), self.ce
        R = cfg.max_rows_per_expert
        m.d.comb += [ev.valid.eq(any_seq(m, 1, "ev_valid")),
                     ev.payload.eq(any_seq(m, len(ev.payload.as_value()), "ev_payload"))]
        v_q, pl_q = Signal(name="ev_valid_q"), Signal.like(ev.payload.as_value(), name="ev_payload_q")
        took_q = Signal(name="ev_taken_q")
        m.d.sync += [v_q.eq(ev.valid), pl_q.eq(ev.payload.as_value()), took_q.eq(ev.valid & ev.ready)]
        p.assume(~(v_q & ~took_q) | (ev.valid & (ev.payload.as_value() == pl_q)))
        p.assume(ev.payload.expert < cfg.experts)
        metas = Signal(range(R + 1), name="ref_metas")
        done = Signal(R, name="ref_done")
        mine = ev.valid & (ev.payload.expert == ce)
        is_cpl = ev.payload.complete
        row = ev.payload.row
        p.assume(~(mine & ~is_cpl) | (row == metas))
        p.assume(~(mine & is_cpl) | ((row < metas) & ~done.bit_select(row, 1)))
        fire = ev.valid & ev.ready & (ev.payload.expert == ce)
        with m.If(st.start):
            m.d.sync += [metas.eq(0), done.eq(0)]
        with m.Elif(fire & ~is_cpl):
            m.d.sync += metas.eq(metas + 1)
        with m.Elif(fire & is_cpl):
            m.d.sync += done.eq(done | (Const(1, R) << row))
        # rows[ce] is the allocator's count: the rows whose metadata arrived, during a sweep
        for e in range(cfg.experts):
            m.d.comb += tr.rows[e].eq(any_seq(m, cfg.cap_bits, f"rows{e}"))
            p.assume(tr.rows[e] <= R)
        p.assume(~st.sweep | (Array(tr.rows)[ce] == metas))
        # a layer ends by its counts only when every row has completed (else it is flushed)
        p.assume(~st.rise | st.flushed | (done == (Const(1, R + 1) << metas) - 1))

        class Ref:
            pass
        ref = Ref()
        ref.metas, ref.done = metas, done
        return ref

    @staticmethod
    def dut_ev(tr):
        return tr.ev

    # ------------------------------------------------------------------ properties
    def _tile(self, m, st, ref, ct):
        """For tile ``ct`` (at the layer's tile size): (every row of it that exists has
        completed, it holds a row, it is a whole tile and every row of it completed)."""
        R = self.cfg.max_rows_per_expert
        all_done, exists, full = Const(1), Const(0), (ct << st.tl) < R
        for r in range(R):
            in_tile = (Const(r, range(R)) >> st.tl) == ct
            real = Const(r) < ref.metas
            all_done = all_done & (~in_tile | ~real | ref.done[r])
            exists = exists | (in_tile & real)
            full = full & (~in_tile | ref.done[r])
        return all_done, exists, full

    def _flag_props(self, m, p, tr, st, ref):
        """The chosen tile's flag: once, never early, exactly when due at the sweep's end."""
        cfg, ctl = self.cfg, tr.ctl
        ct = any_const(m, range(cfg.tiles_per_expert), "chosen_tile")
        all_done, exists, full = self._tile(m, st, ref, ct)
        fire = ctl.valid & ctl.ready
        w = ctl.payload
        my_flag = fire & (w.kind == CtlKind.FLAG) & (
            w.addr == (tr.csr.flag_base + 4 * (self.ce * cfg.tiles_per_expert + ct))[:cfg.addr_bits])
        flagged = Signal(name="ref_flagged")
        self.ct, self.flagged = ct, flagged
        with m.If(st.start):
            m.d.sync += flagged.eq(0)
        with m.Elif(my_flag):
            m.d.sync += flagged.eq(1)
        p.check(~(my_flag & flagged), "a tile flagged twice in one layer")
        p.check(~my_flag | st.in_sweep | full, "a tile flagged during the layer before all its rows completed")
        p.check(~my_flag | ~st.in_sweep | (all_done & exists), "a tile flagged at the sweep with a row not completed")
        p.check(~my_flag | (w.data == tr.csr.epoch), "a flag without the epoch")
        p.check(~tr.layer.sweep_done | (flagged == (all_done & exists)),
                "at the end of the sweep the tile's flag is missing (or written though not due)")
        p.cover(my_flag & ~st.in_sweep, "a full tile flagged during the layer")
        p.cover(my_flag & st.in_sweep, "the last partial tile flagged by the sweep")
        p.cover(tr.layer.sweep_done & flagged & (ct != 0), "a layer ends with a later tile flagged")

    def _sweep_props(self, m, p, tr, st, ref):
        """The count word of the chosen expert, the done word, the metadata words."""
        cfg, ctl = self.cfg, tr.ctl
        fire = ctl.valid & ctl.ready
        w = ctl.payload
        A = cfg.addr_bits
        my_count = fire & (w.kind == CtlKind.COUNT) & (w.addr == (tr.csr.count_base + 4 * self.ce)[:A])
        is_done = fire & (w.kind == CtlKind.DONE)
        counted = Signal(name="ref_counted")
        self.counted = counted
        with m.If(st.start | tr.layer.sweep_done):
            m.d.sync += counted.eq(0)
        with m.Elif(my_count):
            m.d.sync += counted.eq(1)
        p.check(~my_count | st.in_sweep, "a count word outside the end-of-layer sweep")
        p.check(~my_count | (w.data == ref.metas), "the count word differs from the rows of the layer")
        p.check(~(my_count & counted), "two count words for one expert in a sweep")
        p.check(~is_done | counted, "the done word before the expert's count word")
        p.check(~is_done | (w.data == tr.csr.epoch) & (w.addr == (tr.csr.count_base + 4 * cfg.experts)[:A]),
                "the done word has the wrong value or address")
        # metadata words of the chosen expert: in row order, one per metadata event
        metas_out = Signal(range(cfg.max_rows_per_expert + 1), name="ref_meta_words")
        base = tr.csr.meta_base + self.ce * (cfg.max_rows_per_expert * cfg.meta_word_bytes)
        self.metas_out, self.meta_base_ce = metas_out, base
        in_range = (w.addr >= base) & (w.addr < base + cfg.max_rows_per_expert * cfg.meta_word_bytes)
        my_meta = fire & (w.kind == CtlKind.META) & in_range
        with m.If(st.start):
            m.d.sync += metas_out.eq(0)
        with m.Elif(my_meta):
            m.d.sync += metas_out.eq(metas_out + 1)
        p.check(~my_meta | (w.addr == (base + metas_out * cfg.meta_word_bytes)[:A]),
                "a metadata word out of row order (or to a wrong entry)")
        p.check(~my_meta | (metas_out < ref.metas), "a metadata word before its event")
        p.check(~tr.layer.sweep_done | (metas_out == ref.metas), "a metadata word missing at the end of the layer")
        p.cover(is_done & (ref.metas != 0), "the done word of a layer with rows")
        p.cover(tr.layer.clearing, "the clearing sweep runs")

    # ------------------------------------------------------------------ invariants
    def _invariants(self, m, p, tr, st, ref):
        """The strengthening invariants of the k-induction (see the module docstring): the
        tracker's registers, the ctl ring's words and the chosen counter word against the
        harness's reference."""
        cfg, r, t = self.cfg, self.regs, tr.tl
        A, E, R, B, K = cfg.addr_bits, cfg.experts, cfg.max_rows_per_expert, cfg.meta_word_bytes, t.tile_bits
        ce, ct, csr = self.ce, self.ct, tr.csr

        def inv(cond, msg):
            p.check(cond, f"invariant: {msg}", src_loc_at=1)

        mode = r["mode"]
        run, clear, sweep = mode == RUN, mode == CLEAR, mode == SWEEP
        started, armed, flushed = st.started, st.armed, st.flushed_q
        metas, done = ref.metas, ref.done
        flagged, counted, metas_out = self.flagged, self.counted, self.metas_out
        tile_m1 = r["tile_m1"]
        T = Const(1, t.count_bits + 1) << st.tl
        part_ce = (metas & tile_m1) != 0
        ca = (ce * t.tiles + ct)[:t.counter_addr_bits]

        # ---- the latched config, the modes, the layer
        inv((mode != 3) & (r["mode_run_ev"] == run) & (r["mode_clear"] == clear),
            "mode is RUN, CLEAR or SWEEP; its copies agree")
        inv(~started | ((st.tl >= t.min_log2) & (st.tl <= t.max_log2)
                        & (r["sh_rel"] == st.tl - t.min_log2) & (tile_m1 == T - 1)
                        & (r["epoch"] == csr.epoch) & (r["flag_base"] == csr.flag_base)
                        & (r["meta_base"] == csr.meta_base) & (r["count_base"] == csr.count_base)),
            "the latched config is the layer's")
        cnt = r["ctl_count"]
        empty = ~r["t1_valid"] & ~r["t2_valid"] & (cnt == 0) & ~r["sq_valid"]
        zero_ref = (metas == 0) & (done == 0) & ~flagged & ~counted & (metas_out == 0)
        inv(started | (run & ~armed & ~flushed & r["dirty"] & empty & zero_ref), "before the first START")
        inv(~armed | started, "armed only after a START")
        inv(~sweep | (started & ~armed & st.sweep_q & ~st.done_q), "SWEEP only after the sweep's rise")
        inv(~st.sweep_q | (started & ~armed & (sweep | st.done_q)), "the sweep request only in the sweep")
        inv(~(started & ~armed & ~flushed) | (done == (Const(1, R + 1) << metas) - 1),
            "a layer ended by its counts: every row completed")
        inv(~clear | (armed & ~flushed & r["dirty"] & (cnt == 0) & ~r["sq_valid"] & zero_ref),
            "CLEAR only at a layer's start")
        inv(~started | clear | (r["dirty"] == flushed), "dirty exactly after a flush (past CLEAR)")
        inv(~(run & ~armed & started) | empty, "after the sweep nothing is held")
        inv((metas <= R) & ((done >> metas) == 0) & (metas_out <= metas), "the reference's ranges")

        # ---- the words in flight, oldest first: the ring's head, its second, S2's, t1's
        rp = r["ctl_rp"]
        inv((cnt != 3) & (r["ctl_wp"] == (rp ^ (cnt == 1))), "the ring's pointers and count")
        ring = [(cnt != 0, data.View(tr.lay.ctl, Mux(rp, r["ctl1_word"], r["ctl0_word"]))),
                (cnt == 2, data.View(tr.lay.ctl, Mux(rp, r["ctl0_word"], r["ctl1_word"])))]
        s2 = data.View(t.s2_out, r["s2"])
        oh, t1v, t1a = r["t1_oh"], r["t1_valid"], r["t1_addr"]
        t1_out = (r["base"] + r["t1_off"])[:A]
        t2v, t2a = r["t2_valid"], r["t2_addr"]
        we, wz, fl, always = r["t2_we"], r["t2_wzero"], r["t2_flag"], r["t2_always"]

        # metadata words of the chosen expert: rows metas_out, metas_out + 1, ... in order
        base_ce = self.meta_base_ce
        slots = [(v, w.kind, w.addr) for v, w in ring] + [(s2.valid, s2.word.kind, s2.word.addr),
                                                          (t1v & oh[K_META], CtlKind.META, t1_out)]
        j = Const(0, 3)
        for k, (v, kind, addr) in enumerate(slots):
            mine = v & (kind == CtlKind.META) & (addr >= base_ce) & (addr < base_ce + R * B)
            inv(~mine | (addr == (base_ce + (metas_out + j) * B)[:A]), f"metadata word {k} in row order")
            j = j + mine
        inv(metas_out + j == metas, "every metadata event of the chosen expert in flight or out")

        # t1's word
        e1 = t1a[K:]
        inv(~t1v | ((oh != 0) & ((oh & (oh - 1)) == 0)), "t1's kind is one-hot")
        inv(~(t1v & (oh[K_CPL] | oh[K_LAST])) | (r["t1_off"] == t1a << 2), "a flag's offset is its counter's")
        inv(~(t1v & oh[K_COUNT]) | (r["t1_off"] == e1 << 2), "a count's offset is its expert's")
        inv(~(t1v & (oh[K_COUNT] | oh[K_LAST])) | (e1 < E), "t1's sweep word names an expert")
        inv(~(t1v & oh[K_DONE]) | (r["t1_off"] == E << 2), "the done word's offset")
        inv(~(t1v & oh[K_COUNT] & (e1 == ce)) | (r["t1_row"] == metas), "t1's count of the chosen expert")
        t1_last_ce = t1v & oh[K_LAST] & (e1 == ce)
        inv(~t1_last_ce | ((r["t1_row"] == metas) & part_ce & (t1a[:K] == (metas >> st.tl)[:K])),
            "t1's last tile of the chosen expert")
        # t2's word: a completion, a last tile, a clear, or a word out whatever the count
        e2 = t2a[K:]
        t2cpl, t2last = t2v & fl & ~wz & we, t2v & fl & wz & we
        t2clr, t2word = t2v & ~fl & wz & we & ~always, t2v & always & ~fl & ~we & ~wz
        inv(~we | t2v, "t2 writes only a word it holds")
        inv(~t2v | t2cpl | t2last | t2clr | t2word, "t2's kind")
        inv(~t2v | (fl == (r["t2_kind"] == CtlKind.FLAG)) | t2clr, "t2's flag bit is its kind")
        inv(~(t2v & fl) | ((s2.word.addr == (csr.flag_base + (t2a << 2))[:A]) & (r["t2_wdata"] == csr.epoch)),
            "t2's flag: its counter's address, the epoch")
        inv(~t2cpl | (r["t2_target"] == tile_m1), "a completion's target")
        is_count2 = t2word & (r["t2_kind"] == CtlKind.COUNT)
        is_done2 = t2word & (r["t2_kind"] == CtlKind.DONE)
        inv(~is_count2 | (s2.word.addr == (csr.count_base + (e2 << 2))[:A]), "t2's count word's address")
        inv(~(is_count2 | t2last) | (e2 < E), "t2's sweep word names an expert")
        inv(~(is_count2 & (e2 == ce)) | (r["t2_wdata"] == metas), "t2's count of the chosen expert")
        inv(~is_done2 | ((s2.word.addr == (csr.count_base + 4 * E)[:A]) & (r["t2_wdata"] == csr.epoch)),
            "t2's done word")
        inv(~(t2last & (e2 == ce)) | (part_ce & (t2a[:K] == (metas >> st.tl)[:K])
                                      & (r["t2_target"] == (metas & tile_m1))),
            "t2's last tile of the chosen expert")
        # the ring's words
        for k, (v, w) in enumerate(ring):
            off = (w.addr - csr.count_base)[:A]
            inv(~(v & (w.kind == CtlKind.FLAG)) | (w.data == csr.epoch), f"ring word {k}: a flag's epoch")
            inv(~(v & (w.kind == CtlKind.COUNT)) | ((off[:2] == 0) & ((off >> 2) < E)),
                f"ring word {k}: a count's address")
            inv(~(v & (w.kind == CtlKind.COUNT) & (off == 4 * ce)) | (w.data == metas),
                f"ring word {k}: the chosen expert's count")
            inv(~(v & (w.kind == CtlKind.DONE)) | ((off == 4 * E) & (w.data == csr.epoch)),
                f"ring word {k}: the done word")

        # ---- the words each mode holds
        t1_kinds = {RUN: (K_META, K_CPL, K_CLEAR), CLEAR: (K_CLEAR,), SWEEP: (K_COUNT, K_LAST, K_DONE)}
        for md, kinds in t1_kinds.items():
            inv(~((mode == md) & t1v) | Cat(oh[k] for k in kinds).any(), f"t1's kinds in mode {md}")
        inv(~run | ~(t2last | is_count2 | is_done2), "no sweep word in S2 outside the sweep")
        inv(~sweep | ~(t2cpl | t2clr | (t2word & (r["t2_kind"] == CtlKind.META))), "no event in S2 in the sweep")
        inv(~clear | ~t2v | t2clr, "only clears in S2 while clearing")
        for k, (v, w) in enumerate(ring):
            inv(~(v & ~sweep) | (w.kind == CtlKind.META) | (w.kind == CtlKind.FLAG),
                f"ring word {k}: no sweep word outside the sweep")
        inv(~r["sq_valid"] | sweep, "the sweep sequencer runs only in the sweep")

        # ---- the clearing sweep
        clr_a = r["clear_addr"]
        t1clr = t1v & oh[K_CLEAR]
        inv(~clear | ((clr_a < t.depth) & (t1v == (clr_a != 0)) & (~t1v | (t1a == clr_a - 1))
                      & (t2v == (clr_a >= 2)) & (~t2v | (t2a == clr_a - 2))),
            "the clearing sweep's words follow clear_addr")
        last = t.depth - 1
        inv(~(run & t1clr) | ((t1a == last) & t2clr & (t2a == last - 1)
                              & (clr_a == t.depth % (1 << t.counter_addr_bits))),
            "a clear in t1 after CLEAR: the last counter's")
        inv(~(run & t2clr) | (((t2a == last) & ~t1clr) | ((t2a == last - 1) & t1clr)),
            "a clear in t2 after CLEAR: the last two counters'")
        inv(~(run & (t1clr | t2clr)) | (armed & (done == 0) & ~flagged & (cnt == 0) & (metas_out == 0)),
            "a clear in flight: the layer has just started")

        # ---- the end-of-layer sweep: its sequencer and the order of its words
        sq_v, sq_k, sq_e, ld_e = r["sq_valid"], r["sq_kind"], r["sq_e"], r["ld_e"]
        on_e = (sq_k == K_COUNT) | (sq_k == K_LAST)
        inv(~sq_v | on_e | (sq_k == K_DONE), "the sequencer's kind")
        inv(~(sq_v & on_e) | ((ld_e == sq_e + 1) & (sq_e < E)), "the next expert loaded is the one after")
        inv(~(sweep & ~(sq_v & on_e)) | (ld_e == E), "every expert loaded once the done word is due")
        inv(~(sq_v & (sq_k == K_LAST)) | r["sq_part"], "a last tile only when partial")
        inv(~(sq_v & on_e & (sq_e == ce)) | ((r["sq_rows"] == metas) & (r["sq_part"] == part_ce)),
            "the sequencer's rows of the chosen expert")
        inv(~sweep | (r["sq_parts"].bit_select(ce, 1) == part_ce), "the chosen expert's partial bit")
        P = range(2 * E + 2)
        sq_pos = Signal(P, name="inv_sq_pos")
        m.d.comb += sq_pos.eq(Mux(~sq_v, 2 * E + 1, Mux(sq_k == K_DONE, 2 * E, 2 * sq_e + (sq_k == K_LAST))))
        order = []                                  # (is a sweep word, its position), oldest first
        for v, w in ring:
            off = (w.addr - csr.count_base)[:A]
            order.append((v & ((w.kind == CtlKind.COUNT) | (w.kind == CtlKind.DONE)),
                          Mux(w.kind == CtlKind.DONE, 2 * E, (off >> 2)[:P.stop.bit_length()] * 2)))
        order.append((t2last | is_count2 | is_done2, Mux(is_done2, 2 * E, 2 * e2 + t2last)))
        order.append((t1v & (oh[K_COUNT] | oh[K_LAST] | oh[K_DONE]),
                      Mux(oh[K_DONE], 2 * E, 2 * e1 + oh[K_LAST])))
        order.append((sweep, sq_pos))
        for a in range(len(order)):
            for b in range(a + 1, len(order)):
                (va, pa), (vb, pb) = order[a], order[b]
                inv(~(sweep & va & vb) | (pa < pb), f"the sweep's words in order ({a} before {b})")
        count_ce = [v & (w.kind == CtlKind.COUNT) & ((w.addr - csr.count_base)[:A] == 4 * ce) for v, w in ring]
        count_ce += [is_count2 & (e2 == ce), t1v & oh[K_COUNT] & (e1 == ce)]
        inv(count_ones(count_ce + [counted]) == (sweep & (sq_pos > 2 * ce)),
            "the chosen expert's count word: out (counted) or in flight, once injected")

        # ---- the chosen tile's counter and flag
        words = Array(self.words)
        eff = Mux(we & (t2a == ca), r["w_data"], words[ca])          # what S1 reads for it
        in_tile = [(Const(row, range(R)) >> st.tl) == ct for row in range(R)]
        C = count_ones([in_tile[row] & done[row] for row in range(R)])
        n1 = t1v & oh[K_CPL] & (t1a == ca)
        inv(~n1 | (C >= 1), "a completion in t1 is among the done rows")
        Cn = Signal(range(R + 1), name="inv_counted_rows")
        m.d.comb += Cn.eq(C - n1)
        flags = [v & (w.kind == CtlKind.FLAG) & (w.addr == (csr.flag_base + 4 * ca)[:A]) for v, w in ring]
        flags += [s2.valid & (s2.word.kind == CtlKind.FLAG) & (s2.word.addr == (csr.flag_base + 4 * ca)[:A])]
        F = count_ones(flags + [flagged])
        inv(~(t2cpl & (t2a == ca)) | (r["t2_cnt"] == Cn - 1), "a completion in t2 read its count")
        inv(~(t2last & (t2a == ca)) | (r["t2_cnt"] == C), "the last tile's count in t2")
        layer = run & armed & ~(t1clr & (t1a == ca))
        inv(~layer | (eff == Mux(Cn == T, 0, Cn)), "the counter: the completions counted, modulo the tile")
        inv(~layer | (F == (Cn == T)), "the tile flagged exactly when its completions were counted")
        ct_last = ct == (metas >> st.tl)
        last_done = (sq_pos > 2 * ce + 1) & ~t1_last_ce
        touch = part_ce & ct_last & last_done
        inv(~sweep | (eff == Mux(touch, 0, Mux(C == T, 0, C))), "the counter in the sweep")
        inv(~sweep | (F == Mux(touch, C == (metas & tile_m1), C == T)), "the tile's flags in the sweep")
        inv(~clear | ~(clr_a > ca) | (t1clr & (t1a == ca)) | (eff == 0), "a cleared counter is zero")
        all_done, exists, _ = self._tile(m, st, ref, ct)
        inv(~(run & ~armed & started) | (flagged == (all_done & exists)), "after the sweep: the flag")
        inv(~(run & ~armed & started & ~flushed) | (eff == 0), "after a clean layer the counter is zero")
