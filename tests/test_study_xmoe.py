"""``moehub study xmoe``: the memory formulas on hand-computed cases (padding, capacity
drops, worst-case and hub regions), the inter-node copies of plain and hierarchical
dispatch on a hand-made routing (every row delivered once), the all-gather of SSMB, the
command line's bad values (exit 2 before any work) and a small end-to-end run."""
import csv
import json

import numpy as np
import pytest

from moehub.cosim.config import load_model_config, load_system_config
from moehub.cosim import dedup
from moehub.cosim.components import Components
from moehub.cosim.studies import xmoe as study
from moehub.cosim.studies import xmoe_dispatch as D
from moehub.cosim.studies import xmoe_memory as M
from moehub.cosim.studies import xmoe_run as X
from moehub.cosim.studies import xmoe_ssmb as S
from moehub.scripts.cli import main

#: source GPU 0 sends 30 rows to expert 0 (10 over the capacity of 20), GPU 1 is balanced
COUNTS = np.array([[30, 10, 12, 12], [16, 16, 16, 16]])
R = 256


@pytest.fixture
def tiny():
    """2 GPUs x 32 tokens, 4 experts of which each token picks 2, hidden 128, ffn 2, bf16:
    a row is R = 256 B (two of the hub's 128 B chunks), its expert activations
    3 x 2 x 2 = 12 B."""
    m = load_model_config("x-moe-small").replace(hidden=128, expert_ffn=2, experts=4, topk=2)
    return M.Routed(m, 2, 32, COUNTS.copy(), disp_bytes=R, comb_bytes=R)


def test_capacity_padding_and_drops(tiny):
    assert tiny.capacity == 20                       # ceil(32 x 2 x 1.25 / 4)
    ds = M.summary(tiny, "deepspeed")
    # masks 32x4x20 x (4 + 2) B; 4 row buffers and the activations of E x C = 80 slots
    assert ds["peak_bytes"] == 32 * 4 * 20 * 6 + 4 * 80 * R + 80 * 12
    assert ds["saved_bytes"] == 32 * 4 * 20 * 6 + 2 * 80 * R + 80 * 12
    assert ds["dropped_rows"] == 10 and M.summary(tiny, "pft")["dropped_rows"] == 10
    tutel = M.summary(tiny, "tutel")
    assert tutel["peak_bytes"] == 32 * 2 * 12 + 4 * 80 * R + 80 * 12     # sparse indices
    # the capacity is per source: GPU 1 keeps all 64 rows, GPU 0 drops 10 of expert 0
    assert tiny.sent(kept=True).tolist() == [54, 64]


def test_padding_free_and_tile_padded(tiny):
    pft = M.summary(tiny, "pft")
    # GPU 0: sends 54 kept rows, receives 20+16 + 10+16 = 62 for experts 0 and 1
    index = 54 * 12 + 4 * 8 + 62 * 8
    assert pft["gpu"] == 0
    assert pft["peak_bytes"] == index + 54 * R + 4 * 62 * R + 62 * 12 + 54 * R
    assert pft["peak_bytes"] == pft["used_bytes"]                # nothing padded
    mb = M.summary(tiny, "megablocks")
    # experts 0 and 1 receive 46 and 26 rows: each padded to 128 for the GEMM layout
    assert mb["buffers"]["expert input (by expert)"] == 256 * R
    assert mb["buffers"]["expert activations"] == 256 * 12
    assert mb["dropped_rows"] == 0


def test_worst_case_and_hub_regions(tiny):
    ll = M.summary(tiny, "deepep_ll")
    slots = 4 * 32                                   # E/G x G x T
    assert ll["buffers"]["RDMA dispatch recv [E/G][G][T]"] == slots * (16 + R)
    assert ll["buffers"]["packed recv [E/G,G*T,H]"] == slots * R
    hub = M.summary(tiny, "hub")
    # regions: 2 local experts x max(2^ceil(log2(G x T)), max tile 256) rows of R bytes
    cfg = M.hub_config(tiny)
    assert cfg.max_rows_per_expert == 256 and cfg.stride_bytes == R
    assert hub["buffers"]["regions [E/G][max rows]"] == 2 * 256 * R
    assert hub["dropped_rows"] == 0
    # regions at the capacity factor: ceil(1.25 x 2 x 32 x 2 / 4) = 40 rows per expert;
    # pooled over the sources, only expert 0's 46 rows overflow (6, not DeepSpeed's 10)
    assert M.hub_cf_capacity(tiny) == 40
    assert M.summary(tiny, "hub_cf")["dropped_rows"] == 6
    assert M.summary(tiny, "hub_cf")["buffers"]["regions [E/G][1.25 x mean]"] == 2 * 40 * R


