"""Small combinational building blocks shared by the RTL components (shallow by design:
the hub's timing budget is a few gate levels per decision)."""
from itertools import combinations

from amaranth import Cat, Const, Mux, Shape, Signal, Value, signed


def popcount(bits):
    """Number of set bits, as a balanced adder tree (log2(n) small adds deep; a running
    sum would chain n - 1 adds, each waiting for the last)."""
    bits = list(bits)
    if not bits:
        return Const(0)
    while len(bits) > 1:
        pairs = [bits[i] + bits[i + 1] for i in range(0, len(bits) - 1, 2)]
        bits = pairs + bits[len(bits) - len(bits) % 2:]
    return bits[0]


def count_onehot(bits):
    """``[exactly(bits, 0), ..., exactly(bits, n)]``: how many of ``bits`` are set, as a
    one-hot, built by halves (the count of a half is a one-hot; two halves combine by an
    AND-OR over the ways to split a count), so it is log2(n) AND-OR levels deep and needs
    no adder or compare."""
    bits = list(bits)
    if not bits:
        return [Const(1)]
    if len(bits) == 1:
        return [~bits[0], bits[0]]
    lo, hi = count_onehot(bits[:len(bits) // 2]), count_onehot(bits[len(bits) // 2:])
    return [Cat(*(lo[x] & hi[r - x] for x in range(max(0, r - len(hi) + 1), min(r, len(lo) - 1) + 1))).any()
            for r in range(len(bits) + 1)]


def count_binary(bits):
    """Number of set bits, as :func:`popcount`, but formed from :func:`count_onehot`'s
    AND-OR levels and encoded by an OR per result bit: shallower than the adder tree where
    the bits arrive late (the count of 8 lanes behind a select)."""
    oh = count_onehot(bits)
    width = max(1, (len(oh) - 1).bit_length())
    return Cat(*(Cat(*(oh[r] for r in range(len(oh)) if r >> b & 1)).any() for b in range(width)))


def exactly(bits, n):
    """1 when exactly ``n`` of ``bits`` are set, as a two-level AND-OR of the bits (not an
    adder tree followed by a compare): used where a small count selects among outcomes
    that were formed in parallel."""
    bits = list(bits)
    if n < 0 or n > len(bits):
        return Const(0)
    if len(bits) > 6:                       # the sum of products would grow too large
        return count_onehot(bits)[n]
    terms = []
    for ones in combinations(range(len(bits)), n):
        terms.append(Cat(*(bits[i] if i in ones else ~bits[i] for i in range(len(bits)))).all()
                     if bits else Const(1))
    return Cat(*terms).any() if terms else Const(0)


def masked_equal(value, const: int, mask):
    """``value & mask == const & mask`` (``const`` may be negative: two's complement), bit
    by bit: one AND of XNORs with constants, no adder or compare chain."""
    return Cat(~mask[b] | (value[b] if const >> b & 1 else ~value[b]) for b in range(len(mask))).all()


def select(sel_vals, shape):
    """AND-OR select: the value whose select is set (at most one is), else 0. (``shape``
    may be a layout: the result is then its bits, a plain value.)"""
    out = Const(0, Shape.cast(shape))
    for sel, val in sel_vals:
        out = out | Mux(sel, val, 0)
    return out


def add_narrow(wide, narrow):
    """``wide + narrow`` (unsigned, ``len(wide)`` bits, wrapping) for a ``narrow`` of few
    bits: the low bits add, and the high bits are ``hi`` or ``hi + 1`` by their carry
    (carry select: the increment is formed beside the add, not behind it)."""
    w = len(narrow) + 1
    if w >= len(wide):
        return (wide + narrow)[:len(wide)]
    lo = wide[:w] + narrow
    hi = wide[w:]
    return Cat(lo[:w], Mux(lo[w], hi + 1, hi)[:len(hi)])


def newest_of(groups, default, shape):
    """The value of the first group (newest first) with a select set, else ``default``.
    Within a group at most one select is set, so a group is an AND-OR; the groups are
    chosen by one mux each, in order: a late value (the newest group's) passes one AND-OR
    and one mux, not a chain of one mux per candidate."""
    out = default
    for group in reversed(groups):
        out = Mux(Cat(*(sel for sel, _ in group)).any(), select(group, shape), out)
    return out


class SplitDifference:
    """``a - b - k`` (``width`` bits, two's complement; ``a``, ``b`` unsigned) over two
    pipeline stages, for when ``b`` arrives late (through a mux) and ``k`` is one of a few
    small constants chosen by a one-hot that is itself late:

    * first stage (``m.d.sync`` when ``registered``): the low ``lo_bits`` of ``a - b`` and
      their borrow; the high bits of ``a`` and ``b`` as they are (and ``a``'s lowest high
      segment minus 2), and each high segment's borrow out for every borrow into it (a
      compare of the segments). ``b`` may be given as ``(select, value)`` pairs (exactly one select
      set, a one-hot decoded beside ``a``): the low difference and its borrow are then
      formed for every candidate, side by side, and chosen after -- no subtraction waits
      for the choice;
    * second stage: each high segment (at most ``seg_bits`` wide) minus every borrow it
      may get (0..2 for the first, 0..1 for the others), side by side with no carry between
      segments, and each segment's borrow-in for every borrow into the high part (a chain
      of small selects from the registered borrows);
      :meth:`select_minus` forms the low part minus ``k`` (narrow), and its borrow then
      picks every segment's value by one AND-OR (no chain of muxes along the segments).
    """

    def __init__(self, m, a, b, width: int, lo_bits: int, name: str, registered: bool = True,
                 seg_bits: int = 8):
        if not 0 < lo_bits < width:
            raise ValueError(f"lo_bits = {lo_bits}: must be in (0, {width})")
        self.width, self.w = width, lo_bits
        w = lo_bits
        dom = m.d.sync if registered else m.d.comb
        self.lo = Signal(w, name=f"{name}_lo")
        self.borrow = Signal(name=f"{name}_borrow")
        if isinstance(b, (list, tuple)):
            choices = b
            b = Signal(max(len(v) for _, v in choices), name=f"{name}_bsel")
            m.d.comb += b.eq(select(choices, len(b)))
            dom += [self.lo.eq(select([(sel, (a[:w] - v[:w])[:w]) for sel, v in choices], w)),
                    self.borrow.eq(Cat(*(sel & (a[:w] < v[:w]) for sel, v in choices)).any())]
        else:
            dom += [self.lo.eq(a[:w] - b[:w]), self.borrow.eq(a[:w] < b[:w])]
        # High segments [start, stop): each minus every borrow it may get. A borrow into a
        # segment is 0, 1 or 2 (the low part subtracts both b and k), and so is the borrow
        # out of it (2 only for a - b - 2 below -2**sw): both as one-hots of three.
        bounds = list(range(w, width, seg_bits)) + [width]
        self.segs = []          # per segment, per borrow in: (value, borrow-out one-hot)
        for n, (lo_b, hi_b) in enumerate(zip(bounds, bounds[1:])):
            sw = hi_b - lo_b
            a_s, b_s = Signal(sw, name=f"{name}_a{n}"), Signal(sw, name=f"{name}_b{n}")
            a_m2 = Signal(signed(sw + 2), name=f"{name}_a{n}_m2")
            dom += [a_s.eq(a[lo_b:hi_b]), b_s.eq(b[lo_b:hi_b]), a_m2.eq(a[lo_b:hi_b] - 2)]
            # The segment's borrow out for each borrow in x: a - b - x < 0 (and, for x = 2,
            # < -2**sw: only a = 0, b = 2**sw - 1), compared in the first stage, so that
            # the chain of borrows along the segments starts at registers, not behind the
            # segments' subtractions.
            a_hi, b_hi = a[lo_b:hi_b], b[lo_b:hi_b]
            neg = [Signal(name=f"{name}_s{n}_neg{x}") for x in range(3)]
            bo2 = Signal(name=f"{name}_s{n}_bo2")
            dom += [neg[0].eq(a_hi < b_hi), neg[1].eq(a_hi <= b_hi), neg[2].eq(a_hi <= b_hi + 1),
                    bo2.eq((a_hi == 0) & (b_hi == (1 << sw) - 1))]
            d0 = Signal(sw, name=f"{name}_s{n}_m0")
            d1 = Signal(sw, name=f"{name}_s{n}_m1")
            d2 = Signal(sw, name=f"{name}_s{n}_m2")
            m.d.comb += [d0.eq(a_s - b_s), d1.eq(a_s - b_s - 1), d2.eq(a_m2 - b_s)]
            self.segs.append([
                (d0, Cat(~neg[0], neg[0], Const(0))),
                (d1, Cat(~neg[1], neg[1], Const(0))),
                (d2, Cat(~neg[2], neg[2] & ~bo2, bo2)),
            ])
        # Per segment, for each borrow i (0..2) into the high part, the borrow into the
        # segment (a one-hot of three): formed from the registers alone, so that
        # :meth:`select_minus` picks every segment's value by one AND-OR after the low part.
        self.seg_borrow_in = []
        b_in = [Const(1 << i, 3) for i in range(3)]
        for n, seg in enumerate(self.segs):
            self.seg_borrow_in.append(b_in)
            nxt = [Signal(3, name=f"{name}_bin{n + 1}_{i}") for i in range(3)]
            m.d.comb += [nxt[i].eq(select([(b_in[i][x], seg[x][1]) for x in range(3)], 3)) for i in range(3)]
            b_in = nxt

    def select_minus(self, m, choices, name: str):
        """``a - b - k`` for the ``(select, k)`` pair whose select is set (exactly one is;
        0 <= k < 2**lo_bits), as a signed ``width``-bit signal."""
        w = self.w
        for _, k in choices:
            if not 0 <= k < 1 << w:
                raise ValueError(f"k = {k}: must be in [0, 2**{w})")
        lo = select([(sel, (self.lo - k)[:w]) for sel, k in choices], w)
        b2 = Cat(sel & (self.lo < k) for sel, k in choices).any()
        c = Cat(~self.borrow & ~b2, self.borrow ^ b2, self.borrow & b2)   # borrow into the high part
        parts = [lo]
        for seg, b_in in zip(self.segs, self.seg_borrow_in):
            # (each segment's value straight from the borrow into the high part: its own
            # borrow-in for each of those, from registers, is ANDed in -- no chain)
            parts.append(select([(c[i] & b_in[i][x], seg[x][0]) for i in range(3) for x in range(3)],
                                len(seg[0][0])))
        v = Signal(signed(self.width), name=name)
        m.d.comb += v.eq(Cat(*parts))
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


def at_least(bits, n):
    """1 when at least ``n`` of ``bits`` are set: an OR of the ANDs of every ``n`` of them
    (for a few bits; else from :func:`count_onehot`), no adder or compare."""
    bits = list(bits)
    if n <= 0:
        return Const(1)
    if n > len(bits):
        return Const(0)
    if len(bits) > 6:
        return Cat(*count_onehot(bits)[n:]).any()
    return Cat(*(Cat(*(bits[i] for i in ones)).all() for ones in combinations(range(len(bits)), n))).any()


def tree_sum(vals, width: int):
    """Sum of ``vals`` (unsigned, ``width`` bits) as a balanced tree of two-input adds."""
    vals = [v for v in vals]
    if not vals:
        return Const(0, width)
    while len(vals) > 1:
        vals = [(vals[i] + vals[i + 1])[:width] for i in range(0, len(vals) - 1, 2)] \
            + vals[len(vals) - len(vals) % 2:]
    return vals[0]


def add3(m, a, b, c, width: int, name: str):
    """``a + b + c`` in ``width`` bits (two's complement, wrapping; each operand an
    Amaranth value, signed ones sign-extended, or an int) as one carry-save level (a full
    adder per bit; with a constant ``c`` an XOR and an AND or OR per bit) and one add: a
    sum of two registers and a constant costs one adder's depth, not two. Returns a signed
    ``width``-bit signal ``name`` (driven in ``m.d.comb``)."""
    def ext(v):
        v = Const(v, signed(width)) if isinstance(v, int) else Value.cast(v)
        return v.as_signed() if v.shape().signed else v
    x, y, z = (Signal(width, name=f"{name}_{n}") for n in "xyz")
    k = Signal(width, name=f"{name}_k")
    out = Signal(signed(width), name=name)
    m.d.comb += [x.eq(ext(a)), y.eq(ext(b)), z.eq(ext(c)),
                 k.eq((x & y) | (x & z) | (y & z)),
                 out.eq(((x ^ y ^ z) + Cat(Const(0, 1), k[:width - 1]))[:width])]
    return out
