"""A relay hub's input (protocol v3): each lane's packet sorted by its class, a forward
row turned into protocol v2's multicast packet for the packet manager.

::

    i[j] (RelayFormats.lane) --cls--+-- DIRECT  ------------------------------> o[j] (HubFormats.packet)
                                    |            (a data packet of another node's GPU: dropped)
                                    +-- FORWARD --> ForwardCheck --> packet --> o[j]
                                    |                    `-- bad: dropped, counted
                                    +-- RELAY   --> relay_verdict --+--> own targets' packet --> o[j]
                                    |                               `--> relay (one lane a cycle,
                                    |                                    the lowest: the staging)
                                    `-- PARTIAL --> partial_verdict --> part (one lane a cycle, the
                                                         |              lowest: the partial staging)
                                                         `-- bad: counted (BAD_PARTIAL); a bad owner's
                                                             chunk still to the staging, for its credit

Reference: :func:`moehub.spec.relay.ingress`, per lane; tests/test_rtl_relay_ingress.py
checks every lane's outcome against it, and the whole :class:`~.hub.RelayHub` in
lock-step with a plain :class:`~moehub.rtl.hub.MoEHub` fed the converted packets.

Why a forward row needs no change to the packet manager: it is a multicast row of its
original source, and the forward tag can be its tag there -- a remote source sends this
GPU no direct rows (they are dropped here), and its relay's forward tags towards this
GPU are distinct among the rows in flight, so the packet manager's (source, tag) row is
the forward's alone (``forward_tags`` <= ``tags_per_source``, a contract check). The
metadata words then carry the original source, as the model's ``LocalRow``. The row's
credit, (original source, forward tag), is the forward credit of that source's rank's
relay: the credit port's consumer routes a credit of a remote source of another rank
there.

A relay row's chunk (a remote source of this GPU's rank) is checked as the forward unit
checks it (:func:`~.forward_unit.relay_verdict`). A good one goes to the relay side
(``relay``, a :class:`~.layouts.RelayLayouts` ``stage``: the staging keeps the chunk for
the forwards and hands the row to the forward unit once it is whole) and, if the row
names targets on this GPU, to the packet manager as protocol v2's multicast packet of
its original source with the row's tag, its entries this GPU's in the row's order
(:func:`~.forward_unit.pack_entries`): the packet manager writes them as any multicast row
and returns (source, tag) when the row is written, which the relay's credit join takes.
An unknown source is dropped (no credit is owed); a bad GPU or bad targets are dropped
and counted, the chunk still to the relay side with ``drop`` set (the row's credit
returns once its chunks are in). Relay rows cross the NIC, at a fraction of the lanes'
rate, so ``relay`` takes one chunk a cycle, the lowest lane's; a relay chunk of a higher
lane waits a cycle (a lane's order against the others' does not matter: the packet
manager and the staging take a row's chunks in any order).

Per lane, the checks (compares with the NODE_ID and LOCAL_RANK registers and pairwise
entry compares) registered with the word, then the class decode and a select of the
packet's fields into a ``LANE_DEPTH``-deep buffer whose output is a register: the packet
manager's input registers decode the packet again on the way in (the conversion in front
of them was 25.7 FO4 at 2 nodes alone; behind the checks into the buffer, 32.9; the
buffer's write waiting for the relay stream's grant, 25.8). Which outputs a word owes (a
packet, a relay chunk, a partial chunk) is decided as it is registered, from the input
word and its checks, so the lane's leave -- the enable of its word register, a fan-out of
some 150 flops -- starts at registers (decided from the registered word's class and
flags, 22.4-22.8 FO4 at 2 and 8 nodes alone). A lane's
register takes the next word as it hands this one on: to its buffer for the packet
manager, to the relay side for a relay chunk (a chunk with own targets to both, each part
once, as each side has room: neither waits for the other's handshake), at once for a
dropped packet (nothing written): registers only, never the packet manager's
admission. Each lane stays in order; across lanes a packet may reach the packet
manager a cycle before one that came on a lower lane with it, which the packet manager
takes as it takes any arrival order (a row's chunks in any order, an end-of-stream count
before its rows).

Both streams leave through an output register (valid and payload), refilled when it is
empty or its chunk leaves: the lanes' grant waits only on that register and the
staging's ready (itself a register), and the staging's slot decode starts at a flop.
(Without it, a lane's relay flag through the grant, the lane select and the staging's slot
and one-hot was the whole relay hub's deepest path at 4 nodes: 26.2 FO4.) A chunk reaches
its staging a cycle later; one a cycle still flows.

A partial row's chunk (an expert's output row of this node for the reduce of a remote
token, :func:`moehub.spec.relay.partial_verdict`): its sender and P tag checked against the
P window, its owner against this hub (a remote GPU of its local rank), both registered
with the word. A good chunk goes to ``part`` (the partial staging, which hands the reduce
each row whole); a bad owner's too, with ``drop`` (the credit is owed once its chunks are
in); a chunk outside the window is dropped (nothing can have sent it: no credit). Partial
rows come over NVLink at up to the link's rate, but the reduce takes a chunk a cycle, so
``part`` takes one chunk a cycle too, the lowest lane's (an arbiter of its own beside the
relay chunks': a lane's partial chunk and another's relay chunk leave in one cycle).

Counters (lag their events by one cycle, as the relay's: an event registered in the cycle
it happens, the lanes' events added in the next): ``fwd_in``, good forward rows; ``drops``
per :class:`~moehub.spec.formats.RelayReason` -- a row counted once, on its chunk 0 (a bad
forward row, a direct data row of another node's GPU); ``bad_partials``, partial rows
dropped here (the reduce's BAD_PARTIAL), once per row, on its chunk 0.
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ...spec.formats import PacketKind, RelayFormats, RelayReason, RowClass
from ..layouts import HubLayouts, struct
from ..logic import popcount, select
from .forward_check import ForwardCheck
from .forward_unit import pack_entries, relay_verdict
from .layouts import RelayLayouts, refuse_without_relay

#: packets a lane's buffer holds for the packet manager (its output a register; 3: a packet
#: a cycle while the packet manager takes one a cycle)
LANE_DEPTH = 3


class RelayIngress(wiring.Component):
    """The relay hub's input (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``relay: true``.

    Attributes
    ----------
    i : In(stream of lane_bits).array(lanes)
        The hub's input lanes (:class:`~moehub.spec.formats.RelayFormats` ``lane``).
    o : Out(stream of HubLayouts.packet).array(lanes)
        To the packet manager's lanes.
    relay : Out(stream of RelayLayouts.stage)
        Relay rows' chunks, for the relay side's staging (one a cycle).
    part : Out(stream of RelayLayouts.pstage)
        Partial rows' chunks, for the partial staging (one a cycle).
    node, rank : In
        This hub's node and local rank (NODE_ID, LOCAL_RANK).
    fwd_in : Out(32); drops : Out(32).array(len(RelayReason)); bad_partials : Out(32)
        Good forward rows; rows dropped here, per reason; partial rows dropped here (all a
        cycle late).
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a relay input")
        self.cfg = cfg
        self.fmts = fmts = RelayFormats(cfg)
        self.lay = HubLayouts(cfg)
        self.rlay = RelayLayouts(cfg)
        L = cfg.lanes
        self.checks = [ForwardCheck(cfg) for _ in range(L)]
        super().__init__({
            "i": In(stream.Signature(fmts.lane_bits)).array(L),
            "o": Out(stream.Signature(self.lay.packet)).array(L),
            "relay": Out(stream.Signature(self.rlay.stage)),
            "part": Out(stream.Signature(self.rlay.pstage)),
            "node": In(cfg.node_bits), "rank": In(cfg.gpu_bits),
            "fwd_in": Out(32),
            "drops": Out(32).array(len(RelayReason)),
            "bad_partials": Out(32),
        })

    @staticmethod
    def _lowest_lane(m, want: list, ready, name: str) -> tuple:
        """Per lane, whether it holds the one stream all lanes share this cycle (the lowest
        lane that wants it: ``<name>_grant<j>``) and whether its chunk goes (granted, the
        stream ready: ``<name>_ok<j>``); both lists."""
        L = len(want)
        grant = [Signal(name=f"{name}_grant{j}") for j in range(L)]
        m.d.comb += [grant[j].eq(want[j] & ~Cat(*want[:j]).any() if j else want[0]) for j in range(L)]
        ok = [Signal(name=f"{name}_ok{j}") for j in range(L)]
        m.d.comb += [ok[j].eq(grant[j] & ready) for j in range(L)]
        return grant, ok

    @staticmethod
    def _out_room(m, out, name: str):
        """Whether the output register of the stream ``out`` (its valid and payload, both
        registers) takes a chunk this cycle: empty, or its chunk leaving (``out.ready``, the
        staging's register) -- two registers' OR, so the lanes' grant behind it starts at
        flops and the staging's slot decode in front of it too."""
        room = Signal(name=f"{name}_room")
        m.d.comb += room.eq(~out.valid | out.ready)
        return room

    def elaborate(self, platform):
        m = Module()
        cfg, L = self.cfg, self.cfg.lanes
        # the first global id of this node (NODE_ID x gpus_per_node: a register's product)
        node_lo = Signal(cfg.src_bits + cfg.node_bits, name="node_lo")
        m.d.comb += node_lo.eq(self.node * cfg.node_gpus)
        #: per lane, the packets for the packet manager, registered (LANE_DEPTH deep)
        self.bufs = [SyncFIFOBuffered(width=self.lay.packet.size, depth=LANE_DEPTH) for _ in range(L)]
        ev_in = Signal(L, name="ev_fwd_in")
        ev_drop = [Signal(L, name=f"ev_drop_{r.name.lower()}") for r in RelayReason]
        # the relay chunks: the lowest lane holding one is the relay stream's (its grant)
        self.want_rel = [Signal(name=f"want_rel{j}") for j in range(L)]
        self.stage = [Signal(self.rlay.stage, name=f"stage{j}") for j in range(L)]
        rel_room = self._out_room(m, self.relay, "relay")
        grant, self.rel_ok = self._lowest_lane(m, self.want_rel, rel_room, "rel")
        # the partial chunks: the lowest lane holding one is the partial stream's
        self.want_par = [Signal(name=f"want_par{j}") for j in range(L)]
        self.pstage = [Signal(self.rlay.pstage, name=f"pstage{j}") for j in range(L)]
        par_room = self._out_room(m, self.part, "part")
        pgrant, self.par_ok = self._lowest_lane(m, self.want_par, par_room, "par")
        ev_badp = Signal(L, name="ev_bad_partial")
        rel_fire, par_fire = [], []
        for j in range(L):
            m.submodules[f"check{j}"] = self.checks[j]
            m.submodules[f"buf{j}"] = self.bufs[j]
            good, first, reason, fires_rel, fire, badp = self._lane(m, j, node_lo)
            rel_fire.append(fires_rel)
            par_fire.append(self.par_ok[j])
            m.d.sync += ev_in[j].eq(fire & good & first)
            m.d.sync += ev_badp[j].eq(fire & badp & first)
            for r in RelayReason:
                m.d.sync += ev_drop[r][j].eq(fire & reason[r])
        with m.If(rel_room):
            m.d.sync += [self.relay.valid.eq(Cat(*rel_fire).any()),
                         self.relay.payload.eq(select([(grant[j], self.stage[j].as_value()) for j in range(L)],
                                                      self.rlay.stage.size))]
        with m.If(par_room):
            m.d.sync += [self.part.valid.eq(Cat(*par_fire).any()),
                         self.part.payload.eq(select([(pgrant[j], self.pstage[j].as_value()) for j in range(L)],
                                                     self.rlay.pstage.size))]
        self._counters(m, ev_in, ev_drop, ev_badp)
        return m

    def _relay_row(self, m, word, name: str):
        """A lane word's relay-row fields as a :class:`~.layouts.RelayLayouts` ``row``."""
        T, fmts = self.cfg.relay_targets, self.fmts
        rr = data.View(struct(fmts.relay_row), word[:fmts.relay_row.width])
        row = Signal(self.rlay.row, name=name)
        m.d.comb += [row.src_node.eq(rr.src_node), row.src_rank.eq(rr.src_rank), row.tag.eq(rr.tag),
                     row.token.eq(rr.token), row.valid.eq(Cat(*(getattr(rr, f"valid{t}") for t in range(T))))]
        for t in range(T):
            m.d.comb += [getattr(row, k)[t].eq(getattr(rr, f"{k}{t}")) for k in ("gpu", "expert", "slot", "weight")]
        return rr, row

    def _relay_checks(self, m, j: int, word):
        """The checks of lane ``j``'s input word as a relay row's chunk, for its register:
        (bad source, bad GPU, bad targets), its entries naming this GPU."""
        T = self.cfg.relay_targets
        _, row = self._relay_row(m, word, f"in_rrow{j}")
        bs, bg, bt = relay_verdict(m, self.cfg, self.node, self.rank, row, name=f"lane{j}_")
        loc = Signal(T, name=f"in_rloc{j}")
        m.d.comb += loc.eq(Cat(*(row.valid[t] & (row.gpu[t] == self.rank) for t in range(T))))
        return (bs, bg, bt), loc

    def _relay_lane(self, m, j: int, word, verdict, loc):
        """Lane ``j``'s registered word as a relay row's chunk (its registered ``verdict``
        and ``loc``): its own targets' packet and its stage payload (``self.stage[j]``)."""
        cfg = self.cfg
        T, M, G = cfg.relay_targets, cfg.max_targets, cfg.node_gpus
        rr, row = self._relay_row(m, word, f"rrow{j}")
        bs, bg, bt = verdict
        lv, lx, ls = pack_entries(m, loc, T, row.expert, row.slot, M, f"own{j}")
        own = data.View(self.lay.packet, Signal(self.lay.packet.size, name=f"own_pkt{j}"))
        m.d.comb += [own.kind.eq(PacketKind.DATA), own.src.eq((rr.src_node * G + rr.src_rank)[:cfg.src_bits]),
                     own.tag.eq(rr.tag), own.token.eq(rr.token), own.chunk.eq(rr.chunk), own.count.eq(0),
                     own.data.eq(rr.data)]
        self._entries(m, own, lv, lx, ls)
        st = self.stage[j]
        m.d.comb += [st.as_value()[:self.rlay.row.size].eq(row.as_value()), st.chunk.eq(rr.chunk),
                     st.data.eq(rr.data), st.drop.eq(bg | bt), st.local.eq(loc.any() & ~(bg | bt))]
        return own, rr.chunk == 0

    def _partial_checks(self, m, word):
        """The checks of an input word as a partial row's chunk, for its register: (outside
        the P window, its owner not served here)."""
        cfg = self.cfg
        pi = data.View(struct(self.fmts.partial_row), word[:self.fmts.partial_row.width])
        win = (pi.sender >= cfg.node_gpus) | (pi.ptag >= cfg.partial_span)
        own = (pi.src_node >= cfg.nodes) | (pi.src_node == self.node) | (pi.src_rank != self.rank)
        return win, own

    def _partial_lane(self, m, j: int, word, drop):
        """Lane ``j``'s registered word as a partial row's chunk: its staging payload
        (``self.pstage[j]``, ``drop`` its registered bad owner); returns its chunk 0."""
        p = data.View(struct(self.fmts.partial_row), word[:self.fmts.partial_row.width])
        st = self.pstage[j]
        m.d.comb += [st.sender.eq(p.sender), st.ptag.eq(p.ptag), st.src_node.eq(p.src_node),
                     st.token.eq(p.token), st.slot.eq(p.slot), st.chunk.eq(p.chunk), st.data.eq(p.data),
                     st.drop.eq(drop)]
        return p.chunk == 0

    def _entries(self, m, pkt, valid, experts, slots):
        """A packet's target entries (a plain packet: the first)."""
        if self.cfg.multicast:
            for t in range(self.cfg.max_targets):
                m.d.comb += [getattr(pkt, f"valid{t}").eq(valid[t]), getattr(pkt, f"expert{t}").eq(experts[t]),
                             getattr(pkt, f"slot{t}").eq(slots[t])]
        else:
            m.d.comb += [pkt.expert.eq(experts[0]), pkt.slot.eq(slots[0])]

    def _lane(self, m, j: int, node_lo):
        """Lane ``j``'s sort and conversion. Returns (a good forward row's chunk, chunk 0,
        per RelayReason the drop to count, its chunk goes to the relay stream now)."""
        cfg, fmts, i, o, chk = self.cfg, self.fmts, self.i[j], self.o[j], self.checks[j]
        M, T = cfg.max_targets, cfg.relay_targets
        # ---- the checks on the input word, registered with it (the lane's register, r)
        fi = data.View(struct(fmts.forward_row), i.payload[:fmts.forward_row.width])
        di = data.View(struct(fmts.direct), i.payload[:fmts.direct.width])
        m.d.comb += [chk.node.eq(self.node), chk.rank.eq(self.rank), chk.fwd.eq(fi.fwd), chk.ftag.eq(fi.ftag),
                     chk.src_node.eq(fi.src_node), chk.src_rank.eq(fi.src_rank),
                     chk.valid.eq(Cat(*(getattr(fi, f"valid{t}") for t in range(M))))]
        m.d.comb += [chk.expert[t].eq(getattr(fi, f"expert{t}")) for t in range(M)]
        in_remote = (di.kind == PacketKind.DATA) & (di.src < cfg.sources) \
            & ((di.src < node_lo) | (di.src >= node_lo + cfg.node_gpus))
        in_verdict, in_loc = self._relay_checks(m, j, i.payload)
        in_pwin, in_pown = self._partial_checks(m, i.payload)
        r_v, word = Signal(name=f"r_valid{j}"), Signal(fmts.lane_bits, name=f"r_word{j}")
        remote, fbs, fbt = Signal(name=f"remote{j}"), Signal(name=f"fwd_bad_source{j}"), Signal(name=f"fwd_bad_targets{j}")
        rbs, rbg, rbt = (Signal(name=f"relay_{k}{j}") for k in ("bad_source", "bad_gpu", "bad_targets"))
        rloc_mask = Signal(T, name=f"rloc{j}")
        pwin, pown = Signal(name=f"partial_bad_window{j}"), Signal(name=f"partial_bad_owner{j}")
        # (a relay chunk for the staging, a partial chunk for the partial staging: decided as
        # the word is registered, so the two streams' grants across the lanes, and each
        # lane's ready behind them, start at registers)
        to_rel, to_par = Signal(name=f"to_rel{j}"), Signal(name=f"to_par{j}")
        in_cls = i.payload[:2]
        in_rel = i.valid & (in_cls == RowClass.RELAY) & ~in_verdict[0]
        in_par = i.valid & (in_cls == RowClass.PARTIAL) & ~in_pwin
        # (and a packet for the packet manager: decided with the word too, so the lane's
        # leave -- its word register's enable -- starts at registers, not at the class decode)
        in_hub = ((in_cls == RowClass.DIRECT) & ~in_remote) \
            | ((in_cls == RowClass.FORWARD) & ~(chk.bad_source | chk.bad_targets)) \
            | ((in_cls == RowClass.RELAY) & ~(in_verdict[0] | in_verdict[1] | in_verdict[2]) & in_loc.any())
        to_hub = Signal(name=f"to_hub{j}")
        leave = Signal(name=f"r_leave{j}")
        m.d.comb += i.ready.eq(~r_v | leave)
        with m.If(i.ready):
            m.d.sync += [r_v.eq(i.valid), word.eq(i.payload), remote.eq(in_remote), fbs.eq(chk.bad_source),
                         fbt.eq(chk.bad_targets), rbs.eq(in_verdict[0]), rbg.eq(in_verdict[1]),
                         rbt.eq(in_verdict[2]), rloc_mask.eq(in_loc), pwin.eq(in_pwin), pown.eq(in_pown),
                         to_rel.eq(in_rel), to_par.eq(in_par), to_hub.eq(in_hub)]
        # ---- the registered word sorted and converted
        cls = word[:2]
        d = data.View(struct(fmts.direct), word[:fmts.direct.width])
        f = data.View(struct(fmts.forward_row), word[:fmts.forward_row.width])
        is_dir, is_fwd = cls == RowClass.DIRECT, cls == RowClass.FORWARD
        is_rel, is_par = cls == RowClass.RELAY, cls == RowClass.PARTIAL
        bad_fwd = fbs | fbt
        own, rfirst = self._relay_lane(m, j, word, (rbs, rbg, rbt), rloc_mask)
        pfirst = self._partial_lane(m, j, word, pown)
        # the packet: a forward row's fields, or the direct packet's as they are
        pkt = data.View(self.lay.packet, Signal(self.lay.packet.size, name=f"fwd_pkt{j}"))
        m.d.comb += [pkt.kind.eq(PacketKind.DATA), pkt.src.eq((f.src_node * cfg.node_gpus + f.src_rank)[:cfg.src_bits]),
                     pkt.tag.eq(f.ftag),
                     pkt.token.eq(f.token), pkt.chunk.eq(f.chunk), pkt.count.eq(0), pkt.data.eq(f.data)]
        self._entries(m, pkt, Cat(*(getattr(f, f"valid{t}") for t in range(M))),
                      [getattr(f, f"expert{t}") for t in range(M)], [getattr(f, f"slot{t}") for t in range(M)])
        # (a relay chunk with own targets goes to both: each part once, the lane's register
        # leaving with the second -- no part waits on the other's handshake)
        rel_ok, buf = self.rel_ok[j], self.bufs[j]
        hub_done, rel_done = Signal(name=f"hub_done{j}"), Signal(name=f"rel_done{j}")
        rel_fire = Signal(name=f"rel_fire{j}")
        m.d.comb += [buf.w_en.eq(r_v & to_hub & ~hub_done & buf.w_rdy), rel_fire.eq(rel_ok),
                     buf.w_data.eq(Mux(is_fwd, pkt.as_value(), Mux(is_rel, own.as_value(), d.as_value()[2:]))),
                     leave.eq(r_v & (~to_hub | hub_done | buf.w_en) & (~to_rel | rel_done | rel_fire)
                              & (~to_par | self.par_ok[j])),
                     o.valid.eq(buf.r_rdy), o.payload.eq(buf.r_data), buf.r_en.eq(o.ready)]
        with m.If(leave):
            m.d.sync += [hub_done.eq(0), rel_done.eq(0)]
        with m.Else():
            with m.If(buf.w_en):
                m.d.sync += hub_done.eq(1)
            with m.If(rel_fire):
                m.d.sync += rel_done.eq(1)
        first = Mux(is_fwd, f.chunk == 0, Mux(is_rel, rfirst, Mux(is_par, pfirst, d.chunk == 0)))
        reason = {r: Signal(name=f"drop{j}_{r.name.lower()}") for r in RelayReason}
        m.d.comb += [reason[RelayReason.FWD_BAD_SOURCE].eq(first & ((is_dir & remote) | (is_fwd & fbs)
                                                                     | (is_rel & rbs))),
                     reason[RelayReason.FWD_BAD_TARGETS].eq(first & ((is_fwd & fbt) | (is_rel & rbt))),
                     reason[RelayReason.FWD_BAD_GPU].eq(first & is_rel & rbg)]
        m.d.comb += [self.want_rel[j].eq(to_rel & ~rel_done), self.want_par[j].eq(to_par)]
        return is_fwd & ~bad_fwd, first, reason, rel_fire, leave, is_par & (pwin | pown)

    def _counters(self, m, ev_in, ev_drop, ev_badp):
        fwd_in = Signal(32, name="fwd_in")
        drops = [Signal(32, name=f"drops_{r.name.lower()}") for r in RelayReason]
        badp = Signal(32, name="bad_partials")
        m.d.sync += [fwd_in.eq(fwd_in + popcount(ev_in)), badp.eq(badp + popcount(ev_badp))]
        m.d.comb += self.bad_partials.eq(badp)
        m.d.sync += [drops[r].eq(drops[r] + popcount(ev_drop[r])) for r in RelayReason]
        m.d.comb += [self.fwd_in.eq(fwd_in), *(self.drops[r].eq(drops[r]) for r in RelayReason)]
