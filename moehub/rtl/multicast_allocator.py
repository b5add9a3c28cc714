"""Multicast allocator of protocol v2: a row per target expert, one place in the arena.

With ``max_targets`` > 1 a row names up to ``max_targets`` experts of this GPU. The hub
writes its data once, into the pool's static arena (``POOL_BASE``, ``POOL_CAP`` rows), and
gives each target a row in that expert's index array (its metadata word names the row's
place in the arena, ``loc``). This unit grants up to ``lanes`` opening rows per cycle,
each with up to ``max_targets`` targets, exactly as the reference model opens them
(:meth:`moehub.spec.model.HubModel._open`, packets applied in lane order):

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
one-hots. The loop that sets the cycle is room -> verdicts -> room; it is kept to
registers, one AND-OR, an AND over the experts, a mux per lane, the last verdict's
fan-out to every expert and a mux:

* per expert, registered: ``room > a`` for ``a = 0..lanes-1`` (and the arena's), formed
  for the next cycle with the update, so no compare is on the loop;
* pre-ranked (:class:`MulticastPrerank`, the packet manager's R -> T registers): per lane
  the experts its row names (``mask``) and, for every set of lanes but the last, how many
  of them name each expert (a one-hot) -- functions of the packets alone, formed a stage
  before the requests are known (a pattern of verdicts only contains requesting lanes);
* per lane ``j``, for every pattern ``p`` of verdicts of the lanes before it (``2**j``
  patterns), the verdict if those were the verdicts (``cand``): per expert the
  pre-ranked count of the lanes of ``p`` naming it picks one of its ``room > a`` bits (an
  AND-OR of at most ``lanes`` terms), an AND over the experts the row names, and the
  arena's ``room > |p|`` (``|p|`` a constant). Per expert, not per target: no select by
  the targets' one-hots on the loop, and the cost does not grow with ``max_targets``;
* the verdicts then ripple through one 2:1 mux per lane: ``ok[j]`` is the ``cand`` of
  lane ``j`` chosen by ``ok[j-1]``, ..., ``ok[0]`` (the latest select at the root);
* they update each expert's ``room > a`` bits by a chain of muxes -- lane 0 at the leaves,
  the last lane (the latest verdict) at the root -- among ``room now > a + d`` formed from
  the registers for every ``d`` grants naming it this cycle; the rows and the room
  themselves are registered a cycle late (before the last cycle's grants, whose count is
  registered as a one-hot that shifts once per lane, :func:`late_count`: the last verdict
  passes one mux), so the verdicts fan out to a few flops per expert, not to the
  counters' 13-bit selects; ``rows`` (ROWS) is that select registered once more (a
  cycle after the grants: the tracker's sweep and the CSRs read it long after).
  Grants always fit: no saturation;
* off the loop, granted rows and ``loc`` pick among their ``+ p + a`` candidates (a
  target's expert's lagged counter and last cycle's grants ``p``, chosen by the target's
  one-hot, plus ``a``: a narrow add) by the one-hot count of the granted lanes ahead
  naming the expert (the lane-pair relations ``same``); the packet manager registers
  the row candidates and that count apart and chooses in AL (``row_if``, ``row_ahead``).

Fan-in of the grant, honestly: ``ok[lanes-1]`` depends on every lane's request and
target set (``lanes x experts`` mask bits, pre-ranked), every expert's ``room > a`` bits
and the arena's: the whole cycle's requests, as the model's sequential rule implies. Its
depth from the registers: an AND-OR of ``<= lanes`` terms, an AND of ``experts`` terms,
``lanes - 1`` muxes; the candidates cost ``2**lanes - 1`` ANDs of ``experts`` terms.
Without the pre-rank (:class:`MulticastAllocatorSameCycle`) the masks and counts are
formed in the cycle from the one-hots; with the verdict per target
(:class:`MulticastAllocatorByTargets`, the first version) each target's room is chosen by
its one-hot, an ``experts``-wide AND-OR, before the count: both kept for the synthesis
comparison (README, "Protocol v2").

Paged multicast (``pool_pages`` > 0: the arena takes a page per tile of its rows) is the
hub's :class:`MulticastAllocatorAdmitted` only: its arena's room is then the pool's pages
(:class:`~moehub.rtl.paging.arena.PagedArena`, one take a cycle), which the chain of
verdicts here does not read.
"""
from amaranth import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig, field_bits
from .logic import add_narrow, exactly, late_count, select
from .counts.gate import total_bits
from .counts.multicast_limit import MulticastCountLimit
from .paging.arena import PagedArena
from .paging.regions import tile_sizes
from ..spec.timing import ADMISSION_GROUPS


def one_hot(v) -> Value:
    """Exactly one bit of ``v`` is set."""
    return (v != 0) & ((v & (v - 1)) == 0)


def arena_rows_max(cfg: HubConfig) -> int:
    """The most rows one layer can place in the arena: each takes a row of some expert's
    region, so ``experts x max_rows_per_expert`` -- the static arena's size. Paged, it is
    the arena counter's capacity, never reached before a region is full: pages handed back
    during a layer let more than ``pool_rows`` rows through the pool, and the model bounds
    the paged arena by its pages alone (``HubModel._room``)."""
    return cfg.experts * cfg.max_rows_per_expert


def pool_count_bits(cfg: HubConfig) -> int:
    """Width of the arena's counter and capacity (0 .. pool_rows, or paged
    :func:`arena_rows_max`)."""
    return field_bits(max(cfg.pool_rows, arena_rows_max(cfg)))


def prerank_sets(lanes: int) -> list:
    """The sets of lanes whose counts a pre-rank forms: every non-empty subset of the
    lanes but the last (the lanes that may be granted ahead of a later lane), as sorted
    tuples, smallest first."""
    from itertools import combinations
    return [c for n in range(1, lanes) for c in combinations(range(lanes - 1), n)]


def prerank_bits(cfg: HubConfig) -> int:
    """Width of the pre-rank's counts: per set of :func:`prerank_sets` and per expert, a
    one-hot of ``len(set) + 1`` bits."""
    return sum(cfg.experts * (len(c) + 1) for c in prerank_sets(cfg.lanes))


