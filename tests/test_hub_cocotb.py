"""The hub testbench (moehub/verif/tb/) on every hub config: pytest parametrized over the
configs -- the shipped protocol-v1 configs and the protocol-v2 feature hubs of
tests/data/ -- each running the cocotb tests its features collect (moehub.verif.tb.registry).

Fast set: every test of the protocol-v1 rules once on tiny, on Verilator (on Icarus, the
reference, where Verilator is missing); on two feature hubs that together hold every
protocol-v2 feature (FAST_DIRECTED), on Icarus, the directed tests written for their
feature sets (the quick netlist: short tests, whose generation it saves more than its
simulation costs). Slow set: every config on both simulators, the other feature hubs'
directed tests, the constrained-random tests over many seeds, the coverage runs, and the
page ring's other shapes.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from conftest import needs, on
from moehub.spec.config import HUB_CONFIGS, load_hub_config
from moehub.verif import sim
from moehub.verif.coverage_run import V1_RANDOM
from moehub.verif.tb.context import features_of, feature_label
from moehub.verif.tb import registry

DATA = Path(__file__).parent / "data"

#: the protocol-v2 feature hubs: tiny with each combination of the features
FEATURE_HUBS = ("tiny-counts", "tiny-paged", "tiny-multicast", "tiny-paged-counts",
                "tiny-multicast-counts", "tiny-multicast-paged", "tiny-multicast-paged-counts")


def config_path(config: str) -> str:
    """A shipped config's name as is; a feature hub's tests/data file."""
    return str(DATA / f"{config}.yaml") if (DATA / f"{config}.yaml").exists() else config


def features(config: str) -> frozenset:
    return features_of(load_hub_config(config_path(config)))


def _run(config, testcases=None, **kw):
    from moehub.verif.cocotb_runner import run_hub_cocotb
    res = run_hub_cocotb(config_path(config), testcases, **kw)
    assert res["failed"] == 0, f"{config}: failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, f"{config}: no cocotb test ran"
    if testcases is not None:
        assert res["passed"] == len(testcases), f"{config}: expected {len(testcases)} tests, {res['passed']} passed"
    return res


# ---------------------------------------------------------------------------- every test once
#: The fast set runs tiny on Verilator, or on Icarus where Verilator is missing; the default
#: config's RTL runs in the fast set through the co-simulation's traffic
#: (tests/test_cosim_rtl.py). The slow set adds tiny on Icarus (which stays in the
#: mutation kill suite, ``kill``), every other config on both simulators (the default
#: config's regression: a ~45 s Verilator build and ~40 s of tests, about 4 minutes on
#: Icarus), and the count-packet hub on Icarus: the protocol-v1 rules on a hub with the
#: feature (no count packet sent: it behaves as one without) and its own tests, random
#: ones included.
FAST_RUNS = {("verilator" if sim.missing("verilator") is None else "icarus", "tiny")}
REGRESSION_RUNS = [on(s, c, slow=(s, c) not in FAST_RUNS, kill=(s, c) == ("icarus", "tiny"))
                   for s in ("icarus", "verilator") for c in HUB_CONFIGS] + [on("icarus", "tiny-counts", slow=True)]


@pytest.mark.parametrize("sim, config", REGRESSION_RUNS)
def test_hub_regression(sim, config):
    """Every test that applies to the config's features (directed, random at one seed,
    performance), once: the testbench collects them itself, and they are the registry's."""
    res = _run(config, seed=1, sim=sim)
    assert res["sim"] == sim
    names = registry.test_names(features(config))
    assert res["passed"] == len(names), f"expected {len(names)} tests, {res['passed']} passed"


# ---------------------------------------------------------------------------- the features
@dataclass(frozen=True)
class Directed:
    """The directed tests of a feature hub (``tests``: all of its own, or these)."""
    config: str
    tests: Optional[tuple] = None
    quick: bool = True
    slow: bool = False
    kill: bool = False

    def names(self) -> list:
        return list(self.tests) if self.tests else registry.test_names(features(self.config), random=False, own=True)

    def param(self):
        return pytest.param(self, marks=[needs("icarus")] + ([pytest.mark.slow] if self.slow else [])
                            + ([pytest.mark.mutation] if self.kill else []),
                            id=self.config + ("" if self.tests is None else "-some"))


