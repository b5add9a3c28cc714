"""The hub RTL's timing contract, in cycles, as plain Python (no Amaranth import).

The RTL is built to these numbers and its tests assert them in cycles; the co-simulation
and the testbenches read them here, without elaborating any hardware.
"""
from ..config.schema import QUEUE_GROUPS

#: Cycles from a packet's acceptance to its data write leaving the hub (nothing stalled).
WRITE_LATENCY = 6
#: Cycles from a packet's acceptance to its row's event entering the event queue.
EVENT_LATENCY = 5
#: Cycles from the acceptance of a tile's last chunk to the tile's flag write, with no other
#: per-row event queued: the packet manager's event latency, then the event queue and the
#: tracker's three stages (4 cycles).
FLAG_LATENCY = EVENT_LATENCY + 4
#: Pipeline registers a packet passes before it leaves B (A, R, T, AL, RI->B): the packets
#: the input reservations must cover (config.schema.QUEUE_GROUPS = this + 1).
IN_FLIGHT_GROUPS = QUEUE_GROUPS - 1
#: Entries of each lane's write FIFO: the writes in flight plus one leaving, so that a lane
#: whose port is always ready never holds the input back.
WRITE_FIFO_DEPTH = 8
#: Width of the pipeline group id that orders tile flags after their rows' data writes. Ids
#: are compared modulo 2**GROUP_BITS; the packet manager stops accepting input while a write
#: waiting in a lane's FIFO is GROUP_AGE_LIMIT groups old, so the ids in flight span well
#: under half the id space.
GROUP_BITS = 6
GROUP_AGE_LIMIT = 16
