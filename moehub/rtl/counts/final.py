"""When an expert becomes final, in the order of the tracker's event stream (protocol v2).

Why in the tracker's stream: the hub's control writes are one ordered port, and the model
writes an expert's final count and last partial flag right after the packet that made it
final -- the completion of its last row, or its last count packet
(:meth:`moehub.spec.model.HubModel._final_if_complete`) -- and before the words of any
later packet. The event stream is in that same packet order (metadata and completion of
every allocated row, and every count packet the packet manager applied), so the state here
is updated event by event as the tracker pops them, and the expert an event makes final is
known at its pop: the tracker then injects the final words behind it.

An expert is final when every source's count is in and ``completed == rows == total``; the
count packets the packet manager passes on are already checked (no repeat, expert in
range), so there is no seen bit here. Why the state is kept as differences: the check runs
between the event queue's head and the tracker's final-word registers, so it must be a few
gates deep (the first version selected the counters and compared them, behind the
expert's decode: 28.6 FO4). Per expert: ``pend = rows - completed`` (rows in flight),
``ngap = rows - total`` and the sources announced, so that

* a completion makes it final when ``announced == sources``, ``pend == 1`` and ``ngap == 0``;
* a count packet of ``c`` rows when ``announced == sources - 1``, ``pend == 0`` and
  ``ngap == c``;

each a compare of a register with a constant (``ready_cpl``, ``ready_cnt``, formed beside
the decode) or, for ``ngap == c``, of every expert's register with the event's count; the
event's expert then only selects. ``rows`` and ``total`` stay for the final count word and
the sweep's ``short``.
"""
from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from .gate import total_bits
from ..logic import select


