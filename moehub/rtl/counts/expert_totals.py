"""Per-expert counts announced up front (protocol v2, ``count_packets``).

A source may send, before or among its rows, a count packet per expert of this GPU: how
many rows it sends there this layer. Once every source's count for an expert is in, the
expert's total is known; the moment that many rows are allocated, further rows of it are
refused (``met``: the allocator drops them as COUNT_MISMATCH, like POST_EOS), and the moment
they are all complete the expert is *final*: the tracker writes its final count and its
last partial tile's flag then, not at the end-of-layer sweep, which skips it
(:meth:`moehub.spec.model.HubModel._final_if_complete`).

State per expert: the announced total, how many sources announced, the rows completed, a
final bit; per (source, expert) a bit ``seen`` that refuses a repeated count packet
(COUNT_DUPLICATE). Experts that become ready in the same cycle are handed to the tracker
one a cycle, lowest first (``final_valid``/``final_ready``): final words share the
tracker's one control port with the flags.
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig, field_bits


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
        Pulses: a repeated count packet (COUNT_DUPLICATE, two cycles after it); the last
        count of an expert below its rows already allocated (COUNT_MISMATCH, four cycles
        after it).

    Latency: a count packet reaches ``met``/``short`` three cycles after it is presented
    (registered, checked, added), a completion one cycle after; an expert ready is handed
    over a cycle after it is ready.
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
        total = [Signal(self.total_bits(), name=f"total{x}") for x in range(E)]
        announced = [Signal(range(S + 1), name=f"announced{x}") for x in range(E)]
        completed = [Signal(c.cap_bits, name=f"completed{x}") for x in range(E)]
        all_in = Signal(E, name="all_in")
        m.d.comb += [all_in[x].eq(announced[x] == S) for x in range(E)]
        add, last_in = self._count_packets(m, total, announced)
        self._compares(m, total, completed, all_in, last_in)
        for x in range(E):
            with m.If(self.done_valid & (self.done_expert == x)):
                m.d.sync += completed[x].eq(completed[x] + 1)
        with m.If(self.clear):
            m.d.sync += [t.eq(0) for t in total] + [a.eq(0) for a in announced] \
                + [k.eq(0) for k in completed] + [add.eq(0)]
        return m

    def _count_packets(self, m, total, announced):
        """Count packets in three stages: registered (I), refused if repeated (seen, D),
        added to the expert's total (A). A repeat is decided and recorded in the same stage,
        so back-to-back packets of one (source, expert) see each other. Returns the
        registered one-hot of the packet adding in A and the experts whose last count came."""
        c, E, S = self.cfg, self.cfg.experts, self.cfg.sources
        # (I) the packet registered, its source and expert as one-hots
        i_valid, i_cnt = Signal(name="i_valid"), Signal(c.count_bits, name="i_cnt")
        src_oh = Signal(S, name="i_src_oh")
        exp_oh = Signal(E, name="i_exp_oh")
        m.d.sync += [i_valid.eq(self.cnt_valid), i_cnt.eq(self.cnt_count)]
        m.d.sync += [src_oh[s].eq(self.cnt_src == s) for s in range(S)]
        m.d.sync += [exp_oh[x].eq(self.cnt_expert == x) for x in range(E)]
        # (D) seen: a bit per (source, expert), the packet's chosen by the one-hots
        seen = [Signal(E, name=f"seen{s}") for s in range(S)]
        repeat = Signal(name="repeat")
        m.d.comb += repeat.eq(Cat(src_oh[s] & (seen[s] & exp_oh).any() for s in range(S)).any())
        add = Signal(E, name="add")                 # (A) one-hot: the expert this count adds to
        a_cnt = Signal(c.count_bits, name="a_cnt")
        dup = Signal(name="dup_r")
        m.d.sync += [add.eq(Mux(i_valid & ~repeat, exp_oh, 0)), a_cnt.eq(i_cnt),
                     dup.eq(i_valid & repeat)]
        for s in range(S):
            with m.If(i_valid & ~repeat & src_oh[s]):
                m.d.sync += seen[s].eq(seen[s] | exp_oh)
        m.d.comb += self.dup.eq(dup)
        last_in = Signal(E, name="last_in")         # the expert's last count was added (A)
        for x in range(E):
            with m.If(add[x]):
                m.d.sync += [total[x].eq(total[x] + a_cnt), announced[x].eq(announced[x] + 1)]
        m.d.sync += [last_in[x].eq(add[x] & (announced[x] == S - 1)) for x in range(E)]
        with m.If(self.clear):
            m.d.sync += [s_.eq(0) for s_ in seen] + [i_valid.eq(0), last_in.eq(0)]
        return add, last_in

    def _compares(self, m, total, completed, all_in, last_in):
        """met, short, the mismatch of a last count, and the final hand-off -- each compare
        from registers; ``ready`` is registered, then masked by ``final`` (which the
        hand-off sets), so an expert is handed over once."""
        E = self.cfg.experts
        m.d.comb += [self.met[x].eq(all_in[x] & (self.rows[x] >= total[x])) for x in range(E)]
        m.d.comb += [self.short[x].eq(all_in[x] & (self.rows[x] < total[x])) for x in range(E)]
        over = Signal(name="over_r")
        m.d.sync += over.eq(Cat(last_in[x] & (self.rows[x] > total[x]) for x in range(E)).any())
        m.d.comb += self.over.eq(over)
        ready = Signal(E, name="ready")
        m.d.sync += [ready[x].eq(all_in[x] & (completed[x] == total[x]) & (self.rows[x] == total[x]))
                     for x in range(E)]
        final = Signal(E, name="final_r")
        cand = Signal(E, name="cand")
        m.d.comb += cand.eq(ready & ~final)
        with m.If(cand.any()):
            m.d.comb += self.final_valid.eq(1)
            for x in reversed(range(E)):
                with m.If(cand[x]):
                    m.d.comb += self.final_expert.eq(x)
        with m.If(self.final_valid & self.final_ready):
            m.d.sync += final.eq(final | (1 << self.final_expert))
        m.d.comb += self.final.eq(final)
        with m.If(self.clear):
            m.d.sync += [final.eq(0), ready.eq(0), over.eq(0)]
