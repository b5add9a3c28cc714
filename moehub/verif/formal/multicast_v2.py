"""Property harnesses of the hub's multicast allocator (:class:`moehub.rtl.multicast_allocator.
MulticastAllocatorAdmitted`) with protocol v2's paged arena and count packets: the
admitted allocator's properties (:class:`~.multicast_allocator.AdmittedAllocatorHarness`)
with the arena's room taken from pages, or with rows refused for their counts -- each
against the reference model's rules (``HubModel._open_verdict``, ``_room``, ``_place``,
``_count_packet``), packets applied in lane order.

**Paged** (:class:`PagedAllocatorHarness`, ``pool_pages`` > 0). Environment: TILE_ROWS_LOG2
is any one-hot of the supported sizes in every cycle (the arena latches it at ``clear``);
PAGE_FREE may name any page at any time (good, repeated, never handed out, out of range).
Reference state: the arena's rows since the last clear (``n``: multicast rows take arena
rows as one stream, in grant order), the tile size latched, the page of the current tile,
the pages free, and one chosen page ``cp`` (``AnyConst``): in use or not, its returns in
flight. Properties, besides the admitted allocator's (region room, rows, the admission's
room floors):

* a lane's row is granted exactly when its targets have room and its arena row
  ``n + granted lanes ahead`` does not start a tile (``mod tile == 0``) or a page is free
  after the pages the granted lanes ahead took (the model's ``_room``): a refused row takes
  no arena row and no page;
* a granted row's ``loc`` is ``page << log2(tile) | row mod tile``, its page the one taken
  at its tile's start (by it, by a granted lane ahead in its cycle, or before), a page
  taken is in the pool, and the chosen page is never taken while in use;
* a return is accepted (no PAGE_BAD three cycles after the write) exactly when the pool
  read the page in use (taken a cycle before the write or earlier) and no return of it was
  accepted between; POOL_FREE counts the pages free (the last cycle's take pending).

The returns follow the RTL's documented timing (a page joins the pool at its verdict, the
model at the write: software returns pages between layers, when both agree).

A divergence from the model this harness found, since fixed: the allocator's arena counter
kept ``pool_rows`` (``pool_pages x max_tile_rows``) as its capacity, so a layer whose
multicast rows outran it -- possible with pages returned during the layer -- turned tight
``margin`` rows before it and refused its risky row at it, pages free or not (2 lanes, 2
pages of 2-row tiles: refused at step 10 with a page returned and free). Its capacity is
now the most rows a layer can place (:func:`~moehub.rtl.multicast_allocator.arena_rows_max`),
never reached before a region is full (``tests/test_formal.py``: that config, BMC 11).

**Count packets** (:class:`CountsAllocatorHarness`, ``count_packets``). Environment (what the
:class:`~moehub.rtl.counts.gate.CountGate` and the packet manager's admission guarantee):
at most one count packet that adds (``cnt_add``) a group, no lane at or behind it asks
for a row (the admission ends a group at a count packet), its expert target 0's one-hot; none in the cycles a clear empties the pipeline;
``dtot`` (a cycle ahead, as the gate registers it) is that packet's count for its expert, 0
for the others, at most the largest count; each expert takes at most one count per source
(``sources`` adds a layer) and ``cnt_full`` on an adding packet is exactly "the last
source's" (the count gate's ``full``). Reference state, per expert: the total announced, the
adds, the rows granted. Properties, besides the admitted allocator's:

* ``met`` (COUNT_MISMATCH) exactly when some expert the row names has every source's count
  in at its lane and as many rows as announced at its lane (the rows of the granted lanes ahead included); a grant exactly
  when not met and every target and the arena have room -- a refused row takes nothing;
* ``over`` exactly when a completing count packet's expert holds more rows than the total
  it completes (at its lane).

Paged closes by k-induction (k=3), with strengthening invariants on the registers of the
arena (``arena``), its page supply (``arena.pool``) and the supply's ring, read from their
elaborated modules (:func:`.common.elaborate_into`; ``INTO``):

* the page supply's (:func:`.page_supply.supply_invariants`: counts, ring, pending takes,
  every page exactly one of in use / in the ring / fresh, the chosen page, the return
  stages), against this reference's chosen page, free pages and returns in flight;
* the arena's: its tile size latched (a one-hot) and its current page are the model's;
  ``arena_row_lo{a}`` is ``(n + a)`` modulo the largest tile and ``arena_new_page`` bit
  ``a`` says row ``n + a`` is on a page taken this cycle (``(n + a) mod tile <= a``);
* the allocator's arena counter: capacity ``arena_rows_max`` latched at a clear (0 before
  the first, and then no region latched either), room = capacity - ``n``, its registered
  ``room > a`` bits; ``n`` at most the rows the regions hold (each arena row is a granted
  row holding at least one region row), every region's capacity at most the largest;
* the admission's page floor: ``tight`` clear ``d`` cycles ago means POOL_FREE is at
  least ``arena_pages_needed - (d + 1)`` (roomy then, at most one take a cycle since).

Count packets close by k-induction (k=3): the allocator shows the count
limit's registers to the harness (``formal=True``), which checks them against the model's
state (:meth:`CountRef.invariants`).
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Mux, Signal

from ...spec.config import field_bits
from ...rtl.counts.gate import total_bits
from ...rtl.logic import select
from ...rtl.multicast_allocator import arena_rows_max, pool_count_bits
from ...rtl.paging.arena import arena_pages_needed
from ...rtl.paging.regions import tile_sizes
from ...spec.timing import ADMISSION_GROUPS
from .common import any_const, any_seq, count_ones, one_hot
from ...rtl.multicast_allocator import MulticastAllocatorAdmitted
from .multicast_allocator import ADMISSION_DELAY, AdmittedAllocatorHarness
from .page_supply import Regs, supply_invariants
from .plant import Plant, planted

#: cycles from a PAGE_FREE write to the pool's verdict (PAGE_BAD, or the page freed)
RETURN_LATENCY = 3


class PagedAllocatorHarness(AdmittedAllocatorHarness):
    """The hub's multicast allocator with a paged arena (see the module docstring)."""

    #: the page supply inside the paged arena: its registers for the supply's invariants
    INTO = ("arena", "arena.pool", "arena.pool.ring")

    def _arena(self, m, p, dut):
        ref = PagedArenaRef(m, p, dut, self.cfg, self._risky)
        ref.regs, ref.aregs = Regs(self.regs, "arena.pool."), Regs(self.regs, "arena.")
        ref.chain = self._chain
        return ref


