"""The relay's reduce-on-combine whole (moehub/rtl/relay/reduce_path.py: the reduce unit,
its engine, the accumulate datapath) against the reference model
(:class:`~moehub.spec.relay.ReduceModel`) on real data, in the Amaranth simulator.

Random opens and partial rows (BF16 data; some for no sum, a slot not expected or
already in, a sum with no record), flushes, and a memory with random latency and
backpressure on every port. Every reduced row leaving must be the model's next, to the
bit (header: source, token, parts; data: the BF16 rounding of the model's FP32 sum); the
accumulator's words read and written the model's HBM bytes; the counters the model's.
Planted bugs -- the read-after-write hazard ignored, a refused part's data not dropped,
the accumulator read for a first part -- must fail the bench.
"""
import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from moehub.spec.relay import ReduceModel, bf16_bits, bf16_value, global_gpu, to_bf16
from moehub.rtl.relay.reduce_path import ReducePath
from moehub.verif.formal.plant import Plant, planted
from test_rtl_relay import R2, R3

#: narrow rows keep the bench short: 4 chunks of 4 BF16 elements (64-bit chunks)
ELEMENTS, CHUNKS = 4, 4
CASES = {"2x4": (R2.replace(token_bits=3, reduce_tokens=4, data_bits=16 * ELEMENTS), 1, 2),
         "3x3": (R3.replace(token_bits=2, data_bits=16 * ELEMENTS), 1, 0)}
ACC_BASE = 0x4000


def _row(rng: random.Random) -> list:
    """BF16 bits of a partial row: values around 1 of both signs, sometimes far apart."""
    out = []
    for _ in range(ELEMENTS * CHUNKS):
        e = 127 + rng.choice([0, 0, 0, -1, 1, 2, -3, 9, -9])
        out.append(rng.getrandbits(1) << 15 | e << 7 | rng.getrandbits(7))
    return out


def _bits32(v) -> int:
    return int(np.float32(v).view(np.uint32))


class Memory:
    """The accumulator port's memory: in order, reads answered after a random latency
    with the contents at the read's acceptance (junk where nothing was written), writes
    at theirs; ready at random."""

    def __init__(self, rng: random.Random):
        self.rng, self.words, self.pending = rng, {}, []
        self.reads = self.writes = 0

    def drive(self, ctx, dut, cycle: int):
        """This cycle's inputs: the head read's data once its latency is over, the readies."""
        rng = self.rng
        ctx.set(dut.wr.ready, rng.random() < 0.8)
        ctx.set(dut.rd.ready, rng.random() < 0.8)
        ready = bool(self.pending) and self.pending[0][0] <= cycle
        ctx.set(dut.rdata.valid, ready)
        ctx.set(dut.rdata.payload, self.pending[0][1] if ready else 0)

    def observe(self, ctx, dut, cycle: int):
        """This cycle's handshakes (a write before a read of the same cycle)."""
        if ctx.get(dut.wr.valid) and ctx.get(dut.wr.ready):
            self.words[ctx.get(dut.wr.payload.addr)] = ctx.get(dut.wr.payload.data)
            self.writes += 1
        if ctx.get(dut.rdata.valid) and ctx.get(dut.rdata.ready):
            self.pending.pop(0)
        if ctx.get(dut.rd.valid) and ctx.get(dut.rd.ready):
            addr = ctx.get(dut.rd.payload.addr)
            if addr not in self.words:                  # (HBM holds anything before a write)
                self.words[addr] = self.rng.getrandbits(32 * ELEMENTS)
            self.pending.append((cycle + self.rng.randint(1, 12), self.words[addr]))
            self.reads += 1


