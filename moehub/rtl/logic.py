"""Small combinational building blocks shared by the RTL components (shallow by design:
the hub's timing budget is a few gate levels per decision)."""
from itertools import combinations

from amaranth import Cat, Const, Mux, Shape, Signal, Value, signed


def any_of(bits):
    """OR of ``bits`` (0 for none)."""
    bits = list(bits)
    return Cat(*bits).any() if bits else Const(0)


def lane_bits(recs, field):
    """One bit per lane: ``field`` of each lane's record."""
    return Cat(*(getattr(rec, field) for rec in recs))


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


def late_count(bits) -> list:
    """How many of ``bits`` are set, as a one-hot (``[exactly 0, ..., exactly n]``), for
    bits that arrive one after another (the verdicts of lanes 0, 1, ...): a shift by each
    bit in turn, one mux level per bit, so the last bit passes one mux, not an adder or
    a sum of products."""
    oh = [Const(1)]
    for b in bits:
        oh = [Mux(b, oh[n - 1] if n else Const(0), oh[n] if n < len(oh) else Const(0))
              for n in range(len(oh) + 1)]
    return oh


def register_copies(m, value, n: int, name: str, zero_at_reset: bool = False, clear=None) -> list:
    """``n`` registers of ``value`` (read as ``value`` a cycle later), each for a share
    of its readers: a flop's fan-out buffer tree is most of a path that fans a register
    out over every expert. Synthesis (Yosys 0.23) merges flops whose next value and reset
    agree, so the copies differ in one or the other: held inverted, or reset to all ones
    -- four variants, two that read 0 after reset (``zero_at_reset``: the plain copy and
    the inverted one reset to ones). With ``clear`` (a layer start) four more: the same,
    loaded with their reset value at a clear -- for readers that ignore the copy in the
    cycle after a clear, as after reset."""
    variants = [(0, 0), (1, 1)] if zero_at_reset else [(0, 0), (1, 0), (0, 1), (1, 1)]
    variants = [(inv, ones, False) for inv, ones in variants]
    if clear is not None and not zero_at_reset:
        variants += [(inv, ones, True) for inv, ones, _ in variants]
    if not 1 <= n <= len(variants):
        raise ValueError(f"{name}: {n} copies, at most {len(variants)}")
    w, out = len(Value.cast(value)), []
    for c, (inv, ones, cleared) in enumerate(variants[:n]):
        q = Signal(w, name=f"{name}{c}", init=(1 << w) - 1 if ones else 0)
        nxt = ~value if inv else value
        m.d.sync += q.eq(Mux(clear, q.init, nxt) if cleared else nxt)
        out.append(~q if inv else q)
    return out


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


def at_most_consts(m, x, consts, name: str) -> dict:
    """``x <= c`` for a signed ``x`` and each small constant ``c >= 0`` (a dict by ``c``),
    split at the constants' width ``w``: ``x`` negative, or its bits above ``w`` all zero
    and its low ``w`` bits (unsigned) at most ``c``. The sign and the zero test are formed
    once for every constant (named signals), so each compare is a narrow one and an
    AND-OR, not a full-width compare per constant."""
    consts = sorted(set(consts))
    if consts and consts[0] < 0:
        raise ValueError(f"c = {consts[0]}: must be >= 0")
    n = len(x)
    w = max(1, consts[-1].bit_length()) if consts else 1
    if w >= n - 1:
        return {c: x <= c for c in consts}
    neg, hi_zero = Signal(name=f"{name}_neg"), Signal(name=f"{name}_hi0")
    m.d.comb += [neg.eq(x[n - 1]), hi_zero.eq(x[w:n - 1] == 0)]
    return {c: neg | (hi_zero & (x[:w] <= c)) for c in consts}


