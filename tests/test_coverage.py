"""Functional coverage (verif/coverage.py) and the boundary knobs (verif/knobs.py), without
a simulator: the bins of every config, the replay monitor on a hand-made log, merging and
the report command, and knob layers played against the reference model."""
import json
import random
from collections import Counter

import pytest

from moehub.spec.config import HUB_CONFIGS, load_hub_config
from moehub.spec.csr_map import CTRL_START, CsrMap
from moehub.verif import coverage
from moehub.verif.knobs import ENDINGS, INJECT, ORDERS, KnobFeeder, chunk_order, draw_knobs
from moehub.spec.model import HubModel, Packet


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_bins_of_every_config(name):
    """Bins are unique per group, every tile size has its flag bins, every port its stall
    bins; the total stays a readable ~200 (~350 with 8 lanes)."""
    cfg = load_hub_config(name)
    defs = coverage.bin_definitions(cfg)
    for group, (why, bins) in defs.items():
        assert why and len(bins) == len(set(bins)), group
    tiles = defs["tiles"][1]
    for t in coverage.tile_sizes(cfg):
        assert f"flag/tr{t}/first" in tiles and f"flag/tr{t}/last" in tiles
    assert len(defs["backpressure"][1]) == 2 * (cfg.lanes + 3)
    # (the lane-pair groups grow with lanes x lanes: 8 lanes add about 140 bins)
    assert 150 < sum(len(b) for _, b in defs.values()) < 300 + 3 * max(0, cfg.lanes ** 2 - 16)


class _FakeTB:
    """What the replay monitor reads of a HubTB: config, seed, register map, log, outputs."""

    def __init__(self, cfg):
        self.cfg, self.seed, self.map = cfg, 0, CsrMap(cfg)
        self.log, self.ctl_out, self.cycle = [], [], 0

    def csr(self, cycle, name, value, index=0):
        for addr, data in self.map.word_writes(name, value, index):
            self.log.append((cycle, len(self.log), "csr", (addr, data)))

    def packet(self, cycle, lane, pkt):
        self.log.append((cycle, len(self.log), "packet", (pkt, lane, cycle)))


