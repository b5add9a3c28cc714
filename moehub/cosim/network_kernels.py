"""Compiled event loop and progressive filling of the fluid network (:mod:`.network`).

The same algorithm as :meth:`.network.FluidNetwork.run_reference` and
:meth:`.network.FluidNetwork._fair_rates`, the same floating-point operations in the same
order, so the two engines give the same curves to the bit (``tests/test_cosim_network_exact.py``
checks it on random networks). What makes it fast is what it does *not* touch:

* the event loop visits only the flows that hold bytes, receive bytes or have a rate (an
  idle flow's updates are exact no-ops: ``x + 0.0 * dt == x``), kept in a list;
* progressive filling keeps the ports that still carry live flows in a shrinking list,
  finds a saturated port's flows through a port -> flows index built once per call, and
  finds the flows that reach their own cap first from the live flows sorted by cap;
* the rates are recomputed at every event, as in the plain algorithm (no memo: a call
  costs about as much as building the memo's key would).

Compiled with numba on first use and cached next to this file (``__pycache__``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

EPS_B = 1e-6  #: bytes treated as zero (the same constant as :data:`.network._EPS_B`)


@njit(cache=True)
def fair_rates(want_idx, order, caps, ports, port_caps, tol, none, rate, state):
    """Max-min fair rates of the flows ``want_idx`` (increasing indices; ``order``: the
    same flows by increasing cap) with per-flow caps ``caps`` (indexed by flow), written
    into ``rate``.
    ``state`` holds scratch arrays sized to the network (see :func:`scratch`).

    Bit-for-bit the numpy progressive filling (:meth:`FluidNetwork._fair_rates`): each step
    either freezes the flows whose cap lies within the next saturation level (their
    capacity taken per port in flow order, per port role, then summed p0 + p1 + p2) or
    raises the level by the smallest fair share ``rem / cnt`` of the used ports and
    freezes every flow through a port that is now within ``tol`` of full."""
    rem, cnt, acc0, acc1, acc2, start, fill, members, used, live = state
    P = port_caps.shape[0]
    n = want_idx.shape[0]
    for p in range(P):
        rem[p] = port_caps[p]
        cnt[p] = 0
    for j in range(n):
        f = want_idx[j]
        live[f] = True
        cnt[ports[f, 0]] += 1
        cnt[ports[f, 1]] += 1
        cnt[ports[f, 2]] += 1
    # port -> live flows (counting sort) and the list of used ports
    nu = 0
    s = 0
    for p in range(P):
        start[p] = s
        fill[p] = s
        s += cnt[p]
        if cnt[p] > 0:
            used[nu] = p
            nu += 1
    start[P] = s
    for j in range(n):
        f = want_idx[j]
        for r in range(3):
            p = ports[f, r]
            members[fill[p]] = f
            fill[p] += 1
    ptr = 0
    n_live = n
    level = 0.0
    frozen = np.empty(n, dtype=np.int64)
    while n_live > 0:
        # smallest fair share among the used ports (cnt > 0), compacting the list
        s_min = np.inf
        k = 0
        for u in range(nu):
            p = used[u]
            if cnt[p] > 0:
                used[k] = p
                k += 1
                v = rem[p] / cnt[p]
                if v < s_min:
                    s_min = v
        nu = k
        thr = s_min * (1 + 1e-12)
        while not live[order[ptr]]:
            ptr += 1
        if caps[order[ptr]] - level <= thr:          # some flows reach their caps first
            nf = 0
            j = ptr
            while j < n:
                f = order[j]
                if live[f]:
                    if caps[f] - level > thr:
                        break
                    frozen[nf] = f
                    nf += 1
                j += 1
            fr = np.sort(frozen[:nf])
            for q in range(nf):
                f = fr[q]
                head = caps[f] - level
                rate[f] = caps[f]
                acc0[ports[f, 0]] += head
                acc1[ports[f, 1]] += head
                acc2[ports[f, 2]] += head
            for q in range(nf):
                f = fr[q]
                for r in range(3):
                    p = ports[f, r]
                    if acc0[p] != 0.0 or acc1[p] != 0.0 or acc2[p] != 0.0:
                        rem[p] -= (acc0[p] + acc1[p]) + acc2[p]
                        acc0[p] = 0.0
                        acc1[p] = 0.0
                        acc2[p] = 0.0
            rem[none] = np.inf
            for q in range(nf):
                f = fr[q]
                live[f] = False
                cnt[ports[f, 0]] -= 1
                cnt[ports[f, 1]] -= 1
                cnt[ports[f, 2]] -= 1
            n_live -= nf
        else:
            if not np.isfinite(s_min):
                raise ValueError("a flow has no finite bandwidth limit")
            step = max(s_min, 0.0)
            level += step
            for u in range(nu):
                p = used[u]
                rem[p] -= step * cnt[p]
            nf = 0
            for u in range(nu):
                p = used[u]
                if rem[p] <= tol[p]:
                    for m in range(start[p], start[p + 1]):
                        f = members[m]
                        if live[f]:
                            live[f] = False
                            frozen[nf] = f
                            nf += 1
            if nf == 0:
                raise ValueError("progressive filling made no progress")
            for q in range(nf):
                f = frozen[q]
                rate[f] = level
                cnt[ports[f, 0]] -= 1
                cnt[ports[f, 1]] -= 1
                cnt[ports[f, 2]] -= 1
            n_live -= nf
    return rate


def scratch(F: int, P: int) -> tuple:
    """Scratch arrays of :func:`fair_rates` for F flows and P ports (allocated once a run)."""
    return (np.empty(P), np.zeros(P, dtype=np.int64), np.zeros(P), np.zeros(P), np.zeros(P),
            np.empty(P + 1, dtype=np.int64), np.empty(P, dtype=np.int64),
            np.empty(3 * F, dtype=np.int64), np.empty(P, dtype=np.int64),
            np.zeros(F, dtype=np.bool_))


@njit(cache=True)
def _sort_by(a, n, key):
    """Insertion sort of a[:n] by key[a[i]]: the busy flows by cap change little from one
    event to the next, so this is about linear."""
    for i in range(1, n):
        x = a[i]
        kx = key[x]
        j = i - 1
        while j >= 0 and key[a[j]] > kx:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True, inline="always")
def _record(rec_t, rec_f, rec_b, n, t, f, b):
    """Append the rate change (t, flow, bytes sent by then) at index n (growing the arrays)."""
    if n >= rec_t.shape[0]:
        rec_t, rec_f, rec_b = _grow(rec_t, n), _grow(rec_f, n), _grow(rec_b, n)
    rec_t[n] = t
    rec_f[n] = f
    rec_b[n] = b
    return rec_t, rec_f, rec_b


@njit(cache=True, inline="always")
def _sample(rec_t, rec_f, rec_b, n, t, f, b, eps, door):
    """Offer the point (t, b) of flow f's curve to the record: every point when ``eps`` < 0
    (exact), else a swing door per flow: a point is kept only when the straight line from
    the flow's last kept point can no longer pass within ``eps`` bytes of every point
    offered since (the last offered one is then kept and becomes the new origin). Between
    kept points the curves are straight, so a read curve stays within ``eps`` bytes of the
    one every point would give. ``door``: a row per flow (one cache line: the
    swing door is offered a point at almost every busy flow's step) of origin t, origin b,
    slope low, slope high, pending t, pending b and state (0 nothing kept, 1 origin only,
    2 origin + pending). Inlined into the event loop: as a call that returned the record
    arrays it cost more than the fair rates. Returns the record arrays and their new
    length."""
    if eps < 0.0:
        rec_t, rec_f, rec_b = _record(rec_t, rec_f, rec_b, n, t, f, b)
        return rec_t, rec_f, rec_b, n + 1
    d = door[f]
    if d[6] == 0.0:
        rec_t, rec_f, rec_b = _record(rec_t, rec_f, rec_b, n, t, f, b)
        d[0], d[1], d[2], d[3], d[6] = t, b, -np.inf, np.inf, 1.0
        return rec_t, rec_f, rec_b, n + 1
    dt = t - d[0]
    if dt <= 0.0:
        return rec_t, rec_f, rec_b, n
    if d[6] == 2.0 and not (d[2] <= (b - d[1]) / dt <= d[3]):
        # the line to this point misses an earlier one: keep the pending point
        rec_t, rec_f, rec_b = _record(rec_t, rec_f, rec_b, n, d[4], f, d[5])
        n += 1
        d[0], d[1], d[2], d[3] = d[4], d[5], -np.inf, np.inf
        dt = t - d[0]
    d[2] = max(d[2], (b - eps - d[1]) / dt)
    d[3] = min(d[3], (b + eps - d[1]) / dt)
    d[4], d[5], d[6] = t, b, 2.0
    return rec_t, rec_f, rec_b, n


@njit(cache=True)
def _flush(rec_t, rec_f, rec_b, n, door):
    """Keep every flow's pending swing-door point (the end of the run)."""
    for f in range(door.shape[0]):
        if door[f, 6] == 2.0:
            rec_t, rec_f, rec_b = _record(rec_t, rec_f, rec_b, n, door[f, 4], f, door[f, 5])
            n += 1
            door[f, 6] = 1.0
    return rec_t, rec_f, rec_b, n


def door_state(F: int) -> np.ndarray:
    """The swing door's per-flow state for :func:`_sample` (F flows, a padded row each)."""
    return np.zeros((F, 8))


@njit(cache=True)
def _grow(a, n):
    if n < a.shape[0]:
        return a
    b = np.empty(2 * a.shape[0] + 16, dtype=a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(cache=True)
def simulate(ev_t, ev_kind, ev_flow, ev_val, ports, port_caps, tol, none, static_cap, state,
             window, window_rel, door, door_frac):
    """The event loop of :meth:`FluidNetwork.run_reference`, compiled (see the module
    docstring). Events: time, kind (0 impulse of ``val`` bytes, 1 segment start / 2 end of
    ``val`` bytes/us), flow, in time order. Returns the kept points of the rate changes (the
    time of each, the flow and the bytes it had sent by then; in time order within a flow),
    the end time, every flow's bytes sent, the number of rate computations and the number
    of rate changes.

    ``window`` > 0 (us) coalesces queue drains: a step between two rate computations lasts
    at least ``max(window, window_rel * t)`` unless an injection boundary comes first, and a queue that drains
    inside it does so at its exact time (a breakpoint there), then sends at its inflow
    rate; the bandwidth it frees goes to the others at the end of the step, not at once.
    Rates never exceed the fair allocation, so no port is overbooked; flows finish at most
    a little later than in the exact loop (``window`` = 0: the exact loop, bit for bit).

    With a window, the record of rate changes is also thinned (:func:`_sample`, a swing door
    per flow): a point may be left out while the curve through the kept ones stays within
    ``door_frac`` x the step window's worth of the *lower* of the flow's rates on either side
    of every point (bytes). The difference between the thinned and the full curve is
    straight between points, and on each piece the flow sends at least that lower rate, so
    any byte's time moves by at most ``door_frac`` x the window (a flow that stops keeps the
    corner exactly: its lower rate is zero). In a wide all-to-all nearly
    every busy flow's rate moves a little at every step, and recording each change cost
    more than the rates themselves; ``door`` is :func:`door_state`."""
    F = static_cap.shape[0]
    n_ev = ev_t.shape[0]
    backlog = np.zeros(F)
    inrate = np.zeros(F)
    sent = np.zeros(F)
    rate = np.zeros(F)
    new_rate = np.zeros(F)
    capv = np.zeros(F)
    listed = np.zeros(F, dtype=np.bool_)      # flow is in `busy`
    busy = np.empty(F, dtype=np.int64)        # flows with bytes, an inflow or a rate
    by_cap = np.empty(F, dtype=np.int64)      # the same flows by cap
    nb = 0
    want = np.empty(F, dtype=np.int64)
    want_by_cap = np.empty(F, dtype=np.int64)
    wanted = np.zeros(F, dtype=np.bool_)
    queued = np.zeros(F, dtype=np.bool_)
    drain = np.zeros(F, dtype=np.bool_)
    rec_t = np.empty(1024)
    rec_f = np.empty(1024, dtype=np.int64)
    rec_b = np.empty(1024)
    n_chg = 0
    n_offered = 0
    n_steps = 0
    k = 0
    added = False
    t = ev_t[0] if n_ev else 0.0
    while True:
        # injection boundaries due now
        while k < n_ev and ev_t[k] <= t + 1e-12:
            i = ev_flow[k]
            kind = ev_kind[k]
            v = ev_val[k]
            k += 1
            if kind == 0:
                backlog[i] += v
            elif kind == 1:
                inrate[i] += v
            else:
                inrate[i] -= v
                if abs(inrate[i]) < 1e-9:
                    inrate[i] = 0.0
            if not listed[i]:
                listed[i] = True
                busy[nb] = i
                by_cap[nb] = i
                nb += 1
                added = True
        if added:   # the busy list in flow order (the fair rates and records walk flows in order)
            busy[:nb].sort()
            added = False
        n_act = 0
        nw = 0
        for j in range(nb):
            i = busy[j]
            queued[i] = backlog[i] > EPS_B
            act = queued[i] or inrate[i] > 0
            if act:
                n_act += 1
            capv[i] = static_cap[i] if queued[i] else min(static_cap[i], inrate[i])
            new_rate[i] = 0.0
            wanted[i] = act and capv[i] > 0
            if wanted[i]:
                want[nw] = i
                nw += 1
        if k >= n_ev and n_act == 0:
            break
        _sort_by(by_cap, nb, capv)
        m = 0
        for j in range(nb):
            if wanted[by_cap[j]]:
                want_by_cap[m] = by_cap[j]
                m += 1
        fair_rates(want[:nw], want_by_cap[:nw], capv, ports, port_caps, tol, none, new_rate, state)
        n_steps += 1
        thin = window > 0.0 and door_frac >= 0.0
        w_t = max(window, window_rel * abs(t)) * door_frac
        # record the rate changes; find the next event: an injection boundary or a queue
        # draining (one pass over the busy flows)
        t_next = ev_t[k] if k < n_ev else np.inf
        d_min = np.inf
        n_drain = 0
        any_queued = False
        for j in range(nb):
            i = busy[j]
            if abs(new_rate[i] - rate[i]) > 1e-12:
                eps = w_t * min(rate[i], new_rate[i]) if thin else -1.0
                rec_t, rec_f, rec_b, n_chg = _sample(rec_t, rec_f, rec_b, n_chg, t, i, sent[i],
                                                     eps, door)
                n_offered += 1
            rate[i] = new_rate[i]
            net = rate[i] - inrate[i]
            drain[i] = queued[i] and net > 1e-12
            if queued[i]:
                any_queued = True
            if drain[i]:
                n_drain += 1
                x = backlog[i] / net
                if x < d_min:
                    d_min = x
        if n_drain:
            t_next = min(t_next, t + max(d_min, window, window_rel * abs(t)) if window > 0.0
                         else t + d_min)
        if not np.isfinite(t_next):
            # nothing will ever change: rates are zero with a backlog (no capacity)
            if any_queued:
                raise ValueError("flows with a backlog but no bandwidth")
            break
        dt = t_next - t
        stuck = dt <= 1e-9 * max(1.0, abs(t))
        lim = 1e-9 * max(1.0, abs(t))
        keep = 0
        for j in range(nb):
            i = busy[j]
            net = rate[i] - inrate[i]
            if window > 0.0 and drain[i] and backlog[i] < net * dt:
                # coalesced: the queue drains inside the step, at its own time
                x = backlog[i] / net
                at = sent[i] + rate[i] * x
                eps = (max(window, window_rel * abs(t)) * door_frac * min(rate[i], inrate[i])
                       if door_frac >= 0.0 else -1.0)
                rec_t, rec_f, rec_b, n_chg = _sample(rec_t, rec_f, rec_b, n_chg, t + x, i, at,
                                                     eps, door)
                n_offered += 1
                sent[i] = at + inrate[i] * (dt - x)
                backlog[i] = 0.0
                rate[i] = inrate[i]
            else:
                sent[i] += rate[i] * dt
                backlog[i] -= net * dt            # (inrate - rate) * dt, exactly
            # round-off: a queue within a few ulps of its flow's bytes is empty
            if backlog[i] < max(EPS_B, 1e-12 * (sent[i] + backlog[i])):
                backlog[i] = 0.0
            if stuck and drain[i] and backlog[i] / max(net, 1e-300) <= lim:
                # no measurable progress: the queue that was about to drain is empty now
                backlog[i] = 0.0
            if backlog[i] != 0.0 or inrate[i] != 0.0 or rate[i] != 0.0:
                busy[keep] = i
                keep += 1
            else:
                listed[i] = False
        keep2 = 0
        for j in range(nb):
            if listed[by_cap[j]]:
                by_cap[keep2] = by_cap[j]
                keep2 += 1
        nb = keep
        t = t_next
    if window > 0.0 and door_frac >= 0.0:
        rec_t, rec_f, rec_b, n_chg = _flush(rec_t, rec_f, rec_b, n_chg, door)
    return rec_t[:n_chg], rec_f[:n_chg], rec_b[:n_chg], t, sent, n_steps, n_offered


@njit(cache=True)
def depart_many(t, b, lo, hi, x):
    """:meth:`FlowCurve.depart` of many (curve, byte) queries at once: query j reads the
    curve ``t[lo[j]:hi[j]], b[lo[j]:hi[j]]`` (already trimmed) at cumulative byte ``x[j]``;
    the same operations as the numpy method, element by element."""
    out = np.empty(x.shape[0])
    for j in range(x.shape[0]):
        a, n = lo[j], hi[j] - lo[j]
        if n == 0:
            out[j] = np.nan
            continue
        if n == 1:
            out[j] = t[a]
            continue
        xj = min(x[j], b[a + n - 1])
        target = xj - 1e-9
        # numpy searchsorted side="left": first i with b[i] >= target
        i0, i1 = 0, n
        while i0 < i1:
            mid = (i0 + i1) >> 1
            if b[a + mid] < target:
                i0 = mid + 1
            else:
                i1 = mid
        i = min(max(i0, 1), n - 1)
        b0, b1, t0, t1 = b[a + i - 1], b[a + i], t[a + i - 1], t[a + i]
        frac = (xj - b0) / (b1 - b0) if b1 > b0 else 1.0
        frac = min(max(frac, 0.0), 1.0)
        out[j] = t0 + frac * (t1 - t0)
    return out
