"""``moehub headline`` over a map: a tiny grid (2 systems x 2 sizes, a tiny model) on Dask
and in-process, cached per run and resumable; the best-hub and best-baseline picks on
constructed results; the compute-to-link override; bad grid values exit 2."""
import csv
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from moehub.cosim.config import load_model_config, load_system_config
from moehub.cosim import headline_eval, headline_grid as grid, headline_pick as pick
from moehub.scripts.cli import main


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """Two 2-GPU systems and a tiny model as YAML files; the build folder in tmp_path."""
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))
    paths = {}
    for name in ("h100x8", "b200x8"):
        d = dataclasses.asdict(load_system_config(name))
        d.update(gpus=2, gpus_per_node=2)
        d.pop("name")
        paths[name] = tmp_path / f"{name}-2gpu.yaml"
        paths[name].write_text(yaml.safe_dump(d))
    m = dataclasses.asdict(load_model_config("mixtral-8x7b"))
    m.update(hidden=512, expert_ffn=1024, experts=4, layers=2, attn_params=4 * 512 * 512,
             attn_heads=4)
    m.pop("name")
    paths["model"] = tmp_path / "tiny-moe.yaml"
    paths["model"].write_text(yaml.safe_dump(m))
    return paths


def _argv(tiny, out, *extra):
    return ["headline", "--systems", f"{tiny['h100x8']},{tiny['b200x8']}", "--models",
            str(tiny["model"]), "--tokens", "2,8", "--hub-variants", "v1,multicast+early_counts",
            "--baselines", "comet,deepep,fused", "--paper-baselines", "bulk", "--out", str(out),
            *extra]


def _record(out):
    return json.loads((out / "headline.json").read_text())["record"]


def test_tiny_grid_is_cached_and_runs_the_same_on_a_one_worker_cluster(tiny, tmp_path):
    out = tmp_path / "out"
    assert main(_argv(tiny, out, "--scheduler", "synchronous")) == 0
    rows = list(csv.DictReader(open(out / "headline.csv")))
    assert len(rows) == 4 and _record(out)["evaluated"] == 4
    for r in rows:
        base = {n: float(r[f"{n}_us"]) for n in ("comet", "deepep", "fused")}
        assert r["best_baseline"] == min(base, key=base.get) and r["paper_baseline"] == "bulk"
        assert float(r["speedup_paper"]) == pytest.approx(float(r["bulk_us"]) / float(r["hub_us"]))
        hubs = {v: float(r[f"hub_{v.replace('+', '_')}_us"]) for v in ("v1", "multicast+early_counts")}
        assert float(r["hub_us"]) == min(hubs.values())
        assert float(r["speedup_layer"]) == pytest.approx(float(r["best_us"]) / float(r["hub_us"]))
    assert (out / "headline.png").read_bytes()[:4] == b"\x89PNG"
    rec = _record(out)
    assert rec["git"] is not None or rec["moehub_version"]
    assert rec["command"].startswith("moehub headline") and rec["machine_start"]["cpus"] >= 1
    # the second run does no work: every run comes from the cache
    assert main(_argv(tiny, out, "--scheduler", "synchronous", "--no-figure")) == 0
    assert _record(out)["evaluated"] == 0 and _record(out)["cached"] == 4
    assert list(csv.DictReader(open(out / "headline.csv"))) == rows
    # one point again on a local Dask cluster (one worker process): the same figures
    argv = _argv(tiny, tmp_path / "dask", "--workers", "1", "--no-cache", "--no-figure")
    argv[argv.index("--tokens") + 1] = "8"
    argv[argv.index("--systems") + 1] = str(tiny["b200x8"])
    assert main(argv) == 0
    rec = _record(tmp_path / "dask")
    assert rec["evaluated"] == 1 and rec["scheduler"] == "local"
    again = list(csv.DictReader(open(tmp_path / "dask" / "headline.csv")))
    same = [r for r in rows if r["tokens_per_gpu"] == "8" and "b200" in r["system"]]
    assert [r["hub_us"] for r in again] == [r["hub_us"] for r in same]
    assert [r["best_us"] for r in again] == [r["best_us"] for r in same]


