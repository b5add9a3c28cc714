"""The hub's CSR (control and status register) map, derived from a :class:`HubConfig`.

Pure Python: the RTL register bank, the reference model, the testbenches and the
software header/JSON export all take addresses from :class:`CsrMap`; no address is
written down twice. Registers are 32-bit words at word addresses; a register wider than
32 bits (an address with ``addr_bits`` > 32) spans consecutive words, low word first.
Arrays (one register per expert, per source or per reason) are consecutive.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from .config import HubConfig, ConfigError, field_bits
from .formats import HubFormats, RelayReason, config_reasons

CSR_DATA_BITS = 32
HUB_ID = 0x4D4F4548  # "MOEH"

# CTRL bits (write-only strobes)
CTRL_START = 1 << 0         #: arm a new layer (aborts a running one; clears per-layer state)
CTRL_FLUSH = 1 << 1         #: end the layer now: in-flight rows are dropped as INCOMPLETE
CTRL_CLEAR_ERRORS = 1 << 2  #: clear the sticky ERRORS bits

# STATUS bits
STATUS_ARMED = 1 << 0       #: a layer is running: packets are accepted into it
STATUS_CLEARING = 1 << 1    #: the tile-counter memory is being swept to zero
STATUS_SWEEPING = 1 << 2    #: the end-of-layer sweep (counts, last tiles, done word) runs
STATUS_DONE = 1 << 3        #: the layer ended and its done word was written
STATUS_ERROR = 1 << 4       #: any ERRORS bit is set


@dataclass(frozen=True)
class BitField:
    """A named bit field of a one-word register (for the C header)."""
    name: str
    lsb: int
    width: int
    doc: str = ""

    @property
    def mask(self) -> int:
        """The field's bits in place."""
        return ((1 << self.width) - 1) << self.lsb


def _flag(name: str, mask: int, doc: str) -> BitField:
    return BitField(name, mask.bit_length() - 1, 1, doc)


#: CTRL strobes, from the constants above (one definition of each bit)
CTRL_FIELDS = (
    _flag("START", CTRL_START, "arm a new layer (aborts a running one; clears per-layer state)"),
    _flag("FLUSH", CTRL_FLUSH, "end the layer now: in-flight rows are dropped as INCOMPLETE"),
    _flag("CLEAR_ERRORS", CTRL_CLEAR_ERRORS, "clear the sticky ERRORS bits"),
)
#: STATUS bits
STATUS_FIELDS = (
    _flag("ARMED", STATUS_ARMED, "a layer is running: packets are accepted into it"),
    _flag("CLEARING", STATUS_CLEARING, "the tile-counter memory is being swept to zero"),
    _flag("SWEEPING", STATUS_SWEEPING, "the end-of-layer sweep (counts, last tiles, done word) runs"),
    _flag("DONE", STATUS_DONE, "the layer ended and its done word was written"),
    _flag("ERROR", STATUS_ERROR, "any ERRORS bit is set"),
)
#: PARAMS: configuration bytes, each cut to 8 bits (see :meth:`CsrMap.params_word`)
PARAMS_FIELDS = (
    BitField("LANES", 0, 8, "packet input lanes"),
    BitField("EXPERTS", 8, 8, "local experts"),
    BitField("SOURCES", 16, 8, "source GPUs"),
    BitField("TAGS", 24, 8, "tags (in-flight rows) per source"),
)


#: the most sources a hub's CSR map describes (PARAMS holds the count in a byte)
MAX_SOURCES = 255


#: protocol v3's register arrays (one element per local rank of the node, per relay reason)
RELAY_ARRAYS = ("FWD_ROWS", "RELAY_DROPS")


