"""Per-expert counts announced up front (protocol v2, ``count_packets``; issue 14).

A source may send, before or among its rows, a count packet per expert of this GPU: how
many rows it sends there this layer. Once every source's count for an expert is in, the
expert's total is known; the moment that many rows are allocated, further rows of it are
refused (``met``: the allocator drops them as COUNT_MISMATCH, like POST_EOS), and the moment
they are all complete the expert is *final*: the tracker writes its final count and its
last partial tile's flag then, not at the end-of-layer sweep, which skips it
(:meth:`moehub.verif.model.HubModel._final_if_complete`).

State per expert: the announced total, how many sources announced, the rows completed, a
final bit; per (source, expert) a bit ``seen`` that refuses a repeated count packet
(COUNT_DUPLICATE). Experts that become ready in the same cycle are handed to the tracker
one a cycle, lowest first (``final_valid``/``final_ready``): final words share the
tracker's one control port with the flags.
"""
from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig, field_bits


class ExpertCounts(wiring.Component):
    """Announced counts, completion and the early-final hand-off, per expert.

    Parameters
    ----------
    cfg : HubConfig
        ``count_packets`` is set.

    Attributes
    ----------
    cnt_valid, cnt_src, cnt_expert, cnt_count : In
        A count packet (source and expert already checked in range), one per cycle.
    done_valid, done_expert : In
        A row of ``done_expert`` completed (one per cycle; multicast: one per target).
    rows : In(cap_bits).array(experts)
        Rows allocated per expert (the allocator's ROWS counters).
    clear : In(1)
        Layer start.
    met : Out(experts)
        Counts all in and ``rows >= total``: no more rows of the expert (registered).
    short : Out(experts)
        Counts all in and ``rows < total`` (at the sweep: COUNT_MISMATCH).
    final : Out(experts)
        The expert's final words are written (or handed over this cycle).
    final_valid, final_expert : Out ; final_ready : In(1)
        An expert became final: the tracker writes its count and last partial flag.
    dup, over : Out(1)
        Pulses (a cycle after the packet): a repeated count packet (COUNT_DUPLICATE); the
        last count of an expert below its rows already allocated (COUNT_MISMATCH).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.count_packets:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise ValueError(f"hub[{cfg.name}]: per-expert counts need count_packets")
        self.cfg = cfg
        E, S = cfg.experts, cfg.sources
        super().__init__({
            "cnt_valid": In(1), "cnt_src": In(range(S)), "cnt_expert": In(range(E)),
            "cnt_count": In(cfg.count_bits),
            "done_valid": In(1), "done_expert": In(range(E)),
            "rows": In(cfg.cap_bits).array(E), "clear": In(1),
            "met": Out(E), "short": Out(E), "final": Out(E),
            "final_valid": Out(1), "final_expert": Out(range(E)), "final_ready": In(1),
            "dup": Out(1), "over": Out(1),
        })

    def total_bits(self) -> int:
        """Width of an expert's announced total: every source's count may reach count_bits."""
        c = self.cfg
        return field_bits(c.sources * ((1 << c.count_bits) - 1))

    def elaborate(self, platform):
        m = Module()
        c, E, S = self.cfg, self.cfg.experts, self.cfg.sources
        seen = [Signal(E, name=f"seen{s}") for s in range(S)]
        total = [Signal(self.total_bits(), name=f"total{x}") for x in range(E)]
        announced = [Signal(range(S + 1), name=f"announced{x}") for x in range(E)]
        completed = [Signal(c.cap_bits, name=f"completed{x}") for x in range(E)]
        final = Signal(E, name="final_r")
        all_in = Signal(E, name="all_in")
        m.d.comb += [all_in[x].eq(announced[x] == S) for x in range(E)]
        # ---- a count packet: refused if repeated, else added to its expert's total
        repeat = Signal()
        m.d.comb += repeat.eq(Cat(seen[s].bit_select(self.cnt_expert, 1) & (self.cnt_src == s)
                                  for s in range(S)).any())
        take = self.cnt_valid & ~repeat
        dup, over = Signal(name="dup_r"), Signal(name="over_r")
        m.d.sync += [dup.eq(self.cnt_valid & repeat), over.eq(0)]
        for x in range(E):
            mine = take & (self.cnt_expert == x)
            with m.If(mine):
                m.d.sync += [total[x].eq(total[x] + self.cnt_count), announced[x].eq(announced[x] + 1)]
                # (the last count: its total against the rows already in)
                with m.If((announced[x] == S - 1) & (self.rows[x] > total[x] + self.cnt_count)):
                    m.d.sync += over.eq(1)
            for s in range(S):
                with m.If(mine & (self.cnt_src == s)):
                    m.d.sync += seen[s][x].eq(1)
            with m.If(self.done_valid & (self.done_expert == x)):
                m.d.sync += completed[x].eq(completed[x] + 1)
        m.d.comb += [self.dup.eq(dup), self.over.eq(over)]
        # ---- met / short / ready, from registers
        m.d.comb += [self.met[x].eq(all_in[x] & (self.rows[x] >= total[x])) for x in range(E)]
        m.d.comb += [self.short[x].eq(all_in[x] & (self.rows[x] < total[x])) for x in range(E)]
        ready = Signal(E, name="ready")
        m.d.comb += [ready[x].eq(all_in[x] & ~final[x] & (completed[x] == total[x])
                                 & (self.rows[x] == total[x])) for x in range(E)]
        # ---- hand the lowest ready expert to the tracker
        with m.If(ready.any()):
            m.d.comb += self.final_valid.eq(1)
            for x in reversed(range(E)):
                with m.If(ready[x]):
                    m.d.comb += self.final_expert.eq(x)
        with m.If(self.final_valid & self.final_ready):
            m.d.sync += final.eq(final | (1 << self.final_expert))
        m.d.comb += self.final.eq(final)
        with m.If(self.clear):
            m.d.sync += [s_.eq(0) for s_ in seen] + [t.eq(0) for t in total] \
                + [a.eq(0) for a in announced] + [k.eq(0) for k in completed] + [final.eq(0)]
        return m
