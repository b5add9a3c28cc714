"""Group-limited routing, wire datatypes and deduplication arithmetic (cosim/dedup.py)."""
import hashlib
import re

import numpy as np
import pytest

from moehub.cosim.config import (ConfigError, dtype_row_bytes, effective_dtypes,
                                        effective_row_bytes, load_model_config,
                                        load_system_config, load_workload_config)
from moehub.cosim.dedup import (bytes_per_token, forward_rows, placement_dest, rows_per_pair,
                                unique_gpu_rows, unique_node_rows)
from moehub.cosim.experiment import load_configs
from moehub.cosim.layer import Layer
from moehub.cosim.workload import Routing, make_routing

# make_routing(model, default workload with 64 tokens/GPU, 8 GPUs).experts as little-endian
# int32, sha256 -- recorded on main (bbd00c1) before group-limited routing existed
MAIN_HASHES = {
    ("mixtral-8x7b", "default"): "2a673e1e8e57d0e4fbe5cacf2fdb79c4ce9d169c3f789319715e154a54cd12be",
    ("mixtral-8x7b", "skewed-mmlu"): "e1ae568a3fc76e368af477cbc28c87d7ade17facf1011e83b20ab647f2142450",
    ("qwen2-57b-a14b", "default"): "2fb54c984a81c1a207ac72abde663ae7d46152c2d739787a926dd921c69a5bb6",
    ("deepseek-v3", "default"): "93e36ab299abaaed073fde4ec995d46d5074e00219c91f19b19d19881347c498",
}


def _hash(experts: np.ndarray) -> str:
    return hashlib.sha256(experts.astype("<i4").tobytes()).hexdigest()


def _routing(model: str, wl: str = "default", tokens: int = 64, gpus: int = 8, **changes):
    m = load_model_config(model)
    if changes:
        m = m.replace(**changes)
    w = load_workload_config(wl).replace(tokens_per_gpu=tokens)
    return m, w, make_routing(m, w, gpus)


# ------------------------------------------------------------------ group-limited routing
@pytest.mark.parametrize("model,wl", [("mixtral-8x7b", "default"), ("mixtral-8x7b", "skewed-mmlu"),
                                      ("qwen2-57b-a14b", "default")])
def test_unrestricted_routing_is_unchanged_from_main(model, wl):
    assert _hash(_routing(model, wl)[2].experts) == MAIN_HASHES[(model, wl)]


def test_one_group_or_all_groups_reproduce_unrestricted_routing():
    """The group mask only removes choices: same draws, so no limit = main's routing."""
    ref = MAIN_HASHES[("deepseek-v3", "default")]
    assert _hash(_routing("deepseek-v3", routing_groups=1, routing_topk_groups=1)[2].experts) == ref
    assert _hash(_routing("deepseek-v3", routing_topk_groups=8)[2].experts) == ref
    assert _hash(_routing("deepseek-v3")[2].experts) != ref       # the limit does bite


@pytest.mark.parametrize("wl", ["default", "skewed-mmlu"])
def test_deepseek_tokens_stay_in_four_groups(wl):
    m, w, r = _routing("deepseek-v3", wl)
    assert (m.routing_groups, m.routing_topk_groups) == (8, 4)
    groups = r.experts // 32
    spans = [len(set(t)) for t in groups.reshape(-1, 8).tolist()]
    assert max(spans) == 4 and np.mean(spans) > 3.5      # limited, and the limit is used
    assert all(len(set(t)) == 8 for t in r.experts.reshape(-1, 8).tolist())
    assert np.array_equal(r.experts, make_routing(m, w, 8).experts)   # reproducible
    # one group = one GPU's 32 experts on 8 GPUs: at most 4 destination GPUs per token
    dest = placement_dest(r, 8)
    assert unique_gpu_rows(dest, 8).sum() <= 4 * 8 * 64


def test_group_scores_pick_the_groups_with_the_best_two_experts():
    """Hand-made scores: group 1 has the best single expert but group 0 the best top-2 sum."""
    from moehub.cosim.workload import _group_mask
    g = np.array([[5.0, 4.0, 9.5, -9.0, 0.0, 0.0]], dtype=np.float32)   # 3 groups of 2
    out = _group_mask(g, 3, 1)
    assert np.isfinite(out[0]).tolist() == [True, True, False, False, False, False]


