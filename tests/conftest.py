"""Test-session settings shared by every test file.

Icarus is the reference simulator of the test suite: RTL runs that do not name a
simulator use it (``MOEHUB_SIM=icarus``), so the fast set does not pay a Verilator build
per config and schedule family; the Verilator tests name ``sim="verilator"`` themselves
(tests/test_sim_verilator.py, and the slow set's regression on both simulators). Set
``MOEHUB_SIM`` before pytest to run every other RTL test on another simulator.

``make test`` runs the files on every core with pytest-xdist (``-n auto --dist loadfile``:
one worker takes a whole file, so a module's fixtures run once). Tests that write to the
build folder (RTL, simulation builds, players) would collide across workers on the same
``build/sim/<config>-<tag>``; each worker therefore gets a build folder of its own,
``<build>/test-<worker>`` (``<build>`` is ``$MOEHUB_BUILD`` or ``./build``), set before
any test runs. A test that sets ``MOEHUB_BUILD`` itself (monkeypatch) still wins.
"""
import os
from pathlib import Path

import pytest

from moehub.paths import DEFAULT, ENV
from moehub.verif import sim

os.environ.setdefault(sim.ENV_SIM, "icarus")


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        base = Path(os.environ.get(ENV) or Path.cwd() / DEFAULT)
        os.environ[ENV] = str((base / f"test-{worker}").absolute())


def needs(simulator: str):
    """A skip mark naming what is missing (and how to get it) when ``simulator`` cannot run."""
    why = sim.missing(simulator)
    return pytest.mark.skipif(why is not None, reason=why or "")


def on(simulator: str, *values, slow: bool = False, kill: bool = False):
    """A ``pytest.param`` for one simulator, skipped when it is missing; ``slow``: in the
    slow set only; ``kill``: in the mutation kill suite (verif/mutate.py) even when slow."""
    marks = [needs(simulator)] + ([pytest.mark.slow] if slow else []) + ([pytest.mark.mutation] if kill else [])
    return pytest.param(simulator, *values, marks=marks, id="-".join(map(str, (simulator, *values))))
