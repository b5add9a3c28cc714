"""Property harness of the relay hub's reduce path (:class:`moehub.rtl.relay.reduce_path.ReducePath`:
the reduce unit, its engine and the partial rows' intake): it never hangs, and the intake
pairs the partial rows with the unit's ops.

Environment: ``open`` (the relay control's opens) free -- valid and content any, every
cycle; ``partial`` whole rows of ``C`` chunks in order, any header and data, each beat
carrying its row's header, valid held with a stable payload until taken (the partial
feed's contract); ``flush`` free (RED_FLUSH and the watchdog: any cycle); ``rd``, ``wr``
and ``out`` ready free; the memory answers the reads in order, some cycles later:
``rdata.valid`` only while a read issued is not yet answered (the harness counts them),
its data free; ``node``, ``rank`` and ``acc_base`` constants (the base aligned past the
accumulator rows, as in :mod:`.reduce`: the control reads no address).

Config: the reduce engine's (:func:`.reduce.small_config`, ``tiny/reduce-small``: 4
records, so the unit's clearing sweep after reset is 4 cycles; top-2; rows of 2 chunks of
1 element) on the engine's reduced depths (:data:`.reduce.PROOF_DEPTHS`: a context FIFO of
4, the datapath's control 4 cycles long, :class:`.reduce.DatapathControl`, its data free).
:class:`ReducePath`'s constructor takes no depths (``cfg``, ``elements``, ``chunks``,
``power_up``), so the harness rebuilds the path's engine before it is elaborated with the
engine's own constructor parameters -- the class the path builds, so a plant of the
engine reaches it; the path's wiring, its unit and its intake are the RTL's. The hub's
depths (16 contexts, 20 cycles) change the bounds below (a hazard's wait is a datapath's
latency) and are not run here: the induction's window there, the bounds, would be far
past this one's (:mod:`.reduce` argues the engine's depths for its own properties).

Reference state (the harness's own registers): the headers taken by the unit (``part``'s
handshake) not yet judged; the current row's beats still owed and whether it was passed
(``part_taken``) or refused (``part_refused``); the passed beats not yet taken by the
engine as ``y``, with their data (a shadow queue); the ``y`` beats owed by the ops the unit
made for rows, and by the ops the engine took (every kind but FLUSH); the header of the
row being judged.

Properties:

* **no hang**: a partial row's beat offered waits at most :data:`HANG_WAIT` cycles in a
  row in which ``rd``, ``wr`` and ``out`` are ready, the memory answers every owed read
  in that cycle (``rdata.valid`` whenever one is owed -- partial.py's "promptly"), no open
  is offered (the unit takes an open before a part, by design: opens every cycle hold the
  rows back as long as they come) and no flush is pending or sweeping; an open offered
  the same, at most :data:`OPEN_WAIT` cycles (an open waits only for the unit: an
  operation in progress -- a part whose op waits for the op register -- or a flush; never
  for a full record table: a sum without a place is refused, ``NO_RECORD``). The clearing
  sweep after reset (``clearing``, 4 cycles) and the flush's sweep (``sweeping``, and the
  cycles from ``flush`` to it) are not counted: a flush every sweep would hold the unit
  for ever, by design. A sweep itself ends: ``sweeping`` at most :data:`SWEEP_WAIT` cycles
  in a row with the outputs ready, the memory answering and, while a passed row owes
  beats, one offered (a passed row's op can be in the engine before its beats: its
  contexts wait for them at the join, the FLUSH ops behind them, and the sweep for the op
  register, as long as the feed stalls mid-row: the k-induction's counterexample without
  the condition -- such a sweep is bounded by the feed, not by the path).
* **pairing**: every header the unit takes gets exactly one verdict (``part_taken`` or
  ``part_refused``, never both, none without a header judged); the next header is taken
  only once the last row's verdict is in and its ``C`` beats are taken; a partial beat is
  taken only for a judged row owing it; a taken row's op (in the op register from the
  next cycle) names the row's record and slot and is a part's (WRITE..ONLY); a ``y`` beat
  is offered only while a passed row's beat is owed to the engine, and carries the oldest
  such beat's data (so a refused row's beats never reach the engine, a passed row's all
  do, in order); a ``y`` beat is offered only while an op the unit made for a row owes one,
  and taken only while an op the engine took owes one (FLUSH ops take none).

Unbounded: k-induction (``prove``) at k = :data:`PROVE_K` = 24, every property, with the
strengthening invariants (:meth:`ReducePathHarness._invariants`; off for the plants, which
must fail on the properties themselves; ``hangs`` picks the no-hang properties checked).
The pairing properties alone close at k = 1 with the first two groups below (a fast
test); k = 24 is the no-hang bounds' window: a wait of
SWEEP_WAIT + 1 cycles fits in the induction's path, so the induction shows that no state
the invariants allow starts one. The invariants, read from the path's registers by name
(the unit's and the intake's FSM transitions resolved first), the FIFOs' and the record
table's memory words as flip-flops (``memory_map``, :func:`.common.memory_words`):

* *intake and unit*: the intake's state against the reference (waiting for a header:
  nothing unjudged or owed; for a verdict: one header unjudged, ``C`` beats left; passing
  or dropping: the beats left the row's owed, 1 .. ``C``); waiting for a verdict exactly
  while the unit reads or decides a part, at the row's record and slot; the unit's state
  one of its states;
* *y beats*: the passed beats queued = the intake FIFO's level, with the shadow queue's
  data; owed by the unit's ops = queued + the passing row's beats left = owed by the
  engine's ops + ``C`` for a part's op in the op register; owed by the engine's ops = its
  queued contexts but FLUSH's + the op being issued's chunks left; both FIFOs' pointers;
* *engine* (the progress the no-hang bounds rest on, lighter than :mod:`.reduce`'s ghost
  tags): the scoreboard's valid entries tail .. head - 1, as many as the last chunks live
  in the pipeline (the datapath's output, its stages, the context FIFO, oldest first) and
  the op being issued; the live chunks, then the chunk to issue, whole ops' chunks in
  order, an op's chunks of one kind, record, parts and weight (the oldest op's first
  chunks may be gone), the newest a last chunk unless an op is being issued; each live
  context and the op issued of its scoreboard entry (counted from the tail by the last
  chunks before it: its record, write bit, read bit); an op's parts as its kind allows at
  top-k; the reads not answered = the queued contexts that read;
* *unit*: the unit's flush request against the harness's; an open record's parts in fewer
  than its expected slots (or none of none), its count of parts in the count of its slots
  in; the record read the table's at the index (in
  DO, SWEEP_DO); per record, its ops in flight, issued and in the op register, oldest
  first, each the next of its sum after the one before (a WRITE of n parts: an ADD or
  LAST of n + 1 or a FLUSH of n) or a new sum's first (WRITE, ONLY, a FLUSH of none), and
  the newest against the record (a sum going on: open with its parts in; ended: closed or
  opened anew).

Bounds, and how they were established: :data:`HANG_WAIT` = 12, :data:`OPEN_WAIT` = 12,
:data:`SWEEP_WAIT` = 23 are the least the k-induction proves -- each bound less one fails
the induction (that property alone, k = the bound) from a state every invariant allows
(tests/test_reduce_path_formal.py). Those states look reachable but deep: the open's 12
starts with three ops of one record in flight (a WRITE after two sums flushed, each
needing a sweep), a FLUSH of it in the op register waiting for the WRITE's write-back and
a part behind it; the sweep's 23 starts a second sweep while the first one's last FLUSH
still waits on a WRITE of its record, the pipeline full. Exactness from reset is not
established: the covers reach waits of :data:`HANG_SEEN` = 7, :data:`OPEN_SEEN` = 5 and
:data:`SWEEP_SEEN` = 14 within :data:`COVER_DEPTH` = 30 cycles (steps 29, 28, 29), and a
deeper cover (with the invariants, stopped in step 43) reaches a row's beat waiting 8
(step 31), an open 7 (step 35) and 8 (step 42), a sweep 17 (step 32), nothing longer by
step 42 -- each cycle more needs a busier state, built over more cycles, and the cover's
steps past 40 take 1-2 minutes each: whether 9 .. 12, 9 .. 12 and 18 .. 23 are reached
from reset is open. The earlier bounded set (BMC 30, no invariants) proved only the waits
within 30 cycles (7, 5, 14), not every run's.

Times (2-core machine, load 3, a Yosys synthesis and another formal run beside it): the
k-induction at k = 24 150-160 s; the covers within 30 cycles 13-20 s; the pairing alone at k =
1 3 s; each bound less one failing its induction 50-125 s; the smoke BMC 12 9 s (mostly
preparing the invariants' logic: a BMC 6 takes 8 s); each planted bug fails a BMC
(invariants off) within 27 steps in 2-4 s. (The intake's FIFO, 2 entries, holds a whole
2-chunk row here; the hub's rows are hundreds of chunks.)
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl._dsl import resolve_statements
from amaranth.lib import data

from ...rtl.relay.accumulate import beat_layouts
from ...rtl.relay.reduce_path import ReducePath
from ...rtl.relay.reduce_unit import Op, op_layout
from .common import Props, any_const, any_seq, count_ones, elaborate_into, memory_words, pick, reset_first
from .plant import Plant, PlantedHarness
from .reduce import CHUNKS, ELEMENTS, PROOF_DEPTHS, DatapathControl, _reads, _writes, small_config

#: the most cycles in a row a partial beat offered waits with the outputs ready, the
#: memory answering, no open offered and no flush -- the least the k-induction proves (11
#: fails it: module docstring)
HANG_WAIT = 12
#: the same for an open offered (11 fails the k-induction)
OPEN_WAIT = 12
#: the most cycles in a row a flush's sweep lasts with the outputs ready, the memory
#: answering and the passing row's beats offered: 4 records at 3 cycles each, and the
#: FLUSH ops' waits for the op register (22 fails the k-induction)
SWEEP_WAIT = 23
#: the no-hang properties, by name (a harness may check some only)
HANGS = ("partial", "open", "sweep")
#: the longest waits a cover reaches within COVER_DEPTH (a row's beat at step 29, an open
#: at step 28, a sweep at step 29; each cycle more takes a longer run to build: module docstring)
HANG_SEEN, OPEN_SEEN, SWEEP_SEEN = 7, 5, 14
#: k of the k-induction: the longest bound's window (a wait of SWEEP_WAIT + 1 cycles fits
#: in the induction's path; the pairing properties close at k = 1)
PROVE_K = max(HANG_WAIT, OPEN_WAIT, SWEEP_WAIT) + 1
#: the covers' depth (cycles from reset) and the fast set's BMC
COVER_DEPTH, SMOKE_DEPTH = 30, 12
#: the FIFOs' and the record table's memories as flip-flops (the invariants connect their
#: words after it)
SCRIPT = ("memory_map", "opt_clean")

PATH = "moehub.rtl.relay.reduce_path"
HOST = (PATH, "ReducePath")
#: planted bugs (each a one-place edit of the RTL's source, in memory)
PLANTS = {
    "refused-stuck": Plant(PATH, "m.d.comb += p.ready.eq(1)\n                self._count(m, left, p.valid)",
                           "m.d.comb += p.ready.eq(0)\n                self._count(m, left, 0)", "ReducePath",
                           ("a partial beat held back",),
                           "after a refused row the intake never releases: its beats never taken, no next header"),
    "header-early": Plant(PATH, "with m.If(left == 1):", "with m.If(left == 2):", "ReducePath",
                          ("a header taken while the last row",),
                          "the intake back to HEADER one chunk early: the row's last chunk taken as a "
                          "header (a second verdict for one row)"),
    "refused-passed": Plant(PATH, "m.d.comb += p.ready.eq(1)", "m.d.comb += [p.ready.eq(1), ys.w_en.eq(p.valid)]",
                            "ReducePath", ("a y beat offered that no passed row owes",),
                            "a refused row's beats sent to the engine as y"),
    "op-ready-ignored": Plant("moehub.rtl.relay.reduce_unit",
                              "with m.If(self.op.ready):\n            m.d.sync += op_valid.eq(0)",
                              "with m.If(1):\n            m.d.sync += op_valid.eq(0)", "ReduceUnit",
                              ("a y beat offered no op the unit made owes", "a partial beat held back",
                               "the op made for a row"),
                              "the unit's op register emptied whether or not the engine took the op: an op "
                              "lost", host=HOST),
    "verdict-ignored": Plant(PATH, "with m.If(unit.part_refused):", "with m.If(0):", "ReducePath",
                             ("a partial beat held back",),
                             "the intake ignores a refusal: it waits for a verdict that never comes"),
}


def record_of(cfg, node, src_node, token):
    """The reduce unit's record of (source node, token) (:meth:`ReduceUnit._index`)."""
    span_bits = (cfg.reduce_token_span - 1).bit_length()
    index_bits = max(1, (cfg.reduce_records - 1).bit_length())
    remote = src_node - (src_node > node)
    return Cat(token[:span_bits], remote)[:index_bits]


