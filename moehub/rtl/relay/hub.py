"""A relay hub (protocol v3, ``relay: true``): the receive hub of one GPU with the relay's
control path beside it, as far as it attaches without changing the packet manager.

::

    row --> relay_window-deep FIFO --> ForwardUnit --local--> (the multicast path's request)
     (never refuses; a row past          |    ^   `--fwd----> (the NVLink egress)
      the window is counted)             |    `-- fcredit <-- (the node's GPUs' forward credits)
                                         |--rcredit--> (the hub's credit queue)
                                         `--accepted--> OPEN_DEPTH FIFO --open--> (the reduce)
    fin --> ForwardCheck --> fin_bad_source / fin_bad_targets / fin_src   (a received forward row)

    (RelayHub) open, partial --> ReducePath --reduced--> (the NIC: one row per (token, node))
                                   acc_rd / acc_rdata / acc_wr <--> (HBM: the FP32 accumulators)

    (RelayHub) i --> RelayIngress --DIRECT, FORWARD, RELAY's own targets as v2 packets--> MoEHub's lanes
                          |      `--RELAY chunks--> RelayStage --stage_wr--> (HBM)
                          |                          |-- whole rows --> RelayControl.row
                          |                          `-- marks, dropped rows --> RelayCredits
                          `-- fwd_in, relay_drops (forward rows in; bad ones and strays dropped)
    RelayControl.fwd, rcredit --> ForwardEgress --stage_rd/stage_rdata--> --fwd_out--> (NVLink)
                                        `-- forwards read --> RelayCredits <-- MoEHub's credits
                                                                  `--> credit (the top's)
    RelayIngress --PARTIAL chunks--> PartialStage --pstage_wr--> (HBM)
                                          `-- whole rows --> PartialFeed --pstage_rd/pstage_rdata-->
                                                               |-- partial --> ReducePath
                                                               `-- pcredit --> (the node's GPUs)

    MoEHub(cfg): wr, ctl, credit, csr, layer_done; and inside the top
      relay_status <-- the relay's and the reduce's counters (the CSR bank's relay registers)
      relay_place  --> node, rank, acc_base, red_flush (NODE_ID, LOCAL_RANK, RED_ACC_BASE,
                       RED_CTRL as software wrote them)

:class:`RelayControl` is the control path alone (the FIFO, :class:`~.forward_unit.ForwardUnit`,
:class:`~.forward_check.ForwardCheck` and the relay counters); :class:`RelayHub` is
:class:`~moehub.rtl.hub.MoEHub` behind the relay input (:class:`~.ingress.RelayIngress`:
the hub's lanes carry protocol v3's rows, each lane's class decoded; a received forward
row goes into the packet manager as protocol v2's multicast row of its original source,
with its forward tag as the row's tag) and a :class:`RelayControl` beside it, every other
port of both passed through under its own name but the relay registers' (so a relay hub's
v1/v2 path is exactly ``MoEHub``'s: tests/test_rtl_relay_ingress.py runs the top in
lock-step with a plain ``MoEHub`` fed the reference's packets). The top's forward rows come
in on the lanes, so :class:`RelayControl`'s own ``fin`` (one row's verdict, for its bench)
is unused there: FWD_IN and RELAY_DROPS count the input's verdicts.

The counters read as the relay CSR registers (:func:`moehub.spec.csr_map.relay_registers`):
``relay_rows``, ``relay_local``, ``fwd_rows``, ``fwd_wait`` (the forward unit's held row's
forwards not yet sent), ``fwd_in`` (good forward rows received) and ``relay_drops`` (per
:class:`~moehub.spec.formats.RelayReason`: the forward unit's and the forward check's
together). Every counter lags its events by one cycle (an event is a bit registered in the
cycle it happens and added in the next: no verdict in front of a 32-bit increment);
``fwd_wait``, the held row's state, does not. In :class:`RelayHub` they are read through
the hub's CSR bank (``MoEHub``'s ``relay_status``) and the relay's ``node``/``rank`` come
from it (NODE_ID and LOCAL_RANK); :class:`RelayControl` alone has them as ports. The
reduce-on-combine sits beside them (:class:`~.reduce_path.ReducePath`: the reduce unit,
its engine, the accumulate datapath): each good relay row the forward unit takes opens its
sum there (``open``, with the row's gate weights); the partial rows come in whole on
``partial``, the FP32 accumulators are read and written in HBM over ``acc_rd``,
``acc_rdata`` and ``acc_wr`` (from RED_ACC_BASE), each final sum leaves on ``reduced``
(a row of BF16 chunks, with its source, token and parts); its counters are the RED_*
registers, its flush the RED_CTRL.RED_FLUSH strobe (the combine's end, which software
signals: the layer's FLUSH ends the dispatch). While the reduce cannot take opens (its clearing sweep after
reset, a flush sweep), the forward unit waits with the rows in the row queue.
``relay_overflow`` (RELAY_OVERFLOW) counts rows that came while the FIFO was full -- a
source that sent without an R credit; with the credits kept it stays 0 (the window bounds
the rows between a row's arrival and its credit, and the forward unit holds one of them).

The relay side (:mod:`.stage`, :mod:`.egress`, :mod:`.credit_join`): the input hands
every relay chunk to the staging, which keeps a forwarded row's chunks in HBM
(RELAY_STAGE_BASE) and the row to the relay control when it is whole; the forward unit's
forwards are read back from the staging and sent on ``fwd_out`` by the egress, which
passes a row's credit on once its forwards are read; the credit join returns the R
credit when that and the packet manager's credit of the row's own targets are in
(tests/test_rtl_relay_hub_whole.py). The combine's side (:class:`~.stage.PartialStage`,
:mod:`.partial_feed`): the input hands every partial row's chunk to the partial staging,
which keeps it in HBM (PARTIAL_STAGE_BASE) until the row is whole; the feed reads each
whole row back in chunk order into the reduce path's ``partial`` and returns the row's P
credit on ``pcredit``.
"""
from types import SimpleNamespace

