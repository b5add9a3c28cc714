"""Where outputs go (moehub.paths): --out, else $MOEHUB_BUILD, else ./build; bad values are
clear errors (exit 2 from the command line). Fast: nothing is generated."""
import os

import pytest

from moehub import paths
from moehub.paths import ENV, OutputDirError, build_root, check_dir, output_dir
from moehub.scripts.cli import main


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv(ENV, raising=False)
    return work


def test_default_is_build_in_the_working_directory(cwd, monkeypatch):
    assert build_root() == cwd / "build"
    assert output_dir("rtl", "tiny") == cwd / "build" / "rtl" / "tiny"
    monkeypatch.setenv(ENV, "")                       # empty counts as unset
    assert output_dir("sim") == cwd / "build" / "sim"
    # resolved when asked, not when imported: another directory, another build folder
    other = cwd / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    assert output_dir("rtl") == other / "build" / "rtl"
    assert not (cwd / "build").exists() and not (other / "build").exists()   # nothing created


def test_environment_variable_then_option(cwd, monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, str(tmp_path / "env"))
    assert output_dir("results") == tmp_path / "env" / "results"
    monkeypatch.setenv(ENV, "rel/b")                  # relative: to the working directory
    assert build_root() == cwd / "rel" / "b"
    assert output_dir("x", out=tmp_path / "opt") == tmp_path / "opt"   # the option wins
    assert output_dir("x", out="o2") == cwd / "o2"
    assert output_dir("x", out=None) == cwd / "rel" / "b" / "x"


def test_bad_values_name_the_variable_or_option_and_the_value(cwd, monkeypatch):
    f = cwd / "afile"
    f.write_text("")
    with pytest.raises(OutputDirError, match=r"--out = '.*afile': exists and is not a directory"):
        output_dir("rtl", out=f)
    monkeypatch.setenv(ENV, str(f / "sub"))
    with pytest.raises(OutputDirError, match=rf"{ENV} = '.*afile/sub': cannot be created, "
                                             r"'.*afile' is not a directory"):
        output_dir("rtl")
    monkeypatch.setenv(ENV, str(cwd))
    (cwd / "sim").write_text("")                     # the producer's sub-folder is a file
    with pytest.raises(OutputDirError, match=rf"{ENV} \(sub-folder 'sim'\)"):
        output_dir("sim")
    monkeypatch.delenv(ENV)
    (cwd / "build").write_text("")
    with pytest.raises(OutputDirError, match=rf"default build folder .*set {ENV}"):
        build_root()


def test_unwritable_folder(cwd, monkeypatch):
    ro = cwd / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(paths.os, "access",        # as root every folder is writable
                        lambda p, mode: False if os.fspath(p) == str(ro) else real_access(p, mode))
    with pytest.raises(OutputDirError, match=r"--out = '.*ro': directory is not writable"):
        check_dir(ro, "--out")
    with pytest.raises(OutputDirError, match=r"cannot be created, '.*ro' is not writable"):
        check_dir(ro / "a" / "b", ENV)


def test_command_line_exits_2_before_any_work(cwd, monkeypatch, capsys):
    f = cwd / "afile"
    f.write_text("")
    monkeypatch.setenv(ENV, str(f))
    assert main(["rtl", "--config", "tiny"]) == 2
    err = capsys.readouterr().err
    assert f"moehub: output folder: {ENV} = '{f}': exists and is not a directory" in err
    monkeypatch.delenv(ENV)
    assert main(["rtl", "--config", "tiny", "--out", "afile"]) == 2
    assert "--out = 'afile': exists and is not a directory" in capsys.readouterr().err
    assert main(["calibrate", "--out", "afile/x"]) == 2
    assert "--out = 'afile/x': cannot be created" in capsys.readouterr().err
    assert not (cwd / "build").exists()
