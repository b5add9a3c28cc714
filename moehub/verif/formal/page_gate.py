"""Property harness of the unicast page gate (:class:`moehub.rtl.paging.regions.PageGate`)
with the address allocator it vetoes (:class:`moehub.rtl.allocator.AddressAllocator`),
wired as the hub wires them (``Hub._pages``): protocol v2's paged regions, each expert's
rows in tiles of its own pages.

Environment (what the packet manager's T stage and the CSR bank give them): per lane a
row request and its expert one-hot, registers of T, so the next values are known a cycle
ahead (``expert_next``: the expert one-hot, not gated by the request; zero for an expert
out of range, which asks for no row); ``same``, ``ahead`` (one-hot: the requests of the
lane's expert ahead of it, zero without a request) and ``prev_same`` (the lane's expert is
lane i's of the cycle before) decoded from those registers, as T registers them; ``clear``
(START) only with no request in this cycle or the one before (START waits for an empty
pipeline, so no refusal is pending); region capacities at most ``max_rows_per_expert``;
TILE_ROWS_LOG2 any supported size (a one-hot) in every cycle, latched at ``clear``;
PAGE_FREE may name any page at any time (good, repeated, never handed out, out of range).

Reference state, the model's (``HubModel._place``, packets applied in lane order), per
expert: the rows granted since the last clear and the capacity latched then, the page of
its current tile; the tile size latched; the pages free (the pool's timing: a return joins
at its verdict, three cycles after the write, as in :mod:`.page_supply`); one chosen page
``cp`` (``AnyConst``): in use or not; and whether an expert had a row refused for want of
a page in the cycle before (the gate then refuses its rows for a cycle: its allocator
counters are a cycle late and the pool, which served every page it had, is still empty).

Properties, for every lane ``j`` asking for expert ``e`` (its row ``r`` = the rows of ``e``
granted before it, this cycle's lanes ahead included):

* a grant exactly when ``r`` is in the region, and ``r`` starts no tile (``r mod tile !=
  0``) or a page is left after the pages the granted lanes ahead took, and ``e`` was not
  refused a page in the cycle before; the granted row is ``r`` (a refused row takes no row
  and no page);
* a granted row that starts a tile gets a page of the pool, none in use (the chosen page
  never while in use; two lanes of a cycle never the same); one that starts none gets the
  page of its tile: the newest a granted lane ahead took for ``e`` in this cycle, else
  ``e``'s current page -- so a row's place (``page << log2(tile) | r mod tile``) is unique
  and its tile's boundaries exact;
* each expert's page (``cur_page``, for the flag of a partial last tile) is the model's
  (a cycle late: a register loaded after the take);
* the allocator's counters are the rows granted (a cycle late after a refusal: it sets
  them from the gate's ``stop_r``); the latched tile size; POOL_FREE the pages free plus
  the last cycle's takes; a return accepted exactly when the page was in use when read.

k-induction: the invariants of the page supply inside the gate (:func:`.page_supply.
supply_invariants`), the allocator's counters against its room and capacity (``formal_*``
ports) and its registered tile starts, the gate's latched tile size and current pages.
"""
from __future__ import annotations

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal

from ...rtl.allocator import AddressAllocator
from ...rtl.logic import exactly, select
from ...rtl.paging.regions import PageGate, tile_sizes
from .common import Props, any_const, any_seq, count_ones, elaborate_into, one_hot, reset_first
from .page_supply import RETURN_LATENCY, Regs, supply_invariants
from .plant import Plant, planted

