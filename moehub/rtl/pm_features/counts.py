"""Count packets in the packet manager (protocol v2, ``count_packets``), or none.

With ``count_packets`` a count packet (kind 2: a source's row count for one expert) takes
any lane and no row, credit or data write. It passes A, R and T as a packet (NOT_ARMED,
BAD_SOURCE; BAD_EXPERT for an expert out of range); the input takes one a group. The
:class:`~moehub.rtl.counts.gate.CountGate` beside A decides whether it adds (a repeat is
COUNT_DUPLICATE) and whether a lane's expert has every count in, and forms the group's
count per expert, all into R; the allocator's count limit
(:class:`~moehub.rtl.counts.limit.CountLimit`, or for multicast rows
:class:`~moehub.rtl.counts.multicast_limit.MulticastCountLimit`) takes the sums in while
the group is in T and refuses, in the allocator's cycle and in lane order, a row of an
expert whose counts are met (COUNT_MISMATCH, like POST_EOS: its credit returns), and
counts a last count below the rows already in (COUNT_MISMATCH). An applied count goes on
as an event, in lane order, so that the tracker sees it where the model does.

:class:`NoCounts` is protocol v1's packet kinds (data 0, EOS 1): every hook adds nothing,
so a hub without count packets has the netlist it had before they existed.
:func:`count_feature` chooses one of the two when the packet manager is built.
"""
from amaranth import Cat, Mux, Signal
from amaranth.lib.wiring import In, Out

from ...spec.formats import PacketKind, Reason
from ..counts.gate import CountGate
from ..logic import at_least, lane_bits, register_copies
from ..multicast_allocator import CNT_DEAD_COPIES


class NoCounts:
    """No count packets: a packet's kind is one bit, data 0 and EOS 1."""

    def __init__(self, pm):
        self.pm, self.cfg = pm, pm.cfg

    def ports(self) -> dict:
        return {}

    def multicast_ports(self) -> dict:
        return {}

    def r_fields(self) -> dict:
        return {}

    def t_fields(self) -> dict:
        return {}

    def al_fields(self) -> dict:
        return {}

    def kinds(self, kind):
        """``(data, eos, count)`` of a packet's kind field (count: None)."""
        return ~kind, kind, None

    def input_waits(self, m):
        """Per lane, whether the input holds it for the next group: never."""
        return None

    def stage_a(self, m):
        pass

    def stage_r(self, m, kinds):
        pass

    def r_cnt(self, r):
        """R's count-packet bit: None (a term this hub does not have)."""
        return None

    def t_lane(self, m, v, j, r, t):
        pass

    def request_bits(self, T):
        """The row requests to the unicast allocator: T's ``req`` (zero without a request)."""
        return lane_bits(T, "req")

    def request_expert(self, t):
        """A request's expert one-hot to the unicast allocator (zero without a request)."""
        return t.req_oh

    def unicast_limits(self, m, v):
        pass

    def multicast_limits(self, m, decs):
        pass

    def al_lane(self, m, j, t, al):
        pass

    def ovf(self, ovf, j):
        """Lane j's request refused for room: every refusal."""
        return ovf

    def al_cnt(self, al):
        """AL's count packet that adds (an event for the tracker): None."""
        return None

    def ri_event(self, m, b, al):
        pass

    def reasons(self) -> list:
        return []


