"""The reference model's registers against the RTL's CSR bank, bit for bit.

Every harness (the cocotb testbench, the player, the co-simulation's hub stage) programs
and reads the hub through :class:`~moehub.spec.model.HubModel`'s register interface, so
the model's register rules must be the RTL's. Here one short Amaranth simulation per
config drives the same bus operations into :class:`~moehub.rtl.csr.CsrBank` and into the
model -- every register, every address of the bus (unmapped ones too), in-range, boundary
and out-of-range values -- and compares every read, every register output and every CTRL
strobe.
"""
import random

import pytest
from amaranth.sim import Simulator

from moehub.spec.config import load_hub_config
from moehub.rtl.csr import CsrBank
from moehub.spec.csr_map import CSR_DATA_BITS, CTRL_CLEAR_ERRORS, CTRL_FLUSH, CTRL_START, CsrMap
from moehub.spec.formats import Reason
from moehub.spec.model import HubModel

WORD = (1 << CSR_DATA_BITS) - 1
#: tiny: one-word addresses, 3 experts; mixtral-8gpu: 40-bit addresses (two-word registers)
CONFIGS = ["tiny", "mixtral-8gpu"]


class RecordingModel(HubModel):
    """HubModel that notes which layer-control actions a CTRL write triggered."""

    def reset(self):
        self.actions = []
        super().reset()

    def start(self):
        self.actions.append("start")
        super().start()

    def flush(self, timeout=False):
        self.actions.append("flush")
        return super().flush(timeout)

    def clear_errors(self):
        self.actions.append("clear_errors")
        super().clear_errors()


def _values(cfg, r, rng):
    """Values to write to a read-write register: in range, at and around its clamp, past
    its width, and random."""
    width = r.width
    vals = {0, 1, (1 << width) - 1, (1 << width) - 2, 1 << (width - 1)}
    if r.name == "TILE_ROWS_LOG2":
        lo, hi = cfg.min_tile_rows.bit_length() - 1, cfg.max_tile_rows.bit_length() - 1
        vals |= {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 1 << width, (1 << width) + lo + 1, WORD}
    if r.name == "REGION_CAP":
        m = cfg.max_rows_per_expert
        vals |= {m - 1, m, m + 1, 1 << width, (1 << width) + 5, WORD}
    top = 1 << (CSR_DATA_BITS * r.words)
    vals |= {top - 1, top >> 1}
    vals |= {rng.randrange(1 << width) for _ in range(2)} | {rng.randrange(top) for _ in range(2)}
    return sorted(v for v in vals if 0 <= v < top)


def _ro_state(model, r, index, value):
    """Put ``value`` (possibly wider than the register) into the model's state behind a
    read-only register."""
    if r.name == "STATUS":
        model.armed, model.done = bool(value & 1), bool(value & 8)
        model.errors = (1 << Reason.PROTOCOL) if value & 16 else 0
    elif r.name == "ERRORS":
        model.errors = value
    elif r.name == "INFLIGHT":
        model.inflight = value
    elif r.name == "EOS_SEEN":
        model.eos_seen = [bool(value >> s & 1) for s in range(model.cfg.sources)]
    else:
        {"ROWS": model.rows, "OVERFLOW": model.overflow, "SRC_ROWS": model.src_rows,
         "SRC_EOS": model.src_eos, "DROPS": model.drop_counts}[r.name][index] = value


