"""Planted bugs: a harness option that builds its component from a deliberately broken
copy of the RTL source, so a test (or ``moehub formal --plant``) can show that a property
is not vacuous -- with the bug planted the proof must FAIL, on the property named.

A plant is a one-place source edit (``old`` -> ``new``, ``old`` found exactly once) of
one RTL module; the broken class is taken from an in-memory copy of that module, so the
files on disk and every other user of the module stay unchanged. ``method``: take only
that method from the broken class and put it on a subclass of the harness's class (a
bug in a base class's method, e.g. the page pool's return check that the page supply
inherits). ``host``: the broken class is a part another class builds (``(module,
class)``, e.g. the count limit inside the multicast allocator): the harness gets that
class from a copy of its module whose global name of the part is the broken class.
"""
from __future__ import annotations

import importlib
import types
from dataclasses import dataclass

from amaranth import Elaboratable

from .common import Props, elaborate_into, fifo_entries, reset_first


@dataclass(frozen=True)
class Plant:
    """One planted bug (see the module docstring). ``fails``: text of the property (or
    properties) the proof must fail on; ``why``: what the bug does."""
    module: str
    old: str
    new: str
    cls: str
    fails: tuple
    why: str
    method: str | None = None
    host: tuple | None = None


def broken_class(module_name: str, old: str, new: str, cls: str):
    """Class ``cls`` of an in-memory copy of ``module_name`` whose source has ``old``
    replaced by ``new`` (exactly once)."""
    mod = importlib.import_module(module_name)
    with open(mod.__file__) as f:
        src = f.read()
    if src.count(old) != 1:
        raise ValueError(f"plant: {old!r} found {src.count(old)} times in {mod.__file__}, "
                         "expected once (the RTL changed: update the plant)")
    return getattr(_copy(mod, src.replace(old, new)), cls)


def _copy(mod, src: str | None = None):
    """An in-memory copy of module ``mod`` (its source, or ``src``), executed anew."""
    if src is None:
        with open(mod.__file__) as f:
            src = f.read()
    copy = types.ModuleType(f"{mod.__name__}_planted")
    copy.__package__ = mod.__package__
    copy.__file__ = mod.__file__
    exec(compile(src, mod.__file__, "exec"), copy.__dict__)
    return copy


def planted(base, plants: dict, name: str | None):
    """``base`` itself (``name`` None), or ``base`` with plant ``name`` of ``plants``."""
    if name is None:
        return base
    if name not in plants:
        raise ValueError(f"plant = {name!r}: unknown; known: {', '.join(plants)}")
    pl = plants[name]
    broken = broken_class(pl.module, pl.old, pl.new, pl.cls)
    if pl.host is not None:
        module, cls = pl.host
        host = _copy(importlib.import_module(module))
        setattr(host, pl.cls, broken)
        return getattr(host, cls)
    if pl.method is None:
        return broken
    return type(f"{base.__name__}Planted", (base,), {pl.method: getattr(broken, pl.method)})


class PlantedHarness(Elaboratable):
    """A property harness of one component (:attr:`unit`) on ``cfg``, with one of its
    planted bugs (:attr:`plants`) or none, its strengthening invariants on or off (off: a
    plant must fail on the properties themselves). ``messages`` (each property's text by
    source line) and ``script`` (Yosys commands after ``prep``) are filled in as it
    elaborates. An unknown plant is refused here, before anything is elaborated."""
    unit = None
    plants: dict = {}

    def __init__(self, cfg, plant: str | None = None, invariants: bool = True):
        self.cfg, self.invariants = cfg, invariants
        try:
            self.dut_cls = planted(self.unit, self.plants, plant)
        except ValueError:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise
        self.messages = {}
        self.script = ()

    def elaborate_dut(self, m, platform, into: tuple = ()):
        """The harness's start: its properties' collector (``p``), the (planted) component
        on ``cfg`` elaborated into ``m`` as ``dut`` and its registers by name (``regs``;
        ``into``: its submodules elaborated the same way, e.g. its FIFOs), the proof from
        reset. The component's submodules are kept in :attr:`parts` (a FIFO's ports are no
        signals the component's own statements name uniquely). Returns (p, dut, regs)."""
        p = Props(m)
        self.messages = p.messages
        dut = self.dut_cls(self.cfg)
        self.parts = _capture(dut)
        regs = elaborate_into(m, "dut", dut, platform, into=into)
        reset_first(m)
        return p, dut, regs

    def fifo(self, m, regs, name: str, depth: int, width: int):
        """The entries of the component's ``SyncFIFOBuffered`` ``name``, oldest first, as
        (live, data), its level and its pointer invariant; its memory's words named here
        (the Yosys commands that connect them added to :attr:`script`)."""
        entries, ok, connect = fifo_entries(m, regs, name, depth, width)
        self.script += connect
        lvl = regs[f"{name}.level"]
        return [(lvl > q, d) for q, d in enumerate(entries)], lvl, ok


def _capture(dut) -> dict:
    """The component's submodules by name, as its ``elaborate`` adds them."""
    parts, elaborate = {}, dut.elaborate

    def capturing(platform):
        dm = elaborate(platform)
        parts.update({n: sub for n, (sub, _) in dm._named_submodules.items()})
        return dm
    dut.elaborate = capturing
    return parts