def test_a_failed_point_is_resumed_and_a_new_variant_reruns_only_itself(tiny, tmp_path,
                                                                       monkeypatch):
    out = tmp_path / "out"
    real = headline_eval.evaluate_point
    calls = []

    def flaky(point, runs):
        calls.append((point.tokens, tuple(runs)))
        if point.tokens == 8 and "h100" in point.system_config:
            raise RuntimeError("killed")
        return real(point, runs)
    monkeypatch.setattr(headline_eval, "evaluate_point", flaky)
    assert main(_argv(tiny, out, "--scheduler", "synchronous", "--no-figure")) == 1
    assert len(calls) == 4 and _record(out)["failed"] == 1
    assert len(list(csv.DictReader(open(out / "headline.csv")))) == 3
    calls.clear()
    monkeypatch.setattr(headline_eval, "evaluate_point", lambda p, r: calls.append(
        (p.tokens, tuple(r))) or real(p, r))
    assert main(_argv(tiny, out, "--scheduler", "synchronous", "--no-figure")) == 0
    assert [c[0] for c in calls] == [8] and _record(out)["evaluated"] == 1
    calls.clear()
    argv = _argv(tiny, out, "--scheduler", "synchronous", "--no-figure")
    argv[argv.index("--hub-variants") + 1] = "v1,multicast+early_counts,early_counts"
    assert main(argv) == 0
    assert sorted(calls) == [(t, ("hub:early_counts",)) for t in (2, 2, 8, 8)]


def _runs(**lat):
    return {n: {"latency_us": us, "e2e_ms": us / 100, "gemm_first_us": 10.0,
                "gemm_busy_us": 50.0, "gemm_end_us": us - 5, "dispatch_end_us": 8.0}
            for n, us in lat.items()}


def test_best_hub_and_best_baseline_picks():
    runs = _runs(bulk=300, comet=200, fused=180, deepep=250, ideal=100,
                 **{"hub:v1": 150, "hub:early_counts": 150 * (1 - 1e-9),
                    "hub:multicast+early_counts": 120})
    assert pick.best_hub(runs) == ("multicast+early_counts", 120)
    assert pick.best_of(runs, ("bulk", "comet", "fused", "deepep")) == ("fused", 180)
    assert pick.best_of(runs, ("eager",)) == (None, None)
    # a feature that changes nothing is not credited: a tie goes to the fewest features
    tie = _runs(**{"hub:v1": 150, "hub:early_counts": 150 * (1 - 1e-9)})
    assert pick.best_hub(tie) == ("v1", 150)
    p = grid.Point("h100x8", "mixtral-8x7b", 64, 2.0, load_system_config("h100x8"),
                   load_model_config("mixtral-8x7b"), None)
    facts = {"gpus": 8, "comm_sms_hub": 16, "hub_wire_bytes": 2e6,
             "hub_multicast_wire_bytes": 1e6, "dedup_wire_bytes": 1e6, "header_bytes": 16,
             "chunk_bytes": 128}
    r = pick.row(p, {**runs, "eager": runs["bulk"]}, facts, ("bulk", "comet", "fused", "deepep"),
                 ("eager",))
    assert (r["best_baseline"], r["hub_variant"], r["paper_baseline"]) == \
        ("fused", "multicast+early_counts", "eager")
    assert r["speedup_layer"] == pytest.approx(1.5) and r["speedup_paper"] == pytest.approx(2.5)
    assert r["compute_link_ratio"] == 2.0 and r["why_hub_loses"] == ""
    # a cell resting on a run stopped at the pass limit is marked, others are not
    from moehub.cosim.headline import pivot_md
    assert "†" not in pivot_md([r])
    assert (r["speedup_min"], r["speedup_max"]) == pytest.approx((1.5, 1.5))
    runs["fused"]["converged"] = False
    r = pick.row(p, runs, facts, ("bulk", "comet", "fused", "deepep"), ())
    assert r["not_converged"] == "fused" and "1.50 F (mc+ec) †" in pivot_md([r])
    # with the bands of the last passes: the hub's slowest against the baselines' fastest
    # (comet's 200 caps fused's band from above), and the other way round
    runs["fused"]["band_us"] = [150.0, 240.0]
    runs["hub:multicast+early_counts"].update(converged=False, band_us=[100.0, 125.0])
    r = pick.row(p, runs, facts, ("bulk", "comet", "fused", "deepep"), ())
    assert (r["speedup_min"], r["speedup_max"]) == pytest.approx((150 / 125, 200 / 100))
    assert "1.50 F (mc+ec) † 1.20–2.00" in pivot_md([r])