@pytest.mark.parametrize("name", CONFIGS)
def test_model_registers_match_csr_bank(name):
    cfg = load_hub_config(name)
    dut = CsrBank(cfg)
    cmap = CsrMap(cfg)
    model = RecordingModel(cfg)
    bus = dut.bus
    rng = random.Random(11)
    checked = {"reads": 0, "writes": 0}

    def port(r, index):
        sig = getattr(dut, r.name.lower())
        return sig[index] if r.array else sig

    def drive_ro(ctx):
        """The read-only inputs of the bank carry the model's state, cut to the port."""
        for r in cmap.registers.values():
            if r.access == "ro" and r.name not in ("ID", "PARAMS"):
                for i in range(r.count):
                    ctx.set(port(r, i), model._ro_value(r.name, i) & ((1 << r.width) - 1))

    async def read(ctx, addr):
        ctx.set(bus.addr, addr)
        ctx.set(bus.r_stb, 1)
        await ctx.tick()
        ctx.set(bus.r_stb, 0)
        await ctx.tick()                       # (read data: two cycles after r_stb)
        got, want = ctx.get(bus.r_data), model.read_addr(addr)
        assert got == want, f"read {addr:#x} ({cmap.decode(addr)}): RTL {got:#x}, model {want:#x}"
        checked["reads"] += 1

    async def write(ctx, addr, data):
        ctx.set(bus.addr, addr)
        ctx.set(bus.w_data, data)
        ctx.set(bus.w_stb, 1)
        strobes = [n for n in ("start", "flush", "clear_errors") if ctx.get(getattr(dut, n))]
        model.actions = []
        model.write_addr(addr, data)
        await ctx.tick()
        ctx.set(bus.w_stb, 0)
        assert not any(ctx.get(getattr(dut, n)) for n in ("start", "flush", "clear_errors"))
        # the hub's layer control: a START supersedes a FLUSH of the same write
        want = [a for a, hit in (("clear_errors", "clear_errors" in strobes),
                                 ("start", "start" in strobes),
                                 ("flush", "flush" in strobes and "start" not in strobes)) if hit]
        assert model.actions == want, f"CTRL {data:#x}: RTL strobes {strobes}, model did {model.actions}"
        checked["writes"] += 1

    def outputs_match(ctx):
        """What the rest of the hub sees of each read-write register is the model's value."""
        for r in cmap.registers.values():
            if r.access == "rw":
                for i in range(r.count):
                    got, want = ctx.get(port(r, i)), model._get_rw(r.name, i)
                    assert got == want, f"{r.name}[{i}] output: RTL {got:#x}, model {want:#x}"

    async def bench(ctx):
        all_addrs = range(1 << cmap.addr_bits)
        drive_ro(ctx)
        # reset values, everywhere on the bus (unmapped addresses read 0)
        for a in all_addrs:
            await read(ctx, a)
        outputs_match(ctx)
        # read-write registers: first and last element of arrays; one word at a time for
        # registers wider than a word, then the whole value as software writes it
        for r in cmap.registers.values():
            if r.access != "rw":
                continue
            for i in sorted({0, r.count - 1}):
                for v in _values(cfg, r, rng):
                    for a, d in cmap.word_writes(r.name, v, i):
                        await write(ctx, a, d)
                        for w in range(r.words):
                            await read(ctx, r.addr(i, w))
                    outputs_match(ctx)
                    assert model.read(r.name, i) == model._get_rw(r.name, i)
                if r.words > 1:
                    await write(ctx, r.addr(i, 1), WORD)     # the high word alone
                    await read(ctx, r.addr(i, 0))
                    await read(ctx, r.addr(i, 1))
                    outputs_match(ctx)
        # read-only registers: zero, ones, the width's edge, random; the model's state may
        # exceed the width (a counter the RTL wraps); writes to them are ignored
        for r in cmap.registers.values():
            if r.access != "ro":
                continue
            for i in sorted({0, r.count - 1}):
                for v in (0, 1, (1 << r.width) - 1, (1 << r.width) + 3, rng.randrange(1 << r.width)):
                    if r.name not in ("ID", "PARAMS"):
                        _ro_state(model, r, i, v)
                    drive_ro(ctx)
                    for w in range(r.words):
                        await read(ctx, r.addr(i, w))
                    await write(ctx, r.addr(i, 0), rng.randrange(1 << CSR_DATA_BITS))
                    await read(ctx, r.addr(i, 0))
        # CTRL: every combination of strobes and the bits above them; reads 0
        ctrl = cmap.addr("CTRL")
        for v in [0, CTRL_START, CTRL_FLUSH, CTRL_CLEAR_ERRORS, CTRL_START | CTRL_FLUSH,
                  CTRL_FLUSH | CTRL_CLEAR_ERRORS, 7, 8, WORD]:
            await write(ctx, ctrl, v)
            drive_ro(ctx)
            await read(ctx, ctrl)
            outputs_match(ctx)
        # unmapped addresses: writes are ignored, reads return 0
        for a in range(cmap.size_words, 1 << cmap.addr_bits):
            await write(ctx, a, WORD)
        for a in all_addrs:
            await read(ctx, a)
        outputs_match(ctx)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert checked["reads"] > 200 and checked["writes"] > 50


