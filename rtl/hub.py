"""MoE-Hub top: the receive hub of one GPU.

::

    i[0..L-1] --> PacketManager --wr[0..L-1]--> memory (data writes, one port per lane)
                    |   ^    |  \\
                    |   |    |   `--> credit queue --credit--> back to the sources
                    v   |    `------> event queue --> AvailabilityTracker --ctl--> memory
            AddressAllocator                          (metadata, tile flags, counts, done)
                         CsrBank <--csr--> software (configuration and status)

Ports (Verilog names: ``i__0__valid``, ``i__0__payload``, ``wr__0__ready``, ...; struct
payloads flatten low field first, see :mod:`moehub.rtl.formats`):

* ``i``: ``lanes`` packet input streams (all share one ready);
* ``wr``: ``lanes`` data-write streams (addr, data);
* ``ctl``: ordered control writes (kind, addr, data);
* ``credit``: (src, tag) of completed rows, returned to their sources;
* ``csr``: register bus (addr, r_stb, w_stb, w_data -> r_data next cycle);
* ``layer_done``: one-cycle pulse when the layer-done word has been written.
"""
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig
from .allocator import AddressAllocator
from .csr import CsrBank
from .csr_map import CsrMap, STATUS_ARMED, STATUS_CLEARING, STATUS_DONE, STATUS_ERROR, STATUS_SWEEPING
from .event_queue import EventQueue
from .layouts import HubLayouts, csr_bus_signature
from .packet_manager import EVENT_LATENCY, PacketManager, WRITE_LATENCY  # noqa: F401 (re-exported)
from .tracker import AvailabilityTracker

#: Cycles from the acceptance of a tile's last chunk to the tile's flag write, with no other
#: per-row event queued: the packet manager's event latency, then the event queue and the
#: tracker's three stages (4 cycles).
FLAG_LATENCY = EVENT_LATENCY + 4


class MoEHub(wiring.Component):
    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.lay = lay = HubLayouts(cfg)
        self.csr_map = CsrMap(cfg)
        super().__init__({
            "i": In(stream.Signature(lay.packet)).array(cfg.lanes),
            "wr": Out(stream.Signature(lay.write)).array(cfg.lanes),
            "ctl": Out(stream.Signature(lay.ctl)),
            "credit": Out(stream.Signature(lay.credit)),
            "csr": In(csr_bus_signature(self.csr_map.addr_bits)),
            "layer_done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.lay
        L, E, S = cfg.lanes, cfg.experts, cfg.sources
        m.submodules.pm = pm = PacketManager(cfg)
        m.submodules.alloc = alloc = AddressAllocator(cfg)
        m.submodules.events = events = EventQueue(lay.event, L, cfg.event_queue_depth)
        m.submodules.credits = credits = EventQueue(lay.credit, L, cfg.credit_queue_depth)
        m.submodules.tracker = tr = AvailabilityTracker(cfg)
        m.submodules.csr = csr = CsrBank(cfg)

        for j in range(L):
            wiring.connect(m, wiring.flipped(self.i[j]), pm.i[j])
            wiring.connect(m, pm.wr[j], wiring.flipped(self.wr[j]))
        wiring.connect(m, events.o, tr.ev)
        wiring.connect(m, tr.ctl, wiring.flipped(self.ctl))
        wiring.connect(m, credits.o, wiring.flipped(self.credit))
        wiring.connect(m, wiring.flipped(self.csr), csr.bus)

        m.d.comb += [
            # packet manager <-> queues
            events.push_valid.eq(pm.ev_push_valid),
            pm.ev_pop.eq(events.o.valid & events.o.ready), pm.ev_empty.eq(events.empty),
            credits.push_valid.eq(pm.cr_push_valid),
            pm.cr_pop.eq(credits.o.valid & credits.o.ready),
            # packet manager <-> allocator
            alloc.req.eq(pm.alloc_req), pm.alloc_ok.eq(alloc.ok),
            alloc.commit.eq(pm.alloc_commit), alloc.clear.eq(pm.alloc_clear),
            # packet manager <-> tracker
            tr.layer_start.eq(pm.layer_start), tr.mark_dirty.eq(pm.mark_dirty),
            tr.sweep_req.eq(pm.sweep_req), pm.sweep_done.eq(tr.sweep_done),
            pm.tracker_idle.eq(tr.idle), pm.clearing.eq(tr.clearing),
            tr.b_busy.eq(pm.b_busy), tr.b_group.eq(pm.b_group),
            tr.c_busy.eq(pm.c_busy),
            # CSRs -> blocks
            pm.start.eq(csr.start), pm.flush.eq(csr.flush), pm.clear_errors.eq(csr.clear_errors),
            pm.timeout.eq(csr.timeout),
            tr.epoch.eq(csr.epoch), tr.tile_rows_log2.eq(csr.tile_rows_log2),
            tr.flag_base.eq(csr.flag_base), tr.meta_base.eq(csr.meta_base),
            tr.count_base.eq(csr.count_base),
            # status -> CSRs
            csr.status.eq((pm.armed * STATUS_ARMED) | (tr.clearing * STATUS_CLEARING)
                          | (pm.sweep_req * STATUS_SWEEPING) | (pm.done * STATUS_DONE)
                          | ((pm.errors != 0) * STATUS_ERROR)),
            csr.errors.eq(pm.errors), csr.inflight.eq(pm.inflight), csr.eos_seen.eq(pm.eos_seen),
            self.layer_done.eq(pm.layer_done),
        ]
        for j in range(L):
            m.d.comb += [events.push_data[j].eq(pm.ev_push_data[j]),
                         credits.push_data[j].eq(pm.cr_push_data[j]),
                         alloc.req_expert[j].eq(pm.alloc_expert[j]),
                         pm.alloc_row[j].eq(alloc.row[j])]
        for j in range(L + 1):
            m.d.comb += tr.c_group[j].eq(pm.c_group[j])
        for e in range(E):
            m.d.comb += [alloc.cap[e].eq(csr.region_cap[e]), pm.region_base[e].eq(csr.region_base[e]),
                         tr.rows[e].eq(alloc.rows[e]),
                         csr.rows[e].eq(alloc.rows[e]), csr.overflow[e].eq(pm.overflow[e])]
        for s in range(S):
            m.d.comb += [csr.src_rows[s].eq(pm.src_rows[s]), csr.src_eos[s].eq(pm.src_eos[s])]
        for r in range(len(pm.drops)):
            m.d.comb += csr.drops[r].eq(pm.drops[r])
        return m
