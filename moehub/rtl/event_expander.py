"""Event expander of protocol v2's multicast rows: one queue entry per row event,
one tracker event per target.

With ``max_targets`` > 1 a row names up to ``max_targets`` experts. The packet manager
pushes one event per row event -- the row's metadata when it opens, its completion when
its last chunk is in -- carrying every target (valid bit, expert, slot, row in that
expert) and the row's place in the arena (``loc``): so the event queue, its reservations
and the packet manager's push ranks stay one entry per row event, as for unicast rows.

The availability tracker takes one event per cycle and writes one metadata word (or
counts one completion) per event, per expert. This unit sits between the queue's head and
the tracker and hands the tracker the head's targets one per cycle, in entry order (the
reference model's order: :meth:`moehub.spec.model.HubModel._open` writes each target's
metadata in entry order, :meth:`~moehub.spec.model.HubModel._complete` counts them in the
same order). A row event with ``n`` targets therefore
costs the tracker ``n`` cycles (``2n`` a row: its metadata and its completion) -- the
fan-out's price on the control port, measured by the cocotb tests' cycle counts; the data
itself is written once.

Timing: the unit holds two events in a ring of two registers (``ent0``, ``ent1``), written
at ``wp`` and read at ``rp`` (one-bit registers); it takes the queue's head whenever it
holds fewer than two (``count``, a register), so the queue's pop is a register's AND with
the queue's valid -- the tracker's ``ready`` (its output port's back-pressure, behind a
fan-out tree in the tracker) does not reach the queue's head select. And ``ready`` reaches
no wide register either: an event taken is written into the free entry by registers alone;
``ready`` only moves ``rp``, ``count`` and the held event's targets left -- a first
version held the event being handed out in one register loaded from the other or the
queue when ``ready`` freed it, and that select, fanned out over the event's 230 bits, was
the hub's deepest path (26.7 FO4 at 8 targets). The target handed
out is the lowest of those left (a priority one-hot of ``max_targets`` bits) selecting its
fields by an AND-OR. One-target events pass one a cycle (an event is taken in the
cycle the one before it is handed out); ``busy`` tells the packet manager that events are
still held here (its end of layer waits for them as for the queue). The target handed out
reaches the tracker through an output register (a cycle of latency, no bubble): the
tracker's ready chooses that register's load, one mux over the tracker event's bits, and
the tracker starts from flops. The held event's
targets left and the lowest of them are registers (``left``, ``first``): with the lowest
target encoded behind the entry select, the path from ``rp`` to the tracker's address was
the multicast hub's deepest (24.6 FO4 at 8 targets). Every register's next value is formed
for the tracker's ready low and high, from registers, and the ready chooses last: it
arrives late (with the next state's priority chain behind it, the ready into
``left``/``first`` was 27.9 FO4). With count packets the tracker's per-expert count state
loads by the handed-out target's expert as a one-hot, which the tracker decodes from the
output register: decoded behind ``rp``'s entry select and the target's select that was
the deepest path of the hub with every v2 feature (29.5 FO4 at deepseek-v3-8gpu, before
the output register), and a one-hot register here, formed for either ready, put the next
entry's expert select and the 256-way decode in front of its load (23.6 FO4):
both gone with the decode after the output register.
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
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
        from a register (fewer than two events held).
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
        ent = [Signal(self.lay.event, name=f"ent{k}") for k in range(2)]
        wp, rp = Signal(name="wp"), Signal(name="rp")
        count = Signal(range(3), name="count")
        cur = Signal(self.lay.event, name="cur")   # the entry at rp (a select by a register)
        # (the entry's fields chosen by copies of rp, a few fields each: rp alone, fanned
        # out over the whole entry, was four to six buffers deep in front of the tracker --
        # 23.1 FO4 into its address at deepseek-v3-8gpu with 8 targets, 30.7 into the final
        # counts with every v2 feature. Synthesis merges flops whose next state and reset
        # agree, so the copies differ from rp and from each other in one or the other:
        # held inverted, or reset to 1 -- harmless, as after reset nothing is held and
        # every copy is rewritten each cycle, see below)
        copies = {"rp_expert": (0, 1), "nrp": (1, 1), "nrp_misc": (1, 0)}   # (inverted, reset)
        self.rp_copies = {n: (Signal(name=n, init=r), inv) for n, (inv, r) in copies.items()}
        m.d.comb += cur.eq(Mux(rp, ent[1], ent[0]))
        for name, fields in (("rp_expert", ["expert"]), ("nrp", ["row", "slot"]),
                             ("nrp_misc", [f for f in self.lay.event.members
                                           if f not in ("expert", "row", "slot", "tv")])):
            sel, inv = self.rp_copies[name]
            pick = ~sel if inv else sel
            m.d.comb += [getattr(cur, f).eq(Mux(pick, getattr(ent[1], f), getattr(ent[0], f))) for f in fields]
        left = Signal(T, name="left")              # the held event's targets not handed out
        first = Signal(T, name="first")            # the lowest of them, one-hot (a register)
        last = Signal(name="last")                 # no target after this one
        m.d.comb += last.eq((left & ~first) == 0)
        held = Signal(name="held")
        m.d.comb += held.eq(count != 0)
        # (the target handed out goes through an output register, ``src`` -> ``o``)
        self._src = src = stream.Signature(self.lay.tracker_event).create(path=("expand_src",))
        out_valid = self._out_register(m)
        self._out(m, cur, held, left, first)
        take = Signal(name="take")
        m.d.comb += [take.eq(self.i.valid & (count != 2)), self.i.ready.eq(count != 2),
                     self.busy.eq(held | out_valid)]
        for k in range(2):
            with m.If(take & (wp == k)):
                m.d.sync += ent[k].eq(self.i.payload)
        m.d.sync += wp.eq(wp ^ take)
        # the next state for the tracker's ready low and high, each from registers (and the
        # queue's head); the ready, behind the tracker's fan-out, only chooses
        regs = (rp, count, left, first)
        loads = self._candidates(m, count, ent, rp, left, first)
        nxt = [self._next_state(m, ready, count, rp, take, held, last, left, first, loads) for ready in (0, 1)]
        m.d.sync += [reg.eq(Mux(src.ready, hi, lo)) for reg, lo, hi in zip(regs, *nxt)]
        rp_next = Mux(src.ready, nxt[1][0], nxt[0][0])
        m.d.sync += [sel.eq(~rp_next if inv else rp_next) for sel, inv in self.rp_copies.values()]
        return m

    def _candidates(self, m, count, ent, rp, left, first):
        """What ``left`` and ``first`` may load, each formed in parallel: the entry that
        becomes the held one (the other entry, or the queue's head taken now) and the
        targets after the one handed out -- with the lowest target of each."""
        T = self.cfg.max_targets
        nxt_tv = Signal(T, name="next_tv")
        after = Signal(T, name="left_after")
        m.d.comb += [nxt_tv.eq(Mux(count == 2, Mux(rp, ent[0].tv, ent[1].tv), self.i.payload.tv)),
                     after.eq(left & ~first)]
        lowest = lambda v: Cat(v[t] & ~v[:t].any() for t in range(T))
        return {"next": (nxt_tv, lowest(nxt_tv)), "after": (after, lowest(after))}

    def _next_state(self, m, ready: int, count, rp, take, held, last, left, first, loads):
        """(rp, count, left, first) of the next cycle if the tracker's ready is ``ready``.
        The held event leaves when its last target is handed out, or at once if it has none
        (never pushed); the next event's targets are loaded when it leaves or when one is
        taken into an empty ring; else, a target handed out, the ones after it."""
        tag = f"_r{ready}"
        finish = Signal(name=f"finish{tag}")
        m.d.comb += finish.eq(held & ((last & ready) | ~left.any()))
        handout = held & left.any() & ready
        load = (finish & ((count == 2) | take)) | ((count == 0) & take)
        names = ("left", "first")
        held_now = (left, first)
        nxt = []
        for name, now, loaded, after in zip(names, held_now, loads["next"], loads["after"]):
            reg = Signal(len(now), name=f"{name}_next{tag}")
            m.d.comb += reg.eq(Mux(load, loaded, Mux(finish, 0, Mux(handout, after, now))))
            nxt.append(reg)
        n_count = Signal(range(3), name=f"count_next{tag}")
        m.d.comb += n_count.eq(count + take - finish)
        return (rp ^ finish, n_count, *nxt)

    def _out_register(self, m):
        """The tracker's event from a register (``o``), loaded with the target handed out
        (``src``) whenever it is empty or the tracker takes it: the tracker's stage S0 --
        its counter address, its read port, the final counts -- starts at flops, not
        behind ``rp``'s entry select and the target's select (with count packets those
        were the deepest paths into the tracker: ``rp_expert`` -> the entry select -> the
        counter address, 24.6 FO4, and ``nrp_misc`` -> the final counts' fields, 24.4,
        at deepseek-v3-8gpu with every v2 feature). Full throughput: the register
        takes a new target in the cycle the tracker takes the one it holds. Returns its
        valid bit."""
        src, o = self._src, self.o
        valid = Signal(name="out_valid")
        payload = Signal(self.lay.tracker_event, name="out_payload")
        m.d.comb += [src.ready.eq(~valid | o.ready), o.valid.eq(valid), o.payload.eq(payload)]
        with m.If(src.ready):
            m.d.sync += [valid.eq(src.valid), payload.eq(src.payload)]
        return valid

    def _out(self, m, cur, held, left, first):
        """The target handed out: ``cur``'s lowest target left, with the event's fields."""
        T, out = self.cfg.max_targets, self._src.payload
        m.d.comb += [
            self._src.valid.eq(held & left.any()),
            out.complete.eq(cur.complete), out.src.eq(cur.src), out.token.eq(cur.token),
            out.group.eq(cur.group), out.loc.eq(cur.loc),
            *([out.cnt.eq(cur.cnt), out.count.eq(cur.count)] if self.cfg.count_packets else []),
            out.expert.eq(select([(first[t], cur.expert[t]) for t in range(T)], len(out.expert))),
            out.row.eq(select([(first[t], cur.row[t]) for t in range(T)], len(out.row))),
            out.slot.eq(select([(first[t], cur.slot[t]) for t in range(T)], len(out.slot))),
        ]
