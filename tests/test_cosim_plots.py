"""The co-simulation figures: files written, one colour per phase kind, the RTL hub's GPU
marked, the layer-time breakdown and the sweep normalisation (no Icarus: model hubs)."""
import numpy as np
import pytest

from moehub.cosim import plots as P
from moehub.cosim.experiment import load_configs, run_experiment
from moehub.cosim.layer import Phase, SystemResult
from moehub.cosim.systems import PHASES


@pytest.fixture(scope="module")
def er():
    s, m, w = load_configs("h100x8", "mixtral-8x7b", "default", 64)
    return run_experiment(s, m, w)


@pytest.fixture
def er_rtl(er):
    """The same result as if GPU 5's hub had run as RTL (the check record run_hub adds)."""
    hub = er.results["hub"]
    hub.extra["rtl"] = [{"gpu": 5, "rows": 1}]
    yield er
    del hub.extra["rtl"]


#: the kinds every phase of cosim/systems must fall in, whatever system it belongs to
EXPECTED_KINDS = {
    P.DISPATCH: {"dispatch", "all-to-all dispatch", "all-to-all global", "all-to-all node"},
    P.COMBINE: {"combine", "all-to-all combine", "all-to-all node back", "all-to-all global back"},
    P.GEMM: {"expert GEMM", "shared expert"},
    P.LAYOUT: {"layout", "scatter index", "permute", "sort by expert", "unsort", "recv pack",
               "unpermute", "gather pilots", "gather replicas", "local order"},
    P.SYNC: {"count exchange", "host sync", "notify", "combine wait", "index exchange",
             "weights exchange"},
    P.GATE: {"gate", "reduce", "unpermute+reduce", "scale+sum at pilot"},
    P.HUB: {"hub"},
}


def test_every_phase_of_every_system_has_its_kind_and_the_kind_one_colour():
    names = {n for phases in PHASES.values() for n in phases} | {"shared expert"}
    assert names == set().union(*EXPECTED_KINDS.values())
    for kind, members in EXPECTED_KINDS.items():
        for name in members:
            assert P.phase_kind(name) == kind, name
            assert P.phase_color(name) == P.KIND_COLORS[kind], name
    colors = [P.KIND_COLORS[k] for k in P.KINDS]
    assert len(set(colors)) == len(colors)            # kinds are told apart by colour
    assert P.phase_kind("no such phase") == P.OTHER


def test_the_timeline_draws_each_phase_in_its_kind_colour(er):
    fig = P.build_timeline(er)
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_hex
    drawn = {to_hex(c) for ax in fig.axes for col in ax.collections
             if isinstance(col, PolyCollection) for c in col.get_facecolors()}
    used = {P.phase_color(p.name).lower() for r in er.results.values() for p in r.phases}
    assert drawn == used
    P.plt.close(fig)


def test_timeline_writes_png_and_svg_with_micro_seconds(er, tmp_path):
    path = P.timeline_figure(er, tmp_path / "timeline.png")
    assert path == tmp_path / "timeline.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "timeline.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    fig = P.build_timeline(er)
    labels = [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()]
    assert labels and all("µs" in lab for lab in labels)
    assert not any("(us)" in lab for lab in labels)
    P.plt.close(fig)


def _texts(fig) -> list:
    out = [t.get_text() for t in fig.findobj(P.plt.Text)]
    return [t for t in out if t]


def test_the_rtl_hub_gpu_is_marked(er_rtl):
    assert P.rtl_gpus(er_rtl) == [5]
    assert 5 in P.shown_gpus(er_rtl, max_gpus=2)          # never left out of the panels
    fig = P.build_timeline(er_rtl, max_gpus=2)
    hub_ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("hub:"))
    ticks = {t.get_text(): t for t in hub_ax.get_yticklabels()}
    assert "GPU 5\nRTL hub" in ticks
    assert ticks["GPU 5\nRTL hub"].get_color() == P.RTL_COLOR
    assert sum("RTL hub" in t for t in _texts(fig)) >= 2   # hub panel, zoom title
    P.plt.close(fig)


def test_no_rtl_marking_without_an_rtl_gpu(er):
    assert P.rtl_gpus(er) == []
    fig = P.build_timeline(er)
    assert not any("RTL" in t for t in _texts(fig))
    P.plt.close(fig)


