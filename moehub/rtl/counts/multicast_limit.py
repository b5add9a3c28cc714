"""Count packets' limit on multicast rows (protocol v2: ``max_targets`` > 1 with
``count_packets``).

The reference model refuses a row as COUNT_MISMATCH when *any* of its targets has every
source's count in and as many rows as announced (:meth:`moehub.spec.model.HubModel.
_open_verdict`, before OVERFLOW), and counts a completing count packet below the rows an
expert already holds (COUNT_MISMATCH). A row refused for one target takes no row of the
others, so -- as for room -- a lane's verdict would depend on the verdicts ahead of it.
The unicast :class:`~moehub.rtl.counts.limit.CountLimit` ranks *requests* (a refused request
of an expert means every later one of it is refused too); here the multicast allocator's
*admission* makes the chain unnecessary, as it does for room
(:class:`~moehub.rtl.multicast_allocator.MulticastAllocatorAdmitted`).

Per expert ``x``: ``lam = total - rows`` (signed; the total holds the counts of the group
now in the allocator's cycle -- the count gate's per-group sum ``dtot``, added a cycle
ahead, as the unicast limit does -- and the rows every grant before this cycle) and
``done`` (every source's count in, from the groups ahead). Then:

* ``x`` is *dead* when ``done`` and ``lam <= 0``: every later row naming it is refused --
  for good (no count adds to it any more, and it takes no grant);
* ``x`` is *counted roomy* when dead or ``lam >= margin`` (``ADMISSION_GROUPS x lanes``):
  counts only add to ``lam``, so a row admitted then finds ``lam`` above the grants it
  can have ahead of it whenever its count completes -- never refused;
  otherwise the allocator is tight (``roomy`` low): one data packet a group, which alone
  asks for rows in its cycle.

The packet manager's input admission ends a group at a count packet (no row behind one
in its group), so every lane's count verdict is one formula of registers: refused when
some expert it names is dead. A roomy lane's experts are dead (refused) or far from their
count, and a risky lane has no grant ahead of it. No verdict waits for another; the room
counters take the count refusals as known (from registers). A completing count packet is
an ``over`` when ``lam`` is below the grants of its expert ahead of it in the group: with
``lam >= margin`` never, else (tight) at most one data lane is ahead of it, so ``lam <
0``, or ``lam == 0`` and that lane granted a row of the expert.

Why no row behind a count packet: a count completing ``x`` on a lane ahead made the
row's verdict ``lam <= 0`` with ``lam`` holding that count -- a compare behind the wide
add of the group's sum (``dtot``, the register, into ``lam``'s carry chain, its sign
chosen by the grants: 25.3-25.6 FO4 at deepseek-v3-8gpu with every v2 feature).
Without it, ``dead``'s next value needs ``lam``'s only where ``x``'s counts are all in,
and then the group behind adds nothing to ``x`` (its count packets of ``x`` are repeats):
``lam - grants``, small constants off a register. The price: the lanes behind a count
packet wait a cycle -- a source's few hundred count packets a layer beside tens of
thousands of chunks (and a group takes one count packet at most anyway).

The price of the admission is the tight mode's: while an expert's count is within
``margin`` rows of its rows and not met (or some expert's counts are not all in, ``lam``
small), data packets come in one a cycle -- at a layer's start until the counts are in,
and over each expert's last ``margin`` rows. (Counts sent up front, as the protocol
intends, keep the first short.)
"""
from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from .gate import total_bits
from ..logic import select, sum3_flags


