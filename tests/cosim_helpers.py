"""Shared by the co-simulation tests: one layer from config names and overrides; the cycles
of a random row for the hub-stage tests."""
import numpy as np

from moehub.cosim.config import load_model_config, load_system_config, load_workload_config
from moehub.cosim.layer import Layer
from moehub.cosim.workload import make_routing


def layer(model="mixtral-8x7b", system="h100x8", tokens=256, seed=1, **sys_changes):
    s = load_system_config(system)
    if sys_changes:
        s = s.replace(**sys_changes)
    m = load_model_config(model)
    w = load_workload_config("default").replace(tokens_per_gpu=tokens, seed=seed)
    return Layer(s, m, w, make_routing(m, w, s.gpus))


def two_nodes(tokens=64):
    """A DeepSeek-V3 layer on two nodes of 8 H100s (h100x16-ib)."""
    return layer(model="deepseek-v3", system="h100x16-ib", tokens=tokens)


def token_nodes(L):
    """The (source, token, destination node) triples of the layer's routing, as arrays of
    their sources and nodes."""
    gpn = min(L.sys.gpus_per_node, L.G)
    keys = np.unique((L.src * L.T + L.tok) * L.nodes + L.dest // gpn)
    return keys // L.nodes // L.T, keys % L.nodes


def remote_token_nodes(L) -> int:
    """(source, token, remote node) triples: the rows a per-node deduplication sends over
    the NIC, counted from the routing."""
    src, node = token_nodes(L)
    return int((node != src // min(L.sys.gpus_per_node, L.G)).sum())


def own_bytes(L, res, phase):
    """[G, G] bytes the phase's own flows carried in the result's last pass."""
    from moehub.cosim.systems.common import pair_curves
    return pair_curves(res.nets[phase][1], np.arange(L.G * L.G).reshape(L.G, L.G))[1]


def random_row_cycles(rng, t: int, free_at: int, lanes: int, gap: int, span: int, reuse: int = 1):
    """A source's next row at random: ``(first cycle, first lane, last cycle, last lane,
    cycle its tag is free again)``. It starts up to ``gap`` cycles after ``t`` (the source's
    previous row) but not before its tag is free (``free_at``), spreads over up to ``span``
    cycles (on one cycle its lanes are ordered), and its tag is reused ``reuse`` ..
    ``reuse + 2`` cycles after its last chunk."""
    t = max(t + int(rng.integers(0, gap + 1)), free_at)
    fl, ll = int(rng.integers(0, lanes)), int(rng.integers(0, lanes))
    lc = t + int(rng.integers(0, span + 1))
    if lc == t and ll < fl:
        fl, ll = ll, fl
    return t, fl, lc, ll, lc + reuse + int(rng.integers(0, 3))
