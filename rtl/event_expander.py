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
same order), popping the queue with the last. A row event with ``n`` targets therefore
costs the tracker ``n`` cycles (``2n`` a row: its metadata and its completion) -- the
fan-out's price on the control port, measured by the cocotb tests' cycle counts; the data
itself is written once.

Timing: the register ``done`` (the head's targets already handed out) and the head
itself are registers; the target handed out is the lowest of ``tv & ~done`` (a priority
one-hot of ``max_targets`` bits) selecting its fields by an AND-OR; the queue's pop is the
tracker's ``ready`` ANDed with "no target after this one", from registers.
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
        The event queue's head (``HubLayouts.event``, every target of a row).
    o : Out(stream.Signature(tracker_event))
        To the tracker: one target of the head (``HubLayouts.tracker_event``).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.multicast:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise ValueError(f"hub[{cfg.name}]: an event expander needs max_targets > 1")
        self.cfg = cfg
        self.lay = lay = HubLayouts(cfg)
        super().__init__({"i": In(stream.Signature(lay.event)), "o": Out(stream.Signature(lay.tracker_event))})

    def elaborate(self, platform):
        m = Module()
        T = self.cfg.max_targets
        ev, out = self.i.payload, self.o.payload
        done = Signal(T, name="done")              # the head's targets handed out already
        left = Signal(T, name="left")
        first = Signal(T, name="first")            # the lowest target left, one-hot
        m.d.comb += [left.eq(ev.tv & ~done),
                     first.eq(Cat(left[t] & ~left[:t].any() for t in range(T)))]
        last = Signal(name="last")                 # no target after this one
        m.d.comb += last.eq((left & ~first) == 0)
        m.d.comb += [
            self.o.valid.eq(self.i.valid & left.any()),
            # (an event with no target -- never pushed -- would leave at once)
            self.i.ready.eq((self.o.ready & last) | ~left.any()),
            out.complete.eq(ev.complete), out.src.eq(ev.src), out.token.eq(ev.token),
            out.group.eq(ev.group), out.loc.eq(ev.loc),
            out.expert.eq(select([(first[t], ev.expert[t]) for t in range(T)], len(out.expert))),
            out.row.eq(select([(first[t], ev.row[t]) for t in range(T)], len(out.row))),
            out.slot.eq(select([(first[t], ev.slot[t]) for t in range(T)], len(out.slot))),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += done.eq(Mux(last, 0, done | first))
        return m
