"""Count packets ahead of the allocator (protocol v2, ``count_packets``): which count
packets add, whether an expert's counts are all in at a lane, and each group's sum.

Why here, two stages ahead of the allocator: which count packets add (a repeat of a
(source, expert) seen in an earlier group or on an earlier lane is COUNT_DUPLICATE and is
ignored), whether every source's count of an expert is in, and the counts' sums depend on
the count packets alone -- not on the rows, the allocator's counters or the layer's other
rules. So they are formed on the way into R, from the A registers (the source one-hot and
the lane-pair compares decoded on the way into A) and a seen bit per (source, expert), and
each group's sum per expert on the way into T. The allocator's cycle then only compares
registers with its counters (:class:`~moehub.rtl.count_limit.CountLimit`): the first
version did all of it there, 50.6 FO4 deep (exp_oh through the sums and compares into the
allocator's room).

Per lane ``j`` (registered, in R's cycle):

* ``add``: a count packet (source and expert in range) that is not a repeat;
* ``full``: every source's count of lane j's expert is in once the lanes up to j (lane j's
  own count included) are taken -- for a row, its expert's total is final; for a count
  packet that adds, it is the last one.

Per expert (registered, in T's cycle): ``dtot``, the sum of the counts that add in the
group now in T.

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
        A registers: lane j holds a count packet, source and expert in range.
    src_oh : In(sources).array(lanes) ; expert : In(range(experts)).array(lanes) ;
    count : In(count_bits).array(lanes)
        A registers: the lane's source (one-hot), expert and count field.
    same_src, same_exp : In(lanes).array(lanes)
        A registers: bit i of lane j, lane i < j has the same source / expert.
    clear : In(1)
        Layer start (the pipeline is empty).
    add, full : Out(lanes)
        R timing (registers): see the module docstring.
    dtot : Out(total_bits).array(experts)
        T timing (registers): per expert, the counts that add in the group.
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.count_packets:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}]: the count gate needs count_packets")
        self.cfg = cfg
        L, E, S = cfg.lanes, cfg.experts, cfg.sources
        super().__init__({
            "cnt": In(L), "src_oh": In(S).array(L), "expert": In(range(E)).array(L),
            "count": In(cfg.count_bits).array(L),
            "same_src": In(L).array(L), "same_exp": In(L).array(L), "clear": In(1),
            "add": Out(L), "full": Out(L), "dtot": Out(total_bits(cfg)).array(E),
        })

    def elaborate(self, platform):
        m = Module()
        L, E, S = self.cfg.lanes, self.cfg.experts, self.cfg.sources
        seen = [Signal(E, name=f"cg_seen{s}") for s in range(S)]
        oh = [Signal(E, name=f"cg_oh{j}") for j in range(L)]
        m.d.comb += [oh[j].eq(Cat(self.expert[j] == x for x in range(E))) for j in range(L)]
        # (seen[s] at lane j's expert, for every source: read once, used by both verdicts)
        seen_at = [[Signal(name=f"cg_seen{j}_{s}") for s in range(S)] for j in range(L)]
        m.d.comb += [seen_at[j][s].eq((seen[s] & oh[j]).any()) for j in range(L) for s in range(S)]
        adds = [self._lane(m, j, seen_at[j]) for j in range(L)]
        self._sums(m, oh, adds)
        for s in range(S):
            # (every count packet of s marks its expert: a repeat's bit is set already)
            new = [Mux(self.cnt[j] & self.src_oh[j][s], oh[j], 0) for j in range(L)]
            m.d.sync += seen[s].eq(_or_all(seen[s], new))
        with m.If(self.clear):
            m.d.sync += [s_.eq(0) for s_ in seen]
        return m

    def _lane(self, m, j, seen_at):
        """Lane j's ``add`` and ``full`` (registered); returns ``add`` before its register."""
        S = self.cfg.sources
        cnt, src_oh, same_exp = self.cnt, self.src_oh, self.same_exp[j]
        repeat_in_group = Cat(Const(0), *(cnt[i] & self.same_src[j][i] & same_exp[i] for i in range(j))).any()
        repeat_seen = Cat(src_oh[j][s] & seen_at[s] for s in range(S)).any()
        # (a source's count of lane j's expert is in: seen, or a count packet of that
        # source on an earlier lane of the expert, or lane j's own)
        has = [Cat(seen_at[s], cnt[j] & src_oh[j][s],
                   *(cnt[i] & src_oh[i][s] & same_exp[i] for i in range(j))).any() for s in range(S)]
        add = Signal(name=f"cg_add{j}")
        m.d.comb += add.eq(cnt[j] & ~repeat_seen & ~repeat_in_group)
        m.d.sync += [self.add[j].eq(add), self.full[j].eq(Cat(*has).all())]
        return add

    def _sums(self, m, oh, adds):
        """Per expert, the counts of the lanes that add (the adding lanes' expert one-hot
        and count registered in R's cycle, their sums in T's)."""
        L, E, tb = self.cfg.lanes, self.cfg.experts, total_bits(self.cfg)
        add_oh = [Signal(E, name=f"cg_add_oh{j}") for j in range(L)]
        count = [Signal(self.cfg.count_bits, name=f"cg_count{j}") for j in range(L)]
        m.d.sync += [add_oh[j].eq(Mux(adds[j], oh[j], 0)) for j in range(L)]
        m.d.sync += [count[j].eq(self.count[j]) for j in range(L)]
        for x in range(E):
            m.d.sync += self.dtot[x].eq(tree_sum([Mux(add_oh[j][x], count[j], 0) for j in range(L)], tb))


def total_bits(cfg: HubConfig) -> int:
    """Width of an expert's announced total: every source's count may reach count_bits."""
    return field_bits(cfg.sources * ((1 << cfg.count_bits) - 1))


def _or_all(acc, vals):
    """``acc`` ORed with every value of ``vals``."""
    for v in vals:
        acc = acc | v
    return acc
