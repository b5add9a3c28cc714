"""The relay's reduce-on-combine, whole (protocol v3): partial output rows in, one reduced
row per (token, node) out, the accumulators in HBM.

::

    open (the relay control path) --------------------> ReduceUnit --op--> ReduceEngine --wr--> memory
    partial rows --> INTAKE --header (first chunk)----------^   |             |   ^  `--rd--> memory --rdata
                       |  <-- taken (an op) / refused ----------'             |   |
                       `--the row's chunks (taken) ---------------y-----------'   `--> out (reduced rows)
                          (refused: dropped)

The intake hands a partial row's header (its source node, token and top-k slot) to the
:class:`~.reduce_unit.ReduceUnit` with the row's first chunk, and learns the unit's
verdict two or more cycles after it took the header (the unit reads the sum's record):
an ``op`` (the part is taken: the row's chunks go on to the
:class:`~.reduce_engine.ReduceEngine` as the op's ``y``, through a two-entry FIFO) or
``part_refused`` (``BAD_PARTIAL``, counted by the unit: the row's chunks are dropped, so
no other row's sum sees them). The next row's header waits until this row's chunks have
all gone, so the engine's ops and rows pair up in order.

Contract of ``partial`` (what the partial feed, :mod:`.partial_feed`, gives it from the
partial staging): each partial row whole, its ``chunks`` chunks in order, one after the
other, each beat carrying the row's header. Opens come from the relay control path
(:class:`~.hub.RelayControl`'s ``open``), the flush from RED_CTRL.RED_FLUSH.
"""
from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In

from ...spec.config import HubConfig
from ...spec.formats import ReducePorts, ReduceReason
from .layouts import struct_layout, refuse_without_relay
from .reduce_engine import ReduceEngine
from .reduce_unit import ReduceUnit


def path_layouts(cfg: HubConfig, elements: int, chunks: int) -> dict:
    """The Amaranth layouts of the reduce path's streams (``open``, ``partial``, ``rd``,
    ``wr``, ``out``: :class:`~moehub.spec.formats.ReducePorts`)."""
    ports = ReducePorts(cfg, elements, chunks)
    return {k: struct_layout(getattr(ports, k)) for k in ("open", "partial", "rd", "wr", "out")}


class ReducePath(wiring.Component):
    """Reduce unit, engine and the partial rows' intake (see the module docstring).

    Attributes
    ----------
    node, rank, acc_base, flush : In
        This hub's node and rank, the accumulators' base, the flush strobe.
    open : In(stream)
        :class:`~.reduce_unit.ReduceUnit`'s ``open``.
    partial : In(stream): src_node, token, slot, data (16 x elements bits)
        Partial rows, whole and in chunk order (see the contract above).
    rd, rdata, wr, out :
        :class:`~.reduce_engine.ReduceEngine`'s memory port and reduced rows.
    red_rows, red_open, red_incomplete, drops, sweeping, clearing :
        The unit's counters and state (the RED_* registers).
    acc_reads, acc_writes, busy :
        The engine's (accumulator words read and written; an op in flight).
    """

    def __init__(self, cfg: HubConfig, elements: int | None = None, chunks: int | None = None,
                 power_up=()):
        refuse_without_relay(self, cfg, "a reduce path")
        self.cfg = cfg
        self.unit = ReduceUnit(cfg, power_up=power_up)
        self.engine = ReduceEngine(cfg, elements, chunks)
        self.elements, self.chunks = self.engine.elements, self.engine.chunks
        unit, eng = self.unit.signature.members, self.engine.signature.members
        super().__init__({
            "node": In(cfg.node_bits), "rank": In(cfg.gpu_bits), "acc_base": In(cfg.addr_bits),
            "flush": In(1), "open": unit["open"],
            "partial": In(stream.Signature(path_layouts(cfg, self.elements, self.chunks)["partial"])),
            **{k: eng[k] for k in ("rd", "rdata", "wr", "out", "acc_reads", "acc_writes", "busy")},
            **{k: unit[k] for k in ("red_rows", "red_open", "red_incomplete", "drops", "sweeping", "clearing")},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self.unit
        m.submodules.engine = eng = self.engine
        m.d.comb += [unit.node.eq(self.node), unit.flush.eq(self.flush),
                     eng.node.eq(self.node), eng.rank.eq(self.rank), eng.acc_base.eq(self.acc_base)]
        wiring.connect(m, wiring.flipped(self.open), unit.open)
        wiring.connect(m, unit.op, eng.op)
        for name in ("rd", "wr", "out"):
            wiring.connect(m, getattr(eng, name), wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.rdata), eng.rdata)
        m.d.comb += [getattr(self, k).eq(getattr(eng, k)) for k in ("acc_reads", "acc_writes", "busy")]
        m.d.comb += [getattr(self, k).eq(getattr(unit, k))
                     for k in ("red_rows", "red_open", "red_incomplete", "sweeping", "clearing")]
        m.d.comb += [self.drops[r].eq(unit.drops[r]) for r in range(len(ReduceReason))]
        self._intake(m, unit, eng)
        return m

    def _intake(self, m, unit, eng):
        """A partial row's header to the unit, then its chunks to the engine or dropped."""
        p = self.partial
        left = Signal(range(self.chunks + 1), name="intake_left")     # chunks of the row still to go
        # (a taken row's chunks reach the engine through a two-entry FIFO: the engine's
        # join then starts from registers, not from this state machine -- through the join
        # into the engine's FIFO levels was the path's deepest, 23.9 FO4)
        m.submodules.chunks = ys = SyncFIFOBuffered(width=len(p.payload.data), depth=2)
        m.d.comb += [unit.part.payload.src_node.eq(p.payload.src_node),
                     unit.part.payload.token.eq(p.payload.token), unit.part.payload.slot.eq(p.payload.slot),
                     ys.w_data.eq(p.payload.data),
                     eng.y.valid.eq(ys.r_rdy), eng.y.payload.eq(ys.r_data), ys.r_en.eq(eng.y.ready)]
        with m.FSM(name="intake"):
            with m.State("HEADER"):
                m.d.comb += unit.part.valid.eq(p.valid)
                with m.If(unit.part.valid & unit.part.ready):
                    m.d.sync += left.eq(self.chunks)
                    m.next = "VERDICT"
            with m.State("VERDICT"):                  # the unit reads the part's record
                with m.If(unit.part_refused):
                    m.next = "DROP"
                with m.Elif(unit.part_taken):
                    m.next = "PASS"
            with m.State("PASS"):
                m.d.comb += [ys.w_en.eq(p.valid), p.ready.eq(ys.w_rdy)]
                self._count(m, left, p.valid & ys.w_rdy)
            with m.State("DROP"):
                m.d.comb += p.ready.eq(1)
                self._count(m, left, p.valid)

    @staticmethod
    def _count(m, left, beat):
        with m.If(beat):
            m.d.sync += left.eq(left - 1)
            with m.If(left == 1):
                m.next = "HEADER"


class ReducePathElement(ReducePath):
    """The reduce path with a datapath one element wide (``moehub synth-unit
    reduce_path``): its control whole -- the unit and its record table, the intake, the
    engine's issue, join, hazard check and FIFOs -- beside one
    :class:`~.accumulate.ReduceElement`. A path ``data_bits / 16`` elements wide adds the
    other elements' datapath and widens its data FIFOs and streams; its deepest control
    path is this one's."""

    def __init__(self, cfg: HubConfig):
        super().__init__(cfg, 1)
