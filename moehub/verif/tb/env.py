"""The hub's testbench environment: clock and reset, and the pieces put together.

One :class:`HubTB` per test (or per random layer). It owns the clock and one clock loop;
the pieces are a :class:`~moehub.verif.tb.drivers.CsrMaster` on the register bus, a
:class:`~moehub.verif.tb.drivers.LaneSource` on the input lanes, a
:class:`~moehub.verif.tb.drivers.ReadyDriver` putting back-pressure on the output ports,
:class:`~moehub.verif.tb.monitors.PortMonitor` s on ``wr``/``ctl``/``credit``, and the
:class:`~moehub.verif.tb.scoreboard.Scoreboard`, which replays the run into the reference
model (:mod:`moehub.spec.model`) at :meth:`HubTB.check`. The functional coverage collector
(:mod:`moehub.verif.coverage`) samples every cycle and every check.

Each cycle the loop samples the handshakes of the cycle that just ended (inputs, then the
write lanes, control and credit ports, ``layer_done``), hands the credits that are due to
the traffic source, then drives the next cycle's inputs and ready signals.
"""
from __future__ import annotations

import random
from typing import Optional

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import RisingEdge, Timer

from ...spec.config import HubConfig
from ...spec.csr_map import CTRL_CLEAR_ERRORS, CTRL_FLUSH, CTRL_START, STATUS_DONE, CsrMap
from ...spec.formats import HubFormats
from ...spec.model import HubModel
from ..coverage import Collector, enabled as coverage_enabled
from ..traffic import LaneFeeder, Row
from .drivers import CsrMaster, LaneSource, ReadyDriver
from .monitors import hub_monitors
from .scoreboard import Scoreboard


