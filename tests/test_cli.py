"""The ``moehub`` command line: rtl writes Verilog and the CSR map; every bad value is refused
up front with exit 2 and one line naming the flag and the value; results folders are named
by what changes the result, written whole with run.json, replaced only with --force;
Ctrl-C is exit 130 and one line; help shows no reST markup."""
import json
import re

import pytest

from moehub.spec.config import load_hub_config
from moehub.cosim import cli as cosim_cli
from moehub.spec.csr_map import CsrMap
from moehub.argcheck import Parser
from moehub.scripts.cli import build_parser, main
from moehub.scripts.demo import token_limit


@pytest.fixture
def build(tmp_path, monkeypatch):
    """A fresh build folder, and no simulation may start (a test that wants one says so)."""
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))

    def no_work(*a, **k):
        raise AssertionError("the simulation started although the input is bad")
    monkeypatch.setattr(cosim_cli, "run_experiment", no_work)
    import moehub.verif.cocotb_runner as runner
    monkeypatch.setattr(runner, "run_hub_cocotb", no_work)
    return tmp_path


def test_rtl_writes_verilog_and_csr_map(tmp_path, capsys):
    assert main(["rtl", "--config", "tiny", "--out", str(tmp_path)]) == 0
    v = (tmp_path / "moehub.v").read_text()
    assert "module moehub(" in v and "i__0__payload" in v and "always @*" not in v
    exported = json.loads((tmp_path / "csr_map.json").read_text())
    cmap = CsrMap(load_hub_config("tiny"))
    assert exported["size_words"] == cmap.size_words
    assert "MOEHUB_CTRL" in (tmp_path / "moehub_csr.h").read_text()
    assert "tiny:" in capsys.readouterr().out


@pytest.mark.slow
def test_rtl_writes_the_relay_hub_with_nodes(tmp_path, capsys):
    """``--nodes N``: the relay hub (protocol v3) of N nodes of the config's GPUs, its relay
    ports in the Verilog and its relay registers in the CSR map (slow: a minute of Yosys)."""
    assert main(["rtl", "--config", "tiny", "--nodes", "2", "--out", str(tmp_path)]) == 0
    v = (tmp_path / "moehub.v").read_text()
    assert all(p in v for p in ("fwd_out__valid", "pstage_rd__valid", "pcredit__payload", "reduced__valid"))
    header = (tmp_path / "moehub_csr.h").read_text()
    assert "MOEHUB_PARTIAL_STAGE_BASE_OFFSET" in header and "MOEHUB_NODE_ID_OFFSET" in header
    assert json.loads((tmp_path / "config.json").read_text())["relay"] is True
    assert "tiny_nodes-2:" in capsys.readouterr().out


def test_bad_config_is_a_clear_error(capsys):
    assert main(["rtl", "--config", "no-such-hub"]) == 2
    err = capsys.readouterr().err
    assert "hub config 'no-such-hub' not found" in err and "tiny" in err