def relay_registers(cfg: HubConfig) -> list:
    """Protocol v3's registers (``relay: true``), as ``(name, count, words, width, access,
    doc)``: where this hub sits (its node and local rank, written before START), what the
    relay did (rows relayed, written here, forwarded per destination GPU, forwards waiting
    for a credit, forwarded rows received) and its drops by
    :class:`~moehub.spec.formats.RelayReason`; the reduce-on-combine's sums."""
    return [
        ("NODE_ID", 1, 1, cfg.node_bits, "rw", "this hub's node (relay rows from it are refused)"),
        ("LOCAL_RANK", 1, 1, cfg.gpu_bits, "rw", "this hub's GPU in its node: targets of that rank are written here"),
        ("RELAY_ROWS", 1, 1, 32, "ro", "relay rows accepted (one per (token, this node) from a remote GPU)"),
        ("RELAY_LOCAL", 1, 1, 32, "ro", "relay rows with targets on this GPU (handed to the multicast path)"),
        ("FWD_ROWS", cfg.node_gpus, 1, 32, "ro", "forward rows sent, per destination local rank"),
        ("FWD_WAIT", 1, 1, 32, "ro", "forward rows waiting for a forward credit"),
        ("FWD_IN", 1, 1, 32, "ro", "forwarded rows accepted from the node's relays"),
        ("RELAY_DROPS", len(RelayReason), 1, 32, "ro", "rows dropped per RelayReason (see formats.RelayReason)"),
        ("RED_ROWS", 1, 1, 32, "ro", "reduced rows sent back: one per (token, node), its sum final"),
        ("RED_OPEN", 1, 1, 32, "ro", "accumulators open: (source, token) sums still waiting for partial rows"),
        ("RED_INCOMPLETE", 1, 1, 32, "ro", "sums sent at a flush before all their partial rows came"),
    ]


@dataclass(frozen=True)
class Register:
    name: str
    offset: int        #: word address of element 0, word 0
    count: int         #: array length (1 for a scalar)
    words: int         #: 32-bit words per element
    width: int         #: meaningful bits per element
    access: str        #: "rw", "ro" or "wo"
    doc: str
    array: bool = False  #: one element per expert / source / reason (even if count is 1)

    def addr(self, index: int = 0, word: int = 0) -> int:
        if not 0 <= index < self.count:
            raise IndexError(f"{self.name}[{index}]: index out of range 0..{self.count - 1}")
        return self.offset + index * self.words + word