class ReducePathHarness(PlantedHarness):
    """A :class:`ReducePath` of ``cfg`` (``CHUNKS`` chunks of ``ELEMENTS`` elements, its
    engine at the reduced depths) under its environment (module docstring)."""
    unit = ReducePath
    plants = PLANTS

    def __init__(self, cfg, plant: str | None = None, invariants: bool = False, hangs: tuple = HANGS):
        super().__init__(cfg, plant, invariants)
        self.hangs = hangs
        self.script = SCRIPT

    def _path(self):
        """The (planted) path with its engine rebuilt at the reduced depths."""
        path = self.dut_cls(self.cfg, ELEMENTS, CHUNKS)
        old = path.engine
        old._MustUse__silence = True                  # (replaced: never elaborated)
        d = PROOF_DEPTHS

        def model(cfg, elements, tag_bits):
            return DatapathControl(cfg, elements, tag_bits, d["latency"])
        path.engine = type(old)(self.cfg, ELEMENTS, CHUNKS, d["contexts"], d["ops_in_flight"], model)
        return path

    def elaborate(self, platform):
        m = Module()
        p = Props(m)
        self.messages = p.messages
        self.script = SCRIPT
        dut = self._path()
        if self.invariants:
            regs = _elaborate_resolved(m, dut, platform)
        else:
            m.submodules.dut = dut                    # (no invariants: no registers read by name)
        reset_first(m)
        env = self._environment(m, p, dut)
        ref = self._pairing(m, p, dut, env)
        env["asked"] = self._no_hang(m, p, dut, env, ref)
        if self.invariants:
            self._invariants(m, p, dut, regs, env, ref)
        return m

    def _environment(self, m, p, dut) -> dict:
        """The inputs under the contracts of the module docstring."""
        cfg = self.cfg
        node = any_const(m, cfg.node_bits, "node")
        base = any_const(m, cfg.addr_bits, "acc_base")
        rank = any_const(m, cfg.gpu_bits, "rank")
        p.assume(node < cfg.nodes)
        p.assume(rank < cfg.node_gpus)
        align = (cfg.reduce_records * dut.engine.acc_row_bytes - 1).bit_length()
        p.assume(base[:align] == 0)
        m.d.comb += [dut.node.eq(node), dut.rank.eq(rank), dut.acc_base.eq(base),
                     dut.flush.eq(any_seq(m, 1, "flush"))]
        for name in ("open", "partial", "rdata"):
            s = getattr(dut, name)
            m.d.comb += [s.valid.eq(any_seq(m, 1, f"{name}_valid")),
                         s.payload.eq(any_seq(m, s.payload.shape(), f"{name}_payload"))]
        for name in ("rd", "wr", "out"):
            m.d.comb += getattr(dut, name).ready.eq(any_seq(m, 1, f"{name}_ready"))
        # partial: held and stable until taken; a row's beats after its first carry its header
        pt = dut.partial
        held = Signal(name="env_partial_held")
        last = Signal(pt.payload.shape(), name="env_partial_last")
        m.d.sync += [held.eq(pt.valid & ~pt.ready), last.eq(pt.payload)]
        p.assume(~held | (pt.valid & (pt.payload.as_value() == last.as_value())))
        beat = Signal(range(CHUNKS), name="env_row_beat")           # beats of the row taken
        hdr = Signal(pt.payload.shape(), name="env_row_header")
        p_fire = pt.valid & pt.ready
        with m.If(p_fire):
            m.d.sync += beat.eq(Mux(beat == CHUNKS - 1, 0, beat + 1))
            with m.If(beat == 0):
                m.d.sync += hdr.eq(pt.payload)
        p.assume(~pt.valid | (beat == 0) | ((pt.payload.src_node == hdr.src_node)
                                            & (pt.payload.token == hdr.token) & (pt.payload.slot == hdr.slot)))
        # the memory: an answer only while a read is owed one
        pending = Signal(8, name="env_reads_pending")
        rd_fire = dut.rd.valid & dut.rd.ready
        ans = dut.rdata.valid & dut.rdata.ready
        m.d.sync += pending.eq(pending + rd_fire - ans)
        p.assume(~dut.rdata.valid | (pending != 0))
        return {"node": node, "pending": pending, "p_fire": p_fire}

    def _no_hang(self, m, p, dut, env, ref):
        """Bounded waits of a partial beat, an open and a sweep (module docstring)."""
        free = Signal(name="env_free")            # the outputs ready, the memory answering
        m.d.comb += free.eq(dut.rd.ready & dut.wr.ready & dut.out.ready & (dut.rdata.valid | (env["pending"] == 0)))
        asked = Signal(name="env_flush_asked")    # a flush seen, its sweep not yet started
        with m.If(dut.flush):
            m.d.sync += asked.eq(1)
        with m.Elif(dut.sweeping):
            m.d.sync += asked.eq(0)
        calm = Signal(name="env_calm")            # no sweep (clearing, flush) counts
        m.d.comb += calm.eq(free & ~dut.clearing & ~dut.flush & ~asked & ~dut.sweeping)
        pt, op = dut.partial, dut.open
        if "partial" in self.hangs:
            w = self._wait(m, calm & pt.valid & ~pt.ready & ~op.valid, HANG_WAIT, "partial")
            p.check(w <= HANG_WAIT, "a partial beat held back more than HANG_WAIT cycles in a row with the outputs "
                                    "ready, the memory answering, no open offered and no flush (a hang)")
            p.cover(w == HANG_SEEN, "a partial beat held back HANG_SEEN cycles in a row")
        if "open" in self.hangs:
            w = self._wait(m, calm & op.valid & ~op.ready, OPEN_WAIT, "open")
            p.check(w <= OPEN_WAIT, "an open held back more than OPEN_WAIT cycles in a row with the outputs "
                                    "ready, the memory answering and no flush (a hang)")
            p.cover(w == OPEN_SEEN, "an open held back OPEN_SEEN cycles in a row")
        if "sweep" in self.hangs:
            # (a passed row's contexts in the engine wait for its beats: a feed stalled
            # mid-row holds them, the FLUSH ops behind them and the sweep, as long as it stalls)
            fed = pt.valid | (ref["owed"] == 0) | ~ref["passing"]
            w = self._wait(m, free & fed & dut.sweeping, SWEEP_WAIT, "sweep")
            p.check(w <= SWEEP_WAIT, "a sweep longer than SWEEP_WAIT cycles in a row with the outputs ready, "
                                     "the memory answering and the passing row's beats offered (a hang)")
            p.cover(w == SWEEP_SEEN, "a sweep SWEEP_SEEN cycles long with the outputs ready")
        return asked

    @staticmethod
    def _wait(m, cond, bound, name):
        """Cycles in a row in which ``cond`` holds (saturating past ``bound``)."""
        w = Signal(range(bound + 2), name=f"env_wait_{name}")
        m.d.sync += w.eq(Mux(cond, Mux(w == bound + 1, w, w + 1), 0))
        return w

    def _pairing(self, m, p, dut, env):
        """Every header judged once, its beats passed to the engine or dropped, in order."""
        cfg, C = self.cfg, CHUNKS
        unit, eng, pt = dut.unit, dut.engine, dut.partial
        hdr_take = unit.part.valid & unit.part.ready
        taken, refused = unit.part_taken, unit.part_refused
        verdict = taken | refused
        p_fire = env["p_fire"]
        judging = Signal(2, name="ref_headers_unjudged")
        owed = Signal(range(C + 1), name="ref_row_beats_owed")
        passing = Signal(name="ref_row_passed")
        m.d.sync += [judging.eq(judging + hdr_take - verdict), owed.eq(Mux(verdict, C, owed) - p_fire)]
        with m.If(verdict):
            m.d.sync += passing.eq(taken)
        p.check(~verdict | ((judging != 0) & ~(taken & refused)),
                "a verdict for no header taken, or both verdicts at once")
        p.check(~hdr_take | ((judging == 0) & (owed == 0)),
                "a header taken while the last row is unjudged or still owes beats")
        p.check(~p_fire | ((owed != 0) & (judging == 0)), "a partial beat taken that no judged row owes")
        # the op made for a taken row: its record and slot
        row = Signal(pt.payload.shape(), name="ref_row_header")
        with m.If(hdr_take):
            m.d.sync += row.eq(pt.payload)
        made = Signal(name="ref_op_made")
        m.d.sync += made.eq(taken)
        o = unit.op.payload
        p.check(~made | (unit.op.valid & (o.index == record_of(cfg, env["node"], row.src_node, row.token))
                         & (o.slot == row.slot) & (o.kind <= Op.ONLY)),
                "the op made for a row not in the op register, or not naming the row's record and slot")
        # y: the passed beats, in order, with their data (a shadow queue)
        y_fire = eng.y.valid & eng.y.ready
        push = p_fire & passing
        Q = 4
        yq = Signal(range(Q + 1), name="ref_y_queued")
        sh = [Signal(len(eng.y.payload), name=f"ref_y_data{i}") for i in range(Q)]
        m.d.sync += yq.eq(yq + push - y_fire)
        for i in range(Q):                            # (pop shifts; the push lands at the end)
            src = sh[i + 1] if i + 1 < Q else sh[i]
            nxt = Mux(y_fire, src, sh[i])
            at = Mux(y_fire, yq - 1, yq)
            m.d.sync += sh[i].eq(Mux(push & (at == i), pt.payload.data, nxt))
        p.check(~eng.y.valid | (yq != 0), "a y beat offered that no passed row owes (a refused row's, or invented)")
        p.check(~eng.y.valid | (yq == 0) | (eng.y.payload == sh[0]),
                "a y beat not the oldest passed beat's data")
        # y against the ops: those the unit made for rows, those the engine took
        by_unit = Signal(4, name="ref_y_owed_made")
        by_eng = Signal(4, name="ref_y_owed_taken")
        e_take = eng.op.valid & eng.op.ready
        m.d.sync += [by_unit.eq(by_unit + Mux(taken, C, 0) - y_fire),
                     by_eng.eq(by_eng + Mux(e_take & (eng.op.payload.kind != Op.FLUSH), C, 0) - y_fire)]
        p.check(~eng.y.valid | (by_unit != 0), "a y beat offered no op the unit made owes")
        p.check(~y_fire | (by_eng != 0), "a y beat taken no op the engine took owes")
        # covers
        p.cover(refused & (judging == 1), "a row refused")
        p.cover(y_fire & (by_eng == 1) & (yq == 1), "a passed row's last beat taken by the engine")
        p.cover(e_take & (eng.op.payload.kind == Op.FLUSH), "a FLUSH op taken by the engine")
        # (top-2: a sum's second part is its last -- WRITE then LAST, no ADD; the LAST reads
        # the record the WRITE writes, the hazard check's wait)
        p.cover(e_take & (eng.op.payload.kind == Op.LAST), "a LAST taken by the engine")
        return {"judging": judging, "owed": owed, "passing": passing, "row": row, "yq": yq, "sh": sh,
                "by_unit": by_unit, "by_eng": by_eng}

    def _invariants(self, m, p, dut, regs, env, ref):
        """The strengthening invariants (module docstring)."""
        lay = dut.engine.lay["context"]
        Y, y_lvl, y_ok = self.fifo(m, regs, "chunks", 2, len(dut.engine.y.payload))
        X, _, x_ok = self.fifo(m, regs, "engine.contexts", PROOF_DEPTHS["contexts"], lay.size)
        p.check(y_ok & x_ok, "invariant: a FIFO's pointers are not consume + inner_level")
        self._intake_invariants(p, regs, env, ref)
        self._y_invariants(p, regs, ref, Y, y_lvl, X, lay)
        if self.hangs:
            ops = self._engine_invariants(p, regs, env, X, lay)
            self._unit_invariants(m, p, dut, regs, env, ops)

    def _engine_invariants(self, p, regs, env, X, lay):
        """The engine's ops in flight against its pipeline (what bounds its drain): the
        scoreboard's ring, its ops' chunks still to issue or live, the reads not answered."""
        C, N = CHUNKS, PROOF_DEPTHS["ops_in_flight"]
        fv, head, tail = regs["engine.flight_valid"], regs["engine.flight_head"], regs["engine.flight_tail"]
        p.check(Cat((tail == t) & (head == (t + c) % N) & (fv == sum(1 << ((t + k) % N) for k in range(c)))
                    for t in range(N) for c in range(N + 1)).any(),
                "invariant: the scoreboard's valid entries are not tail .. head - 1")
        _, beat_out = beat_layouts(ELEMENTS, lay.size)
        pipe = [(regs["engine.datapath.o__valid"], data.View(beat_out, regs["engine.datapath.o__payload"]).tag)]
        stages = ["in", *(f"s{k}" for k in range(PROOF_DEPTHS["latency"] - 2))]      # (DatapathControl's)
        pipe += [(regs[f"engine.datapath.{st}_valid"], regs[f"engine.datapath.{st}_tag"]) for st in reversed(stages)]
        pos = [(v, data.View(lay, c)) for v, c in pipe + X]
        p.check(Cat(~v | ((c.kind <= Op.FLUSH) & (c.last == (c.chunk == C - 1))) for v, c in pos).all(),
                "invariant: a live context of no op kind, or its last flag not its chunk's")
        cur, active = data.View(lay, regs["engine.issue"]), regs["engine.issue_active"]
        K = self.cfg.topk
        p.check(Cat(~v | _op_parts(c, K) for v, c in [*pos, (active, cur)]).all(),
                "invariant: a live context, or the op issued, of parts its kind does not allow")
        op = data.View(op_layout(self.cfg), regs["unit.op_out"])
        p.check(~regs["unit.op_valid"] | _op_parts(op, K), "invariant: the op register's parts not as its kind allows")
        n = count_ones([fv[i] for i in range(N)])
        p.check(n == count_ones([v & c.last for v, c in pos]) + active,
                "invariant: the ops in flight are not the last chunks live and the op issued")
        p.check(_ops_in_flight(regs, pos, active, cur, N),
                "invariant: a live context, or the op issued, not its scoreboard entry's record and write "
                "(the ops in flight in pipeline order from the tail)")
        p.check(_chunks_in_order(pos, active, cur, C),
                "invariant: the live chunks, oldest first, then the one to issue, not each op's in order "
                "(the oldest's first chunks may be gone)")
        reads = count_ones([v & data.View(lay, d).read for v, d in X])
        p.check(env["pending"] == reads, "invariant: the reads not answered are not the queued contexts that read")
        return [(v & c.last, c) for v, c in pos] + [(active, cur), (regs["unit.op_valid"], op)]

    def _unit_invariants(self, m, p, dut, regs, env, ops):
        """The unit's flush request against the harness's; its records, the record read,
        and each record's ops (``ops``: in flight by their last chunks, oldest first, then
        the op issued and the op register's) its sums' in order."""
        u = regs["unit.reduce_state"]
        ust = _states(u)
        req, asked = regs["unit.flush_req"], env["asked"]
        after = Cat(u == ust[k] for k in ("IDLE", "SWEEP", "SWEEP_READ", "SWEEP_DO")).any()
        p.check(~req | asked | after, "invariant: a flush request the harness did not see (nor one during a sweep)")
        p.check(~asked | req | (u == ust["SWEEP"]), "invariant: a flush seen, neither requested nor sweeping")
        lay = dut.unit.record
        words, connect = memory_words(m, "dut.unit.mem", self.cfg.reduce_records, lay.size, "record")
        self.script += connect
        recs = [data.View(lay, w) for w in words]
        p.check(Cat(~r.open | (((r.seen & ~r.expect) == 0) & ((r.seen == 0) | (r.seen != r.expect)))
                    for r in recs).all(),
                "invariant: an open record's parts in are not fewer than its expected slots (or none of none)")
        k = self.cfg.topk
        p.check(Cat(~r.open | (r.n_in == count_ones([r.seen[s] for s in range(k)])) for r in recs).all(),
                "invariant: an open record's count of parts in is not the count of its slots in")
        doing = (u == ust["DO"]) | (u == ust["SWEEP_DO"])
        p.check(~doing | (regs["unit.record_read"] == pick(words, regs["unit.index"])),
                "invariant: the record read is not the table's record at the index")
        follows, newest = _sum_chains(ops, recs, self.cfg.topk)
        p.check(follows, "invariant: a record's op not the next of its sum after its op before (or a new sum's)")
        p.check(newest, "invariant: a record's newest op not its record's state (a sum going on: open, its parts "
                        "in; ended: closed, or opened anew)")

    def _intake_invariants(self, p, regs, env, ref):
        """The intake's state against the reference's row and the unit's operation."""
        C = CHUNKS
        st, left = regs["intake_state"], regs["intake_left"]
        ist = _states(st)
        u = regs["unit.reduce_state"]
        ust = _states(u)
        judging, owed, passing, row = (ref[k] for k in ("judging", "owed", "passing", "row"))
        at = {k: st == v for k, v in ist.items()}
        p.check(~at["HEADER"] | (judging == 0) & (owed == 0),
                "invariant: the intake waits for a header while a row is unjudged or owes beats")
        p.check(~at["VERDICT"] | (judging == 1) & (owed == 0) & (left == C),
                "invariant: the intake waits for a verdict without one header unjudged")
        p.check(~(at["PASS"] | at["DROP"]) | ((judging == 0) & (owed == left) & (left >= 1) & (left <= C)
                                               & (passing == at["PASS"])),
                "invariant: the intake's row beats left are not the judged row's owed")
        p.check(Cat(u == v for v in ust.values()).any(), "invariant: the unit's state is none of its states")
        part_op = ((u == ust["READ"]) | (u == ust["DO"])) & ~regs["unit.cur_is_open"]
        p.check(at["VERDICT"] == part_op, "invariant: the intake waits for a verdict and the unit reads no part")
        p.check(~at["VERDICT"] | ((regs["unit.index"] == record_of(self.cfg, env["node"], row.src_node, row.token))
                                 & (regs["unit.cur_slot"] == row.slot)),
                "invariant: the part the unit reads is not the row's record and slot")
        p.check(~at["VERDICT"] | (regs["unit.cur_slot_bit"] == Cat(row.slot == s for s in range(self.cfg.topk))),
                "invariant: the slot bit the unit reads with is not the row's slot decoded")

    def _y_invariants(self, p, regs, ref, Y, y_lvl, X, lay):
        """The y beats owed against the intake's FIFO, the unit's op register and the
        engine's op being issued and its queued contexts."""
        C = CHUNKS
        yq, sh, by_unit, by_eng = (ref[k] for k in ("yq", "sh", "by_unit", "by_eng"))
        op = data.View(op_layout(self.cfg), regs["unit.op_out"])
        op_valid = regs["unit.op_valid"]
        cur = data.View(lay, regs["engine.issue"])
        active = regs["engine.issue_active"]
        p.check((yq == y_lvl) & Cat(~live | (d == sh[i]) for i, (live, d) in enumerate(Y)).all(),
                "invariant: the passed beats queued are not the intake FIFO's entries")
        in_pass = regs["intake_state"] == _states(regs["intake_state"])["PASS"]
        p.check(by_unit == yq + Mux(in_pass, regs["intake_left"], 0),
                "invariant: the y owed by the unit's ops are not the beats queued and the passing row's left")
        p.check(~op_valid | (op.kind <= Op.FLUSH), "invariant: the op register holds no op kind")
        p.check(by_unit == by_eng + Mux(op_valid & (op.kind != Op.FLUSH), C, 0),
                "invariant: the y owed by the unit's ops are not the engine's and the op register's")
        p.check(~active | (cur.last == (cur.chunk == C - 1)), "invariant: the op issued's last chunk flag")
        queued = count_ones([live & (data.View(lay, d).kind != Op.FLUSH) for live, d in X])
        p.check(by_eng == queued + Mux(active & (cur.kind != Op.FLUSH), C - cur.chunk, 0),
                "invariant: the y owed by the engine's ops are not its queued contexts' and the op issued's")


