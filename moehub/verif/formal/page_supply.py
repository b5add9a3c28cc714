"""Property harness of protocol v2's page supply (:class:`moehub.rtl.paging.regions.PageSupply`):
the page pool of the paged regions and of the paged multicast arena, up to
``page_takes(cfg)`` takes a cycle, its returned pages in a ring
(:mod:`moehub.rtl.paging.ring`).

Environment: the takes of a cycle are a one-hot count ``n`` (``take[n]``) and never more
than the supply offers (``take[n]`` only with ``avail[n - 1]``) -- what the page gate and
the paged arena keep; software may write any page number to ``PAGE_FREE`` in any cycle
(good, repeated, never handed out, out of range, back to back, while pages are taken).

Reference state: the pages free (``P`` at reset, one fewer per take, one more per accepted
return at its verdict), one chosen page ``cp`` (``AnyConst``: never handed out, in use, or
returned and free), its returns in flight (three cycles from the write to the verdict,
``bad``) with whether it was in use when the supply read its ``in_use`` bit (the takes of
the cycles *before* the write: the supply registers its takes' pages a cycle before it
sets their bits), and the last cycle's take count.

Properties -- since ``cp`` is any page, each holds for every page:

* **at most once until returned**: the pages of one cycle's takes are in the pool
  (``< pool_pages``), the chosen page is among them at most once, and never while in use;
* **a returned-twice page refused**: a return is accepted (no ``bad`` at its verdict)
  exactly when the page was in use when read and no return of it was accepted since -- a
  second return (even back to back with the first), a page never handed out or out of
  range is refused, a page in use is accepted;
* **none lost**: ``avail`` is exact -- bit ``i`` set exactly when more than ``i`` pages
  are free (reference) -- and ``POOL_FREE`` counts the free pages plus the last cycle's
  takes (the supply follows its takes a cycle late). With the first property this is
  "none lost": every take gets a page not in use, and the supply offers as many as are
  free, so taking every page offered takes every free page (pigeonhole) -- a page lost in
  the ring, or a fresh page offered twice in its place, fails one of the two.

Unbounded (k-induction closes at k = 3; not at 1 or 2). The properties alone are not
inductive: a ring holding a page twice, or a page both in use and in the ring, satisfies
them until it is handed out. The strengthening invariants, on the supply's registers
(read from its elaborated module and its ring's, :func:`.common.elaborate_into`) -- the
supply follows its takes a cycle late, so ``pend`` (the last cycle's takes, one-hot) has
taken pages that ``ring_count``, ``fresh_base`` and the ring's head do not yet show:

* counts: ``pend`` is a one-hot of the last cycle's take count; ``nfree + fbase == P``,
  ``count <= P``, ``fresh = fbase + count <= P``; the registered compares ``nfree_gt``,
  ``ring_count_gt`` are ``nfree > x``, ``count > x``; ``fresh_page{n} == fbase + n``;
* the ring (:class:`~moehub.rtl.paging.ring.RegisterRing`): head and tail one-hot, the tail
  ``count`` past the head, its live entries (the ``count`` from the head) in the pool, a
  return joined last cycle (``ret_joined``) its last live entry;
* the pending takes' pages (``given_page{i}``): the ring's first entries as they saw it
  (``count - ret_joined``), then fresh pages from ``fbase + ret_joined``;
* every page is exactly one of: in use (``in_use``), live in the ring (once), fresh
  (``>= fresh``) -- the partition that ties the free counts to the pages;
* the chosen page: in use (reference) exactly when ``in_use`` or a pending take's page;
  never handed out exactly when ``>= fresh`` and not pending; returned exactly when live
  in the ring and not pending; at most once in the ring;
* the return check's stages (I, G, W and the one after): their valids are the returns in
  flight, never good and bad at once, a good one in the pool; for the chosen page the
  stage registers are its returns in flight, the ``in_use`` bit read in I and G is the
  reference's ``held`` (less a return accepted since), and W's good return is the
  accepted verdict.

Proven on ``tiny`` with 4 pages (4 takes a cycle; 16.5 s) and with 2 lanes and 5 pages (a
pool that is not a power of two; 27 s), measured at load 11 on 2 cores. Pools of
``BANKED_MIN_PAGES`` (32) pages or more keep the ring in memories
(:class:`~moehub.rtl.paging.ring.BankedRing`): not covered here.

Planted bugs (:data:`PLANTS`, the harness's ``plant`` option) that must make the proof fail.
"""
from __future__ import annotations

from amaranth import Cat, Elaboratable, Module, Mux, Signal

from ...rtl.layouts import page_takes
from ...rtl.logic import select
from ...rtl.paging.regions import PageSupply
from .common import Props, any_const, any_seq, count_ones, elaborate_into, one_hot, reset_first
from .plant import Plant, planted

