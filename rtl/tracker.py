"""Flag-based data-availability tracker, and the hub's ordered control-write port.

The tracker takes per-row events in order, one per cycle, from the event queue:

* a row's **metadata** event becomes a metadata write (source, token, slot) into the
  expert's padding-free index array, at ``meta_base + (e * max_rows + row) * meta_bytes``;
* a row's **completion** increments the counter of its (expert, tile) in a counter memory.
  When the counter reaches the tile size, the tile's flag word (value = epoch) is written
  to ``flag_base + 4 * (e * tiles_per_expert + tile)`` and the counter goes back to zero.

Events go through a three-stage pipeline, one event per cycle in steady state, every
stage ending in registers (the counter memory's read port, always enabled, registers its
address; so a flop-built memory's read mux starts S1):

* **S0** (pop): the counter address ``e * tiles + (row >> log2 tile rows)`` (a concatenation,
  the shift relative to ``min_tile_rows``) goes to the read port; the offset of the output
  address from its base (metadata index, ``4 * counter``, ``4 * e``) is formed;
* **S1** (read, prepare): the counter is read and, if the word in S2 writes the same
  counter, replaced by that write's value (forwarding: the read port is transparent to
  the write port, so only S2's write can be missing; back-to-back completions in one tile
  need no stall). The output word is prepared: kind, value, and ``base + offset`` in
  8-bit chunks (a carry ripples through one chunk at most; generate/propagate per chunk);
* **S2** (update, output): ``full`` = counter == target (``tile_rows - 1``, latched at layer
  start); the counter is written back (``+ 1``, or 0 when full); the carries between the
  address chunks are resolved and the word is loaded into the ctl output register
  (metadata always, a flag when the tile is full).

The pipeline advances as a whole; it holds while S2 holds a word and the ctl output
register can take none (also when that word would emit nothing: it keeps the compare
off the hold signal). While it holds, S2 keeps writing the same counter value
(idempotent) and the read port re-reads S1's counter, so the forwarding stays exact.

A flag never leaves before the data writes of its rows: each completion carries the
pipeline group of its row's last write, and a flag waits in the ctl output register while
a write of that group or an older one is still in the packet manager's B stage or its
write FIFOs.

At the end of a layer (``sweep_req``) the tracker writes, per expert, the final row count
to ``count_base + 4 * e``, flags the last partial tile if all its rows are complete
(and zeroes its counter), then writes the layer-done word (value = epoch) at
``count_base + 4 * experts`` and pulses ``sweep_done``. A sequencer feeds these as
pseudo-events into S0 -- COUNT(e); LAST(e) for an expert with a partial last tile (S1
reads its counter, S2 flags it if it equals ``rows & (tile_rows - 1)`` and writes 0);
DONE -- one per cycle, each expert's row count registered a word ahead; so the words
leave one per cycle, three cycles after the sweep starts.

Counters therefore return to zero by themselves after a clean layer. After reset, a
flush or an abandoned layer they are *dirty*, and the next ``layer_start`` sweeps the
memory to zero first (``clearing``: one zero write per counter and cycle, fed through the
pipeline too; the hub accepts no packets meanwhile) -- the memory has no reset, as an
SRAM macro would not.
"""
from amaranth import Cat, Module, Mux, Signal, Array
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig, index_bits
from .formats import CtlKind
from .layouts import GROUP_BITS, HubLayouts, group_not_after

#: Kinds of the words in the tracker's pipeline: events, the sweep's and the clear's
#: pseudo-events.
K_META, K_CPL, K_COUNT, K_LAST, K_DONE, K_CLEAR = range(6)

#: Chunk width of the address adds: the carry ripples through at most this many bits in
#: S1, and S2 links the chunks (synthesis maps any add it is given as a ripple as long as
#: the clock target allows, so the structure itself must be short).
ADD_CHUNK = 8


def _and_prefix(m, v, name):
    """Bit i: AND of v[0..i] (Kogge-Stone)."""
    n = len(v)
    d, lvl = 1, 0
    while d < n:
        v2 = Signal(n, name=f"{name}_{lvl}")
        m.d.comb += v2.eq(v & ((v << d)[:n] | ((1 << d) - 1)))
        v, d, lvl = v2, d * 2, lvl + 1
    return v


