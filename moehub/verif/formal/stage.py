"""Property harness of the relay hub's two chunk stagings (:mod:`moehub.rtl.relay.stage`):
:class:`~moehub.rtl.relay.stage.RelayStage` (relay rows' chunks, kept for the forwards;
set ``relay-stage``) and :class:`~moehub.rtl.relay.stage.PartialStage` (partial output
rows' chunks, kept for the reduce; set ``relay-partial-stage``). One harness
(:class:`StageHarness`) states what both owe as a :class:`~moehub.rtl.relay.stage.ChunkStage`;
a small subclass of it per staging says what its slot is, which chunks it writes and what
its whole rows make.

Environment: chunks offered on ``i`` of any content -- any chunk code (3 with 3-chunk rows
is out of range), any ``drop`` bit, any header and data, a row's chunks in any order and
interleaved with other slots' -- held valid with the payload stable until taken; the
stagings' outputs' readies free (``wr``; the partial staging's ``row``; the relay
staging's ``row`` and ``done`` are pulses no one refuses); ``base`` (and the relay's
``node``, ``rank``, a GPU of the node) constant. Two rules the hub's input and senders keep:

* the chunk is in the window (the relay hub's input drops the rest: :mod:`.ingress`): a
  relay chunk's source is another node's (``src_node < nodes``, ``!= node``) and its tag
  ``< tags_per_source`` (its ``src_rank`` free: the staging only carries it); a partial
  chunk's sender is a GPU of the node and its P tag ``< partial_span``;
* the window protocol: once a slot's row is whole (its last missing chunk taken), no chunk
  of that slot is offered until the cycle after the row has left the staging -- the relay
  staging's ``row``/``done`` pulse, the partial staging's ``row`` handshake. A source
  sends the slot's next row only with the row's credit, which the hub returns after that
  (the credit join after the forwards were read; the partial feed after it read the row
  back), and a source never sends a row's chunk twice. (So the harness asserts
  nothing about a duplicate of a whole row arriving after its output: the staging, its
  bitmap cleared, would take it as the next row's first chunk.)

Reference state (the harness's own registers, from the staging's contract): each slot's
chunks in (``ref_in<k>``, ``C`` = ``chunks_per_row`` bits; every slot's, ``W`` x ``C``
bits in all: no tracked slot is needed), cleared when its row is whole; the chunk taken
judged against them as it is taken -- *new* (in range, not in), a *duplicate* or past the
row (dropped: ``ref_drops`` counts them), its row's *first* new chunk, the one that makes
it *whole*, *written* (new and, by its own ``drop`` bit, of a good row; for the relay
staging also naming another GPU of the node, whose forward reads it back) -- and that
judgment carried with a copy of the chunk down a harness pipeline of ``LATENCY`` = 3
registers (``ref_d1``..``ref_d3``), the staging's three steps; the staging writes owed
(``ref_wq``: each new written chunk's (base + slot x stride + chunk x chunk_bytes, data),
pushed as it is taken, in order) and, for the partial staging, the whole rows owed
(``ref_rq``: slot, drop bit and header of the chunk that made each whole, in that order).

Properties (for every slot, every chunk):

* every chunk taken is written exactly once (new, in range, of a good row, and for the
  relay staging naming another GPU of the node) or counted in ``drops`` (a duplicate, or a
  chunk code past the row) or neither (a dropped row's new chunk, a relay row with no
  target on another GPU), never both: each write on ``wr`` is the oldest owed -- none
  while none is owed, its address base + slot x stride + chunk x chunk_bytes (modulo
  2^addr_bits, as the RTL's adders) and its data the chunk's -- and ``drops`` equals
  the reference's count of the chunks taken ``LATENCY`` + 1 cycles before (each chunk
  judged in S3, counted a cycle later, as the relay's counters lag their events);
* no write or row lost in the stage: the write FIFO and the partial staging's row queue are
  never written while full (their ``w_en`` never without ``w_rdy``);
* no hang: a chunk offered waits at most ``HANG_WAIT`` = 2 cycles in a row in which every
  output that may hold the staging back is ready (``wr``; the partial staging's ``row``
  too) -- the input's ready, a register, is low in at most two such cycles in a row;
* the relay staging: ``row`` exactly ``LATENCY`` cycles after a good row's last missing
  chunk was taken (so once per row, never before all ``C`` chunks are in), carrying that
  chunk's row fields; ``done`` the same for a dropped row, with its (global source, tag);
  ``mark_valid`` exactly ``LATENCY`` cycles after a good row's first new chunk, with its
  node, tag and ``local`` bit;
* the partial staging: each row out on ``row`` is the oldest whole row owed -- none while
  none is owed (so never before its ``C`` chunks are in, never twice), in the order they
  became whole -- with its slot (``at``), drop bit and header from the chunk that made it
  whole.

A row's chunks may disagree (the source's error, touching only that row): each chunk is
written by its own ``drop`` bit and targets, the mark is its first chunk's, the row out
its last chunk's -- which is what the properties say.

Unbounded (k-induction, ``prove``, closes at k = 1): the properties are not inductive
alone (a bitmap, a pipeline register or a FIFO word that disagrees with the reference
satisfies them until its chunk reaches an output). The strengthening invariants
(:meth:`StageHarness._invariants`) tie the staging's registers to the reference: S1's, S3's
and S4's valid bits, chunks, one-hots, verdicts (``s3_dup``, ``s3_in_row``, ``s3_empty``,
``s4_whole``, ``s4_first``, ``s4_write``, ``ev_drop``) and offsets against the harness
pipeline's; each slot's bitmap = its reference chunks in, less the chunk in S1 if it is
new -- all ``C`` bits while the chunk that made the row whole is in S3 or S4 (it clears the
bitmap from S4), all but its own while it is in S1; no slot's reference chunks in all set,
none while the slot's whole row has not left; no chunk of a slot behind a whole row of it
in the pipeline or the row queue, no two whole rows of one slot; the FIFOs' pointers
and words (``SyncFIFOBuffered``: an output register and a memory, its words as flops after
``memory_map``, :func:`.common.memory_words`), the writes owed = the write FIFO's entries
then the written chunks in S4, S3, S1, and the partial staging's rows owed = the row
queue's then the whole rows in S4, S3, S1; the room the input's ready register keeps (the
write FIFO's level plus the chunks in S1, S3, S4 plus the ready at most ``WRITE_DEPTH`` -
1, the row queue's at most ``PARTIAL_ROWS``); for the wait, a cycle waited with the outputs
ready leaves the ready low only if the room it is set from holds (it is set the cycle
after), and a second one leaves it set (the FIFOs' output registers are full whenever their
level is past 1, so a level past the ready's bound gives a chunk and a row back).

Bounded as well (BMC, ``bmc``) only to 9 cycles from reset: with the invariants asserted
at every step a step past 8 costs about 3x the one before (step 13 took 10 minutes; the
properties alone are no cheaper past 12), and the k-induction already covers every depth.

Not asserted: ``i.ready`` never depends on ``i.valid`` (it is a register, by
construction); the rate (one chunk a cycle while the outputs are ready): the simulation
bench (``tests/test_rtl_relay_stage.py``) asserts it in cycles.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data

from ...rtl.relay.stage import PARTIAL_ROWS, WRITE_DEPTH, PartialStage, RelayStage
from .common import any_const, any_seq, fifo_entries, pick
from .plant import Plant, PlantedHarness

#: cycles from a chunk's take to its S4 (the S1, S3 and S4 registers), whose registers
#: drive the staging write, the outputs and a whole row's bitmap clear
LATENCY = 3

#: the FIFOs' memories as flip-flops, before their words are connected (common.memory_words)
SCRIPT = ("memory_map", "opt_clean")
#: the most cycles in a row a chunk offered waits while every output is ready (no hang):
#: the ready, a register, is low in at most two such cycles in a row (set again once the
#: FIFOs have given a chunk and a row back)
HANG_WAIT = 2

#: k of the k-induction, the BMC's and the covers' depths (cycles from reset), both sets'
PROVE_K, BMC_DEPTH, COVER_DEPTH = 1, 9, 13

MOD = "moehub.rtl.relay.stage"


def _shared(cls: str) -> dict:
    """The planted bugs of :class:`~moehub.rtl.relay.stage.ChunkStage` (the base both
    stagings share), on staging ``cls``."""
    return {
        "bitmap-kept": Plant(MOD, "                m.d.sync += bitmap[k].eq(0)",
                             "                m.d.sync += bitmap[k].eq(bitmap[k])", cls,
                             ("drops differs", "a staging write no chunk owes", "a mark not exactly",
                              "a whole row not out", "a row out that no whole row owes"),
                             "a whole row's bitmap not cleared: the slot's next row taken as duplicates"),
        "dup-missed": Plant(MOD, "s3_dup.eq((have & s1_coh).any())", "s3_dup.eq(0)", cls,
                            ("drops differs", "a staging write no chunk owes", "a staging write not"),
                            "a duplicate chunk taken as new: written again, not counted"),
        "addr-no-chunk": Plant(MOD, "s4_off.eq((s3_row + s3.chunk * cfg.chunk_bytes)[:cfg.addr_bits])",
                               "s4_off.eq(s3_row[:cfg.addr_bits])", cls,
                               ("a staging write not at base + slot x stride + chunk x chunk_bytes",),
                               "the staging address without its chunk term: every chunk at its row's start"),
        "whole-early": Plant(MOD, "select([(s3_soh[k], bitmap[k]) for k in range(W)], C).all())",
                             "select([(s3_soh[k], bitmap[k]) for k in range(W)], C)[1:].all())", cls,
                             ("a row out before its chunks are all in", "a row out that no whole row owes",
                              "not exactly LATENCY cycles after its last chunk's take",
                              "a row out with another slot, drop bit or header than the oldest whole row's"),
                             "the whole test one chunk short (chunk 0's bit not looked at)"),
        "ready-stuck": Plant(MOD, "m.d.sync += ready.eq(self._all(", "m.d.sync += ready.eq(ready & self._all(",
                             cls, ("a hang",), "the input's ready, once low, never set again (it is low "
                                               "from reset: nothing is ever taken)"),
    }


#: planted bugs of the relay staging (each a one-place edit of stage.py, in memory)
RELAY_PLANTS = {
    **_shared("RelayStage"),
    "mark-dropped": Plant(MOD, "self.mark_valid.eq(first & ~s4.drop)", "self.mark_valid.eq(first)",
                          "RelayStage", ("a mark not exactly at a good row's first new chunk",),
                          "a dropped row's first chunk marked (the credit join would wait for it)"),
    "local-written": Plant(MOD, "        return ~s3.drop, remote", "        return (~s3.drop,)",
                           "RelayStage", ("a staging write no chunk owes", "a staging write not"),
                           "a row with targets on this GPU only staged (nothing reads it back)"),
}
#: planted bugs of the partial staging
PARTIAL_PLANTS = {
    **_shared("PartialStage"),
    "drop-written": Plant(MOD, "        return (~s3.drop,)", "        return ()", "PartialStage",
                          ("a staging write no chunk owes", "a staging write not"),
                          "a dropped row's chunks staged"),
    "at-ptag": Plant(MOD, "entry.at.eq(partial_slot(self.cfg, s4.sender, s4.ptag))", "entry.at.eq(s4.ptag)",
                     "PartialStage", ("a row out with another slot, drop bit or header",),
                     "a whole row's slot without its sender's term: the feed reads another slot's row"),
}


def _onehot(v, n):
    return Cat(*(v == j for j in range(n)))


def ref_queue(m, name: str, n: int, width: int, push, value, pop):
    """A harness FIFO of ``n`` entries (``name<j>``, oldest first; a shift register) and its
    count: ``value`` pushed with ``push``, the oldest dropped with ``pop`` (none when
    empty; a push when full is lost: the invariants keep the count below ``n``)."""
    es = [Signal(width, name=f"{name}{j}") for j in range(n)]
    cnt = Signal(range(n + 1), name=f"{name}_n")
    popped = pop & (cnt != 0)
    pushed = push & (cnt - popped < n)
    after = Signal(range(n + 1), name=f"{name}_after_pop")
    m.d.comb += after.eq(cnt - popped)
    for j in range(n):
        kept = Mux(popped, es[j + 1] if j + 1 < n else es[j], es[j])
        m.d.sync += es[j].eq(Mux(pushed & (after == j), Value.cast(value), kept))
    m.d.sync += cnt.eq(after + pushed)
    return es, cnt


class StageHarness(PlantedHarness):
    """A chunk staging of ``cfg`` under its environment (module docstring); a subclass
    says which (:attr:`unit`, its :attr:`plants`) and adds its slot, writes and outputs."""
    into = ("wq",)

    # ---- what a subclass says
    def slots(self) -> int:
        raise NotImplementedError

    def environment(self, m, p, dut) -> dict:
        """The subclass's constant inputs (assumed), by name."""
        return {}

    def in_window(self, c, env):
        """Whether chunk ``c`` (a payload view) is one the hub's input lets through."""
        raise NotImplementedError

    def slot_of(self, c, env):
        """The spec's slot of an in-window chunk ``c``."""
        raise NotImplementedError

    def written(self, c, env):
        """Whether a new chunk ``c`` is written (besides being new)."""
        return ~c.drop

    def outputs_ready(self, dut):
        """Every output that may hold the staging back ready (the write port; the
        partial staging's row queue too)."""
        return dut.wr.ready

    def room_next(self, regs):
        """The room the ready register is set from (the invariants' copy of it)."""
        return (regs["wq.level"] + regs["s1_valid"] + regs["s3_valid"] + regs["s4_valid"] + regs["i_ready"]
                <= WRITE_DEPTH - 2)

    def outputs(self, m, p, dut, e):
        """The row outputs' properties, the covers of them; returns (the whole rows'
        reference state for the invariants, the slots blocked: a row of it whole and not
        yet out)."""
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        cfg, C = self.cfg, self.cfg.chunks_per_row
        W, aw = self.slots(), cfg.addr_bits
        ALL = (1 << C) - 1
        p, dut, regs = self.elaborate_dut(m, platform, into=self.into)
        parts = self.parts
        lay = dut.i.payload.shape()
        sb = max(1, (W - 1).bit_length())

        # ---- environment
        base = any_const(m, aw, "base")
        m.d.comb += dut.base.eq(base)
        env = self.environment(m, p, dut)
        iv = any_seq(m, 1, "i_valid")
        ip = any_seq(m, lay, "i_payload")
        m.d.comb += [dut.i.valid.eq(iv), dut.i.payload.eq(ip)]
        held = Signal(name="env_i_held")                    # offered and not taken last cycle
        last = Signal(lay, name="env_i_last")
        m.d.sync += [held.eq(dut.i.valid & ~dut.i.ready), last.eq(dut.i.payload)]
        p.assume(~held | (iv & (ip.as_value() == last.as_value())))
        p.assume(~iv | self.in_window(ip, env))
        m.d.comb += dut.wr.ready.eq(any_seq(m, 1, "wr_ready"))
        take = dut.i.valid & dut.i.ready

        # ---- reference: each slot's chunks in, the chunk taken judged against them
        ref_in = [Signal(C, name=f"ref_in{k}") for k in range(W)]
        slot = Signal(sb, name="ref_slot")
        m.d.comb += slot.eq(self.slot_of(ip, env))
        bit = Signal(C, name="ref_bit")
        m.d.comb += bit.eq(_onehot(ip.chunk, C))
        cur = Signal(C, name="ref_cur")
        m.d.comb += cur.eq(pick(ref_in, slot))
        now = {"v": take, "pl": ip, "slot": slot, "new": (ip.chunk < C) & ~(cur & bit).any()}
        now.update(whole=now["new"] & ((cur | bit) == ALL), first=now["new"] & (cur == 0),
                   write=now["new"] & self.written(ip, env))
        for k in range(W):
            with m.If(take & now["new"] & (slot == k)):
                m.d.sync += ref_in[k].eq(Mux(now["whole"], 0, cur | bit))
        ref_drops = Signal(32, name="ref_drops")
        m.d.sync += ref_drops.eq(ref_drops + (take & ~now["new"]))
        # the harness pipeline: the chunk and its judgment, LATENCY cycles (S1, S3, S4)
        d = []
        prev = now
        for j in range(1, LATENCY + 1):
            st = {"v": Signal(name=f"ref_d{j}_valid"), "pl": Signal(lay, name=f"ref_d{j}"),
                  "slot": Signal(sb, name=f"ref_d{j}_slot")}
            st.update({k: Signal(name=f"ref_d{j}_{k}") for k in ("new", "whole", "first", "write")})
            m.d.sync += [st[k].eq(prev[k]) for k in st]
            st["in"] = st["pl"].chunk < C
            st["bit"] = _onehot(st["pl"].chunk, C)
            st["drop"] = st["v"] & ~st["new"]       # a duplicate or past the row: counted
            d.append(st)
            prev = st
        d1, d2, d3 = d

        def addr_of(c, at):
            return (base + at * cfg.stride_bytes + c.chunk * cfg.chunk_bytes)[:aw]

        # ---- the staging writes owed, in order
        wlay = dut.wr.payload.shape()
        wval = Signal(wlay, name="ref_write")
        m.d.comb += [wval.addr.eq(addr_of(ip, slot)), wval.data.eq(ip.data)]
        wr_fire = dut.wr.valid & dut.wr.ready
        wq, wn = ref_queue(m, "ref_wq", WRITE_DEPTH + LATENCY, wlay.size, take & now["write"], wval, wr_fire)
        head = data.View(wlay, wq[0])
        p.check(~dut.wr.valid | (wn != 0), "a staging write no chunk owes (a duplicate's, a dropped row's, twice)")
        p.check(~dut.wr.valid | (wn == 0) | (dut.wr.payload.addr == head.addr),
                "a staging write not at base + slot x stride + chunk x chunk_bytes (or out of order)")
        p.check(~dut.wr.valid | (wn == 0) | (dut.wr.payload.data == head.data),
                "a staging write not with its chunk's data (or out of order)")
        wfifo = parts["wq"]
        p.check(~wfifo.w_en | wfifo.w_rdy, "a staging write pushed into the full write FIFO (lost)")
        # ---- the drops: LATENCY + 1 cycles late (judged in S3, counted in the next cycle)
        p.check(dut.drops == (ref_drops - d1["drop"] - d2["drop"] - d3["drop"])[:32],
                "drops differs from the duplicate and past-the-row chunks taken (LATENCY + 1 cycles late)")

        # ---- no hang: a chunk offered waits at most HANG_WAIT cycles in a row with every
        # output ready
        wait = Signal(range(HANG_WAIT + 2), name="env_wait")
        m.d.sync += wait.eq(Mux(self.outputs_ready(dut) & iv & ~dut.i.ready, wait + 1, 0))
        p.check(wait <= HANG_WAIT, "a chunk held back more than HANG_WAIT cycles in a row with every output "
                                   "ready (a hang)")
        p.cover(wait == HANG_WAIT, "a chunk held back HANG_WAIT cycles in a row with every output ready")

        e = dict(locals())
        e.pop("self")
        rows, blocked = self.outputs(m, p, dut, e)
        e.update(rows=rows, blocked=blocked)
        # the window protocol: a slot whose row is whole waits for the row to leave
        p.assume(~iv | ~pick(blocked, slot))

        # ---- covers
        nest = [Signal(name=f"cov_nested{k}") for k in range(W)]   # opened while another was open
        others_open = Cat(*(Cat(*(ref_in[j] != 0 for j in range(W) if j != k)).any() if W > 1 else Const(0)
                            for k in range(W)))
        for k in range(W):
            with m.If(take & now["first"] & (slot == k)):
                m.d.sync += nest[k].eq(others_open[k])
        p.cover(d3["v"] & d3["whole"] & ~d3["pl"].drop & (d3["pl"].chunk == 0),
                "a good row whole with its chunk 0 last (out of order)")
        p.cover(d3["v"] & d3["in"] & ~d3["new"], "a duplicate chunk dropped")
        p.cover(take & now["whole"] & pick(nest, slot) & pick(others_open, slot),
                "a row whole that opened while another slot's row was part-way in, still part-way")
        p.cover(~dut.i.ready & (regs["wq.level"] != 0), "the input held back by the write FIFO's room")

        if self.invariants:         # (off: a plant must fail on the properties themselves)
            self._invariants(m, p, regs, e)
        return m

    def _invariants(self, m, p, regs, e):
        """The strengthening invariants (module docstring)."""
        cfg, C, W = self.cfg, self.cfg.chunks_per_row, e["W"]
        ALL = e["ALL"]
        self.script = SCRIPT
        d1, d2, d3 = e["d"]
        ref_in, blocked = e["ref_in"], e["blocked"]
        # -- the pipeline's registers
        p.check((regs["s1_valid"] == d1["v"]) & (regs["s3_valid"] == d2["v"]) & (regs["s4_valid"] == d3["v"]),
                "invariant: a step's valid bit is not the harness pipeline's")
        p.check(~d1["v"] | ((regs["s1"] == Value.cast(d1["pl"])) & (regs["s1_slot"] == d1["slot"])
                            & (regs["s1_slot_oh"] == _onehot(d1["slot"], W)) & (regs["s1_chunk_oh"] == d1["bit"])),
                "invariant: S1's chunk, slot or one-hots")
        p.check(~d2["v"] | ((regs["s3"] == Value.cast(d2["pl"])) & (regs["s3_slot_oh"] == _onehot(d2["slot"], W))
                            & (regs["s3_in_row"] == d2["in"]) & (regs["s3_dup"] == (d2["in"] & ~d2["new"]))
                            & (~d2["new"] | (regs["s3_empty"] == d2["first"]))
                            & (regs["s3_row_offset"] == (d2["slot"] * cfg.stride_bytes)[:cfg.addr_bits])),
                "invariant: S3's chunk, slot, verdicts or row offset")
        p.check((regs["s4_whole"] == (d3["v"] & d3["whole"])) & (regs["s4_first"] == (d3["v"] & d3["first"]))
                & (regs["s4_write"] == (d3["v"] & d3["write"])) & (regs["ev_drop"] == d3["drop"]),
                "invariant: S4's verdicts")
        p.check(~d3["v"] | ((regs["s4"] == Value.cast(d3["pl"])) & (regs["s4_slot_oh"] == _onehot(d3["slot"], W))
                            & (~d3["write"] | (regs["s4_offset"]
                                               == (d3["slot"] * cfg.stride_bytes + d3["pl"].chunk
                                                   * cfg.chunk_bytes)[:cfg.addr_bits]))),
                "invariant: S4's chunk, slot or offset")
        env = e["env"]
        for st in e["d"]:
            p.check(~st["v"] | (self.in_window(st["pl"], env) & (st["slot"] == self.slot_of(st["pl"], env))
                                & (st["write"] == (st["new"] & self.written(st["pl"], env)))
                                & (st["slot"] < W) & (~st["new"] | st["in"])
                                & (~(st["whole"] | st["first"] | st["write"]) | st["new"])
                                & ~(st["whole"] & st["first"] if C > 1 else Const(0))),
                    "invariant: a harness pipeline chunk's judgment", src_loc_at=0)
        # -- the bitmaps against the reference's chunks in
        for k in range(W):
            at = [st["v"] & (st["slot"] == k) for st in e["d"]]
            w1, w2, w3 = (a & st["whole"] for a, st in zip(at, e["d"]))
            n1 = at[0] & d1["new"]
            want = Mux(w2 | w3, ALL, Mux(w1, ALL & ~d1["bit"], ref_in[k] & ~Mux(n1, d1["bit"], 0)))
            p.check(regs[f"bitmap{k}"] == want, "invariant: a slot's bitmap is not its chunks in (less S1's)")
            p.check(ref_in[k] != ALL, "invariant: a slot's chunks in all set")
            p.check(~blocked[k] | (ref_in[k] == 0), "invariant: chunks in for a slot whose row is whole, not out")
            # the chunk in S1: its bit among the chunks in, and the row's first exactly when alone
            p.check(~(at[0] & d1["in"] & ~(d1["new"] & d1["whole"])) | (ref_in[k] & d1["bit"]).any(),
                    "invariant: S1's chunk not among its slot's chunks in")
            p.check(~(at[0] & d1["new"] & ~d1["whole"]) | (((ref_in[k] & ~d1["bit"]) == 0) == d1["first"]),
                    "invariant: S1's chunk its row's first, not alone in its slot (or the reverse)")
        # no chunk of a slot behind a whole row of it in the pipeline (oldest: d3)
        for o, older in enumerate((d3, d2)):
            for newer in (d2, d1)[o:]:
                p.check(~(older["v"] & older["whole"] & newer["v"]) | (newer["slot"] != older["slot"]),
                        "invariant: a chunk of a slot behind its whole row in the pipeline")
        # -- the write FIFO and the writes owed
        F, f_ok, connect = fifo_entries(m, regs, "wq", WRITE_DEPTH, e["wlay"].size)
        self.script += connect
        p.check(f_ok, "invariant: the write FIFO's pointers are not consume + inner_level")
        lvl = regs["wq.level"]
        room = lvl + regs["s1_valid"] + regs["s3_valid"] + regs["s4_valid"] + regs["i_ready"]
        p.check(room <= WRITE_DEPTH - 1,
                "invariant: the write FIFO's level, the chunks in S1, S3, S4 and the ready's past its room")
        # the wait: a cycle waited with the outputs ready gives a chunk (a row) back if the
        # FIFO's level was past the ready's bound, so the ready is set the cycle after
        wait, rdy = e["wait"], regs["i_ready"]
        p.check((wait == 0) | rdy | self.room_next(regs),
                "invariant: a chunk waited with the outputs ready, the ready low and not set next")
        p.check((wait < HANG_WAIT) | rdy, "invariant: a chunk waited HANG_WAIT cycles, the ready still low")
        self._owed(p, e["wq"], e["wn"], F, lvl, [(st["v"] & st["write"], self._write_of(e, st)) for st in (d3, d2, d1)],
                   "writes")
        self.more_invariants(m, p, regs, e)

    def _write_of(self, e, st):
        """The write a chunk of the harness pipeline owes."""
        return Cat(e["addr_of"](st["pl"], st["slot"]), st["pl"].data)

    def _owed(self, p, q, n, fifo, lvl, pending, what):
        """The harness queue ``q`` (count ``n``) = the FIFO's entries (``lvl`` of them), then
        each of ``pending`` (oldest first: (owed, value)) that is owed."""
        p.check(n == lvl + sum(Value.cast(o) for o, _ in pending),
                f"invariant: the {what} owed are not the FIFO's and the pipeline's", src_loc_at=1)
        for j in range(len(fifo)):
            p.check(~(lvl > j) | (q[j] == fifo[j]), f"invariant: the {what} owed are not the FIFO's entries",
                    src_loc_at=1)
        at = lvl
        for owed, value in pending:
            p.check(~owed | (pick(q, at) == value), f"invariant: the {what} owed are not the pipeline's, in order",
                    src_loc_at=1)
            at = at + owed

    def more_invariants(self, m, p, regs, e):
        """The subclass's invariants (its whole rows)."""


