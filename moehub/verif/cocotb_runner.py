"""Build and run cocotb testbenches of the hub on Icarus or Verilator (one helper around
cocotb's runner; not the design-space explorer's runner, :mod:`moehub.explore.runner`).

``cocotb_tools.runner`` is still marked experimental, so every use goes through
:func:`run_hub_cocotb` (and :mod:`moehub.verif.sim`). The Verilog is generated for the hub
config (or given, e.g. a gate-level netlist) and built once per content (cached under
``sim/builds/``: runs of the same netlist -- other tests, other seeds -- share the build);
each (config, tag) runs in ``sim/<config>-<tag>[-verilator]/`` in the build folder
(``$MOEHUB_BUILD`` or ``./build``: :mod:`moehub.paths`). The cocotb module -- by default
the hub testbench, :mod:`moehub.verif.tb.hub`, which collects the tests that apply to the
hub's features; ``tb_demo`` and other modules of ``moehub.verif``, or any dotted module
name -- is imported from the installed package. The hub testbench reads its run from one
:class:`~moehub.verif.tb.context.TbContext` (config, seeds, ``settings``, and the
``MOEHUB_TIMEOUT_SCALE`` of this process's environment, which the mutation tool sets);
other modules read ``MOEHUB_CONFIG`` and ``MOEHUB_SEED``.

A component other than the hub (``design``: e.g. the relay's control path,
:class:`moehub.rtl.relay.hub.RelayControl`, with its testbench :mod:`moehub.verif.tb.relay`)
runs the same way: its Verilog is generated under the hub's top name
(:func:`moehub.rtl.gen.component_verilog`), and a config that is no file (a
``HubConfig``, e.g. a relay config made with ``replace``) is written as YAML into the run
folder (``config.yaml``) and reaches the testbench as that file, as a file config does.

Progress (:mod:`moehub.progress`): the build and the simulation are stages; a testbench
may append ``<cycle> <done> <total>`` lines to the file named by ``MOEHUB_PROGRESS``
(``tb_demo`` does, every few hundred cycles), which is followed from here, since the
simulator's own output goes to its log file. Ctrl-C: the runner's ``subprocess.run``
kills the simulator before the KeyboardInterrupt reaches the caller.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import yaml

from .. import progress
from ..spec.config import HubConfig, load_hub_config
from ..paths import ENV, build_root
from ..rtl.gen import QUICK_PASSES, SIM_PASSES, TOP, component_verilog, convert
from . import sim as simulators
from .sim import parse_results  # noqa: F401  (part of this module's API)
from .tb.context import TbContext

#: the hub testbench's cocotb module
HUB_TB = "moehub.verif.tb.hub"


def run_hub_cocotb(config: Union[str, HubConfig], testcases: Optional[Sequence[str]] = None, *,
                   module: str = HUB_TB, verilog: Optional[Sequence[Path]] = None,
                   tag: str = "rtl", seed: int = 1, seeds: int = 1,
                   extra_env: Optional[dict] = None, waves: bool = False,
                   build_args: Sequence[str] = (), label: Optional[str] = None,
                   sim: Optional[str] = None, quick: bool = False,
                   settings: Optional[dict] = None,
                   design: Optional[Callable[[HubConfig], Any]] = None) -> dict:
    """Run cocotb tests of ``module`` (all of them when ``testcases`` is None) against the
    hub of ``config``; ``label`` names the run in progress lines. ``settings``: the hub
    testbench's run settings (:class:`~moehub.verif.tb.context.TbContext` fields, e.g.
    ``knob_packets``). ``sim``: "icarus" or "verilator" (default ``$MOEHUB_SIM``, else
    Icarus, the reference: :func:`moehub.verif.sim.choose`). ``quick``: the quick netlist
    (:data:`moehub.rtl.gen.QUICK_PASSES`: generated faster, simulated slower; for short
    directed tests).

    ``config``: a shipped config's name, a YAML file, or a :class:`HubConfig` (written to
    ``config.yaml`` in the run folder for the testbench). ``design``: simulate
    ``design(cfg)`` instead of the hub (a component class such as
    :class:`~moehub.rtl.relay.hub.RelayControl`, or any function of the config returning
    a component), its Verilog generated into ``rtl/<config>-<tag>/`` in the build folder
    (:func:`moehub.rtl.gen.component_verilog`; ignored when ``verilog`` is given).

    Returns ``{"passed": n, "failed": n, "failures": [names], "results": path,
    "waves": the waveform path (FST; VCD from Verilator) or None, "sim": the simulator}``.
    """
    sim = simulators.choose(sim, prefer="icarus")
    cfg = config if isinstance(config, HubConfig) else load_hub_config(config)
    root = build_root()
    run_dir = root / "sim" / (f"{cfg.name}-{tag}" + ("" if sim == "icarus" else f"-{sim}"))
    if isinstance(config, HubConfig):
        given = str(write_config(cfg, run_dir / "config.yaml"))
    else:
        # (a config given as a file -- e.g. tiny with a v2 feature -- reaches the testbench as
        # that file: its name alone would load the shipped config of that name)
        given = str(Path(config).resolve()) if Path(config).suffix in (".yaml", ".yml") else cfg.name
    ctx = TbContext(given, seed=seed, seeds=seeds,
                    timeout_scale=float(os.environ.get("MOEHUB_TIMEOUT_SCALE", "1")),
                    **(settings or {}))
    label = label or f"cocotb {module.rsplit('.', 1)[-1]} [{cfg.name}]"
    with progress.stage(f"{label}: build (Amaranth -> Verilog, {simulators.NAMES[sim]})",
                        heartbeat=True):
        if verilog is None and design is not None:
            verilog = [component_verilog(design(cfg), root / "rtl" / f"{cfg.name}-{tag}",
                                         passes=QUICK_PASSES if quick else SIM_PASSES)]
        elif verilog is None:
            verilog = [convert(cfg, out_dir=root / "rtl" / (cfg.name + ("-quick" if quick else "")),
                               passes=QUICK_PASSES if quick else SIM_PASSES)]
        build = simulators.build(sim, verilog, TOP, waves=waves, build_args=build_args)
    # The simulator's Python imports the test module as part of the installed package
    # (the runner passes this Python's sys.path on as PYTHONPATH); the simulation runs in
    # run_dir, so the build folder is handed on as an absolute path.
    run_dir.mkdir(parents=True, exist_ok=True)
    short = module.rsplit(".", 1)[-1]
    prog = run_dir / f"progress-{short}.txt"
    prog.unlink(missing_ok=True)
    env = {"MOEHUB_CONFIG": given, "MOEHUB_SEED": str(seed), "MOEHUB_SEEDS": str(seeds),
           ENV: str(root), "MOEHUB_PROGRESS": str(prog), simulators.ENV_SIM: sim, **ctx.to_env()}
    env.update(extra_env or {})
    results = run_dir / f"results-{short}-{'-'.join(testcases or ['all'])[:80]}.xml"
    results.unlink(missing_ok=True)
    log = run_dir / f"sim-{short}.log"
    progress.debug(f"{label}: simulation log {log}")
    with progress.stage(f"{label}: simulate", unit="packets", heartbeat=True) as st, \
            progress.Follower(prog, lambda lines: _show(st, lines)):
        wave = simulators.test(sim, build, TOP, _qualified(module), run_dir,
                              testcases=testcases, extra_env=env, waves=waves,
                              results=results, log=log)
    if not results.exists():
        raise RuntimeError(f"cocotb produced no results; see {log}")
    out = parse_results(results)
    out["waves"], out["sim"] = wave, sim
    return out


def write_config(cfg: HubConfig, path: Path) -> Path:
    """``cfg`` as a YAML file that :func:`~moehub.spec.config.load_hub_config` reads
    back to an equal config; returns its absolute path."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    return path


def _show(stage, lines: list) -> None:
    """The last ``<cycle> <done> <total>`` line of a testbench's progress file."""
    cycle, done, total = (int(x) for x in lines[-1].split()[:3])
    stage.total = total
    stage.update(done, cycles=cycle)


def _qualified(module: str) -> str:
    """``tb_demo`` -> ``moehub.verif.tb_demo``: a bare name is a module of this package."""
    return module if "." in module else f"{__package__}.{module}"
