"""Small combinational building blocks shared by the RTL components (shallow by design:
the hub's timing budget is a few gate levels per decision)."""
from itertools import combinations

from amaranth import Cat, Const, Mux, Signal


def popcount(bits):
    """Number of set bits (an adder tree)."""
    total = 0
    for b in bits:
        total = total + b
    return total


def exactly(bits, n):
    """1 when exactly ``n`` of ``bits`` are set, as a two-level AND-OR of the bits (not an
    adder tree followed by a compare): used where a small count selects among outcomes
    that were formed in parallel."""
    bits = list(bits)
    if n < 0 or n > len(bits):
        return Const(0)
    if len(bits) > 6:                       # the sum of products would grow too large
        return popcount(bits) == n
    terms = []
    for ones in combinations(range(len(bits)), n):
        terms.append(Cat(*(bits[i] if i in ones else ~bits[i] for i in range(len(bits)))).all()
                     if bits else Const(1))
    return Cat(*terms).any() if terms else Const(0)


def select(sel_vals, shape):
    """AND-OR select: the value whose select is set (at most one is), else 0."""
    out = Const(0, shape)
    for sel, val in sel_vals:
        out = out | Mux(sel, val, 0)
    return out


def minus_consts(m, x, ks, name):
    """``x - k`` for each small constant ``k`` in ``ks`` (same shape as ``x``), with one
    shared decrement: the low bits subtract ``k`` (a few bits wide), the high bits are
    either ``x``'s or ``x``'s minus one (the borrow), formed once for all ``k``."""
    ks = list(ks)
    w = max(1, max(ks).bit_length())
    n = len(x)
    if n <= w + 1:
        return [x - k for k in ks]
    lo, hi = x[:w], x[w:]
    hi_m1 = Signal(n - w, name=f"{name}_hi_m1")
    m.d.comb += hi_m1.eq(hi - 1)
    out = []
    for k in ks:
        v = Signal(x.shape(), name=f"{name}_minus{k}")
        m.d.comb += v.eq(Cat((lo - k)[:w], Mux(lo < k, hi_m1, hi)))
        out.append(v)
    return out
