"""CSR bank: the hub's register file, elaborated from the
:class:`~moehub.spec.csr_map.Register` objects of :class:`~moehub.spec.csr_map.CsrMap`.

Every rule comes from the register description, none is written here by name:
read-write registers are stored here (``Register.reset`` after reset, one-word writes
clamped to ``Register.clamp``: TILE_ROWS_LOG2 to [log2(min_tile_rows),
log2(max_tile_rows)], REGION_CAP to max_rows_per_expert, POOL_CAP to the rows the pool
addresses) and exported as signals named after the register (lower case, arrays as
``.array(count)``); read-only registers are inputs of the same names, constants
(``Register.const``: ID, PARAMS) read their reset value; a write-only register with
fields (CTRL) raises a one-cycle strobe per field, named after the field. Also:

* reads of unmapped or write-only addresses return 0; writes to read-only ones are ignored;
* read data is valid two cycles after ``r_stb`` (two registered steps, see ``CsrBank._read``).
"""
from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from ..spec.csr_map import CSR_DATA_BITS, CsrMap
from .layouts import csr_bus_signature
from .paging.regions import tile_sizes

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
    <field> : Out(1)
        One strobe per field of a write-only register with fields, named after the field
        in lower case (CTRL: ``start``, ``flush``, ``clear_errors``).
    <register> : Out(width) or In(width), ``.array(count)`` for arrays
        One port per other register of :class:`~moehub.spec.csr_map.CsrMap` but the
        constants, named in lower case: read-write registers drive an output, read-only ones
        are read from an input; a write-only one without fields (PAGE_FREE) drives the word
        written and ``<register>_w``, a strobe in the cycle of the write.
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
        members = {"bus": In(csr_bus_signature(self.map.addr_bits))}
        for r in self._strobe_registers():
            members.update({f.name.lower(): Out(1) for f in r.fields})
        for r in self.map.registers.values():
            if r.const or (r.access == "wo" and r.fields):
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

    def _strobe_registers(self):
        """Write-only registers with fields: each field bit written 1 is a strobe (CTRL)."""
        return [r for r in self.map.registers.values() if r.access == "wo" and r.fields]

    def _element(self, r, i):
        sig = getattr(self, r.name.lower())
        return sig[i] if r.array else sig

    def elaborate(self, platform):
        m = Module()
        cfg, cmap, bus = self.cfg, self.map, self.bus
        store = {}
        for r in cmap.registers.values():
            if r.access != "rw":
                continue
            store[r.name] = [Signal(r.width, name=f"{r.name.lower()}_{i}",
                                    init=r.reset) for i in range(r.count)]
            for i in range(r.count):
                m.d.comb += self._element(r, i).eq(store[r.name][i])

        wd = bus.w_data

        def clamp(name, value):
            """``value`` after register ``name``'s clamp (the low bound only if above 0)."""
            if cmap[name].clamp is None:
                return value
            lo, hi = cmap[name].clamp
            upper = Mux(value > hi, hi, value)
            return Mux(value < lo, lo, upper) if lo > 0 else upper

        for r in self._strobe_registers():
            hit = bus.w_stb & (bus.addr == r.addr())
            m.d.comb += [getattr(self, f.name.lower()).eq(hit & ((wd & f.mask) != 0)) for f in r.fields]
        for r in cmap.registers.values():
            if r.access == "wo" and not r.fields:
                m.d.comb += [getattr(self, r.name.lower()).eq(wd[:r.width]),
                             getattr(self, r.name.lower() + "_w").eq(bus.w_stb & (bus.addr == r.addr()))]
        sizes = tile_sizes(cfg)
        tile_oh = Signal(len(sizes), name="tile_oh_r", init=1 << sizes.index(cmap["TILE_ROWS_LOG2"].reset))
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
        words are absent: they read 0); a constant's words are its reset value's."""
        words = {}
        for r in cmap.registers.values():
            if r.access == "wo":
                continue
            for i in range(r.count):
                if r.const:
                    words.update({r.addr(i, w): r.reset >> (w * CSR_DATA_BITS) & ((1 << CSR_DATA_BITS) - 1)
                                  for w in range(r.words)})
                    continue
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
