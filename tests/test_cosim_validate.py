"""moehub validate and moehub headline: the report is complete, cases are well formed."""
import csv

import pytest

from moehub.cosim.validate import Case, load_cases, report, run_case
from moehub.config.schema import ConfigError


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
    from moehub.scripts.cli import main
    assert main(["headline", "--systems", "h100x8", "--models", "mixtral-8x7b", "--tokens",
                 "64,256", "--out", str(tmp_path), "--no-figure"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "headline.csv")))
    assert len(rows) == 2
    for r in rows:
        base = {k[:-3]: float(v) for k, v in r.items() if k.endswith("_us") and
                k[:-3] in ("bulk", "comet", "deepep", "deepep_ll", "fused")}
        assert r["best_baseline"] == min(base, key=base.get)
        sp = float(r["speedup_layer"])
        assert sp == pytest.approx(float(r["best_us"]) / float(r["hub_us"]))
        assert (sp < 1.0) == bool(r["why_hub_loses"])
    assert "| h100x8 | mixtral-8x7b | 64 |" in (tmp_path / "headline.md").read_text()
