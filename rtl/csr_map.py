"""The hub's CSR (control and status register) map, derived from a :class:`HubConfig`.

Pure Python: the RTL register bank, the reference model, the testbenches and the
software header/JSON export all take addresses from :class:`CsrMap`; no address is
written down twice. Registers are 32-bit words at word addresses; a register wider than
32 bits (an address with ``addr_bits`` > 32) spans consecutive words, low word first.
Arrays (one register per expert, per source or per reason) are consecutive.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..config.schema import HubConfig, ConfigError
from .formats import Reason

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
        Enforce the RTL's limits (default): a hub of more than 32 sources has no CSR map
        (``ConfigError``). ``strict=False`` builds the map anyway, for the reference model
        of hubs the RTL does not build (the co-simulation's large systems); EOS_SEEN then
        spans ``ceil(sources / 32)`` words like any register wider than a word.

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
        if strict and cfg.sources > CSR_DATA_BITS:
            raise ConfigError(f"hub[{cfg.name}].sources = {cfg.sources}: the EOS_SEEN "
                              f"register supports at most {CSR_DATA_BITS} sources")
        self.cfg = cfg
        aw = (cfg.addr_bits + CSR_DATA_BITS - 1) // CSR_DATA_BITS
        sw = (cfg.sources + CSR_DATA_BITS - 1) // CSR_DATA_BITS
        regs = [
            ("ID", 1, 1, 32, "ro", "constant 0x4D4F4548 ('MOEH')"),
            ("PARAMS", 1, 1, 32, "ro", "lanes | experts << 8 | sources << 16 | tags << 24"),
            ("CTRL", 1, 1, 3, "wo", "bit0 START, bit1 FLUSH, bit2 CLEAR_ERRORS (strobes)"),
            ("STATUS", 1, 1, 5, "ro", "bit0 ARMED, bit1 CLEARING, bit2 SWEEPING, bit3 DONE, bit4 ERROR"),
            ("ERRORS", 1, 1, len(Reason), "ro", "sticky bit per Reason; cleared by CTRL.CLEAR_ERRORS"),
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
            ("DROPS", len(Reason), 1, 32, "ro", "counter per Reason (see formats.Reason)"),
        ]
        self.registers: dict[str, Register] = {}
        off = 0
        arrays = {"REGION_BASE", "REGION_CAP", "ROWS", "OVERFLOW", "SRC_ROWS", "SRC_EOS", "DROPS"}
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
        c = self.cfg
        return (c.lanes & 0xFF) | (c.experts & 0xFF) << 8 | (c.sources & 0xFF) << 16 \
            | (c.tags_per_source & 0xFF) << 24

    def to_json(self) -> str:
        return json.dumps({
            "config": self.cfg.name, "word_bytes": 4, "size_words": self.size_words,
            "registers": [r.__dict__ for r in self.registers.values()],
            "reasons": {r.name: int(r) for r in Reason},
        }, indent=2)

    def to_c_header(self) -> str:
        lines = [f"/* moehub CSR map for hub config '{self.cfg.name}' (generated). */",
                 "/* Word addresses; multiply by 4 for byte offsets. */"]
        for r in self.registers.values():
            lines.append(f"#define MOEHUB_{r.name.upper()} {r.offset:#06x} "
                         f"/* x{r.count}, {r.words} word(s) each, {r.access}: {r.doc} */")
        for reason in Reason:
            lines.append(f"#define MOEHUB_REASON_{reason.name} {int(reason)}")
        return "\n".join(lines) + "\n"
