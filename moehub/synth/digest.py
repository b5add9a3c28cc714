"""The hardware a record was made from, as a digest of the hub's RTLIL.

Why: a record (a synthesis, a coverage run, a soak, an equivalence proof) is current while
the hub it ran is the working tree's hub. The RTL sources' hash says when any source
changed -- also an edit that moves no gate of that configuration (a feature another
configuration uses, a comment, a refactor proven equal). The RTLIL the sources generate
for the record's configuration says whether *its* hardware changed: equal RTLIL without
the ``src`` attributes (the Python file:line that made each signal, which move with every
edit) is the same hardware. ``moehub report --recheck`` compares them from the records
alone, without their build folders.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re

from ..spec.config import HubConfig

#: an RTLIL ``src`` attribute line (file:line of the Python that made a signal)
_SRC_ATTR = re.compile(r"^\s*attribute \\src .*\n", re.M)


def rtlil_digest(text: str) -> str:
    """SHA-256 of RTLIL without its ``src`` attributes (file:line of the Python that made
    each signal: they move with every edit and with the checkout's path, the hardware
    does not)."""
    return hashlib.sha256(_SRC_ATTR.sub("", text).encode()).hexdigest()


def hub_rtlil_digest(cfg: HubConfig | dict) -> str:
    """:func:`rtlil_digest` of the working tree's hub for ``cfg`` (a config, or its fields
    as a record holds them)."""
    from .verilog import hub_rtlil
    if isinstance(cfg, dict):
        cfg = HubConfig(**cfg)
    return rtlil_digest(hub_rtlil(cfg))


def hardware_of(cfg: HubConfig) -> dict:
    """What a per-config run keeps of the hub it ran: ``hub`` (the config's fields) and
    ``rtl_sha256`` (the RTL sources' hash). Its RTLIL's digest costs an elaboration (7 s
    for tiny), so the run leaves it to the record's collection, which adds it while the
    sources are still those (``moehub report --collect``)."""
    from .. import runinfo
    return {"hub": dataclasses.asdict(cfg), "rtl_sha256": runinfo.rtl_sources_hash()}