def test_critical_breakdown_gives_each_instant_to_one_kind():
    r = SystemResult("x", "x", gpu_end=np.array([70.0, 40.0]))
    for ph in [Phase(0, "control", "gate", 0, 5), Phase(0, "send", "dispatch", 5, 30),
               Phase(0, "gemm", "expert GEMM", 10, 50), Phase(0, "control", "host sync", 45, 55),
               Phase(0, "control", "reduce", 60, 70), Phase(1, "send", "dispatch", 0, 40)]:
        r.phases.append(ph)
    gpu, parts = P.critical_breakdown(r)
    assert gpu == 0
    want = {P.GATE: 15.0, P.DISPATCH: 5.0, P.GEMM: 40.0, P.SYNC: 5.0, P.IDLE: 5.0}
    assert {k: v for k, v in parts.items() if v} == pytest.approx(want)
    assert sum(parts.values()) == pytest.approx(r.latency_us)


def test_breakdown_of_every_system_sums_to_its_layer_time(er):
    for name, r in er.results.items():
        _, parts = P.critical_breakdown(r)
        assert sum(parts.values()) == pytest.approx(r.latency_us), name


def test_the_zoom_holds_the_hubs_first_tiles(er):
    gpu = 0
    flags = sorted(t for g, _, t in er.results["hub"].markers if g == gpu)
    end = P.hub_zoom_window(er, gpu)
    first = P.first_gemm_starts(er, gpu)
    assert end >= first["hub"] and end >= flags[min(8, len(flags)) - 1]
    assert end <= er.latency("hub")
    assert first["hub"] < min(t for n, t in first.items() if n not in ("hub", "ideal"))


def _rows():
    """Two points; at the second one comet beats the ideal (made up: the reference must
    be the ideal's latency, not the fastest one's)."""
    rows = []
    for x, ideal, comet in ((256, 100.0, 1.2), (1024, 400.0, 0.95)):
        for s, f in (("bulk", 1.5), ("comet", comet), ("hub", 1.1), ("ideal", 1.0)):
            rows.append({"tokens_per_gpu": x, "model": f"m{x}", "system": s,
                         "layer_us": ideal * f, "hub_speedup": f / 1.1,
                         "e2e_hub_speedup": 1 + (f / 1.1 - 1) / 2})
    return rows


def test_normalised_sweep_values_are_latency_over_ideal():
    rows = _rows()
    norm, label = P.normalise(rows, "tokens_per_gpu")
    assert label == P.IDEAL_LABEL
    ideal = {r["tokens_per_gpu"]: r["layer_us"] for r in rows if r["system"] == "ideal"}
    for r, n in zip(rows, norm):
        assert n["vs_ideal"] == pytest.approx(r["layer_us"] / ideal[r["tokens_per_gpu"]])
        assert "vs_ideal" not in r                         # the caller's rows stay as they were
    assert [n["vs_ideal"] for n in norm] == pytest.approx([1.5, 1.2, 1.1, 1.0,
                                                          1.5, 0.95, 1.1, 1.0])


def test_without_ideal_rows_the_fastest_system_is_the_reference():
    rows = [r for r in _rows() if r["system"] != "ideal"]
    norm, label = P.normalise(rows, "tokens_per_gpu")
    assert label == P.FASTEST_LABEL
    assert [n["vs_ideal"] for n in norm] == pytest.approx([1.5 / 1.1, 1.2 / 1.1, 1.0,
                                                          1.5 / 0.95, 1.0, 1.1 / 0.95])


def test_sweep_figures_write_png_and_svg(tmp_path):
    p = P.speedup_plot(_rows(), "tokens_per_gpu", tmp_path / "s.png", "t", "tokens per GPU")
    q = P.model_bar_plot(_rows(), tmp_path / "m.png", "t")
    for path in (p, q):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in path.with_suffix(".svg").read_text()


def test_sweep_lines_differ_in_marker_and_style():
    styles = {s: (P._style(s)["marker"], str(P._style(s)["ls"])) for s in P.SYSTEM_ORDER}
    assert len(set(styles.values())) == len(styles)
