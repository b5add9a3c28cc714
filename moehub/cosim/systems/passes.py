"""The passes of a system over one layer's shared network: the background each pass
sees, and how far a pass is from the fixed point.

A pass maps the background traffic ``x`` (every phase's flow records: what each flow
injects, when) to the traffic ``F(x)`` its own phases produce on top of it. The layer
time is that of a fixed point ``x* = F(x*)``: every phase saw exactly the traffic the
others produce.

Why plain iteration (``x_{n+1} = F(x_n)``) need not settle: ``F`` is a delayed negative
feedback. A combine that lands on the dispatch's ports slows the dispatch, which starts
the GEMMs and so the combine later, which then no longer overlaps the dispatch, which
becomes fast again: on two nodes behind 50 GB/s NICs the layer time of successive passes
swings by 10-20 % (X-MoE Large, 16 GPUs, 1024 tokens per GPU: 2682, 2869, 3198, 2683,
2830 ... us), and averaging the last two passes' traffic (the scheme before this module)
still needed 11 passes there.

The fix is Krasnosel'skii-Mann averaging of the background (:func:`blend`)::

    x_2 = F(x_1),    x_{n+1} = (1 - a_n) x_n + a_n F(x_n)     (0 < a_n <= 1)

where the convex combination of two backgrounds weights every injected byte of one by
``a`` and of the other by ``1 - a``, flow by flow (one flow per (phase, source,
destination) as in a single pass, so max-min fair shares are those of one flow: the
scheme before kept two half-weight flows per path, which take two shares of a port --
a background no pass produces, which made the swing worse and could stop the passes
where the end times repeated but the traffic did not).

*Same fixed point* (for any weight ``a``). If ``x* = F(x*)`` then
``(1 - a) x* + a F(x*) = x*``: a fixed point
of ``F`` is one of the averaged map. Conversely, if the averaged iteration stands still,
``x = (1 - a) x + a F(x)`` gives ``a (F(x) - x) = 0``, so ``F(x) = x`` since ``a > 0``:
the averaging changes the path to the fixed point, never the point. (For a
nonexpansive ``F`` on a compact convex set the iteration converges -- Ishikawa, Proc.
AMS 59 (1976) -- and a period-2 cycle of ``F`` (``F(x) = y``, ``F(y) = x``: the observed
swing) is no cycle of the map averaged with ``a = 1/2``, which sends ``x`` to the midpoint
of ``x`` and ``y``. The pass map is piecewise and not proven nonexpansive, so the kit
measures the distance to the fixed point instead of assuming it:
:func:`traffic_residual_us`.) The weights ``a_n`` may change from pass to pass
(:class:`Damping`); the argument above holds for each of them.

*Distance to the fixed point.* :func:`traffic_residual_us` is ``|F(x_n) - x_n|``: per
flow, the 1-Wasserstein (earth mover's) distance between the injection the pass produced
and the background it was given, in microseconds (how far in time the bytes would have
to move), weighted by bytes over all flows. It is 0 exactly at a fixed point and, unlike
the change of the layer time between passes, is not shrunk by the damping itself.
"""
from __future__ import annotations

from operator import itemgetter

import numpy as np

#: :func:`blend`'s default weight ``a`` of the newest pass's traffic (the passes of
#: :func:`moehub.cosim.systems.run_system` choose theirs with :class:`Damping`)
DAMPING = 0.5


# ---------------------------------------------------------------------------- blending
def _keyed(records: list) -> dict:
    """{(flow key, occurrence): record}: a pass builds the same flows in the same order.
    A flow's key is its identity across passes: its ports, latency and rate cap (the
    record's first five fields; records are tuples)."""
    seen, out = {}, {}
    for r in records:
        k = r[:5]
        n = seen.get(k, 0)
        seen[k] = n + 1
        out[(k, n)] = r
    return out


def impulse_array(imp) -> np.ndarray:
    """A flow's impulses as an (n, 2) array of (t, bytes), whether a network's list of
    tuples or a blended background's array."""
    if isinstance(imp, np.ndarray):
        return imp
    return np.array(imp, dtype=float).reshape(-1, 2)


def _merge_impulses(new, a: float, old, b: float) -> np.ndarray:
    """``a`` x the new impulses' bytes and ``b`` x the old ones', those at the same
    instant summed, as an (n, 2) array in time order, empty impulses left out (a schedule
    that did not move stays compact). An array, not a list of tuples: a blended
    background holds the union of its passes' impulse times, and at 16 bytes an impulse
    instead of about 100 a wide layer's passes keep it in memory. Each instant's bytes
    are summed in the order given (the new ones', then the old ones'), as a running sum
    from 0 in the order of the impulses would be."""
    n, o = impulse_array(new), impulse_array(old)
    t = np.concatenate([n[:, 0], o[:, 0]])
    w = np.concatenate([n[:, 1] * a, o[:, 1] * b])
    at, which = np.unique(t, return_inverse=True)
    acc = np.zeros(len(at))
    np.add.at(acc, which, w)          # (unbuffered: in the order of ``w``, instant by instant)
    keep = acc > 0
    return np.column_stack((at[keep], acc[keep]))


