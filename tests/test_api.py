"""The documented Python API (``moehub.cosim.run``, ``moehub.synth.run``) and its example."""
import csv
import io
from pathlib import Path

import pytest

import moehub.cosim as cosim
import moehub.synth as synth
from moehub.spec.config import ConfigError
from moehub.synth.api import ASIC_COLUMNS, SynthResult


@pytest.fixture(scope="module")
def layer():
    return cosim.run(tokens=128, systems=("comet", "deepep"), seed=3)


def test_cosim_run_result_forms_agree(layer):
    assert layer.systems == ["comet", "deepep", "hub"]
    d = layer.to_dict()
    assert d["tokens_per_gpu"] == 128 and d["routing"]["seed"] == 3
    rows = list(csv.DictReader(io.StringIO(layer.to_csv())))
    assert [r["system"] for r in rows] == layer.systems
    for r in rows:
        assert float(r["layer_us"]) == pytest.approx(d["systems"][r["system"]]["layer_us"], abs=1e-3)
        assert float(r["hub_speedup"]) == pytest.approx(layer.speedup(r["system"]), abs=1e-4)
    assert layer.speedup("comet") == pytest.approx(layer.latency_us("comet") / layer.latency_us("hub"))
    assert "Comet" in layer.table() and "128 tokens/GPU" in layer.table()


def test_cosim_write_and_csv_file(layer, tmp_path):
    paths = layer.write(run="t", out=tmp_path, figure=False)
    assert paths["stats_csv"].read_text() == layer.to_csv(tmp_path / "x.csv") == (tmp_path / "x.csv").read_text()


def test_cosim_asks_for_a_system_that_did_not_run(layer):
    with pytest.raises(KeyError, match="'ideal' did not run"):
        layer.speedup("ideal")


@pytest.mark.parametrize("kw, key", [(dict(systems=("nosuch",)), "systems = 'nosuch'"),
                                     (dict(rtl_gpus=(8,)), "rtl_gpus = 8"),
                                     (dict(hub="nosuch"), "hub = 'nosuch'"),
                                     (dict(hub_order="random"), "hub_order = 'random'"),
                                     (dict(model="nosuch-model"), "nosuch-model")])
def test_cosim_bad_arguments_are_config_errors(kw, key):
    with pytest.raises(ConfigError, match=key.replace("(", r"\(")):
        cosim.run(tokens=128, **kw)


def _report() -> dict:
    block = {c: i + 1 for i, c in enumerate(ASIC_COLUMNS)} | {"fo4": 23.5, "path": {}}
    return {"modules": {"top": block, "pm": dict(block, cells=7)}}


def test_synth_result_forms(tmp_path):
    r = SynthResult("tiny", "asic", _report(), tmp_path)
    assert [row["block"] for row in r.rows()] == ["top", "pm"]
    assert r.rows()[1]["cells"] == 7 and r.to_dict() is r.report
    rows = list(csv.DictReader(io.StringIO(r.to_csv(tmp_path / "s.csv"))))
    assert rows[0]["fo4"] == "23.5" and (tmp_path / "s.csv").exists()
    lines = r.table().splitlines()
    assert lines[1].split() == ["block", *ASIC_COLUMNS] and lines[3].split()[:2] == ["pm", "7"]


def test_api_names_are_exported():
    assert cosim.run is cosim.api.run and synth.run is synth.api.run
    with pytest.raises(AttributeError):
        cosim.nosuch


def test_example_script_runs(capsys, tmp_path):
    from moehub.scripts import example_api
    assert example_api.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hub vs DeepEP" in out and "best baseline" in out
    assert (tmp_path / "example" / "stats.json").exists()
