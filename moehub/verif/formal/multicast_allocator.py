"""Property harness of protocol v2's multicast allocator
(:class:`moehub.rtl.multicast_allocator.MulticastAllocator`).

Environment (what the target decode, the pre-rank stage and the packet manager guarantee
in the hub; the pre-rank's masks and counts are those of the one-hots, formed here
combinationally as :class:`MulticastPrerank` registers them a stage ahead): a row
requests only with a good target set -- at least one target, each valid target's expert a
one-hot, no expert named twice, an entry not valid all zero; ``clear`` (layer start)
comes with no request; capacities are at most ``max_rows_per_expert`` and the arena's at
most ``pool_rows`` (the CSR bank clamps), and may change at any time (they take effect at
the next ``clear``).

Reference state, for one chosen expert ``ce`` (``AnyConst``: the proof holds for every
expert): its rows granted since the last clear (``cnt``), its capacity latched then
(``cap_s``), a "seen" bit for one chosen row ``cr``; for the arena: the rows handed out
(``pcnt``), its capacity latched (``pcap_s``), a "seen" bit for one chosen place ``cl``.

Properties (lane ``j``'s *ahead(x)* = the lanes ``i < j`` *granted* a row naming ``x``;
its *before* = the lanes ``i < j`` granted):

* a grant goes only to a request; it is exactly "every target ``x`` has
  ``room[x] > ahead(x)``, and ``pcnt + before < pcap_s``": never beyond a capacity, never
  refused while every target and the arena have room (``room`` is the unit's, proven equal
  to ``cap_s - cnt`` for the chosen expert, hence for all);
* a granted row's target naming ``ce`` gets ``cnt + ahead(ce)``: dense from 0, unique
  (the chosen row at most once a layer, never to two lanes of a cycle), below ``cap_s``;
  its arena place is ``pcnt + before``, unique, below ``pcap_s``;
* a refused row takes nothing: ``rows[ce]`` counts the granted rows naming ``ce`` only,
  the arena the granted rows only;
* the invariants that let k-induction close: ``room == cap_s - cnt``, the registered
  ``room > a`` bits, the latched capacities, the same for the arena, and the lagged
  grant counts (the counters are registered a cycle late) one-hots.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Elaboratable, Module, Mux, Signal

from ...rtl.multicast_allocator import (ADMISSION_GROUPS, CNT_DEAD_COPIES, MulticastAllocator,
                                         MulticastAllocatorAdmitted, pool_count_bits, prerank_counts)
from .common import Props, any_const, any_seq, count_ones, elaborate_into, one_hot, reset_first


class MulticastAllocatorHarness(Elaboratable):
    """The allocator under its environment, with the properties of the module docstring.
    ``dut_cls`` lets a test put a broken allocator in its place."""

    #: submodules whose registers the invariants read (:func:`.common.elaborate_into`)
    INTO = ()

    def __init__(self, cfg, dut_cls=MulticastAllocator):
        self.cfg, self.dut_cls = cfg, dut_cls
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        L, T, E, cb, pb = cfg.lanes, cfg.max_targets, cfg.experts, cfg.cap_bits, pool_count_bits(cfg)
        p = Props(m)
        self.messages = p.messages
        dut = self.dut_cls(cfg, formal=True)
        if self.INTO:
            self.regs = elaborate_into(m, "dut", dut, platform, into=self.INTO)
        else:
            m.submodules.dut = dut
        reset_first(m)
        g = dut.grant
        req, clear = any_seq(m, L, "req"), any_seq(m, 1, "clear")
        m.d.comb += [g.req.eq(req), g.clear.eq(clear)]
        # (an allocator that reads the pre-rank's next masks sees the one-hots registered,
        # as the pre-rank registers them: free inputs a cycle ahead)
        oh_next = [[any_seq(m, E, f"oh{j}_{t}") for t in range(T)] for j in range(L)]
        staged = hasattr(dut, "pre_oh_next")
        for j in range(L):
            m.d.comb += g.tv[j].eq(any_seq(m, T, f"tv{j}"))
            for t in range(T):
                if staged:
                    m.d.sync += g.oh[j][t].eq(oh_next[j][t])
                else:
                    m.d.comb += g.oh[j][t].eq(oh_next[j][t])
                p.assume(Mux(g.tv[j][t], one_hot(g.oh[j][t]), g.oh[j][t] == 0))
                for u in range(t):
                    p.assume(~req[j] | ((g.oh[j][t] & g.oh[j][u]) == 0))
            p.assume(~req[j] | g.tv[j].any())
        for e in range(E):
            m.d.comb += dut.cap[e].eq(any_seq(m, cb, f"cap_in{e}"))
            p.assume(dut.cap[e] <= cfg.max_rows_per_expert)
        m.d.comb += dut.pool_cap.eq(any_seq(m, pb, "pool_cap_in"))
        p.assume(dut.pool_cap <= cfg.pool_rows)
        p.assume(~(clear & req.any()))
        if dut.PRERANK:
            # the pre-rank stage's registers hold the masks and counts of these one-hots
            # (MulticastPrerank registers exactly prerank_counts of its inputs)
            masks = [Cat(Cat(g.oh[j][t][e] for t in range(T)).any() for e in range(E)) for j in range(L)]
            m.d.comb += [dut.pre_mask[j].eq(masks[j]) for j in range(L)]
            m.d.comb += dut.pre_counts.eq(prerank_counts(cfg, masks))
        if staged:
            m.d.comb += [dut.pre_oh_next[j][t].eq(oh_next[j][t]) for j in range(L) for t in range(T)]
        self._admission(m, p, dut)
        if hasattr(dut, "sure_named"):
            # (the packet manager's registers: a sure request naming each expert, formed
            # from the same values as the request, risky and cnt_dead registers)
            m.d.comb += [dut.sure_named[j].eq(Mux(g.req[j] & ~dut.risky[j], masks[j], 0)) for j in range(L)]
            if cfg.count_packets:       # (its copies of cnt_dead)
                m.d.comb += [dut.cnt_dead_q[c].eq(g.cnt_dead) for c in range(CNT_DEAD_COPIES)]
        self._properties(m, p, dut)
        return m

    def _admission(self, m, p, dut):
        """The packet manager's input admission, for an allocator that relies on it
        (none here)."""

    def _properties(self, m, p, dut):
        cfg = self.cfg
        L, T, E, cb = cfg.lanes, cfg.max_targets, cfg.experts, cfg.cap_bits
        g = dut.grant
        ce = any_const(m, range(E), "chosen_expert")
        p.assume(ce < E)
        cr = any_const(m, cfg.row_bits, "chosen_row")
        cnt, cap_s, seen = Signal(cb, name="ref_cnt"), Signal(cb, name="ref_cap"), Signal(name="ref_seen")
        mask = [Signal(E, name=f"ref_mask{j}") for j in range(L)]
        for j in range(L):
            m.d.comb += mask[j].eq(Cat(Cat(g.oh[j][t][e] for t in range(T)).any() for e in range(E)))
        names = [g.req[j] & mask[j].bit_select(ce, 1) for j in range(L)]      # lane j's row names ce
        granted = [g.ok[j] & names[j] for j in range(L)]
        room, room_gt = Array(dut.formal_room), Array(dut.formal_room_gt)
        arena = self._arena(m, p, dut)
        refused = self._count_refusals(m, p, dut, mask)
        for j in range(L):
            p.check(~g.ok[j] | g.req[j], "grant without a request")
            # exact verdict: not refused for its counts, every target has room for the
            # granted rows ahead naming it, and the arena for the granted rows ahead
            fits = []
            for t in range(T):
                x = Signal(range(E), name=f"ref_x{j}_{t}")
                for e in range(E):
                    with m.If(g.oh[j][t][e]):
                        m.d.comb += x.eq(e)
                ahead = count_ones([g.ok[i] & mask[i].bit_select(x, 1) for i in range(j)])
                fits.append(~g.tv[j][t] | (room[x] > ahead))
            want = g.req[j] & ~refused[j] & Cat(*fits).all() & arena.fits(j)
            p.check(g.ok[j] == want,
                    "grant is not exactly 'every target has room for the grants ahead, and the arena'")
            ahead_ce = count_ones(granted[:j])
            for t in range(T):
                hit = g.ok[j] & g.tv[j][t] & g.oh[j][t].bit_select(ce, 1)
                p.check(~hit | (g.row[j][t] == cnt + ahead_ce),
                        "granted row is not rows + granted rows ahead naming the expert (dense, lane order)")
                p.check(~hit | (g.row[j][t] < cap_s), "row granted beyond the capacity")
                p.check(~(hit & (g.row[j][t] == cr) & seen), "chosen row granted twice in a layer")
                for i in range(j):
                    for u in range(T):
                        hit_i = g.ok[i] & g.tv[i][u] & g.oh[i][u].bit_select(ce, 1)
                        p.check(~(hit & hit_i & (g.row[i][u] == g.row[j][t])),
                                "same row of an expert granted to two lanes in one cycle")
            arena.check_lane(j)
        # counters exact: a refused row takes nothing
        # (rows is registered: a cycle after the grants)
        cnt_q = Signal(cb, name="ref_cnt_q")
        m.d.sync += cnt_q.eq(cnt)
        p.check(Array(dut.rows)[ce] == cnt_q, "rows[e] differs from the granted rows naming it")
        p.check(cnt <= cap_s, "rows beyond the latched capacity")
        p.check(cap_s <= cfg.max_rows_per_expert, "latched capacity beyond the largest region")
        p.check(seen == (cr < cnt), "chosen row seen but not below rows (or the reverse)")
        p.check(Array(dut.formal_cap)[ce] == cap_s, "latched capacity differs from the CSR at clear")
        p.check(room[ce] == cap_s - cnt, "room != capacity - rows")
        p.check(room_gt[ce] == Cat(room[ce] > a for a in range(L)), "registered room > a bits stale")
        p.check(dut.formal_lag_onehot, "a lagged grant count is not a one-hot")
        arena.check_state()
        with m.If(g.clear):
            m.d.sync += [cnt.eq(0), cap_s.eq(Array(dut.cap)[ce]), seen.eq(0)]
        with m.Else():
            m.d.sync += cnt.eq(cnt + count_ones(granted))
            with m.If(Cat(g.ok[j] & g.tv[j][t] & g.oh[j][t].bit_select(ce, 1) & (g.row[j][t] == cr)
                          for j in range(L) for t in range(T)).any()):
                m.d.sync += seen.eq(1)
        arena.update()
        self._covers(p, g, names, granted, cnt, cap_s)
        arena.covers()

    def _arena(self, m, p, dut):
        """The arena's reference (the static arena here; :mod:`.multicast_v2` has the
        paged one)."""
        return StaticArenaRef(m, p, dut, self.cfg)

    def _count_refusals(self, m, p, dut, mask):
        """Per lane, the reference's "refused for its counts" (never, without count
        packets; :mod:`.multicast_v2` has the count limit's)."""
        return [Const(0)] * self.cfg.lanes

    def _covers(self, p, g, names, granted, cnt, cap_s):
        """The interesting states are reachable."""
        L, T = self.cfg.lanes, self.cfg.max_targets
        p.cover(Cat(*granted).all(), "all lanes granted a row of the chosen expert in one cycle")
        p.cover(Cat(g.ok[j] & g.tv[j].all() for j in range(L)).all(),
                "every lane granted a row naming max_targets experts")
        self._cover_refused_ahead(p, g, names, granted, cnt)
        p.cover((cnt == cap_s) & (cap_s != 0) & names[0] & ~g.ok[0], "overflow of a full region")

    def _cover_refused_ahead(self, p, g, names, granted, cnt):
        L = self.cfg.lanes
        p.cover(names[0] & ~g.ok[0] & granted[L - 1] & (cnt == 0),
                "a refused row ahead leaves the chosen expert's next row to a later lane")



