"""The relay hub's credit join (protocol v3): a relay row's credit goes back to its remote
source only once its own targets are written and its forwards have all been read.

::

    pm (the packet manager's credits) --+-- a remote source of this rank: its own targets written
                                        `-- any other source: passed on ------------------------+
    fu (the egress: forwards read) ------- the forwards done                                    |
    mark (the staging: a good row's first chunk, whether it names this GPU)                     |
    done (the staging: a dropped row whole) ------------------------------------------------+   |
                                                                                            v   v
                                                         the row's R credit --> credit (the hub's credits out)

A good relay row always reaches the forward unit (which opens its sum, counts it and
forwards it: maybe to no GPU), so its forwards' credit (``fu``) always comes; the packet
manager's credit of (source, tag) comes only if the row names this GPU (``mark``'s bit,
recorded at the row's first chunk, which the packet manager and the staging take in the
same cycle -- long before either's credit). Per slot of the R window three bits --
``need`` (the row names this GPU), ``pm`` and ``fu`` (each credit in) -- and the row's
credit leaves with the second of the two it waits for, clearing the slot. A dropped row's
``done`` (nothing written, nothing forwarded) is its credit at once. Any other credit of
the packet manager -- a source of this node (protocol v1/v2's rows), a forward row's
(source of another rank: the forward credit of that rank's relay, which the credit port's
consumer routes) -- passes through unchanged.

One input is served a cycle, ``done`` first, then ``fu``, then ``pm`` (``done`` is a pulse:
a FIFO keeps it). An input that sends no credit out needs no room on ``credit``.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ..layouts import HubLayouts
from ..logic import select
from .layouts import RelayLayouts
from .stage import stage_slot

#: dropped rows' credits the join holds
DONE_DEPTH = 4


class RelayCredits(wiring.Component):
    """The credit join (see the module docstring).

    Attributes
    ----------
    node, rank : In
        This hub's node and local rank.
    pm : In(stream of HubLayouts.credit)
        The packet manager's credits.
    fu : In(stream of RelayLayouts.rcredit)
        A relay row's forwards all read (the egress).
    mark_valid : In(1); mark_slot : In; mark_local : In(1)
        A good relay row's first chunk at the staging (a pulse).
    done : In(stream of RelayLayouts.rcredit)
        A dropped relay row is whole (a pulse; ``ready`` is 1).
    credit : Out(stream of HubLayouts.credit)
        The hub's credits out.
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.relay:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}].relay = {cfg.relay}: a credit join needs relay: true")
        self.cfg = cfg
        self.slot_bits = max(1, (cfg.relay_window - 1).bit_length())
        lay, cr = RelayLayouts(cfg), HubLayouts(cfg).credit
        super().__init__({
            "node": In(cfg.node_bits), "rank": In(cfg.gpu_bits),
            "pm": In(stream.Signature(cr)), "fu": In(stream.Signature(lay.rcredit)),
            "mark_valid": In(1), "mark_slot": In(self.slot_bits), "mark_local": In(1),
            "done": In(stream.Signature(lay.rcredit)),
            "credit": Out(stream.Signature(cr)),
        })

    def _relay_slot(self, m, src, tag, name: str):
        """Whether global source ``src`` is a remote GPU of this rank, and its (``src``,
        ``tag``) slot as a one-hot (by compares with each node's GPU of this rank)."""
        cfg, G = self.cfg, self.cfg.node_gpus
        hit = [(src == n * G + self.rank) & (self.node != n) for n in range(cfg.nodes)]
        src_node = Signal(cfg.node_bits, name=f"{name}_node")
        m.d.comb += src_node.eq(select([(hit[n], Const(n, cfg.node_bits)) for n in range(cfg.nodes)], cfg.node_bits))
        slot = stage_slot(cfg, self.node, src_node, tag)
        oh = Signal(cfg.relay_window, name=f"{name}_slot_oh")
        m.d.comb += oh.eq(Cat(*(slot == k for k in range(cfg.relay_window))))
        return Cat(*hit).any(), oh

    def elaborate(self, platform):
        m = Module()
        cfg, W = self.cfg, self.cfg.relay_window
        need, pm_in, fu_in = (Signal(W, name=n) for n in ("need", "pm_in", "fu_in"))
        m.submodules.dq = dq = SyncFIFOBuffered(width=len(self.done.payload.as_value()), depth=DONE_DEPTH)
        m.d.comb += [self.done.ready.eq(1), dq.w_en.eq(self.done.valid), dq.w_data.eq(self.done.payload.as_value())]
        d_src, d_tag = dq.r_data[:cfg.src_bits], dq.r_data[cfg.src_bits:]
        _, f_oh = self._relay_slot(m, self.fu.payload.src, self.fu.payload.tag, "fu")
        p_rel, p_oh = self._relay_slot(m, self.pm.payload.src, self.pm.payload.tag, "pm")
        # the input served, and whether it sends a credit out now
        serve_d = dq.r_rdy
        serve_f = ~serve_d & self.fu.valid
        serve_p = ~serve_d & ~self.fu.valid & self.pm.valid
        f_now = ((~need | pm_in) & f_oh).any()                  # its own targets in, or none
        p_now = ~p_rel | (fu_in & p_oh).any()                   # passed through, or its forwards in
        out = Signal(name="out_valid")
        m.d.comb += out.eq(serve_d | (serve_f & f_now) | (serve_p & p_now))
        m.d.comb += [self.credit.valid.eq(out),
                     self.credit.payload.src.eq(Mux(serve_d, d_src, Mux(serve_f, self.fu.payload.src,
                                                                       self.pm.payload.src))),
                     self.credit.payload.tag.eq(Mux(serve_d, d_tag, Mux(serve_f, self.fu.payload.tag,
                                                                       self.pm.payload.tag))),
                     dq.r_en.eq(serve_d & self.credit.ready),
                     self.fu.ready.eq(serve_f & (~f_now | self.credit.ready)),
                     self.pm.ready.eq(serve_p & (~p_now | self.credit.ready))]
        # the slot bits: a row's credit out clears its slot; a credit that waits sets its bit
        f_fire, p_fire = self.fu.valid & self.fu.ready, self.pm.valid & self.pm.ready & p_rel
        clear = Signal(W, name="clear")
        m.d.comb += clear.eq(Mux(f_fire & f_now, f_oh, 0) | Mux(p_fire & p_now, p_oh, 0))
        mark = Signal(W, name="mark_oh")
        m.d.comb += mark.eq(Mux(self.mark_valid, Cat(*(self.mark_slot == k for k in range(W))), 0))
        m.d.sync += [pm_in.eq((pm_in | Mux(p_fire & ~p_now, p_oh, 0)) & ~clear),
                     fu_in.eq((fu_in | Mux(f_fire & ~f_now, f_oh, 0)) & ~clear),
                     need.eq(Mux(self.mark_local, (need & ~clear) | mark, need & ~clear & ~mark))]
        return m