def _chunks_in_order(pos, active, cur, chunks):
    """The live contexts of ``pos`` (oldest first, bubbles between them) and the chunk to
    issue (``cur``, while ``active``) are whole ops' chunks in order: each context a first
    chunk after a last one, or the chunk after the one before it, of the same op (kind,
    record, parts, weight) -- but the oldest, whose op's earlier chunks may have left; with
    no op being issued, the newest a last chunk."""
    seen, before, ok = Const(0), None, []
    for v, c in [*pos, (active, cur)]:
        if before is not None:
            same = Cat(c[f] == before[f] for f in ("kind", "index", "parts", "weight")).all()
            follows = Mux(c.chunk == 0, before.chunk == chunks - 1, (before.chunk == c.chunk - 1) & same)
            ok.append(~v | ~seen | follows)
        seen = seen | v
        before = c if before is None else data.View(c.shape(), Mux(v, c.as_value(), before.as_value()))
    ok.append(active | ~seen | (before.chunk == chunks - 1))  # (no op half issued)
    return Cat(*ok).all()


def _ops_in_flight(regs, pos, active, cur, n):
    """Each live context of ``pos`` (oldest first) and the op issued (``cur``) are of the
    scoreboard entry of their op: the tail's for the oldest op, each last chunk before a
    context one entry on (``n`` entries, a power of two: the ring's pointers wrap)."""
    fi = [regs[f"engine.flight_index{i}"] for i in range(n)]
    fw, tail = regs["engine.flight_writes"], regs["engine.flight_tail"]
    bits = (n - 1).bit_length()

    def of(entry, c):
        return (pick(fi, entry) == c.index) & (fw.bit_select(entry, 1) == _writes(c.kind)) & (
            c.read == _reads(c.kind, c.parts))
    ok, older = [], Const(0, bits)
    for v, c in pos:
        ok.append(~v | of((tail + older)[:bits], c))
        older = (older + (v & c.last))[:bits]
    ok.append(~active | of((tail + older)[:bits], cur))
    return Cat(*ok).all()


