"""Where experts live and which replica each routed row goes to (MoE-GPS study).

A :class:`Placement` says which GPUs hold a replica of each expert and how many rows the
planner meant each replica to take (``share``, rows of expert e on GPU g). Experts start
on their home GPU (contiguous blocks, as :class:`~moehub.cosim.layer.Layer` places them);
:func:`greedy_duplicate` is MoE-GPS Algorithm 1 (FACTS.md, "Load imbalance").

Rows are then handed to replicas in one of two ways, both returning ``flow[s, e, g]``
(rows of expert e from source GPU s processed on GPU g):

* :func:`static_flows` / :func:`static_rows` -- software with a static placement: each
  source splits its rows of an expert over the replicas in the planned proportions (a
  layout pass that knows the planned shares, not the other sources' rows);
* :func:`hub_flows` -- the hub's logical destination: a source picks, per row, the replica
  it believes least loaded. Its view is each GPU's received-row count (the hub counts
  rows exactly) as of one credit round trip ago plus its own rows sent since: rows move
  in blocks of one credit window (``window`` rows in flight over all sources), every
  source sees the loads at the block's start and water-fills its own rows of the block.
  ASSUMPTION: the receiving hub's row count travels back with the credits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.config import ConfigError

#: smallest planned move (rows) that the greedy still makes; below it the step is "no
#: improvement" and the algorithm stops (paper: stop when balanced within one token)
MIN_MOVE = 0.5
#: ASSUMPTION: a re-plan keeps using a replica that is already there when its GPU is
#: within this fraction of the mean GPU load of the coldest candidate (hysteresis: a
#: copy costs a whole expert's weights, a few percent of balance does not)
KEEP_MARGIN = 0.05


@dataclass
class Placement:
    """``share[e, g]``: rows of expert e the plan sends to GPU g; ``held[e, g]``: GPU g
    holds a replica of e; ``home[e]``: the GPU that holds e without duplication."""
    share: np.ndarray
    held: np.ndarray
    home: np.ndarray
    iterations: int = 0

    @property
    def experts(self) -> int:
        return self.share.shape[0]

    @property
    def gpus(self) -> int:
        return self.share.shape[1]

    def gpu_load(self) -> np.ndarray:
        """Planned rows per GPU."""
        return self.share.sum(axis=0)

    def weights(self) -> np.ndarray:
        """Planned fraction of each expert's rows per replica (home only for an expert the
        plan gave no rows, so every expert has somewhere to go)."""
        w = np.where(self.held, self.share, 0.0)
        tot = w.sum(axis=1, keepdims=True)
        home = np.zeros_like(w)
        home[np.arange(self.experts), self.home] = 1.0
        return np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), home)

    def extra(self) -> np.ndarray:
        """Replicas beyond the home copies (bool, experts x GPUs)."""
        out = self.held.copy()
        out[np.arange(self.experts), self.home] = False
        return out

    def copies_from(self, before: "Placement | None") -> list:
        """(expert, GPU) replicas this placement holds that ``before`` did not: the weight
        copies needed to switch to it (``before`` None: from the home placement)."""
        prev = before.held if before is not None else ~self.extra() & self.held
        return [(int(e), int(g)) for e, g in zip(*np.nonzero(self.held & ~prev))]


def home_of(experts: int, gpus: int) -> np.ndarray:
    """Contiguous placement: GPU g holds experts g*E/G .. (g+1)*E/G - 1."""
    if gpus < 1 or experts % gpus:
        raise ConfigError(f"system.gpus = {gpus}: the {experts} experts do not divide evenly "
                          "over the GPUs (the study places whole experts)")
    return np.arange(experts) // (experts // gpus)


def home_placement(load: np.ndarray, gpus: int) -> Placement:
    """No duplication: every expert's rows on its home GPU."""
    E = len(load)
    home = home_of(E, gpus)
    share = np.zeros((E, gpus))
    share[np.arange(E), home] = load
    held = np.zeros((E, gpus), dtype=bool)
    held[np.arange(E), home] = True
    return Placement(share, held, home)


