"""Wide expert parallelism and decode as it is served: the wide-EP systems load and run,
FP8 expert weights halve the bytes a memory-bound decode GEMM streams, CUDA-graph launches
lower a layer by (launches - graph breaks) x (kernel_launch_us - graph_launch_us), and a
layer of 1 token per GPU (experts and GPUs without rows) runs on every system."""
import dataclasses
import re

import numpy as np
import pytest
import yaml

from moehub.cosim.config import (ConfigError, SystemConfig, load_model_config,
                                        load_system_config, load_workload_config)
from moehub.spec.config import CONFIG_DIR
from moehub.cosim import cli as cosim_cli
from moehub.cosim.components import GRAPH_BREAKS, Components
from moehub.cosim.gpu import GpuModel, WorkItem
from moehub.cosim.layer import Layer
from moehub.cosim.placement import needs_slots, pack, redundant_slots, to_slots
from moehub.cosim.systems import SYSTEMS, run_system
from moehub.cosim.workload import Routing, make_routing
from moehub.scripts.cli import build_parser, main

from cosim_helpers import layer

#: the wide-EP systems: (GPUs, GPUs per node, nodes, NIC GB/s per GPU)
WIDE_EP = {
    "gb200-nvl72-ep72": (72, 72, 1, 50.0),
    "h100x64-ib": (64, 8, 8, 50.0), "h100x256-ib": (256, 8, 32, 50.0),
    "h200x32-ib": (32, 8, 4, 50.0), "h200x64-ib": (64, 8, 8, 50.0),
    "h200x256-ib": (256, 8, 32, 50.0),
    "gb200-nvl72x2-ib": (144, 72, 2, 50.0), "gb200-nvl72x2-ep128-ib": (128, 64, 2, 50.0),
}


def _graph(system: SystemConfig) -> SystemConfig:
    return system.replace_software(launch_mode="graph")


# ---------------------------------------------------------------------- systems
@pytest.mark.parametrize("name", sorted(WIDE_EP))
def test_wide_ep_systems_have_their_layout(name):
    s = load_system_config(name)
    assert (s.gpus, s.gpus_per_node, s.nodes, s.inter_bw_GBps) == WIDE_EP[name]
    if s.gpu_name.startswith("H200"):
        assert s.hbm_GBps == 4800.0 and s.sms == 132
    assert s.software.launch_mode == "eager"          # graph mode is chosen, not the default


def test_ibgda_call_cost_follows_the_published_ep_curve():
    """pplx-kernels' 1-token IBGDA dispatch grows with EP (102.7 / 115.7 / 121.0 / 125.9 us
    at EP16..128): the configs carry the fit of their own scale."""
    calls = [load_system_config(n).software.ll_call_inter_us
             for n in ("h200x32-ib", "h200x64-ib", "h200x256-ib")]
    assert calls == sorted(calls) and calls[0] > load_system_config("h100x16-ib").software.ll_call_inter_us


def test_tiny_layer_runs_on_the_smallest_new_multinode_system():
    """Four nodes, 1 token per GPU: the systems with an inter-node path of their own (DeepEP's
    rail-aligned RDMA + NVLink forwarding, IBGDA puts, the hub) and the bound."""
    L = layer("mixtral-8x7b", "h200x32-ib", tokens=1)
    assert L.nodes == 4
    lat = {n: run_system(n, L).latency_us for n in ("deepep", "deepep_ll", "hub", "ideal")}
    assert all(np.isfinite(v) and v > 0 for v in lat.values()), lat
    assert min(lat, key=lat.get) == "ideal"


@pytest.mark.slow
@pytest.mark.parametrize("system", ["gb200-nvl72-ep72", "gb200-nvl72x2-ep128-ib"])
def test_tiny_layer_runs_on_nvl72_ep72_and_two_racks(system):
    model = "mixtral-8x7b" if system.endswith("ep72") else "deepseek-v3"
    L = layer(model, system, tokens=1)
    for n in SYSTEMS:
        r = run_system(n, L)
        assert np.isfinite(r.latency_us) and r.latency_us > 0, n


