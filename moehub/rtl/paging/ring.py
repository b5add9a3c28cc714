"""The ring of returned pages of the page supply (protocol v2, paged regions).

:class:`~moehub.rtl.paging.regions.PageSupply` hands out returned pages first, oldest first, up to
``lanes`` a cycle; they wait in a ring (a page is in it at most once, so it holds at most
``pool_pages``). The supply reads the ring's first ``2 x lanes`` entries every cycle (its
takes see the pages past the takes still pending) and tells the ring how many it took.
Two implementations of one interface, chosen by the pool's size (:func:`page_ring`):

* :class:`RegisterRing` -- ``pool_pages`` registers, head and tail as one-hots: the n-th
  entry is an AND-OR of the entries with the head rotated by n (wiring: no index adder,
  wrap-around or decoder). Its read ports are ``pool_pages``-way AND-ORs, ``2 x lanes``
  of them, so its cost grows as pool x lanes: right for small pools.
* :class:`BankedRing` -- ``B`` memories (``B`` = the power of two >= ``3 x lanes``; see below), ring
  position q in bank ``q mod B`` at row ``q / B``, so the first ``2 x lanes`` entries are
  one read per bank. The reads are synchronous: issued a cycle ahead with the next head
  (from registers and the pending takes, off the takes' path), transparent for the
  cycle's write (a return landing in the window). A bank of ``pool / B`` words at or above
  the synthesis threshold maps to an SRAM macro; read ports stay ``2 x lanes`` B-way
  selects. The banks' outputs go through a register before any logic uses them: the
  takes' selects behind them (the window's rotation, the pending takes' shift, the lanes'
  needs, the experts' current pages; multicast, the arena's place select into the packet
  manager's row) do not fit in the cycle after an SRAM read, which takes 15 of the
  22.2 FO4 (``moehub.synth.sram``): SRAM -> an expert's ``cur_page`` was 23.2 FO4 at
  deepseek-v3 on two nodes, paged, 4 takes a cycle; SRAM -> the arena's place -> the
  packet manager's row was 15 + 17.4 FO4 at deepseek-v3-8gpu with all three v2 features
  on ASAP7, one take a cycle. The registers hold the reads issued for the head a cycle
  earlier, which the head has since moved past by at most ``lanes``, so they cover
  ``3 x lanes`` positions (hence ``B``), and a return written in the cycle between the
  read and the register is bypassed into it; the window is then a ``B``-way select of
  registers by the head's low bits (a one-hot register).

Head update, both (``n`` pages taken by the pending takes, ``ret_r``: a return joined the
ring a cycle ago, after those takes saw it): while the ring they saw lasts (``count -
ret_r >= n``, from the supply's registered compares ``count_gt``) the head moves on by n, else to where that ring ended (the tail, less the
return).
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ..layouts import page_takes
from ..logic import select

#: pools of at least this many pages keep their ring in banks (memories)
BANKED_MIN_PAGES = 32


def page_ring(cfg: HubConfig):
    """The ring for ``cfg``'s pool (see the module docstring)."""
    return BankedRing(cfg) if cfg.pool_pages >= BANKED_MIN_PAGES else RegisterRing(cfg)


def _rotate(onehot, n: int):
    """A one-hot ring position moved on by ``n`` (mod its width): wiring only."""
    w = len(onehot)
    n %= w
    return Cat(onehot[w - n:], onehot[:w - n]) if n else onehot


