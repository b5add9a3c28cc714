"""The MoE-GPS study's runs: every strategy on every cell (system x tokens x skewness),
under the paper's scalar error models and realized on sampled routing.

A *cell* draws the expert popularity of its skewness from the co-simulation's workload
sampler (:func:`~moehub.cosim.workload.popularity_logits`), the population shares from a
large sample of it, the offline Distribution-Only estimate (error rate eps), and a few
batches of routing (:func:`~moehub.cosim.workload.sample_routing`); the first batch only
warms up the strategies that remember (the hub's counters, the previous placement).

Strategies (``STRATEGIES``):

==================  =============================================================
none                every expert on its home GPU, no duplication
oracle              greedy duplication on this batch's exact counts, copies free (a bound)
dist-only           static placement planned on the offline shares; software split
token-to-expert     per batch, a plan on the predicted rows (accuracy a, best a of the
                    grid), copies of new replicas, pre-dispatch of predicted rows,
                    the predictor on the critical path
hub-counts          per batch, a plan on the moving average of the hub's exact counters;
                    copies of new replicas; software split
hub-choice          the static dist-only placement, each row's replica picked by the hub
hub-both            the hub-counts placement with the hub's per-row choice
==================  =============================================================

Modes: ``optimistic`` / ``typical`` / ``pessimistic`` (scalar, on the expected routing,
copies free as the paper assumes), ``realized-hidden`` (sampled routing, copies free) and
``realized`` (sampled routing, copies over the link, :mod:`.gps_time`).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from ..config import ModelConfig, SystemConfig, WorkloadConfig
from ...spec.config import load_hub_config
from ..workload import popularity_logits, sample_routing
from . import gps_place as P
from . import gps_predict as R
from .gps_time import CostModel, LayerTime

STRATEGIES = ("none", "oracle", "dist-only", "token-to-expert", "hub-counts", "hub-choice",
              "hub-both")
PAPER_PAIR = ("dist-only", "token-to-expert")        #: the paper's question
SCALAR_STRATEGIES = ("none", "oracle", "dist-only", "token-to-expert")
MODES = R.ERROR_MODELS + ("realized-hidden", "realized")
#: Token-to-Expert accuracies tried per cell (the best is the strategy's point)
ACCURACIES = (0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.96, 0.99)
#: ASSUMPTION: a new replica must take at least this share of the mean GPU load (it
#: streams a whole expert's weights and may need a copy; see greedy_duplicate's min_new)
MIN_REPLICA = 0.10
#: ASSUMPTION: a re-plan's weight copies must pay for themselves within this many batches
PAYBACK_BATCHES = 8
#: tokens in the sample that stands for the population shares
REFERENCE_TOKENS = 1 << 15


@dataclass(frozen=True)
class Settings:
    """Everything that changes the study's numbers (the CLI fills it)."""
    model: ModelConfig
    systems: tuple
    tokens: tuple
    skews: tuple
    epsilon: float = 0.05
    batches: int = 4
    seed: int = 1
    slots: int = 1
    seq_len: int = 4096
    accuracies: tuple = ACCURACIES
    predictor: R.Predictor = field(default_factory=R.Predictor)


def cell_rng(seed: int, *parts) -> np.random.Generator:
    """A generator for one cell, from the run's seed and the cell's name: the same cell
    draws the same routing whatever else the run contains."""
    tag = zlib.crc32("/".join(map(str, parts)).encode())
    return np.random.default_rng([seed, tag])


def workload(skew: float, tokens: int, seq_len: int, seed: int) -> WorkloadConfig:
    routing = "uniform" if skew <= 1.0 else "skewed"
    return WorkloadConfig(name=f"skew{skew:g}", tokens_per_gpu=tokens, routing=routing,
                          seed=seed, skewness=max(1.0, skew), seq_len=seq_len)


