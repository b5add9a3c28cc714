"""``moehub explore``: the grid and its checks, the cache key, the Pareto set, and
4-point explorations on a local Dask cluster (fast: synthesis replaced by a stand-in
through the evaluator hook, the co-simulation real; slow: the real synthesis)."""
import csv
import json
import os
import subprocess
import sys

import pytest

from moehub import explore
from moehub.spec.config import ConfigError
from moehub.cluster import Cache
from moehub.explore import evaluator as ev
from moehub.explore import pareto, space
from moehub.scripts.cli import main
from moehub.synth.tools import asic_tools_missing

#: a cheap layer: Mixtral on 2 GPUs (4 experts each), 16 tokens per GPU, on the tiny hub
SMALL = {"model": "mixtral-8x7b", "system": "h100x8", "workload": "small", "tokens": 16,
         "hub": "tiny"}
#: environment variable naming a point label that the stand-in evaluator fails
FAIL_ENV = "MOEHUB_TEST_EXPLORE_FAIL"


def small_spec(**axes) -> explore.Spec:
    spec = explore.Spec()
    for k, v in SMALL.items():
        spec.set_fixed(k, v)
    spec.add_axis("sources", [2])
    for k, v in axes.items():
        spec.add_axis(k, v)
    return spec


def fast_evaluator(point, work_dir):
    """Stand-in synthesis (area and depth from the config) + the real co-simulation; counts
    its calls in the point's work folder; fails the point named by FAIL_ENV."""
    if os.environ.get(FAIL_ENV) == point.label:
        raise RuntimeError(f"injected failure of {point.label}")
    calls = work_dir / "calls"
    calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
    h = point.synth
    fo4 = 20.0 + 2 * h.lanes
    return {"n5_mm2": 0.001 * h.lanes * (1 + h.tags_per_source), "fo4": fo4,
            "timing": "FAIL" if fo4 > 26 else "MARGINAL", **ev.cosimulate(point)}


# ---------------------------------------------------------------------------- the grid
def test_grid_expands_every_combination_in_axis_order():
    spec = small_spec(lanes=[1, 2, 4], tags=[2, 3])
    combos = spec.combos()
    assert len(combos) == 6
    assert combos[0] == {"sources": 2, "lanes": 1, "tags": 2}
    assert combos[1] == {"sources": 2, "lanes": 1, "tags": 3}
    assert combos[-1] == {"sources": 2, "lanes": 4, "tags": 3}
    pts = space.points(spec)
    assert [(p.hub.lanes, p.hub.tags_per_source) for p in pts] == [
        (1, 2), (1, 3), (2, 2), (2, 3), (4, 2), (4, 3)]
    p = pts[-1]
    # the co-simulated hub: the layer's sources and experts, the full dispatch row
    assert (p.hub.sources, p.hub.experts, p.hub.row_bytes) == (2, 4, 8192)
    # the synthesized hub: the same, rows cut to 8 chunks, a narrow datapath
    assert (p.synth.sources, p.synth.lanes, p.synth.chunks_per_row, p.synth.data_bits) == (2, 4, 8, 32)
    assert p.hub.receive_bytes == 4 * 32 * (8192 + 4) + 4 * 4 * 16 + 4 * 5


def test_experts_and_sources_reach_the_layer_and_lanes_grow_the_queues():
    spec = small_spec(experts=[4], lanes=[8])
    spec.add_axis("sources", [4])
    p = space.points(spec)[0]
    assert p.model.experts == 16 and p.system.gpus == 4     # Mixtral's 8 experts, 16 here
    assert (p.hub.experts, p.hub.sources) == (4, 4)
    assert p.hub.event_queue_depth >= 48 and p.synth.credit_queue_depth >= 48