BAD = [  # argv, the flag and value the message must name, more words it must contain
    (["demo", "--tokens", "0"], "--tokens", "'0'", ">= 1"),
    (["demo", "--tokens", "-3"], "--tokens", "'-3'", ">= 1"),
    (["demo", "--config", "tiny", "--tokens", "300"], "--tokens", "'300'", "1..85"),
    (["demo", "--config", "tiny", "--tokens", "86"], "--tokens", "'86'", "1..85"),
    (["demo", "--seed", "-1"], "--seed", "'-1'", ">= 0"),
    (["demo", "--config", "nosuch"], "--config", "'nosuch'", "b200-nvlink5, deepseek-v3-8gpu, mixtral-8gpu, nvl72, tiny"),
    (["cosim", "--rtl-gpus", "99"], "--rtl-gpus", "'99'", "0..7"),
    (["cosim", "--rtl-gpus", "0,x"], "--rtl-gpus", "'0,x'", "'all'"),
    (["cosim", "--gpus", "16", "--rtl-gpus", "16"], "--rtl-gpus", "'16'", "0..15"),
    (["cosim", "--gpus", "0"], "--gpus", "'0'", ">= 1"),
    (["cosim", "--tokens", "0"], "--tokens", "'0'", ">= 1"),
    (["cosim", "--seed", "-1"], "--seed", "'-1'", ">= 0"),
    (["cosim", "--hub", "nosuch"], "--hub", "'nosuch'", "model, reference, rtl"),
    (["cosim", "--systems", "bulk,nosuch"], "--systems", "'nosuch'", "comet, deepep"),
    (["cosim", "--model", "nosuch"], "--model", "'nosuch'", "mixtral-8x7b"),
    (["cosim", "--system", "nosuch"], "--system", "'nosuch'", "h100x8"),
    (["cosim", "--workload", "nosuch"], "--workload", "'nosuch'", "default"),
    (["sweep", "tokens", "--values", "64,x"], "--values", "'64,x'", ">= 1"),
    (["sweep", "gpus", "--rtl-gpus", "9"], "--rtl-gpus", "'9'", "0..0"),
    (["synth", "--config", "tiny", "--data-bits", "x"], "--data-bits", "'x'", "'chunk'"),
    (["synth", "--config", "tiny", "--clock-ns", "0"], "--clock-ns", "'0'", "> 0"),
    (["synth", "--config", "nosuch"], "--config", "'nosuch'", "tiny"),
    (["rtl", "--config", "tiny", "--config", "nosuch"], "--config", "'nosuch'", "tiny"),
    (["rtl", "--config", "tiny", "--nodes", "1"], "--nodes", "'1'", ">= 2"),
    (["coverage", "--config", "tiny", "--config", "nosuch"], "--config", "'nosuch'", "tiny"),
    (["coverage", "--config", "tests/data/tiny-counts.yaml"], "--config",
     "'tests/data/tiny-counts.yaml'", "deepseek-v3-8gpu, b200-nvlink5"),
]


