"""Property harness of protocol v2's page pool (:class:`moehub.rtl.paging.pool.PagePool`).

Environment: the allocator takes a page only when one is offered (``take -> avail``);
software may write any page number to ``PAGE_FREE`` in any cycle (good, repeated, never
handed out, out of range, back to back).

Reference state: one chosen page ``cp`` (``AnyConst``): never handed out, in use, or
returned and queued; its returns in flight, three cycles long (the pool's verdict comes
then, on ``bad``); and the number of pages free.

Properties: the chosen page is handed out only when it is free (never twice while in
use); a return of it is accepted only while it is in use (a repeated return, even back to
back with the first, and a return of a page never handed out are refused); a page in use
that is returned is accepted; the pool offers a page only when one is free, and
``POOL_FREE`` (a cycle late) counts them. Since the page is any page, this holds for all.
"""
from __future__ import annotations

from amaranth import Elaboratable, Module, Signal

from ...rtl.paging.pool import PagePool
from .common import Props, any_const, any_seq, reset_first

FRESH, IN_USE, QUEUED = 0, 1, 2
#: cycles from a PAGE_FREE write to the pool's verdict (``bad``, and the page queued)
RETURN_LATENCY = 3


class PagePoolHarness(Elaboratable):
    """A :class:`PagePool` of ``cfg`` under its environment."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        P = self.cfg.pool_pages
        p = Props(m)
        self.messages = p.messages
        m.submodules.dut = pool = PagePool(self.cfg)
        reset_first(m)
        take = any_seq(m, 1, "take")
        ret = any_seq(m, 1, "ret")
        ret_page = any_seq(m, 16, "ret_page")
        p.assume(~take | pool.avail)
        m.d.comb += [pool.take.eq(take), pool.ret.eq(ret), pool.ret_page.eq(ret_page)]
        cp = any_const(m, range(P), "chosen_page")
        state = Signal(2, name="ref_state")
        # (returns of the chosen page in flight, index k = written k + 1 cycles ago, with
        # the page's state when the pool read its in_use bit, a cycle after the write)
        flight = [Signal(name=f"ref_ret_cp{k}") for k in range(RETURN_LATENCY)]
        held = [Signal(name=f"ref_held{k}") for k in range(RETURN_LATENCY)]
        m.d.sync += [flight[0].eq(ret & (ret_page == cp)), held[1].eq(state == IN_USE)]
        m.d.sync += [flight[k].eq(flight[k - 1]) for k in range(1, RETURN_LATENCY)]
        m.d.sync += [held[k].eq(held[k - 1]) for k in range(2, RETURN_LATENCY)]
        verdict = flight[-1]                      # the pool decides this return now:
        accept = held[-1] & (state == IN_USE)     # in use when read, not returned since
        taken = take & (pool.page == cp)
        p.check(~taken | (state != IN_USE), "a page in use handed out again")
        p.check(~(verdict & ~pool.bad) | accept, "a return of a page not in use accepted")
        p.check(~(verdict & pool.bad) | ~accept, "a return of a page in use refused")
        with m.If(taken):
            m.d.sync += state.eq(IN_USE)
        with m.Elif(verdict & ~pool.bad):
            m.d.sync += state.eq(QUEUED)
        self._free(m, p, pool, take, P)
        p.cover(verdict & ~pool.bad, "the chosen page returned")
        p.cover(taken & (state == QUEUED), "the chosen page handed out again after its return")
        p.cover(verdict & pool.bad & (state == QUEUED), "a second return of the chosen page refused")
        return m

    def _free(self, m, p, pool, take, P):
        """Pages free (reference): every page at first, one fewer per take, one more per
        accepted return (any page: ``bad`` low in a cycle whose return verdict is due)."""
        due = [Signal(name=f"ref_ret{k}") for k in range(RETURN_LATENCY)]
        m.d.sync += due[0].eq(pool.ret)
        m.d.sync += [due[k].eq(due[k - 1]) for k in range(1, RETURN_LATENCY)]
        free = Signal(range(P + 1), init=P, name="ref_free")
        nxt = free - take + (due[-1] & ~pool.bad)
        m.d.sync += free.eq(nxt)
        p.check(~pool.avail | (free != 0), "a page offered while none is free")
        last = Signal(range(P + 1), init=P, name="ref_free_last")
        m.d.sync += last.eq(free)
        p.check(pool.free == last, "POOL_FREE is not the pages free a cycle before")
