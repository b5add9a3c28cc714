"""Property harness of the address allocator (:class:`moehub.rtl.allocator.AddressAllocator`).

Environment (what the packet manager and the CSR bank guarantee in the hub): a request
names a one-hot expert, and a lane without one names none (the packet manager registers the
expert one-hot gated by the request; with count packets the allocator gates it itself, so
the assumption only narrows the environment there); ``clear`` (layer start) comes with no request (START waits for an
empty pipeline); capacities are at most ``max_rows_per_expert`` (the CSR bank clamps) and
may change at any time (they take effect at the next ``clear``).

Reference state, for one chosen expert ``ce`` (``AnyConst``: the proof holds for every
expert): the rows granted since the last clear (``cnt``) and the capacity latched then
(``cap_s``); and a "seen" bit for one chosen row ``cr``.

Properties (for ``ce``; lane ``j``'s *ahead* = the lanes ``i < j`` asking for ``ce``):

* a grant goes only to a request, and is exactly "``cnt + ahead < cap_s``": never beyond
  the latched capacity, never refused while there is room;
* the granted row is ``cnt + ahead``: dense from 0, consecutive across the lanes of one
  cycle (several grants per cycle to one expert), in lane order;
* the chosen row is granted at most once per layer (unique);
* the counters are exact: ``rows[ce] == cnt``, and (formal ports) ``room == cap_s - cnt``,
  ``cap == cap_s``: the invariant that lets k-induction close.

Paged configs (``pool_pages > 0``, protocol v2) add the page gate's side: ``stop`` (the gate
refused a grant of ``ce`` with ``a`` of its grants ahead: one-hot, ``a`` below the lanes
asking for ``ce`` and granted, never with ``clear`` nor in the cycle after a refusal of the
same expert, when the gate holds its requests; the allocator reads it a cycle later, as
``stop_r``) and the layer's tile rows (``tile_m1``: one of
the supported tile sizes, changing only with ``clear``). The reference counter follows the
allocator's own semantics: every grant counts, and a cycle after a refusal the counter is
the one of the refusal's cycle plus ``a`` (the grants that stood; rows beyond are handed out
again, so the chosen row's "seen" bit follows the counter). Then, besides the above:

* ``tile_at[ce]`` bit ``a`` is exactly "row ``cnt + a`` starts a tile" wherever that row
  is in the region (``cnt + a < cap_s``; the page gate reads it only there).
"""
from __future__ import annotations

from amaranth import Array, Cat, Elaboratable, Module, Mux, Signal

from ...rtl.allocator import AddressAllocator
from ...rtl.paging.regions import tile_sizes
from ...rtl.logic import select
from .common import Props, any_const, any_seq, count_ones, one_hot, reset_first


