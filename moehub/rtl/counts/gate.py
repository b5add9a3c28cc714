"""Count packets ahead of the allocator (protocol v2, ``count_packets``): which count
packets add, whether an expert's counts are all in at a lane, and each group's sum.

Why here, three stages ahead of the allocator: which count packets add (a repeat of a
(source, expert) seen in an earlier group is COUNT_DUPLICATE and is ignored), whether
every source's count of an expert is in, and the counts' sums depend on the count packets
alone -- not on the rows, the allocator's counters or the layer's other rules. So they are
formed while the group is in A, from registers: the input lanes' source and expert
one-hots (decoded on the way in: a compare with a constant each) and a seen bit per
(source, expert), which already holds every group ahead (the group right ahead was added
as it left A). They are registered into R; while the group is in T, the allocator's
:class:`~moehub.rtl.counts.limit.CountLimit` adds the group's sum to its "rows left under
the count", ready as a register when the group's rows ask for grants. (The first version
did all of it in the allocator's cycle: 50.6 FO4; the verdicts on the way into A, from the
input ports, 25.3 FO4 at 32 experts: the seen bit's lookup and the zeroed count behind
the input decode.)

The packet manager's input takes at most one count packet a group (the lanes up to the
second: :meth:`~moehub.rtl.packet_manager.PacketManager._admission`; a source sends one
count per expert and layer, a few hundred packets beside tens of thousands of chunks), so
no count packet has another of its group ahead of it: a repeat is a seen bit only, and a
group's sum per expert is its one count, chosen by an AND-OR rather than added.

Per lane ``j`` (registered into R):

* ``add``: a count packet (source and expert in range) that is not a repeat;
* ``full``: every source's count of lane j's expert is in once the lanes up to j (lane j's
  own count included) are taken -- for a row, its expert's total is final; for a count
  packet that adds, it is the last one.

Per expert (registered, in R's cycle): ``dtot``, the count that adds in the group now in
R (0 if none).

The state is not gated by ``live`` (the packet manager gates what it reports): a count
packet the layer does not take (NOT_ARMED: before START, or after the layer finished)
comes only where no later packet of the layer is taken either, and START, which waits for
an empty pipeline, clears the state.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig, field_bits


class CountGate(wiring.Component):
    """Count packets' repeats, completeness and per-group sums (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``count_packets`` is set.

    Attributes
    ----------
    cnt : In(lanes)
        Input lanes: an accepted count packet, source and expert in range (at most one
        a group: the packet manager's admission).
    src : In(range(sources)).array(lanes) ; expert : In(range(experts)).array(lanes) ;
    count : In(count_bits).array(lanes)
        Input lanes: the packet's source, expert and count field.
    clear : In(1)
        Layer start (the pipeline is empty).
    add, full : Out(lanes)
        R timing (registers): see the module docstring.
    dtot : Out(total_bits).array(experts)
        R timing (registers): per expert, the count that adds in the group in R.
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
        # A: the input lanes' count bit, source and expert one-hots and count, registered
        a = {n: [Signal(w, name=f"cg_a_{n}{j}") for j in range(L)]
             for n, w in (("cnt", 1), ("src", S), ("exp", E), ("count", self.cfg.count_bits))}
        for j in range(L):
            m.d.sync += [a["cnt"][j].eq(self.cnt[j]), a["count"][j].eq(self.count[j]),
                         a["src"][j].eq(Cat(self.src[j] == s for s in range(S))),
                         a["exp"][j].eq(Cat(self.expert[j] == x for x in range(E)))]
        for j in range(L):
            self._lane(m, j, seen, a)
        self._sums(m, a, seen)
        for s in range(S):
            # (every count packet of s marks its expert: a repeat's bit is set already)
            new = [Mux(a["cnt"][j] & a["src"][j][s], a["exp"][j], 0) for j in range(L)]
            m.d.sync += seen[s].eq(_or_all(seen[s], new))
        with m.If(self.clear):
            m.d.sync += [s_.eq(0) for s_ in seen]
        return m

    def _lane(self, m, j, seen, a):
        """Lane j's ``add`` and ``full``, from A's registers into R."""
        S, cnt, oh = self.cfg.sources, a["cnt"], a["exp"][j]
        # seen[s] & oh: source s's count of lane j's expert came in a group ahead
        had = [Signal(name=f"cg_had{j}_{s}") for s in range(S)]
        m.d.comb += [had[s].eq((seen[s] & oh).any()) for s in range(S)]
        # prior[s]: ... or on an earlier lane of the group (a count packet; at most one)
        prior = [had[s] | Cat(cnt[k] & a["src"][k][s] & (a["exp"][k] & oh).any() for k in range(j)).any()
                 for s in range(S)]
        add = Signal(name=f"cg_add{j}")
        m.d.comb += add.eq(cnt[j] & ~Cat(a["src"][j][s] & had[s] for s in range(S)).any())
        full = Cat(prior[s] | (cnt[j] & a["src"][j][s]) for s in range(S)).all()
        m.d.sync += [self.add[j].eq(add), self.full[j].eq(full)]

    def _sums(self, m, a, seen):
        """Per expert, the count of the group's count packet if it adds (into R): at most
        one a group, so an AND-OR over the lanes, not a sum. Whether lane j's count of
        expert x adds is its own test, ``seen`` of (lane j's source, x) -- not lane j's
        ``add``, which looks the seen bit up behind the expert's decode (an OR over the
        experts) and fans out to every expert's count bits: 22.6 FO4 at two nodes (16
        sources x 16 experts)."""
        L, E, S, tb = self.cfg.lanes, self.cfg.experts, self.cfg.sources, total_bits(self.cfg)
        for x in range(E):
            adds = [a["cnt"][j] & a["exp"][j][x] & ~Cat(a["src"][j][s] & seen[s][x] for s in range(S)).any()
                    for j in range(L)]
            m.d.sync += self.dtot[x].eq(_or_all(Const(0, tb), [Mux(adds[j], a["count"][j], 0) for j in range(L)]))


def total_bits(cfg: HubConfig) -> int:
    """Width of an expert's announced total: every source's count may reach count_bits."""
    return field_bits(cfg.sources * ((1 << cfg.count_bits) - 1))


def _or_all(acc, vals):
    """``acc`` ORed with every value of ``vals``."""
    for v in vals:
        acc = acc | v
    return acc