class RelayStageHarness(StageHarness):
    """A :class:`~moehub.rtl.relay.stage.RelayStage` under its environment (module docstring)."""
    unit = RelayStage
    plants = RELAY_PLANTS

    def slots(self):
        return self.cfg.relay_window

    def environment(self, m, p, dut):
        cfg = self.cfg
        node = any_const(m, cfg.node_bits, "node")
        rank = any_const(m, cfg.gpu_bits, "rank")
        p.assume(node < cfg.nodes)
        p.assume(rank < cfg.node_gpus)
        m.d.comb += [dut.node.eq(node), dut.rank.eq(rank)]
        return {"node": node, "rank": rank}

    def in_window(self, c, env):
        cfg = self.cfg
        return (c.src_node < cfg.nodes) & (c.src_node != env["node"]) & (c.tag < cfg.tags_per_source)

    def slot_of(self, c, env):
        """The source's node among the others (those below this node, then above), times
        the tags, plus the tag."""
        k = Mux(c.src_node > env["node"], c.src_node - 1, c.src_node)
        return k * self.cfg.tags_per_source + c.tag

    def written(self, c, env):
        """A good row's chunk naming another GPU of the node: its forward reads it back."""
        T = self.cfg.relay_targets
        return ~c.drop & Cat(*(c.valid[t] & (c.gpu[t] != env["rank"]) for t in range(T))).any()

    def outputs(self, m, p, dut, e):
        cfg, d3, W = self.cfg, e["d3"], e["W"]
        s = d3["pl"]
        good_whole = d3["v"] & d3["whole"] & ~s.drop
        drop_whole = d3["v"] & d3["whole"] & s.drop
        p.check(~dut.row.valid | good_whole,
                "a row out before its chunks are all in, twice, or a dropped row's (the relay staging)")
        p.check(~good_whole | dut.row.valid, "a whole row not out LATENCY cycles after its last chunk's take")
        p.check(~dut.row.valid | (dut.row.payload.as_value() == s.as_value()[:len(dut.row.payload.as_value())]),
                "a row out with other fields than its last chunk's")
        p.check(dut.done.valid == drop_whole,
                "a dropped row's credit (done) not exactly LATENCY cycles after its last chunk's take")
        src = (s.src_node * cfg.node_gpus + s.src_rank)[:cfg.src_bits]
        p.check(~dut.done.valid | ((dut.done.payload.src == src) & (dut.done.payload.tag == s.tag)),
                "a dropped row's credit (done) naming another source or tag")
        p.check(dut.mark_valid == (d3["v"] & d3["first"] & ~s.drop),
                "a mark not exactly at a good row's first new chunk (LATENCY cycles after its take)")
        p.check(~dut.mark_valid | ((dut.mark_node == s.src_node) & (dut.mark_tag == s.tag)
                                   & (dut.mark_local == s.local)),
                "a mark with another chunk's node, tag or local bit")
        p.cover(dut.done.valid, "a dropped row whole: its credit owed (done)")
        p.cover(dut.mark_valid & dut.mark_local, "a mark of a row with targets on this GPU")
        # (a slot is blocked while its whole row is in the pipeline: it leaves from S4)
        blocked = [Cat(*(st["v"] & st["whole"] & (st["slot"] == k) for st in e["d"])).any() for k in range(W)]
        return None, blocked


