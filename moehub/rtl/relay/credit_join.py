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
same cycle -- long before either's credit). Per (source node, tag) three bits --
``need`` (the row names this GPU), ``pm`` and ``fu`` (each credit in) -- and the row's
credit leaves with the second of the two it waits for, clearing the slot. A dropped row's
``done`` (nothing written, nothing forwarded) is its credit at once. Any other credit of
the packet manager -- a source of this node (protocol v1/v2's rows), a forward row's
(source of another rank: the forward credit of that rank's relay, which the credit port's
consumer routes) -- passes through unchanged.

One input is served a cycle, ``done`` first, then ``fu``, then ``pm``. ``done`` is a pulse
that cannot wait: it sets its slot's ``dropped`` bit, and the lowest slot owed is moved
through two registers (its one-hot, then its source and tag) to the port. A
slot owes at most one such credit (its source sends the slot's next row only after it),
so a credit port held back for any time loses none (a FIFO of 4 in front of the port,
the first version, lost the fifth dropped row's credit). An input that sends no credit out
needs no room on ``credit``. ``fu``
and ``pm`` each pass two registers that hold a credit with its decode (the compares with
each node's GPU of this rank, themselves registered ids): the first version decided in
the cycle a credit came, 27-29 FO4 at 4-8 nodes from the ids to the slot bits. The second
register (a skid entry) makes each port's ``ready`` a register (see ``_held``).
"""
from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ..layouts import HubLayouts
from ..logic import select
from .forward_unit import lowest_one
from .layouts import RelayLayouts, refuse_without_relay


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
    mark_valid : In(1); mark_node, mark_tag : In; mark_local : In(1)
        A good relay row's first chunk at the staging (a pulse): its source's node, its tag.
    done : In(stream of RelayLayouts.rcredit)
        A dropped relay row is whole (a pulse; ``ready`` is 1).
    credit : Out(stream of HubLayouts.credit)
        The hub's credits out.
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a credit join")
        self.cfg = cfg
        lay, cr = RelayLayouts(cfg), HubLayouts(cfg).credit
        super().__init__({
            "node": In(cfg.node_bits), "rank": In(cfg.gpu_bits),
            "pm": In(stream.Signature(cr)), "fu": In(stream.Signature(lay.rcredit)),
            "mark_valid": In(1), "mark_node": In(cfg.node_bits), "mark_tag": In(cfg.tag_bits),
            "mark_local": In(1),
            "done": In(stream.Signature(lay.rcredit)),
            "credit": Out(stream.Signature(cr)),
        })

    def _relay_slot(self, m, src, tag, name: str):
        """Whether global source ``src`` is a remote GPU of this rank, and its (``src``,
        ``tag``) place as a one-hot over (node, tag) -- by compares with each node's GPU of
        this rank, registered ids (NODE_ID and LOCAL_RANK do not change within a layer): no
        index arithmetic in front of the slot bits."""
        cfg, T = self.cfg, self.cfg.tags_per_source
        hit = [Signal(name=f"{name}_hit{n}") for n in range(cfg.nodes)]
        m.d.comb += [hit[n].eq((src == self.gid[n]) & self.remote[n]) for n in range(cfg.nodes)]
        oh = Signal(cfg.nodes * T, name=f"{name}_oh")
        m.d.comb += oh.eq(Cat(*(hit[n] & (tag == t) for n in range(cfg.nodes) for t in range(T))))
        return Cat(*hit).any(), oh

    def _held(self, m, port, name: str):
        """Two registers in front of input ``port``, each holding a credit with its decode
        (whether a remote source of this rank, the (node, tag) one-hot), so no compare sits
        in front of the slot bits: the head (``{name}_v`` ...), which the join serves (set
        ``.take`` to consume it), and a skid entry (``{name}_s_v`` ...) behind it. The
        port's ``ready`` is the skid entry's emptiness, a register: with one entry it was
        ``~valid | take``, and ``take`` hangs on the slot bits (``need`` through ``f_now``),
        so the egress's credit handshake and its command FIFO sat behind the join's
        decision (25.4 FO4 in the whole hub at 4 nodes). The head loads from the skid entry
        if that holds one, else from the port; the skid entry takes the port's credit while
        the head stays."""
        cfg, W = self.cfg, self.cfg.nodes * self.cfg.tags_per_source

        def entry(tag):
            return SimpleNamespace(valid=Signal(name=f"{name}{tag}_v"), src=Signal(cfg.src_bits, name=f"{name}{tag}_src"),
                                   tag=Signal(cfg.tag_bits, name=f"{name}{tag}_tag"), rel=Signal(name=f"{name}{tag}_rel"),
                                   oh=Signal(W, name=f"{name}{tag}_oh_r"))
        h, s = entry(""), entry("_s")
        h.take = Signal(name=f"{name}_take")
        rel, oh = self._relay_slot(m, port.payload.src, port.payload.tag, name)
        fields = ("src", "tag", "rel", "oh")
        incoming = dict(src=port.payload.src, tag=port.payload.tag, rel=rel, oh=oh)
        m.d.comb += port.ready.eq(~s.valid)
        with m.If(~h.valid | h.take):
            with m.If(s.valid):
                m.d.sync += [h.valid.eq(1), s.valid.eq(0)] + [getattr(h, f).eq(getattr(s, f)) for f in fields]
            with m.Else():
                m.d.sync += [h.valid.eq(port.valid)] + [getattr(h, f).eq(incoming[f]) for f in fields]
        with m.Elif(~s.valid):
            m.d.sync += [s.valid.eq(port.valid)] + [getattr(s, f).eq(incoming[f]) for f in fields]
        return h

    def _dropped(self, m):
        """Dropped rows' credits owed: a bit per (node, tag) slot, set by ``done``; the
        lowest moved, as its slot's one-hot, into a first register (``drop_pick``), and from
        there, with its source (the node's GPU of this rank, ``gid``) and tag, into a second
        (``drop_v``, ``drop_src``, ``drop_tag``) while that is empty or taken (set ``.take``).
        Two steps: the lowest of up to 112 bits and the source behind it in one were 22.8 FO4
        at 8 nodes."""
        cfg, T = self.cfg, self.cfg.tags_per_source
        W = cfg.nodes * T
        owed = Signal(W, name="dropped")
        pv, poh = Signal(name="drop_pick_v"), Signal(W, name="drop_pick")
        h = SimpleNamespace(valid=Signal(name="drop_v"), src=Signal(cfg.src_bits, name="drop_src"),
                            tag=Signal(cfg.tag_bits, name="drop_tag"), take=Signal(name="drop_take"))
        _, new = self._relay_slot(m, self.done.payload.src, self.done.payload.tag, "done")
        load, load_pick = Signal(name="drop_load"), Signal(name="drop_pick_load")
        nxt = lowest_one(m, owed, "drop_next")
        m.d.comb += [self.done.ready.eq(1), load.eq(~h.valid | h.take), load_pick.eq(~pv | load)]
        m.d.sync += owed.eq((owed & ~Mux(load_pick, nxt, 0)) | Mux(self.done.valid, new, 0))
        with m.If(load_pick):
            m.d.sync += [pv.eq(owed.any()), poh.eq(nxt)]
        with m.If(load):
            m.d.sync += [h.valid.eq(pv),
                         h.src.eq(select([(poh[n * T:(n + 1) * T].any(), self.gid[n]) for n in range(cfg.nodes)],
                                         cfg.src_bits)),
                         h.tag.eq(select([(Cat(*(poh[n * T + t] for n in range(cfg.nodes))).any(), Const(t))
                                          for t in range(T)], cfg.tag_bits))]
        return h

    def elaborate(self, platform):
        m = Module()
        cfg, T = self.cfg, self.cfg.tags_per_source
        W = cfg.nodes * T                          # (a place per (node, tag); this node's unused)
        # each node's GPU of this rank (its global id), and whether it is remote: registered
        self.gid = [Signal(cfg.src_bits, name=f"gid{n}") for n in range(cfg.nodes)]
        self.remote = [Signal(name=f"remote{n}") for n in range(cfg.nodes)]
        m.d.sync += [self.gid[n].eq((n * cfg.node_gpus + self.rank)[:cfg.src_bits]) for n in range(cfg.nodes)]
        m.d.sync += [self.remote[n].eq(self.node != n) for n in range(cfg.nodes)]
        need, pm_in, fu_in = (Signal(W, name=n) for n in ("need", "pm_in", "fu_in"))
        d = self._dropped(m)
        fu, pm = self._held(m, self.fu, "fu"), self._held(m, self.pm, "pm")
        # the input served, and whether it sends a credit out now
        serve_d = d.valid
        serve_f = ~serve_d & fu.valid
        serve_p = ~serve_d & ~fu.valid & pm.valid
        f_now = ((~need | pm_in) & fu.oh).any()                 # its own targets in, or none
        p_now = ~pm.rel | (fu_in & pm.oh).any()                 # passed through, or its forwards in
        out = Signal(name="out_valid")
        m.d.comb += out.eq(serve_d | (serve_f & f_now) | (serve_p & p_now))
        m.d.comb += [self.credit.valid.eq(out),
                     self.credit.payload.src.eq(Mux(serve_d, d.src, Mux(serve_f, fu.src, pm.src))),
                     self.credit.payload.tag.eq(Mux(serve_d, d.tag, Mux(serve_f, fu.tag, pm.tag))),
                     d.take.eq(serve_d & self.credit.ready),
                     fu.take.eq(serve_f & (~f_now | self.credit.ready)),
                     pm.take.eq(serve_p & (~p_now | self.credit.ready))]
        # the slot bits: a row's credit out clears its slot; a credit that waits sets its bit
        f_fire, p_fire = fu.take, pm.take & pm.rel
        clear = Signal(W, name="clear")
        m.d.comb += clear.eq(Mux(f_fire & f_now, fu.oh, 0) | Mux(p_fire & p_now, pm.oh, 0))
        mark = Signal(W, name="mark_oh")
        m.d.comb += mark.eq(Cat(*(self.mark_valid & (self.mark_node == n) & (self.mark_tag == t)
                                  for n in range(cfg.nodes) for t in range(T))))
        m.d.sync += [pm_in.eq((pm_in | Mux(p_fire & ~p_now, pm.oh, 0)) & ~clear),
                     fu_in.eq((fu_in | Mux(f_fire & ~f_now, fu.oh, 0)) & ~clear),
                     need.eq(Mux(self.mark_local, (need & ~clear) | mark, need & ~clear & ~mark))]
        return m
