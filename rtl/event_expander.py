"""Event expander of protocol v2's multicast rows (issue 14): one queue entry per row event,
one tracker event per target.

With ``max_targets`` > 1 a row names up to ``max_targets`` experts. The packet manager
pushes one event per row event -- the row's metadata when it opens, its completion when
its last chunk is in -- carrying every target (valid bit, expert, slot, row in that
expert) and the row's place in the arena (``loc``): so the event queue, its reservations
and the packet manager's push ranks stay one entry per row event, as for unicast rows.

The availability tracker takes one event per cycle and writes one metadata word (or
counts one completion) per event, per expert. This unit sits between the queue's head and
the tracker and hands the tracker the head's targets one per cycle, in entry order (the
reference model's order: :meth:`moehub.verif.model.HubModel._open` writes each target's
metadata in entry order, :meth:`~moehub.verif.model.HubModel._complete` counts them in the
same order). A row event with ``n`` targets therefore
costs the tracker ``n`` cycles (``2n`` a row: its metadata and its completion) -- the
fan-out's price on the control port, measured by the cocotb tests' cycle counts; the data
itself is written once.

Timing: the unit is a stage of two registers, the event being handed out (``cur``, with
``done``: its targets handed out already) and one taken behind it (``skid``); it takes
the queue's head whenever ``skid`` is empty, so the queue's pop is a register's AND with
the queue's valid -- the tracker's ``ready`` (its output port's back-pressure, through a
fan-out over the head's width) does not reach the queue's head select. The target handed
out is the lowest of ``tv & ~done`` (a priority one-hot of ``max_targets`` bits)
selecting its fields by an AND-OR. An event taken while ``cur`` is free (empty, or
handing out its last target) goes straight to ``cur``, so one-target events pass one a
cycle; ``busy`` tells the packet manager that events are still held here (its end of
layer waits for them as for the queue).
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig
from .layouts import HubLayouts
from .logic import select


class EventExpander(wiring.Component):
    """A multicast row event to one tracker event per target (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``max_targets`` > 1 (multicast).

    Attributes
    ----------
    i : In(stream.Signature(event))
        The event queue's head (``HubLayouts.event``, every target of a row); ``ready``
        is a register (the second entry is free).
    o : Out(stream.Signature(tracker_event))
        To the tracker: one target of the event held (``HubLayouts.tracker_event``).
    busy : Out(1)
        An event is held (registers).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.multicast:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise ValueError(f"hub[{cfg.name}]: an event expander needs max_targets > 1")
        self.cfg = cfg
        self.lay = lay = HubLayouts(cfg)
        super().__init__({"i": In(stream.Signature(lay.event)), "o": Out(stream.Signature(lay.tracker_event)),
                          "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        T = self.cfg.max_targets
        cur, skid = Signal(self.lay.event, name="cur"), Signal(self.lay.event, name="skid")
        cur_valid, skid_valid = Signal(name="cur_valid"), Signal(name="skid_valid")
        done = Signal(T, name="done")              # cur's targets handed out already
        left = Signal(T, name="left")
        first = Signal(T, name="first")            # the lowest target left, one-hot
        m.d.comb += [left.eq(cur.tv & ~done),
                     first.eq(Cat(left[t] & ~left[:t].any() for t in range(T)))]
        last = Signal(name="last")                 # no target after this one
        m.d.comb += last.eq((left & ~first) == 0)
        self._out(m, cur, cur_valid, left, first)
        # cur is free this cycle: empty, handing out its last target, or (never pushed)
        # holding an event with no target
        free = Signal(name="free")
        m.d.comb += free.eq(~cur_valid | (self.o.ready & last) | ~left.any())
        take = self.i.valid & ~skid_valid
        m.d.comb += [self.i.ready.eq(~skid_valid), self.busy.eq(cur_valid | skid_valid)]
        with m.If(free):
            m.d.sync += [cur.eq(Mux(skid_valid, skid, self.i.payload)), cur_valid.eq(skid_valid | take),
                         done.eq(0), skid_valid.eq(0)]
        with m.Else():
            with m.If(self.o.ready):
                m.d.sync += done.eq(done | first)
            with m.If(take):
                m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m

    def _out(self, m, cur, cur_valid, left, first):
        """The tracker's event: ``cur``'s lowest target left, with the event's fields."""
        T, out = self.cfg.max_targets, self.o.payload
        m.d.comb += [
            self.o.valid.eq(cur_valid & left.any()),
            out.complete.eq(cur.complete), out.src.eq(cur.src), out.token.eq(cur.token),
            out.group.eq(cur.group), out.loc.eq(cur.loc),
            out.expert.eq(select([(first[t], cur.expert[t]) for t in range(T)], len(out.expert))),
            out.row.eq(select([(first[t], cur.row[t]) for t in range(T)], len(out.row))),
            out.slot.eq(select([(first[t], cur.slot[t]) for t in range(T)], len(out.slot))),
        ]