class AllocatorHarness(Elaboratable):
    """Allocator under its environment, with the properties of the module docstring.
    ``dut_cls`` lets a test put a broken allocator in its place."""

    def __init__(self, cfg, dut_cls=AddressAllocator):
        self.cfg, self.dut_cls = cfg, dut_cls
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        L, E, cb = cfg.lanes, cfg.experts, cfg.cap_bits
        p = Props(m)
        self.messages = p.messages
        m.submodules.dut = dut = self.dut_cls(cfg)
        reset_first(m)
        g = dut.grant
        req, clear = any_seq(m, L, "req"), any_seq(m, 1, "clear")
        m.d.comb += [g.req.eq(req), g.clear.eq(clear)]
        for j in range(L):
            m.d.comb += g.expert[j].eq(any_seq(m, E, f"expert{j}"))
            p.assume(Mux(req[j], one_hot(g.expert[j]), g.expert[j] == 0))
        # (the pairwise same-expert bits, as the packet manager decodes them a stage ahead)
        for j in range(L):
            m.d.comb += g.same[j].eq(Cat(*((g.expert[i] & g.expert[j]).any() for i in range(j))))
        for e in range(E):
            m.d.comb += dut.cap[e].eq(any_seq(m, cb, f"cap_in{e}"))
            p.assume(dut.cap[e] <= cfg.max_rows_per_expert)
        p.assume(~(clear & req.any()))
        self.tile_m1 = self._tile_rows(m, p, dut, clear) if cfg.paged else None
        self._properties(m, p, dut)
        return m

    def _tile_rows(self, m, p, dut, clear):
        """(paged) The layer's tile rows minus one, as the page gate gives it: a supported
        tile size, any at ``clear``, held between."""
        cfg = self.cfg
        held = Signal(cfg.row_bits, name="tile_m1_held", init=cfg.tile_rows - 1)
        pick = any_seq(m, cfg.row_bits, "tile_m1_pick")
        p.assume(Cat(*(pick == (1 << s) - 1 for s in tile_sizes(cfg))).any())
        p.check(Cat(*(held == (1 << s) - 1 for s in tile_sizes(cfg))).any(), "tile rows not a supported size")
        m.d.comb += [dut.tile_m1.eq(held), dut.tile_m1_load.eq(pick)]
        m.d.sync += held.eq(Mux(clear, pick, held))
        return held             # (the layer's, in every cycle but a clear's own)

    def _refusals(self, m, p, dut, asks, granted, ce):
        """(paged) The page gate's refusals (see the module docstring): free for every
        expert but ``ce`` as long as they are well formed; returns ce's one-hot ``stop``
        and whether one was registered last cycle."""
        L, E = self.cfg.lanes, self.cfg.experts
        g = dut.grant
        stops = []
        for e in range(E):
            stop = any_seq(m, L, f"stop{e}")
            stops.append(stop)
            m.d.sync += [dut.stop_r[e].eq(stop),        # (the gate gives it a cycle later)
                         dut.stop_any[e].eq(stop.any())]
            prev = Signal(name=f"stop_prev{e}")
            m.d.sync += prev.eq(stop.any())
            mine = [g.req[j] & g.expert[j][e] for j in range(L)]
            ok_mine = [mine[j] & g.ok[j] for j in range(L)]
            p.assume((stop == 0) | (one_hot(stop) & ~g.clear & ~prev))
            # (a grants ahead of the refused lane: a lane of e with a of e's lanes before it,
            # all granted)
            for a in range(L):
                p.assume(~stop[a] | (count_ones(ok_mine) > a))
        stop_ce = Array(stops)[ce]
        prev_ce = Signal(name="stop_prev_ce")
        m.d.sync += prev_ce.eq(stop_ce.any())
        return stop_ce, prev_ce

    def _properties(self, m, p, dut):
        """Reference state for the chosen expert and row; asserts and covers."""
        cfg = self.cfg
        L, E, cb = cfg.lanes, cfg.experts, cfg.cap_bits
        g = dut.grant
        ce = any_const(m, range(E), "chosen_expert")
        p.assume(ce < E)
        cr = any_const(m, cfg.row_bits, "chosen_row")
        cnt, cap_s = Signal(cb, name="ref_cnt"), Signal(cb, name="ref_cap")
        seen = Signal(name="ref_seen")
        asks = [g.req[j] & g.expert[j].bit_select(ce, 1) for j in range(L)]
        ahead = [count_ones(asks[:j]) for j in range(L)]
        granted = [asks[j] & g.ok[j] for j in range(L)]
        for j in range(L):
            p.check(~g.ok[j] | g.req[j], "grant without a request")
            p.check(~asks[j] | (g.ok[j] == (cnt + ahead[j] < cap_s)),
                    "grant is not exactly 'rows + lanes ahead < latched capacity'")
            p.check(~granted[j] | (g.row[j] == cnt + ahead[j]),
                    "granted row is not rows + lanes ahead (dense, consecutive, in lane order)")
            p.check(~granted[j] | (g.row[j] < cap_s), "row granted beyond the capacity")
            p.check(~(granted[j] & (g.row[j] == cr) & seen), "chosen row granted twice in a layer")
            for i in range(j):
                p.check(~(granted[i] & granted[j] & (g.row[i] == g.row[j])),
                        "same row granted to two lanes in one cycle")
        p.check(Array(dut.rows)[ce] == cnt, "rows[e] differs from the grants counted")
        p.check(cnt <= cap_s, "rows beyond the latched capacity")
        p.check(cap_s <= cfg.max_rows_per_expert, "latched capacity beyond the largest region")
        p.check(seen == (cr < cnt), "chosen row seen but not below rows (or the reverse)")
        p.check(Array(dut.formal_cap)[ce] == cap_s, "latched capacity differs from the CSR at clear")
        p.check(Array(dut.formal_room)[ce] == cap_s - cnt, "room != capacity - rows")
        p.check(Array(dut.formal_room_ge)[ce] == Cat(*(cap_s - cnt >= n for n in range(L + 1))),
                "registered room compares differ from the room")
        if cfg.paged:
            for a in range(L):
                p.check(~(cnt + a < cap_s) | (Array(dut.tile_at)[ce][a] == ((cnt + a) & self.tile_m1 == 0)),
                        "registered tile start differs from the counter's")
            stop_ce, prev_ce = self._refusals(m, p, dut, asks, granted, ce)
            stood = Signal(cb, name="ref_stood")       # the counter the refusal leaves
            m.d.sync += stood.eq(cnt + select([(stop_ce[a], a) for a in range(L)], cb))
        with m.If(g.clear):
            m.d.sync += [cnt.eq(0), cap_s.eq(Array(dut.cap)[ce]), seen.eq(0)]
        if cfg.paged:
            with m.Elif(prev_ce):
                m.d.sync += [cnt.eq(stood), seen.eq(cr < stood)]
        with m.Else():
            m.d.sync += cnt.eq(cnt + count_ones(granted))
            with m.If(Cat(granted[j] & (g.row[j] == cr) for j in range(L)).any()):
                m.d.sync += seen.eq(1)
        self._covers(p, g, asks, granted, cnt, cap_s)

    def _covers(self, p, g, asks, granted, cnt, cap_s):
        """The interesting states are reachable."""
        L, top = self.cfg.lanes, self.cfg.max_rows_per_expert
        p.cover(Cat(*granted).all(), "all lanes granted the same expert in one cycle")
        p.cover(granted[0] & asks[L - 1] & ~g.ok[L - 1], "grants and a refusal in one cycle")
        p.cover((cnt == cap_s) & (cap_s >= min(top, 2 * L)),
                f"a region of {min(top, 2 * L)} rows or more full")
        p.cover((cnt == cap_s) & (cap_s != 0) & asks[0] & ~g.ok[0], "overflow of a full region")