FRESH, IN_USE, FREED = 0, 1, 2
#: cycles from a PAGE_FREE write to the supply's verdict (``bad``; the page joins the ring)
RETURN_LATENCY = 3

PLANTS = {
    # the first version's bug (rtl/paging/regions.py's docstring): a return that joins the ring
    # while takes are pending is not seen by them -- a fresh page is handed out in its place
    # (later twice) and the returned page is lost
    "joined-return-unseen": Plant(
        "moehub.rtl.paging.regions", "Mux(ret_r & ~count_gt[n], ret_page_r, seq[n]) if i == 0",
        "seq[n] if i == 0", "PageSupply",
        ("handed out while in use", "in the pool", "avail is not", "twice in one cycle"),
        "the page a take gets ignores a return joined behind the pending takes"),
    # the return check forgets the return ahead of it: a page returned twice back to back is
    # accepted twice (read in use by both before the first clears its bit)
    "double-return-accepted": Plant(
        "moehub.rtl.paging.pool", "good.eq(g_ret & held & ~again)", "good.eq(g_ret & held)",
        "PagePool", ("not in use accepted",), "a second return in flight is not compared with the first",
        method="_returns"),
    # the free count misses an accepted return: a page freed is never offered (lost)
    "free-count-misses-return": Plant(
        "moehub.rtl.paging.regions", "nfree.eq(select([(pend[n], _plus(nfree, -n, good))",
        "nfree.eq(select([(pend[n], _plus(nfree, -n, 0))", "PageSupply",
        ("POOL_FREE",), "POOL_FREE does not count a returned page"),
    # the offer ignores the returns: avail runs dry while a returned page waits (lost)
    "avail-misses-return": Plant(
        "moehub.rtl.paging.regions", "free_gt_next.eq(_gt_next(nfree, pend, good, 2 * L))",
        "free_gt_next.eq(_gt_next(nfree, pend, 0, 2 * L))", "PageSupply",
        ("avail is not",), "the offer does not count a returned page"),
}


