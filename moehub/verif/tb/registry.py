"""The hub testbench's tests, by feature set: which suites and tests apply to a hub, and
the cocotb tests of one run.

:data:`SUITES` lists the suites (:mod:`moehub.verif.tb.library`); a suite applies to a hub
whose features include its ``requires`` and none of its ``excludes``. The pytest side asks
:func:`test_names` what a config runs; the testbench's entry module
(:mod:`moehub.verif.tb.hub`) asks :func:`cocotb_tests` for the cocotb tests of its run --
only those that apply are made, so a test written for another feature set is not collected
on this hub (rather than skipping itself when it runs).
"""
from __future__ import annotations

from typing import Iterable, Optional

from .context import TbContext, features_of
from .library import HubTests, TestSpec
from .suite_combined import (MulticastCountTests, MulticastPagedCountTests, MulticastPagedTests,
                             PagedCountTests)
from .suite_counts import CountTests
from .suite_multicast import MulticastTests
from .suite_paged import PagedTests
from .suite_rules import RuleTests

#: every suite, in the order a run takes them
SUITES: tuple = (RuleTests, CountTests, PagedTests, MulticastTests, PagedCountTests,
                 MulticastCountTests, MulticastPagedTests, MulticastPagedCountTests)


def applicable(features: Iterable[str]) -> list:
    """The suites that apply to a hub with ``features``."""
    return [s for s in SUITES if s.applies(frozenset(features))]


def all_tests() -> dict:
    """``{test name: suite}`` of every test of every suite (names are unique)."""
    out: dict = {}
    for suite in SUITES:
        for name, _ in suite.own_tests():
            if name in out:
                raise RuntimeError(f"test {name} is in {out[name].__name__} and {suite.__name__}")
            out[name] = suite
    return out


def test_names(features: Iterable[str], *, random: Optional[bool] = None,
               own: bool = False) -> list[str]:
    """The tests a hub with ``features`` runs, in order. ``random``: only the
    constrained-random tests (True) or only the others (False); ``own``: only the tests
    written for exactly this feature set (not those of suites that merely tolerate it, as
    the protocol-v1 rules tolerate count packets)."""
    features = frozenset(features)
    return [name for suite in applicable(features) if not own or suite.requires == features
            for name, spec in suite.own_tests() if random is None or spec.random == random]


def cocotb_tests(ctx: TbContext, module: str) -> dict:
    """``{name: cocotb Test}`` of every test that applies to ``ctx``'s hub, each running on
    a fresh suite instance of ``ctx``, its limit of simulated time scaled by
    ``ctx.timeout_scale``."""
    from cocotb._decorators import Test

    out = {}
    for suite in applicable(features_of(ctx.cfg)):
        for name, spec in suite.own_tests():
            out[name] = Test(func=_runner(suite, name, ctx), args=(), kwargs={}, name=name,
                             module=module, doc=getattr(suite, name).__doc__,
                             timeout=(round(spec.ms * ctx.timeout_scale, 6), "ms"),
                             expect_fail=False, expect_error=(), skip=False, stage=0)
    return out


def _runner(suite: type, name: str, ctx: TbContext):
    async def run(dut):
        await getattr(suite(ctx), name)(dut)
    run.__name__ = run.__qualname__ = name
    return run


__all__ = ["SUITES", "HubTests", "TestSpec", "all_tests", "applicable", "cocotb_tests", "test_names"]
