"""Per-source end-of-stream state of the packet manager.

A source ends its stream with an EOS packet carrying how many rows it sent to this GPU.
The layer is finished when every source's EOS is in and its count is reached; a row that
opens after its source's count is reached is dropped (POST_EOS). Per source this keeps
whether the EOS arrived (``eos_seen``), its count, the rows opened (``opened``) and, once
the EOS is in, the distance ``dist = count - opened``.

Timing: the packet manager's T stage decides in one cycle, for every lane, whether an
opener comes after its source's count -- a compare ``dist <= k`` for ``k`` = the source's
earlier openers in the group. So these registers run a group behind: the group T
committed last is summarised in ``p_*`` (how many rows each source opened, as a one-hot
``p_sel``; its EOS, count and the distance after it for each opener count), and the state
after it (``seen_t``, ``opened_t``, ``dist_t``) is formed from registers only. T needs only
whether ``dist_t <= k`` (``k < lanes``), kept as registered compares (``dist_le``, ``p_le``)
chosen by the one-hots: no subtraction in front of T's compares. ``dist - n <= k`` is
``dist <= n + k``, so each is a vector over ``i = n + k < 2 x lanes``, not one per (n, k).

The wide values of an EOS (its count, the distances ``p_evec``) are registered per *lane*
(``lane_cnt``, ``lane_evec``), with a one-hot per source naming the lane of its EOS
(``p_lane``), and chosen here a cycle later, off T's loop: T's EOS verdict then drives a few
bits per source, not every bit of every source's distances. The compares the next
distances need (``<= k``, k < 2 x lanes) are formed once per lane from those registers
(``lane_le``) and chosen by ``p_lane`` like the values: no compare behind the choice. Likewise an EOS mismatch is
found per lane (at most one EOS per lane, against a count per source).
"""
from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from .logic import at_most_consts, select


def dist_shape(cfg: HubConfig):
    """Shape of ``count - opened - k`` (signed, with room for the lags T folds in)."""
    return signed(cfg.count_bits + 3)


