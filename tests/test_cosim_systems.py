"""The systems: their phases, bounds and monotonicity, and a small end-to-end run."""
import json

import pytest

from moehub.cosim.systems import PHASES, SYSTEMS, run_system
from cosim_helpers import layer


@pytest.fixture(scope="module")
def mixtral_256():
    L = layer()
    return L, {n: run_system(n, L) for n in SYSTEMS}


def test_each_system_has_its_named_phases(mixtral_256):
    L, res = mixtral_256
    for name, r in res.items():
        got = {p.name for p in r.phases if p.name != "shared expert"}
        want = set(PHASES[name])
        if L.E_local == 1:       # one expert per GPU: nothing to sort by expert
            want -= {"sort by expert", "unsort"}
        assert got == want, name
        for p in r.phases:
            assert 0 <= p.start < p.end <= r.latency_us + 1e-9


def test_bulk_sorts_rows_when_a_gpu_holds_several_experts():
    L = layer(model="qwen2-57b-a14b", tokens=64)
    assert L.E_local == 8
    r = run_system("bulk", L)
    assert {p.name for p in r.phases if p.name != "shared expert"} == set(PHASES["bulk"])


def test_baseline_phase_order_on_every_gpu(mixtral_256):
    """Bulk: nothing is sent before the host sync ends; the GEMM waits for the dispatch."""
    L, res = mixtral_256
    r = res["bulk"]
    for g in range(L.G):
        ph = {p.name: p for p in r.phases if p.gpu == g}
        assert ph["host sync"].end <= ph["all-to-all dispatch"].start
        assert ph["count exchange"].end <= ph["host sync"].start
        assert ph["all-to-all dispatch"].end <= ph["expert GEMM"].start + 1e-9
        assert ph["expert GEMM"].end <= ph["all-to-all combine"].start + 1e-9


def test_hub_sends_before_any_baseline_can(mixtral_256):
    L, res = mixtral_256
    first_send = {n: min(p.start for p in r.phases if p.track == "send")
                  for n, r in res.items() if n != "ideal"}
    assert first_send["hub"] < min(v for n, v in first_send.items() if n != "hub")


def test_ideal_is_a_lower_bound(mixtral_256):
    L, res = mixtral_256
    for name, r in res.items():
        assert r.latency_us >= res["ideal"].latency_us - 1e-9, name


@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen2-57b-a14b"])
def test_more_tokens_never_take_less_time(model):
    prev = None
    for t in (32, 64, 128):
        L = layer(model=model, tokens=t)
        lat = {n: run_system(n, L).latency_us for n in SYSTEMS}
        if prev:
            for n in SYSTEMS:
                assert lat[n] >= prev[n] - 1e-9, (n, t)
        prev = lat


def test_more_bandwidth_never_takes_more_time(monkeypatch):
    """Network and GEMM queue: a faster link never slows a layer. (HBM contention is left
    out here: faster links concentrate their HBM traffic into bursts, and a pass that meets
    a burst pays max(compute, bytes / share) for it -- see the HBM tests.)"""
    import moehub.cosim.systems.common as common
    monkeypatch.setattr(common, "hbm_share", lambda L, d, phases=None: (lambda t: 1.0))
    prev = None
    for bw in (50.0, 150.0, 450.0, 900.0):
        L = layer(tokens=256, intra_bw_GBps=bw)
        lat = {n: run_system(n, L).latency_us for n in SYSTEMS}
        if prev:
            for n in SYSTEMS:
                assert lat[n] <= prev[n] + 1e-9, (n, bw)
        prev = lat
    # on a slow link communication dominates: the bulk system must suffer from it
    slow = layer(tokens=256, intra_bw_GBps=50.0)
    assert run_system("bulk", slow).latency_us > 1.5 * run_system("ideal", slow).latency_us


def test_multi_node_and_replicated_placements_conserve_rows():
    L = layer(system="h100x16-ib", tokens=128)          # 16 GPUs, 8 experts: 2 replicas
    assert L.replicas == 2 and L.counts.sum() == 16 * 128 * 2
    # each node keeps its traffic at home: replicas are chosen by node
    for s in range(16):
        for d in range(16):
            if L.counts[s, d]:
                assert s // 8 == d // 8
    r = run_system("hub", L)
    assert r.extra["drops"] == 0 and r.extra["rows_allocated"] == 16 * 128 * 2
    L = layer(model="deepseek-v3", system="h100x16-ib", tokens=32)   # crosses InfiniBand
    assert L.counts[:8, 8:].sum() > 0
    res = {n: run_system(n, L).latency_us for n in ("bulk", "hub", "ideal")}
    assert res["ideal"] <= res["hub"] and res["ideal"] <= res["bulk"]


