"""Test-session set-up shared by every test file.

``make test`` runs the files on every core with pytest-xdist (``-n auto --dist loadfile``:
one worker takes a whole file, so a module's fixtures run once). Tests that write to the
build folder (RTL, simulation builds, players) would collide across workers on the same
``build/sim/<config>-<tag>``; each worker therefore gets a build folder of its own,
``<build>/test-<worker>`` (``<build>`` is ``$MOEHUB_BUILD`` or ``./build``), set before
any test runs. A test that sets ``MOEHUB_BUILD`` itself (monkeypatch) still wins.
"""
import os
from pathlib import Path

from moehub.paths import DEFAULT, ENV


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        base = Path(os.environ.get(ENV) or Path.cwd() / DEFAULT)
        os.environ[ENV] = str((base / f"test-{worker}").absolute())
