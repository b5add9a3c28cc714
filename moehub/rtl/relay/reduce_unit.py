"""The relay's reduce-on-combine control (protocol v3): which accumulate operation each
partial output row takes, with which weight, and when a (token, node)'s sum is final.

Reference: :class:`moehub.spec.relay.ReduceModel` (its ``ops``), which
tests/test_rtl_relay.py runs beside this unit with the same opens and partial rows.

One *record* per sum, at index (the source's node among the other nodes, token) -- the
relay serves the remote GPUs of its own local rank, so the node and token name the sum:
open, the top-k slots expected (a bit each), the slots in (a bit each, and their count),
and the BF16 gate weight of each slot. Operations, one at a time,
each a read of the record, registered, and (two cycles after the read) its write:

* ``open`` (a relay row accepted, from the forward unit's row): a record for the row's
  slots and weights; a sum already open is refused (``OPEN_TWICE``), the record kept; a
  sum the table has no place for (the source's node this hub's or none, a token >=
  ``reduce_tokens``) is refused (``NO_RECORD``) without touching the table;
* ``part`` (an expert's output row back, its header's (node, token, slot)): refused
  (``BAD_PARTIAL``) if no sum is open there (or can be: no record, as above -- never
  another sum's record), the slot is not expected or already in;
  otherwise an ``op`` for the datapath -- WRITE (the first part: acc = w y), ADD (acc +=
  w y), LAST (the final part: send acc + w y, no write back), ONLY (the only part: send w
  y) -- with the slot's weight and the parts in; LAST and ONLY free the record: the sum is
  **final** exactly when every expected slot is in;
* ``flush`` (the combine's end, or the watchdog): a sweep of every record; each still open
  becomes a FLUSH op (send acc as it is, ``parts`` of them in) and is freed; counted
  incomplete.

``op`` is a stream: a sum's ops leave in the order its parts were taken, so the
datapath's FP32 accumulate (``acc + w y``, product then sum each rounded, the model's
order) sees them in that order. The datapath itself -- a lane of FP32 multiply-adds
streaming the row's chunks from and to the accumulator row in HBM (``index`` x row
bytes) -- is not part of this unit.

Storage: a record is ``1 + 2 x topk + field_bits(topk) + 16 x topk`` bits (149 at top-8;
:func:`~moehub.spec.relay.record_bytes` counts 19 bytes), ``reduce_records = (nodes - 1) x
reduce_tokens`` of them, an SRAM (:func:`~moehub.spec.relay.record_table_bits`: 0.61 Mbit
for 2 nodes at 4096 tokens per GPU, 4.3 Mbit for 8).
After reset a clearing sweep writes every record closed (``reduce_records`` cycles: an
SRAM macro powers up with anything), and only then takes operations.
Rate: one operation per three cycles (no read-after-write hazard to forward), against a
partial row of ``row_bytes / chunk_bytes`` chunks (hundreds of cycles): never the limit;
a flush sweep takes three cycles a record.
"""
import enum

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig, field_bits
from ...spec.formats import WEIGHT_BITS, ReduceReason, RelayPorts
from ..logic import select
from .layouts import struct_layout, refuse_without_relay


class Op(enum.IntEnum):
    """The datapath operation of an ``op`` (:class:`moehub.spec.relay.ReduceModel`'s
    names, lower case)."""
    WRITE = 0
    ADD = 1
    LAST = 2
    ONLY = 3
    FLUSH = 4


def op_layout(cfg: HubConfig) -> data.StructLayout:
    """The payload of an ``op``: kind (:class:`Op`), index (the record, and the
    accumulator row), slot, weight (BF16) and the parts in after it."""
    index_bits = max(1, (cfg.reduce_records - 1).bit_length())
    return data.StructLayout({"kind": 3, "index": index_bits, "slot": cfg.slot_bits,
                              "weight": WEIGHT_BITS, "parts": field_bits(cfg.topk)})


def open_layout(cfg: HubConfig) -> data.StructLayout:
    """The payload of an ``open``: the sum's source node and token, and per relay-row entry
    (``relay_targets`` of them) its valid bit, top-k slot and BF16 gate weight."""
    return struct_layout(RelayPorts(cfg).open)