class PartialStageHarness(StageHarness):
    """A :class:`~moehub.rtl.relay.stage.PartialStage` under its environment (module docstring)."""
    unit = PartialStage
    plants = PARTIAL_PLANTS
    into = ("wq", "rows")

    def slots(self):
        return self.cfg.partial_window

    def environment(self, m, p, dut):
        m.d.comb += dut.row.ready.eq(any_seq(m, 1, "row_ready"))
        return {}

    def outputs_ready(self, dut):
        return dut.wr.ready & dut.row.ready

    def room_next(self, regs):
        return super().room_next(regs) & (
            regs["rows.level"] + regs["s1_valid"] + regs["s3_valid"] + regs["s4_valid"] + regs["i_ready"]
            <= PARTIAL_ROWS - 1)

    def in_window(self, c, env):
        return (c.sender < self.cfg.node_gpus) & (c.ptag < self.cfg.partial_span)

    def slot_of(self, c, env):
        """The sender's local rank times the P tags, plus the P tag."""
        return c.sender * self.cfg.partial_span + c.ptag

    def _row_of(self, lay, c, at):
        v = Signal(lay)
        return v, [v.at.eq(at), v.drop.eq(c.drop), *(getattr(v, k).eq(getattr(c, k))
                                                     for k in ("sender", "ptag", "src_node", "token", "slot"))]

    def outputs(self, m, p, dut, e):
        W, now = e["W"], e["now"]
        lay = dut.row.payload.shape()
        rval, stmts = self._row_of(lay, e["ip"], e["slot"])
        m.d.comb += stmts
        row_fire = dut.row.valid & dut.row.ready
        rq, rn = ref_queue(m, "ref_rq", PARTIAL_ROWS + LATENCY, lay.size, e["take"] & now["whole"], rval, row_fire)
        head = data.View(lay, rq[0])
        p.check(~dut.row.valid | (rn != 0), "a row out that no whole row owes (before its chunks are all in, twice)")
        p.check(~dut.row.valid | (rn == 0) | (dut.row.payload.as_value() == rq[0]),
                "a row out with another slot, drop bit or header than the oldest whole row's")
        rfifo = self.parts["rows"]
        p.check(~rfifo.w_en | rfifo.w_rdy, "a whole row pushed into the full row queue (lost)")
        p.cover(row_fire & head.drop, "a dropped row out (its credit owed)")
        p.cover(row_fire & (rn >= 2) & (data.View(lay, rq[1]).at != head.at), "a row out with another whole behind it")
        blocked = [Cat(*((rn > j) & (data.View(lay, rq[j]).at == k) for j in range(len(rq)))).any() for k in range(W)]
        return (rq, rn, lay), blocked

    def more_invariants(self, m, p, regs, e):
        rq, rn, lay = e["rows"]
        d1, d2, d3 = e["d"]
        F, f_ok, connect = fifo_entries(m, regs, "rows", PARTIAL_ROWS, lay.size)
        self.script += connect
        p.check(f_ok, "invariant: the row queue's pointers are not consume + inner_level")
        lvl = regs["rows.level"]
        p.check(lvl + regs["s1_valid"] + regs["s3_valid"] + regs["s4_valid"] + regs["i_ready"] <= PARTIAL_ROWS,
                "invariant: the row queue's level, the chunks in S1, S3, S4 and the ready's past its room")
        pend = []
        for st in (d3, d2, d1):
            v, stmts = self._row_of(lay, st["pl"], st["slot"])
            m.d.comb += stmts
            pend.append((st["v"] & st["whole"], Value.cast(v)))
        self._owed(p, rq, rn, F, lvl, pend, "rows")
        ats = [data.View(lay, r).at for r in rq]
        for j in range(len(rq)):
            for k in range(j + 1, len(rq)):
                p.check(~(rn > k) | (ats[j] != ats[k]), "invariant: two whole rows of one slot owed")
            for st in (d3, d2, d1):
                # (a queued row, in the FIFO, with a chunk of its slot in the pipeline)
                p.check(~((lvl > j) & st["v"]) | (ats[j] != st["slot"]),
                        "invariant: a chunk of a slot behind its whole row in the row queue")


