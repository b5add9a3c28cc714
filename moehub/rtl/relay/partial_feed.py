"""The relay hub's partial feed (protocol v3): each whole partial row read back from the
partial staging in chunk order and handed to the reduce; the row's P credit returned to
its sender once the row has been read.

::

    row (PartialStage: slot, drop, header) --> address (3 registered steps) --> rd (HBM)
                                           `--> headers (rows in flight) --\\
    rdata ------------------------------------------------------------------+--> out (the reduce's partial)
                                                                             `--> pcredit (sender, P tag)

The reduce (:class:`~.reduce_path.ReducePath`) takes a partial row whole, its chunks in
order, one row after another; the input lanes deliver a row's chunks in any order,
interleaved with other rows', so the partial staging (:class:`~.stage.PartialStage`)
keeps them in HBM and this feed reads each whole row back: its ``chunks_per_row`` reads
at ``base`` + slot x row stride, one a cycle, the row's address prepared in three
registered steps (its slot x stride, + base, then one chunk further a read). The memory
answers in order; each answer leaves on ``out`` with its row's header. A row's credit
is pushed as its last chunk leaves (only then may the sender reuse the slot). A row the
staging dropped (its owner no GPU this relay serves) owes its credit only: it takes a
place among the rows in flight and leaves, with no read, when it reaches the front.

Rows in flight: :data:`ROWS_IN_FLIGHT` (their headers), reads in flight: :data:`READS`;
credits wait in a queue of :data:`CREDITS` (a row starts only while every row in flight
has a place there, so pushing a credit never waits).
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from .layouts import RelayLayouts, refuse_without_relay
from .reduce_path import path_layouts
from .stage import partial_row_layout

#: rows whose reads are issued and not all answered; reads in flight; credits queued
ROWS_IN_FLIGHT, READS, CREDITS = 2, 8, 4


class PartialFeed(wiring.Component):
    """The partial feed (see the module docstring).

    Attributes
    ----------
    row : In(stream of :func:`~.stage.partial_row_layout`)
        Whole rows from the partial staging.
    base : In(addr_bits)
        PARTIAL_STAGE_BASE.
    rd : Out(stream of addr); rdata : In(stream of data_bits)
        The staging's reads, answered in order.
    out : Out(stream): src_node, token, slot, data
        The reduce path's ``partial``: each row whole, its chunks in order.
    pcredit : Out(stream of RelayLayouts.pcredit)
        A partial row read (or dropped): its sender's P tag is free again.
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a partial feed")
        self.cfg = cfg
        self.lay = RelayLayouts(cfg)
        self.row_layout = partial_row_layout(cfg)
        self.out_layout = path_layouts(cfg, max(1, cfg.data_bits // 16), cfg.chunks_per_row)["partial"]
        super().__init__({
            "row": In(stream.Signature(self.row_layout)),
            "base": In(cfg.addr_bits),
            "rd": Out(stream.Signature(cfg.addr_bits)),
            "rdata": In(stream.Signature(cfg.data_bits)),
            "out": Out(stream.Signature(self.out_layout)),
            "pcredit": Out(stream.Signature(self.lay.pcredit)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, C = self.cfg, self.cfg.chunks_per_row
        m.submodules.hdrs = hq = SyncFIFOBuffered(width=self.row_layout.size, depth=ROWS_IN_FLIGHT)
        m.submodules.lasts = xq = SyncFIFOBuffered(width=1, depth=READS)
        m.submodules.credits = cq = SyncFIFOBuffered(width=self.lay.pcredit.size, depth=CREDITS)
        head = self.row.payload
        # ---- a row starts: its header into the rows in flight (a place for its credit
        # kept), its address prepared in steps -- slot x stride, + base -- then its reads
        step = Signal(2, name="prep_step")      # 0: idle, 1: base next, 2: reading
        off, addr = Signal(cfg.addr_bits, name="offset"), Signal(cfg.addr_bits, name="addr")
        chunk = Signal(range(C), name="chunk")
        room = Signal(name="credit_room")
        m.d.comb += room.eq(cq.level + hq.level < CREDITS)
        start = Signal(name="start")
        m.d.comb += [start.eq((step == 0) & self.row.valid & hq.w_rdy & room),
                     hq.w_en.eq(start), hq.w_data.eq(head), self.row.ready.eq(start)]
        with m.If(start & ~head.drop):
            m.d.sync += [off.eq((head.at * cfg.stride_bytes)[:cfg.addr_bits]), step.eq(1)]
        with m.If(step == 1):
            m.d.sync += [addr.eq((self.base + off)[:cfg.addr_bits]), step.eq(2)]
        last = chunk == C - 1
        m.d.comb += [self.rd.valid.eq((step == 2) & xq.w_rdy), self.rd.payload.eq(addr),
                     xq.w_en.eq(self.rd.valid & self.rd.ready), xq.w_data.eq(last)]
        with m.If(self.rd.valid & self.rd.ready):
            m.d.sync += [chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr + cfg.chunk_bytes)]
            with m.If(last):
                m.d.sync += step.eq(0)
        # ---- the answers out with their row's header; a row leaves with its last chunk (a
        # dropped row at once), its credit queued
        front = data.View(self.row_layout, hq.r_data)
        o = self.out.payload
        m.d.comb += [o.src_node.eq(front.src_node), o.token.eq(front.token), o.slot.eq(front.slot),
                     o.data.eq(self.rdata.payload),
                     self.out.valid.eq(self.rdata.valid & xq.r_rdy & hq.r_rdy & ~front.drop),
                     self.rdata.ready.eq(self.out.valid & self.out.ready),
                     xq.r_en.eq(self.out.valid & self.out.ready)]
        leave = Signal(name="row_leaves")
        m.d.comb += leave.eq(hq.r_rdy & (front.drop | (self.out.valid & self.out.ready & xq.r_data[0])))
        cr = data.View(self.lay.pcredit, cq.w_data)
        m.d.comb += [hq.r_en.eq(leave), cq.w_en.eq(leave), cr.sender.eq(front.sender), cr.ptag.eq(front.ptag),
                     self.pcredit.valid.eq(cq.r_rdy), self.pcredit.payload.eq(cq.r_data),
                     cq.r_en.eq(self.pcredit.ready)]
        return m