@pytest.mark.parametrize("argv,flag,value,allowed", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_values_are_refused_up_front(build, capsys, argv, flag, value, allowed):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"argument {flag}: " in err and value in err and allowed in err, err
    assert not (build / "build" / "rtl").exists()            # nothing was generated


def test_demo_token_limit_is_where_ids_or_regions_run_out():
    """token ids wrap at token_bits; sources x tokens rows may land on one expert."""
    limits = {n: token_limit(load_hub_config(n)) for n in ("tiny", "mixtral-8gpu",
                                                            "deepseek-v3-8gpu")}
    assert limits == {"tiny": 85, "mixtral-8gpu": 4096, "deepseek-v3-8gpu": 512}


def test_unusable_output_folder_stops_before_the_simulation(build, capsys):
    for argv in (["cosim", "--out", "/dev/null/x"], ["demo", "--out", "/dev/null/x"],
                 ["sweep", "tokens", "--out", "/dev/null/x"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--out = '/dev/null/x': cannot be created" in err and len(err.splitlines()) == 1


def test_version(capsys):
    assert main(["--version"]) == 0
    assert re.match(r"moehub \d+\.\d+\.\d+( \(git \S+\))?$", capsys.readouterr().out.strip())


def test_help_has_no_rest_markup(capsys):
    p = build_parser()
    texts = [p.format_help()] + [sp.format_help() for sp in
                                 p._subparsers._group_actions[0].choices.values()]
    for text in texts:
        assert "``" not in text and not re.search(r":(mod|func|class|data):`", text), text
    assert "Exit codes: 0 success" in texts[0] and "130 interrupted" in texts[0]
    doc = Parser(prog="x", description="The ``moehub`` command; see :mod:`moehub.paths` and "
                 ":func:`~moehub.paths.claim`.").format_help()
    assert "The moehub command; see moehub.paths and moehub.paths.claim." in doc


def _cosim(out, *extra):
    return ["cosim", "--tokens", "16", "--systems", "bulk", "--no-figure", "--out", str(out),
            *extra]


def test_results_folder_is_kept_without_force_and_has_run_json(tmp_path, capsys):
    assert main(_cosim(tmp_path)) == 0
    folder = tmp_path / "mixtral-8x7b_h100x8_default_t16_sys-bulk"
    rec = json.loads((folder / "run.json").read_text())
    assert rec["command"] == "moehub " + " ".join(_cosim(tmp_path))
    for key in ("moehub_version", "git", "python", "amaranth", "numpy", "started", "wall_s",
                "cpu_s"):
        assert key in rec, key
    assert rec["cpu_s"] > 0 and rec["wall_s"] > 0
    layer_us = json.loads((folder / "stats.json").read_text())["systems"]["hub"]["layer_us"]
    capsys.readouterr()
    assert main(_cosim(tmp_path)) == 2                        # same name: refused, kept
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and len(err.splitlines()) == 1
    assert json.loads((folder / "run.json").read_text()) == rec
    assert main(_cosim(tmp_path, "--force")) == 0
    assert json.loads((folder / "run.json").read_text())["argv"][-1] == "--force"
    assert json.loads((folder / "stats.json").read_text())["systems"]["hub"]["layer_us"] == layer_us
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]   # no temporaries


def _name(*argv):
    a = build_parser().parse_args(["cosim", *argv])
    s, m, w = cosim_cli._load(a, a.tokens, a.gpus)
    return cosim_cli.run_name(a, s, m, w)


def test_run_names_differ_by_everything_that_changes_the_result():
    base = _name()
    assert base == "mixtral-8x7b_h100x8_default_t4096"
    assert _name("--seed", "1") == base                      # the workload's own seed
    assert _name("--gpus", "8") == base                      # the system's own GPU count
    variants = {
        ("--seed", "5"): "_seed5", ("--systems", "bulk,comet"): "_sys-bulk+comet",
        ("--rtl-gpus", "0"): "_rtl0", ("--rtl-gpus", "3,0"): "_rtl0+3",
        ("--rtl-gpus", "all"): "_rtl-all", ("--hub", "reference"): "_hub-reference",
        ("--hub-order", "expert"): "_hub-expert-order", ("--tokens", "128"): "_t128",
        ("--gpus", "16"): "-g16", ("--dispatch-dtype", "fp8"): "_dispatch-fp8",
        ("--workload", "skewed-mmlu"): "_skewed-mmlu",
    }
    names = {v: _name(*v) for v in variants}
    for v, part in variants.items():
        assert part in names[v], (v, names[v])
    assert len(set(names.values()) | {base}) == len(variants) + 1
    assert _name("--run", "mine") == "mine"


def test_interrupt_is_exit_130_and_one_line(tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(cosim_cli, "run_experiment", interrupted)
    assert main(_cosim(tmp_path)) == 130
    assert capsys.readouterr().err == "moehub: interrupted\n"
    import moehub.verif.cocotb_runner as runner
    monkeypatch.setattr(runner, "run_hub_cocotb", interrupted)
    assert main(["demo", "--config", "tiny", "--tokens", "2", "--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "moehub: interrupted"
    assert list(tmp_path.iterdir()) == []                     # no half-written results


def test_failed_run_is_exit_1_and_one_line(tmp_path, capsys, monkeypatch):
    def fails(*a, **k):
        raise RuntimeError("the player wrote no log")
    monkeypatch.setattr(cosim_cli, "run_experiment", fails)
    assert main(_cosim(tmp_path)) == 1
    assert capsys.readouterr().err == "moehub cosim: failed: the player wrote no log\n"
    assert list(tmp_path.iterdir()) == []


def test_quiet_and_verbose(tmp_path, capsys):
    assert main(["-q", *_cosim(tmp_path / "q")]) == 0
    out = capsys.readouterr()
    assert out.err == "" and "Bulk all-to-all" in out.out
    assert main([*_cosim(tmp_path / "n")]) == 0
    err = capsys.readouterr().err
    assert "cosim mixtral-8x7b on h100x8, 16 tokens/GPU: done in" in err
    assert main([*_cosim(tmp_path / "v"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_demo_runs_the_rtl_and_prints_where_the_waves_are(tmp_path, capsys, monkeypatch):
    """A real (short) demo on tiny: results folder, run.json, summary, FST path."""
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))
    assert main(["demo", "--config", "tiny", "--tokens", "3", "--waves"]) == 0
    cap = capsys.readouterr()
    folder = tmp_path / "build" / "demo" / "tiny_t3"
    assert json.loads((folder / "summary.json").read_text())["tokens_per_source"] == 3
    assert json.loads((folder / "run.json").read_text())["tokens"] == 3
    fst = folder / "waves.fst"
    assert f"waveform: {fst}" in cap.out and fst.stat().st_size > 0
    assert "demo tiny, 3 tokens/GPU: simulate: done in" in cap.err
