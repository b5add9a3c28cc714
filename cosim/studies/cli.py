"""``moehub study <name>``: one sub-command per study module (see :mod:`moehub.cosim.studies`)."""
from __future__ import annotations


#: the study modules; a missing one is skipped (it is being built)
STUDY_MODULES = ("moehub.cosim.studies.xmoe", "moehub.cosim.studies.gps",
                 "moehub.cosim.studies.v2")


def add_parser(sub) -> None:
    p = sub.add_parser("study", help="studies beyond one layer: X-MoE memory and dispatch "
                       "(xmoe), MoE-GPS duplication and prediction (gps), hub protocol v2 ablation (v2)")
    studies = p.add_subparsers(dest="study", required=True, metavar="STUDY")
    from ...scripts.cli import add_command_modules
    add_command_modules(studies, STUDY_MODULES)
