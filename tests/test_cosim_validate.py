"""moehub validate and moehub headline: the report is complete, cases are well formed."""
import csv

import numpy as np
import pytest

from moehub.cosim.validate import Case, load_cases, report, run_case
from moehub.spec.config import ConfigError


def test_every_published_case_is_complete_and_sourced():
    cases = load_cases()
    assert len(cases) >= 20
    assert len({c.id for c in cases}) == len(cases)
    for c in cases:
        assert c.source and c.hardware and c.what, c.id
        assert c.published > 0 and 0 < c.tolerance <= 0.5, c.id
    runs = {c.run for c in cases}
    assert {"deepep", "deepep_ll", "fused"} <= runs       # the systems users pick today


def test_bad_case_names_the_key_and_value():
    raw = dict(id="x", what="w", source="s", hardware="h", run="nope", system="h100x8",
               model="mixtral-8x7b", tokens=8, metric="layer_us", published=1.0, tolerance=0.1)
    with pytest.raises(ConfigError, match=r"published\[x\]\.run = 'nope'"):
        Case.from_dict(raw)
    with pytest.raises(ConfigError, match=r"published\[x\]\.colour = 1: unknown key"):
        Case.from_dict({**raw, "run": "deepep", "colour": 1})


def test_a_case_runs_and_the_report_says_model_published_and_ratio():
    c = next(c for c in load_cases() if c.id == "pplx-h100-ep8-128-dispatch")
    row = run_case(c)
    assert row.model > 0 and row.ratio == pytest.approx(row.model / c.published)
    text = report([row])
    assert c.id in text and f"{c.published:.1f}" in text and f"{row.ratio:.2f}" in text
    assert "validation cases within tolerance" in text