from amaranth import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ...spec.formats import ReduceReason, RelayReason
from ..hub import MoEHub
from .forward_check import ForwardCheck
from .forward_unit import ForwardUnit
from .credit_join import RelayCredits
from .egress import ForwardEgress
from .ingress import RelayIngress
from .partial_feed import PartialFeed
from .stage import PartialStage, RelayStage
from .layouts import RelayLayouts, refuse_without_relay
from .reduce_path import ReducePath
from .side import connect_combine_side, connect_relay_side


#: sums opened and not yet taken by the reduce a relay control path holds
#: (:class:`RelayControl`'s ``open``): the forward unit takes a row only while there is room
OPEN_DEPTH = 4


class RelayControl(wiring.Component):
    """The relay's control path (see the module docstring).

    Attributes
    ----------
    row : In(stream of RelayLayouts.row)
        Accepted relay rows' target sets (ready always 1: the FIFO never refuses).
    node, rank : In
        This hub's node and local rank.
    local, fwd, fcredit, rcredit :
        The forward unit's streams (:class:`~.forward_unit.ForwardUnit`).
    fin : In(stream of RelayLayouts.fwd)
        Received forward rows (ready always 1; ``dst`` is not checked: the row arrived here).
    fin_bad_source, fin_bad_targets : Out(1); fin_src : Out(src_bits)
        The verdict on ``fin``'s row (combinational, meaningful while ``fin.valid``).
    relay_rows, relay_local, fwd_wait, fwd_in : Out(32); fwd_rows : Out(32).array(gpus_per_node);
    relay_drops : Out(32).array(len(RelayReason))
        The relay counters (all but ``fwd_wait`` a cycle late).
    relay_overflow : Out(32)
        Rows that found the FIFO full (dropped), a cycle late.
    queued : Out(range(relay_window + 2))
        Rows in the FIFO (not counting the forward unit's held row): at most
        ``relay_window + 1``, one beyond the window (the FIFO's output register).
    open : Out(stream of RelayLayouts.open)
        The sum each good relay row opens at the reduce, in the order the rows were taken
        (:data:`OPEN_DEPTH` held; the forward unit waits while they are all untaken).
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a relay control path")
        self.cfg = cfg
        self.lay = lay = RelayLayouts(cfg)
        self.fu = ForwardUnit(cfg)          # (built here: a bench can watch its row handshake)
        self.check = ForwardCheck(cfg)
        # the forward unit's own ports, as it has them (the FIFO is in front of its row)
        shared = ("row", "node", "rank", "local", "fwd", "fcredit", "rcredit", "relay_rows",
                  "relay_local", "fwd_wait", "fwd_rows")
        members = self.fu.signature.members
        super().__init__({
            **{name: members[name] for name in shared},
            "fin": In(stream.Signature(lay.fwd)),
            "fin_bad_source": Out(1), "fin_bad_targets": Out(1), "fin_src": Out(cfg.src_bits),
            "fwd_in": Out(32),
            "relay_drops": Out(32).array(len(RelayReason)),
            "relay_overflow": Out(32),
            "queued": Out(range(cfg.relay_window + 2)),
            "open": Out(stream.Signature(lay.open)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.lay
        m.submodules.fu = fu = self.fu
        m.submodules.check = chk = self.check
        # (buffered: the row the forward unit sees comes from a register, not through the
        # read multiplexer of relay_window entries -- that path, into the forward unit's
        # verdict and counters in the same cycle, was the control path's deepest, 32-38 FO4
        # at 2-8 nodes; a row takes a cycle more to reach the forward unit). One entry
        # more than the window: the buffered FIFO's write side sees only its inner memory
        # (depth - 1 entries), which must take every row the window lets in, the output
        # register full or not
        m.submodules.queue = q = SyncFIFOBuffered(width=lay.row.size, depth=cfg.relay_window + 1)
        # the sums good rows open at the reduce: pushed the cycle after the forward unit took
        # the row; the forward unit takes a row only while this FIFO has room (the reduce
        # busy -- its clearing or flush sweep -- holds the rows in the row queue: the R
        # credits bound them, nothing is lost)
        m.submodules.opens = oq = SyncFIFOBuffered(width=lay.open.size, depth=OPEN_DEPTH)
        held = fu.held_row
        m.d.comb += [oq.w_en.eq(fu.accepted),
                     oq.w_data.eq(Cat(held.src_node, held.token, held.valid, held.slot, held.weight)),
                     self.open.valid.eq(oq.r_rdy), self.open.payload.eq(oq.r_data),
                     oq.r_en.eq(self.open.ready)]

        # ---- the row queue: never refuses; a row that finds it full is counted and lost
        # (every counter here, as the forward unit's, adds a one-bit event registered in the
        # cycle it happens: it lags its events by one cycle)
        overflow = Signal(32, name="overflow")
        ev_overflow = Signal(name="ev_overflow")
        m.d.comb += [self.row.ready.eq(1), q.w_en.eq(self.row.valid), q.w_data.eq(self.row.payload),
                     fu.row.valid.eq(q.r_rdy & oq.w_rdy), fu.row.payload.eq(q.r_data),
                     q.r_en.eq(fu.row.ready & oq.w_rdy),
                     self.queued.eq(q.level), self.relay_overflow.eq(overflow)]
        m.d.sync += [ev_overflow.eq(self.row.valid & ~q.w_rdy), overflow.eq(overflow + ev_overflow)]

        # ---- the forward unit
        m.d.comb += [fu.node.eq(self.node), fu.rank.eq(self.rank)]
        wiring.connect(m, fu.local, wiring.flipped(self.local))
        wiring.connect(m, fu.fwd, wiring.flipped(self.fwd))
        wiring.connect(m, wiring.flipped(self.fcredit), fu.fcredit)
        wiring.connect(m, fu.rcredit, wiring.flipped(self.rcredit))

        # ---- a received forward row's verdict, counted
        f = self.fin.payload
        m.d.comb += [chk.node.eq(self.node), chk.rank.eq(self.rank), chk.fwd.eq(f.fwd), chk.ftag.eq(f.ftag),
                     chk.src_node.eq(f.src_node), chk.src_rank.eq(f.src_rank), chk.valid.eq(f.valid),
                     self.fin.ready.eq(1), self.fin_bad_source.eq(chk.bad_source),
                     self.fin_bad_targets.eq(chk.bad_targets), self.fin_src.eq(chk.src)]
        m.d.comb += [chk.expert[i].eq(f.expert[i]) for i in range(cfg.max_targets)]
        fin_in = Signal(32, name="fin_in")
        fin_drops = [Signal(32, name=f"fin_drops_{r.name.lower()}") for r in RelayReason]
        ev_fin_in, ev_fin_bs, ev_fin_bt = Signal(name="ev_fin_in"), Signal(name="ev_fin_bs"), Signal(name="ev_fin_bt")
        m.d.sync += [ev_fin_bs.eq(self.fin.valid & chk.bad_source),
                     ev_fin_bt.eq(self.fin.valid & ~chk.bad_source & chk.bad_targets),
                     ev_fin_in.eq(self.fin.valid & ~chk.bad_source & ~chk.bad_targets)]
        bs_, bt_ = RelayReason.FWD_BAD_SOURCE, RelayReason.FWD_BAD_TARGETS
        m.d.sync += [fin_drops[bs_].eq(fin_drops[bs_] + ev_fin_bs), fin_drops[bt_].eq(fin_drops[bt_] + ev_fin_bt),
                     fin_in.eq(fin_in + ev_fin_in)]

        # ---- the counters
        m.d.comb += [self.relay_rows.eq(fu.relay_rows), self.relay_local.eq(fu.relay_local),
                     self.fwd_wait.eq(fu.fwd_wait), self.fwd_in.eq(fin_in)]
        m.d.comb += [self.fwd_rows[g].eq(fu.fwd_rows[g]) for g in range(cfg.node_gpus)]
        m.d.comb += [self.relay_drops[i].eq((fu.drops[i] + fin_drops[i])[:32]) for i in range(len(RelayReason))]
        return m


class RelayHub(wiring.Component):
    """:class:`~moehub.rtl.hub.MoEHub` (its ports under their names) beside a
    :class:`RelayControl` (its ports under theirs) and the reduce-on-combine
    (:class:`~.reduce_path.ReducePath`: the reduce unit, its engine and the accumulate
    datapath; its ports under :data:`REDUCE_PORTS`' names): see the module docstring. The
    relay's and the reduce's counters are read through the hub's CSR bank (the relay
    registers); their node and rank come from it (NODE_ID, LOCAL_RANK), the reduce's
    accumulators' base from RED_ACC_BASE and its flush from RED_CTRL.RED_FLUSH: those
    ports are inside, not the top's.

    Parameters
    ----------
    cfg : HubConfig
        ``relay: true`` (else ValueError naming the key).
    """

    #: the hub's and the relay's ports wired inside the top (the hub's input lanes behind
    #: the relay input, its credits into the credit join; the relay control's rows from the
    #: staging, its forwards and credits into the egress, its local report unused -- the
    #: input hands a relay row's own targets to the packet manager -- and its own
    #: forward-row verdict unused: the input checks every lane's forward rows, and the top's
    #: FWD_IN and RELAY_DROPS add its counts)
    HUB_INNER = ("relay_status", "relay_place", "i", "credit")
    RELAY_INNER = ("node", "rank", "open", "fin", "fin_bad_source", "fin_bad_targets", "fin_src", "fwd_in",
                   "relay_drops", "row", "local", "fwd", "rcredit")
    #: the stagings', the egress's and the partial feed's ports on the top: top name ->
    #: (part, its name)
    STAGE_PORTS = {"stage_wr": ("stage", "wr"), "stage_rd": ("egress", "rd"), "stage_rdata": ("egress", "rdata"),
                   "fwd_out": ("egress", "out"),
                   "pstage_wr": ("pstage", "wr"), "pstage_rd": ("feed", "rd"), "pstage_rdata": ("feed", "rdata"),
                   "pcredit": ("feed", "pcredit")}
    #: the reduce path's ports on the top: top name -> the path's (its ``node``, ``rank``,
    #: ``acc_base`` and ``flush`` are inside, its partial rows come from the partial feed):
    #: the accumulators' memory port, the reduced rows out
    REDUCE_PORTS = {"acc_rd": "rd", "acc_rdata": "rdata", "acc_wr": "wr",
                    "reduced": "out", "red_rows": "red_rows", "red_open": "red_open",
                    "red_incomplete": "red_incomplete", "red_drops": "drops", "red_sweeping": "sweeping",
                    "red_clearing": "clearing", "red_busy": "busy"}

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a relay hub")
        self.cfg = cfg
        self.hub = MoEHub(cfg)
        self.relay = RelayControl(cfg)
        self.reduce = ReducePath(cfg)
        self.ingress = RelayIngress(cfg)
        self.stage, self.egress, self.join = RelayStage(cfg), ForwardEgress(cfg), RelayCredits(cfg)
        self.pstage, self.feed = PartialStage(cfg), PartialFeed(cfg)
        ing = self.ingress.signature.members
        own = {"i": ing["i"], "credit": self.join.signature.members["credit"], "fwd_in": Out(32),
               "relay_drops": Out(32).array(len(RelayReason)),
               **{top: getattr(self, part).signature.members[name] for top, (part, name) in self.STAGE_PORTS.items()}}
        hub_out = self._outer(self.hub, self.HUB_INNER)
        relay_out = self._outer(self.relay, self.RELAY_INNER)
        red = self.reduce.signature.members
        red_out = {top: red[unit] for top, unit in self.REDUCE_PORTS.items()}
        names = [*hub_out, *relay_out, *red_out, *own]
        clash = {n for n in names if names.count(n) > 1}
        assert not clash, f"ports of two of the hub, the relay path, the reduce and the input: {sorted(clash)}"
        super().__init__({**own, **hub_out, **relay_out, **red_out})

    def _relay_side(self, m):
        """The two sides behind the input: its relay chunks into the staging, whole rows
        into the relay control (which forwards them), the forwards and their rows' credits
        into the egress, and the credits -- the packet manager's, the egress's, a dropped
        row's -- joined into the top's; its partial chunks into the partial staging, whole
        rows read back by the feed into the reduce."""
        hub, place = self.hub, self.hub.relay_place
        m.submodules.stage, m.submodules.egress, m.submodules.join = self.stage, self.egress, self.join
        connect_relay_side(m, self.ingress, self.stage, self.relay, self.egress, self.join,
                           node=place.node, rank=place.rank, base=place.stage_base)
        m.submodules.pstage, m.submodules.feed = self.pstage, self.feed
        for top, (part, name) in self.STAGE_PORTS.items():
            self._pass(m, getattr(self, part), {top: name})
        wiring.connect(m, hub.credit, self.join.pm)
        wiring.connect(m, self.join.credit, wiring.flipped(self.credit))
        # the combine's side: partial chunks into the partial staging (whole rows read back
        # by the feed into the reduce, their P credits out)
        connect_combine_side(m, self.ingress, self.pstage, self.feed, self.reduce, base=place.pstage_base)

    @staticmethod
    def _outer(part, inner) -> dict:
        return {k: v for k, v in part.signature.members.items() if k not in inner}

    def _pass(self, m, part, names: dict):
        """The top's ports ``names`` (top name -> ``part``'s name) to and from ``part``."""
        sig = wiring.Signature({top: part.signature.members[inner] for top, inner in names.items()})
        sub = SimpleNamespace(**{top: getattr(part, inner) for top, inner in names.items()})
        for (path, member, o), (ipath, _, i) in zip(sig.flatten(self), sig.flatten(sub)):
            assert path == ipath, (path, ipath)
            m.d.comb += i.eq(o) if member.flow == In else o.eq(i)

    def elaborate(self, platform):
        m = Module()
        hub, relay, red, ing = self.hub, self.relay, self.reduce, self.ingress
        m.submodules.hub = hub
        m.submodules.relay = relay
        m.submodules.reduce = red
        m.submodules.ingress = ing
        self._pass(m, hub, {k: k for k in self._outer(hub, self.HUB_INNER)})
        self._pass(m, relay, {k: k for k in self._outer(relay, self.RELAY_INNER)})
        self._pass(m, red, self.REDUCE_PORTS)
        self._pass(m, ing, {"i": "i", "fwd_in": "fwd_in"})
        for j in range(self.cfg.lanes):         # the input's packets into the hub's lanes
            wiring.connect(m, ing.o[j], hub.i[j])
        self._relay_side(m)
        m.d.comb += relay.fin.valid.eq(0)
        drops = [Signal(32, name=f"relay_drops_{r.name.lower()}") for r in RelayReason]
        m.d.comb += [drops[i].eq((relay.relay_drops[i] + ing.drops[i])[:32]) for i in range(len(RelayReason))]
        m.d.comb += [self.relay_drops[i].eq(drops[i]) for i in range(len(RelayReason))]
        # the relay registers: the relay's and the reduce's counters into the hub's CSR
        # bank; NODE_ID, LOCAL_RANK, RED_ACC_BASE and RED_CTRL.RED_FLUSH out of it
        st, place = hub.relay_status, hub.relay_place
        m.d.comb += [st.relay_rows.eq(relay.relay_rows), st.relay_local.eq(relay.relay_local),
                     st.fwd_wait.eq(relay.fwd_wait), st.fwd_in.eq(ing.fwd_in),
                     st.relay_overflow.eq(relay.relay_overflow),
                     st.red_rows.eq(red.red_rows), st.red_open.eq(red.red_open),
                     st.red_incomplete.eq(red.red_incomplete),
                     st.red_acc_reads.eq(red.acc_reads), st.red_acc_writes.eq(red.acc_writes),
                     relay.node.eq(place.node), relay.rank.eq(place.rank),
                     ing.node.eq(place.node), ing.rank.eq(place.rank),
                     red.node.eq(place.node), red.rank.eq(place.rank), red.acc_base.eq(place.acc_base),
                     red.flush.eq(place.red_flush), st.relay_stage_drops.eq(self.stage.drops),
                     st.partial_stage_drops.eq(self.pstage.drops)]
        wiring.connect(m, relay.open, red.open)
        m.d.comb += [st.fwd_rows[g].eq(relay.fwd_rows[g]) for g in range(self.cfg.node_gpus)]
        m.d.comb += [st.relay_drops[i].eq(drops[i]) for i in range(len(RelayReason))]
        # (the input's partial rows dropped are the reduce's BAD_PARTIAL too)
        red_drops = [Signal(32, name=f"red_drops_{r.name.lower()}") for r in ReduceReason]
        m.d.comb += [red_drops[r].eq((red.drops[r] + (ing.bad_partials if r == ReduceReason.BAD_PARTIAL else 0))[:32])
                     for r in ReduceReason]
        m.d.comb += [st.red_drops[i].eq(red_drops[i]) for i in range(len(ReduceReason))]
        return m
