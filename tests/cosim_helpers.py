"""Shared by the co-simulation tests: one layer from config names and overrides."""
from moehub.config.cosim_schema import load_model_config, load_system_config, load_workload_config
from moehub.cosim.layer import Layer
from moehub.cosim.workload import make_routing


def layer(model="mixtral-8x7b", system="h100x8", tokens=256, seed=1, **sys_changes):
    s = load_system_config(system)
    if sys_changes:
        s = s.replace(**sys_changes)
    m = load_model_config(model)
    w = load_workload_config("default").replace(tokens_per_gpu=tokens, seed=seed)
    return Layer(s, m, w, make_routing(m, w, s.gpus))
