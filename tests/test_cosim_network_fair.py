"""The compiled progressive filling (``network_kernels.fair_rates``, with its port -> wanted
flows index kept across calls) against the numpy one (``FluidNetwork._fair_rates``, the
reference), to the bit, on random instances: ties in port capacities and in flow caps,
capped flows, flows through one, two and three ports (a port in two roles of one flow),
zero-capacity ports; and with the index carried through many calls whose wanted sets
change, as the event loop keeps it."""
import numpy as np
import pytest

from moehub.cosim import network_kernels as K
from moehub.cosim.network import FluidNetwork


def random_instance(rng):
    """A network with its per-run arrays, and one call's wanted flows and caps."""
    P = int(rng.integers(2, 14))
    caps = rng.choice([0.0, 50e3, 50e3, 100e3, 100e3, 400e3, 1e15], P)
    if not caps.any():
        caps[0] = 100e3
    net = FluidNetwork(caps)
    F = int(rng.integers(1, 80))
    for _ in range(F):
        p0 = int(rng.integers(0, P))
        p1 = None if rng.random() < 0.2 else int(rng.integers(0, P))      # may equal p0
        p2 = int(rng.integers(0, P)) if rng.random() < 0.3 else None
        net.add_flow(p0, p1, 0.0, p2=p2)
    net._prepare()
    return net, *random_call(rng, F)


def random_call(rng, F):
    want = rng.random(F) < rng.choice([0.3, 0.8, 1.0])
    caps = rng.choice([np.inf, np.inf, np.inf, 20e3, 25e3, 50e3, 70e3, 150e3], F)
    caps = np.where(rng.random(F) < 0.1, rng.uniform(1e3, 200e3, F), caps)   # no tie
    return want, caps


def same(a, b) -> bool:
    return a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(300))
def test_compiled_filling_equals_the_numpy_one(seed):
    net, want, caps = random_instance(np.random.default_rng(seed))
    ref = net._fair_rates(want, caps)
    got = K.fair_rates_of(want, caps, net._ports, net.caps, net._tol, net.NONE)
    assert same(got, ref), f"seed {seed}: max difference {np.max(np.abs(got - ref))}"


def test_the_index_kept_across_calls_gives_the_same_rates():
    """One state through many calls, flows entering and leaving the index between them in
    random order (as the event loop does): every call equals the reference."""
    for seed in range(30):
        rng = np.random.default_rng(1000 + seed)
        net, _, _ = random_instance(rng)
        F, ports, none = len(net.flows), net._ports, net.NONE
        state = K.scratch(ports, len(net.caps), none)
        indexed = np.zeros(F, dtype=bool)
        for call in range(12):
            want, caps = random_call(rng, F)
            for f in rng.permutation(F):
                if want[f] != indexed[f]:
                    (K.index_add if want[f] else K.index_remove)(int(f), ports, none, state)
                    indexed[f] = want[f]
            idx = np.flatnonzero(want)
            order = idx[np.argsort(caps[idx], kind="stable")]
            rate = np.zeros(F)
            K.fair_rates(len(idx), order, caps, ports, net.caps, net._tol, none, rate, state)
            assert same(rate, net._fair_rates(want, caps)), f"seed {seed} call {call}"


def test_the_comparison_sees_a_wrong_rate():
    """Not vacuous: the reference with one flow's rate one ulp off differs."""
    net, want, caps = random_instance(np.random.default_rng(7))
    ref = net._fair_rates(want, caps)
    got = K.fair_rates_of(want, caps, net._ports, net.caps, net._tol, net.NONE)
    i = int(np.flatnonzero(ref)[0])
    ref[i] = np.nextafter(ref[i], np.inf)
    assert not same(got, ref)