class MulticastCountLimit(wiring.Component):
    """Per-expert rows left under the count, for multicast rows (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        Multicast with count packets.
    margin : int
        Rows that may be granted between a look at :attr:`roomy` and the grant of a row
        admitted then.

    Attributes
    ----------
    mask : In(experts).array(lanes) ; req : In(lanes)
        The experts each lane's row names; the lanes that ask for a row.
    cnt_add, cnt_full : In(lanes) ; cnt_oh : In(experts).array(lanes)
        Per lane (the count gate's, registered in T): a count packet that adds; it
        completes its expert; its expert, one-hot. No lane behind a count packet asks
        for a row (the packet manager's admission).
    dtot : In(total_bits).array(experts)
        The counts the group behind adds (registered, as for the unicast limit).
    grants : In(lanes + 1).array(experts)
        This cycle's grants naming each expert known from registers (the verdicts but the
        risky lane's), one-hot.
    late_names : In(experts) ; late : In(1)
        The experts the risky lane names, and its verdict (late: the one verdict that
        is; :class:`~moehub.rtl.multicast_allocator.MulticastAllocatorAdmitted`).
    ok : In(lanes)
        This cycle's verdicts (late), for ``over``.
    cref_q : In(lanes).array(2)
        Per lane, its row names an expert of ``dead_next_if[k]`` (the packet manager's
        registers, from R's target decode): the lane's count refusal for the risky grant
        of the cycle before low (k = 0) or high.
    clear : In(1)
        Layer start.
    refused : Out(lanes)
        The lane's row is refused for counts: ``cref_q`` chosen by the registered late
        verdict.
    over : Out(lanes)
        A completing count packet below the rows its expert holds.
    roomy : Out(1)
        Every expert dead or at least ``margin`` rows from its count.
    dead_x : Out(experts)
        ``dead`` (a register), for the packet manager's roomy lanes' refusals.
    dead_next_if : Out(experts).array(2)
        ``dead``'s next value if the risky lane's grant is refused (0) or granted (1).
    formal_lam, formal_dead, formal_done : Out
        Only with ``formal=True`` (the property harness): per expert ``lam`` as it stands,
        ``dead`` and ``done`` -- the invariants k-induction needs.
    """

    @staticmethod
    def width(cfg: HubConfig) -> int:
        """``lam``: signed, a total and a row count apart."""
        return total_bits(cfg) + 2

    def __init__(self, cfg: HubConfig, margin: int, formal: bool = False):
        if not (cfg.multicast and cfg.count_packets):
            self._MustUse__silence = True       # (refused: never elaborated)
            raise ValueError(f"hub[{cfg.name}]: a multicast count limit needs multicast rows "
                             "and count packets")
        self.cfg, self.margin, self.formal = cfg, margin, formal
        L, E = cfg.lanes, cfg.experts
        formal_ports = {"formal_lam": Out(signed(self.width(cfg))).array(E),
                        "formal_dead": Out(E), "formal_done": Out(E)} if formal else {}
        super().__init__({
            **formal_ports,
            "mask": In(E).array(L), "req": In(L), "cnt_add": In(L), "cnt_full": In(L),
            "cnt_oh": In(E).array(L), "dtot": In(total_bits(cfg)).array(E),
            "grants": In(L + 1).array(E), "late_names": In(E), "late": In(1), "ok": In(L), "clear": In(1),
            "cref_q": In(L).array(2),
            "refused": Out(L), "over": Out(L), "roomy": Out(1), "dead_x": Out(E), "dead_next_if": Out(E).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, L, E = self.cfg, self.cfg.lanes, self.cfg.experts
        lam = [_LamRegister(m, self.cfg, self.margin, x) for x in range(E)]
        lag = Signal(E, name="mcl_lag")     # (the risky lane's grant of the cycle before)
        done = Signal(E, name="mcl_done")
        # (done & lam <= 0 as a register of its own: the refusal's OR over the experts
        # starts at two-input ANDs of registers -- from done and lam apart, done -> the
        # refusal -> the verdicts -> the grants -> the arena's page was 29.9 FO4 at
        # deepseek-v3-8gpu with every v2 feature)
        dead = Signal(E, name="mcl_dead")
        # (lane i's count packet completes expert x)
        completes = [[self.cnt_add[i] & self.cnt_full[i] & self.cnt_oh[i][x] for x in range(E)] for i in range(L)]
        over_now = [lam[x].below_grants(m, lag[x], False) for x in range(E)]
        over_granted = [lam[x].below_grants(m, lag[x], True) for x in range(E)]
        # (the lanes' count refusals, ``mask & dead`` ORed over the experts, are registers
        # formed a cycle ahead for either late verdict, which chooses: behind ``dead``, the
        # OR over the experts into the risky lane's verdict, fanned out over AL's
        # registers, was 25.4 FO4 at deepseek-v3-8gpu with every v2 feature)
        late_q = Signal(name="mcl_late_q")
        m.d.sync += late_q.eq(self.late)
        for j in range(L):
            m.d.comb += self.refused[j].eq(Mux(late_q, self.cref_q[1][j], self.cref_q[0][j]))
            granted = [Cat(*(self.ok[k] & self.mask[k][x] for k in range(j))).any() if j else 0 for x in range(E)]
            m.d.comb += self.over[j].eq(Cat(*(completes[j][x] & (over_now[x] | (over_granted[x] & granted[x]))
                                              for x in range(E))).any())
        # (not at a clear: lam starts again at 0, and no expert is dead)
        m.d.comb += self.roomy.eq(~self.clear & Cat(*(dead[x] | lam[x].at_least(m, self.margin, lag[x])
                                                      for x in range(E))).all())
        now_done = Cat(*(Cat(*(completes[i][x] for i in range(L))).any() for x in range(E)))
        for x in range(E):
            late = Signal(name=f"mcl_late{x}")
            m.d.comb += late.eq(self.late & self.late_names[x])
            # (the grants and the lag, one-hot: n = grants + lag, 0..lanes + 1)
            n = Signal(L + 2, name=f"mcl_n{x}")
            m.d.comb += n.eq(Mux(lag[x], Cat(0, self.grants[x]), Cat(self.grants[x], 0)))
            lam[x].update(m, self.dtot[x], n, self.clear)
            dead_if = [~self.clear & (done[x] | now_done[x]) & le for le in lam[x].le0_next_if(m, self.grants[x], lag[x])]
            m.d.sync += dead[x].eq(Mux(late, dead_if[1], dead_if[0]))
            m.d.comb += [self.dead_next_if[0][x].eq(dead_if[0]),
                         self.dead_next_if[1][x].eq(Mux(self.late_names[x], dead_if[1], dead_if[0]))]
            m.d.sync += lag[x].eq(~self.clear & late)
        m.d.sync += done.eq(Mux(self.clear, 0, done | now_done))
        m.d.comb += self.dead_x.eq(dead)
        if self.formal:
            m.d.comb += [self.formal_lam[x].eq(lam[x].value() - lag[x]) for x in range(E)]
            m.d.comb += [self.formal_dead.eq(dead), self.formal_done.eq(done)]
        return m


class _LamRegister:
    """One expert's ``lam`` (less the risky lane's grant of the cycle before, ``lag``),
    held as a register ``y`` and the one-hot ``nq`` of the grants it still owes:
    ``lam = y - q`` (``nq``'s bit ``q`` set). ``y`` is ``lam + dtot`` of the cycle before,
    so its next value, ``y - q + dtot``, is one adder of registers (``q`` from ``nq``),
    and this cycle's grants only load ``nq``: no grant reaches the wide add. (``lam`` itself the
    register, chosen by the grants among ``lam + dtot - n``, was a 24.8 FO4 loop at
    deepseek-v3-8gpu with every v2 feature, and ``dead``'s next value, the sign
    of that sum, 25.6.)

    Every test of ``lam`` is then ``y`` against a small constant (``q`` and the grants
    are at most ``lanes + 1`` each, the margin ``ADMISSION_GROUPS x lanes``): ``y``'s
    sign and a register per constant ``c`` below ``K`` (``small``: ``0 <= y <= c``), formed
    beside ``y`` from its next value's low bits and high-zero flag -- no compare, no carry
    chain in front of a verdict. (With ``y``'s low bits compared behind their fan-out to
    every constant, the compare was six cells of the path into the registered refusals,
    25.9 FO4 at deepseek-v3-8gpu with every v2 feature.)"""

    def __init__(self, m, cfg: HubConfig, margin: int, x: int):
        L, self.name = cfg.lanes, f"mcl_lam{x}"
        self.width = MulticastCountLimit.width(cfg)
        # (the constants y is compared with are at most K: margin + lanes + 2 for roomy,
        # 2 lanes + 4 for dead's next value)
        self.K = max(margin + L + 2, 2 * L + 4)
        self.lo = self.K.bit_length()
        self.y = Signal(signed(self.width), name=f"{self.name}_y")
        self.small = Signal(self.K, name=f"{self.name}_small", init=(1 << self.K) - 1)
        self.nq = Signal(L + 2, name=f"{self.name}_nq", init=1)

    def below(self, k: int):
        """``y < k`` for ``0 <= k <= K`` (negative, or small and below ``k``)."""
        assert 0 <= k <= self.K, (k, self.K)
        return self.y[-1] | self.small[k - 1] if k else self.y[-1]

    def equals(self, k: int):
        """``y == k`` for ``0 <= k < K``."""
        assert 0 <= k < self.K, (k, self.K)
        return self.small[k] & ~self.small[k - 1] if k else self.small[0]

    def _by_q(self, m, term, name: str):
        """``term(q)`` for ``nq``'s ``q``: an AND-OR of registers."""
        s = Signal(name=f"{self.name}_{name}")
        m.d.comb += s.eq(Cat(self.nq[q] & term(q) for q in range(len(self.nq))).any())
        return s

    def below_grants(self, m, lag, granted: bool):
        """For a completing count packet's ``over``: with ``granted`` False, ``lam < 0``
        or ``lam == 0`` with ``lag`` (the register ``lam`` below its ``lag``); with
        ``granted`` True, ``lam == lag`` (below by a grant ahead in the group)."""
        if granted:
            return self._by_q(m, lambda q: Mux(lag, self.equals(q + 1), self.equals(q)), "eq_lag")
        return self._by_q(m, lambda q: self.below(q) | (lag & self.equals(q)), "below")

    def at_least(self, m, k: int, lag):
        """``lam - lag >= k`` (``roomy``)."""
        return ~self._by_q(m, lambda q: Mux(lag, self.below(k + q + 1), self.below(k + q)), f"lt{k}")

    def le0_next_if(self, m, grants, lag):
        """``lam - lag <= 0`` next cycle, where the group behind adds nothing to the expert
        (its counts all in: the group's count packets of it are repeats): ``y - q - g -
        lag - late <= 0`` with ``g`` this cycle's sure grants (one-hot) and ``lag`` (a
        register), for the risky lane's grant ``late`` low and high -- flags of registers
        (``lag`` chosen among them first), then chosen by the grants. (Chosen by the
        grants and lag as one one-hot, its shift by ``lag`` stood between the grant count
        and the choice: three cells of the path into the registered refusals, 25.6 FO4
        at deepseek-v3-8gpu with every v2 feature.)"""
        L1 = len(grants)
        # (y <= q + s for s = g + lag + late: from registers alone)
        le = [self._by_q(m, lambda q, s=s: self.below(q + s + 1), f"le{s}") for s in range(L1 + 2)]
        lel = [Mux(lag, le[s + 1], le[s]) for s in range(L1 + 1)]
        return [select([(grants[k], lel[k + d]) for k in range(L1)], 1) for d in (0, 1)]

    def update(self, m, dtot, n, clear):
        """``lam <- lam + dtot - n``: ``y <- y - q + dtot`` (q from ``nq``, a register; one
        carry-save level and one adder, :func:`~moehub.rtl.logic.sum3_flags`), ``nq <-
        n``; at a clear ``lam`` is 0."""
        L2 = len(n)
        # (-q unsigned, (L2 - 1) - q: the bias takes L2 - 1 back)
        q = Signal(range(L2), name=f"{self.name}_q")
        m.d.comb += q.eq(select([(self.nq[k], L2 - 1 - k) for k in range(L2)], len(q)))
        total, hz, _ = sum3_flags(m, self.y, dtot, q, 1 - L2, self.width, self.lo, f"{self.name}_next")
        small = Cat(hz & (total[:self.lo] <= c) for c in range(self.K))
        m.d.sync += [self.y.eq(Mux(clear, 0, total)), self.small.eq(Mux(clear, self.small.init, small)),
                     self.nq.eq(Mux(clear, 1, n))]

    def value(self):
        """``lam`` (less ``lag``) as a value: ``y - q`` (for the property harness)."""
        return self.y - sum(Mux(self.nq[q], q, 0) for q in range(len(self.nq)))
