"""Address allocator: hands out dense row indices in each expert's input region.

Software reserves one region per expert at start-up (``rowspMalloc``-style: a base and a
capacity in rows, written through the CSR port). The allocator keeps one row counter per
expert and grants up to ``lanes`` rows per cycle, several of them for the same expert if
needed: lane ``j`` asking for expert ``e`` gets ``rows[e] + (number of lanes i < j asking
for e this cycle)``, so rows are dense from 0, unique, and ordered by lane within a
cycle. A grant whose row would reach the capacity is refused (overflow); since rows are
handed out in order, every later request for that expert in the cycle is refused too.
"""
from amaranth import Array, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig


class AddressAllocator(wiring.Component):
    """Members
    -------
    req : In(lanes)                       lane j asks for a row (expert in range)
    req_expert : In(expert_bits).array(lanes)
    row : Out(row_bits).array(lanes)      granted row (valid when ok)
    ok : Out(lanes)                       the row fits the region (else: overflow)
    commit : In(1)                        apply this cycle's grants (pipeline advances)
    clear : In(1)                         zero all counters (layer start)
    cap : In(cap_bits).array(experts)     region capacities (CSR)
    rows : Out(cap_bits).array(experts)   rows allocated so far (CSR status, final counts)
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        L, E = cfg.lanes, cfg.experts
        super().__init__({
            "req": In(L),
            "req_expert": In(cfg.expert_bits).array(L),
            "row": Out(cfg.row_bits).array(L),
            "ok": Out(L),
            "commit": In(1),
            "clear": In(1),
            "cap": In(cfg.cap_bits).array(E),
            "rows": Out(cfg.cap_bits).array(E),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        L, E = cfg.lanes, cfg.experts
        counters = [Signal(cfg.cap_bits, name=f"rows{e}") for e in range(E)]
        cnt = Array(counters)
        cap = Array(self.cap)
        for e in range(E):
            m.d.comb += self.rows[e].eq(counters[e])

        for j in range(L):
            ahead = 0
            for i in range(j):
                ahead = ahead + (self.req[i] & (self.req_expert[i] == self.req_expert[j]))
            want = Signal(cfg.cap_bits + 1, name=f"want{j}")
            m.d.comb += [
                want.eq(cnt[self.req_expert[j]] + ahead),
                self.row[j].eq(want),
                self.ok[j].eq(self.req[j] & (want < cap[self.req_expert[j]])),
            ]

        with m.If(self.clear):
            m.d.sync += [c.eq(0) for c in counters]
        with m.Elif(self.commit):
            for e in range(E):
                grants = 0
                for j in range(L):
                    grants = grants + (self.ok[j] & (self.req_expert[j] == e))
                m.d.sync += counters[e].eq(counters[e] + grants)
        return m
