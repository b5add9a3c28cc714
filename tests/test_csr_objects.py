"""The CSR map's Register/Field objects: a bad description is refused with an error naming
the register and field, and every consumer of the map -- the C header, the reference
model and the RTL's CSR bank -- reads and writes each register at the same address.

The address test simulates :class:`~moehub.rtl.csr.CsrBank` for a plain, a multicast,
a paged and a relay configuration (so every optional register is placed), takes every
address from the generated header's ``MOEHUB_<REG>_INDEX`` text (not from the map), and
checks there: read-write registers read back in the RTL and in the model, read-only ones
read the RTL input of their name, constants read the header's ``_RESET``, CTRL's field
bits and PAGE_FREE raise their strobes. tests/test_register_model.py compares the model
with the bank bit for bit on two configs; tests/test_c_header.py compiles the header.
The last test reads docs/hub.md's register table as ``moehub report`` renders it from the
map: every register of the four configurations, with its access, and no other.
"""
import re

import pytest
from amaranth.sim import Simulator

from moehub.rtl.csr import CsrBank
from moehub.spec.config import load_hub_config
from moehub.spec.csr_map import (CSR_DATA_BITS, CsrMap, CsrMapError, Field, Register, RegisterMap,
                                 relay_registers)
from moehub.spec.model import HubModel

TINY = load_hub_config("tiny")


# ------------------------------------------------------------------ refused descriptions
def test_overlapping_fields_are_refused():
    with pytest.raises(CsrMapError, match=r"register CTRL: fields A \(bits 2:0\) and B \(bits 3:2\) overlap"):
        Register("CTRL", 8, "wo", "", fields=(Field("A", 0, 3), Field("B", 2, 2)))


def test_a_field_wider_than_its_register_is_refused():
    with pytest.raises(CsrMapError, match=r"register STATUS: field WIDE \(bits 5:3\) is wider than "
                                          r"the register's 5 bits"):
        Register("STATUS", 5, "ro", "", fields=(Field("WIDE", 3, 3),))
    Register("STATUS", 6, "ro", "", fields=(Field("WIDE", 3, 3),))     # (fits one bit wider)


def test_duplicate_field_names_are_refused():
    with pytest.raises(CsrMapError, match="register STATUS: two fields named ARMED"):
        Register("STATUS", 5, "ro", "", fields=(Field("ARMED", 0, 1), Field("ARMED", 1, 1)))


def test_duplicate_register_names_are_refused():
    regs = RegisterMap.place([Register("EPOCH", 32, "rw", ""), Register("EPOCH", 8, "rw", "")])
    with pytest.raises(CsrMapError, match=r"two registers named EPOCH \(offsets 0 and 1\)"):
        RegisterMap(regs)


def test_overlapping_or_shared_addresses_are_refused():
    a = Register("REGION_BASE", 40, "rw", "", count=3, array=True, offset=4)    # words 4..9
    with pytest.raises(CsrMapError, match=r"registers REGION_BASE \(words 4..9\) and ROWS \(words 9..9\) "
                                          r"overlap at word 9"):
        RegisterMap([a, Register("ROWS", 8, "ro", "", offset=9)])
    with pytest.raises(CsrMapError, match=r"registers EPOCH \(words 2..2\) and TIMEOUT \(words 2..2\)"):
        RegisterMap([Register("EPOCH", 32, "rw", "", offset=2), Register("TIMEOUT", 32, "rw", "", offset=2)])
    m = RegisterMap([a, Register("ROWS", 8, "ro", "", offset=10)])      # (just after: accepted)
    assert m.size_words == 11 and m.decode(9) == (a, 2, 1) and m.decode(3) is None


