"""MoE-Hub top: the receive hub of one GPU.

::

    i[0..L-1] --> PacketManager --wr[0..L-1]--> memory (data writes, one port per lane)
                    |   ^    |  \\
                    |   |    |   `--> credit queue --credit--> back to the sources
                    v   |    `------> event queue --> AvailabilityTracker --ctl--> memory
            AddressAllocator                          (metadata, tile flags, counts, done)
                         CsrBank <--csr--> software (configuration and status)

Ports (Verilog names: ``i__0__valid``, ``i__0__payload``, ``wr__0__ready``, ...; struct
payloads flatten low field first, see :mod:`moehub.spec.formats`):

* ``i``: ``lanes`` packet input streams (all share one ready);
* ``wr``: ``lanes`` data-write streams (addr, data);
* ``ctl``: ordered control writes (kind, addr, data);
* ``credit``: (src, tag) of completed rows, returned to their sources;
* ``csr``: register bus (addr, r_stb, w_stb, w_data; r_data two cycles after r_stb);
* ``layer_done``: one-cycle pulse when the layer-done word has been written.

With multicast rows (protocol v2, ``max_targets`` > 1) the allocator is the
:class:`~moehub.rtl.multicast_allocator.MulticastAllocatorAdmitted` (a row per target, one
place in the arena at ``POOL_BASE``, ``POOL_CAP`` rows -- or, with ``pool_pages``, the
arena's rows in pages of the pool, :class:`~moehub.rtl.paging.arena.PagedArena`; whether it
is tight on room back to the packet manager's input admission) and an
:class:`~moehub.rtl.event_expander.EventExpander` hands the tracker the event queue's row
events one target a cycle. With count packets too, the allocator's
:class:`~moehub.rtl.counts.multicast_limit.MulticastCountLimit` refuses rows naming an expert
whose counts are met, under the same admission.
"""
from amaranth import Cat, Module, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import ConfigError, HubConfig
from .allocator import AddressAllocator
from .csr import CsrBank
from ..spec.csr_map import (MAX_SOURCES, CsrMap, STATUS_ARMED, STATUS_CLEARING, STATUS_DONE, STATUS_ERROR,
                             STATUS_SWEEPING, relay_status_registers)
from .event_expander import EventExpander
from .event_queue import EventQueue
from .interfaces import take_copies
from .layouts import HubLayouts, csr_bus_signature, paged
from .multicast_allocator import CNT_DEAD_COPIES, MulticastAllocatorAdmitted
from .packet_manager import PacketManager
from .paging.regions import PageGate
from .tracker import AvailabilityTracker

#: The packet manager's status members the CSR bank reads under the same name.
_STATUS_REGISTERS = ("errors", "inflight", "eos_seen", "src_rows", "src_eos", "overflow", "drops")


#: experts per GPU the RTL elaborates (DeepSeek-V3's 256 routed experts on one GPU); at
#: 512, Amaranth's expression trees over the experts exceed Python's recursion limit
MAX_EXPERTS = 256


def check_rtl(cfg: HubConfig) -> None:
    """Refuse, with a message naming the key, a config the hub RTL cannot be: more sources
    than PARAMS counts, more experts than elaborate, multicast rows in pages shorter than
    the lanes. (The schema takes them: the model
    and the co-simulation can.) Callers run it before a long job (``moehub synth``), the hub at construction."""
    p = f"hub[{cfg.name}]"
    if cfg.sources > MAX_SOURCES:
        raise ConfigError(f"{p}.sources = {cfg.sources}: PARAMS holds the source count in a byte "
                          f"(at most {MAX_SOURCES} sources in the RTL)")
    if cfg.experts > MAX_EXPERTS:
        raise ConfigError(f"{p}.experts = {cfg.experts}: the RTL elaborates at most {MAX_EXPERTS} "
                          "experts per GPU")
    if cfg.multicast and cfg.paged and cfg.min_tile_rows < cfg.lanes:
        raise ConfigError(f"{p}.min_tile_rows = {cfg.min_tile_rows}: multicast rows in pages need "
                          f"tiles of at least lanes = {cfg.lanes} rows (the arena takes at most one "
                          "page a cycle)")


