"""Property harness of the relay's reduce engine (:class:`moehub.rtl.relay.reduce_engine.ReduceEngine`):
the accumulator rows' reads and writes in HBM in the right order.

Why the engine alone (the reduction): in the reduce path (:class:`~moehub.rtl.relay.reduce_path.ReducePath`)
the engine's ``op`` is the reduce unit's ``op`` wired straight to it, and ``rd``/``wr``
are the path's own memory ports; the unit's op is a register stream (``op_valid`` held
until taken, the payload loaded only while ``op_valid`` is low), of the kinds WRITE ..
FLUSH (0-4) and a record index below ``reduce_records``. Here the op stream is a free
input under exactly those rules, with **any** kinds, records and parts in **any** order --
the unit's per-sum order (WRITE/ONLY first, ADD, LAST; FLUSH of what is left) is not
assumed, so the properties hold for every op stream the unit can make and for many it
cannot. The partial rows (``y``) and the memory's read data (``rdata``) arrive at any
time with any data (the memory returns a read's data only after the read was issued); every
``ready`` is free; the hub's node, rank and ``acc_base`` are constants (registers written
before the combine). The FP32 datapath is the real one (its data is free and reaches no
property).

Reference state (the harness's own registers): one chosen accumulator record and chunk
(``AnyConst``: since they are any, each property holds for every address) and its
address ``A = acc_base + record x row bytes + chunk x chunk bytes``; the writes of ``A``
owed -- one per op taken that writes (WRITE, ADD) the chosen record, less the writes of
``A`` issued on ``wr`` -- and the reads of ``A`` owed (ADD, LAST, FLUSH of a sum with a
part in, less the reads of ``A`` issued on ``rd``); the last op taken (kind, record,
parts) and its reads issued so far; the chunks of reduced rows owed for the chosen record
(LAST, ONLY, FLUSH ops taken, ``chunks`` each, less those sent with its header).

Properties -- for every accumulator address ``A`` (the chosen one):

* **read after write** (the scoreboard): a read of ``A`` is never offered on ``rd`` while a
  write of ``A`` of an earlier op is owed: the writes owed are at most the op's own (an
  ADD reads a chunk before it writes it back);
* **write after read**: a write of ``A`` is never offered while a read of ``A`` is owed (no
  later op's write-back overtakes an earlier op's read of the same chunk);
* **no invented access**: a write of ``A`` only while one is owed (a LAST, ONLY or FLUSH
  never writes its accumulator back, an op writes each chunk once), a read of ``A`` only
  while one is owed (a WRITE or ONLY never reads, a FLUSH of an empty sum never reads);
* **reads in order**: each read is of the last op taken, at the address of its next chunk
  (its record's row, chunk by chunk), and only for an op that reads;
* **reduced rows**: a chunk of a reduced row with the chosen record's header (source node
  from the record and this hub's node, token, this hub's rank) only while one is owed --
  a row per LAST/ONLY/FLUSH op, ``chunks`` chunks, never for a WRITE or an ADD; every
  reduced row carries this hub's rank.

With the memory port in order (the engine's documented assumption: a read taken after a
write of the same address returns the written data), read after write, write after read
and the writes' own order (the datapath keeps the op order) make every read return the
accumulator the model's op order left.

Config (:func:`small_config`): ``tiny/reduce-small`` -- the forward unit's relay-small (2
nodes x 3 GPUs, top-2) with 2-bit tokens: 4 accumulator records, as many as the
scoreboard's :data:`~moehub.rtl.relay.reduce_engine.OPS_IN_FLIGHT` ops in flight, so four
ops of four records or of one record are in flight together; rows of :data:`CHUNKS` = 2
chunks (an op's first and last chunk differ: a scoreboard entry that left at its first
chunk fails) of :data:`ELEMENTS` = 1 element. The scoreboard (4 entries) is the hub's own;
more records or chunks add index and chunk values the hazard check compares the same way,
more elements only data. ``acc_base`` is aligned past the accumulator rows: the control
never reads an address, and ``base + x == base + y`` exactly when ``x == y``, so the
properties for an aligned base are those for every base. Two sets, the same properties:

* ``relay-reduce``, **unbounded** (k-induction, k = :data:`PROVE_K`, with the
  strengthening invariants) on reduced depths, :data:`PROOF_DEPTHS` (the engine's
  constructor parameters): a context FIFO of 4 (3 memory words, not a power of two, as the
  hub's 15: the pointers wrap by the same compare) and the datapath's control 4 cycles long
  (:class:`DatapathControl`) -- 8 context slots, as many as 4 ops of 2 chunks fill;
* ``relay-reduce-hub-depths``, **bounded** (BMC :data:`BMC_DEPTH` from reset) on the
  hub's own context FIFO (16) and datapath (20 cycles), its FP32 element logic cut
  (:data:`SCRIPT`: ``cutpoint``, its values free every cycle -- more behaviours, so a proof
  holds for the real datapath): no property reads data, only the contexts that ride beside
  it.

Strengthening invariants (:meth:`ReduceEngineHarness._invariants`): a ghost tag per context
(the scoreboard entry of its op, moved with the FIFO's pointers and the datapath's advance);
every live context a chunk of a valid entry, with its record, its write bit, its chunk's
address and, for the op being issued, a chunk before the one it issues; two live contexts
in their ops' order and an op's chunks in chunk order (pairwise, the FIFO's words by slot
with their age from ``consume``); the oldest context of the oldest op; every op in flight
but the one being issued with its last chunk live; the op being issued the newest entry,
and an op that reads with no earlier entry writing its record (the hazard check's
guarantee); the writes, reads and row chunks owed per entry; the FIFO's pointers; the
registered row offset. The covers (with the invariants) reach a full context FIFO while an
op is being issued (step 9) and every context slot live (step 14).

Why the reduced depths prove the hub's. (1) The datapath, as the engine sees it once its
element logic is cut, is a chain of ``LATENCY`` registers of (valid, kind, tag) with one
enable (``advance``: the output not valid or taken, also the input's ready);
:class:`DatapathControl` is that chain, built with the datapath's own register helper, and
at the datapath's latency it agrees with the datapath cycle by cycle (a fast test,
``tests/test_reduce_formal.py``). Its length decides only how many cycles a context takes
from the join to its result, and the context FIFO's depth only when the issue waits on a
full FIFO (the one place the engine reads it); the scoreboard, the hazard check, the
issue's addresses and the emit read neither, and the proof reaches both a full FIFO and
every slot live. (2) The invariants are generated from the depths, one statement per
context slot or per pair of slots, the same statements at every depth, and each speaks of
one or two slots, the scoreboard and the reference state: the induction that closes at 4 +
4 slots is the same argument at 16 + 20 (an argument on paper, not a proof the tools ran
at 16 + 20: hence (3)). k-induction closed at k = 1 at every reduced size tried (contexts
3-5 with datapaths of 3-5 cycles, 22-62 s, and contexts 4 with 8 cycles, 139 s, under load
3-5), never needing a deeper k as the depths grew; at the hub's own depths the step at k =
1 was not decided within 4-5 minutes (nor with the FIFO reduced to 3 and the 20-cycle
chain kept), the solver's cost, not a counterexample. (3) The hub's own depths are checked
from reset by ``relay-reduce-hub-depths``: a writing op's take to its last write-back is
26 cycles there, the next op's read of the address 2 cycles after, so BMC 30 holds a whole
write-then-read of one address (the cover reaches it at step 28) with four ops in flight;
each step past 30 costs about twice the one before (step 31 alone took over a minute at
load 4).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.asserts import AnySeq
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...rtl.relay.accumulate import CUTS, _register, beat_layouts
from ...rtl.relay.reduce_engine import CONTEXTS, OPS_IN_FLIGHT, ReduceEngine
from ...rtl.relay.reduce_unit import Op
from .common import Props, any_const, any_seq, count_ones, elaborate_into, memory_words, reset_first
from .plant import Plant, PlantedHarness

#: the reduced config: relay-small (2 nodes x 3 GPUs, top-2) with 2-bit tokens -- 4
#: accumulator records, as many as ops in flight
REDUCE_SMALL = dict(token_bits=2)
#: the engine's chunks a row and elements a chunk in the proof: 2 chunks (an op's first
#: and last chunk differ), 1 BF16 element
CHUNKS, ELEMENTS = 2, 1

#: the set's Yosys script before the context FIFO's words are connected: its memory as flip-flops
SCRIPT = ("cutpoint w:dut.datapath.e0_*", "memory_map", "opt_clean")

MOD = "moehub.rtl.relay.reduce_engine"
#: planted bugs
PLANTS = {
    # the scoreboard's hazard check off (tests/test_rtl_relay_reduce_path.py's no-hazard)
    "no-hazard": Plant(MOD, "m.d.comb += hazard.eq(_reads(o.kind, o.parts) & Cat(",
                       "m.d.comb += hazard.eq(0 & Cat(", "ReduceEngine",
                       ("read after write",), "an op reads a record an op in flight still writes"),
    # a first part read-modify-written (tests/test_rtl_relay_reduce_path.py's write-reads)
    "write-reads": Plant(MOD, "return (kind == Op.ADD) | (kind == Op.LAST)",
                         "return (kind == Op.ADD) | (kind == Op.LAST) | (kind == Op.WRITE)", "ReduceEngine",
                         ("a read of the chosen address no op owes", "a read for an op that does not read"),
                         "a WRITE reads its accumulator"),
    # an op leaves the scoreboard at its first chunk's result, not its last
    "pop-first-chunk": Plant(MOD, 'flight["pop"].eq(fire & s.last)', 'flight["pop"].eq(fire & (s.chunk == 0))',
                             "ReduceEngine", ("read after write", "write after read"),
                             "an op leaves the scoreboard before its last chunk is written back"),
    # a FLUSH written back as well as sent
    "flush-writes": Plant(MOD, "return (kind == Op.WRITE) | (kind == Op.ADD)\n",
                          "return (kind == Op.WRITE) | (kind == Op.ADD) | (kind == Op.FLUSH)\n",
                          "ReduceEngine", ("a write of the chosen address no op owes",),
                          "a FLUSH writes its accumulator back"),
    # every chunk of an op read at its first chunk's address
    "addr-stuck": Plant(MOD, "cur.addr.eq(cur.addr + self.acc_chunk_bytes)", "cur.addr.eq(cur.addr)", "ReduceEngine",
                        ("a read not at the next chunk", "a read of the chosen address no op owes"),
                        "the issue does not step the address from chunk to chunk"),
    # an ADD's result sent as a reduced row instead of written back
    "add-sent": Plant(MOD, "writes = _writes(s.kind)", "writes = s.kind == Op.WRITE", "ReduceEngine",
                      ("a reduced row's chunk of the chosen record no op owes",),
                      "an ADD's new accumulator leaves as a reduced row"),
    # the reduced row's source rank not this hub's
    "rank-lost": Plant(MOD, "o.src_rank.eq(self.rank)", "o.src_rank.eq(0)", "ReduceEngine",
                       ("without this hub's rank",), "the reduced row's source rank is 0, not this hub's"),
    # the next op taken while the last one is still being issued
    "take-mid-issue": Plant(MOD, "op.ready.eq(~active & fresh", "op.ready.eq(fresh", "ReduceEngine",
                            ("a read not at the next chunk", "write after read"),
                            "an op is taken before the last one's chunks are issued"),
}


def _reads(kind, parts):
    return (kind == Op.ADD) | (kind == Op.LAST) | ((kind == Op.FLUSH) & (parts != 0))


def _writes(kind):
    return (kind == Op.WRITE) | (kind == Op.ADD)


def _sends(kind):
    return (kind == Op.LAST) | (kind == Op.ONLY) | (kind == Op.FLUSH)


class DatapathControl(wiring.Component):
    """The datapath as the engine sees it with its element logic cut (what :data:`SCRIPT`
    leaves of :class:`~moehub.rtl.relay.accumulate.ReduceDatapath`): ``latency`` registers
    of the beat's valid, kind and tag with one enable, ``advance`` (the output not valid or
    taken; the input's ready) -- the input register, ``latency - 2`` stages, the output --
    built by the datapath's own register helper, under the datapath's names; the result's
    data is free every cycle."""

    def __init__(self, cfg, elements: int, tag_bits: int, latency: int, free: bool = True):
        beat_in, beat_out = beat_layouts(elements, tag_bits)
        self.free = free                   # (False: the data 0, for a simulation)
        self.stages = ["in", *(f"s{k}" for k in range(latency - 2))]
        super().__init__({"i": In(stream.Signature(beat_in)), "o": Out(stream.Signature(beat_out))})

    def elaborate(self, platform):
        m = Module()
        en = Signal(name="advance")
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        ctl = {"valid": self.i.valid, "kind": self.i.payload.kind, "tag": self.i.payload.tag}
        for st in self.stages:
            ctl = _register(m, en, ctl, st)
        o = self.o.payload
        with m.If(en):
            m.d.sync += [self.o.valid.eq(ctl["valid"]), o.kind.eq(ctl["kind"]), o.tag.eq(ctl["tag"])]
        if self.free:
            m.d.comb += [o.acc.eq(AnySeq(len(o.acc))), o.row.eq(AnySeq(len(o.row)))]
        return m


class ReduceEngineHarness(PlantedHarness):
    """A :class:`ReduceEngine` of ``cfg`` (``CHUNKS`` chunks of ``ELEMENTS`` elements)
    under its environment (module docstring)."""
    unit = ReduceEngine
    plants = PLANTS


    def __init__(self, cfg, plant: str | None = None, invariants: bool = True,
                 chunks: int = CHUNKS, elements: int = ELEMENTS,
                 contexts: int = CONTEXTS, ops_in_flight: int = OPS_IN_FLIGHT, latency: int | None = None):
        super().__init__(cfg, plant, invariants)
        self.chunks, self.elements = chunks, elements
        self.contexts, self.ops_in_flight, self.latency = contexts, ops_in_flight, latency
        self.base_script = SCRIPT if latency is None else SCRIPT[1:]
        self.script = self.base_script

    def elaborate(self, platform):
        m = Module()
        cfg, C = self.cfg, self.chunks
        R = cfg.reduce_records
        p = Props(m)
        self.messages = p.messages
        if self.latency is None:
            self.stages = ["in", *(f"s{k}" for k in sorted(CUTS))]
            dut = self.dut_cls(cfg, self.elements, C, self.contexts, self.ops_in_flight)
        else:
            def model(cfg, elements, tag_bits):
                dp = DatapathControl(cfg, elements, tag_bits, self.latency)
                self.stages = dp.stages
                return dp
            dut = self.dut_cls(cfg, self.elements, C, self.contexts, self.ops_in_flight, model)
        self.lay, self.dut_lay_rb = dut.lay, dut.acc_row_bytes
        self.regs = elaborate_into(m, "dut", dut, platform, into=("datapath", "contexts") if self.invariants else ())
        reset_first(m)
        aw = cfg.addr_bits
        rb, cb = dut.acc_row_bytes, dut.acc_chunk_bytes
        self.align_bits = (R * rb - 1).bit_length()

        # ---- environment
        node = any_const(m, cfg.node_bits, "node")
        rank = any_const(m, cfg.gpu_bits, "rank")
        base = any_const(m, aw, "acc_base")
        p.assume(node < cfg.nodes)
        p.assume(rank < cfg.node_gpus)
        # (the engine's control never reads an address: base + x == base + y exactly when
        # x == y, so a base aligned past the accumulator rows proves every base -- and spares
        # the solver carries through 32-bit adds)
        p.assume(base[:self.align_bits] == 0)
        m.d.comb += [dut.node.eq(node), dut.rank.eq(rank), dut.acc_base.eq(base)]
        ov = any_seq(m, 1, "op_valid")
        op = any_seq(m, dut.op.payload.shape(), "op_payload")
        m.d.comb += [dut.op.valid.eq(ov), dut.op.payload.eq(op)]
        o = dut.op.payload
        p.assume(~ov | ((o.kind <= Op.FLUSH) & (o.index < R) & (o.parts <= cfg.topk)))
        held = Signal(name="env_op_held")              # offered and not taken last cycle
        last_op = Signal(dut.op.payload.shape(), name="env_op_last")
        m.d.sync += [held.eq(dut.op.valid & ~dut.op.ready), last_op.eq(dut.op.payload)]
        p.assume(~held | (ov & (op == last_op)))
        for name in ("y", "rdata"):
            s = getattr(dut, name)
            m.d.comb += [s.valid.eq(any_seq(m, 1, f"{name}_valid")),
                         s.payload.eq(any_seq(m, s.payload.shape(), f"{name}_payload"))]
        for name in ("rd", "wr", "out"):
            m.d.comb += getattr(dut, name).ready.eq(any_seq(m, 1, f"{name}_ready"))
        rd_fire = dut.rd.valid & dut.rd.ready
        wr_fire = dut.wr.valid & dut.wr.ready
        out_fire = dut.out.valid & dut.out.ready
        rdata_fire = dut.rdata.valid & dut.rdata.ready
        pending = Signal(8, name="env_reads_pending")    # reads issued, data not yet returned
        m.d.sync += pending.eq(pending + rd_fire - rdata_fire)
        p.assume(~dut.rdata.valid | (pending != 0))

        # ---- reference state
        ib = len(o.index)
        rec = any_const(m, ib, "chosen_record")
        chk = any_const(m, max(1, (C - 1).bit_length()), "chosen_chunk")
        p.assume(rec < R)
        p.assume(chk < C)
        addr_a = Signal(aw, name="ref_addr")
        m.d.comb += addr_a.eq(base + rec * rb + chk * cb)

        def addr_of(index, chunk):
            return (base + index * rb + chunk * cb)[:aw]

        take = dut.op.valid & dut.op.ready
        mine = take & (o.index == rec)
        wr_a = dut.wr.valid & (dut.wr.payload.addr == addr_a)
        rd_a = dut.rd.valid & (dut.rd.payload.addr == addr_a)
        owed_w = Signal(4, name="ref_writes_owed")
        owed_r = Signal(4, name="ref_reads_owed")
        m.d.sync += [owed_w.eq(owed_w + (mine & _writes(o.kind)) - (wr_a & dut.wr.ready)),
                     owed_r.eq(owed_r + (mine & _reads(o.kind, o.parts)) - (rd_a & dut.rd.ready))]
        cur = Signal(dut.op.payload.shape(), name="ref_op")       # the last op taken
        taken = Signal(name="ref_op_taken")
        rd_n = Signal(range(C + 1), name="ref_op_reads")         # its reads issued
        with m.If(take):
            m.d.sync += [cur.eq(o), taken.eq(1), rd_n.eq(0)]
        with m.Elif(rd_fire):
            m.d.sync += rd_n.eq(rd_n + 1)
        cur_writes_a = taken & _writes(cur.kind) & (cur.index == rec)

        p.check(~rd_a | (owed_w == cur_writes_a),
                "read after write: a read of the chosen address offered while an earlier op's write of it is owed")
        p.check(~wr_a | (owed_r == 0),
                "write after read: a write of the chosen address offered while a read of it is owed")
        p.check(~wr_a | (owed_w != 0), "a write of the chosen address no op owes")
        p.check(~rd_a | (owed_r != 0), "a read of the chosen address no op owes")
        p.check(~dut.rd.valid | (taken & _reads(cur.kind, cur.parts) & (rd_n < C)),
                "a read for an op that does not read (or past its last chunk)")
        p.check(~dut.rd.valid | (dut.rd.payload.addr == addr_of(cur.index, rd_n)),
                "a read not at the next chunk of the last op's record")

        # reduced rows of the chosen record
        span_bits = (cfg.reduce_token_span - 1).bit_length()
        remote = rec[span_bits:]
        out = dut.out.payload
        out_a = dut.out.valid & (out.src_node == remote + (remote >= node)) & (out.token == rec[:span_bits])
        sends = _sends(o.kind)
        owed_o = Signal(6, name="ref_row_chunks_owed")
        m.d.sync += owed_o.eq(owed_o + Mux(mine & sends, C, 0) - (out_a & dut.out.ready))
        p.check(~out_a | (owed_o != 0), "a reduced row's chunk of the chosen record no op owes")
        p.check(~dut.out.valid | (out.src_rank == rank), "a reduced row without this hub's rank")

        # ---- covers
        wrote = Signal(name="ref_wrote_chosen")
        with m.If(wr_a & dut.wr.ready):
            m.d.sync += wrote.eq(1)
        p.cover(rd_a & dut.rd.ready & wrote, "the chosen address read after it was written")
        p.cover(dut.op.valid & ~dut.op.ready & held & (o.index == rec) & _reads(o.kind, o.parts) & (owed_w != 0),
                "an op reading the chosen record held while a write of it is owed")
        p.cover(out_a & out_fire & (out.chunk == C - 1), "a reduced row of the chosen record sent")

        if self.invariants:
            self._invariants(m, p, self.regs, locals())
        return m

    def _invariants(self, m, p, regs, e):
        """The strengthening invariants (module docstring), with a ghost tag on every
        context: the scoreboard entry of its op."""
        cfg, C, N = self.cfg, self.chunks, self.ops_in_flight
        lay = self.lay["context"]
        D = self.contexts - 1                                 # the context FIFO's memory words
        sb = N.bit_length() - 1                           # bits of a scoreboard entry
        words, connect = memory_words(m, "dut.contexts.storage", D, lay.size, "ctx_word")
        self.script = self.base_script + connect
        addr_of, rec, chk, owed_w, owed_r, owed_o = (e[k] for k in ("addr_of", "rec", "chk", "owed_w", "owed_r", "owed_o"))
        fv, fw = regs["flight_valid"], regs["flight_writes"]
        fi = [regs[f"flight_index{i}"] for i in range(N)]
        head, tail = regs["flight_head"], regs["flight_tail"]
        active = regs["issue_active"]
        cur = data.View(lay, regs["issue"])
        hm1 = Signal(sb, name="inv_newest")               # the newest entry (the op being issued)
        m.d.comb += hm1.eq(head - 1)

        def ctx(v):
            return data.View(lay, v)

        # -- the scoreboard: the ops in flight are the entries tail .. head - 1
        p.check(Cat((tail == t) & (head == (t + c) % N) & (fv == sum(1 << ((t + k) % N) for k in range(c)))
                    for t in range(N) for c in range(N + 1)).any(),
                "invariant: the scoreboard's valid entries are not tail .. head - 1")

        # -- the ghost tags: the context FIFO's words (by slot), its output register, the
        # datapath's input register, stages and output register move as the contexts do
        prod, cons, inner = regs["contexts.produce"], regs["contexts.consume"], regs["contexts.inner_level"]
        r_rdy = regs["contexts.r_rdy"]
        p.check((prod < D) & (cons < D) & (inner <= D), "invariant: a context FIFO pointer or level out of range")
        p.check(Cat((cons == c) & (inner == n) & (prod == (c + n) % D) for c in range(D) for n in range(D + 1)).any(),
                "invariant: the context FIFO's produce is not consume + inner_level")
        do_write = regs["contexts.w_rdy"] & regs["w_en"]
        do_read = regs["contexts.inner_r_rdy"] & (~r_rdy | regs["r_en"])
        gm = [Signal(sb, name=f"ghost_word{i}") for i in range(D)]
        for i in range(D):
            with m.If(do_write & (prod == i)):
                m.d.sync += gm[i].eq(hm1)
        g_r = Signal(sb, name="ghost_fifo_out")
        with m.If(do_read):
            m.d.sync += g_r.eq(Cat(*gm).word_select(cons, sb) if D & (D - 1) == 0 else _pick(gm, cons))
        stages = self.stages
        g_dp = {st: Signal(sb, name=f"ghost_{st}") for st in stages}
        g_o = Signal(sb, name="ghost_out")
        adv = regs["datapath.advance"]
        with m.If(adv):
            m.d.sync += [g_dp["in"].eq(g_r), g_o.eq(g_dp[stages[-1]])]
            m.d.sync += [g_dp[b].eq(g_dp[a]) for a, b in zip(stages, stages[1:])]
        _, beat_out = beat_layouts(self.elements, lay.size)
        # (valid, context, ghost) oldest first; then the FIFO's words by slot
        pipe = [(regs["datapath.o__valid"], ctx(data.View(beat_out, regs["datapath.o__payload"]).tag), g_o)]
        pipe += [(regs[f"datapath.{st}_valid"], ctx(regs[f"datapath.{st}_tag"]), g_dp[st]) for st in reversed(stages)]
        pipe += [(r_rdy, ctx(regs["contexts.r_data"]), g_r)]
        mem = []
        for s_ in range(D):
            live = Signal(name=f"inv_word_live{s_}")
            m.d.comb += live.eq(Cat((cons == c) & (inner > (s_ - c) % D) for c in range(D)).any())
            mem.append((live, ctx(words[s_]), gm[s_]))
        pos = pipe + mem
        # (each shared term a signal of its own: used in many invariants, built once)
        cons_is = [Signal(name=f"inv_consume_is{c}") for c in range(D)]
        m.d.comb += [cons_is[c].eq(cons == c) for c in range(D)]
        ages = []
        for j, (_, _, g) in enumerate(pos):
            a_ = Signal(sb, name=f"inv_age{j}")
            m.d.comb += a_.eq(g - tail)
            ages.append(a_)
        older_mem = {}

        def older(a, b):
            """Position a holds an older context than position b (both live)."""
            if a < len(pipe) or b < len(pipe):
                return Const(int(a < b))
            if (a, b) not in older_mem:
                sa, sb_ = a - len(pipe), b - len(pipe)
                o_ = Signal(name=f"inv_older{sa}_{sb_}")
                m.d.comb += o_.eq(Cat(Const(0), *(cons_is[c] for c in range(D) if (sa - c) % D < (sb_ - c) % D)).any())
                older_mem[(a, b)] = o_
            return older_mem[(a, b)]

        ok = []
        for j, (v, c, g) in enumerate(pos):
            ok.append(~v | (fv.bit_select(g, 1) & (c.index == _pick(fi, g)) & (_writes(c.kind) == fw.bit_select(g, 1))
                            & (c.kind <= Op.FLUSH) & (c.chunk < C) & (c.last == (c.chunk == C - 1))
                            & (c.addr == addr_of(c.index, c.chunk)) & (c.read == _reads(c.kind, c.parts))
                            & (~(active & (g == hm1)) | (c.chunk < cur.chunk))))
        p.check(Cat(*ok).all(), "invariant: a context in the pipeline is not a chunk of its op in flight "
                                "(an op being issued: a chunk before the one issued)")
        pair, first = [], []
        for a, (va, ca, ga) in enumerate(pos):
            older_any = Const(0)
            for b, (vb, cb, gb) in enumerate(pos):
                if a == b:
                    continue
                o = older(b, a)
                older_any = older_any | (vb & o)
                if b > a:
                    continue
                for (x, cx, gx), (y, cy, gy), oxy, ax, ay in ((pos[b], pos[a], o, ages[b], ages[a]),
                                                             (pos[a], pos[b], older(a, b), ages[a], ages[b])):
                    if not (isinstance(oxy, Const) and oxy.value == 0):
                        pair.append(~(x & y & oxy) | ((ax <= ay) & ((gx != gy) | (cx.chunk < cy.chunk))))
            first.append(~va | older_any | (ga == tail))
        p.check(Cat(*pair).all(), "invariant: two contexts out of their ops' order, or an op's chunks out of order")
        p.check(Cat(*first).all(), "invariant: the oldest context is not of the oldest op in flight")
        p.check(Cat(~fv[g] | (active & (hm1 == g)) | Cat(v & (gg == g) & c.last for v, c, gg in pos).any()
                    for g in range(N)).all(),
                "invariant: an op in flight, not being issued, without its last chunk in the pipeline")
        p.check(~active | (fv.bit_select(hm1, 1) & (cur.index == _pick(fi, hm1))
                           & (fw.bit_select(hm1, 1) == _writes(cur.kind)) & (cur.kind <= Op.FLUSH) & (cur.chunk < C)
                           & (cur.last == (cur.chunk == C - 1)) & (cur.addr == addr_of(cur.index, cur.chunk))
                           & (cur.read == _reads(cur.kind, cur.parts))),
                "invariant: the op being issued is not the newest in flight, at its chunk's address")
        p.check(~(active & cur.read) | Cat(~fv[i] | ~fw[i] | (fi[i] != cur.index) | (hm1 == i) for i in range(N)).all(),
                "invariant: an op being issued reads a record an earlier op in flight writes")
        # -- the reference against the pipeline, per scoreboard entry
        def has(g, cond, pending):
            return Cat(*(v & (gg == g) & cond(c) for v, c, gg in pos), active & (hm1 == g) & pending).any()
        owes_a = [has(g, lambda c: (c.index == rec) & (c.chunk == chk), (cur.index == rec) & (cur.chunk <= chk))
                  for g in range(N)]
        p.check(owed_w == count_ones([fv[g] & fw[g] & owes_a[g] for g in range(N)]),
                "invariant: the writes of the chosen address owed are not its ops' in flight")
        p.check(owed_r == (active & cur.read & (cur.index == rec) & (cur.chunk <= chk)),
                "invariant: the reads of the chosen address owed are not those still to issue")
        rows = [fv[g] & ~fw[g] & (fi[g] == rec) & has(g, lambda c, k=k: c.chunk == k, cur.chunk <= k)
                for g in range(N) for k in range(C)]
        p.check(owed_o == count_ones(rows), "invariant: the reduced rows' chunks owed are not its ops' in flight")
        ref, taken, rd_n = e["cur"], e["taken"], e["rd_n"]
        p.check(Mux(taken, (ref.kind == cur.kind) & (ref.index == cur.index) & (ref.parts == cur.parts)
                    & Mux(_reads(ref.kind, ref.parts), rd_n == Mux(active, cur.chunk, C), rd_n == 0),
                    (fv == 0) & ~active & ~Cat(v for v, _, _ in pos).any()),
                "invariant: the last op taken is not the one issued, or its reads issued not its chunks queued")
        p.check(regs["row_offset"] == (e["last_op"].index * self.dut_lay_rb)[:cfg.addr_bits],
                "invariant: the registered row offset is not the offered op's")
        p.check(regs["row_offset_fresh"] == e["held"], "invariant: row_offset_fresh is not 'offered, not taken'")
        # (the depths' decisions reached: the issue waits on a full context FIFO, and every
        # context slot holds a chunk -- four ops of two chunks in flight)
        p.cover(active & ~regs["contexts.w_rdy"], "the context FIFO full while an op is being issued")
        p.cover(Cat(v for v, _, _ in pos).all(), "every context slot live")


def _pick(values, k):
    """values[k] for a signal k (a mux chain)."""
    out = values[0]
    for i in range(1, len(values)):
        out = Mux(k == i, values[i], out)
    return out


#: the proof's reduced depths (module docstring): a context FIFO of 4 (3 memory words, not a
#: power of two, as the hub's 15; with its output register 4 contexts), the hub's 4 ops in
#: flight, the datapath's control 4 cycles long -- 8 context slots, as many as 4 ops of 2
#: chunks can fill
PROOF_DEPTHS = dict(contexts=4, ops_in_flight=OPS_IN_FLIGHT, latency=4)
#: k of the reduced depths' k-induction
PROVE_K = 1
#: the BMC's depth on the hub's own depths (cycles from reset; module docstring)
BMC_DEPTH = 30

_PROPERTIES = ("the accumulator's HBM reads and writes in order -- no read of an address while an "
               "earlier op's write of it is owed (the scoreboard's hazard check), no write while a "
               "read of it is owed, no access no op owes, each op's reads at its record's chunks in "
               "order, a reduced row's chunks only for a LAST/ONLY/FLUSH op of its record")


def property_sets() -> list[dict]:
    """The reduce engine's property sets, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists them): ``relay-reduce``, unbounded on the reduced depths; ``relay-reduce-hub-depths``,
    the same properties bounded on the hub's own context FIFO and datapath. Measured on the
    2-core machine under load (~4-5)."""
    return [
        dict(name="relay-reduce", component="relay reduce engine",
             config="tiny/reduce-small: 4 records, 4 ops in flight, 2-chunk rows, 1 element; "
                    "context FIFO 4, datapath control 4 cycles",
             build=lambda: ReduceEngineHarness(small_config(), **PROOF_DEPTHS),
             modes={"prove": PROVE_K, "cover": 16}, smoke={"bmc": 8},
             note="protocol v3: " + _PROPERTIES + "; unbounded on reduced depths (a 4-deep context "
                  "FIFO, the datapath's control 4 cycles long: as many context slots as 4 ops of "
                  "2 chunks fill) with the strengthening invariants of reduce.py, which are the "
                  "same for every depth (reduce.py); the hub's own depths: relay-reduce-hub-depths"),
        dict(name="relay-reduce-hub-depths", component="relay reduce engine",
             config="tiny/reduce-small: 4 records, 4 ops in flight, 2-chunk rows, 1 element; "
                    "the hub's context FIFO (16) and datapath (20 cycles)",
             build=lambda: ReduceEngineHarness(small_config(), invariants=False),
             modes={"bmc": BMC_DEPTH, "cover": 30}, smoke={"bmc": 8},
             note="protocol v3: the properties of relay-reduce on the hub's own context FIFO and "
                  "datapath; bounded: BMC 30 holds a write-then-read of one address (reached at "
                  "step 28) with four ops in flight, each step past it ~2x dearer; k-induction on "
                  "these depths did not close in time (reduce.py)"),
    ]


def small_config():
    """The reduced relay config of the reduce engine's property set (:data:`REDUCE_SMALL`
    on the forward unit's ``tiny/relay-small``)."""
    from .relay import small_config as relay_small
    return relay_small().replace(name="tiny/reduce-small", **REDUCE_SMALL)
