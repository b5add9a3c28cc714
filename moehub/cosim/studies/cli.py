"""``moehub study <name>``: one sub-command per study module (see :mod:`moehub.cosim.studies`)."""
from __future__ import annotations

from ...argcheck import add_command_modules


def add_parser(sub) -> None:
    p = sub.add_parser("study", help="studies beyond one layer: X-MoE memory and dispatch "
                       "(xmoe), MoE-GPS duplication and prediction (gps), hub protocol v2 ablation (v2)")
    studies = p.add_subparsers(dest="study", required=True, metavar="STUDY")
    from . import gps, v2, xmoe
    add_command_modules(studies, (xmoe, gps, v2))
