"""The coverage run of a hub config: every cocotb test once, the knob test over many
layers, every tile size, and -- where it is within Icarus' reach -- one expert's whole
region filled; its merged functional coverage and the run's time, as a summary
that ``moehub report --collect coverage`` turns into a record.

Why a command and not only the slow test: a coverage figure in the docs must come from a
run that wrote down what it ran (tests, layers, seeds), on which commit and RTL, how long
it took and at what load -- the slow test (``tests/test_hub_cocotb.py::test_hub_coverage``)
calls :func:`run_coverage` and asserts the goal, ``moehub coverage`` runs the same and
keeps the summary.

Each run writes ``<build>/coverage/run-<config>.json``: bins, bins hit, the percentage, the
missed bins per group, the run's settings (layers, packets per layer, whether the region
was filled), the cocotb tests run, the wall and CPU time (the simulator included), the
load before it, the hub it ran (its config and the RTL sources' hash; the collection adds
its RTLIL's digest, with which ``moehub report --recheck`` keeps the record current across
edits that move no gate of it) and the run record (command, commit, versions).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from .. import runinfo
from ..argcheck import UsageError, load_config_flag
from ..paths import build_root
from ..spec.config import HUB_CONFIGS, HubConfig, load_hub_config
from ..synth.digest import hardware_of
from . import coverage

#: the seeded random tests of the protocol-v1 rules: their many-seeds runs are the slow
#: set's own (``tests/test_hub_cocotb.py``), so the coverage run leaves them out
V1_RANDOM = ("test_random_clean", "test_random_with_errors")

#: per shipped config: the knob test over ``seeds`` layers of about ``packets`` packets, and
#: -- where ``full_region`` -- one expert's whole ``max_rows_per_expert`` region filled
#: (tiny 4k packets, deepseek-v3 459k; mixtral's 32,768-row region, 2.1M packets, is out of
#: Icarus' reach: its full-region bins stay open; the 8-lane configs' regions are not
#: filled either). Measured on the shared 2-core machine: see the docs' coverage table.
COVERAGE_RUNS = {
    "tiny": dict(seeds=30, packets=1500, full_region=True),
    "mixtral-8gpu": dict(seeds=20, packets=2500, full_region=False),
    "deepseek-v3-8gpu": dict(seeds=16, packets=2500, full_region=True),
    "b200-nvlink5": dict(seeds=8, packets=2500, full_region=False),
    "nvl72": dict(seeds=8, packets=2500, full_region=False),
}
#: the share of the bins (percent) each coverage run must hit
COVERAGE_GOAL = 95.0
#: the seed of the run's first knob layer (the others follow it)
BASE_SEED = 3
SUMMARY_PREFIX = "run-"


class CoverageRunError(RuntimeError):
    """A cocotb test of the coverage run failed (its log is next to ``results``)."""


def summary_path(config: str, build: Path | None = None) -> Path:
    return Path(build or build_root()) / "coverage" / f"{SUMMARY_PREFIX}{config}.json"


def coverage_tests(cfg: HubConfig) -> list:
    """The cocotb tests the run plays: every test of the config's features but the seeded
    random ones."""
    from .tb import registry
    from .tb.context import features_of
    return [t for t in registry.test_names(features_of(cfg)) if t not in V1_RANDOM]


def run_coverage(config: str, sim: str = "icarus", build: Path | None = None) -> dict:
    """Run the coverage run of shipped config ``config`` (see :data:`COVERAGE_RUNS`), write
    its summary (:func:`summary_path`) and return it; a failing cocotb test raises
    :class:`CoverageRunError` and writes no summary."""
    from .cocotb_runner import run_hub_cocotb
    if config not in COVERAGE_RUNS:
        raise ValueError(f"coverage run of {config!r}: no settings (configs: {', '.join(COVERAGE_RUNS)})")
    runinfo.git_describe()          # the commit at the start (cached), not after later edits
    build = Path(build or build_root())
    cfg, run = load_hub_config(config), COVERAGE_RUNS[config]
    folder = build / "sim" / f"{config}-cov"
    shutil.rmtree(folder / "coverage", ignore_errors=True)
    tests = coverage_tests(cfg)
    settings = dict(knob_packets=run["packets"], tile_sizes="all", full_region=run["full_region"])
    load0 = [round(x, 2) for x in os.getloadavg()]
    t0, cpu0 = time.monotonic(), runinfo.cpu_seconds()["cpu_s"]
    res = run_hub_cocotb(config, tests, seed=BASE_SEED, seeds=run["seeds"], tag="cov",
                         settings=settings, sim=sim)
    wall, cpu = time.monotonic() - t0, runinfo.cpu_seconds()["cpu_s"] - cpu0
    if res["failed"] or res["passed"] != len(tests):
        raise CoverageRunError(f"{config}: coverage run: {res['failed']} failing cocotb tests "
                               f"{res['failures']}, {res['passed']} of {len(tests)} passed "
                               f"(log next to {res['results']})")
    s = coverage.report([folder], build / "coverage", [config])[config]
    out = {"config": config, "bins": s["bins"], "hit": s["hit"], "percent": s["percent"],
           "goal": COVERAGE_GOAL,
           "groups": {g: {"hit": d["hit"], "bins": d["bins"], "missed": d["missed"]}
                      for g, d in s["groups"].items()},
           "unknown": s.get("unknown", {}), "tests": len(tests), "knob_layers": run["seeds"],
           "knob_packets": run["packets"], "full_region": run["full_region"],
           "sim": res["sim"], "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "load": load0,
           **hardware_of(cfg), "record": runinfo.record()}
    path = summary_path(config, build)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    return out


def run_command(a) -> int:
    """Every config is checked before the first run; exit 1 when a run fails a test or
    misses the goal (its summary is written all the same for a missed goal)."""
    names = a.config or ["tiny", "mixtral-8gpu", "deepseek-v3-8gpu"]
    for n in names:
        load_config_flag("--config", load_hub_config, n)
        if n not in COVERAGE_RUNS:
            raise UsageError("--config", n, "no coverage run settings (configs: "
                             f"{', '.join(COVERAGE_RUNS)})")
    rc = 0
    for n in names:
        try:
            s = run_coverage(n, sim=a.sim)
        except CoverageRunError as e:
            print(f"moehub coverage: FAILED: {e}", file=sys.stderr)
            return 1
        verdict = "ok" if s["percent"] >= s["goal"] else f"BELOW the {s['goal']} % goal"
        print(f"{n}: {s['hit']}/{s['bins']} bins ({s['percent']} %), {verdict}; "
              f"{s['tests']} tests, {s['knob_layers']} knob layers, {s['wall_s'] / 60:.1f} min "
              f"-> {summary_path(n)}")
        rc |= s["percent"] < s["goal"]
    return int(rc)


def add_parser(subparsers) -> None:
    """``moehub coverage`` (registered by scripts/cli.py)."""
    from . import sim as simulators
    p = subparsers.add_parser(
        "coverage", help="the functional coverage run of hub configs (cocotb on Icarus): "
        "bins hit per group, written to coverage/run-<config>.json in the build folder",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--config", action="append", help="hub config (repeatable; default tiny, "
                   f"mixtral-8gpu, deepseek-v3-8gpu; known: {', '.join(HUB_CONFIGS)})")
    simulators.add_argument(p, "icarus", "the coverage run")
    p.set_defaults(func=run_command)