class MoEHub(wiring.Component):
    """The receive hub of one GPU (see the module docstring for the ports).

    Parameters
    ----------
    cfg : HubConfig

    Attributes
    ----------
    i : In(stream.Signature(packet)).array(lanes)
    wr : Out(stream.Signature(write)).array(lanes)
    ctl : Out(stream.Signature(ctl))
    credit : Out(stream.Signature(credit))
    csr : In(csr_bus_signature)
    layer_done : Out(1)
    """

    def __init__(self, cfg: HubConfig):
        try:
            check_rtl(cfg)
        except ConfigError:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise
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
            **self._relay_ports(cfg),
        })

    @staticmethod
    def relay_status_layout(cfg: HubConfig) -> data.StructLayout:
        """(Protocol v3) the relay's counters as the CSR bank reads them: one field per
        read-only relay register (lower-case name; an array per element)."""
        return data.StructLayout({r.name.lower(): data.ArrayLayout(r.width, r.count) if r.array else r.width
                                  for r in relay_status_registers(cfg)})

    @classmethod
    def _relay_ports(cls, cfg: HubConfig) -> dict:
        """(Protocol v3) ``relay_status`` in (the relay's counters, read through the CSR bank)
        and ``relay_place`` out (NODE_ID, LOCAL_RANK, RED_ACC_BASE, RELAY_STAGE_BASE, PARTIAL_STAGE_BASE as
        software wrote them, the RED_CTRL.RED_FLUSH strobe)."""
        if not cfg.relay:
            return {}
        return {"relay_status": In(cls.relay_status_layout(cfg)),
                "relay_place": Out(data.StructLayout({"node": cfg.node_bits, "rank": cfg.gpu_bits,
                                                      "acc_base": cfg.addr_bits, "red_flush": 1,
                                                      "stage_base": cfg.addr_bits,
                                                      "pstage_base": cfg.addr_bits}))}

    def elaborate(self, platform):
        m = Module()
        cfg, L = self.cfg, self.cfg.lanes
        m.submodules.pm = pm = PacketManager(cfg)
        m.submodules.alloc = alloc = MulticastAllocatorAdmitted(cfg) if cfg.multicast else AddressAllocator(cfg)
        m.submodules.events = events = EventQueue(self.lay.event, L, cfg.event_queue_depth, take_copies(cfg))
        m.submodules.credits = credits = EventQueue(self.lay.credit, L, cfg.credit_queue_depth)
        m.submodules.tracker = tr = AvailabilityTracker(cfg)
        m.submodules.csr = csr = CsrBank(cfg)

        for j in range(L):
            wiring.connect(m, wiring.flipped(self.i[j]), pm.i[j])
            wiring.connect(m, pm.wr[j], wiring.flipped(self.wr[j]))
        wiring.connect(m, pm.ev, events.push)
        wiring.connect(m, pm.cr, credits.push)
        if paged(cfg):
            self._pages(m, pm, alloc, tr, csr)
        else:
            wiring.connect(m, pm.alloc, alloc.grant)
        if cfg.multicast:
            self._multicast(m, pm, alloc, events, tr, csr)
        else:
            wiring.connect(m, events.o, tr.ev)
        wiring.connect(m, tr.ctl, wiring.flipped(self.ctl))
        wiring.connect(m, credits.o, wiring.flipped(self.credit))
        wiring.connect(m, wiring.flipped(self.csr), csr.bus)
        if cfg.relay:
            self._relay_registers(m, csr)
        wiring.connect(m, pm.tracker, tr.layer)
        wiring.connect(m, pm.guard, tr.guard)
        if cfg.count_packets:
            m.d.comb += [pm.sweep_short.eq(tr.sweep_short)]
        self._csr(m, pm, alloc, tr, csr)
        m.d.comb += self.layer_done.eq(pm.layer_done)
        return m

    def _pages(self, m, pm, alloc, tr, csr):
        """(paged) The page gate between the packet manager's requests and the allocator:
        it refuses grants the pool has no page for, gives each granted row its page and
        keeps each expert's page (:mod:`moehub.rtl.paging.regions`); PAGE_FREE, POOL_FREE,
        POOL_BASE."""
        cfg, L = self.cfg, self.cfg.lanes
        m.submodules.pages = pg = PageGate(cfg)
        g, a = pm.alloc, alloc.grant
        m.d.comb += [a.req.eq(g.req), a.clear.eq(g.clear), pg.req.eq(g.req), pg.clear.eq(g.clear),
                     pg.ok.eq(a.ok), g.ok.eq(pg.grant_ok),
                     pg.tile_oh.eq(csr.tile_oh), alloc.tile_m1.eq(pg.tile_m1),
                     alloc.tile_m1_load.eq(pg.tile_m1_load)]
        for j in range(L):
            m.d.comb += [a.expert[j].eq(g.expert[j]), a.same[j].eq(g.same[j]), pg.expert[j].eq(g.expert[j]),
                         pg.same[j].eq(g.same[j]), pg.ahead[j].eq(pm.alloc_ahead[j]),
                         pg.prev_same[j].eq(pm.alloc_prev_same[j]), pg.expert_next[j].eq(pm.alloc_expert_next[j]),
                         g.row[j].eq(a.row[j]), pg.row[j].eq(a.row[j]), pm.alloc_page[j].eq(pg.page[j])]
        for e in range(cfg.experts):
            m.d.comb += [tr.cur_page[e].eq(pg.cur_page[e]), alloc.stop_r[e].eq(pg.stop_r[e]), alloc.stop_any[e].eq(pg.stop_any[e]),
                         pg.tile_at_next[e].eq(alloc.tile_at_next[e]), pg.room_ge_next[e].eq(alloc.room_ge_next[e])]
        if cfg.count_packets:
            self._paged_counts(m, g, a, pg, alloc)
        m.d.comb += [pm.tile_sh.eq(pg.tile_sh), pm.pool_base.eq(csr.pool_base),
                     pm.page_bad.eq(pg.bad), pg.ret.eq(csr.page_free_w), pg.ret_page.eq(csr.page_free),
                     csr.pool_free.eq(pg.free)]

    def _relay_registers(self, m, csr):
        """(Protocol v3) the relay registers: its counters into the CSR bank's read-only
        inputs, NODE_ID, LOCAL_RANK, RED_ACC_BASE and RELAY_STAGE_BASE out to the relay."""
        for r in relay_status_registers(self.cfg):
            name = r.name.lower()
            src, dst = getattr(self.relay_status, name), getattr(csr, name)
            for i in range(r.count):
                m.d.comb += (dst[i].eq(src[i]) if r.array else dst.eq(src))
        m.d.comb += [self.relay_place.node.eq(csr.node_id), self.relay_place.rank.eq(csr.local_rank),
                     self.relay_place.acc_base.eq(csr.red_acc_base), self.relay_place.red_flush.eq(csr.red_flush),
                     self.relay_place.stage_base.eq(csr.relay_stage_base),
                     self.relay_place.pstage_base.eq(csr.partial_stage_base)]

    def _multicast(self, m, pm, alloc, events, tr, csr):
        """(multicast) The requests' pre-rank to the allocator, its tight bit to the
        packet manager's admission; the arena (POOL_BASE,
        POOL_CAP); PAGE_FREE's writes to the packet manager (PAGE_BAD: a static arena hands
        out no page); the event expander between the event queue and the tracker."""
        L = self.cfg.lanes
        m.submodules.expand = ex = EventExpander(self.cfg)
        wiring.connect(m, events.o, ex.i)
        wiring.connect(m, ex.o, tr.ev)
        m.d.comb += [pm.alloc_tight.eq(alloc.tight), alloc.risky.eq(pm.alloc_risky), pm.ev_held.eq(ex.busy),
                     alloc.pre_counts.eq(pm.alloc_pre_counts), alloc.pool_cap.eq(csr.pool_cap),
                     pm.pool_base.eq(csr.pool_base)]
        if self.cfg.paged:      # (the arena in pages: PAGE_FREE to its pool)
            m.d.comb += [alloc.tile_oh.eq(csr.tile_oh), alloc.page_ret.eq(csr.page_free_w),
                         alloc.page_ret_page.eq(csr.page_free), pm.page_bad.eq(alloc.page_bad),
                         csr.pool_free.eq(alloc.pool_free)]
        else:
            m.d.comb += [pm.page_bad.eq(csr.page_free_w), csr.pool_free.eq(0)]
        m.d.comb += [alloc.pre_mask[j].eq(pm.alloc_pre_mask[j]) for j in range(L)]
        m.d.comb += [alloc.pre_oh_next[j][t].eq(pm.alloc_pre_oh_next[j][t]) for j in range(L)
                     for t in range(self.cfg.max_targets)]
        m.d.comb += [alloc.sure_named[j].eq(pm.alloc_sure_named[j]) for j in range(L)]
        if self.cfg.count_packets:
            m.d.comb += [alloc.cnt_dead_q[c].eq(pm.alloc_cnt_dead_q[c]) for c in range(CNT_DEAD_COPIES)]
        m.d.comb += [pm.alloc_row_if[j][t][a].eq(alloc.row_if[j][t][a]) for j in range(L)
                     for t in range(self.cfg.max_targets) for a in range(L)]
        m.d.comb += [pm.alloc_row_ahead[j][t].eq(alloc.row_ahead[j][t]) for j in range(L)
                     for t in range(self.cfg.max_targets)]

    def _paged_counts(self, m, g, a, pg, alloc):
        """(paged, count_packets) The count members of the requests, past the page gate to
        the allocator's count limit; the limit's allowance to the gate (a row refused for
        counts takes no page) and the lanes the gate found no page for to the limit."""
        cfg = self.cfg
        m.d.comb += [a.full.eq(g.full), a.add.eq(g.add), g.met.eq(a.met), g.over.eq(a.over),
                     alloc.short.eq(pg.short)]
        for e in range(cfg.experts):
            m.d.comb += [a.dtot[e].eq(g.dtot[e]), a.nge[e].eq(g.nge[e]), a.free[e].eq(g.free[e]),
                         pg.allow[e].eq(alloc.allow[e])]

    @staticmethod
    def _csr(m, pm, alloc, tr, csr):
        """Configuration out of the CSR bank; status into it."""
        st = pm.status
        m.d.comb += [
            pm.csr.start.eq(csr.start), pm.csr.flush.eq(csr.flush),
            pm.csr.clear_errors.eq(csr.clear_errors), pm.csr.timeout.eq(csr.timeout),
            tr.csr.epoch.eq(csr.epoch), tr.csr.tile_rows_log2.eq(csr.tile_rows_log2),
            tr.csr.flag_base.eq(csr.flag_base), tr.csr.meta_base.eq(csr.meta_base),
            tr.csr.count_base.eq(csr.count_base),
            csr.status.eq((st.armed * STATUS_ARMED) | (tr.layer.clearing * STATUS_CLEARING)
                          | (st.sweeping * STATUS_SWEEPING) | (st.done * STATUS_DONE)
                          | ((st.errors != 0) * STATUS_ERROR)),
        ]
        for name in _STATUS_REGISTERS:
            src, dst = getattr(st, name), getattr(csr, name)
            pairs = [(src, dst)] if isinstance(dst, Value) else zip(src, dst)
            m.d.comb += [d.eq(s) for s, d in pairs]
        for e in range(len(alloc.rows)):
            m.d.comb += [alloc.cap[e].eq(csr.region_cap[e]), pm.region_base[e].eq(csr.region_base[e]),
                         tr.rows[e].eq(alloc.rows[e]), csr.rows[e].eq(alloc.rows[e])]
