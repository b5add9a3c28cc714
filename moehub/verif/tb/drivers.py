"""Drivers of the hub's inputs: the register bus (:class:`CsrMaster`), the input lanes
(:class:`LaneSource`) and the ready signals of its output ports (:class:`ReadyDriver`:
the sinks' back-pressure).

Each is a piece of :class:`moehub.verif.tb.env.HubTB`, usable on its own. The per-cycle
pieces (:class:`LaneSource`, :class:`ReadyDriver`) do not run coroutines of their own: the
testbench's clock loop calls their ``sample`` and ``drive`` steps in a fixed order every
cycle, so what a cycle saw (a handshake, a credit) is acted on in the same cycle whatever
order a simulator wakes coroutines in, and a seed draws the same back-pressure in any run.

Conventions: cycle *n* is the clock period after the *n*-th rising edge; inputs are driven
right after an edge and sampled (with the handshake) at the next edge.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Callable, Optional

from cocotb.triggers import RisingEdge

from ...spec.csr_map import CsrMap
from ...spec.formats import HubFormats
from ..traffic import LaneFeeder


class CsrMaster:
    """The hub's register bus (``csr__addr``, ``w_stb``, ``w_data``, ``r_stb``, ``r_data``):
    named and raw reads and writes, a bus write per 32-bit word. ``on_write(addr, data)`` is
    called with every bus write in its cycle (the scoreboard replays it into the model)."""

    def __init__(self, dut, cmap: CsrMap, now: Callable[[], int],
                 on_write: Callable[[int, int, int], None]):
        self.dut, self.map, self._now, self._on_write = dut, cmap, now, on_write

    def idle(self):
        """Drive the bus idle (before reset)."""
        d = self.dut
        d.csr__w_stb.value = 0
        d.csr__r_stb.value = 0
        d.csr__addr.value = 0
        d.csr__w_data.value = 0

    async def write(self, name: str, value: int, index: int = 0):
        """Write register ``name[index]``, a bus write per word (low word first)."""
        for addr, data in self.map.word_writes(name, value, index):
            await self.write_raw(addr, data, end=False)
        await RisingEdge(self.dut.clk)
        self.dut.csr__w_stb.value = 0

    async def write_raw(self, addr: int, data: int, end: bool = True):
        """One bus write of ``data`` at word address ``addr``."""
        await RisingEdge(self.dut.clk)
        self.dut.csr__addr.value = addr
        self.dut.csr__w_data.value = data
        self.dut.csr__w_stb.value = 1
        self._on_write(self._now(), addr, data)
        if end:
            await RisingEdge(self.dut.clk)
            self.dut.csr__w_stb.value = 0

    async def read(self, name: str, index: int = 0) -> int:
        """Register ``name[index]`` (its words, low first)."""
        reg = self.map[name]
        value = 0
        for w in range(reg.words):
            value |= await self.read_raw(reg.addr(index, w)) << (32 * w)
        return value

    async def read_raw(self, addr: int) -> int:
        """One bus read at word address ``addr``."""
        await RisingEdge(self.dut.clk)
        self.dut.csr__addr.value = addr
        self.dut.csr__r_stb.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.csr__r_stb.value = 0
        # (r_data is valid two cycles after r_stb; read a cycle after that, as it holds)
        await RisingEdge(self.dut.clk)
        await RisingEdge(self.dut.clk)
        return self.dut.csr__r_data.value.to_unsigned()


class LaneSource:
    """The input lanes ``i__<j>__{valid,payload,ready}``: offers packets from a traffic
    source (a :class:`~moehub.verif.traffic.LaneFeeder`, which respects credits) or a
    directed schedule (a list of cycles, each a list of per-lane packets or None), holds
    each until the hub accepts it, and reports every accepted packet to ``on_accept(cycle,
    lane, packet)``. Credits the hub returns reach the feeder ``credit_delay`` cycles later.
    """

    def __init__(self, dut, cfg, fmt: HubFormats,
                 on_accept: Callable[[int, int, object], None]):
        self.cfg, self.fmt, self._on_accept = cfg, fmt, on_accept
        L = cfg.lanes
        self.valid = [getattr(dut, f"i__{j}__valid") for j in range(L)]
        self.payload = [getattr(dut, f"i__{j}__payload") for j in range(L)]
        self.ready = [getattr(dut, f"i__{j}__ready") for j in range(L)]
        self.feeder: Optional[LaneFeeder] = None
        self.credit_delay = 0
        self.offered: list = [None] * L     # what the lanes should carry
        self.driven: list = [None] * L      # what they carried in the cycle that just ended
        self.schedule: deque = deque()
        self.pending_credits: list[tuple] = []   # (cycle due, src, tag)

    def idle(self):
        for j in range(self.cfg.lanes):
            self.valid[j].value = 0
            self.payload[j].value = 0

    # ---- what a test asks for
    def feed(self, feeder: LaneFeeder, credit_delay: int = 0):
        self.feeder, self.credit_delay = feeder, credit_delay

    def offer(self, schedule: list):
        for cyc in schedule:
            self.schedule.append(list(cyc) + [None] * (self.cfg.lanes - len(cyc)))

    def stop(self):
        """Withdraw everything offered and not accepted; no feeder, no schedule."""
        self.feeder = None
        self.schedule.clear()
        self.offered = [None] * self.cfg.lanes

    def busy(self) -> bool:
        """A feeder still sending, a packet waiting on a lane, or a credit on its way."""
        return bool((self.feeder is not None and not self.feeder.done()) or
                    any(p is not None for p in self.offered) or self.pending_credits)

    # ---- the clock loop's steps
    def sample(self, cyc: int):
        """The handshakes of cycle ``cyc`` (per lane: a multicast hub's input admission
        takes a prefix of the lanes)."""
        ready = [int(r.value) for r in self.ready]
        for j, p in enumerate(self.driven):
            if p is not None and ready[j]:
                self._on_accept(cyc, j, p)
                self.offered[j] = None
                if self.feeder is not None:
                    self.feeder.accepted(j)

    def credit_returned(self, cyc: int, src: int, tag: int):
        """The hub returned a credit in cycle ``cyc``: due at the feeder after the delay."""
        if self.feeder is not None:
            self.pending_credits.append((cyc + self.credit_delay, src, tag))

    def deliver_credits(self, now: int):
        """Hand the feeder the credits due by cycle ``now``."""
        if self.pending_credits and self.feeder is not None:
            keep = []
            for (t, s, tag) in self.pending_credits:
                if t <= now:
                    self.feeder.credit(s, tag)
                else:
                    keep.append((t, s, tag))
            self.pending_credits = keep

    def drive(self):
        """Offer this cycle's packets: the feeder's, else the next scheduled cycle once
        every lane's packet of the last one was taken."""
        if self.feeder is not None:
            self.offered = self.feeder.offer()
        elif self.schedule and all(p is None for p in self.offered):
            self.offered = self.schedule.popleft()
        pack = self.fmt.packet.pack
        for j, p in enumerate(self.offered):
            if p is None:
                self.valid[j].value = 0
            else:
                self.valid[j].value = 1
                self.payload[j].value = pack(**p.fields())
        self.driven = list(self.offered)