class PagedArenaRef:
    """The paged arena's reference (the interface of :class:`~.multicast_allocator.
    StaticArenaRef`): the model's one stream of arena rows, a page per tile."""

    def __init__(self, m, p, dut, cfg, risky):
        self.m, self.p, self.dut, self.g, self.cfg, self.risky = m, p, dut, dut.grant, cfg, risky
        L, P = cfg.lanes, cfg.pool_pages
        self.sizes = sizes = tile_sizes(cfg)
        tile_oh = any_seq(m, len(sizes), "tile_oh_in")
        p.assume(one_hot(tile_oh))
        ret, ret_page = any_seq(m, 1, "page_ret_in"), any_seq(m, 16, "page_ret_page_in")
        m.d.comb += [dut.tile_oh.eq(tile_oh), dut.page_ret.eq(ret), dut.page_ret_page.eq(ret_page)]
        self.tile_oh, self.ret, self.ret_page = tile_oh, ret, ret_page
        self.sh = Signal(len(sizes), name="ref_tile_sh", init=1 << sizes.index(cfg.tile_rows.bit_length() - 1))
        self.n = Signal(pool_count_bits(cfg) + 1, name="ref_arena_rows")
        self.cur = Signal(cfg.page_bits, name="ref_page")
        self.free = Signal(range(P + 1), name="ref_free", init=P)
        self.cp = any_const(m, range(P), "chosen_page")
        p.assume(self.cp < P)
        self.in_use = Signal(name="ref_cp_in_use")
        self._lanes(m)

    def _by_size(self, f, width):
        """``f(log2 tile)`` for the latched tile size."""
        return select([(self.sh[k], f(s)) for k, s in enumerate(self.sizes)], width)

    def _lanes(self, m):
        """Per lane: its arena row if granted (``n`` + granted lanes ahead), that row mod
        the tile, whether it starts a tile, the page its ``loc`` names, the pages the
        granted lanes ahead took and the page its tile is on if it starts none."""
        cfg, g, L = self.cfg, self.g, self.cfg.lanes
        W = max(self.sizes)
        self.row, self.lo, self.starts, self.page, self.ahead, self.on = [], [], [], [], [], []
        for j in range(L):
            row = Signal(len(self.n), name=f"ref_arena_row{j}")
            m.d.comb += row.eq(self.n + count_ones(g.ok[:j]))
            lo = Signal(W, name=f"ref_arena_lo{j}")
            m.d.comb += lo.eq(self._by_size(lambda s: row[:s], W))
            starts = Signal(name=f"ref_starts{j}")
            m.d.comb += starts.eq(self._by_size(lambda s: row[:s] == 0, 1))
            page = Signal(cfg.loc_bits, name=f"ref_loc_page{j}")
            m.d.comb += page.eq(self._by_size(lambda s: g.loc[j] >> s, cfg.loc_bits))
            on = self.cur                       # (the newest page taken ahead of it, else the current)
            for i in range(j):
                on = Mux(g.ok[i] & self.starts[i], self.page[i], on)
            self.row.append(row)
            self.lo.append(lo)
            self.starts.append(starts)
            self.page.append(page)
            self.ahead.append(count_ones([g.ok[i] & self.starts[i] for i in range(j)]))
            self.on.append(on)
        self.takes = count_ones([g.ok[j] & self.starts[j] for j in range(L)])
        self.taken_cp = Cat(g.ok[j] & self.starts[j] & (self.page[j] == self.cp) for j in range(L)).any()

    def fits(self, j):
        """The model's ``_room`` at lane j: the row starts no tile, or a page is left after
        the granted lanes ahead took theirs."""
        return ~self.starts[j] | (self.free > self.ahead[j])

    def check_lane(self, j):
        p, g = self.p, self.g
        ok = g.ok[j]
        p.check(~ok | (self._by_size(lambda s: g.loc[j][:s], len(self.lo[j])) == self.lo[j]),
                "granted row's place is not its arena row mod the tile")
        p.check(~ok | self.starts[j] | (self.page[j] == self.on[j]), "granted row not on its tile's page")
        p.check(~(ok & self.starts[j]) | (self.page[j] < self.cfg.pool_pages), "a page beyond the pool taken")
        p.check(~(ok & self.starts[j] & (self.page[j] == self.cp) & self.in_use),
                "a page in use handed out again")

    def check_state(self):
        """The arena's rows, POOL_FREE and the return verdicts."""
        m, p, dut = self.m, self.p, self.dut
        n_q, takes_q = Signal(len(self.n), name="ref_arena_rows_q"), Signal(2, name="ref_takes_q")
        m.d.sync += [n_q.eq(self.n), takes_q.eq(self.takes)]
        p.check(dut.pool_rows == n_q, "arena rows differ from the granted rows")
        p.check(dut.pool_free == self.free + takes_q, "POOL_FREE is not the pages free (the last take pending)")
        self._returns(m, p, dut)
        supply_invariants(m, p, self.cfg, self.regs, self.cp, self.in_use, takes_q,
                          (self.due, self.flight, self.held, self.freed_cp), self.free)
        self._arena_invariants()

    def _arena_invariants(self):
        """The arena's registers against the model's stream: the tile size latched, the
        current page, and per count ``a`` of this cycle's grants the row ``n + a`` modulo
        the largest tile and whether it is on a page taken this cycle (its tile starts at
        or after ``n``)."""
        p, r, L, dut = self.p, self.aregs, self.cfg.lanes, self.dut
        W = max(self.sizes)
        # (the allocator's arena counter: its capacity the most rows a layer can place)
        cap = Signal(range(arena_rows_max(self.cfg) + 1), name="ref_arena_cap")   # (latched at a clear)
        with self.m.If(self.g.clear):
            self.m.d.sync += cap.eq(arena_rows_max(self.cfg))
        p.check(((cap == 0) | (cap == arena_rows_max(self.cfg))) & (self.n <= cap)
                & (dut.formal_pool_cap == cap) & (dut.formal_pool_room == cap - self.n),
                "invariant: the arena counter's room is not its capacity less the arena rows")
        p.check(dut.formal_pool_gt == Cat(dut.formal_pool_room > a for a in range(L)),
                "invariant: the registered arena room > a bits stale")
        # (each arena row is a granted row, which holds a row of at least one region: the
        # arena counter never runs out before the regions do)
        for x in range(self.cfg.experts):
            p.check((dut.formal_cap[x] <= self.cfg.max_rows_per_expert) & (dut.formal_room[x] <= dut.formal_cap[x]),
                    "invariant: a region's latched capacity beyond the largest, or its room beyond it")
        p.check((cap != 0) | Cat(dut.formal_cap[x] == 0 for x in range(self.cfg.experts)).all(),
                "invariant: a region latched before the arena's first clear")
        rows = sum(dut.formal_cap[x] - dut.formal_room[x] for x in range(self.cfg.experts))
        p.check(self.n <= rows, "invariant: more arena rows than rows in the regions")
        # (the admission's page floor: ``tight`` clear d cycles ago means POOL_FREE was at
        # least the pages a roomy arena needs a cycle before that, and the pool loses at
        # most one page a cycle -- the pages floor that the room floors have for rows)
        need = arena_pages_needed(self.cfg, ADMISSION_GROUPS * L)
        for d, t in enumerate(self.chain):
            p.check(t | (dut.pool_free >= need - (d + 1)),
                    f"invariant: POOL_FREE below {need - (d + 1)} while tight was clear {d} cycles ago")
        p.check(one_hot(self.sh) & (r["arena_tile_sh"] == self.sh),
                "invariant: the arena's tile size is not the latched one (a one-hot)")
        p.check(r["arena_page"] == self.cur, "invariant: the arena's page is not its tile's")
        for a in range(L):
            row = self.n + a
            p.check(r[f"arena_row_lo{a}"] == row[:W], f"invariant: arena_row_lo{a} is not (rows + {a}) mod the largest tile")
            p.check(r["arena_new_page"][a] == self._by_size(lambda s: row[:s] <= a, 1),
                    f"invariant: arena_new_page bit {a} is not 'row rows + {a} on a page taken now'")

    def _returns(self, m, p, dut):
        """Returns of any page (the free count) and of the chosen one (its verdict): a
        return written at t is decided at t + 3; it is accepted when the pool's read of
        ``in_use`` (t + 1: the takes up to t - 1, the verdicts up to t) found the page in
        use and no return of it is accepted at t + 1 or t + 2 (the pool's check against
        the two returns ahead)."""
        due = [Signal(name=f"ref_ret_due{k}") for k in range(RETURN_LATENCY)]
        flight = [Signal(name=f"ref_ret_cp{k}") for k in range(RETURN_LATENCY)]
        held = [Signal(name=f"ref_ret_held{k}") for k in range(RETURN_LATENCY)]
        mine = self.ret & (self.ret_page == self.cp)
        accepted = due[-1] & ~dut.page_bad
        self.freed_cp = flight[-1] & ~dut.page_bad
        m.d.sync += [due[0].eq(self.ret), flight[0].eq(mine), held[0].eq(self.in_use & ~self.freed_cp)]
        m.d.sync += [x[k].eq(x[k - 1]) for x in (due, flight) for k in range(1, RETURN_LATENCY)]
        m.d.sync += [held[k].eq(held[k - 1] & ~self.freed_cp) for k in range(1, RETURN_LATENCY)]
        p.check(~dut.page_bad | due[-1], "PAGE_BAD without a return due")
        p.check(~(flight[-1] & ~dut.page_bad) | held[-1], "a return of a page not in use accepted")
        p.check(~(flight[-1] & dut.page_bad) | ~held[-1], "a return of a page in use refused")
        m.d.sync += self.free.eq(self.free - self.takes + accepted)
        self.due, self.flight, self.held = due, flight, held

    def update(self):
        m, g, L = self.m, self.g, self.cfg.lanes
        with m.If(g.clear):
            m.d.sync += [self.n.eq(0), self.sh.eq(self.tile_oh)]
        with m.Else():
            m.d.sync += self.n.eq(self.n + count_ones(g.ok))
        for j in range(L):                      # (the last take wins; none with a clear)
            with m.If(g.ok[j] & self.starts[j]):
                m.d.sync += self.cur.eq(self.page[j])
        with m.If(self.taken_cp):
            m.d.sync += self.in_use.eq(1)
        with m.Elif(self.freed_cp):
            m.d.sync += self.in_use.eq(0)

    def covers(self):
        m, p, g, L = self.m, self.p, self.g, self.cfg.lanes
        returned = Signal(name="ref_cp_returned")
        with m.If(self.freed_cp):
            m.d.sync += returned.eq(1)
        p.cover(Cat(g.req[j] & self.risky[j] & ~g.ok[j] & self.starts[j] & (self.free == 0)
                    for j in range(L)).any(), "a risky row refused: it starts a tile and no page is free")
        p.cover(self.taken_cp & returned, "the chosen page handed out again after its return")
        p.cover(self.ret & (self.ret_page == self.cp) & self.in_use, "the chosen page returned while in use")
        p.cover(Cat(g.ok[j] & self.starts[j] for j in range(1, L)).any() & g.ok[0] & g.ok[L - 1],
                "a tile started behind a grant, every lane granted")
        big = self.sh[-1] & (self.lo[0] == (1 << self.sizes[-1]) - 1)
        p.cover(g.ok[0] & big, "the last row of a tile of the largest size granted")


