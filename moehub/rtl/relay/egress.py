"""The relay hub's forward egress (protocol v3): each forward row the forward unit emits,
read back from the staging and sent to its GPU as protocol v3's forward row, chunk by
chunk; a relay row's credit passed on only once its forwards have all been read.

::

    fwd (+ the row's R tag) --\\                        /--> rd (HBM: the staged chunk)
                               >-- commands, in order --
    rcredit -----------------/                        \\--> credit (the row's forwards read: the join)
    rdata --> out (the destination GPU, a lane word: RelayFormats.forward_row, class FORWARD)

The forward unit emits a row's forwards, then its credit (``rcredit``, the cycle after its
last forward at the earliest), so one FIFO of commands (behind one register, its ready a
register too) keeps their order. A forward
command issues the row's ``chunks_per_row`` reads at the staging slot of (its original
source, the R tag) (:func:`~.stage.stage_slot`; the row's address prepared in three
registered steps first: slot, offset, address), one a cycle, each with its context (the
forward row's header and the chunk) in a FIFO beside the memory's in-order answers; each
answer leaves on ``out`` with its context. A credit command waits until every read before
it has been answered and sent (the context FIFO empty), then goes to the credit join:
only then may the staging slot, and with it the source's tag, be reused.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ...spec.formats import RelayFormats, RowClass
from ..layouts import struct
from .layouts import RelayLayouts, refuse_without_relay
from .stage import stage_slot

#: commands (forwards and credits) the egress's FIFO holds (one more waits in a register
#: in front of it), and reads in flight
COMMANDS, READS = 4, 8


class ForwardEgress(wiring.Component):
    """The forward egress (see the module docstring).

    Attributes
    ----------
    fwd : In(stream of RelayLayouts.fwd); fwd_tag : In(tag_bits)
        Forward rows from the forward unit, with their relay row's R tag.
    rcredit : In(stream of RelayLayouts.rcredit)
        Relay rows' credits from the forward unit (after their forwards).
    node : In; base : In(addr_bits)
        This hub's node; where the staging starts (RELAY_STAGE_BASE).
    rd : Out(stream of addr); rdata : In(stream of data_bits)
        The staging's reads, answered in order.
    out : Out(stream of (dst, word))
        Forward rows' chunks: the destination's local rank and the lane word.
    credit : Out(stream of RelayLayouts.rcredit)
        A relay row's forwards all read.
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a forward egress")
        self.cfg = cfg
        self.lay = lay = RelayLayouts(cfg)
        self.fmts = RelayFormats(cfg)
        self.out_layout = data.StructLayout({"dst": cfg.gpu_bits, "word": self.fmts.lane_bits})
        self.command = data.StructLayout({"credit": 1, "fwd": lay.fwd, "tag": cfg.tag_bits, "cr": lay.rcredit})
        self.context = data.StructLayout({"chunk": cfg.chunk_bits, "last": 1})
        super().__init__({
            "fwd": In(stream.Signature(lay.fwd)), "fwd_tag": In(cfg.tag_bits),
            "rcredit": In(stream.Signature(lay.rcredit)),
            "node": In(cfg.node_bits), "base": In(cfg.addr_bits),
            "rd": Out(stream.Signature(cfg.addr_bits)),
            "rdata": In(stream.Signature(cfg.data_bits)),
            "out": Out(stream.Signature(self.out_layout)),
            "credit": Out(stream.Signature(lay.rcredit)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        C = cfg.chunks_per_row
        m.submodules.cmds = cq = SyncFIFOBuffered(width=self.command.size, depth=COMMANDS)
        m.submodules.ctxs = xq = SyncFIFOBuffered(width=self.context.size, depth=READS)
        # the forward rows' headers, one per forward in flight: pushed as its address is
        # prepared (from a register), popped with its last chunk out -- the reads' context
        # FIFO holds only the chunk (a header per read was a wide write behind the read
        # handshake: 23.8 FO4 at 4 nodes)
        m.submodules.hdrs = hq = SyncFIFOBuffered(width=self.lay.fwd.size, depth=2)
        # ---- commands in: a forward, or a credit -- never both offered in one cycle (the
        # forward unit offers a row's credit only once none of its forwards is left), so the
        # credit's ready does not look at the forward's valid: gating it so put the forward
        # unit's pick into its own row handshake (30.5 FO4 in the whole hub). The command is
        # registered before its FIFO (``cmd_held``, moved on while the FIFO has room: one a
        # cycle still): the forward unit's pick (``fwd.valid``, 1.6 ns) then ends at a
        # register, not at the FIFO's write (23.1 FO4 in the whole hub at 2 nodes). The
        # ready is a register too (``cmd_ready``), set a cycle ahead from the room the
        # register and the FIFO will have: this cycle's commands held, plus the one taken
        # now, at most the FIFO's depth (this cycle's pop not counted: its readiness is the
        # staging's and the join's). A ready read from the FIFO's level ran through the
        # forward unit's handshake into the relay control's row FIFO (28.3 FO4 in the whole
        # hub at 4 nodes). The two compares (a command taken now or not) are formed from
        # registers and chosen by ``accept`` last: with the sum behind the handshake, the
        # forward unit's pick ran on through an adder into the ready (22.19 FO4 in the whole
        # hub at 4 nodes).
        cmd = data.View(self.command, Signal(self.command.size, name="cmd_in"))
        held = Signal(name="cmd_held")
        held_cmd = Signal(self.command.size, name="cmd_reg")
        ready = Signal(init=1, name="cmd_ready")
        take = Signal(name="cmd_take")          # the register free for a command this cycle
        accept = Signal(name="cmd_accept")
        m.d.comb += [cmd.credit.eq(~self.fwd.valid), cmd.fwd.eq(self.fwd.payload), cmd.tag.eq(self.fwd_tag),
                     cmd.cr.eq(self.rcredit.payload),
                     take.eq(~held | cq.w_rdy),
                     accept.eq(ready & (self.fwd.valid | self.rcredit.valid)),
                     self.fwd.ready.eq(ready), self.rcredit.ready.eq(ready),
                     cq.w_en.eq(held), cq.w_data.eq(held_cmd)]
        pending = Signal(range(COMMANDS + 2), name="cmd_pending")   # held or in the FIFO
        m.d.comb += pending.eq(cq.level + held)
        m.d.sync += ready.eq(Mux(accept, pending < COMMANDS, pending <= COMMANDS))
        with m.If(take):
            m.d.sync += [held.eq(accept), held_cmd.eq(cmd.as_value())]
        head = data.View(self.command, cq.r_data)
        # ---- a forward: its staged row's address prepared in three registered steps (its
        # slot, slot x stride, base + that: one operation a step -- two in one step were
        # 26-28 FO4), then its reads, one a cycle, each with its context
        chunk = Signal(range(C), name="chunk")
        step = Signal(2, name="prep_step")      # 0: slot next, 1: offset next, 2: address next, 3: reading
        slot = Signal(max(1, (cfg.relay_window - 1).bit_length()), name="slot")
        off, addr = Signal(cfg.addr_bits, name="offset"), Signal(cfg.addr_bits, name="addr")
        fwd_head = Signal(name="fwd_head")
        m.d.comb += fwd_head.eq(cq.r_rdy & ~head.credit)
        with m.If(fwd_head & (step == 0)):
            m.d.sync += [slot.eq(stage_slot(cfg, self.node, head.fwd.src_node, head.tag)), step.eq(1)]
        with m.If(step == 1):
            m.d.sync += [off.eq((slot * cfg.stride_bytes)[:cfg.addr_bits]), step.eq(2)]
        with m.If((step == 2) & hq.w_rdy):
            m.d.sync += [addr.eq((self.base + off)[:cfg.addr_bits]), step.eq(3)]
        m.d.comb += [hq.w_en.eq((step == 2) & hq.w_rdy), hq.w_data.eq(head.fwd.as_value())]
        last = chunk == C - 1
        m.d.comb += [self.rd.valid.eq(fwd_head & (step == 3) & xq.w_rdy), self.rd.payload.eq(addr),
                     xq.w_en.eq(self.rd.valid & self.rd.ready)]
        wctx = data.View(self.context, xq.w_data)
        m.d.comb += [wctx.chunk.eq(chunk), wctx.last.eq(last)]
        with m.If(self.rd.valid & self.rd.ready):
            m.d.sync += [chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr + cfg.chunk_bytes)]
            with m.If(last):
                m.d.sync += step.eq(0)
        # ---- a credit: once every read before it is answered and sent
        idle = Signal(name="reads_idle")
        m.d.comb += idle.eq((xq.level == 0) & ~xq.r_rdy)
        m.d.comb += [self.credit.valid.eq(cq.r_rdy & head.credit & idle), self.credit.payload.eq(head.cr)]
        m.d.comb += cq.r_en.eq((self.rd.valid & self.rd.ready & last) | (self.credit.valid & self.credit.ready))
        # ---- the answers out, with their contexts
        ctx = data.View(self.context, xq.r_data)
        word = data.View(struct(self.fmts.forward_row), Signal(self.fmts.forward_row.width, name="fwd_word"))
        f = data.View(self.lay.fwd, hq.r_data)
        m.d.comb += [word.cls.eq(RowClass.FORWARD), word.fwd.eq(f.fwd), word.ftag.eq(f.ftag),
                     word.src_node.eq(f.src_node), word.src_rank.eq(f.src_rank), word.token.eq(f.token),
                     word.chunk.eq(ctx.chunk), word.data.eq(self.rdata.payload)]
        for t in range(cfg.max_targets):
            m.d.comb += [getattr(word, f"valid{t}").eq(f.valid[t]), getattr(word, f"expert{t}").eq(f.expert[t]),
                         getattr(word, f"slot{t}").eq(f.slot[t])]
        m.d.comb += [self.out.valid.eq(self.rdata.valid & xq.r_rdy), self.out.payload.dst.eq(f.dst),
                     self.out.payload.word.eq(word.as_value()),
                     self.rdata.ready.eq(self.out.ready & xq.r_rdy),
                     xq.r_en.eq(self.out.valid & self.out.ready),
                     hq.r_en.eq(self.out.valid & self.out.ready & ctx.last)]
        return m