class CsrMap:
    """Register list for one hub configuration.

    Parameters
    ----------
    cfg : HubConfig
        The hub configuration.
    strict : bool
        Enforce the RTL's limits (default): a hub of more than 255 sources has no CSR map
        (``ConfigError``: PARAMS holds the count in a byte). ``strict=False`` builds the map
        anyway, for the reference model of hubs the RTL does not build (the
        co-simulation's large systems). Above 32 sources EOS_SEEN spans
        ``ceil(sources / 32)`` words like any register wider than a word.

    Attributes
    ----------
    registers : dict of str to Register
        The registers in address order.
    size_words : int
        Words the map spans (addresses ``0 .. size_words - 1``).
    addr_bits : int
        Width of the register bus address.
    """

    def __init__(self, cfg: HubConfig, *, strict: bool = True):
        if strict and cfg.sources > MAX_SOURCES:
            raise ConfigError(f"hub[{cfg.name}].sources = {cfg.sources}: PARAMS holds the "
                              f"source count in a byte (at most {MAX_SOURCES} sources)")
        self.cfg = cfg
        aw = (cfg.addr_bits + CSR_DATA_BITS - 1) // CSR_DATA_BITS
        sw = (cfg.sources + CSR_DATA_BITS - 1) // CSR_DATA_BITS
        regs = [
            ("ID", 1, 1, 32, "ro", "constant 0x4D4F4548 ('MOEH')"),
            ("PARAMS", 1, 1, 32, "ro", "lanes | experts << 8 | sources << 16 | tags << 24"),
            ("CTRL", 1, 1, 3, "wo", "bit0 START, bit1 FLUSH, bit2 CLEAR_ERRORS (strobes)"),
            ("STATUS", 1, 1, 5, "ro", "bit0 ARMED, bit1 CLEARING, bit2 SWEEPING, bit3 DONE, bit4 ERROR"),
            ("ERRORS", 1, 1, len(config_reasons(cfg)), "ro", "sticky bit per Reason; cleared by CTRL.CLEAR_ERRORS"),
            ("EPOCH", 1, 1, 32, "rw", "value written into tile flags and the done word"),
            ("TILE_ROWS_LOG2", 1, 1, 8, "rw", "log2(rows per tile); takes effect at START"),
            ("TIMEOUT", 1, 1, 32, "rw", "watchdog: idle cycles of an armed layer before a flush (0 = off)"),
            ("FLAG_BASE", 1, aw, cfg.addr_bits, "rw", "flag array: 4 B per (expert, tile)"),
            ("META_BASE", 1, aw, cfg.addr_bits, "rw",
             f"metadata arrays: {cfg.meta_word_bytes} B per (expert, row)"),
            ("COUNT_BASE", 1, aw, cfg.addr_bits, "rw",
             "final row count per expert (4 B each), then the layer-done word"),
            ("INFLIGHT", 1, 1, 32, "ro", "rows open in the row table"),
            ("EOS_SEEN", 1, sw, cfg.sources, "ro", "bit per source: end-of-stream received"),
            ("REGION_BASE", cfg.experts, aw, cfg.addr_bits, "rw", "input region base per expert"),
            ("REGION_CAP", cfg.experts, 1, cfg.cap_bits, "rw", "region capacity in rows per expert"),
            ("ROWS", cfg.experts, 1, cfg.cap_bits, "ro", "rows allocated per expert this layer"),
            ("OVERFLOW", cfg.experts, 1, 32, "ro", "rows dropped for region overflow per expert"),
            ("SRC_ROWS", cfg.sources, 1, cfg.count_bits, "ro",
             "rows opened per source (compare with SRC_EOS)"),
            ("SRC_EOS", cfg.sources, 1, cfg.count_bits, "ro", "end-of-stream row count per source"),
            ("DROPS", len(config_reasons(cfg)), 1, 32, "ro", "counter per Reason (see formats.Reason)"),
        ]
        if cfg.multicast or cfg.paged:      # protocol v2's pool (after v1's registers)
            regs += [
                ("POOL_BASE", 1, aw, cfg.addr_bits, "rw",
                 "the pool: multicast rows' data (arena) and, paged, every page (a tile of rows)"),
                ("POOL_CAP", 1, 1, field_bits(cfg.pool_rows), "rw",
                 "rows of the static multicast arena (unused when paged); takes effect at START"),
                ("PAGE_FREE", 1, 1, 16, "wo", "write a page number to hand the page back (paged)"),
                ("POOL_FREE", 1, 1, 32, "ro", "pages free: returned plus never handed out (paged)"),
            ]
        if cfg.relay:                       # protocol v3's relay (after v2's registers)
            regs += relay_registers(cfg)
        self.registers: dict[str, Register] = {}
        off = 0
        arrays = {"REGION_BASE", "REGION_CAP", "ROWS", "OVERFLOW", "SRC_ROWS", "SRC_EOS", "DROPS",
                  *RELAY_ARRAYS}
        for name, count, words, width, access, doc in regs:
            self.registers[name] = Register(name, off, count, words, width, access, doc,
                                            name in arrays)
            off += count * words
        self.size_words = off
        self.addr_bits = max(1, (off - 1).bit_length())

    def __getitem__(self, name: str) -> Register:
        return self.registers[name]

    def addr(self, name: str, index: int = 0, word: int = 0) -> int:
        return self.registers[name].addr(index, word)

    def word_writes(self, name: str, value: int, index: int = 0) -> list[tuple[int, int]]:
        """The bus writes ``(addr, data)`` that write ``value`` to register ``name[index]``:
        one per word, low word first. ``value`` must fit the register's words."""
        r = self.registers[name]
        if not 0 <= value < 1 << (CSR_DATA_BITS * r.words):
            raise ValueError(f"{name}[{index}] = {value:#x}: does not fit "
                             f"{r.words} x {CSR_DATA_BITS}-bit word(s)")
        mask = (1 << CSR_DATA_BITS) - 1
        return [(r.addr(index, w), value >> (CSR_DATA_BITS * w) & mask) for w in range(r.words)]

    def decode(self, addr: int) -> tuple[Register, int, int] | None:
        """``(register, index, word)`` at word address ``addr``; None if it is unmapped."""
        for r in self.registers.values():
            if r.offset <= addr < r.offset + r.count * r.words:
                index, word = divmod(addr - r.offset, r.words)
                return r, index, word
        return None

    def params_word(self) -> int:
        """The PARAMS constant: each value of :data:`PARAMS_FIELDS` cut to its field."""
        c = self.cfg
        values = {"LANES": c.lanes, "EXPERTS": c.experts, "SOURCES": c.sources,
                  "TAGS": c.tags_per_source}
        return sum((values[f.name] << f.lsb) & f.mask for f in PARAMS_FIELDS)

    def fields(self, name: str) -> tuple[BitField, ...]:
        """Named bit fields of register ``name``; empty for a register that holds one value
        (its ``width`` low bits), so software needs no field table for those."""
        if name == "ERRORS":
            return tuple(BitField(r.name, int(r), 1, f"sticky: {r.name} seen") for r in config_reasons(self.cfg))
        return {"CTRL": CTRL_FIELDS, "STATUS": STATUS_FIELDS, "PARAMS": PARAMS_FIELDS}.get(name, ())

    def reset_value(self, name: str) -> int:
        """Value register ``name`` reads right after reset (every element of an array): the
        constants, the CSR bank's defaults (TILE_ROWS_LOG2, TIMEOUT), else 0 (read-only
        state registers hold no layer yet). tests/test_c_header.py checks it against the
        reference model, whose registers tests/test_register_model.py proves equal to the
        CSR bank's."""
        c = self.cfg
        return {"ID": HUB_ID, "PARAMS": self.params_word(),
                "TILE_ROWS_LOG2": c.tile_rows.bit_length() - 1,
                "TIMEOUT": c.timeout_cycles}.get(name, 0)

    def clamps(self) -> dict[str, tuple[int, int]]:
        """``name -> (low, high)``: the range a write to a one-word register is clamped to
        (after it is cut to the register's width), as the CSR bank does."""
        c = self.cfg
        return {"TILE_ROWS_LOG2": (c.min_tile_rows.bit_length() - 1, c.max_tile_rows.bit_length() - 1),
                "REGION_CAP": (0, c.max_rows_per_expert), "POOL_CAP": (0, c.pool_rows)}

    def to_json(self) -> str:
        return json.dumps({
            "config": self.cfg.name, "word_bytes": 4, "size_words": self.size_words,
            "registers": [r.__dict__ for r in self.registers.values()],
            "reasons": {r.name: int(r) for r in config_reasons(self.cfg)},
        }, indent=2)

    def to_c_header(self) -> str:
        """The map as a C header for driver writers (see :func:`c_header`)."""
        return c_header(self)


