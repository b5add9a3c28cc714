"""Redundancy-bypassing hierarchical dispatch (X-MoE study, part 2): who sends which row
copies where, and how many bytes cross the inter-node links.

A token whose top-k experts share a remote node need not cross the slow link once per
expert. Every scheme here is a pair of G x G row-copy matrices over ``dest[g, t, j]`` (the
destination GPU of the j-th expert of token t of source GPU g, the co-simulation's
placement): ``first[s, d]`` copies on the first hop, ``second[r, d]`` copies a GPU r
forwards inside its node (the diagonal: copies r keeps for its own experts, no link).

* ``plain`` (:func:`plain_routes`): one row per (token, expert), straight to its GPU: the
  bulk all-to-all of DeepSpeed / Megatron and the hub of protocol v1.
* ``pilot`` (:func:`pilot_routes`): X-MoE's RBD. One *pilot* copy per (token,
  destination node), to the GPU of one of the token's experts in that node; that GPU
  makes a *replica* per other expert of the token in its node (X-MoE ``RBDispatcher``: a
  global all-to-all of pilots, ``s1_to_s2_gather``, a local all-to-all of replicas). The
  source's own node too. X-MoE's ``map_dup_tokens`` takes the first of the group in a
  permuted order; here the first in the router's top-k (score) order, which is as
  unrelated to the GPU (ASSUMPTION: same spread of pilots over a node's GPUs).
* ``relay`` (:func:`relay_routes`): the hub's hierarchical dispatch (this study's
  design). Inside the source's node rows go straight to their hubs; for a remote node
  one copy per (token, node) goes to the hub of the GPU with the source's *local rank*
  there (one hop on the source's own rail, as DeepEP's internode kernels choose it), and
  that hub forwards one row per (token, expert) to the hubs of its node over NVLink
  (its own experts' rows it writes locally).

The combine is the mirror: replicas' outputs go back to the pilot or relay, which reduces
them into one row per (token, node) before it crosses back.
"""
from __future__ import annotations

import numpy as np

from ..config import ModelConfig, SystemConfig, WorkloadConfig, effective_row_bytes
from ...spec.config import load_hub_config
from .. import dedup
from ..network import flow_wire_bytes
from ..workload import make_routing

SCHEMES = ("plain", "pilot", "relay")


