"""cocotb testbench of protocol v3's reduce-on-combine -- the Verilog of
:class:`moehub.rtl.relay.reduce_path.ReducePath` (the reduce unit, its engine, the
accumulate datapath) -- against the reference model :class:`moehub.spec.relay.ReduceModel`,
on real data.

Run it through :func:`moehub.verif.cocotb_runner.run_hub_cocotb` with
``design=ReducePath`` and a relay config (tests/test_reduce_cocotb.py); the random test's
seeds come as the run's ``seed``/``seeds``, its partial rows per seed as
``MOEHUB_REDUCE_ROWS`` (default 60).

:class:`ReduceTB` plays everything around the path, through its ports only: the relay
control path (opens of sums, some of a source of this node or a token beyond the record
table: no record), the experts' GPUs (partial rows of random BF16 data, whole and in chunk
order, some for no sum or a slot not expected or already in), the HBM (accumulator reads
answered in order after a random latency, with the contents at the read's acceptance --
junk where nothing was written -- and writes at theirs, every ready at random), the NIC
(the reduced rows taken at random) and software (RED_FLUSH once the rows are in). An open
or a partial row is offered only when the one before it was taken, so the order the unit
sees them in is the order the model gets them. Every reduced row must be the model's next
to the bit (source, token, parts, each BF16 element), its chunks in order; at the end the
counters must be the model's (sums sent, open, incomplete, refusals per reason,
accumulator rows read and written). A bound in cycles catches a hang; a failure names the
config and the seed.
"""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

from ...spec.formats import ReducePorts, pack_fields, unpack_fields
from ...spec.relay import ReduceModel, bf16_bits, bf16_value, global_gpu, to_bf16
from .context import TbContext

PERIOD_NS = 10
#: the random test's partial rows per seed
ENV_ROWS = "MOEHUB_REDUCE_ROWS"


