"""Drift over a long prefill, and the co-simulation check of the cost model.

**Drift.** The paper's Distribution-Only estimate is a static per-layer distribution; a
long prefill whose expert popularity wanders leaves it behind (the review's "Reading
between the lines"). The prefill is cut into chunks of ``tokens`` per GPU; between chunks
every expert's log-popularity takes a random step (ASSUMPTION: :data:`DRIFT_SIGMA` per
chunk, a random walk; no public measurement of drift was found). The static dist-only
placement is compared with the hub's counters (a moving average of exact counts, the
placement re-planned when its copies pay back), the hub's per-row choice, both, and the
oracle.

**Check.** For a few placements the study's cost model (:mod:`.gps_time`) is compared
with the co-simulation's ``bulk`` system run on the same rows (:mod:`.gps_cosim`).
"""
from __future__ import annotations

import numpy as np

from ..workload import sample_routing
from . import gps_place as P
from .gps_cosim import bulk_us
from .gps_study import Cell, Realized, cell_rng, workload

#: ASSUMPTION: standard deviation of each expert's log-popularity step per chunk
DRIFT_SIGMA = 0.15
DRIFT_CHUNKS = 24
DRIFT_STRATEGIES = ("dist-only", "hub-counts", "hub-choice", "hub-both", "oracle")


def drift(cell: Cell, chunks: int = DRIFT_CHUNKS, sigma: float = DRIFT_SIGMA) -> list:
    """Rows (chunk, strategy, layer time, busiest GPU's rows / mean, error rate, copies)
    over a prefill of ``chunks`` chunks whose popularity drifts."""
    st = cell.st
    rng = cell_rng(st.seed, "drift", cell.sys.name, cell.T, cell.skew)
    logp = cell.logp.copy()
    run = Realized(cell, "exposed")
    rows = []
    for c in range(chunks):
        routing = sample_routing(st.model, logp, cell.G, cell.T, rng)
        for (strat, _), (lt, err) in run.batch(routing, t2e=False).items():
            if strat in DRIFT_STRATEGIES:
                rows.append({**cell.label, "chunk": c, "strategy": strat,
                             "layer_us": lt.total_us, "max_mean_rows": lt.max_mean_rows,
                             "error_rate": err, "copies": lt.copies})
        logp = logp + sigma * rng.standard_normal(len(logp))
    return rows


def crosscheck(cell: Cell) -> list:
    """The cost model against the co-simulation's bulk system on the cell's first
    measured batch: no duplication and the dist-only placement (static split)."""
    st = cell.st
    routing = cell.routings[1]
    wl = workload(cell.skew, cell.T, st.seq_len, st.seed)
    src = np.repeat(np.arange(cell.G), cell.T * cell.k)
    exp = routing.experts.reshape(-1).astype(np.int64)
    out = []
    for name, pl, split in (("none", P.home_placement(routing.load(), cell.G), False),
                            ("dist-only", cell.plan(cell.p_do), True)):
        dest = P.static_rows(src, exp, pl.weights())
        model = cell.cost.layer(P.flows_of(src, exp, dest, cell.G, cell.E), split=split)
        t_model = model.total_us - (cell.cost.split_us() if split else 0.0)
        t_cosim = bulk_us(cell.sys, st.model, wl, routing, dest, pl.held)
        out.append({**cell.label, "strategy": name, "model_us": t_model,
                    "cosim_bulk_us": t_cosim, "ratio": t_model / t_cosim})
    return out