def _sum_chains(ops, recs, k):
    """Each op of ``ops`` (valid, op; oldest first) of a record, after the record's op
    before it: the next part of that op's sum (a WRITE or ADD with n parts: an ADD or LAST
    of n + 1, or a FLUSH of n), or a new sum's first op (WRITE, ONLY, a FLUSH of none);
    the newest op of a record against its record in ``recs``: a sum going on (WRITE, ADD
    of n parts) open with n parts in, else closed or opened anew (no part in).
    Returns (follows, newest)."""
    def goes_on(a):
        return (a.kind == Op.WRITE) | (a.kind == Op.ADD)

    def after(a, b):
        nxt = (((b.kind == Op.ADD) | (b.kind == Op.LAST)) & (b.parts == a.parts + 1)) | (
            (b.kind == Op.FLUSH) & (b.parts == a.parts))
        new = (b.kind == Op.WRITE) | (b.kind == Op.ONLY) | ((b.kind == Op.FLUSH) & (b.parts == 0))
        return Mux(goes_on(a), nxt, new)

    def between(i, j, index):
        return Cat(Const(0), *(v & (o.index == index) for v, o in ops[i + 1:j])).any()
    follows, newest = [], []
    for j, (vb, b) in enumerate(ops):
        for i, (va, a) in enumerate(ops[:j]):
            follows.append(~(va & vb & (a.index == b.index)) | between(i, j, b.index) | after(a, b))
        r = data.View(recs[0].shape(), pick([x.as_value() for x in recs], b.index))
        n_in = count_ones([r.seen[s] for s in range(k)])
        state = Mux(goes_on(b), r.open & (n_in == b.parts), ~r.open | (r.seen == 0))
        newest.append(~vb | between(j, len(ops), b.index) | state)
    return Cat(*follows).all(), Cat(*newest).all()


