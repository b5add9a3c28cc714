"""Multi-push, single-pop FIFO for per-row events.

Per-row events (a row's metadata write, its completion, its credit) happen at most once
per row, i.e. at most ``lanes / chunks_per_row`` times per cycle on average, but up to
several in one cycle. This queue takes up to ``push_slots`` events per cycle, keeps
their slot order (slot 0 first), and hands them out one per cycle, so one narrow port
serves all lanes. It has no ready on the push side: the producer reserves its entries
itself, counting the pops it is told of (the packet manager's input reservations), so the
queue never overflows and nothing is dropped.
"""
from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .interfaces import queue_push_signature
from .logic import select


class EventQueue(wiring.Component):
    """Multi-push, single-pop queue (see the module docstring).

    Parameters
    ----------
    layout : ShapeLike
        Shape of one entry.
    push_slots : int
        Entries that can be pushed in one cycle.
    depth : int
        Entries (a power of two, >= push_slots).
    take_copies : int
        Groups of entries whose takes read a copy of the push's valid and rank bits of
        their own (``push.take_valid``, ``push.take_rank``; :func:`~.interfaces.take_copies`);
        1: every take reads ``push.valid`` and ``push.rank``.

    Attributes
    ----------
    push : In(queue_push_signature(layout, push_slots, take_copies))
        Entries in (valid, data), and what the producer counts (pop, empty).
    o : Out(stream.Signature(layout))
        Entries in order.
    """

    def __init__(self, layout, push_slots: int, depth: int, take_copies: int = 1):
        if push_slots < 1:
            raise ValueError(f"push_slots = {push_slots}: must be >= 1")
        if depth < push_slots or depth & (depth - 1):
            raise ValueError(f"depth = {depth}: must be a power of two >= push_slots ({push_slots})")
        if take_copies < 1 or depth % take_copies:
            raise ValueError(f"take_copies = {take_copies}: must divide depth ({depth})")
        self.layout, self.push_slots, self.depth, self.take_copies = layout, push_slots, depth, take_copies
        super().__init__({
            "push": In(queue_push_signature(layout, push_slots, take_copies)),
            "o": Out(stream.Signature(layout)),
        })

    def _take_bits(self, k):
        """The valid and rank bits entry ``k``'s take reads: the push's own, or the copy of
        the entry's group."""
        if self.take_copies == 1:
            return self.push.valid, self.push.rank
        g = k // (self.depth // self.take_copies)
        return self.push.take_valid[g], self.push.take_rank[g]

    def _compact(self, m, store, at):
        """Slot i goes to entry wp + (number of valid slots before i): compaction keeps
        order. Written per entry: entry k takes the slot whose rank r (a one-hot) has
        wp = k - r, a bit of the write pointer ``at`` (a one-hot register) -- AND-OR selects
        only, no subtraction, compare or decoder after the ranks."""
        n = self.push_slots
        for k in range(self.depth):
            valid, rank = self._take_bits(k)
            take = [Signal(name=f"take{k}_{i}") for i in range(n)]
            for i in range(n):
                m.d.comb += take[i].eq(valid[i] & Cat(
                    rank[i][r] & at[(k - r) % len(at)] for r in range(i + 1)).any())
            data = select([(take[i], self.push.data[i].as_value()) for i in range(n)], self.layout)
            with m.If(Cat(*take).any()):
                m.d.sync += store[k].eq(data)

    def elaborate(self, platform):
        m = Module()
        n, depth = self.push_slots, self.depth
        aw = max(1, (depth - 1).bit_length())
        store = Array(Signal(self.layout, name=f"q{k}") for k in range(depth))
        rp = Signal(aw)
        level = Signal(range(depth + 1))

        # The head is a register (`head` = store[rp] whenever the queue is not empty), so
        # the consumer's logic starts at a flop, not behind a depth-to-1 mux; the pop only
        # selects the next head, formed from registers (store[rp + 1]) or this cycle's first
        # pushed event (the queue held at most one).
        head = Signal(self.layout)
        rp1 = Signal(aw, init=1)
        # (level != 0 as a register of its own, updated with the level: the consumer's
        # valid starts at a flop -- the level's zero test, fanned out over the event
        # expander's loads, was 24.1 FO4 into its registers at deepseek-v3-8gpu with every
        # v2 feature)
        nonempty = Signal(name="nonempty")
        m.d.comb += [
            self.push.empty.eq(~nonempty),
            self.o.valid.eq(nonempty),
            self.o.payload.eq(head),
        ]
        do_pop = self.o.valid & self.o.ready
        m.d.comb += self.push.pop.eq(do_pop)
        # (how many slots push, and how many before each slot: one-hots from the producer)
        valid = [self.push.valid[i] for i in range(n)]
        n_push = self.push.count
        rank = self.push.rank
        first_push = select([(valid[i] & rank[i][0], self.push.data[i].as_value()) for i in range(n)],
                            self.layout)
        # (chosen by the consumer's ready itself: an empty queue's two candidates are both
        # the first push, so the pop's AND with `valid` is not needed here)
        m.d.sync += head.eq(Mux(self.o.ready, Mux(level >= 2, store[rp1].as_value(), first_push),
                                Mux(nonempty, head.as_value(), first_push)))
        # (the write pointer: a one-hot register, rotated by the count pushed)
        at = Signal(1 << aw, init=1, name="wp_oh")
        m.d.sync += at.eq(select([(n_push[c], at.rotate_left(c)) for c in range(n + 1)], len(at)))
        self._compact(m, store, at)
        # (every sum formed from registers, the counts only choose; the pop last)
        m.d.sync += [
            level.eq(Mux(do_pop, select([(n_push[c], level + c - 1) for c in range(n + 1)], level.shape()),
                         select([(n_push[c], level + c) for c in range(n + 1)], level.shape()))),
            # (level + c - 1 != 0 after a pop; level + c != 0 without one)
            nonempty.eq(Mux(do_pop, (n_push[0] & (level >= 2)) | (n_push[1] & nonempty) | ~n_push[:2].any(),
                            ~n_push[0] | nonempty)),
        ]
        with m.If(do_pop):
            m.d.sync += [rp.eq(rp1), rp1.eq(rp1 + 1)]
        return m
