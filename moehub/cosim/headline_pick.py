"""The picks of ``moehub headline``, from run records alone (:mod:`.headline_eval`):
the best hub variant, the best software baseline, the best of the papers' kind of
baseline, and why the hub loses where it does.

* **Best hub**: the fastest ``hub:<variant>`` run; a variant with more protocol-v2
  features is chosen only when it is faster by more than :data:`TIE_REL` (a feature that
  changes nothing, e.g. multicast with one expert per GPU, is not credited).
* **Best baseline**: the fastest of the *software baselines of today* (the systems
  :func:`baseline_sets` returns); the hub's speedup is its latency over the best hub's.
* **Paper baseline**: the fastest of the *papers' kind* of baseline (an eager dispatcher,
  per-expert sequential GEMMs...), where such systems are registered: the speedup the
  published claims were measured against, beside the one against today's best.
"""
from __future__ import annotations

from .headline_eval import HUB

#: a variant with more features must be faster than this fraction to be picked
TIE_REL = 1e-6
#: values a system module or the registry may use to mark a baseline of the papers' kind
PAPER_KINDS = ("paper",)


def baseline_sets() -> tuple[tuple, tuple]:
    """(today's software baselines, the papers' kind of baselines) from the systems
    registry: a system module whose ``KIND`` is one of :data:`PAPER_KINDS`, or a name in
    the registry's ``PAPER_BASELINES``, is of the papers' kind; the other real software
    systems (``BASELINES``) are today's."""
    from . import systems as S
    paper = set(getattr(S, "PAPER_BASELINES", ()))
    paper |= {n for n, mod in S.MODULES.items() if getattr(mod, "KIND", None) in PAPER_KINDS}
    names = tuple(dict.fromkeys((*S.BASELINES, *sorted(paper))))
    return (tuple(n for n in names if n not in paper and n in S.MODULES),
            tuple(n for n in S.SYSTEMS if n in paper))


def best_hub(runs: dict) -> tuple[str, float]:
    """(variant, latency) of the fastest hub run (``hub:<variant>`` keys, in the order run:
    fewest features first)."""
    hubs = [(r[len(HUB):], m["latency_us"]) for r, m in runs.items() if r.startswith(HUB)]
    if not hubs:
        raise ValueError("no hub run among " + ", ".join(runs))
    low = min(us for _, us in hubs)
    return next((v, us) for v, us in hubs if us <= low * (1 + TIE_REL))


def best_of(runs: dict, names) -> tuple[str, float] | tuple[None, None]:
    """(name, latency) of the fastest run among ``names`` (None, None: none ran)."""
    have = [(n, runs[n]["latency_us"]) for n in names if n in runs]
    return min(have, key=lambda x: x[1]) if have else (None, None)


def band(m: dict) -> tuple:
    """A run's layer time as ``(lowest, highest)``: the band of the last passes where it
    stopped unconverged (``band_us``), else its latency twice."""
    b = m.get("band_us")
    return (float(b[0]), float(b[1])) if b else (m["latency_us"], m["latency_us"])


def best_band(runs: dict, names) -> tuple:
    """The fastest of ``names`` as a band: each end the fastest run's at that end (an
    unconverged run's band can reach below the one that is fastest in its last pass)."""
    have = [band(runs[n]) for n in names if n in runs]
    return min(lo for lo, _ in have), min(hi for _, hi in have)