def reduce_path_sim(case: str, seed: int, rows: int = 70, cls=None) -> dict:
    """Run the bench (see the module docstring); returns counts of what it reached."""
    cfg, node, rank = CASES[case]
    rng = random.Random(seed)
    dut = (cls or ReducePath)(cfg, ELEMENTS, CHUNKS)
    model = ReduceModel(cfg, node=node)
    mem = Memory(rng)
    G, K = cfg.node_gpus, cfg.topk
    got = []
    state = {"sent": [], "flushed": 0}

    def any_node():
        return rng.randrange(1 << cfg.node_bits) if rng.random() < 0.05 else rng.randrange(cfg.nodes)

    async def bench(ctx):
        ctx.set(dut.node, node)
        ctx.set(dut.rank, rank)
        ctx.set(dut.acc_base, ACC_BASE)
        offer_open, part, beat, out_beats = None, None, 0, []
        parts_sent, cycle, quiet, moved = 0, 0, 0, 0
        sweeping_was = False
        while True:
            if offer_open is None and parts_sent < rows and rng.random() < 0.08:
                n = any_node() if rng.random() < 0.9 else node
                slots = rng.sample(range(K), rng.randint(1, K))
                ws = [bf16_bits(rng.choice([0.125, 0.25, 0.3, 0.7, 1.5])) for _ in slots]
                tok = rng.randrange(cfg.reduce_token_span if rng.random() < 0.9 else 1 << cfg.token_bits)
                offer_open = (n, tok, slots, ws)
                p = dut.open.payload
                ctx.set(p.src_node, offer_open[0])
                ctx.set(p.token, offer_open[1])
                ctx.set(p.valid, (1 << len(slots)) - 1)
                for j in range(cfg.relay_targets):
                    ctx.set(p.slot[j], slots[j] if j < len(slots) else 0)
                    ctx.set(p.weight[j], ws[j] if j < len(slots) else 0)
            if part is None and parts_sent < rows and rng.random() < 0.3:
                if model.acc and rng.random() < 0.85:
                    src, tok = rng.choice(sorted(model.acc))
                    n, s = src // G, rng.choice(sorted(model.acc[(src, tok)]["weights"]))
                else:
                    n, tok, s = any_node(), rng.randrange(1 << cfg.token_bits), rng.randrange(K)
                part, beat = (n, tok, s, _row(rng)), 0
                parts_sent += 1
            ctx.set(dut.open.valid, offer_open is not None)
            on = part is not None and rng.random() < 0.85
            ctx.set(dut.partial.valid, on)
            if on:
                n, tok, s, row = part
                pp = dut.partial.payload
                ctx.set(pp.src_node, n)
                ctx.set(pp.token, tok)
                ctx.set(pp.slot, s)
                ctx.set(pp.data, sum(row[beat * ELEMENTS + j] << 16 * j for j in range(ELEMENTS)))
            ctx.set(dut.out.ready, rng.random() < 0.8)
            fl = parts_sent >= rows and part is None and offer_open is None and not state["flushed"]
            ctx.set(dut.flush, fl)
            state["flushed"] |= fl
            mem.drive(ctx, dut, cycle)
            mem.observe(ctx, dut, cycle)
            # what the unit took this cycle goes to the model in the same order
            if ctx.get(dut.unit.open.valid) and ctx.get(dut.unit.open.ready):
                n, tok, slots, ws = offer_open
                model.open(global_gpu(cfg, n, rank), tok, tuple((s, float(bf16_value(w))) for s, w in zip(slots, ws)))
                offer_open = None
            if ctx.get(dut.unit.part.valid) and ctx.get(dut.unit.part.ready):
                n, tok, s, row = part
                y = np.array([bf16_value(b) for b in row], np.float32)
                model.partial(global_gpu(cfg, n, rank), tok, s, y)
            if on and ctx.get(dut.partial.ready):
                beat += 1
                if beat == CHUNKS:
                    part = None
            sweeping = ctx.get(dut.sweeping)
            if sweeping and not sweeping_was:
                model.flush()
            sweeping_was = sweeping
            if ctx.get(dut.out.valid) and ctx.get(dut.out.ready):
                o = dut.out.payload
                out_beats.append((ctx.get(o.src_node), ctx.get(o.src_rank), ctx.get(o.token),
                                  ctx.get(o.parts), ctx.get(o.chunk), ctx.get(o.data)))
                if len(out_beats) == CHUNKS:
                    got.append(out_beats)
                    _check_row(model, cfg, seed, len(got) - 1, out_beats)
                    out_beats = []
            await ctx.tick()
            cycle += 1
            busy = ctx.get(dut.busy) or ctx.get(dut.sweeping) or part is not None or mem.pending
            quiet = 0 if busy or not state["flushed"] else quiet + 1
            if quiet > 40:
                break
            # (progress: a partial row's chunk or a reduced row's taken, or nothing left to do
            # but the opens -- which the unit always takes)
            if on and ctx.get(dut.partial.ready) or ctx.get(dut.out.valid) and ctx.get(dut.out.ready) \
                    or part is None and parts_sent >= rows and not busy:
                moved = cycle
            assert cycle - moved < 1000, f"seed {seed}: no progress for 1000 cycles (a hang)"
        assert len(got) == len(model.out), f"seed {seed}: {len(got)} reduced rows, model {len(model.out)}"
        word = 4 * ELEMENTS                             # bytes of an accumulator word
        assert (mem.reads * word, mem.writes * word) == (model.hbm_read_bytes, model.hbm_write_bytes), \
            f"seed {seed}: accumulator words read/written {mem.reads}/{mem.writes}"
        assert (ctx.get(dut.acc_reads) * CHUNKS, ctx.get(dut.acc_writes) * CHUNKS) == (mem.reads, mem.writes), seed
        assert (ctx.get(dut.acc_reads), ctx.get(dut.acc_writes)) == (model.rows_read, model.rows_written), seed
        assert (ctx.get(dut.red_rows), ctx.get(dut.red_open), ctx.get(dut.red_incomplete),
                [ctx.get(d) for d in dut.drops]) == \
            (len(model.out), len(model.acc), model.incomplete, model.drops()), seed

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    kinds = {}
    for kind, *_ in model.ops:
        kinds[kind] = kinds.get(kind, 0) + 1
    return {**kinds, "rows": len(got), "bad_partials": model.bad_partials, "no_record": model.no_record}


