"""How many copies of a token row the dispatch really has to move: deduplication arithmetic.

The systems of :mod:`.systems` send one row per (token, expert). A token whose top-k
experts share a GPU (or a node) need not travel once per expert:

* per row (what the systems send today): one row per (token, expert);
* per GPU (DeepEP normal mode, intranode): one copy per (token, destination GPU), the
  receiver fans it out to its local experts;
* per node (DeepEP normal mode, internode): one RDMA copy per (token, destination node),
  sent to the GPU of that node with the source's local rank (the *receiver*), which
  forwards it over NVLink to the other GPUs of its node that need the token. For the
  source's own node the receiver is the source itself (no NIC traffic).

Everything here is pure numpy on ``dest[g, t, j]``: the destination GPU of the j-th expert
of token t of source GPU g, as :func:`placement_dest` computes it from a routing with
:class:`~.layer.Layer`'s placement rule. Counts are row copies; multiply by the wire row
bytes (:attr:`ModelConfig.dispatch_row_bytes`) for bytes.
"""
from __future__ import annotations

import numpy as np

from .workload import Routing

__all__ = ["placement_dest", "rows_per_pair", "unique_gpu_rows", "unique_node_rows",
           "forward_rows", "pilots", "pilot_routes", "bytes_per_token"]


def placement_dest(experts, gpus: int, num_experts: int | None = None) -> np.ndarray:
    """dest[g, t, j]: the GPU that serves expert experts[g, t, j] for source GPU g.

    Same rule as :class:`~.layer.Layer`: with G <= E GPUs, GPU d holds experts
    d*E/G .. (d+1)*E/G - 1; with G = R x E GPUs every expert has R replicas and source s
    uses replica floor(s R / G) (expert e's replica r sits on GPU e + r E).
    ``experts`` is a :class:`~.workload.Routing` or an array with ``num_experts`` given."""
    if isinstance(experts, Routing):
        experts, num_experts = experts.experts, experts.num_experts
    if num_experts is None:
        raise ValueError("placement_dest: num_experts is required with an expert array")
    exp = np.asarray(experts, dtype=np.int64)
    E, G = int(num_experts), int(gpus)
    if exp.shape[0] != G:
        raise ValueError(f"placement_dest: routing has {exp.shape[0]} sources, not {G} GPUs")
    if G <= E:
        if E % G:
            raise ValueError(f"placement_dest: {E} experts do not divide over {G} GPUs")
        return exp // (E // G)
    if G % E:
        raise ValueError(f"placement_dest: {G} GPUs are not a multiple of {E} experts")
    src = np.arange(G).reshape((G,) + (1,) * (exp.ndim - 1))
    return exp + E * ((src * (G // E)) // G)


def _sources(dest: np.ndarray) -> np.ndarray:
    """Source GPU of every entry of dest[g, t, j] (the first axis)."""
    return np.broadcast_to(np.arange(dest.shape[0]).reshape(-1, 1, 1), dest.shape)


def _first_of_token(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys sorted within each token, mask of each distinct key's first occurrence):
    the distinct (token, key) pairs, whatever the order of the top-k slots."""
    ks = np.sort(keys, axis=-1)
    first = np.ones(ks.shape, dtype=bool)
    first[..., 1:] = ks[..., 1:] != ks[..., :-1]
    return ks, first


def _pair_counts(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """counts[r, c] of the (rows, cols) pairs given as equal-shaped index arrays."""
    flat = rows.ravel().astype(np.int64) * shape[1] + cols.ravel()
    return np.bincount(flat, minlength=shape[0] * shape[1]).reshape(shape)


def _node_size(G: int, gpus_per_node: int) -> int:
    """GPUs per node as SystemConfig.node_of sees it (a system smaller than a node is one node)."""
    n = min(int(gpus_per_node), G)
    if n < 1 or G % n:
        raise ValueError(f"{G} GPUs do not form whole nodes of {gpus_per_node}")
    return n


def rows_per_pair(dest: np.ndarray, G: int) -> np.ndarray:
    """counts[s, d]: one row per (token, expert), what the systems send today."""
    return _pair_counts(_sources(dest), dest, (G, G))


def unique_gpu_rows(dest: np.ndarray, G: int) -> np.ndarray:
    """counts[s, d]: one copy per (token, destination GPU), DeepEP normal mode's per-rank
    dedup (the receiver hands the copy to each of its experts the token chose)."""
    ds, first = _first_of_token(dest)
    return _pair_counts(_sources(dest)[first], ds[first], (G, G))


def unique_node_rows(dest: np.ndarray, G: int, gpus_per_node: int) -> np.ndarray:
    """counts[s, n]: one copy per (token, destination node), the inter-node hop of DeepEP
    normal internode (one RDMA copy per node). Column ``node(s)`` is the source's own node:
    a local copy, no NIC traffic."""
    n = _node_size(G, gpus_per_node)
    ns, first = _first_of_token(dest // n)
    return _pair_counts(_sources(dest)[first], ns[first], (G, G // n))


def forward_rows(dest: np.ndarray, G: int, gpus_per_node: int) -> np.ndarray:
    """counts[r, d]: NVLink forwarding after the per-node copy. The copy for node N lands
    on N's GPU with the source's local rank (r); r forwards one row per (token, destination
    GPU d of N) with d != r. In the source's own node r is the source itself."""
    n = _node_size(G, gpus_per_node)
    ds, first = _first_of_token(dest)
    src = _sources(dest)[first]
    d = ds[first]
    r = (d // n) * n + src % n
    fwd = d != r
    return _pair_counts(r[fwd], d[fwd], (G, G))


def pilots(dest: np.ndarray, gpus_per_node: int, priority: np.ndarray | None = None):
    """X-MoE's redundancy-bypassing dispatch (RBD): of each (token, destination node) group
    of a token's experts, one entry is the *pilot* (its copy crosses to that node) and the
    others are its *replicas* (the pilot's GPU copies the row to them inside the node).
    Returns, per entry of ``dest[g, t, j]``, the pilot's GPU and whether the entry is the
    pilot. The pilot is the group's entry with the lowest ``priority`` (same shape as
    ``dest``; ties and ``None``: the first in the router's top-k order). X-MoE's
    ``map_dup_tokens`` takes the first occurrence under a random permutation of the rows
    (``torch.randperm`` in ``TopKGateRBD.forward``): a uniformly random priority."""
    G = dest.shape[0]
    n = _node_size(G, gpus_per_node)
    node = dest // n
    if priority is None:
        order = np.argsort(node, axis=-1, kind="stable")
    else:
        order = np.lexsort((np.asarray(priority), node), axis=-1)
    ds = np.take_along_axis(dest, order, axis=-1)
    ns = ds // n
    start = np.ones(ds.shape, dtype=bool)
    start[..., 1:] = ns[..., 1:] != ns[..., :-1]
    k = ds.shape[-1]
    head = np.maximum.accumulate(np.where(start, np.arange(k), 0), axis=-1)
    pilot, is_pilot = np.empty_like(dest), np.empty(dest.shape, dtype=bool)
    np.put_along_axis(pilot, order, np.take_along_axis(ds, head, axis=-1), axis=-1)
    np.put_along_axis(is_pilot, order, start, axis=-1)
    return pilot, is_pilot


def pilot_routes(dest: np.ndarray, G: int, gpus_per_node: int,
                 priority: np.ndarray | None = None):
    """RBD's row copies (:func:`pilots`): ``first[s, p]`` pilots source s sends GPU p (every
    node, the source's own too; ``p == s`` a local copy), ``second[p, d]`` replicas GPU p
    makes for GPU d of its node (``p == d``: for its own experts, a local copy), and
    ``virtual[s, p]`` the replicas of source s's tokens that GPU p makes (what X-MoE's
    metadata all-to-alls send p: one index and one combine weight per replica)."""
    pilot, is_pilot = pilots(dest, gpus_per_node, priority)
    src = _sources(dest)
    rep = ~is_pilot
    return (_pair_counts(src[is_pilot], dest[is_pilot], (G, G)),
            _pair_counts(pilot[rep], dest[rep], (G, G)),
            _pair_counts(src[rep], pilot[rep], (G, G)))


def _split_links(counts: np.ndarray, n: int) -> tuple[float, float]:
    """(NVLink rows, NIC rows) of a src x dest GPU count matrix; a GPU's own rows use neither."""
    G = counts.shape[0]
    node = np.arange(G) // n
    same = node[:, None] == node[None, :]
    off = ~np.eye(G, dtype=bool)
    return float(counts[same & off].sum()), float(counts[~same].sum())


def bytes_per_token(dest: np.ndarray, G: int, gpus_per_node: int, row_bytes: int) -> dict:
    """Mean bytes one token puts on NVLink and on the NICs under each dispatch scheme.

    Returns ``{"per_row" | "per_gpu" | "per_node": {"nvlink": B, "nic": B}}``; per_node is
    the node copy over the NICs plus the NVLink forwarding (:func:`forward_rows`)."""
    n = _node_size(G, gpus_per_node)
    tokens = dest.shape[0] * dest.shape[1]
    out = {}
    for name, counts in (("per_row", rows_per_pair(dest, G)),
                         ("per_gpu", unique_gpu_rows(dest, G))):
        nvl, nic = _split_links(counts, n)
        out[name] = {"nvlink": nvl * row_bytes / tokens, "nic": nic * row_bytes / tokens}
    per_node = unique_node_rows(dest, G, gpus_per_node)
    own = np.arange(G) // n
    nic = per_node.sum() - per_node[np.arange(G), own].sum()
    nvl = forward_rows(dest, G, gpus_per_node).sum()
    out["per_node"] = {"nvlink": float(nvl) * row_bytes / tokens,
                       "nic": float(nic) * row_bytes / tokens}
    return out