class ReduceTB:
    """The path's environment and checker (see the module docstring) for one seed."""

    def __init__(self, dut, cfg, seed: int, node: int, rank: int):
        self.dut, self.cfg, self.seed, self.node, self.rank = dut, cfg, seed, node, rank
        self.rng = random.Random(seed)
        self.elements = max(1, cfg.data_bits // 16)
        self.chunks = cfg.chunks_per_row
        self.ports = ReducePorts(cfg, self.elements, self.chunks)
        self.model = ReduceModel(cfg, node=node)
        self.mem, self.pending, self.got, self.beats = {}, [], 0, []
        self.cycle = 0

    def named(self, e: AssertionError) -> AssertionError:
        return AssertionError(f"{self.cfg.name} seed {self.seed} (node {self.node}, rank {self.rank}), "
                              f"cycle {self.cycle}: {e}")

    # ---------------------------------------------------------------- the world
    def _memory(self):
        """This cycle's HBM inputs (before the edge), and last edge's handshakes."""
        d, rng = self.dut, self.rng
        ready = bool(self.pending) and self.pending[0][0] <= self.cycle
        d.rdata__valid.value = int(ready)
        d.rdata__payload.value = self.pending[0][1] if ready else 0
        d.wr__ready.value = int(rng.random() < 0.8)
        d.rd__ready.value = int(rng.random() < 0.8)
        d.out__ready.value = int(rng.random() < 0.8)

    def _observe(self):
        """The handshakes of the cycle that just closed (outputs sampled at the edge)."""
        d = self.dut
        if int(d.wr__valid.value) and int(d.wr__ready.value):
            w = unpack_fields(self.ports.wr, int(d.wr__payload.value))
            self.mem[w["addr"]] = w["data"]
        if int(d.rdata__valid.value) and int(d.rdata__ready.value):
            self.pending.pop(0)
        if int(d.rd__valid.value) and int(d.rd__ready.value):
            addr = unpack_fields(self.ports.rd, int(d.rd__payload.value))["addr"]
            if addr not in self.mem:
                self.mem[addr] = self.rng.getrandbits(32 * self.elements)
            self.pending.append((self.cycle + self.rng.randint(1, 12), self.mem[addr]))
        if int(d.out__valid.value) and int(d.out__ready.value):
            self.beats.append(unpack_fields(self.ports.out, int(d.out__payload.value)))
            if len(self.beats) == self.chunks:
                self._check_row(self.beats)
                self.beats = []

    def _check_row(self, beats):
        m, cfg = self.model, self.cfg
        i = self.got
        assert i < len(m.out), f"reduced row {i}: the model sent {len(m.out)}"
        src, tok, parts, row = m.out[i]
        head = {(b["src_node"], b["src_rank"], b["token"], b["parts"]) for b in beats}
        want_head = (src // cfg.node_gpus, src % cfg.node_gpus, tok, parts)
        assert head == {want_head}, f"reduced row {i}: header {head}, model {want_head}"
        assert [b["chunk"] for b in beats] == list(range(self.chunks)), f"reduced row {i}: chunks out of order"
        want = ([int(v) >> 16 for v in to_bf16(row).view(np.uint32)] if len(row)
                else [0] * self.elements * self.chunks)
        have = [b["data"] >> 16 * j & 0xFFFF for b in beats for j in range(self.elements)]
        for e, (h, w) in enumerate(zip(have, want)):
            if (w & 0x7F80) == 0x7F80 and w & 0x7F:
                assert (h & 0x7F80) == 0x7F80 and h & 0x7F, f"reduced row {i} element {e}: {h:#06x}, a NaN expected"
            else:
                assert h == w, f"reduced row {i} (src {src}, token {tok}) element {e}: {h:#06x}, model {w:#06x}"
        self.got += 1

    async def tick(self):
        self._memory()
        await RisingEdge(self.dut.clk)
        self.cycle += 1
        self._observe()

    # ---------------------------------------------------------------- stimulus
    def _any_node(self) -> int:
        rng, cfg = self.rng, self.cfg
        if rng.random() < 0.05:
            return rng.randrange(1 << cfg.node_bits)
        return self.node if rng.random() < 0.08 else rng.choice([n for n in range(cfg.nodes) if n != self.node])

    async def open_sum(self):
        """An open (a relay row's sum), offered until taken."""
        rng, cfg, d = self.rng, self.cfg, self.dut
        T, K = cfg.relay_targets, cfg.topk
        n = self._any_node()
        tok = rng.randrange(cfg.reduce_token_span if rng.random() < 0.9 else 1 << cfg.token_bits)
        slots = rng.sample(range(K), rng.randint(1, min(T, K)))
        ws = [bf16_bits(rng.choice([0.125, 0.25, 0.3, 0.7, 1.5])) for _ in slots]
        d.open__payload.value = pack_fields(self.ports.open, {
            "src_node": n, "token": tok, "valid": (1 << len(slots)) - 1,
            "slot": slots + [0] * (T - len(slots)), "weight": ws + [0] * (T - len(ws))})
        d.open__valid.value = 1
        while True:
            await self.tick()
            if int(d.open__ready.value):
                break
        d.open__valid.value = 0
        self.model.open(global_gpu(cfg, n, self.rank), tok,
                        tuple((s, float(bf16_value(w))) for s, w in zip(slots, ws)))

    async def partial_row(self):
        """A partial row, whole, chunk by chunk with gaps, until its last chunk is taken."""
        rng, cfg, d, m = self.rng, self.cfg, self.dut, self.model
        if m.acc and rng.random() < 0.85:
            src, tok = rng.choice(sorted(m.acc))
            n, slot = src // cfg.node_gpus, rng.choice(sorted(m.acc[(src, tok)]["weights"]))
        else:
            n, tok, slot = self._any_node(), rng.randrange(1 << cfg.token_bits), rng.randrange(cfg.topk)
        bits = [rng.getrandbits(1) << 15 | (127 + rng.choice([0, 0, -1, 1, 3, -5])) << 7 | rng.getrandbits(7)
                for _ in range(self.elements * self.chunks)]
        for c in range(self.chunks):
            word = sum(bits[c * self.elements + j] << 16 * j for j in range(self.elements))
            d.partial__payload.value = pack_fields(self.ports.partial, {"src_node": n, "token": tok,
                                                                        "slot": slot, "data": word})
            while True:
                on = rng.random() < 0.85
                d.partial__valid.value = int(on)
                await self.tick()
                if on and int(d.partial__ready.value):
                    break
        d.partial__valid.value = 0
        m.partial(global_gpu(cfg, n, self.rank), tok, slot,
                  np.array([bf16_value(b) for b in bits], np.float32))

    async def flush(self):
        self.dut.flush.value = 1
        await self.tick()
        self.dut.flush.value = 0
        self.model.flush()

    async def settle(self, limit: int):
        """Until nothing is in flight and the reduced rows are out (or ``limit`` cycles: a
        hang)."""
        d = self.dut
        quiet = 0
        for _ in range(limit):
            await self.tick()
            busy = int(d.busy.value) or int(d.sweeping.value) or self.pending
            quiet = 0 if busy else quiet + 1
            if quiet > 30:
                return
        raise AssertionError(f"still busy after {limit} cycles (a hang)")

    def check_counters(self):
        d, m = self.dut, self.model
        assert self.got == len(m.out), f"{self.got} reduced rows, the model sent {len(m.out)}"
        drops = [int(x) for x in (d.drops__0.value, d.drops__1.value, d.drops__2.value)]
        got = (int(d.red_rows.value), int(d.red_open.value), int(d.red_incomplete.value), drops,
               int(d.acc_reads.value), int(d.acc_writes.value))
        want = (len(m.out), len(m.acc), m.incomplete, m.drops(), m.rows_read, m.rows_written)
        assert got == want, f"counters (rows, open, incomplete, drops, acc reads, acc writes) {got}, model {want}"


async def _reset(dut):
    for name in ("open__valid", "partial__valid", "flush", "rdata__valid"):
        getattr(dut, name).value = 0
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def reduce_random(dut):
    """Random opens and partial rows, a flush, per seed (each at its own node and rank)."""
    ctx = TbContext.from_env()
    cfg = ctx.cfg
    rows = int(os.environ.get(ENV_ROWS, "60"))
    Clock(dut.clk, PERIOD_NS, unit="ns").start()
    for seed in range(ctx.seed, ctx.seed + ctx.seeds):
        rng = random.Random(seed)
        node, rank = rng.randrange(cfg.nodes), rng.randrange(cfg.node_gpus)
        tb = ReduceTB(dut, cfg, seed, node, rank)
        cocotb.log.info(f"reduce_random: {cfg.name} seed {seed} (node {node}, rank {rank}), {rows} rows")
        await _reset(dut)
        dut.node.value, dut.rank.value, dut.acc_base.value = node, rank, 0x4000
        try:
            for _ in range(cfg.reduce_records + 4):          # the clearing sweep after reset
                await tb.tick()
            for _ in range(rows):
                if rng.random() < 0.5:
                    await tb.open_sum()
                await tb.partial_row()
            for _ in range(3):                           # (sums the flush finds open)
                await tb.open_sum()
            await tb.settle(40 * rows * tb.chunks)
            await tb.flush()
            await tb.settle(4 * cfg.reduce_records + 40 * tb.chunks * max(1, len(tb.model.acc)) + 200)
            tb.check_counters()
            kinds = {k for k, *_ in tb.model.ops}
            cocotb.log.info(f"reduce_random: seed {seed}: {tb.got} reduced rows, ops {sorted(kinds)}, "
                            f"refused {tb.model.drops()}, accumulator rows read {tb.model.rows_read}, "
                            f"written {tb.model.rows_written}, {tb.cycle} cycles")
            assert tb.got and {"write", "last", "only", "flush"} <= kinds, "the run reached too little"
        except AssertionError as e:
            raise tb.named(e) from e
