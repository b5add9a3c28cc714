"""Amaranth payload layouts, built from the field lists in :mod:`moehub.spec.formats`.

One definition per payload: the stream producer, the consumer and the cocotb monitors
(through ``formats``) all agree on field order and widths.
"""
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig, index_bits
from ..spec.formats import Format, HubFormats
from ..spec.csr_map import CSR_DATA_BITS
from ..spec.timing import GROUP_BITS




def paged(cfg: HubConfig) -> bool:
    """Paged regions in the pipeline (protocol v2: ``pool_pages > 0``, unicast rows)."""
    return cfg.paged and not cfg.multicast


def page_takes(cfg: HubConfig) -> int:
    """(paged) The most pages one cycle's grants can take: a grant takes a page when its
    row starts a tile, and an expert's grants in a cycle are consecutive rows, at most
    ``lanes`` of them, so they start at most ``ceil(lanes / min_tile_rows)`` tiles -- at
    most ``lanes`` in all. The page supply serves this many takes a cycle and reads twice
    as many ring entries (Mixtral-8x7B, one expert of 64-row tiles on 4 lanes: 1, not 4).
    Multicast, the pages go to one stream, the arena's (:mod:`moehub.rtl.paging.arena`)."""
    streams = 1 if cfg.multicast else cfg.experts
    return min(cfg.lanes, streams * -(-cfg.lanes // cfg.min_tile_rows))


def group_not_after(a, b):
    """Amaranth expression: group id ``a`` is the same as or older than ``b`` (mod 2**GROUP_BITS)."""
    return (b - a)[:GROUP_BITS] < (1 << (GROUP_BITS - 1))


def struct(fmt: Format) -> data.StructLayout:
    return data.StructLayout({f.name: f.width for f in fmt.fields})


class HubLayouts:
    """All payload layouts of one hub configuration."""

    def __init__(self, cfg: HubConfig):
        fmts = HubFormats(cfg)
        self.packet = struct(fmts.packet)
        self.write = struct(fmts.write)
        self.ctl = struct(fmts.ctl)
        self.credit = struct(fmts.credit)
        #: The chunk table's entry for one row in flight (indexed by source and tag), as the
        #: table stage sees it: whether a row is open, its expert and the bitmap of chunks
        #: that have arrived. ``open`` lives in a flop vector (cleared in one cycle), the
        #: rest (``chunk_body``) in a multi-port memory.
        #: (multicast: ``expert`` holds the row's target set -- per entry its valid bit and
        #: its expert, 0 when not valid -- what a later chunk must repeat, else PROTOCOL)
        self.dest_bits = cfg.max_targets * (1 + cfg.expert_bits) if cfg.multicast else cfg.expert_bits
        self.chunk_body = data.StructLayout({"expert": self.dest_bits, "bitmap": cfg.chunks_per_row})
        self.chunk_entry = data.StructLayout({"open": 1,
                                              **{k: v.shape for k, v in self.chunk_body}})
        #: The row-info table's entry: the row the allocator granted, and whether it did
        #: (``alloc``; else the row is being dropped). Written once per row, a few stages
        #: after the chunk table opened it.
        #: (paged: also the page of its tile)
        #: (multicast: a row per target and the row's place in the arena, ``loc``)
        if cfg.multicast:
            self.row_info = data.StructLayout({"alloc": 1, "row": data.ArrayLayout(cfg.row_bits, cfg.max_targets),
                                               "loc": cfg.loc_bits})
        else:
            self.row_info = data.StructLayout({"alloc": 1, "row": cfg.row_bits,
                                               **({"page": cfg.page_bits} if paged(cfg) else {})})
        #: A per-row control event for the availability tracker (in row order).
        self.event = self.tracker_event = data.StructLayout({
            "complete": 1,                     # 0: metadata write of a new row; 1: row completed
            "expert": index_bits(cfg.experts), "row": cfg.row_bits,
            "src": cfg.src_bits, "token": cfg.token_bits, "slot": cfg.slot_bits,
            "group": GROUP_BITS,               # pipeline group of the row's last write (ordering guard)
            # protocol v2 (count_packets): a count packet the packet manager applied (not
            # a row's event), its count (its source and expert in ``src``/``expert``)
            **({"cnt": 1, "count": cfg.count_bits} if cfg.count_packets else {}),
            # protocol v2 (paged unicast): the page of the row's tile (its flag names it)
            **({"page": cfg.page_bits} if paged(cfg) else {}),
            # protocol v2 (multicast): the row's place in the arena (its metadata word names it)
            **({"loc": cfg.loc_bits} if cfg.multicast else {}),
        })
        if cfg.multicast:
            #: (multicast) the event queue holds one event per row event, with every target:
            #: per target entry its valid bit, expert, slot and row (the
            #: :class:`~moehub.rtl.event_expander.EventExpander` hands the tracker one
            #: ``tracker_event`` per target, in entry order)
            T = cfg.max_targets
            self.event = data.StructLayout({
                "complete": 1, "tv": T, "expert": data.ArrayLayout(index_bits(cfg.experts), T),
                "row": data.ArrayLayout(cfg.row_bits, T), "slot": data.ArrayLayout(cfg.slot_bits, T),
                "loc": cfg.loc_bits, "src": cfg.src_bits, "token": cfg.token_bits, "group": GROUP_BITS,
                # (count_packets: a count packet applied, its expert in target entry 0)
                **({"cnt": 1, "count": cfg.count_bits} if cfg.count_packets else {})})


def csr_bus_signature(addr_bits: int) -> wiring.Signature:
    """A simple register bus: a write takes one cycle; read data is valid two cycles
    after ``r_stb`` (and held until the next read's)."""
    return wiring.Signature({
        "addr": Out(addr_bits), "r_stb": Out(1), "w_stb": Out(1),
        "w_data": Out(CSR_DATA_BITS), "r_data": In(CSR_DATA_BITS),
    })
