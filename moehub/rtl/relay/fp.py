"""IEEE-754 arithmetic for the reduce-on-combine's accumulate datapath: a BF16 x BF16
product and an FP32 sum, each rounded to nearest, ties to even, as the reference model
(:class:`moehub.spec.relay.ReduceModel`) computes them with numpy's float32.

Why exact IEEE rather than a cheaper fused or flush-to-zero datapath: the co-simulation,
the model and the RTL must agree row for row, so the datapath computes exactly the model's
``float32(w * y)`` and ``float32(acc + term)``: subnormal inputs and results kept (numpy
on x86 does not flush), overflow to infinity, every NaN result the canonical quiet NaN
``0x7FC00000`` (the model's NaN bits are the host's; a NaN is compared as a NaN).

Every value is handled as an exact *integer significand and exponent* (value = sig x
2**exp) until one rounding: the product of two BF16 numbers is exact in 16 bits (8 x 8),
and the sum is exact with the smaller addend aligned into three bits below the larger's
(guard, round and a sticky OR of what shifts out), which is all round to nearest even
needs. A special result (NaN, infinity, an infinite operand passed through) is decided
early and carried beside the finite path as ``special``/``special_bits``.

Each function is one *step* of combinational logic from a dict of values to a dict of
values (the names below); the datapath (:mod:`.accumulate`) registers the whole dict
between steps, so where the pipeline is cut is a list, not code inside the arithmetic:

* :func:`product` (w, y -> two halves of the product), :func:`product_sum` (-> an
  unrounded value),
* :func:`order` (a, b -> which is larger, how far apart), :func:`align` (the smaller
  shifted), :func:`add_lo`, :func:`add_hi` (the sum in two halves -> an unrounded
  value),
* :func:`lead` (the leading one), :func:`expo` (the exponent it gives, the shifts),
  :func:`normalize`, :func:`subshift` (further right for a subnormal), :func:`round_up`,
  :func:`pack` (rounded in two halves, packed: FP32 bits), :func:`bf16` (the BF16 rounding of FP32 bits, as the
  model's).

An *unrounded value* is ``sign``, ``sig`` (an unsigned integer whose lowest bit may be a
sticky OR of lower bits, at least two bits below the rounding point), ``exp`` (signed),
``special``, ``special_bits``.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed

from ..logic import select

#: FP32: exponent bias, fraction bits; BF16's fraction
BIAS, FRAC, BF16_FRAC = 127, 23, 7
#: the canonical quiet NaN every NaN result is
QNAN = 0x7FC00000
#: the width of the exponent carried (signed: a product of two tiny numbers falls far
#: below FP32's range before rounding)
EXP_BITS = 11
#: significand widths of the unrounded values: a product (16 bits and two zero guard
#: bits), a sum (24 bits, 3 below, a carry)
PRODUCT_SIG, SUM_SIG = 18, 28


def _unpack(m: Module, bits, frac: int, name: str):
    """(sign, significand, biased exponent, is_nan, is_inf) of an IEEE number of ``frac``
    fraction bits and an 8-bit exponent; value = significand x 2**(biased - BIAS - frac)
    for the finite ones (a subnormal's significand has no hidden bit and the biased
    exponent of the smallest normal, 1)."""
    e_field, f_field = bits[frac:frac + 8], bits[:frac]
    sig = Signal(frac + 1, name=f"{name}_sig")
    biased = Signal(8, name=f"{name}_biased")
    m.d.comb += [sig.eq(Mux(e_field == 0, f_field, Cat(f_field, Const(1, 1)))),
                 biased.eq(Mux(e_field == 0, 1, e_field))]
    top = e_field == 0xFF
    return bits[frac + 8], sig, biased, top & (f_field != 0), top & (f_field == 0)


def _inf(sign):
    return Cat(Const(0, 23), Const(0xFF, 8), sign)


def product(m: Module, d: dict, name: str) -> dict:
    """``w`` x ``y`` (BF16 bits), exact (8 x 8 significand bits), as two partial products
    (``y``'s low and high four bits) for :func:`product_sum`; a NaN operand or infinity x 0
    a NaN, infinity x finite an infinity."""
    sw, mw, ew, nw, iw = _unpack(m, d["w"], BF16_FRAC, f"{name}_w")
    sy, my, ey, ny, iy = _unpack(m, d["y"], BF16_FRAC, f"{name}_y")
    sign = sw ^ sy
    zero_w, zero_y = (mw == 0), (my == 0)
    nan = nw | ny | (iw & zero_y) | (iy & zero_w)
    # (the biased exponents' sum; the bias comes off in the next step, not behind this add)
    exp = Signal(9, name=f"{name}_exp_sum")
    m.d.comb += exp.eq(ew + ey)
    # (the 8 x 8 significands' product as four 8 x 2 partial products, added by the next
    # step: two 8 x 4 halves were 22-24 FO4 from the stage's registers)
    return {"sign": sign, **{f"pp{i}": mw * my[2 * i:2 * i + 2] for i in range(PARTIALS)}, "exp": exp,
            "special": nan | iw | iy, "special_bits": Mux(nan, QNAN, _inf(sign))}


#: partial products of the 8 x 8 significand product (2 bits of ``y`` each)
PARTIALS = 4


def product_sum(m: Module, d: dict, name: str) -> dict:
    """The product's partial products added, as a tree: its exact significand (two zero
    guard bits below)."""
    sig = Signal(PRODUCT_SIG, name=f"{name}_sig")
    lo = d["pp0"] + (d["pp1"] << 2)
    hi = d["pp2"] + (d["pp3"] << 2)
    m.d.comb += sig.eq(Cat(Const(0, 2), lo + (hi << 4)))
    exp = Signal(signed(EXP_BITS), name=f"{name}_exp")
    m.d.comb += exp.eq(d["exp"] - 2 * (BIAS + BF16_FRAC) - 2)
    return {**{k: d[k] for k in ("sign", "special", "special_bits")}, "sig": sig, "exp": exp}


def order(m: Module, d: dict, name: str) -> dict:
    """FP32 bits ``a`` and ``b``: the sign, significand and exponent of the one of the
    larger exponent (``hi``), the other's significand and how far apart they are, whether
    they add; the special results (a NaN; infinity - infinity a NaN;
    an infinity passed)."""
    a, b = d["a"], d["b"]
    sa, ma, ea, na, ia = _unpack(m, a, FRAC, f"{name}_a")
    sb, mb, eb, nb, ib = _unpack(m, b, FRAC, f"{name}_b")
    # (by exponent alone: with equal exponents the smaller may come first, and add()
    # takes the difference that is not negative -- no significand compare here. The
    # exponent fields are compared as they are: a subnormal's field, 0, orders it at or
    # below every normal, whose effective exponent it shares only with field 1 -- equal
    # exponents, either order -- so no subnormal adjust sits in front of the compare)
    a_big = Signal(name=f"{name}_a_big")
    diff = Signal(8, name=f"{name}_diff")
    m.d.comb += [a_big.eq(a[FRAC:FRAC + 8] >= b[FRAC:FRAC + 8]), diff.eq(Mux(a_big, ea - eb, eb - ea))]
    nan = na | nb | (ia & ib & (sa != sb))
    return {"s_hi": Mux(a_big, sa, sb), "same": sa == sb, "m_hi": Mux(a_big, ma, mb),
            "e_hi": Mux(a_big, ea, eb), "m_lo": Mux(a_big, mb, ma), "diff": diff,
            "special": nan | ia | ib, "special_bits": Mux(nan, QNAN, Mux(ia, a, b))}


def align(m: Module, d: dict, name: str) -> dict:
    """The addends three bits below the larger exponent's last: ``hi``'s significand, the
    other's shifted right by ``diff`` (capped at 27: beyond, all of it is sticky) with a
    sticky OR of what left; and, for a difference, whether the other is the larger
    (``neg``: only with equal exponents, nothing shifted), formed beside the shift."""
    lo_full = Signal(54, name=f"{name}_lo_full")
    dist = Mux(d["diff"] > 27, 27, d["diff"][:5])
    m.d.comb += lo_full.eq(Cat(Const(0, 27), d["m_lo"] << 3) >> dist)
    return {**{k: d[k] for k in ("s_hi", "same", "e_hi", "special", "special_bits")},
            "hi3": d["m_hi"] << 3, "lo3": Cat(lo_full[27] | (lo_full[:27] != 0), lo_full[28:54]),
            "neg": ~d["same"] & (d["diff"] == 0) & (d["m_lo"] > d["m_hi"])}


#: the bits of the sum's first half (add_lo), its carry into the second (add_hi)
HALF = 14


def add_lo(m: Module, d: dict, name: str) -> dict:
    """The first half of the addends' exact sum: the larger minus the smaller for a
    difference (``x + ~y + 1``), the sum otherwise; its low bits and carry out."""
    x = Mux(d["neg"], d["lo3"], d["hi3"])
    y = Mux(d["neg"], d["hi3"], d["lo3"])
    y = Mux(d["same"], y, ~y)[:SUM_SIG - 1]
    low = Signal(HALF + 1, name=f"{name}_low")
    m.d.comb += low.eq(x[:HALF] + y[:HALF] + ~d["same"])
    return {**{k: d[k] for k in ("s_hi", "same", "neg", "e_hi", "special", "special_bits")},
            "low": low, "x_hi": x[HALF:], "y_hi": y[HALF:]}


def add_hi(m: Module, d: dict, name: str) -> dict:
    """The second half, with the first's carry: the exact sum (to the sticky bit) as an
    unrounded value; its sign ``hi``'s, or the other's when it was the larger; an exact
    zero of two opposite signs is +0 (round to nearest), of two equal signs keeps it
    (``zero_sign``, chosen by :func:`lead`, which tests for zero anyway)."""
    high = Signal(SUM_SIG - HALF, name=f"{name}_high")
    m.d.comb += high.eq(d["x_hi"] + d["y_hi"] + d["low"][HALF])
    exp = Signal(signed(EXP_BITS), name=f"{name}_exp")
    m.d.comb += exp.eq(d["e_hi"] - (BIAS + FRAC) - 3)
    # (a difference's carry out of the top is dropped: the result is not negative)
    return {"sign": d["s_hi"] ^ d["neg"], "zero_sign": d["s_hi"] & d["same"],
            "sig": Cat(d["low"][:HALF], high[:-1], high[-1] & d["same"]), "exp": exp,
            "special": d["special"], "special_bits": d["special_bits"]}


def leading_one(m: Module, x, name: str):
    """The position of ``x``'s highest set bit (0 when ``x`` is 0), as a priority select."""
    w = len(x)
    pos = Signal(range(w), name=name)
    m.d.comb += pos.eq(select([(x[i] & ~(x[i + 1:] != 0) if i < w - 1 else x[i], Const(i, len(pos)))
                               for i in range(w)], len(pos)))
    return pos


