"""The reduce-on-combine's engine (protocol v3): the reduce unit's operations carried out
on the partial rows' data, the accumulator rows read and written in HBM, and each final
sum sent as one reduced row.

::

    op (ReduceUnit) --> ISSUE --context FIFO--> JOIN --> ReduceDatapath --+--> wr     (WRITE, ADD: the
                          |                      ^  ^                      |          accumulator written back)
                          `--rd--> memory --rdata'  |                      `--> out   (LAST, ONLY, FLUSH: the
    y (the parts' rows, chunk by chunk) ------------'                                  reduced row's chunks)

Each ``op`` (:class:`~.reduce_unit.ReduceUnit`: kind, record, weight, parts) is a pass
over the ``chunks`` chunks of a row, ``elements`` BF16 elements a chunk (a chunk of the
hub's data path):

* **ISSUE** takes an op and, chunk by chunk, asks the memory for the accumulator's
  chunk (``rd``: ADD, LAST, and FLUSH of a sum with a part in) and queues the chunk's
  context (kind, weight, record, chunk, its accumulator address);
* **JOIN** pairs the head context with the partial row's chunk (``y``: every kind but
  FLUSH) and the accumulator's (``rdata``, if read) into a beat of the
  :class:`~.accumulate.ReduceDatapath` (the model's FP32 arithmetic to the bit);
* the datapath's result is written back (``wr``: WRITE, ADD) or leaves as a chunk of
  the reduced row (``out``: LAST, ONLY, FLUSH), with the row's header -- the source
  (its node from the record, its local rank this hub's), the token and the parts summed.

A FLUSH of a sum no part reached reads nothing and sends a row of zeros (the sum of no
parts; the model's row is empty). The accumulator of record ``r`` is the row of
``2 x row_bytes`` bytes (FP32 for each BF16 element) at ``acc_base + r x 2 row_bytes``,
chunk ``c`` at ``+ c x 2 chunk_bytes``; its memory words are ``elements`` FP32 elements.

Ordering: ops leave in the order the unit issued them, a sum's in the order its parts
came, and the datapath keeps that order, so each sum's FP32 additions are the model's.
The memory port is in order (ASSUMPTION: a read taken after a write to the same address
returns the written data, and the reads' data return in the reads' order, as an HBM
controller keeps them on one ID): an op that reads a record waits until no earlier op
still in flight (issued, its last chunk not yet out of the datapath) writes that record
-- a sum's next part waits for its last part's write-back, the datapath's latency and the
memory's -- while ops of other sums overlap. A read of an op always comes before the
writes of the later ops, so no write overtakes a read it must follow.

Rate: a chunk a cycle while the memory keeps up, plus a cycle between ops; at most
:data:`CONTEXTS` chunks between their read and the datapath (what hides the memory's
latency) and :data:`OPS_IN_FLIGHT` ops in flight. The counters (``acc_reads``,
``acc_writes``: accumulator rows, the RED_ACC_READS and RED_ACC_WRITES registers, each
counted at its last chunk; ``rows_out``: reduced rows) lag their events by a cycle.
"""
from amaranth import Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig, field_bits
from ...spec.formats import WEIGHT_BITS, ReducePorts
from ..logic import times_const
from .accumulate import ReduceDatapath
from .layouts import struct_layout, refuse_without_relay
from .reduce_unit import Op, op_layout

#: chunks whose accumulator read is out (context queued) ahead of the datapath: hides a
#: memory latency of up to this many cycles at a chunk a cycle
CONTEXTS = 16
#: ops issued and not yet out of the datapath (the hazard check compares each)
OPS_IN_FLIGHT = 4


def engine_layouts(cfg: HubConfig, elements: int, chunks: int) -> dict:
    """The engine's stream payloads (``rd``, ``wr``, ``out``) and its chunk context."""
    index_bits = Shape.cast(op_layout(cfg)["index"].shape).width
    ports = ReducePorts(cfg, elements, chunks)
    return {
        **{k: struct_layout(getattr(ports, k)) for k in ("rd", "wr", "out")},
        "context": data.StructLayout({"kind": 3, "weight": WEIGHT_BITS, "index": index_bits,
                                      "parts": field_bits(cfg.topk), "chunk": field_bits(chunks - 1),
                                      "addr": cfg.addr_bits, "read": 1, "last": 1}),
    }