# ------------------------------------------------------------------ C header
#: prefix of every symbol of the C header
C_PREFIX = "MOEHUB_"
#: ``MOEHUB_<REG>_ACCESS`` values: bit 0 readable, bit 1 writable
C_ACCESS = {"ro": 1, "wo": 2, "rw": 3}


#: derived quantities of :class:`HubConfig` exported as ``MOEHUB_CFG_<NAME>``
C_DERIVED = ("chunks_per_row", "stride_bytes", "tiles_per_expert", "meta_word_bytes",
             "src_bits", "tag_bits", "expert_bits", "chunk_bits", "slot_bits", "count_bits",
             "cap_bits")


def _c_int(value: int, hexa: bool = False) -> str:
    """An unsigned C constant (hexadecimal for addresses, masks and register values):
    ``..u`` when it fits 32 bits, else ``UINT64_C(..)``."""
    text = f"{value:#x}" if hexa else str(value)
    return f"{text}u" if value < 1 << 32 else f"UINT64_C({text})"


def _define(name: str, value, doc: str = "", hexa: bool = False) -> str:
    """``#define MOEHUB_<name> value /* doc */``; ints become unsigned constants."""
    text = _c_int(value, hexa) if isinstance(value, int) and not isinstance(value, bool) else str(value)
    return f"#define {C_PREFIX}{name} {text}" + (f" /* {doc} */" if doc else "")