def _check_row(model, cfg, seed, i, beats):
    """Reduced row ``i`` (its beats) against the model's ``out[i]``, to the bit."""
    assert i < len(model.out), f"seed {seed}: reduced row {i}, the model sent {len(model.out)}"
    src, tok, parts, row = model.out[i]
    heads = {b[:4] for b in beats}
    assert heads == {(src // cfg.node_gpus, src % cfg.node_gpus, tok, parts)}, \
        f"seed {seed}: row {i} header {heads}, model (src {src}, token {tok}, parts {parts})"
    assert [b[4] for b in beats] == list(range(CHUNKS)), f"seed {seed}: row {i} chunks out of order"
    want = [_bits32(v) >> 16 for v in to_bf16(row)] if len(row) else [0] * ELEMENTS * CHUNKS
    have = [b[5] >> 16 * j & 0xFFFF for b in beats for j in range(ELEMENTS)]
    for e, (h, w) in enumerate(zip(have, want)):
        nan = (w & 0x7F80) == 0x7F80 and w & 0x7F
        assert (h & 0x7F80) == 0x7F80 and h & 0x7F if nan else h == w, \
            f"seed {seed}: reduced row {i} (src {src}, token {tok}) element {e}: {h:#06x}, model {w:#06x}"


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_reduce_path_against_model(case, seed):
    """Every op kind, refused partial rows and opens without a record reached; every
    reduced row the model's to the bit, the HBM words its bytes."""
    stats = reduce_path_sim(case, seed)
    assert all(stats.get(k) for k in ("write", "add", "last", "only", "flush")), stats
    assert stats["bad_partials"] and stats["no_record"], stats


PATH_PLANTS = {
    # the hazard check off: a sum's next part reads the accumulator before the last
    # part's write-back lands
    "no-hazard": ("moehub.rtl.relay.reduce_engine", "ReduceEngine",
                  "m.d.comb += hazard.eq(_reads(o.kind, o.parts) & Cat(",
                  "m.d.comb += hazard.eq(0 & Cat("),
    # a refused part's chunks passed on: the next op adds another row's data
    "refused-data-kept": ("moehub.rtl.relay.reduce_path", "ReducePath",
                          'with m.If(unit.part_refused):\n                    m.next = "DROP"',
                          'with m.If(unit.part_refused):\n                    m.next = "PASS"'),
    # a first part read-modify-written (acc = junk + w y)
    "write-reads": ("moehub.rtl.relay.reduce_engine", "ReduceEngine",
                    "return (kind == Op.ADD) | (kind == Op.LAST)",
                    "return (kind == Op.ADD) | (kind == Op.LAST) | (kind == Op.WRITE)"),
}


@pytest.mark.plants
@pytest.mark.parametrize("plant", list(PATH_PLANTS))
def test_reduce_path_planted_bug_is_caught(plant):
    module, cls_name, old, new = PATH_PLANTS[plant]
    path = planted(ReducePath, {plant: Plant(module, old, new, cls_name, (), "",
                                             host=("moehub.rtl.relay.reduce_path", "ReducePath")
                                             if cls_name == "ReduceEngine" else None)}, plant)
    with pytest.raises(AssertionError):
        reduce_path_sim("2x4", 0, cls=path)