def test_replay_bins_a_known_run(tmp_path, monkeypatch):
    """A hand-made run: a bad chunk index first, one row sent last chunk first over the
    lanes, every EOS in one later cycle; the bins it must hit are hit, and nothing falls
    outside the bins."""
    monkeypatch.setenv("MOEHUB_COVERAGE_DIR", str(tmp_path))
    cfg = load_hub_config("tiny")
    tb = _FakeTB(cfg)
    tb.log.append((0, 0, "reset", ()))
    tb.csr(1, "REGION_CAP", cfg.max_rows_per_expert, 0)
    tb.csr(2, "CTRL", CTRL_START)
    C, L = cfg.chunks_per_row, cfg.lanes
    tb.packet(3, 0, Packet(src=0, tag=0, chunk=C))                       # BAD_CHUNK, early
    for k, c in enumerate(range(C - 1, -1, -1)):
        tb.packet(4 + k // L, k % L, Packet(src=1, tag=2, expert=0, chunk=c, data=c))
    end = 4 + C // L
    for s in range(cfg.sources):
        tb.packet(end, s, Packet.eos(s, int(s == 1)))
    col = coverage.Collector(tb)
    col.sample()
    cov = col.total()
    hits = {f"{g}:{b}" for g, h in cov.hits.items() for b in h}
    want = {"chunk_order:last/first/lane0", "chunk_order:first/last/lane3", "drops:BAD_CHUNK/out/early",
            "eos:end/by_eos", "eos:eos/after_rows", "eos:eos/count0", "tiles:last/one/flagged",
            "tiles:last/empty", "layer_control:start/not_armed", "contention:lane0/x4"}
    assert want <= hits, want - hits
    assert not cov.unknown
    saved = json.loads(col.path.read_text())
    assert saved["config"] == "tiny" and saved["groups"]["drops"] == {"BAD_CHUNK/out/early": 1}


def test_merge_and_report(tmp_path, capsys):
    """Per-test files of a config merge by summing; the report prints a line per group, writes
    report.txt and <config>.json, and --min fails below the figure."""
    cfg = load_hub_config("tiny")
    folder = tmp_path / "sim" / "tiny-rtl" / "coverage"
    folder.mkdir(parents=True)
    for k, label in enumerate(["lane0/x1", "lane1/x2"]):
        c = coverage.Coverage(cfg)
        c.hit("contention", label)
        c.hit("contention", "lane0/x1")
        (folder / f"t{k}.json").write_text(json.dumps(dict(c.to_dict(), test=f"t{k}")))
    merged = coverage.merge_files(coverage.coverage_files([tmp_path]))["tiny"]
    assert merged.hits["contention"] == {"lane0/x1": 3, "lane1/x2": 1}
    assert coverage.main(["report", str(tmp_path), "--min", "50"]) == 1
    out = capsys.readouterr().out
    assert "coverage tiny: 2/" in out and "contention" in out
    s = json.loads((tmp_path / "coverage" / "tiny.json").read_text())
    assert s["groups"]["contention"]["hit"] == 2 and s["tests"] == ["t0", "t1"]
    assert (tmp_path / "coverage" / "report.txt").exists()


def _play(cfg, seed, max_packets):
    """A knob layer against the reference model as an ideal hub (every packet accepted at
    once, credits at once); returns (knobs, model, cycles)."""
    rng = random.Random(seed)
    k = draw_knobs(cfg, rng, max_packets)
    f = KnobFeeder(cfg, k, rng)
    m = HubModel(cfg)
    for x in range(cfg.experts):
        m.write("REGION_CAP", k.caps[x], x)
    m.write("TILE_ROWS_LOG2", k.tile_rows.bit_length() - 1)
    m.write("CTRL", CTRL_START)
    cyc = 0
    while not f.done() and cyc < 100_000:
        for lane, p in enumerate(f.offer()):
            if p is not None:
                fx = m.packet(p, lane, cyc)
                f.accepted(lane)
                if fx.credit:
                    f.credit(*fx.credit)
        cyc += 1
    m.end()
    return k, m, cyc


def test_knob_layers_complete_on_the_model():
    """Knob layers never hang the sources (every row sent, every tag back) and, where the
    layer ends by its counts, end it on the model; over 30 seeds per config every ending,
    injection, chunk order and drop reason a layer can cause shows up."""
    endings, injected, reasons = Counter(), Counter(), Counter()
    for name in HUB_CONFIGS:
        cfg = load_hub_config(name)
        for seed in range(30):
            k, m, cyc = _play(cfg, seed, 600)
            assert cyc < 100_000, f"{name} seed {seed}: the sources did not finish"
            endings[k.ending] += 1
            injected.update(kind for _, kind in k.injections)
            reasons.update(r.name for r, _ in m.drops)
            if k.ending == "eos":
                assert m.done, f"{name} seed {seed}: a layer ending by its counts did not end ({k.describe()})"
        for how in ORDERS:
            order = chunk_order(cfg, random.Random(1), how)
            assert sorted(order) == list(range(cfg.chunks_per_row)), how
    assert set(endings) == set(ENDINGS) and set(injected) == set(INJECT)
    assert {"BAD_SOURCE", "BAD_CHUNK", "BAD_EXPERT", "OVERFLOW", "POST_EOS", "DUPLICATE",
            "PROTOCOL"} <= set(reasons), reasons


def test_the_coverage_run_writes_its_summary(tmp_path, monkeypatch):
    """``moehub coverage``'s run (the simulator replaced): the tests it plays are every
    test of the config but the seeded random ones, with the run's knob settings; its
    summary holds the merged bins, the missed ones per group and the run record; a failing
    cocotb test writes no summary. Every shipped config has a coverage run."""
    import moehub.verif.cocotb_runner as runner
    from moehub.verif import coverage_run as cr
    assert set(cr.COVERAGE_RUNS) == set(HUB_CONFIGS)
    cfg, asked = load_hub_config("tiny"), {}

    def fake(config, tests, **kw):
        asked.update(kw, tests=tests)
        cov = coverage.Coverage(cfg)
        cov.hit("queues", "events/full")
        folder = tmp_path / "sim" / "tiny-cov" / "coverage"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "t-s3-0.json").write_text(json.dumps({**cov.to_dict(), "test": "t"}))
        return {"passed": len(tests) - asked.get("fail", 0), "failed": asked.get("fail", 0),
                "failures": [], "results": "r.xml", "sim": "icarus"}
    monkeypatch.setattr(runner, "run_hub_cocotb", fake)
    s = cr.run_coverage("tiny", build=tmp_path)
    assert asked["seeds"] == 30 and asked["settings"]["full_region"] and asked["seed"] == cr.BASE_SEED
    assert "test_random_clean" not in asked["tests"] and "test_random_knobs" in asked["tests"]
    assert s["hit"] == 1 and s["bins"] == sum(len(b) for _, b in coverage.bin_definitions(cfg).values())
    assert s["groups"]["queues"]["missed"] == ["credits/full"]
    on_disk = json.loads(cr.summary_path("tiny", tmp_path).read_text())
    assert on_disk["record"]["command"] and on_disk["knob_layers"] == 30 and on_disk == s
    cr.summary_path("tiny", tmp_path).unlink()
    asked["fail"] = 1
    with pytest.raises(cr.CoverageRunError, match="tiny: coverage run: 1 failing"):
        cr.run_coverage("tiny", build=tmp_path)
    assert not cr.summary_path("tiny", tmp_path).exists()
