"""The chunk table: one entry per row in flight (indexed by source and tag), read by every
lane in the packet manager's R stage and written back by its T stage.

An entry says whether the row is open, its expert and which of its chunks have arrived
(:attr:`HubLayouts.chunk_entry`). ``open`` lives in a flop vector, so that a layer's end
clears every row in one cycle; the rest in an array of flops (``chunks<e>``, read by every
lane, written by W). W's writes are chosen by one-hot decodes of their indices made a cycle
ahead, in T's cycle, and registered (``w_dec``): an entry's next value is then an AND-OR
of the lanes' write-backs behind a register, not behind an index compare and a chain of
one mux per write port, as a multi-port memory would map.

T's write-back is registered (the *W* stage) and written to the table a cycle later, so
the wide write fan-out is off T's loop. The table is read in the A stage, by an AND-OR of
the entries with a one-hot of each lane's index decoded on the way in and registered
(``q_sel``): no index bit then fans out to every entry's read mux. That read has two
writes it may not see yet: W's (pending) and T's (the group right ahead, being decided
now). Each lane's result takes the newer of them instead of the stored entry when its row
is theirs (the bypass); the result is registered (``r_ent``), with the expert compare T
needs made on every candidate before the choice.
"""
from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from .layouts import HubLayouts
from .logic import newest_of, select


def onehot_mux(sel_vals, default):
    """``default`` unless one of the (select, value) pairs is selected (at most one is)."""
    out = default
    for sel, val in sel_vals:
        out = Mux(sel, val, out)
    return out