class ReduceEngine(wiring.Component):
    """The reduce's engine (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``relay: true``.
    elements : int
        BF16 elements a chunk (default ``data_bits / 16``, one chunk of the data path).
    chunks : int
        Chunks of a partial (and reduced) row (default ``chunks_per_row``: the combine's
        output rows are the dispatch's rows, BF16).
    contexts : int
        The context FIFO's depth (default :data:`CONTEXTS`; at least 3).
    ops_in_flight : int
        The scoreboard's entries (default :data:`OPS_IN_FLIGHT`; at least 2).
    datapath : callable
        The datapath's constructor, ``datapath(cfg, elements, tag_bits)`` (default
        :class:`~.accumulate.ReduceDatapath`). The hub elaborates the defaults; the formal
        proof (``moehub formal relay-reduce``) also elaborates smaller depths and a
        shorter pipeline of the datapath's control.

    Attributes
    ----------
    node, rank : In
        This hub's node and local rank (the reduced row's source is (a node of the record,
        this rank): a relay serves the remote GPUs of its own rank).
    acc_base : In(addr_bits)
        Where the accumulator rows start.
    op : In(stream of :func:`~.reduce_unit.op_layout`)
    y : In(stream of 16 x elements bits)
        The partial rows of the ops that add one (all but FLUSH), in op order, each
        ``chunks`` beats in chunk order, element 0 in the low bits.
    rd : Out(stream): addr;  rdata : In(stream of 32 x elements bits)
        The accumulator's reads and their data (in order).
    wr : Out(stream): addr, data (32 x elements bits)
    out : Out(stream): src_node, src_rank, token, parts, chunk, data (16 x elements bits)
        The reduced rows, chunk by chunk.
    acc_reads, acc_writes, rows_out : Out(32)
        Accumulator rows read and written, reduced rows sent (a cycle late).
    busy : Out(1)
        An op is in flight.
    """

    def __init__(self, cfg: HubConfig, elements: int | None = None, chunks: int | None = None,
                 contexts: int = CONTEXTS, ops_in_flight: int = OPS_IN_FLIGHT, datapath=ReduceDatapath):
        refuse_without_relay(self, cfg, "a reduce engine")
        if contexts < 3 or ops_in_flight < 2:
            self._MustUse__silence = True
            raise ValueError(f"reduce engine: contexts = {contexts}, ops_in_flight = {ops_in_flight}: "
                             "at least 3 and 2")
        self.contexts, self.ops_in_flight, self.datapath = contexts, ops_in_flight, datapath
        self.cfg = cfg
        self.elements = elements or max(1, cfg.data_bits // 16)
        self.chunks = chunks or cfg.chunks_per_row
        self.lay = lay = engine_layouts(cfg, self.elements, self.chunks)
        self.acc_chunk_bytes = 2 * cfg.chunk_bytes
        self.acc_row_bytes = self.chunks * self.acc_chunk_bytes
        super().__init__({
            "node": In(cfg.node_bits), "rank": In(cfg.gpu_bits), "acc_base": In(cfg.addr_bits),
            "op": In(stream.Signature(op_layout(cfg))),
            "y": In(stream.Signature(16 * self.elements)),
            "rd": Out(stream.Signature(lay["rd"])),
            "rdata": In(stream.Signature(32 * self.elements)),
            "wr": Out(stream.Signature(lay["wr"])),
            "out": Out(stream.Signature(lay["out"])),
            "acc_reads": Out(32), "acc_writes": Out(32), "rows_out": Out(32), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lay = self.lay
        # (each beat's context rides through the datapath beside it, as its tag: a FIFO of
        # the contexts inside, written as a beat went in, put its write enable's fan-out
        # behind the join -- 24.2 FO4)
        m.submodules.datapath = dp = self.datapath(self.cfg, self.elements, lay["context"].size)
        m.submodules.contexts = ctx = SyncFIFOBuffered(width=lay["context"].size, depth=self.contexts)
        # (the reduce unit's op comes from a register: the hazard check and the take start
        # there -- from the unit's record read through its op into the issue's address
        # was 41 FO4)
        op = self.op
        flight = self._scoreboard(m, op)
        self._issue(m, ctx, flight, op)
        self._join(m, ctx, dp)
        self._emit(m, dp, flight)
        m.d.comb += self.busy.eq(flight["any"])
        return m

    # ------------------------------------------------------------------ ops in flight
    def _scoreboard(self, m, op) -> dict:
        """The ops in flight, in issue order (a ring of ``ops_in_flight``): each op's
        record and whether it writes it. ``hazard``: the op offered reads a record an op
        in flight writes."""
        n, index_bits = self.ops_in_flight, len(op.payload.index)
        valid = Signal(n, name="flight_valid")
        index = [Signal(index_bits, name=f"flight_index{i}") for i in range(n)]
        writes = Signal(n, name="flight_writes")
        head, tail = Signal(range(n), name="flight_head"), Signal(range(n), name="flight_tail")
        push, pop = Signal(name="flight_push"), Signal(name="flight_pop")
        o = op.payload
        hazard = Signal(name="hazard")
        m.d.comb += hazard.eq(_reads(o.kind, o.parts) & Cat(
            valid[i] & writes[i] & (index[i] == o.index) for i in range(n)).any())
        with m.If(push):
            m.d.sync += [head.eq(head + 1 if n & (n - 1) == 0 else Mux(head == n - 1, 0, head + 1))]
        # (the free entry at the head holds the offered op's record and kind every cycle,
        # whether or not it is taken: its load does not wait for the take -- the hazard
        # check in front of the take into these registers was 22.2 FO4)
        for i in range(n):
            with m.If((head == i) & ~valid[i]):
                m.d.sync += [index[i].eq(o.index), writes[i].eq(_writes(o.kind))]
        with m.If(pop):
            m.d.sync += tail.eq(tail + 1 if n & (n - 1) == 0 else Mux(tail == n - 1, 0, tail + 1))
        set_bit = Mux(push, Const(1, n) << head, 0)
        clear_bit = Mux(pop, Const(1, n) << tail, 0)
        m.d.sync += valid.eq((valid & ~clear_bit) | set_bit)
        return {"hazard": hazard, "room": ~valid.all(), "push": push, "pop": pop, "any": valid.any()}

    # ------------------------------------------------------------------ ISSUE
    def _issue(self, m, ctx, flight, op):
        """Take an op (no hazard, room in flight), then queue one context a chunk, with the
        accumulator's read where the op reads it."""
        lay = self.lay
        cur = Signal(lay["context"], name="issue")           # the op being issued, at its chunk
        active = Signal(name="issue_active")
        take = Signal(name="op_take")
        # (the head op's accumulator row offset, registered: the constant multiply and the
        # base's add in one cycle before the take were 29.6 FO4. ``fresh``: the offset is
        # the head's -- the head was there last cycle and was not taken)
        row_off = Signal(self.cfg.addr_bits, name="row_offset")
        fresh = Signal(name="row_offset_fresh")
        m.d.sync += [row_off.eq(times_const(op.payload.index, self.acc_row_bytes)[:self.cfg.addr_bits]),
                     fresh.eq(op.valid & ~op.ready)]
        m.d.comb += [op.ready.eq(~active & fresh & ~flight["hazard"] & flight["room"]),
                     take.eq(op.valid & op.ready), flight["push"].eq(take)]
        o = op.payload
        with m.If(take):
            row = (self.acc_base + row_off)[:self.cfg.addr_bits]
            m.d.sync += [active.eq(1), cur.kind.eq(o.kind), cur.weight.eq(o.weight), cur.index.eq(o.index),
                         cur.parts.eq(o.parts), cur.chunk.eq(0), cur.addr.eq(row),
                         cur.read.eq(_reads(o.kind, o.parts)), cur.last.eq(self.chunks == 1)]
        queued = Signal(name="chunk_queued")
        m.d.comb += [self.rd.valid.eq(active & cur.read & ctx.w_rdy), self.rd.payload.addr.eq(cur.addr),
                     queued.eq(active & ctx.w_rdy & (~cur.read | self.rd.ready)),
                     ctx.w_en.eq(queued), ctx.w_data.eq(cur)]
        with m.If(queued):
            m.d.sync += [cur.chunk.eq(cur.chunk + 1), cur.addr.eq(cur.addr + self.acc_chunk_bytes),
                         cur.last.eq(cur.chunk == self.chunks - 2)]
            with m.If(cur.last):
                m.d.sync += active.eq(0)
        ev = Signal(name="ev_acc_read")
        m.d.sync += [ev.eq(self.rd.valid & self.rd.ready & cur.last), self.acc_reads.eq(self.acc_reads + ev)]

    # ------------------------------------------------------------------ JOIN
    def _join(self, m, ctx, dp):
        """The head context, its partial row's chunk and its accumulator chunk into a
        datapath beat, together."""
        head = data.View(self.lay["context"], ctx.r_data)
        need_y = head.kind != Op.FLUSH
        go = Signal(name="beat_go")
        m.d.comb += [dp.i.valid.eq(ctx.r_rdy & (~need_y | self.y.valid) & (~head.read | self.rdata.valid)),
                     go.eq(dp.i.valid & dp.i.ready),
                     self.y.ready.eq(go & need_y), self.rdata.ready.eq(go & head.read), ctx.r_en.eq(go)]
        beat = dp.i.payload
        m.d.comb += [beat.kind.eq(head.kind), beat.weight.eq(head.weight), beat.tag.eq(ctx.r_data)]
        for j in range(self.elements):
            m.d.comb += [beat.y[j].eq(self.y.payload[16 * j:16 * j + 16]),
                         beat.acc[j].eq(Mux(head.read, self.rdata.payload[32 * j:32 * j + 32], 0))]

    # ------------------------------------------------------------------ write back / send
    def _emit(self, m, dp, flight):
        """The datapath's result: written back (WRITE, ADD) or a chunk of the reduced row."""
        cfg = self.cfg
        s = data.View(self.lay["context"], dp.o.payload.tag)
        writes = _writes(s.kind)
        fire = Signal(name="result_fire")
        m.d.comb += [self.wr.valid.eq(dp.o.valid & writes), self.out.valid.eq(dp.o.valid & ~writes),
                     dp.o.ready.eq(Mux(writes, self.wr.ready, self.out.ready)),
                     fire.eq(dp.o.valid & dp.o.ready), flight["pop"].eq(fire & s.last)]
        m.d.comb += [self.wr.payload.addr.eq(s.addr), self.wr.payload.data.eq(dp.o.payload.acc)]
        span_bits = (cfg.reduce_token_span - 1).bit_length()
        remote = s.index[span_bits:]
        o = self.out.payload
        m.d.comb += [o.src_node.eq(remote + (remote >= self.node)), o.src_rank.eq(self.rank),
                     o.token.eq(s.index[:span_bits]), o.parts.eq(s.parts), o.chunk.eq(s.chunk),
                     o.data.eq(dp.o.payload.row)]
        ev_w, ev_row = Signal(name="ev_acc_write"), Signal(name="ev_row_out")
        m.d.sync += [ev_w.eq(self.wr.valid & self.wr.ready & s.last), ev_row.eq(self.out.valid & self.out.ready & s.last),
                     self.acc_writes.eq(self.acc_writes + ev_w), self.rows_out.eq(self.rows_out + ev_row)]


def _reads(kind, parts):
    """The op reads its accumulator: ADD, LAST, and FLUSH of a sum a part reached."""
    return (kind == Op.ADD) | (kind == Op.LAST) | ((kind == Op.FLUSH) & (parts != 0))


def _writes(kind):
    """The op writes its accumulator back: WRITE, ADD."""
    return (kind == Op.WRITE) | (kind == Op.ADD)