def _op_parts(op, k):
    """An op's parts as its kind allows at top-``k``: a sum's first part (WRITE, ONLY) 1, a
    middle one (ADD) 2 .. k - 1, its last (LAST) 2 .. k, a FLUSH of an open sum fewer than k."""
    n = op.parts
    return (((op.kind == Op.WRITE) & (n == 1)) | ((op.kind == Op.ONLY) & (n == 1))
            | ((op.kind == Op.ADD) & (n >= 2) & (n < k)) | ((op.kind == Op.LAST) & (n >= 2) & (n <= k))
            | ((op.kind == Op.FLUSH) & (n < k)))


def _states(state) -> dict:
    """An FSM's state register's encoding, by state name (from its decoder)."""
    out = {}
    for v in range(1 << len(state)):
        try:
            out[state.decoder(v).split("/")[0]] = v
        except KeyError:
            pass
    return out


def _resolving(part):
    """``part`` elaborating into a module whose FSM transitions are plain assignments
    (:func:`.common.elaborate_into` reads the statements' targets, which a transition,
    resolved only when the design is built, does not name)."""
    elaborate = part.elaborate

    def resolved(platform):
        dm = elaborate(platform)
        dm._flush()
        for domain, stmts in list(dm._statements.items()):
            dm._statements[domain] = resolve_statements(stmts)
        return dm
    part.elaborate = resolved