class PageSupplyHarness(Elaboratable):
    """A :class:`PageSupply` of ``cfg`` under its environment; ``plant``: a bug of
    :data:`PLANTS` planted in it."""

    def __init__(self, cfg, plant: str | None = None):
        self.cfg, self.plant = cfg, plant
        try:
            self.dut_cls = planted(PageSupply, PLANTS, plant)
        except ValueError:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        cfg, P, K = self.cfg, self.cfg.pool_pages, page_takes(self.cfg)
        p = Props(m)
        self.messages = p.messages
        dut = self.dut_cls(cfg)
        self.regs = elaborate_into(m, "dut", dut, platform, into=("ring",))
        reset_first(m)
        take = any_seq(m, K + 1, "take")
        p.assume(one_hot(take))
        for n in range(1, K + 1):
            p.assume(~take[n] | dut.avail[n - 1])
        ret, ret_page = any_seq(m, 1, "ret"), any_seq(m, 16, "ret_page")
        m.d.comb += [dut.take.eq(take), dut.ret.eq(ret), dut.ret_page.eq(ret_page)]
        ntake = Signal(range(K + 1), name="ref_ntake")
        m.d.comb += ntake.eq(sum(n * take[n] for n in range(1, K + 1)))
        taken = [Signal(name=f"ref_took{i}") for i in range(K)]   # take i happens this cycle
        m.d.comb += [taken[i].eq(Cat(*take[i + 1:]).any()) for i in range(K)]
        for i in range(K):
            p.check(~taken[i] | (dut.page[i] < P), "a page taken is not in the pool")
        cp = any_const(m, range(P), "chosen_page")
        p.assume(cp < P)
        state = Signal(2, name="ref_state")
        got = count_ones([taken[i] & (dut.page[i] == cp) for i in range(K)])
        p.check(got <= 1, "the chosen page handed out twice in one cycle")
        p.check((got == 0) | (state != IN_USE), "the chosen page handed out while in use")
        verdict, accept = self._returns(m, p, dut, ret, ret_page, cp, state)
        with m.If(got != 0):
            m.d.sync += state.eq(IN_USE)
        with m.Elif(verdict & accept):
            m.d.sync += state.eq(FREED)
        self._free(m, p, dut, ret, ntake, K)
        self._covers(m, p, dut, take, got, verdict, state, K)
        flight, held, freed = self._flight
        self._pending = supply_invariants(m, p, cfg, Regs(self.regs), cp, state == IN_USE, self.ref_last,
                                          (self.due, flight, held, freed))
        p.check(state != 3, "invariant: the chosen page's state is not a state")
        pending, live = self._pending
        p.check((state == FRESH) == ((cp >= self.regs["fresh_base"] + self.regs["ring_count"]) & ~pending),
                "invariant: the chosen page never handed out is not at or past fresh")
        p.check((state == FREED) == (live & ~pending), "invariant: the chosen page returned is not in the ring")
        return m

    def _returns(self, m, p, dut, ret, ret_page, cp, state):
        """The chosen page's returns in flight: (verdict due now, accepted by the spec)."""
        flight = [Signal(name=f"ref_ret_cp{k}") for k in range(RETURN_LATENCY)]
        held = [Signal(name=f"ref_held{k}") for k in range(RETURN_LATENCY)]
        verdict = flight[-1]
        accept = Signal(name="ref_accept")
        freed = verdict & accept
        # (held: in use as the supply reads it -- the takes before the write's cycle -- and
        # no return of it accepted since: a return accepted now spoils the ones in flight,
        # and a write in this cycle is a return of a page already free)
        m.d.sync += [flight[0].eq(ret & (ret_page == cp)), held[0].eq((state == IN_USE) & ~freed)]
        m.d.sync += [flight[k].eq(flight[k - 1]) for k in range(1, RETURN_LATENCY)]
        m.d.sync += [held[k].eq(held[k - 1] & ~freed) for k in range(1, RETURN_LATENCY)]
        m.d.comb += accept.eq(held[-1])
        self._flight = (flight, held, freed)
        p.check(~(verdict & ~dut.bad) | accept, "a return of a page not in use accepted")
        p.check(~(verdict & dut.bad) | ~accept, "a return of a page in use refused")
        return verdict, accept

    def _free(self, m, p, dut, ret, ntake, K):
        """Pages free (reference) against ``avail`` (exact) and ``POOL_FREE``."""
        P = self.cfg.pool_pages
        due = [Signal(name=f"ref_ret{k}") for k in range(RETURN_LATENCY)]
        m.d.sync += due[0].eq(ret)
        m.d.sync += [due[k].eq(due[k - 1]) for k in range(1, RETURN_LATENCY)]
        free = Signal(range(P + 1), init=P, name="ref_free")
        m.d.sync += free.eq(free - ntake + (due[-1] & ~dut.bad))
        self.due = due
        for i in range(K):
            p.check(dut.avail[i] == (free > i), f"avail is not exact: avail[{i}] != (free > {i})")
        last = Signal(range(K + 1), name="ref_ntake_last")
        m.d.sync += last.eq(ntake)
        p.check(dut.free == free + last, "POOL_FREE is not the pages free plus the last cycle's takes")
        self.ref_free, self.ref_last = free, last

    def _covers(self, m, p, dut, take, got, verdict, state, K):
        p.cover((self.ref_free == 0), "every page handed out")
        p.cover((got != 0) & (state == FREED), "the chosen page handed out again after its return")
        p.cover(verdict & dut.bad & (state == FREED), "a second return of the chosen page refused")
        p.cover(take[K], f"{K} takes in one cycle")
        joined = Signal(name="ref_joined_under_take")
        m.d.sync += joined.eq(verdict & ~dut.bad & ~take[0])
        p.cover(joined & (got != 0) & (state == FREED),
                "the chosen page, joining the ring under a take, handed out again")


class Regs:
    """The supply's registers under a prefix (``"arena.pool."`` inside the paged arena)."""

    def __init__(self, regs, prefix: str = ""):
        self.regs, self.prefix = regs, prefix

    def __getitem__(self, name):
        return self.regs[f"{self.prefix}{name}"]