def _c_config(cfg: HubConfig) -> list[str]:
    """The configuration the RTL was generated for: every integer parameter of the hub
    config, and the derived sizes a driver needs (rows, tiles, strides)."""
    out = ["/* ---- configuration ---- */", _define("CONFIG_NAME", f'"{cfg.name}"')]
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, int) and not isinstance(value, bool):
            out.append(_define(f"CFG_{f.name.upper()}", value))
    out.append(_define("CFG_HUB_CLOCK_GHZ", repr(float(cfg.hub_clock_GHz)),
                       "clock the config assumes for reporting"))
    for name in C_DERIVED:
        out.append(_define(f"CFG_{name.upper()}", getattr(cfg, name)))
    return out


def _c_register(cmap: CsrMap, r: Register) -> list[str]:
    """Offsets (byte ``_OFFSET``, word ``_INDEX``), size, access, reset value and clamp of
    one register; an array also gets its element count, stride and ``_OFFSET_AT(i)``."""
    size = ("each " if r.array else "") + f"{r.width} bits" \
        + (f" in {r.words} words, low first" if r.words > 1 else "")
    name = f"{r.name}[{r.count}]" if r.array else r.name
    out = ["", f"/* {name}: {r.access}, {size}: {r.doc} */",
           _define(f"{r.name}_INDEX", r.offset, "word index"),
           _define(f"{r.name}_OFFSET", 4 * r.offset, "byte offset" + (" of element 0" if r.array else ""), True),
           _define(f"{r.name}_WORDS", r.words),
           _define(f"{r.name}_WIDTH", r.width, "meaningful bits"),
           *([_define(f"{r.name}_MASK", (1 << r.width) - 1, hexa=True)] if r.width <= 64 else
             [f"/* (no {C_PREFIX}{r.name}_MASK: {r.width} bits are wider than a C integer) */"]),
           _define(f"{r.name}_ACCESS", f"{C_PREFIX}ACCESS_{r.access.upper()}"),
           _define(f"{r.name}_RESET", cmap.reset_value(r.name), "value after reset", True)]
    if r.array:
        out += [_define(f"{r.name}_COUNT", r.count, "elements"),
                _define(f"{r.name}_STRIDE", 4 * r.words, "bytes between elements"),
                f"#define {C_PREFIX}{r.name}_OFFSET_AT(i) ({C_PREFIX}{r.name}_OFFSET + "
                f"(i) * {C_PREFIX}{r.name}_STRIDE)"]
    lo_hi = cmap.clamps().get(r.name)
    if lo_hi:
        out += [_define(f"{r.name}_MIN", lo_hi[0], "writes are clamped to [MIN, MAX]"),
                _define(f"{r.name}_MAX", lo_hi[1])]
    return out + _c_fields(f"{r.name}_", cmap.fields(r.name))


def _c_fields(prefix: str, fields) -> list[str]:
    """``_SHIFT``, ``_MASK`` (in place) and ``_WIDTH`` of each field."""
    out = []
    for f in fields:
        out += [_define(f"{prefix}{f.name}_SHIFT", f.lsb, f.doc),
                _define(f"{prefix}{f.name}_MASK", f.mask, hexa=True),
                _define(f"{prefix}{f.name}_WIDTH", f.width)]
    return out


def _c_reasons(cfg: HubConfig) -> list[str]:
    """Drop/error reasons: the index into DROPS and the bit of ERRORS."""
    out = ["", "/* ---- reasons: index into DROPS[], bit number in ERRORS ---- */"]
    out += [_define(f"REASON_{r.name}", int(r)) for r in config_reasons(cfg)]
    return out + [_define("REASON_COUNT", len(config_reasons(cfg)))]


def _c_outputs(cfg: HubConfig) -> list[str]:
    """Layout of the arrays the hub writes in memory (addresses relative to FLAG_BASE,
    META_BASE and COUNT_BASE; as :mod:`moehub.spec.formats` forms them)."""
    p = C_PREFIX
    meta = HubFormats(cfg).meta_word
    out = ["", "/* ---- output arrays in memory (byte offsets from FLAG_BASE, META_BASE, COUNT_BASE) ---- */",
           _define("FLAG_ENTRY_BYTES", 4, "one per (expert, tile); value: the layer's EPOCH"),
           f"#define {p}FLAG_ENTRY_OFFSET(e, tile) ((((e) * {p}CFG_TILES_PER_EXPERT) + (tile)) * {p}FLAG_ENTRY_BYTES)",
           _define("META_ENTRY_BYTES", cfg.meta_word_bytes, "one per (expert, row)"),
           f"#define {p}META_ENTRY_OFFSET(e, row) ((((e) * {p}CFG_MAX_ROWS_PER_EXPERT) + (row)) * {p}META_ENTRY_BYTES)",
           _define("COUNT_ENTRY_BYTES", 4, "final row count per expert, then the done word"),
           f"#define {p}COUNT_ENTRY_OFFSET(e) ((e) * {p}COUNT_ENTRY_BYTES)",
           _define("DONE_ENTRY_OFFSET", 4 * cfg.experts, "layer-done word (value: EPOCH), after the counts", True)]
    fields = [BitField(f.name.upper(), meta.offsets[f.name], f.width) for f in meta.fields]
    return out + _c_fields("META_WORD_", fields)