def test_every_row_is_kept_or_counted_as_dropped(tiny):
    for name in M.SYSTEMS:
        r = M.summary(tiny, name)
        assert r["kept_rows"] + r["dropped_rows"] == 2 * 32 * 2, name
        assert r["peak_bytes"] >= r["used_bytes"] > 0, name


def test_routing_counts_match_the_cosimulation_placement():
    s = load_system_config("h100x8")
    m = load_model_config("x-moe-small")
    from moehub.cosim.experiment import load_configs
    _, _, w = load_configs("h100x8", "x-moe-small", "default", 64)
    c = M.routed(m, s, w)
    assert c.counts.sum() == 8 * 64 * 6
    assert (c.counts.sum(axis=1) == 64 * 6).all()                    # k rows per token


# ---------------------------------------------------------------------------- dispatch
def _hand_routing():
    """4 GPUs in 2 nodes of 2, 2 tokens each, top-2, given as destination GPUs."""
    dest = np.array([[[2, 3], [1, 3]],        # GPU 0: both of token 0 in node 1
                     [[0, 1], [0, 0]],        # GPU 1: stays in node 0
                     [[3, 2], [2, 3]],        # GPU 2: stays in node 1
                     [[0, 1], [1, 2]]])       # GPU 3 (local rank 1): token 0 in node 0
    return dest


def test_inter_node_copies_plain_vs_hierarchical():
    dest = _hand_routing()
    plain = D.link_rows(*D.routes("plain", dest, 4, 2), 2)
    pilot = D.link_rows(*D.routes("pilot", dest, 4, 2), 2)
    relay = D.link_rows(*D.routes("relay", dest, 4, 2), 2)
    # rows crossing nodes: GPU 0 token 0 (2), token 1 (1); GPU 3 token 0 (2), token 1 (1)
    assert plain["nic"] == 6
    # one copy per (token, remote node): 4
    assert pilot["nic"] == 4 and relay["nic"] == 4
    first, second = D.routes("relay", dest, 4, 2)
    # GPU 0's remote rows go to GPU 2 (node 1, local rank 0), one copy per token, which
    # forwards both rows for GPU 3 and keeps its own; GPU 3's go to GPU 1 likewise
    assert first[0, 2] == 2 and first[3, 1] == 2 and first[0, 1] == 1 and first[3, 2] == 1
    assert second[2, 3] == 2 and second[2, 2] == 1 and second[1, 0] == 1 and second[1, 1] == 2
    pf, ps = D.routes("pilot", dest, 4, 2)
    # the pilot goes to the token's first expert in the node (top-k order): 2, then 2 -> 3
    assert pf[0, 2] == 1 and ps[2, 3] >= 1