def supply_invariants(m, p, cfg, r: Regs, cp, in_use, last_takes, returns, free=None):
    """The page supply's strengthening invariants (the module docstring), on its registers
    ``r``, against a reference: the chosen page ``cp`` and whether it is in use, the last
    cycle's take count, and the returns in flight ``(due, flight, held, freed)`` (of any
    page, of the chosen one, whether it was in use when read, its verdict accepted now);
    ``free``: the pages free (reference), which ``avail`` tells exactly. Shared by this harness and the paged multicast arena's. Returns ``pending`` (the
    chosen page is a pending take's)."""
    P, K, pb = cfg.pool_pages, page_takes(cfg), cfg.page_bits
    pend, count, fbase, nfree = r["pend"], r["ring_count"], r["fresh_base"], r["nfree"]
    head, tail, ret_r = r["ring.head_oh"], r["ring.tail_oh"], r["ret_joined"]
    ring = [r[f"ring.ring{q}"] for q in range(P)]

    def at(k):                      # the ring's k-th entry from its head
        return select([(head[q], ring[(q + k) % P]) for q in range(P)], pb)

    # -- counts and registered compares
    p.check(one_hot(pend), "invariant: pend is not a one-hot")
    if free is not None:
        p.check(r["avail_r"] == Cat(free > i for i in range(K)), "invariant: avail is not 'more than i pages free'")
    npend = sum(n * pend[n] for n in range(1, K + 1))
    p.check(last_takes == npend, "invariant: pend is not the last cycle's takes")
    p.check((count <= P) & (nfree + fbase == P) & (fbase + count <= P),
            "invariant: count <= P, nfree = P - fbase, fbase + count <= P")
    p.check(r["nfree_gt"] == Cat(nfree > x for x in range(2 * K)), "invariant: nfree_gt is not nfree > x")
    p.check(r["ring_count_gt"] == Cat(count > x for x in range(2 * K)), "invariant: count_gt is not count > x")
    for n in range(2 * K):
        p.check(r[f"fresh_page{n}"] == (fbase + n)[:pb], f"invariant: fresh_page{n} is not fbase + {n}")
    # -- the ring: one-hot head and tail, tail = head + count, the joined return at its end
    p.check(one_hot(head) & one_hot(tail), "invariant: the ring's head or tail is not a one-hot")
    p.check(Cat((count == c) & (tail == Cat(*(head[(q - c) % P] for q in range(P))))
                for c in range(P + 1)).any(), "invariant: the ring's tail is not head + count")
    p.check(~ret_r | Cat((count == k + 1) & (at(k) == r["ret_joined_page"]) for k in range(P)).any(),
            "invariant: the joined return is not the ring's last entry")
    # -- the pending takes' pages: the ring's first entries they saw, then fresh ones
    seen = count - ret_r
    given = [r[f"given_page{i}"] for i in range(K)]
    took = [Cat(*pend[i + 1:]).any() for i in range(K)]
    for i in range(K):
        want = Mux(seen > i, at(i) if i < P else 0, (fbase + ret_r + i)[:pb])
        p.check(~took[i] | (given[i] == want), f"invariant: pending take {i}'s page is not the ring's or fresh")
    pending = Cat(took[i] & (given[i] == cp) for i in range(K)).any()
    # (every page, not only the chosen one: exactly one of in use, in the ring, never
    # handed out -- the pending takes' pages still counted in the ring or fresh; this
    # is what ties the free counts to the pages)
    for q in range(P):
        here = [(count > k) & (at(k) == q) for k in range(P)]
        p.check(r["in_use"][q] + count_ones(here) + (fbase + count <= q) == 1,
                "invariant: a page not exactly one of in use, in the ring, fresh")
    p.check(Cat((count <= k) | (at(k) < P) for k in range(P)).all(), "invariant: a page in the ring out of the pool")
    live = [(count > k) & (at(k) == cp) for k in range(P)]
    p.check(count_ones(live) <= 1, "invariant: the chosen page twice in the ring")
    p.check(in_use == (r["in_use"].bit_select(cp, 1) | pending),
            "invariant: the chosen page in use is not in_use or a pending take's")
    _return_invariants(m, p, P, r, cp, *returns)
    return pending, Cat(*live).any()


def _return_invariants(m, p, P, r, cp, due, flight, held, freed):
    """The return check's stages (I, G, W and the one after W) against the returns in
    flight, of any page (``due``) and of the chosen one (``flight``, ``held``)."""
    freed_q = Signal(name="ref_freed_q")
    m.d.sync += freed_q.eq(freed)
    p.check((r["ret_i"] == due[0]) & (r["ret_g"] == due[1]) & (due[2] == (r["bad_r"] | r["ret_good_w"])),
            "invariant: the return stages' valids are not the returns in flight")
    p.check(~(r["bad_r"] & r["ret_good_w"]), "invariant: a verdict both good and bad")
    p.check((flight[0] == (r["ret_i"] & (r["ret_page_i"] == cp)))
            & (flight[1] == (r["ret_g"] & (r["ret_page_g"] == cp))),
            "invariant: the chosen page's returns in flight are not the stages'")
    p.check(~r["ret_g"] | (r["ret_in_range"] == (r["ret_page_g"] < P)), "invariant: ret_in_range is not page_g < P")
    p.check(~flight[0] | (held[0] == r["in_use"].bit_select(cp, 1)),
            "invariant: a return in I: held is not in_use")
    p.check(~flight[1] | (held[1] == (r["in_use_group"].bit_select(cp, 1) & ~freed_q)),
            "invariant: a return in G: held is not the in_use read, less a return accepted since")
    p.check((r["ret_good_w"] & (r["ret_page_w"] == cp)) == freed,
            "invariant: W's good return of the chosen page is not the accepted verdict")
    p.check((r["ret_good_x"] & (r["ret_page_x"] == cp)) == freed_q,
            "invariant: the stage after W is not the last accepted verdict")
    p.check(~r["ret_good_w"] | (r["ret_page_w"] < P), "invariant: a good return out of the pool")