@pytest.mark.parametrize("kwargs, words", [
    (dict(access="rx"), r"register R: access = 'rx' \(known: ro, wo, rw\)"),
    (dict(width=0), r"register R: width = 0"),
    (dict(count=2), r"register R: count = 2 needs array = True"),
    (dict(reset=256), r"register R: reset = 0x100 does not fit 8 bits"),
    (dict(const=True), r"register R: a constant must be read-only \(access = 'rw'\)"),
    (dict(clamp=(3, 300)), r"register R: clamp = \(3, 300\) is not a range within 8 bits"),
    (dict(clamp=(5, 4)), r"register R: clamp = \(5, 4\) is not a range"),
    (dict(access="ro", clamp=(0, 4)), r"register R: clamp = \(0, 4\) needs a one-word read-write register"),
    (dict(name="R-1"), r"register name 'R-1' is not an identifier"),
])
def test_bad_register_descriptions_are_refused(kwargs, words):
    desc = dict(name="R", width=8, access="rw", doc="") | kwargs
    with pytest.raises(CsrMapError, match=words):
        Register(**desc)


def test_bad_fields_are_refused():
    with pytest.raises(CsrMapError, match=r"field F: lsb = -1, width = 1"):
        Field("F", -1, 1)
    with pytest.raises(CsrMapError, match=r"field F: lsb = 0, width = 0"):
        Field("F", 0, 0)


def test_register_objects_carry_the_hub_rules():
    """The map's objects hold what the bank and the model used to spell out by name."""
    cfg = TINY.replace(pool_pages=3)
    cmap = CsrMap(cfg)
    assert cmap["TILE_ROWS_LOG2"].reset == cfg.tile_rows.bit_length() - 1
    assert cmap["TILE_ROWS_LOG2"].clamp == (cfg.min_tile_rows.bit_length() - 1, cfg.max_tile_rows.bit_length() - 1)
    assert cmap["REGION_CAP"].clamp == (0, cfg.max_rows_per_expert) and cmap["POOL_CAP"].clamp == (0, cfg.pool_rows)
    assert cmap["TIMEOUT"].reset == cfg.timeout_cycles
    assert [r.name for r in cmap.registers.values() if r.const] == ["ID", "PARAMS"]
    params = cmap["PARAMS"]
    assert {f.name: f.get(params.reset) for f in params.fields} == {
        "LANES": cfg.lanes, "EXPERTS": cfg.experts, "SOURCES": cfg.sources, "TAGS": cfg.tags_per_source}
    assert cmap["CTRL"].field("FLUSH").mask == 2 and len(cmap["ERRORS"].fields) == cmap["DROPS"].count
    with pytest.raises(KeyError, match="register CTRL has no field 'STOP'"):
        cmap["CTRL"].field("STOP")


# ------------------------------------------------------------------ one address everywhere
CONFIGS = {
    "tiny": TINY,
    "multicast": TINY.replace(topk=3, max_targets=3),
    "paged": TINY.replace(pool_pages=3),
    "relay": TINY.replace(sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1, topk=3, max_targets=3),
}


def _header_symbols(header: str) -> dict[str, int]:
    return {m[1]: int(m[2], 0) for m in re.finditer(r"^#define MOEHUB_(\w+) (0x[0-9a-f]+|\d+)u", header, re.M)}


