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
  address chunks are resolved and the word is written into the ctl output registers
  (metadata always, a flag when the tile is full): two, in a ring.

The pipeline advances as a whole; it holds while S2 holds a word and both ctl output
registers are full (also when that word would emit nothing: it keeps the compare off the
hold signal) -- a condition on registers only, so the hold does not wait for the ctl
port's ready. While it holds, S2 keeps writing the same counter value
(idempotent) and the read port re-reads S1's counter, so the forwarding stays exact.

A flag never leaves before the data writes of its rows: each completion carries the
pipeline group of its row's last write, and a flag waits at the ctl output's head while
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

In the code (:class:`AvailabilityTracker`) each stage is a method that owns the registers
it loads and hands the next stage one :class:`~amaranth.lib.data.StructLayout` record
(the layouts are in :class:`TrackerLayouts`): :meth:`~AvailabilityTracker._s0_pop` loads
``t1_*`` from the ``s0_out`` record, :meth:`~AvailabilityTracker._s1_prepare` loads
``t2_*`` from ``s1_out``, :meth:`~AvailabilityTracker._s2_update` writes the counter and
offers an ``s2_out`` word, which :meth:`~AvailabilityTracker._output` holds in the ctl
output registers behind the ordering guard (:meth:`~AvailabilityTracker._ordering_guard`);
:meth:`~AvailabilityTracker._clearing` and :meth:`~AvailabilityTracker._sweep` are the
two sequencers, the latter handing S0 an ``inject`` record. A pipeline register stays one
named ``Signal`` per field (``t1_row``, ``t2_cnt``, ...; see :class:`_Registers`): the
formal equivalence check (``moehub equiv``) matches registers by name. The tracker stays
one module: S2's counter address and write enable registers take the names of the write
port they drive (``wp__addr``, ``wp__en``), which a counter-memory sub-Component would
change.
"""
from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig, index_bits
from .counts.final import FinalCounts
from ..spec.formats import CtlKind
from .interfaces import layer_handshake_signature, ordering_guard_signature, tracker_csr_signature
from .layouts import GROUP_BITS, HubLayouts, group_not_after, paged

#: Kinds of the words in the tracker's pipeline: events, the sweep's and the clear's
#: pseudo-events.
K_META, K_CPL, K_COUNT, K_LAST, K_DONE, K_CLEAR = range(6)

#: Modes of the tracker: events (RUN), the clearing sweep (CLEAR), the end-of-layer sweep.
RUN, CLEAR, SWEEP = range(3)

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


class _Registers:
    """A stage's registers: one named ``Signal`` per field of a record layout.

    Register names (``<prefix>_<field>``, or as ``rename`` says) do not depend on how the
    records that feed them are built. Fields read as attributes (``t1.row``); :meth:`load`
    latches a record of the same layout field by field; :meth:`view` reads them all as one
    record.
    """

    def __init__(self, layout: data.StructLayout, prefix: str, rename: dict | None = None):
        rename = rename or {}
        self.layout = layout
        self._regs = {name: Signal(field.shape, name=rename.get(name, f"{prefix}_{name}"))
                      for name, field in layout}

    def __getattr__(self, name):
        try:
            return self.__dict__["_regs"][name]
        except KeyError:
            raise AttributeError(name) from None

    def load(self, record):
        """Assignments that latch ``record`` (a view of ``self.layout``)."""
        return [reg.eq(record[name]) for name, reg in self._regs.items()]

    def view(self) -> data.View:
        return data.View(self.layout, Cat(*self._regs.values()))


class TrackerLayouts:
    """Geometry and stage records of the tracker of one hub configuration.

    Parameters
    ----------
    cfg : HubConfig
        The hub configuration.

    Attributes
    ----------
    depth : int
        Tile counters: experts x tiles per expert.
    counter_addr_bits : int
        Width of a counter address (expert above tile).
    count_bits : int
        Width of a tile counter.
    off_bits : int
        Width of an output address's offset from its base.
    chunks : list of (int, int)
        Bit ranges of the chunks of the output address add (:data:`ADD_CHUNK` bits each).
    config : StructLayout
        Registers latched at layer start: ``sh_rel`` (log2 of tile rows over
        ``min_tile_rows``), ``tile_m1`` (tile rows - 1, also the row mask), ``epoch``,
        ``flag_base``, ``meta_base``, ``count_base``.
    inject : StructLayout
        A word entering S0 (an event, or a pseudo-event of the sweep): ``valid``, ``kind``
        (``K_*``), ``expert``, ``row`` (a row count in the sweep).
    s0_out : StructLayout
        S0 -> S1 (the ``t1_*`` registers): ``valid``, ``oh`` (the kind one-hot), ``row``,
        the metadata ``src``/``token``/``slot``, ``group`` (ordering guard), ``addr`` (the
        counter address) and ``off`` (output address - base; computed early for S1's add).
    s1_out : StructLayout
        S1 -> S2 (the ``t2_*`` registers): ``valid``; ``we``/``wzero`` (writes its counter,
        with 0); ``always`` (a word out whatever the count) / ``flag`` (a flag if the tile
        is full); ``guarded`` and ``group`` (ordering guard); ``addr``; ``cnt`` (the counter
        read, forwarded) and ``target`` (its value when the tile is full); the prepared
        word: ``kind``, ``sum``/``g``/``p`` (the address per chunk, generate and propagate:
        computed early, S2 links the carries) and ``wdata``.
    s2_out : StructLayout
        S2 -> the ctl output registers (``ctl0_*``, ``ctl1_*``): ``valid`` (a word goes
        out), ``word`` (the ctl payload),
        ``guarded`` and ``group``.
    """

    def __init__(self, cfg: HubConfig):
        self.experts = E = cfg.experts
        self.expert_bits = index_bits(E)
        self.tiles = cfg.tiles_per_expert
        self.tile_bits = max(1, (self.tiles - 1).bit_length())
        self.depth = E * self.tiles
        self.counter_addr_bits = aw = max(1, (self.depth - 1).bit_length())
        self.count_bits = cfg.tile_count_bits
        self.min_log2 = cfg.min_tile_rows.bit_length() - 1
        self.max_log2 = cfg.max_tile_rows.bit_length() - 1
        self.row_log2 = cfg.max_rows_per_expert.bit_length() - 1
        self.word_bits = 8 * cfg.meta_word_bytes
        self.meta_shift = cfg.meta_word_bytes.bit_length() - 1
        self.off_bits = max(aw + 2, self.expert_bits + self.row_log2 + self.meta_shift,
                            (E << 2).bit_length())
        self.addr_bits = A = cfg.addr_bits
        self.chunks = [(lo, min(lo + ADD_CHUNK, A)) for lo in range(0, A, ADD_CHUNK)]
        n = len(self.chunks)
        self.config = data.StructLayout({
            "sh_rel": range(self.max_log2 - self.min_log2 + 1), "tile_m1": self.count_bits,
            "epoch": 32, "flag_base": A, "meta_base": A, "count_base": A})
        self.inject = data.StructLayout({
            "valid": 1, "kind": 3, "expert": self.expert_bits, "row": cfg.cap_bits})
        self.s0_out = data.StructLayout({
            "valid": 1, "oh": 6, "row": cfg.cap_bits, "src": cfg.src_bits,
            "token": cfg.token_bits, "slot": cfg.slot_bits, "group": GROUP_BITS,
            "addr": aw, "off": self.off_bits,
            # (paged) the page a flag names: the completion's, or the expert's current one
            **({"page": cfg.page_bits} if paged(cfg) else {}),
            # (multicast) the row's place in the arena, the metadata word's last field
            **({"loc": cfg.loc_bits} if cfg.multicast else {})})
        self.s1_out = data.StructLayout({
            "valid": 1, "we": 1, "wzero": 1, "always": 1, "flag": 1, "guarded": 1,
            "group": GROUP_BITS, "addr": aw, "cnt": self.count_bits,
            "target": self.count_bits, "kind": 2, "sum": A, "g": n, "p": n,
            "wdata": self.word_bits})
        self.s2_out = data.StructLayout({
            "valid": 1, "word": HubLayouts(cfg).ctl, "guarded": 1, "group": GROUP_BITS})


class AvailabilityTracker(wiring.Component):
    """Flag-based data-availability tracker (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        The hub configuration.

    Attributes
    ----------
    ev : In(stream.Signature(event))
        Per-row events, in order: a row's metadata, then its completion.
    ctl : Out(stream.Signature(ctl))
        Metadata, flags, final counts and the layer-done word.
    csr : In(tracker_csr_signature(cfg))
        Epoch, tile rows and the three bases, latched at ``layer.layer_start``.
    rows : In(cap_bits).array(experts)
        Rows allocated per expert (from the allocator); read by the sweep.
    layer : In(layer_handshake_signature())
        From the packet manager: ``layer_start`` (clearing the counters first if dirty),
        ``mark_dirty`` (flush, abandoned layer), ``sweep_req`` (the end-of-layer sweep once
        the pipeline is empty); to it: ``sweep_done`` (the sweep's last word has left, a
        pulse), ``clearing`` (the clearing sweep runs), ``idle`` (no event in the pipeline
        and no sweep).
    guard : In(ordering_guard_signature(cfg))
        Where the packet manager's data writes are: in B (``b_busy``, ``b_group``) and,
        registered a cycle old, the oldest waiting in each lane's buffer and B
        (``c_busy``, ``c_group``).
    sweep_short : Out(1)
        Only with ``count_packets``: a pulse per expert the sweep finds short of its
        announced rows (COUNT_MISMATCH, counted by the packet manager).

    With ``count_packets`` the tracker also writes an expert's final words early: count
    events (a count packet the packet manager applied) pass through S0 as bubbles;
    :class:`~moehub.rtl.counts.final.FinalCounts` follows the stream, and the event that
    makes an expert final is followed at once by COUNT(e) and, for a partial last tile,
    LAST(e) -- injected into S0 before the next event is taken, so they leave the ctl
    port where the model writes them. LAST is then guarded (the tile's data writes may
    still be in flight) by the group of that event; the sweep skips final experts.
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.lay = lay = HubLayouts(cfg)
        self.tl = TrackerLayouts(cfg)
        E = cfg.experts
        super().__init__({
            "ev": In(stream.Signature(lay.tracker_event)),
            "ctl": Out(stream.Signature(lay.ctl)),
            "csr": In(tracker_csr_signature(cfg)),
            "rows": In(cfg.cap_bits).array(E),
            "layer": In(layer_handshake_signature()),
            "guard": In(ordering_guard_signature(cfg)),
            # (count_packets) an expert short of its announced rows at the sweep
            **({"sweep_short": Out(1)} if cfg.count_packets else {}),
            # (paged) each expert's current page: a partial last tile's flag names it
            **({"cur_page": In(cfg.page_bits).array(E)} if paged(cfg) else {}),
        })

    def elaborate(self, platform):
        m = Module()
        # The stages are built back to front (each needs ``go`` and the later stages'
        # state); the comb statements must come first (the memory's ``rp.en``), so that
        # every register keeps its name (see ``_s2_update``).
        wp, rp = self._counter_memory(m)
        cfg = _Registers(self.tl.config, "", rename={n: n for n, _ in self.tl.config})
        t1 = _Registers(self.tl.s0_out, "t1")
        t2 = _Registers(self.tl.s1_out, "t2")
        mode = Signal(2, name="mode")         # RUN, CLEAR, SWEEP: owned by the sequencers
        # (mode == CLEAR as a register of its own, set wherever mode is: the packet
        # manager's input handshake reads it, with no decode of mode in front)
        self.mode_clear = Signal(name="mode_clear")
        self.mode_run_ev = Signal(name="mode_run_ev", init=1)
        w_data, s2 = self._s2_update(m, t2, wp)
        ctl_busy, ctl_room, ctl_count_next = self._output(m, s2)
        go = Signal(name="go")                # the whole pipeline advances (from registers)
        m.d.comb += go.eq(~t2.valid | ctl_room)
        self.go_ev = self._go_copy(m, go, t1, t2, ctl_count_next)
        self._s1_prepare(m, t1, t2, cfg, rp, w_data, go)
        clear_addr = self._clearing(m, mode, go)
        self.fin = self._final_sequencer(m, mode, go, cfg) if self.cfg.count_packets else None
        sq = self._sweep(m, mode, go, cfg, t1, t2, ctl_busy)
        self._s0_pop(m, mode, sq, clear_addr, cfg, rp, t1, go)
        self._latch_config(m, cfg)
        idle = (mode == RUN) & ~t1.valid & ~t2.valid
        if self.fin is not None:
            idle = idle & ~self.fin.valid
        m.d.comb += [
            self.layer.clearing.eq(self.mode_clear),
            self.layer.idle.eq(idle),
        ]
        return m

    def _go_copy(self, m, go, t1, t2, ctl_count_next):
        """``go`` for the event port's ready: a register of its own, formed from the next
        values of what ``go`` reads (S2's valid, the ctl ring's count). ``go`` enables every
        pipeline register, and the ready, taken from it, came behind its buffer tree: three
        buffers, then the event expander's next-state selects (22.9 FO4 at
        ``deepseek-v3-8gpu`` with multicast rows). Held inverted (``n_go_ev``), so that
        synthesis, which merges flops with the same next value and reset bit by bit, keeps
        it apart."""
        n_go = Signal(name="n_go_ev")           # ~go (after reset: S2 empty, so go)
        t2_valid_next = Mux(go, t1.valid, t2.valid)
        m.d.sync += n_go.eq(t2_valid_next & (ctl_count_next == 2))
        return ~n_go

    # ------------------------------------------------------------------ state
    def _counter_memory(self, m):
        """The tile counters: a memory without reset, a write port (S2) and a read port
        transparent to it (address from S0, data to S1). Returns ``(wp, rp)``."""
        t = self.tl
        m.submodules.counters = mem = Memory(shape=t.count_bits, depth=t.depth, init=[])
        wp = mem.write_port()                 # the names wp/rp name the ports' signals
        rp = mem.read_port(transparent_for=(wp,))
        # Always enabled: the port then registers its address (a held stage re-reads its
        # counter), and a flop-built array has no logic between that register and S1.
        m.d.comb += rp.en.eq(1)
        return wp, rp

    def _latch_config(self, m, cfg):
        """Owns the ``config`` registers: the CSRs that shape a layer's outputs, latched at
        layer start. Reads ``epoch``, ``tile_rows_log2`` and the bases."""
        t = self.tl
        with m.If(self.layer.layer_start):
            m.d.sync += [cfg.sh_rel.eq(self.csr.tile_rows_log2 - t.min_log2),
                         cfg.tile_m1.eq((1 << self.csr.tile_rows_log2[:t.max_log2.bit_length()]) - 1),
                         cfg.epoch.eq(self.csr.epoch),
                         cfg.flag_base.eq(self.csr.flag_base), cfg.meta_base.eq(self.csr.meta_base),
                         cfg.count_base.eq(self.csr.count_base)]

    def _counter_addr(self, m, cfg, expert, row):
        """Counter of (expert, tile of ``row``): the expert above the tile index (tiles per
        expert is a power of two)."""
        t = self.tl
        aw = t.counter_addr_bits
        tile = Signal(t.tile_bits, name="tile")
        m.d.comb += tile.eq((row >> t.min_log2) >> cfg.sh_rel)
        if t.experts == 1:
            return tile[:aw]
        if t.tiles == 1 << t.tile_bits:
            return Cat(tile, expert)[:aw]
        return (expert * t.tiles + tile)[:aw]

    # ------------------------------------------------------------------ S0
    def _s0_pop(self, m, mode, sq, clear_addr, cfg, rp, t1, go):
        """S0 (pop): take an event, or the sequencer's pseudo-event, or a clear; address
        its counter and form its output address's offset from the base.

        Owns the S1 registers ``t1_*`` (loads them from an ``s0_out`` record) and the read
        port's address. Reads the event stream, ``mode``, the sweep's ``inject`` record
        ``sq``, ``clear_addr``, ``sh_rel`` and ``go``.
        """
        t = self.tl
        ev = self.ev.payload
        pick = Signal(t.inject, name="s0_in")
        m.d.comb += self.ev.ready.eq(self.mode_run_ev & self.ev.valid & self.go_ev)
        with m.Switch(mode):
            with m.Case(RUN):
                m.d.comb += [pick.valid.eq(self.ev.valid),
                             pick.kind.eq(Mux(ev.complete, K_CPL, K_META)),
                             pick.expert.eq(ev.expert), pick.row.eq(ev.row)]
            with m.Case(SWEEP):
                m.d.comb += pick.eq(sq.view())
            with m.Case(CLEAR):
                m.d.comb += [pick.valid.eq(1), pick.kind.eq(K_CLEAR)]
        s0 = Signal(t.s0_out, name="s0")
        m.d.comb += [s0.addr.eq(Mux(mode == CLEAR, clear_addr,
                                    self._counter_addr(m, cfg, pick.expert, pick.row))),
                     rp.addr.eq(Mux(go, s0.addr, t1.addr))]
        row = ev.row[:t.row_log2]
        meta_index = Cat(row, pick.expert) if t.experts > 1 else row
        with m.Switch(pick.kind):
            with m.Case(K_META):
                m.d.comb += s0.off.eq(meta_index << t.meta_shift)
            with m.Case(K_CPL, K_LAST):
                m.d.comb += s0.off.eq(s0.addr << 2)
            with m.Case(K_COUNT):
                m.d.comb += s0.off.eq(pick.expert << 2)
            with m.Case(K_DONE):
                m.d.comb += s0.off.eq(t.experts << 2)
        m.d.comb += [s0.valid.eq(pick.valid), s0.oh.eq(1 << pick.kind), s0.row.eq(pick.row),
                     s0.src.eq(ev.src), s0.token.eq(ev.token), s0.slot.eq(ev.slot),
                     s0.group.eq(ev.group)]
        if paged(self.cfg):
            m.d.comb += s0.page.eq(self._s0_page(mode, sq, ev))
        if self.cfg.multicast:
            m.d.comb += s0.loc.eq(ev.loc)
        if self.fin is not None:
            self._s0_final(m, mode, pick, s0, go, sq)
        with m.If(go):
            m.d.sync += t1.load(s0)

    def _s0_page(self, mode, sq, ev):
        """(paged) The page a flag names: a completion's own (an event in RUN), a last
        tile's its expert's current page (the sweep's word, or the final sequencer's in
        RUN). Each expert lookup is made from its own registers (the sweep's, the
        sequencer's) and the mode chooses after them: the lookup behind the mode's pick
        was 24.0 FO4 at 32 experts. (A metadata event's page is not read.)"""
        cur = Array(self.cur_page)
        page = ev.page
        if self.fin is not None:
            page = Mux(self.fin.valid, cur[self.fin.expert], page)
        return Mux(mode == SWEEP, cur[sq.expert], page)

    def _s0_final(self, m, mode, pick, s0, go, sq):
        """(count_packets) S0 in RUN mode: the final sequencer's word first (no event is
        taken meanwhile); a count event is taken as a bubble; every event taken goes to
        :class:`FinalCounts`, whose ``fire`` loads the sequencer. (These comb statements
        come after S0's own: they override it.)"""
        fin, fc, ev = self.fin, self.fc, self.ev.payload
        m.d.comb += self.ev.ready.eq(self.mode_run_ev & self.ev.valid & self.go_ev & ~fin.valid & ~fc.stall)
        with m.If(mode == RUN):
            with m.If(fin.valid):
                m.d.comb += [pick.eq(fin.view()), s0.group.eq(self.fin_group)]
            with m.Elif(ev.cnt):
                m.d.comb += pick.valid.eq(0)
        with m.If(mode == SWEEP):
            m.d.comb += pick.valid.eq(self._sweep_skip(m, mode, go, sq, sq.valid))
        # (with multicast rows ``ev`` is the event expander's output register)
        m.d.comb += [fc.pop.eq(self.ev.valid & self.ev.ready), fc.expert.eq(ev.expert),
                     fc.meta.eq(~ev.complete & ~ev.cnt), fc.cpl.eq(ev.complete), fc.cnt.eq(ev.cnt),
                     fc.count.eq(ev.count)]

    # ------------------------------------------------------------------ S1
    def _meta_loc(self, t1):
        """The metadata word's fields after the slot: (multicast) the row's place in the
        arena; none for unicast rows."""
        return [t1.loc] if self.cfg.multicast else []

    def _s1_prepare(self, m, t1, t2, cfg, rp, w_data, go):
        """S1 (read, prepare): read the counter, forwarded from S2's write; prepare the
        output word (kind, value, and the address added chunk by chunk).

        Owns the S2 registers ``t2_*`` (loads them from an ``s1_out`` record). Reads the
        S1 registers, the read port, S2's counter write (``t2_we``, ``t2_addr``,
        ``w_data``), the ``config`` registers and ``go``.
        """
        t = self.tl
        # The read port is transparent: the counter misses at most the write of S2.
        fwd = t2.we & (t2.addr == t1.addr)
        cnt = Signal(t.count_bits, name="cnt")
        m.d.comb += cnt.eq(Mux(fwd, w_data, rp.data))
        is_meta, is_cpl, is_count = t1.oh[K_META], t1.oh[K_CPL], t1.oh[K_COUNT]
        is_last, is_done, is_clear = t1.oh[K_LAST], t1.oh[K_DONE], t1.oh[K_CLEAR]
        base = Signal(t.addr_bits, name="base")
        m.d.comb += base.eq(Mux(is_meta, cfg.meta_base, 0)
                            | Mux(is_cpl | is_last, cfg.flag_base, 0)
                            | Mux(is_count | is_done, cfg.count_base, 0))
        s_sum, s_g, s_p = self._chunked_add(m, base, t1.off)
        value = Signal(t.word_bits, name="value")
        m.d.comb += value.eq(Mux(is_meta, Cat(t1.src, t1.token, t1.slot, *self._meta_loc(t1)), 0)
                             | Mux(is_count, t1.row, 0)
                             | Mux(is_cpl | is_last | is_done, self._flag_value(t1, cfg, is_done), 0))
        kind = Signal(2, name="kind")
        m.d.comb += kind.eq(Mux(is_meta, CtlKind.META, 0) | Mux(is_cpl | is_last, CtlKind.FLAG, 0)
                            | Mux(is_count, CtlKind.COUNT, 0) | Mux(is_done, CtlKind.DONE, 0))
        s1 = Signal(t.s1_out, name="s1")
        m.d.comb += [
            s1.valid.eq(t1.valid),
            s1.we.eq(t1.valid & (is_cpl | is_last | is_clear)),
            s1.wzero.eq(is_last | is_clear),
            s1.always.eq(is_meta | is_count | is_done),
            s1.flag.eq(is_cpl | is_last),
            s1.guarded.eq(is_cpl | is_last if self.cfg.count_packets else is_cpl),
            s1.group.eq(t1.group), s1.addr.eq(t1.addr),
            s1.cnt.eq(cnt),
            s1.target.eq(Mux(is_last, t1.row[:t.count_bits] & cfg.tile_m1, cfg.tile_m1)),
            s1.kind.eq(kind), s1.sum.eq(s_sum), s1.g.eq(s_g), s1.p.eq(s_p),
            s1.wdata.eq(value),
        ]
        with m.If(go):
            m.d.sync += t2.load(s1)

    def _flag_value(self, t1, cfg, is_done):
        """A flag's (and the done word's) value: the epoch; paged, a flag's is the epoch's
        low 16 bits and its page above (formats.flag_word)."""
        if not paged(self.cfg):
            return cfg.epoch
        return Mux(is_done, cfg.epoch, Cat(cfg.epoch[:16], t1.page))

    def _chunked_add(self, m, base, off):
        """S1's half of ``base + off``: per chunk, the sum without the carry in, and its
        generate and propagate. Returns ``(sum, g, p)``."""
        t = self.tl
        s_sum, s_g, s_p = [], [], []
        for j, (lo, hi) in enumerate(t.chunks):
            b = base[lo:hi]
            if lo < t.off_bits:
                o = off[lo:min(hi, t.off_bits)]
                s = Signal(hi - lo + 1, name=f"addr_s{j}")
                m.d.comb += s.eq(b + o)
                s_sum.append(s[:hi - lo])
                s_g.append(s[hi - lo])
                s_p.append((b ^ o).all())
            else:
                s_sum.append(b)
                s_g.append(0)
                s_p.append(b.all())
        return Cat(*s_sum), Cat(*s_g), Cat(*s_p)

    # ------------------------------------------------------------------ S2
    def _s2_update(self, m, t2, wp):
        """S2 (update, output): ``full`` = counter == target; write the counter back (+ 1,
        or 0 when full); link the address chunks' carries; offer the word (metadata
        always, a flag when the tile is full) as an ``s2_out`` record.

        Owns the counter memory's write port: written every cycle S2 holds a word, also
        while the pipeline holds (the same value again: idempotent). Reads the S2
        registers. Returns ``(w_data, s2)``: the value written (S1 forwards it) and the
        record.
        """
        t = self.tl
        full = Signal(name="full")
        w_data = Signal(t.count_bits, name="w_data")
        m.d.comb += [full.eq(t2.cnt == t2.target),
                     w_data.eq(Mux(full | t2.wzero, 0, t2.cnt + 1))]
        # The first statement that names t2_addr and t2_we: their registers take the port's
        # names (wp__addr, wp__en), as before the stages were split.
        m.d.comb += [wp.addr.eq(t2.addr), wp.data.eq(w_data), wp.en.eq(t2.we)]
        s2 = Signal(t.s2_out, name="s2")
        m.d.comb += [s2.valid.eq(t2.valid & (t2.always | (t2.flag & full))),
                     s2.word.kind.eq(t2.kind), s2.word.addr.eq(self._resolve_address(m, t2)),
                     s2.word.data.eq(t2.wdata), s2.guarded.eq(t2.guarded),
                     s2.group.eq(t2.group)]
        return w_data, s2

    def _resolve_address(self, m, t2):
        """S2's half of the address add: the carries between the chunks (from S1's
        generate and propagate), each added into its chunk through an AND prefix."""
        chunks = self.tl.chunks
        carry = [Signal(name=f"addr_c{j}") for j in range(len(chunks))]
        m.d.comb += carry[0].eq(0)
        for j in range(1, len(chunks)):
            m.d.comb += carry[j].eq(t2.g[j - 1] | (t2.p[j - 1] & carry[j - 1]))
        addr = []
        for j, (lo, hi) in enumerate(chunks):
            part = t2.sum[lo:hi]
            run = _and_prefix(m, part, f"addr_run{j}")
            addr.append(part ^ Cat(carry[j], Mux(carry[j], run, 0))[:hi - lo])
        return Cat(*addr)

    # ------------------------------------------------------------------ output registers
    def _output(self, m, s2):
        """The ctl output: two registers in a ring (``ctl0_*``, ``ctl1_*``), written at
        ``ctl_wp`` and read at ``ctl_rp``; S2's word goes in whenever one is free
        (``ctl_count`` < 2), the head leaves unless the ordering guard blocks it.

        Why two: the pipeline advances when S2's word has a place (``ctl_room``), and with
        two registers that is known from registers -- with one, the register was free when
        its word left, so ``go``, and the tracker's event ``ready`` behind it, waited for the
        ctl port's ready and the guard, and fanned out over the pipeline before reaching the
        event expander's next state (23.1 FO4 at ``deepseek-v3-8gpu`` with multicast rows).
        The word is written by registers and S2's valid alone; the port's ready only moves
        ``ctl_rp`` and ``ctl_count``. With the port always ready a word leaves the cycle
        after S2, as before; held back, the pipeline runs one word further.

        Owns the ring (and, through the guard, ``blocked``). Reads S2's ``s2_out`` record
        and the ctl port's ready. Returns ``(ctl_busy, ctl_room, ctl_count_next)``.
        """
        ent = [_Registers(self.tl.s2_out, f"ctl{k}") for k in range(2)]
        wp, rp = Signal(name="ctl_wp"), Signal(name="ctl_rp")
        count = Signal(range(3), name="ctl_count")
        busy, room, load = Signal(name="ctl_busy"), Signal(name="ctl_room"), Signal(name="ctl_load")
        m.d.comb += [busy.eq(count != 0), room.eq(count != 2), load.eq(s2.valid & room)]
        fire = Signal(name="ctl_fire")
        blocked = self._ordering_guard(m, s2, ent, wp, rp, load, fire)
        m.d.comb += [self.ctl.valid.eq(busy & ~blocked),
                     self.ctl.payload.eq(Mux(rp, ent[1].word, ent[0].word)),
                     fire.eq(self.ctl.valid & self.ctl.ready)]
        for k in range(2):
            with m.If(load & (wp == k)):
                m.d.sync += ent[k].load(s2)
        count_next = Signal(range(3), name="ctl_count_next")
        m.d.comb += count_next.eq(count + load - fire)
        m.d.sync += [wp.eq(wp ^ load), rp.eq(rp ^ fire), count.eq(count_next)]
        return busy, room, count_next

    def _ordering_guard(self, m, s2, ent, wp, rp, load, fire):
        """The ordering guard: a flag waits while any write of its group or an older one is
        still in flight: in B, or at the head of a lane's FIFO (each FIFO leaves in group
        order).

        Owns ``blocked``, a register computed a cycle ahead for the word at the ring's head
        then (the entry at ``rp ^ fire``, or S2's word if it is written there now): the
        writes in flight then are among those in flight now (their views here are
        conservative), or newer than any flag the tracker holds. Reads ``b_busy``/
        ``b_group``, ``c_busy``/``c_group`` and the words' ``guarded`` and ``group`` fields.
        """
        def pending_upto(grp):
            return ((self.guard.b_busy & group_not_after(self.guard.b_group, grp))
                    | Cat(self.guard.c_busy[j] & group_not_after(self.guard.c_group[j], grp)
                          for j in range(self.cfg.lanes + 1)).any())

        def waits(w):
            return w.guarded & pending_upto(w.group)

        new = waits(s2)
        at = [Mux(load & (wp == k), new, waits(ent[k])) for k in range(2)]
        blocked = Signal(name="blocked")
        m.d.sync += blocked.eq(Mux(rp ^ fire, at[1], at[0]))
        return blocked

    # ------------------------------------------------------------------ sequencers
    def _set_mode(self, m, mode, value):
        """``mode <= value``, and its CLEAR bit (``mode_clear``) and RUN bit (``mode_run_ev``,
        for the event port's ready: ``mode``'s own decode, fanned out over the sequencers,
        was 22.4 FO4 into the event expander at deepseek-v3-8gpu multicast) with it."""
        m.d.sync += [mode.eq(value), self.mode_clear.eq(value == CLEAR), self.mode_run_ev.eq(value == RUN)]

    def _clearing(self, m, mode, go):
        """The clearing sweep: at a layer start with dirty counters, one zero write per
        counter and cycle, through the pipeline (forwarding covers the events that follow
        the last ones).

        Owns ``dirty``, ``clear_addr`` and the mode's changes into and out of CLEAR.
        Reads ``layer_start``, ``mark_dirty`` and ``go``. Returns ``clear_addr``.
        """
        dirty = Signal(init=1, name="dirty")
        clear_addr = Signal(self.tl.counter_addr_bits, name="clear_addr")
        with m.If(self.layer.mark_dirty):
            m.d.sync += dirty.eq(1)
        with m.If(self.layer.layer_start & (dirty | self.layer.mark_dirty)):
            self._set_mode(m, mode, CLEAR)
            m.d.sync += clear_addr.eq(0)
        with m.If((mode == CLEAR) & go):
            m.d.sync += clear_addr.eq(clear_addr + 1)
            with m.If(clear_addr == self.tl.depth - 1):
                self._set_mode(m, mode, RUN)
                m.d.sync += dirty.eq(0)
        return clear_addr

    def _final_sequencer(self, m, mode, go, cfg):
        """(count_packets) The early final words: when the event taken makes an expert
        final (``fc.fire``), COUNT(e) and, if its last tile is partial, LAST(e), one per
        cycle, ahead of the next event. Owns ``fin_*`` (an ``inject`` record: ``fin_valid``
        busy, ``fin_kind``, ``fin_e``, ``fin_rows``), ``fin_part`` and ``fin_group`` (the
        group of the event that fired: LAST waits for its data writes). Returns the record."""
        m.submodules.final_counts = fc = self.fc = FinalCounts(self.cfg)
        fin = _Registers(self.tl.inject, "fin", rename={"expert": "fin_e", "row": "fin_rows"})
        part = Signal(name="fin_part")
        self.fin_group = Signal(GROUP_BITS, name="fin_group")
        rows_x = fc.rows_x
        m.d.comb += [fc.clear.eq(self.layer.layer_start), fc.tile_m1.eq(cfg.tile_m1)] + [fc.rows[x].eq(self.rows[x])
                                                           for x in range(self.tl.experts)]
        # (the words' fields follow the queue's head while the sequencer is idle, fire or
        # not -- they are read only once it fires -- so ``fire``, behind the head's check
        # and the tracker's ``go``, sets one register, not the fields' enables)
        with m.If(~fin.valid):
            m.d.sync += [fin.kind.eq(K_COUNT), fin.expert.eq(fc.expert),
                         fin.row.eq(rows_x), self.fin_group.eq(self.ev.payload.group),
                         part.eq(fc.part)]
        # (a pop, so a fire, needs the sequencer idle: the two are exclusive, and ``fire``
        # stays out of the words' kind)
        with m.If(fc.fire):
            m.d.sync += fin.valid.eq(1)
        with m.If((mode == RUN) & fin.valid & go):
            with m.If((fin.kind == K_COUNT) & part):
                m.d.sync += fin.kind.eq(K_LAST)
            with m.Else():
                m.d.sync += fin.valid.eq(0)
        with m.If(self.layer.layer_start):
            m.d.sync += fin.valid.eq(0)
        return fin

    def _sweep_skip(self, m, mode, go, sq, pick_valid):
        """(count_packets) The sweep passes over final experts (their words are out) and
        pulses ``sweep_short`` for each other expert short of its announced rows. Returns
        the sweep's inject valid."""
        final, short = self.fc.final.bit_select(sq.expert, 1), self.fc.short.bit_select(sq.expert, 1)
        on_expert = (sq.kind == K_COUNT) | (sq.kind == K_LAST)
        # (registered: the packet manager counts the pulse a cycle later, off the sweep's
        # path; the layer ends only after the words behind it are out)
        m.d.sync += self.sweep_short.eq((mode == SWEEP) & sq.valid & go & (sq.kind == K_COUNT)
                                        & ~final & short)
        return pick_valid & ~(on_expert & final)

    def _sweep(self, m, mode, go, cfg, t1, t2, ctl_busy):
        """The end-of-layer sweep sequencer: the word to inject next (an ``inject``
        record) -- COUNT(e), LAST(e) if e has a partial last tile, ..., DONE; ``rows[e]``
        and its partial bit come from registers loaded a word ahead.

        Owns ``sq_valid``, ``sq_kind``, ``sq_e``, ``sq_rows``, ``sq_part``, ``ld_e``,
        the mode's changes into and out of SWEEP, and ``sweep_done``. Reads
        ``sweep_req``, ``rows``, ``tile_m1``, ``go``, and whether the event stream, the
        pipeline and the ctl registers are empty. Returns the ``inject`` registers.
        """
        E, cap_bits, cnt_bits = self.tl.experts, self.cfg.cap_bits, self.tl.count_bits
        sq = _Registers(self.tl.inject, "sq", rename={"expert": "sq_e", "row": "sq_rows"})
        sq_part = Signal(name="sq_part")      # rows[sq_e] & (tile rows - 1) != 0
        rows_rd = Array(self.rows)
        ld_e = Signal(range(E + 1), name="ld_e")   # next expert to load
        ld_rows = Signal(cap_bits, name="ld_rows")
        m.d.comb += ld_rows.eq(rows_rd[ld_e])
        # (each expert's partial-tile bit, registered from its counter: the sweep runs
        # after the layer's last grant, so the bit is its counter's; the load picks one
        # bit instead of comparing the picked counter behind the expert's select)
        parts = Signal(E, name="sq_parts")
        m.d.sync += parts.eq(Cat((r[:cnt_bits] & cfg.tile_m1) != 0 for r in self.rows))

        def load_next():
            with m.If(ld_e == E):
                m.d.sync += sq.kind.eq(K_DONE)
            with m.Else():
                m.d.sync += [sq.kind.eq(K_COUNT), sq.expert.eq(ld_e), sq.row.eq(ld_rows),
                             sq_part.eq(parts.bit_select(ld_e, 1)),
                             ld_e.eq(ld_e + 1)]

        begin = (mode == RUN) & self.layer.sweep_req & ~t1.valid & ~t2.valid & ~self.ev.valid
        if self.fin is not None:
            begin = begin & ~self.fin.valid
        # (the first word's rows and partial bit follow expert 0's counter while the mode is
        # RUN -- they are read only in SWEEP -- so that ``begin``, which waits for the event
        # queue and the pipeline to empty, is not in front of their load)
        with m.If(mode == RUN):
            m.d.sync += [sq.row.eq(self.rows[0]),
                         sq_part.eq((self.rows[0][:cnt_bits] & cfg.tile_m1) != 0)]
        with m.If(begin):
            self._set_mode(m, mode, SWEEP)
            m.d.sync += [sq.valid.eq(1), sq.kind.eq(K_COUNT), sq.expert.eq(0), ld_e.eq(1)]
        with m.If((mode == SWEEP) & sq.valid & go):
            with m.Switch(sq.kind):
                with m.Case(K_COUNT):
                    with m.If(sq_part):
                        m.d.sync += sq.kind.eq(K_LAST)
                    with m.Else():
                        load_next()
                with m.Case(K_LAST):
                    load_next()
                with m.Case(K_DONE):
                    m.d.sync += sq.valid.eq(0)
        with m.If((mode == SWEEP) & ~sq.valid & ~t1.valid & ~t2.valid & ~ctl_busy):
            m.d.comb += self.layer.sweep_done.eq(1)
            self._set_mode(m, mode, RUN)
        return sq
