"""IEEE-754 arithmetic for the reduce-on-combine's accumulate datapath: a BF16 x BF16
product and an FP32 sum, each rounded to nearest, ties to even, as the reference model
(:class:`moehub.spec.relay.ReduceModel`) computes them with numpy's float32.

Why exact IEEE rather than a cheaper fused or flush-to-zero datapath: the co-simulation,
the model and the RTL must agree row for row, so the datapath computes exactly the model's
``float32(w * y)`` and ``float32(acc + term)``: subnormal inputs and results kept (numpy
on x86 does not flush), overflow to infinity, every NaN result the canonical quiet NaN
``0x7FC00000`` (the model's NaN bits are the host's; a NaN is compared as a NaN).

Every value is handled as an exact *integer significand and exponent* (value = m x 2**e)
until one rounding step, :func:`round_fp32`, packs it: the product of two BF16 numbers is
exact in 16 bits (8 x 8), and the sum is exact with the smaller operand aligned into three
bits below the larger's (guard, round and a sticky OR of what shifts out), which is all
round to nearest even needs. The functions build combinational Amaranth expressions; the
datapath (:mod:`.accumulate`) puts registers between them.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed

from ..logic import select

#: FP32: exponent bias, fraction bits; BF16's fraction
BIAS, FRAC, BF16_FRAC = 127, 23, 7
#: the canonical quiet NaN every NaN result is
QNAN = 0x7FC00000
#: the width of the exponent the functions carry (signed: products of two tiny numbers
#: fall far below FP32's range before rounding)
EXP_BITS = 11


def _unpack(m: Module, bits, frac: int, name: str):
    """(sign, significand, exponent, is_nan, is_inf) of an IEEE number of ``frac`` fraction
    bits and an 8-bit exponent; value = significand x 2**exponent for the finite ones
    (a subnormal's significand has no hidden bit and the exponent of the smallest normal)."""
    e_field, f_field = bits[frac:frac + 8], bits[:frac]
    sig = Signal(frac + 1, name=f"{name}_sig")
    exp = Signal(signed(EXP_BITS), name=f"{name}_exp")
    m.d.comb += [sig.eq(Mux(e_field == 0, f_field, Cat(f_field, Const(1, 1)))),
                 exp.eq(Mux(e_field == 0, 1, e_field) - BIAS - frac)]
    top = e_field == 0xFF
    return bits[frac + 8], sig, exp, top & (f_field != 0), top & (f_field == 0)


def leading_one(m: Module, x, name: str):
    """The position of ``x``'s highest set bit (0 when ``x`` is 0), as a priority select."""
    w = len(x)
    pos = Signal(range(w), name=name)
    m.d.comb += pos.eq(select([(x[i] & ~(x[i + 1:] != 0) if i < w - 1 else x[i], Const(i, len(pos)))
                               for i in range(w)], len(pos)))
    return pos


def round_fp32(m: Module, sign, sig, exp, name: str):
    """FP32 bits of sign x ``sig`` x 2**``exp`` (``sig`` an unsigned integer whose lowest bit
    may be a sticky OR of lower bits, at least two bits below the rounding point), rounded
    to nearest, ties to even; below the normal range a subnormal (or zero), above it an
    infinity; ``sig`` = 0 is a zero of ``sign``."""
    w = len(sig)
    p = leading_one(m, sig, f"{name}_lead")
    # exponent of the leading bit, and the extra right shift a subnormal takes
    e_top = Signal(signed(EXP_BITS + 1), name=f"{name}_etop")
    m.d.comb += e_top.eq(exp + p)
    # normalise to the leading one at bit w - 1, then keep 24 bits + the rest for rounding
    shl = Signal(range(w), name=f"{name}_shl")
    norm = Signal(w + 24, name=f"{name}_norm")
    m.d.comb += [shl.eq(w - 1 - p), norm.eq(Cat(Const(0, 24), (sig << shl)[:w]))]
    sub = Signal(range(w + 26), name=f"{name}_sub")          # subnormal shift, capped
    lim = 1 - BIAS                                             # the smallest normal exponent
    m.d.comb += sub.eq(Mux(e_top < lim, Mux(lim - e_top > 25, 25, lim - e_top), 0))
    shifted = Signal(w + 24, name=f"{name}_shifted")
    lost = Signal(name=f"{name}_lost")                         # ones shifted out by sub
    m.d.comb += [shifted.eq(norm >> sub), lost.eq((shifted << sub)[:w + 24] != norm)]
    keep = shifted[w:w + 24]                                   # the significand, 24 bits
    guard = shifted[w - 1]
    sticky = (shifted[:w - 1] != 0) | lost
    up = guard & (sticky | keep[0])
    rounded = Signal(25, name=f"{name}_rounded")
    m.d.comb += rounded.eq(keep + up)
    # the biased exponent: the leading bit's, one more on a carry out of 24 bits; a
    # subnormal (hidden bit clear after rounding) has 0
    carry = rounded[24]
    biased = Signal(signed(EXP_BITS + 2), name=f"{name}_biased")
    m.d.comb += biased.eq(Mux(sub != 0, Mux(rounded[23], 1, 0), e_top + BIAS + carry))
    frac = Mux(carry, rounded[1:24], rounded[:23])
    out = Signal(32, name=name)
    with m.If(sig == 0):
        m.d.comb += out.eq(Cat(Const(0, 31), sign))
    with m.Elif(biased >= 0xFF):
        m.d.comb += out.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Else():
        m.d.comb += out.eq(Cat(frac, biased[:8], sign))
    return out


def bf16_product(m: Module, w, y, name: str):
    """FP32 bits of ``float32(w * y)`` for BF16 bits ``w`` and ``y`` (exact in the normal
    range: 8 x 8 significand bits; rounded once below it; an infinity above)."""
    sw, mw, ew, nw, iw = _unpack(m, w, BF16_FRAC, f"{name}_w")
    sy, my, ey, ny, iy = _unpack(m, y, BF16_FRAC, f"{name}_y")
    sign = sw ^ sy
    # two guard bits of zeros below the exact product (round_fp32's contract)
    prod = Signal(18, name=f"{name}_sig")
    m.d.comb += prod.eq(Cat(Const(0, 2), mw * my))
    packed = round_fp32(m, sign, prod, ew + ey - 2, f"{name}_round")
    zero_w, zero_y = (mw == 0) & ~iw & ~nw, (my == 0) & ~iy & ~ny
    out = Signal(32, name=name)
    with m.If(nw | ny | (iw & zero_y) | (iy & zero_w)):
        m.d.comb += out.eq(QNAN)
    with m.Elif(iw | iy):
        m.d.comb += out.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Else():
        m.d.comb += out.eq(packed)
    return out


def fp32_sum(m: Module, a, b, name: str):
    """FP32 bits of ``float32(a + b)`` for FP32 bits ``a`` and ``b``: the exact sum, rounded
    once (x + (-x) is +0; -0 + -0 is -0)."""
    sa, ma, ea, na, ia = _unpack(m, a, FRAC, f"{name}_a")
    sb, mb, eb, nb, ib = _unpack(m, b, FRAC, f"{name}_b")
    # the larger magnitude first: its exponent, then its significand
    a_big = Signal(name=f"{name}_a_big")
    m.d.comb += a_big.eq((ea > eb) | ((ea == eb) & (ma >= mb)))
    s_hi, m_hi, e_hi = Mux(a_big, sa, sb), Mux(a_big, ma, mb), Mux(a_big, ea, eb)
    s_lo, m_lo, e_lo = Mux(a_big, sb, sa), Mux(a_big, mb, ma), Mux(a_big, eb, ea)
    d = Signal(range(64), name=f"{name}_d")                    # alignment, capped
    diff = Signal(signed(EXP_BITS + 1), name=f"{name}_diff")
    m.d.comb += [diff.eq(e_hi - e_lo), d.eq(Mux(diff > 27, 27, diff))]
    # three bits below the larger's last: guard, round, sticky
    hi3 = Signal(27, name=f"{name}_hi3")
    lo3 = Signal(27, name=f"{name}_lo3")
    lo_full = Signal(27 + 27, name=f"{name}_lo_full")
    m.d.comb += [hi3.eq(m_hi << 3), lo_full.eq(Cat(Const(0, 27), m_lo << 3) >> d)]
    m.d.comb += lo3.eq(Cat(lo_full[27] | (lo_full[:27] != 0), lo_full[28:54]))
    total = Signal(28, name=f"{name}_total")
    m.d.comb += total.eq(Mux(s_hi == s_lo, hi3 + lo3, hi3 - lo3))
    # an exact zero of two opposite signs is +0 (round to nearest); same signs keep theirs
    zsign = Mux(s_hi == s_lo, s_hi, 0)
    packed = round_fp32(m, Mux(total == 0, zsign, s_hi), total, e_hi - 3, f"{name}_round")
    out = Signal(32, name=name)
    with m.If(na | nb | (ia & ib & (sa != sb))):
        m.d.comb += out.eq(QNAN)
    with m.Elif(ia):
        m.d.comb += out.eq(a)
    with m.Elif(ib):
        m.d.comb += out.eq(b)
    with m.Else():
        m.d.comb += out.eq(packed)
    return out


def bf16_of(m: Module, x, name: str):
    """BF16 bits of FP32 bits ``x``, rounded to nearest even as the model's
    :func:`~moehub.spec.relay.to_bf16` does it (a NaN stays a NaN: the quiet bit is kept)."""
    out = Signal(16, name=name)
    m.d.comb += out.eq((x + 0x7FFF + x[16])[16:32])
    return out
