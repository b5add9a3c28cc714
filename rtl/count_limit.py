"""The count packets' limit on the allocator's grants (protocol v2, ``count_packets``).

A row of an expert whose counts are met is refused (COUNT_MISMATCH,
:meth:`moehub.verif.model.HubModel._open_verdict`) in (cycle, lane) order, also when the
count that completes the expert sits on an earlier lane of the row's own group. Why a
register of "rows left under the count" beside the allocator's room: the refusal is then,
like an overflow, a compare of the lane's place among its expert's requests with a
register -- not the announced counts summed, selected and compared with the counters
behind the requests (the first version: 50.6 FO4 deep).

Per expert ``x``, registers: ``lam = total - rows`` and ``spare = cap - total``, where the
total already holds the counts of the group now in the allocator's cycle: the count gate
sums a group's counts on its way into R (``dtot``, registered), and they are added here
while the group is in T, in the same cycle as the grants of the group ahead are taken off
(``lam + dtot - grants``: the sums for every grant count formed in parallel, the grants
choose). So, the lanes of ``x`` in lane order, ``a`` the requests ahead of a lane:

* a lane whose expert is not ``full`` at it (a count still missing) is never refused for
  counts; the first ``n1`` requests of ``x`` are such (``free``, registered in T), the
  others are ``full`` (the total is final from the completing count on: later counts of
  ``x`` are repeats);
* a ``full`` lane is refused for counts when ``a >= lam`` and the region could hold every
  announced row, ``room >= lam`` (``spare >= 0``); else a region too small refuses it as an
  overflow first (the model's order).

So ``x`` gets ``min(requests, room, max(n1, lam))`` rows: the counts allow ``n`` when
``n1 >= n`` or ``lam >= n`` (``allow``, a thermometer the allocator ANDs with its own). A
count packet that completes ``x`` is an ``over`` (COUNT_MISMATCH, counted) when the rows
already held exceed the total: ``min(c, room) > lam`` with ``c`` the requests ahead of it.
"""
from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig
from .count_gate import total_bits
from .logic import add3, select


class CountLimit(wiring.Component):
    """Per-expert rows left under the count (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``count_packets`` is set.

    Attributes
    ----------
    expert : In(experts).array(lanes) ; req, full, add : In(lanes)
        The allocator's requests (one-hot expert), and from the count gate per lane: its
        expert's counts are all in at it; its count packet adds.
    ahead : In(lanes).array(lanes)
        Per lane, the requests ahead of it for its expert, one-hot (bit a: a of them).
    dtot : In(total_bits).array(experts)
        The counts the group behind (in T) adds, per expert.
    free : In(lanes).array(experts)
        Bit n - 1: at least n requests for the expert before its counts are all in.
    room, cap : In(cap_bits).array(experts)
        The allocator's room left; the capacities (latched at ``clear``).
    grants : In(lanes + 1).array(experts)
        The rows the allocator grants each expert this cycle, one-hot.
    clear : In(1)
        Layer start.
    allow : Out(lanes).array(experts)
        Bit n - 1: the counts allow ``n`` grants to the expert this cycle.
    met, over : Out(lanes)
        A request refused for counts (COUNT_MISMATCH); a completing count below the rows
        already held (COUNT_MISMATCH).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.count_packets:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}]: the count limit needs count_packets")
        self.cfg = cfg
        L, E = cfg.lanes, cfg.experts
        super().__init__({
            "expert": In(E).array(L), "req": In(L), "full": In(L), "add": In(L),
            "ahead": In(L).array(L), "dtot": In(total_bits(cfg)).array(E), "free": In(L).array(E),
            "room": In(cfg.cap_bits).array(E), "cap": In(cfg.cap_bits).array(E),
            "grants": In(L + 1).array(E), "clear": In(1),
            "allow": Out(L).array(E), "met": Out(L), "over": Out(L),
        })

    def width(self) -> int:
        """``lam`` and ``spare``: signed, a total and a capacity apart."""
        return total_bits(self.cfg) + 2

    def elaborate(self, platform):
        m = Module()
        L, E, w = self.cfg.lanes, self.cfg.experts, self.width()
        lam = [Signal(signed(w), name=f"cl_lam{x}") for x in range(E)]
        spare = [Signal(signed(w), name=f"cl_spare{x}") for x in range(E)]
        lam_ge = [[lam[x] >= n for n in range(L + 1)] for x in range(E)]
        fits = [~spare[x][-1] for x in range(E)]                      # room >= lam
        fits_gt = [~spare[x][-1] & (spare[x] != 0) for x in range(E)]  # room > lam
        m.d.comb += [self.allow[x].eq(self.free[x] | Cat(lam_ge[x][1:])) for x in range(E)]
        for j in range(L):
            self._verdicts(m, j, lam_ge, fits, fits_gt)
        for x in range(E):
            # lam + dtot - n for every n = 0..L, each one carry-save sum of two registers
            # (the group behind's counts, the register); the grants choose (none at the
            # layer start: lam is 0 then; the clear steers the select, not the sums)
            nxt = [add3(m, lam[x], self.dtot[x], -n, w, f"cl_lam{x}_m{n}") for n in range(L + 1)]
            m.d.sync += [spare[x].eq(Mux(self.clear, self.cap[x], spare[x] - self.dtot[x])),
                         lam[x].eq(select([(self.grants[x][n] & ~self.clear, nxt[n]) for n in range(L + 1)], w))]
        return m

    def _verdicts(self, m, j, lam_ge, fits, fits_gt):
        """Lane j: a request refused for counts (``a >= lam``, ``room >= lam``); a
        completing count packet below the rows held (``c > lam``, ``room > lam``)."""
        E, oh, ahead = self.cfg.experts, self.expert[j], self.ahead[j]
        at_or_over = Cat(ahead[a] & Cat(oh[x] & fits[x] & ~lam_ge[x][a + 1] for x in range(E)).any()
                         for a in range(j + 1)).any()
        below = Cat(ahead[a] & Cat(oh[x] & fits_gt[x] & ~lam_ge[x][a] for x in range(E)).any()
                    for a in range(j + 1)).any()
        m.d.comb += [self.met[j].eq(self.req[j] & self.full[j] & at_or_over),
                     self.over[j].eq(self.add[j] & self.full[j] & below)]

