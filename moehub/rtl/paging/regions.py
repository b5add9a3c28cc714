"""Paged regions in the hub pipeline (protocol v2; ``pool_pages > 0``, unicast).

Two units, between the packet manager's T stage and the allocator:

* :class:`PageSupply` -- the page pool of :class:`~moehub.rtl.paging.pool.PagePool` (returned
  pages first, oldest first, then pages never handed out, in order; returns checked
  against ``in_use`` in the same four register stages, reused from it), but able to hand
  out up to ``lanes`` pages in one cycle: the returned pages wait in a ring of registers
  whose first ``lanes`` entries are read at once (the i-th take gets the ring's i-th
  page, or, past the ring's count, the fresh page ``fresh + i - count``). Every candidate
  is formed from registers; the takes of a cycle (a one-hot count) only select the next
  state. The ring (:mod:`moehub.rtl.paging.ring`: registers with a one-hot head for small
  pools, banked memories read a cycle ahead for large ones) gives its first entries from
  registers and ``fresh - count`` is a register, so a candidate is a compare of the count
  with a constant and one select.
* :class:`PageGate` -- the rows the allocator grants in one cycle, in lane order: a row
  that starts a tile (its row in the expert is a multiple of the layer's tile rows) takes
  the next page of the pool; when the pool has none left for it, the row is refused
  (``OVERFLOW``, like a full region) and so is every later row of its expert in the cycle
  (they would start the same tile). The gate vetoes those grants (the allocator then sets
  its counters, a cycle later, to the expert's grants ahead of the first refusal,
  ``stop_r``), gives each
  granted row its page (the page it took, or its expert's current
  page, or the page an earlier lane of the cycle took for the expert) and keeps each
  expert's current page (the sweep's flag of a partial last tile names it).

Timing: whether a lane's row starts a tile and fits its region is formed, as the
allocator forms its grants, for every count of requests ahead of it from the allocator's
registers (``tile_at``: row ``rows + a`` starts a tile, kept beside the counters;
``room_ge``) -- for the expert each lane names, registered a cycle ahead from the next
values of both and of the lane's expert -- and chosen by that count, so the pool's
verdict does not wait for the grant's row. (tiny-paged: 25.7 FO4 with the tile test a compare of the counter and the ring read
through an index adder, 20.6 with both registered/one-hot.) No verdict reaches a counter in its own cycle: the pool's state
follows its takes a cycle late (this cycle's pages are read past the takes still pending,
from registers), and after a refusal the allocator's counters, which added every request
of the cycle, are set in the next cycle, from registers, to the grants that stood
(``stop_r``, itself formed from the lanes' registers of the refusal's cycle); meanwhile
the gate refuses that expert's requests (``held``: a lane whose expert is a refused lane's
of the cycle before, a match the packet manager registers in T), as the model does -- the
pool, which served every page it had before the refusal, is still empty. (With the
refusal as a per-expert OR of the lanes' registers in front of the lane chain, the path
into the pool's take was 27.5 FO4 at 32 experts.)

Why several takes a cycle rather than the one-take pool with a prefetched page per expert:
the reference model (``HubModel._place``) takes a page at the moment a row starts a tile,
in packet order, and refuses the row when the pool is empty then; a prefetch (or a
one-a-cycle refill) would make which page an expert gets, and when the pool counts as
empty, depend on cycle timing, so the RTL would no longer match a cycle-free model, and
pages held in prefetch slots would be invisible to software (neither free nor named by a
flag). Several experts do start tiles in the same cycle (the start of a layer), so the
pool serves them all. The cost is the ring's ``2 x lanes`` read ports: ``pool_pages``-way
selects in registers for a small pool, one read per bank of a banked ring for a large one
(:mod:`moehub.rtl.paging.ring`).

With count packets too (``count_packets``), a row the counts refuse (COUNT_MISMATCH, the
model's verdict before OVERFLOW) takes no page: whether a lane's row starts a tile takes,
beside its place and its room, whether the counts allow that many grants (the count
limit's ``allow``, a thermometer from registers, per count of requests ahead). The gate
tells the count limit the lanes it found no page for (``short``): the lanes behind its
expert's first one see only the grants ahead of that one (:mod:`moehub.rtl.counts.limit`).

A page handed back (``PAGE_FREE``) joins the ring four cycles after its write (the return
check), the model at the write: software hands pages back between layers (while no row
starts a tile) and then both agree. One that joins while rows take pages is still handed
out once and never lost: the takes pending when it joins saw the ring without it, so they
are charged to the ring as they saw it, and if they went past it the returned page is the
next one handed out, ahead of the fresh ones (``tests/test_rtl_v2_units.py``: several takes
a cycle and returns in the same cycles, against the model's pool; the first version handed
a fresh page out twice and lost the returned one).
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ..layouts import page_takes
from ..logic import count_onehot, exactly, register_copies, select
from .pool import PagePool
from .ring import page_ring


def _plus(reg, n: int, bit):
    """``reg + n + bit`` as a choice between two adders of constants to the register (the
    bit selects, after them): a one-bit increment after a select would be a carry chain
    behind the select."""
    w = len(reg)
    return Mux(bit, (reg + (n + 1))[:w], (reg + n)[:w])


def _gt_next(reg, took, good, bits: int, others=()):
    """The bits ``reg - n + good > x`` (x < ``bits``) for the ``n`` that ``took`` selects
    (one-hot), as compares of the register with constants chosen after them (``reg > x + n
    - good``); ``others``: (select, small value) outcomes compared directly."""
    L = len(took) - 1
    gt = {y: (reg > y) if y >= 0 else Const(1) for y in range(-1, bits + L)}
    return Cat(*(Cat(*([took[n] & Mux(good, gt[x + n - 1], gt[x + n]) for n in range(L + 1)]
                       + [sel & (v > x) for sel, v in others])).any() for x in range(bits)))


def tile_sizes(cfg: HubConfig) -> list:
    """log2 of every tile size a layer may use (TILE_ROWS_LOG2 is clamped to these)."""
    return list(range(cfg.min_tile_rows.bit_length() - 1, cfg.max_tile_rows.bit_length()))


class PageSupply(PagePool):
    """The page pool, up to ``lanes`` takes a cycle (see the module docstring).

    Attributes
    ----------
    avail : Out(lanes)
        Bit i: more than i pages are free (the i-th take of this cycle gets one).
    page : Out(page_bits).array(lanes)
        The page the i-th take of this cycle gets.
    take : In(lanes + 1)
        How many pages are taken this cycle, a one-hot (bit 0: none); at most the pages
        free.
    ret, ret_page, bad, free
        As :class:`~moehub.rtl.paging.pool.PagePool`'s (PAGE_FREE, PAGE_BAD, POOL_FREE).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.paged:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}]: a page supply needs pool_pages > 0")
        self.cfg = cfg
        L, P = page_takes(cfg), cfg.pool_pages
        wiring.Component.__init__(self, {
            "avail": Out(L), "page": Out(cfg.page_bits).array(L), "take": In(L + 1),
            "ret": In(1), "ret_page": In(16), "bad": Out(1), "free": Out(range(P + 1), init=P),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, L, P, pb = self.cfg, page_takes(self.cfg), self.cfg.pool_pages, self.cfg.page_bits
        count = Signal(range(P + 1), name="ring_count")     # returned pages waiting
        # (bit x: count > x, x < 2 x lanes -- registered beside count: the takes' pages and
        # the ring's head choose by flops, not by compares of a pool-sized counter)
        count_gt = Signal(2 * L, name="ring_count_gt")
        # (pages fbase + count .. P - 1 were never handed out: fbase = fresh - count, so the
        # n-th page in order past the ring is fbase + n, from a register)
        fbase = Signal(range(P + 1), name="fresh_base")
        nfree = Signal(range(P + 1), name="nfree", init=P)  # count + P - fresh, as a register
        # (bit x: nfree > x, x < 2 x lanes -- registered beside nfree, so the takes' verdicts
        # start at flops, not at compares of a pool-sized counter)
        free_gt = Signal(2 * L, name="nfree_gt", init=sum(1 << x for x in range(2 * L) if P > x))
        in_use = Signal(P, name="in_use")
        # The state follows the takes a cycle late (``pend``: the takes of the cycle before,
        # a one-hot register), so that no take reaches it in its own cycle: this cycle's
        # pages are the ones past the pending takes.
        pend = Signal(L + 1, name="pend", init=1)
        m.d.sync += pend.eq(self.take)
        # A good return joins the ring at its tail at the end of its cycle, unseen by that
        # cycle's takes, which are pending now: they took from the ring as it was without
        # it (``count - ret_r``) and then fresh pages. If they went past the old ring pages,
        # the returned page (``ret_page_r``) is the first of this cycle's, ahead of the fresh
        # ones (never a fresh page twice, never the return lost).
        good, good_page = self._returns(m, in_use)
        ret_r, ret_page_r = Signal(name="ret_joined"), Signal(pb, name="ret_joined_page")
        m.d.sync += [ret_r.eq(good), ret_page_r.eq(good_page)]
        m.submodules.ring = ring = page_ring(cfg)
        m.d.comb += [ring.pend.eq(pend), ring.count_gt.eq(count_gt), ring.ret_r.eq(ret_r),
                     ring.good.eq(good), ring.good_page.eq(good_page)]
        seq = self._order(m, ring.entry, count_gt, fbase, pend, good)
        for i in range(L):
            m.d.comb += self.page[i].eq(select([(pend[n], Mux(ret_r & ~count_gt[n], ret_page_r, seq[n]) if i == 0
                                                 else seq[n + i]) for n in range(L + 1)], pb))
        # ---- n pages taken (pend[n]): from the ring while the ring they saw lasts
        # (count - ret_r), the rest fresh (the ring moves its head itself). Every next value
        # is a candidate from a register (the register plus a constant, the good return's
        # one included), chosen by the takes, the registered compares and the return: no
        # adder behind a select, no compare of a counter on the path.
        lasts = [Const(1)] + [Mux(ret_r, count_gt[n], count_gt[n - 1]) for n in range(1, L + 1)]
        small = Signal(2, name="ring_count_restart")          # the ring ended: ret_r + good
        m.d.comb += small.eq(ret_r + good)
        m.d.sync += [
            count.eq(select([(pend[n] & lasts[n], _plus(count, -n, good)) for n in range(L + 1)]
                            + [(pend[n] & ~lasts[n], small) for n in range(1, L + 1)], len(count))),
            fbase.eq(select([(pend[n], _plus(fbase, n - 1, ~good)) for n in range(L + 1)], len(fbase))),
            nfree.eq(select([(pend[n], _plus(nfree, -n, good)) for n in range(L + 1)], len(nfree)))]
        # (count - n + good > x is count > x + n - good; ret_r + good > x for a restart)
        m.d.sync += count_gt.eq(_gt_next(count, [p & t for p, t in zip(pend, lasts)], good, 2 * L,
                                         [(pend[n] & ~lasts[n], small) for n in range(1, L + 1)]))
        free_gt_next = Signal(2 * L, name="nfree_gt_next")
        m.d.comb += free_gt_next.eq(_gt_next(nfree, pend, good, 2 * L))
        m.d.sync += free_gt.eq(free_gt_next)
        # (bit i: more than i pages free past the pending takes -- ``pend`` and ``free_gt``
        # as they will be, so a register: the takes' verdicts (the multicast arena's
        # ``fits``) start at a flop, not at the AND-OR of the pending takes with the
        # compares -- pool.pend -> fits -> verdicts -> grants -> the arena's page was
        # 28.7 FO4 at deepseek-v3-8gpu with every v2 feature)
        avail = Signal(L, name="avail_r", init=free_gt.init & ((1 << L) - 1))
        m.d.sync += avail.eq(Cat(Cat(self.take[n] & free_gt_next[n + i] for n in range(L + 1)).any()
                                 for i in range(L)))
        m.d.comb += self.avail.eq(avail)
        # ---- in_use: set by the takes, cleared by a good return (never a page taken now).
        # The pages the pending takes got are registered as handed out (``given``), so the
        # set bits decode flops, not the ring's read.
        given = [Signal(pb, name=f"given_page{i}") for i in range(L)]
        m.d.sync += [given[i].eq(self.page[i]) for i in range(L)]
        taken = Signal(P, name="taken_bits")
        took = [Cat(pend[n] for n in range(i + 1, L + 1)).any() for i in range(L)]  # take i happened
        m.d.comb += taken.eq(Cat(*(Cat(took[i] & (given[i] == p) for i in range(L)).any()
                                   for p in range(P))))
        cleared = Signal(P, name="cleared_bits")
        m.d.comb += cleared.eq(Mux(good, Const(1, P) << good_page, 0))
        m.d.sync += in_use.eq((in_use | taken) & ~cleared)
        m.d.comb += self.free.eq(nfree)
        return m

    def _order(self, m, entries, count_gt, fbase, pend, good):
        """The pages in order as this cycle's takes see them, from registers: the ring's
        entries (oldest first), then fresh ones (``2 x lanes`` of them); ``count_gt``: bit
        n, the ring holds more than n; ``pend``, ``good``: the pending takes and this
        cycle's good return, which move ``fbase``."""
        L, P, pb = page_takes(self.cfg), self.cfg.pool_pages, self.cfg.page_bits
        seq = [Signal(pb, name=f"next_page{n}") for n in range(2 * L)]
        fresh = self._fresh(m, fbase, pend, good)
        for n in range(2 * L):
            m.d.comb += seq[n].eq(Mux(count_gt[n], entries[n], fresh[n]) if n < P else fresh[n])
        return seq

    def _fresh(self, m, fbase, pend, good):
        """``fbase + n`` (n < 2 x lanes), the fresh pages in order, each a register: its
        next value, ``fbase + n + k - good`` for the ``k`` pages the pending takes took, is
        chosen among sums of ``fbase`` and constants (shared by every n), so no adder stands
        between the register and the takes' pages (``fbase``'s carry chain in front of the
        page select was 26.4 FO4 into AL's page at deepseek-v3 on two nodes)."""
        L, pb = page_takes(self.cfg), self.cfg.page_bits
        sums = {c: Signal(pb, name=f"fresh_sum{c}".replace("-", "m")) for c in range(-1, 3 * L)}
        m.d.comb += [v.eq((fbase + c)[:pb]) for c, v in sums.items()]
        fresh = [Signal(pb, name=f"fresh_page{n}", init=n % (1 << pb)) for n in range(2 * L)]
        for n in range(2 * L):
            m.d.sync += fresh[n].eq(select([(pend[k], Mux(good, sums[n + k - 1], sums[n + k]))
                                            for k in range(L + 1)], pb))
        return fresh


class PageGate(wiring.Component):
    """Pages for the rows the allocator grants (see the module docstring).

    Attributes
    ----------
    req : In(lanes), expert : In(experts).array(lanes)
        The packet manager's row requests (lane order; the expert one-hot).
    prev_same : In(lanes).array(lanes)
        Bit i of ``prev_same[j]``: lane j's expert is lane i's of the group in the cycle
        before (a register of T: the pipeline never stalls).
    same, ahead : In(lanes).array(lanes)
        Bit i of ``same[j]`` (i < j): lanes i and j name the same expert; bit a of
        ``ahead[j]``: ``a`` requests of lane j's expert ahead of it (one-hot; zero when lane
        j asks for no row). Both are registers of T (the lane order then starts at flops,
        not at a count of requests).
    row : In(row_bits).array(lanes), ok : In(lanes)
        The allocator's grants (room in the region).
    expert_next : In(experts).array(lanes) ; tile_at_next, room_ge_next : In
        The next values of ``expert`` (the packet manager's T register; here it may be
        set without a request, ``req`` gates after) and of the
        allocator's tile starts (bit a: row ``rows + a`` starts a tile) and room compares
        (bit n: room >= n), registers all three, taken every cycle: whether a lane's row
        starts a tile and fits its region is formed for every count of requests ahead, as
        the allocator forms its grants, and registered a cycle ahead (``starts_q``) -- so
        the pool's verdict waits for no grant's row, no compare of a counter and no
        experts-wide select of the allocator's registers.
    allow : In(lanes).array(experts)
        (count_packets) Bit ``a``: the counts allow ``a + 1`` grants to the expert (from
        registers); a row they refuse starts no tile.
    clear : In(1)
        Layer start: latch the tile size.
    tile_oh : In(len(tile_sizes))
        The TILE_ROWS_LOG2 CSR as a one-hot (the bank's register), latched at ``clear``.
    tile_m1, tile_m1_load : Out(row_bits)
        The layer's tile rows minus one, for the allocator's ``tile_at``: the register, and
        the value it latches at ``clear``.
    veto : Out(lanes)
        Grants refused for want of a page.
    stop_r : Out(lanes).array(experts)
        The refusals of the cycle before, per expert, one-hot: its first refused lane had
        ``a`` grants of the expert ahead of it in that cycle (bit ``a``), which are all that
        stand; the allocator sets its counters to its counters of that cycle plus ``a``
        (none set: no refusal). Formed from registers of the lanes (their first refusal,
        expert, requests ahead), so the refusal's path ends at a lane's register, not past
        an AND-OR over the lanes into the allocator.
    stop_any : Out(experts)
        ``stop_r`` is not zero: the select of the allocator's held values, fanned out over
        its counters' bits, formed straight from copies of the lanes' refusal registers.
    short : Out(lanes)
        (count_packets) Lane j's row starts a tile and the pool has no page left for it.
    grant_ok : Out(lanes)
        ``ok`` and not vetoed: the packet manager's grant.
    page : Out(page_bits).array(lanes)
        The page of each granted row.
    cur_page : Out(page_bits).array(experts)
        Each expert's page (of its last tile): the flag of a partial last tile names it.
        A register loaded a cycle after the take (its readers look long after).
    tile_sh : Out(len(tile_sizes))
        The layer's tile size, one-hot over :func:`tile_sizes` (the packet manager places
        a row at ``page << log2(tile) | row mod tile``).
    ret, ret_page, bad, free
        PAGE_FREE, PAGE_BAD, POOL_FREE (the pool's).
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        L, E, pb = cfg.lanes, cfg.experts, cfg.page_bits
        super().__init__({
            "req": In(L), "expert": In(E).array(L), "same": In(L).array(L), "ahead": In(L).array(L),
            "prev_same": In(L).array(L),
            "row": In(cfg.row_bits).array(L), "ok": In(L), "clear": In(1),
            "expert_next": In(E).array(L), "tile_at_next": In(L).array(E), "room_ge_next": In(L + 1).array(E),
            "stop_r": Out(L).array(E), "stop_any": Out(E),
            "tile_oh": In(len(tile_sizes(cfg))), "tile_m1": Out(cfg.row_bits), "tile_m1_load": Out(cfg.row_bits),
            "veto": Out(L), "grant_ok": Out(L), "page": Out(pb).array(L),
            "cur_page": Out(pb).array(E), "tile_sh": Out(len(tile_sizes(cfg))),
            "ret": In(1), "ret_page": In(16), "bad": Out(1),
            "free": Out(range(cfg.pool_pages + 1), init=cfg.pool_pages),
            **({"allow": In(L).array(E), "short": Out(L)} if cfg.count_packets else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, L, E, pb = self.cfg, self.cfg.lanes, self.cfg.experts, self.cfg.page_bits
        m.submodules.pool = pool = PageSupply(cfg)
        m.d.comb += [pool.ret.eq(self.ret), pool.ret_page.eq(self.ret_page),
                     self.bad.eq(pool.bad), self.free.eq(pool.free)]
        # ---- the layer's tile size, latched at its start
        sizes = tile_sizes(cfg)
        tile_m1 = Signal(cfg.row_bits, name="page_tile_m1")
        sh = Signal(len(sizes), name="page_tile_sh", init=1 << sizes.index(cfg.tile_rows.bit_length() - 1))
        loaded = Signal(cfg.row_bits, name="page_tile_m1_load")
        m.d.comb += loaded.eq(select([(self.tile_oh[k], (1 << s) - 1) for k, s in enumerate(sizes)], cfg.row_bits))
        with m.If(self.clear):
            m.d.sync += [sh.eq(self.tile_oh), tile_m1.eq(loaded)]
        m.d.comb += [self.tile_m1.eq(tile_m1), self.tile_m1_load.eq(loaded)]
        m.d.comb += self.tile_sh.eq(sh)
        cur = [Signal(pb, name=f"cur_page{e}") for e in range(E)]
        m.d.comb += [self.cur_page[e].eq(cur[e]) for e in range(E)]
        # ---- lane order: which grants start a tile, which of those the pool serves
        req, oh = self.req, self.expert
        same = [[req[i] & req[j] & self.same[j][i] for i in range(j)] for j in range(L)]
        ahead = [[self.ahead[j][a] for a in range(j + 1)] for j in range(L)]
        starts_if = self._starts_if(m)
        # (an expert refused a page last cycle: the allocator's counters for it are a cycle
        # wrong, and the pool is still empty, so its rows are refused now; ``refused``:
        # from the lanes' registers of that cycle)
        first_r = Signal(L, name="page_first_short_r")
        oh_r = [Signal(E, name=f"page_expert_r{j}") for j in range(L)]
        ahead_r = [Signal(L, name=f"page_ahead_r{j}") for j in range(L)]
        # (lane j is held when a lane i of the group before was its expert's first refusal:
        # i's refusal register and the packet manager's registered expert match, no
        # per-expert OR in front of the lane chain)
        held = [Signal(name=f"page_held{j}") for j in range(L)]
        first_h = Signal(L, name="page_first_short_h")      # (a copy, below)
        m.d.comb += [held[j].eq(Cat(first_h[i] & self.prev_same[j][i] for i in range(L)).any()) for j in range(L)]
        needs = [Signal(name=f"page_needs{j}") for j in range(L)]
        for j in range(L):
            m.d.comb += needs[j].eq(req[j] & ~held[j]
                                    & Cat(ahead[j][a] & starts_if[j][a] for a in range(j + 1)).any())
        served = [Signal(name=f"page_served{j}") for j in range(L)]     # takes a page
        short = [Signal(name=f"page_short{j}") for j in range(L)]       # needs one, none left
        # (the pool serves K = page_takes(cfg) takes a cycle: K tile starts at most need a
        # page in a cycle, so a lane with K needs ahead of it never needs one)
        K = page_takes(cfg)
        for j in range(L):
            fits = Cat(exactly(needs[:j], n) & pool.avail[n] for n in range(min(j + 1, K))).any()
            m.d.comb += [served[j].eq(needs[j] & fits), short[j].eq(needs[j] & ~fits)]
        if cfg.count_packets:
            m.d.comb += [self.short[j].eq(short[j]) for j in range(L)]
        first = []
        for j in range(L):
            later = Cat(short[i] & same[j][i] for i in range(j)).any() if j else Const(0)
            first.append(short[j] & ~later)
            m.d.comb += [self.veto[j].eq(req[j] & (short[j] | later | held[j])),
                         self.grant_ok[j].eq(self.ok[j] & ~self.veto[j])]
        m.d.sync += [first_r.eq(Cat(*first))] + [oh_r[j].eq(oh[j]) for j in range(L)] \
            + [ahead_r[j].eq(Cat(*ahead[j])) for j in range(L)]
        for e in range(E):
            m.d.comb += self.stop_r[e].eq(Cat(
                Cat(first_r[j] & oh_r[j][e] & ahead_r[j][a] for j in range(a, L)).any() for a in range(L)))
        # (a refusing lane had requests ahead, so ``stop_r[e]`` is not zero exactly when a
        # lane refused for e: the OR of stop_r's bits, behind first_r's buffer tree over
        # every expert, then fanned out over the held select, was 23.8 FO4 into the tile
        # starts at deepseek-v3-8gpu paged -- two copies of first_r, each read
        # by half the experts. Not the plain copy, which synthesis merges with first_r and
        # its other readers (22.7 FO4 measured with it): the inverted one and the one reset to ones,
        # harmless here -- oh_r is 0 after a reset)
        first_c = register_copies(m, Cat(*first), 4, "page_first_short_c")[1:]
        for e in range(E):
            fc = first_c[e * 2 // E]
            m.d.comb += self.stop_any[e].eq(Cat(fc[j] & oh_r[j][e] for j in range(L)).any())
        # (and a third, the inverted one reset to ones, for the held lanes: first_r's
        # fan-out over every expert's stop_r was a buffer in front of the lanes' needs --
        # first_r -> held -> the takes -> AL's page 22.3 FO4 at deepseek-v3 on two nodes.
        # After a reset it reads ones, harmless: no lane requests then)
        m.d.comb += first_h.eq(first_c[2])
        # (the pages taken: the first min(N, A) lanes that need one are served, N of them
        # needing, A pages available (``avail``: A > x), so the take is that minimum as a
        # one-hot -- from the needs' count and ``avail`` alone, not a count of ``served``
        # behind the needs' counts ahead: one count, not two in series, on the way from T's
        # requests into the pool's pending takes)
        n_oh = count_onehot(needs)
        a_ge = [Const(1)] + [pool.avail[n - 1] for n in range(1, K + 1)]          # A >= n
        a_eq = [a_ge[n] & ~pool.avail[n] for n in range(K)] + [a_ge[K]]           # A == n
        n_gt = [Cat(*n_oh[n + 1:]).any() for n in range(K + 1)]                   # N > n
        m.d.comb += pool.take.eq(Cat(*((n_oh[n] & a_ge[n]) | (n_gt[n] & a_eq[n]) for n in range(K + 1))))
        # ---- each granted row's page: the page it took; else the newest page an earlier
        # lane took for its expert in this cycle; else its expert's current page
        new = [Signal(pb, name=f"page_new{j}") for j in range(L)]
        for j in range(L):
            m.d.comb += new[j].eq(select([(exactly(needs[:j], n), pool.page[n]) for n in range(min(j + 1, K))], pb))
        # (each expert's current page follows the takes a cycle late, from registers of the
        # lanes' takes: a take's page then drives its later lanes and a register, not every
        # expert's page -- the takes' fan-out over 16 experts x 14 bits, buffers deep, was
        # 25.8-26.0 FO4 into the experts' pages at deepseek-v3 on two nodes; this
        # cycle's lanes see the cycle before's takes through T's registered expert match)
        served_r = Signal(L, name="page_served_r")
        new_r = [Signal(pb, name=f"page_new_r{j}") for j in range(L)]
        m.d.sync += [served_r.eq(Cat(*served))] + [new_r[j].eq(new[j]) for j in range(L)]
        for j in range(L):
            mine = select([(oh[j][e], cur[e]) for e in range(E)], pb)
            for i in range(L):                         # the cycle before's, the last lane's wins
                mine = Mux(served_r[i] & self.prev_same[j][i], new_r[i], mine)
            m.d.comb += self.page[j].eq(self._own_page(j, needs, same, pool.page, mine))
        for e in range(E):
            for j in range(L):                         # the last lane's take wins
                with m.If(served_r[j] & oh_r[j][e]):
                    m.d.sync += cur[e].eq(new_r[j])
        return m

    def _own_page(self, j, needs, same, pages, mine):
        """Lane j's page: the page its expert's newest tile start of this cycle up to lane j
        took (the ``n``-th take, ``n`` the needs ahead of that lane), else ``mine`` -- one
        AND-OR of the pool's pages, selected by the needs alone. A grant stands only when
        that newest start was served (a short lane vetoes itself and its expert's later
        lanes), so the pool's verdict (``fits``, ``served``) is not on the page's path:
        only a vetoed row's page differs, and no one reads it (its grant is refused). (With
        ``served`` choosing, in a chain of muxes over the lanes, the path from T's registers
        through the needs, ``fits`` and ``served``'s fan-out into AL's page was 23.0 FO4 at
        deepseek-v3 on two nodes.)"""
        K, pb = page_takes(self.cfg), self.cfg.page_bits
        starts = [needs[i] & same[j][i] for i in range(j)] + [needs[j]]       # lanes 0..j
        newest = [starts[i] & ~Cat(*starts[i + 1:]).any() if i < j else starts[j] for i in range(j + 1)]
        take = [Cat(newest[i] & exactly(needs[:i], n) for i in range(n, j + 1)).any() for n in range(min(j + 1, K))]
        return select([(take[n], pages[n]) for n in range(len(take))]
                      + [(~Cat(*starts).any(), mine)], pb)

    def _starts_if(self, m):
        """Per lane j and count ``a`` of requests of its expert ahead of it: row ``rows + a``
        of the expert it names fits the region and starts a tile -- a register formed a
        cycle ahead from the next values of its expert and of the allocator's
        ``room_ge``/``tile_at`` (``starts_q``); with count packets, and the counts allow
        ``a + 1`` grants (the allowance chosen by the expert here, from registers). (The
        experts-wide select of the allocator's registers behind T's expert one-hot, then
        the lane chain, was 22.8 FO4 into AL's page at deepseek-v3-8gpu paged;
        24.2 at two nodes.)"""
        cfg, L, E = self.cfg, self.cfg.lanes, self.cfg.experts
        starts_q = [Signal(L, name=f"page_starts_q{j}") for j in range(L)]
        for j in range(L):
            nxt = self.expert_next[j]
            m.d.sync += starts_q[j].eq(Cat(
                Cat(nxt[e] & self.room_ge_next[e][a + 1] & self.tile_at_next[e][a] for e in range(E)).any()
                for a in range(L)))
        if not cfg.count_packets:
            return starts_q
        # (and the counts allow a + 1 grants: a row they refuse takes no page)
        return [Cat(starts_q[j][a] & Cat(self.expert[j][e] & self.allow[e][a] for e in range(E)).any()
                    for a in range(L)) for j in range(L)]
