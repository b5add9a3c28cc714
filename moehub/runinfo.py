"""What produced a results folder: the ``run.json`` written next to every result.

A number in a results folder is only as good as what we know about the run that made it:
the command line, the code (moehub version and, in a checkout, ``git describe --always
--dirty``), the tool versions, when it started and how long it took (wall and CPU time).
Pure Python; versions are read from the installed package metadata, so nothing is
imported to learn them (``moehub cosim`` stays free of Amaranth).
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Optional

#: the package folder (``moehub/`` in a checkout, whose root holds it and the tests)
PACKAGE_DIR = Path(__file__).resolve().parent

_RUN = {"argv": None, "start": time.time(), "mono": time.monotonic()}


def begin(argv: list) -> None:
    """Mark the start of a command (``moehub`` calls this first, with its argv)."""
    _RUN.update(argv=list(argv), start=time.time(), mono=time.monotonic())


def version() -> str:
    from . import __version__
    return __version__


@functools.lru_cache(maxsize=1)
def git_describe() -> Optional[str]:
    """``git describe --always --dirty`` of the checkout the package runs from, or None when
    it is not a checkout (an installed copy) -- never the commit of an unrelated repository
    that happens to contain the virtual environment."""
    try:
        top = subprocess.run(["git", "-C", str(PACKAGE_DIR), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=10)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != PACKAGE_DIR.parent:
            return None
        out = subprocess.run(["git", "-C", str(PACKAGE_DIR), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def version_string() -> str:
    """``moehub 0.1.0 (git 1a2b3c4-dirty)``: what ``moehub --version`` prints."""
    g = git_describe()
    return f"moehub {version()}" + (f" (git {g})" if g else "")


def _dist_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cpu_seconds() -> dict:
    """User + system CPU seconds of this process and of its finished sub-processes
    (Icarus, Yosys, OpenSTA run as children and are waited for)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    s, c = own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime
    return {"cpu_s": round(s + c, 3), "cpu_self_s": round(s, 3), "cpu_children_s": round(c, 3)}


def record(**extra) -> dict:
    """The content of ``run.json``: command, code and tool versions, start time, wall and
    CPU time up to now; ``extra`` keys are added (e.g. the folder's name)."""
    argv = _RUN["argv"] if _RUN["argv"] is not None else [Path(sys.argv[0]).name, *sys.argv[1:]]
    started = datetime.fromtimestamp(_RUN["start"], timezone.utc).astimezone()
    return {
        "command": " ".join(argv),
        "argv": argv,
        "cwd": os.getcwd(),
        "moehub_version": version(),
        "git": git_describe(),
        "python": platform.python_version(),
        "amaranth": _dist_version("amaranth"),
        "numpy": _dist_version("numpy"),
        "cocotb": _dist_version("cocotb"),
        "platform": platform.platform(),
        "started": started.isoformat(timespec="seconds"),
        "wall_s": round(time.monotonic() - _RUN["mono"], 3),
        **cpu_seconds(),
        **extra,
    }


def git_extract(root: Path, commit: str, dest: Path) -> Path:
    """The files of ``commit`` of the checkout ``root`` written into the existing folder
    ``dest`` (``git archive | tar -x``): a snapshot of a revision that does not move while
    the working tree is edited. Raises RuntimeError with tar's message when it fails."""
    archive = subprocess.Popen(["git", "-C", str(root), "archive", commit], stdout=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True)
    archive.stdout.close()
    if archive.wait() != 0 or tar.returncode != 0:
        raise RuntimeError(f"git archive {commit} | tar -x failed: {tar.stderr.decode(errors='replace')}")
    return Path(dest)


def rtl_sources(pkg: Path = PACKAGE_DIR) -> list:
    """The files the hub's hardware is made from: ``rtl/**/*.py`` and ``spec/*.py`` (the
    contract: formats, registers, timing): what :mod:`moehub.rtl.gen` builds the hub from."""
    pkg = Path(pkg)
    return sorted(pkg.glob("rtl/**/*.py")) + sorted(pkg.glob("spec/*.py"))


def rtl_sources_hash(pkg: Path = PACKAGE_DIR) -> str:
    """SHA-256 over the RTL sources, each as its path under the package and its bytes (a
    renamed or moved file changes the hash too)."""
    pkg = Path(pkg)
    h = hashlib.sha256()
    for p in rtl_sources(pkg):
        h.update(p.relative_to(pkg).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def load_avg() -> list:
    """The 1-, 5- and 15-minute load averages now (other work stretches wall times)."""
    return [round(x, 2) for x in os.getloadavg()]


def iso(ts: float) -> str:
    """A POSIX time as ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")