class Cell:
    """One (system, tokens per GPU, skewness) point: its routing, predictions and costs."""

    def __init__(self, st: Settings, system: SystemConfig, tokens: int, skew: float,
                 batches: int | None = None):
        self.st, self.sys, self.T, self.skew = st, system, tokens, skew
        m = st.model
        self.G, self.E, self.k = system.gpus, m.experts, m.topk
        self.N = self.G * tokens * self.k
        self.cost = CostModel(system, m, tokens, st.seq_len)
        rng = cell_rng(st.seed, system.name, tokens, skew)
        self.rng = rng
        self.logp = popularity_logits(m, workload(skew, tokens, st.seq_len, st.seed), rng)
        ref = sample_routing(m, self.logp, 1, REFERENCE_TOKENS, rng)
        self.p = ref.load() / ref.load().sum()
        self.p_do = R.perturb(self.p, st.epsilon, rng)
        n = (st.batches if batches is None else batches) + 1
        self.routings = [sample_routing(m, self.logp, self.G, tokens, rng) for _ in range(n)]
        self.home = P.home_of(self.E, self.G)
        self.window = self.G * load_hub_config(m.hub_config).tags_per_source
        self.label = dict(system=system.name, link=system.intra_link, gpus=self.G,
                          tokens=tokens, skew=skew)

    def plan(self, shares: np.ndarray, keep: P.Placement | None = None) -> P.Placement:
        """Greedy duplication on predicted shares; ``keep``: the placement in use, whose
        replicas a re-plan prefers (:data:`.gps_place.KEEP_MARGIN`)."""
        return P.greedy_duplicate(np.asarray(shares) * self.N, self.G, self.st.slots,
                                  keep=None if keep is None else keep.extra(),
                                  min_new=MIN_REPLICA * self.N / self.G)

    def expected_flow(self, shares: np.ndarray, placement: P.Placement) -> np.ndarray:
        """flow[s, e, g] of the expected routing (every source routes ``shares``)."""
        f = (self.N / self.G) * np.asarray(shares)[None, :, None] * placement.weights()[None]
        return np.repeat(f, self.G, axis=0)



# ---------------------------------------------------------------------------- scalar
def scalar(cell: Cell, strategy: str, mode: str, error: float = 0.0,
           accuracy: float | None = None) -> LayerTime:
    """The paper's model: the expected routing, a plan on it, and the error ``error``
    (eps, or 1 - a) as a factor on the bottleneck GPU's rows (and, for Token-to-Expert,
    on the rows sent after the gate)."""
    c = cell
    load = c.p * c.N
    pl = P.home_placement(load, c.G) if strategy == "none" else c.plan(c.p)
    flow = c.expected_flow(c.p, pl)
    rows = flow.sum(axis=0)
    b = int(np.argmax(rows.sum(axis=0)))
    gemm = rows.copy()
    gemm[:, b] *= R.bottleneck_factor(mode, error, c.G)
    kw = dict(gemm_rows=gemm, split=strategy != "none", copy="hidden")
    if strategy == "token-to-expert":
        traffic = flow.sum(axis=1)
        post = error * traffic
        if mode == "pessimistic":                 # every late row into the bottleneck GPU
            post = np.zeros_like(traffic)
            post[:, b] = error * traffic.sum(axis=1)
        kw.update(pre=(1 - error) * flow, wasted=error * traffic, post=post,
                  predictor_us=c.st.predictor.time_us(c.cost.gpu, c.T, accuracy))
    return c.cost.layer(flow, **kw)


