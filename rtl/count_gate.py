"""The allocator's view of per-expert count packets (protocol v2, ``count_packets``).

Why a unit of its own, beside :class:`~moehub.rtl.expert_counts.ExpertCounts`: the
allocator must refuse a row of an expert whose announced counts are met
(COUNT_MISMATCH, :meth:`moehub.verif.model.HubModel._open_verdict`) exactly as the model
does, packet by packet in (cycle, lane) order -- also when the count packet that completes
the expert's counts sits on an earlier lane of the *same* group as the row, or in the
group right ahead. So the gate works in the allocator's cycle, on the packet manager's T
registers: per lane it adds the counts of the earlier lanes of the group to the state
registers (seen bits, totals, sources announced), and the next group sees them updated.
(ExpertCounts takes three cycles from a count packet to ``met``.)

Per lane ``j``, with ``x`` its expert and the state as the lanes before ``j`` leave it:

* a count packet is a *repeat* (COUNT_DUPLICATE, ignored) if its (source, expert) was seen
  in an earlier group or on an earlier lane; else it *adds*;
* a count packet that adds the last source's count is an *over* (COUNT_MISMATCH, counted)
  when the rows already allocated exceed the expert's total;
* a row opener is *met* (refused, COUNT_MISMATCH) when every source's count is in and the
  rows allocated reach the total.

Rows allocated before lane ``j`` are the allocator's counter plus the grants ahead in the
group: ``min(requests ahead, room)`` -- a refused request (overflow) holds no row. Counting
candidates (openers, met or not) as the requests ahead is exact: once a lane of ``x`` is
met every later lane of ``x`` is met too (the total is final once all sources are in).
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig, field_bits
from .logic import popcount, select


class CountGate(wiring.Component):
    """Count packets and the COUNT_MISMATCH refusal of rows, in lane order (see the module
    docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``count_packets`` is set.

    Attributes
    ----------
    cnt : In(lanes)
        Lane j holds a count packet of a live layer, source and expert in range.
    cand : In(lanes)
        Lane j opens a row that may be allocated (expert in range, not post-EOS).
    src : In(range(sources)).array(lanes) ; exp_oh : In(experts).array(lanes) ;
    count : In(count_bits).array(lanes)
        The lanes' source, expert (one-hot) and count field.
    rows, room : In(cap_bits).array(experts)
        The allocator's counters (rows handed out, room left).
    clear : In(1)
        Layer start.
    met, add, dup, over : Out(lanes)
        Per lane: refuse the row (COUNT_MISMATCH); the count packet adds; it is a repeat;
        it is the last count and the rows already exceed the total.
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.count_packets:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}]: the count gate needs count_packets")
        self.cfg = cfg
        L, E, S = cfg.lanes, cfg.experts, cfg.sources
        super().__init__({
            "cnt": In(L), "cand": In(L), "src": In(range(S)).array(L),
            "exp_oh": In(E).array(L), "count": In(cfg.count_bits).array(L),
            "rows": In(cfg.cap_bits).array(E), "room": In(cfg.cap_bits).array(E),
            "clear": In(1),
            "met": Out(L), "add": Out(L), "dup": Out(L), "over": Out(L),
        })

    def total_bits(self) -> int:
        return total_bits(self.cfg)

    def elaborate(self, platform):
        m = Module()
        c, L, E, S = self.cfg, self.cfg.lanes, self.cfg.experts, self.cfg.sources
        total = [Signal(self.total_bits(), name=f"cg_total{x}") for x in range(E)]
        announced = [Signal(range(S + 1), name=f"cg_announced{x}") for x in range(E)]
        seen = [Signal(E, name=f"cg_seen{s}") for s in range(S)]
        self._repeats(m, seen)
        for j in range(L):
            self._lane(m, j, total, announced)
        self._update(m, total, announced, seen)
        return m

    def _same_exp(self, i, j):
        return (self.exp_oh[i] & self.exp_oh[j]).any()

    def _repeats(self, m, seen):
        """A count packet repeats one of an earlier group (seen) or an earlier lane."""
        for j in range(self.cfg.lanes):
            earlier = [self.cnt[i] & (self.src[i] == self.src[j]) & self._same_exp(i, j)
                       for i in range(j)]
            in_seen = select([(self.src[j] == s, (seen[s] & self.exp_oh[j]).any())
                              for s in range(self.cfg.sources)], 1)
            m.d.comb += [self.dup[j].eq(self.cnt[j] & (in_seen | Cat(*earlier).any())),
                         self.add[j].eq(self.cnt[j] & ~self.dup[j])]

    def _lane(self, m, j, total, announced):
        """Lane j's met (a row) and over (a count packet), from the state plus the counts
        and grants of the earlier lanes on its expert."""
        cfg, E, S = self.cfg, self.cfg.experts, self.cfg.sources
        oh = self.exp_oh[j]
        same = [self._same_exp(i, j) for i in range(j)]
        n_before = popcount([self.add[i] & same[i] for i in range(j)])
        sum_before = Signal(self.total_bits() + 2, name=f"cg_sum{j}")
        m.d.comb += sum_before.eq(sum(Mux(self.add[i] & same[i], self.count[i], 0) for i in range(j))
                                  if j else 0)
        ann = select([(oh[x], announced[x]) for x in range(E)], range(S + 1))
        tot = select([(oh[x], total[x]) for x in range(E)], self.total_bits())
        rows = select([(oh[x], self.rows[x]) for x in range(E)], cfg.cap_bits)
        room = select([(oh[x], self.room[x]) for x in range(E)], cfg.cap_bits)
        ahead = popcount([self.cand[i] & same[i] for i in range(j)])
        held = Signal(cfg.cap_bits + 2, name=f"cg_held{j}")      # rows allocated before j
        m.d.comb += held.eq(rows + Mux(ahead < room, ahead, room))
        ann_j = Signal(range(S + 2 + cfg.lanes), name=f"cg_ann{j}")
        m.d.comb += ann_j.eq(ann + n_before)
        tot_j = Signal(self.total_bits() + 2, name=f"cg_tot{j}")
        m.d.comb += tot_j.eq(tot + sum_before)
        m.d.comb += [
            self.met[j].eq(self.cand[j] & (ann_j == S) & (held >= tot_j)),
            self.over[j].eq(self.add[j] & (ann_j + 1 == S) & (held > tot_j + self.count[j])),
        ]

    def _update(self, m, total, announced, seen):
        """The group's count packets into the state (cleared at layer start)."""
        L, E, S = self.cfg.lanes, self.cfg.experts, self.cfg.sources
        for x in range(E):
            adds = [self.add[j] & self.exp_oh[j][x] for j in range(L)]
            m.d.sync += [total[x].eq(total[x] + sum(Mux(a, self.count[j], 0) for j, a in enumerate(adds))),
                         announced[x].eq(announced[x] + popcount(adds))]
        for s in range(S):
            new = [Mux(self.add[j] & (self.src[j] == s), self.exp_oh[j], 0) for j in range(L)]
            m.d.sync += seen[s].eq(seen[s] | _or_all(new))
        with m.If(self.clear):
            m.d.sync += [t.eq(0) for t in total] + [a.eq(0) for a in announced] \
                + [s_.eq(0) for s_ in seen]


def total_bits(cfg: HubConfig) -> int:
    """Width of an expert's announced total: every source's count may reach count_bits."""
    return field_bits(cfg.sources * ((1 << cfg.count_bits) - 1))


def _or_all(vals):
    """Bitwise OR of a list of values."""
    acc = 0
    for v in vals:
        acc = acc | v
    return acc
