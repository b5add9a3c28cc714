"""Hub protocol v2 in the co-simulation and ``moehub study v2``: wire rows of
multicast against DeepEP's deduplication, paging changes memory not time, per-target
allocation, per-expert completion, the gathering GEMM's cost, receive-memory formulas
(DeepEP's documented buffer sizes, the hub's regions and pages) and the command line.
Small layers only (DeepSeek-V3 at 16 tokens/GPU: 1024 routed rows)."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from moehub.cosim import memory as MEM
from moehub.cosim.causality import check
from moehub.cosim.experiment import load_configs, run_experiment, stats
from moehub.cosim.layer import Layer
from moehub.cosim.studies import v2 as study
from moehub.cosim.systems import deepep, run_system
from moehub.cosim.systems import hub as V2
from moehub.cosim.workload import make_routing
from moehub.scripts.cli import main

ALL = frozenset(V2.FEATURES)


def layer(system="h100x8", model="deepseek-v3", tokens=16):
    s, m, w = load_configs(system, model, "default", tokens)
    return Layer(s, m, w, make_routing(m, w, s.gpus))


@pytest.fixture(scope="module")
def ds8():
    return layer()


@pytest.fixture(scope="module")
def runs(ds8):
    return {f: run_system("hub", ds8, hub_features=f)
            for f in (frozenset(), frozenset({"multicast"}), frozenset({"early_counts"}),
                      frozenset({"paged"}), ALL)}


def test_multicast_wire_rows_equal_deepep_normal_on_one_node(ds8):
    """One node: the hub's multicast sends exactly DeepEP normal mode's rows per
    (src, dst) pair (one per token and destination GPU), fewer than one per (token,
    expert); the same bytes per row on the wire give the same NVLink bytes."""
    w = V2.wire_rows(ds8, True)
    first, fwd = deepep._routes(ds8, ds8.gpu_rows, ds8.node_rows, ds8.fwd_rows)
    assert np.array_equal(w.counts, first + fwd)
    assert np.array_equal(w.counts, ds8.gpu_rows)
    assert w.counts.sum() < ds8.counts.sum()
    nvl_hub, nic_hub = study.link_bytes(ds8, w.counts, 1000.0)
    nvl_dp, nic_dp = study.link_bytes(ds8, first + fwd, 1000.0)
    assert nvl_hub == nvl_dp and nic_hub == nic_dp == 0


def test_two_nodes_hub_sends_one_copy_per_gpu_deepep_one_per_node():
    """Two nodes: the hub crosses the NIC once per (token, remote GPU); DeepEP once per
    (token, remote node) and forwards over NVLink: more inter-node rows for the hub,
    more NVLink rows for DeepEP (reported, not hidden)."""
    L = layer("h100x16-ib")
    w = V2.wire_rows(L, True)
    first, fwd = deepep._routes(L, L.gpu_rows, L.node_rows, L.fwd_rows)
    nvl_h, nic_h = study.link_bytes(L, w.counts, 1.0)
    nvl_d, nic_d = study.link_bytes(L, first + fwd, 1.0)
    own = np.arange(16) // 8
    remote_nodes = L.node_rows.sum() - L.node_rows[np.arange(16), own].sum()
    assert nic_d == remote_nodes and nic_h > nic_d
    assert nvl_d > nvl_h


def test_paged_changes_memory_not_time(ds8, runs):
    a, b = runs[frozenset()], runs[frozenset({"paged"})]
    assert np.array_equal(a.gpu_end, b.gpu_end)
    static, paged = MEM.hub_memory(ds8), MEM.hub_memory(ds8, {"paged"})
    assert paged["bytes"] < static["bytes"]
    # pages: each GPU's experts' rows in whole tile pages
    h = ds8.hub
    pages = (-(-ds8.expert_rows // h.tile_rows)).sum(axis=1)
    assert max(b.extra["pages"]) == pages.max()
    g = paged["gpu"]
    assert paged["parts"]["rows"] == pages[g] * h.tile_rows * h.stride_bytes


def test_multicast_allocates_every_routed_row_and_gathers(ds8, runs):
    r = runs[frozenset({"multicast"})]
    assert r.extra["wire_rows"] == ds8.gpu_rows.sum() and r.extra["drops"] == 0
    assert r.extra["rows_allocated"] == ds8.N           # one index entry per target
    assert r.extra["max_targets"] == min(ds8.E_local, ds8.k) == 8
    # the gather: the cheaper of a gathering GEMM1 and a read + write of the row
    g = ds8.gpu
    H, f = ds8.model.hidden, ds8.model.expert_ffn
    gemm1 = 4.0 * H * f / g.steady_eff(2 * f, H) / g.peak
    copy = 2.0 * ds8.hub.stride_bytes / g.copy_bw
    assert r.extra["gather_row_us"] == pytest.approx(min(gemm1 * (1 / V2.GATHER_EFF - 1), copy))
    assert 0 < r.extra["gather_row_us"] < gemm1
    # a pass pays it per real row, on top of its GEMMs
    import copy as cp
    from moehub.cosim.gpu import WorkItem
    gg = cp.copy(g)
    gg.gather_row_us = r.extra["gather_row_us"]
    items = [WorkItem(0.0, 0, 100, 128, f)]
    assert gg.expert_batch_us(items, 1.0) - g.expert_batch_us(items, 1.0) == \
        pytest.approx(100 * r.extra["gather_row_us"])


def test_early_counts_make_experts_known_before_the_done_word(runs):
    r = runs[frozenset({"early_counts"})]
    assert min(r.extra["early_final_us"]) > 0
    assert r.latency_us <= runs[frozenset()].latency_us + 1e-9


def test_admission_tight_rows_by_hand():
    """Multicast with count packets: the rows the input admission takes one data packet a
    cycle -- before the counts are in, and over each expert's last ADMISSION_GROUPS x
    lanes rows (20 at 4 lanes) -- counted by hand on 40 rows arriving one a cycle."""
    from types import SimpleNamespace as NS
    cfg = NS(multicast=True, count_packets=True, lanes=4, experts=2)
    rows = np.arange(40)
    # rows 0..29 name expert 0, rows 30..39 expert 1 (10 announced, below the margin: tight
    # from the start to its last row, rank 39), every count in by cycle 5
    arr = _Arr(first_cycle=rows, tgt_row=rows, tgt_expert=(rows >= 30).astype(int),
               counts=[(5, 0, 0, 0, 30), (5, 1, 1, 1, 10)])
    assert V2.admission_tight(cfg, arr) == 40
    # one expert of 40 rows: before cycle 5 (ranks 0..4), after its row 20 (ranks 21..39)
    arr = _Arr(first_cycle=rows, tgt_row=rows, tgt_expert=0 * rows, counts=[(5, 0, 0, 0, 40)])
    assert V2.admission_tight(cfg, arr) == 5 + 19
    arr.counts = [(0, 0, 0, 0, 40)]
    assert V2.admission_tight(cfg, arr) == 19
    cfg.count_packets = False
    assert V2.admission_tight(cfg, arr) == 0


class _Arr:
    """Arrivals by hand: the fields :func:`admission_tight` reads, and a length."""
    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __len__(self):
        return len(self.first_cycle)


def test_v2_timelines_are_causal(runs):
    for f, r in runs.items():
        assert check(r) == [], f"{sorted(f)}: {check(r)[:3]}"


def test_no_feature_is_protocol_v1(ds8, runs):
    """No feature: protocol v1 (its label, no v2 statistics)."""
    r = runs[frozenset()]
    assert "protocol v2" not in r.label and "wire_rows" not in r.extra
    assert "protocol v2: multicast+early_counts+paged" in runs[ALL].label


def test_unknown_feature_is_refused(ds8):
    with pytest.raises(ValueError, match="unknown"):
        run_system("hub", ds8, hub_features=frozenset({"telepathy"}))


# ---------------------------------------------------------------------------- memory
def test_deepep_low_latency_hint_by_hand():
    """DeepEP ``LowLatencyLayout`` for 128 tokens, hidden 7168, 8 ranks, 256 experts:
    dispatch message 16 + 14336 B, combine message 56 x 4 + 14336 B; 2 send + 2 receive
    (256 x 128 messages) + 2 signalling buffers (256 x 8 + 32 x 4 B, aligned to 128)."""
    md, mc = 16 + 14336, 224 + 14336
    send, recv = max(128 * md, 256 * 128 * mc), 256 * 128 * max(md, mc)
    sig = -(-(256 * 8 + 32 * 4) // 128) * 128
    total = 2 * send + 2 * recv + 2 * sig
    assert MEM.deepep_ll_hint(128, 7168, 8, 256) == (total + 128) // 128 * 128


def test_deepep_nvl_hint_by_hand():
    """``get_nvl_buffer_size_hint`` at 8 ranks, 24 SMs (12 channels), 256 receive slots,
    hidden 14336 B: per slot hidden + 8 (source meta) + 128 x 8 + 128 x 4 + 128 x 4."""
    per = 14336 + 8 + 1024 + 512 + 512
    b = 12 * 8 * 5 * 4 + 12 * 8 * 256 * per
    assert MEM.deepep_nvl_hint(14336, 8, 24, (6, 256, 6, 128)) == -(-b // 128) * 128
    assert MEM.deepep_rdma_hint(14336, 8, 24, (6, 256, 6, 128)) == 0


def test_hub_static_regions_by_hand(ds8):
    """Static: per expert a power-of-two region >= G x T rows and its index array."""
    h = ds8.hub
    m = MEM.hub_memory(ds8)
    assert h.max_rows_per_expert == 256              # >= 8 x 16, and >= the largest tile (256)
    assert m["parts"]["rows"] == 32 * 256 * h.stride_bytes
    assert m["parts"]["index"] == 32 * 256 * h.meta_word_bytes


def test_every_system_reports_receive_memory():
    er = run_experiment(*load_configs("h100x8", "mixtral-8x7b", "default", 16),
                        systems=("deepep", "deepep_ll", "ideal"))
    mem = stats(er)["receive_memory"]
    for n in ("deepep", "deepep_ll", "ideal", "hub", "hub (static regions, v1)", "hub (paged)",
              "capacity-padded (C=1.25)"):
        assert mem[n]["bytes"] > 0, n
    assert mem["deepep_ll"]["bytes"] > mem["hub (paged)"]["bytes"]


# ---------------------------------------------------------------------------- command
def test_study_command_writes_the_table(tmp_path, capsys):
    args = ["study", "v2", "--model", "deepseek-v3", "--system", "h100x8", "--tokens", "16",
            "--no-figure", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "hub + all: multicast + early_counts + paged" in out
    folder = tmp_path / "study-v2_mdeepseek-v3_h100x8_t16"
    rows = list(csv.DictReader(open(folder / "ablation.csv")))
    kinds = {r["row"]: r for r in rows}
    today = kinds["hub today (v1)"]
    assert float(today["speedup_vs_hub_today"]) == 1.0
    assert any(r["kind"] == "software (best)" for r in rows)
    mc = kinds["hub + multicast"]
    assert float(mc["nvlink_GB"]) < float(today["nvlink_GB"])
    assert (folder / "ablation.md").exists() and (folder / "run.json").exists()
    assert main(args) == 2                      # refused without --force
    assert main(["study", "v2", "--hub-features", "telepathy"]) == 2


def test_hub_rows_take_area_and_depth_from_the_matching_synthesis(ds8, tmp_path, monkeypatch):
    """A hub row's area and deepest stage come from the report of its own hub (the v2 keys,
    and sources / experts where the layer's differ, in the folder name; every field but the
    datapath width equal); a report of another hub, or none, give the reason instead; without
    a build folder the repository's record of that hub counts (the multicast hub's)."""
    from dataclasses import asdict
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    paged = V2.hub_config_v2(ds8, frozenset({"paged"}))
    assert "not synthesised" in study.synthesis(paged)["synthesis"]
    folder = tmp_path / "synth" / f"{paged.name.split('@')[0]}_pool_pages-{paged.pool_pages}"
    folder.mkdir(parents=True)
    top = {"gate_equivalents": 900e3, "fo4": 21.5, "n5": {"total_mm2": {"nominal": 0.05}}}
    hub = asdict(paged.replace(data_bits=1024, row_bytes=2 * paged.row_bytes))
    (folder / "report.json").write_text(json.dumps({"hub": hub, "asic": {"modules": {"top": top}}}))
    got = study.synthesis(paged)
    assert (got["gate_equivalents"], got["deepest_fo4"], got["area_mm2_n5"]) == (900e3, 21.5, 0.05)
    assert f"row_bytes {2 * paged.row_bytes}" in got["synthesis"]       # (sized to the layer: listed)
    # (scripts/sta_paths.py --json found a deeper family than the report's worst-slack path)
    (folder / "deepest_paths.json").write_text(json.dumps({"families": [{"fo4": 30.5, "from": "a", "to": "b"}]}))
    got = study.synthesis(paged)
    assert got["deepest_fo4"] == 30.5 and "sta_paths: a -> b" in got["synthesis"]
    hub["lanes"] += 1
    (folder / "report.json").write_text(json.dumps({"hub": hub, "asic": {"modules": {"top": top}}}))
    assert "another hub (lanes)" in study.synthesis(paged)["synthesis"]
    mc = V2.hub_config_v2(ds8, frozenset({"multicast"}))      # (no build folder: the
    got = study.synthesis(mc)                                   # repository's record)
    assert got["synthesis"].startswith(f"{mc.name.split('@')[0]}_max_targets-{mc.max_targets} (synthesised with")
    assert got["deepest_fo4"] > 20 and got["gate_equivalents"] > 1e6
    every = V2.hub_config_v2(ds8, frozenset({"multicast", "early_counts", "paged"}))
    assert f"not synthesised ({every.name.split('@')[0]}_count_packets-1_max_targets-{every.max_targets}" \
        f"_pool_pages-{every.pool_pages})" in study.synthesis(every)["synthesis"]
    mcp = V2.hub_config_v2(ds8, frozenset({"multicast", "paged"}))
    assert f"not synthesised ({mcp.name.split('@')[0]}_max_targets-{mcp.max_targets}_pool_pages-{mcp.pool_pages})" \
        in study.synthesis(mcp)["synthesis"]
    two = paged.replace(sources=16, experts=16)     # (a two-node layer's hub: its own report)
    base = paged.name.split("@")[0]
    assert f"not synthesised ({base}_experts-16_pool_pages-{paged.pool_pages}_sources-16)" \
        in study.synthesis(two)["synthesis"]


def test_a_hub_without_a_synthesis_folder_takes_its_synthesis_record(ds8, tmp_path, monkeypatch):
    """A fresh clone has no build folder: the v1 hub's row reads the repository's
    synthesis record (records/synth/deepseek-v3-8gpu.json), its figures and deepest path
    family the record's, and says so; a build folder's report comes first."""
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    rec = json.loads((Path(study.__file__).parents[3] / "records" / "synth" / "deepseek-v3-8gpu.json").read_text())
    got = study.synthesis(ds8.hub)
    top = rec["data"]["report"]["asic"]["modules"]["top"]
    assert got["area_mm2_n5"] == top["n5"]["total_mm2"]["nominal"] and got["gate_equivalents"] == top["gate_equivalents"]
    fams = rec["data"]["deepest_paths"]["families"]
    assert got["deepest_fo4"] == max(top["fo4"], fams[0]["fo4"])
    assert got["synthesis"].startswith("deepseek-v3-8gpu") and ("sta_paths" in got["synthesis"] or "record" in got["synthesis"])
    folder = tmp_path / "synth" / "deepseek-v3-8gpu"
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({**rec["data"]["report"], "asic": {"modules": {
        "top": {**top, "gate_equivalents": 1.0}}}}))
    assert study.synthesis(ds8.hub)["gate_equivalents"] == 1.0


def test_synthesis_only_rereads_the_reports_and_keeps_the_layers(ds8, tmp_path, monkeypatch):
    """``--synthesis-only``: a hub synthesised after the run fills its rows' area and depth;
    every other cell stays as the run wrote it; without a run it is a usage error."""
    from dataclasses import asdict
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))
    args = ["study", "v2", "--model", "deepseek-v3", "--system", "h100x8", "--tokens", "16",
            "--no-figure", "--out", str(tmp_path)]
    assert main(args + ["--synthesis-only"]) == 2
    assert main(args) == 0
    folder = tmp_path / "study-v2_mdeepseek-v3_h100x8_t16"
    before = list(csv.DictReader(open(folder / "ablation.csv")))
    v1 = V2.hub_config_v2(ds8, frozenset())
    synth = tmp_path / "build" / "synth" / v1.name.split("@")[0]
    synth.mkdir(parents=True)
    top = {"gate_equivalents": 800e3, "fo4": 20.5, "n5": {"total_mm2": {"nominal": 0.04}}}
    (synth / "report.json").write_text(json.dumps({"hub": asdict(v1), "asic": {"modules": {"top": top}}}))
    assert main(args + ["--synthesis-only"]) == 0
    after = list(csv.DictReader(open(folder / "ablation.csv")))
    rows = {r["row"]: r for r in after}
    assert float(rows["hub today (v1)"]["gate_equivalents"]) == 800e3
    assert float(rows["hub today (v1)"]["deepest_fo4"]) == 20.5
    assert "not synthesised" in rows["hub + paged"]["synthesis"]
    synth_cols = {"area_mm2_n5", "gate_equivalents", "deepest_fo4", "synthesis"}
    assert [{k: v for k, v in r.items() if k not in synth_cols} for r in before] == \
        [{k: v for k, v in r.items() if k not in synth_cols} for r in after]
    assert "0.040 (800k)" in (folder / "ablation.md").read_text()