def greedy_duplicate(load: np.ndarray, gpus: int, max_extra: int = 1,
                     max_iter: int | None = None, keep: np.ndarray | None = None,
                     min_new: float = 0.0) -> Placement:
    """MoE-GPS Algorithm 1 on predicted rows per expert ``load``.

    While the most and the least loaded GPU differ by more than one row: take the most
    loaded GPU's hottest expert and move half the difference of its rows to the least
    loaded GPU that holds that expert or has a free replica slot (``max_extra`` extra
    experts per GPU, the memory a layer may spend on copies). Stops when balanced, when
    no GPU can take the expert, or when the move would be under :data:`MIN_MOVE` rows.

    It terminates: a move of m <= diff/2 rows lowers the sum of squared GPU loads by
    2 m (diff - m) >= m * diff > MIN_MOVE, and that sum cannot go below zero; ``max_iter``
    (default 64 x experts x GPUs) bounds it regardless.

    ``min_new``: a *new* replica is made only for a move of at least this many rows (a
    replica streams a whole expert's weights; the paper's algorithm is ``min_new = 0``);
    a smaller move goes to a GPU that already holds the expert, if one is colder.
    ``keep`` (experts x GPUs, the replicas already in place from the previous plan): a GPU
    that already holds the expert is preferred while its load is within
    :data:`KEEP_MARGIN` of the mean above the coldest candidate, so a re-plan on noisy
    counts does not copy weights back and forth.
    """
    p = home_placement(np.asarray(load, dtype=float), gpus)
    share, held = p.share, p.held
    extra = np.zeros(gpus, dtype=int)
    limit = max_iter if max_iter is not None else 64 * len(load) * gpus
    bonus = np.zeros_like(held, dtype=float) if keep is None else \
        np.asarray(keep, dtype=bool) * KEEP_MARGIN * float(np.sum(load)) / gpus
    it = 0
    while it < limit:
        gl = share.sum(axis=0)
        hot = int(np.argmax(gl))
        e = int(np.argmax(share[:, hot]))
        step = _greedy_step(gl, hot, share[e, hot], held[e], extra < max_extra,
                            bonus[e], min_new)
        if step is None:
            break
        cold, move = step
        if not held[e, cold]:
            held[e, cold] = True
            extra[cold] += 1
        share[e, hot] -= move
        share[e, cold] += move
        it += 1
    p.iterations = it
    return p


def _greedy_step(gl, hot, hot_share, holds, free, bonus, min_new):
    """(target GPU, rows) of one greedy move of an expert with ``hot_share`` rows on the
    hot GPU, or None when no move improves: the coldest GPU that holds the expert or has a
    free slot (``bonus`` favours existing replicas); if that needs a new replica for less
    than ``min_new`` rows, the coldest existing holder instead."""
    for ok in (holds | free, holds):
        ok = ok.copy()
        ok[hot] = False
        if not ok.any():
            continue
        cold = int(np.argmin(np.where(ok, gl - bonus, np.inf)))
        diff = gl[hot] - gl[cold]
        move = min(diff / 2.0, hot_share)
        if diff <= 1.0 or move < MIN_MOVE:
            return None
        if holds[cold] or move >= min_new:
            return cold, move
    return None


