"""The ``moehub`` command line.

Each sub-command lives next to the code it drives and registers itself here: ``rtl`` and
``demo`` (this file), ``synth``, ``synth-sweep`` and ``equiv`` (moehub.synth.cli), ``cosim``
and ``sweep`` (moehub.cosim.cli), ``calibrate`` (moehub.cosim.calibration). A sub-command
module provides ``add_parser(subparsers)`` which sets ``func`` on its parser.

Generated files go to the command's ``--out`` folder, else under ``$MOEHUB_BUILD``, else
under ``./build`` (:mod:`moehub.paths`). Progress goes to stderr (:mod:`moehub.progress`,
``-q``/``-v``), results and tables to stdout. Exit codes (:data:`EXIT_CODES`) are the same
for every sub-command.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from .. import progress, runinfo
from ..spec.config import HUB_CONFIGS, ConfigError, load_hub_config
from ..paths import ENV, HELP, OutputDirError, build_root, check_dir
from ..argcheck import (Parser, UsageError, add_command_modules, int_at_least, load_config_flag,
                        verbosity_flags)

EXIT_CODES = {0: "success", 1: "the run failed", 2: "usage or configuration error (a bad "
              "option value, config or output folder)", 3: "a tool is missing (Yosys, "
              "OpenSTA, nextpnr)", 130: "interrupted (Ctrl-C)"}

DESCRIPTION = ("moehub: the MoE-Hub co-design kit (hub RTL, verification, synthesis, "
               "co-simulation).")
EPILOG = ("Progress goes to stderr (-q: none, -v: more), results to stdout. Outputs go to "
          f"--out, else {HELP}; results folders hold a run.json and are replaced only with "
          "--force. Exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()) + ".")


def cmd_rtl(args) -> int:
    """Every config is loaded before the first (slow) conversion, so a typo in the last
    --config fails at once; with several configs, --out DIR gets a sub-folder each."""
    from ..rtl.gen import convert
    names = args.config or list(HUB_CONFIGS)
    cfgs = [load_config_flag("--config", load_hub_config, n) for n in names]
    if args.nodes is not None:
        from ..spec.relay import nodes_config
        try:
            cfgs = [nodes_config(c, args.nodes) for c in cfgs]
        except (ValueError, ConfigError) as e:
            raise UsageError("--nodes", args.nodes, str(e)) from None
    for i, cfg in enumerate(cfgs):
        out = args.out if not args.out or len(cfgs) == 1 else os.path.join(args.out, cfg.name)
        with progress.stage(f"rtl {cfg.name} ({i + 1}/{len(cfgs)}): Amaranth -> Verilog",
                            heartbeat=True):
            path = convert(cfg, out_dir=out)
        print(f"{cfg.name}: {path} ({path.stat().st_size // 1024} KiB Verilog; "
              f"CSR map {path.parent / 'csr_map.json'})")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo
    return run_demo(args.config, seed=args.seed, tokens=args.tokens, waves=args.waves,
                    out=args.out, force=args.force, sim=args.sim)


class _Version(argparse.Action):
    """``--version``: computed when asked (it runs git), printed on stdout."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print moehub's version (and git commit in a checkout) and exit"):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(runinfo.version_string())
        parser.exit(0)