def lead(m: Module, d: dict, name: str) -> dict:
    """An unrounded value's leading one (``p``) and whether it is zero (a zero sum takes
    ``zero_sign``)."""
    zero = d["sig"] == 0
    sign = Mux(zero, d["zero_sign"], d["sign"]) if "zero_sign" in d else d["sign"]
    return {**{k: v for k, v in d.items() if k != "zero_sign"}, "sign": sign,
            "p": leading_one(m, d["sig"], f"{name}_lead"), "zero": zero}


def expo(m: Module, d: dict, name: str) -> dict:
    """From the leading one: the left shift that normalises the significand, the exponent
    of its leading bit (``e_top``) and the further right shift a subnormal result takes
    (``sub``, capped at 25: beyond it every bit is sticky)."""
    w = len(d["sig"])
    e_top = Signal(signed(EXP_BITS + 1), name=f"{name}_etop")
    gap = Signal(signed(EXP_BITS + 2), name=f"{name}_gap")   # below the smallest normal exponent
    m.d.comb += [e_top.eq(d["exp"] + d["p"]), gap.eq((1 - BIAS) - d["exp"] - d["p"])]
    return {**{k: d[k] for k in ("sign", "sig", "special", "special_bits", "zero")},
            "e_top": e_top, "shl": (w - 1 - d["p"])[:len(d["p"])],
            "sub": Mux(gap > 0, Mux(gap > 25, 25, gap), 0)[:5]}


