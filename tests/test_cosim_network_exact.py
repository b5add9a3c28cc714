"""The fluid network's engines (cosim/network.py: ``compiled``, the default, and
``reference``, the numpy loop with its rate memo) equal the plain algorithm they replaced,
bit for bit: the previous ``_fair_rates`` and ``run`` (plain progressive filling, before
the engines) are kept below as the oracle and all run random networks -- flows on two or
three ports, a port in several roles, rate caps, impulses and rate segments that start,
stop and overlap, ties in time -- and every flow's curve must match exactly (times and
bytes, to the bit)."""
import copy
import heapq

import numpy as np
import pytest

from moehub.cosim.network import _EPS_B, FlowCurve, FluidNetwork


class PlainNetwork(FluidNetwork):
    """The engine before the speed work, verbatim."""

    def _fair_rates(self, want: np.ndarray, caps: np.ndarray) -> np.ndarray:
        """Max-min fair rates by progressive filling. ``want``: flows asking for bandwidth;
        ``caps``: per-flow upper bounds (inf = link limited).

        Every live flow rises by the same amount (``level``) until a port saturates; its
        flows then freeze. A flow whose own cap lies below the level at which the next port
        would saturate reaches its cap first whatever the others do, so all such flows are
        frozen at their caps in one step (the result is the same max-min allocation as
        raising them one by one, in far fewer steps)."""
        rate = np.zeros(len(want))
        live = want.copy()
        rem = self.caps.copy()
        P, none = len(rem), self.NONE
        p0, p1, p2 = self.p0, self.p1, self.p2
        finite = np.isfinite(self.caps)
        tol = 1e-9 * np.maximum(np.where(finite, self.caps, 1.0), 1.0)
        level = 0.0

        def use(idx, w=None):
            return (np.bincount(p0[idx], w, minlength=P) + np.bincount(p1[idx], w, minlength=P)
                    + np.bincount(p2[idx], w, minlength=P))
        while True:
            idx = np.flatnonzero(live)
            if not idx.size:
                return rate
            cnt = use(idx)
            cnt[none] = 0
            used = cnt > 0
            s_min = float((rem[used] / cnt[used]).min()) if used.any() else np.inf
            head = caps[idx] - level
            capped = head <= s_min * (1 + 1e-12)
            if capped.any():                  # freeze at their caps, then look again
                f = idx[capped]
                rate[f] = caps[f]
                rem -= use(f, head[capped])
                rem[none] = np.inf
                live[f] = False
                continue
            if not np.isfinite(s_min):
                raise ValueError("a flow has no finite bandwidth limit")
            level += max(s_min, 0.0)
            rem -= max(s_min, 0.0) * cnt
            rem[none] = np.inf
            sat = finite & (rem <= tol)
            done = sat[p0[idx]] | sat[p1[idx]] | sat[p2[idx]]
            rate[idx[done]] = level
            live[idx[done]] = False
            if not done.any():
                raise ValueError("progressive filling made no progress")

    # ------------------------------------------------------------------ simulation
    def run(self) -> list[FlowCurve]:
        """Simulate until every injected byte has been sent; one curve per flow."""
        F = len(self.flows)
        if F == 0:
            return []
        self.p0 = np.array([f.p0 for f in self.flows])
        self.p1 = np.array([f.p1 for f in self.flows])
        self.p2 = np.array([f.p2 for f in self.flows])
        static_cap = np.array([f.cap for f in self.flows], dtype=float)
        events: list = []   # (time, kind, flow, value)  kind 0 impulse, 1 seg start, 2 seg end
        for i, f in enumerate(self.flows):
            for t, b in f.impulses:
                events.append((t, 0, i, b))
            for t0, t1, r in f.segments:
                events.append((t0, 1, i, r))
                events.append((t1, 2, i, r))
        heapq.heapify(events)
        backlog = np.zeros(F)
        inrate = np.zeros(F)
        sent = np.zeros(F)
        rate = np.zeros(F)
        curves_t: list[list] = [[] for _ in range(F)]
        curves_b: list[list] = [[] for _ in range(F)]
        t = events[0][0] if events else 0.0
        while True:
            while events and events[0][0] <= t + 1e-12:
                _, kind, i, v = heapq.heappop(events)
                if kind == 0:
                    backlog[i] += v
                elif kind == 1:
                    inrate[i] += v
                else:
                    inrate[i] -= v
                    if abs(inrate[i]) < 1e-9:
                        inrate[i] = 0.0
            active = (backlog > _EPS_B) | (inrate > 0)
            if not active.any() and not events:
                break
            caps = np.where(backlog > _EPS_B, static_cap, np.minimum(static_cap, inrate))
            new_rate = self._fair_rates(active & (caps > 0), caps)
            changed = np.nonzero(np.abs(new_rate - rate) > 1e-12)[0]
            for i in changed:
                curves_t[i].append(t)
                curves_b[i].append(sent[i])
            rate = new_rate
            # next event: an injection boundary or a queue draining
            t_next = events[0][0] if events else np.inf
            net = rate - inrate
            drain = (backlog > _EPS_B) & (net > 1e-12)
            if drain.any():
                t_next = min(t_next, t + float((backlog[drain] / net[drain]).min()))
            if not np.isfinite(t_next):
                # nothing will ever change: rates are zero with a backlog (no capacity)
                if (backlog > _EPS_B).any():
                    raise ValueError("flows with a backlog but no bandwidth")
                break
            dt = t_next - t
            sent += rate * dt
            backlog += (inrate - rate) * dt
            # round-off: a queue within a few ulps of its flow's bytes is empty
            tol = np.maximum(_EPS_B, 1e-12 * (sent + backlog))
            backlog[backlog < tol] = 0.0
            if dt <= 1e-9 * max(1.0, abs(t)):
                # no measurable progress: the queue that was about to drain is empty now
                backlog[drain & (backlog / np.maximum(net, 1e-300) <= 1e-9 * max(1.0, abs(t)))] = 0.0
            t = t_next
        for i in range(F):
            curves_t[i].append(t)
            curves_b[i].append(sent[i])
        out = []
        for i, f in enumerate(self.flows):
            ct, cb = np.array(curves_t[i]), np.array(curves_b[i])
            # trim the flat tail after the last byte, keep the first time the total is reached
            if len(cb):
                last = int(np.searchsorted(cb, cb[-1] - 1e-9, side="left"))
                ct, cb = ct[:last + 1], cb[:last + 1]
            out.append(FlowCurve(ct, cb, f.latency_us))
        return out


