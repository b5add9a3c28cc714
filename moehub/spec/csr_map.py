"""The hub's CSR (control and status register) map, derived from a :class:`HubConfig`.

Pure Python, one description of every register from which everything else is derived:
the RTL register bank (:class:`moehub.rtl.csr.CsrBank`: ports, reset values, clamps,
CTRL strobes, constant reads), the reference model's register access
(:meth:`moehub.spec.model.HubModel.write`/``read``), the testbenches' addresses, the C
header (:func:`c_header`) and the JSON export (:meth:`CsrMap.to_json`). No address,
reset value or clamp is written down twice.

The description follows the habit of amaranth-soc's ``csr.Register``/``csr.Field``: a
:class:`Register` is a named value with an access kind, a reset value and a list of
:class:`Field` bit ranges; a :class:`RegisterMap` places registers at word addresses and
refuses a map where two registers share a name or a word. Unlike amaranth-soc's, these
objects are pure data (no Amaranth): the RTL bank elaborates them.

Registers are 32-bit words at word addresses; a register wider than 32 bits (an address
with ``addr_bits`` > 32) spans consecutive words, low word first. Arrays (one register per
expert, per source or per reason) are consecutive.

What a register does on the bus follows from its attributes:

* ``const`` (ID, PARAMS): read-only, reads its ``reset`` value forever;
* other ``"ro"`` registers read the hub's state (counters, STATUS, ERRORS);
* ``"rw"`` registers are stored: ``reset`` after reset, a write is cut to ``width`` bits
  and, for a one-word register with a ``clamp = (low, high)``, clamped to that range;
* ``"wo"`` registers store nothing: a register with fields (CTRL) raises one strobe per
  set field bit in the cycle of the write, one without (PAGE_FREE) hands the word written
  and a strobe to the hub;
* reads of write-only or unmapped words return 0; writes to read-only ones are ignored.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from .config import HubConfig, ConfigError, field_bits
from .formats import HubFormats, ReduceReason, RelayReason, config_reasons

CSR_DATA_BITS = 32
HUB_ID = 0x4D4F4548  # "MOEH"

#: access kinds of a register: bit 0 of ``MOEHUB_<REG>_ACCESS`` readable, bit 1 writable
ACCESS = ("ro", "wo", "rw")

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


class CsrMapError(ValueError):
    """A register or register map that cannot be built (the message names the register,
    the field and the offending value)."""


@dataclass(frozen=True)
class Field:
    """A named bit range ``[lsb, lsb + width)`` of a register (its C header symbols are
    ``<REG>_<FIELD>_SHIFT``, ``_MASK``, ``_WIDTH``). Its access is its register's."""
    name: str
    lsb: int
    width: int
    doc: str = ""

    def __post_init__(self):
        if not self.name.isidentifier():
            raise CsrMapError(f"field name {self.name!r} is not an identifier")
        if self.lsb < 0 or self.width < 1:
            raise CsrMapError(f"field {self.name}: lsb = {self.lsb}, width = {self.width} "
                              f"(need lsb >= 0 and width >= 1)")

    @property
    def msb(self) -> int:
        """The field's highest bit."""
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        """The field's bits in place."""
        return ((1 << self.width) - 1) << self.lsb

    def get(self, value: int) -> int:
        """The field's value within register value ``value``."""
        return (value & self.mask) >> self.lsb


def _flag(name: str, mask: int, doc: str) -> Field:
    return Field(name, mask.bit_length() - 1, 1, doc)


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
    Field("LANES", 0, 8, "packet input lanes"),
    Field("EXPERTS", 8, 8, "local experts"),
    Field("SOURCES", 16, 8, "source GPUs"),
    Field("TAGS", 24, 8, "tags (in-flight rows) per source"),
)


