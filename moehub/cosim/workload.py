"""MoE routing workloads: per-token top-k expert choices for every GPU, from a seed.

* ``uniform``: each token picks k distinct experts uniformly at random.
* ``skewed``: experts get popularities p_e proportional to rank^-alpha (Zipf-like, ranks
  shuffled by the seed so the hot expert can sit on any GPU); each token draws k distinct
  experts with probability proportional to p (Gumbel top-k = sampling without replacement).
  alpha is found by bisection so that the expected skewness (tokens of the most loaded
  expert / mean, MoE-GPS's definition) matches the target.
* ``trace``: a file of expert ids, one line (row) of k ids per token (.npy, or text with
  comma/space separated ids); tokens are dealt to GPUs in order, GPU g taking tokens
  g*T .. g*T+T-1, and the trace is repeated if it is shorter than G x T tokens.

Group-limited (node-limited) routing, DeepSeek-V3's ``n_group`` / ``topk_group``: the
experts form ``routing_groups`` contiguous blocks; a group scores the sum of its two best
expert scores, the token keeps its ``routing_topk_groups`` best groups and takes its top-k
among their experts. ``uniform`` and ``skewed`` apply it to the per-token scores (Gumbel +
log popularity); a ``trace`` must already honour it. With one group (the default) the
draws and picks are exactly those of unrestricted top-k.

Everything is reproducible from ``workload.seed``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..spec.config import ConfigError
from .config import ModelConfig, WorkloadConfig


@dataclass
class Routing:
    """experts[g, t, j]: the j-th expert (0..E-1) chosen by token t of GPU g."""
    experts: np.ndarray
    num_experts: int

    @property
    def gpus(self) -> int:
        return self.experts.shape[0]

    @property
    def tokens(self) -> int:
        return self.experts.shape[1]

    @property
    def topk(self) -> int:
        return self.experts.shape[2]

    def load(self) -> np.ndarray:
        """Rows routed to each expert (all GPUs)."""
        return np.bincount(self.experts.ravel(), minlength=self.num_experts)

    def skewness(self) -> float:
        load = self.load()
        return float(load.max() / load.mean())


def _group_mask(g: np.ndarray, groups: int, topk_groups: int) -> np.ndarray:
    """Scores with every expert outside the token's ``topk_groups`` best groups at -inf.

    A group's score is the sum of its two best expert scores (its best one if it has a
    single expert), as DeepSeek-V3's gate ranks groups; contiguous blocks of experts form
    the groups, so a group maps onto the GPUs (nodes) holding it."""
    m, E = g.shape
    per = g.reshape(m, groups, E // groups)
    top2 = -np.partition(-per, min(1, per.shape[2] - 1), axis=2)[:, :, :2]
    gscore = top2.sum(axis=2)
    keep = np.argpartition(-gscore, topk_groups - 1, axis=1)[:, :topk_groups]
    mask = np.full((m, groups), True)
    np.put_along_axis(mask, keep, False, axis=1)
    out = per.copy()
    out[mask] = -np.inf
    return out.reshape(m, E)


def _topk_gumbel(rng, logp: np.ndarray, n: int, k: int, chunk: int = 4096,
                 groups: int = 1, topk_groups: int = 1) -> np.ndarray:
    """n draws of k distinct experts, without replacement, with probability ~ exp(logp);
    with ``topk_groups < groups`` only inside each draw's best groups (:func:`_group_mask`).

    The random draws are the same with or without the group limit, so one group gives
    exactly the unrestricted routing."""
    E = len(logp)
    out = np.empty((n, k), dtype=np.int32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        g = rng.gumbel(size=(m, E)).astype(np.float32) + logp.astype(np.float32)
        if topk_groups < groups:
            g = _group_mask(g, groups, topk_groups)
        if k < E:
            idx = np.argpartition(-g, k - 1, axis=1)[:, :k]
        else:
            idx = np.tile(np.arange(E), (m, 1))
        # order the k picks by score (the router's top-k order)
        order = np.argsort(-np.take_along_axis(g, idx, axis=1), axis=1)
        out[s:s + m] = np.take_along_axis(idx, order, axis=1)
    return out


def _expected_skew(alpha: float, E: int, k: int, seed: int, groups: int = 1,
                   topk_groups: int = 1, perm: np.ndarray | None = None) -> float:
    """Skewness of a large sample drawn with popularity rank^-alpha (fixed sample seed),
    under the same group limit as the routing it calibrates.

    ``perm`` places the ranks on experts as the routing does: under a group limit the
    skewness depends on which hot experts share a group (rank order would put them all in
    group 0); unrestricted routing does not care, and its sample stays as it was."""
    rng = np.random.default_rng(seed)
    logp = -alpha * np.log(np.arange(1, E + 1))
    if perm is not None:
        logp = logp[perm]
    n = max(4096, 64 * E // k)
    picks = _topk_gumbel(rng, logp, n, k, groups=groups, topk_groups=topk_groups)
    load = np.bincount(picks.ravel(), minlength=E)
    return float(load.max() / load.mean())


def skew_alpha(target: float, E: int, k: int, seed: int = 12345, groups: int = 1,
               topk_groups: int = 1, perm: np.ndarray | None = None) -> float:
    """Zipf exponent whose routing (with the model's group limit and, if given, its
    placement ``perm`` of the ranks) has the target skewness (bisection)."""
    if target <= 1.0:
        return 0.0
    lo, hi = 0.0, 8.0
    skew = lambda a: _expected_skew(a, E, k, seed, groups, topk_groups, perm)  # noqa: E731
    if skew(hi) < target:
        raise ConfigError(f"workload.skewness = {target!r}: unreachable with {E} experts and "
                          f"top-{k} (at most {E / k:.2f} when every token picks the hot expert)")
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if skew(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-3:
            break
    return 0.5 * (lo + hi)


def load_trace(path: str, k: int, E: int) -> np.ndarray:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"workload.trace_path = {path!r}: file does not exist")
    if p.suffix == ".npy":
        arr = np.load(p)
    else:
        rows = [line.replace(",", " ").split() for line in p.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
        try:
            arr = np.array([[int(x) for x in r] for r in rows])
        except ValueError:
            raise ConfigError(f"workload.trace_path = {path!r}: expected integer expert ids") from None
    if arr.ndim != 2 or arr.shape[1] != k or arr.shape[0] == 0:
        raise ConfigError(f"workload.trace_path = {path!r}: expected rows of top-{k} expert ids, "
                          f"got shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= E:
        raise ConfigError(f"workload.trace_path = {path!r}: expert ids must lie in 0..{E - 1}")
    if any(len(set(r)) != k for r in arr[: min(len(arr), 10000)].tolist()):
        raise ConfigError(f"workload.trace_path = {path!r}: a token lists the same expert twice")
    return arr.astype(np.int32)


def check_trace_groups(arr: np.ndarray, model: ModelConfig, path: str) -> None:
    """A trace of a group-limited model must keep every token inside routing_topk_groups
    groups: a trace that does not cannot come from the model's router."""
    if not model.group_limited:
        return
    grp = np.sort(arr // model.experts_per_group, axis=1)
    spans = 1 + (np.diff(grp, axis=1) != 0).sum(axis=1)
    bad = np.nonzero(spans > model.routing_topk_groups)[0]
    if len(bad):
        t = int(bad[0])
        raise ConfigError(
            f"workload.trace_path = {path!r}: token {t} (experts {arr[t].tolist()}) reaches "
            f"{spans[t]} expert groups, more than model.routing_topk_groups = "
            f"{model.routing_topk_groups} of {model.routing_groups} groups")


def popularity_logits(model: ModelConfig, workload: WorkloadConfig,
                      rng: np.random.Generator) -> np.ndarray:
    """Log-popularity of every expert under a ``uniform`` or ``skewed`` workload (the
    skewed ranks placed on experts by a permutation drawn from ``rng``); the studies
    (:mod:`.studies.gps`) sample batches from it and perturb it to model drift."""
    E, k = model.experts, model.topk
    if workload.routing == "uniform":
        return np.zeros(E)
    if workload.routing != "skewed":
        raise ConfigError(f"workload.routing = {workload.routing!r}: no popularity to draw "
                          "from (expected uniform or skewed)")
    grp = dict(groups=model.routing_groups, topk_groups=model.routing_topk_groups)
    perm = rng.permutation(E)        # hot experts land on random GPUs (and groups)
    alpha = skew_alpha(workload.skewness, E, k, **grp,
                       perm=perm if model.group_limited else None)
    return (-alpha * np.log(np.arange(1, E + 1)))[perm]


def sample_routing(model: ModelConfig, logp: np.ndarray, gpus: int, tokens: int,
                   rng: np.random.Generator) -> Routing:
    """``tokens`` tokens on each of ``gpus`` GPUs, each picking the model's top-k experts
    with probability ~ exp(logp) (under its group limit)."""
    picks = _topk_gumbel(rng, logp, gpus * tokens, model.topk, groups=model.routing_groups,
                         topk_groups=model.routing_topk_groups)
    return Routing(picks.reshape(gpus, tokens, model.topk), model.experts)


def make_routing(model: ModelConfig, workload: WorkloadConfig, gpus: int) -> Routing:
    """Routing of ``workload.tokens_per_gpu`` tokens on each of ``gpus`` GPUs."""
    E, k, T = model.experts, model.topk, workload.tokens_per_gpu
    rng = np.random.default_rng(workload.seed)
    if workload.routing in ("uniform", "skewed"):
        return sample_routing(model, popularity_logits(model, workload, rng), gpus, T, rng)
    arr = load_trace(workload.trace_path, k, E)
    check_trace_groups(arr, model, workload.trace_path)
    picks = arr[np.arange(gpus * T) % len(arr)]
    return Routing(picks.reshape(gpus, T, k), E)
