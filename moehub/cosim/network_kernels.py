"""Compiled event loop and progressive filling of the fluid network (:mod:`.network`).

The same algorithm as :meth:`.network.FluidNetwork.run_reference` and
:meth:`.network.FluidNetwork._fair_rates`, the same floating-point operations in the same
order, so the two engines give the same curves to the bit (``tests/test_cosim_network_exact.py``
checks it on random networks). What makes it fast is what it does *not* touch:

* the event loop visits only the flows that hold bytes, receive bytes or have a rate (an
  idle flow's updates are exact no-ops: ``x + 0.0 * dt == x``), kept in a list;
* progressive filling keeps the ports that still carry live flows in a shrinking list,
  finds a saturated port's flows through a port -> wanted flows index that the event loop
  keeps from step to step (a flow enters or leaves it when it starts or stops wanting
  bandwidth, a few per step against tens of thousands wanted), and finds the flows that
  reach their own cap first from the live flows sorted by cap;
* the rates are recomputed at every event, as in the plain algorithm (no memo: a call
  costs about as much as building the memo's key would); the per-level passes over the
  used ports run over dense copies that the compiler vectorises (:func:`fair_rates`);
* the busy list is kept in flow order by merging the flows listed at a step into it
  (:func:`_merge_new`), the cap order by merging the changed caps (:func:`_resort`), and a
  step's rate changes are offered to the record in one call (:func:`_sample`: numba counts
  references to the arrays handed to a call, atomic operations, at every call).

Compiled with numba on first use and cached next to this file (``__pycache__``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

EPS_B = 1e-6  #: bytes treated as zero (the same constant as :data:`.network._EPS_B`)


@njit(cache=True)
def fair_rates(n, order, caps, ports, port_caps, tol, none, rate, state):
    """Max-min fair rates of the ``n`` flows held by the port index in ``state`` (the
    wanted flows; ``order``: the same flows by increasing cap) with per-flow caps ``caps``
    (indexed by flow), written into ``rate``. ``state``: :func:`scratch`, its index kept
    by :func:`index_add` / :func:`index_remove` as flows start and stop wanting bandwidth.

    Bit-for-bit the numpy progressive filling (:meth:`FluidNetwork._fair_rates`): each step
    either freezes the flows whose cap lies within the next saturation level (their
    capacity taken per port in flow order, per port role, then summed p0 + p1 + p2) or
    raises the level by the smallest fair share ``rem / cnt`` of the used ports and
    freezes every flow through a port that is now within ``tol`` of full.

    The port -> wanted flows index is kept across calls, so a call costs O(ports) to
    start instead of a pass over the flows; a flow is frozen by stamping it with the
    call's number (the index is not touched). The sink ``none`` is not indexed: it never
    saturates and its share is infinite, so leaving it out of the used ports changes
    no minimum. The order in which one level's flows freeze does not matter (they all
    take the level; the counts are integers).

    A wide all-to-all saturates its ports one at a time (a 256-GPU network: ~460 levels
    per call over ~770 used ports), so the per-level passes over the used ports are most
    of the work. They run over dense per-slot copies (:func:`_dense_ports`: remaining
    capacity, count as a float, tolerance; :func:`_min_share`, :func:`_raise_level`) without
    branches, so that the compiler vectorises them: a port whose last live flow
    freezes is *retired* (:func:`_retire`: its remaining capacity written back to ``rem``,
    its slot made inert: infinite capacity over a count of one, which never is the
    minimum nor saturates) instead of being tested for a zero count at every level, and
    the slots are compacted once a quarter of them are inert."""
    (rem, cnt, acc0, acc1, acc2, start, mlen, members, pos, used, dead, frozen, calls,
     urem, ucnt, utol, slot, sat, share) = state
    call = _stamp(calls, dead)
    nu = _dense_ports(port_caps, tol, mlen, none, rem, used, urem, ucnt, utol, slot)
    n_gone = 0
    ptr = 0
    n_live = n
    level = 0.0
    while n_live > 0:
        if 4 * n_gone > nu:
            nu = _compact(nu, used, urem, ucnt, utol, slot)
            n_gone = 0
        s_min = _min_share(urem, ucnt, share, nu)
        thr = s_min * (1 + 1e-12)
        while dead[order[ptr]] == call:
            ptr += 1
        if caps[order[ptr]] - level <= thr:          # some flows reach their caps first
            nf = 0
            j = ptr
            while j < n:
                f = order[j]
                if dead[f] != call:
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
                        urem[slot[p]] -= (acc0[p] + acc1[p]) + acc2[p]
                        acc0[p] = 0.0
                        acc1[p] = 0.0
                        acc2[p] = 0.0
            urem[slot[none]] = np.inf
            for q in range(nf):
                f = fr[q]
                dead[f] = call
                for r in range(3):
                    u = slot[ports[f, r]]
                    ucnt[u] -= 1.0
                    if ucnt[u] == 0.0:
                        n_gone += _retire(u, used, rem, urem, ucnt)
            n_live -= nf
        else:
            if not np.isfinite(s_min):
                raise ValueError("a flow has no finite bandwidth limit")
            step = max(s_min, 0.0)
            level += step
            ns = _raise_level(urem, ucnt, utol, used, step, nu, sat)
            # freeze the live flows of the saturated ports. An entry names the flow's
            # other two ports (no look-up of the flow's ports), and the loop has no
            # branch on whether the flow is still live (half of the entries are not:
            # frozen through their other port; a mispredicted branch there cost more
            # than the loop's loads)
            nf = 0
            for q in range(ns):
                p = sat[q]
                n0 = nf
                for m in range(start[p], start[p] + mlen[p]):
                    f = members[m, 0]
                    live = dead[f] != call
                    dead[f] = call
                    frozen[nf] = f
                    nf += live
                    u1 = slot[members[m, 1]]
                    ucnt[u1] -= live
                    if ucnt[u1] == 0.0:
                        n_gone += _retire(u1, used, rem, urem, ucnt)
                    b = members[m, 2]
                    if b != none:       # (the sink, for most flows: no chain of updates
                        u2 = slot[b]    # through its one count)
                        ucnt[u2] -= live
                        if ucnt[u2] == 0.0:
                            n_gone += _retire(u2, used, rem, urem, ucnt)
                u = slot[p]
                ucnt[u] -= nf - n0
                if ucnt[u] == 0.0:
                    n_gone += _retire(u, used, rem, urem, ucnt)
            if nf == 0:
                raise ValueError("progressive filling made no progress")
            for q in range(nf):
                rate[frozen[q]] = level
            n_live -= nf
    return rate


@njit(cache=True)
def _stamp(calls, dead):
    """The freeze stamp of a new call of :func:`fair_rates`: the call's number modulo 255,
    plus one (one byte a flow: a saturated port's entries read their flows' stamps at
    random, and a byte a flow keeps them in cache where four bytes did not); every 255
    calls the stamps are cleared, so that no stamp of an earlier call is the new one."""
    calls[0] += 1
    call = np.uint8(calls[0] % 255 + 1)
    if call == 1:
        dead[:] = 0
    return call


@njit(cache=True)
def _dense_ports(port_caps, tol, mlen, none, rem, used, urem, ucnt, utol, slot):
    """Start a call of :func:`fair_rates`: ``rem`` is every port's capacity; each port
    with wanted flows gets a slot (in port order): its port in ``used``, its remaining
    capacity, count and tolerance in ``urem``, ``ucnt``, ``utol``; ``slot``: a port's
    slot. The sink (and any port without wanted flows that a frozen flow names) maps to
    the spare slot at P, inert (infinite capacity and count). Returns the slots used."""
    P = port_caps.shape[0]
    nu = 0
    for p in range(P):
        rem[p] = port_caps[p]
        c = mlen[p]
        slot[p] = P
        if c > 0:
            used[nu] = p
            slot[p] = nu
            urem[nu] = port_caps[p]
            ucnt[nu] = c
            utol[nu] = tol[p]
            nu += 1
    slot[none] = P
    urem[P] = np.inf
    ucnt[P] = np.inf
    return nu


@njit(cache=True, inline="always")
def _retire(u, used, rem, urem, ucnt):
    """Slot u's port has no live flow left: its remaining capacity goes back to ``rem``
    (what the plain algorithm leaves there: a port leaves the used ones with the value
    it had) and the slot becomes inert (infinite capacity over a count of one: never
    the smallest share, never saturated; its count never reaches zero again, as no live
    flow is left to decrement it). Returns 1 (one more inert slot)."""
    rem[used[u]] = urem[u]
    used[u] = -1
    urem[u] = np.inf
    ucnt[u] = 1.0
    return 1


@njit(cache=True)
def _compact(nu, used, urem, ucnt, utol, slot):
    """Drop the inert slots (their ports' ``slot`` entries keep pointing at a slot
    that is inert or now another port's; no live flow names them). Returns the slots
    left, in the same order."""
    k = 0
    for u in range(nu):
        p = used[u]
        if p >= 0:
            used[k] = p
            urem[k] = urem[u]
            ucnt[k] = ucnt[u]
            utol[k] = utol[u]
            slot[p] = k
            k += 1
    return k


@njit(cache=True, error_model="numpy")
def _min_share(urem, ucnt, share, nu):
    """The smallest fair share ``urem / ucnt`` over the first nu slots: the divisions in a
    pass of their own, which the compiler vectorises (numpy's error model: no test for a
    zero count, which no slot has: an inert one counts one), then the minimum in four
    independent chains (exact in any order). A division and a minimum a port and a level
    were a tenth of a 256-GPU network's time, four times what this costs."""
    for u in range(nu):
        share[u] = urem[u] / ucnt[u]
    s0 = np.inf
    s1 = np.inf
    s2 = np.inf
    s3 = np.inf
    u = 0
    while u + 4 <= nu:
        v0 = share[u]
        v1 = share[u + 1]
        v2 = share[u + 2]
        v3 = share[u + 3]
        s0 = v0 if v0 < s0 else s0
        s1 = v1 if v1 < s1 else s1
        s2 = v2 if v2 < s2 else s2
        s3 = v3 if v3 < s3 else s3
        u += 4
    while u < nu:
        v0 = share[u]
        s0 = v0 if v0 < s0 else s0
        u += 1
    s0 = s1 if s1 < s0 else s0
    s2 = s3 if s3 < s2 else s2
    return s2 if s2 < s0 else s0


@njit(cache=True)
def _raise_level(urem, ucnt, utol, used, step, nu, sat):
    """Take ``step`` x count from every slot's remaining capacity (a pass of its own,
    vectorised), then list the ports now within their tolerance of full in ``sat`` (a
    port's test reads only its own capacity); returns how many."""
    for u in range(nu):
        urem[u] -= step * ucnt[u]
    ns = 0
    for u in range(nu):
        if urem[u] <= utol[u]:
            sat[ns] = used[u]
            ns += 1
    return ns


def scratch(ports: np.ndarray, P: int, none: int) -> tuple:
    """State of :func:`fair_rates` for the flows ``ports`` (F x 3) on P ports (allocated
    once a run): per-port scratch (the second, per-port counts, is no longer used: the
    counts live in the dense slots), the port -> wanted flows index (each port's slots,
    sized by the flows that use it, hold its wanted flows first; ``pos``: a flow's slot
    per role, -1 at the sink), the per-flow freeze stamps (:func:`_stamp`) and the dense
    per-slot copies of the used ports (:func:`_dense_ports`)."""
    F = ports.shape[0]
    real = ports[ports != none]
    start = np.zeros(P + 1, dtype=np.int64)
    start[1:] = np.cumsum(np.bincount(real, minlength=P))
    return (np.empty(P), np.zeros(P, dtype=np.int64), np.zeros(P), np.zeros(P), np.zeros(P),
            start, np.zeros(P, dtype=np.int64), np.empty((max(len(real), 1), 3), dtype=np.int32),
            np.full((F, 3), -1, dtype=np.int64), np.empty(P, dtype=np.int64),
            np.zeros(F, dtype=np.uint8), np.empty(F + 1, dtype=np.int64),
            np.zeros(1, dtype=np.int64), np.empty(P + 1), np.empty(P + 1), np.empty(P + 1),
            np.empty(P, dtype=np.int64), np.empty(P, dtype=np.int64), np.empty(P + 1))


@njit(cache=True)
def index_add(f, ports, none, state):
    """Flow f now wants bandwidth: into the index of each of its ports (a port it uses in
    two roles holds it twice, as it counts it twice)."""
    start, mlen, members, pos = state[5], state[6], state[7], state[8]
    for r in range(3):
        p = ports[f, r]
        if p != none:
            m = start[p] + mlen[p]
            members[m, 0] = f
            members[m, 1] = ports[f, (r + 1) % 3]
            members[m, 2] = ports[f, (r + 2) % 3]
            pos[f, r] = m
            mlen[p] += 1


@njit(cache=True)
def index_remove(f, ports, none, state):
    """Flow f no longer wants bandwidth: out of its ports' index (the port's last entry
    takes its slot)."""
    start, mlen, members, pos = state[5], state[6], state[7], state[8]
    for r in range(3):
        p = ports[f, r]
        if p != none:
            m = pos[f, r]
            last = start[p] + mlen[p] - 1
            if last != m:
                g = members[last, 0]
                members[m, 0] = g
                members[m, 1] = members[last, 1]
                members[m, 2] = members[last, 2]
                for r2 in range(3):
                    if ports[g, r2] == p and pos[g, r2] == last:
                        pos[g, r2] = m
                        break
            pos[f, r] = -1
            mlen[p] -= 1


@njit(cache=True)
def _fair_rates_once(want_idx, order, caps, ports, port_caps, tol, none, state):
    for j in range(want_idx.shape[0]):
        index_add(want_idx[j], ports, none, state)
    rate = np.zeros(ports.shape[0])
    fair_rates(want_idx.shape[0], order, caps, ports, port_caps, tol, none, rate, state)
    return rate


def fair_rates_of(want: np.ndarray, caps: np.ndarray, ports: np.ndarray, port_caps: np.ndarray,
                  tol: np.ndarray, none: int) -> np.ndarray:
    """One call of :func:`fair_rates` outside the event loop (the tests compare it with
    :meth:`FluidNetwork._fair_rates`): ``want`` a boolean per flow, ``caps`` per flow; the
    rates of every flow (0 where not wanted)."""
    want_idx = np.flatnonzero(want).astype(np.int64)
    order = want_idx[np.argsort(caps[want_idx], kind="stable")]
    state = scratch(ports, len(port_caps), none)
    return _fair_rates_once(want_idx, order, np.asarray(caps, dtype=float), ports,
                            np.asarray(port_caps, dtype=float), tol, none, state)


@njit(cache=True)
def _resort(a, akey, n, key, was, chg, moved):
    """Sort a[:n] by key[a[i]] again, ``was`` holding each flow's key at the last sort
    (NaN for a flow new to the list), ``akey[i]`` the same key of a[i] beside it and
    ``chg`` whether a flow's key is no longer ``was`` (set in flow order by the event loop):
    the flows whose key is unchanged are still in order; the others (a queue that
    emptied or refilled, a paced flow: a few thousand of a wide network's tens of
    thousands) are sorted apart and merged in. O(n + k log k) for k changed keys, where
    the insertion sort this replaces paid each changed flow's displacement (a fifth of a
    256-GPU network's time). Equal keys may come in any order (the fair rates freeze equal
    caps together, in flow order); a changed key goes after the unchanged ones equal to
    it. The list is in cap order, so reading the keys by flow (``key[a[i]]``) jumped
    across arrays of every flow: ``akey`` and ``chg`` keep the passes in list order, and
    the merge runs from the back, in place (no copy back). ``moved``: scratch."""
    s = 0
    k = 0
    for j in range(n):
        f = a[j]
        if chg[f]:
            moved[k] = f
            k += 1
        else:
            a[s] = f
            akey[s] = akey[j]
            s += 1
    if k == 0:
        return
    mv = moved[:k][np.argsort(key[moved[:k]])]
    w = n - 1
    i = s - 1
    for q in range(k - 1, -1, -1):
        f = mv[q]
        x = key[f]
        was[f] = x
        chg[f] = False
        while i >= 0 and akey[i] > x:          # the unchanged keys above x move up
            a[w] = a[i]
            akey[w] = akey[i]
            w -= 1
            i -= 1
        a[w] = f
        akey[w] = x
        w -= 1


@njit(cache=True)
def _merge_new(a, n0, n):
    """Sort a[:n] (distinct flow numbers) when a[:n0] is already sorted and a[n0:n] holds
    the flows listed since (a few per step against tens of thousands busy): the new ones
    are sorted apart and merged in from the back, in place, O(n + k log k). A full sort of
    the nearly sorted list at every step that listed a flow (numba's quicksort, slow on
    such input) was half the time of some of a 256-GPU layer's networks, and in its
    second pass nearly all of it (one network: over 400 s, against 32 s merged)."""
    if n <= n0:
        return
    new = np.sort(a[n0:n])
    i = n0 - 1
    q = n - n0 - 1
    w = n - 1
    while q >= 0:
        if i >= 0 and a[i] > new[q]:
            a[w] = a[i]
            i -= 1
        else:
            a[w] = new[q]
            q -= 1
        w -= 1


@njit(cache=True, inline="always")
def _record(rec_t, rec_f, rec_b, n, t, f, b):
    """Write the rate change (t, flow, bytes sent by then) at index n (room for it was
    made by :func:`_reserve`)."""
    rec_t[n] = t
    rec_f[n] = f
    rec_b[n] = b


@njit(cache=True)
def _sample(rec_t, rec_f, rec_b, n, pt, pf, pb, pe, k, door):
    """Offer the points (pt[j], pb[j]) of flows pf[j], j < k in order, to the record:
    every point when its ``pe[j]`` < 0 (exact), else a swing door per flow: a point is kept
    only when the straight line from the flow's last kept point can no longer pass within
    ``pe[j]`` bytes of every point offered since (the last offered one is then kept and
    becomes the new origin). Between kept points the curves are straight, so a read curve
    stays within the tolerance of the one every point would give. ``door``: a row per flow
    (one cache line: the swing door is offered a point at almost every busy flow's step) of
    origin t, origin b, slope low, slope high, pending t, pending b and state (0 nothing
    kept, 1 origin only, 2 origin + pending). Keeps at most one point per offer (room for
    them was made by :func:`_reserve`); returns the record's new length.

    A step's points are offered together, gathered by the event loop: numba counts
    references to the arrays a function is handed (atomic operations: eight at each call,
    inlined or not), and with ten thousand points offered per step at 128 GPUs a call per
    point was a third of the loop (at 256 GPUs, 40 of its 46 ns a point)."""
    for j in range(k):
        t = pt[j]
        f = pf[j]
        b = pb[j]
        eps = pe[j]
        if eps < 0.0:
            rec_t[n] = t
            rec_f[n] = f
            rec_b[n] = b
            n += 1
            continue
        if door[f, 6] == 0.0:
            rec_t[n] = t
            rec_f[n] = f
            rec_b[n] = b
            n += 1
            door[f, 0] = t
            door[f, 1] = b
            door[f, 2] = -np.inf
            door[f, 3] = np.inf
            door[f, 6] = 1.0
            continue
        dt = t - door[f, 0]
        if dt <= 0.0:
            continue
        if door[f, 6] == 2.0 and not (door[f, 2] <= (b - door[f, 1]) / dt <= door[f, 3]):
            # the line to this point misses an earlier one: keep the pending point
            rec_t[n] = door[f, 4]
            rec_f[n] = f
            rec_b[n] = door[f, 5]
            n += 1
            door[f, 0] = door[f, 4]
            door[f, 1] = door[f, 5]
            door[f, 2] = -np.inf
            door[f, 3] = np.inf
            dt = t - door[f, 0]
        door[f, 2] = max(door[f, 2], (b - eps - door[f, 1]) / dt)
        door[f, 3] = min(door[f, 3], (b + eps - door[f, 1]) / dt)
        door[f, 4] = t
        door[f, 5] = b
        door[f, 6] = 2.0
    return n


@njit(cache=True)
def _flush(rec_t, rec_f, rec_b, n, door):
    """Keep every flow's pending swing-door point (the end of the run)."""
    for f in range(door.shape[0]):
        if door[f, 6] == 2.0:
            rec_t, rec_f, rec_b = _reserve(rec_t, rec_f, rec_b, n + 1)
            _record(rec_t, rec_f, rec_b, n, door[f, 4], f, door[f, 5])
            n += 1
            door[f, 6] = 1.0
    return rec_t, rec_f, rec_b, n


@njit(cache=True)
def _reserve(rec_t, rec_f, rec_b, need):
    """The record arrays with room for ``need`` points (doubled when they grow)."""
    if need <= rec_t.shape[0]:
        return rec_t, rec_f, rec_b
    m = max(need, 2 * rec_t.shape[0] + 16)
    a = np.empty(m)
    a[:rec_t.shape[0]] = rec_t
    b = np.empty(m, dtype=rec_f.dtype)
    b[:rec_f.shape[0]] = rec_f
    c = np.empty(m)
    c[:rec_b.shape[0]] = rec_b
    return a, b, c


@njit(cache=True)
def _unpace(paced, capv, static_cap, rate, ports, none, rem, paced_at):
    """Pacing must not leave a port idle that a paced flow could use: a port with capacity
    left after the fair rates (``rem``, what :func:`fair_rates` left of each port) never
    saturated, so each of its flows is held by another port or a cap, and only a paced flow
    (held by its pace) can take more. Each paced flow that reached its pace takes an equal
    part of what is left at its most loaded port (a lone flow on a port gets the whole
    port back, as in the exact loop; a paced flow among busy ones gets nothing more), never
    above its static cap; it then drains inside the step, at its own time."""
    n = 0
    for j in range(paced.shape[0]):
        f = paced[j]
        if rate[f] >= capv[f] * (1.0 - 1e-12):
            paced[n] = f
            n += 1
            for r in range(3):
                paced_at[ports[f, r]] += 1
    for j in range(n):
        f = paced[j]
        d = np.inf
        for r in range(3):
            p = ports[f, r]
            if p != none:
                d = min(d, max(rem[p], 0.0) / paced_at[p])
        if np.isfinite(d) and d > 0.0:
            rate[f] = min(static_cap[f], rate[f] + d)
    for j in range(n):
        for r in range(3):
            paced_at[ports[paced[j], r]] = 0


def door_state(F: int) -> np.ndarray:
    """The swing door's per-flow state for :func:`_sample` (F flows, a padded row each),
    each row on one 64-byte cache line: numpy aligns an allocation to 16 bytes only, and
    a row across two lines made the swing door (a point offered at almost every busy
    flow's step) cost twice the memory traffic."""
    buf = np.zeros(F * 8 + 8)
    off = (-buf.ctypes.data % 64) // 8
    return buf[off:off + F * 8].reshape(F, 8)


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
    at least ``W = max(window, window_rel * t)`` unless an injection boundary comes first
    (then W is the time to it), and a queue that would drain inside the step is paced to
    drain at its end: its cap for the step is its inflow plus its backlog over W. The
    fair rates then give the bandwidth it does not need to the others from the step's
    start, so a port that is busy in the exact loop is busy here too (work conserving):
    a paced flow's last byte leaves up to W later than exact and the others' bytes up to
    about W earlier, with no error that adds up from drain to drain. (Pacing replaced
    letting a queue drain at its own time and leaving its share idle until the step's
    end: that idle share added up over a port's drains, and on a 128-GPU network moved
    flows' last bytes by up to 1.7 us at ``window_rel`` 2e-4, against 0.11 us paced.)
    Rates never exceed the fair allocation, so no port is overbooked (``window`` = 0: the
    exact loop, bit for bit).

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
    sorted_cap = np.full(F, np.nan)           # each flow's cap when by_cap was last sorted
    moved = np.empty(F, dtype=np.int64)       # scratch of the re-sort
    listed = np.zeros(F, dtype=np.bool_)      # flow is in `busy`
    busy = np.empty(F, dtype=np.int64)        # flows with bytes, an inflow or a rate
    by_cap = np.empty(F, dtype=np.int64)      # the same flows by cap
    cap_key = np.empty(F)                     # by_cap[j]'s cap when last sorted
    cap_chg = np.zeros(F, dtype=np.bool_)     # a flow's cap is no longer sorted_cap
    nb = 0
    want_by_cap = np.empty(F, dtype=np.int64)
    wanted = np.zeros(F, dtype=np.bool_)
    indexed = np.zeros(F, dtype=np.bool_)     # flow is in the fair rates' port index
    queued = np.zeros(F, dtype=np.bool_)
    drain = np.zeros(F, dtype=np.bool_)
    paced = np.empty(F, dtype=np.int64)      # flows whose cap this step is their pace
    n_paced = 0
    paced_at = np.zeros(port_caps.shape[0], dtype=np.int64)
    # a flow's rate never exceeds its narrowest port: a pace at or above it cannot bind, so
    # it is not set (a paced flow's cap changes at every step, and each changed cap is
    # re-sorted: pacing every queued flow would re-sort most busy flows at every step)
    top = np.empty(F)
    for f in range(F):
        top[f] = min(port_caps[ports[f, 0]], port_caps[ports[f, 1]], port_caps[ports[f, 2]])
    pt = np.empty(F)                          # a loop's points offered to the record
    pf = np.empty(F, dtype=np.int64)
    pb = np.empty(F)
    pe = np.empty(F)
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
        nb0 = nb                    # busy[:nb0] is in flow order
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
                sorted_cap[i] = np.nan            # (out of order at the end: re-sorted)
                nb += 1
                added = True
        if added:   # the busy list in flow order (the fair rates and records walk flows in order)
            _merge_new(busy, nb0, nb)
            added = False
        n_act = 0
        nw = 0
        fill = 0.0                  # coalescing: this step's length unless a drain comes later
        n_paced = 0
        if window > 0.0:
            fill = max(window, window_rel * abs(t))
            if k < n_ev and t < ev_t[k] < t + fill:
                fill = ev_t[k] - t
        for j in range(nb):
            i = busy[j]
            queued[i] = backlog[i] > EPS_B
            act = queued[i] or inrate[i] > 0
            if act:
                n_act += 1
            capv[i] = static_cap[i] if queued[i] else min(static_cap[i], inrate[i])
            if queued[i] and fill > 0.0:           # (coalescing: drain by the step's end)
                pace = inrate[i] + backlog[i] / fill
                if pace < capv[i] and pace < top[i]:
                    capv[i] = pace
                    paced[n_paced] = i
                    n_paced += 1
            cap_chg[i] = not (capv[i] == sorted_cap[i])     # (NaN: new to the list)
            new_rate[i] = 0.0
            wanted[i] = act and capv[i] > 0
            if wanted[i]:
                nw += 1
            if wanted[i] != indexed[i]:          # the port index follows the wanted set
                if wanted[i]:
                    index_add(i, ports, none, state)
                else:
                    index_remove(i, ports, none, state)
                indexed[i] = wanted[i]
        if k >= n_ev and n_act == 0:
            break
        _resort(by_cap, cap_key, nb, capv, sorted_cap, cap_chg, moved)
        m = 0
        for j in range(nb):
            if wanted[by_cap[j]]:
                want_by_cap[m] = by_cap[j]
                m += 1
        fair_rates(nw, want_by_cap[:nw], capv, ports, port_caps, tol, none, new_rate, state)
        if n_paced:
            _unpace(paced[:n_paced], capv, static_cap, new_rate, ports, none, state[0], paced_at)
        n_steps += 1
        thin = window > 0.0 and door_frac >= 0.0
        w_t = max(window, window_rel * abs(t)) * door_frac
        # record the rate changes; find the next event: an injection boundary or a queue
        # draining (one pass over the busy flows)
        # room for this step's points (at most one per busy flow in each of the two loops)
        rec_t, rec_f, rec_b = _reserve(rec_t, rec_f, rec_b, n_chg + 2 * nb + 2)
        t_next = ev_t[k] if k < n_ev else np.inf
        d_min = np.inf
        n_drain = 0
        any_queued = False
        # the points offered to the record (:func:`_sample`), gathered without a branch:
        # two thirds of the busy flows change rate at a step, in no pattern a predictor
        # learns; each writes its slot and only a changed one moves on to the next
        n_pt = 0
        for j in range(nb):
            i = busy[j]
            pf[n_pt] = i
            pb[n_pt] = sent[i]
            pe[n_pt] = w_t * min(rate[i], new_rate[i]) if thin else -1.0
            n_pt += abs(new_rate[i] - rate[i]) > 1e-12
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
        pt[:n_pt] = t
        n_chg = _sample(rec_t, rec_f, rec_b, n_chg, pt, pf, pb, pe, n_pt, door)
        n_offered += n_pt
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
        n_pt = 0
        for j in range(nb):
            i = busy[j]
            net = rate[i] - inrate[i]
            if window > 0.0 and drain[i] and backlog[i] < net * dt:
                # coalesced: the queue drains inside the step, at its own time
                x = backlog[i] / net
                at = sent[i] + rate[i] * x
                pt[n_pt] = t + x
                pf[n_pt] = i
                pb[n_pt] = at
                pe[n_pt] = (max(window, window_rel * abs(t)) * door_frac * min(rate[i], inrate[i])
                            if door_frac >= 0.0 else -1.0)
                n_pt += 1
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
                if indexed[i]:
                    index_remove(i, ports, none, state)
                    indexed[i] = False
        n_chg = _sample(rec_t, rec_f, rec_b, n_chg, pt, pf, pb, pe, n_pt, door)
        n_offered += n_pt
        keep2 = 0
        for j in range(nb):
            if listed[by_cap[j]]:
                by_cap[keep2] = by_cap[j]
                cap_key[keep2] = cap_key[j]
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