class PageRing(wiring.Component):
    """The interface of both rings.

    Attributes
    ----------
    entry : Out(page_bits).array(min(2 x lanes, pool_pages))
        The ring's n-th entry from its head (meaningful for n < ``count``), from registers.
    pend : In(lanes + 1)
        The pages the pending takes took, one-hot (the supply's register).
    count_gt : In(2 x lanes)
        Bit x: more than x returned pages wait (the joined return included); the supply's
        register, kept beside its count, so the ring compares no pool-sized counter.
    ret_r : In(1)
        A return joined the ring in the cycle before (the pending takes did not see it).
    good, good_page : In
        A return joins the ring at its tail at the end of this cycle.
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        L, P, pb = page_takes(cfg), cfg.pool_pages, cfg.page_bits
        super().__init__({
            "entry": Out(pb).array(min(2 * L, P)), "pend": In(L + 1), "count_gt": In(2 * L),
            "ret_r": In(1), "good": In(1), "good_page": In(pb),
        })

    def _lasts(self, n):
        """The ring the pending takes saw holds at least ``n`` pages."""
        return Mux(self.ret_r, self.count_gt[n], self.count_gt[n - 1])

    def _next_head(self, head, moved, ended):
        """The head after the pending takes: ``moved(n)`` while the ring lasts, else
        ``ended``; selected by ``pend``."""
        L = page_takes(self.cfg)
        return select([(self.pend[0], head)] + [(self.pend[n], Mux(self._lasts(n), moved(n), ended))
                                                 for n in range(1, L + 1)], len(head))


class RegisterRing(PageRing):
    """``pool_pages`` registers, one-hot head and tail (see the module docstring)."""

    def elaborate(self, platform):
        m = Module()
        P, pb = self.cfg.pool_pages, self.cfg.page_bits
        ring = [Signal(pb, name=f"ring{p}") for p in range(P)]
        head = Signal(P, name="head_oh", init=1)
        tail = Signal(P, name="tail_oh", init=1)
        for n in range(len(self.entry)):
            m.d.comb += self.entry[n].eq(select([(head[p], ring[(p + n) % P]) for p in range(P)], pb))
        ended = Mux(self.ret_r, _rotate(tail, -1), tail)
        m.d.sync += head.eq(self._next_head(head, lambda n: _rotate(head, n), ended))
        with m.If(self.good):
            m.d.sync += tail.eq(_rotate(tail, 1))
        for p in range(P):
            with m.If(self.good & tail[p]):
                m.d.sync += ring[p].eq(self.good_page)
        return m


class BankedRing(PageRing):
    """The ring in ``B`` memories, read a cycle ahead, their outputs registered (see the
    module docstring)."""

    def banks(self) -> int:
        return 1 << (3 * page_takes(self.cfg) - 1).bit_length()

    def elaborate(self, platform):
        m = Module()
        L, P, pb, B = page_takes(self.cfg), self.cfg.pool_pages, self.cfg.page_bits, self.banks()
        lb = B.bit_length() - 1
        rows = -(-P // B)
        qb = lb + max(1, (rows - 1).bit_length())          # ring position bits
        cap = B << (qb - lb)                               # positions: a power of two >= P
        assert cap >= P
        head, tail = Signal(qb, name="ring_head"), Signal(qb, name="ring_tail")
        head_lo = Signal(B, name="ring_head_lo_oh", init=1)   # head mod B, one-hot
        tail_lo = Signal(B, name="ring_tail_lo_oh", init=1)   # tail mod B, one-hot
        nxt = Signal(qb, name="ring_head_next")
        m.d.comb += nxt.eq(self._next_head(head, lambda n: head + n, tail - self.ret_r))
        # (the low one-hot's next value chosen among one-hots from registers -- the head
        # moved by n, the tail less the return -- not decoded from the next head: its add
        # and decode were in front of the row selects, 22.5 FO4 from the joined return at
        # deepseek-v3 on two nodes, 16 banks)
        L = page_takes(self.cfg)
        ended = Cat(self.pend[n] & ~self._lasts(n) for n in range(1, L + 1)).any()
        head_cands = ([(self.pend[0], head_lo)]
                      + [(self.pend[n] & self._lasts(n), _rotate(head_lo, n)) for n in range(1, L + 1)]
                      + [(ended, Mux(self.ret_r, _rotate(tail_lo, -1), tail_lo))])
        m.d.sync += [head.eq(nxt), head_lo.eq(select(head_cands, B))]
        tail_lo_next = Mux(self.good, _rotate(tail_lo, 1), tail_lo)
        tail_cands = [(self.good, _rotate(tail_lo, 1)), (~self.good, tail_lo)]
        with m.If(self.good):
            m.d.sync += tail.eq(tail + 1)
        m.d.sync += tail_lo.eq(tail_lo_next)
        plus, tplus = self._row_sums(m, head, head_lo, tail, tail_lo, lb)
        hsel = {n: self._row_selects(m, head_cands, n, f"ring_head_row_sel_n{n}") for n in range(L + 1)}
        tsel = {n: self._row_selects(m, tail_cands, n, f"ring_tail_row_sel_n{n + 1}") for n in (-1, 0)}
        rows_next = self._read_rows(m, (hsel, plus), (tsel, tplus))
        out = []
        for b in range(B):
            m.submodules[f"bank{b}"] = mem = Memory(shape=pb, depth=cap >> lb, init=[])
            wp = mem.write_port()
            rp = mem.read_port(transparent_for=(wp,))
            m.d.comb += [wp.addr.eq(tail[lb:]), wp.data.eq(self.good_page),
                         wp.en.eq(self.good & (tail[:lb] == b)), rp.addr.eq(rows_next[b])]
            out.append(self._registered_read(m, b, rp, wp, rows_next[b]))
        for n in range(len(self.entry)):
            m.d.comb += self.entry[n].eq(select([(head_lo[k], out[(k + n) % B]) for k in range(B)], pb))
        return m

    def _registered_read(self, m, b, rp, wp, row_next):
        """Bank ``b``'s output through a register: the read of a cycle ago (its row
        ``row_next`` then, for the head of now), with this cycle's write to that row
        bypassed in -- the read port is transparent only for the write of its own cycle,
        and a return that joins now is seen by the next cycle's takes. Its positions are
        the B from the head a cycle ago: the window, ``2 x lanes`` from the head the
        pending takes leave, lies in them (the head moves by at most ``lanes`` a cycle,
        to the tail at most when the ring ends), one per bank, so the window's rotation
        stays the head's low one-hot."""
        row_r = Signal(len(row_next), name=f"ring_read_row_r{b}")
        m.d.sync += row_r.eq(row_next)
        hit = Signal(name=f"ring_write_hit{b}")
        m.d.comb += hit.eq(wp.en & (wp.addr == row_r))
        data = Signal(len(rp.data), name=f"ring_bank_data{b}")
        m.d.sync += data.eq(Mux(hit, wp.data, rp.data))
        return data

    def _row_sums(self, m, head, head_lo, tail, tail_lo, lb):
        """The head's high bits plus 0, 1, 2 and the tail's plus -1, 0, 1, for the read
        rows: ``+ 0`` the registers themselves, the others registers of their own
        (``ring_head_hi_p1``, ...), each next value chosen among sums of the current
        registers -- a candidate head ``head + n`` has high bits ``hi + carry`` (the carry
        a decode of the low one-hot), the tail less a return ``th - borrow`` -- so no adder
        stands behind the pending takes' choice. (With the adds behind the head, ring_head
        -> the add -> the selects -> a bank's read row was 23.3 FO4 at deepseek-v3-8gpu
        paged; with these registers formed from the head's next value, the add behind the
        choice, 24.9.) Returns ({d: head hi + d}, {d: tail hi + d})."""
        L, B = page_takes(self.cfg), self.banks()
        hi, th = head[lb:], tail[lb:]
        rb = len(hi)
        reg = lambda name, d: Signal(rb, name=name, init=d % (1 << rb))
        plus = {0: hi, 1: reg("ring_head_hi_p1", 1), 2: reg("ring_head_hi_p2", 2)}
        tplus = {-1: reg("ring_tail_hi_m1", -1), 0: th, 1: reg("ring_tail_hi_p1", 1)}
        hsum = {**plus, 3: (plus[2] + 1)[:rb]}          # hi + k, k = 0..3, from registers
        tsum = {**tplus, 2: (tplus[1] + 1)[:rb]}        # th + k, k = -1..2
        borrow = self.ret_r & tail_lo[0]                 # tail - ret_r crosses a row
        for d in (1, 2):
            moved = [(self.pend[n] & self._lasts(n),
                      Mux(head_lo[B - n:].any(), hsum[d + 1], hsum[d])) for n in range(1, L + 1)]
            ended = Cat(self.pend[n] & ~self._lasts(n) for n in range(1, L + 1)).any()
            m.d.sync += plus[d].eq(select([(self.pend[0], plus[d])] + moved
                                          + [(ended, Mux(borrow, tsum[d - 1], tsum[d]))], rb))
        wrap = self.good & tail_lo[B - 1]               # tail + 1 crosses a row
        for d in (-1, 1):
            m.d.sync += tplus[d].eq(Mux(wrap, tsum[d + 1], tsum[d]))
        return plus, tplus

    def _row_selects(self, m, cands, n, name):
        """Per bank b, which of the high-bit sums holds the window's entry in bank b for
        the position ``(hi, lo) + n``: ``d = (lo + n) / B + (b < (lo + n) mod B)`` (the
        sum ``hi + d``), as a one-hot over ``d`` -- registers formed from the low one-hot's
        next value, so a bank's read row is a choice among registers by registers. (With the
        low one-hot itself choosing, each of its bits loaded ``B x (lanes + 1)`` row selects
        of every bit: ring_head_lo_oh -> four buffers -> a bank's read row was 22.5 FO4 at
        deepseek-v3-8gpu paged; 23.3 at two nodes.) ``cands``: the low one-hot's
        next value as (select, one-hot) pairs, one selected: each register is an OR of
        the selects by ORs of the one-hots' bits, those from registers. Returns ``[{d: bit}] * B``."""
        B = self.banks()
        out = []
        for b in range(B):
            ds = {}
            for v in range(B):
                ds.setdefault((v + n) // B + (b < (v + n) % B), []).append(v)
            sel = {}
            for d, vs in ds.items():
                # (reset: the one-hot at 0, so the sum of v = 0)
                r = Signal(name=f"{name}_b{b}_d{d}".replace("-", "m"), init=int(0 in vs))
                m.d.sync += r.eq(Cat(c & Cat(oh[v] for v in vs).any() for c, oh in cands).any())
                sel[d] = r
            out.append(sel)
        return out

    def _read_rows(self, m, head, tail):
        """Each bank's read row for the next head: the window's entry in bank b is at row
        ``h / B``, or the next one past the head's bank (``b < h mod B``). Every candidate
        head (``head + n``, the tail, the tail less one) gives its rows from registers --
        the head's and tail's high bits plus 0, 1 or 2 (:meth:`_row_sums`), chosen by
        their low bits (one-hot registers) and constants -- and the pending takes and the
        count's compares only select among them: no adder behind the compares. ``head``,
        ``tail``: ({n: the row selects of :meth:`_row_selects` for offset n}, {d: high bits
        + d})."""
        L, B = page_takes(self.cfg), self.banks()
        (hsel, plus), (tsel, tplus) = head, tail
        rb = len(plus[0])

        def rows(sel, base):
            """A bank's row: the high-bit sum its registered one-hot names."""
            return select([(bit, base[d]) for d, bit in sel.items()], rb)
        cand = {n: [rows(hsel[n][b], plus) for b in range(B)] for n in range(L + 1)}
        ended = [Mux(self.ret_r, rows(tsel[-1][b], tplus), rows(tsel[0][b], tplus)) for b in range(B)]
        out = [Signal(rb, name=f"ring_read_row{b}") for b in range(B)]
        for b in range(B):
            m.d.comb += out[b].eq(select(
                [(self.pend[0], cand[0][b])]
                + [(self.pend[n] & self._lasts(n), cand[n][b]) for n in range(1, L + 1)]
                + [(self.pend[n] & ~self._lasts(n), ended[b]) for n in range(1, L + 1)], rb))
        return out
