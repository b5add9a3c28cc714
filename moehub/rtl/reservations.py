"""Input reservations: the packet manager's only back-pressure.

The pipeline never stalls: every stage register loads every cycle, so no enable fans out
across it. Instead a group is accepted only when every packet in flight (and this group)
is sure to find room for its write (a slot in its lane's write buffer), its event and its
credit (entries in the queues). The counts are registers, and ``room`` -- the next cycle's
answer -- is formed a cycle ahead as if every lane were accepted whenever ``room`` allowed
it, not counting this cycle's queue pops (conservative: it depends on no input).
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from .logic import popcount
from ..spec.timing import WRITE_FIFO_DEPTH


class InputReservations(wiring.Component):
    """Write-buffer slots and queue entries reserved by the packets in flight.

    Parameters
    ----------
    cfg : HubConfig

    Attributes
    ----------
    acc : In(lanes)
        Lanes accepted this cycle (``valid & ready``).
    valid, ready : In(lanes), In(1)
        The input lanes' valid bits and the handshake's ready: ``acc`` apart, so that the
        count of accepted lanes is the count of valid lanes gated by ``ready`` last.
    pop : In(lanes)
        A slot left lane j's write buffer this cycle.
    ev_popped, cr_popped : In(1)
        An entry left the event / credit queue this cycle.
    no_ev, no_cr : In(range(lanes + 1))
        Packets in B that push no event / no credit (their reservation returns).
    young : In(1)
        No write waiting in a buffer is too old for the ordering guard's group ids.
    room : Out(1)
        Every lane may be accepted (a register).
    idle : Out(1)
        No slot is reserved (the write buffers are empty).
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        L = cfg.lanes
        super().__init__({
            "acc": In(L), "valid": In(L), "ready": In(1), "pop": In(L), "ev_popped": In(1), "cr_popped": In(1),
            "no_ev": In(range(L + 1)), "no_cr": In(range(L + 1)), "young": In(1),
            "room": Out(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, L, D = self.cfg, self.cfg.lanes, WRITE_FIFO_DEPTH
        room = Signal(init=1, name="room")
        m.d.comb += self.room.eq(room)
        wf_used = [Signal(range(D + 1), name=f"wf_used{j}") for j in range(L)]
        m.d.comb += self.idle.eq(Cat(u == 0 for u in wf_used).all())
        wf_room = []
        for j, used in enumerate(wf_used):
            # (the three outcomes formed from the register; acceptance and pop only choose)
            m.d.sync += used.eq(Mux(self.acc[j], Mux(self.pop[j], used, used + 1),
                                    Mux(self.pop[j], used - 1, used)))
            # (both outcomes of the pop compared from registers; the pop only chooses)
            wf_room.append(Mux(self.pop[j], used + room <= D, used + room < D))
        # Queue entries neither used nor reserved by a packet in flight (before B). A packet
        # reaching B either pushes (the entry moves from reserved to used) or does not (its
        # reservation returns); a pop frees an entry. (The pops are counted a cycle late:
        # conservative, and off the tracker's and the credit port's paths; the acceptances
        # too, so that no input path reaches these registers.)
        ev_avail = Signal(range(cfg.event_queue_depth + 1), init=cfg.event_queue_depth, name="ev_avail")
        cr_avail = Signal(range(cfg.credit_queue_depth + 1), init=cfg.credit_queue_depth, name="cr_avail")
        ev_pop, cr_pop = Signal(name="ev_pop"), Signal(name="cr_pop")
        n_acc = Signal(range(L + 1), name="n_acc")
        # (popcount(valid & ready) = ready ? popcount(valid) : 0: the valid lanes are counted
        # while the late ready is still on its way -- it only gates the count)
        m.d.sync += [ev_pop.eq(self.ev_popped), cr_pop.eq(self.cr_popped),
                     n_acc.eq(Mux(self.ready, popcount(self.valid), 0))]
        ev_delta = Signal(range(-L, L + 2))
        cr_delta = Signal(range(-L, L + 2))
        m.d.comb += [ev_delta.eq(ev_pop + self.no_ev - n_acc), cr_delta.eq(cr_pop + self.no_cr - n_acc)]
        m.d.sync += [ev_avail.eq(ev_avail + ev_delta), cr_avail.eq(cr_avail + cr_delta)]
        need = Mux(room, 2 * L, L) + n_acc
        m.d.sync += room.eq(self.young & Cat(*wf_room).all()
                            & (ev_avail + self.no_ev >= need) & (cr_avail + self.no_cr >= need))
        return m