def test_ep72_of_a_256_expert_model_gets_redundant_slots():
    """256 experts on 72 GPUs: 4 slots per GPU, 32 redundant (as DeepSeek-V3 deploys)."""
    L = layer("deepseek-v3", "gb200-nvl72-ep72", tokens=1)
    assert (L.E, L.E_local, L.model.experts) == (288, 4, 288)
    assert L.counts.sum() == 72 * 8 and L.expert_rows.shape == (72, 4)
    # a count that neither divides nor replicates is still refused, naming both counts
    with pytest.raises(ConfigError, match=r"system.gpus = 12: not a multiple of the 8 experts"):
        layer("mixtral-8x7b", "h100x16-ib", tokens=1, gpus=12, gpus_per_node=4)


# ---------------------------------------------------------------------- launch mode
def _raw(name="h100x8"):
    raw = yaml.safe_load((CONFIG_DIR / "system" / f"{name}.yaml").read_text())
    raw["name"] = "t"
    return raw


@pytest.mark.parametrize("key,value,msg", [
    ("launch_mode", "lazy", "software.launch_mode = 'lazy': must be one of eager, graph"),
    ("launch_mode", 1, "software.launch_mode = 1: must be a string"),
    ("graph_launch_us", 9.0, "software.graph_launch_us = 9.0: must be <= kernel_launch_us"),
])
def test_launch_settings_are_validated(key, value, msg):
    raw = _raw()
    raw["software"][key] = value
    with pytest.raises(ConfigError, match=re.escape(msg)):
        SystemConfig.from_dict(raw)


def test_graph_mode_sets_every_launch_in_one_place():
    s = load_system_config("h100x8")
    sw = s.software
    eager, graph = Components(s), Components(_graph(s))
    assert eager.launch_us == sw.kernel_launch_us and graph.launch_us == sw.graph_launch_us
    assert eager.host_sync_us == sw.d2h_sync_us + sw.host_split_us
    # a host sync breaks the graph: the next piece is relaunched from the host
    assert graph.host_sync_us == pytest.approx(eager.host_sync_us + sw.kernel_launch_us
                                               - sw.graph_launch_us)
    m = load_model_config("mixtral-8x7b")
    assert GpuModel(_graph(s), m, 64).launch == sw.graph_launch_us
    assert GpuModel(s, m, 64).launch == sw.kernel_launch_us


def test_graph_breaks_are_the_systems_host_syncs():
    """GRAPH_BREAKS says how many host syncs each system that graph mode captures makes per
    GPU (systems written as eager PyTorch code stay eager in any mode and are not listed)."""
    L = layer("mixtral-8x7b", "h100x8", tokens=1)
    assert {"bulk", "comet", "deepep", "deepep_ll", "fused", "hub", "ideal"} <= set(GRAPH_BREAKS)
    assert set(GRAPH_BREAKS) <= set(SYSTEMS)
    for n in GRAPH_BREAKS:
        r = run_system(n, L)
        syncs = sum(1 for p in r.phases if p.name == "host sync" and p.gpu == 0)
        assert syncs == GRAPH_BREAKS[n], n


#: kernels on a 1-token Mixtral layer's critical path (read from each system's phases):
#: DeepEP low-latency: gate, dispatch, GEMM, combine, reduce; bulk: gate, layout, permute,
#: all-to-all, GEMM, all-to-all, reduce (one expert per GPU: no sort); DeepEP normal: gate,
#: layout, notify, dispatch, permute, GEMM, unpermute, combine, reduce; ideal: gate, reduce
CRITICAL_LAUNCHES = {"deepep_ll": 5, "bulk": 7, "deepep": 9, "ideal": 2}


@pytest.mark.parametrize("name", sorted(CRITICAL_LAUNCHES))
def test_graph_mode_lowers_a_decode_layer_by_launches_less_breaks(name):
    s = load_system_config("h100x8")
    sw = s.software
    eager = run_system(name, layer("mixtral-8x7b", "h100x8", tokens=1)).latency_us
    graph = run_system(name, layer("mixtral-8x7b", "h100x8", tokens=1,
                                   software={**dataclasses.asdict(sw),
                                             "launch_mode": "graph"})).latency_us
    saved = (CRITICAL_LAUNCHES[name] - GRAPH_BREAKS[name]) \
        * (sw.kernel_launch_us - sw.graph_launch_us)
    assert eager - graph == pytest.approx(saved, abs=1e-6)


