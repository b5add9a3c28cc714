"""The ``moehub`` command line.

Each sub-command lives next to the code it drives and registers itself here:
``rtl`` and ``demo`` (this file), ``synth``, ``synth-sweep`` and ``equiv`` (moehub.synth.cli),
``cosim`` and ``sweep`` (moehub.cosim.cli), ``calibrate`` (moehub.cosim.calibration).
A sub-command module provides ``add_parser(subparsers)`` which sets ``func`` on its parser.

Generated files go to the command's ``--out`` folder, else under ``$MOEHUB_BUILD``, else
under ``./build`` (:mod:`moehub.paths`). Exit codes: 0 success, 1 a failed run, 2 bad
input (arguments, configuration, an unusable output folder), 3 a missing synthesis tool.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..config.schema import HUB_CONFIGS, ConfigError, load_hub_config
from ..paths import ENV, HELP, OutputDirError, build_root, check_dir

#: modules that contribute sub-commands (missing ones are skipped while they are built)
COMMAND_MODULES = ("moehub.synth.cli", "moehub.cosim.cli", "moehub.cosim.calibration",
                   "moehub.verif.formal.cli")


def cmd_rtl(args) -> int:
    from ..rtl.gen import convert
    names = args.config or list(HUB_CONFIGS)
    for name in names:
        cfg = load_hub_config(name)
        path = convert(cfg, out_dir=args.out)
        print(f"{cfg.name}: {path} ({path.stat().st_size // 1024} KiB Verilog; "
              f"CSR map {path.parent / 'csr_map.json'})")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo
    return run_demo(args.config, seed=args.seed, tokens=args.tokens, waves=args.waves)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moehub", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("rtl", help="write the hub's Verilog (and CSR map) under "
                       "rtl/<config>/ in the build folder")
    r.add_argument("--config", action="append", help=f"hub config name or YAML path "
                   f"(repeatable; default: all of {', '.join(HUB_CONFIGS)})")
    r.add_argument("--out", default=None, help=f"output folder (default <build>/rtl/<config>; "
                   f"<build> is {HELP})")
    r.set_defaults(func=cmd_rtl)

    d = sub.add_parser("demo", help="generate the RTL and run a short MoE traffic demo through it "
                       "(cocotb + Icarus), checked by the reference model")
    d.add_argument("--config", default="mixtral-8gpu", help="hub config (default mixtral-8gpu)")
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--tokens", type=int, default=64, help="tokens per source GPU (default 64)")
    d.add_argument("--waves", action="store_true", help="dump an FST waveform")
    d.set_defaults(func=cmd_demo)

    for mod in COMMAND_MODULES:
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue
            raise
        module.add_parser(sub)
    return p


def check_outputs(args) -> None:
    """Fail before any work when an output folder cannot be used: ``--out`` if given, the
    build folder if ``MOEHUB_BUILD`` is set or there is no ``--out``."""
    out = getattr(args, "out", None)
    if out:
        check_dir(out, "--out")
    if os.environ.get(ENV) or not out:
        build_root()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_outputs(args)
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"moehub: configuration error: {e}", file=sys.stderr)
        return 2
    except OutputDirError as e:
        print(f"moehub: output folder: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