def _merge_segments(parts: list) -> list:
    acc: dict = {}
    for t0, t1, r in parts:
        acc[(t0, t1)] = acc.get((t0, t1), 0.0) + r
    return [(t0, t1, r) for (t0, t1), r in sorted(acc.items()) if r > 0]


def _blend_records(new: list, old: list, a: float) -> list:
    """Flow by flow, ``a`` x the new records' bytes + ``1 - a`` x the old ones'."""
    kn, ko = _keyed(new), _keyed(old)
    out = []
    for key in list(kn) + [k for k in ko if k not in kn]:
        rn, ro = kn.get(key), ko.get(key)
        base = rn or ro
        imp = _merge_impulses(rn[5] if rn else (), a, ro[5] if ro else (), 1 - a)
        seg = [(t0, t1, r * a) for t0, t1, r in (rn[6] if rn else [])] + \
            [(t0, t1, r * (1 - a)) for t0, t1, r in (ro[6] if ro else [])]
        out.append(tuple(base[:5]) + (imp, _merge_segments(seg)))
    return out


def blend(new: dict, old: dict | None, a: float = DAMPING) -> dict:
    """The next pass's background ``(1 - a) old + a new`` (phase -> flow records); the
    first pass's traffic is taken whole (there is no earlier background to average)."""
    if not (0.0 < a <= 1.0):
        raise ValueError(f"damping a = {a!r}: must lie in (0, 1]")
    if not old:
        return {ph: list(recs) for ph, recs in new.items()}
    return {ph: _blend_records(new.get(ph, []), old.get(ph, []), a)
            for ph in dict.fromkeys(list(new) + list(old))}


# ---------------------------------------------------------------------------- residual
def _steps(imp: list) -> tuple:
    """An injection's impulses as a step curve: their times sorted, and the bytes
    injected before each (a leading 0)."""
    if not len(imp):
        return None
    tb = impulse_array(imp)
    t, b = tb[:, 0], tb[:, 1]
    o = np.argsort(t, kind="stable")
    return t[o], np.concatenate([[0.0], np.cumsum(b[o])])


def _cdf(imp: list, seg: list, x: np.ndarray, right: bool, steps=None) -> np.ndarray:
    """Bytes injected by time ``x`` (impulses at ``x`` counted when ``right``);
    ``steps``: :func:`_steps` of ``imp`` when the caller has it already."""
    if len(imp):             # (0 + the steps, exactly: the steps start at +0)
        t, cb = _steps(imp) if steps is None else steps
        out = cb[np.searchsorted(t, x, side="right" if right else "left")]
    else:
        out = np.zeros(len(x))
    for t0, t1, r in seg:
        out += r * np.clip(x - t0, 0.0, t1 - t0)
    return out


_second = itemgetter(1)               #: an impulse's bytes
_head = itemgetter(0, 1, 2, 3, 4)     #: a flow record's key: ports, latency, cap


def _bytes(imp, seg: list) -> float:
    # (a running sum in the impulses' order, for a list or an array alike)
    b = map(_second, imp) if isinstance(imp, list) else imp[:, 1].tolist()
    return float(sum(b) + sum(r * (t1 - t0) for t0, t1, r in seg))


def _same(x, y) -> bool:
    """Two injections (impulses or segments, lists or arrays) hold the same entries."""
    if isinstance(x, list) and isinstance(y, list):
        return x == y
    if len(x) != len(y):
        return False
    return not len(x) or bool(np.array_equal(np.asarray(x, dtype=float), np.asarray(y, dtype=float)))


def flow_distance_us(a, b) -> tuple[float, float]:
    """(1-Wasserstein distance in us between two flow records' injections, their bytes):
    the integral of |bytes injected by t| differences over t, over the larger total. The
    difference of two piecewise-linear cumulative curves is linear between breakpoints,
    so the integral is exact (a sign change inside an interval splits it in two)."""
    ia, sa = (a[5], a[6]) if a else ([], [])
    ib, sb = (b[5], b[6]) if b else ([], [])
    total = max(_bytes(ia, sa), _bytes(ib, sb))
    if total <= 0:
        return 0.0, 0.0
    pts = [impulse_array(ia)[:, 0], impulse_array(ib)[:, 0],
           np.array([t for s in sa + sb for t in s[:2]], dtype=float)]
    x = np.sort(np.concatenate(pts))
    x = x[np.r_[True, x[1:] != x[:-1]]]                   # the breakpoints, once each
    if len(x) < 2:
        return 0.0, total
    ka, kb = _steps(ia), _steps(ib)
    d0 = _cdf(ia, sa, x[:-1], True, ka) - _cdf(ib, sb, x[:-1], True, kb)
    d1 = _cdf(ia, sa, x[1:], False, ka) - _cdf(ib, sb, x[1:], False, kb)
    h = np.diff(x)
    a0, a1 = np.abs(d0), np.abs(d1)
    area = 0.5 * (a0 + a1)
    cross = d0 * d1 < 0                 # the sign changes inside: two triangles
    if cross.any():
        c0, c1 = d0[cross], d1[cross]
        area[cross] = (c0 ** 2 + c1 ** 2) / (2 * (a0[cross] + a1[cross]))
    area *= h
    return float(area.sum()) / total, total