class HubTB:
    """The testbench of one hub top (see the module docstring).

    Parameters
    ----------
    dut : cocotb handle
        The hub's Verilog top (``moehub``).
    cfg : HubConfig
        The hub configuration it was generated for.
    seed : int
        Seed of the back-pressure and of the traffic a test draws from :attr:`rng`.
    bp : float
        Probability that a sink (``wr``, ``ctl``, ``credit``) is not ready in a cycle.

    Attributes
    ----------
    csr, source, ready, scoreboard : the pieces
    map : CsrMap
        The configuration's register map.
    rng : random.Random
        The testbench's random source (seeded with ``seed``; also the back-pressure's).
    cycle : int
        The current cycle (updated each rising edge by the clock loop).
    accepted : list of tuple
        ``(cycle, lane, Packet)`` of every packet the hub accepted.
    wr_out, ctl_out, credit_out : the monitors' logs (see :mod:`~moehub.verif.tb.monitors`)
    layer_done_cycles : list of int
        Cycles of the ``layer_done`` pulse.
    """

    PERIOD_NS = 10

    def __init__(self, dut, cfg: HubConfig, seed: int, *, bp: float = 0.0):
        self.dut, self.cfg, self.seed = dut, cfg, seed
        self.rng = random.Random(seed)
        self.fmt = HubFormats(cfg)
        self.map = CsrMap(cfg)
        self.cycle = 0
        self.accepted: list[tuple] = []
        self.layer_done_cycles: list[int] = []
        self.scoreboard = Scoreboard(cfg, self.fmt, self.map, seed)
        self.csr = CsrMaster(dut, self.map, self.now,
                             lambda cyc, addr, data: self.scoreboard.record(cyc, "csr", addr, data))
        self.source = LaneSource(dut, cfg, self.fmt, self._accept)
        self.ready = ReadyDriver(dut, cfg.lanes, self.rng, bp)
        self._wr_mon, self._ctl_mon, self._credit_mon = hub_monitors(dut, cfg.lanes, self.fmt,
                                                                     self.ready.driven)
        # (the coverage collector reads these signals and the pieces' state by these names)
        self.wr_valid = [m.valid for m in self._wr_mon]
        self.i_ready = self.source.ready
        self.cov: Optional[Collector] = Collector(self) if coverage_enabled() else None
        cocotb.log.info(f"HubTB config={cfg.name} seed={seed} bp={bp}")

    # ---- the pieces' state under the names tests and the coverage collector read
    bp = property(lambda self: self.ready.bp)
    held = property(lambda self: self.ready.held)
    feeder = property(lambda self: self.source.feeder)
    log = property(lambda self: self.scoreboard.log)
    wr_out = property(lambda self: [m.items for m in self._wr_mon])
    ctl_out = property(lambda self: self._ctl_mon.items)
    credit_out = property(lambda self: self._credit_mon.items)
    _driven = property(lambda self: self.source.driven)
    _ready_driven = property(lambda self: self.ready.driven)

    # ------------------------------------------------------------------ clock and reset
    def now(self) -> int:
        """Index of the current cycle (rising edges since time 0)."""
        return int(get_sim_time(unit="ns")) // self.PERIOD_NS

    async def start(self):
        """Start the clock, drive every input idle, reset, start the clock loop."""
        self._clock = Clock(self.dut.clk, self.PERIOD_NS, unit="ns", impl="gpi")
        self._clock.start()
        self.source.idle()
        self.ready.idle()
        self.csr.idle()
        await self.reset()
        self._loop_task = cocotb.start_soon(self._loop())

    def stop(self):
        """Stop this testbench's clock and loop (before another TB starts in the same
        cocotb test: two loops would fight over the inputs)."""
        self._loop_task.cancel()
        self._clock.stop()

    async def reset(self, cycles: int = 2):
        """Synchronous reset; the model forgets everything too."""
        self.dut.rst.value = 1
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        self.scoreboard.record(self.now(), "reset")
        # Outputs of packets still in the pipeline are lost with the reset: compare only
        # what comes after it (call check() before a reset to cover what came before).
        for m in (*self._wr_mon, self._ctl_mon, self._credit_mon):
            m.clear()

    async def _loop(self):
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            self.cycle = self.now()
            cyc = self.cycle - 1       # the cycle that just ended
            self.source.sample(cyc)
            for m in self._wr_mon:
                m.sample(cyc)
            self._ctl_mon.sample(cyc)
            credit = self._credit_mon.sample(cyc)
            if credit is not None:
                self.source.credit_returned(*credit)
            if int(d.layer_done.value):
                self.layer_done_cycles.append(cyc)
            if self.cov is not None:
                self.cov.cycle(cyc)
            self.source.deliver_credits(self.cycle)
            self.source.drive()
            self.ready.drive()

    def _accept(self, cyc: int, lane: int, pkt):
        self.accepted.append((cyc, lane, pkt))
        self.scoreboard.record(cyc, "packet", pkt, lane, cyc)

    # ------------------------------------------------------------------ registers
    async def csr_write(self, name: str, value: int, index: int = 0):
        await self.csr.write(name, value, index)

    async def csr_write_raw(self, addr: int, data: int, end: bool = True):
        await self.csr.write_raw(addr, data, end)

    async def csr_read(self, name: str, index: int = 0) -> int:
        return await self.csr.read(name, index)

    async def csr_read_raw(self, addr: int) -> int:
        return await self.csr.read_raw(addr)

    async def configure(self, *, caps=None, tile_rows=None, epoch=1, timeout=None,
                        bases=None, flag_base=0x7000_0000, meta_base=0x6000_0000,
                        count_base=0x7F00_0000):
        """Reserve regions (rowspMalloc-style) and program the layer's registers."""
        cfg = self.cfg
        caps = caps if caps is not None else [cfg.max_rows_per_expert] * cfg.experts
        span = cfg.max_rows_per_expert * cfg.stride_bytes
        if bases is None:
            bases = [0x1000_0000 % (1 << cfg.addr_bits) + e * span for e in range(cfg.experts)]
            bases = [b % (1 << cfg.addr_bits) for b in bases]
        for e in range(cfg.experts):
            await self.csr_write("REGION_BASE", bases[e], e)
            await self.csr_write("REGION_CAP", caps[e], e)
        fmask = (1 << cfg.addr_bits) - 1
        await self.csr_write("FLAG_BASE", flag_base & fmask)
        await self.csr_write("META_BASE", meta_base & fmask)
        await self.csr_write("COUNT_BASE", count_base & fmask)
        await self.csr_write("EPOCH", epoch)
        if tile_rows is not None:
            await self.csr_write("TILE_ROWS_LOG2", tile_rows.bit_length() - 1)
        if timeout is not None:
            await self.csr_write("TIMEOUT", timeout)

    async def start_layer(self):
        await self.csr_write("CTRL", CTRL_START)

    async def flush(self):
        await self.csr_write("CTRL", CTRL_FLUSH)

    async def clear_errors(self):
        await self.csr_write("CTRL", CTRL_CLEAR_ERRORS)

    async def finish_layer(self, flush_if_open: bool = False) -> HubModel:
        """Wait until the layer is quiet and check it against the model; with
        ``flush_if_open``, a layer left unfinished is flushed (FLUSH) and checked again.
        (Random bad input can leave a row open: a bad chunk naming another expert may
        overtake its row's first chunk when a lane refilled after back-pressure sits ahead
        of an older packet in the same cycle; it then opens the row with the wrong expert
        and the row never completes -- hub and model agree; software ends such a layer
        with FLUSH.)"""
        await self.wait_idle()
        model = await self.check()
        if flush_if_open and not model.done:
            await self.flush()
            await self.wait_idle()
            model = await self.check()
        return model

    # ------------------------------------------------------------------ traffic
    def feed(self, feeder: LaneFeeder, credit_delay: int = 0):
        """Drive the lanes from ``feeder``; its credits come back ``credit_delay`` cycles
        after the hub returns them."""
        self.source.feed(feeder, credit_delay)

    def stop_traffic(self):
        """Stop driving the lanes now (packets offered but not accepted are withdrawn)."""
        self.source.stop()

    def stop_sources(self):
        """:meth:`stop_traffic`, and forget the credits on their way back to the sources
        (nobody waits for them any more, so :meth:`wait_idle` need not either)."""
        self.source.stop()
        self.source.pending_credits = []

    def waiting(self) -> int:
        """Lanes offering a packet the hub has not accepted yet."""
        return sum(p is not None for p in self.source.offered)

    def hold(self, *sinks: str):
        """Hold output ports not ready ("ctl", "credit", "wr") until :meth:`release`."""
        self.ready.hold(*sinks)

    def release(self):
        """End :meth:`hold` (from the next cycle the loop drives: ready, or random
        back-pressure)."""
        self.ready.release()

    def offer(self, schedule: list):
        """Queue directed traffic without waiting for it (see :meth:`send_schedule`)."""
        self.source.offer(schedule)

    async def send_schedule(self, schedule: list):
        """Directed traffic: ``schedule`` is a list of cycles, each a list of per-lane
        packets (or None). A cycle's packets are offered together and held until the hub
        accepts them; the next cycle's follow without a gap."""
        self.source.offer(schedule)
        while self.source.schedule or any(p is not None for p in self.source.offered):
            await RisingEdge(self.dut.clk)
        await RisingEdge(self.dut.clk)

    async def wait_idle(self, quiet: int = 20, limit: int = 200_000):
        """Wait until the traffic source is done and nothing moved on any port for
        ``quiet`` cycles."""
        last, n = None, 0
        start = self.cycle
        while True:
            await RisingEdge(self.dut.clk)
            sig = (len(self.accepted), len(self.ctl_out), len(self.credit_out),
                   sum(len(w) for w in self.wr_out))
            n = n + 1 if (sig == last and not self.source.busy()) else 0
            last = sig
            if n >= quiet:
                return
            assert self.cycle - start < limit, \
                f"hub did not go idle within {limit} cycles (seed {self.seed})"

    async def wait_done(self, limit: int = 200_000):
        """Poll STATUS until the layer is DONE."""
        start = self.cycle
        while True:
            status = await self.csr_read("STATUS")
            if status & STATUS_DONE:
                return
            assert self.cycle - start < limit, f"layer did not finish (seed {self.seed})"
            await Timer(200, unit="ns")

    # ------------------------------------------------------------------ scoreboard
    def replay(self) -> HubModel:
        """The run so far in a fresh reference model (:meth:`Scoreboard.replay`)."""
        return self.scoreboard.replay()

    def note_timeout(self):
        """Tell the scoreboard the watchdog fired here (after every packet logged so far)."""
        self.scoreboard.record(self.now(), "timeout")

    async def check(self, model: Optional[HubModel] = None) -> HubModel:
        """Compare everything the RTL did with the reference model; read every status
        register; the flags' order. Call when the hub is idle."""
        model = model or self.replay()
        await self.scoreboard.compare(model, self.wr_out, self.ctl_out, self.credit_out, self.csr_read)
        self.scoreboard.check_ordering(model, self.wr_out, self.ctl_out)
        if self.cov is not None:
            self.cov.sample()
        return model

    def check_ordering(self, model: HubModel):
        self.scoreboard.check_ordering(model, self.wr_out, self.ctl_out)

    def check_invariants(self, model: HubModel, rows: list[Row]):
        """Model-independent checks of one clean layer (:meth:`Scoreboard.check_invariants`)."""
        self.scoreboard.check_invariants(model, rows, self.wr_out, self.ctl_out, self.credit_out)


