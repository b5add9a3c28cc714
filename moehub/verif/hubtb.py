"""cocotb testbench of the hub top: drivers, sinks with back-pressure, monitors, scoreboard.

One :class:`HubTB` per test. It owns the clock, a CSR driver, a :class:`LaneFeeder`
driving the input lanes, sinks on ``wr``/``ctl``/``credit`` that insert back-pressure with
a given probability, and monitors that log every handshake with its cycle. At the end,
:meth:`HubTB.check` replays the log into the reference model (:mod:`moehub.spec.model`)
and compares every data write (per lane, in order), every control write (in order), every
credit and every status register; :meth:`HubTB.check_invariants` checks the same run
against the traffic itself, independently of the model.

Conventions: cycle *n* is the clock period after the *n*-th rising edge. Inputs are
driven right after an edge and sampled (with the handshake) at the next edge.
"""
from __future__ import annotations

import random
from collections import defaultdict, deque
from typing import Optional

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import RisingEdge, Timer

from ..spec.config import HubConfig
from ..spec.csr_map import CsrMap, CTRL_CLEAR_ERRORS, CTRL_FLUSH, CTRL_START, STATUS_DONE
from ..spec.formats import CtlKind, HubFormats, data_addr, flag_addr
from .coverage import Collector, enabled as coverage_enabled
from ..spec.model import CtlWrite, HubModel
from .traffic import LaneFeeder, Row


