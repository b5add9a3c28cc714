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
latency) and are not run here: at those depths the bounds lie past any affordable BMC.

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
  in a row with the outputs ready and the memory answering.
* **pairing**: every header the unit takes gets exactly one verdict (``part_taken`` or
  ``part_refused``, never both, none without a header judged); the next header is taken
  only once the last row's verdict is in and its ``C`` beats are taken; a partial beat is
  taken only for a judged row owing it; a taken row's op (in the op register from the
  next cycle) names the row's record and slot and is a part's (WRITE..ONLY); a ``y`` beat
  is offered only while a passed row's beat is owed to the engine, and carries the oldest
  such beat's data (so a refused row's beats never reach the engine, a passed row's all
  do, in order); a ``y`` beat is offered only while an op the unit made for a row owes one,
  and taken only while an op the engine took owes one (FLUSH ops take none).

Bounded: BMC to :data:`BMC_DEPTH` = 30 cycles from reset, no k-induction. The properties
alone are not inductive (the unit's record table, the engine's scoreboard, context FIFO and
datapath registers and the intake's FIFO can start in states no run reaches), and the
strengthening invariants would be :mod:`.reduce`'s for the engine plus ones for the unit's
records and the intake -- not written. Each step past 30 costs 1.5-2x the one before
(steps 31, 32, 33: 25, 40, 45 s under load 3). The no-hang bounds are the least that hold
to that depth, each reached by a cover and one less failing -- but each failure is found
near the last step (the open's 3 at step 25, 4 at 28; the row's 6 at 29; the sweep's 13 at
29): a longer wait needs a busier state (more ops in flight, a LAST behind its WRITE in the
datapath, FLUSH ops left by a sweep), which takes more cycles from reset to build. So the
bounds hold for every run of 30 cycles, and a deeper BMC finds longer waits (BMC 34: a
15-cycle sweep and an open waiting 6 cycles at step 30, a row's beat waiting 8 at step
31): what is established is that nothing hangs within 30 cycles, not the bound of every
run. (Also the intake's FIFO, 2
entries, holds a whole 2-chunk row here; the hub's rows are hundreds of chunks.)
"""
from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal

from ...rtl.relay.reduce_path import ReducePath
from ...rtl.relay.reduce_unit import Op
from .common import Props, any_const, any_seq, reset_first
from .plant import Plant, PlantedHarness
from .reduce import CHUNKS, ELEMENTS, PROOF_DEPTHS, DatapathControl, small_config

#: the most cycles in a row a partial beat offered waits with the outputs ready, the
#: memory answering, no open offered and no flush -- the least that holds within
#: BMC_DEPTH (reached at step 29, 6 fails there; it grows with the depth: BMC 34 finds 8
#: at step 31, module docstring)
HANG_WAIT = 7
#: the same for an open offered (reached at step 28, 4 fails there)
OPEN_WAIT = 5
#: the most cycles in a row a flush's sweep lasts with the outputs ready and the memory
#: answering: 4 records at 3 cycles each, and the FLUSH ops' waits for the op register
#: (reached at step 29, 13 fails there)
SWEEP_WAIT = 14
#: the BMC's and the covers' depths (cycles from reset; each step past 30 about 1.5-2x
#: dearer: steps 31-33 took 25-45 s each), the fast set's BMC
BMC_DEPTH, COVER_DEPTH, SMOKE_DEPTH = 30, 30, 12
#: the engine's context FIFO and the path's FIFO as flip-flops
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

    def __init__(self, cfg, plant: str | None = None, invariants: bool = False):
        super().__init__(cfg, plant, invariants)
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
        dut = self._path()
        m.submodules.dut = dut                        # (no invariants: no registers read by name)
        reset_first(m)
        env = self._environment(m, p, dut)
        self._no_hang(m, p, dut, env)
        self._pairing(m, p, dut, env)
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

    def _no_hang(self, m, p, dut, env):
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
        w_part = self._wait(m, calm & pt.valid & ~pt.ready & ~op.valid, HANG_WAIT, "partial")
        p.check(w_part <= HANG_WAIT, "a partial beat held back more than HANG_WAIT cycles in a row with the "
                                     "outputs ready, the memory answering, no open offered and no flush (a hang)")
        p.cover(w_part == HANG_WAIT, "a partial beat held back HANG_WAIT cycles in a row")
        w_open = self._wait(m, calm & op.valid & ~op.ready, OPEN_WAIT, "open")
        p.check(w_open <= OPEN_WAIT, "an open held back more than OPEN_WAIT cycles in a row with the outputs "
                                     "ready, the memory answering and no flush (a hang)")
        p.cover(w_open == OPEN_WAIT, "an open held back OPEN_WAIT cycles in a row")
        sw = self._wait(m, free & dut.sweeping, SWEEP_WAIT, "sweep")
        p.check(sw <= SWEEP_WAIT, "a sweep longer than SWEEP_WAIT cycles in a row with the outputs ready and the "
                                  "memory answering (a hang)")
        p.cover(sw == SWEEP_WAIT, "a sweep SWEEP_WAIT cycles long with the outputs ready")

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


def property_set() -> dict:
    """The reduce path's property set, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists it; kept here so that file holds one line of it). Measured on the 2-core machine
    under load (~3): BMC 30 33 s, the covers within 30 steps 35 s (reached at steps 7-29),
    the smoke BMC 12 3 s; each planted bug fails a BMC within 22 steps in 3-6 s."""
    return dict(name="relay-reduce-path", component="relay reduce path",
                config="tiny/reduce-small: 4 records, top-2, 2-chunk rows, 1 element; the engine's context "
                       "FIFO 4, datapath control 4 cycles",
                build=lambda: ReducePathHarness(small_config()),
                modes={"bmc": BMC_DEPTH, "cover": COVER_DEPTH}, smoke={"bmc": SMOKE_DEPTH},
                note="protocol v3: the reduce path (unit, engine, intake) never hangs -- a partial beat "
                     "offered taken within 7 cycles, an open within 5, a flush's sweep over within 14, "
                     "with the outputs ready, the memory answering, no flush (and for a row no open) -- and "
                     "the intake pairs rows and ops: each header taken judged once, the next only after "
                     "the row's beats, a taken row's op naming its record and slot, its beats the engine's "
                     "y in order, a refused row's dropped; bounded: no invariants for k-induction, each "
                     "step past 30 ~2x dearer, and the bounds are the least within 30 cycles (a deeper "
                     "run finds longer: reduce_path.py)")
