"""When an expert becomes final, in the order of the tracker's event stream (protocol v2).

Why in the tracker's stream: the hub's control writes are one ordered port, and the model
writes an expert's final count and last partial flag right after the packet that made it
final -- the completion of its last row, or its last count packet
(:meth:`moehub.verif.model.HubModel._final_if_complete`) -- and before the words of any
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
from amaranth import Cat, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig
from .count_gate import total_bits
from .logic import select


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
    rows_x : Out(cap_bits)
        Rows of ``expert`` as the stream has them (its final count when it fires).
    final, short : Out(experts)
        Final words written (or being written); counts all in and rows below the total.
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
            "fire": Out(1), "rows_x": Out(cfg.cap_bits), "final": Out(E), "short": Out(E),
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
        self._fire(m, st, final)
        self._update(m, st, final)
        m.d.comb += self.final.eq(final)
        m.d.comb += [self.short[x].eq((st["ann"][x] == c.sources) & (self.rows[x] < st["total"][x]))
                     for x in range(E)]
        return m

    def _update(self, m, st, final):
        """The popped event into its expert's state (cleared at layer start)."""
        for x in range(self.cfg.experts):
            with m.If(self.pop & (self.expert == x)):
                with m.If(self.meta):
                    m.d.sync += [st["meta"][x].eq(st["meta"][x] + 1), st["pend"][x].eq(st["pend"][x] + 1),
                                 st["ngap"][x].eq(st["ngap"][x] + 1)]
                with m.If(self.cpl):
                    m.d.sync += st["pend"][x].eq(st["pend"][x] - 1)
                with m.If(self.cnt):
                    m.d.sync += [st["total"][x].eq(st["total"][x] + self.count),
                                 st["ann"][x].eq(st["ann"][x] + 1),
                                 st["ngap"][x].eq(st["ngap"][x] - self.count)]
                with m.If(self.fire):
                    m.d.sync += final[x].eq(1)
        with m.If(self.clear):
            m.d.sync += [v.eq(0) for vs in st.values() for v in vs] + [final.eq(0)]

    def _fire(self, m, st, final):
        """The popped event's expert is final after it: a completion of its last row, all
        counts in and met, or its last count packet bringing the total to its rows, every
        row complete (see the module docstring)."""
        c, E, S = self.cfg, self.cfg.experts, self.cfg.sources
        ready_cpl = Signal(E, name="fc_ready_cpl")
        ready_cnt = Signal(E, name="fc_ready_cnt")
        m.d.comb += [
            ready_cpl.eq(Cat(~final[x] & (st["ann"][x] == S) & (st["pend"][x] == 1) & (st["ngap"][x] == 0)
                             for x in range(E))),
            ready_cnt.eq(Cat(~final[x] & (st["ann"][x] == S - 1) & (st["pend"][x] == 0)
                             & (st["ngap"][x] == self.count) for x in range(E))),
        ]
        oh = Signal(E, name="fc_oh")
        m.d.comb += oh.eq(Cat(self.expert == x for x in range(E)))
        m.d.comb += [
            self.rows_x.eq(select([(oh[x], st["meta"][x]) for x in range(E)], c.cap_bits)),
            self.fire.eq(self.pop & (((oh & ready_cpl).any() & self.cpl) | ((oh & ready_cnt).any() & self.cnt))),
        ]
