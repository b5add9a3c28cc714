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
    """``a - b`` (``width`` bits, two's complement; ``a``, ``b`` unsigned) over two
    pipeline stages, for when ``b`` arrives late (through a mux) and ``a - b - k`` is wanted
    for many small constants ``k < 2**lo_bits``:

    * first stage (``m.d.sync`` when ``registered``): the low ``lo_bits`` of ``a - b`` and
      their borrow; the high bits of ``a``, of ``b``, and of ``a`` minus 2, kept as they are;
    * second stage: the high part minus 0, 1 and 2, side by side (no chain); ``minus(k)``
      takes the low part minus ``k`` and picks the high variant by the two borrows.
    """

    def __init__(self, m, a, b, width: int, lo_bits: int, name: str, registered: bool = True):
        if not 0 < lo_bits < width:
            raise ValueError(f"lo_bits = {lo_bits}: must be in (0, {width})")
        self.width, self.w = width, lo_bits
        w = lo_bits
        hw = width - w
        dom = m.d.sync if registered else m.d.comb
        self.lo = Signal(w, name=f"{name}_lo")
        self.borrow = Signal(name=f"{name}_borrow")
        a_hi, b_hi, a_hi_m2 = (Signal(hw, name=f"{name}_{n}") for n in ("a_hi", "b_hi", "a_hi_m2"))
        dom += [self.lo.eq(a[:w] - b[:w]), self.borrow.eq(a[:w] < b[:w]),
                a_hi.eq(a[w:]), b_hi.eq(b[w:]), a_hi_m2.eq(a[w:] - 2)]
        self.hi = [Signal(hw, name=f"{name}_hi_m{k}") for k in range(3)]
        m.d.comb += [self.hi[0].eq(a_hi - b_hi), self.hi[1].eq(a_hi + ~b_hi), self.hi[2].eq(a_hi_m2 - b_hi)]

    def minus(self, m, k: int, name: str):
        """``a - b - k`` (0 <= k < 2**lo_bits) as a signed ``width``-bit signal."""
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
