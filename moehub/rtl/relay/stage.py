"""The relay hub's stagings (protocol v3): a relay row's chunks kept for its forwards, the
row handed to the forward unit once it is whole (:class:`RelayStage`); a partial output
row's chunks kept until the row is whole, for the reduce (:class:`PartialStage`). Both
are a :class:`ChunkStage`: the chunk bitmaps per slot of a credit window and the four
steps below; they differ in what a slot is, which chunks are written and what a whole
row makes.

::

    i (RelayLayouts.stage, one chunk a cycle, from the relay input)
      --> S1: slot = (the source's node among the others, tag), the chunk's one-hot
      --> S2 (on S1's registers): the slot's chunk bitmap read (the chunk in? the slot empty?), set
      --> S3: the verdicts registered; the whole-row test --> S4: the outputs
              |-- a chunk already in, or past the row: dropped, counted (``drops``)
              |-- the chunk's data --> wr (HBM: base + slot x stride + chunk x chunk_bytes;
              |                         a row with targets on other GPUs of the node)
              |-- the row's first chunk --> mark (slot, own targets): the credit join
              `-- its last --> row (the forward unit's row queue; a good row)
                           or done (source, tag): a dropped row's credit, now owed
    (mark, row and done are registered one-cycle pulses: their takers never refuse)

Every relay row a relay hub accepts, good or dropped for a bad GPU or bad targets (an
unknown source never reaches it), is tracked here by its slot: the R window's place of
(source, tag) -- ``relay_window`` = (nodes - 1) x ``tags_per_source`` slots, each a
bitmap of ``chunks_per_row`` bits (flops). A slot is free again once its row is whole
(the bitmap cleared), and its source reuses the tag only after the row's credit, which
comes later (:mod:`.credit_join`). The staged data of a good row with targets on other
GPUs of the node waits in HBM at ``base`` + slot x row stride until the forward egress
has read it for each destination (:mod:`.egress`); the slot's place is reused only after
the row's credit, so a staged row is never overwritten while it is read.

The row the forward unit gets is the one in its last chunk (every chunk carries the row's
header; a row whose chunks disagree is the source's error and touches only that row).

Timing: S1 registers the chunk with its slot's and chunk's one-hots. S2, the logic on
S1's registers, reads whether the slot's bitmap holds the chunk already and whether it is
empty (AND-ORs over the slots: no index compare in front of them), registers both, and
sets the chunk's bit unconditionally (a duplicate's is set already), so the next chunk's
S2 sees it. S3, on those registers, finds whether the chunk is new and its row whole
(the slot's bitmap, with its bit, all set), registered into S4, whose registers drive the
staging write, the outputs and a whole row's bitmap clear; the chunk's staging address is
formed a step at a time (slot x stride, + chunk x chunk_bytes, + base). (The first version decided
all of it in one stage, the staging write behind the bitmap read: 33 FO4 at 2 nodes; a
per-slot count instead of the all-set test, still behind the read in one stage, 22-24
FO4.) ``i.ready`` is a register: set when the FIFOs' room holds, a cycle ahead, for
every chunk that may then be in S1, S3 and S4 (the one it lets in now counted as taken)
and the next, so it never depends on ``i.valid`` and starts no path into the relay
input's lane grant. (Computed in the same cycle from the FIFOs' levels, the compare
ended in the input's lane word enables: 31 FO4 at 2 nodes.) The FIFOs are deep enough
for that bound beside the entries a stream keeps in them, so chunks flow one a cycle.
"""
from amaranth import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ..logic import select
from .layouts import RelayLayouts, refuse_without_relay

#: staging writes the stage holds: room for the chunks in S1, S3 and S4, the one its ready
#: lets in and the next beside the two a streaming FIFO holds (a chunk stays two cycles in
#: ``SyncFIFOBuffered``: its memory, then its output register), so that a stream of chunks
#: flows one a cycle with ``wr`` ready (at 6, the ready combinational, it flowed at 5 in 6)
WRITE_DEPTH = 8


def stage_slot(cfg: HubConfig, node, src_node, tag):
    """The R window's slot of (a source of node ``src_node``, ``tag``) at a relay of
    ``node``: the source's node among the others, times the tags, plus the tag."""
    k = src_node - (src_node > node)
    return (k * cfg.tags_per_source + tag)[:max(1, (cfg.relay_window - 1).bit_length())]