def small_config():
    """The reduced config of the stagings' property sets: the partial feed's
    ``tiny/partial-small`` (2 nodes x 3 GPUs, 2 tags per source, 2 P tags per sender) --
    rows of 3 chunks of 16 bytes (a chunk code, 3, past the row representable; a 48-byte row
    stride, not a power of two), 32-bit addresses; the relay window 2 slots (the other node
    x 2 tags; both nodes' sources map to it, as ``node`` is free), the P window 6 (codes
    6-7 representable, never sent)."""
    from .partial import small_config as partial_small
    return partial_small()


def property_sets() -> list[dict]:
    """The stagings' property sets, as :class:`~.sets.PropertySet`'s fields (sets.py lists
    them; kept here so that file holds one line of them). Measured on the 2-core machine
    under load (~2): k-induction k=1 82 s (relay) and 39 s (partial), BMC 9 12 s and 9
    s, the covers within 13 steps 4-5 s (reached at steps 5-11: a chunk held back two
    cycles with the outputs ready needs the write FIFO filled first); the smoke job is the
    covers (the k-induction is past the fast set's budget)."""
    common = dict(config="tiny/partial-small: 2 nodes x 3 GPUs, 2 tags, 2 P tags, 3-chunk rows (48-byte stride)",
                  modes={"prove": PROVE_K, "bmc": BMC_DEPTH, "cover": COVER_DEPTH}, smoke={"cover": COVER_DEPTH})
    return [
        dict(name="relay-stage", component="relay staging", build=lambda: RelayStageHarness(small_config()),
             note="protocol v3: every relay chunk taken written once (new, of a good row naming another GPU "
                  "of the node) at base + slot x stride + chunk x chunk_bytes with its data, or counted as "
                  "a drop (a duplicate, past the row), never both; a row out (row, or done for a dropped "
                  "row) exactly LATENCY cycles after its last missing chunk, with its fields; the mark at "
                  "a good row's first chunk; no chunk held back more than 2 cycles in a row with wr ready (stage.py)", **common),
        dict(name="relay-partial-stage", component="relay partial staging",
             build=lambda: PartialStageHarness(small_config()),
             note="protocol v3: every partial chunk taken written once (new, of a good row) at base + slot "
                  "x stride + chunk x chunk_bytes with its data, or counted as a drop, never both; each "
                  "whole row (or dropped row) out once, in the order they became whole, with its slot and "
                  "last chunk's header, never before its chunks are in; no row lost in the row queue; no "
                  "chunk held back more than 2 cycles in a row with wr and row ready (stage.py)", **common),
    ]