def static_rows(src: np.ndarray, exp: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Destination GPU of every row under a static split: within each (source, expert)
    group the j-th of n rows goes to the replica whose cumulative planned weight first
    reaches (j + 1/2) / n, so each source splits its rows in the planned proportions."""
    n = len(exp)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    E = weights.shape[0]
    key = src.astype(np.int64) * E + exp
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.r_[0, np.nonzero(np.diff(ks))[0] + 1]
    sizes = np.diff(np.r_[starts, n])
    rank = np.arange(n) - np.repeat(starts, sizes)
    u = np.empty(n)
    u[order] = (rank + 0.5) / np.repeat(sizes, sizes)
    cum = np.cumsum(weights, axis=1)[exp]
    return np.argmax(cum >= u[:, None] - 1e-12, axis=1)


def flows_of(src: np.ndarray, exp: np.ndarray, dest: np.ndarray, gpus: int,
             experts: int) -> np.ndarray:
    """``flow[s, e, g]`` counted from per-row source, expert and destination."""
    idx = (src.astype(np.int64) * experts + exp) * gpus + dest
    return np.bincount(idx, minlength=gpus * experts * gpus).reshape(gpus, experts, gpus)


def static_flows(experts: np.ndarray, placement: Placement) -> np.ndarray:
    """Flows of a routing ``experts[g, t, j]`` under the static split of ``placement``."""
    G, T, k = experts.shape
    src = np.repeat(np.arange(G), T * k)
    exp = experts.reshape(-1).astype(np.int64)
    dest = static_rows(src, exp, placement.weights())
    return flows_of(src, exp, dest, G, placement.experts)


def waterfill(loads: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Integer rows per target when each of several sources puts ``n[s]`` rows onto the
    targets with ``loads``, each row on the least loaded (the source's own rows counted,
    the others' not): the lowest targets are raised to a common level, remainders go to
    the lowest. Returns (sources, targets)."""
    order = np.argsort(loads, kind="stable")
    ls = loads[order].astype(float)
    r = len(ls)
    cs = np.cumsum(ls)
    need = np.arange(1, r + 1) * ls - cs                  # rows to raise the first j to ls[j-1]
    j = np.maximum(1, (need[None, :] <= n[:, None] + 1e-9).sum(axis=1))
    level = (n + cs[j - 1]) / j
    fill = np.clip(level[:, None] - ls[None, :], 0.0, None)
    fill[np.arange(r)[None, :] >= j[:, None]] = 0.0
    out = np.floor(fill + 1e-9)
    rem = (n - out.sum(axis=1)).astype(int)
    out += (np.arange(r)[None, :] < rem[:, None])
    res = np.zeros_like(out)
    res[:, order] = out
    return res.astype(np.int64)


def hub_flows(experts: np.ndarray, placement: Placement, window: int) -> np.ndarray:
    """Flows when every row picks its replica at the source, least loaded first, on a view
    one credit window (``window`` rows over all sources) old (see the module docstring).
    Sources send in token order, all at once: a block is ``window // (G k)`` tokens of
    every source."""
    G, T, k = experts.shape
    E = placement.experts
    tpb = max(1, window // (G * k))
    blocks = -(-T // tpb)
    blk = np.repeat(np.arange(T) // tpb, k)
    src = np.repeat(np.arange(G), T * k)
    exp = experts.reshape(-1).astype(np.int64)
    cnt = np.bincount((np.tile(blk, G) * G + src) * E + exp,
                      minlength=blocks * G * E).reshape(blocks, G, E)
    held = placement.held
    multi = np.nonzero(held.sum(axis=1) > 1)[0]
    single = np.setdiff1d(np.arange(E), multi)
    owner = np.argmax(held, axis=1)
    flow = np.zeros((G, E, G), dtype=np.int64)
    flow[:, single, owner[single]] = cnt[:, :, single].sum(axis=0)
    fixed = np.zeros((blocks, G))
    np.add.at(fixed.T, owner[single], cnt[:, :, single].sum(axis=1).T)
    load = np.zeros(G)
    holders = {int(e): np.nonzero(held[e])[0] for e in multi}
    for b in range(blocks):
        add = fixed[b].copy()
        for e in multi:
            n = cnt[b, :, e]
            if not n.any():
                continue
            h = holders[int(e)]
            alloc = waterfill(load[h], n)
            flow[:, e, h] += alloc
            add[h] += alloc.sum(axis=0)
        load += add
    return flow