# ---------------------------------------------------------------------- FP8 weights
def test_fp8_model_is_the_checkpoint_of_deepseek_v3():
    bf16, fp8 = load_model_config("deepseek-v3"), load_model_config("deepseek-v3-fp8")
    assert (bf16.weight_bytes, fp8.weight_bytes) == (2, 1)
    same = {k for k, v in dataclasses.asdict(bf16).items()
            if k not in ("name", "description", "weight_bytes")}
    assert all(getattr(fp8, k) == getattr(bf16, k) for k in same)


def test_fp8_halves_the_expert_weight_bytes_of_a_memory_bound_decode_gemm():
    s = load_system_config("h100x8")
    t = {}
    for name in ("deepseek-v3", "deepseek-v3-fp8"):
        m = load_model_config(name)
        g = GpuModel(s, m, 64)
        assert g.dtype == ("fp8" if m.weight_bytes == 1 else "bf16")
        item = WorkItem(0.0, 0, 1, 64, m.expert_ffn)          # one row: weight-bound
        weights = 3.0 * m.hidden * m.expert_ffn * m.weight_bytes / g.hbm
        body = g.expert_batch_us([item], 1.0) - g.fixed
        assert weights / body > 0.99                          # the weights are the GEMM
        t[name] = body
    assert t["deepseek-v3-fp8"] / t["deepseek-v3"] == pytest.approx(0.5, rel=0.01)


def test_fp8_weights_halve_a_decode_layers_gemm_time():
    gemm = {}
    for name in ("deepseek-v3", "deepseek-v3-fp8"):
        r = run_system("ideal", layer(name, "h100x8", tokens=1))
        gemm[name] = sum(p.end - p.start for p in r.phases if p.gpu == 0 and p.track == "gemm")
        assert gemm[name] > 0.5 * r.latency_us                # most of the layer
    assert gemm["deepseek-v3-fp8"] / gemm["deepseek-v3"] == pytest.approx(0.5, abs=0.02)


# ---------------------------------------------------------------------- tokens from 1
@pytest.mark.parametrize("name", SYSTEMS)
def test_one_token_layer_runs_with_idle_gpus_and_experts(name):
    L = layer("mixtral-8x7b", "h100x8", tokens=1, seed=3)
    assert L.counts.sum(axis=0).min() == 0                 # a GPU receives no row
    r = run_system(name, L)
    assert np.isfinite(r.latency_us) and r.latency_us > 0
    assert np.all(np.isfinite(r.gpu_end))


@pytest.mark.parametrize("tokens", [1, 2, 4, 8])
def test_decode_sizes_run_with_most_experts_empty(tokens):
    L = layer("deepseek-v3", "h100x8", tokens=tokens)
    assert (L.expert_rows == 0).any()
    lat = [run_system(n, L).latency_us for n in ("deepep_ll", "bulk", "ideal")]
    assert all(np.isfinite(v) and v > 0 for v in lat)


# ---------------------------------------------------------------------- command line
@pytest.fixture
def no_sim(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))

    def no_work(*a, **k):
        raise AssertionError("the simulation started although the input is bad")
    monkeypatch.setattr(cosim_cli, "run_experiment", no_work)


@pytest.mark.parametrize("flag,value,allowed", [("--launch", "lazy", "eager, graph"),
                                                ("--weight-dtype", "int4", "bf16, fp8")])