class StaticArenaRef:
    """The static arena's reference: the rows handed out since the last clear (``pcnt``),
    its capacity latched then (``pcap_s``), a "seen" bit for one chosen place ``cl``; a
    lane's arena row is ``pcnt`` + the granted lanes ahead (``before``)."""

    def __init__(self, m, p, dut, cfg):
        self.m, self.p, self.dut, self.g, self.cfg = m, p, dut, dut.grant, cfg
        pb = pool_count_bits(cfg)
        self.cl = any_const(m, cfg.loc_bits, "chosen_loc")
        self.pcnt, self.pcap_s = Signal(pb, name="ref_pcnt"), Signal(pb, name="ref_pcap")
        self.pseen = Signal(name="ref_pseen")

    def before(self, j):
        return count_ones(self.g.ok[:j])

    def fits(self, j):
        return self.pcnt + self.before(j) < self.pcap_s

    def check_lane(self, j):
        p, g = self.p, self.g
        p.check(~g.ok[j] | (g.loc[j] == self.pcnt + self.before(j)), "arena place is not pool + granted rows ahead")
        p.check(~g.ok[j] | (g.loc[j] < self.pcap_s), "arena place beyond the arena")
        p.check(~(g.ok[j] & (g.loc[j] == self.cl) & self.pseen), "chosen arena place granted twice in a layer")

    def check_state(self):
        """The arena counter exact (a refused row takes no arena row) and the invariants
        k-induction needs."""
        p, dut, m = self.p, self.dut, self.m
        pcnt_q = Signal(len(self.pcnt), name="ref_pcnt_q")
        m.d.sync += pcnt_q.eq(self.pcnt)
        p.check(dut.pool_rows == pcnt_q, "arena rows differ from the granted rows")
        p.check(self.pcnt <= self.pcap_s, "arena rows beyond the latched arena")
        p.check(self.pseen == (self.cl < self.pcnt), "chosen place seen but not below the arena rows (or the reverse)")
        p.check(dut.formal_pool_cap == self.pcap_s, "latched arena differs from the CSR at clear")
        p.check(dut.formal_pool_room == self.pcap_s - self.pcnt, "arena room != capacity - rows")
        p.check(dut.formal_pool_gt == Cat(dut.formal_pool_room > a for a in range(self.cfg.lanes)),
                "registered arena room > a bits stale")

    def update(self):
        m, g = self.m, self.g
        with m.If(g.clear):
            m.d.sync += [self.pcnt.eq(0), self.pcap_s.eq(self.dut.pool_cap), self.pseen.eq(0)]
        with m.Else():
            m.d.sync += self.pcnt.eq(self.pcnt + count_ones(g.ok))
            with m.If(Cat(g.ok[j] & (g.loc[j] == self.cl) for j in range(self.cfg.lanes)).any()):
                m.d.sync += self.pseen.eq(1)

    def covers(self):
        g = self.g
        self.p.cover((self.pcnt == self.pcap_s) & (self.pcap_s != 0) & g.req[0] & ~g.ok[0],
                     "overflow of a full arena")


