"""What every test suite of the hub testbench stands on: :func:`hub_test`, which marks a
method as a cocotb test, and :class:`HubTests`, the base of the suites.

A suite is a class of tests written for one protocol-v2 feature set: ``requires`` names
the features its hub must have, ``excludes`` those it must not (its checks assume
their absence: rows in static regions, one expert per row). :mod:`moehub.verif.tb.registry`
collects, for a hub, the tests of every suite that applies to its features -- a test that
does not apply is not collected there at all. A suite's own tests are the methods of the
class itself (a subclass borrows the helpers of the suites it extends, not their tests).

An instance is made per test run from the run's :class:`~moehub.verif.tb.context.TbContext`
and gives the tests the hub config (``cfg``, and ``L``, ``E``, ``S``, ``P``, ``MT`` for its
lanes, experts, sources, pool pages and targets per row), the seeds, and the stimulus
helpers below (rows, their packets, the schedules that place packets on lanes).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from cocotb.triggers import RisingEdge

from ...spec.csr_map import STATUS_ARMED, STATUS_CLEARING
from ...spec.model import Packet
from ..traffic import Row
from .context import TbContext
from .env import HubTB


@dataclass(frozen=True)
class TestSpec:
    """How a test runs: its limit of simulated time (before the run's timeout scale) and
    whether it is a constrained-random test (the fast set leaves those of the feature
    hubs to the slow set, which runs them over many seeds)."""
    ms: float = 20.0
    random: bool = False


def hub_test(*, ms: float = 20.0, random: bool = False):
    """Mark a suite method ``async def test_x(self, dut)`` as a test (see :class:`TestSpec`)."""
    def mark(fn):
        if not fn.__name__.startswith("test_"):
            raise ValueError(f"hub_test: {fn.__qualname__} must be named test_*")
        fn.hub_test = TestSpec(ms=ms, random=random)
        return fn
    return mark


class HubTests:
    """The base of the suites (see the module docstring)."""

    #: features the hub must have / must not have for this suite's tests
    requires: frozenset = frozenset()
    excludes: frozenset = frozenset()
    #: where the pool (paged rows, the multicast arena) starts: not 0, so a base left out shows
    POOL_BASE = 0x2000_0000

    def __init__(self, ctx: TbContext):
        self.ctx, self.cfg = ctx, ctx.cfg
        self.seed, self.seeds = ctx.seed, ctx.seeds
        cfg = self.cfg
        self.L, self.E, self.S = cfg.lanes, cfg.experts, cfg.sources
        self.P, self.MT = cfg.pool_pages, cfg.max_targets
        #: cycles with nothing offered (the pipeline drains)
        self.IDLE = [[None] * self.L] * 24

    @classmethod
    def applies(cls, features) -> bool:
        return cls.requires <= set(features) and not (cls.excludes & set(features))

    @classmethod
    def own_tests(cls) -> list:
        """``(name, TestSpec)`` of this class's own tests, in the order they are written."""
        return [(n, f.hub_test) for n, f in vars(cls).items() if hasattr(f, "hub_test")]

    # ------------------------------------------------------------------ the testbench
    async def make_tb(self, dut, seed=None, bp=0.0, start=True, **configure) -> HubTB:
        """A started testbench (seed: the run's), configured (:meth:`HubTB.configure`),
        with a layer started unless ``start`` is False."""
        tb = HubTB(dut, self.cfg, self.seed if seed is None else seed, bp=bp)
        await tb.start()
        await tb.configure(**configure)
        if start:
            await tb.start_layer()
        return tb

    async def finish(self, tb: HubTB, rows=None, invariants=True):
        """Wait until the hub is idle, check it against the model and, for clean ``rows``,
        the model-independent invariants."""
        await tb.wait_idle()
        model = await tb.check()
        if rows is not None and invariants:
            tb.check_invariants(model, rows)
        return model

    async def wait_armed(self, tb: HubTB):
        """Until STATUS shows the layer ARMED and its counters cleared (a START waits for the
        pipeline to drain, then the counters may need a clearing sweep)."""
        while (await tb.csr_read("STATUS")) & (STATUS_ARMED | STATUS_CLEARING) != STATUS_ARMED:
            pass

    async def idle_cycles(self, tb: HubTB, n: int = 8):
        for _ in range(n):
            await RisingEdge(tb.dut.clk)

    async def drops(self, tb: HubTB, reason) -> int:
        """DROPS[reason] as the hub counts it."""
        return await tb.csr_read("DROPS", reason)

    # ------------------------------------------------------------------ stimulus
    def row(self, src, expert, token=0, slot=0, seed=0) -> Row:
        """A row to one expert, its data drawn from its identity (the same row twice is
        the same data)."""
        rng = random.Random(hash((src, expert, token, slot, seed)))
        return Row(src, expert, token, slot,
                   [rng.getrandbits(self.cfg.data_bits) for _ in range(self.cfg.chunks_per_row)])

    def chunks(self, r: Row, tag: int, order=None):
        """The row's packets under ``tag`` (chunk indices in ``order``, default ascending)."""
        order = range(self.cfg.chunks_per_row) if order is None else order
        return [Packet(src=r.src, tag=tag, expert=r.expert, token=r.token, slot=r.slot, chunk=c,
                       data=r.data[c]) for c in order]

    def eos_all(self, counts: dict):
        """End-of-stream from every source (count 0 for sources not in ``counts``)."""
        return [Packet.eos(s, counts.get(s, 0)) for s in range(self.cfg.sources)]

    def serial(self, pkts, lanes=None):
        """One packet per cycle, on lane 0 or cycling over ``lanes``."""
        lanes = lanes or [0]
        sched = []
        for k, p in enumerate(pkts):
            cyc = [None] * self.cfg.lanes
            cyc[lanes[k % len(lanes)]] = p
            sched.append(cyc)
        return sched

    def wide(self, pkts):
        """All lanes every cycle, in lane order."""
        L = self.cfg.lanes
        return [list(pkts[k:k + L]) for k in range(0, len(pkts), L)]