# ---------------------------------------------------------------------------- realized
class Realized:
    """Runs the strategies over a cell's batches with weight copies ``copy`` ("hidden":
    free, the paper's assumption; "exposed": over the link), remembering what each
    strategy remembers (its placement in use, the hub's counters)."""

    def __init__(self, cell: Cell, copy: str = "exposed"):
        self.c, self.copy = cell, copy
        self.plan_do = cell.plan(cell.p_do)
        self.prev: dict = {}                 # strategy -> placement in use
        self.est = cell.p_do.copy()          # hub counters' moving average, from the offline prior

    def layer(self, flow, **kw) -> LayerTime:
        return self.c.cost.layer(flow, copy=self.copy, home=self.c.home, **kw)

    def adopt(self, key, shares: np.ndarray) -> tuple:
        """(placement, copies) of a re-plan on predicted ``shares``, starting from the
        placement in use (at first the offline dist-only one, as deployed). With copies over
        the link a new plan is taken only if the time it saves per batch, on the
        prediction, repays its copies within :data:`PAYBACK_BATCHES` batches."""
        c = self.c
        old = self.prev.get(key) or self.plan_do
        new = c.plan(shares, old)
        copies = new.copies_from(old)
        if copies and self.copy == "exposed":
            f_new = c.expected_flow(shares, new)
            t_new = self.layer(f_new, split=True).total_us
            cost = self.layer(f_new, split=True, copies=copies).total_us - t_new
            gain = self.layer(c.expected_flow(shares, old), split=True).total_us - t_new
            if gain * PAYBACK_BATCHES <= cost:
                new, copies = old, []
        self.prev[key] = new
        return new, copies

    def batch(self, routing, t2e: bool = True) -> dict:
        """Every strategy on one batch -> {(strategy, accuracy): (LayerTime, error rate of
        its prediction against this batch)}."""
        c, out = self.c, {}
        A = routing.experts
        load = routing.load()
        home = P.home_placement(load, c.G)
        out[("none", None)] = (self.layer(P.static_flows(A, home)), 0.0)
        orc = c.plan(load / load.sum())
        out[("oracle", None)] = (c.cost.layer(P.static_flows(A, orc), split=True), 0.0)
        err_do = R.error_rate(c.p_do, load)
        out[("dist-only", None)] = (self.layer(P.static_flows(A, self.plan_do), split=True),
                                    err_do)
        out[("hub-choice", None)] = (self.layer(P.hub_flows(A, self.plan_do, c.window)), err_do)
        pl, cp = self.adopt("hub", self.est)
        err_hub = R.error_rate(self.est, load)
        out[("hub-counts", None)] = (self.layer(P.static_flows(A, pl), split=True, copies=cp),
                                     err_hub)
        out[("hub-both", None)] = (self.layer(P.hub_flows(A, pl, c.window), copies=cp), err_hub)
        self.est = R.ema(self.est, load)
        for a in (c.st.accuracies if t2e else ()):
            out[("token-to-expert", a)] = self.t2e(routing, a)
        return out

    def t2e(self, routing, a: float) -> tuple:
        """Token-to-Expert at accuracy ``a``: plan on the predicted rows (adopted as
        :meth:`adopt` says), then :func:`t2e_flows`."""
        c = self.c
        pred = R.predict_rows(routing.experts, a, c.p, c.rng)
        pexp = pred.reshape(-1).astype(np.int64)
        pl, cp = self.adopt(("t2e", a), np.bincount(pexp, minlength=c.E) / len(pexp))
        pre, post, wasted = t2e_flows(routing.experts, pred, pl)
        tp = c.st.predictor.time_us(c.cost.gpu, c.T, a)
        err = R.error_rate(np.bincount(pexp, minlength=c.E), routing.load())
        return (self.layer(pre + post, pre=pre, wasted=wasted, copies=cp, predictor_us=tp,
                           split=True), err)


def t2e_flows(experts: np.ndarray, pred: np.ndarray, placement: P.Placement) -> tuple:
    """(pre, post, wasted) of Token-to-Expert: every row is pre-sent during attention to
    the replica the plan gives its *predicted* expert; a right prediction's row is then
    where it belongs (``pre[s, e, g]``); a wrong one was sent for nothing
    (``wasted[s, d]`` rows) and the real row goes after the gate to the actual expert's
    replica by the static split (``post[s, e, g]``)."""
    G, T, k = experts.shape
    E = placement.experts
    src = np.repeat(np.arange(G), T * k)
    act = experts.reshape(-1).astype(np.int64)
    pexp = pred.reshape(-1).astype(np.int64)
    w = placement.weights()
    d_pred = P.static_rows(src, pexp, w)
    ok = pexp == act
    pre = P.flows_of(src[ok], act[ok], d_pred[ok], G, E)
    post = P.flows_of(src[~ok], act[~ok], P.static_rows(src[~ok], act[~ok], w), G, E)
    wasted = np.zeros((G, G))
    np.add.at(wasted, (src[~ok], d_pred[~ok]), 1.0)
    return pre, post, wasted


