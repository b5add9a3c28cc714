"""A relay hub's input (protocol v3): each lane's packet sorted by its class, a forward
row turned into protocol v2's multicast packet for the packet manager.

::

    i[j] (RelayFormats.lane) --cls--+-- DIRECT  ------------------------------> o[j] (HubFormats.packet)
                                    |            (a data packet of another node's GPU: dropped)
                                    +-- FORWARD --> ForwardCheck --> packet --> o[j]
                                    |                    `-- bad: dropped, counted
                                    +-- RELAY   ------------------------------> relay[j]
                                    `-- class 3: dropped, counted

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

Per lane, combinationally (no register: a packet reaches the packet manager's input
registers in the cycle it arrives, as on a v1/v2 hub): the class decode, the forward
check (compares with the NODE_ID and LOCAL_RANK registers and ``max_targets``^2/2 expert
compares, :class:`~.forward_check.ForwardCheck`) and a select of the packet's fields. A
lane's ``ready`` is the packet manager's lane ``ready`` for a packet it goes to, the relay
side's for a relay row's chunk, and 1 for a dropped packet (consumed, nothing written).

Counters (lag their events by one cycle, as the relay's: an event registered in the cycle
it happens, the lanes' events added in the next): ``fwd_in``, good forward rows; ``drops``
per :class:`~moehub.spec.formats.RelayReason` -- a row counted once, on its chunk 0 (a bad
forward row, a direct data row of another node's GPU), a class-3 packet on every packet.
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ...spec.formats import PacketKind, RelayFormats, RelayReason, RowClass
from ..layouts import HubLayouts, struct
from ..logic import popcount
from .forward_check import ForwardCheck


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
    relay : Out(stream of RelayFormats.relay_row).array(lanes)
        Relay rows' chunks, for the relay side.
    node, rank : In
        This hub's node and local rank (NODE_ID, LOCAL_RANK).
    fwd_in : Out(32); drops : Out(32).array(len(RelayReason))
        Good forward rows; rows dropped here, per reason (both a cycle late).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.relay:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}].relay = {cfg.relay}: a relay input needs relay: true")
        self.cfg = cfg
        self.fmts = fmts = RelayFormats(cfg)
        self.lay = HubLayouts(cfg)
        self.relay_layout = struct(fmts.relay_row)
        L = cfg.lanes
        self.checks = [ForwardCheck(cfg) for _ in range(L)]
        super().__init__({
            "i": In(stream.Signature(fmts.lane_bits)).array(L),
            "o": Out(stream.Signature(self.lay.packet)).array(L),
            "relay": Out(stream.Signature(self.relay_layout)).array(L),
            "node": In(cfg.node_bits), "rank": In(cfg.gpu_bits),
            "fwd_in": Out(32),
            "drops": Out(32).array(len(RelayReason)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, L = self.cfg, self.cfg.lanes
        # the first global id of this node (NODE_ID x gpus_per_node: a register's product)
        node_lo = Signal(cfg.src_bits + cfg.node_bits, name="node_lo")
        m.d.comb += node_lo.eq(self.node * cfg.node_gpus)
        ev_in = Signal(L, name="ev_fwd_in")
        ev_drop = [Signal(L, name=f"ev_drop_{r.name.lower()}") for r in RelayReason]
        for j in range(L):
            m.submodules[f"check{j}"] = self.checks[j]
            good, first, reason = self._lane(m, j, node_lo)
            fire = self.i[j].valid & self.i[j].ready
            m.d.sync += ev_in[j].eq(fire & good & first)
            for r in RelayReason:
                m.d.sync += ev_drop[r][j].eq(fire & reason[r])
        self._counters(m, ev_in, ev_drop)
        return m

    def _lane(self, m, j: int, node_lo):
        """Lane ``j``'s sort and conversion. Returns (a good forward row's chunk, chunk 0,
        per RelayReason the drop to count)."""
        cfg, fmts, i, o, rel, chk = self.cfg, self.fmts, self.i[j], self.o[j], self.relay[j], self.checks[j]
        word = i.payload
        cls = word[:2]
        d = data.View(struct(fmts.direct), word[:fmts.direct.width])
        f = data.View(struct(fmts.forward_row), word[:fmts.forward_row.width])
        M = cfg.max_targets
        m.d.comb += [chk.node.eq(self.node), chk.rank.eq(self.rank), chk.fwd.eq(f.fwd), chk.ftag.eq(f.ftag),
                     chk.src_node.eq(f.src_node), chk.src_rank.eq(f.src_rank),
                     chk.valid.eq(Cat(*(getattr(f, f"valid{t}") for t in range(M))))]
        m.d.comb += [chk.expert[t].eq(getattr(f, f"expert{t}")) for t in range(M)]
        is_dir, is_fwd = cls == RowClass.DIRECT, cls == RowClass.FORWARD
        is_rel, is_none = cls == RowClass.RELAY, cls == 3
        remote = Signal(name=f"remote{j}")          # a direct data packet of another node's GPU
        m.d.comb += remote.eq((d.kind == PacketKind.DATA) & (d.src < cfg.sources)
                              & ((d.src < node_lo) | (d.src >= node_lo + cfg.node_gpus)))
        bad_fwd = chk.bad_source | chk.bad_targets
        to_hub = Signal(name=f"to_hub{j}")
        m.d.comb += to_hub.eq((is_dir & ~remote) | (is_fwd & ~bad_fwd))
        # the packet: a forward row's fields, or the direct packet's as they are
        pkt = data.View(self.lay.packet, Signal(self.lay.packet.size, name=f"fwd_pkt{j}"))
        m.d.comb += [pkt.kind.eq(PacketKind.DATA), pkt.src.eq(chk.src), pkt.tag.eq(f.ftag),
                     pkt.token.eq(f.token), pkt.chunk.eq(f.chunk), pkt.count.eq(0), pkt.data.eq(f.data)]
        if cfg.multicast:
            for t in range(M):
                for k in ("valid", "expert", "slot"):
                    m.d.comb += getattr(pkt, f"{k}{t}").eq(getattr(f, f"{k}{t}"))
        else:
            m.d.comb += [pkt.expert.eq(f.expert0), pkt.slot.eq(f.slot0)]
        m.d.comb += [o.valid.eq(i.valid & to_hub),
                     o.payload.eq(Mux(is_fwd, pkt.as_value(), d.as_value()[2:])),
                     rel.valid.eq(i.valid & is_rel), rel.payload.eq(word[:fmts.relay_row.width]),
                     i.ready.eq(Mux(to_hub, o.ready, Mux(is_rel, rel.ready, 1)))]
        first = Mux(is_fwd, f.chunk == 0, d.chunk == 0)
        reason = {r: Signal(name=f"drop{j}_{r.name.lower()}") for r in RelayReason}
        m.d.comb += [reason[RelayReason.FWD_BAD_SOURCE].eq(is_none | (is_dir & remote & first)
                                                            | (is_fwd & chk.bad_source & first)),
                     reason[RelayReason.FWD_BAD_TARGETS].eq(is_fwd & chk.bad_targets & first),
                     reason[RelayReason.FWD_BAD_GPU].eq(0)]
        return is_fwd & ~bad_fwd, first, reason

    def _counters(self, m, ev_in, ev_drop):
        fwd_in = Signal(32, name="fwd_in")
        drops = [Signal(32, name=f"drops_{r.name.lower()}") for r in RelayReason]
        m.d.sync += fwd_in.eq(fwd_in + popcount(ev_in))
        m.d.sync += [drops[r].eq(drops[r] + popcount(ev_drop[r])) for r in RelayReason]
        m.d.comb += [self.fwd_in.eq(fwd_in), *(self.drops[r].eq(drops[r]) for r in RelayReason)]