class ChunkTable(wiring.Component):
    """Chunk table with its read registers (R) and pending write-back (W).

    Parameters
    ----------
    cfg : HubConfig

    Attributes
    ----------
    rd_idx : In(range(entries)).array(lanes)
        Each lane's entry index, of the packet on the input lane (decoded to a one-hot and
        registered; the entry is read in A, the result is in R a cycle later).
    expert : In(dest_bits).array(lanes)
        Each lane's packet expert in the A stage, compared with every candidate entry's
        (multicast: its target set, ``HubLayouts.dest_bits``).
    hit, hit2 : In(lanes).array(lanes)
        From the A stage, bit k of lane j: lane j's row is the row of lane k one group
        ahead (in R now, its write-back decided by T this cycle) / two groups ahead (its
        write-back in W).
    after_eq : In(lanes).array(lanes)
        Bit k of lane j: T's write-back of lane k names lane j's ``expert`` (``after[k].expert
        == expert[j]``, compared by the packet manager from registers before its own select
        of ``after[k].expert``: a 48-bit key's compare is then off the bypass's select).
    ent : Out(chunk_entry).array(lanes)
        R: each lane's entry as the group ahead leaves it.
    exp_eq : Out(lanes)
        R: ``ent.expert`` equals the lane's packet expert.
    live : In(1)
        T's group has an effect (a layer is armed and not finished).
    last, idx, after : In(lanes), In(range(entries)).array(lanes), In(chunk_entry).array(lanes)
        T's write-back: lane k is the last of the group on its row, the row's index and its
        entry after the group (the write happens when ``live``).
    idx_oh : In(entries).array(lanes)
        ``idx`` as a one-hot, from a register (the packet manager decodes A's index for its
        row-info read): no index decode in front of the open-row reduction.
    rows_open : Out(1)
        Some row is open (the table with W's writes applied).
    clear : In(1)
        Close every row (layer start or flush).
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.lay = lay = HubLayouts(cfg)
        L, N = cfg.lanes, cfg.entries
        super().__init__({
            "rd_idx": In(range(N)).array(L), "expert": In(lay.dest_bits).array(L),
            "hit": In(L).array(L), "hit2": In(L).array(L), "after_eq": In(L).array(L),
            "ent": Out(lay.chunk_entry).array(L), "exp_eq": Out(L),
            "live": In(1), "last": In(L), "idx": In(range(N)).array(L), "idx_oh": In(N).array(L),
            "after": In(lay.chunk_entry).array(L),
            "rows_open": Out(1), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        L, N, lay = self.cfg.lanes, self.cfg.entries, self.lay
        self.open_v = Signal(N, name="open_v")
        self.body = Array(Signal(lay.chunk_body, name=f"chunks{e}", reset_less=True) for e in range(N))
        # W: T's write-back, registered (with the one-hot of its index, and whether T's
        # group was live: w_wen = w_live & the lane was the last on its row).
        self.w_wen = [Signal(name=f"w_wen{k}") for k in range(L)]
        self.w_dec = [Signal(N, name=f"w_dec{k}") for k in range(L)]
        self.w_live = Signal(name="w_live")
        self.w_idx = [Signal(range(N), name=f"w_idx{k}") for k in range(L)]
        self.w_after = [Signal(lay.chunk_entry, name=f"w_after{k}") for k in range(L)]
        self._read(m)
        self._write_back(m)
        return m

    def _read(self, m):
        """Every lane's entry: the stored one, read by its registered one-hot (A); then the
        newer of W's and T's writes to its row instead, registered (R)."""
        L, N, lay = self.cfg.lanes, self.cfg.entries, self.lay
        for j in range(L):
            q_sel = Signal(N, name=f"q_sel{j}")
            m.d.sync += q_sel.eq(Const(1, N) << self.rd_idx[j])
            rd = Signal(lay.chunk_body, name=f"rd{j}")
            stored = Signal(lay.chunk_entry, name=f"stored{j}")
            m.d.comb += [
                rd.eq(select([(q_sel[e], self.body[e]) for e in range(N)], lay.chunk_body)),
                stored.open.eq((q_sel & self.open_v).any()),
                stored.expert.eq(rd.expert), stored.bitmap.eq(rd.bitmap),
            ]
            # (T's entries are taken on `last`, a register, not on `live & last`: a group T
            # finds not live leaves the state unchanged and is followed only by groups that
            # are not live either -- `finished` holds until START, and START and FLUSH wait
            # for an empty pipeline -- so what it passes on is never used; that keeps `live`
            # out of this loop)
            # (newest first; in each group at most one lane writes the row: the last on it)
            bypass = [[(self.hit[j][k] & self.last[k], self.after[k]) for k in range(L)],
                      [(self.hit2[j][k] & self.w_wen[k], self.w_after[k]) for k in range(L)]]
            r_ent = Signal(lay.chunk_entry, name=f"r_ent{j}")
            r_exp_eq = Signal(name=f"r_exp_eq{j}")
            expert = self.expert[j]
            m.d.sync += [
                r_ent.eq(newest_of(bypass, stored, lay.chunk_entry)),
                r_exp_eq.eq(newest_of([[(sel, self.after_eq[j][k]) for k, (sel, _) in enumerate(bypass[0])],
                                       [(sel, ent.expert == expert) for sel, ent in bypass[1]]],
                                      stored.expert == expert, 1)),
            ]
            m.d.comb += [self.ent[j].eq(r_ent), self.exp_eq[j].eq(r_exp_eq)]

    def _write_back(self, m):
        """W: T's write-back registered, then written to the table; the open bits and
        whether any row is open."""
        L, N = self.cfg.lanes, self.cfg.entries
        open_v = self.open_v
        # (what W writes, by the registered one-hots: wmask = the entries written)
        wmask, wopen = Const(0, N), Const(0, N)
        for k in range(L):
            wmask = wmask | self.w_dec[k]
            wopen = wopen | Mux(self.w_after[k].open, self.w_dec[k], 0)
        # (the open bits as W leaves them if its group was live; w_live is chosen last)
        open_w = Signal(N, name="open_w")
        m.d.comb += open_w.eq((open_v & ~wmask) | wopen)
        open_eff = Signal(N)
        m.d.comb += open_eff.eq(Mux(self.w_live, open_w, open_v))
        m.d.sync += open_v.eq(open_eff)
        for e in range(N):
            hits = [(self.w_dec[k][e], self.w_after[k].as_value()[1:]) for k in range(L)]
            with m.If(self.w_live & Cat(sel for sel, _ in hits).any()):
                m.d.sync += self.body[e].eq(select(hits, self.lay.chunk_body))
        # Whether a row is open, without an OR over the table in front of T: the entries W
        # does not write were reduced a cycle earlier (others_open), W's own are few.
        others_open = Signal()
        w_open_any = Cat(self.w_wen[k] & self.w_after[k].open for k in range(L)).any()
        m.d.comb += self.rows_open.eq(others_open | w_open_any)
        # others_open for the next cycle: the table as it will be then, except the entries
        # T writes now (those come from W then); the four cases of W's and T's `live` are
        # reduced apart and chosen last (neither drives the wide OR).
        t_dec = [Signal(N, name=f"t_dec{k}") for k in range(L)]
        m.d.comb += [t_dec[k].eq(Mux(self.last[k], self.idx_oh[k], 0)) for k in range(L)]
        tmask = Const(0, N)
        for k in range(L):
            tmask = tmask | t_dec[k]
        m.d.sync += others_open.eq(Mux(
            self.w_live,
            Mux(self.live, (open_w & ~tmask).any(), open_w.any()),
            Mux(self.live, (open_v & ~tmask).any(), open_v.any())))
        # At most one lane writes an entry (the last on its row).
        m.d.sync += [self.w_wen[k].eq(self.live & self.last[k]) for k in range(L)]
        m.d.sync += [self.w_dec[k].eq(t_dec[k]) for k in range(L)]
        m.d.sync += self.w_live.eq(self.live)
        m.d.sync += [self.w_idx[k].eq(self.idx[k]) for k in range(L)]
        m.d.sync += [self.w_after[k].eq(self.after[k]) for k in range(L)]
        with m.If(self.clear):
            m.d.sync += [open_v.eq(0), others_open.eq(0)]