def test_small_end_to_end_run_writes_results_and_figures(tmp_path, capsys):
    from moehub.scripts.cli import main
    rc = main(["cosim", "--tokens", "128", "--out", str(tmp_path), "--run", "smoke"])
    assert rc == 0
    out = capsys.readouterr().out
    d = tmp_path / "smoke"
    for f in ("config.yaml", "stats.json", "stats.csv", "phases.csv", "timeline.png"):
        assert (d / f).exists() and (d / f).stat().st_size > 0, f
        assert str(d / f) in out
    st = json.loads((d / "stats.json").read_text())
    assert set(st["systems"]) == set(SYSTEMS)
    assert st["systems"]["hub"]["hub_speedup"] == pytest.approx(1.0)
    assert st["hub"]["drops"] == 0
    for name in SYSTEMS:
        assert name in out or st["systems"][name]["label"] in out
    with open(d / "timeline.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_sweep_command_writes_a_speedup_plot(tmp_path, capsys):
    from moehub.scripts.cli import main
    rc = main(["sweep", "tokens", "--values", "64,128", "--out", str(tmp_path), "--run", "sw"])
    assert rc == 0
    assert (tmp_path / "sw" / "speedup_tokens.png").exists()
    rows = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert len(rows) == 2 * len(SYSTEMS)
    assert "[2/2]" in capsys.readouterr().out


def test_config_errors_exit_with_code_2(capsys):
    from moehub.scripts.cli import main
    assert main(["cosim", "--model", "no-such-model"]) == 2
    assert "configuration error" in capsys.readouterr().err
    # 1.5 nodes of 8 (3 GPUs no longer fail: 8 experts get redundant slots on them)
    assert main(["cosim", "--system", "h100x16-ib", "--gpus", "12"]) == 2
    assert "gpus = 12" in capsys.readouterr().err
    # 16 experts cannot replicate evenly onto 24 GPUs
    assert main(["cosim", "--model", "phi-3.5-moe", "--gpus", "24"]) == 2
    assert "not a multiple of the 16 experts" in capsys.readouterr().err


def test_one_gpu_has_no_remote_traffic_and_no_count_exchange():
    L = layer(tokens=128, gpus=1, gpus_per_node=1)
    assert L.E_local == 8 and L.counts.sum() == 128 * 2
    r = run_system("bulk", L)
    cx = [p for p in r.phases if p.name == "count exchange"]
    assert not cx                              # nothing to exchange on one GPU
    assert run_system("hub", L).extra["drops"] == 0


def test_expert_ordered_hub_sends_add_a_local_layout_only():
    from moehub.cosim.systems import run_hub
    L = layer(model="qwen2-57b-a14b", tokens=64)
    r = run_hub(L, order="expert")
    names = {p.name for p in r.phases}
    assert "layout" in names and "count exchange" not in names
    assert r.extra["drops"] == 0 and r.extra["rows_allocated"] == L.N


def test_link_traffic_slows_memory_bound_gemms_through_hbm():
    """Incoming and outgoing link bytes cross the GPU's HBM: the expert GEMM passes
    overlapped with its traffic take longer than without it, and the
    share never drops below the configured floor."""
    import moehub.cosim.systems.common as common
    L = layer(tokens=2048)           # GEMM passes overlap the dispatch and combine
    r = run_system("comet", L)
    share = common.hbm_share(L, 0)
    loads = [share.mean(p.start, p.end) for p in r.phases if p.name == "expert GEMM" and p.gpu == 0]
    assert min(loads) < 1.0
    assert min(share.s) >= L.sys.software.hbm_floor_frac - 1e-9
    busy = sum(p.end - p.start for p in r.phases if p.name == "expert GEMM")
    common_orig = common.hbm_share
    try:
        common.hbm_share = lambda L, d, phases=None: (lambda t: 1.0)
        free = run_system("comet", L)
    finally:
        common.hbm_share = common_orig
    assert busy > sum(p.end - p.start for p in free.phases if p.name == "expert GEMM")