class EosTracker(wiring.Component):
    """Per-source end-of-stream state, a group behind T (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig

    Attributes
    ----------
    p_sel : Out(lanes + 1).array(sources)
        One-hot: how many rows the source opened in the group T committed last.
    opened : Out(count_bits + 1).array(sources)
        Rows the source opened before that group.
    seen : Out(sources)
        The source's EOS is in, that group included (the group's EOS bit from a copy of
        ``p_eos``, ``n_eos_t``, held inverted: T reads it into its POST_EOS verdicts).
    le : Out(lanes).array(sources)
        Bit k: ``count - opened <= k`` after that group (meaningful once ``seen``),
        formed from a copy of ``p_sel`` (``n_sel_le``, held inverted) and a register of the
        compares it shifts (``t_le``: the EOS's after an EOS, else ``dist_le``): T chooses
        these by its lanes' sources into its POST_EOS verdicts, so they should not start
        behind ``p_sel``'s fan-out (at 72 sources that fan-out's buffers led T's row
        requests, 22.3 FO4) nor behind a choice by the group's EOS.
    done : Out(sources)
        The source's EOS is in and its count reached (``seen`` and ``le`` bit 0), for
        the layer's ``finished`` alone: formed from a copy of ``p_sel`` (``p_sel_fin``)
        that drives nothing else, so that the AND over the sources does not start
        behind ``p_sel``'s fan-out to T, A and the next state (:meth:`_copy`: after reset
        no EOS is seen, so ``done`` is 0 whatever the copy holds).
    mismatch : Out(lanes)
        The EOS on lane j of that group has a count below its source's rows opened.
    got_eos : Out(sources), count : Out(count_bits).array(sources)
        Status: EOS received and its count (registers).
    nxt_sel, nxt_eos, nxt_lane : In
        T's summary of its group, per source: the openers' count (one-hot; 1 when no
        layer is armed -- a finished layer's openers still count: the count stays
        reached), an EOS accepted, the lane it came on (one-hot).
    nxt_cnt : In(count_bits).array(lanes)
        Each lane's EOS count (used for the source whose EOS it is).
    nxt_evec : In(signed).array(lanes, lanes + 1)
        For an EOS on lane j: ``count - opened`` after the group, for each count n of the
        group's own openers of its source (index n).
    nxt_le : In(2 * lanes).array(sources)
        Bit i of ``nxt_le[s]``: the distance after the group ahead of the EOS's, ``<= i``
        (so ``nxt_evec[j][n] <= k`` is bit ``n + k``, for the EOS's lane j).
    clear : In(1)
        Layer start: no EOS, nothing opened.
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        L, S, cb = cfg.lanes, cfg.sources, cfg.count_bits
        ds = dist_shape(cfg)
        super().__init__({
            "p_sel": Out(L + 1).array(S), "opened": Out(cb + 1).array(S),
            "seen": Out(S), "le": Out(L).array(S), "done": Out(S), "mismatch": Out(L),
            "got_eos": Out(S), "count": Out(cb).array(S),
            "nxt_sel": In(L + 1).array(S), "nxt_eos": In(S), "nxt_lane": In(L).array(S),
            "nxt_cnt": In(cb).array(L), "nxt_evec": In(ds).array(L, L + 1), "nxt_le": In(2 * L).array(S),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        S, L, cb = self.cfg.sources, self.cfg.lanes, self.cfg.count_bits
        ds = dist_shape(self.cfg)
        eos_seen, p_eos = Signal(S, name="eos_seen"), Signal(S, name="p_eos")
        self.lane_cnt = [Signal(cb, name=f"lane_cnt{j}") for j in range(L)]
        self.lane_evec = [[Signal(ds, name=f"lane_evec{j}_{n}") for n in range(L + 1)] for j in range(L)]
        m.d.sync += [self.lane_cnt[j].eq(self.nxt_cnt[j]) for j in range(L)]
        m.d.sync += [self.lane_evec[j][n].eq(self.nxt_evec[j][n]) for j in range(L) for n in range(L + 1)]
        # (each lane's distances compared with 0..2L-1 from its registers, once per lane: a
        # source's compares after its EOS are then chosen by p_lane, not formed behind it)
        self.lane_le = [[Signal(2 * L, name=f"lane_le{j}_{n}") for n in range(L + 1)] for j in range(L)]
        m.d.comb += [self.lane_le[j][n].eq(Cat(*(self.lane_evec[j][n] <= k for k in range(2 * L))))
                     for j in range(L) for n in range(L + 1)]
        self.p_lanes = []
        for s in range(S):
            self._source(m, s, eos_seen[s], p_eos[s])
        self._mismatch(m)
        with m.If(self.clear):
            m.d.sync += [eos_seen.eq(0), p_eos.eq(0)]
        return m

    def _source(self, m, s, eos_seen, p_eos):
        """Source ``s``: the registers, the state after the last group, the compares
        (``eos_seen`` and ``p_eos`` are its bits of the vectors)."""
        L, cb = self.cfg.lanes, self.cfg.count_bits
        ds = dist_shape(self.cfg)
        eos_cnt = Signal(cb, name=f"eos_cnt{s}")
        opened = Signal(cb + 1, name=f"opened{s}")
        dist = Signal(ds, name=f"dist{s}")
        p_sel = Signal(L + 1, name=f"p_sel{s}", init=1)
        p_lane = Signal(L, name=f"p_lane{s}")
        self.p_lanes.append((p_sel, p_lane, p_eos))
        # (the EOS's values, chosen from its lane's registers)
        p_evec = [Signal(ds, name=f"p_evec{s}_{n}") for n in range(L + 1)]
        p_cnt = Signal(cb, name=f"p_cnt{s}")
        m.d.comb += [p_evec[n].eq(select([(p_lane[j], self.lane_evec[j][n]) for j in range(L)], ds))
                     for n in range(L + 1)]
        m.d.comb += p_cnt.eq(select([(p_lane[j], self.lane_cnt[j]) for j in range(L)], cb))
        # (dist_le[i] = dist <= i, i < 2L: so dist_t = dist - n <= k is dist_le[n + k];
        # after an EOS, p_evec[n] <= k is p_le[n + k])
        dist_le = Signal(2 * L, name=f"dist_le{s}", init=(1 << 2 * L) - 1)
        p_le = Signal(2 * L, name=f"p_le{s}")
        seen_t = Signal(name=f"seen_t{s}")
        opened_t = Signal.like(opened, name=f"opened_t{s}")
        dist_t = Signal.like(dist, name=f"dist_t{s}")
        dle_t = Signal(L, name=f"dle_t{s}")
        n_range = range(L + 1)
        m.d.comb += [
            seen_t.eq(eos_seen | p_eos),
            opened_t.eq(select([(p_sel[n], opened + n) for n in n_range], opened.shape())),
            dist_t.eq(Mux(p_eos, select([(p_sel[n], p_evec[n]) for n in n_range], ds),
                          select([(p_sel[n], dist - n) for n in n_range], ds))),
        ]
        # (T's compares from a copy of p_sel, n_sel_le: T reads them through a select over
        # the sources into its POST_EOS verdicts, so they do not start behind p_sel's
        # fan-out to the tracker's own next state and to A and T)
        # (held inverted: p_sel_fin differs from p_sel in every bit's reset value, and a
        # third copy cannot differ from both in every bit -- see _copy)
        n_sel_le = self._copy(m, p_sel, self.nxt_sel[s], f"n_sel_le{s}", init=p_sel.init, inverted=True)
        # (and from a copy of p_eos, held inverted for the same reason: p_eos's fan-out to
        # the tracker's next state put two cells in front of T's POST_EOS verdicts -- 22.7
        # FO4 into T's thresholds at deepseek-v3-8gpu with count packets)
        n_eos_t = Signal(name=f"n_eos_t{s}", init=1)
        m.d.sync += n_eos_t.eq(~self.nxt_eos[s])
        # (and from ``t_le``, a register of the compares T's distance starts from -- the
        # EOS's (p_le) after an EOS, else dist_le -- so no choice by p_eos stands between
        # the copy and T: n_sel_le -> dle_t -> T's 16-source select -> its POST_EOS
        # verdicts -> the allocator's thresholds was 22.7 FO4 at deepseek-v3 on two nodes
        # with count packets, the choice one of its cells)
        t_le = Signal(2 * L, name=f"t_le{s}", init=(1 << 2 * L) - 1)
        m.d.comb += [dle_t[k].eq(Cat(~n_sel_le[n] & t_le[n + k] for n in n_range).any()) for k in range(L)]
        m.d.sync += [eos_seen.eq(seen_t), opened.eq(opened_t), dist.eq(dist_t)]
        with m.If(p_eos):
            m.d.sync += eos_cnt.eq(p_cnt)
        # (dist_t <= k for the next cycle: every candidate compared with a constant, then
        # chosen -- no subtraction in front of the compares; the compares share dist's
        # sign and high-bits zero test, at_most_consts)
        le = at_most_consts(m, dist, range(3 * L), f"dist{s}_le")
        le_eos, le_open = Signal(2 * L, name=f"dist{s}_le_eos"), Signal(2 * L, name=f"dist{s}_le_open")
        m.d.comb += [le_eos[k].eq(Cat(p_sel[n] & p_lane[j] & self.lane_le[j][n][k]
                                      for n in n_range for j in range(L)).any()) for k in range(2 * L)]
        m.d.comb += [le_open[k].eq(Cat(p_sel[n] & le[n + k] for n in n_range).any()) for k in range(2 * L)]
        m.d.sync += dist_le.eq(Mux(p_eos, le_eos, le_open))
        # (t_le's next value: the next EOS's compares, else dist_le's next value -- its
        # EOS-lane compares behind one choice, as dist_le's are: lane_evec -> dist_le was
        # 21.2 FO4 at two nodes)
        m.d.sync += t_le.eq(Mux(p_eos & ~self.nxt_eos[s], le_eos, Mux(self.nxt_eos[s], self.nxt_le[s], le_open)))
        m.d.sync += [p_sel.eq(self.nxt_sel[s]), p_eos.eq(self.nxt_eos[s]), p_lane.eq(self.nxt_lane[s])]
        m.d.sync += p_le.eq(self.nxt_le[s])
        p_sel_fin = self._copy(m, p_sel, self.nxt_sel[s], f"p_sel_fin{s}", init=~p_sel.init & ((1 << L + 1) - 1))
        with m.If(self.clear):
            m.d.sync += [eos_cnt.eq(0), opened.eq(0), dist.eq(0), p_sel.eq(1), dist_le.eq(dist_le.init),
                         n_eos_t.eq(1), t_le.eq(t_le.init)]
        done = Signal(name=f"done{s}")
        m.d.comb += done.eq(seen_t & Mux(p_eos, Cat(p_sel_fin[n] & p_le[n] for n in n_range).any(),
                                         Cat(p_sel_fin[n] & dist_le[n] for n in n_range).any()))
        m.d.comb += self.done[s].eq(done)
        m.d.comb += [
            self.p_sel[s].eq(p_sel), self.opened[s].eq(opened), self.seen[s].eq(eos_seen | ~n_eos_t),
            self.le[s].eq(dle_t),
            self.got_eos[s].eq(eos_seen), self.count[s].eq(eos_cnt),
        ]

    def _copy(self, m, p_sel, nxt, name, init, inverted=False):
        """A copy of a source's ``p_sel`` register (loaded and cleared with it) that drives
        only what reads it, off ``p_sel``'s own fan-out.

        Synthesis merges flops bit by bit when their next state and reset value agree, so
        a copy must differ from ``p_sel`` and from every other copy in *every* bit: either
        its reset value ``init`` is the complement (after reset no EOS is seen, so nothing
        that reads a copy is used then, and a cycle later the copy is ``p_sel`` again), or
        it holds ``p_sel`` ``inverted`` (every bit's next state the complement; its reader
        inverts it back). Two bits cannot differ three ways, so the third copy is the
        inverted one."""
        mask = (1 << len(p_sel)) - 1
        copy = Signal(len(p_sel), name=name, init=mask ^ init if inverted else init)
        m.d.sync += copy.eq(~nxt if inverted else nxt)
        with m.If(self.clear):
            m.d.sync += copy.eq(mask ^ 1 if inverted else 1)
        return copy

    def _mismatch(self, m):
        """Per lane: its EOS's count is below the rows at the end of the EOS's group
        (``dist_t < 0``, the sign of the distance its source's openers choose; registers
        only). ``p_lane`` is the EOS's lane, so a lane has at most one source."""
        L = self.cfg.lanes
        for j in range(L):
            sel = select([(p_eos & p_lane[j], p_sel) for p_sel, p_lane, p_eos in self.p_lanes], L + 1)
            m.d.comb += self.mismatch[j].eq(Cat(sel[n] & self.lane_evec[j][n][-1] for n in range(L + 1)).any())
