"""The systems compared on the same layer, one module each, each a list of named, costed
phases (FACTS.md "How software systems resolve addresses today", CALIBRATION.md).

All systems share the GPU cost model (:mod:`..gpu`), the calibrated components
(:mod:`..components`), the fluid network (:mod:`..network`), the routing and the placement
(:class:`..layer.Layer`); they differ only in the mechanism that gets each row to its
expert and back. Times are microseconds from the start of the layer; a layer ends when
the last GPU has reduced its tokens' k expert outputs.

One network per layer: a system's dispatch, combine, count exchanges, notifications and
credits share the ports of one fluid network. Since when a phase's bytes are sent depends
on the other phases (a combine starts when GEMMs end, which wait for the dispatch), a
system is run in passes (:func:`run_system`): every network of a pass carries the other
phases' traffic of the previous pass (or of this pass, once that phase ran) until the
layer's per-GPU end times change by less than ``TOL_US``.
"""
from __future__ import annotations

import numpy as np

from ..layer import Layer, SystemResult
from . import bulk, comet, deepep, deepep_ll, fused, hub, ideal
from .hub import hub_flow_cap, hub_schedule, run_hub

MODULES = {"bulk": bulk, "comet": comet, "deepep": deepep, "deepep_ll": deepep_ll,
           "fused": fused, "hub": hub, "ideal": ideal}
SYSTEMS = tuple(MODULES)
BASELINES = ("bulk", "comet", "deepep", "deepep_ll", "fused")   #: real software systems
LABELS = {n: m.LABEL for n, m in MODULES.items()}
#: the phases each system is made of, in order (tests check this list)
PHASES = {n: m.PHASES for n, m in MODULES.items()}
TOL_US = 0.05        #: passes stop when no GPU's end time moves more than this ...
TOL_REL = 1e-3       #: ... or than this fraction of the layer time
MAX_PASSES = 8

__all__ = ["SYSTEMS", "BASELINES", "LABELS", "PHASES", "run_system", "run_hub", "hub_schedule",
           "hub_flow_cap"]


def _run_once(name: str, L: Layer, hub_backend: str, hub_order: str, rtl_gpus: tuple,
              module=None, hub_features=frozenset()):
    if module is not None:
        return module.run(L)
    if name == "hub":
        return hub.run_hub(L, hub_backend, hub_order, rtl_gpus, hub_features)
    return MODULES[name].run(L)


def _scaled(records: list, w: float) -> list:
    """Flow records with every injected byte weighted by ``w``."""
    return [(p0, p1, p2, lat, cap, [(t, b * w) for t, b in imp],
             [(t0, t1, r * w) for t0, t1, r in seg])
            for p0, p1, p2, lat, cap, imp, seg in records]


def _mix(new: dict, old: dict) -> dict:
    """The background of the next pass: the mean of the last two passes' traffic (damps
    the oscillation a pass-granular GEMM queue can set up with its own combine)."""
    if not old:
        return dict(new)
    return {ph: _scaled(new.get(ph, []), 0.5) + _scaled(old.get(ph, []), 0.5)
            for ph in set(new) | set(old)}


def _settled(res, prev) -> bool:
    if prev is None:
        return False
    tol = max(TOL_US, TOL_REL * float(np.max(res.gpu_end)))
    return bool(np.max(np.abs(res.gpu_end - prev.gpu_end)) <= tol)


def run_system(name: str, L: Layer, hub_backend: str = "model",
               hub_order: str = "token", rtl_gpus: tuple = (), module=None,
               hub_features=frozenset()) -> SystemResult:
    """Run one system to a fixed point of its phases' shared network (see the module
    docstring). RTL hubs run once, in the last pass, on the settled background traffic.
    ``module``: any object with ``run(L) -> SystemResult`` instead of the registered
    system ``name`` (a study's variant of a system, run with the same passes);
    ``hub_features``: the hub's protocol-v2 features (:mod:`.hub_v2`)."""
    background, last, prev, res = {}, {}, None, None
    backend = "model" if rtl_gpus else hub_backend
    for n in range(1, MAX_PASSES + 1):
        L.begin_run(background)
        res = _run_once(name, L, backend, hub_order, (), module, hub_features)
        background, last = _mix(L.traffic, last), dict(L.traffic)
        if _settled(res, prev):
            break
        prev = res
    res.extra["passes"] = n
    res.extra["converged"] = _settled(res, prev)
    if rtl_gpus or hub_backend != backend:
        L.begin_run(background)
        res = _run_once(name, L, hub_backend, hub_order, rtl_gpus, None, hub_features)
        res.extra["passes"] = n + 1
    res.nets = L.nets
    return res