def test_why_names_the_later_gemm_start_only_when_the_hub_is_slower():
    facts = {"comm_sms_hub": 16, "hub_wire_bytes": 2e6, "hub_multicast_wire_bytes": 1e6,
             "dedup_wire_bytes": 1e6, "header_bytes": 16, "chunk_bytes": 128}
    base = _runs(comet=200)["comet"]
    slow = {**base, "latency_us": 260.0, "gemm_first_us": 60.0}
    text = pick.why(slow, base, "comet", facts, "v1")
    assert "start 50 us later" in text and "per-expert counts" in text
    assert "per-expert counts" not in pick.why(slow, base, "comet", facts, "early_counts")
    assert pick.why(base, slow, "comet", facts, "v1") == ""


def test_compute_to_link_override_scales_compute_only_and_changes_the_key():
    s = load_system_config("h100x8")
    s2 = grid.scale_compute_to_link(s, 2.0)
    assert (s2.peak_bf16_TFLOPs, s2.peak_fp8_TFLOPs) == (2 * s.peak_bf16_TFLOPs,
                                                        2 * s.peak_fp8_TFLOPs)
    assert (s2.intra_bw_GBps, s2.inter_bw_GBps, s2.hbm_GBps) == (s.intra_bw_GBps,
                                                                 s.inter_bw_GBps, s.hbm_GBps)
    assert s2.name == "h100x8@cl2" and grid.scale_compute_to_link(s, 1.0) is s
    p1 = grid.resolve("h100x8", "mixtral-8x7b", 4, 1.0)
    p2 = grid.resolve("h100x8", "mixtral-8x7b", 4, 2.0)
    assert p2.system.peak_bf16_TFLOPs == 2 * p1.system.peak_bf16_TFLOPs
    assert headline_eval.run_key(p1, "hub:v1", "x") != headline_eval.run_key(p2, "hub:v1", "x")
    assert headline_eval.run_key(p1, "hub:v1", "x") != headline_eval.run_key(p1, "comet", "x")
    assert headline_eval.run_key(p1, "hub:v1", "x") != headline_eval.run_key(p1, "hub:v1", "y")


def test_the_cache_key_hashes_what_a_run_imports_not_what_presents_it(monkeypatch):
    from moehub.runinfo import PACKAGE_DIR
    files = {str(Path(f).resolve().relative_to(PACKAGE_DIR)) for f in headline_eval._run_sources()}
    assert {"cosim/layer.py", "spec/timing.py", "spec/model.py"} <= files
    assert not any(f.startswith(("synth/", "verif/formal", "explore/")) for f in files)
    # an edit of a module a run imports lazily (the network's compiled kernels) changes the
    # key, one of a figure not
    seen = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: seen.append(
        str(p.relative_to(PACKAGE_DIR))) or real(p))
    headline_eval.code_digest.cache_clear()
    headline_eval.code_digest()
    assert "cosim/network_kernels.py" in seen and "config/hub/tiny.yaml" in seen
    assert "cosim/plots.py" not in seen and "cosim/headline.py" not in seen


def test_default_grid_covers_the_map_and_full_adds_the_widest():
    """The default grid has 8-GPU boxes, the NVL72 and multi-node systems, each at decode
    and prefill sizes, and stays within the systems a 2-core machine runs in about half
    an hour; ``full`` adds EP128 and EP256 (hours)."""
    default = grid.points(grid.build_blocks(None))
    sizes = {}
    for p in default:
        sizes.setdefault(p.system_config, set()).add(p.tokens)
    assert {"h100x8", "b200x8", "gb200-nvl72", "gb200-nvl72-ep72", "h100x32-ib",
            "h100x64-ib"} == set(sizes)
    assert all(min(s) == 1 and max(s) >= 128 for s in sizes.values())
    assert max(sizes["h100x8"]) == 32768
    full = {p.system_config for p in grid.points(grid.build_blocks("full"))}
    assert full == set(sizes) | {"gb200-nvl72x2-ep128-ib", "h100x256-ib"}