class CountPackets(NoCounts):
    """Count packets: the count gate beside A, the verdicts carried down T and AL, the
    count limit's inputs to the allocator, the applied counts as events."""

    def ports(self) -> dict:
        # the tracker's pulse: an expert short of its announced rows at the sweep
        # (COUNT_MISMATCH)
        return {"sweep_short": In(1)}

    def multicast_ports(self) -> dict:
        # copies of the count refusal's registers for the multicast allocator's sure grants
        return {"alloc_cnt_dead_q": Out(self.cfg.lanes).array(CNT_DEAD_COPIES)}

    #: in R and T a count packet (then checked: live, expert in range); in T also the count
    #: gate's verdicts (it adds, it repeats; the lane's expert has every count in) and the
    #: row request for the count limit; in AL whether it adds (an event for the tracker)
    #: and the count limit's verdicts (a row refused, a completing count below the rows)
    def r_fields(self) -> dict:
        return {"cnt": 1}

    def t_fields(self) -> dict:
        return {"cnt": 1, "cadd": 1, "cdup": 1, "cfull": 1, "cand": 1}

    def al_fields(self) -> dict:
        return {"cnt": 1, "met": 1, "over": 1}

    def kinds(self, kind):
        """EOS 1 and COUNT 2, anything else a chunk (as the model reads it)."""
        eos, cnt = kind == PacketKind.EOS, kind == PacketKind.COUNT
        return ~(eos | cnt), eos, cnt

    def input_waits(self, m):
        """Every lane behind a count packet waits: the
        :class:`~moehub.rtl.counts.gate.CountGate` sees at most one a group, and no row of
        a group is behind a count packet -- where a count adds to an expert, every row of
        it in the group comes before its counts are all in, so the count limits'
        registers may leave the group's own count out of the next verdicts
        (:mod:`~moehub.rtl.counts.limit`, :mod:`~moehub.rtl.counts.multicast_limit`)."""
        pm, L = self.pm, self.cfg.lanes
        cnt = Signal(L, name="in_cnt")
        m.d.comb += cnt.eq(Cat(pm.i[j].valid & self.kinds(pm.i[j].payload.kind)[2] for j in range(L)))
        return [None] + [cnt[:j].any() for j in range(1, L)]

    def stage_a(self, m):
        """The :class:`CountGate` beside A: which count packets add, whether a lane's
        expert has every count in (both on to T), the group's count per expert (for the
        allocator's count limit, while the group is in T)."""
        pm, cfg = self.pm, self.cfg
        m.submodules.counts = pm.gate = gate = CountGate(cfg)
        m.d.comb += gate.clear.eq(pm.start_go)
        for j in range(cfg.lanes):
            q = pm.i[j].payload
            expert = pm.rows.count_expert(q)
            m.d.comb += [gate.cnt[j].eq(self.kinds(q.kind)[2] & (q.src < cfg.sources)
                                        & (expert < cfg.experts) & pm.acc[j]),
                         gate.src[j].eq(q.src), gate.expert[j].eq(expert), gate.count[j].eq(q.count)]

    def stage_r(self, m, kinds):
        m.d.sync += [r.cnt.eq(a.valid & k[2] & ~a.bad_src) for a, r, k in zip(self.pm.a, self.pm.r, kinds)]

    def r_cnt(self, r):
        return r.cnt

    def t_lane(self, m, v, j, r, t):
        """T's count fields of lane j: a live count packet, whether it adds or repeats, the
        gate's ``full``, and the row request (a register: the count limit's thresholds
        and the grants behind it start from flops)."""
        pm = self.pm
        live, add = pm.live, pm.gate.add[j]
        m.d.sync += [t.cnt.eq(live & r.cnt & ~r.bad_exp), t.cadd.eq(live & add),
                     t.cdup.eq(live & r.cnt & ~r.bad_exp & ~add), t.cfull.eq(pm.gate.full[j]),
                     t.cand.eq(live & v["opener"][j] & ~r.bad_exp & ~v["post"][j])]

    def request_bits(self, T):
        """The count limit reads the request ``cand`` and the raw expert one-hot."""
        return lane_bits(T, "cand")

    def request_expert(self, t):
        return t.exp_oh

    def unicast_limits(self, m, v):
        """Per expert, how many rows T asks for (at least n, n = 1..lanes), and how many of
        them come before the expert's counts are all in, as thermometers for the
        allocator's grants (``min(requests, room, the counts' allowance)``). Wires the
        count gate's and T's count fields to the allocator.

        The requests' thermometer is counted in the allocator's cycle, from T's registers
        (each lane's request one-hot, zero without a request), as the uncounted allocator
        counts them: formed here from the POST_EOS verdict, fanned out over every expert's
        thresholds, it was the hub's deepest path, R's ``first`` -> the openers ->
        ``post`` -> ``nge``, 22.6 FO4 at deepseek-v3-8gpu with count packets; the
        allocator's update behind it is shallow (15 FO4 there). The allowance's ``free``
        stays registered: it feeds every lane's verdict and the page gate."""
        pm, cfg = self.pm, self.cfg
        L, E, R, T, armed = cfg.lanes, cfg.experts, pm.r, pm.t, pm.armed
        # (``free`` gated by ``armed``, a register, not by ``live``: once the layer is
        # finished every source's EOS is in and its count reached, so every opener is
        # POST_EOS already and ``cand`` is 0 -- ``live`` adds nothing here, and the layer's
        # ``finished``, an AND over the sources, stays off every expert's ``free``. Its
        # deepest input is ``post`` itself, the POST_EOS verdict: 20.0 FO4 at
        # deepseek-v3-8gpu with count packets.)
        cand = [v["opener"][j] & ~r.bad_exp & ~v["post"][j] for j, r in enumerate(R)]
        for x in range(E):
            free = [cand[j] & (r.pkt.expert == x) & ~pm.gate.full[j] for j, r in enumerate(R)]
            nge, fge = Signal(L, name=f"t_nge{x}"), Signal(L, name=f"t_free{x}")
            # (T's request one-hots carry ``live``: zero when the layer is not armed)
            m.d.comb += nge.eq(Cat(at_least([t.req_oh[x] for t in T], n) for n in range(1, L + 1)))
            m.d.sync += fge.eq(Mux(armed, Cat(at_least(free, n) for n in range(1, L + 1)), 0))
            m.d.comb += [pm.alloc.nge[x].eq(nge), pm.alloc.free[x].eq(fge),
                         pm.alloc.dtot[x].eq(pm.gate.dtot[x])]
        # (the count limit in the allocator: every input a register)
        m.d.comb += [pm.alloc.full.eq(lane_bits(T, "cfull")), pm.alloc.add.eq(lane_bits(T, "cadd"))]

    def multicast_limits(self, m, decs):
        """The multicast count limit's inputs: per lane, whether its row names an expert
        the count limit holds ``dead`` now (a roomy lane's count refusal, exact a cycle
        later: see the allocator's ``sure``), and one of ``dead``'s next value for either
        verdict of the risky lane now (``cref_q``: the exact refusal, chosen by that
        verdict in T), registered into T from R's target decode ``decs``; copies of the
        first for the allocator's per-expert sure grants; the count gate's verdicts and
        sums. (No lane behind a count packet asks for a row: the input admission ends a
        group there.)"""
        pm, cfg = self.pm, self.cfg
        L, E, T, g = cfg.lanes, cfg.experts, cfg.max_targets, pm.alloc
        dead_next = []
        for j in range(L):
            names = Cat(Cat(decs[j].oh[t][x] for t in range(T)).any() for x in range(E))
            dead = Signal(name=f"t_cnt_dead_next{j}")
            m.d.comb += dead.eq((names & g.dead).any())
            m.d.sync += g.cnt_dead[j].eq(dead)
            dead_next.append(dead)
            # (the exact refusal of the cycle after, for either late verdict now)
            m.d.sync += [g.cref_q[k][j].eq((names & g.dead_next_if[k]).any()) for k in (0, 1)]
        self._dead_copies(m, dead_next)
        m.d.comb += [g.cnt_add.eq(lane_bits(pm.t, "cadd")), g.cnt_full.eq(lane_bits(pm.t, "cfull"))]
        m.d.comb += [g.dtot[x].eq(pm.gate.dtot[x]) for x in range(E)]

    def _dead_copies(self, m, dead_next):
        """Copies of the ``cnt_dead`` registers for the allocator's per-expert sure grants,
        each copy read by a share of the experts. Synthesis merges flops whose next value
        and reset agree, so the copies differ in one or the other: held inverted, reset to
        1, or loaded with their reset value at a layer start (harmless: no lane requests
        before the first group or in the cycle after a layer start, and they are
        rewritten every cycle)."""
        pm = self.pm
        copies = register_copies(m, Cat(*dead_next), len(pm.alloc_cnt_dead_q), "t_cnt_dead_copy",
                                 clear=pm.start_go)
        m.d.comb += [q.eq(c) for q, c in zip(pm.alloc_cnt_dead_q, copies)]

    def al_lane(self, m, j, t, al):
        alloc = self.pm.alloc
        m.d.sync += [al.cnt.eq(t.cadd), al.met.eq(alloc.met[j]), al.over.eq(alloc.over[j])]

    def ovf(self, ovf, j):
        """Refused for room, not for counts (that is COUNT_MISMATCH)."""
        return ovf & ~self.pm.alloc.met[j]

    def al_cnt(self, al):
        return al.cnt

    def ri_event(self, m, b, al):
        m.d.sync += [b.ev.cnt.eq(al.cnt), b.ev.count.eq(al.pkt.count)]

    def reasons(self) -> list:
        """The count verdicts: of the group in AL (rows refused for counts and completing
        counts below the rows already in: COUNT_MISMATCH), of the group in T (repeats:
        COUNT_DUPLICATE), and the sweep's experts short of their counts."""
        pm = self.pm
        # (a lane is a row or a count packet, never both; the sweep pulses only once the
        # layer is over, when no lane is live: at most ``lanes`` bits are set at once)
        return [(Reason.COUNT_MISMATCH, [al.met | al.over for al in pm.al] + [pm.sweep_short]),
                (Reason.COUNT_DUPLICATE, [t.cdup for t in pm.t])]


def count_feature(pm):
    """The packet manager's count-packet strategy for its config."""
    return CountPackets(pm) if pm.cfg.count_packets else NoCounts(pm)
