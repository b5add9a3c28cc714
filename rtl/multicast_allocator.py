"""Multicast allocator of protocol v2 (issue 14): a row per target expert, one place in the arena.

With ``max_targets`` > 1 a row names up to ``max_targets`` experts of this GPU. The hub
writes its data once, into the pool's static arena (``POOL_BASE``, ``POOL_CAP`` rows), and
gives each target a row in that expert's index array (its metadata word names the row's
place in the arena, ``loc``). This unit grants up to ``lanes`` opening rows per cycle,
each with up to ``max_targets`` targets, exactly as the reference model opens them
(:meth:`moehub.verif.model.HubModel._open`, packets applied in lane order):

* lane ``j``'s row is granted (``ok``) when every target ``x`` of it has room --
  ``rows[x] + ahead(j, x) < cap[x]``, ``ahead(j, x)`` the rows *granted* on lanes
  ``i < j`` that name ``x`` -- and the arena has room: ``pool + granted(i < j) < pool_cap``;
* a granted row's target ``t`` (expert ``x``) gets row ``rows[x] + ahead(j, x)``: rows are
  dense from 0 and unique per expert, ordered by lane within a cycle (a row names an
  expert at most once, so target order within a row never ranks two rows of one
  expert); its ``loc`` is ``pool + granted(i < j)``;
* a refused row (OVERFLOW: one full target region, or a full arena) takes nothing -- no row
  of any target, no arena row -- and the rows after it in the cycle rank as if it were
  absent. (The model checks OVERFLOW last, after BAD_EXPERT, POST_EOS and COUNT_MISMATCH;
  rows refused for those do not request here.)

That last rule is what multicast adds to the unicast :class:`AddressAllocator`: there,
a refused request for expert ``e`` means every later request for ``e`` in the cycle is
refused too, so counting *requests* ahead is exact; here a row refused because target
``B`` is full does not consume its row of target ``A``, so lane ``j``'s verdict depends on
the verdicts of the lanes before it, a chain across the lanes.

Timing, in the allocator's style -- everything formed from registers and selected by
one-hots:

* per lane ``j`` and target ``t``, from the registers alone: "room of its expert > a" for
  every ``a = 0..j`` (``room > a`` per expert, chosen by the target's one-hot) and its
  expert's counter (chosen by the one-hot; the ``+ a`` beside the ok chain);
* per lane ``j``, for every pattern ``g`` of verdicts of the lanes before it (``2**j``
  patterns), the verdict if those were the verdicts (``cand``): per target the count of
  granted lanes ahead naming its expert -- a one-hot over ``j`` bits, the lane-pair
  relations ``same`` ANDed with the constant ``g`` -- picks a "room > a", an AND over the
  targets, and the arena's "room > |g|" (``|g|`` a constant);
* the verdicts then ripple through one 2:1 mux per lane: ``ok[j]`` is the ``cand`` of
  lane ``j`` chosen by ``ok[j-1]``, ..., ``ok[0]`` (the latest select at the root);
* granted rows and ``loc`` pick among their ``+ a`` candidates by the one-hot count of
  the verdicts ahead; the counters' updates (``rows += n``, ``room -= n`` for the
  ``n = 0..lanes`` grants naming the expert; the arena's likewise) are formed from the
  registers for every ``n`` and selected by the one-hot count of the final verdicts.
  Grants always fit, so no saturation is needed.

Fan-in of the grant, honestly: ``ok[lanes-1]`` depends on every lane's request and
target one-hots (``lanes x max_targets x experts`` bits), every expert's room (through
the one-hots) and the arena's room: the whole cycle's requests, as the model's sequential
rule implies. Its depth is the lane-pair relations (an AND-OR over the experts), a
one-hot count over at most ``lanes - 1`` bits, a ``lanes``-way AND-OR, an AND over the
targets, then ``lanes - 1`` muxes; the candidates cost ``2**lanes - 1`` per target.

Paged multicast (``pool_pages`` > 0: the arena takes a page per tile of its rows) is
not covered here: the arena counter's room would become "room in the current page, or a
page free", the page pool's ``avail`` with one take per cycle.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig, field_bits
from .logic import exactly, select


def late_count(bits) -> list:
    """How many of ``bits`` are set, as a one-hot (``[exactly 0, ..., exactly n]``), for
    bits that arrive one after another (the verdicts of lanes 0, 1, ...): a shift by each
    bit in turn, one mux level per bit, so the last bit passes one mux, not an adder or
    a sum of products."""
    oh = [Const(1)]
    for b in bits:
        oh = [Mux(b, oh[n - 1] if n else Const(0), oh[n] if n < len(oh) else Const(0))
              for n in range(len(oh) + 1)]
    return oh


def pool_count_bits(cfg: HubConfig) -> int:
    """Width of the arena's counter and capacity (0 .. pool_rows)."""
    return field_bits(cfg.pool_rows)


