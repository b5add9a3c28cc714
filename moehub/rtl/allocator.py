"""Address allocator: hands out dense row indices in each expert's input region.

Software reserves one region per expert at start-up (``rowspMalloc``-style: a base and a
capacity in rows, written through the CSR port; the capacity takes effect at the next
layer start, when the allocator latches it). The allocator keeps, per expert, the rows
handed out so far and the room left, and grants up to ``lanes`` rows per cycle, several
of them for the same expert if needed: lane ``j`` asking for expert ``e`` gets
``rows[e] + ahead`` where ``ahead`` is the number of lanes ``i < j`` asking for ``e`` this
cycle, so rows are dense from 0, unique and ordered by lane within a cycle. The grant is
refused (overflow) when ``ahead >= room[e]``; since rows are handed out in order, every
later request for that expert in the cycle is refused too.

Timing: the counters' loop is ``rows += min(requests, room)``, ``room -= min(requests,
room)``; since ``rows + room`` is the latched capacity, every outcome (for 0..lanes
requests, fitting or not) is formed from the registers in parallel, and the request count
only selects one. A grant (``row``, ``ok``) is likewise an AND-OR of candidates formed
from the registers (each expert's counter plus 0..lane, whether its room exceeds 0..lane),
chosen by the one-hot expert and the one-hot count of the requests ahead: nothing but
selects after the requests, which come from registers of the packet manager's pipeline.

Those registers are shaped for it: each lane's request (``req``), its expert as a one-hot
that is zero without a request (the per-expert counts need no AND with ``req``), and the
pairwise same-expert bits (``same``, decoded in A), so the requests ahead are one AND per
lane pair. The room's compares with 0..lanes are registered too (``room_ge``, updated
beside the count from compares of the room register): no compare follows a register on
the grant or the update (with count packets too).

With ``count_packets`` a :class:`~moehub.rtl.counts.limit.CountLimit` beside the counters
keeps each expert's rows left under its announced count, and its allowance (a thermometer
from registers) joins the room in both places: a lane fits when its place is below the
room and allowed; an expert gets ``n`` rows when at least ``n`` ask (a thermometer the
packet manager counts from T's registers), ``n`` fit the room and the counts allow ``n``. A request
refused for counts is ``met`` (COUNT_MISMATCH), not an overflow.

With both (paged regions and count packets) the allowance goes out to the page gate too
(``allow``: a row refused for counts takes no page), and after a page refusal the counted
counters are set a cycle later to the grants that stood, as the uncounted ones are; the
count limit corrects its own registers and verdicts around the refusal
(:mod:`moehub.rtl.counts.limit`), with the lanes the gate found no page for (``short``).
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from .interfaces import allocation_signature
from .counts.limit import CountLimit
from .logic import exactly, masked_equal, select


def _tile_at_init(cfg: HubConfig) -> int:
    """(paged) ``tile_at`` with no rows and the default tile: the rows ``a`` that are a
    multiple of ``tile_rows``."""
    return sum(1 << a for a in range(cfg.lanes) if a % cfg.tile_rows == 0)


class AddressAllocator(wiring.Component):
    """Dense row allocation per expert region (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig

    Attributes
    ----------
    grant : In(allocation_signature(cfg))
        Requests (one-hot expert, decoded a stage earlier) and their grants, answered in
        the same cycle; every grant is applied. ``clear`` (layer start) zeroes the
        counters and latches the capacities.
    cap : In(cap_bits).array(experts)
        Region capacities (CSR).
    rows : Out(cap_bits).array(experts)
        Rows allocated so far (CSR status, the final counts).
    stop_r : In(lanes).array(experts)
        Only when paged: per expert, one-hot, the page gate refused a grant in the cycle
        before (the pool had no page for the tile its row starts; every later one of the
        expert in the cycle with it) with ``a`` grants of the expert ahead of it (bit
        ``a``; the gate forms it from its registers): the counters, which added the
        requests in that cycle, are set now to their value before it plus
        ``a`` (``rows`` and ``room`` are a cycle wrong for that expert meanwhile; the page
        gate refuses its requests of that cycle, as the model does: the pool is still
        empty). ``stop_any``: ``stop_r[e]`` is not zero (the gate's, from its registers).
    tile_m1, tile_m1_load : In(row_bits) ; tile_at : Out(lanes).array(experts)
        Only when paged: the layer's tile rows minus one (the page gate's register) and the
        value it latches at ``clear`` (for the tile starts of a layer's first rows: the
        updates read the register alone, so the clear's choice of the tile size is not in
        front of every counter's compares -- through it, the layer start -> the tile starts'
        next value -> the page gate's registered starts was 26.5 FO4 at deepseek-v3-8gpu
        paged); bit ``a`` of ``tile_at[e]``: row ``rows[e] + a``
        starts a tile -- a register, updated beside the counters from compares of the
        counter register (``rows + n + a`` for every outcome n, chosen as the counters
        are), so the page gate's verdict starts at flops, not at a compare of the counter.
    allow : Out(lanes).array(experts) ; short : In(lanes)
        Only when paged with count packets: the count limit's allowance (bit n - 1: the
        counts allow n grants to the expert), for the page gate; the lanes the gate found
        no page for in the cycle, for the count limit's verdicts.
    formal_room, formal_cap : Out(cap_bits).array(experts) ; formal_room_ge : Out(lanes + 1).array(experts)
        For the proofs (verif/formal; left unconnected in the hub, so synthesis drops them):
        the room left and the capacity latched at the layer start. The proofs state
        ``rows + room == cap`` with them, the invariant k-induction needs to close; and
        that the registered compares ``room_ge`` (bit n: ``room >= n``) agree with the room.
        (Paged, the page gate reads ``room_ge``: whether a row fits, from registers.)
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        E = cfg.experts
        super().__init__({
            "grant": In(allocation_signature(cfg)),
            "cap": In(cfg.cap_bits).array(E),
            "rows": Out(cfg.cap_bits).array(E),
            "formal_room": Out(cfg.cap_bits).array(E),
            "formal_cap": Out(cfg.cap_bits).array(E),
            "formal_room_ge": Out(cfg.lanes + 1).array(E),
            # (paged) per expert, the grants that stand when the page gate refused one
            # (:class:`~moehub.rtl.paging.regions.PageGate`), one-hot
            **({"stop_r": In(cfg.lanes).array(E), "stop_any": In(E), "tile_m1": In(cfg.row_bits), "tile_m1_load": In(cfg.row_bits),
                "tile_at": Out(cfg.lanes, init=_tile_at_init(cfg)).array(E),
                "tile_at_next": Out(cfg.lanes).array(E), "room_ge_next": Out(cfg.lanes + 1).array(E)}
               if cfg.paged else {}),
            **({"allow": Out(cfg.lanes).array(E), "short": In(cfg.lanes)}
               if cfg.paged and cfg.count_packets else {}),
        })

    def _grant(self, m, j, counters, room, room_ge):
        """Lane j's grant: ``rows[e] + ahead`` and ``ahead < room[e]``, with ``ahead`` the
        requests for its expert on lanes before it. For every possible ``ahead`` (a), the
        candidate -- its expert's counter plus a, whether its expert's room exceeds a -- is
        chosen by the one-hot expert from the registers alone; the requests (a one-hot
        ``ahead`` count) then only pick among a few candidates, so no adder, compare or
        experts-wide OR waits for them."""
        cfg, E, g = self.cfg, self.cfg.experts, self.grant
        oh = g.expert[j]
        same = [g.req[i] & g.same[j][i] for i in range(j)]
        ahead = [Signal(name=f"ahead{j}_is{a}") for a in range(j + 1)]
        m.d.comb += [ahead[a].eq(exactly(same, a)) for a in range(j + 1)]
        row_if = [Signal(cfg.cap_bits, name=f"row{j}_if{a}") for a in range(j + 1)]
        fits_if = [Signal(name=f"fits{j}_if{a}") for a in range(j + 1)]
        m.d.comb += [row_if[a].eq(select([(oh[e], counters[e] + a) for e in range(E)], cfg.cap_bits))
                     for a in range(j + 1)]
        # (room[e] > a: the registered compare of room >= a + 1; with count packets beside
        # the counts' allowance)
        m.d.comb += [fits_if[a].eq(Cat(self._fits(oh[e] & room_ge[e][a + 1], e, a + 1) for e in range(E)).any())
                     for a in range(j + 1)]
        m.d.comb += [
            g.row[j].eq(select([(ahead[a], row_if[a]) for a in range(j + 1)], cfg.cap_bits)),
            g.ok[j].eq(g.req[j] & Cat(ahead[a] & fits_if[a] for a in range(j + 1)).any()),
        ]
        return Cat(*ahead)

    def _fits(self, fits, e, n):
        """``fits`` and (count_packets) the counts allow ``n`` grants to expert ``e`` this
        cycle."""
        return fits if self.limit is None else fits & self.limit.allow[e][n - 1]

    def _count_limit(self, m, room, aheads, held):
        """(count_packets) The :class:`CountLimit` beside the counters: wired to the grants
        and the room (and, paged, to the page gate's refusals); returns it."""
        g, L, E = self.grant, self.cfg.lanes, self.cfg.experts
        m.submodules.limit = lim = self.limit
        m.d.comb += [lim.req.eq(g.req), lim.full.eq(g.full), lim.add.eq(g.add), lim.clear.eq(g.clear),
                     g.met.eq(lim.met), g.over.eq(lim.over)]
        m.d.comb += [lim.expert[j].eq(g.expert[j]) for j in range(L)]
        m.d.comb += [lim.ahead[j].eq(aheads[j]) for j in range(L)]
        m.d.comb += [lim.dtot[e].eq(g.dtot[e]) for e in range(E)] + [lim.free[e].eq(g.free[e]) for e in range(E)]
        m.d.comb += [lim.room[e].eq(room[e]) for e in range(E)] + [lim.cap[e].eq(self.cap[e]) for e in range(E)]
        if held:
            m.d.comb += [lim.short.eq(self.short)] + [lim.same[j].eq(g.same[j]) for j in range(L)]
            m.d.comb += [lim.held[e].eq(held[e][0]) for e in range(E)]
            m.d.comb += [self.allow[e].eq(lim.allow[e]) for e in range(E)]
        return lim

    def _update_counted(self, m, e, counters, room, room_ge, held):
        """(count_packets) Expert e's counters after ``min(requests, room, the counts'
        allowance)`` grants: ``grants >= n`` is an AND of three thermometers (requests,
        room, counts; the requests' one counted from T's registers), the one-hot grants
        select among outcomes formed in parallel (paged: a cycle after a page refusal, the
        grants that stood, :meth:`_after_refusal`)."""
        L, g, bits = self.cfg.lanes, self.grant, self.cfg.cap_bits
        ge = [Const(1)] + [self._fits(g.nge[e][n - 1] & room_ge[e][n], e, n) for n in range(1, L + 1)]
        is_n = Signal(L + 1, name=f"grants{e}")
        m.d.comb += is_n.eq(Cat(ge[n] & (~ge[n + 1] if n < L else 1) for n in range(L + 1)))
        m.d.comb += self.limit.grants[e].eq(is_n)
        nxt_rows = select([(is_n[n], counters[e] + n) for n in range(L + 1)], bits)
        nxt_room = select([(is_n[n], room[e] - n) for n in range(L + 1)], bits)
        if held:
            nxt_rows, nxt_room = self._after_refusal(held[e], nxt_rows, nxt_room)
            self._tile_at_next(m, e, counters, [(is_n[n], n) for n in range(L + 1)], held[e])
        m.d.sync += [counters[e].eq(nxt_rows), room[e].eq(nxt_room)]
        self._room_ge_upd[e] = self._room_ge_next(e, room[e], is_n, held[e] if held else None)

    def _room_ge_next(self, e, room, is_n, held_e):
        """``room_ge`` after ``n`` grants (``is_n`` one-hot): room - n >= k is room >= n + k
        where n fits, and 0 >= k where it does not (room >= n + k is false then too) -- from
        compares of the room register, chosen like the room; (paged) a cycle after a page
        refusal, from the held room and the grants that stood. The compares read the
        room's low ``K`` bits and a register of ``room >= 2**K`` (``room_big``, updated
        beside the room: :meth:`_next_state`): a compare of the whole register was the
        head of the page gate's registered tile starts (22.4 FO4 at deepseek-v3-8gpu
        paged)."""
        L, K, big = self.cfg.lanes, self._room_low_bits(), self._room_big[e]

        def at_least(r, r_big, x):
            return r_big | (r[:K] >= x) if K < self.cfg.cap_bits else r >= x
        nxt = Cat(Const(1), *(Cat(*(is_n[n] & at_least(room, big, n + k) for n in range(L + 1))).any()
                              for k in range(1, L + 1)))
        big_nxt = Cat(*(is_n[n] & (room >= (1 << K) + n) for n in range(L + 1))).any()
        if held_e is not None:
            stop_r, _, room_r, stop_any, big_r = held_e
            held_ge = Cat(Const(1), *(Cat(*(stop_r[a] & at_least(room_r, big_r, a + k) for a in range(L))).any()
                                      for k in range(1, L + 1)))
            held_big = Cat(*(stop_r[a] & (room_r >= (1 << K) + a) for a in range(L))).any()
            nxt, big_nxt = Mux(stop_any, held_ge, nxt), Mux(stop_any, held_big, big_nxt)
        self._room_big_upd[e] = big_nxt
        return nxt

    def _room_low_bits(self) -> int:
        """``K``: ``room_ge``'s compares (with up to 2 x lanes) read the room's low K bits."""
        return min((2 * self.cfg.lanes).bit_length(), self.cfg.cap_bits)

    def _tile_at_next(self, m, e, counters, outcomes, held_e):
        """(paged) ``tile_at[e]`` after this cycle: for each outcome ``(cond, n)`` (the
        counter becomes ``rows + n``), whether ``rows + n + a`` starts a tile, compared from
        the counter register and chosen like the counter; after a page refusal, from the
        held counter plus the grants that stood. (An outcome that saturates the counter
        leaves no room, so the gate needs no tile verdict there: not listed.)"""
        L, tm1 = self.cfg.lanes, self.tile_m1
        starts = [Signal(name=f"tile_at{e}_if{x}") for x in range(2 * L)]
        m.d.comb += [starts[x].eq(masked_equal(counters[e], -x, tm1)) for x in range(2 * L)]
        nxt = Cat(*(Cat(*(c & starts[n + a] for c, n in outcomes if n + a < 2 * L)).any()
                    for a in range(L)))
        stop_r, rows_r, _, stop_any, _ = held_e
        held_at = Cat(*(Cat(*(stop_r[b] & masked_equal(rows_r, -(a + b), tm1) for b in range(L))).any()
                        for a in range(L)))
        self._tile_at_upd[e] = Mux(stop_any, held_at, nxt)

    def _after_refusal(self, held_e, nxt_rows, nxt_room):
        """(paged) A page refused in the cycle before: the counters, which added every
        request then, are set from registers to the grants that stood (the counters of
        that cycle plus ``a``, ``stop_r``); the page gate refuses the expert's
        requests of this cycle (the pool is still empty). Returns (rows, room) next."""
        L, bits = self.cfg.lanes, self.cfg.cap_bits
        stop_r, rows_r, room_r, stop_any, _ = held_e
        return (Mux(stop_any, select([(stop_r[a], rows_r + a) for a in range(L)], bits), nxt_rows),
                Mux(stop_any, select([(stop_r[a], room_r - a) for a in range(L)], bits), nxt_room))

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        L, E = cfg.lanes, cfg.experts
        counters = [Signal(cfg.cap_bits, name=f"rows{e}") for e in range(E)]
        room = [Signal(cfg.cap_bits, name=f"room{e}") for e in range(E)]
        # (bit n: room >= n, n = 0..lanes -- the compares the grants and the update read,
        # registered: updated with the room, from compares of the room register with
        # 0..2 x lanes formed beside the request count)
        room_ge = [Signal(L + 1, name=f"room_ge{e}", init=1) for e in range(E)]
        self._room_big = [Signal(name=f"room_big{e}") for e in range(E)]      # room >= 2**K
        self._room_big_upd = {}
        for e in range(E):
            m.d.comb += self.rows[e].eq(counters[e])
            m.d.comb += self.formal_room_ge[e].eq(room_ge[e])

        self.limit = CountLimit(cfg) if cfg.count_packets else None
        aheads = [self._grant(m, j, counters, room, room_ge) for j in range(L)]

        # rows + room stays equal to the capacity latched at the layer start, so the
        # saturating update needs no adder after the compare: both outcomes are computed
        # in parallel with it.
        cap_l = [Signal(cfg.cap_bits, name=f"cap{e}") for e in range(E)]
        m.d.comb += [self.formal_room[e].eq(room[e]) for e in range(E)]
        m.d.comb += [self.formal_cap[e].eq(cap_l[e]) for e in range(E)]
        held = []
        if cfg.paged:       # (a refusal of the page gate, and the counters before it)
            for e in range(E):
                held.append((self.stop_r[e], Signal(cfg.cap_bits, name=f"rows_r{e}"),
                             Signal(cfg.cap_bits, name=f"room_r{e}"), self.stop_any[e],
                             Signal(name=f"room_r_big{e}")))
                m.d.sync += [held[e][1].eq(counters[e]), held[e][2].eq(room[e]), held[e][4].eq(self._room_big[e])]
        if self.limit is not None:
            self._count_limit(m, room, aheads, held)
        with m.If(self.grant.clear):
            m.d.sync += [c.eq(0) for c in counters]
            m.d.sync += [r.eq(c) for r, c in zip(room, self.cap)]
            m.d.sync += [c.eq(x) for c, x in zip(cap_l, self.cap)]
        self._room_ge_upd, self._tile_at_upd = {}, {}
        with m.Else():
            for e in range(E if self.limit is not None else 0):
                self._update_counted(m, e, counters, room, room_ge, held)
            for e in range(E if self.limit is None else 0):
                # (the expert one-hot is zero without a request: the counts start at the
                # packet manager's registers)
                reqs = [self.grant.expert[j][e] for j in range(L)]
                # Every outcome n = 0..lanes is formed from the registers in parallel with
                # the request count, which then only selects one.
                # (an AND-OR of the outcomes: the counts are exclusive, no chain of muxes)
                is_n = [exactly(reqs, n) for n in range(L + 1)]
                fits = [room_ge[e][n] for n in range(L + 1)]
                nxt_rows = select([(is_n[n], Mux(fits[n], counters[e] + n, cap_l[e]))
                                   for n in range(L + 1)], cfg.cap_bits)
                nxt_room = select([(is_n[n], Mux(fits[n], room[e] - n, 0)) for n in range(L + 1)],
                                  cfg.cap_bits)
                if cfg.paged:
                    # (a page refused: the counters add every request now, and are set a
                    # cycle later, from registers, to the grants that stood -- the page gate
                    # refuses the expert's requests of that cycle: the pool is still empty;
                    # room_ge with them, from compares of the held room register)
                    nxt_rows, nxt_room = self._after_refusal(held[e], nxt_rows, nxt_room)
                    self._tile_at_next(m, e, counters, [(is_n[n] & fits[n], n) for n in range(L + 1)], held[e])
                m.d.sync += [counters[e].eq(nxt_rows), room[e].eq(nxt_room)]
                self._room_ge_upd[e] = self._room_ge_next(e, room[e], is_n, held[e] if held else None)
        self._next_state(m, room_ge)
        return m

    def _next_state(self, m, room_ge):
        """``room_ge`` and (paged) ``tile_at`` take their next values every cycle (the
        capacities' and the new tile's at ``clear``); paged, the next values go out too
        (``room_ge_next``, ``tile_at_next``): the page gate forms each lane's tile starts
        from them a cycle ahead, for the expert the lane will name."""
        cfg, clear = self.cfg, self.grant.clear
        L, E = cfg.lanes, cfg.experts
        for e in range(E):
            ge = Signal(L + 1, name=f"room_ge{e}_next")
            m.d.comb += ge.eq(Mux(clear, Cat(self.cap[e] >= n for n in range(L + 1)), self._room_ge_upd[e]))
            m.d.sync += [room_ge[e].eq(ge),
                         self._room_big[e].eq(Mux(clear, self.cap[e] >= 1 << self._room_low_bits(),
                                                  self._room_big_upd[e]))]
            if cfg.paged:       # (row a starts a tile: at clear, a multiple of the new tile rows)
                at = Signal(L, name=f"tile_at{e}_next")
                at0 = Cat(*(masked_equal(Const(0, cfg.row_bits), -a, self.tile_m1_load) for a in range(L)))
                m.d.comb += [at.eq(Mux(clear, at0, self._tile_at_upd[e])),
                             self.tile_at_next[e].eq(at), self.room_ge_next[e].eq(ge)]
                m.d.sync += self.tile_at[e].eq(at)
