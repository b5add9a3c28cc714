"""Shared by the co-simulation tests: one layer from config names and overrides; the cycles
of a random row for the hub-stage tests."""
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
