"""Build and run the hub's cocotb testbenches on Icarus (one helper around the runner).

``cocotb_tools.runner`` is still marked experimental, so every use goes through
:func:`run_hub_cocotb`. The Verilog is generated for the hub config (or given, e.g. a
gate-level netlist), built once per (config, tag) under ``sim/<config>-<tag>/`` in the
build folder (``$MOEHUB_BUILD`` or ``./build``: :mod:`moehub.paths`). The cocotb module
(a testbench of ``moehub.verif`` such as ``tb_hub``, or a dotted module name) is imported
from the installed package and reads its configuration from the environment
(``MOEHUB_CONFIG``, ``MOEHUB_SEED``, ``MOEHUB_SEEDS``).

Progress (:mod:`moehub.progress`): the build and the simulation are stages; a testbench
may append ``<cycle> <done> <total>`` lines to the file named by ``MOEHUB_PROGRESS``
(``tb_demo`` does, every few hundred cycles), which is followed from here, since the
simulator's own output goes to its log file. Ctrl-C: the runner's ``subprocess.run``
kills the simulator before the KeyboardInterrupt reaches the caller.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Optional, Sequence

from .. import progress
from ..config.schema import load_hub_config
from ..paths import ENV, build_root
from ..rtl.gen import TOP, convert


def run_hub_cocotb(config: str, testcases: Optional[Sequence[str]] = None, *,
                   module: str = "tb_hub", verilog: Optional[Sequence[Path]] = None,
                   tag: str = "rtl", seed: int = 1, seeds: int = 1,
                   extra_env: Optional[dict] = None, waves: bool = False,
                   build_args: Sequence[str] = (), label: Optional[str] = None) -> dict:
    """Run cocotb tests of ``module`` against the hub of ``config``; ``label`` names the
    run in progress lines.

    Returns ``{"passed": n, "failed": n, "failures": [names], "results": path,
    "waves": the FST path or None}``.
    """
    from cocotb_tools.runner import get_runner

    cfg = load_hub_config(config)
    root = build_root()
    build_dir = root / "sim" / f"{cfg.name}-{tag}"
    label = label or f"cocotb {module} [{cfg.name}]"
    runner = get_runner("icarus")
    with progress.stage(f"{label}: build (Amaranth -> Verilog, Icarus)", heartbeat=True):
        if verilog is None:
            verilog = [convert(cfg, out_dir=root / "rtl" / cfg.name)]
        runner.build(sources=[str(v) for v in verilog], hdl_toplevel=TOP, build_dir=build_dir,
                     timescale=("1ns", "1ps"), waves=waves, build_args=list(build_args),
                     always=True, log_file=build_dir / "build.log")
    # The simulator's Python imports the test module as part of the installed package
    # (the runner passes this Python's sys.path on as PYTHONPATH); the simulation runs in
    # build_dir, so the build folder is handed on as an absolute path.
    prog = build_dir / f"progress-{module}.txt"
    prog.unlink(missing_ok=True)
    env = {"MOEHUB_CONFIG": cfg.name, "MOEHUB_SEED": str(seed), "MOEHUB_SEEDS": str(seeds),
           ENV: str(root), "MOEHUB_PROGRESS": str(prog)}
    env.update(extra_env or {})
    results = build_dir / f"results-{module}-{'-'.join(testcases or ['all'])[:80]}.xml"
    results.unlink(missing_ok=True)
    log = build_dir / f"sim-{module}.log"
    progress.debug(f"{label}: simulation log {log}")
    with progress.stage(f"{label}: simulate", unit="packets", heartbeat=True) as st, \
            progress.Follower(prog, lambda lines: _show(st, lines)):
        try:
            runner.test(test_module=_qualified(module), hdl_toplevel=TOP, build_dir=build_dir,
                        test_dir=build_dir, testcase=list(testcases) if testcases else None,
                        extra_env=env, waves=waves, results_xml=str(results),
                        timescale=("1ns", "1ps"), log_file=log)
        except (SystemExit, RuntimeError):
            pass  # the runner exits (or raises) when a test fails; the results file says which
    if not results.exists():
        raise RuntimeError(f"cocotb produced no results; see {log}")
    out = parse_results(results)
    out["waves"] = (build_dir / f"{TOP}.fst") if waves else None
    return out


def _show(stage, lines: list) -> None:
    """The last ``<cycle> <done> <total>`` line of a testbench's progress file."""
    cycle, done, total = (int(x) for x in lines[-1].split()[:3])
    stage.total = total
    stage.update(done, cycles=cycle)


def _qualified(module: str) -> str:
    """``tb_hub`` -> ``moehub.verif.tb_hub``: the testbenches are modules of the package."""
    return module if "." in module else f"{__package__}.{module}"


def parse_results(path: Path) -> dict:
    tree = ET.parse(path)
    passed, failures = 0, []
    for case in tree.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failures.append(case.get("name"))
        elif case.find("skipped") is None:
            passed += 1
    return {"passed": passed, "failed": len(failures), "failures": failures, "results": path}
