"""Property harness of the event and credit queues (:class:`moehub.rtl.event_queue.EventQueue`).

Environment: the producer pushes up to ``push_slots`` entries per cycle (any subset of the
slots, any data) and never more than the room left -- the queue has no ready; the packet
manager's input reservations keep this rule, which the packet-manager proof checks
(``shadow level <= depth``); the consumer's ready is free.

Reference state: the level (``lvl``), and one chosen entry -- the one in slot ``cs``
(``AnyConst``) of the first cycle in which the free bit ``pick`` is set and that slot
pushes -- with its data and its position in the queue (entries ahead of it).

Properties: ``o.valid`` and ``push.empty`` agree with the level (nothing lost, nothing
invented); ``push.pop`` is exactly the handshake; the chosen entry leaves when, and only
when, every entry pushed before it has left, with the data it was pushed with -- since
it is any entry, every entry leaves in push order (slot order within a cycle) unchanged.
"No overflow" is the environment's rule above, and "no loss" is ``o.valid == (lvl != 0)``
with the chosen entry leaving in its turn.

Unbounded (k-induction, ``prove``): the properties alone are not inductive -- a state in
which an entry behind the head holds the wrong data satisfies every assert until that
entry reaches the head, as long as the consumer waits. The strengthening invariants tie
the queue's registers (read from its elaborated module, :func:`.common.elaborate_into`:
the RTL carries no formal ports) to the reference, and are asserted like the properties
(so they also hold in every BMC step):

* ``level == lvl`` -- the queue's count is the entries held;
* ``rp1 == rp + 1`` -- the next-head pointer is the head's successor;
* ``wp_oh == 1 << (rp + lvl) mod depth`` -- the write pointer is one past the last entry;
* ``lvl != 0  ->  head == q[rp]`` -- the head register is the stored head entry;
* the chosen entry in the queue (``state == 1``) is stored at ``q[(rp + pos) mod depth]``.

With them the properties are 1-inductive: from any state satisfying all asserts, one step
under the environment keeps them (``moehub formal queue-small event-queue credit-queue
--mode prove``; k = 1 on the full tiny event and credit queues).
"""
from __future__ import annotations

from amaranth import Array, Const, Elaboratable, Module, Shape, Signal, Value

from ...rtl.event_queue import EventQueue
from ...rtl.interfaces import push_ranks
from .common import Props, any_const, any_seq, count_ones, elaborate_into, reset_first