def multicast_allocation_signature(cfg: HubConfig) -> wiring.Signature:
    """Row requests of multicast rows from the packet manager's T stage, answered in the
    same cycle.

    Members
    -------
    req : Out(lanes)                                lane j opens a row (its target set is good)
    tv : Out(max_targets).array(lanes)              target t of lane j's row is valid
    oh : Out(experts).array(lanes, max_targets)     its expert, one-hot (0 when not valid)
    ok : In(lanes)                                  the row is granted (else: OVERFLOW)
    row : In(row_bits).array(lanes, max_targets)    target t's row in its expert (when ok)
    loc : In(loc_bits).array(lanes)                 the row's place in the arena (when ok)
    clear : Out(1)                                  layer start: zero the counters, latch capacities
    """
    L, T, E = cfg.lanes, cfg.max_targets, cfg.experts
    return wiring.Signature({
        "req": Out(L), "tv": Out(T).array(L), "oh": Out(E).array(L, T),
        "ok": In(L), "row": In(cfg.row_bits).array(L, T), "loc": In(cfg.loc_bits).array(L),
        "clear": Out(1),
    })


class MulticastAllocator(wiring.Component):
    """Dense rows per target expert and one arena row per multicast row (see the module
    docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``max_targets`` > 1 (multicast), static arena (``pool_pages`` = 0).

    Attributes
    ----------
    grant : In(multicast_allocation_signature(cfg))
        Requests and their grants, in the same cycle; every grant is applied. ``clear``
        (layer start, with no request) zeroes the counters and latches the capacities.
    cap : In(cap_bits).array(experts)
        Index-array (region) capacities (REGION_CAP).
    pool_cap : In(pool_count_bits)
        Arena capacity in rows (POOL_CAP, clamped to ``pool_rows`` by the CSR bank).
    rows : Out(cap_bits).array(experts)
        Rows allocated so far per expert (ROWS).
    pool_rows : Out(pool_count_bits)
        Arena rows handed out so far.
    formal_room, formal_cap : Out(cap_bits).array(experts)
    formal_room_gt : Out(lanes).array(experts)
    formal_pool_room, formal_pool_cap : Out(pool_count_bits)
    formal_pool_gt : Out(lanes)
        Only with ``formal=True`` (the property harness, verif/formal): the room left, the
        capacities latched at the layer start (``rows + room == cap``) and the registered
        ``room > a`` bits -- the invariants k-induction needs. (Without them the unit has
        no latched capacity at all: synthesis measures what the hub would carry.)
    """

    def __init__(self, cfg: HubConfig, formal: bool = False):
        if not cfg.multicast or cfg.paged:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise ValueError(f"hub[{cfg.name}]: a multicast allocator needs max_targets > 1 "
                             "and a static arena (pool_pages = 0)")
        self.cfg, self.formal = cfg, formal
        E, L, pb = cfg.experts, cfg.lanes, pool_count_bits(cfg)
        ports = {
            "grant": In(multicast_allocation_signature(cfg)),
            "cap": In(cfg.cap_bits).array(E), "pool_cap": In(pb),
            "rows": Out(cfg.cap_bits).array(E), "pool_rows": Out(pb),
        }
        if formal:
            ports.update({
                "formal_room": Out(cfg.cap_bits).array(E), "formal_cap": Out(cfg.cap_bits).array(E),
                "formal_room_gt": Out(L).array(E),
                "formal_pool_room": Out(pb), "formal_pool_cap": Out(pb), "formal_pool_gt": Out(L)})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg, g = self.cfg, self.grant
        L, T, E, cb, pb = cfg.lanes, cfg.max_targets, cfg.experts, cfg.cap_bits, pool_count_bits(cfg)
        counters = [Signal(cb, name=f"rows{e}") for e in range(E)]
        room = [Signal(cb, name=f"room{e}") for e in range(E)]
        pool, pool_room = Signal(pb, name="pool"), Signal(pb, name="pool_room")
        m.d.comb += [self.rows[e].eq(counters[e]) for e in range(E)] + [self.pool_rows.eq(pool)]

        # ---- registers beside the counters: room > a per expert, the arena's room > a
        # (a = 0..lanes-1; formed for the next cycle with the counters' update, so the
        # grant starts from flops, not from a compare)
        room_gt = [Signal(L, name=f"room{e}_gt") for e in range(E)]
        pool_gt = Signal(L, name="pool_gt")
        # the experts each lane's row names
        mask = [Signal(E, name=f"mask{j}") for j in range(L)]
        m.d.comb += [mask[j][e].eq(Cat(g.oh[j][t][e] for t in range(T)).any())
                     for j in range(L) for e in range(E)]

        ok = [Signal(name=f"ok{j}") for j in range(L)]
        self._counts = {}
        for j in range(L):
            self._lane(m, j, ok, mask, room_gt, pool_gt, counters, pool)
        m.d.comb += g.ok.eq(Cat(*ok))

        # ---- the counters: every outcome formed from the registers, chosen by the one-hot
        # count of the grants naming the expert (each row names an expert at most once)
        if self.formal:
            cap_l = [Signal(cb, name=f"cap{e}") for e in range(E)]
            pool_cap_l = Signal(pb, name="pool_cap_l")
            m.d.comb += [self.formal_room[e].eq(room[e]) for e in range(E)]
            m.d.comb += [self.formal_cap[e].eq(cap_l[e]) for e in range(E)]
            m.d.comb += [self.formal_room_gt[e].eq(room_gt[e]) for e in range(E)]
            m.d.comb += [self.formal_pool_room.eq(pool_room), self.formal_pool_cap.eq(pool_cap_l),
                         self.formal_pool_gt.eq(pool_gt)]
            with m.If(g.clear):
                m.d.sync += [c.eq(x) for c, x in zip(cap_l, self.cap)] + [pool_cap_l.eq(self.pool_cap)]
        with m.If(g.clear):
            m.d.sync += [c.eq(0) for c in counters] + [r.eq(c) for r, c in zip(room, self.cap)]
            m.d.sync += [room_gt[e][a].eq(self.cap[e] > a) for e in range(E) for a in range(L)]
            m.d.sync += [pool.eq(0), pool_room.eq(self.pool_cap)]
            m.d.sync += [pool_gt[a].eq(self.pool_cap > a) for a in range(L)]
        with m.Else():
            for e in range(E):
                is_n = late_count([ok[j] & mask[j][e] for j in range(L)])
                m.d.sync += [
                    counters[e].eq(select([(is_n[n], counters[e] + n) for n in range(L + 1)], cb)),
                    room[e].eq(select([(is_n[n], room[e] - n) for n in range(L + 1)], cb)),
                    room_gt[e].eq(select([(is_n[n], Cat(room[e] > a + n for a in range(L)))
                                          for n in range(L + 1)], L)),
                ]
            is_n = late_count(ok)
            m.d.sync += [pool.eq(select([(is_n[n], pool + n) for n in range(L + 1)], pb)),
                         pool_room.eq(select([(is_n[n], pool_room - n) for n in range(L + 1)], pb)),
                         pool_gt.eq(select([(is_n[n], Cat(pool_room > a + n for a in range(L)))
                                            for n in range(L + 1)], L))]
        return m

    def _fits(self, m, j, p, ahead, mask, room_gt, same):
        """Every expert lane j's row names has room for it, if the lanes ``ahead`` (and no
        other lanes before j) are granted: per expert, the count of those lanes naming it
        (from the requests alone, a one-hot) picks one of its registered ``room > a`` bits;
        an AND over the experts. (No select by the targets' one-hots on the path, and no
        cost per target: the counts depend on the set of lanes, shared by every lane
        after them.)"""
        E = self.cfg.experts
        terms = []
        for e in range(E):
            n = self._ahead_count(m, tuple(ahead), e, mask)
            terms.append(~mask[j][e] | Cat(*(n[a] & room_gt[e][a] for a in range(len(ahead) + 1))).any())
        ok = Signal(name=f"fits{j}_p{p}")
        m.d.comb += ok.eq(Cat(*terms).all())
        return ok

    def _ahead_count(self, m, lanes, e, mask):
        """The lanes of ``lanes`` naming expert e, as a one-hot count (shared by the
        patterns of every later lane)."""
        key = (lanes, e)
        if key not in self._counts:
            bits = [mask[i][e] for i in lanes]
            oh = [Signal(name=f"n{''.join(map(str, lanes))}_{e}_is{a}") for a in range(len(lanes) + 1)]
            m.d.comb += [oh[a].eq(exactly(bits, a)) for a in range(len(lanes) + 1)]
            self._counts[key] = oh
        return self._counts[key]

    def _lane(self, m, j, ok, mask, room_gt, pool_gt, counters, pool):
        """Lane j's verdict (a candidate per pattern of the verdicts ahead, then one mux per
        lane ahead), its targets' rows and its arena row."""
        cfg, g = self.cfg, self.grant
        T, E, cb = cfg.max_targets, cfg.experts, cfg.cap_bits
        # lane i < j names target t's expert
        same = [[Signal(name=f"same{j}_{t}_{i}") for i in range(j)] for t in range(T)]
        m.d.comb += [same[t][i].eq((g.oh[j][t] & mask[i]).any()) for t in range(T) for i in range(j)]
        # the verdict for each pattern of verdicts ahead (bit i of p: lane i granted)
        cand = []
        for p in range(1 << j):
            ahead = [i for i in range(j) if p >> i & 1]
            c = Signal(name=f"cand{j}_p{p}")
            m.d.comb += c.eq(g.req[j] & pool_gt[len(ahead)] & self._fits(m, j, p, ahead, mask, room_gt, same))
            cand.append(c)
        # the verdicts ahead select: ok[j-1] at the root (it comes last), ok[0] at the leaves
        level = cand
        for i in range(j):
            level = [Mux(ok[i], level[2 * k + 1], level[2 * k]) for k in range(len(level) // 2)]
        m.d.comb += ok[j].eq(level[0])
        # rows: the expert's counter (chosen by the one-hot from the registers) + the granted
        # rows ahead naming it, a one-hot count of the verdicts ahead
        for t in range(T):
            base = Signal(cb, name=f"base{j}_{t}")
            m.d.comb += base.eq(select([(g.oh[j][t][e], counters[e]) for e in range(E)], cb))
            n_ahead = late_count([ok[i] & same[t][i] for i in range(j)])
            m.d.comb += g.row[j][t].eq(select([(n_ahead[a], base + a) for a in range(j + 1)], cb))
        before = late_count(ok[:j])
        m.d.comb += g.loc[j].eq(select([(before[a], pool + a) for a in range(j + 1)], len(pool)))


class MulticastAllocatorByTargets(MulticastAllocator):
    """The same grants, the verdict formed per *target* instead of per expert (the first
    version, kept for the synthesis comparison of ``moehub synth-unit``): each target's
    "room of its expert > a" is chosen from the experts' registered bits by the target's
    one-hot (an experts-wide AND-OR), the count of granted lanes ahead naming its expert
    (the lane-pair relations ``same``) picks one, and an AND over the targets -- so the
    path has the one-hot select before the count, and the cost grows with
    ``max_targets``."""

    def _fits(self, m, j, p, ahead, mask, room_gt, same):
        g, T, E = self.grant, self.cfg.max_targets, self.cfg.experts
        fit_t = []
        for t in range(T):
            fits_if = self._fits_if(m, j, t, room_gt)
            counted = [same[t][i] for i in ahead]
            fit_t.append(~g.tv[j][t] | Cat(*(exactly(counted, a) & fits_if[a]
                                              for a in range(len(ahead) + 1))).any())
        ok = Signal(name=f"fits{j}_p{p}")
        m.d.comb += ok.eq(Cat(*fit_t).all())
        return ok

    def _fits_if(self, m, j, t, room_gt):
        """Target t of lane j: its expert has room for a + 1 rows (a = 0..j), from the
        registers."""
        key = ("fits_if", j, t)
        if key not in self._counts:
            g, E = self.grant, self.cfg.experts
            f = [Signal(name=f"fits{j}_{t}_if{a}") for a in range(j + 1)]
            m.d.comb += [f[a].eq(Cat(g.oh[j][t][e] & room_gt[e][a] for e in range(E)).any())
                         for a in range(j + 1)]
            self._counts[key] = f
        return self._counts[key]
