"""Property harness of protocol v2's page supply (:class:`moehub.rtl.paging.PageSupply`):
the page pool of the paged regions and of the paged multicast arena, up to
``page_takes(cfg)`` takes a cycle, its returned pages in a ring
(:mod:`moehub.rtl.page_ring`).

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

Planted bugs (:data:`PLANTS`, the harness's ``plant`` option) that must make the proof fail.
"""
from __future__ import annotations

from amaranth import Cat, Elaboratable, Module, Signal

from ...rtl.layouts import page_takes
from ...rtl.paging import PageSupply
from .common import Props, any_const, any_seq, count_ones, one_hot, reset_first
from .plant import Plant, planted

FRESH, IN_USE, FREED = 0, 1, 2
#: cycles from a PAGE_FREE write to the supply's verdict (``bad``; the page joins the ring)
RETURN_LATENCY = 3

PLANTS = {
    # the first version's bug (rtl/paging.py's docstring): a return that joins the ring
    # while takes are pending is not seen by them -- a fresh page is handed out in its place
    # (later twice) and the returned page is lost
    "joined-return-unseen": Plant(
        "moehub.rtl.paging", "Mux(ret_r & ~count_gt[n], ret_page_r, seq[n]) if i == 0",
        "seq[n] if i == 0", "PageSupply",
        ("handed out while in use", "in the pool", "avail is not", "twice in one cycle"),
        "the page a take gets ignores a return joined behind the pending takes"),
    # the return check forgets the return ahead of it: a page returned twice back to back is
    # accepted twice (read in use by both before the first clears its bit)
    "double-return-accepted": Plant(
        "moehub.rtl.page_pool", "good.eq(g_ret & held & ~again)", "good.eq(g_ret & held)",
        "PagePool", ("not in use accepted",), "a second return in flight is not compared with the first",
        method="_returns"),
    # the free count misses an accepted return: a page freed is never offered (lost)
    "free-count-misses-return": Plant(
        "moehub.rtl.paging", "nfree.eq(select([(pend[n], _plus(nfree, -n, good))",
        "nfree.eq(select([(pend[n], _plus(nfree, -n, 0))", "PageSupply",
        ("POOL_FREE",), "POOL_FREE does not count a returned page"),
    # the offer ignores the returns: avail runs dry while a returned page waits (lost)
    "avail-misses-return": Plant(
        "moehub.rtl.paging", "free_gt_next.eq(_gt_next(nfree, pend, good, 2 * L))",
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
        m.submodules.dut = dut = self.dut_cls(cfg)
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
        for i in range(K):
            p.check(dut.avail[i] == (free > i), f"avail is not exact: avail[{i}] != (free > {i})")
        last = Signal(range(K + 1), name="ref_ntake_last")
        m.d.sync += last.eq(ntake)
        p.check(dut.free == free + last, "POOL_FREE is not the pages free plus the last cycle's takes")
        self.ref_free = free

    def _covers(self, m, p, dut, take, got, verdict, state, K):
        P = self.cfg.pool_pages
        p.cover((self.ref_free == 0), "every page handed out")
        p.cover((got != 0) & (state == FREED), "the chosen page handed out again after its return")
        p.cover(verdict & dut.bad & (state == FREED), "a second return of the chosen page refused")
        p.cover(take[K], f"{K} takes in one cycle")
        joined = Signal(name="ref_joined_under_take")
        m.d.sync += joined.eq(verdict & ~dut.bad & ~take[0])
        p.cover(joined & (got != 0) & (state == FREED),
                "the chosen page, joining the ring under a take, handed out again")
