"""Predictions of the routing and the MoE-GPS error models.

* Distribution-Only: per-expert shares estimated offline. The paper measures its error
  rate as the mean over experts of |p_hat - p| / (1/E) (FACTS.md); :func:`perturb` makes an
  estimate with exactly that error rate against the population shares.
* Token-to-Expert: a predictor of per-row accuracy ``a`` (:func:`predict_rows`); its cost
  is a small MLP on every token whose width grows exponentially with the accuracy it
  reaches (:class:`Predictor`, the paper's exponential accuracy-vs-overhead fit; all its
  constants are ASSUMPTIONs: the paper does not report the fit).
* The three scalar error models (:func:`bottleneck_factor`): the bottleneck GPU's rows
  over the planned ones for error rate eps on G GPUs.
* The hub's answer: exact per-layer counters, smoothed across batches (:func:`ema`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the paper's three error models (Figure 5)
ERROR_MODELS = ("optimistic", "typical", "pessimistic")
#: ASSUMPTION: weight of the newest batch in the hub counters' moving average (a half-life
#: of one batch: follows drift within a batch or two, halves the batch-to-batch noise)
HUB_EMA_ALPHA = 0.5


def error_rate(estimate: np.ndarray, actual: np.ndarray) -> float:
    """MoE-GPS's error rate of a distribution estimate: mean |p_hat - p| / (1/E)."""
    p = np.asarray(actual, float) / np.sum(actual)
    q = np.asarray(estimate, float) / np.sum(estimate)
    return float(np.mean(np.abs(q - p)) * len(p))


def perturb(p: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """An estimate of the shares ``p`` whose error rate is ``eps``: multiplicative
    log-normal noise of one random direction, scaled by bisection to hit ``eps`` (the
    largest reachable error if ``eps`` is beyond it)."""
    p = np.asarray(p, float) / np.sum(p)
    if eps <= 0:
        return p.copy()
    z = rng.standard_normal(len(p))
    est = lambda s: p * np.exp(s * z) / np.sum(p * np.exp(s * z))   # noqa: E731
    lo, hi = 0.0, 1.0
    while error_rate(est(hi), p) < eps and hi < 64:
        hi *= 2
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if error_rate(est(mid), p) < eps else (lo, mid)
    return est(hi)


def bottleneck_factor(model: str, eps: float, gpus: int) -> float:
    """Rows of the bottleneck GPU over the planned (balanced) rows, per error model:
    optimistic 1 (errors leave the bottleneck alone), typical 1 + eps (errors spread
    evenly: the paper's default), pessimistic 1 + eps (G - 1) (the errors of all G - 1
    other GPUs land on one: the paper's Figure 5; its text says G (1 + eps), more rows
    than the layer has, and is not used)."""
    if model == "optimistic":
        return 1.0
    if model == "typical":
        return 1.0 + eps
    if model == "pessimistic":
        return 1.0 + eps * (gpus - 1)
    raise ValueError(f"error model {model!r}: expected one of {', '.join(ERROR_MODELS)}")


def predict_rows(experts: np.ndarray, accuracy: float, p: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """Token-to-Expert predictions of a routing ``experts[g, t, j]``: each row is right
    with probability ``accuracy``; a wrong row names another expert drawn from the
    popularity ``p`` among those the token does not use. ASSUMPTION: errors are
    independent per row and lean toward popular experts, as a classifier's do."""
    G, T, k = experts.shape
    pred = experts.copy()
    miss = rng.random(experts.shape) >= accuracy
    if not miss.any() or k >= len(p):
        return pred
    g, t, j = np.nonzero(miss)
    cand = rng.choice(len(p), size=(len(g), 8), p=np.asarray(p) / np.sum(p))
    used = experts[g, t]                                        # (m, k)
    ok = ~(cand[:, :, None] == used[:, None, :]).any(axis=2)
    first = np.argmax(ok, axis=1)
    pick = cand[np.arange(len(g)), first]
    none = ~ok.any(axis=1)                                      # 8 draws all used: any other
    for i in np.nonzero(none)[0]:
        pick[i] = rng.choice(np.setdiff1d(np.arange(len(p)), used[i]))
    pred[g, t, j] = pick
    return pred


@dataclass(frozen=True)
class Predictor:
    """A Token-to-Expert predictor: an MLP hidden -> width -> experts run on every token
    of the layer (two GEMMs on the GPU model: it reads its weights and computes on the
    critical path, before the layer). ASSUMPTION (the paper fits overhead against accuracy
    with an exponential but does not report the fit): width grows exponentially with
    accuracy, from ``width_lo`` at ``acc_lo`` to ``width_hi`` at ``acc_hi``. For
    comparison, arXiv 2511.10676 reports 93-97.6 % from two linear maps before attention,
    a far cheaper curve."""
    acc_lo: float = 0.60          #: ASSUMPTION: a narrow MLP's accuracy
    width_lo: int = 256           #: ASSUMPTION
    acc_hi: float = 0.99          #: ASSUMPTION: near-exact needs a predictor as wide as an FFN
    width_hi: int = 16384         #: ASSUMPTION

    def width(self, accuracy: float) -> float:
        s = (accuracy - self.acc_lo) / (self.acc_hi - self.acc_lo)
        return self.width_lo * (self.width_hi / self.width_lo) ** s

    def time_us(self, gpu, tokens: int, accuracy: float) -> float:
        """Two GEMMs and their launches on the calibrated GPU model."""
        m, w = gpu.model, self.width(accuracy)
        t = 0.0
        for n, kk in ((w, m.hidden), (m.experts, w)):
            flops = 2.0 * tokens * n * kk
            nbytes = (n * kk) * m.weight_bytes + tokens * (n + kk) * m.act_bytes
            t += gpu.launch + gpu.gemm_us(flops, nbytes, tokens, n, k=kk)
        return t


def ema(prev: np.ndarray, counts: np.ndarray, alpha: float = HUB_EMA_ALPHA) -> np.ndarray:
    """The hub's distribution: the moving average of the exact per-expert row counts
    that software reads from the hub's counters after each batch (shares, sum 1)."""
    c = np.asarray(counts, float) / max(float(np.sum(counts)), 1.0)
    return (1.0 - alpha) * np.asarray(prev, float) + alpha * c