class ReduceUnit(wiring.Component):
    """The reduce-on-combine control (see the module docstring).

    Attributes
    ----------
    node : In(node_bits)
        This hub's node (the NODE_ID register).
    open : In(stream): src_node, token, valid[relay_targets], slot[...], weight[...]
    part : In(stream): src_node, token, slot
    flush : In(1)
        Start a sweep (a pulse; taken when the unit is idle, held until then).
    op : Out(stream): kind (Op), index (record / accumulator row), slot, weight (BF16), parts
        (from a register: an op waits there until taken, and the next op's record waits)
    red_rows, red_open, red_incomplete : Out(32)
        The RED_ROWS, RED_OPEN, RED_INCOMPLETE counters (a cycle after the operation
        that counts).
    drops : Out(32).array(len(ReduceReason))
        Refusals per :class:`~moehub.spec.formats.ReduceReason` (the RED_DROPS registers).
    part_refused, part_taken : Out(1)
        The verdict on the part taken last (a pulse, two or more cycles after it was
        taken): refused (the cycle its ``BAD_PARTIAL`` is counted: it makes no ``op``, and
        whoever holds its row's data drops it), or taken (its ``op`` is in the output
        register from the next cycle).
    clearing : Out(1)
        The clearing sweep after reset (``reduce_records`` cycles, one record written
        closed a cycle; nothing is taken until it ends).
    sweeping : Out(1)
    """

    def __init__(self, cfg: HubConfig, power_up=()):
        """``power_up``: the record SRAM's contents before the clearing sweep (tests: an
        SRAM macro powers up with anything; default zeros)."""
        self.power_up = list(power_up)
        refuse_without_relay(self, cfg, "a reduce unit")
        self.cfg = cfg
        T, K = cfg.relay_targets, cfg.topk
        self.depth = cfg.reduce_records
        self.span_bits = (cfg.reduce_token_span - 1).bit_length()
        self.index_bits = max(1, (self.depth - 1).bit_length())
        self.record = data.StructLayout({"open": 1, "expect": K, "seen": K, "n_in": field_bits(K),
                                         "weight": data.ArrayLayout(WEIGHT_BITS, K)})
        super().__init__({
            "node": In(cfg.node_bits),
            "open": In(stream.Signature(open_layout(cfg))),
            "part": In(stream.Signature(data.StructLayout({
                "src_node": cfg.node_bits, "token": cfg.token_bits, "slot": cfg.slot_bits}))),
            "flush": In(1),
            "op": Out(stream.Signature(op_layout(cfg))),
            "part_refused": Out(1), "part_taken": Out(1),
            "red_rows": Out(32), "red_open": Out(32), "red_incomplete": Out(32),
            "drops": Out(32).array(len(ReduceReason)), "sweeping": Out(1), "clearing": Out(1),
        })

    def _index(self, src_node, token):
        """The record of (source node, token): the node among the other nodes, then the
        token (``reduce_token_span`` a power of two)."""
        remote = src_node - (src_node > self.node)
        return Cat(token[:self.span_bits], remote)[:self.index_bits]

    def _has_record(self, src_node, token):
        """Whether the table has a place for the sum: a remote node that exists, a token
        below the span (else the index would name another sum's record)."""
        cfg = self.cfg
        tok_ok = (token >> self.span_bits) == 0 if self.span_bits < cfg.token_bits else 1
        return (src_node < cfg.nodes) & (src_node != self.node) & tok_ok

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        T, K = cfg.relay_targets, cfg.topk
        m.submodules.mem = mem = Memory(shape=self.record, depth=self.depth, init=[data.Const(self.record, v) for v in self.power_up])
        rd, wr = mem.read_port(), mem.write_port()
        # (the record read is registered before any logic uses it: from the SRAM's read
        # data through the logic into the op was the unit's deepest path, 21.0 FO4, and
        # 22.7 into a register behind it -- ABC does not see the macro's access time; an
        # operation takes a cycle more)
        rec_q = Signal(self.record, name="record_read")
        m.d.sync += rec_q.eq(rd.data)
        rec = rec_q

        # (the sums open are at most the records: RED_OPEN's counter is as wide as that
        # count, not 32 bits -- its increment/decrement is a full adder, and at 32 bits
        # with its select fanned out to every bit it was the unit's deepest path)
        n_rows, n_inc = Signal(32, name="n_rows"), Signal(32, name="n_inc")
        n_open = Signal(field_bits(self.depth), name="n_open")
        n_badp, n_bado = Signal(32, name="n_bad_partials"), Signal(32, name="n_bad_opens")
        n_norec = Signal(32, name="n_no_record")
        m.d.comb += [self.red_rows.eq(n_rows), self.red_open.eq(n_open), self.red_incomplete.eq(n_inc),
                     self.drops[ReduceReason.BAD_PARTIAL].eq(n_badp),
                     self.drops[ReduceReason.OPEN_TWICE].eq(n_bado),
                     self.drops[ReduceReason.NO_RECORD].eq(n_norec)]
        # (the sums opened and closed are counted a cycle after the operation, from
        # registered events: the slot's decode through the seen bits into ``final`` and
        # on into RED_OPEN's increment/decrement was the unit's deepest path, 21.9 FO4
        # alone and 23.0 in the whole relay hub; an open and a close are never in the
        # same cycle -- one operation per three cycles)
        opened, closed, flushed = Signal(name="ev_opened"), Signal(name="ev_closed"), Signal(name="ev_flushed")
        m.d.sync += [opened.eq(0), closed.eq(0), flushed.eq(0)]
        with m.If(opened):
            m.d.sync += n_open.eq(n_open + 1)
        with m.Elif(closed):
            m.d.sync += [n_rows.eq(n_rows + 1), n_open.eq(n_open - 1)]
        with m.If(flushed):
            m.d.sync += n_inc.eq(n_inc + 1)

        index = Signal(self.index_bits, name="index")
        is_open = Signal(name="cur_is_open")         # the operation read: an open (else a part)
        o = Signal(self.open.payload.shape(), name="cur_open")
        slot = Signal(cfg.slot_bits, name="cur_slot")
        placed = Signal(name="cur_has_record")      # the operation's sum has a record
        flush_req = Signal(name="flush_req")
        with m.If(self.flush):
            m.d.sync += flush_req.eq(1)
        # (the read address is the next operation's index in the cycle it is taken: the
        # record is on rd.data in the cycle after, READ, and in record_read in DO;
        # otherwise the index held)
        m.d.comb += [rd.addr.eq(index), wr.addr.eq(index), rd.en.eq(1)]

        # the new record of an open: the expected slots and their weights
        exp_bits = Cat(*(Cat(*(o.valid[j] & (o.slot[j] == s) for j in range(T))).any() for s in range(K)))
        new = Signal(self.record, name="new_record")
        m.d.comb += [new.open.eq(1), new.expect.eq(exp_bits), new.seen.eq(0), new.n_in.eq(0)]
        for s in range(K):
            m.d.comb += new.weight[s].eq(select([(o.valid[j] & (o.slot[j] == s), o.weight[j]) for j in range(T)],
                                                WEIGHT_BITS))
        # a part against the record read (its slot decoded as it is taken, into a
        # register: from the slot's decode through the record's bits into the verdict and
        # on into the intake's state was the reduce path's deepest, 22.8 FO4)
        sbit = Signal(K, name="cur_slot_bit")
        ok = Signal(name="part_ok")
        m.d.comb += ok.eq(rec.open & (rec.expect & sbit).any() & ~(rec.seen & sbit).any())
        seen2 = Signal(K, name="seen_after")
        m.d.comb += seen2.eq(rec.seen | sbit)
        first, final = rec.seen == 0, seen2 == rec.expect
        # the op out is a register (its data loaded whenever the state could make an op,
        # its valid set only when it does: no verdict in front of the data's load enable)
        op_valid = Signal(name="op_valid")
        op = Signal(op_layout(cfg), name="op_out")
        m.d.comb += [self.op.valid.eq(op_valid), self.op.payload.eq(op)]
        with m.If(self.op.ready):
            m.d.sync += op_valid.eq(0)
        part_op = Signal(op_layout(cfg), name="part_op")
        m.d.comb += [part_op.index.eq(index), part_op.slot.eq(slot),
                     part_op.weight.eq(select([(sbit[s], rec.weight[s]) for s in range(K)], WEIGHT_BITS)),
                     # (the parts in after it: the record's count and this one -- a part
                     # that makes an op is one not yet in; the count is kept in the record
                     # beside the seen bits: their popcount from the record read into the
                     # op was the relay hub's deepest path, 22.8 FO4)
                     part_op.parts.eq(rec.n_in + 1),
                     part_op.kind.eq(Mux(first, Mux(final, Op.ONLY, Op.WRITE), Mux(final, Op.LAST, Op.ADD)))]
        flush_op = Signal(op_layout(cfg), name="flush_op")
        m.d.comb += [flush_op.index.eq(index), flush_op.kind.eq(Op.FLUSH),
                     flush_op.parts.eq(rec.n_in)]

        with m.FSM(name="reduce") as fsm:
            with m.State("CLEAR"):                    # after reset: every record closed
                m.d.comb += [self.clearing.eq(1), wr.en.eq(1), wr.data.eq(0)]
                m.d.sync += index.eq(index + 1)
                with m.If(index == self.depth - 1):
                    m.d.sync += index.eq(0)
                    m.next = "IDLE"
            with m.State("IDLE"):
                m.d.comb += [self.open.ready.eq(~flush_req), self.part.ready.eq(~flush_req & ~self.open.valid)]
                with m.If(flush_req):
                    m.d.sync += [index.eq(0), flush_req.eq(0)]
                    m.next = "SWEEP"
                with m.Elif(self.open.valid):
                    at = self._index(self.open.payload.src_node, self.open.payload.token)
                    m.d.comb += rd.addr.eq(at)
                    m.d.sync += [index.eq(at), o.eq(self.open.payload), is_open.eq(1),
                                 placed.eq(self._has_record(self.open.payload.src_node, self.open.payload.token))]
                    m.next = "READ"
                with m.Elif(self.part.valid):
                    at = self._index(self.part.payload.src_node, self.part.payload.token)
                    m.d.comb += rd.addr.eq(at)
                    m.d.sync += [index.eq(at), slot.eq(self.part.payload.slot), is_open.eq(0),
                                 sbit.eq(Cat(*(self.part.payload.slot == s for s in range(K)))),
                                 placed.eq(self._has_record(self.part.payload.src_node, self.part.payload.token))]
                    m.next = "READ"
            with m.State("READ"):                     # the record is on rd.data
                m.next = "DO"
            with m.State("DO"):                       # ... and in record_read
                with m.If(is_open & ~placed):
                    m.d.sync += n_norec.eq(n_norec + 1)
                    m.next = "IDLE"
                with m.Elif(is_open):
                    with m.If(rec.open):
                        m.d.sync += n_bado.eq(n_bado + 1)
                    with m.Else():
                        m.d.comb += [wr.en.eq(1), wr.data.eq(new)]
                        m.d.sync += opened.eq(1)
                    m.next = "IDLE"
                with m.Elif(~ok | ~placed):
                    m.d.comb += self.part_refused.eq(1)
                    m.d.sync += n_badp.eq(n_badp + 1)
                    m.next = "IDLE"
                with m.Elif(~op_valid):                 # (the op register free: the op in it)
                    upd = Signal(self.record, name="upd_record")
                    m.d.comb += [upd.eq(rec), upd.seen.eq(seen2), upd.n_in.eq(rec.n_in + 1), upd.open.eq(~final)]
                    m.d.comb += [wr.en.eq(1), wr.data.eq(upd), self.part_taken.eq(1)]
                    m.d.sync += op_valid.eq(1)
                    with m.If(final):
                        m.d.sync += closed.eq(1)
                    m.next = "IDLE"
            with m.State("SWEEP"):                    # the record at index is read
                m.d.comb += self.sweeping.eq(1)
                m.next = "SWEEP_READ"
            with m.State("SWEEP_READ"):               # ... on rd.data
                m.d.comb += self.sweeping.eq(1)
                m.next = "SWEEP_DO"
            with m.State("SWEEP_DO"):                 # ... and in record_read
                m.d.comb += self.sweeping.eq(1)
                with m.If(~rec.open | ~op_valid):
                    with m.If(rec.open):
                        m.d.comb += [wr.en.eq(1), wr.data.eq(0)]
                        m.d.sync += [op_valid.eq(1), closed.eq(1), flushed.eq(1)]
                    m.d.sync += index.eq(index + 1)
                    with m.If(index == self.depth - 1):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "SWEEP"
        with m.If(~op_valid & fsm.ongoing("DO")):
            m.d.sync += op.eq(part_op)
        with m.If(~op_valid & fsm.ongoing("SWEEP_DO")):
            m.d.sync += op.eq(flush_op)
        return m
