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
phases' traffic of this pass once that phase ran, else the background averaged over the
earlier passes (:mod:`.passes`: Krasnosel'skii-Mann averaging, which keeps the fixed
point and damps the swings of a delayed feedback), until a pass's traffic lies within
``TOL_US`` (or ``TOL_REL`` of the layer time) of the background it ran on, or two passes
in a row moved no GPU's end time by more than that while the traffic came nearer its
background (:func:`_settled`). A wide layer's networks coalesce queue drains
(:mod:`..network_kernels`); one that has not settled after ``EXACT_AFTER`` passes, its
traffic coming no nearer its background, runs the rest exact (``exact_drains_from_pass`` in the result's ``extra``).

Kinds (:data:`KINDS`, each module's ``KIND``): today's software baselines
(:data:`BASELINES`), the papers' kind of baseline the published speedups were measured
against (:data:`PAPER_BASELINES`: eager Megatron-Core dispatchers), the hub, the bound.
"""
from __future__ import annotations

import numpy as np

from ..layer import Layer, SystemResult
from ..memory import system_memory
from . import (bulk, comet, deepep, deepep_ll, deepspeed_moe, fused, hub, hybridep, ideal,
               megatron_a2a, megatron_ag, xmoe_rbd)
from . import passes as P
from .hub import hub_flow_cap, hub_schedule, run_hub

MODULES = {"bulk": bulk, "comet": comet, "deepep": deepep, "deepep_ll": deepep_ll,
           "fused": fused, "hub": hub, "ideal": ideal, "megatron_a2a": megatron_a2a,
           "megatron_ag": megatron_ag, "deepspeed_moe": deepspeed_moe, "hybridep": hybridep,
           "xmoe_rbd": xmoe_rbd}
SYSTEMS = tuple(MODULES)
#: what each system is: "today" (a software baseline users pick today), "paper" (the
#: kind of baseline the published speedups were measured against: eager dispatchers,
#: per-expert GEMMs), "hub", or "bound" (the communication-free layer): each module's
#: ``KIND`` attribute ("today" where a module has none)
KINDS = {n: getattr(m, "KIND", "today") for n, m in MODULES.items()}
BASELINES = tuple(n for n in SYSTEMS if KINDS[n] == "today")   #: today's software systems
PAPER_BASELINES = tuple(n for n in SYSTEMS if KINDS[n] == "paper")  #: the papers' kind
LABELS = {n: m.LABEL for n, m in MODULES.items()}
#: the phases each system is made of, in order (tests check this list)
PHASES = {n: m.PHASES for n, m in MODULES.items()}
TOL_US = 0.05        #: passes stop when no GPU's end time moves more than this ...
TOL_REL = 1e-3       #: ... or than this fraction of the layer time
MAX_PASSES = 8
#: a layer whose passes have not settled after this many with coalesced queue drains,
#: and whose last pass brought its traffic no nearer its background, runs its next passes
#: with every drain exact: coalescing moves bursts between passes (the pass map is
#: discontinuous, and a window's rounding lands on either side of a burst), which is what
#: kept the 4-node relay layers from their fixed point; a layer still converging stays
#: coalesced (an exact pass of a 64-GPU layer costs some 25 CPU s)
EXACT_AFTER = 4
#: ... unless the layer is wider than this many GPUs: an exact network costs some 12x a
#: coalesced one at 128 GPUs (87 against 7 CPU s for the hub's costliest) and hours at 256,
#: so a wider layer that does not settle stops at the pass limit with its band instead
EXACT_DRAINS_GPUS = 64
#: a layer that stops at the pass limit unconverged reports the band of its last this many
#: passes' layer times (``band_us``): where the pass map is discontinuous (a GEMM pass that
#: a row misses by a hair runs a whole pass later) the passes cycle between states some
#: 100 µs apart and no fixed point exists; the band is how far the answer is known
BAND_PASSES = 4
TRACE = False        #: record each phase's own traffic residual per pass (diagnosis)

__all__ = ["SYSTEMS", "BASELINES", "PAPER_BASELINES", "KINDS", "LABELS", "PHASES",
           "run_system", "run_hub", "hub_schedule", "hub_flow_cap"]


def _run_once(name: str, L: Layer, hub_backend: str, hub_order: str, rtl_gpus: tuple,
              module=None, hub_features=frozenset()):
    if module is not None:
        return module.run(L)
    if name == "hub":
        return hub.run_hub(L, hub_backend, hub_order, rtl_gpus, hub_features)
    return MODULES[name].run(L)


def receive_memory(L: Layer, name: str, hub_features=frozenset()) -> dict:
    """System ``name``'s receive memory on layer ``L``: its module's own model
    (``receive_memory``) where it has one, else :func:`..memory.system_memory`."""
    mod = MODULES.get(name)
    if hasattr(mod, "receive_memory"):
        return mod.receive_memory(L)
    return system_memory(L, name, hub_features)


def _end_residual_us(res, prev) -> float:
    """How far the last pass moved any GPU's end time (inf after one pass)."""
    if prev is None:
        return float("inf")
    return float(np.max(np.abs(res.gpu_end - prev.gpu_end)))


def _tol_us(res) -> float:
    return max(TOL_US, TOL_REL * float(np.max(res.gpu_end)))


def pass_band(layer_us: list) -> list:
    """``[lowest, highest]`` layer time (µs) of the last :data:`BAND_PASSES` passes: what an
    unconverged layer's answer is known to within (its latency is the last pass's)."""
    last = layer_us[-BAND_PASSES:]
    return [min(last), max(last)]


def _settled(res, prev, traffic_residual: float = np.inf, still_before: bool = True,
             traffic_before: float = np.inf) -> bool:
    """The passes stop when the last one's traffic lay within the tolerance (µs) of the
    background it ran on (:func:`.passes.traffic_residual_us`: a fixed point within the
    tolerance), or when the last *two* passes each moved no GPU's end time by more than
    the tolerance (``still_before``: the pass before moved none either) while its traffic
    came nearer its background than the pass before's (``traffic_before``). One pass that
    left the end times where they were is no fixed point: the pass map is discontinuous
    (tile order, the combine's 1 µs grid), and the end times of two passes can agree by
    chance while the traffic is far from its background (DeepSeek-V3 on 4 x 8 H100 over
    InfiniBand, 4096 tokens per GPU, hub v2: pass 2 moved no end time by more than
    1.6 µs, its combine's traffic lay 165 µs from its background); a third pass on
    another background that leaves them again is the evidence, unless the traffic did not
    come nearer its background: two states of a cycle may have the same end times (the
    damping then averages them, :class:`.passes.Damping`). The traffic test matters
    where the end times need not agree: a background a tenth of a µs off can still move
    an end time by a µs."""
    if prev is None:
        return False
    tol = _tol_us(res)
    return traffic_residual <= tol or (_end_residual_us(res, prev) <= tol and still_before
                                       and traffic_residual < traffic_before)


def run_system(name: str, L: Layer, hub_backend: str = "model",
               hub_order: str = "token", rtl_gpus: tuple = (), module=None,
               hub_features=frozenset()) -> SystemResult:
    """Run one system to a fixed point of its phases' shared network (see the module
    docstring). RTL hubs run once, in the last pass, on the settled background traffic.
    ``module``: any object with ``run(L) -> SystemResult`` instead of the registered
    system ``name`` (a study's variant of a system, run with the same passes);
    ``hub_features``: the hub's protocol-v2 features (:mod:`.hub`)."""
    background, prev, res, done = {}, None, None, False
    damp = P.Damping()
    trace: list = []
    still = False                        # the pass before moved no end time beyond tol
    backend = "model" if rtl_gpus else hub_backend
    rerun = bool(rtl_gpus) or hub_backend != backend     # a last run on the settled background
    exact_from, L.exact_drains, stalled = None, False, False
    layer_us = []                        # each pass's layer time
    for n in range(1, MAX_PASSES + 1):
        if (exact_from is None and n > EXACT_AFTER and stalled and L.network_window_us() > 0
                and L.G <= EXACT_DRAINS_GPUS):
            exact_from = n
            L.exact_drains = True
        L.begin_run(background)
        res = _run_once(name, L, backend, hub_order, (), module, hub_features)
        residual = P.traffic_residual_us(L.traffic, background)
        moved = _end_residual_us(res, prev)
        layer_us.append(float(res.latency_us))
        done = _settled(res, prev, residual, still,
                        np.inf if damp.last is None else damp.last)
        stalled = damp.last is not None and residual >= damp.last   # the traffic came no nearer
        a = damp.next(residual, res.gpu_end, _tol_us(res))
        still = moved <= _tol_us(res)
        if TRACE:
            trace.append({"pass": n, "layer_us": float(res.latency_us), "residual_us": moved,
                          "traffic_residual_us": residual, "damping": a, "ends": res.gpu_end.copy(),
                          "phases": {ph: P.traffic_residual_us({ph: recs}, {ph: background[ph]})
                                     if ph in background else float("inf")
                                     for ph, recs in L.traffic.items()}})
        if not done or rerun:            # (a settled layer needs no next background)
            background = P.blend(L.traffic, background, a)
        if done:
            break
        prev = res
    conv = {"passes": n, "converged": done, "residual_us": moved,
            "traffic_residual_us": residual}
    if exact_from:
        conv["exact_drains_from_pass"] = exact_from
    if not done:
        conv["band_us"] = pass_band(layer_us)
    res.extra.update(conv)
    if TRACE:
        res.extra["pass_trace"] = trace
    if rerun:
        L.begin_run(background)
        res = _run_once(name, L, hub_backend, hub_order, rtl_gpus, None, hub_features)
        res.extra.update(conv, passes=n + 1)
    L.exact_drains = False               # (the layer's next system starts coalesced again)
    res.nets = L.nets
    return res
