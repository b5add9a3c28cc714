"""The reduce-on-combine's accumulate datapath (moehub/rtl/relay/accumulate.py) against the
reference model's arithmetic (numpy float32, as :class:`moehub.spec.relay.ReduceModel`
computes it), bit for bit, in the Amaranth simulator.

Operands are drawn to reach every rounding case a reviewer asks about: BF16 and FP32 bit
patterns of every class (zeros of both signs, subnormals, normals, infinities, NaNs),
products that underflow into (or below) the subnormal range and that overflow, sums that
cancel exactly or to a few bits, ties, and sums of operands far apart (the smaller one
all sticky). Beats stream with gaps and a backpressured output: every beat leaves, in
order, ``LATENCY`` cycles after it was taken when the output is ready. A NaN result must
be a NaN (the datapath's is the canonical quiet NaN; the host's bits are not compared).
A planted bug in the rounding or the alignment must fail the bench.
"""
import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from moehub.rtl.relay.accumulate import LATENCY, ReduceDatapath
from moehub.rtl.relay.reduce_unit import Op
from moehub.spec.config import load_hub_config
from moehub.spec.relay import bf16_value, to_bf16
from moehub.verif.formal.plant import broken_class

R2 = load_hub_config("tiny").replace(sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1,
                                     topk=3, max_targets=3)
ELEMENTS = 4


def f32(bits: int) -> np.float32:
    return np.uint32(bits).view(np.float32)


def bits32(x) -> int:
    return int(np.float32(x).view(np.uint32))


def reference(kind: int, w: int, y: int, acc: int) -> tuple:
    """(new accumulator bits, BF16 row bits) by the model's arithmetic."""
    with np.errstate(all="ignore"):
        term = np.float32(bf16_value(w) * bf16_value(y))
        a = f32(acc)
        new = {Op.WRITE: term, Op.ONLY: term, Op.FLUSH: a}.get(kind)
        if new is None:
            new = np.float32(a + term)
    return bits32(new)


def row_of(acc_bits: int) -> int:
    """The model's BF16 rounding of accumulator bits (to_bf16)."""
    return bits32(to_bf16(np.array([f32(acc_bits)]))[0]) >> 16


def is_nan32(b: int) -> bool:
    return (b >> 23 & 0xFF) == 0xFF and (b & 0x7FFFFF) != 0


def bf16_pattern(rng: random.Random) -> int:
    """BF16 bits: every class, with subnormals, tiny and huge exponents and ones near 1."""
    sign = rng.getrandbits(1) << 15
    k = rng.random()
    if k < 0.05:
        return sign | rng.choice([0, 0x7F80, 0x7FC0, 0x7F81, 0x0001, 0x007F, 0x0080])
    if k < 0.15:
        return sign | rng.randrange(1, 0x80)                              # subnormal
    if k < 0.30:
        return sign | rng.choice([rng.randrange(1, 12), rng.randrange(240, 255)]) << 7 | rng.getrandbits(7)
    return sign | rng.randrange(118, 136) << 7 | rng.getrandbits(7)     # around 1


def fp32_near(rng: random.Random, term: int) -> int:
    """FP32 bits chosen against a product: its negation (exact cancellation), a value a few
    ulps off (cancellation to a few bits), one far above or below (sticky), a random one,
    or a special."""
    k = rng.random()
    if k < 0.15:
        return term ^ 0x80000000
    if k < 0.35:
        return (term ^ 0x80000000) + rng.randrange(-3, 4) & 0xFFFFFFFF
    if k < 0.50:
        e = (term >> 23 & 0xFF) + rng.choice([-30, -26, -25, -24, 24, 25, 26, 30, 1, -1, 2])
        return (rng.getrandbits(1) << 31) | (min(max(e, 0), 254) << 23) | rng.getrandbits(23)
    if k < 0.60:
        return rng.getrandbits(1) << 31 | rng.choice([0, 0x7F800000, 0x7FC00000, 1, 0x7FFFFF, 0x800000,
                                                      0x7F7FFFFF])
    if k < 0.75:
        return rng.getrandbits(1) << 31 | rng.randrange(1, 0x800000)        # subnormal
    return rng.getrandbits(32)


def beats(rng: random.Random, count: int) -> list:
    out = []
    kinds = [Op.WRITE, Op.ADD, Op.LAST, Op.ONLY, Op.FLUSH]
    for _ in range(count):
        w = bf16_pattern(rng)
        ys = [bf16_pattern(rng) for _ in range(ELEMENTS)]
        accs = [fp32_near(rng, reference(Op.WRITE, w, y, 0)) for y in ys]
        out.append((rng.choice(kinds), w, ys, accs))
    return out