def random_network(rng) -> FluidNetwork:
    P = int(rng.integers(3, 12))
    caps = rng.choice([50.0, 100.0, 400.0, 1e12], P) * 1000.0
    net = FluidNetwork(caps)
    for _ in range(int(rng.integers(1, 40))):
        p0, p1 = rng.choice(P, 2, replace=False)
        p2 = int(rng.integers(0, P)) if rng.random() < 0.3 else None
        cap = float(rng.choice([np.inf, 20e3, 70e3, 150e3]))
        f = net.add_flow(int(p0), None if rng.random() < 0.15 else int(p1),
                         float(rng.choice([0.0, 0.5, 1.3])), cap, p2=p2)
        for _ in range(int(rng.integers(0, 6))):
            t = float(rng.integers(0, 20)) * rng.choice([1.0, 0.25])   # repeated times: ties
            if rng.random() < 0.5:
                net.inject(f, t, float(rng.integers(1, 400)) * 1000.0)
            else:
                net.inject_rate(f, t, t + float(rng.integers(0, 8)), float(rng.integers(1, 400)) * 1000.0)
    return net


def curves_equal(a, b) -> bool:
    return len(a) == len(b) and all(
        x.t.tobytes() == y.t.tobytes() and x.b.tobytes() == y.b.tobytes()
        and x.latency_us == y.latency_us for x, y in zip(a, b))


@pytest.mark.parametrize("engine", ["compiled", "reference"])
@pytest.mark.parametrize("seed", range(40))
def test_fast_engine_equals_the_plain_algorithm(seed, engine):
    net = random_network(np.random.default_rng(seed))
    net.engine = engine
    plain = copy.deepcopy(net)
    plain.__class__ = PlainNetwork
    assert curves_equal(net.run(), plain.run()), f"seed {seed}: curves differ"


def test_the_comparison_catches_an_engine_that_drifts(monkeypatch):
    """A change in the last bit of one operation shows (the test is not vacuous): the
    reference engine's rates one ulp off, and the compiled engine on port capacities one
    ulp off."""
    orig = FluidNetwork._fair_rates
    monkeypatch.setattr(FluidNetwork, "_fair_rates",
                        lambda self, w, c: orig(self, w, c) * (1 + 2 ** -52))
    differ, differ_c = 0, 0
    for seed in range(10):
        net = random_network(np.random.default_rng(seed))
        plain = copy.deepcopy(net)
        plain.__class__ = PlainNetwork
        ref = copy.deepcopy(net)
        ref.engine = "reference"
        differ += not curves_equal(ref.run(), plain.run())
        net.caps[:-1] *= 1 + 2 ** -52
        differ_c += not curves_equal(net.run(), plain.run())
    assert differ and differ_c


def test_networks_sharing_rates_equal_the_plain_algorithm():
    """Like networks (a system's passes) share one RateMemo (reference engine): still bit
    for bit."""
    from moehub.cosim.network import RateMemo
    memo = RateMemo()
    for seed in range(10):
        base = random_network(np.random.default_rng(seed))
        for k in range(3):                  # same structure, the injections shifted a little
            net = copy.deepcopy(base)
            for f in net.flows:
                f.impulses[:] = [(t + 0.5 * k * (i % 2), b) for i, (t, b) in enumerate(f.impulses)]
            plain = copy.deepcopy(net)
            plain.__class__ = PlainNetwork
            net.engine, net.memo = "reference", memo
            assert curves_equal(net.run(), plain.run()), f"seed {seed} pass {k}"
    assert any(memo.tables.values())