def _elaborate_resolved(m, dut, platform):
    """The path elaborated into ``m`` as ``dut``, with its unit, engine, the engine's
    FIFO and datapath and the intake's FIFO: their registers by name."""
    _resolving(dut)
    _resolving(dut.unit)
    return elaborate_into(m, "dut", dut, platform,
                          into=("unit", "engine", "engine.contexts", "engine.datapath", "chunks"))


def property_set() -> dict:
    """The reduce path's property set, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists it; kept here so that file holds one line of it). Times: module docstring."""
    return dict(name="relay-reduce-path", component="relay reduce path",
                config="tiny/reduce-small: 4 records, top-2, 2-chunk rows, 1 element; the engine's context "
                       "FIFO 4, datapath control 4 cycles",
                build=lambda: ReducePathHarness(small_config(), invariants=True),
                modes={"prove": PROVE_K, "cover": COVER_DEPTH}, smoke={"bmc": SMOKE_DEPTH},
                note=f"protocol v3: the reduce path (unit, engine, intake) never hangs -- a partial beat "
                     f"offered taken within {HANG_WAIT} cycles, an open within {OPEN_WAIT}, a flush's sweep "
                     f"over within {SWEEP_WAIT}, with the outputs ready, the memory answering, no flush (for "
                     f"a row no open; for a sweep the passing row's beats offered) -- and the intake pairs "
                     f"rows and ops: each header taken judged once, the next only after the row's beats, a "
                     f"taken row's op naming its record and slot, its beats the engine's y in order, a "
                     f"refused row's dropped; unbounded (k-induction, k = {PROVE_K}, the bounds' window) "
                     f"with the strengthening invariants of reduce_path.py; the bounds are the least the "
                     f"induction proves, covers reach {HANG_SEEN}, {OPEN_SEEN} and {SWEEP_SEEN} within "
                     f"{COVER_DEPTH} cycles (longer waits need longer runs: reduce_path.py)")