def normalize(m: Module, d: dict, name: str) -> dict:
    """The significand with its leading one at the top of ``w + 24`` bits."""
    sig = d["sig"]
    w = len(sig)
    norm = Signal(w + 24, name=f"{name}_norm")
    biased = Signal(signed(EXP_BITS + 2), name=f"{name}_biased")      # of a normal result
    m.d.comb += [norm.eq(Cat(Const(0, 24), (sig << d["shl"])[:w])), biased.eq(d["e_top"] + BIAS)]
    return {**{k: d[k] for k in ("sign", "special", "special_bits", "sub", "zero")},
            "norm": norm, "biased": biased}


def subshift(m: Module, d: dict, name: str) -> dict:
    """The normalised significand shifted right by ``sub`` (a subnormal result);
    ``lost``: ones shifted out by it."""
    norm = d["norm"]
    shifted = Signal(len(norm), name=f"{name}_shifted")
    m.d.comb += shifted.eq(norm >> d["sub"])
    b = d["biased"]
    # (the exponent field with and without a carry out of the rounding, and whether each
    # overflows: formed here, beside the shift, so that the rounding only selects)
    return {**{k: d[k] for k in ("sign", "special", "special_bits", "sub", "zero")},
            "shifted": shifted,
            # (the ones below the shift, by a thermometer of sub beside it: sub <= 25)
            "lost": Cat(*(norm[i] & (d["sub"] > i) for i in range(25))).any(),
            "field0": b[:8], "field1": (b + 1)[:8], "over0": b >= 0xFF, "over1": b >= 0xFE}


