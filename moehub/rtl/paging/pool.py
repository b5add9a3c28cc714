"""The page pool of protocol v2's paged mode: which pages are free.

In paged mode the receive memory is a pool of ``pool_pages`` pages, one tile of rows each;
an expert (or, multicast, the one arena) takes a page when its rows reach a new tile, and
software hands pages back between layers through the ``PAGE_FREE`` register. The pool
hands out pages returned earlier first, oldest first, then pages never handed out, in
order (:meth:`moehub.spec.model.HubModel._take_page`).

Design: the returned pages wait in a first-word-fall-through FIFO (a memory of
``pool_pages`` entries, so it never fills: a page is in it at most once); pages never
handed out are the range ``fresh .. pool_pages - 1`` (a counter). The page the next take
gets is a choice between two registers (the FIFO's output register, ``fresh``), so a take
costs the allocator one AND-OR, not a search. One take per cycle: a stream needs a page
once per tile of rows (at least ``min_tile_rows`` rows of two chunks or more), so even the
start of a layer, when every expert takes its first page, costs at most ``experts``
cycles of one lane's openers waiting.

A return is checked against ``in_use`` (a bit per page) in three register stages (the
page, then its 64-bit group of ``in_use``, then its bit): a page not handed out --
returned twice, never taken, or out of range -- is refused and pulses ``bad`` (PAGE_BAD)
three cycles after the write; a good one is cleared and queued then, and can be taken a
few cycles later. (Software returns pages between layers.)
"""
from amaranth import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig


class PagePool(wiring.Component):
    """Free pages: returned ones (a FIFO) first, then never handed out (a counter).

    Parameters
    ----------
    cfg : HubConfig
        ``pool_pages`` > 0 (paged mode).

    Attributes
    ----------
    avail : Out(1)
        A page can be taken this cycle.
    page : Out(page_bits)
        The page a take gets.
    take : In(1)
        Take ``page`` (only when ``avail``).
    ret : In(1), ret_page : In(16)
        Software hands ``ret_page`` back (a write of PAGE_FREE).
    bad : Out(1)
        The return written three cycles before named a page not handed out: ignored.
    free : Out(range(pool_pages + 1))
        Pages free: returned and waiting, plus never handed out (POOL_FREE).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.paged:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise ValueError(f"hub[{cfg.name}]: a page pool needs pool_pages > 0")
        self.cfg = cfg
        P = cfg.pool_pages
        super().__init__({
            "avail": Out(1), "page": Out(cfg.page_bits), "take": In(1),
            "ret": In(1), "ret_page": In(16), "bad": Out(1), "free": Out(range(P + 1), init=P),
        })

    def elaborate(self, platform):
        m = Module()
        P, pb = self.cfg.pool_pages, self.cfg.page_bits
        m.submodules.returned = fifo = SyncFIFOBuffered(width=pb, depth=P)
        fresh = Signal(range(P + 1), name="fresh")            # pages 0 .. fresh-1 handed out once
        fresh_left = Signal(init=1, name="fresh_left")         # fresh < P, as a register
        in_use = Signal(P, name="in_use")
        # ---- take: the FIFO's head if a page waits there, else the next fresh page
        from_fifo = fifo.r_rdy
        m.d.comb += [self.avail.eq(from_fifo | fresh_left),
                     self.page.eq(Mux(from_fifo, fifo.r_data, fresh[:pb] if P > 1 else 0)),
                     fifo.r_en.eq(self.take & from_fifo)]
        take_fresh = self.take & ~from_fifo
        with m.If(take_fresh):
            m.d.sync += [fresh.eq(fresh + 1), fresh_left.eq(fresh + 1 < P)]
        good, good_page = self._returns(m, in_use)
        m.d.comb += [fifo.w_en.eq(good), fifo.w_data.eq(good_page)]
        # ---- in_use: set by a take, cleared by a good return (never the same page: a page
        # taken is not in use, a page returned is)
        taken_bit = Signal(P, name="taken_bit")
        cleared_bit = Signal(P, name="cleared_bit")
        m.d.comb += [taken_bit.eq(Mux(self.take, 1 << self.page, 0)),
                     cleared_bit.eq(Mux(good, 1 << good_page, 0))]
        m.d.sync += in_use.eq((in_use | taken_bit) & ~cleared_bit)
        # ---- pages free (POOL_FREE): waiting in the FIFO plus never handed out (a register)
        m.d.sync += self.free.eq(fifo.level + (P - fresh))
        return m

    def _returns(self, m, in_use):
        """A return in four stages: registered (I); the 64-bit group of ``in_use`` holding
        its bit read (G); its bit read and the verdict (C); the page queued and cleared if it
        was in use (W). Returns (good, page) of W."""
        P, pb = self.cfg.pool_pages, self.cfg.page_bits
        gw = min(P, 64)                                   # (bits per group)
        lo = (gw - 1).bit_length()
        i_ret, i_page = Signal(name="ret_i"), Signal(16, name="ret_page_i")
        m.d.sync += [i_ret.eq(self.ret), i_page.eq(self.ret_page)]
        g_ret, g_page = Signal(name="ret_g"), Signal(16, name="ret_page_g")
        g_bits = Signal(gw, name="in_use_group")
        groups = [in_use[k:k + gw] for k in range(0, P, gw)]
        m.d.sync += [g_ret.eq(i_ret), g_page.eq(i_page),
                     g_bits.eq(groups[0] if len(groups) == 1 else
                               Array(groups)[i_page[lo:pb]] if pb > lo else groups[0])]
        in_range = Signal(name="ret_in_range")
        m.d.sync += in_range.eq(i_page < P)
        held = Signal(name="held")
        m.d.comb += held.eq(in_range & (g_bits.bit_select(g_page[:lo], 1) if lo else g_bits[0]))
        # (W) the verdict registered: the page queued and cleared from here. A return in G
        # read in_use before the clears of the two good returns ahead of it (in C and W),
        # so C refuses a page equal to either.
        w_good, w_page = Signal(name="ret_good_w"), Signal(pb, name="ret_page_w")
        x_good, x_page = Signal(name="ret_good_x"), Signal(pb, name="ret_page_x")
        again = (w_good & (w_page == g_page[:pb])) | (x_good & (x_page == g_page[:pb]))
        good = Signal(name="ret_good")
        m.d.comb += good.eq(g_ret & held & ~again)
        bad = Signal(name="bad_r")
        m.d.sync += [bad.eq(g_ret & ~good), w_good.eq(good), w_page.eq(g_page[:pb]),
                     x_good.eq(w_good), x_page.eq(w_page)]
        m.d.comb += self.bad.eq(bad)
        return w_good, w_page