def test_register_interface_by_name_and_errors():
    """Names, indices and values the register bus cannot carry are refused."""
    cfg = load_hub_config("mixtral-8gpu")
    m = HubModel(cfg)
    m.write("FLAG_BASE", (1 << 40) - 2)
    assert m.read("FLAG_BASE") == m.flag_base == (1 << 40) - 2
    m.write("FLAG_BASE", (1 << 64) - 1)                      # bits past addr_bits dropped
    assert m.read("FLAG_BASE") == (1 << 40) - 1
    with pytest.raises(IndexError):
        m.write("REGION_CAP", 0, cfg.experts)
    with pytest.raises(IndexError):
        m.read("ROWS", -1)
    with pytest.raises(KeyError):
        m.read("NO_SUCH")
    with pytest.raises(ValueError):
        m.write("EPOCH", 1 << 32)                            # wider than the register's word
    with pytest.raises(ValueError):
        m.write("EPOCH", -1)
    with pytest.raises(ValueError):
        m.write_addr(1 << m.csr_map.addr_bits, 0)            # outside the bus
    with pytest.raises(ValueError):
        m.read_addr(-1)


def test_configuration_latched_at_start():
    """EPOCH, TILE_ROWS_LOG2, the bases and REGION_CAP shape a layer as they were at START;
    writes during the layer count from the next START."""
    cfg = load_hub_config("tiny")
    m = HubModel(cfg)
    m.write("TILE_ROWS_LOG2", 2)
    m.write("EPOCH", 5)
    m.write("REGION_CAP", 7, 1)
    m.write("FLAG_BASE", 0x1000)
    m.write("CTRL", CTRL_START)
    m.write("TILE_ROWS_LOG2", 3)
    m.write("EPOCH", 6)
    m.write("REGION_CAP", 1, 1)
    m.write("FLAG_BASE", 0x2000)
    assert (m.tile_rows, m.layer_epoch, m.layer_region_cap[1], m.layer_flag_base) == (4, 5, 7, 0x1000)
    assert m.read("TILE_ROWS_LOG2") == 3 and m.read("REGION_CAP", 1) == 1
    m.write("CTRL", CTRL_START)
    assert (m.tile_rows, m.layer_epoch, m.layer_region_cap[1], m.layer_flag_base) == (8, 6, 1, 0x2000)


def test_model_of_a_hub_too_wide_for_the_rtl():
    """Above 32 sources EOS_SEEN spans more than one word, in the RTL's map and the model's;
    above 255 sources (PARAMS holds the count in a byte) only the co-simulation's model has
    a map, and the RTL's refuses the config."""
    from moehub.spec.config import ConfigError
    from moehub.spec.csr_map import MAX_SOURCES
    wide = load_hub_config("tiny").replace(sources=40)
    assert CsrMap(wide)["EOS_SEEN"].words == 2
    m = HubModel(wide)
    m.eos_seen[35] = True
    assert m.read("EOS_SEEN") == 1 << 35 and m.read_addr(m.csr_map.addr("EOS_SEEN", 0, 1)) == 1 << 3
    too_wide = load_hub_config("tiny").replace(sources=MAX_SOURCES + 1)
    with pytest.raises(ConfigError, match="sources"):
        CsrMap(too_wide)
    assert HubModel(too_wide).csr_map["EOS_SEEN"].words == (MAX_SOURCES + 32) // 32
