"""Amaranth payload layouts, built from the field lists in :mod:`moehub.rtl.formats`.

One definition per payload: the stream producer, the consumer and the cocotb monitors
(through ``formats``) all agree on field order and widths.
"""
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig, index_bits
from .formats import Format, HubFormats
from .csr_map import CSR_DATA_BITS


#: Width of the pipeline group id that orders tile flags after their rows' data writes.
GROUP_BITS = 4


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
        #: A row-table entry as one lane sees it: state, the row's expert and row, whether
        #: the row was opened after its source's end-of-stream, and the bitmap of chunks
        #: that have arrived. The state lives in flop vectors (cleared in one cycle), the
        #: rest (``entry_body``) in a multi-port memory.
        self.entry_body = data.StructLayout({
            "expert": cfg.expert_bits, "row": cfg.row_bits, "post_eos": 1,
            "bitmap": cfg.chunks_per_row,
        })
        self.entry = data.StructLayout({"state": 2, **{k: v.shape for k, v in self.entry_body}})
        #: A per-row control event for the availability tracker (in row order).
        self.event = data.StructLayout({
            "complete": 1,                     # 0: metadata write of a new row; 1: row completed
            "expert": index_bits(cfg.experts), "row": cfg.row_bits,
            "src": cfg.src_bits, "token": cfg.token_bits, "slot": cfg.slot_bits,
            "group": GROUP_BITS,               # pipeline group of the row's last write (ordering guard)
        })


# Row-table entry states. CLOSED exists only inside one cycle (a row completed by an
# earlier lane); it is written back as FREE.
FREE, ALLOC, DROP, CLOSED = 0, 1, 2, 3


def csr_bus_signature(addr_bits: int) -> wiring.Signature:
    """A simple register bus: a write takes one cycle; read data is valid the cycle
    after ``r_stb``."""
    return wiring.Signature({
        "addr": Out(addr_bits), "r_stb": Out(1), "w_stb": Out(1),
        "w_data": Out(CSR_DATA_BITS), "r_data": In(CSR_DATA_BITS),
    })