def _pairs(new: list, old: list):
    """The records of the same flow in two passes, (new, old), None where a pass lacks it:
    by key and occurrence (:func:`_keyed`), in the new pass's order, then the old one's.
    When both list the same keys in the same order (a pass builds the same flows in the
    same order) that pairing is the lists zipped, found without the dictionaries."""
    if len(new) == len(old) and list(map(_head, new)) == list(map(_head, old)):
        return zip(new, old)
    kp, kb = _keyed(new), _keyed(old)
    return ((kp.get(k), kb.get(k)) for k in dict.fromkeys(list(kp) + list(kb)))


def traffic_residual_us(produced: dict, background: dict) -> float:
    """``|F(x) - x|`` of one pass: the byte-weighted mean, over every flow of every phase
    that pass produced, of the distance between what it injected and what its background
    held for that flow (0 at a fixed point). A phase absent from the background (the
    first pass, whose background is empty) counts as its whole traffic moved: ``inf``
    (0 for a system with no traffic at all)."""
    if not background:
        return float("inf") if any(_bytes(r[5], r[6]) > 0 for rs in produced.values()
                                   for r in rs) else 0.0
    num = den = 0.0
    for ph, recs in produced.items():
        for a, b in _pairs(recs, background.get(ph, [])):
            if a is not None and b is not None and _same(a[5], b[5]) and _same(a[6], b[6]):
                # the same injections (most flows once the passes near the fixed point):
                # distance 0 exactly, as flow_distance_us finds it, without the curves
                den += _bytes(a[5], a[6])
                continue
            dist, nbytes = flow_distance_us(a, b)
            num += dist * nbytes
            den += nbytes
    return num / den if den > 0 else 0.0


#: a pass *swings* when it moves the end times back against the pass before: the cosine of
#: the two moves below this (a clear reversal, not the jitter of GPUs off the critical path)
SWING_COSINE = -0.5


def _cosine(u, v) -> float:
    nu, nv = float(np.linalg.norm(u)), float(np.linalg.norm(v))
    return float(np.dot(u, v)) / (nu * nv) if nu > 0 and nv > 0 else 0.0


class Damping:
    """The weight ``a_n`` of each pass's traffic. It starts at 1 (plain iteration: the
    fastest while the passes approach the fixed point) and is halved (down to ``floor``)
    at a *swing* -- the last pass moved the GPUs' end times back against the pass before
    (cosine of the two moves below :data:`SWING_COSINE`: the period-2 cycle of a delayed
    negative feedback, which averaging with weight 1/2 cancels) -- or when its traffic
    lay no nearer its background than the pass before's (the residual did not fall: a
    cycle whose states have the same end times shows no swing, only this). After a
    pass whose residual fell without a swing it doubles again (up to 1). Any sequence of
    weights in (0, 1] keeps the fixed point (module docstring)."""

    def __init__(self, a: float = 1.0, floor: float = 1.0 / 8):
        self.a, self.floor = a, floor
        self.last, self.moved = None, None
        self.history: list = []

    def next(self, residual: float, ends, tol: float = 0.0) -> float:
        """The weight for the background after a pass with this traffic ``residual`` and
        GPU end times ``ends``. Moves of no more than ``tol`` (µs, the passes' tolerance)
        are jitter: two of them are no swing, whatever their directions."""
        ends = np.asarray(ends, dtype=float)
        moved = None if self.moved is None else ends - self.moved[0]
        swing = moved is not None and self.moved[1] is not None \
            and max(np.max(np.abs(moved)), np.max(np.abs(self.moved[1]))) > tol \
            and _cosine(moved, self.moved[1]) < SWING_COSINE
        known = self.last is not None and np.isfinite(self.last)
        if swing or (known and residual >= self.last > 0):
            self.a = max(self.floor, self.a / 2)
        elif known and residual < self.last:
            self.a = min(1.0, self.a * 2)
        self.last, self.moved = residual, (ends, moved)
        self.history.append(self.a)
        return self.a