def test_bad_decode_flags_are_refused_up_front(no_sim, capsys, flag, value, allowed):
    assert main(["cosim", flag, value]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"argument {flag}: '{value}'" in err and allowed in err, err


def _name(*argv):
    a = build_parser().parse_args(["cosim", *argv])
    s, m, w = cosim_cli._load(a, a.tokens, a.gpus)
    return cosim_cli.run_name(a, s, m, w), s, m


def test_decode_flags_change_the_configs_and_the_run_name():
    base, s0, m0 = _name("--model", "deepseek-v3")
    name, s, m = _name("--model", "deepseek-v3", "--weight-dtype", "fp8", "--launch", "graph")
    assert name == base + "_weights-fp8_launch-graph"
    assert (m.weight_bytes, s.software.launch_mode) == (1, "graph")
    assert (m0.weight_bytes, s0.software.launch_mode) == (2, "eager")
    # the configs' own values add nothing to the name
    assert _name("--model", "deepseek-v3", "--weight-dtype", "bf16", "--launch", "eager")[0] \
        == base
    assert _name("--model", "deepseek-v3-fp8", "--weight-dtype", "fp8")[0] \
        == _name("--model", "deepseek-v3-fp8")[0]


def test_decode_flags_are_recorded_in_config_yaml(tmp_path, capsys):
    argv = ["cosim", "--model", "deepseek-v3", "--tokens", "1", "--systems", "ideal",
            "--weight-dtype", "fp8", "--launch", "graph", "--no-figure", "--out", str(tmp_path)]
    assert main(argv) == 0
    folder = tmp_path / "deepseek-v3_h100x8_default_t1_weights-fp8_launch-graph_sys-ideal"
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    assert cfg["model"]["weight_bytes"] == 1
    assert cfg["system"]["software"]["launch_mode"] == "graph"


# ---------------------------------------------------------------------- redundant slots


def test_redundant_slots_give_hot_experts_a_second_copy_and_balance_the_gpus():
    load = np.array([40, 5, 5, 30, 5, 5, 5, 5, 5, 5], dtype=float)   # 10 experts, 4 GPUs
    slots = pack(load, 4)
    S = 3
    flat = sorted(s for ss in slots for s in ss)
    assert flat == list(range(4 * S))                       # every slot used once
    assert [len(s) for s in slots] == [2, 1, 1, 2, 1, 1, 1, 1, 1, 1]   # the 2 hottest doubled
    assert all(len({x // S for x in s}) == len(s) for s in slots)      # copies on distinct GPUs
    per_gpu = np.zeros(4)
    for e, ss in enumerate(slots):
        for x in ss:
            per_gpu[x // S] += load[e] / len(ss)
    assert per_gpu.max() <= 30.0                            # contiguous 3-per-GPU: 50 on GPU 0
    # a copy never joins its twin, even where that GPU has the least load
    assert sorted(x // 2 for x in pack(np.array([2.0, 10.0, 10.0]), 2)[1]) == [0, 1]


def test_rows_go_to_the_copies_in_turn_and_keep_tokens_distinct():
    rng = np.random.default_rng(0)
    experts = np.stack([rng.choice(10, 3, replace=False) for _ in range(40)]).reshape(4, 10, 3)
    r = Routing(experts, 10)
    slots = pack(r.load().astype(float), 4)
    out = to_slots(experts, slots)
    for e, ss in enumerate(slots):
        per = [(out == x).sum() for x in ss]
        assert sum(per) == (experts == e).sum() and max(per) - min(per) <= 1
        assert np.all(np.isin(out[experts == e], ss))
    assert all(len(set(t)) == 3 for t in out.reshape(-1, 3))


def test_layer_runs_where_experts_do_not_divide_over_the_gpus():
    m = load_model_config("deepseek-v3")
    w = load_workload_config("default").replace(tokens_per_gpu=1)
    s = load_system_config("h100x8").replace(gpus=6, gpus_per_node=6)
    r = make_routing(m, w, 6)
    assert needs_slots(256, 6) and not needs_slots(256, 64) and not needs_slots(8, 72)
    assert redundant_slots(m, r, 8) == (m, r)                # places evenly: unchanged
    m6, r6 = redundant_slots(m, r, 6)
    assert (m6.experts, r6.num_experts) == (258, 258)        # 43 slots x 6, 2 redundant
    L = Layer(s, m6, w, r6)
    assert L.E_local == 43 and L.counts.sum() == 6 * 8
    assert np.array_equal(Layer(s, m, w, r).counts, L.counts)   # the layer places them itself
    for n in ("ideal", "hub"):
        assert np.isfinite(run_system(n, L).latency_us)


@pytest.mark.slow
def test_deepseek_v3_runs_at_ep72_with_redundant_slots():
    m = load_model_config("deepseek-v3")
    w = load_workload_config("default").replace(tokens_per_gpu=1)
    s = load_system_config("gb200-nvl72-ep72")
    L = Layer(s, m, w, make_routing(m, w, 72))
    assert L.E == 288                                        # 256 + 32 = 4 x 72
    for n in SYSTEMS:
        assert np.isfinite(run_system(n, L).latency_us), n