def run_cell(cell: Cell) -> list:
    """Rows (dicts) of every strategy and mode of one cell; Token-to-Expert once per
    accuracy (``best`` marks the fastest accuracy of each mode)."""
    rows = []
    st = cell.st
    for strat in ("none", "oracle", "dist-only"):
        for mode in R.ERROR_MODELS:
            e = st.epsilon if strat == "dist-only" else 0.0
            rows.append(_row(cell, strat, mode, None, [scalar(cell, strat, mode, e)], [e]))
    for a in st.accuracies:
        for mode in R.ERROR_MODELS:
            lt = scalar(cell, "token-to-expert", mode, 1 - a, a)
            rows.append(_row(cell, "token-to-expert", mode, a, [lt], [1 - a]))
    for copy, mode in (("hidden", "realized-hidden"), ("exposed", "realized")):
        run = Realized(cell, copy)
        acc: dict = {}
        for i, routing in enumerate(cell.routings):
            res = run.batch(routing)
            for key, (lt, err) in res.items():
                if i:                                  # batch 0 only warms up
                    acc.setdefault(key, []).append((lt, err))
        for (strat, a), got in acc.items():
            rows.append(_row(cell, strat, mode, a, [g[0] for g in got], [g[1] for g in got]))
    _mark_best(rows)
    return rows


def duplication(cell: Cell) -> dict:
    """What greedy duplication does on the cell: on the population shares (the plan
    dist-only would make with a perfect estimate) and on each batch's exact counts."""
    pl = cell.plan(cell.p)
    load = cell.p * cell.N
    before = [r.load() for r in cell.routings[1:]]
    after = [P.static_flows(r.experts, cell.plan(r.load() / r.load().sum())).sum(axis=(0, 1))
             for r in cell.routings[1:]]
    gpu0 = P.home_placement(load, cell.G).gpu_load()
    return {**cell.label, "replicas": int(pl.extra().sum()), "iterations": pl.iterations,
            "planned_before": float(gpu0.max() / gpu0.mean()),
            "planned_after": float(pl.gpu_load().max() / pl.gpu_load().mean()),
            "batch_before": float(np.mean([_gpu_ratio(b, cell) for b in before])),
            "batch_after": float(np.mean([a.max() / a.mean() for a in after]))}


def _gpu_ratio(expert_load: np.ndarray, cell: Cell) -> float:
    g = np.bincount(cell.home, weights=expert_load, minlength=cell.G)
    return float(g.max() / g.mean())


def _row(cell: Cell, strategy: str, mode: str, accuracy, lts: list, errs: list) -> dict:
    phases: dict = {}
    for lt in lts:
        for k, v in lt.phases.items():
            phases[k] = phases.get(k, 0.0) + v / len(lts)
    t = np.array([lt.total_us for lt in lts])
    return {**cell.label, "strategy": strategy, "mode": mode, "accuracy": accuracy,
            "layer_us": float(t.mean()), "layer_us_max": float(t.max()),
            "max_mean_rows": float(np.mean([lt.max_mean_rows for lt in lts])),
            "remote_fraction": float(np.mean([lt.remote_fraction for lt in lts])),
            "copies_per_batch": float(np.mean([lt.copies for lt in lts])),
            "error_rate": float(np.mean(errs)), "best": accuracy is None,
            "predictor_us": phases.get("predictor", 0.0),
            "exposed_window_us": phases.get("exposed window", 0.0),
            "dispatch_us": phases.get("dispatch", 0.0),
            "gemm_us": phases.get("expert GEMM", 0.0),
            "combine_us": phases.get("combine", 0.0)}


def _mark_best(rows: list) -> None:
    """Token-to-Expert's point per mode: its fastest accuracy (the paper's best config)."""
    for mode in MODES:
        t2e = [r for r in rows if r["strategy"] == "token-to-expert" and r["mode"] == mode]
        if t2e:
            min(t2e, key=lambda r: r["layer_us"])["best"] = True


def best(rows: list, mode: str) -> dict:
    """strategy -> its row in ``mode`` (Token-to-Expert: its best accuracy)."""
    return {r["strategy"]: r for r in rows if r["mode"] == mode and r["best"]}