#: Planted bugs (:mod:`.plant`): with one, a BMC from reset must FAIL on the property named.
PLANTS = {
    # a later lane of a refused lane's expert is not vetoed: it is granted the row the
    # refused lane did not take, on a tile that has no page
    "later-not-vetoed": Plant(
        "moehub.rtl.paging.regions", "self.veto[j].eq(req[j] & (short[j] | later | held[j]))",
        "self.veto[j].eq(req[j] & (short[j] | held[j]))", "PageGate",
        ("grant is not exactly",), "a refused lane's expert's later lanes are granted"),
    # a row on a tile another lane of the cycle started gets its expert's old page
    "same-cycle-page-ignored": Plant(
        "moehub.rtl.paging.regions", "starts = [needs[i] & same[j][i] for i in range(j)] + [needs[j]]",
        "starts = [Const(0) for i in range(j)] + [needs[j]]", "PageGate",
        ("not on its tile's page",), "a row ignores the page its expert took in the same cycle"),
    # the cycle after a refusal the expert's rows are not held
    "not-held": Plant(
        "moehub.rtl.paging.regions", "m.d.comb += first_h.eq(first_c[2])", "m.d.comb += first_h.eq(0)",
        "PageGate", ("grant is not exactly", "rows differ"), "the expert refused last cycle is not held"),
}