class ReadyDriver:
    """The ready signals of the output ports (``wr__<j>__ready``, ``ctl__ready``,
    ``credit__ready``): each cycle not ready with probability ``bp`` (drawn from ``rng`` in
    a fixed order: the write lanes, then ctl, then credit), or held not ready by
    :meth:`hold` until :meth:`release`. ``driven`` is what each port was offered in the
    cycle that just ended (a handshake needs it)."""

    def __init__(self, dut, lanes: int, rng: random.Random, bp: float = 0.0):
        self.dut, self.lanes, self.rng, self.bp = dut, lanes, rng, bp
        self.wr = [getattr(dut, f"wr__{j}__ready") for j in range(lanes)]
        self.driven = {"wr": [1] * lanes, "ctl": 1, "credit": 1}
        self.held: set = set()
        self._released = False

    def idle(self):
        for r in self.wr:
            r.value = 1
        self.dut.ctl__ready.value = 1
        self.dut.credit__ready.value = 1

    def hold(self, *sinks: str):
        bad = set(sinks) - {"wr", "ctl", "credit"}
        if bad:
            raise ValueError(f"hold: unknown sink(s) {sorted(bad)} (wr, ctl, credit)")
        self.held |= set(sinks)

    def release(self):
        self.held = set()
        self._released = True

    def drive(self):
        if not (self.bp or self.held or self._released):
            return              # (always ready: nothing to draw, nothing to drive)
        self._released = False
        for j in range(self.lanes):
            r = int(self.rng.random() >= self.bp and "wr" not in self.held)
            self.driven["wr"][j] = r
            self.wr[j].value = r
        r = int(self.rng.random() >= self.bp and "ctl" not in self.held)
        self.driven["ctl"] = r
        self.dut.ctl__ready.value = r
        r = int(self.rng.random() >= self.bp and "credit" not in self.held)
        self.driven["credit"] = r
        self.dut.credit__ready.value = r
