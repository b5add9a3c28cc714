"""One lane's write buffer: the packet manager's data writes leave through it, in order.

A slot is taken per packet when the packet is accepted, and its data is written then: the
data does not travel down the pipeline. Stage B fills in the slot's address (or marks it
*void*: the packet writes nothing, e.g. a duplicate or a dropped row's chunk) and the group
the write belongs to; slots leave in order from the head, a void head at once, a write
when the lane's port takes it. The packet manager reserves a slot for every packet in
flight before it accepts one, so the buffer never overflows.
"""
from amaranth import Array, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from .layouts import HubLayouts
from ..spec.timing import GROUP_BITS, WRITE_FIFO_DEPTH


class LaneWriteBuffer(wiring.Component):
    """Write buffer of lane ``lane`` (``WRITE_FIFO_DEPTH`` slots).

    Parameters
    ----------
    cfg : HubConfig
    lane : int
        The lane's index (names the registers).

    Attributes
    ----------
    load : In(1)
        Write ``data`` into the next free slot (whether or not the packet is accepted).
    data : In(data_bits)
    take : In(1)
        The packet is accepted: the slot is taken.
    slot : Out(range(WRITE_FIFO_DEPTH))
        The next free slot (the accepted packet's, carried down the pipeline).
    fill : In(1), fill_write : In(1), fill_slot, fill_base, fill_off, fill_group : In
        Stage B completes a slot: with ``fill_write`` a write to ``fill_base + fill_off``
        of group ``fill_group``, else void. The two parts are kept in the slot and added
        there (an adder per slot, from its registers, in front of the head's select): B
        forms the row's byte offset (a multiply by the row stride) and has no time left
        for the add behind it.
    wr : Out(stream.Signature(write))
        The lane's write port (head of the buffer).
    pop : Out(1)
        The head leaves this cycle.
    pending : Out(1)
        A write (not void) is waiting.
    head_group : Out(GROUP_BITS)
        The group of the head's write.
    """

    def __init__(self, cfg: HubConfig, lane: int):
        self.cfg, self.lane = cfg, lane
        lay = HubLayouts(cfg)
        D = WRITE_FIFO_DEPTH
        super().__init__({
            "load": In(1), "data": In(cfg.data_bits), "take": In(1), "slot": Out(range(D)),
            "fill": In(1), "fill_write": In(1), "fill_slot": In(range(D)),
            "fill_base": In(cfg.addr_bits), "fill_off": In(cfg.addr_bits), "fill_group": In(GROUP_BITS),
            "wr": Out(stream.Signature(lay.write)), "pop": Out(1), "pending": Out(1),
            "head_group": Out(GROUP_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        j, D, cfg = self.lane, WRITE_FIFO_DEPTH, self.cfg
        wa = Signal(range(D), name=f"wf_wa{j}")
        rp = Signal(range(D), name=f"wf_rp{j}")
        ready = Signal(D, name=f"wf_ready{j}")
        void = Signal(D, name=f"wf_void{j}")
        data = Array(Signal(cfg.data_bits, name=f"wf_data{j}_{k}") for k in range(D))
        base = [Signal(cfg.addr_bits, name=f"wf_base{j}_{k}") for k in range(D)]
        off = [Signal(cfg.addr_bits, name=f"wf_off{j}_{k}") for k in range(D)]
        addr = Array(Signal(cfg.addr_bits, name=f"wf_addr{j}_{k}") for k in range(D))
        m.d.comb += [addr[k].eq(base[k] + off[k]) for k in range(D)]
        group = Array(Signal(GROUP_BITS, name=f"wf_group{j}_{k}") for k in range(D))
        # (the data is written whenever the input reservation says slot `wa` is free,
        # accepted or not -- `wa` only moves on acceptance --, so the wide write enable does
        # not wait for the input handshake)
        with m.If(self.load):
            m.d.sync += data[wa].eq(self.data)
        with m.If(self.take):
            m.d.sync += wa.eq(wa + 1)
        m.d.comb += self.slot.eq(wa)
        with m.If(self.fill):
            m.d.sync += [Array(base)[self.fill_slot].eq(self.fill_base), Array(off)[self.fill_slot].eq(self.fill_off),
                         group[self.fill_slot].eq(self.fill_group)]
        head_ready = Signal(name=f"wf_head_ready{j}")
        head_void = Signal(name=f"wf_head_void{j}")
        m.d.comb += [
            head_ready.eq(ready.bit_select(rp, 1)),
            head_void.eq(void.bit_select(rp, 1)),
            self.pending.eq((ready & ~void).any()),
            self.wr.valid.eq(head_ready & ~head_void),
            self.wr.payload.addr.eq(addr[rp]),
            self.wr.payload.data.eq(data[rp]),
            self.head_group.eq(group[rp]),
            self.pop.eq(head_ready & (head_void | self.wr.ready)),
        ]
        set_mask = Mux(self.fill, Const(1, D) << self.fill_slot, 0)
        clr_mask = Mux(self.pop, Const(1, D) << rp, 0)
        m.d.sync += [ready.eq((ready & ~clr_mask) | set_mask),
                     void.eq(Mux(self.fill & ~self.fill_write, void | set_mask, void & ~set_mask))]
        with m.If(self.pop):
            m.d.sync += rp.eq(rp + 1)
        return m