def why(hub: dict, base: dict, best: str, facts: dict, variant: str) -> str:
    """Why the hub is slower than ``best`` (empty when it is not), from the two runs'
    timeline facts: a later first GEMM, longer GEMM busy time or a later dispatch end on
    each one's critical GPU, each named when it explains a good part (30 %) of the
    difference."""
    diff = hub["latency_us"] - base["latency_us"]
    if diff <= 0:
        return ""
    feats = set(variant.split("+")) if variant != "v1" else set()
    parts = []
    d_start = _sub(hub["gemm_first_us"], base["gemm_first_us"])
    if d_start is not None and d_start > 0.3 * diff:
        fix = ("" if "early_counts" in feats else " (hub protocol v2's per-expert counts)")
        parts.append(f"its GEMMs start {d_start:.0f} us later: {best} knows each expert's "
                     f"count before it starts{fix}")
    d_busy = hub["gemm_busy_us"] - base["gemm_busy_us"]
    if d_busy > 0.3 * diff:
        parts.append(f"its GEMMs are busy {d_busy:.0f} us longer (tile-granular passes re-read "
                     f"weights; its {facts['comm_sms_hub']} sender SMs are held while it sends)")
    d_send = _sub(hub["dispatch_end_us"], base["dispatch_end_us"])
    if d_send is not None and d_send > 0 and "relay" in feats:
        parts.append(f"its dispatch ends {d_send:.0f} us later (one copy per (token, node) to "
                     f"the relay hub, then one per GPU over NVLink)")
    elif d_send is not None and d_send > 0:
        mc = "multicast" in feats
        wire = facts["hub_multicast_wire_bytes" if mc else "hub_wire_bytes"]
        ratio = wire / max(1.0, facts["dedup_wire_bytes"])
        copy = "one copy per (token, GPU)" if mc else "one copy per (token, expert)"
        parts.append(f"its dispatch ends {d_send:.0f} us later ({ratio:.2f}x the wire bytes "
                     f"of DeepEP's deduplicated rows: {copy}, {facts['header_bytes']} B header "
                     f"per {facts['chunk_bytes']} B packet)")
    d_gemm = _sub(hub["gemm_end_us"], base["gemm_end_us"])
    if not parts and d_gemm is not None and d_gemm > 0:
        parts.append(f"its last GEMM ends {d_gemm:.0f} us later (experts finish late: the "
                     f"last partial tiles wait for the end of the dispatch)")
    return "; ".join(parts) or "combine/reduce ends later"


def _sub(a, b):
    return None if a is None or b is None else a - b


def row(point, runs: dict, facts: dict, today: tuple, paper: tuple) -> dict:
    """One line of the table: the point, the best hub variant and its speedups over the
    best of today's baselines and of the papers' kind, every run's latency."""
    variant, hub_us = best_hub(runs)
    hub = runs[HUB + variant]
    best, best_us = best_of(runs, today)
    if best is None:
        raise ValueError(f"{point.label}: none of the baselines {', '.join(today)} ran")
    pname, paper_us = best_of(runs, paper)
    out = {"system_config": point.system_short, "system": point.system.name,
           "gpus": facts["gpus"], "model": point.model.name, "tokens_per_gpu": point.tokens,
           "compute_link_ratio": point.ratio, "hub_us": hub_us, "hub_variant": variant,
           "best_baseline": best, "best_us": best_us, "speedup_layer": best_us / hub_us,
           "speedup_e2e": runs[best]["e2e_ms"] / hub["e2e_ms"],
           "paper_baseline": pname or "", "paper_us": paper_us,
           "speedup_paper": paper_us / hub_us if pname else None,
           "ideal_us": runs["ideal"]["latency_us"] if "ideal" in runs else None}
    for r, m in runs.items():
        out[f"{r.replace(HUB, 'hub_').replace('+', '_')}_us" if r.startswith(HUB)
            else f"{r}_us"] = m["latency_us"]
    # runs whose shared-network passes stopped at the pass limit, still moving: their
    # latency is the last pass's, so the table marks a cell that rests on one
    out["not_converged"] = ",".join(r for r, m in runs.items() if m.get("converged") is False)
    # ... and the speedup's band over theirs: the hub's slowest against the baselines'
    # fastest, and the other way round (the speedup itself where every run converged)
    hub_lo, hub_hi = best_band(runs, [r for r in runs if r.startswith(HUB)])
    base_lo, base_hi = best_band(runs, today)
    out["speedup_min"], out["speedup_max"] = base_lo / hub_hi, base_hi / hub_lo
    out["why_hub_loses"] = why(hub, runs[best], best, facts, variant)
    return out
