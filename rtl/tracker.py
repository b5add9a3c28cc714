"""Flag-based data-availability tracker, and the hub's ordered control-write port.

The tracker takes per-row events in order, one per cycle, from the event queue:

* a row's **metadata** event becomes a metadata write (source, token, slot) into the
  expert's padding-free index array, at ``meta_base + (e * max_rows + row) * meta_bytes``;
* a row's **completion** increments the counter of its (expert, tile) in a counter memory
  (a read-modify-write pipeline of two stages; the read port is transparent to the write
  port, so back-to-back completions in one tile need no stall). When the counter reaches
  the tile size, the tile's flag word (value = epoch) is written to
  ``flag_base + 4 * (e * tiles_per_expert + tile)`` and the counter goes back to zero.

A flag never leaves before the data writes of its rows: each completion carries the
pipeline group of its row's last write, and a flag waits while a write of that group or
an older one is still in the packet manager's B stage or its write FIFOs.

At the end of a layer (``sweep_req``) the tracker writes, per expert, the final row count
to ``count_base + 4 * e``, flags the last partial tile if all its rows are complete
(and zeroes its counter), then writes the layer-done word (value = epoch) at
``count_base + 4 * experts`` and pulses ``sweep_done``.

Counters therefore return to zero by themselves after a clean layer. After reset, a
flush or an abandoned layer they are *dirty*, and the next ``layer_start`` sweeps the
memory to zero first (``clearing``; the hub accepts no packets meanwhile) -- the memory
has no reset, as an SRAM macro would not.
"""
from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig
from .formats import CtlKind
from .layouts import GROUP_BITS, HubLayouts, group_not_after


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
        tiles = cfg.tiles_per_expert
        tile_bits = max(1, (tiles - 1).bit_length())
        depth = E * tiles
        aw = max(1, (depth - 1).bit_length())
        min_log2 = cfg.min_tile_rows.bit_length() - 1
        row_log2 = cfg.max_rows_per_expert.bit_length() - 1

        m.submodules.counters = mem = Memory(shape=cfg.tile_count_bits, depth=depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=(wp,))

        # Registers that shape a layer's outputs are latched at layer start.
        shift = Signal(range(row_log2 + 1))      # log2(tile rows) of the running layer
        epoch = Signal(32)
        flag_base = Signal(cfg.addr_bits)
        meta_base = Signal(cfg.addr_bits)
        count_base = Signal(cfg.addr_bits)
        dirty = Signal(init=1)
        mode = Signal(2)                          # RUN, CLEAR, SWEEP
        RUN, CLEAR, SWEEP = 0, 1, 2
        clear_addr = Signal(aw)

        def counter_addr(expert, row):
            tile = Signal(tile_bits)
            m.d.comb += tile.eq(row >> shift)
            return (expert * tiles + tile)[:aw] if E > 1 else tile[:aw]

        # ------------------------------------------------ output register (ctl port)
        ctl_valid = Signal()
        ctl = Signal(lay.ctl)
        ctl_guarded = Signal()
        ctl_group = Signal(GROUP_BITS)
        # A flag waits while any write of its group or an older one is still in flight: in
        # B, or at the head of a lane's FIFO (each FIFO leaves in group order).
        blocked = ctl_guarded & (
            (self.b_busy & group_not_after(self.b_group, ctl_group))
            | Cat(self.c_busy[j] & group_not_after(self.c_group[j], ctl_group)
                  for j in range(cfg.lanes + 1)).any())
        m.d.comb += [self.ctl.valid.eq(ctl_valid & ~blocked), self.ctl.payload.eq(ctl)]
        ctl_fire = self.ctl.valid & self.ctl.ready
        ctl_free = Signal()
        m.d.comb += ctl_free.eq(~ctl_valid | ctl_fire)
        ctl_load = Signal()
        with m.If(ctl_fire & ~ctl_load):
            m.d.sync += ctl_valid.eq(0)

        def emit(kind, addr, value, guarded=0, grp=0):
            m.d.comb += ctl_load.eq(1)
            m.d.sync += [ctl_valid.eq(1), ctl.kind.eq(kind), ctl.addr.eq(addr), ctl.data.eq(value),
                         ctl_guarded.eq(guarded), ctl_group.eq(grp)]

        # ------------------------------------------------ event pipeline T0 (read) -> T1 (update)
        t1_valid = Signal()
        t1 = Signal(lay.event)
        t1_addr = Signal(aw)
        count = Signal(cfg.tile_count_bits + 1)
        tile_full = Signal()
        m.d.comb += [count.eq(rp.data + 1), tile_full.eq(count == (1 << shift))]
        t1_needs_out = ~t1.complete | tile_full
        t1_go = Signal()
        m.d.comb += t1_go.eq(t1_valid & (~t1_needs_out | ctl_free))
        t1_free = ~t1_valid | t1_go

        pop = Signal()
        m.d.comb += [
            pop.eq((mode == RUN) & self.ev.valid & t1_free),
            self.ev.ready.eq(pop),
            rp.addr.eq(counter_addr(self.ev.payload.expert, self.ev.payload.row)),
            rp.en.eq(t1_free),
        ]
        with m.If(t1_free):
            m.d.sync += [t1_valid.eq(pop), t1.eq(self.ev.payload), t1_addr.eq(rp.addr)]

        with m.If(t1_go):
            with m.If(t1.complete):
                m.d.comb += [wp.addr.eq(t1_addr), wp.data.eq(Mux(tile_full, 0, count)), wp.en.eq(1)]
                with m.If(tile_full):
                    emit(CtlKind.FLAG, flag_base + (t1_addr << 2), epoch,
                         guarded=1, grp=t1.group)
            with m.Else():
                word = Signal(8 * cfg.meta_word_bytes)
                m.d.comb += word.eq(t1.src | (t1.token << cfg.src_bits)
                                    | (t1.slot << (cfg.src_bits + cfg.token_bits)))
                meta_index = (t1.expert << row_log2) | t1.row
                shift_m = cfg.meta_word_bytes.bit_length() - 1
                emit(CtlKind.META, meta_base + (meta_index << shift_m), word)

        # ------------------------------------------------ layer start: clear if dirty
        with m.If(self.mark_dirty):
            m.d.sync += dirty.eq(1)
        with m.If(self.layer_start):
            m.d.sync += [shift.eq(self.tile_rows_log2), epoch.eq(self.epoch),
                         flag_base.eq(self.flag_base), meta_base.eq(self.meta_base),
                         count_base.eq(self.count_base)]
            with m.If(dirty | self.mark_dirty):
                m.d.sync += [mode.eq(CLEAR), clear_addr.eq(0)]
        with m.If(mode == CLEAR):
            m.d.comb += [wp.addr.eq(clear_addr), wp.data.eq(0), wp.en.eq(1)]
            m.d.sync += clear_addr.eq(clear_addr + 1)
            with m.If(clear_addr == depth - 1):
                m.d.sync += [mode.eq(RUN), dirty.eq(0)]

        # ------------------------------------------------ end-of-layer sweep
        sw_e = Signal(range(E + 1))
        sw_phase = Signal(2)   # 0: count write (+ last-tile read), 1: last-tile check, 2: done word, 3: wait
        rows_rd = Array(self.rows)
        mask = Signal(cfg.cap_bits)
        m.d.comb += mask.eq((1 << shift) - 1)
        sw_rows = Signal(cfg.cap_bits)
        m.d.comb += sw_rows.eq(rows_rd[sw_e])
        partial = (sw_rows & mask) != 0
        with m.If((mode == RUN) & self.sweep_req & ~t1_valid & ~self.ev.valid):
            m.d.sync += [mode.eq(SWEEP), sw_e.eq(0), sw_phase.eq(0)]
        with m.If(mode == SWEEP):
            last_addr = Signal(aw)
            m.d.comb += last_addr.eq(counter_addr(sw_e[:max(1, (E - 1).bit_length())], sw_rows))
            with m.Switch(sw_phase):
                with m.Case(0):
                    with m.If(ctl_free):
                        emit(CtlKind.COUNT, count_base + (sw_e << 2), sw_rows)
                        m.d.comb += [rp.addr.eq(last_addr), rp.en.eq(1)]
                        with m.If(partial):
                            m.d.sync += sw_phase.eq(1)
                        with m.Elif(sw_e == E - 1):
                            m.d.sync += sw_phase.eq(2)
                        with m.Else():
                            m.d.sync += sw_e.eq(sw_e + 1)
                with m.Case(1):
                    m.d.comb += rp.en.eq(0)
                    with m.If(ctl_free):
                        with m.If(rp.data == (sw_rows & mask)):
                            emit(CtlKind.FLAG, flag_base + (last_addr << 2), epoch)
                        m.d.comb += [wp.addr.eq(last_addr), wp.data.eq(0), wp.en.eq(1)]
                        with m.If(sw_e == E - 1):
                            m.d.sync += sw_phase.eq(2)
                        with m.Else():
                            m.d.sync += [sw_e.eq(sw_e + 1), sw_phase.eq(0)]
                with m.Case(2):
                    with m.If(ctl_free):
                        emit(CtlKind.DONE, count_base + (E << 2), epoch)
                        m.d.sync += sw_phase.eq(3)
                with m.Case(3):
                    with m.If(~ctl_valid):
                        m.d.comb += self.sweep_done.eq(1)
                        m.d.sync += mode.eq(RUN)

        m.d.comb += [
            self.clearing.eq(mode == CLEAR),
            self.idle.eq((mode == RUN) & ~t1_valid),
        ]
        return m