def test_every_row_is_delivered_once():
    rng = np.random.default_rng(3)
    E, G, T, k, gpn = 32, 8, 40, 6, 2
    experts = np.stack([np.stack([rng.choice(E, k, replace=False) for _ in range(T)])
                        for _ in range(G)])
    dest = dedup.placement_dest(experts, G, E)
    plain = dedup.rows_per_pair(dest, G)
    pf, ps = D.routes("pilot", dest, G, gpn)
    # a pilot serves its own expert row: pilots + replicas land where the rows belong
    assert ((pf + ps).sum(axis=0) == plain.sum(axis=0)).all()
    rf, rs = D.routes("relay", dest, G, gpn)
    inter = D.inter_node(G, gpn)
    direct = np.where(inter, 0, rf)                  # the relays' copies are not rows
    assert ((direct + rs).sum(axis=0) == plain.sum(axis=0)).all()
    assert (rs[inter] == 0).all() and (ps[inter] == 0).all()     # forwarding stays in a node
    assert rf[inter].sum() == pf[inter].sum() == dedup.unique_node_rows(dest, G, gpn).sum() \
        - sum(dedup.unique_node_rows(dest, G, gpn)[s, s // gpn] for s in range(G))


def test_hierarchical_versions_run_on_two_nodes():
    from moehub.cosim.experiment import load_configs
    from moehub.cosim.layer import Layer
    from moehub.cosim.workload import make_routing
    s, m, w = load_configs("h100x16-ib", "x-moe-small", "default", 16)
    L = Layer(s, m, w, make_routing(m, w, s.gpus))
    t = {v: X.layer_time(L, v) for v in X.TIME_VERSIONS}
    for v, r in t.items():
        assert r["layer_us"] > r["dispatch_us"] > 0, v
    # the relays' NICs carry one copy per (token, node) instead of one per row
    nic = lambda v: sum(c.b[-1] for (s_, d), c in _flows(L, t[v]["result"], "dispatch")
                        if L.inter_node(s_, d))
    assert nic("hub_rbd") < 0.6 * nic("hub")


def _flows(L, res, phase):
    net, curves = res.nets[phase]
    G = L.G
    return [((s, d), curves[s * G + d]) for s in range(G) for d in range(G)
            if len(curves[s * G + d].b)]


def test_ssmb_allgather():
    comp = Components(load_system_config("h100x8"))
    assert S.allgather_us(comp, 1, 4096, 14336) == 0.0
    t2, t8 = S.allgather_us(comp, 2, 4096, 14336), S.allgather_us(comp, 8, 4096, 14336)
    # 2048 rows of 14 KiB received over NVLink at >= 80 % of 450 GB/s, plus latency
    assert 2048 * 14336 / 450e3 < t2 < 2048 * 14336 / 360e3 + 20
    assert t8 > t2
    assert S.degrees(12) == [1, 2, 4]


# ---------------------------------------------------------------------------- command line
BAD = [
    (["--tokens", "0"], "--tokens", "'0'", ">= 1"),
    (["--model", "x-moe-small,nosuch"], "--model", "'nosuch'", "x-moe-large"),
    (["--rbd-systems", "h100x8"], "--rbd-systems", "'h100x8'", ">= 2 nodes"),
    (["--rbd-systems", "nosuch"], "--rbd-systems", "'nosuch'", "h100x16-ib"),
    (["--system", "nosuch"], "--system", "'nosuch'", "h100x8"),
    (["--time-model", "mixtral-8x7b"], "--time-model", "'mixtral-8x7b'", "one of --model"),
    (["--time-tokens", "100000"], "--time-tokens", "'100000'", "at most"),
    (["--model", "mixtral-8x7b", "--system", "h100x16-ib"], "--system", "'h100x16-ib'",
     "whole experts"),
]


@pytest.mark.parametrize("argv,flag,value,allowed", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_values_exit_2_before_any_work(tmp_path, monkeypatch, capsys, argv, flag, value,
                                           allowed):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))

    def no_work(*a, **k):
        raise AssertionError("the study started although the input is bad")
    monkeypatch.setattr(study, "compute", no_work)
    assert main(["study", "xmoe", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"argument {flag}: " in err and value in err and allowed in err, err
    assert not (tmp_path / "build" / "results").exists()


def test_small_run_writes_its_files_and_refuses_to_overwrite(tmp_path, capsys):
    argv = ["-q", "study", "xmoe", "--model", "x-moe-small", "--tokens", "64",
            "--time-tokens", "8", "--rbd-systems", "h100x16-ib", "--out", str(tmp_path)]
    assert main(argv) == 0
    folder = tmp_path / "study-xmoe_mx-moe-small_rbd-h100x16-ib_t64_tt8"
    for name in ("memory.csv", "memory_sweep.csv", "rbd_traffic.csv", "rbd_time.csv",
                 "ssmb.csv", "validation.csv", "tables.md", "run.json", "memory.png",
                 "memory.svg", "memory_sweep.png", "rbd.png", "rbd.svg", "ssmb.png"):
        assert (folder / name).is_file(), name
    out = capsys.readouterr().out
    assert "Inter-node bytes" in out and "padding-free (X-MoE PFT" in out
    rows = list(csv.DictReader(open(folder / "memory.csv")))
    assert {r["system"] for r in rows} == set(M.SYSTEMS)
    traffic = list(csv.DictReader(open(folder / "rbd_traffic.csv")))
    assert float(next(r for r in traffic if r["version"] == "sw_rbd")["nic_cut"]) > 0.5
    assert json.loads((folder / "run.json").read_text())["command"].startswith("moehub")
    assert main(argv) == 2                                       # exists: --force needed
    assert "--force" in capsys.readouterr().err