class AvailabilityTracker(wiring.Component):
    """Members
    -------
    ev : In(stream event)                per-row events in order
    ctl : Out(stream ctl)                metadata, flags, final counts, done word
    epoch, tile_rows_log2, flag_base, meta_base, count_base : In   (CSRs)
    rows : In(cap_bits).array(experts)   rows allocated per expert (from the allocator)
    layer_start, mark_dirty, sweep_req : In(1)
    sweep_done, clearing, idle : Out(1)
    b_busy, b_group : In                 writes in the packet manager's B stage (ordering guard)
    c_busy, c_group : In(lanes + 1), In.array(lanes + 1)   registered, a cycle old: the oldest
                                         write waiting in each lane's FIFO, and B
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.lay = lay = HubLayouts(cfg)
        E = cfg.experts
        super().__init__({
            "ev": In(stream.Signature(lay.event)),
            "ctl": Out(stream.Signature(lay.ctl)),
            "epoch": In(32), "tile_rows_log2": In(8),
            "flag_base": In(cfg.addr_bits), "meta_base": In(cfg.addr_bits),
            "count_base": In(cfg.addr_bits),
            "rows": In(cfg.cap_bits).array(E),
            "layer_start": In(1), "mark_dirty": In(1), "sweep_req": In(1),
            "sweep_done": Out(1), "clearing": Out(1), "idle": Out(1),
            "b_busy": In(1), "b_group": In(GROUP_BITS), "c_busy": In(cfg.lanes + 1),
            "c_group": In(GROUP_BITS).array(cfg.lanes + 1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.lay
        E = cfg.experts
        ebits = index_bits(E)
        tiles = cfg.tiles_per_expert
        tile_bits = max(1, (tiles - 1).bit_length())
        depth = E * tiles
        aw = max(1, (depth - 1).bit_length())
        cnt_bits = cfg.tile_count_bits
        min_log2 = cfg.min_tile_rows.bit_length() - 1
        max_log2 = cfg.max_tile_rows.bit_length() - 1
        row_log2 = cfg.max_rows_per_expert.bit_length() - 1
        word_bits = 8 * cfg.meta_word_bytes
        shift_m = cfg.meta_word_bytes.bit_length() - 1
        off_bits = max(aw + 2, ebits + row_log2 + shift_m, (E << 2).bit_length())
        A = cfg.addr_bits
        chunks = [(lo, min(lo + ADD_CHUNK, A)) for lo in range(0, A, ADD_CHUNK)]

        m.submodules.counters = mem = Memory(shape=cnt_bits, depth=depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=(wp,))
        # Always enabled: the port then registers its address (a held stage re-reads its
        # counter), and a flop-built array has no logic between that register and S1.
        m.d.comb += rp.en.eq(1)

        # Registers that shape a layer's outputs are latched at layer start.
        sh_rel = Signal(range(max_log2 - min_log2 + 1))   # log2(tile rows / min_tile_rows)
        tile_m1 = Signal(cnt_bits)                          # tile rows - 1 (also the row mask)
        epoch = Signal(32)
        flag_base = Signal(A)
        meta_base = Signal(A)
        count_base = Signal(A)
        dirty = Signal(init=1)
        mode = Signal(2)                          # RUN, CLEAR, SWEEP
        RUN, CLEAR, SWEEP = 0, 1, 2
        clear_addr = Signal(aw)

        def counter_addr(expert, row):
            """Counter of (expert, tile of ``row``): the expert above the tile index
            (tiles per expert is a power of two)."""
            tile = Signal(tile_bits)
            m.d.comb += tile.eq((row >> min_log2) >> sh_rel)
            if E == 1:
                return tile[:aw]
            if tiles == 1 << tile_bits:
                return Cat(tile, expert)[:aw]
            return (expert * tiles + tile)[:aw]

        # ------------------------------------------------ output register (ctl port)
        ctl_valid = Signal()
        ctl = Signal(lay.ctl)
        ctl_guarded = Signal()
        ctl_group = Signal(GROUP_BITS)
        # A flag waits while any write of its group or an older one is still in flight: in
        # B, or at the head of a lane's FIFO (each FIFO leaves in group order). The guard is
        # a register, computed a cycle ahead for the word the ctl register will hold: the
        # writes in flight then are among those in flight now (their views here are
        # conservative), or newer than any flag the tracker holds.
        def pending_upto(grp):
            return ((self.b_busy & group_not_after(self.b_group, grp))
                    | Cat(self.c_busy[j] & group_not_after(self.c_group[j], grp)
                          for j in range(cfg.lanes + 1)).any())

        blocked = Signal()
        m.d.comb += [self.ctl.valid.eq(ctl_valid & ~blocked), self.ctl.payload.eq(ctl)]
        ctl_fire = self.ctl.valid & self.ctl.ready
        ctl_free = Signal()
        m.d.comb += ctl_free.eq(~ctl_valid | ctl_fire)
        ctl_load = Signal()
        with m.If(ctl_fire & ~ctl_load):
            m.d.sync += ctl_valid.eq(0)

        # ------------------------------------------------ pipeline registers
        t1_valid = Signal()                       # S1
        t1_oh = Signal(6)                         # kind, one-hot (K_*)
        t1_expert = Signal(ebits)
        t1_row = Signal(cfg.cap_bits)             # row of an event; row count in the sweep
        t1_src = Signal(cfg.src_bits)
        t1_token = Signal(cfg.token_bits)
        t1_slot = Signal(cfg.slot_bits)
        t1_group = Signal(GROUP_BITS)
        t1_addr = Signal(aw)                      # counter address
        t1_off = Signal(off_bits)                 # output address - base

        t2_valid = Signal()                       # S2
        t2_we = Signal()                          # writes its counter (completion, LAST, clear)
        t2_wzero = Signal()                       #   ... with 0 (LAST, clear)
        t2_always = Signal()                      # META, COUNT, DONE: always a word out
        t2_flag = Signal()                        # completion, LAST: a flag if the counter is full
        t2_guarded = Signal()                     # a completion's flag: ordering guard
        t2_group = Signal(GROUP_BITS)
        t2_addr = Signal(aw)
        t2_cnt = Signal(cnt_bits)                 # counter value read (forwarded)
        t2_target = Signal(cnt_bits)              # value at which the tile is complete
        t2_kind = Signal(2)                       # the prepared word: kind,
        t2_sum = Signal(A)                        #   address, chunk by chunk without the
        t2_g = Signal(len(chunks))                #   carries between chunks (generate and
        t2_p = Signal(len(chunks))                #   propagate per chunk),
        t2_wdata = Signal(word_bits)              #   value

        # ------------------------------------------------ S2: update, output
        full = Signal()
        w_data = Signal(cnt_bits)
        m.d.comb += [full.eq(t2_cnt == t2_target),
                     w_data.eq(Mux(full | t2_wzero, 0, t2_cnt + 1))]
        # Written every cycle S2 holds a word, also while the pipeline holds: the same
        # value again (idempotent).
        m.d.comb += [wp.addr.eq(t2_addr), wp.data.eq(w_data), wp.en.eq(t2_we)]
        go = Signal()                             # the whole pipeline advances
        m.d.comb += go.eq(~t2_valid | ctl_free)
        carry = [Signal(name=f"addr_c{j}") for j in range(len(chunks))]
        m.d.comb += carry[0].eq(0)
        for j in range(1, len(chunks)):
            m.d.comb += carry[j].eq(t2_g[j - 1] | (t2_p[j - 1] & carry[j - 1]))
        addr = []
        for j, (lo, hi) in enumerate(chunks):
            part = t2_sum[lo:hi]
            run = _and_prefix(m, part, f"addr_run{j}")
            addr.append(part ^ Cat(carry[j], Mux(carry[j], run, 0))[:hi - lo])
        m.d.sync += blocked.eq(Mux(ctl_load, t2_guarded & pending_upto(t2_group),
                                   ctl_guarded & pending_upto(ctl_group)))
        with m.If(t2_valid & (t2_always | (t2_flag & full)) & ctl_free):
            m.d.comb += ctl_load.eq(1)
            m.d.sync += [ctl_valid.eq(1), ctl.kind.eq(t2_kind), ctl.addr.eq(Cat(*addr)),
                         ctl.data.eq(t2_wdata), ctl_guarded.eq(t2_guarded),
                         ctl_group.eq(t2_group)]

        # ------------------------------------------------ S1: read (+ forwarding), prepare
        # The read port is transparent: the counter misses at most the write of S2.
        fwd = t2_we & (t2_addr == t1_addr)
        cnt = Signal(cnt_bits)
        m.d.comb += cnt.eq(Mux(fwd, w_data, rp.data))
        is_meta, is_cpl, is_count = t1_oh[K_META], t1_oh[K_CPL], t1_oh[K_COUNT]
        is_last, is_done, is_clear = t1_oh[K_LAST], t1_oh[K_DONE], t1_oh[K_CLEAR]
        base = Signal(A)
        m.d.comb += base.eq(Mux(is_meta, meta_base, 0) | Mux(is_cpl | is_last, flag_base, 0)
                            | Mux(is_count | is_done, count_base, 0))
        s1_sum = []
        s1_g = []
        s1_p = []
        for j, (lo, hi) in enumerate(chunks):
            b = base[lo:hi]
            if lo < off_bits:
                o = t1_off[lo:min(hi, off_bits)]
                s = Signal(hi - lo + 1, name=f"addr_s{j}")
                m.d.comb += s.eq(b + o)
                s1_sum.append(s[:hi - lo])
                s1_g.append(s[hi - lo])
                s1_p.append((b ^ o).all())
            else:
                s1_sum.append(b)
                s1_g.append(0)
                s1_p.append(b.all())
        value = Signal(word_bits)
        m.d.comb += value.eq(Mux(is_meta, Cat(t1_src, t1_token, t1_slot), 0)
                             | Mux(is_count, t1_row, 0)
                             | Mux(is_cpl | is_last | is_done, epoch, 0))
        kind = Signal(2)
        m.d.comb += kind.eq(Mux(is_meta, CtlKind.META, 0) | Mux(is_cpl | is_last, CtlKind.FLAG, 0)
                            | Mux(is_count, CtlKind.COUNT, 0) | Mux(is_done, CtlKind.DONE, 0))
        with m.If(go):
            m.d.sync += [
                t2_valid.eq(t1_valid),
                t2_we.eq(t1_valid & (is_cpl | is_last | is_clear)),
                t2_wzero.eq(is_last | is_clear),
                t2_always.eq(is_meta | is_count | is_done),
                t2_flag.eq(is_cpl | is_last),
                t2_guarded.eq(is_cpl),
                t2_group.eq(t1_group), t2_addr.eq(t1_addr),
                t2_cnt.eq(cnt), t2_target.eq(Mux(is_last, t1_row[:cnt_bits] & tile_m1, tile_m1)),
                t2_kind.eq(kind), t2_sum.eq(Cat(*s1_sum)), t2_g.eq(Cat(*s1_g)),
                t2_p.eq(Cat(*s1_p)), t2_wdata.eq(value),
            ]

        # ------------------------------------------------ S0: pop an event (or a pseudo-event)
        sq_valid = Signal()                       # sweep sequencer: a word to inject
        sq_kind = Signal(3)
        sq_e = Signal(ebits)
        sq_rows = Signal(cfg.cap_bits)
        s0_valid = Signal()
        s0_kind = Signal(3)
        s0_expert = Signal(ebits)
        s0_row = Signal(cfg.cap_bits)
        ev = self.ev.payload
        m.d.comb += self.ev.ready.eq((mode == RUN) & self.ev.valid & go)
        with m.Switch(mode):
            with m.Case(RUN):
                m.d.comb += [s0_valid.eq(self.ev.valid),
                             s0_kind.eq(Mux(ev.complete, K_CPL, K_META)),
                             s0_expert.eq(ev.expert), s0_row.eq(ev.row)]
            with m.Case(SWEEP):
                m.d.comb += [s0_valid.eq(sq_valid), s0_kind.eq(sq_kind), s0_expert.eq(sq_e),
                             s0_row.eq(sq_rows)]
            with m.Case(CLEAR):
                m.d.comb += [s0_valid.eq(1), s0_kind.eq(K_CLEAR)]
        s0_addr = Signal(aw)
        m.d.comb += [s0_addr.eq(Mux(mode == CLEAR, clear_addr, counter_addr(s0_expert, s0_row))),
                     rp.addr.eq(Mux(go, s0_addr, t1_addr))]
        s0_off = Signal(off_bits)
        meta_index = Cat(ev.row[:row_log2], s0_expert) if E > 1 else ev.row[:row_log2]
        with m.Switch(s0_kind):
            with m.Case(K_META):
                m.d.comb += s0_off.eq(meta_index << shift_m)
            with m.Case(K_CPL, K_LAST):
                m.d.comb += s0_off.eq(s0_addr << 2)
            with m.Case(K_COUNT):
                m.d.comb += s0_off.eq(s0_expert << 2)
            with m.Case(K_DONE):
                m.d.comb += s0_off.eq(E << 2)
        with m.If(go):
            m.d.sync += [t1_valid.eq(s0_valid), t1_oh.eq(1 << s0_kind), t1_expert.eq(s0_expert),
                         t1_row.eq(s0_row), t1_addr.eq(s0_addr), t1_off.eq(s0_off),
                         t1_src.eq(ev.src), t1_token.eq(ev.token),
                         t1_slot.eq(ev.slot), t1_group.eq(ev.group)]

        # ------------------------------------------------ layer start: clear if dirty
        with m.If(self.mark_dirty):
            m.d.sync += dirty.eq(1)
        with m.If(self.layer_start):
            m.d.sync += [sh_rel.eq(self.tile_rows_log2 - min_log2),
                         tile_m1.eq((1 << self.tile_rows_log2[:max_log2.bit_length()]) - 1),
                         epoch.eq(self.epoch),
                         flag_base.eq(self.flag_base), meta_base.eq(self.meta_base),
                         count_base.eq(self.count_base)]
            with m.If(dirty | self.mark_dirty):
                m.d.sync += [mode.eq(CLEAR), clear_addr.eq(0)]
        with m.If((mode == CLEAR) & go):
            # one zero write per counter, through the pipeline (forwarding covers the
            # events that follow the last ones)
            m.d.sync += clear_addr.eq(clear_addr + 1)
            with m.If(clear_addr == depth - 1):
                m.d.sync += [mode.eq(RUN), dirty.eq(0)]

        # ------------------------------------------------ end-of-layer sweep (sequencer)
        # sq_*: the word to inject next -- COUNT(e), LAST(e) if e has a partial last tile,
        # ..., DONE; rows[e] and its partial bit come from registers loaded a word ahead.
        rows_rd = Array(self.rows)
        ld_e = Signal(range(E + 1))               # next expert to load
        sq_part = Signal()                        # rows[sq_e] & (tile rows - 1) != 0
        ld_rows = Signal(cfg.cap_bits)
        m.d.comb += ld_rows.eq(rows_rd[ld_e])

        def load_next():
            with m.If(ld_e == E):
                m.d.sync += sq_kind.eq(K_DONE)
            with m.Else():
                m.d.sync += [sq_kind.eq(K_COUNT), sq_e.eq(ld_e), sq_rows.eq(ld_rows),
                             sq_part.eq((ld_rows[:cnt_bits] & tile_m1) != 0),
                             ld_e.eq(ld_e + 1)]

        with m.If((mode == RUN) & self.sweep_req & ~t1_valid & ~t2_valid & ~self.ev.valid):
            m.d.sync += [mode.eq(SWEEP), sq_valid.eq(1), sq_kind.eq(K_COUNT), sq_e.eq(0),
                         sq_rows.eq(self.rows[0]),
                         sq_part.eq((self.rows[0][:cnt_bits] & tile_m1) != 0), ld_e.eq(1)]
        with m.If((mode == SWEEP) & sq_valid & go):
            with m.Switch(sq_kind):
                with m.Case(K_COUNT):
                    with m.If(sq_part):
                        m.d.sync += sq_kind.eq(K_LAST)
                    with m.Else():
                        load_next()
                with m.Case(K_LAST):
                    load_next()
                with m.Case(K_DONE):
                    m.d.sync += sq_valid.eq(0)
        with m.If((mode == SWEEP) & ~sq_valid & ~t1_valid & ~t2_valid & ~ctl_valid):
            m.d.comb += self.sweep_done.eq(1)
            m.d.sync += mode.eq(RUN)

        m.d.comb += [
            self.clearing.eq(mode == CLEAR),
            self.idle.eq((mode == RUN) & ~t1_valid & ~t2_valid),
        ]
        return m