class PageGateHarness(Elaboratable):
    """The page gate and the allocator under their environment, with the properties of
    the module docstring; ``plant``: a bug of :data:`PLANTS` planted in the gate."""

    def __init__(self, cfg, plant: str | None = None, invariants: bool = True):
        if not cfg.paged or cfg.multicast or cfg.count_packets:
            self._MustUse__silence = True
            raise ValueError(f"config {cfg.name!r}: the unicast page gate's harness needs pool_pages > 0, "
                             "unicast rows and no count packets")
        self.cfg, self.invariants = cfg, invariants
        try:
            self.gate_cls = planted(PageGate, PLANTS, plant)
        except ValueError:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        p = Props(m)
        self.messages = p.messages
        al = AddressAllocator(cfg)
        self.aregs = elaborate_into(m, "alloc", al, platform)
        pg = self.gate_cls(cfg)
        self.regs = elaborate_into(m, "gate", pg, platform, into=("pool", "pool.ring"))
        reset_first(m)
        self._wire(m, p, al, pg)
        self._reference(m, p, al, pg)
        return m

    # ------------------------------------------------------------------ environment
    def _wire(self, m, p, al, pg):
        """T's registers and what it decodes from them; the allocator and the gate as the
        hub connects them."""
        cfg, L, E = self.cfg, self.cfg.lanes, self.cfg.experts
        a = al.grant
        req_in = any_seq(m, L, "req_in")
        exp_in = [any_seq(m, E, f"expert_in{j}") for j in range(L)]
        for j in range(L):
            p.assume((exp_in[j] == 0) | one_hot(exp_in[j]))
            p.assume(~req_in[j] | (exp_in[j] != 0))
        req = Signal(L, name="t_req")
        exp = [Signal(E, name=f"t_exp{j}") for j in range(L)]
        exp_prev = [Signal(E, name=f"t_exp_prev{j}") for j in range(L)]
        m.d.sync += [req.eq(req_in)] + [exp[j].eq(exp_in[j]) for j in range(L)] \
            + [exp_prev[j].eq(exp[j]) for j in range(L)]
        clear = any_seq(m, 1, "clear")
        req_q = Signal(name="t_req_q")
        m.d.sync += req_q.eq(req.any())
        p.assume(~clear | (~req.any() & ~req_q))
        started = Signal(name="started")               # (rows are asked for only in a layer)
        with m.If(clear):
            m.d.sync += started.eq(1)
        p.assume(started | ~req_in.any())
        self.started = started
        self.req, self.clear = req, clear
        self.expert = [Mux(req[j], exp[j], 0) for j in range(L)]
        same = [Cat(*((exp[i] & exp[j]).any() for i in range(j))) if j else Const(0, 0) for j in range(L)]
        self.same = [[req[i] & req[j] & same[j][i] for i in range(j)] for j in range(L)]
        tile_oh = any_seq(m, len(tile_sizes(cfg)), "tile_oh")
        p.assume(one_hot(tile_oh))
        self.tile_oh = tile_oh
        self.ret, self.ret_page = any_seq(m, 1, "page_ret"), any_seq(m, 16, "page_ret_page")
        m.d.comb += [a.req.eq(req), a.clear.eq(clear), pg.req.eq(req), pg.clear.eq(clear),
                     pg.ok.eq(a.ok), pg.tile_oh.eq(tile_oh), al.tile_m1.eq(pg.tile_m1),
                     al.tile_m1_load.eq(pg.tile_m1_load), pg.ret.eq(self.ret), pg.ret_page.eq(self.ret_page)]
        for j in range(L):
            ahead = Mux(req[j], Cat(exactly(self.same[j], n) for n in range(L)), 0)
            m.d.comb += [a.expert[j].eq(self.expert[j]), a.same[j].eq(same[j]),
                         pg.expert[j].eq(self.expert[j]), pg.same[j].eq(same[j]), pg.ahead[j].eq(ahead),
                         pg.prev_same[j].eq(Cat((exp[j] & exp_prev[i]).any() for i in range(L))),
                         pg.expert_next[j].eq(exp_in[j]), pg.row[j].eq(a.row[j])]
        for e in range(E):
            cap = any_seq(m, cfg.cap_bits, f"cap_in{e}")
            p.assume(cap <= cfg.max_rows_per_expert)
            m.d.comb += [al.cap[e].eq(cap), al.stop_r[e].eq(pg.stop_r[e]), al.stop_any[e].eq(pg.stop_any[e]),
                         pg.tile_at_next[e].eq(al.tile_at_next[e]), pg.room_ge_next[e].eq(al.room_ge_next[e])]

    # ------------------------------------------------------------------ the model
    def _by_size(self, f, width):
        """``f(log2 tile)`` for the latched tile size."""
        return select([(self.sh[k], f(s)) for k, s in enumerate(self.sizes)], width)

    def _reference(self, m, p, al, pg):
        cfg, L, E, P, pb, cb = (self.cfg, self.cfg.lanes, self.cfg.experts, self.cfg.pool_pages,
                                self.cfg.page_bits, self.cfg.cap_bits)
        self.sizes = sizes = tile_sizes(cfg)
        self.sh = sh = Signal(len(sizes), name="ref_tile_sh", init=1 << sizes.index(cfg.tile_rows.bit_length() - 1))
        cnt = [Signal(cb, name=f"ref_rows{e}") for e in range(E)]
        cap_s = [Signal(cb, name=f"ref_cap{e}") for e in range(E)]
        cur = [Signal(pb, name=f"ref_page{e}") for e in range(E)]
        held = Signal(E, name="ref_held")               # refused a page in the cycle before
        free = Signal(range(P + 1), name="ref_free", init=P)
        cp = any_const(m, range(P), "chosen_page")
        p.assume(cp < P)
        in_use = Signal(name="ref_cp_in_use")
        ok = pg.grant_ok
        # ---- per lane, in lane order
        rows, starts, page_on, short = [], [], [], []
        for j in range(L):
            ex = self.expert[j]

            def by_e(vals, width, ex=ex):
                return select([(ex[e], vals[e]) for e in range(E)], width)
            row = Signal(cb, name=f"ref_row{j}")
            m.d.comb += row.eq(by_e(cnt, cb) + count_ones([ok[i] & self.same[j][i] for i in range(j)]))
            st = Signal(name=f"ref_starts{j}")
            m.d.comb += st.eq(self._by_size(lambda s: row[:s] == 0, 1))
            room = row < by_e(cap_s, cb)
            takes_ahead = count_ones([ok[i] & starts[i] for i in range(j)])
            fits = ~st | (free > takes_ahead)
            was_held = (held & ex).any()
            want = self.req[j] & room & fits & ~was_held
            p.check(ok[j] == want, "grant is not exactly 'room, and no tile start or a page left, and not "
                                   "refused a page the cycle before'")
            p.check(~ok[j] | (al.grant.row[j] == row), "granted row is not the rows granted ahead of it")
            on = by_e(cur, pb)                          # (the newest page taken ahead, else current)
            for i in range(j):
                on = Mux(ok[i] & starts[i] & self.same[j][i], pg.page[i], on)
            p.check(~ok[j] | st | (pg.page[j] == on), "granted row not on its tile's page")
            p.check(~(ok[j] & st) | (pg.page[j] < P), "a page beyond the pool taken")
            p.check(~(ok[j] & st & (pg.page[j] == cp) & in_use), "a page in use handed out again")
            for i in range(j):
                p.check(~(ok[i] & starts[i] & ok[j] & st & (pg.page[i] == pg.page[j])),
                        "one page taken by two lanes in one cycle")
            rows.append(row)
            starts.append(st)
            page_on.append(on)
            short.append(self.req[j] & room & ~fits & ~was_held)
        takes = count_ones([ok[j] & starts[j] for j in range(L)])
        taken_cp = Cat(ok[j] & starts[j] & (pg.page[j] == cp) for j in range(L)).any()
        # ---- returns (the pool's timing) and the pages free
        due = [Signal(name=f"ref_ret{k}") for k in range(RETURN_LATENCY)]
        flight = [Signal(name=f"ref_ret_cp{k}") for k in range(RETURN_LATENCY)]
        held_cp = [Signal(name=f"ref_ret_held{k}") for k in range(RETURN_LATENCY)]
        accepted = due[-1] & ~pg.bad
        freed_cp = flight[-1] & ~pg.bad
        m.d.sync += [due[0].eq(self.ret), flight[0].eq(self.ret & (self.ret_page == cp)),
                     held_cp[0].eq(in_use & ~freed_cp)]
        m.d.sync += [x[k].eq(x[k - 1]) for x in (due, flight) for k in range(1, RETURN_LATENCY)]
        m.d.sync += [held_cp[k].eq(held_cp[k - 1] & ~freed_cp) for k in range(1, RETURN_LATENCY)]
        p.check(~pg.bad | due[-1], "PAGE_BAD without a return due")
        p.check(~freed_cp | held_cp[-1], "a return of a page not in use accepted")
        p.check(~(flight[-1] & pg.bad) | ~held_cp[-1], "a return of a page in use refused")
        takes_q = Signal(range(L + 1), name="ref_takes_q")
        cur_q = [Signal(pb, name=f"ref_page_q{e}") for e in range(E)]
        m.d.sync += [takes_q.eq(takes), free.eq(free - takes + accepted)] + [cur_q[e].eq(cur[e]) for e in range(E)]
        p.check(pg.free == free + takes_q, "POOL_FREE is not the pages free (the last take pending)")
        # ---- the expert's state: rows, the current page, the latched tile size
        for e in range(E):
            p.check((al.rows[e] == cnt[e]) | held[e], "the allocator's rows differ from the rows granted")
            p.check(pg.cur_page[e] == cur_q[e], "an expert's current page is not its last tile's")
        p.check(~self.started | (one_hot(sh) & (pg.tile_sh == sh)
                                 & (pg.tile_m1 == self._by_size(lambda s: (1 << s) - 1, cfg.row_bits))),
                "the tile size is not the one latched at the layer start")
        with m.If(self.clear):
            m.d.sync += [sh.eq(self.tile_oh)] + [cnt[e].eq(0) for e in range(E)] \
                + [cap_s[e].eq(al.cap[e]) for e in range(E)]
        with m.Else():
            m.d.sync += [cnt[e].eq(cnt[e] + count_ones([ok[j] & self.expert[j][e] for j in range(L)]))
                         for e in range(E)]
        for j in range(L):                              # (the last lane's take wins)
            for e in range(E):
                with m.If(ok[j] & starts[j] & self.expert[j][e]):
                    m.d.sync += cur[e].eq(pg.page[j])
        m.d.sync += held.eq(Cat(Cat(short[j] & self.expert[j][e] for j in range(L)).any() for e in range(E)))
        with m.If(taken_cp):
            m.d.sync += in_use.eq(1)
        with m.Elif(freed_cp):
            m.d.sync += in_use.eq(0)
        self.ref = dict(cnt=cnt, cap_s=cap_s, cur=cur, held=held, free=free, cp=cp, in_use=in_use,
                        takes_q=takes_q, returns=(due, flight, held_cp, freed_cp), starts=starts, ok=ok)
        if self.invariants:
            self._invariants(m, p, al, pg)
        self._covers(m, p, pg, starts, short, taken_cp, freed_cp, free)

    def _covers(self, m, p, pg, starts, short, taken_cp, freed_cp, free):
        L, ok = self.cfg.lanes, pg.grant_ok
        returned = Signal(name="ref_cp_returned")
        with m.If(freed_cp):
            m.d.sync += returned.eq(1)
        p.cover(Cat(*short).any() & (free == 0), "a row refused: it starts a tile and no page is left")
        p.cover(Cat(self.req[j] & ~ok[j] & (self.ref["held"] & self.expert[j]).any() for j in range(L)).any(),
                "a row held the cycle after its expert's refusal")
        p.cover(taken_cp & returned, "the chosen page handed out again after its return")
        p.cover(Cat(ok[i] & starts[i] & ok[j] & ~starts[j] & self.same[j][i]
                    for j in range(L) for i in range(j)).any(),
                "a row on the page a lane ahead took in the same cycle")

    # ------------------------------------------------------------------ invariants
    def _invariants(self, m, p, al, pg):
        """The strengthening invariants (module docstring)."""
        cfg, L, E, r = self.cfg, self.cfg.lanes, self.cfg.experts, self.regs
        ref = self.ref

        def inv(cond, msg):
            p.check(cond, f"invariant: {msg}", src_loc_at=1)
        supply_invariants(m, p, cfg, Regs(r, "pool."), ref["cp"], ref["in_use"], ref["takes_q"],
                          ref["returns"], ref["free"])
        tile_m1 = self._by_size(lambda s: (1 << s) - 1, cfg.row_bits)
        for e in range(E):
            cnt, cap_s = ref["cnt"][e], ref["cap_s"][e]
            inv((al.formal_cap[e] == cap_s) & (cap_s <= cfg.max_rows_per_expert), "the latched capacity")
            inv((al.rows[e] + al.formal_room[e] == cap_s) & (al.rows[e] <= cap_s), "rows + room == capacity")
            inv(al.formal_room_ge[e] == Cat(al.formal_room[e] >= n for n in range(L + 1)), "room_ge")
            inv(cnt <= cap_s, "the rows granted within the capacity")
            for a in range(L):
                inv(~(al.rows[e] + a < cap_s) | (al.tile_at[e][a] == (((al.rows[e] + a) & tile_m1) == 0)),
                    "the registered tile starts")
        inv(self.started | (~self.req.any() & (r["page_tile_m1"] == 0)), "before the first START")
        # (a refusal of the cycle before: the gate's registers of it, and the allocator's
        # counters of that cycle, against the reference's rows granted then)
        areg = self.aregs
        for e in range(E):
            held, stop = ref["held"][e], pg.stop_r[e]
            inv((pg.stop_any[e] == held) & ((stop == 0) | (held & one_hot(stop))),
                "the gate's refusal registers are the expert's refusal of the cycle before")
            stood = select([(stop[a], a) for a in range(L)], cfg.cap_bits)
            inv(~held | ((areg[f"rows_r{e}"] + stood == ref["cnt"][e])
                         & (areg[f"room_r{e}"] - stood == ref["cap_s"][e] - ref["cnt"][e])),
                "the counters of the refusal's cycle plus the grants that stood are the rows granted")