class QueueHarness(Elaboratable):
    """An :class:`EventQueue` of ``layout``, ``slots`` and ``depth`` under its environment."""

    def __init__(self, layout, slots: int, depth: int, dut_cls=EventQueue, take_copies: int = 1):
        self.layout, self.slots, self.depth, self.dut_cls = layout, slots, depth, dut_cls
        self.take_copies = take_copies
        self.messages = {}

    def elaborate(self, platform):
        m = Module()
        n, depth = self.slots, self.depth
        p = Props(m)
        self.messages = p.messages
        q = self.dut_cls(self.layout, n, depth, **({"take_copies": self.take_copies} if self.take_copies > 1 else {}))
        regs = elaborate_into(m, "dut", q, platform)
        reset_first(m)
        valid = any_seq(m, n, "push_valid")
        rank, count = push_ranks(list(valid))
        m.d.comb += [q.push.valid.eq(valid), q.push.count.eq(count)]
        m.d.comb += [q.push.rank[i].eq(rank[i]) for i in range(n)]
        if self.take_copies > 1:      # (each group's copies: the producer's registers' values)
            for g in range(self.take_copies):
                m.d.comb += [q.push.take_valid[g].eq(valid)]
                m.d.comb += [q.push.take_rank[g][i].eq(rank[i]) for i in range(n)]
        for i in range(n):
            m.d.comb += q.push.data[i].eq(any_seq(m, q.push.data[i].shape(), f"push_data{i}"))
        m.d.comb += q.o.ready.eq(any_seq(m, 1, "o_ready"))
        lvl = Signal(range(depth + 1), name="ref_level")
        n_push = count_ones(list(valid))
        pop = q.o.valid & q.o.ready
        # (the producer's reservation: never more entries than the room)
        p.assume(lvl + n_push - pop <= depth)
        m.d.sync += lvl.eq(lvl + n_push - pop)
        p.check(q.o.valid == (lvl != 0), "o.valid does not say whether entries are held")
        p.check(q.push.empty == (lvl == 0), "push.empty does not match the level")
        p.check(q.push.pop == pop, "push.pop is not the output handshake")
        data = self._chosen(m, p, q, lvl, pop)
        self._invariants(p, regs, lvl, data)
        p.cover(lvl == depth, "queue full")
        p.cover((lvl == depth) & pop & (n_push != 0), "push and pop while full")
        p.cover(valid.all() & (lvl != 0), f"{n} entries pushed in one cycle behind others")
        return m

    def _chosen(self, m, p, q, lvl, pop):
        """The chosen entry: when it is pushed, where it is, that it leaves in its turn."""
        n, depth = self.slots, self.depth
        cs = any_const(m, range(n), "chosen_slot")
        p.assume(cs < n)
        pick = any_seq(m, 1, "pick")
        state = Signal(2, name="chosen_state")        # 0 not yet, 1 in the queue, 2 gone
        pos = Signal(range(depth), name="chosen_pos")  # entries ahead of it
        data = Signal(Shape.cast(self.layout).width, name="chosen_data")
        valid = q.push.valid
        rank = count_ones([valid[i] & (cs > i) for i in range(n)])
        take = (state == 0) & pick & valid.bit_select(cs, 1)
        with m.If(take):
            m.d.sync += [state.eq(1), pos.eq(lvl - pop + rank),
                         data.eq(Array(Value.cast(d) for d in q.push.data)[cs])]
        at_head = (state == 1) & (pos == 0)
        p.check(~at_head | q.o.valid, "the chosen entry is lost (its turn, queue empty)")
        p.check(~at_head | (Value.cast(q.o.payload) == data),
                "the head is not the chosen entry in its turn (order or data changed)")
        p.check((state != 1) | (pos < lvl), "the chosen entry is behind the last one")
        with m.If((state == 1) & pop):
            with m.If(pos == 0):
                m.d.sync += state.eq(2)
            with m.Else():
                m.d.sync += pos.eq(pos - 1)
        was_full = Signal(name="chosen_saw_full")
        with m.If((state == 1) & (lvl == depth)):
            m.d.sync += was_full.eq(1)
        p.cover((state == 2) & was_full, "the chosen entry left after waiting in a full queue")
        p.cover((state == 2) & (lvl == 0), "the chosen entry left and the queue drained")
        return state, pos, data

    def _invariants(self, p, regs, lvl, chosen):
        """The strengthening invariants (see the module docstring): the queue's registers
        against the reference -- they make the properties 1-inductive."""
        depth = self.depth
        state, pos, data = chosen
        store = Array(regs[f"q{k}"] for k in range(depth))
        level, rp, rp1, wp, head = regs["level"], regs["rp"], regs["rp1"], regs["wp_oh"], regs["head"]
        aw = len(rp)
        p.check(level == lvl, "invariant: the queue's level is not the entries held")
        p.check(rp1 == (rp + 1)[:aw], "invariant: rp1 is not rp + 1")
        p.check(wp == (Const(1, len(wp)) << (rp + lvl)[:aw])[:len(wp)], "invariant: the write pointer is not rp + level")
        p.check((lvl == 0) | (Value.cast(head) == Value.cast(store[rp])), "invariant: head is not store[rp]")
        p.check((state != 1) | (Value.cast(store[(rp + pos)[:aw]]) == data),
                "invariant: the chosen entry's store slot does not hold its data")