def run(seed: int, count: int = 400, cls=ReduceDatapath) -> dict:
    """Stream ``count`` random beats through the datapath with gaps and backpressure; check
    every result against the model. Returns counts of the cases reached."""
    rng = random.Random(seed)
    todo = beats(rng, count)
    dut = cls(R2, ELEMENTS)
    seen = {"subnormal": 0, "zero": 0, "inf": 0, "nan": 0, "cancel": 0}
    state = {"done": 0}

    async def bench(ctx):
        sent, taken_at, cycle = 0, [], 0
        while state["done"] < count:
            offer = sent < count and rng.random() < 0.8
            if offer:
                kind, w, ys, accs = todo[sent]
                ctx.set(dut.i.payload.kind, kind)
                ctx.set(dut.i.payload.weight, w)
                for j in range(ELEMENTS):
                    ctx.set(dut.i.payload.y[j], ys[j])
                    ctx.set(dut.i.payload.acc[j], accs[j])
            ctx.set(dut.i.valid, offer)
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid) and ready:
                i = state["done"]
                kind, w, ys, accs = todo[i]
                assert ctx.get(dut.o.payload.kind) == kind, f"seed {seed}: beat {i} kind"
                for j in range(ELEMENTS):
                    got, row = ctx.get(dut.o.payload.acc[j]), ctx.get(dut.o.payload.row[j])
                    want = reference(kind, w, ys[j], accs[j])
                    what = (f"seed {seed}: beat {i} element {j}: {Op(kind).name} w={w:#06x} "
                            f"y={ys[j]:#06x} acc={accs[j]:#010x}: got {got:#010x}, model {want:#010x}")
                    if is_nan32(want):
                        assert is_nan32(got), what
                        seen["nan"] += 1
                    else:
                        assert got == want, what
                        seen["zero"] += (want & 0x7FFFFFFF) == 0
                        seen["subnormal"] += (want >> 23 & 0xFF) == 0 and (want & 0x7FFFFF) != 0
                        seen["inf"] += (want & 0x7FFFFFFF) == 0x7F800000
                    assert row == row_of(got), what + f": row {row:#06x}"
                    seen["cancel"] += (kind in (Op.ADD, Op.LAST) and (want & 0x7FFFFFFF) == 0
                                       and accs[j] & 0x7FFFFFFF != 0)
                if ready:
                    assert cycle - taken_at[i] >= LATENCY, f"seed {seed}: beat {i} out early"
                state["done"] += 1
            if offer and ctx.get(dut.i.ready):
                taken_at.append(cycle)
                sent += 1
            await ctx.tick()
            cycle += 1
            assert cycle < 20 * count + 100, f"seed {seed}: no progress by cycle {cycle}"
        seen["cycles"] = cycle

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_datapath_matches_the_model_bit_for_bit():
    seen = run(0, 300)
    assert all(seen[k] > 3 for k in ("subnormal", "zero", "inf", "nan", "cancel")), seen


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 5))
def test_datapath_matches_the_model_many_seeds(seed):
    seen = run(seed, 1500)
    assert all(seen[k] > 10 for k in ("subnormal", "zero", "inf", "nan", "cancel")), seen


def test_latency_back_to_back():
    """With the output always ready, a beat a cycle: the n-th result in cycle n + LATENCY."""
    dut = ReduceDatapath(R2, 1)
    got = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for c in range(LATENCY + 6):
            ctx.set(dut.i.valid, c < 4)
            ctx.set(dut.i.payload.kind, Op.ONLY)
            ctx.set(dut.i.payload.weight, 0x3F80)            # 1.0
            ctx.set(dut.i.payload.y[0], 0x4000 + c)
            if ctx.get(dut.o.valid):
                got.append((c, ctx.get(dut.o.payload.row[0])))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == [(c + LATENCY, 0x4000 + c) for c in range(4)]


def test_refuses_a_non_relay_config():
    with pytest.raises(ValueError, match="relay: true"):
        ReduceDatapath(load_hub_config("tiny"))


#: planted bugs in the arithmetic (rtl/relay/fp.py): (old, new)
PLANTS = {
    # ties rounded away from zero instead of to even
    "ties-away": ("low.eq(keep[:HALF_ROUND] + (guard & (sticky | keep[0])))", "low.eq(keep[:HALF_ROUND] + guard)"),
    # the sticky bit of the aligned addend dropped
    "no-sticky": ('"lo3": Cat(lo_full[27] | (lo_full[:27] != 0), lo_full[28:54])',
                  '"lo3": Cat(lo_full[27], lo_full[28:54])'),
    # subnormal results flushed to zero
    "flush-to-zero": ('m.d.comb += out.eq(Cat(frac, field, d["sign"]))',
                      'm.d.comb += out.eq(Mux(field == 0, Cat(Const(0, 31), d["sign"]), '
                      'Cat(frac, field, d["sign"])))'),
}


@pytest.mark.plants
@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_is_caught(plant, monkeypatch):
    from moehub.rtl.relay import fp
    old, new = PLANTS[plant]
    for step in ("product", "product_sum", "order", "align", "add_lo", "add_hi", "lead", "expo", "normalize", "subshift", "round_up", "pack"):
        monkeypatch.setattr(fp, step, broken_class("moehub.rtl.relay.fp", old, new, step))
    with pytest.raises(AssertionError, match="seed 0"):
        run(0, count=150)
