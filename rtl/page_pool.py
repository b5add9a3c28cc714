"""The page pool of protocol v2's paged mode (issue 14): which pages are free.

In paged mode the receive memory is a pool of ``pool_pages`` pages, one tile of rows each;
an expert (or, multicast, the one arena) takes a page when its rows reach a new tile, and
software hands pages back between layers through the ``PAGE_FREE`` register. The pool
hands out pages returned earlier first, oldest first, then pages never handed out, in
order (:meth:`moehub.verif.model.HubModel._take_page`).

Design: the returned pages wait in a first-word-fall-through FIFO (a memory of
``pool_pages`` entries, so it never fills: a page is in it at most once); pages never
handed out are the range ``fresh .. pool_pages - 1`` (a counter). The page the next take
gets is a choice between two registers (the FIFO's output register, ``fresh``), so a take
costs the allocator one AND-OR, not a search. One take per cycle: a stream needs a page
once per tile of rows (at least ``min_tile_rows`` rows of two chunks or more), so even the
start of a layer, when every expert takes its first page, costs at most ``experts``
cycles of one lane's openers waiting.

A return is checked against ``in_use`` (a bit per page) in the cycle after its write,
from registers: a page not handed out -- returned twice, never taken, or out of range --
is refused and pulses ``bad`` (PAGE_BAD); a good one is cleared and queued, and can be
taken from the third cycle after its write on. (Software returns pages between layers.)
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig


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
        The return written the cycle before named a page not handed out: ignored.
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
            "ret": In(1), "ret_page": In(16), "bad": Out(1), "free": Out(range(P + 1)),
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
        # ---- return: registered, checked against in_use the next cycle
        ret_q = Signal(name="ret_q")
        ret_page_q = Signal(16, name="ret_page_q")
        m.d.sync += [ret_q.eq(self.ret), ret_page_q.eq(self.ret_page)]
        in_range = ret_page_q < P
        held = Signal(name="held")
        m.d.comb += held.eq(in_range & in_use.bit_select(ret_page_q[:pb] if P > 1 else 0, 1))
        good = ret_q & held
        m.d.comb += [self.bad.eq(ret_q & ~held), fifo.w_en.eq(good), fifo.w_data.eq(ret_page_q[:pb])]
        # ---- in_use: set by a take, cleared by a good return (never the same page: a page
        # taken is not in use, a page returned is)
        taken_bit = Signal(P, name="taken_bit")
        cleared_bit = Signal(P, name="cleared_bit")
        m.d.comb += [taken_bit.eq(Mux(self.take, 1 << self.page, 0)),
                     cleared_bit.eq(Mux(good, 1 << ret_page_q[:pb], 0))]
        m.d.sync += in_use.eq((in_use | taken_bit) & ~cleared_bit)
        # ---- pages free (POOL_FREE): waiting in the FIFO plus never handed out
        m.d.comb += self.free.eq(fifo.level + (P - fresh))
        return m
