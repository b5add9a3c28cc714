"""The package installed non-editable into a fresh venv behaves like the checkout.

The repository's source (without .venv/, build/, .git/) is ``pip install``-ed, not
editable, into a temporary venv (dependencies from PyPI or pip's cache); from a temporary
working directory the installed ``moehub`` generates the tiny hub's Verilog (config YAML,
Yosys), runs the cocotb demo on it (the simulator's Python imports the testbench from
site-packages) and, with ``MOEHUB_BUILD`` set, the calibration (cosim data files). Every
output must land under the working directory's ``build/`` or under ``MOEHUB_BUILD``, and
nothing may be written into the venv (site-packages/moehub included). The source is copied so that pip's
setuptools build (which writes ``build/lib``) never touches the checkout's build folder.
"""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".venv", "build", ".git", "*.egg-info", "__pycache__",
                              ".pytest_cache", "sim_build", "*.pyc")


def _files(root: Path) -> set:
    """Files and folders under ``root``, without byte-code caches."""
    return {p.relative_to(root) for p in root.rglob("*")
            if "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.mark.slow
def test_non_editable_install_writes_under_the_working_directory(tmp_path):
    t0 = time.monotonic()
    src, venv, work, elsewhere = (tmp_path / n for n in ("src", "venv", "work", "elsewhere"))
    try:
        shutil.copytree(REPO, src, ignore=SKIP)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        py = venv / "bin" / "python"
        pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              str(src)], capture_output=True, text=True, timeout=1800)
        assert pip.returncode == 0, pip.stdout + pip.stderr
        t_install = time.monotonic() - t0

        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "MOEHUB_BUILD", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        work.mkdir()

        def run(*args, **extra):
            p = subprocess.run(list(args), cwd=work, env={**env, **extra}, capture_output=True,
                               text=True, timeout=900)
            assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
            return p.stdout

        site = Path(run(str(py), "-c", "import moehub, os; print(os.path.dirname(moehub.__file__))")
                    .strip())
        assert site.name == "moehub" and site.parent.name == "site-packages"
        assert site.is_relative_to(venv)
        # package data: every config, the cosim data and the testplan were installed
        for rel in ("config/hub/tiny.yaml", "config/system/h100x8.yaml", "config/model/mixtral-8x7b.yaml",
                    "config/workload/default.yaml", "cosim/data/calibration_points.yaml",
                    "cosim/data/published.yaml", "verif/testplan.yaml", "paths.py"):
            assert (site / rel).is_file(), rel
        before = _files(venv)

        moehub = str(venv / "bin" / "moehub")
        out = run(moehub, "rtl", "--config", "tiny")
        assert str(work / "build" / "rtl" / "tiny" / "moehub.v") in out
        for f in ("moehub.v", "moehub.il", "csr_map.json", "moehub_csr.h"):
            assert (work / "build" / "rtl" / "tiny" / f).is_file(), f
        if shutil.which("iverilog"):
            out = run(moehub, "demo", "--config", "tiny", "--tokens", "4")
            assert "RTL and reference model agree" in out
            assert (work / "build" / "demo" / "tiny" / "summary.json").is_file()
            assert list((work / "build" / "sim" / "tiny-demo").glob("results-tb_demo-*.xml"))
        out = run(moehub, "calibrate", "--no-figure", MOEHUB_BUILD=str(elsewhere))
        assert (elsewhere / "calibrate" / "calibration.csv").is_file()
        assert not (work / "build" / "calibrate").exists()
        # nothing inside the venv, in particular not beside the installed package
        assert not (site / "build").exists() and not (site.parent / "build").exists()
        assert _files(venv) == before, sorted(map(str, _files(venv) ^ before))[:20]
        print(f"\ninstall {t_install:.0f} s, total {time.monotonic() - t0:.0f} s")
    finally:      # about 300 MB: do not keep it among pytest's last three temp folders
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)


def test_every_package_folder_is_in_pyproject():
    """A folder of the package with an ``__init__.py`` that pyproject's package discovery
    misses would be missing from a non-editable install (editable installs hide it); and
    nothing outside ``moehub/`` (the tests) may be installed as a package."""
    import tomllib

    from setuptools import find_packages
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    listed = set(find_packages(where=str(REPO), include=find["include"], exclude=find.get("exclude", ())))
    found = {".".join(p.parent.relative_to(REPO).parts)
             for p in (REPO / "moehub").rglob("__init__.py") if "__pycache__" not in p.parts}
    assert "moehub.spec" in found and "moehub.rtl.relay" in found
    assert found - listed == set(), f"package folders pyproject.toml does not find: {sorted(found - listed)}"
    assert listed <= found, f"installed as packages but not under moehub/: {sorted(listed - found)}"