def test_validate_command_writes_csv_and_plot(tmp_path, capsys):
    from moehub.scripts.cli import main
    ids = "pplx-h100-ep8-128-dispatch,nccl-ep-ll-h100-8-combine"
    assert main(["validate", "--only", ids, "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "validation.csv")))
    assert sorted(r["id"] for r in rows) == sorted(ids.split(","))
    assert all(float(r["model"]) > 0 and r["source"] for r in rows)
    assert (tmp_path / "validation.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["validate", "--only", "no-such-case"]) == 2
    assert "no-such-case" in capsys.readouterr().err


def test_headline_names_the_best_baseline_and_says_why_the_hub_loses(tmp_path, capsys):
    from moehub.cosim.systems import BASELINES
    from moehub.scripts.cli import main
    assert main(["headline", "--systems", "h100x8", "--models", "mixtral-8x7b", "--tokens",
                 "64,256", "--out", str(tmp_path), "--no-figure"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "headline.csv")))
    assert len(rows) == 2
    for r in rows:
        base = {k[:-3]: float(v) for k, v in r.items() if k.endswith("_us") and
                k[:-3] in BASELINES}
        assert r["best_baseline"] == min(base, key=base.get)
        sp = float(r["speedup_layer"])
        assert sp == pytest.approx(float(r["best_us"]) / float(r["hub_us"]))
        assert (sp < 1.0) == bool(r["why_hub_loses"])
    assert "| h100x8 | mixtral-8x7b | 64 |" in (tmp_path / "headline.md").read_text()


# ---------------------------------------------------------------- low-latency libraries
def _ll_case(**kw):
    raw = dict(id="ll", what="w", source="s", hardware="h", run="deepep_ll", system="h100x8",
               model="deepseek-v3", unrestricted=True, tokens=32, metric="dispatch_us",
               published=100.0, tolerance=0.3)
    raw.update(kw)
    return Case.from_dict(raw)


def test_a_library_is_named_only_for_deepep_ll_and_must_be_known():
    with pytest.raises(ConfigError, match=r"published\[ll\]\.library = 'nope': must be one of"):
        _ll_case(library="nope")
    with pytest.raises(ConfigError, match=r"published\[ll\]\.library = 'pplx': only a deepep_ll"):
        _ll_case(library="pplx", run="deepep")
    assert _ll_case(library="pplx").library == "pplx"


def test_every_case_names_a_known_library_or_none():
    from moehub.cosim.systems.deepep_ll import LIBRARIES
    cases = load_cases()
    assert all(c.library in LIBRARIES for c in cases if c.library)
    # the wide-EP / decode cases this report must carry: 1..32 nodes, and one NVLink domain
    wide = [c for c in cases if c.run == "deepep_ll" and c.library and c.system != "h100x8"]
    assert len({(c.system, c.gpus) for c in wide}) >= 4
    assert any(c.system == "gb200-nvl72" and c.gpus >= 24 for c in cases)


def test_rdma_paths_route_same_node_peers_through_the_nic():
    """Pure RDMA inside a node (DeepEP at first release): the same-node flows use the NIC
    ports, the network latency and the NIC put efficiency; the remote flows are unchanged."""
    from cosim_helpers import layer
    from moehub.cosim.systems.deepep_ll import RdmaPaths
    L = layer("deepseek-v3", "h100x16-ib", tokens=4)
    V = RdmaPaths(L)
    assert V.path(0, 9) == L.path(0, 9)                  # remote: the layer's NIC path
    assert V.path(0, 1) == L.path(0, 9)[:1] + L.path(8, 1)[1:]    # same node: NIC too
    assert V.path(3, 3) == L.path(3, 3)
    assert V.latency(0, 1) == L.latency(0, 9) > L.latency(0, 1)
    assert V.put_cap(7168)(0, 1) == pytest.approx(L.put_cap(7168)(0, 9))
    net, flows = V.network("probe")               # the layer's builder, the view's paths ...
    net.inject(flows[0][1], 0.0, 1e6)
    curves = V.run_net(net)
    assert "probe" in L.traffic                   # ... recorded in the layer's own pass
    assert curves[flows[0][1]].end >= 1e6 / (L.sys.inter_bw_GBps * 1e3)


def test_pure_rdma_in_a_node_is_bound_by_the_nic_and_nvlink_is_not():
    """EP8 at 128 tokens: through the NIC the same-node rows take at least their bytes over
    one NIC; over NVLink the same kernel is several times faster."""
    from moehub.cosim.validate import case_layer, measure
    from moehub.cosim.systems import run_system
    from moehub.cosim.systems.deepep_ll import Variant
    times = {}
    for lib in ("deepep", "deepep-rdma"):
        c = _ll_case(library=lib, tokens=128)
        L = case_layer(c)
        times[lib] = measure(L, run_system("deepep_ll", L, module=Variant(lib)), c)
    L = case_layer(_ll_case(tokens=128))
    nic_bytes = sum(L.counts[0, d] for d in range(1, L.G)) * L.row_wire_sw
    assert times["deepep-rdma"] >= nic_bytes / (L.sys.inter_bw_GBps * 1e3)
    assert times["deepep-rdma"] > 1.8 * times["deepep"]


def test_pplx_pays_its_own_floor_across_nodes_and_deepep_does_not():
    """The per-call floor is the library's: across nodes pplx pays its measured 1-token
    IBGDA time, DeepEP the in-node floor; inside a node both pay the in-node floor."""
    from moehub.cosim.systems.deepep_ll import call_us, library
    from cosim_helpers import layer
    two = layer("deepseek-v3", "h100x16-ib", tokens=4)
    one = layer("deepseek-v3", "h100x8", tokens=4)
    sw = two.sys.software
    assert call_us(two, library("pplx")) == sw.ll_call_inter_us
    assert call_us(two, library("deepep")) == sw.ll_call_intra_us
    assert call_us(two, library("nccl-ep")) == sw.ll_call_intra_us
    assert call_us(one, library("pplx")) == call_us(one, library("deepep")) == sw.ll_call_intra_us
    c = {lib: run_case(_ll_case(library=lib, system="h100x16-ib", tokens=4)).model
         for lib in ("deepep", "pplx")}
    assert c["pplx"] - c["deepep"] == pytest.approx(sw.ll_call_inter_us - sw.ll_call_intra_us,
                                                    rel=0.1)


def test_slow_cases_run_only_when_asked(tmp_path, capsys):
    import yaml
    from moehub.scripts.cli import main
    fast = dict(id="fast", what="w", source="s", hardware="h", run="deepep_ll", library="pplx",
                system="h100x8", model="deepseek-v3", unrestricted=True, tokens=8,
                metric="dispatch_us", published=50.0, tolerance=0.3)
    slow = {**fast, "id": "wide", "slow": True}
    data = tmp_path / "cases.yaml"
    data.write_text(yaml.safe_dump({"cases": [fast, slow]}))
    assert main(["validate", "--data", str(data), "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "1 slow cases not run (--slow runs them): wide" in out
    assert [r["id"] for r in csv.DictReader(open(tmp_path / "a" / "validation.csv"))] == ["fast"]
    assert main(["validate", "--data", str(data), "--slow", "--out", str(tmp_path / "b")]) == 0
    ids = [r["id"] for r in csv.DictReader(open(tmp_path / "b" / "validation.csv"))]
    assert ids == ["fast", "wide"]


def test_a_cpu_proxy_posts_every_rdma_message_in_turn():
    """IBRC-style proxy: a source's last count signal leaves after the proxy has posted
    every row (put + signal) and one count per remote expert, ``ll_proxy_msg_us`` each;
    GPU-initiated pplx posts none through a proxy. At 1 token that is the whole difference."""
    from cosim_helpers import layer
    from moehub.cosim.systems.deepep_ll import library, nic_pairs, proxy_cost
    L = layer("deepseek-v3", "h100x16-ib", tokens=1)
    nic = nic_pairs(L, L)
    assert nic[0, 9] and not nic[0, 1] and not nic[0, 0]
    c = L.sys.software.ll_proxy_msg_us
    _, done = proxy_cost(L, library("pplx-ibrc"), nic, L.counts)
    expected = ((L.counts * nic).sum(axis=1) * 2 + L.E_local * nic.sum(axis=1)) * c
    assert done == pytest.approx(expected) and done.min() > 100 * c
    assert not proxy_cost(L, library("pplx"), nic, L.counts)[1].any()
    # the proxy's rate is shared by the flows that carry rows, not by every remote peer
    one = np.zeros_like(L.counts)
    one[0, 9] = 3
    cap, _ = proxy_cost(L, library("pplx-ibrc"), nic, one)
    assert cap(0, 9) == pytest.approx(L.row_wire_sw / (2 * c)) and cap(0, 1) == np.inf
    t = {lib: run_case(_ll_case(library=lib, system="h100x16-ib", tokens=1)).model
         for lib in ("pplx", "pplx-ibrc")}
    assert t["pplx-ibrc"] - t["pplx"] == pytest.approx(done.max(), rel=0.15)


def test_the_baseline_plays_the_systems_library_and_a_bad_name_is_named():
    """``software.ll_library`` picks the library the deepep_ll baseline plays (default
    deepep, as its name says; pplx pays its own measured floor across nodes); an unknown
    name is an error naming the key and the value."""
    import dataclasses
    from cosim_helpers import layer
    from moehub.cosim.systems.deepep_ll import call_us, run, system_library
    L = layer("deepseek-v3", "h100x16-ib", tokens=4)
    sw = dataclasses.asdict(L.sys.software)
    assert system_library(L).name == "deepep" and call_us(L) == sw["ll_call_intra_us"]
    P = layer("deepseek-v3", "h100x16-ib", tokens=4, software={**sw, "ll_library": "pplx"})
    assert system_library(P).name == "pplx" and call_us(P) == sw["ll_call_inter_us"]
    bad = layer("deepseek-v3", "h100x16-ib", tokens=4, software={**sw, "ll_library": "nope"})
    with pytest.raises(ConfigError, match=r"software\.ll_library = 'nope': unknown"):
        run(bad)
