"""Co-simulation configs: every shipped YAML loads, cites its numbers, and bad values
are rejected with the key and the value in the message."""
import re

import numpy as np
import pytest

from moehub.cosim.config import (ConfigError, ModelConfig, SystemConfig, WorkloadConfig,
                                        available, load_model_config, load_system_config,
                                        load_workload_config)
from moehub.spec.config import CONFIG_DIR
from moehub.cosim.workload import make_routing

REQUIRED_MODELS = {"mixtral-8x7b", "qwen2-57b-a14b", "phi-3.5-moe", "deepseek-v3",
                   "deepseek-v3-fp8", "x-moe-small", "x-moe-medium", "x-moe-large"}
REQUIRED_SYSTEMS = {"h100x8", "h200x8", "a100x8", "a100x4-pcie", "h100x16-ib", "h100x32-ib",
                    "b200x8", "gb200-nvl72",
                    # wide expert parallelism (tests/test_cosim_decode.py checks their layout)
                    "gb200-nvl72-ep72", "h100x64-ib", "h100x256-ib", "h200x32-ib", "h200x64-ib",
                    "h200x256-ib", "gb200-nvl72x2-ib", "gb200-nvl72x2-ep128-ib"}


def test_required_configs_exist_and_load():
    assert REQUIRED_MODELS <= set(available("model"))
    assert REQUIRED_SYSTEMS <= set(available("system"))
    for n in available("system"):
        load_system_config(n)
    for n in available("model"):
        load_model_config(n)
    for n in available("workload"):
        load_workload_config(n)


@pytest.mark.parametrize("kind", ["system", "model", "workload"])
def test_every_number_cites_a_source_or_an_assumption(kind):
    for path in (CONFIG_DIR / kind).glob("*.yaml"):
        for line in path.read_text().splitlines():
            m = re.match(r"\s*(\w+):\s*([-0-9.]+)\s*(#.*)?$", line)
            if m and m.group(1) not in ("seed",) and float(m.group(2)) != 0:
                assert m.group(3), f"{path.name}: '{line.strip()}' has no source comment"


def test_model_numbers_match_facts():
    m = load_model_config("deepseek-v3")
    assert (m.hidden, m.expert_ffn, m.experts, m.topk, m.layers, m.dense_layers) == \
        (7168, 2048, 256, 8, 61, 3)
    m = load_model_config("mixtral-8x7b")
    assert (m.hidden, m.expert_ffn, m.experts, m.topk, m.layers) == (4096, 14336, 8, 2, 32)
    s = load_system_config("h100x8")
    assert (s.sms, s.peak_bf16_TFLOPs, s.hbm_GBps, s.intra_bw_GBps) == (132, 989.0, 3350.0, 450.0)


def _raw_system():
    import yaml
    return yaml.safe_load((CONFIG_DIR / "system" / "h100x8.yaml").read_text())


@pytest.mark.parametrize("key,value,msg", [
    ("gpus", 0, "gpus = 0"),
    ("intra_bw_GBps", -1.0, "intra_bw_GBps = -1.0"),
    ("intra_link", "ethernet", "intra_link = 'ethernet'"),
    ("bogus_key", 1, "bogus_key = 1: unknown key"),
    ("sms", "many", "sms = 'many': must be an integer"),
])
def test_system_validation_names_key_and_value(key, value, msg):
    raw = _raw_system()
    raw["name"] = "t"
    raw[key] = value
    with pytest.raises(ConfigError, match=re.escape(msg)):
        SystemConfig.from_dict(raw)


def test_software_costs_are_validated():
    raw = _raw_system()
    raw["name"] = "t"
    raw["software"]["gemm_eff_max"] = 1.5
    with pytest.raises(ConfigError, match=r"software\.gemm_eff_max = 1\.5"):
        SystemConfig.from_dict(raw)
    raw = _raw_system()
    raw["name"] = "t"
    del raw["software"]["d2h_sync_us"]
    with pytest.raises(ConfigError, match=r"d2h_sync_us: missing required key"):
        SystemConfig.from_dict(raw)


def test_model_and_workload_validation():
    m = load_model_config("mixtral-8x7b")
    with pytest.raises(ConfigError, match=r"topk = 9"):
        m.replace(topk=9)
    w = load_workload_config("default")
    with pytest.raises(ConfigError, match=r"routing = 'zipf'"):
        w.replace(routing="zipf")
    with pytest.raises(ConfigError, match=r"skewness = 0\.5"):
        w.replace(skewness=0.5)
    with pytest.raises(ConfigError, match=r"trace_path"):
        w.replace(routing="trace")
    with pytest.raises(ConfigError, match=r"tokens_per_gpu = 0"):
        w.replace(tokens_per_gpu=0)
    with pytest.raises(ConfigError, match=r"not found"):
        load_model_config("no-such-model")


def test_unreachable_skewness_is_rejected():
    m = load_model_config("mixtral-8x7b")      # at most 8 / 2 = 4
    w = load_workload_config("default").replace(routing="skewed", skewness=4.5, tokens_per_gpu=64)
    with pytest.raises(ConfigError, match=r"skewness = 4\.5: unreachable"):
        make_routing(m, w, 8)


def test_routing_is_reproducible_and_valid():
    m = load_model_config("deepseek-v3")
    w = load_workload_config("default").replace(tokens_per_gpu=256)
    a = make_routing(m, w, 8).experts
    b = make_routing(m, w, 8).experts
    c = make_routing(m, w.replace(seed=2), 8).experts
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.shape == (8, 256, 8) and a.min() >= 0 and a.max() < 256
    assert all(len(set(r)) == 8 for r in a.reshape(-1, 8).tolist())   # k distinct experts


@pytest.mark.parametrize("target", [1.39, 1.99, 3.0])
def test_skewed_routing_reaches_the_target(target):
    m = load_model_config("mixtral-8x7b")
    w = load_workload_config("default").replace(routing="skewed", skewness=target,
                                                tokens_per_gpu=4096)
    r = make_routing(m, w, 8)
    assert r.skewness() == pytest.approx(target, rel=0.05)


def test_trace_routing(tmp_path):
    m = load_model_config("mixtral-8x7b")
    p = tmp_path / "trace.txt"
    p.write_text("# expert ids\n0,1\n2 3\n7,6\n")
    w = load_workload_config("default").replace(routing="trace", trace_path=str(p), tokens_per_gpu=2)
    r = make_routing(m, w, 2)
    assert r.experts.tolist() == [[[0, 1], [2, 3]], [[7, 6], [0, 1]]]
    p.write_text("0,0\n")
    with pytest.raises(ConfigError, match="same expert twice"):
        make_routing(m, w, 2)
    p.write_text("0,9\n")
    with pytest.raises(ConfigError, match=r"expert ids must lie in 0\.\.7"):
        make_routing(m, w, 2)