def _grouped(dest: np.ndarray, gpus_per_node: int):
    """A token's destinations grouped by node, in the router's top-k order inside a
    node (stable), their nodes, and the mask of the first destination of each (token,
    node) group: the token's highest-scored expert there."""
    order = np.argsort(dest // gpus_per_node, axis=-1, kind="stable")
    ds = np.take_along_axis(dest, order, axis=-1)
    node = ds // gpus_per_node
    start = np.ones(ds.shape, dtype=bool)
    start[..., 1:] = node[..., 1:] != node[..., :-1]
    return ds, node, start


def plain_routes(dest: np.ndarray, G: int, gpus_per_node: int):
    """One row per (token, expert) to its GPU; nothing forwarded."""
    return dedup.rows_per_pair(dest, G), np.zeros((G, G), dtype=np.int64)


def pilot_routes(dest: np.ndarray, G: int, gpus_per_node: int):
    """X-MoE RBD: a pilot per (token, node) to the GPU of the token's first expert there
    (top-k order), which makes one replica per other (token, expert) of that node (its
    own: local copies); :func:`moehub.cosim.dedup.pilot_routes`."""
    first, second, _ = dedup.pilot_routes(dest, G, gpus_per_node)
    return first, second


def relay_routes(dest: np.ndarray, G: int, gpus_per_node: int):
    """The hub's hierarchy: direct rows inside the source's node; one copy per (token,
    remote node) to the same-local-rank hub there, which forwards every row of that node
    (the diagonal: rows for the relay's own experts)."""
    n = dedup._node_size(G, gpus_per_node)
    ds, node, start = _grouped(dest, n)
    src = dedup._sources(dest)
    own = node == src // n
    relay = node * n + src % n
    first = dedup._pair_counts(src[own], ds[own], (G, G))
    lead = start & ~own
    first += dedup._pair_counts(src[lead], relay[lead], (G, G))
    second = dedup._pair_counts(relay[~own], ds[~own], (G, G))
    return first, second


ROUTES = {"plain": plain_routes, "pilot": pilot_routes, "relay": relay_routes}


def routes(scheme: str, dest: np.ndarray, G: int, gpus_per_node: int):
    """(first, second) row-copy matrices of ``scheme`` (one of :data:`SCHEMES`)."""
    return ROUTES[scheme](dest, G, gpus_per_node)


def inter_node(G: int, gpus_per_node: int) -> np.ndarray:
    """inter[s, d]: True when s and d sit in different nodes."""
    node = np.arange(G) // dedup._node_size(G, gpus_per_node)
    return node[:, None] != node[None, :]


def link_rows(first: np.ndarray, second: np.ndarray, gpus_per_node: int) -> dict:
    """Row copies on each kind of link: ``nic`` (first-hop copies between nodes),
    ``nvlink`` (copies between GPUs of a node, both hops) and ``local`` (a GPU's copies
    to itself). The second hop never leaves a node."""
    G = first.shape[0]
    inter = inter_node(G, gpus_per_node)
    if (second[inter] != 0).any():
        raise ValueError("a forwarded copy leaves its node")
    eye = np.eye(G, dtype=bool)
    both = first + second
    return {"nic": int(first[inter].sum()), "nvlink": int(both[~inter & ~eye].sum()),
            "local": int(np.trace(both))}


def wire_rows(model: ModelConfig, system: SystemConfig, workload: WorkloadConfig) -> dict:
    """Wire bytes of one dispatched and one combined row: software (largest link payload
    and a header per packet, :func:`flow_wire_bytes`) and hub (one ``chunk_bytes`` packet
    per chunk, each with its header)."""
    disp, comb = effective_row_bytes(model, workload)
    mp, hd = system.link_max_payload_bytes, system.link_header_bytes
    chunk = load_hub_config(model.hub_config).chunk_bytes
    hub = lambda b: -(-b // chunk) * (chunk + hd)          # noqa: E731
    return {"sw": (float(flow_wire_bytes(disp, mp, hd)), float(flow_wire_bytes(comb, mp, hd))),
            "hub": (float(hub(disp)), float(hub(comb)))}


#: the study's four versions: (routing scheme, wire format)
VERSIONS = {"sw": ("plain", "sw"), "sw_rbd": ("pilot", "sw"),
            "hub": ("plain", "hub"), "hub_rbd": ("relay", "hub")}
LABELS = {"sw": "software, plain all-to-all", "sw_rbd": "software, X-MoE RBD (pilots)",
          "hub": "MoE-Hub, plain", "hub_rbd": "MoE-Hub, relay hubs"}


def traffic(model: ModelConfig, system: SystemConfig, workload: WorkloadConfig,
            dest: np.ndarray | None = None) -> list:
    """Per version: row copies and bytes on the NICs and NVLink for the dispatch; the
    combine moves the same copies back (reduced at the pilot or relay) with combine rows.
    Inter-node bytes are what the NICs carry, summed over all GPUs, one direction."""
    G, gpn = system.gpus, system.gpus_per_node
    if dest is None:
        dest = dedup.placement_dest(make_routing(model, workload, G), G)
    wire = wire_rows(model, system, workload)
    out = []
    for version, (scheme, fmt) in VERSIONS.items():
        first, second = routes(scheme, dest, G, gpn)
        rows = link_rows(first, second, gpn)
        d_row, c_row = wire[fmt]
        out.append({"version": version, "label": LABELS[version], "scheme": scheme,
                    "nodes": system.nodes, "gpus": G, "tokens_per_gpu": dest.shape[1],
                    "nic_rows": rows["nic"], "nvlink_rows": rows["nvlink"],
                    "local_rows": rows["local"],
                    "nic_dispatch_bytes": rows["nic"] * d_row,
                    "nic_combine_bytes": rows["nic"] * c_row,
                    "nvlink_dispatch_bytes": rows["nvlink"] * d_row})
    base = {r["version"]: r["nic_dispatch_bytes"] for r in out}
    for r in out:
        ref = base["sw"] if r["version"].startswith("sw") else base["hub"]
        r["nic_cut"] = 1.0 - r["nic_dispatch_bytes"] / ref if ref else 0.0
    return out
