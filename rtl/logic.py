"""Small combinational building blocks shared by the RTL components (shallow by design:
the hub's timing budget is a few gate levels per decision)."""
from itertools import combinations

from amaranth import Cat, Const, Mux, Signal, signed


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



class SplitDifference:
    """``a - b`` (``width`` bits, two's complement) kept as a low part of ``w`` bits, its
    borrow, and the high part minus 0, 1 and 2: no carry crosses the split, so the
    subtraction is two half-width subtractions side by side, and ``a - b - k`` for a small
    constant ``k`` is formed later (:meth:`minus`) with half-width logic and a 3-way mux.
    ``a`` and ``b`` are unsigned; ``registered`` puts the parts in ``m.d.sync``."""

    def __init__(self, m, a, b, width: int, name: str, registered: bool = True):
        self.width = width
        self.w = w = (width + 1) // 2
        dom = m.d.sync if registered else m.d.comb
        self.lo = Signal(w, name=f"{name}_lo")
        self.borrow = Signal(name=f"{name}_borrow")
        self.hi = [Signal(width - w, name=f"{name}_hi_m{k}") for k in range(3)]
        a_hi, b_hi = a[w:], b[w:]
        dom += [self.lo.eq(a[:w] - b[:w]), self.borrow.eq(a[:w] < b[:w])]
        dom += [self.hi[k].eq(a_hi - b_hi - k) for k in range(3)]

    def minus(self, m, k: int, name: str):
        """``a - b - k`` (0 <= k < 2**w) as a signed ``width``-bit signal."""
        if not 0 <= k < 1 << self.w:
            raise ValueError(f"k = {k}: must be in [0, 2**{self.w})")
        v = Signal(signed(self.width), name=name)
        b2 = self.lo < k
        hi = Mux(self.borrow & b2, self.hi[2], Mux(self.borrow | b2, self.hi[1], self.hi[0]))
        m.d.comb += v.eq(Cat((self.lo - k)[:self.w], hi))
        return v


def naf(c: int) -> list[tuple[int, int]]:
    """Non-adjacent form of ``c >= 0``: (sign, shift) terms, the fewest nonzero digits
    (e.g. 14336 = 2**14 - 2**11: one subtraction instead of two additions)."""
    terms, k = [], 0
    while c:
        if c & 1:
            d = 2 - (c & 3)          # +1 or -1
            terms.append((d, k))
            c -= d
        c >>= 1
        k += 1
    return terms


def times_const(x, c: int):
    """``x * c`` for a constant ``c >= 0`` as shifts and adds of its non-adjacent form."""
    if c == 0:
        return Const(0)
    acc = None
    for sign, k in sorted(naf(c), key=lambda t: -t[0]):      # positive terms first
        term = x << k
        acc = term if acc is None else (acc + term if sign > 0 else acc - term)
    return acc