@dataclass(frozen=True)
class Register:
    """One register (or array of registers) of the map.

    ``offset`` is the word address of element 0, word 0 (set by the map that places the
    register, see :meth:`RegisterMap.place`); an element spans ``words`` =
    ``ceil(width / 32)`` words. Construction checks the description: a known access
    kind, a positive width and count, fields inside the register's width that neither
    overlap nor share a name, a reset value and a clamp that fit the width, ``const``
    only for a read-only register, a clamp only for a one-word read-write one.
    """
    name: str
    width: int                 #: meaningful bits per element
    access: str                #: "rw", "ro" or "wo"
    doc: str
    count: int = 1             #: array length (1 for a scalar)
    array: bool = False        #: one element per expert / source / reason (even if count is 1)
    fields: tuple[Field, ...] = ()  #: named bit ranges; empty for a register holding one value
    reset: int = 0             #: value after reset (every element of an array)
    clamp: tuple[int, int] | None = None  #: (low, high) a write is clamped to, after the cut to width
    const: bool = False        #: reads ``reset`` forever (ID, PARAMS)
    offset: int = 0            #: word address of element 0, word 0

    def __post_init__(self):
        n = self.name
        if not n.isidentifier():
            raise CsrMapError(f"register name {n!r} is not an identifier")
        if self.access not in ACCESS:
            raise CsrMapError(f"register {n}: access = {self.access!r} (known: {', '.join(ACCESS)})")
        if self.width < 1 or self.count < 1 or self.offset < 0:
            raise CsrMapError(f"register {n}: width = {self.width}, count = {self.count}, offset = "
                              f"{self.offset} (need width >= 1, count >= 1, offset >= 0)")
        if self.count > 1 and not self.array:
            raise CsrMapError(f"register {n}: count = {self.count} needs array = True")
        seen: dict[str, Field] = {}
        for f in sorted(self.fields, key=lambda f: f.lsb):
            if f.name in seen:
                raise CsrMapError(f"register {n}: two fields named {f.name}")
            if f.msb >= self.width:
                raise CsrMapError(f"register {n}: field {f.name} (bits {f.msb}:{f.lsb}) is wider "
                                  f"than the register's {self.width} bits")
            for g in seen.values():
                if g.mask & f.mask:
                    raise CsrMapError(f"register {n}: fields {g.name} (bits {g.msb}:{g.lsb}) and "
                                      f"{f.name} (bits {f.msb}:{f.lsb}) overlap")
            seen[f.name] = f
        if not 0 <= self.reset < 1 << self.width:
            raise CsrMapError(f"register {n}: reset = {self.reset:#x} does not fit {self.width} bits")
        if self.const and self.access != "ro":
            raise CsrMapError(f"register {n}: a constant must be read-only (access = {self.access!r})")
        if self.clamp is not None:
            lo, hi = self.clamp
            if self.access != "rw" or self.words != 1:
                raise CsrMapError(f"register {n}: clamp = {self.clamp} needs a one-word read-write register")
            if not 0 <= lo <= hi < 1 << self.width:
                raise CsrMapError(f"register {n}: clamp = {self.clamp} is not a range within {self.width} bits")

    @property
    def words(self) -> int:
        """32-bit words per element."""
        return (self.width + CSR_DATA_BITS - 1) // CSR_DATA_BITS

    @property
    def span(self) -> range:
        """The word addresses the register (every element) takes."""
        return range(self.offset, self.offset + self.count * self.words)

    def field(self, name: str) -> Field:
        """The field called ``name``."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r} "
                       f"(fields: {', '.join(f.name for f in self.fields) or 'none'})")

    def addr(self, index: int = 0, word: int = 0) -> int:
        """Word address of word ``word`` of element ``index``."""
        if not 0 <= index < self.count:
            raise IndexError(f"{self.name}[{index}]: index out of range 0..{self.count - 1}")
        if not 0 <= word < self.words:
            raise IndexError(f"{self.name}: word {word} out of range 0..{self.words - 1}")
        return self.offset + index * self.words + word

    def clamped(self, value: int) -> int:
        """``value`` (already cut to the register's width) after the register's clamp."""
        if self.clamp is None:
            return value
        lo, hi = self.clamp
        return min(max(value, lo), hi)

    def as_dict(self) -> dict:
        """The register as JSON-ready data (the export of :meth:`CsrMap.to_json`)."""
        return {"name": self.name, "offset": self.offset, "count": self.count, "words": self.words,
                "width": self.width, "access": self.access, "doc": self.doc, "array": self.array,
                "reset": self.reset, "clamp": list(self.clamp) if self.clamp else None,
                "const": self.const,
                "fields": [{"name": f.name, "lsb": f.lsb, "width": f.width, "doc": f.doc}
                           for f in self.fields]}


class RegisterMap:
    """Registers at word addresses: a name and a word belong to one register.

    Parameters
    ----------
    registers : iterable of Register
        Registers with their offsets (see :meth:`place` to lay them out one after the
        other). Two registers of one name, or two sharing a word, raise
        :class:`CsrMapError` naming both.

    Attributes
    ----------
    registers : dict of str to Register
        The registers in address order.
    size_words : int
        Words up to the last register's end (addresses ``0 .. size_words - 1``).
    addr_bits : int
        Width of the register bus address.
    """

    def __init__(self, registers):
        by_name: dict[str, Register] = {}
        for r in registers:
            if r.name in by_name:
                raise CsrMapError(f"two registers named {r.name} (offsets {by_name[r.name].offset} "
                                  f"and {r.offset})")
            by_name[r.name] = r
        ordered = sorted(by_name.values(), key=lambda r: r.offset)
        for a, b in zip(ordered, ordered[1:]):
            if b.offset < a.span.stop:
                raise CsrMapError(f"registers {a.name} (words {a.span.start}..{a.span.stop - 1}) and "
                                  f"{b.name} (words {b.span.start}..{b.span.stop - 1}) overlap at word "
                                  f"{b.offset}")
        self.registers: dict[str, Register] = {r.name: r for r in ordered}
        self.size_words = ordered[-1].span.stop if ordered else 0
        self.addr_bits = max(1, (self.size_words - 1).bit_length())

    @staticmethod
    def place(registers, start: int = 0) -> list[Register]:
        """``registers`` with offsets one after the other from word ``start``, in order."""
        out, off = [], start
        for r in registers:
            out.append(dataclasses.replace(r, offset=off))
            off += r.count * r.words
        return out

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
            if addr in r.span:
                index, word = divmod(addr - r.offset, r.words)
                return r, index, word
        return None


#: the most sources a hub's CSR map describes (PARAMS holds the count in a byte)
MAX_SOURCES = 255


def _counter(name: str, doc: str, count: int | None = None, width: int = 32) -> Register:
    """A read-only counter; given a ``count`` (per expert, source, reason or rank) an array
    of that many, even of one."""
    return Register(name, width, "ro", doc, count=count or 1, array=count is not None)


def relay_registers(cfg: HubConfig) -> list[Register]:
    """Protocol v3's registers (``relay: true``): where this hub sits (its node and local
    rank, written before START), what the relay did (rows relayed, written here, forwarded
    per destination GPU, forwards waiting for a credit, forwarded rows received) and its
    drops by :class:`~moehub.spec.formats.RelayReason`; the reduce-on-combine's sums and its
    refusals by :class:`~moehub.spec.formats.ReduceReason`."""
    return [
        Register("NODE_ID", cfg.node_bits, "rw", "this hub's node (relay rows from it are refused)"),
        Register("LOCAL_RANK", cfg.gpu_bits, "rw", "this hub's GPU in its node: targets of that rank are written here"),
        _counter("RELAY_ROWS", "relay rows accepted (one per (token, this node) from a remote GPU)"),
        _counter("RELAY_LOCAL", "relay rows with targets on this GPU (handed to the multicast path)"),
        _counter("FWD_ROWS", "forward rows sent, per destination local rank", cfg.node_gpus),
        _counter("FWD_WAIT", "forward rows waiting for a forward credit"),
        _counter("FWD_IN", "forwarded rows accepted from the node's relays"),
        _counter("RELAY_DROPS", "rows dropped per RelayReason (see formats.RelayReason)", len(RelayReason)),
        _counter("RELAY_OVERFLOW", "relay rows lost: they came while the row queue was full (a source "
                 "sent without an R credit; 0 while the credits are kept)"),
        Register("RED_CTRL", 1, "wo", "the reduce's strobes", fields=(Field(
            "RED_FLUSH", 0, 1, "the combine's end: every sum still open is sent as it is (counted in "
            "RED_INCOMPLETE) and its record freed"),)),
        Register("RED_ACC_BASE", cfg.addr_bits, "rw", "where the reduce's FP32 accumulator rows start in "
                 "HBM: the sum of record r at + r x 2 row_bytes (written before the combine)"),
        _counter("RED_ROWS", "reduced rows sent back: one per (token, node), its sum final"),
        _counter("RED_OPEN", "accumulators open: (source, token) sums still waiting for partial rows"),
        _counter("RED_INCOMPLETE", "sums sent at a flush before all their partial rows came"),
        _counter("RED_DROPS", "reduce refusals per ReduceReason (see formats.ReduceReason): partial rows "
                 "dropped (by the reduce, or at the input: a sender or P tag outside the window, an owner "
                 "not served here), opens that made no sum", len(ReduceReason)),
        _counter("RED_ACC_READS", "accumulator rows read from HBM (a sum's middle and last parts, a "
                 "flushed sum with a part in): 2 x row_bytes each"),
        _counter("RED_ACC_WRITES", "accumulator rows written to HBM (a sum's first and middle parts): "
                 "2 x row_bytes each"),
        Register("RELAY_STAGE_BASE", cfg.addr_bits, "rw", "where the relay's staging rows start in HBM: the "
                 "relay row of R-window slot k (its source's node among the others x tags_per_source + tag) "
                 "at + k x row stride (written before START)"),
        _counter("RELAY_STAGE_DROPS", "relay rows' chunks the staging dropped: a chunk already in, or one "
                 "past the row (the packet manager counts its own copy of a row naming this GPU)"),
        Register("PARTIAL_STAGE_BASE", cfg.addr_bits, "rw", "where the partial staging's rows start in HBM: "
                 "the partial row of P-window slot k (its sender's local rank x the P tags + its tag) at + k x "
                 "row stride (written before the combine)"),
        _counter("PARTIAL_STAGE_DROPS", "partial rows' chunks the partial staging dropped: a chunk already "
                 "in, or one past the row"),
    ]


def relay_status_registers(cfg: HubConfig) -> list[Register]:
    """The relay registers the hub's CSR bank reads from the relay (its read-only
    counters), in map order: what :class:`~moehub.rtl.hub.MoEHub`'s ``relay_status`` port
    carries."""
    return [r for r in relay_registers(cfg) if r.access == "ro"]


def params_word(cfg: HubConfig) -> int:
    """The PARAMS constant: each value of :data:`PARAMS_FIELDS` cut to its field."""
    values = {"LANES": cfg.lanes, "EXPERTS": cfg.experts, "SOURCES": cfg.sources,
              "TAGS": cfg.tags_per_source}
    return sum((values[f.name] << f.lsb) & f.mask for f in PARAMS_FIELDS)


def hub_registers(cfg: HubConfig) -> list[Register]:
    """The hub's registers in address order (offsets not yet placed): protocol v1's, then
    protocol v2's pool (multicast or paged), then protocol v3's relay."""
    reasons = config_reasons(cfg)
    regs = [
        Register("ID", 32, "ro", "constant 0x4D4F4548 ('MOEH')", reset=HUB_ID, const=True),
        Register("PARAMS", 32, "ro", "the configuration's sizes, a byte each",
                 fields=PARAMS_FIELDS, reset=params_word(cfg), const=True),
        Register("CTRL", 3, "wo", "strobes: START arms a layer (a running one is abandoned), FLUSH "
                 "ends it now, CLEAR_ERRORS clears ERRORS", fields=CTRL_FIELDS),
        Register("STATUS", 5, "ro", "the layer's progress, and whether an ERRORS bit is set",
                 fields=STATUS_FIELDS),
        Register("ERRORS", len(reasons), "ro", "a sticky bit per reason seen, until CTRL.CLEAR_ERRORS",
                 fields=tuple(Field(r.name, int(r), 1, f"sticky: {r.name} seen") for r in reasons)),
        Register("EPOCH", 32, "rw", "value of the tile flags and the done word; latched at START"),
        Register("TILE_ROWS_LOG2", 8, "rw", "log2(rows per tile); takes effect at START",
                 reset=cfg.tile_rows.bit_length() - 1,
                 clamp=(cfg.min_tile_rows.bit_length() - 1, cfg.max_tile_rows.bit_length() - 1)),
        Register("TIMEOUT", 32, "rw",
                 "watchdog: idle cycles of an armed layer before a forced flush (0 = off)",
                 reset=cfg.timeout_cycles),
        Register("FLAG_BASE", cfg.addr_bits, "rw", "flag array: 4 B per (expert, tile); latched at START"),
        Register("META_BASE", cfg.addr_bits, "rw",
                 f"metadata arrays: {cfg.meta_word_bytes} B per (expert, row); latched at START"),
        Register("COUNT_BASE", cfg.addr_bits, "rw", "final row count per expert (4 B each), then "
                 "the layer-done word; latched at START"),
        _counter("INFLIGHT", "rows open in the row table"),
        Register("EOS_SEEN", cfg.sources, "ro", "bit per source: end-of-stream received"),
        Register("REGION_BASE", cfg.addr_bits, "rw", "input region base per expert; change it "
                 "only between layers", count=cfg.experts, array=True),
        Register("REGION_CAP", cfg.cap_bits, "rw", "region capacity in rows per expert; takes "
                 "effect at START", count=cfg.experts, array=True, clamp=(0, cfg.max_rows_per_expert)),
        _counter("ROWS", "rows allocated per expert this layer", cfg.experts, cfg.cap_bits),
        _counter("OVERFLOW", "rows dropped for region overflow per expert; reset at START", cfg.experts),
        _counter("SRC_ROWS", "rows opened per source (compare with SRC_EOS); reset at START",
                 cfg.sources, cfg.count_bits),
        _counter("SRC_EOS", "end-of-stream row count per source", cfg.sources, cfg.count_bits),
        _counter("DROPS", "drops and errors per reason (index: the reason's number); reset at "
                 "START", len(reasons)),
    ]
    if cfg.multicast or cfg.paged:      # protocol v2's pool (after v1's registers)
        regs += [
            Register("POOL_BASE", cfg.addr_bits, "rw",
                     "the pool: multicast rows' data (arena) and, paged, every page (a tile of rows)"),
            Register("POOL_CAP", field_bits(cfg.pool_rows), "rw",
                     "rows of the static multicast arena (unused when paged); takes effect at START",
                     clamp=(0, cfg.pool_rows)),
            Register("PAGE_FREE", 16, "wo", "write a page number to hand the page back (paged)"),
            _counter("POOL_FREE", "pages free: returned plus never handed out (paged)"),
        ]
    if cfg.relay:                       # protocol v3's relay (after v2's registers)
        regs += relay_registers(cfg)
    return regs


class CsrMap(RegisterMap):
    """The register map of one hub configuration (:func:`hub_registers`, placed one after
    the other from word 0, so the map is dense).

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
    """

    def __init__(self, cfg: HubConfig, *, strict: bool = True):
        if strict and cfg.sources > MAX_SOURCES:
            raise ConfigError(f"hub[{cfg.name}].sources = {cfg.sources}: PARAMS holds the "
                              f"source count in a byte (at most {MAX_SOURCES} sources)")
        self.cfg = cfg
        super().__init__(self.place(hub_registers(cfg)))

    def params_word(self) -> int:
        """The PARAMS constant (the register's reset value)."""
        return self.registers["PARAMS"].reset

    def to_json(self) -> str:
        """The map for software: every register (:meth:`Register.as_dict`: offset, size,
        access, reset value, clamp, fields) and the reasons' numbers."""
        return json.dumps({
            "config": self.cfg.name, "word_bytes": 4, "size_words": self.size_words,
            "registers": [r.as_dict() for r in self.registers.values()],
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


def _c_register(r: Register) -> list[str]:
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
           _define(f"{r.name}_RESET", r.reset, "value after reset", True)]
    if r.array:
        out += [_define(f"{r.name}_COUNT", r.count, "elements"),
                _define(f"{r.name}_STRIDE", 4 * r.words, "bytes between elements"),
                f"#define {C_PREFIX}{r.name}_OFFSET_AT(i) ({C_PREFIX}{r.name}_OFFSET + "
                f"(i) * {C_PREFIX}{r.name}_STRIDE)"]
    if r.clamp:
        out += [_define(f"{r.name}_MIN", r.clamp[0], "writes are clamped to [MIN, MAX]"),
                _define(f"{r.name}_MAX", r.clamp[1])]
    return out + _c_fields(f"{r.name}_", r.fields)


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
    fields = [Field(f.name.upper(), meta.offsets[f.name], f.width) for f in meta.fields]
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
        lines += _c_register(r)
    lines += _c_reasons(cmap.cfg) + _c_outputs(cmap.cfg) + ["", "#endif /* MOEHUB_CSR_H */"]
    names = [ln.split()[1].split("(")[0] for ln in lines if ln.startswith("#define ")]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"C header: symbols defined twice: {', '.join(dup)}")
    return "\n".join(lines) + "\n"
