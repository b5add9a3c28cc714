"""``moehub study <name>``: one sub-command per study module (see :mod:`moehub.cosim.studies`)."""
from __future__ import annotations

import argparse
import importlib

#: the study modules; a missing one is skipped (it is being built)
STUDY_MODULES = ("moehub.cosim.studies.xmoe", "moehub.cosim.studies.gps")


def add_parser(sub) -> None:
    p = sub.add_parser("study", help="studies beyond one layer: X-MoE memory and dispatch "
                       "(xmoe), MoE-GPS duplication and prediction (gps)")
    studies = p.add_subparsers(dest="study", required=True, metavar="STUDY")
    for mod in STUDY_MODULES:
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue
            raise
        module.add_parser(studies)
    from ...scripts.cli import _verbosity        # -q / -v after the study's name too
    for sp in studies.choices.values():
        _verbosity(sp, argparse.SUPPRESS)