#: the feature hubs whose directed tests run in the fast set: paging and multicast in one
#: hub, through a whole hub; the other combinations (their directed tests here, their
#: random tests over many seeds below) are the slow set's -- each feature's units have
#: their own fast tests (tests/test_rtl_v2_units.py, tests/test_rtl_multicast_units.py),
#: and the count unit's whole-hub tests (13 directed, a 24 s build and run from a clean
#: checkout) are in the mutation kill suite with the slow set
FAST_DIRECTED = ("tiny-multicast-paged",)
#: the feature hubs whose directed tests are in the mutation kill suite (verif/mutate.py
#: ``KILL_HUBS``): each feature alone (code only that hub builds: the page gate of a unicast
#: paged hub, the multicast allocator of an unpaged one) and all three together (the paged
#: arena with multicast, the multicast count limit)
KILL_DIRECTED = ("tiny-counts", "tiny-paged", "tiny-multicast", "tiny-multicast-paged-counts")
DIRECTED = [Directed(c, slow=c not in FAST_DIRECTED, kill=c in KILL_DIRECTED) for c in FEATURE_HUBS] + [
    # the page ring in banked memories (rtl/paging/ring.py), read a cycle ahead, on a pool
    # of 36 pages: the paged tests that take any pool (the others script a 6-page pool's
    # exhaustion)
    Directed("tiny-paged-banked", ("test_pages_taken_at_tile_boundaries", "test_page_free_and_reuse"),
             quick=False, slow=True),
    # ... and the multicast arena's (one take a cycle; its banks' reads registered before
    # the arena's place select), with all three features, on a pool of 36 pages
    Directed("tiny-multicast-paged-counts-banked",
             ("test_row_refused_for_counts_takes_no_arena_row", "test_random_multicast_paged_counts",
              "test_random_multicast_paged_counts_with_errors"),
             quick=False, slow=True)]


@pytest.mark.parametrize("run", [d.param() for d in DIRECTED])
def test_hub_directed(run):
    """The directed tests written for the hub's feature set (its random ones: below)."""
    names = run.names()
    assert names, f"{run.config}: no directed test for {feature_label(features(run.config))}"
    _run(run.config, names, sim="icarus", quick=run.quick, tag=f"directed{'-quick' * run.quick}")


# ---------------------------------------------------------------------------- many seeds
@dataclass(frozen=True)
class Seeds:
    """The constrained-random tests of ``config`` (``tests``, or all of those written for its
    feature set), from ``base_seed`` over ``seeds`` consecutive seeds each, on ``sim``."""
    sim: str
    config: str
    base_seed: int
    seeds: int
    tests: Optional[tuple] = None

    def names(self) -> list:
        return list(self.tests) if self.tests else registry.test_names(features(self.config), random=True, own=True)

    def param(self):
        return pytest.param(self, marks=[needs(self.sim), pytest.mark.slow],
                            id=f"{self.base_seed}-{self.sim}-{self.config}")


#: the protocol-v1 rules' two seeded random tests (the knob test's many layers are the
#: coverage runs below)
RANDOM_RUNS = [Seeds(s, c, b, 10, V1_RANDOM) for b in (11, 23, 37) for s in ("icarus", "verilator")
               for c in HUB_CONFIGS]
RANDOM_RUNS += [Seeds("icarus", c, b, 20) for c in FEATURE_HUBS for b in (11, 23)]
RANDOM_RUNS += [Seeds("icarus", "tiny-paged-banked", 5, 5),
                # one expert whose tiles are at least as long as the lanes: at most one page
                # is taken a cycle, so the page supply serves one take and reads a 2-entry
                # window (rtl/layouts.py ``page_takes``; the fast set checks it in its unit
                # test, tests/test_rtl_v2_units.py)
                Seeds("icarus", "tiny-paged-one-expert", 31, 10)]