@pytest.mark.parametrize("name", CONFIGS)
def test_header_model_and_rtl_use_the_same_addresses(name):
    cfg = CONFIGS[name]
    cmap = CsrMap(cfg)
    sym = _header_symbols(cmap.to_c_header())
    dut, model = CsrBank(cfg), HubModel(cfg)
    model_knows = {r.name for r in cmap.registers.values()} - {r.name for r in relay_registers(cfg)}
    bus, word = dut.bus, (1 << CSR_DATA_BITS) - 1
    seen = {"rw": 0, "ro": 0, "const": 0, "wo": 0}
    strobe_names = {f.name.lower() for f in cmap["CTRL"].fields}

    def header_addr(r, i, w):
        return sym[f"{r.name}_INDEX"] + i * sym.get(f"{r.name}_WORDS", 1) + w

    def port(r, i):
        sig = getattr(dut, r.name.lower())
        return sig[i] if r.array else sig

    def pattern(r, i):
        """A value per (register, element) that no other element of the map shares."""
        v = ((r.offset + 1) * 0x9E3779B1 + i * 0x85EBCA77) & ((1 << r.width) - 1)
        return r.clamped(v) if r.clamp else v

    async def read(ctx, addr):
        ctx.set(bus.addr, addr)
        ctx.set(bus.r_stb, 1)
        await ctx.tick()
        ctx.set(bus.r_stb, 0)
        await ctx.tick()
        return ctx.get(bus.r_data)

    async def write(ctx, addr, data):
        ctx.set(bus.addr, addr)
        ctx.set(bus.w_data, data)
        ctx.set(bus.w_stb, 1)
        strobes = {n for n in strobe_names if ctx.get(getattr(dut, n))}
        await ctx.tick()
        ctx.set(bus.w_stb, 0)
        return strobes

    async def bench(ctx):
        for r in cmap.registers.values():                   # inputs first: ro registers
            if r.access == "ro" and not r.const:
                for i in range(r.count):
                    ctx.set(port(r, i), pattern(r, i))
        for r in cmap.registers.values():                   # every rw register, via the header
            if r.access != "rw":
                continue
            for i in range(r.count):
                for w in range(r.words):
                    data = pattern(r, i) >> (CSR_DATA_BITS * w) & word
                    assert not await write(ctx, header_addr(r, i, w), data)   # (no CTRL strobe)
                    if r.name in model_knows:
                        model.write_addr(header_addr(r, i, w), data)
        for r in cmap.registers.values():
            for i in range(r.count):
                for w in range(r.words):
                    addr = header_addr(r, i, w)
                    got = await read(ctx, addr)
                    if r.access == "wo":
                        assert got == 0
                        continue
                    want = (sym[f"{r.name}_RESET"] if r.const else pattern(r, i)) >> (CSR_DATA_BITS * w) & word
                    assert got == want, f"{name}: {r.name}[{i}] word {w} at header address {addr}: " \
                                        f"RTL reads {got:#x}, expected {want:#x}"
                    if r.name in model_knows and r.access == "rw" or r.const:
                        assert model.read_addr(addr) == got, f"{name}: {r.name}[{i}] word {w}: model differs"
                    seen["const" if r.const else r.access] += 1
        ctrl = cmap["CTRL"]
        for f in ctrl.fields:                               # each CTRL field bit: its strobe only
            shift = sym[f"CTRL_{f.name}_SHIFT"]
            assert await write(ctx, sym["CTRL_INDEX"], 1 << shift) == {f.name.lower()}
            seen["wo"] += 1
        if "PAGE_FREE" in cmap.registers:
            ctx.set(bus.addr, sym["PAGE_FREE_INDEX"])
            ctx.set(bus.w_data, 0x1234)
            ctx.set(bus.w_stb, 1)
            assert ctx.get(dut.page_free_w) == 1 and ctx.get(dut.page_free) == 0x1234
            await ctx.tick()
            ctx.set(bus.w_stb, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["rw"] and seen["ro"] and seen["const"] == 2 and seen["wo"] == len(cmap["CTRL"].fields)


def _table_rows(text: str) -> dict[str, list[str]]:
    """The generated register table's rows by register name (an array's ``[i]`` dropped)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if cells and (m := re.fullmatch(r"`([A-Z_0-9]+)(?:\[i\])?`", cells[0])):
            rows[m[1]] = cells
    return rows


def test_the_guides_register_table_is_every_registers_own():
    """The guide's table (rendered by ``moehub report`` from the map) names every register
    of every configuration above with its object's access, and no other; tiny's registers
    at tiny's words, every hub's, the others marked as present only with a feature."""
    from moehub.scripts import report
    rows = _table_rows(report.render("csr-map"))
    every = {r.name: r for cfg in CONFIGS.values() for r in CsrMap(cfg).registers.values()}
    assert set(rows) == set(every)
    assert {n: cells[2] for n, cells in rows.items()} == {n: r.access for n, r in every.items()}
    for r in CsrMap(TINY).registers.values():
        assert rows[r.name][1].split()[0] == str(r.offset) and rows[r.name][5] == "always"
    assert all(rows[n][5] != "always" for n in set(every) - set(CsrMap(TINY).registers))
