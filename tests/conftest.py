"""Test-session settings shared by every test file.

Icarus is the reference simulator of the test suite: RTL runs that do not name a
simulator use it (``MOEHUB_SIM=icarus``), so the fast set does not pay a Verilator build
per config and schedule family; the Verilator tests name ``sim="verilator"`` themselves
(tests/test_sim_verilator.py, and the slow set's regression on both simulators). Set
``MOEHUB_SIM`` before pytest to run every other RTL test on another simulator.
"""
import os

import pytest

from moehub.verif import sim

os.environ.setdefault(sim.ENV_SIM, "icarus")


def needs(simulator: str):
    """A skip mark naming what is missing (and how to get it) when ``simulator`` cannot run."""
    why = sim.missing(simulator)
    return pytest.mark.skipif(why is not None, reason=why or "")


def on(simulator: str, *values, slow: bool = False):
    """A ``pytest.param`` for one simulator, skipped when it is missing; ``slow``: in the
    slow set only."""
    marks = [needs(simulator)] + ([pytest.mark.slow] if slow else [])
    return pytest.param(simulator, *values, marks=marks, id="-".join(map(str, (simulator, *values))))
