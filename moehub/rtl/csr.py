"""CSR bank: the hub's register file, generated from :class:`~moehub.spec.csr_map.CsrMap`.

Read-write registers are stored here and exported as signals named after the register
(lower case, arrays as ``.array(count)``); read-only registers are inputs of the same
names; CTRL bits are one-cycle strobes. Software-visible rules:

* TILE_ROWS_LOG2 writes are clamped to [log2(min_tile_rows), log2(max_tile_rows)];
* REGION_CAP writes are clamped to max_rows_per_expert; POOL_CAP (protocol v2) to the
  rows the pool addresses;
* reads of unmapped or write-only addresses return 0; writes to read-only ones are ignored;
* read data is valid two cycles after ``r_stb`` (two registered steps, see ``CsrBank._read``).
"""
from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from ..spec.csr_map import CSR_DATA_BITS, CTRL_CLEAR_ERRORS, CTRL_FLUSH, CTRL_START, HUB_ID, CsrMap
from .layouts import csr_bus_signature
from .paging.regions import tile_sizes

#: read-only registers whose value is a constant of the configuration
_CONSTANT = ("ID", "PARAMS")
#: a read picks its word within an aligned block of 2**READ_BLOCK_BITS words, then the block
READ_BLOCK_BITS = 4


class CsrBank(wiring.Component):
    """The register file (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig

    Attributes
    ----------
    bus : In(csr_bus_signature)
        Software's register bus.
    start, flush, clear_errors : Out(1)
        CTRL strobes.
    <register> : Out(width) or In(width), ``.array(count)`` for arrays
        One port per register of :class:`~moehub.spec.csr_map.CsrMap` except ID, PARAMS and
        CTRL, named in lower case: read-write registers drive an output, read-only ones
        are read from an input; a write-only one (PAGE_FREE) drives the word written and
        ``<register>_w``, a strobe in the cycle of the write.
    tile_oh : Out(len(tile_sizes))
        (paged) TILE_ROWS_LOG2 as a one-hot over :func:`~moehub.rtl.paging.regions.tile_sizes`,
        a register written with it: the page gate and the allocator latch the layer's
        tile size at START, which the bus write forms combinationally, so a decode of the
        register behind it sat on their path (23.9 FO4 into the allocator's ``tile_at``);
        a register decoded a cycle later would be stale for a START right after the write.
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.map = CsrMap(cfg)
        members = {"bus": In(csr_bus_signature(self.map.addr_bits)),
                   "start": Out(1), "flush": Out(1), "clear_errors": Out(1)}
        for r in self.map.registers.values():
            if r.name in _CONSTANT or r.name == "CTRL":
                continue
            if r.access == "wo":        # (PAGE_FREE) the word written, and a strobe
                members[r.name.lower()] = Out(r.width)
                members[r.name.lower() + "_w"] = Out(1)
                continue
            port = (Out if r.access == "rw" else In)(r.width)
            members[r.name.lower()] = port.array(r.count) if r.array else port
        if cfg.paged:               # (TILE_ROWS_LOG2 decoded, see tile_oh)
            members["tile_oh"] = Out(len(tile_sizes(cfg)))
        super().__init__(members)

    def _element(self, r, i):
        sig = getattr(self, r.name.lower())
        return sig[i] if r.array else sig

    def elaborate(self, platform):
        m = Module()
        cfg, cmap, bus = self.cfg, self.map, self.bus
        defaults = {"TILE_ROWS_LOG2": cfg.tile_rows.bit_length() - 1, "TIMEOUT": cfg.timeout_cycles}
        store = {}
        for r in cmap.registers.values():
            if r.access != "rw":
                continue
            store[r.name] = [Signal(r.width, name=f"{r.name.lower()}_{i}",
                                    init=defaults.get(r.name, 0)) for i in range(r.count)]
            for i in range(r.count):
                m.d.comb += self._element(r, i).eq(store[r.name][i])

        lo_log2 = cfg.min_tile_rows.bit_length() - 1
        hi_log2 = cfg.max_tile_rows.bit_length() - 1
        wd = bus.w_data

        def clamp(name, value):
            if name == "TILE_ROWS_LOG2":
                return Mux(value < lo_log2, lo_log2, Mux(value > hi_log2, hi_log2, value))
            if name == "REGION_CAP":
                return Mux(value > cfg.max_rows_per_expert, cfg.max_rows_per_expert, value)
            if name == "POOL_CAP":
                return Mux(value > cfg.pool_rows, cfg.pool_rows, value)
            return value

        ctrl_hit = bus.w_stb & (bus.addr == cmap.addr("CTRL"))
        m.d.comb += [
            self.start.eq(ctrl_hit & ((wd & CTRL_START) != 0)),
            self.flush.eq(ctrl_hit & ((wd & CTRL_FLUSH) != 0)),
            self.clear_errors.eq(ctrl_hit & ((wd & CTRL_CLEAR_ERRORS) != 0)),
        ]
        for r in cmap.registers.values():
            if r.access == "wo" and r.name != "CTRL":
                m.d.comb += [getattr(self, r.name.lower()).eq(wd[:r.width]),
                             getattr(self, r.name.lower() + "_w").eq(bus.w_stb & (bus.addr == r.addr()))]
        sizes = tile_sizes(cfg)
        tile_oh = Signal(len(sizes), name="tile_oh_r", init=1 << sizes.index(defaults["TILE_ROWS_LOG2"]))
        if cfg.paged:
            m.d.comb += self.tile_oh.eq(tile_oh)
        with m.If(bus.w_stb):
            with m.Switch(bus.addr):
                for name, elems in store.items():
                    r = cmap[name]
                    for i, sig in enumerate(elems):
                        for w in range(r.words):
                            lo = w * CSR_DATA_BITS
                            hi = min(r.width, lo + CSR_DATA_BITS)
                            with m.Case(r.addr(i, w)):
                                if r.words == 1:
                                    m.d.sync += sig.eq(clamp(name, wd[:hi - lo]))
                                else:
                                    m.d.sync += sig[lo:hi].eq(wd[:hi - lo])
                                if name == "TILE_ROWS_LOG2" and cfg.paged:
                                    m.d.sync += tile_oh.eq(Cat(clamp(name, wd[:hi - lo]) == x for x in sizes))

        self._read(m, self._readable(cmap, store))
        return m

    @staticmethod
    def _readable(cmap, store):
        """Word address -> the 32-bit word software reads there (unmapped and write-only
        words are absent: they read 0)."""
        words = {cmap.addr("ID"): HUB_ID, cmap.addr("PARAMS"): cmap.params_word()}
        for r in cmap.registers.values():
            if r.name in _CONSTANT or r.access == "wo":
                continue
            for i in range(r.count):
                value = store[r.name][i] if r.access == "rw" else None
                for w in range(r.words):
                    words[r.addr(i, w)] = (r, i, w, value)
        return words

    def _read(self, m, words):
        """Reads in two registered steps (``r_data`` is valid two cycles after ``r_stb``):
        first every aligned block of ``2**READ_BLOCK_BITS`` words picks its word by the low
        address bits, then the block is picked by the high bits. One step would decode the
        whole map and OR a word per address behind the bus's address (nvl72: 200 words,
        23 FO4); each step now decodes a handful of bits."""
        bus, lo_bits = self.bus, min(READ_BLOCK_BITS, len(self.bus.addr))
        n_blocks = 1 << (len(bus.addr) - lo_bits)
        blocks = [Signal(CSR_DATA_BITS, name=f"rd_block{g}") for g in range(n_blocks)]
        hi, pending, rdata = Signal(len(bus.addr) - lo_bits, name="rd_hi"), Signal(name="rd_pending"), \
            Signal(CSR_DATA_BITS, name="rdata")
        m.d.sync += pending.eq(bus.r_stb)
        with m.If(bus.r_stb):
            m.d.sync += hi.eq(bus.addr[lo_bits:])
            for g, block in enumerate(blocks):
                with m.Switch(bus.addr[:lo_bits]):
                    for k in range(1 << lo_bits):
                        word = words.get((g << lo_bits) | k)
                        if word is not None:
                            with m.Case(k):
                                m.d.sync += block.eq(self._word(word))
                    with m.Default():
                        m.d.sync += block.eq(0)
        with m.If(pending):
            m.d.sync += rdata.eq(Array(blocks)[hi] if n_blocks > 1 else blocks[0])
        m.d.comb += bus.r_data.eq(rdata)

    def _word(self, word):
        if isinstance(word, int):
            return word
        r, i, w, value = word
        value = value if value is not None else self._element(r, i)
        return value[w * CSR_DATA_BITS:(w + 1) * CSR_DATA_BITS]