def _c_preamble(cmap: CsrMap) -> list[str]:
    from .. import __version__
    c = cmap.cfg
    return [f"/* moehub_csr.h: CSR map of the moehub hub, configuration '{c.name}'.",
            f" * Generated by moehub {__version__} (moehub rtl: spec/csr_map.py c_header) from hub",
            f" * config '{c.name}' (lanes {c.lanes}, experts {c.experts}, sources {c.sources}, tags per",
            f" * source {c.tags_per_source}, tile rows {c.tile_rows}; all parameters: MOEHUB_CFG_*). Do not edit.",
            " *",
            " * Registers are 32-bit words on the CSR bus; <REG>_OFFSET is the byte offset",
            " * (4 x the word index <REG>_INDEX). A register wider than 32 bits spans <REG>_WORDS",
            " * consecutive words, low word first. Arrays (one element per expert, source or",
            " * reason) are <REG>_COUNT elements <REG>_STRIDE bytes apart: <REG>_OFFSET_AT(i).",
            " * Fields: <REG>_<FIELD>_SHIFT, _MASK (in place), _WIDTH; MOEHUB_FIELD_GET/SET.",
            " * Reads of write-only or unmapped words return 0; writes to read-only ones are",
            " * ignored. */",
            "#ifndef MOEHUB_CSR_H", "#define MOEHUB_CSR_H", "", "#include <stdint.h>", "",
            _define("VERSION", f'"{__version__}"', "moehub version that generated this header"),
            _define("REG_COUNT", len(cmap.registers), "registers (an array counts once)"),
            _define("SIZE_WORDS", cmap.size_words, "words the map spans"),
            _define("SIZE_BYTES", 4 * cmap.size_words, hexa=True),
            _define("ADDR_BITS", cmap.addr_bits, "CSR bus (word) address width"),
            _define("ID_VALUE", HUB_ID, "ID register constant ('MOEH')", True),
            _define("ACCESS_RO", C_ACCESS["ro"]), _define("ACCESS_WO", C_ACCESS["wo"]),
            _define("ACCESS_RW", C_ACCESS["rw"]),
            f"#define {C_PREFIX}FIELD_GET(F, v) (((v) & F##_MASK) >> F##_SHIFT)",
            "/* FIELD_SET's value has F_MASK's type (uint32_t, or uint64_t for a 64-bit field) */",
            f"#define {C_PREFIX}FIELD_SET(F, v) ((((v) + (F##_MASK & 0u)) << F##_SHIFT) & F##_MASK)", ""]


def c_header(cmap: CsrMap) -> str:
    """The C header ``moehub_csr.h``: include guard, ``MOEHUB_``-prefixed constants for
    the configuration, every register (byte offset, word index, access, reset value,
    clamp, fields), the reasons and the layout of the output arrays. Raises ValueError if
    two symbols would share a name (a C compiler accepts an identical redefinition)."""
    lines = _c_preamble(cmap) + _c_config(cmap.cfg)
    for r in cmap.registers.values():
        lines += _c_register(cmap, r)
    lines += _c_reasons(cmap.cfg) + _c_outputs(cmap.cfg) + ["", "#endif /* MOEHUB_CSR_H */"]
    names = [ln.split()[1].split("(")[0] for ln in lines if ln.startswith("#define ")]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"C header: symbols defined twice: {', '.join(dup)}")
    return "\n".join(lines) + "\n"
