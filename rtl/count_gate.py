"""Count packets ahead of the allocator (protocol v2, ``count_packets``): which count
packets add, whether an expert's counts are all in at a lane, and each group's sum.

Why here, three stages ahead of the allocator: which count packets add (a repeat of a
(source, expert) seen in an earlier group or on an earlier lane is COUNT_DUPLICATE and is
ignored), whether every source's count of an expert is in, and the counts' sums depend on
the count packets alone -- not on the rows, the allocator's counters or the layer's other
rules. So the verdicts are formed on the way into A, from the input lanes, a seen bit per
(source, expert) and the group in A (not yet in the seen bits), and each group's sum per
expert on the way into R: while the group is in T, the allocator's
:class:`~moehub.rtl.count_limit.CountLimit` adds it to its "rows left under the count",
ready as a register when the group's rows ask for grants. (The first version did all of it
in the allocator's cycle: 50.6 FO4, exp_oh through the sums and compares into the room;
with the sums a stage later than here, 30.2 FO4, the sum into the grants.)

Per lane ``j`` (registered twice, A then R):

* ``add``: a count packet (source and expert in range) that is not a repeat;
* ``full``: every source's count of lane j's expert is in once the lanes up to j (lane j's
  own count included) are taken -- for a row, its expert's total is final; for a count
  packet that adds, it is the last one.

Per expert (registered, in R's cycle): ``dtot``, the sum of the counts that add in the
group now in R.

The state is not gated by ``live`` (the packet manager gates what it reports): a count
packet the layer does not take (NOT_ARMED: before START, or after the layer finished)
comes only where no later packet of the layer is taken either, and START, which waits for
an empty pipeline, clears the state.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig, field_bits
from .logic import tree_sum


class CountGate(wiring.Component):
    """Count packets' repeats, completeness and per-group sums (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``count_packets`` is set.

    Attributes
    ----------
    cnt : In(lanes)
        Input lanes: an accepted count packet, source and expert in range.
    src : In(range(sources)).array(lanes) ; expert : In(range(experts)).array(lanes) ;
    count : In(count_bits).array(lanes)
        Input lanes: the packet's source, expert and count field.
    clear : In(1)
        Layer start (the pipeline is empty).
    add, full : Out(lanes)
        R timing (registers): see the module docstring.
    dtot : Out(total_bits).array(experts)
        R timing (registers): per expert, the counts that add in the group in R.
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.count_packets:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}]: the count gate needs count_packets")
        self.cfg = cfg
        L, E, S = cfg.lanes, cfg.experts, cfg.sources
        super().__init__({
            "cnt": In(L), "src": In(range(S)).array(L), "expert": In(range(E)).array(L),
            "count": In(cfg.count_bits).array(L), "clear": In(1),
            "add": Out(L), "full": Out(L), "dtot": Out(total_bits(cfg)).array(E),
        })

    def elaborate(self, platform):
        m = Module()
        L, E, S = self.cfg.lanes, self.cfg.experts, self.cfg.sources
        seen = [Signal(E, name=f"cg_seen{s}") for s in range(S)]
        # the input lanes decoded, and the same registered (A)
        i_src = [Signal(S, name=f"cg_i_src{j}") for j in range(L)]
        i_exp = [Signal(E, name=f"cg_i_exp{j}") for j in range(L)]
        m.d.comb += [i_src[j].eq(Cat(self.src[j] == s for s in range(S))) for j in range(L)]
        m.d.comb += [i_exp[j].eq(Cat(self.expert[j] == x for x in range(E))) for j in range(L)]
        a = {n: [Signal(w, name=f"cg_a_{n}{j}") for j in range(L)]
             for n, w in (("cnt", 1), ("src", S), ("exp", E), ("add", 1), ("cnt_oh", E), ("full", 1),
                          ("count", self.cfg.count_bits), ("src_b", range(S)), ("exp_b", range(E)))}
        m.d.sync += [a["src"][j].eq(i_src[j]) for j in range(L)] + [a["exp"][j].eq(i_exp[j]) for j in range(L)]
        m.d.sync += [a["src_b"][j].eq(self.src[j]) for j in range(L)] + \
            [a["exp_b"][j].eq(self.expert[j]) for j in range(L)]
        m.d.sync += [a["cnt"][j].eq(self.cnt[j]) for j in range(L)]
        # (a count packet of the group in A: not yet in the seen bits)
        a_cnt = a["cnt"]
        for j in range(L):
            self._lane(m, j, seen, i_src, i_exp, a, a_cnt)
        self._sums(m, a)
        for s in range(S):
            # (every count packet of s marks its expert: a repeat's bit is set already)
            new = [Mux(a_cnt[j] & a["src"][j][s], a["exp"][j], 0) for j in range(L)]
            m.d.sync += seen[s].eq(_or_all(seen[s], new))
        with m.If(self.clear):
            m.d.sync += [s_.eq(0) for s_ in seen]
        return m

    def _lane(self, m, j, seen, i_src, i_exp, a, a_cnt):
        """Input lane j's ``add`` and ``full`` into A (and on into R)."""
        L, S = self.cfg.lanes, self.cfg.sources
        cnt, oh = self.cnt, i_exp[j]
        # prior[s]: source s's count of lane j's expert came before lane j -- the seen
        # bit, the group in A, an earlier input lane
        prior = [Signal(name=f"cg_prior{j}_{s}") for s in range(S)]
        for s in range(S):
            m.d.comb += prior[s].eq(Cat(
                (seen[s] & oh).any(),
                *(a_cnt[k] & a["src"][k][s] & (a["exp"][k] & oh).any() for k in range(L)),
                *(cnt[i] & i_src[i][s] & (i_exp[i] & oh).any() for i in range(j))).any())
        # (a repeat: the seen bit of lane j's (source, expert), or the same pair on a count
        # of the group in A or on an earlier lane -- compared as numbers, not through the
        # per-source ``prior`` that ``full`` needs: the decoders' fan-out stays off it)
        same = [a_cnt[k] & (a["src_b"][k] == self.src[j]) & (a["exp_b"][k] == self.expert[j])
                for k in range(L)]
        same += [cnt[i] & (self.src[i] == self.src[j]) & (self.expert[i] == self.expert[j]) for i in range(j)]
        seen_hit = Cat(i_src[j][s] & (seen[s] & oh).any() for s in range(S)).any()
        repeat = seen_hit | Cat(*same).any()
        full = Cat(prior[s] | (cnt[j] & i_src[j][s]) for s in range(S)).all()
        add = Signal(name=f"cg_add{j}")
        m.d.comb += add.eq(cnt[j] & ~repeat)
        # (for the sums: the count zeroed unless it adds -- the late verdict fans out to
        # the count's bits, not to every expert's -- and the expert one-hot of the lane's
        # count packet, from the early valid)
        m.d.sync += [a["add"][j].eq(add), a["count"][j].eq(Mux(add, self.count[j], 0)),
                     a["cnt_oh"][j].eq(Mux(cnt[j], oh, 0)), a["full"][j].eq(full)]
        m.d.sync += [self.add[j].eq(a["add"][j]), self.full[j].eq(a["full"][j])]

    def _sums(self, m, a):
        """Per expert, the counts of the lanes of the group in A that add (into R)."""
        L, E, tb = self.cfg.lanes, self.cfg.experts, total_bits(self.cfg)
        for x in range(E):
            m.d.sync += self.dtot[x].eq(tree_sum([Mux(a["cnt_oh"][j][x], a["count"][j], 0)
                                                  for j in range(L)], tb))


def total_bits(cfg: HubConfig) -> int:
    """Width of an expert's announced total: every source's count may reach count_bits."""
    return field_bits(cfg.sources * ((1 << cfg.count_bits) - 1))


def _or_all(acc, vals):
    """``acc`` ORed with every value of ``vals``."""
    for v in vals:
        acc = acc | v
    return acc