def test_trace_must_honour_the_group_limit(tmp_path):
    m = load_model_config("deepseek-v3")
    p = tmp_path / "trace.txt"
    ok = "0 1 2 3 32 33 64 96"                      # groups 0, 1, 2, 3
    bad = "0 32 64 96 128 1 2 3"                    # groups 0..4: five groups
    p.write_text(f"{ok}\n{bad}\n")
    w = load_workload_config("default").replace(routing="trace", trace_path=str(p),
                                                tokens_per_gpu=1)
    with pytest.raises(ConfigError, match=re.escape(f"{str(p)!r}: token 1 ") + r".*5 expert groups"):
        make_routing(m, w, 2)
    p.write_text(f"{ok}\n")
    assert make_routing(m, w, 2).experts.tolist() == [[[0, 1, 2, 3, 32, 33, 64, 96]]] * 2
    p.write_text(f"{bad}\n")                        # an unrestricted model takes it
    make_routing(m.replace(routing_groups=1, routing_topk_groups=1), w, 2)


@pytest.mark.parametrize("changes,msg", [
    (dict(routing_groups=3), "routing_groups = 3"),
    (dict(routing_groups=0), "routing_groups = 0"),
    (dict(routing_topk_groups=9), "routing_topk_groups = 9"),
    (dict(routing_topk_groups=0), "routing_topk_groups = 0"),
    (dict(routing_groups=256, routing_topk_groups=4), "topk = 8"),
    (dict(dispatch_dtype="fp16"), "dispatch_dtype = 'fp16'"),
    (dict(combine_dtype="int8"), "combine_dtype = 'int8'"),
])
def test_schema_errors_name_key_and_value(changes, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)):
        load_model_config("deepseek-v3").replace(**changes)


def test_workload_dtype_override_is_validated():
    w = load_workload_config("default")
    with pytest.raises(ConfigError, match=re.escape("dispatch_dtype = 'fp4'")):
        w.replace(dispatch_dtype="fp4")


# ------------------------------------------------------------------ wire datatypes
def test_dtype_row_bytes():
    m = load_model_config("deepseek-v3")
    assert (m.dispatch_dtype, m.combine_dtype) == ("fp8", "bf16")
    assert m.dispatch_row_bytes == 7168 + 4 * 56 == 7392
    assert m.combine_row_bytes == 14336 == m.row_bytes
    mx = load_model_config("mixtral-8x7b")
    assert (mx.dispatch_row_bytes, mx.combine_row_bytes) == (8192, 8192)
    assert dtype_row_bytes(2880, "fp8") == 2880 + 4 * 23      # partial last 128-block
    w = load_workload_config("default").replace(dispatch_dtype="bf16", combine_dtype="fp8")
    assert effective_dtypes(m, w) == ("bf16", "fp8")
    assert effective_row_bytes(m, w) == (14336, 7392)
    assert effective_dtypes(m, load_workload_config("default")) == ("fp8", "bf16")


def test_cli_dtype_flags_override(capsys):
    from moehub.scripts.cli import build_parser
    p = build_parser()
    a = p.parse_args(["cosim", "--model", "deepseek-v3", "--dispatch-dtype", "bf16",
                      "--combine-dtype", "fp8"])
    s, m, w = load_configs(a.system, a.model, a.workload, 16, None, None,
                           dispatch_dtype=a.dispatch_dtype, combine_dtype=a.combine_dtype)
    assert (m.dispatch_row_bytes, m.combine_row_bytes) == (14336, 7392)
    assert (w.dispatch_dtype, w.combine_dtype) == ("bf16", "fp8")
    a = p.parse_args(["sweep", "tokens", "--model", "deepseek-v3"])
    _, m, _ = load_configs(a.system, a.model, a.workload,
                           dispatch_dtype=a.dispatch_dtype, combine_dtype=a.combine_dtype)
    assert (m.dispatch_dtype, m.combine_dtype) == ("fp8", "bf16")     # the model's
    for flag in ("--dispatch-dtype", "--combine-dtype"):
        with pytest.raises(SystemExit) as e:
            p.parse_args(["cosim", flag, "fp4"])
        assert e.value.code == 2
        assert f"{flag}: 'fp4'" in capsys.readouterr().err


# ------------------------------------------------------------------ dedup arithmetic
@pytest.mark.parametrize("model,system,gpus", [("mixtral-8x7b", "h100x8", 8),
                                               ("deepseek-v3", "h100x8", 8),
                                               ("mixtral-8x7b", "h100x16-ib", 16),
                                               ("mixtral-8x7b", "h100x8", 4)])
def test_placement_dest_matches_layer(model, system, gpus):
    s = load_system_config(system)
    s = s.replace(gpus=gpus, gpus_per_node=min(gpus, s.gpus_per_node)) if gpus != s.gpus else s
    m, w, r = _routing(model, tokens=16, gpus=gpus)
    L = Layer(s, m, w, r)
    assert np.array_equal(placement_dest(r, gpus).reshape(-1), L.dest)
    assert np.array_equal(rows_per_pair(placement_dest(r, gpus), gpus), L.counts)