# ---------------------------------------------------------------------------- the page pool
async def return_pages(tb: HubTB, pages):
    """PAGE_FREE each of ``pages``, then a few idle cycles (the pool checks a return in
    four register stages)."""
    for p in pages:
        await tb.csr_write("PAGE_FREE", p)
    for _ in range(8):
        await RisingEdge(tb.dut.clk)


def random_returns(model, rng: random.Random, pool_pages: int) -> list:
    """A random part of the pages ``model`` holds in use, in random order, sometimes with
    a bad page (twice, or never handed out) among them: the random tests' returns between
    layers."""
    used = sorted(model.in_use)
    back = rng.sample(used, rng.randrange(len(used) + 1))
    if rng.random() < 0.3:
        back.insert(rng.randrange(len(back) + 1), rng.randrange(pool_pages + 2))   # maybe bad
    return back


async def pool_hub_tb(dut, cfg: HubConfig, seed: int, rng: random.Random) -> HubTB:
    """A started hub testbench for random protocol-v2 pool layers: random back-pressure,
    the default layer registers, ``POOL_BASE`` at a random 64 KiB boundary."""
    tb = HubTB(dut, cfg, seed, bp=rng.choice([0, 0.2, 0.4]))
    await tb.start()
    await tb.configure(epoch=seed & 0xFFFF)
    await tb.csr_write("POOL_BASE", rng.randrange(1 << 12) * 0x1_0000)
    return tb