def prerank_index(cfg: HubConfig, lanes: tuple, e: int, a: int) -> int:
    """Bit of the pre-rank's counts: ``a`` of the lanes of ``lanes`` name expert ``e``."""
    off = 0
    for c in prerank_sets(cfg.lanes):
        if c == tuple(lanes):
            return off + e * (len(c) + 1) + a
        off += cfg.experts * (len(c) + 1)
    raise KeyError(lanes)


def prerank_counts(cfg: HubConfig, masks) -> Value:
    """The pre-rank's counts of ``masks`` (per lane, the experts its row names): for every
    set of lanes, how many of them name each expert, one-hot (see :func:`prerank_index`)."""
    bits = []
    for c in prerank_sets(cfg.lanes):
        for e in range(cfg.experts):
            bits += [exactly([masks[i][e] for i in c], a) for a in range(len(c) + 1)]
    return Cat(*bits)


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

    With count packets (the allocator's :class:`~moehub.rtl.counts.multicast_limit.
    MulticastCountLimit`):

    cnt_add, cnt_full : Out(lanes)                  lane j's count packet adds; it completes its expert
    cnt_dead : Out(lanes)                           lane j's row names an expert ``dead`` a cycle ago
                                                    (registered a stage ahead, from R's packets)
    cref_q : Out(lanes).array(2)                    lane j's row names an expert of ``dead_next_if[k]``
                                                    (likewise)
    dead : In(experts)                              the count limit's ``dead`` (a register): the
                                                    expert's counts are all in and met
    dead_next_if : In(experts).array(2)             ``dead``'s next value, the risky grant refused / granted
    dtot : Out(total_bits).array(experts)           the counts of the group behind
    met : In(lanes)                                 the row is refused for counts (COUNT_MISMATCH)
    over : In(lanes)                                a completing count below the rows held (COUNT_MISMATCH)
    """
    L, T, E = cfg.lanes, cfg.max_targets, cfg.experts
    counts = {"cnt_add": Out(L), "cnt_full": Out(L), "cnt_dead": Out(L), "cref_q": Out(L).array(2),
              "dead_next_if": In(E).array(2),
              "dtot": Out(total_bits(cfg)).array(E),
              "met": In(L), "over": In(L), "dead": In(E)} if cfg.count_packets else {}
    return wiring.Signature({
        "req": Out(L), "tv": Out(T).array(L), "oh": Out(E).array(L, T),
        "ok": In(L), "row": In(cfg.row_bits).array(L, T), "loc": In(cfg.loc_bits).array(L),
        "clear": Out(1), **counts,
    })

#: (count_packets) Copies of the packet manager's ``cnt_dead`` registers, each read by an
#: eighth of the experts' sure grants: with four, a copy's fan-out tree (three buffers) led
#: the path into the count limit's registered refusals, 23.6 FO4 at deepseek-v3-8gpu with
#: every v2 feature.
CNT_DEAD_COPIES = 8


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
        Rows allocated so far per expert (ROWS), registered: a cycle after the grants.
    row_if, row_ahead : Out
        ``grant.row`` in two parts, for the packet manager to register apart: lane j's
        target t's row if ``a`` granted rows ahead of it name the expert (``row_if[j][t][a]``,
        a <= j; from the counters and the target's one-hot) and that count, one-hot
        (``row_ahead[j][t]``; from the verdicts). ``grant.row`` is their select (what the
        property harness checks); the packet manager registers the parts and selects in AL,
        so the late verdicts and the expert select are not in series into one register.
    pool_rows : Out(pool_count_bits)
        Arena rows handed out so far, registered as ``rows``.
    formal_room, formal_cap : Out(cap_bits).array(experts)
    formal_room_gt : Out(lanes).array(experts)
    formal_pool_room, formal_pool_cap : Out(pool_count_bits)
    formal_pool_gt : Out(lanes)
    formal_lag_onehot : Out(1)
        Only with ``formal=True`` (the property harness, verif/formal): the room left, the
        capacities latched at the layer start (``rows + room == cap``) and the registered
        ``room > a`` bits, and that the lagged grant counts are one-hots -- the invariants
        k-induction needs. (Without them the unit has no latched capacity at all:
        synthesis measures what the hub would carry.)
    """

    #: the requests' counts come pre-ranked, registered a stage ahead (:class:`MulticastPrerank`)
    PRERANK = True
    #: protocol v2's paged arena (``pool_pages`` > 0) and count packets' refusals
    #: (``count_packets``) are supported (:class:`MulticastAllocatorAdmitted` only: the
    #: others would take the config and never refuse a row for its counts)
    V2 = False

    def __init__(self, cfg: HubConfig, formal: bool = False):
        if not cfg.multicast or ((cfg.paged or cfg.count_packets) and not self.V2):
            self._MustUse__silence = True       # (refused: never elaborated)
            # (the keys that are set and not implemented, with their values: the caller
            # sees which of its config's settings this variant refuses)
            unsupported = [] if self.V2 else [f"{k} = {getattr(cfg, k)!r}" for k in ("pool_pages", "count_packets")
                                              if getattr(cfg, k)]
            raise ValueError(f"hub[{cfg.name}]: {type(self).__name__} needs max_targets > 1"
                             + ("" if self.V2 else ", a static arena (pool_pages = 0) and no count "
                                                   "packets (count_packets = 0)")
                             + (f"; got max_targets = {cfg.max_targets}" if not cfg.multicast else "")
                             + (f"; got {', '.join(unsupported)}: only MulticastAllocatorAdmitted "
                                "implements them" if unsupported else ""))
        self.cfg, self.formal = cfg, formal
        E, L, pb = cfg.experts, cfg.lanes, pool_count_bits(cfg)
        ports = {
            "grant": In(multicast_allocation_signature(cfg)),
            "cap": In(cfg.cap_bits).array(E), "pool_cap": In(pb),
            "rows": Out(cfg.cap_bits).array(E), "pool_rows": Out(pb),
            "row_if": Out(cfg.cap_bits).array(L, cfg.max_targets, L), "row_ahead": Out(L).array(L, cfg.max_targets),
        }
        if self.PRERANK:
            ports.update({"pre_mask": In(E).array(L), "pre_counts": In(prerank_bits(cfg))})
        ports.update(self._extra_ports(cfg))
        if formal:
            ports.update({
                "formal_room": Out(cfg.cap_bits).array(E), "formal_cap": Out(cfg.cap_bits).array(E),
                "formal_room_gt": Out(L).array(E),
                "formal_pool_room": Out(pb), "formal_pool_cap": Out(pb), "formal_pool_gt": Out(L),
                "formal_lag_onehot": Out(1)})
        super().__init__(ports)

    def _extra_ports(self, cfg: HubConfig) -> dict:
        """Ports a variant adds (none here)."""
        return {}

    def _arena_pages(self, m, arena, ok):
        """(a variant with pages) The arena's pages, beside its counter (none here)."""
        self._paged = None

    def _before_counters(self, m, mask):
        """(a variant) What the counters' update needs before they are formed (none here)."""

    def _after_counters(self, m, experts, ok):
        """(a variant) What reads the counters' grants (none here)."""

    def elaborate(self, platform):
        m = Module()
        cfg, g = self.cfg, self.grant
        L, T, E, cb, pb = cfg.lanes, cfg.max_targets, cfg.experts, cfg.cap_bits, pool_count_bits(cfg)
        # the experts each lane's row names (pre-ranked: registered a stage ahead)
        mask = [Signal(E, name=f"mask{j}") for j in range(L)]
        if self.PRERANK:
            m.d.comb += [mask[j].eq(self.pre_mask[j]) for j in range(L)]
        else:
            m.d.comb += [mask[j][e].eq(Cat(g.oh[j][t][e] for t in range(T)).any())
                         for j in range(L) for e in range(E)]
        ok = [Signal(name=f"ok{j}") for j in range(L)]
        self._before_counters(m, mask)
        experts = [self._counter(m, f"x{e}", cb, self.cap[e], ok, [mask[j][e] for j in range(L)])
                   for e in range(E)]
        self._after_counters(m, experts, ok)
        # (paged: the pages bound the arena, not POOL_CAP; the counter's capacity is the
        # most rows a layer can place, never reached before a region is full)
        arena = self._counter(m, "pool", pb, Const(arena_rows_max(cfg), pb) if cfg.paged else self.pool_cap, ok, None)
        self._arena_pages(m, arena, ok)
        counters = [x["now"] for x in experts]
        room_gt = [x["gt"] for x in experts]
        # (registered: read by the tracker's sweep and the CSRs only, long after the grants;
        # the select of the lagged counters stays off their paths)
        m.d.sync += [self.rows[e].eq(counters[e]) for e in range(E)] + [self.pool_rows.eq(arena["now"])]

        self._counts = {}
        for j in range(L):
            self._lane(m, j, ok, mask, room_gt, arena, experts)
        m.d.comb += g.ok.eq(Cat(*ok))

        if self.formal:
            m.d.comb += [self.formal_room[e].eq(experts[e]["room"]) for e in range(E)]
            m.d.comb += [self.formal_cap[e].eq(experts[e]["cap"]) for e in range(E)]
            m.d.comb += [self.formal_room_gt[e].eq(room_gt[e]) for e in range(E)]
            m.d.comb += [self.formal_pool_room.eq(arena["room"]), self.formal_pool_cap.eq(arena["cap"]),
                         self.formal_pool_gt.eq(arena["gt"])]
            lasts = [x["last"] for x in experts + [arena]]
            m.d.comb += self.formal_lag_onehot.eq(Cat(one_hot(v) for v in lasts).all())
        return m

    def _counter(self, m, name, width, cap_in, ok, names):
        """One expert's rows (or, ``names`` None, the arena's): registers and their update.

        The rows and the room are registered a cycle late (``cnt``, ``room``: before the
        last cycle's grants, whose count ``last`` is registered as a one-hot), so that the
        verdicts fan out to a few flops, not to the counters' selects: their values now
        (``now``, ``room`` in the result) are a select by ``last``, from registers. What the
        grant reads, ``room > a`` (``gt``, a = 0..lanes-1), is registered exact; its next
        value is a chain of muxes over the verdicts -- lane 0 at the leaves, the last lane
        (the latest verdict) at the root -- among ``room now > a + d`` formed from the
        registers for every ``d`` grants naming it this cycle."""
        g, L = self.grant, self.cfg.lanes
        cnt = Signal(width, name=f"{name}_rows")
        room = Signal(width, name=f"{name}_room")
        gt = Signal(L, name=f"{name}_gt")
        last = Signal(L + 1, init=1, name=f"{name}_last")
        now, room_now = Signal(width, name=f"{name}_now"), Signal(width, name=f"{name}_room_now")
        m.d.comb += [now.eq(select([(last[p], cnt + p) for p in range(L + 1)], width)),
                     room_now.eq(select([(last[p], room - p) for p in range(L + 1)], width))]
        above = [Signal(name=f"{name}_above{c}") for c in range(2 * L + 1)]  # room now > c
        m.d.comb += [above[c].eq(select([(last[p], room > c + p) for p in range(L + 1)], 1))
                     for c in range(2 * L + 1)]
        gt_next, last_next = self._next(m, name, ok, names, above)
        # (a copy of ``last`` for the targets' rows alone (:meth:`_rows`: every lane and
        # target selects it), off ``last``'s own fan-out to the counter's selects: behind
        # both, its buffers led the rows' select into AL, 22.19 FO4 at two nodes with
        # multicast. Its reset value differs from ``last``'s in every bit, so that synthesis
        # keeps each bit apart -- Yosys merges flops bit by bit, and a bit with the same reset
        # and next value is one flop (a first copy differing in one bit was merged back); no
        # row is granted before the first clear, which sets both.)
        last_rows = Signal(L + 1, init=((1 << L + 1) - 1) & ~1, name=f"{name}_last_rows")
        out = {"now": now, "room": room_now, "gt": gt, "last": last, "cnt": cnt, "grants": last_next,
               "last_rows": last_rows, "room_q": room}
        if self.formal:
            cap_l = Signal(width, name=f"{name}_cap")
            with m.If(g.clear):
                m.d.sync += cap_l.eq(cap_in)
            out["cap"] = cap_l
        with m.If(g.clear):
            m.d.sync += [cnt.eq(0), room.eq(cap_in), last.eq(1), last_rows.eq(1),
                         gt.eq(Cat(cap_in > a for a in range(L)))]
        with m.Else():
            m.d.sync += [cnt.eq(now), room.eq(room_now), gt.eq(gt_next), last.eq(last_next),
                         last_rows.eq(last_next)]
        return out

    def _next(self, m, name, ok, names, above):
        """The next ``room > a`` bits and the one-hot count of this cycle's grants naming the
        counter (``names`` per lane; None: every grant): a chain of muxes over the
        verdicts, the last lane at the root, among ``above[a + d]`` for ``d`` grants."""
        L = self.cfg.lanes
        nxt = [Cat(above[a + d] for a in range(L)) for d in range(L + 1)]     # d grants this cycle
        for k in range(L):
            nxt = [Mux(ok[k], nxt[d + 1] if names is None else Mux(names[k], nxt[d + 1], nxt[d]), nxt[d])
                   for d in range(len(nxt) - 1)]
        bits = ok if names is None else [ok[k] & names[k] for k in range(L)]
        return nxt[0], Cat(*late_count(bits))

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
        if self.PRERANK and lanes:
            return [self.pre_counts[prerank_index(self.cfg, lanes, e, a)] for a in range(len(lanes) + 1)]
        key = (lanes, e)
        if key not in self._counts:
            bits = [mask[i][e] for i in lanes]
            oh = [Signal(name=f"n{''.join(map(str, lanes))}_{e}_is{a}") for a in range(len(lanes) + 1)]
            m.d.comb += [oh[a].eq(exactly(bits, a)) for a in range(len(lanes) + 1)]
            self._counts[key] = oh
        return self._counts[key]

    def _lane(self, m, j, ok, mask, room_gt, arena, experts):
        """Lane j's verdict (a candidate per pattern of the verdicts ahead, then one mux per
        lane ahead), its targets' rows and its arena row."""
        g, T = self.grant, self.cfg.max_targets
        # lane i < j names target t's expert
        same = [[Signal(name=f"same{j}_{t}_{i}") for i in range(j)] for t in range(T)]
        m.d.comb += [same[t][i].eq((g.oh[j][t] & mask[i]).any()) for t in range(T) for i in range(j)]
        self._verdict(m, j, ok, mask, room_gt, arena, same)
        self._rows(m, j, ok, arena, experts, same)

    def _verdict(self, m, j, ok, mask, room_gt, arena, same):
        """Lane j's verdict: a candidate per pattern of the verdicts ahead, then one mux per
        lane ahead."""
        g = self.grant
        # the verdict for each pattern of verdicts ahead (bit i of p: lane i granted)
        cand = []
        for p in range(1 << j):
            ahead = [i for i in range(j) if p >> i & 1]
            c = Signal(name=f"cand{j}_p{p}")
            m.d.comb += c.eq(g.req[j] & arena["gt"][len(ahead)] & self._fits(m, j, p, ahead, mask, room_gt, same))
            cand.append(c)
        # the verdicts ahead select: ok[j-1] at the root (it comes last), ok[0] at the leaves
        level = cand
        for i in range(j):
            level = [Mux(ok[i], level[2 * k + 1], level[2 * k]) for k in range(len(level) // 2)]
        m.d.comb += ok[j].eq(level[0])

    def _rows(self, m, j, ok, arena, experts, same):
        """Lane j's targets' rows and its arena row, from its verdict and those ahead."""
        cfg, g = self.cfg, self.grant
        T, E, cb = cfg.max_targets, cfg.experts, cfg.cap_bits
        # rows: the target's expert's lagged counter and its last cycle's grants, chosen by
        # the target's one-hot (a register of T), then a narrow add of that count plus a,
        # for each a the lane can have ahead -- registered by the packet manager as they
        # are, with the one-hot count of the granted rows ahead naming the expert (late:
        # the verdicts), and chosen there (AL). (Per expert ``rows now + a`` candidates
        # chosen by the one-hot instead -- every candidate fanned out to every lane and
        # target -- measured 24.2 FO4, and 24.9 with the choice in AL.)
        for t in range(T):
            oh = g.oh[j][t]
            base = Signal(cb, name=f"row{j}_{t}_base")
            lagged = Signal(cfg.lanes + 1, name=f"row{j}_{t}_last")
            m.d.comb += [base.eq(select([(oh[e], experts[e]["cnt"]) for e in range(E)], cb)),
                         lagged.eq(select([(oh[e], experts[e]["last_rows"]) for e in range(E)], cfg.lanes + 1))]
            cand = [self._plus(m, base, lagged, a, f"row{j}_{t}") for a in range(j + 1)]
            n_ahead = self._granted_ahead(ok, [same[t][i] for i in range(j)])
            m.d.comb += g.row[j][t].eq(select([(n_ahead[a], cand[a]) for a in range(j + 1)], cb))
            m.d.comb += [self.row_if[j][t][a].eq(cand[a]) for a in range(j + 1)]
            m.d.comb += self.row_ahead[j][t].eq(Cat(*n_ahead))
        if self._paged is not None:         # (its place in a page)
            m.d.comb += g.loc[j].eq(self._paged.loc[j])
            return
        before = self._granted_ahead(ok, [Const(1)] * j)
        m.d.comb += g.loc[j].eq(select([(before[a], self._plus(m, arena["cnt"], arena["last"], a, f"loc{j}"))
                                        for a in range(j + 1)], len(arena["cnt"])))

    def _granted_ahead(self, ok, named):
        """The granted lanes ahead (``i < len(named)``) with ``named[i]``, as a one-hot
        count: a shift by each verdict in turn (:func:`late_count`)."""
        return late_count([ok[i] & named[i] for i in range(len(named))])

    @staticmethod
    def _plus(m, base, last, a, name):
        """``base + p + a`` for the one-hot ``last`` (p = 0..lanes): the small offset
        encoded from the one-hot, then a narrow add (:func:`add_narrow`)."""
        off = Signal(range(len(last) + a), name=f"{name}_off{a}")
        m.d.comb += off.eq(select([(last[p], p + a) for p in range(len(last))], len(off)))
        v = Signal(len(base), name=f"{name}_if{a}")
        m.d.comb += v.eq(add_narrow(base, off))
        return v


class MulticastAllocatorSameCycle(MulticastAllocator):
    """The same grants with the requests' masks and counts formed in the allocator's own
    cycle, from the one-hots (no pre-rank stage; kept for the synthesis comparison)."""
    PRERANK = False


class MulticastPrerank(wiring.Component):
    """The pre-rank stage of the multicast requests (the packet manager's R -> T
    registers): the target one-hots (:class:`~moehub.rtl.target_decode.TargetDecode`'s,
    registered in A) registered once more for the allocator, with what depends on them
    alone -- per lane the experts its row names (``mask``), and for every set of lanes the
    count of them naming each expert (:func:`prerank_counts`). These do not depend on
    which lanes open a row (a pattern of verdicts only ever contains requesting lanes), so
    they are formed a stage before the requests are known, and the allocator's grant starts
    from registers.

    Attributes
    ----------
    tv, oh : In
        The one-hots of the stage ahead (as the allocator's ``grant.tv`` / ``grant.oh``).
    q_tv, q_oh, q_mask, q_counts : Out
        The same registered, and the masks and counts, for ``grant.tv``, ``grant.oh``,
        ``pre_mask``, ``pre_counts``.
    mask_next : Out
        ``q_mask``'s next value (registered every cycle): the packet manager's sure
        grants per expert.
    """

    def __init__(self, cfg: HubConfig):
        L, T, E = cfg.lanes, cfg.max_targets, cfg.experts
        self.cfg = cfg
        super().__init__({
            "tv": In(T).array(L), "oh": In(E).array(L, T),
            "q_tv": Out(T).array(L), "q_oh": Out(E).array(L, T),
            "q_mask": Out(E).array(L), "q_counts": Out(prerank_bits(cfg)), "mask_next": Out(E).array(L),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        L, T, E = cfg.lanes, cfg.max_targets, cfg.experts
        masks = [Cat(Cat(self.oh[j][t][e] for t in range(T)).any() for e in range(E)) for j in range(L)]
        m.d.sync += [self.q_tv[j].eq(self.tv[j]) for j in range(L)]
        m.d.sync += [self.q_oh[j][t].eq(self.oh[j][t]) for j in range(L) for t in range(T)]
        m.d.sync += [self.q_mask[j].eq(masks[j]) for j in range(L)]
        m.d.comb += [self.mask_next[j].eq(masks[j]) for j in range(L)]
        m.d.sync += self.q_counts.eq(prerank_counts(cfg, masks))
        return m


class MulticastAllocatorByTargets(MulticastAllocator):
    """The same grants, the verdict formed per *target* instead of per expert (the first
    version, kept for the synthesis comparison of ``moehub synth-unit``): each target's
    "room of its expert > a" is chosen from the experts' registered bits by the target's
    one-hot (an experts-wide AND-OR), the count of granted lanes ahead naming its expert
    (the lane-pair relations ``same``) picks one, and an AND over the targets -- so the
    path has the one-hot select before the count, and the cost grows with
    ``max_targets``."""
    PRERANK = False

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




class MulticastAllocatorAdmitted(MulticastAllocator):
    """The grants of :class:`MulticastAllocator` without the chain of verdicts, exact under
    the packet manager's *admission* rule (the 1.98 GHz budget: the chain is 26.8
    FO4 at 4 lanes x 32 experts).

    A lane the input admitted *roomy* (``risky`` 0, carried down the pipeline with its
    packet) is granted outright; the group's one risky lane is granted when every expert
    it names and the arena has room for one row (``room > 0``, registered): no verdict
    waits for another, and the counters' update waits for one verdict, the risky lane's
    -- a mux between two candidates formed from the registers. That equals
    the model's rule (a refused row takes nothing, later rows rank as if it were absent)
    whenever no row refused in a cycle has a row after it that needs the room it would have
    taken. The packet manager makes sure of it: when some expert, or the arena, has room
    below ``ADMISSION_GROUPS x lanes`` rows the allocator is *tight* (``tight``, one
    register), and meanwhile the input admits, per group, lanes in order up to its second
    data packet, the one data packet it takes being risky. A packet admitted while the
    allocator was not tight then always finds room, whatever was granted since (at most
    ``lanes`` rows an expert a group, ``ADMISSION_GROUPS - 1`` groups); so at most one lane
    of a group can be refused, and every lane ahead of it is granted (see :meth:`_verdict`
    for why one row's room is the risky lane's whole question). Granted rows and places
    still count *grants* ahead (as :class:`MulticastAllocator`), so rows stay dense after a
    refusal.

    One bit for every expert, not a bit per expert: the input's decision then waits for no
    decode of its packets' target sets (a bit per expert put the decode, an AND with the
    tight experts and their OR in front of the input's ``ready``: 29.9 FO4 at
    ``deepseek-v3-8gpu`` with 8 targets). The price: while any region or the arena is within
    ``ADMISSION_GROUPS x lanes`` rows of full, data packets come in one a cycle -- which a
    row naming a tight expert paid anyway (every chunk of it is a data packet naming it).

    Attributes (beyond :class:`MulticastAllocator`'s)
    ----------
    tight : Out(1)
        Some expert's room, or the arena's, is below ``ADMISSION_GROUPS x lanes`` rows
        (registered, a cycle late: from the room before the last cycle's grants).
    risky : In(lanes)
        The lane's packet is a data packet the input took while ``tight`` (carried down the
        pipeline with it): at most one lane of a group.
    pre_oh_next : In(experts).array(lanes, max_targets)
        The one-hots the pre-rank registers every cycle (``oh``'s next value): the
        allocator forms its own next masks from them, off the pre-rank's masks' fan-out.
    sure_named : In(experts).array(lanes)
        Bit x of lane k: a roomy request (``req``, not ``risky``) naming expert x -- the
        packet manager's registers, formed from the same next values as those.
    cnt_dead_q : In(lanes).array(CNT_DEAD_COPIES)
        (count_packets) Copies of ``grant.cnt_dead`` (the packet manager's registers,
        kept apart), each read by an eighth of the experts' sure grants.
    tile_oh, page_ret, page_ret_page, page_bad, pool_free
        Only with pages (``pool_pages`` > 0: the arena in pages, :class:`~moehub.rtl.
        paging.arena.PagedArena`): TILE_ROWS_LOG2 as a one-hot (latched at ``clear``),
        PAGE_FREE (a write and its page), PAGE_BAD, POOL_FREE. The arena is then roomy
        while the pool has pages for ``ADMISSION_GROUPS x lanes`` rows, and the risky lane
        also needs its arena row to fit (no tile start, or a page free); POOL_CAP is
        unused.
    """

    V2 = True

    def _extra_ports(self, cfg: HubConfig) -> dict:
        ports = {"tight": Out(1, init=1), "risky": In(cfg.lanes),      # (tight until a clear says)
                 "pre_oh_next": In(cfg.experts).array(cfg.lanes, cfg.max_targets),
                 "sure_named": In(cfg.experts).array(cfg.lanes),
                 **({"cnt_dead_q": In(cfg.lanes).array(CNT_DEAD_COPIES)} if cfg.count_packets else {})}
        if cfg.count_packets and self.formal:
            E, w = cfg.experts, MulticastCountLimit.width(cfg)
            ports.update({"formal_lam": Out(signed(w)).array(E), "formal_dead": Out(E),
                          "formal_done": Out(E)})
        if cfg.paged:
            ports.update({"tile_oh": In(len(tile_sizes(cfg))), "page_ret": In(1), "page_ret_page": In(16),
                          "page_bad": Out(1), "pool_free": Out(range(cfg.pool_pages + 1), init=cfg.pool_pages)})
        return ports

    def _before_counters(self, m, mask):
        """(count_packets) The :class:`MulticastCountLimit`: each lane's count refusal, from
        registers, before the counters' update (a roomy lane it refuses is no sure grant);
        its roomy bit into ``tight``."""
        self._cref = self._cref_roomy = [Const(0)] * self.cfg.lanes
        self._late_bit(m)
        if not self.cfg.count_packets:
            return
        cfg, g, L = self.cfg, self.grant, self.cfg.lanes
        m.submodules.counts = cl = self._climit = MulticastCountLimit(cfg, ADMISSION_GROUPS * L, self.formal)
        m.d.comb += [cl.req.eq(g.req), cl.cnt_add.eq(g.cnt_add), cl.cnt_full.eq(g.cnt_full),
                     cl.clear.eq(g.clear), g.met.eq(g.req & cl.refused), g.over.eq(cl.over)]
        m.d.comb += [cl.mask[j].eq(mask[j]) for j in range(L)]
        # (a count packet's expert: its target 0, the one entry it has)
        m.d.comb += [cl.cnt_oh[j].eq(g.oh[j][0]) for j in range(L)]
        m.d.comb += [cl.dtot[x].eq(g.dtot[x]) for x in range(cfg.experts)]
        self._cref = [cl.refused[j] for j in range(L)]
        # (a roomy lane's count refusal: an expert it names dead, as R saw it -- see elaborate)
        self._cref_roomy = [g.cnt_dead[j] for j in range(L)]
        m.d.comb += [g.dead.eq(cl.dead_x)] + [g.dead_next_if[k].eq(cl.dead_next_if[k]) for k in (0, 1)]
        m.d.comb += [cl.cref_q[k].eq(g.cref_q[k]) for k in (0, 1)]
        if self.formal:
            m.d.comb += [self.formal_lam[x].eq(cl.formal_lam[x]) for x in range(cfg.experts)]
            m.d.comb += [self.formal_dead.eq(cl.formal_dead),
                         self.formal_done.eq(cl.formal_done)]
        self._roomy_next.append(cl.roomy)

    def _late_bit(self, m):
        """The one verdict that arrives late: the risky lane's (``late``: it asked, and was
        granted). Every other lane's verdict is known from registers (``sure``), so every
        next state the grants move is formed for ``late`` low and high, from registers,
        and ``late`` chooses last (:meth:`_next`, the count limit's ``lam``, the paged
        arena). With the verdicts each reaching the updates through the lane counts (the
        arena's ``late_count`` of the verdicts, the counters' per-expert ORs of verdict and
        mask), the fits -> verdicts -> take -> the arena's page was 29.6 FO4 at
        ``deepseek-v3-8gpu`` with every v2 feature."""
        L, g = self.cfg.lanes, self.grant
        self._rlane = Signal(L, name="risky_lane")    # the lane whose verdict is late (at most one)
        self._late = Signal(name="risky_ok")           # it is granted
        m.d.comb += self._rlane.eq(g.req & self.risky)

    def _after_counters(self, m, experts, ok):
        """(count_packets) Each expert's sure grants, whether the risky lane names it, the
        late bit and the verdicts to the count limit."""
        if self.cfg.count_packets:
            cl = self._climit
            for x in range(self.cfg.experts):
                sure, named = experts[x]["grants_if"]
                m.d.comb += [cl.grants[x].eq(sure), cl.late_names[x].eq(named)]
            m.d.comb += [cl.ok.eq(Cat(*ok)), cl.late.eq(self._late)]

    def _arena_pages(self, m, arena, ok):
        """(paged) The :class:`PagedArena`: the verdicts in (it keeps the arena's rows
        itself), each lane's place, the risky lane's fit and the roomy bit out; the pool's
        CSRs."""
        self._paged = None
        if not self.cfg.paged:
            return
        m.submodules.arena = pa = self._paged = PagedArena(self.cfg, ADMISSION_GROUPS * self.cfg.lanes)
        m.d.comb += [pa.clear.eq(self.grant.clear), pa.tile_oh.eq(self.tile_oh), pa.ok.eq(Cat(*ok)),
                     pa.sure.eq(Cat(*self._sure)), pa.late_lane.eq(self._rlane & ~Cat(*self._cref)),
                     pa.late.eq(self._late),
                     pa.ret.eq(self.page_ret), pa.ret_page.eq(self.page_ret_page),
                     self.page_bad.eq(pa.bad), self.pool_free.eq(pa.free)]
        self._roomy_next.append(pa.roomy)

    def elaborate(self, platform):
        self._roomy_next, self._grants_if, self._next_parts = [], {}, {}
        g = self.grant
        # (the verdicts known from registers: a request admitted roomy, not refused for counts.
        # A roomy lane's count refusal is an expert it names dead: it was admitted with every
        # expert dead or ``margin`` rows from its count, so none it names turns dead before
        # its grant -- ``dead`` as R saw it, a cycle before, is exact for it, and the packet
        # manager registers the lane's OR over its experts (``cnt_dead``). With the exact
        # refusal (an OR over the experts in the cycle) the sure grants waited for it:
        # pre_mask -> the refusal -> the grant counts -> the count limit's lam was 27.8 FO4
        # at deepseek-v3-8gpu with every v2 feature. The risky lane keeps the exact one.)
        self._sure = [Signal(name=f"sure{j}") for j in range(self.cfg.lanes)]
        m = super().elaborate(platform)
        m.d.comb += [self._sure[j].eq(g.req[j] & ~self.risky[j] & ~self._cref_roomy[j]) for j in range(self.cfg.lanes)]
        m.d.sync += self.tight.eq(~Cat(*self._roomy_next).all())
        return m

    def _verdict(self, m, j, ok, mask, room_gt, arena, same):
        """Lane j's verdict: unless refused for counts (from registers, exact for every lane:
        :mod:`~moehub.rtl.counts.multicast_limit`), granted if its request was admitted roomy
        (``risky`` 0); else if every expert it names, and the arena, has room for one row. (Exact: a risky
        lane is the one data packet of its group, so no lane of its group asks for a row
        beside it, and the rows of earlier groups are counted in the registers it reads:
        the model's rule for it is room for one row. A roomy lane always has room.)"""
        E, L = self.cfg.experts, self.cfg.lanes
        if j == 0:
            self._fits = [Signal(name=f"fits{k}") for k in range(L)]
            self._risky_ok = [Signal(name=f"risky_ok{k}") for k in range(L)]   # (if it is the risky lane)
            m.d.comb += self._late.eq(Cat(*(self._rlane[k] & self._risky_ok[k] for k in range(L))).any())
            self._experts_fit_q(m)
        fits = self._fits[j]
        place = arena["gt"][0] if self._paged is None else arena["gt"][0] & self._paged.fits
        m.d.comb += fits.eq(self._room_q[j] & place)
        # (the verdict itself lane by lane -- equal to ``sure | rlane & late`` with one risky
        # lane, but not behind ``late``'s OR over the lanes and its fan-out: through it, a
        # lane's request -> the grants into AL was 27.8 FO4 at deepseek-v3-8gpu multicast;
        # a roomy lane's by its registered refusal, the exact one only for the risky lane)
        m.d.comb += self._risky_ok[j].eq(~self._cref[j] & fits)
        m.d.comb += ok[j].eq(self._sure[j] | (self._rlane[j] & self._risky_ok[j]))

    def _granted_ahead(self, ok, named):
        """As :meth:`MulticastAllocator._granted_ahead`, the sure grants ahead counted from
        registers and the risky lane's verdict last: at most one lane is risky, so the
        count is the sure lanes' (``late_count`` of register bits) shifted once when the
        risky lane is ahead, named and granted -- its verdict reaches a mux, not the
        shift chain. (Through the chain, the risky lane's count refusal -> its verdict,
        five buffers deep over every lane and target behind it -> AL's row choice was 24.0
        FO4 at deepseek-v3-8gpu with every v2 feature.)"""
        n = len(named)
        base = late_count([self._sure[i] & named[i] for i in range(n)])
        if not n:
            return base
        late = Cat(*(self._rlane[i] & named[i] & self._risky_ok[i] for i in range(n))).any()
        return [Mux(late, base[a - 1] if a else Const(0), base[a]) for a in range(n + 1)]

    def _sure_named(self, x):
        """Per lane, a sure request naming expert x: the packet manager's ``sure_named``
        and, with count packets, not refused (its ``cnt_dead``, from the copy for x's
        share of the experts)."""
        L = self.cfg.lanes
        if not self.cfg.count_packets:
            return [self.sure_named[k][x] for k in range(L)]
        dead = self.cnt_dead_q[x * len(self.cnt_dead_q) // self.cfg.experts]
        return [self.sure_named[k][x] & ~dead[k] for k in range(L)]

    def _experts_fit_q(self, m):
        """Per lane, every expert its row names has room for one row (``room_q``), a
        register formed a cycle ahead, so the risky lane's verdict starts from it: from the
        pre-rank's next one-hots (``pre_oh_next``: it registers them unconditionally) and
        each expert's next ``room > 0``, for the late bit low and high. The next ``room >
        0`` after ``d`` grants is the registered ``room > d`` (exact: ``formal_room_gt``),
        ``room > lanes`` (a register of its own, ``gt_lanes``) for ``d = lanes``. (The AND
        over the experts after the registered masks put a mask -> the risky lane's verdict
        -> the granted rows ahead into AL at 22.9 FO4 at deepseek-v3-8gpu with 8 targets;
        ``room > lanes`` as a compare of the room register chosen by the lagged
        grants, in front of this register, was 23.6.)"""
        cfg, L, E, T = self.cfg, self.cfg.lanes, self.cfg.experts, self.cfg.max_targets
        self._room_q = [Signal(name=f"room_q{k}") for k in range(L)]
        # (the next masks formed here, from the one-hots: the pre-rank's own, read by its
        # registers, its counts and the sure grants, were a buffer tree and two inverters
        # into these registers -- 22.2 FO4 at deepseek-v3 on two nodes with 8 targets)
        nxt = [Signal(E, name=f"room_mask_next{k}") for k in range(L)]
        m.d.comb += [nxt[k].eq(Cat(Cat(self.pre_oh_next[k][t][e] for t in range(T)).any() for e in range(E)))
                     for k in range(L)]
        zero = [Signal(E, name=f"room0_if{x}") for x in (0, 1)]     # next room > 0, late low / high
        for e in range(E):
            base, named, gt, gt_l = self._next_parts[f"x{e}"]
            gtv = [gt[c] for c in range(L)] + [gt_l]
            if0 = select([(base[d], gtv[d]) for d in range(L + 1)], 1)
            if1 = select([(base[d], gtv[d + 1]) for d in range(L)], 1)
            m.d.comb += [zero[0][e].eq(if0), zero[1][e].eq(Mux(named, if1, if0))]
        at_clear = Cat(self.cap[e] > 0 for e in range(E))
        for k in range(L):
            fit = [(~nxt[k] | z).all() for z in (zero[0], zero[1], at_clear)]
            m.d.sync += self._room_q[k].eq(Mux(self.grant.clear, fit[2], Mux(self._late, fit[1], fit[0])))

    def _next(self, m, name, ok, names, above):
        """The counter's next ``room > a`` bits and grant count from the requests admitted
        roomy (registers: all granted) and the one risky lane's verdict, the one late bit:
        a mux between two candidates formed from registers."""
        L = self.cfg.lanes
        # (an expert's sure grants: the packet manager's registers ``sure_named``, one per
        # lane and expert -- the sure bits ANDed with the masks here fanned each lane's
        # sure bit out to every expert's counts, three buffers deep: a request -> the sure
        # grants -> the count limit's lam was 24.9 FO4 at deepseek-v3-8gpu with every v2
        # feature)
        sure = self._sure if names is None else self._sure_named(int(name[1:]))
        names = names or [Const(1)] * L
        base = [Signal(name=f"{name}_sure{d}") for d in range(L + 1)]
        m.d.comb += [base[d].eq(exactly(sure, d)) for d in range(L + 1)]
        named = Signal(name=f"{name}_risky_names")     # the risky lane names the counter
        m.d.comb += named.eq(Cat(*(self._rlane[k] & names[k] for k in range(L))).any())
        # (room > lanes after the grants, for _experts_fit_q: a register beside ``gt``)
        if_l = [select([(base[d], above[L + d + x]) for d in range(L + 1 - x)], 1) for x in (0, 1)]
        self._next_parts[name] = (base, named, Mux(self._late, Mux(named, if_l[1], if_l[0]), if_l[0]))
        cand = [Signal(L, name=f"{name}_gt_if{x}") for x in (0, 1)]
        m.d.comb += [cand[x].eq(select([(base[d], Cat(above[a + d + x] for a in range(L)))
                                        for d in range(L + 1 - x)], L)) for x in (0, 1)]
        # (the risky lane granted and naming it: one more grant; never with every lane sure)
        gt_if = [cand[0], Signal(L, name=f"{name}_gt_late")]
        count_if = [Cat(*base), Signal(L + 1, name=f"{name}_grants_late")]
        m.d.comb += [gt_if[1].eq(Mux(named, cand[1], cand[0])),
                     count_if[1].eq(Mux(named, Cat(Const(0), *base[:L]), Cat(*base)))]
        self._grants_if[name] = (count_if[0], named)
        return Mux(self._late, gt_if[1], gt_if[0]), Mux(self._late, count_if[1], count_if[0])

    def _counter(self, m, name, width, cap_in, ok, names):
        """As :meth:`MulticastAllocator._counter`, and whether its room will be roomy for
        the admission (at least ``ADMISSION_GROUPS x lanes`` rows: from the room before
        the last cycle's grants, or the capacity at a clear) -- ANDed into ``tight``."""
        out = super()._counter(m, name, width, cap_in, ok, names)
        out["grants_if"] = self._grants_if[name]
        base, named, gt_l_next = self._next_parts[name]
        gt_l = Signal(name=f"{name}_gt_lanes")
        m.d.sync += gt_l.eq(Mux(self.grant.clear, cap_in > self.cfg.lanes, gt_l_next))
        self._next_parts[name] = (base, named, out["gt"], gt_l)
        k = ADMISSION_GROUPS * self.cfg.lanes
        roomy = Signal(name=f"{name}_roomy")
        now_roomy = select([(out["last"][p], self._room_at_least(out["room_q"], k, p))
                            for p in range(self.cfg.lanes + 1)], 1)
        m.d.comb += roomy.eq(Mux(self.grant.clear, cap_in >= k, now_roomy))
        self._roomy_next.append(roomy)
        return out

    @staticmethod
    def _room_at_least(room, k: int, p: int):
        """``room - p >= k`` in ``room``'s width (the room now, ``p`` grants after the
        register), as compares of the register with constants: no subtraction in front of
        them. (Through ``room_now``'s subtract and select, the compare and the AND over
        every counter into ``tight`` was 25.4 FO4 on ASAP7 at deepseek-v3-8gpu with all three
        v2 features -- ``pool_room`` -> ``tight``.) Exact in every state, the wrapped ones
        (``room < p``, never reached) included, so the hub's RTLIL proves equivalent."""
        w = len(room)
        exact = room >= k + p if k + p < 1 << w else Const(0)
        if p == 0:
            return exact
        wrapped = room < p if k + p <= 1 << w else (room < p) & (room >= k + p - (1 << w))
        return exact | wrapped