def test_grid_file_and_command_line_axes(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("axes: {lanes: [1, 2], tags: 3}\nfixed: {tokens: 16, hub: tiny}\nsynth_chunks: 4\n")
    spec = explore.load_spec_file(f)
    assert spec.name == "mine" and spec.axes == {"lanes": [1, 2], "tags": [3]}
    assert spec.fixed["tokens"] == 16 and spec.synth_chunks == 4
    key, values = space.parse_axis("chunk_bytes=16, 32,16")
    spec.add_axis(key, values)
    assert spec.axes["chunk_bytes"] == [16, 32]


@pytest.mark.parametrize("argv, words", [
    (["--axis", "lane=2"], ["'lane'", "unknown", "lanes"]),
    (["--axis", "lanes=2,x"], ["lanes", "'x'", "integer"]),
    (["--axis", "lanes=0"], ["lanes", "'0'"]),
    (["--axis", "lanes"], ["KEY=V1"]),
    (["--axis", "page_bytes=4096"], ["page_bytes", "page is its tile", "tile_rows"]),
    (["--axis", "features=v1,pages"], ["features", "'pages'", "unknown", "multicast"]),
    (["--axis", "features=reduce"], ["features", "'reduce'", "needs 'relay'"]),
    (["--axis", "features=relay"], ["point features=relay", "one node", ">= 2 nodes"]),
    (["--axis", "chunk_bytes=24"], ["chunk_bytes=24", "chunk_bytes = 24", "power of two"]),
    (["--axis", "tile_rows=32"], ["tile_rows = 32", "min_tile_rows"]),
    (["--axis", "lanes=2,32"], ["point lanes=32", "lanes = 32", "at most 16"]),
    (["--axis", "sources=3"], ["point sources=3", "system.gpus = 3", "divide"]),
    (["--axis", "model=nope"], ["model", "'nope'", "not found", "mixtral-8x7b"]),
    (["--axis", "lanes=1,2,4", "--axis", "tags=2,3", "--max-points", "5"], ["6 points", "--max-points 5"]),
    (["--cluster", "local", "--cluster-opt", "queue=x"], ["--cluster-opt", "slurm|pbs"]),
    (["--scheduler", "localhost:8786"], ["--scheduler", "tcp://"]),
    (["--evaluator", "nomodule"], ["--evaluator", "MODULE:FUNCTION"]),
])
def test_bad_axes_and_options_exit_2_naming_key_and_value(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    assert main(["explore", "--tokens", "16", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "explore").exists() and not (tmp_path / "results").exists()


def test_bad_grid_file_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    f = tmp_path / "g.yaml"
    f.write_text("axes: {lanes: [2]}\nsweep: 3\n")
    assert main(["explore", "--grid", str(f)]) == 2
    assert "sweep = 3: unknown key" in capsys.readouterr().err


def test_slurm_without_dask_jobqueue_names_the_pip_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)     # import fails
    assert main(["explore", "--cluster", "slurm", "--axis", "lanes=2"]) == 2
    err = capsys.readouterr().err
    assert "--cluster" in err and "pip install" in err and "explore-hpc" in err


def test_jobqueue_options_pass_through(monkeypatch):
    """--cluster-opt values reach the dask-jobqueue class (a stand-in here), typed."""
    import types
    seen = {}

    class FakeCluster:
        def __init__(self, **kw):
            seen.update(kw)
            raise TypeError("stop here")
    monkeypatch.setitem(sys.modules, "dask_jobqueue", types.SimpleNamespace(PBSCluster=FakeCluster))
    from moehub import cluster
    opts = cluster.parse_options(["queue=gpu", "cores=8", "memory=16GB", "job_extra_directives=[-l x]"])
    assert opts == {"queue": "gpu", "cores": 8, "memory": "16GB", "job_extra_directives": ["-l x"]}
    with pytest.raises(Exception) as e:
        with cluster.client(4, cluster="pbs", options=opts):
            pass
    assert seen == opts and "PBSCluster refused" in str(e.value)


# ---------------------------------------------------------------------------- cache key
def test_features_reach_the_synthesized_hub_the_cosimulation_and_the_key(monkeypatch):
    """``features``: one spelling per set (v1 and named features in table order); the
    synthesized hub has the features' protocol-v2 fields as the co-simulation derives them
    (multicast width, count packets, a page pool), the co-simulated layer's hub stays the
    v1 one the features are applied to; the cache key tells them apart (a v1 point's key
    is that of a grid without the axis); the evaluator runs the hub with them and takes
    the receive memory from the memory model."""
    spec = small_spec(lanes=[2])
    spec.add_axis("features", ["v1", "paged+multicast+early_counts", "multicast"])
    assert spec.axes["features"] == ["v1", "multicast+early_counts+paged", "multicast"]
    v1, full, mc = space.points(spec)
    assert v1.hub_features == frozenset() and full.hub_features == {"multicast", "early_counts", "paged"}
    assert (v1.synth.max_targets, v1.synth.count_packets, v1.synth.pool_pages) == (1, False, 0)
    assert full.synth.max_targets == 2 and full.synth.count_packets and full.synth.pool_pages > 0
    assert (mc.synth.max_targets, mc.synth.pool_pages) == (2, 0) and mc.hub == v1.hub
    versions = {"moehub": "0", "sources": "abc"}
    keys = {ev.cache_key(p, versions) for p in (v1, full, mc)}
    assert len(keys) == 3 and ev.cache_key(v1, versions) == ev.cache_key(
        space.points(small_spec(lanes=[2]))[0], versions)
    import moehub.cosim.experiment as experiment
    seen, real = {}, experiment.run_experiment

    def fake_run(system, model, workload, hub_base=None, hub_features=frozenset()):
        seen["features"] = hub_features
        return real(system, model, workload, systems=("hub", "bulk", "ideal"), hub_base=hub_base,
                    hub_features=hub_features)
    monkeypatch.setattr(experiment, "run_experiment", fake_run)
    m = ev.cosimulate(full)
    assert seen["features"] == full.hub_features
    assert 0 < m["receive_bytes"] < full.hub.receive_bytes      # pages: far below whole regions
    assert ev.synth_scope(full) == "hub"
    relay = explore.Spec()
    for k, v in {**SMALL, "system": "h100x16-ib"}.items():
        relay.set_fixed(k, v)
    relay.add_axis("sources", [16])
    relay.add_axis("features", ["reduce+relay", "relay"])
    r, only = space.points(relay)
    assert r.hub_features == {"relay", "reduce"} and r.label == "sources=16 features=relay+reduce"
    assert r.synth == only.synth and ev.cache_key(r, versions) != ev.cache_key(only, versions)
    assert ev.synth_scope(r).startswith("hub without the relay units")


def test_cache_key_is_stable_and_sensitive():
    versions = {"moehub": "0", "yosys": "Yosys 0.23", "opensta": "2.0.17", "sources": "abc"}
    p = space.points(small_spec(lanes=[2]))[0]
    k = ev.cache_key(p, versions)
    assert k == ev.cache_key(space.points(small_spec(lanes=[2]))[0], dict(versions))
    # names and descriptions change no figure
    renamed = space.Point(p.values, p.system, p.model.replace(name="other"), p.workload, p.hub_base,
                          p.hub.replace(name="x", description="y"), p.synth, p.period_ns)
    assert ev.cache_key(renamed, versions) == k
    others = [ev.cache_key(space.points(small_spec(lanes=[1]))[0], versions),
              ev.cache_key(space.points(small_spec(lanes=[2], tags=[2]))[0], versions),
              ev.cache_key(space.points(small_spec(lanes=[2], tokens=[8]))[0], versions),
              ev.cache_key(p, {**versions, "yosys": "Yosys 0.40"}),
              ev.cache_key(p, {**versions, "sources": "abd"}),
              ev.cache_key(p, versions, evaluator=fast_evaluator)]
    spec = small_spec(lanes=[2])
    spec.synth_chunks = 4
    others.append(ev.cache_key(space.points(spec)[0], versions))
    assert len({k, *others}) == len(others) + 1


def test_cache_key_is_the_same_in_another_process():
    code = ("import sys; sys.path.insert(0, %r); from test_explore import small_spec; "
            "from moehub.explore import evaluator as ev, space; "
            "print(ev.cache_key(space.points(small_spec(lanes=[2]))[0], {'v': 1}))"
            % os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"}, check=True).stdout.strip()
    assert out == ev.cache_key(space.points(small_spec(lanes=[2]))[0], {"v": 1})


def test_sources_digest_follows_the_code(tmp_path, monkeypatch):
    from moehub import runinfo
    ev.code_digest.cache_clear()
    before = ev.code_digest()
    for d in (*ev.SOURCE_DIRS, "explore"):
        (tmp_path / d).mkdir()
    for f in ev.SOURCE_FILES:
        (tmp_path / f).write_text("x = 1\n")
    (tmp_path / "rtl" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(runinfo, "PACKAGE_DIR", tmp_path)
    ev.code_digest.cache_clear()
    one = ev.code_digest()
    (tmp_path / "rtl" / "a.py").write_text("x = 2\n")
    ev.code_digest.cache_clear()
    assert ev.code_digest() != one and one != before
    ev.code_digest.cache_clear()


def test_cache_round_trip_and_unreadable_entries(tmp_path):
    c = Cache(tmp_path / "points")
    assert c.get("k1") is None
    c.put("k1", {"metrics": {"a": 1}})
    assert c.get("k1")["metrics"] == {"a": 1}
    assert [p.name for p in (tmp_path / "points").iterdir()] == ["k1.json"]   # no temporary left
    c.path("k2").write_text("{trunc")
    assert c.get("k2") is None
    c.path("k3").write_text(json.dumps({"key": "other", "metrics": {}}))
    assert c.get("k3") is None


# ---------------------------------------------------------------------------- Pareto
def test_pareto_front_on_hand_data():
    S = (-1, +1, -1)                   # area down, speedup up, memory down
    assert pareto.dominates((1, 2, 1), (2, 1, 1), S)
    assert not pareto.dominates((1, 2, 1), (1, 2, 1), S)
    assert not pareto.dominates((1, 1, 1), (2, 2, 1), S)
    vals = [(1.0, 1.00, 10), (2.0, 1.10, 10), (2.0, 1.05, 10), (3.0, 1.10, 10), (1.5, 0.9, 5),
            (1.0, 1.00, 10)]
    assert pareto.front(vals, S) == [True, True, False, False, True, True]


def test_pareto_marks_per_workload_and_skips_timing_failures():
    def row(wl, a, s, m, timing="PASS"):
        return {"workload": wl, "n5_mm2": a, "speedup": s, "receive_bytes": m, "timing": timing}
    rows = [row("A", 1, 1.0, 8), row("A", 2, 1.2, 8), row("A", 3, 1.1, 8),
            row("A", 0.5, 2.0, 8, "FAIL"), row("B", 5, 0.5, 8), row("B", 6, 0.4, 8)]
    pareto.mark(rows)
    assert [r["pareto"] for r in rows] == [True, True, False, False, True, False]
    assert [r["n5_mm2"] for r in pareto.front_2d(rows[:4])] == [1, 2]


# ---------------------------------------------------------------------------- runs on Dask
def _read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_four_point_exploration_on_a_local_cluster_caches_and_resumes(tmp_path, monkeypatch, capsys):
    """Dask (2 local worker processes), the cache, a resumed run and the Pareto set: the
    first run loses one point (as if interrupted there), the second evaluates only that one
    through the command line and writes the results folder."""
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    spec = small_spec(lanes=[1, 4], tags=[2, 3])
    monkeypatch.setenv(FAIL_ENV, "sources=2 lanes=4 tags=3")
    first = explore.run(spec, evaluator=fast_evaluator, workers=2)
    assert first.evaluated == 3 and first.cached == 0
    assert first.failures and first.failures[0][0] == "sources=2 lanes=4 tags=3"
    assert len(list((tmp_path / "explore" / "points").glob("*.json"))) == 3
    hosts = {r["host"] for r in first.rows}
    assert hosts and all(r["wall_s"] is not None for r in first.rows)

    monkeypatch.delenv(FAIL_ENV)
    argv = ["explore", "--hub", "tiny", "--tokens", "16", "--axis", "sources=2",
            "--axis", "lanes=1,4", "--axis", "tags=2,3", "--workers", "2",
            "--evaluator", "test_explore:fast_evaluator"]
    assert main(argv) == 2                      # the first run's folder exists: no --force
    assert "--force" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0
    out = capsys.readouterr().out
    assert "4 points (1 evaluated, 3 cached)" in out
    calls = sorted(int(p.read_text()) for p in (tmp_path / "explore" / "synth").glob("*/calls"))
    assert calls == [1, 1, 1, 1]                # no point evaluated twice
    folder = tmp_path / "results" / f"explore-{spec.name}"
    rows = _read_csv(folder / "points.csv")
    assert [r["label"] for r in rows] == [f"sources=2 lanes={a} tags={b}" for a in (1, 4) for b in (2, 3)]
    assert [r["cached"] for r in rows] == ["True", "True", "True", "False"]
    # the Pareto flags are the front of the table's own numbers (timing FAILs excluded)
    ok = [r for r in rows if r["timing"] != "FAIL"]
    want = pareto.front([(float(r["n5_mm2"]), float(r["speedup"]), int(r["receive_bytes"])) for r in ok],
                        (-1, +1, -1))
    assert [r["pareto"] == "True" for r in ok] == want
    assert all(r["pareto"] == "False" for r in rows if r["timing"] == "FAIL")
    assert len(_read_csv(folder / "pareto.csv")) == sum(want) >= 1
    assert (folder / "pareto.png").stat().st_size > 0 and (folder / "pareto.svg").exists()
    run = json.loads((folder / "run.json").read_text())
    assert run["points"] == 4 and run["evaluated"] == 1 and run["cached"] == 3
    assert "test_explore:fast_evaluator" in (folder / "spec.yaml").read_text()
    # every speedup is the co-simulation's: positive, from a named baseline
    assert all(float(r["speedup"]) > 0 and r["best_baseline"] for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(asic_tools_missing() is not None, reason=asic_tools_missing() or "")
def test_four_point_exploration_with_real_synthesis(tmp_path, monkeypatch):
    """The default evaluator: four tiny hubs synthesized (2 local workers) and co-simulated."""
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    res = explore.run(small_spec(lanes=[1, 2], tags=[2, 3]), workers=2)
    assert res.evaluated == 4 and not res.failures
    assert all(r["n5_mm2"] > 0 and r["fo4"] > 0 and r["timing"] in ("PASS", "MARGINAL", "FAIL")
               for r in res.rows)
    by = {r["label"]: r for r in res.rows}
    # more lanes and more tags cost area
    assert by["sources=2 lanes=2 tags=2"]["gate_equivalents"] > by["sources=2 lanes=1 tags=2"]["gate_equivalents"]
    assert by["sources=2 lanes=1 tags=3"]["gate_equivalents"] > by["sources=2 lanes=1 tags=2"]["gate_equivalents"]
    assert res.pareto
    again = explore.run(small_spec(lanes=[1, 2], tags=[2, 3]), workers=2, force=True)
    assert again.evaluated == 0 and again.cached == 4


def test_missing_synthesis_tool_is_exit_3_before_any_point(tmp_path, monkeypatch, capsys):
    from moehub.synth import tools
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    monkeypatch.setattr(tools, "asic_tools_missing", lambda: "yosys not found (test)")
    assert main(["explore", "--hub", "tiny", "--tokens", "16", "--axis", "sources=2"]) == 3
    assert "yosys not found (test)" in capsys.readouterr().err
    assert not list((tmp_path / "explore" / "points").glob("*"))


def test_points_run_on_a_given_scheduler(tmp_path, monkeypatch, capsys):
    """--scheduler: the points go to a running scheduler (here a local one of 1 worker)."""
    from distributed import LocalCluster
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as lc:
        assert main(["explore", "--hub", "tiny", "--tokens", "16", "--axis", "sources=2",
                     "--axis", "lanes=1,2", "--scheduler", lc.scheduler_address,
                     "--evaluator", "test_explore:fast_evaluator"]) == 0
        pids = {n.process.pid for n in lc.workers.values()}
    assert "2 points (2 evaluated, 0 cached)" in capsys.readouterr().out
    recs = [json.loads(f.read_text()) for f in (tmp_path / "explore" / "points").glob("*.json")]
    assert len(recs) == 2 and {r["pid"] for r in recs} == pids     # run by its worker