#: planted bugs of the count limit (the harness's ``plant`` option): with one, the proof
#: must fail (:mod:`.plant`)
COUNT_PLANTS = {
    # an expert counts as met only past its total (lam < 0 for lam <= 0)
    "met-one-late": Plant(
        "moehub.rtl.counts.multicast_limit", "self.below(q + s + 1)", "self.below(q + s)", "MulticastCountLimit",
        ("met is not exactly", "dead is not done", "dead expert granted"),
        "a row is granted when its expert has every count in and as many rows",
        host=("moehub.rtl.multicast_allocator", "MulticastAllocatorAdmitted")),
    # the refusal ignores the risky lane's late verdict of the cycle before (always the
    # registers formed for a refused risky row)
    "late-verdict-ignored": Plant(
        "moehub.rtl.counts.multicast_limit", "self.refused[j].eq(Mux(late_q, self.cref_q[1][j], self.cref_q[0][j]))",
        "self.refused[j].eq(self.cref_q[0][j])", "MulticastCountLimit",
        ("met is not exactly", "dead expert granted"),
        "a granted risky row that made its expert dead does not refuse the next cycle's rows",
        host=("moehub.rtl.multicast_allocator", "MulticastAllocatorAdmitted")),
}


class CountsAllocatorHarness(AdmittedAllocatorHarness):
    """The hub's multicast allocator with count packets (see the module docstring);
    ``plant``: a bug of :data:`COUNT_PLANTS` planted in its count limit."""

    def __init__(self, cfg, plant: str | None = None):
        super().__init__(cfg, planted(MulticastAllocatorAdmitted, COUNT_PLANTS, plant))
        self.plant = plant

    def _count_refusals(self, m, p, dut, mask):
        self._counts = ref = CountRef(m, p, dut, self.cfg, mask, self._since)
        ref.invariants(dut, self._chain)
        return ref.refused

    def _covers(self, p, g, names, granted, cnt, cap_s):
        super()._covers(p, g, names, granted, cnt, cap_s)
        self._counts.covers()