def _add_local(sub) -> None:
    from .demo import DEMO_SEED, DEMO_TOKENS, token_limit
    limits = ", ".join(f"{n} {token_limit(load_hub_config(n))}" for n in HUB_CONFIGS)
    r = sub.add_parser("rtl", help="write the hub's Verilog (and CSR map) under "
                       "rtl/<config>/ in the build folder")
    r.add_argument("--config", action="append", help=f"hub config name or YAML path "
                   f"(repeatable; default: all of {', '.join(HUB_CONFIGS)})")
    r.add_argument("--out", default=None, help=f"output folder (default <build>/rtl/<config>; "
                   f"<build> is {HELP}; with several configs DIR/<config>)")
    r.add_argument("--nodes", type=int_at_least(2), default=None, metavar="N",
                   help="the relay hub (protocol v3) of N nodes of each config's GPUs, as the "
                   "co-simulation derives a multi-node layer's hub; config named <config>_nodes-N")
    r.set_defaults(func=cmd_rtl)

    d = sub.add_parser("demo", help="generate the RTL and run a short MoE traffic demo through it "
                       "(cocotb + Icarus or Verilator), checked by the reference model")
    d.add_argument("--config", default="mixtral-8gpu", help="hub config (default mixtral-8gpu; "
                   f"known: {', '.join(HUB_CONFIGS)})")
    d.add_argument("--seed", type=int_at_least(0), default=DEMO_SEED,
                   help=f"routing seed (default {DEMO_SEED})")
    d.add_argument("--tokens", type=int_at_least(1), default=DEMO_TOKENS,
                   help=f"tokens per source GPU (default {DEMO_TOKENS}; at most what the hub "
                        f"config's token ids and expert regions hold: {limits})")
    d.add_argument("--waves", action="store_true", help="dump a waveform (FST; VCD on "
                   "Verilator) into the results folder (its path is printed)")
    d.add_argument("--out", default=None, help=f"results folder (default <build>/demo; <build> "
                   f"is {HELP}); the run goes to a sub-folder named by config, tokens, seed")
    d.add_argument("--force", action="store_true", help="replace an existing results folder")
    from ..verif.sim import add_argument as add_sim_argument
    add_sim_argument(d, "icarus", "the demo's cocotb run")
    d.set_defaults(func=cmd_demo)


def _describe(sub) -> None:
    """Sub-commands without a description show their one-line help as one."""
    for action in sub._choices_actions:
        p = sub.choices.get(action.dest)
        if p is not None and not p.description:
            p.description = action.help
        if p is not None and not p.epilog:
            p.epilog = EPILOG


def command_modules() -> tuple:
    """The modules that contribute sub-commands (each has ``add_parser(sub)``)."""
    from ..cosim import calibration, cli as cosim_cli
    from ..cosim.studies import cli as study_cli
    from ..explore import cli as explore_cli
    from ..synth import cli as synth_cli
    from ..verif import coverage_run, mutate, soak
    from ..verif.formal import cli as formal_cli
    from . import report
    return (synth_cli, cosim_cli, calibration, formal_cli, study_cli, explore_cli, mutate,
            soak, coverage_run, report)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="moehub", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action=_Version)
    verbosity_flags(p, progress.NORMAL)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_local(sub)
    add_command_modules(sub, command_modules())
    _describe(sub)
    return p


def check_outputs(args) -> None:
    """Fail before any work when an output folder cannot be used: ``--out`` if given, the
    build folder if ``MOEHUB_BUILD`` is set or there is no ``--out``."""
    out = getattr(args, "out", None)
    if out:
        check_dir(out, "--out")
    if os.environ.get(ENV) or not out:
        build_root()


def _fail(code: int, text: str) -> int:
    print(text, file=sys.stderr)
    return code


def run_command(args) -> int:
    """Run the parsed command and map its errors to the exit codes, one line each."""
    from ..synth.tools import ToolMissing
    cmd = f"moehub {args.command}"
    try:
        check_outputs(args)
        return int(args.func(args) or 0)
    except UsageError as e:
        return _fail(2, f"{cmd}: error: {e} (see '{cmd} --help')")
    except ConfigError as e:
        return _fail(2, f"moehub: configuration error: {e}")
    except OutputDirError as e:
        return _fail(2, f"moehub: output folder: {e}")
    except ToolMissing as e:
        return _fail(3, f"{cmd}: missing tool: {e}")
    except RuntimeError as e:
        if args.verbosity >= progress.VERBOSE:
            traceback.print_exc()
        return _fail(1, f"{cmd}: failed: {e}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    runinfo.begin(["moehub", *argv])
    previous = progress.get()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:              # --help, --version, a usage error
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        progress.configure(args.verbosity)
        return run_command(args)
    except KeyboardInterrupt:
        # subprocess.run kills its child (Icarus, Yosys) before this arrives here
        return _fail(130, "moehub: interrupted")
    finally:
        progress.set_reporter(previous)


if __name__ == "__main__":
    sys.exit(main())