class HubTB:
    """cocotb testbench of one hub top (see the module docstring).

    CSR accesses go over the hub's register bus; every bus write is logged and replayed,
    at its cycle, into the reference model's register interface
    (:meth:`~moehub.spec.model.HubModel.write_addr`), so the model applies the hub's own
    register rules (clamps, START latching, CTRL strobes).

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
    map : CsrMap
        The configuration's register map.
    rng : random.Random
        The testbench's random source (seeded with ``seed``).
    cycle : int
        The current cycle (updated each rising edge by the driver loop).
    log : list of tuple
        ``(cycle, order, kind, args)`` of every packet accepted, CSR write, reset and
        watchdog timeout: what :meth:`replay` feeds the model.
    accepted : list of tuple
        ``(cycle, lane, Packet)`` of every packet the hub accepted.
    wr_out : list of list of tuple
        ``(cycle, addr, data)`` of every data write, per lane.
    ctl_out : list of tuple
        ``(cycle, CtlWrite)`` of every control write.
    credit_out : list of tuple
        ``(cycle, src, tag)`` of every credit.
    layer_done_cycles : list of int
        Cycles of the ``layer_done`` pulse.
    feeder : LaneFeeder or None
        The traffic source driving the lanes (see :meth:`feed`).
    held : set of str
        Sinks held not ready (see :meth:`hold`).
    """

    def __init__(self, dut, cfg: HubConfig, seed: int, *, bp: float = 0.0):
        self.dut, self.cfg = dut, cfg
        self.seed = seed
        self.rng = random.Random(seed)
        self.fmt = HubFormats(cfg)
        self.map = CsrMap(cfg)
        self.bp = bp                      # probability a sink is not ready in a cycle
        self.cycle = 0
        self.log: list[tuple] = []        # (cycle, order, kind, args): replayed into the model
        self.wr_out = [[] for _ in range(cfg.lanes)]   # (cycle, addr, data)
        self.ctl_out: list[tuple] = []    # (cycle, CtlWrite)
        self.credit_out: list[tuple] = []  # (cycle, src, tag)
        self.accepted: list[tuple] = []   # (cycle, lane, Packet)
        self.layer_done_cycles: list[int] = []
        self.feeder: Optional[LaneFeeder] = None
        self.credit_delay = 0
        self._pending_credits: list[tuple] = []
        L = cfg.lanes
        self.i_valid = [getattr(dut, f"i__{j}__valid") for j in range(L)]
        self.i_payload = [getattr(dut, f"i__{j}__payload") for j in range(L)]
        self.i_ready = [getattr(dut, f"i__{j}__ready") for j in range(L)]
        self.wr_valid = [getattr(dut, f"wr__{j}__valid") for j in range(L)]
        self.wr_payload = [getattr(dut, f"wr__{j}__payload") for j in range(L)]
        self.wr_ready = [getattr(dut, f"wr__{j}__ready") for j in range(L)]
        self._offered: list = [None] * L   # what the lanes should carry
        self._driven: list = [None] * L    # what they carried in the cycle that just ended
        self._schedule: deque = deque()
        self._ready_driven = {"wr": [1] * L, "ctl": 1, "credit": 1}
        self.held: set = set()            # sinks held not ready ("ctl", "credit", "wr")
        self._released = False
        # functional coverage (verif/coverage.py): sampled every cycle and at every check
        self.cov: Optional[Collector] = Collector(self) if coverage_enabled() else None
        cocotb.log.info(f"HubTB config={cfg.name} seed={seed} bp={bp}")

    # ------------------------------------------------------------------ clock and reset
    PERIOD_NS = 10

    def now(self) -> int:
        """Index of the current cycle (rising edges since time 0)."""
        return int(get_sim_time(unit="ns")) // self.PERIOD_NS

    async def start(self):
        self._clock = Clock(self.dut.clk, self.PERIOD_NS, unit="ns", impl="gpi")
        self._clock.start()
        d = self.dut
        for j in range(self.cfg.lanes):
            self.i_valid[j].value = 0
            self.i_payload[j].value = 0
            self.wr_ready[j].value = 1
        d.ctl__ready.value = 1
        d.credit__ready.value = 1
        d.csr__w_stb.value = 0
        d.csr__r_stb.value = 0
        d.csr__addr.value = 0
        d.csr__w_data.value = 0
        await self.reset()
        self._loop_task = cocotb.start_soon(self._loop())

    def stop(self):
        """Stop this testbench's clock and driver loop (before another TB starts in the
        same cocotb test: two loops would fight over the inputs)."""
        self._loop_task.cancel()
        self._clock.stop()

    async def reset(self, cycles: int = 2):
        """Synchronous reset; the model forgets everything too."""
        self.dut.rst.value = 1
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        self._record("reset")
        # Outputs of packets still in the pipeline are lost with the reset: compare only
        # what comes after it (call check() before a reset to cover what came before).
        self.wr_out = [[] for _ in range(self.cfg.lanes)]
        self.ctl_out, self.credit_out = [], []

    # ------------------------------------------------------------------ CSR access
    async def csr_write(self, name: str, value: int, index: int = 0):
        """Write register ``name[index]``, a bus write per word (low word first)."""
        for addr, data in self.map.word_writes(name, value, index):
            await self.csr_write_raw(addr, data, end=False)
        await RisingEdge(self.dut.clk)
        self.dut.csr__w_stb.value = 0

    async def csr_write_raw(self, addr: int, data: int, end: bool = True):
        """One register-bus write (the scoreboard replays it into the model's
        :meth:`~moehub.spec.model.HubModel.write_addr`)."""
        await RisingEdge(self.dut.clk)
        self.dut.csr__addr.value = addr
        self.dut.csr__w_data.value = data
        self.dut.csr__w_stb.value = 1
        self._record_at(self.now(), "csr", addr, data)
        if end:
            await RisingEdge(self.dut.clk)
            self.dut.csr__w_stb.value = 0

    async def csr_read(self, name: str, index: int = 0) -> int:
        reg = self.map[name]
        value = 0
        for w in range(reg.words):
            value |= await self.csr_read_raw(reg.addr(index, w)) << (32 * w)
        return value

    async def csr_read_raw(self, addr: int) -> int:
        await RisingEdge(self.dut.clk)
        self.dut.csr__addr.value = addr
        self.dut.csr__r_stb.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.csr__r_stb.value = 0
        # (r_data is valid two cycles after r_stb; read a cycle after that, as it holds)
        await RisingEdge(self.dut.clk)
        await RisingEdge(self.dut.clk)
        return self.dut.csr__r_data.value.to_unsigned()

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

    async def start_layer(self):
        await self.csr_write("CTRL", CTRL_START)

    async def flush(self):
        await self.csr_write("CTRL", CTRL_FLUSH)

    async def clear_errors(self):
        await self.csr_write("CTRL", CTRL_CLEAR_ERRORS)

    # ------------------------------------------------------------------ traffic
    def stop_traffic(self):
        """Stop driving the lanes now (packets offered but not accepted are withdrawn)."""
        self.feeder = None
        self._schedule.clear()
        self._offered = [None] * self.cfg.lanes

    def stop_sources(self):
        """:meth:`stop_traffic`, and forget the credits on their way back to the sources
        (nobody waits for them any more, so :meth:`wait_idle` need not either)."""
        self.stop_traffic()
        self._pending_credits = []

    def waiting(self) -> int:
        """Lanes offering a packet the hub has not accepted yet."""
        return sum(p is not None for p in self._offered)

    def feed(self, feeder: LaneFeeder, credit_delay: int = 0):
        self.feeder = feeder
        self.credit_delay = credit_delay

    def hold(self, *sinks: str):
        """Hold output ports not ready ("ctl", "credit", "wr") until :meth:`release`."""
        self.held |= set(sinks)

    def release(self):
        """End :meth:`hold` (from the next cycle the loop drives: ready, or random
        back-pressure)."""
        self.held = set()
        self._released = True

    def offer(self, schedule: list):
        """Queue directed traffic without waiting for it (see :meth:`send_schedule`)."""
        for cyc in schedule:
            self._schedule.append(list(cyc) + [None] * (self.cfg.lanes - len(cyc)))

    async def send_schedule(self, schedule: list):
        """Directed traffic: ``schedule`` is a list of cycles, each a list of per-lane
        packets (or None). A cycle's packets are offered together and held until the hub
        accepts them; the next cycle's follow without a gap."""
        for cyc in schedule:
            self._schedule.append(list(cyc) + [None] * (self.cfg.lanes - len(cyc)))
        while self._schedule or any(p is not None for p in self._offered):
            await RisingEdge(self.dut.clk)
        await RisingEdge(self.dut.clk)

    async def wait_idle(self, quiet: int = 20, limit: int = 200_000):
        """Wait until the feeder is done and nothing moved on any port for ``quiet`` cycles."""
        last, n = None, 0
        start = self.cycle
        while True:
            await RisingEdge(self.dut.clk)
            sig = (len(self.accepted), len(self.ctl_out), len(self.credit_out),
                   sum(len(w) for w in self.wr_out))
            busy = (self.feeder is not None and not self.feeder.done()) or \
                any(p is not None for p in self._offered) or self._pending_credits
            n = n + 1 if (sig == last and not busy) else 0
            last = sig
            if n >= quiet:
                return
            assert self.cycle - start < limit, \
                f"hub did not go idle within {limit} cycles (seed {self.seed})"

    async def wait_done(self, limit: int = 200_000):
        start = self.cycle
        while True:
            status = await self.csr_read("STATUS")
            if status & STATUS_DONE:
                return
            assert self.cycle - start < limit, f"layer did not finish (seed {self.seed})"
            await Timer(200, unit="ns")

    # ------------------------------------------------------------------ the per-cycle loop
    def _record(self, kind, *args):
        self._record_at(self.now(), kind, *args)

    def _record_at(self, cycle, kind, *args):
        self.log.append((cycle, len(self.log), kind, args))

    async def _loop(self):
        d, L, fmt = self.dut, self.cfg.lanes, self.fmt
        wr_bits = fmt.write
        while True:
            await RisingEdge(d.clk)
            self.cycle = self.now()
            cyc = self.cycle - 1       # the cycle that just ended
            # --- sample last cycle's handshakes
            # (per lane: a multicast hub's input admission takes a prefix of the lanes)
            ready = [int(self.i_ready[j].value) for j in range(L)]
            for j in range(L):
                p = self._driven[j]
                if p is not None and ready[j]:
                    self.accepted.append((cyc, j, p))
                    self._record_at(cyc, "packet", p, j, cyc)
                    self._offered[j] = None
                    if self.feeder is not None:
                        self.feeder.accepted(j)
            for j in range(L):
                if int(self.wr_valid[j].value) and self._ready_driven["wr"][j]:
                    w = wr_bits.unpack(self.wr_payload[j].value.to_unsigned())
                    self.wr_out[j].append((cyc, w["addr"], w["data"]))
            if int(d.ctl__valid.value) and self._ready_driven["ctl"]:
                c = fmt.ctl.unpack(d.ctl__payload.value.to_unsigned())
                self.ctl_out.append((cyc, CtlWrite(CtlKind(c["kind"]), c["addr"], c["data"])))
            if int(d.credit__valid.value) and self._ready_driven["credit"]:
                c = fmt.credit.unpack(d.credit__payload.value.to_unsigned())
                self.credit_out.append((cyc, c["src"], c["tag"]))
                if self.feeder is not None:
                    self._pending_credits.append((cyc + self.credit_delay, c["src"], c["tag"]))
            if int(d.layer_done.value):
                self.layer_done_cycles.append(cyc)
            if self.cov is not None:
                self.cov.cycle(cyc)
            # --- credits reach the sources
            if self._pending_credits and self.feeder is not None:
                keep = []
                for (t, s, tag) in self._pending_credits:
                    if t <= self.cycle:
                        self.feeder.credit(s, tag)
                    else:
                        keep.append((t, s, tag))
                self._pending_credits = keep
            # --- drive this cycle
            if self.feeder is not None:
                self._offered = self.feeder.offer()
            elif self._schedule and all(p is None for p in self._offered):
                self._offered = self._schedule.popleft()
            for j in range(L):
                p = self._offered[j]
                if p is None:
                    self.i_valid[j].value = 0
                else:
                    self.i_valid[j].value = 1
                    self.i_payload[j].value = fmt.packet.pack(**p.fields())
            self._driven = list(self._offered)
            if self.bp or self.held or self._released:
                self._released = False
                for j in range(L):
                    r = int(self.rng.random() >= self.bp and "wr" not in self.held)
                    self._ready_driven["wr"][j] = r
                    self.wr_ready[j].value = r
                r = int(self.rng.random() >= self.bp and "ctl" not in self.held)
                self._ready_driven["ctl"] = r
                d.ctl__ready.value = r
                r = int(self.rng.random() >= self.bp and "credit" not in self.held)
                self._ready_driven["credit"] = r
                d.credit__ready.value = r

    # ------------------------------------------------------------------ scoreboard
    def replay(self) -> HubModel:
        """Feed the logged run (packets in accept order, CSR operations in between) into
        a fresh reference model and return it."""
        model = HubModel(self.cfg)
        for cyc, _, kind, args in sorted(self.log, key=lambda e: (e[0], e[2] != "packet", e[1])):
            if kind == "reset":
                model.reset()
            elif kind == "packet":
                pkt, lane, c = args
                model.packet(pkt, lane, c)
            elif kind == "csr":
                model.write_addr(*args)
            elif kind == "timeout":
                model.flush(timeout=True)
        model.end()
        return model

    def note_timeout(self):
        """Tell the scoreboard the watchdog fired here (after every packet logged so far)."""
        self._record("timeout")

    async def check(self, model: Optional[HubModel] = None) -> HubModel:
        """Compare everything the RTL did with the reference model; read every status
        register. Call when the hub is idle."""
        model = model or self.replay()
        seed = self.seed
        for j in range(self.cfg.lanes):
            got = [(a, dta) for _, a, dta in self.wr_out[j]]
            exp = model.writes[j]
            assert got == exp, _diff(f"lane {j} data writes", got, exp, seed)
        got_ctl = [c for _, c in self.ctl_out]
        assert got_ctl == model.ctl, _diff("control writes", got_ctl, model.ctl, seed)
        got_cr = [(s, t) for _, s, t in self.credit_out]
        assert got_cr == model.credits, _diff("credits", got_cr, model.credits, seed)
        expected = model.csr_values()
        for (name, index), value in expected.items():
            got = await self.csr_read(name, index)
            assert got == value, f"CSR {name}[{index}] = {got:#x}, model {value:#x} (seed {seed})"
        self.check_ordering(model)
        if self.cov is not None:
            self.cov.sample()
        return model

    def check_ordering(self, model: HubModel):
        """Every tile flag of the last layer is written after all data writes of the tile's
        rows. (Only the writes since the last START: a layer reuses the addresses of the
        layers before it, and a flushed layer leaves tiles unflagged.)"""
        cfg = self.cfg
        starts = [cyc for cyc, _, kind, args in self.log
                  if kind == "csr" and args[0] == self.map.addr("CTRL") and args[1] & CTRL_START]
        since = max(starts, default=0)
        last_write = {}
        for j in range(cfg.lanes):
            for cyc, addr, _ in self.wr_out[j]:
                if cyc >= since:
                    last_write[addr] = max(last_write.get(addr, -1), cyc)
        flags = {}
        for cyc, c in self.ctl_out:
            if c.kind == CtlKind.FLAG and cyc >= since:
                flags[c.addr] = cyc
        for x in range(cfg.experts):
            for r in range(model.rows[x]):
                tile = r >> model.layer_tile_rows_log2
                fa = flag_addr(cfg, model.layer_flag_base, x, tile)
                if fa not in flags:
                    continue
                for c in range(cfg.chunks_per_row):
                    if cfg.paged or cfg.multicast:     # (in its tile's page, in the arena)
                        a = data_addr(cfg, model.pool_base, model.row_loc[(x, r)], c)
                    else:
                        a = data_addr(cfg, model.region_base[x], r, c)
                    assert last_write.get(a, -1) < flags[fa], \
                        f"flag of expert {x} tile {tile} at cycle {flags[fa]} before its row {r} " \
                        f"chunk {c} write at {last_write.get(a)} (seed {self.seed})"

    def check_invariants(self, model: HubModel, rows: list[Row], clean: bool = True):
        """Model-independent checks of one layer of clean traffic (no bad input):
        every row's metadata written once with a dense, unique row number; every chunk
        written exactly once at the right address with the right data; every tile flagged
        exactly once; final counts right; every credit returned."""
        cfg = self.cfg
        metas = [c for _, c in self.ctl_out if c.kind == CtlKind.META]
        sent = {(r.src, r.token, r.slot): r for r in rows}
        assert len(metas) == len(rows), f"{len(metas)} metadata writes for {len(rows)} rows"
        row_of = {}
        per_expert = defaultdict(list)
        for c in metas:
            off = c.addr - model.layer_meta_base
            idx = off // cfg.meta_word_bytes
            x, r = divmod(idx, cfg.max_rows_per_expert)
            f = self.fmt.meta_word.unpack(c.data)
            key = (f["src"], f["token"], f["slot"])
            assert key in sent and key not in row_of, f"unexpected or repeated metadata {key}"
            assert sent[key].expert == x, f"row {key} placed in expert {x}, sent to {sent[key].expert}"
            row_of[key] = (x, r)
            per_expert[x].append(r)
        for x, rs in per_expert.items():
            assert sorted(rs) == list(range(len(rs))), f"expert {x} rows not dense/unique: {sorted(rs)}"
        writes = defaultdict(list)
        for j in range(cfg.lanes):
            for _, a, dta in self.wr_out[j]:
                writes[a].append(dta)
        expected_writes = {}
        for key, (x, r) in row_of.items():
            for c, dta in enumerate(sent[key].data):
                expected_writes[data_addr(cfg, model.region_base[x], r, c)] = dta
        assert set(writes) == set(expected_writes), "data written to unexpected addresses"
        for a, vals in writes.items():
            assert vals == [expected_writes[a]], f"address {a:#x} written {vals}, want {expected_writes[a]}"
        flags = [c for _, c in self.ctl_out if c.kind == CtlKind.FLAG]
        want_flags = set()
        tr = 1 << model.layer_tile_rows_log2
        for x in range(cfg.experts):
            n = len(per_expert.get(x, []))
            for t in range((n + tr - 1) // tr):
                want_flags.add(flag_addr(cfg, model.layer_flag_base, x, t))
        got_flags = [c.addr for c in flags]
        assert sorted(got_flags) == sorted(want_flags), "tiles not flagged exactly once"
        counts = {c.addr: c.data for _, c in self.ctl_out if c.kind == CtlKind.COUNT}
        for x in range(cfg.experts):
            assert counts.get(model.layer_count_base + 4 * x) == len(per_expert.get(x, [])), \
                f"final count of expert {x}"
        done = [c for _, c in self.ctl_out if c.kind == CtlKind.DONE]
        assert len(done) == 1 and done[0].data == model.layer_epoch, "layer-done word"
        assert len(self.credit_out) == len(rows), "credits returned"


def _diff(what, got, exp, seed) -> str:
    n = min(len(got), len(exp))
    first = next((i for i in range(n) if got[i] != exp[i]), n)
    return (f"{what} differ from the model (seed {seed}): {len(got)} vs {len(exp)} items; "
            f"first difference at #{first}: got {got[first:first + 3]} expected {exp[first:first + 3]}")



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
