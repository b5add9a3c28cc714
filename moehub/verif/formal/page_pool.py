"""Property harness of protocol v2's page pool (:class:`moehub.rtl.paging.pool.PagePool`).

Environment: the allocator takes a page only when one is offered (``take -> avail``);
software may write any page number to ``PAGE_FREE`` in any cycle (good, repeated, never
handed out, out of range, back to back).

Reference state: the pages free (``P`` at reset, one fewer per take, one more per accepted
return at its verdict), one chosen page ``cp`` (``AnyConst``): never handed out, in use,
or returned and queued; its returns in flight -- three cycles from the write to the
pool's verdict on ``bad`` -- with whether it was in use when the pool read its ``in_use``
bit (a cycle after the write: a take in the write's cycle counts) and no return of it
accepted since.

Properties -- since ``cp`` is any page, each holds for every page:

* **at most once until returned**: a page handed out is in the pool (``< pool_pages``),
  and the chosen page is never handed out while in use;
* **a returned-twice page refused**: a return is accepted (no ``bad`` at its verdict)
  exactly when the page was in use when read and no return of it was accepted since -- a
  second return (even back to back with the first), a page never handed out or out of
  range is refused, a page in use is accepted;
* **none lost**: the pool offers a page (``avail``) exactly when one is free, less a page
  whose return was accepted in the last cycle (it passes the FIFO's output register first);
  ``POOL_FREE`` (a cycle late) counts the pages free.

Unbounded: k-induction closes at k = 3 (not at 1 or 2) with these strengthening invariants
on the pool's registers and its FIFO's (:func:`.common.elaborate_into` reaches the
``returned`` FIFO, :func:`.common.memory_words` its memory's words -- ``memory_map`` in
:data:`SCRIPT` makes each a flip-flop):

* the FIFO (a :class:`~amaranth.lib.fifo.SyncFIFOBuffered` of ``P`` entries: a memory of
  ``D = P - 1`` words and an output register): ``produce``, ``consume < D``, ``inner_level
  <= D``, ``produce = consume + inner_level (mod D)``; the output register empty only with
  an empty memory part or one entry written in the last cycle (``ret_good_x``: it moves to
  the output register now); ``level = inner_level + r_rdy``. Its live entries are the output
  register (if ``r_rdy``), then the ``inner_level`` words from ``consume``;
* the pages: every live entry in the pool, and every page exactly one of in use
  (``in_use``), in the FIFO (once), never handed out (``>= fresh``) -- the partition that
  makes "each page in the FIFO at most once" and "FIFO + pages out = all pages"; ``fresh
  <= P``, ``fresh_left == fresh < P``; the pages free (reference) are ``level + P - fresh``;
* the return check's stages (shared with the page supply, which inherits it:
  :func:`.page_supply._return_invariants`): the stages' valids are the returns in flight,
  the chosen page's returns in flight are the stages', ``held`` is the ``in_use`` bit read
  less the returns accepted since; and, for every page, a good return in W is of a page in
  use (in the pool), and the ``in_use`` bits read in G are still set unless the return in
  the stage after W cleared them -- which keeps the partition through a verdict;
* the chosen page: in use (reference) exactly when its ``in_use`` bit is set, queued
  exactly when it is in the FIFO.

Planted bugs (:data:`PLANTS`, the harness's ``plant`` option) that must make the proof fail.
"""
from __future__ import annotations

from amaranth import Cat, Elaboratable, Module, Signal

from ...rtl.paging.pool import PagePool
from .common import Props, any_const, any_seq, count_ones, elaborate_into, memory_words, reset_first
from .page_supply import Regs, _return_invariants
from .plant import Plant, planted

FRESH, IN_USE, QUEUED = 0, 1, 2
#: cycles from a PAGE_FREE write to the pool's verdict (``bad``, and the page queued)
RETURN_LATENCY = 3
#: the set's Yosys script before the words' connections: the FIFO's memory as flip-flops
SCRIPT = ("memory_map", "opt_clean")

PLANTS = {
    # the return check forgets the return ahead of it: a page returned twice back to back
    # is accepted twice (read in use by both before the first clears its bit), queued twice
    "double-return-accepted": Plant(
        "moehub.rtl.paging.pool", "good.eq(g_ret & held & ~again)", "good.eq(g_ret & held)",
        "PagePool", ("not in use accepted",), "a second return in flight is not compared with the first"),
    # a take of a returned page leaves it in the FIFO: handed out again while in use
    "take-keeps-fifo-head": Plant(
        "moehub.rtl.paging.pool", "fifo.r_en.eq(self.take & from_fifo)", "fifo.r_en.eq(0)",
        "PagePool", ("in use handed out again",), "a page taken from the FIFO stays at its head"),
    # the last page never handed out is never offered: lost
    "last-fresh-page-lost": Plant(
        "moehub.rtl.paging.pool", "fresh_left.eq(fresh + 1 < P)", "fresh_left.eq(fresh + 2 < P)",
        "PagePool", ("none lost",), "the pool stops offering fresh pages one early"),
    # POOL_FREE misses the returned pages waiting in the FIFO
    "free-misses-fifo": Plant(
        "moehub.rtl.paging.pool", "self.free.eq(fifo.level + (P - fresh))", "self.free.eq(P - fresh)",
        "PagePool", ("POOL_FREE",), "POOL_FREE does not count the returned pages"),
}