def _hand_routing():
    """2 nodes x 2 GPUs, 8 experts (GPU g holds 2g, 2g+1), one token per source."""
    exp = np.array([[[0, 4, 5, 6]],      # GPUs 0,2,2,3: 4 rows, 3 GPUs, 2 nodes, 1 forward
                    [[2, 3, 4, 5]],      # GPUs 1,1,2,2
                    [[0, 1, 2, 3]],      # GPUs 0,0,1,1
                    [[6, 7, 0, 1]]])     # GPUs 3,3,0,0
    return placement_dest(exp, 4, 8)


def test_hand_made_token_counts():
    d = _hand_routing()
    one = d[:1]                                   # source 0's token alone
    assert rows_per_pair(one, 4).sum() == 4
    assert unique_gpu_rows(one, 4).sum() == 3
    assert unique_node_rows(one, 4, 2)[0].tolist() == [1, 1]     # own node (local) + node 1
    assert forward_rows(one, 4, 2).tolist() == [[0] * 4, [0] * 4, [0, 0, 0, 1], [0] * 4]
    # every source
    assert rows_per_pair(d, 4).tolist() == [[1, 0, 2, 1], [0, 2, 2, 0], [2, 2, 0, 0], [2, 0, 0, 2]]
    assert unique_gpu_rows(d, 4).tolist() == [[1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 1]]
    assert unique_node_rows(d, 4, 2).tolist() == [[1, 1], [1, 1], [1, 0], [1, 1]]
    # receivers: same local rank as the source in the destination node
    assert forward_rows(d, 4, 2).tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]
    b = bytes_per_token(d, 4, 2, 10)
    assert b["per_row"] == {"nvlink": 0.0, "nic": 110 / 4}
    assert b["per_gpu"] == {"nvlink": 0.0, "nic": 60 / 4}
    assert b["per_node"] == {"nvlink": 40 / 4, "nic": 40 / 4}


def test_dedup_conservation_on_two_nodes():
    m, w, r = _routing("deepseek-v3", tokens=32, gpus=16)
    G, n = 16, 8
    d = placement_dest(r, G)
    per_row, per_gpu = rows_per_pair(d, G), unique_gpu_rows(d, G)
    per_node, fwd = unique_node_rows(d, G, n), forward_rows(d, G, n)
    assert per_row.sum() == G * 32 * 8 and (per_gpu <= per_row).all()
    pairs = {(s, t, x) for s in range(G) for t in range(32) for x in d[s, t].tolist()}
    nodes = {(s, t, x // n) for s, t, x in pairs}
    assert per_gpu.sum() == len(pairs) and per_node.sum() == len(nodes)
    # each distinct destination GPU is either its node's receiver or a forwarded copy
    recv = {(s, t, x) for s, t, x in pairs if x % n == s % n}
    assert fwd.sum() == len(pairs) - len(recv)
    # forwarding stays inside a node and never targets the receiver itself
    r_, d_ = np.nonzero(fwd)
    assert (r_ // n == d_ // n).all() and (r_ != d_).all()
    b = bytes_per_token(d, G, n, m.dispatch_row_bytes)
    assert b["per_node"]["nic"] <= b["per_gpu"]["nic"] <= b["per_row"]["nic"]
    # two nodes: at most one node copy per token crosses the NIC
    assert 0 < b["per_node"]["nic"] <= m.dispatch_row_bytes


def test_routing_object_needs_no_expert_count_but_arrays_do():
    r = Routing(np.zeros((2, 1, 1), dtype=np.int32), 4)
    assert placement_dest(r, 2).tolist() == [[[0]], [[0]]]
    with pytest.raises(ValueError, match="num_experts"):
        placement_dest(r.experts, 2)


@pytest.mark.parametrize("target", [1.39, 1.99])
def test_group_limited_skewed_routing_reaches_the_target(target):
    """The skew calibration samples under the same group limit and expert placement as the
    routing (256 experts: the calibration sample's noise leaves a few per cent either way,
    as for unrestricted routing)."""
    m = load_model_config("deepseek-v3")
    w = load_workload_config("default").replace(routing="skewed", skewness=target,
                                                tokens_per_gpu=4096)
    r = make_routing(m, w, 8)
    assert r.skewness() == pytest.approx(target, rel=0.1)
    assert max(len(set(t)) for t in (r.experts // 32).reshape(-1, 8).tolist()) == 4