class ChunkStage(wiring.Component):
    """A staging of rows that arrive chunk by chunk, interleaved, each in a slot of a credit
    window (see the module docstring): the chunk bitmaps per slot, the four steps, the
    staging writes, the drop count. A subclass says what a slot is (:meth:`slot_of`), which
    chunks are written (:meth:`writes`) and what a row's first chunk and a whole row make
    (:meth:`outputs`)."""

    def __init__(self, cfg: HubConfig, slots: int, chunk_layout, before: dict, after: dict):
        self.cfg = cfg
        self.slots = slots
        self.chunk_layout = chunk_layout
        self.slot_bits = max(1, (slots - 1).bit_length())
        self.write = data.StructLayout({"addr": cfg.addr_bits, "data": cfg.data_bits})
        super().__init__({
            "i": In(stream.Signature(chunk_layout)),
            **before,
            "base": In(cfg.addr_bits),
            "wr": Out(stream.Signature(self.write)),
            **after,
            "drops": Out(32),
        })

    @staticmethod
    def _all(first, *more):
        for t in more:
            first = first & t
        return first

    def slot_of(self, p):
        """The slot of the chunk ``p`` (the input's payload)."""
        raise NotImplementedError

    def writes(self, s3) -> tuple:
        """Whether a new chunk of a row (S3's registered chunk ``s3``) is written: the
        terms, all true."""
        return (~s3.drop,)

    def room(self, inflight):
        """Beyond the write FIFO's room, whether the input may take a chunk next cycle
        (``inflight``: the chunks that may then be in S1, S3 and S4, all registers now), or
        None."""
        return None

    def outputs(self, m, s4, first, whole):
        """The outputs from S4's registers: ``s4`` the chunk, ``first`` its row's first chunk
        (new), ``whole`` its row whole with it."""
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.chunk_layout
        W, C = self.slots, cfg.chunks_per_row
        m.submodules.wq = wq = SyncFIFOBuffered(width=self.write.size, depth=WRITE_DEPTH)
        # ---- S1: the chunk, its slot's and its chunk's one-hots
        s1_v, s1 = Signal(name="s1_valid"), Signal(lay, name="s1")
        s1_slot = Signal(self.slot_bits, name="s1_slot")
        s1_soh, s1_coh = Signal(W, name="s1_slot_oh"), Signal(C, name="s1_chunk_oh")
        p = self.i.payload
        slot = self.slot_of(p)
        take = self.i.valid & self.i.ready
        m.d.sync += [s1_v.eq(take), s1.eq(p), s1_slot.eq(slot),
                     s1_soh.eq(Cat(*(slot == k for k in range(W)))),
                     s1_coh.eq(Cat(*(p.chunk == c for c in range(C))))]
        # ---- S2 (on S1's registers): whether the slot's bitmap holds the chunk already, and
        # whether it is empty (the row's first chunk), both registered; the chunk's bit set
        # (a duplicate's is set already: no enable waits for the read), so the next chunk's
        # S2 sees it
        bitmap = [Signal(C, name=f"bitmap{k}") for k in range(W)]
        have = Signal(C, name="have")
        m.d.comb += have.eq(select([(s1_soh[k], bitmap[k]) for k in range(W)], C))
        s3_v, s3 = Signal(name="s3_valid"), Signal(lay, name="s3")
        s3_row, s3_soh = Signal(cfg.addr_bits, name="s3_row_offset"), Signal(W, name="s3_slot_oh")
        s3_dup, s3_empty, s3_in = Signal(name="s3_dup"), Signal(name="s3_empty"), Signal(name="s3_in_row")
        # (the chunk's place in the staging: slot x stride here, its chunk added in S3, the
        # base in S4: one operation a step)
        m.d.sync += [s3_v.eq(s1_v), s3.eq(s1), s3_soh.eq(s1_soh), s3_in.eq(s1_coh.any()),
                     s3_dup.eq((have & s1_coh).any()), s3_empty.eq(have == 0),
                     s3_row.eq((s1_slot * cfg.stride_bytes)[:cfg.addr_bits])]
        # ---- S3 (on S3's registers): a new chunk's staging write; whether the row is whole
        # now (the slot's bitmap, with this chunk's bit, all set), registered into S4
        fresh = Signal(name="fresh")                 # the chunk is new and within the row
        m.d.comb += fresh.eq(s3_v & s3_in & ~s3_dup)
        full = Signal(name="full")
        m.d.comb += full.eq(select([(s3_soh[k], bitmap[k]) for k in range(W)], C).all())
        s4, s4_soh = Signal(lay, name="s4"), Signal(W, name="s4_slot_oh")
        s4_whole, s4_first = Signal(name="s4_whole"), Signal(name="s4_first")
        s4_v, s4_wen, s4_off = Signal(name="s4_valid"), Signal(name="s4_write"), Signal(cfg.addr_bits, name="s4_offset")
        m.d.sync += [s4.eq(s3), s4_soh.eq(s3_soh), s4_whole.eq(fresh & full), s4_first.eq(fresh & s3_empty),
                     s4_v.eq(s3_v), s4_wen.eq(self._all(fresh, *self.writes(s3))),
                     s4_off.eq((s3_row + s3.chunk * cfg.chunk_bytes)[:cfg.addr_bits])]
        # ---- the bitmaps: a chunk's bit set in S2; a whole row's slot cleared from S4 (a
        # chunk of its slot in between is a duplicate of the row either way: the slot's
        # next row waits for this one's credit)
        for k in range(W):
            with m.If(s4_whole & s4_soh[k]):
                m.d.sync += bitmap[k].eq(0)
            with m.Elif(s1_v & s1_soh[k]):
                m.d.sync += bitmap[k].eq(bitmap[k] | s1_coh)
        # the staging write, from S4's registers (a new chunk of a row kept)
        addr = (self.base + s4_off)[:cfg.addr_bits]
        m.d.comb += [wq.w_en.eq(s4_wen), wq.w_data.eq(Cat(addr, s4.data)),
                     self.wr.valid.eq(wq.r_rdy), self.wr.payload.eq(wq.r_data), wq.r_en.eq(self.wr.ready)]
        # the input's ready, a register: next cycle's chunks in S1, S3 and S4 are at most the
        # ones in S1 and S3 now and the one let in now (counted taken), the FIFO's level at
        # most its level now and S4's write; room for them and the next beside the ones queued
        ready = Signal(name="i_ready")
        inflight = s1_v + s3_v + s4_v + ready
        more = self.room(inflight)
        m.d.sync += ready.eq(self._all(wq.level + inflight <= WRITE_DEPTH - 2,
                                       *(() if more is None else (more,))))
        m.d.comb += self.i.ready.eq(ready)
        self.outputs(m, s4, s4_first, s4_whole)
        ev_drop, n_drop = Signal(name="ev_drop"), Signal(32, name="n_drop")
        m.d.sync += [ev_drop.eq(s3_v & ~fresh), n_drop.eq(n_drop + ev_drop)]
        m.d.comb += self.drops.eq(n_drop)
        return m