class FinalCounts(wiring.Component):
    """Per-expert counts in event order, and the expert an event makes final.

    Parameters
    ----------
    cfg : HubConfig
        ``count_packets`` is set.

    Attributes
    ----------
    pop : In(1)
        An event is taken this cycle: ``meta``, ``cpl`` or ``cnt`` (one of them) of
        ``expert``, ``count`` its count (count events).
    clear : In(1)
        Layer start.
    rows : In(cap_bits).array(experts)
        Rows allocated (the allocator's counters): ``short`` at the sweep.
    fire : Out(1)
        The event popped now makes ``expert`` final (combinational).
    tile_m1 : In(cap_bits)
        Tile rows - 1 (the layer's, zero-extended).
    rows_x : Out(cap_bits)
        Rows of ``expert`` as the stream has them (its final count when it fires).
    part : Out(1)
        Those rows end in a partial tile (``rows_x & tile_m1 != 0``).
    final, short : Out(experts)
        Final words written (or being written); counts all in and rows below the total.
    stall : Out(1)
        The event offered (``cnt``) must not be popped this cycle: a count event was
        popped last cycle (a register and the offer's kind).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.count_packets:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}]: final counts need count_packets")
        self.cfg = cfg
        E = cfg.experts
        super().__init__({
            "pop": In(1), "meta": In(1), "cpl": In(1), "cnt": In(1),
            "expert": In(range(E)), "count": In(cfg.count_bits), "clear": In(1),
            "rows": In(cfg.cap_bits).array(E),
            "tile_m1": In(cfg.cap_bits),
            "fire": Out(1), "rows_x": Out(cfg.cap_bits), "part": Out(1), "final": Out(E), "short": Out(E),
            "stall": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c, E = self.cfg, self.cfg.experts
        tb = total_bits(c)
        st = {
            "total": [Signal(tb, name=f"fc_total{x}") for x in range(E)],
            "ann": [Signal(range(c.sources + 1), name=f"fc_announced{x}") for x in range(E)],
            "meta": [Signal(c.cap_bits, name=f"fc_rows{x}") for x in range(E)],
            "pend": [Signal(c.cap_bits, name=f"fc_pend{x}") for x in range(E)],
            "ngap": [Signal(signed(tb + 2), name=f"fc_ngap{x}") for x in range(E)],
        }
        final = Signal(E, name="fc_final")
        q = self._held_event(m)
        self._fire(m, st, final, q)
        self._update(m, st, q)
        m.d.comb += self.final.eq(final)
        m.d.comb += [self.short[x].eq((st["ann"][x] == c.sources) & (self.rows[x] < st["total"][x]))
                     for x in range(E)]
        # (each expert's own fire: no OR over the experts in front of the final bits)
        m.d.sync += final.eq(final | self._fires)
        with m.If(self.clear):
            m.d.sync += [v.eq(0) for vs in st.values() for v in vs] + [final.eq(0)]
            m.d.sync += [v.eq(0) for k in ("meta", "cpl", "cnt") for v in q[k]] + [self._cnt_popped.eq(0)]
        return m

    def _held_event(self, m):
        """The event popped last cycle, registered per expert (``fc_q_*{x}``: a metadata
        event, a completion, a count of expert x, and the count): it is added to its
        expert's state this cycle from that expert's own registers -- not behind the event
        queue's head and the pop, nor through registers shared by every expert's adders."""
        E = self.cfg.experts
        # (``expert`` decoded here: the per-expert state loads by the one-hot)
        self.oh = Cat(self.expert == x for x in range(E))
        q = {k: [Signal(name=f"fc_q_{k}{x}") for x in range(E)] for k in ("meta", "cpl", "cnt")}
        q["count"] = [Signal(self.cfg.count_bits, name=f"fc_q_count{x}") for x in range(E)]
        q["dneg"] = [Signal(signed(total_bits(self.cfg) + 2), name=f"fc_q_dneg{x}") for x in range(E)]
        for x in range(E):
            hit = self.pop & self.oh[x]
            m.d.sync += [q["meta"][x].eq(hit & self.meta), q["cpl"][x].eq(hit & self.cpl),
                         q["cnt"][x].eq(hit & self.cnt)]
            # (the count is taken from the queue's head whenever it is a count of x, popped
            # or not: it is read only the cycle after a pop of it, and a count of x that
            # follows at the head is not popped that cycle -- the stall below)
            with m.If(self.cnt & self.oh[x]):
                m.d.sync += q["count"][x].eq(self.count)
            # (ngap's addend less one, loaded with any event of x at the head, popped or
            # not -- it is read only the cycle after a pop of x: -count - 1 for a count, 0
            # otherwise -- so the update is one adder from registers, ngap + d + 1, with
            # the event's kind only enabling it; the kind selecting the adder's operand
            # (Yosys shares one adder between + 1 and - count) put the held event's bits,
            # fanned out over the operand, in front of the carry chain: 22.4 FO4 at
            # deepseek-v3-8gpu with count packets)
            with m.If(self.oh[x]):
                m.d.sync += q["dneg"][x].eq(Mux(self.cnt, ~Cat(self.count, Const(0, 1)).as_signed(), 0))
        # (a count event right behind a count event waits a cycle: if of the same expert its
        # check would need the first one's subtraction. Any expert's, not only its own: the
        # stall is then a register's AND with the offer's kind -- behind the expert's decode
        # it sat between the event expander's read pointer and its next state, through the
        # tracker's ready, 34.2 FO4 at 8 targets. Count packets are one per source and
        # expert, so this costs one bubble a count packet at most: sources x experts cycles
        # a layer.)
        cnt_popped = Signal(name="fc_cnt_popped")
        m.d.sync += cnt_popped.eq(self.pop & self.cnt)
        m.d.comb += self.stall.eq(self.cnt & cnt_popped)
        self._cnt_popped = cnt_popped
        return q

    def _update(self, m, st, q):
        """The held event into its expert's state."""
        for x in range(self.cfg.experts):
            with m.If(q["meta"][x] | q["cnt"][x]):
                ngap, w = st["ngap"][x], len(st["ngap"][x])
                m.d.sync += ngap.eq((Cat(Const(1, 1), ngap) + Cat(Const(1, 1), q["dneg"][x]))[1:w + 1])
            with m.If(q["meta"][x]):
                m.d.sync += [st["meta"][x].eq(st["meta"][x] + 1), st["pend"][x].eq(st["pend"][x] + 1)]
            with m.If(q["cpl"][x]):
                m.d.sync += st["pend"][x].eq(st["pend"][x] - 1)
            with m.If(q["cnt"][x]):
                m.d.sync += [st["total"][x].eq(st["total"][x] + q["count"][x]),
                             st["ann"][x].eq(st["ann"][x] + 1)]

    def _fire(self, m, st, final, q):
        """The popped event's expert is final after it: a completion of its last row, all
        counts in and met, or its last count packet bringing the total to its rows, every
        row complete (see the module docstring). The state compared is the registers with
        the held event added, as compares of the registers with constants (or with the
        held count) chosen by the held event's kind -- no adder in front of them."""
        c, E, S = self.cfg, self.cfg.experts, self.cfg.sources
        ready_cpl = Signal(E, name="fc_ready_cpl")
        ready_cnt = Signal(E, name="fc_ready_cnt")
        rows = [Signal(c.cap_bits, name=f"fc_rows_now{x}") for x in range(E)]
        for x in range(E):
            ann, pend, ngap, meta = st["ann"][x], st["pend"][x], st["ngap"][x], st["meta"][x]
            hm, hc, hn = q["meta"][x], q["cpl"][x], q["cnt"][x]
            ann_is = (lambda k: Mux(hn, ann == k - 1, ann == k) if k >= 1 else (ann == k) & ~hn)
            pend_is_1 = Mux(hm, pend == 0, Mux(hc, pend == 2, pend == 1))
            pend_is_0 = ~hm & Mux(hc, pend == 1, pend == 0)
            ngap_is_0 = Mux(hm, ngap == -1, Mux(hn, ngap == q["count"][x], ngap == 0))
            # (a count event behind a count of its expert stalls, so hn needs no case here;
            # behind a metadata event of its expert a row is in flight: pend_is_0 is 0)
            ngap_is_c = ngap == self.count
            m.d.comb += [
                ready_cpl[x].eq(~final[x] & ann_is(S) & pend_is_1 & ngap_is_0),
                ready_cnt[x].eq(~final[x] & ann_is(S - 1) & pend_is_0 & ngap_is_c),
                rows[x].eq(Mux(hm, meta + 1, meta)),
            ]
        oh = self.oh
        self._fires = Signal(E, name="fc_fires")       # the event makes expert x final
        m.d.comb += [
            self.rows_x.eq(select([(oh[x], rows[x]) for x in range(E)], c.cap_bits)),
            # (each expert's partial-tile bit formed from its own registers, the event's
            # expert choosing one bit -- not the compare behind the choice of rows: from
            # the event expander's read pointer through the target and the expert's
            # decode, 28.7 FO4 at deepseek-v3-8gpu with every v2 feature)
            self.part.eq(select([(oh[x], (rows[x] & self.tile_m1) != 0) for x in range(E)], 1)),
            self._fires.eq(Mux(self.pop, oh & Mux(self.cpl, ready_cpl, 0) | oh & Mux(self.cnt, ready_cnt, 0), 0)),
        ]
        # (fire as the OR over the experts of registers -- the event's expert one-hot with
        # each expert's readiness -- and then the event's kind and the pop, which come late
        # (the pop behind the tracker's ready): not the OR of the per-expert fires, which
        # put the kind and the pop in front of a 32-way OR into the sequencer's valid)
        any_cpl, any_cnt = Signal(name="fc_any_cpl"), Signal(name="fc_any_cnt")
        m.d.comb += [any_cpl.eq((oh & ready_cpl).any()), any_cnt.eq((oh & ready_cnt).any()),
                     self.fire.eq(self.pop & ((self.cpl & any_cpl) | (self.cnt & any_cnt)))]