class SplitDifference:
    """``a - b - k`` (``width`` bits, two's complement; ``a``, ``b`` unsigned) over two
    pipeline stages, for when ``b`` arrives late (through a mux) and ``k`` is one of a few
    small constants chosen by a one-hot that is itself late:

    * first stage (``m.d.sync`` when ``registered``): the low ``lo_bits`` of ``a - b`` and
      their borrow; the high bits of ``a`` and ``b`` as they are (and ``a``'s lowest high
      segment minus 2). ``b`` may be given as ``(select, value)`` pairs (exactly one select
      set, a one-hot decoded beside ``a``): the low difference and its borrow are then
      formed for every candidate, side by side, and chosen after -- no subtraction waits
      for the choice;
    * second stage: each high segment (at most ``seg_bits`` wide) minus every borrow it
      may get (0..2 for the first, 0..1 for the others), side by side with no carry between
      segments, and each segment's borrow-in for every borrow into the high part;
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
        # (registered: the low part twice, the copy -- reset-less, so that synthesis keeps
        # it apart -- for select_minus's compares with k alone; those pick every high
        # segment, so they do not start behind the value's own fan-out)
        self.lo_cmp = Signal(w, name=f"{name}_lo_cmp", reset_less=True) if registered else self.lo
        if isinstance(b, (list, tuple)):
            choices = b
            b = Signal(max(len(v) for _, v in choices), name=f"{name}_bsel")
            m.d.comb += b.eq(select(choices, len(b)))
            lo = select([(sel, (a[:w] - v[:w])[:w]) for sel, v in choices], w)
            dom += [self.lo.eq(lo), self.borrow.eq(Cat(*(sel & (a[:w] < v[:w]) for sel, v in choices)).any())]
        else:
            lo = a[:w] - b[:w]
            dom += [self.lo.eq(lo), self.borrow.eq(a[:w] < b[:w])]
        if registered:
            dom += self.lo_cmp.eq(lo)
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
            d0 = Signal(signed(sw + 1), name=f"{name}_s{n}_m0")
            d1 = Signal(sw + 1, name=f"{name}_s{n}_m1")     # a + ~b = 2**sw + a - b - 1
            d2 = Signal(signed(sw + 3), name=f"{name}_s{n}_m2")
            bo2 = Signal(name=f"{name}_s{n}_bo2")
            m.d.comb += [d0.eq(a_s - b_s), d1.eq(a_s + ~b_s), d2.eq(a_m2 - b_s),
                         bo2.eq((a_s == 0) & (b_s == (1 << sw) - 1))]
            self.segs.append([
                (d0[:sw], Cat(~d0[sw], d0[sw], Const(0))),
                (d1[:sw], Cat(d1[sw], ~d1[sw], Const(0))),
                # (a - b - 2 < -2**sw only for a = 0, b = 2**sw - 1: equalities of the
                # registers, not a compare behind the subtraction)
                (d2[:sw], Cat(~d2[-1], d2[-1] & ~bo2, bo2)),
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
        b2 = Cat(sel & (self.lo_cmp < k) for sel, k in choices).any()
        c = Cat(~self.borrow & ~b2, self.borrow ^ b2, self.borrow & b2)   # borrow into the high part
        parts = [lo]
        for n, (seg, b_in) in enumerate(zip(self.segs, self.seg_borrow_in)):
            # (each segment's value straight from the borrow into the high part: its own
            # borrow-in for each of those, from registers, is ANDed in -- no chain. The
            # segment's borrow-in x is chosen first, a select of three per k, and then
            # picks among the segment's three values: the borrow-ins, the late end of the
            # segments' chain, drive one gate per k, not one per k and value bit)
            bx = [Signal(name=f"{name}_s{n}_bin{x}") for x in range(3)]
            m.d.comb += [bx[x].eq(Cat(c[i] & b_in[i][x] for i in range(3)).any()) for x in range(3)]
            parts.append(select([(bx[x], seg[x][0]) for x in range(3)], len(seg[0][0])))
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


def sum3_flags(m, a, b, c, bias: int, width: int, lo: int, name: str):
    """``a + b + c + bias`` in ``width`` bits (two's complement, wrapping; ``a`` a signed
    register of the width, ``b`` and ``c`` unsigned, ``c`` a few bits, ``bias`` a
    constant) as carry-save levels and one parallel-prefix adder (:func:`prefix_add`), and
    whether the sum's bits above the low ``lo`` are all zero or all one (the sum in ``[0,
    2**lo)`` or ``[-2**lo, 0)``): carry-free tests of the carry-save pair's high parts
    (:func:`sum_is`), chosen by the low part's carry -- no zero test behind the adder.
    Returns (sum, high zero, high ones). For a register updated with a small offset from
    a register: the offset comes unsigned and the bias folds its negative part into the
    constant's carry-save level (gates, no fan-out) -- a signed offset's sign bit,
    extended over the width, was three buffers deep (24.3 FO4 at mixtral-8gpu with pages
    and count packets); carry selects (a narrow add of the low parts, its
    compares per offset, their choice fanned out over the high parts' sums) were 26.4
   ."""
    x, y, z = (Signal(width, name=f"{name}_{t}") for t in "abc")
    m.d.comb += [x.eq(a), y.eq(b), z.eq(c)]
    kc = Const(bias % (1 << width), width)
    s1, k1 = x ^ y ^ kc, Cat(Const(0, 1), ((x & y) | (x & kc) | (y & kc))[:width - 1])
    s = Signal(width, name=f"{name}_s")
    k = Signal(width, name=f"{name}_k")
    m.d.comb += [s.eq(s1 ^ k1 ^ z), k.eq(Cat(Const(0, 1), ((s1 & k1) | (s1 & z) | (k1 & z))[:width - 1]))]
    total = prefix_add(m, s, k, 0, f"{name}_sum")
    hw = width - lo
    carry_lo = Signal(name=f"{name}_clo")
    m.d.comb += carry_lo.eq((s[:lo] + k[:lo])[lo])
    hz, ho = Signal(name=f"{name}_hz"), Signal(name=f"{name}_ho")
    m.d.comb += [hz.eq(Mux(carry_lo, sum_is(s[lo:], k[lo:], (1 << hw) - 1, hw), sum_is(s[lo:], k[lo:], 0, hw))),
                 ho.eq(Mux(carry_lo, sum_is(s[lo:], k[lo:], (1 << hw) - 2, hw),
                           sum_is(s[lo:], k[lo:], (1 << hw) - 1, hw)))]
    return total, hz, ho


def sum_is(x, y, k: int, width: int):
    """``x + y == k`` (mod ``2**width``) without the carry chain: bit i's carry in must be
    ``t_i = x_i ^ y_i ^ k_i`` (``t_0 = 0``), and then its carry out is ``x_i & y_i | (x_i ^
    y_i) & ~k_i``, which must be ``t_{i+1}`` -- a compare per bit and an AND over them."""
    kc = Const(k, width)
    t = x[:width] ^ y[:width] ^ kc
    cout = (x[:width] & y[:width]) | ((x[:width] ^ y[:width]) & ~kc)
    return ~t[0] & ((cout[:width - 1] ^ t[1:width]) == 0) if width > 1 else ~t[0]


def prefix_add(m, x, y, cin: int, name: str):
    """``x + y + cin`` (``cin`` 0 or 1) in ``len(x)`` bits, as a Sklansky parallel-prefix
    adder: every carry after ``log2(width)`` levels of generate/propagate merges. Why not
    ``+``: Yosys maps ``+`` to a Brent-Kung carry tree (``2 log2(width)`` levels), and ABC,
    whose delay target (the synthesis clock) these paths meet, keeps it -- on the count
    limits' ``lam`` loops (a wide sum's high part, then its sign or a choice among the
    sums) the carry tree was most of the path (24.6 FO4, ``lam`` -> ``lam <= 0``, at
    deepseek-v3-8gpu with every v2 feature; 26.0 at mixtral-8gpu paged with count
    packets)."""
    w = len(x)
    g = [Signal(name=f"{name}_g0_{i}") for i in range(w)]
    half = [Signal(name=f"{name}_h_{i}") for i in range(w)]       # (also bit i's propagate)
    m.d.comb += [g[i].eq(x[i] & y[i]) for i in range(w)] + [half[i].eq(x[i] ^ y[i]) for i in range(w)]
    p = list(half)
    if cin:             # (bit 0 generates when either operand bit is set)
        g0 = Signal(name=f"{name}_g0c")
        m.d.comb += g0.eq(x[0] | y[0])
        g = [g0] + g[1:]
    level = 1
    while level < w:
        ng, np_ = list(g), list(p)
        for i in range(w):
            if i & level:
                j = (i & ~(level - 1)) - 1          # the last bit of the block below
                gi, pi = Signal(name=f"{name}_g{level}_{i}"), Signal(name=f"{name}_p{level}_{i}")
                m.d.comb += [gi.eq(g[i] | (p[i] & g[j])), pi.eq(p[i] & p[j])]
                ng[i], np_[i] = gi, pi
        g, p, level = ng, np_, level * 2
    # (g[i]: the carry out of bits 0..i, the carry in included)
    carries = [Const(cin, 1)] + g[:w - 1]
    out = Signal(w, name=f"{name}_sum")
    m.d.comb += out.eq(Cat(half[i] ^ carries[i] for i in range(w)))
    return out