#: cycles between the packet manager's admission of a group and its grant (A, R, T)
ADMISSION_DELAY = 3


class AdmittedAllocatorHarness(MulticastAllocatorHarness):
    """:class:`MulticastAllocatorAdmitted` under the properties of the exact allocator (the
    model's lane-by-lane rule) and the packet manager's admission as its environment: each
    lane's ``risky`` bit is free, at most one requesting lane a cycle is risky, and a
    requesting lane that is not risky was taken while the allocator was not tight
    (``ADMISSION_DELAY`` cycles before); no request in the
    ``ADMISSION_DELAY`` cycles after a clear (the hub starts a layer on an empty
    pipeline). Bounded (BMC from reset): the admission's guarantee spans cycles that
    k-induction would need as invariants."""

    def __init__(self, cfg, dut_cls=MulticastAllocatorAdmitted):
        super().__init__(cfg, dut_cls)

    def _admission(self, m, p, dut):
        cfg, g = self.cfg, dut.grant
        L = cfg.lanes
        risky = any_seq(m, L, "risky")
        m.d.comb += dut.risky.eq(risky)
        self._risky = risky
        tight = dut.tight
        chain = [tight]
        for d in range(ADMISSION_DELAY):                 # (tight as the input saw it)
            t_q = Signal(name=f"tight_q{d}", init=1)
            m.d.sync += t_q.eq(tight)
            tight = t_q
            chain.append(tight)
        since = Signal(range(ADMISSION_DELAY + 1), name="since_clear", init=ADMISSION_DELAY)
        m.d.sync += since.eq(Mux(g.clear, 0, Mux(since == ADMISSION_DELAY, since, since + 1)))
        self._since, self._chain = since, chain
        self._room_while_roomy(p, dut, chain, since)
        p.assume(~g.req.any() | (since == ADMISSION_DELAY))
        p.assume(count_ones([g.req[j] & risky[j] for j in range(L)]) <= 1)
        for j in range(L):
            p.assume(~g.req[j] | risky[j] | ~tight)

    def _cover_refused_ahead(self, p, g, names, granted, cnt):
        """(The admission never lets a refused row have a row after it in its cycle: in
        its place, the risky lane both granted and refused.)"""
        L, risky = self.cfg.lanes, self._risky
        p.cover(Cat(g.ok[j] & risky[j] & names[j] for j in range(L)).any(),
                "a risky lane granted a row of the chosen expert")
        p.cover(Cat(~g.ok[j] & g.req[j] & risky[j] for j in range(L)).any() & (cnt != 0),
                "a risky lane refused after rows of the chosen expert")

    def _room_while_roomy(self, p, dut, chain, since):
        """The invariants that let k-induction close over the admission's delay: ``tight``
        as it was ``d`` cycles ago (``chain[d]``) clear, and no clear since (``since`` >=
        ``d``), means every expert's room, and the arena's, is still at least
        ``ADMISSION_GROUPS x lanes - (d + 1) x lanes`` -- one cycle's grants, at most
        ``lanes`` rows an expert, each of those cycles (the register reads the room before
        the last cycle's grants). At ``d`` = the delay: room for every roomy lane of a
        group."""
        L, E = self.cfg.lanes, self.cfg.experts
        k = ADMISSION_GROUPS * L
        for d, t in enumerate(chain):
            floor = k - (d + 1) * L
            off = t | (since < d)
            for e in range(E):
                p.check(off | (dut.formal_room[e] >= floor),
                        f"an expert's room below {floor} rows while tight was clear {d} cycles ago")
            p.check(off | (dut.formal_pool_room >= floor),
                    f"the arena's room below {floor} rows while tight was clear {d} cycles ago")