class CountRef:
    """Per expert, the model's count state: the total announced, the sources' counts in
    (adds), the rows granted; the environment's count packets (see the module docstring)."""

    def __init__(self, m, p, dut, cfg, mask, since):
        self.m, self.p, self.g, self.cfg, self.mask, self.since = m, p, dut.grant, cfg, mask, since
        L, E, S = cfg.lanes, cfg.experts, cfg.sources
        g = self.g
        self.add, self.full = any_seq(m, L, "cnt_add_in"), any_seq(m, L, "cnt_full_in")
        self.dtot = [any_seq(m, total_bits(cfg), f"dtot_in{x}") for x in range(E)]
        m.d.comb += [g.cnt_add.eq(self.add), g.cnt_full.eq(self.full)]
        m.d.comb += [g.dtot[x].eq(self.dtot[x]) for x in range(E)]
        tb = total_bits(cfg) + 1
        self.tot = [Signal(tb, name=f"ref_total{x}") for x in range(E)]
        self.adds = [Signal(range(S + 1), name=f"ref_adds{x}") for x in range(E)]
        self.rows = [Signal(cfg.cap_bits, name=f"ref_rows{x}") for x in range(E)]
        self.group = [Signal(total_bits(cfg), name=f"ref_dtot_q{x}") for x in range(E)]   # the group's count
        m.d.sync += [self.group[x].eq(self.dtot[x]) for x in range(E)]
        # (lane j's count packet adds to / completes expert x)
        self.adds_to = [[self.add[j] & g.oh[j][0][x] for x in range(E)] for j in range(L)]
        self.completes = [[self.adds_to[j][x] & self.full[j] for x in range(E)] for j in range(L)]
        # (the packet manager's register of R's packets: the pipeline never stalls, so in T
        # it is the lane's experts against the count limit's dead of a cycle ago)
        dead_q = Signal(E, name="dead_q")
        m.d.sync += dead_q.eq(g.dead)
        m.d.comb += [g.cnt_dead[j].eq((mask[j] & dead_q).any()) for j in range(L)]
        # (and names an expert of dead's next value for either late verdict a cycle ago)
        dead_if_q = [Signal(E, name=f"dead_if_q{k}") for k in (0, 1)]
        m.d.sync += [dead_if_q[k].eq(g.dead_next_if[k]) for k in (0, 1)]
        m.d.comb += [g.cref_q[k][j].eq((mask[j] & dead_if_q[k]).any()) for k in (0, 1) for j in range(L)]
        self._environment(m, p, since)
        self.refused = [self._met(j) for j in range(L)]
        # (the model's dead experts as the cycle starts: every source's count in and as
        # many rows as announced -- no row of one is granted, whatever the lane order)
        dead = [(self.adds[x] == S) & (self.rows[x] >= self.tot[x]) for x in range(E)]
        for j in range(L):
            p.check(~(g.ok[j] & Cat(self.mask[j][x] & dead[x] for x in range(E)).any()),
                    "a row naming a dead expert granted")
        for j in range(L):
            p.check(g.met[j] == self.refused[j],
                    "met is not exactly 'an expert the row names has its counts in and met'")
            p.check(g.over[j] == self._over(j),
                    "over is not exactly 'a completing count below the rows its expert holds'")
        self._update(m)

    def _environment(self, m, p, since):
        cfg, g, L, E, S = self.cfg, self.g, self.cfg.lanes, self.cfg.experts, self.cfg.sources
        p.assume(count_ones(self.add) <= 1)
        p.assume(~(g.clear | (since != ADMISSION_DELAY)) | (self.add == 0))
        for j in range(L):
            p.assume(~self.add[j] | (~g.req[j] & g.tv[j][0]))
            p.assume(~self.add[j] | (g.req >> j == 0))
        for x in range(E):
            p.assume(self.dtot[x] < 1 << cfg.count_bits)
            p.assume((self.group[x] == 0) | Cat(self.adds_to[j][x] for j in range(L)).any())
            for j in range(L):
                p.assume(~self.adds_to[j][x] | ((self.adds[x] < S) & (self.full[j] == (self.adds[x] == S - 1))))

    def _at(self, j, x):
        """Expert x at lane j, the model's packets applied in lane order: its total, its
        counts all in, its rows (the granted lanes ahead naming it included)."""
        g, S = self.g, self.cfg.sources
        counted = Cat(self.adds_to[i][x] for i in range(j)).any() if j else Const(0)
        tot = self.tot[x] + Mux(counted, self.group[x], 0)
        done = (self.adds[x] == S) | (Cat(self.completes[i][x] for i in range(j)).any() if j else Const(0))
        rows = self.rows[x] + count_ones([g.ok[i] & self.mask[i][x] for i in range(j)])
        return tot, done, rows

    def _met(self, j):
        g, terms = self.g, []
        for x in range(self.cfg.experts):
            tot, done, rows = self._at(j, x)
            terms.append(self.mask[j][x] & done & (rows >= tot))
        return g.req[j] & Cat(*terms).any()

    def _over(self, j):
        terms = []
        for x in range(self.cfg.experts):
            _, _, rows = self._at(j, x)
            terms.append(self.completes[j][x] & (rows > self.tot[x] + self.group[x]))
        return Cat(*terms).any()

    def _update(self, m):
        g, L, E = self.g, self.cfg.lanes, self.cfg.experts
        for x in range(E):
            with m.If(g.clear):
                m.d.sync += [self.tot[x].eq(0), self.adds[x].eq(0), self.rows[x].eq(0)]
            with m.Else():
                m.d.sync += [self.tot[x].eq(self.tot[x] + self.group[x]),
                             self.adds[x].eq(self.adds[x] + Cat(self.adds_to[j][x] for j in range(L)).any()),
                             self.rows[x].eq(self.rows[x] + count_ones([g.ok[j] & self.mask[j][x]
                                                                        for j in range(L)]))]

    def invariants(self, dut, chain):
        """The count limit's registers against the model's state -- what k-induction needs
        (as asserts they hold in every BMC step too): per expert ``lam`` (as it stands) is
        the total announced, the group now in the allocator's cycle included, less the
        rows granted; ``lam <= 0``, ``done`` and ``dead`` are what they say; and while
        ``tight`` was clear ``d`` cycles ago (``chain[d]``, no clear since) every expert is
        dead or ``lam`` is at least ``ADMISSION_GROUPS x lanes - (d + 1) x lanes`` -- so a
        lane admitted roomy, with fewer than ``lanes`` grants ahead, is never refused for
        counts by an expert still counting."""
        p, cfg, L, E = self.p, self.cfg, self.cfg.lanes, self.cfg.experts
        maxc = (1 << cfg.count_bits) - 1
        for x in range(E):
            # (the model's state is reachable: no more adds than sources, each at most the
            # largest count; the rows the region's, rows + room == the latched capacity)
            p.check((self.adds[x] <= cfg.sources) & (self.tot[x] <= self.adds[x] * maxc),
                    "the model's total is more than its counts can make")
            p.check(self.rows[x] + dut.formal_room[x] == dut.formal_cap[x], "the model's rows are not the region's")
            lam = self.tot[x] + self.group[x] - self.rows[x]
            p.check(dut.formal_lam[x] == lam, "the count limit's lam is not total - rows")
            p.check(dut.formal_done[x] == (self.adds[x] == cfg.sources), "done is not 'every source's count in'")
            p.check(dut.formal_dead[x] == (dut.formal_done[x] & (lam <= 0)), "dead is not done & lam <= 0")
        k = ADMISSION_GROUPS * L
        for d, t in enumerate(chain):
            off = t | (self.since < d)
            for x in range(E):
                p.check(off | dut.formal_dead[x] | (dut.formal_lam[x] >= k - (d + 1) * L),
                        f"an expert's lam below {k - (d + 1) * L} while tight was clear {d} cycles ago")

    def covers(self):
        p, g, L, E = self.p, self.g, self.cfg.lanes, self.cfg.experts
        p.cover(Cat(g.met[j] for j in range(L)).any(), "a row refused for its counts (met)")
        p.cover(Cat(g.over[j] for j in range(L)).any(), "a completing count below the rows held (over)")
        p.cover(Cat(*g.ok).all() & Cat(self.adds[x] == self.cfg.sources for x in range(E)).any(),
                "every lane granted after an expert's counts are all in")
