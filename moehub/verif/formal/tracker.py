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
  stays until ``sweep_done``, and meanwhile no event and no START come; ``rows[ce]`` then
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

**Bounded** (BMC 22 on ``tiny/trk-small``: reset, clearing the 8 counters, a tile's events,
its flag, the sweep and the done word). k-induction does not close on the properties
alone, at any k: the environment may hold the ctl port's ready low and send no event for
any number of cycles, so an induction trace can start in a state no run reaches and keep
it for k cycles. Measured: ``prove`` at k = 8 (9.5 s) -- the trace starts in the sweep with
``ref_metas`` = 8 and no metadata word out, both ctl output registers full and the port
blocked 7 cycles, then the sweep ends: "a metadata word missing at the end of the layer".
The strengthening invariants it would need, each relating the tracker's registers (as
the queue's are related, :func:`.common.elaborate_into`) to the reference:

* metadata words: ``ref_meta_words`` + the metadata words of ``ce`` in flight (t1, t2 and
  the two ctl output registers, by kind and address) == ``ref_metas``, and those in flight
  are rows ``ref_meta_words`` ... in order; none in flight in SWEEP mode;
* the chosen tile's counter: its word in the counter memory (plus S2's write when S2
  holds its completion, for the read port's forwarding) == the completions of its rows
  in t1/t2 not yet counted subtracted from the rows of ``ref_done`` in the tile, modulo
  a flag in flight, and 0 after a clean layer or a clearing sweep past its address;
  ``flagged`` == a flag of the tile has left or waits in a ctl output register;
* the modes: CLEAR only with ``clear_addr`` below the counters and every counter below it
  zero; SWEEP only after the sweep's rise, the sweep sequencer's expert, its registered
  row count and ``parts`` against ``rows`` and ``ref_counted``; the latched config
  (``sh_rel``, ``tile_m1``, the bases, epoch) equal to the harness's latched values;
* the ctl ring: ``ctl_count`` in 0..2 agreeing with ``ctl_wp``/``ctl_rp`` and the valid
  words.

The counter memory is an ``amaranth.lib.memory.Memory`` (no reset, like an SRAM): its
words are not signals of the tracker's module, so the second group needs the memory
modelled in flops inside the harness (as ``memory_map`` does in ``SCRIPT``) to be
named -- the work left for this proof.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Elaboratable, Module, Signal
from amaranth.lib import data

from ...spec.formats import CtlKind
from ...rtl.tracker import AvailabilityTracker
from .common import Props, any_const, any_seq, count_ones, reset_first

#: Yosys commands after ``prep``: the tile-counter memory (no reset, like an SRAM) starts
#: with arbitrary contents instead of the zeros of its Amaranth ``init``.
SCRIPT = ("memory_map", "opt_clean", "setattr -unset init w:*counters*")


class TrackerHarness(Elaboratable):
    """The tracker under its environment, with the properties of the module docstring."""

    def __init__(self, cfg, dut_cls=AvailabilityTracker):
        self.cfg, self.dut_cls = cfg, dut_cls
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        p = Props(m)
        self.messages = p.messages
        m.submodules.dut = tr = self.dut_cls(cfg)
        reset_first(m)
        self.ce = ce = any_const(m, range(cfg.experts), "chosen_expert")
        p.assume(ce < cfg.experts)
        self._csr(m, p, tr)
        st = self._layer_env(m, p, tr)
        ref = self._events_env(m, p, tr, st)
        self._flag_props(m, p, tr, st, ref)
        self._sweep_props(m, p, tr, st, ref)
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
        p.assume(~(sweep & tr.ev.valid))
        tl_s = Signal(range(cfg.max_tile_rows.bit_length()), name="ref_tile_log2")
        armed, flushed = Signal(name="ref_armed"), Signal(name="ref_flushed")
        rise = sweep & ~sweep_q
        with m.If(start):
            m.d.sync += [started.eq(1), armed.eq(1), flushed.eq(0), tl_s.eq(tr.csr.tile_rows_log2)]
        with m.Elif(rise):
            m.d.sync += armed.eq(0)
        with m.Elif(dirty):
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