def test_presets_and_blocks():
    quick = grid.points(grid.build_blocks("quick"))
    assert {p.system_config for p in quick} >= {"h100x8", "gb200-nvl72"}
    from moehub.scripts.cli import build_parser
    assert build_parser().parse_args(["headline", "--quick"]).grid == "quick"
    one = grid.build_blocks(None, ("h100x8",), None, (1, 2), (0.5, 1.0))
    assert len(one) == 1 and one[0].ratios == (0.5, 1.0) and one[0].systems == ("h100x8",)
    q = grid.build_blocks("quick", None, ("deepseek-v3",))
    assert all(b.models == ("deepseek-v3",) for b in q) and len(q) == len(grid.PRESETS["quick"])
    run, skipped = grid.split(grid.points([grid.Block(("h100x8", "gb200-nvl72-ep72"),
                                                      ("phi-3.5-moe",), (1, 300))]), 4000)
    assert [(p.system_config, p.tokens) for p in run] == [("h100x8", 1)]
    assert [(p.tokens, "rows" in why) for p, why in skipped[:1]] == [(300, True)]
    assert all("16 experts" in why for p, why in skipped[1:]) and len(skipped) == 3
    ep72 = grid.points([grid.Block(("gb200-nvl72-ep72",), ("deepseek-v3",), (1,))])
    assert grid.split(ep72, 4000) == (ep72, [])        # redundant expert slots run it


@pytest.mark.parametrize("flag,value", [
    ("--tokens", "0"), ("--tokens", "x"), ("--compute-link-ratio", "-1"),
    ("--compute-link-ratio", "fast"), ("--hub-variants", "v1,turbo"),
    ("--systems", "no-such-system"), ("--models", "no-such-model"),
    ("--baselines", "no-such-baseline"), ("--paper-baselines", "eagle"),
    ("--scheduler", "localhost:8786"), ("--max-points", "1")])
def test_bad_grid_values_exit_2_naming_key_and_value(flag, value, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    argv = ["headline", "--systems", "h100x8", "--models", "mixtral-8x7b", "--tokens", "1,2",
            "--list"]
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and repr(value.split(",")[-1]) in err


def test_relay_variants_run_only_across_nodes(tiny, tmp_path):
    """Protocol v3's relay hubs are hub variants of the map: they run on a point over two
    nodes and not on a one-node point, whose cell is the best of the other variants; a
    variant naming reduce without relay is refused."""
    d = yaml.safe_load(tiny["h100x8"].read_text())
    d.update(gpus=4, gpus_per_node=2)                # 2 nodes, 2 of the 4 experts per GPU
    m = yaml.safe_load(tiny["model"].read_text())
    m.update(experts=8)
    tiny["model"].write_text(yaml.safe_dump(m))
    two = tmp_path / "h100-2x2.yaml"
    two.write_text(yaml.safe_dump(d))
    out = tmp_path / "out"
    argv = ["headline", "--systems", f"{tiny['h100x8']},{two}", "--models", str(tiny["model"]),
            "--tokens", "8", "--hub-variants", "v1,relay", "--baselines", "deepep,fused",
            "--paper-baselines", "none", "--scheduler", "synchronous", "--out", str(out)]
    assert main(argv) == 0
    rows = {r["system_config"]: r for r in csv.DictReader(open(out / "headline.csv"))}
    assert set(rows) == {"h100x8-2gpu", "h100-2x2"}
    one, across = rows["h100x8-2gpu"], rows["h100-2x2"]
    assert one["hub_relay_us"] == "" and one["hub_variant"] == "v1"
    assert float(across["hub_relay_us"]) > 0
    assert float(across["hub_us"]) == min(float(across["hub_v1_us"]), float(across["hub_relay_us"]))
    bad = list(argv)
    bad[bad.index("--hub-variants") + 1] = "v1,reduce"
    assert main(bad) == 2
