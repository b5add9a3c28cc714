"""When an expert becomes final, in the order of the tracker's event stream (protocol v2).

Why in the tracker's stream: the hub's control writes are one ordered port, and the model
writes an expert's final count and last partial flag right after the packet that made it
final -- the completion of its last row, or its last count packet
(:meth:`moehub.verif.model.HubModel._final_if_complete`) -- and before the words of any
later packet. The event stream is in that same packet order (metadata and completion of
every allocated row, and every count packet the packet manager applied), so the state here
is updated event by event as the tracker pops them, and the expert an event makes final is
known at its pop: the tracker then injects the final words behind it.

Per expert: the announced total, the sources announced, the rows allocated (metadata
events) and completed (completion events), a final bit. An expert is final when every
source's count is in and ``completed == rows == total``; the count packets the packet
manager passes on are already checked (no repeat, expert in range), so there is no seen
bit here.
"""
from amaranth import Module, Signal
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
        c, E, S = self.cfg, self.cfg.experts, self.cfg.sources
        tb = total_bits(c)
        total = [Signal(tb, name=f"fc_total{x}") for x in range(E)]
        ann = [Signal(range(S + 1), name=f"fc_announced{x}") for x in range(E)]
        meta = [Signal(c.cap_bits, name=f"fc_rows{x}") for x in range(E)]
        done = [Signal(c.cap_bits, name=f"fc_done{x}") for x in range(E)]
        final = Signal(E, name="fc_final")
        self._fire(m, total, ann, meta, done, final)
        for x in range(E):
            with m.If(self.pop & (self.expert == x)):
                with m.If(self.meta):
                    m.d.sync += meta[x].eq(meta[x] + 1)
                with m.If(self.cpl):
                    m.d.sync += done[x].eq(done[x] + 1)
                with m.If(self.cnt):
                    m.d.sync += [total[x].eq(total[x] + self.count), ann[x].eq(ann[x] + 1)]
                with m.If(self.fire):
                    m.d.sync += final[x].eq(1)
        m.d.comb += self.final.eq(final)
        m.d.comb += [self.short[x].eq((ann[x] == S) & (self.rows[x] < total[x])) for x in range(E)]
        with m.If(self.clear):
            m.d.sync += [v.eq(0) for v in total + ann + meta + done] + [final.eq(0)]
        return m

    def _fire(self, m, total, ann, meta, done, final):
        """The popped event's expert is final after it: a completion that brings the
        completed rows to rows == total with every count in, or the last count packet
        whose total equals the rows, all complete."""
        c, E, S = self.cfg, self.cfg.experts, self.cfg.sources
        oh = [self.expert == x for x in range(E)]
        tot = select([(oh[x], total[x]) for x in range(E)], len(total[0]))
        an = select([(oh[x], ann[x]) for x in range(E)], range(S + 1))
        rows = select([(oh[x], meta[x]) for x in range(E)], c.cap_bits)
        cpl = select([(oh[x], done[x]) for x in range(E)], c.cap_bits)
        fin = select([(oh[x], final[x]) for x in range(E)], 1)
        by_cpl = self.cpl & (an == S) & (cpl + 1 == rows) & (rows == tot)
        by_cnt = self.cnt & (an + 1 == S) & (cpl == rows) & (rows == tot + self.count)
        m.d.comb += [self.rows_x.eq(rows), self.fire.eq(self.pop & ~fin & (by_cpl | by_cnt))]