class RelayStage(ChunkStage):
    """The relay's staging (see the module docstring).

    Attributes
    ----------
    i : In(stream of RelayLayouts.stage)
        Relay rows' chunks (a good row's, or a dropped one's: ``drop``).
    node, rank : In
        This hub's node and local rank.
    base : In(addr_bits)
        Where the staging rows start in HBM (RELAY_STAGE_BASE).
    wr : Out(stream of (addr, data))
        Staged chunks to HBM.
    row : Out(stream of RelayLayouts.row)
        Whole good rows, for the forward unit (its queue never refuses: ``ready`` is
        expected high).
    mark_valid : Out(1); mark_node, mark_tag : Out; mark_local : Out(1)
        A good row's first chunk (a pulse): its source's node, its tag, whether it names
        this GPU.
    done : Out(stream of RelayLayouts.rcredit)
        A dropped row is whole: its credit (global source, tag) is owed (a pulse: ``ready``
        is not looked at).
    drops : Out(32)
        Chunks dropped here: one already in, or past the row (a cycle late).
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a relay staging")
        self.lay = lay = RelayLayouts(cfg)
        super().__init__(cfg, cfg.relay_window, lay.stage, {"node": In(cfg.node_bits), "rank": In(cfg.gpu_bits)}, {
            "row": Out(stream.Signature(lay.row)),
            "mark_valid": Out(1), "mark_node": Out(cfg.node_bits), "mark_tag": Out(cfg.tag_bits),
            "mark_local": Out(1),
            "done": Out(stream.Signature(lay.rcredit)),
        })

    def slot_of(self, p):
        return stage_slot(self.cfg, self.node, p.src_node, p.tag)

    def writes(self, s3):
        """A good row's new chunk, if the row names other GPUs of the node (the forwards
        read it back)."""
        T = self.cfg.relay_targets
        remote = Cat(*(s3.valid[t] & (s3.gpu[t] != self.rank) for t in range(T))).any()
        return ~s3.drop, remote

    def outputs(self, m, s4, first, whole):
        """The first chunk's mark, the whole row, a dropped row's credit."""
        cfg, lay = self.cfg, self.lay
        m.d.comb += [self.mark_valid.eq(first & ~s4.drop), self.mark_node.eq(s4.src_node),
                     self.mark_tag.eq(s4.tag), self.mark_local.eq(s4.local)]
        m.d.comb += [self.row.valid.eq(whole & ~s4.drop), self.row.payload.eq(s4.as_value()[:lay.row.size])]
        m.d.comb += [self.done.valid.eq(whole & s4.drop), self.done.payload.tag.eq(s4.tag),
                     self.done.payload.src.eq((s4.src_node * cfg.node_gpus + s4.src_rank)[:cfg.src_bits])]


#: whole partial rows (and dropped ones, owing their credit) the partial staging holds for
#: its feed: room for every chunk in S1, S3 and S4, the one the ready lets in and the next to
#: end a row beside the row a streaming queue holds, so that rows stream one chunk a cycle
PARTIAL_ROWS = 6


def partial_slot(cfg: HubConfig, sender, ptag):
    """The P window's slot of (``sender``, ``ptag``) at a relay: the sender's local rank
    times the P tags, plus the tag."""
    return (sender * cfg.partial_span + ptag)[:max(1, (cfg.partial_window - 1).bit_length())]


def partial_row_layout(cfg: HubConfig) -> data.StructLayout:
    """A whole partial row the staging hands its feed: its slot, whether it was dropped
    (only its credit is owed), and its header (sender, P tag, owner's node, token, slot)."""
    lay = RelayLayouts(cfg).pstage
    return data.StructLayout({"at": max(1, (cfg.partial_window - 1).bit_length()), "drop": 1,
                              **{k: lay.members[k] for k in ("sender", "ptag", "src_node", "token", "slot")}})


class PartialStage(ChunkStage):
    """The relay's partial staging: partial output rows' chunks (from the input, one a
    cycle) kept in HBM at ``base`` + slot x row stride, slot = (sender, P tag), until the
    row is whole; then the row (or a dropped row, for its credit) goes to the feed
    (:mod:`.partial_feed`), which reads it back in chunk order for the reduce. Its slot
    is reused only after the row's credit, which the feed returns once it has read the
    row: a staged row is never overwritten while it is read.

    Attributes
    ----------
    i : In(stream of RelayLayouts.pstage)
        Partial rows' chunks (a good row's, or one dropped with its credit owed: ``drop``).
    base : In(addr_bits)
        PARTIAL_STAGE_BASE.
    wr : Out(stream of (addr, data))
        Staged chunks to HBM (a good row's).
    row : Out(stream of :func:`partial_row_layout`)
        Whole rows, in the order they became whole (:data:`PARTIAL_ROWS` held: the input
        waits while the chunks in flight could fill them).
    drops : Out(32)
        Chunks dropped here: one already in, or past the row (a cycle late).
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a partial staging")
        self.lay = RelayLayouts(cfg)
        self.row_layout = partial_row_layout(cfg)
        super().__init__(cfg, cfg.partial_window, self.lay.pstage, {},
                         {"row": Out(stream.Signature(self.row_layout))})

    def slot_of(self, p):
        return partial_slot(self.cfg, p.sender, p.ptag)

    def elaborate(self, platform):
        self._rows = SyncFIFOBuffered(width=self.row_layout.size, depth=PARTIAL_ROWS)
        m = super().elaborate(platform)
        m.submodules.rows = self._rows
        return m

    def room(self, inflight):
        """Room in the row queue, next cycle, for every chunk then in S1, S3 and S4 and the
        next to end a row (registers only)."""
        return self._rows.level + inflight <= PARTIAL_ROWS - 1

    def outputs(self, m, s4, first, whole):
        """A whole row (good or dropped) into the row queue."""
        rq = self._rows
        entry = Signal(self.row_layout, name="row_entry")
        m.d.comb += [entry.at.eq(partial_slot(self.cfg, s4.sender, s4.ptag)), entry.drop.eq(s4.drop)]
        m.d.comb += [getattr(entry, k).eq(getattr(s4, k)) for k in ("sender", "ptag", "src_node", "token", "slot")]
        m.d.comb += [rq.w_en.eq(whole), rq.w_data.eq(entry),
                     self.row.valid.eq(rq.r_rdy), self.row.payload.eq(rq.r_data), rq.r_en.eq(self.row.ready)]