class PagePoolHarness(Elaboratable):
    """A :class:`PagePool` of ``cfg`` under its environment; ``invariants``: add the
    strengthening invariants (k-induction); ``plant``: a bug of :data:`PLANTS` planted."""

    def __init__(self, cfg, invariants: bool = True, plant: str | None = None):
        self.cfg, self.invariants = cfg, invariants
        try:
            if cfg.pool_pages < 2 or cfg.pool_pages > 64:
                raise ValueError(f"pool_pages = {cfg.pool_pages}: the page pool harness needs 2 to 64 "
                                 "pages (a FIFO with a memory part; one in_use group)")
            self.dut_cls = planted(PagePool, PLANTS, plant)
        except ValueError:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise
        self.messages = {}
        self.script = SCRIPT

    def elaborate(self, platform):
        m = Module()
        P = self.cfg.pool_pages
        p = Props(m)
        self.messages = p.messages
        pool = self.dut_cls(self.cfg)
        self.regs = elaborate_into(m, "dut", pool, platform, into=("returned",))
        reset_first(m)
        take = any_seq(m, 1, "take")
        ret = any_seq(m, 1, "ret")
        ret_page = any_seq(m, 16, "ret_page")
        p.assume(~take | pool.avail)
        m.d.comb += [pool.take.eq(take), pool.ret.eq(ret), pool.ret_page.eq(ret_page)]
        cp = any_const(m, range(P), "chosen_page")
        p.assume(cp < P)
        state = Signal(2, name="ref_state")
        taken = take & (pool.page == cp)
        p.check(~take | (pool.page < P), "a page handed out is not in the pool")
        p.check(~taken | (state != IN_USE), "a page in use handed out again")
        verdict, accept, returns = self._returns(m, p, pool, ret, ret_page, cp, state, taken)
        with m.If(taken):
            m.d.sync += state.eq(IN_USE)
        with m.Elif(verdict & accept):
            m.d.sync += state.eq(QUEUED)
        free, acc_last = self._free(m, p, pool, take, ret, returns)
        p.cover(verdict & ~pool.bad, "the chosen page returned")
        p.cover(taken & (state == QUEUED), "the chosen page handed out again after its return")
        p.cover(verdict & pool.bad & (state == QUEUED), "a second return of the chosen page refused")
        if self.invariants:
            self._invariants(m, p, Regs(self.regs), cp, state, free, returns)
        return m

    def _returns(self, m, p, pool, ret, ret_page, cp, state, taken):
        """The chosen page's returns in flight: (verdict due now, accepted by the spec, and
        ``(due, flight, held, freed)`` for the invariants)."""
        flight = [Signal(name=f"ref_ret_cp{k}") for k in range(RETURN_LATENCY)]
        held = [Signal(name=f"ref_held{k}") for k in range(RETURN_LATENCY)]
        verdict = flight[-1]
        accept = Signal(name="ref_accept")
        freed = verdict & accept
        # (held: in use as the pool reads it in I, a cycle after the write -- a take in the
        # write's cycle sets the bit by then, a return accepted in it clears it -- and no
        # return of it accepted since)
        in_use_next = taken | ((state == IN_USE) & ~freed)
        m.d.sync += [flight[0].eq(ret & (ret_page == cp)), held[0].eq(in_use_next)]
        m.d.sync += [flight[k].eq(flight[k - 1]) for k in range(1, RETURN_LATENCY)]
        m.d.sync += [held[k].eq(held[k - 1] & ~freed) for k in range(1, RETURN_LATENCY)]
        m.d.comb += accept.eq(held[-1])
        p.check(~(verdict & ~pool.bad) | accept, "a return of a page not in use accepted")
        p.check(~(verdict & pool.bad) | ~accept, "a return of a page in use refused")
        due = [Signal(name=f"ref_ret{k}") for k in range(RETURN_LATENCY)]
        m.d.sync += due[0].eq(ret)
        m.d.sync += [due[k].eq(due[k - 1]) for k in range(1, RETURN_LATENCY)]
        return verdict, accept, (due, flight, held, freed)

    def _free(self, m, p, pool, take, ret, returns):
        """Pages free (reference): every page at first, one fewer per take, one more per
        accepted return (any page: ``bad`` low in a cycle whose return verdict is due).
        ``avail`` against it (exact, less last cycle's accepted return) and ``POOL_FREE``."""
        P = self.cfg.pool_pages
        due = returns[0]
        free = Signal(range(P + 1), init=P, name="ref_free")
        acc = due[-1] & ~pool.bad
        m.d.sync += free.eq(free - take + acc)
        acc_last = Signal(name="ref_accepted_last")
        m.d.sync += acc_last.eq(acc)
        p.check(pool.avail == (free > acc_last),
                "none lost: avail is not 'a page free, less one accepted in the last cycle'")
        last = Signal(range(P + 1), init=P, name="ref_free_last")
        m.d.sync += last.eq(free)
        p.check(pool.free == last, "POOL_FREE is not the pages free a cycle before")
        return free, acc_last

    def _invariants(self, m, p, r, cp, state, free, returns):
        """The strengthening invariants of the module docstring."""
        P, pb = self.cfg.pool_pages, self.cfg.page_bits
        D = P - 1
        words, connect = memory_words(m, "dut.returned.storage", D, pb, "fifo_word")
        self.script = SCRIPT + connect
        prod, cons, inner = r["returned.produce"], r["returned.consume"], r["returned.inner_level"]
        r_rdy, r_data = r["returned.r_rdy"], r["returned.r_data"]
        fresh, in_use = r["fresh"], r["in_use"]
        # -- the FIFO's pointers and level
        p.check((prod < D) & (cons < D) & (inner <= D), "invariant: a FIFO pointer or level out of range")
        p.check(Cat((cons == c) & (inner == n) & (prod == (c + n) % D)
                    for c in range(D) for n in range(D + 1)).any(),
                "invariant: the FIFO's produce is not consume + inner_level")
        p.check(r_rdy | (inner == 0) | ((inner == 1) & r["ret_good_x"]),
                "invariant: the FIFO's output register empty behind a waiting entry")
        p.check(r["returned.level"] == inner + r_rdy, "invariant: the FIFO's level is not inner_level + r_rdy")

        # (by slot, not by age: a step moves the pointers, never a word, so the solver
        # need not match the entries of two steps through a rotation)
        held = [Cat((cons == c) & (inner > (s - c) % D) for c in range(D)).any() for s in range(D)]
        live = [(r_rdy, r_data)] + list(zip(held, words))
        p.check(Cat(~v | (page < P) for v, page in live).all(), "invariant: a page in the FIFO out of the pool")
        # -- every page exactly one of in use, in the FIFO (once), never handed out
        p.check((fresh <= P) & (r["fresh_left"] == (fresh < P)), "invariant: fresh > P or fresh_left not fresh < P")
        # (as P-bit masks, a bit per page: disjoint and covering every page -- bit logic
        # the solver decides faster than a count per page)
        unused = Signal(P, name="ref_never_handed_out")
        m.d.comb += unused.eq(Cat(fresh <= q for q in range(P)))
        masks = [in_use, unused]
        for i, (v, page) in enumerate(live):
            mask = Signal(P, name=f"ref_fifo_mask{i}")
            m.d.comb += mask.eq(Cat(v & (page == q) for q in range(P)))
            masks.append(mask)
        p.check(Cat((a & b) == 0 for i, a in enumerate(masks) for b in masks[i + 1:]).all(),
                "invariant: a page twice among in use, in the FIFO, never handed out")
        cover_all = masks[0]
        for mk in masks[1:]:
            cover_all = cover_all | mk
        p.check(cover_all == (1 << P) - 1,
                "invariant: a page none of in use, in the FIFO, never handed out (lost)")
        p.check(free == r["returned.level"] + P - fresh, "invariant: the pages free are not FIFO + never handed out")
        # -- the return stages, for every page
        w_good, w_page = r["ret_good_w"], r["ret_page_w"]
        p.check(~w_good | in_use.bit_select(w_page, 1), "invariant: a good return in W of a page not in use")
        x_bit = Signal(P, name="ref_x_bit")
        m.d.comb += x_bit.eq(Cat(r["ret_good_x"] & (r["ret_page_x"] == q) for q in range(P)))
        p.check(~r["ret_g"] | ((r["in_use_group"] & ~(in_use | x_bit)) == 0),
                "invariant: an in_use bit read in G cleared since, not by the return after W")
        _return_invariants(m, p, P, r, cp, *returns)
        # -- the chosen page
        p.check(state != 3, "invariant: the chosen page's state is not a state")
        p.check((state == IN_USE) == in_use.bit_select(cp, 1), "invariant: the chosen page in use is not in_use")
        p.check((state == FRESH) == (cp >= fresh), "invariant: the chosen page never handed out is not >= fresh")