def round_up(m: Module, d: dict, name: str) -> dict:
    """The 24 bits kept, whether they round up (to nearest even, by the guard bit and the
    sticky OR below it), and the increment's first half (``low``, with its carry)."""
    shifted = d["shifted"]
    w = len(shifted) - 24
    keep, guard = shifted[w:w + 24], shifted[w - 1]
    sticky = (shifted[:w - 1] != 0) | d["lost"]
    low = Signal(HALF_ROUND + 1, name=f"{name}_low")
    m.d.comb += low.eq(keep[:HALF_ROUND] + (guard & (sticky | keep[0])))
    return {**{k: d[k] for k in ("sign", "special", "special_bits", "sub", "zero", "field0", "field1",
                                 "over0", "over1")}, "low": low, "keep_hi": keep[HALF_ROUND:]}


#: the bits of the rounding increment's first half (round_up), its carry into pack
HALF_ROUND = 12


def pack(m: Module, d: dict, name: str) -> dict:
    """FP32 bits (``bits``) of the rounded value: the increment's second half; a carry out
    of 24 bits one more in the exponent; a subnormal (``sub`` > 0) exponent 0, or 1 when
    rounding made it normal; above the range an infinity; a zero significand a zero of its
    sign; a special its bits."""
    rounded = Signal(25, name=f"{name}_rounded")
    m.d.comb += rounded.eq(Cat(d["low"][:HALF_ROUND], d["keep_hi"] + d["low"][HALF_ROUND]))
    carry = rounded[24]
    field = Signal(8, name=f"{name}_field")
    m.d.comb += field.eq(Mux(d["sub"] != 0, rounded[23], Mux(carry, d["field1"], d["field0"])))
    over = (d["sub"] == 0) & Mux(carry, d["over1"], d["over0"])
    frac = Mux(carry, rounded[1:24], rounded[:23])
    out = Signal(32, name=name)
    with m.If(d["special"]):
        m.d.comb += out.eq(d["special_bits"])
    with m.Elif(d["zero"]):
        m.d.comb += out.eq(Cat(Const(0, 31), d["sign"]))
    with m.Elif(over):
        m.d.comb += out.eq(_inf(d["sign"]))
    with m.Else():
        m.d.comb += out.eq(Cat(frac, field, d["sign"]))
    return {"bits": out}


def bf16(m: Module, x, name: str):
    """BF16 bits of FP32 bits ``x``, rounded to nearest even as the model's
    :func:`~moehub.spec.relay.to_bf16` does it (a NaN stays a NaN: the quiet bit is kept)."""
    out = Signal(16, name=name)
    m.d.comb += out.eq((x + 0x7FFF + x[16])[16:32])
    return out