@pytest.mark.parametrize("run", [r.param() for r in RANDOM_RUNS])
def test_hub_random_many_seeds(run):
    """The random tests over many consecutive seeds each (the failing seed is in the
    assertion message and in the log)."""
    names = run.names()
    assert names, f"{run.config}: no random test"
    _run(run.config, names, seed=run.base_seed, seeds=run.seeds, tag=f"slow{run.base_seed}", sim=run.sim)


# ---------------------------------------------------------------------------- coverage
@pytest.mark.slow
@needs("icarus")
@pytest.mark.parametrize("config", HUB_CONFIGS)
def test_hub_coverage(config):
    """The coverage run (moehub.verif.coverage_run.COVERAGE_RUNS; ``moehub coverage``) hits
    >= COVERAGE_GOAL % of the functional coverage bins (verif/coverage.py); its report and
    summary go to <build>/coverage/. On Icarus: the queue and watchdog bins read
    hub-internal signals a ports-only Verilator build hides."""
    from moehub.verif.coverage_run import COVERAGE_GOAL, run_coverage
    s = run_coverage(config, sim="icarus")
    assert s["percent"] >= COVERAGE_GOAL, \
        f"{config}: coverage {s['hit']}/{s['bins']} = {s['percent']} % < {COVERAGE_GOAL} % " \
        f"(missed: {[(g, d['missed']) for g, d in s['groups'].items() if d['missed']]})"


# ---------------------------------------------------------------------------- the registry
def test_tests_are_collected_by_features():
    """Each feature hub collects exactly the suites written for its features (and the
    protocol-v1 rules where they apply: on tiny and on the count-packet hub), so a test of
    another feature set is never collected there; every test runs on some config here."""
    from moehub.verif.tb.context import COUNTS, MULTICAST, PAGED
    want = {"tiny": {"RuleTests"}, "tiny-counts": {"RuleTests", "CountTests"},
            "tiny-paged": {"PagedTests"}, "tiny-multicast": {"MulticastTests"},
            "tiny-paged-counts": {"PagedCountTests"}, "tiny-multicast-counts": {"MulticastCountTests"},
            "tiny-multicast-paged": {"MulticastPagedTests"},
            "tiny-multicast-paged-counts": {"MulticastPagedCountTests"}}
    for config, suites in want.items():
        got = {s.__name__ for s in registry.applicable(features(config))}
        assert got == suites, f"{config}: suites {got}, expected {suites}"
    on_unicast = set(registry.test_names({COUNTS, PAGED}))
    assert "test_random_multicast" not in on_unicast and "test_random_paged_counts" in on_unicast
    assert "test_single_row" not in registry.test_names({MULTICAST})
    ran = {t for p in REGRESSION_RUNS for t in registry.test_names(features(p.values[1]))}
    ran |= {t for d in DIRECTED for t in d.names()} | {t for r in RANDOM_RUNS for t in r.names()}
    assert ran == set(registry.all_tests()), f"never run: {set(registry.all_tests()) - ran}"


def test_context_crosses_to_the_simulator_and_rejects_bad_settings():
    """The run's context survives the environment variable; bad values and unknown keys
    are errors naming them."""
    from moehub.verif.tb.context import TbContext
    ctx = TbContext(config_path("tiny-paged"), seed=7, seeds=3, knob_packets=50, tile_sizes="all")
    back = TbContext.from_env(ctx.to_env())
    assert back == ctx and back.cfg.paged and back.features == features("tiny-paged")
    for bad in (dict(seeds=0), dict(tile_sizes="some"), dict(timeout_scale=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ctx.with_(**bad)
    with pytest.raises(ValueError, match="knob_packet"):
        ctx.with_(knob_packet=5)
    with pytest.raises(RuntimeError, match="MOEHUB_TB"):
        TbContext.from_env({})
