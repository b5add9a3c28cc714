"""The hub RTL's timing and sizing contract, in plain Python (no Amaranth import).

These numbers are properties of the RTL (:mod:`moehub.rtl.packet_manager`,
:mod:`moehub.rtl.tracker`, :mod:`moehub.rtl.event_queue`) that code outside the RTL needs:
the co-simulation annotates the reference model's effects with them
(:mod:`moehub.cosim.hub_stage`, :mod:`moehub.cosim.systems.hub`), the testbenches check
them, and the configuration schema sizes the queues from them. They live here so that
none of those users has to import Amaranth (or elaborate the hub) to read an integer.

They are the RTL's contract, not estimates: the RTL tests assert each latency in cycles
(``test_latency`` and ``test_throughput_same_expert`` in :mod:`moehub.verif.tb.suite_rules`, run
by tests/test_hub_cocotb.py), and the RTL builds its pipeline, FIFOs and group ids from
the sizes below. Change the RTL and these numbers together.

All latencies count cycles from the cycle a packet is accepted on an input lane, with
nothing queued or stalled in between.
"""
from .config import QUEUE_GROUPS

#: Cycles from a packet's acceptance to its data write leaving the hub on its lane's
#: ``wr`` port (its lane's write FIFO empty).
WRITE_LATENCY = 6
#: Cycles from a packet's acceptance to its row's per-row event (metadata write or
#: completion) and credit entering the event and credit queues (the packet manager's B
#: stage).
EVENT_LATENCY = 5
#: Cycles from the acceptance of a row's last chunk to the row's credit leaving the hub on
#: the ``credit`` port: the event latency, then one cycle through the credit queue.
CREDIT_LATENCY = EVENT_LATENCY + 1
#: Cycles from the acceptance of a tile's last chunk to the tile's flag write on the
#: ``ctl`` port, with no other per-row event queued: the event latency, then the event
#: queue and the availability tracker's three stages (4 cycles).
FLAG_LATENCY = EVENT_LATENCY + 4
#: Entries of each lane's write FIFO: the writes in flight plus one leaving, so that a lane
#: whose port is always ready never holds the input back.
WRITE_FIFO_DEPTH = 8
#: Pipeline registers a packet passes before it leaves the packet manager's B stage (A, R,
#: T, AL, RI->B): the groups the input reservations must cover
#: (:data:`moehub.spec.config.QUEUE_GROUPS` = this + 1).
IN_FLIGHT_GROUPS = QUEUE_GROUPS - 1
#: Width of the pipeline group id that orders tile flags after their rows' data writes. Ids
#: are compared modulo ``2**GROUP_BITS`` (see :func:`moehub.rtl.layouts.group_not_after`);
#: the packet manager stops accepting input while a write waiting in a lane's FIFO is
#: ``GROUP_AGE_LIMIT`` groups old, so the ids in flight span well under half the id space.
GROUP_BITS = 6
GROUP_AGE_LIMIT = 16
#: (multicast) Groups whose rows may be granted between the packet manager's admission of
#: a group and its grant, plus that group: the allocator's "room >= this x lanes" bit is
#: registered a cycle late (1), three groups are ahead of an admitted one (in A, R and T)
#: and it takes up to ``lanes`` rows itself (1). Below that margin of room (or of a count)
#: the input takes one data packet a cycle
#: (:class:`moehub.rtl.multicast_allocator.MulticastAllocatorAdmitted`).
ADMISSION_GROUPS = 5

assert GROUP_AGE_LIMIT < 1 << (GROUP_BITS - 1), "group ids in flight must span under half the id space"
