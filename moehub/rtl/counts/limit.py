"""The count packets' limit on the allocator's grants (protocol v2, ``count_packets``).

A row of an expert whose counts are met is refused (COUNT_MISMATCH,
:meth:`moehub.spec.model.HubModel._open_verdict`) in (cycle, lane) order, also when the
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

With paged regions (:mod:`moehub.rtl.paging.regions`) the page gate may refuse a grant the counts
allowed (no page for the tile it starts; OVERFLOW) and every later request of its expert
in the cycle; its first refused lane had ``g`` requests of the expert ahead, all granted.
The rows then held are not what the requests ahead say, in two cycles:

* in the refusal's cycle, a lane behind the refused one sees ``g`` rows held, not its
  requests ahead: refused for counts when ``g >= lam``, an ``over`` when ``g > lam`` --
  the refused lane's own verdicts, which the gate's late ``short`` (the lanes it found no
  page for) only selects;
* the grants this added to ``lam`` are the allocator's (``n``, which counted the refused
  ones), so ``lam`` is ``n - g`` low in the next cycle. The gate refuses that cycle's rows
  of the expert (the pool is still empty): none is held, so a row is refused for counts
  when ``lam + n - g <= 0``, an ``over`` when ``< 0`` -- compares of ``lam`` with
  constants, the difference chosen by registers (``held``: the gate's refusal, and
  ``n``, registered here); and ``lam`` takes ``lam + dtot + (n - g)`` then, as the
  allocator its counters, so it is right again from the cycle after.
"""
from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from .gate import total_bits
from ..logic import select, sum3_flags


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
    held : In(lanes).array(experts)
        (paged) Per expert, the page gate's refusal of the cycle before (its ``stop``,
        registered in the allocator): bit ``g``, ``g`` of its grants stood.
    short : In(lanes) ; same : In(lanes).array(lanes)
        (paged) The lanes the page gate found no page for in this cycle (late; the first
        of each expert is refused, and every later lane of it); bit i of ``same[j]``
        (i < j): lanes i and j name the same expert.
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
        paged = {"held": In(L).array(E), "short": In(L), "same": In(L).array(L)} if cfg.paged else {}
        super().__init__({
            **paged,
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
        paged = self.cfg.paged
        # (the offsets lam takes in a cycle: -n for n grants, paged also +k for the
        # grants a page refusal gave back)
        offsets = list(range(-L, L + 1)) if paged else list(range(-L, 1))
        lam = [_LamRegister(m, self.cfg, x, offsets, w) for x in range(E)]
        spare = [Signal(signed(w), name=f"cl_spare{x}") for x in range(E)]
        fits = [~spare[x][-1] for x in range(E)]                      # room >= lam
        fits_gt = [~spare[x][-1] & (spare[x] != 0) for x in range(E)]  # room > lam
        # (lam >= n, n = 1..lanes: a register, see _LamRegister.ge_next)
        ge = [Signal(L, name=f"cl_lam_ge{x}") for x in range(E)]
        m.d.comb += [self.allow[x].eq(self.free[x] | ge[x]) for x in range(E)]
        # (per expert and rows held a: a >= lam -- for full requests, from the register;
        # a > lam -- for a completing count packet, exact, the group's count in)
        reach = [[~ge[x][a] for a in range(L)] for x in range(E)]
        exceed = [[~lam[x].at_least(m, a) for a in range(L)] for x in range(E)]
        fix = self._after_refusal(m, lam, reach, exceed) if paged else None
        verdicts = [self._verdicts(m, j, reach, exceed, fits, fits_gt) for j in range(L)]
        for j, (at_or_over, below) in enumerate(verdicts):
            cut_met, cut_over = self._cut(j, verdicts)
            m.d.comb += [self.met[j].eq(self.req[j] & self.full[j] & at_or_over & ~cut_met),
                         self.over[j].eq(self.add[j] & self.full[j] & below & ~cut_over)]
        for x in range(E):
            # (the grants choose lam's offset; none at the layer start: lam is 0 then)
            take = [(self.grants[x][n] & ~self.clear, -n) for n in range(L + 1)]
            if fix is not None:
                # (the cycle after a page refusal: the grants refused then given back)
                refused, back = fix[x]
                take = [(sel & ~refused, k) for sel, k in take]
                take += [(back[k] & ~self.clear, k) for k in range(1, L + 1)]
            lam[x].update(m, self.dtot[x], take, self.clear)
            m.d.sync += [spare[x].eq(Mux(self.clear, self.cap[x], spare[x] - self.dtot[x])),
                         ge[x].eq(Mux(self.clear, 0, lam[x].ge_next(m, take)))]
        return m

    def _after_refusal(self, m, lam, reach, exceed):
        """(paged) The cycle after the page gate refused expert x's rows: ``lam`` is low by
        the refused grants, ``k = n - g`` (``n`` the allocator's grants, registered here;
        ``g`` the grants that stood, ``held``); no row of x is held in this cycle, so its
        verdicts are ``lam + k <= 0`` and ``< 0`` for every lane (``reach`` and ``exceed``,
        per rows held, are replaced in place). Returns, per expert, (refused, k one-hot
        from 1)."""
        L, E = self.cfg.lanes, self.cfg.experts
        out = []
        for x in range(E):
            grants_r = Signal(L + 1, name=f"cl_grants_r{x}")
            m.d.sync += grants_r.eq(self.grants[x])
            held = self.held[x]
            # (the first refused lane needed its grant: n > g, so k is 1..L)
            back = [None] + [Signal(name=f"cl_back{x}_{k}") for k in range(1, L + 1)]
            m.d.comb += [back[k].eq(Cat(held[g] & grants_r[g + k] for g in range(L + 1 - k)).any())
                         for k in range(1, L + 1)]
            refused = Signal(name=f"cl_refused{x}")
            at_zero, below_zero = Signal(name=f"cl_held_met{x}"), Signal(name=f"cl_held_over{x}")
            m.d.comb += [refused.eq(held.any()),
                         at_zero.eq(Cat(back[k] & ~lam[x].at_least(m, 1 - k) for k in range(1, L + 1)).any()),
                         below_zero.eq(Cat(back[k] & ~lam[x].at_least(m, -k) for k in range(1, L + 1)).any())]
            reach[x] = [Mux(refused, at_zero, v) for v in reach[x]]
            exceed[x] = [Mux(refused, below_zero, v) for v in exceed[x]]
            out.append((refused, back))
        return out

    def _verdicts(self, m, j, reach, exceed, fits, fits_gt):
        """Lane j, for its expert and its requests ahead ``a``: a request there is refused
        for counts (``a >= lam``, ``room >= lam``); a completing count packet there is
        below the rows held (``a > lam``, ``room > lam``). Returns both (signals)."""
        E, oh, ahead = self.cfg.experts, self.expert[j], self.ahead[j]
        at_or_over, below = Signal(name=f"cl_reach{j}"), Signal(name=f"cl_exceed{j}")
        m.d.comb += [
            at_or_over.eq(Cat(ahead[a] & Cat(oh[x] & fits[x] & reach[x][a] for x in range(E)).any()
                              for a in range(j + 1)).any()),
            below.eq(Cat(ahead[a] & Cat(oh[x] & fits_gt[x] & exceed[x][a] for x in range(E)).any()
                         for a in range(j + 1)).any())]
        return at_or_over, below

    def _cut(self, j, verdicts):
        """(paged) Lane j behind its expert's first lane refused a page in this cycle
        (lane i): only the ``g`` grants ahead of lane i stand, so lane j's verdicts are
        lane i's -- clear them where lane i's are clear (a >= lam at lane j follows from
        g >= lam). Any lane ahead that found no page will do, not only the first: the
        verdicts grow with the requests ahead, so a later one's are clear only if the
        first's are -- and the gate's ``short`` is a gate earlier than its first refused
        lane; it passes two gates here. Returns (met cut, over cut)."""
        if not self.cfg.paged or j == 0:
            return Const(0), Const(0)
        behind = [self.short[i] & self.same[j][i] for i in range(j)]
        return (Cat(behind[i] & ~verdicts[i][0] for i in range(j)).any(),
                Cat(behind[i] & ~verdicts[i][1] for i in range(j)).any())


class _LamRegister:
    """One expert's ``lam``, held as a register ``y`` and the one-hot ``oq`` of the offset
    the grants chose for it: ``lam = y + o``. ``y`` is ``lam + dtot`` of the cycle before,
    so its next value, ``y + o + dtot``, is one adder of registers (``o`` from ``oq``),
    and this cycle's grants only load ``oq``: no grant reaches the wide add. (``lam`` itself the
    register, chosen by the grants among ``lam + dtot - n``, was 25.5 FO4 at mixtral-8gpu
    with pages and count packets, ``dtot`` -> ``lam``; and ``lam >= n``'s register
    from the signs of those sums 25.1.)

    Every compare of ``lam`` with a small constant is ``y`` against one: its sign, whether
    its bits above the low ``lo`` are all zero or all one (``hz``, ``ho``, registered
    beside it) and its low bits, chosen by ``oq`` -- no carry chain in front."""

    def __init__(self, m, cfg: HubConfig, x: int, offsets, width: int):
        L, self.name, self.width = cfg.lanes, f"cl_lam{x}", width
        self.offsets = offsets
        # (the constants: lam >= k - o - s for k up to lanes, o and s offsets)
        self.lo = (3 * L).bit_length()
        self.y = Signal(signed(width), name=f"{self.name}_y")
        self.hz = Signal(name=f"{self.name}_hz", init=1)
        self.ho = Signal(name=f"{self.name}_ho")
        self.oq = {o: Signal(name=f"{self.name}_oq{o + L}", init=int(o == 0)) for o in offsets}
        self._ge = {}

    def _y_at_least(self, c: int):
        """``y >= c`` for ``|c| < 2**lo``."""
        lo, y = self.lo, self.y
        assert abs(c) < 1 << lo, (c, lo)
        if c > 0:
            return ~y[-1] & (~self.hz | (y[:lo] >= c))
        return ~y[-1] | (self.ho & (y[:lo] >= c + (1 << lo)))

    def at_least(self, m, c: int):
        """``lam >= c``: per offset ``o``, ``y >= c - o``, chosen by ``oq`` (one signal per
        ``c``, shared by its readers)."""
        if c not in self._ge:
            s = self._ge[c] = Signal(name=f"{self.name}_ge{_tag(c)}")
            m.d.comb += s.eq(Cat(q & self._y_at_least(c - o) for o, q in self.oq.items()).any())
        return self._ge[c]

    def ge_next(self, m, take):
        """``lam >= k`` next cycle (k = 1..lanes, bit k - 1) for the offset ``take``
        chooses, as if the group behind added no count: where it adds one, every request
        of the expert in its cycle comes before its counts are all in (the input ends a
        group at a count packet, and a count that adds is not the expert's last-but-none),
        so ``allow`` takes ``free`` and the met verdicts ignore these bits -- and from the
        cycle after, ``lam`` holds the count. So from registers (``y``'s flags, ``oq``),
        then the grants' choice: no wide add in front."""
        lanes = -min(self.offsets)
        return Cat(*(Cat(*(sel & self.at_least(m, k - s) for sel, s in take)).any() for k in range(1, lanes + 1)))

    def update(self, m, dtot, take, clear):
        """``lam <- lam + dtot + o`` (o: the offset ``take`` chooses): ``y <- y + q + dtot``
        (q from ``oq``, a register; one carry-save level and one adder,
        :func:`~moehub.rtl.logic.sum3_flags`), ``oq <- o``; at a clear ``lam`` is 0."""
        # (the offset unsigned, o - min: the bias takes min back)
        low = min(self.offsets)
        q = Signal(range(max(self.offsets) - low + 1), name=f"{self.name}_q")
        m.d.comb += q.eq(select([(oq, o - low) for o, oq in self.oq.items()], len(q)))
        total, hz, ho = sum3_flags(m, self.y, dtot, q, low, self.width, self.lo, f"{self.name}_next")
        m.d.sync += [self.y.eq(Mux(clear, 0, total)), self.hz.eq(clear | hz), self.ho.eq(~clear & ho)]
        none = ~Cat(sel for sel, _ in take).any()
        for o, oq in self.oq.items():
            chosen = Cat(sel for sel, k in take if k == o).any() if any(k == o for _, k in take) else Const(0)
            m.d.sync += oq.eq(Mux(clear, o == 0, chosen | ((o == 0) & none)))


def _tag(c: int) -> str:
    return f"m{-c}" if c < 0 else str(c)
