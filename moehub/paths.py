"""Where generated files go: one rule for every command (pure Python, no Amaranth).

The *build folder* holds everything the kit generates (Verilog, simulation builds, waves,
synthesis runs, co-simulation results) in one sub-folder per producer (``rtl/``, ``sim/``,
``player/``, ``demo/``, ``synth/``, ``results/``, ``calibrate/``). It is, in order:

1. the command's ``--out`` option, where it has one (then it names that command's own
   output folder, not the build folder);
2. the environment variable ``MOEHUB_BUILD``;
3. ``build/`` in the current working directory.

It is never derived from where the package is installed, so an installed ``moehub``
(editable or not) writes into the folder it is run from. The rule is applied when a
folder is needed, not at import time, so a test may set the variable or change directory.
A folder that exists but is not a directory, or cannot be written (or created), is an
:class:`OutputDirError` naming the option or variable and its value; the ``moehub``
command reports it and exits with 2, like a configuration error.

A *results folder* (a co-simulation run, a sweep, a demo) is written whole or not at
all: :func:`writing` hands out a hidden temporary sibling, adds ``run.json``
(:mod:`moehub.runinfo`) and renames it into place when the work succeeded, and removes it
on any error or Ctrl-C. An existing folder of the same name is replaced only with
``force`` (``--force``); :func:`claim` checks that before the (long) work starts.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Iterator

#: environment variable that moves the build folder
ENV = "MOEHUB_BUILD"
#: name of the default build folder, in the current working directory
DEFAULT = "build"
#: how help texts name the build folder
HELP = f"${ENV} or ./{DEFAULT}"


class OutputDirError(ValueError):
    """An output folder that cannot be used; the message names its option or variable."""


def check_dir(path: str | os.PathLike, source: str) -> Path:
    """``path`` made absolute, if it is a writable directory or can be created as one.

    ``source`` names where the value came from (``--out``, ``MOEHUB_BUILD``) for the
    message of the :class:`OutputDirError` raised otherwise. Nothing is created.
    """
    value = os.fspath(path)
    p = Path(value).expanduser().absolute()
    where = f"{source} = {value!r}"
    if p.exists():
        if not p.is_dir():
            raise OutputDirError(f"{where}: exists and is not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise OutputDirError(f"{where}: directory is not writable")
        return p
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputDirError(f"{where}: cannot be created, {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputDirError(f"{where}: cannot be created, {str(parent)!r} is not writable")
    return p


def _root() -> tuple[Path, str]:
    value = os.environ.get(ENV)
    if value:
        return Path(value), ENV
    return (Path.cwd() / DEFAULT, f"the default build folder (./{DEFAULT} in the working "
                                 f"directory; set {ENV} to write elsewhere)")


def build_root() -> Path:
    """The build folder now: ``$MOEHUB_BUILD`` if set and not empty, else ``./build``."""
    return check_dir(*_root())


def output_dir(*parts: str, out: str | os.PathLike | None = None, option: str = "--out") -> Path:
    """A producer's output folder: ``out`` if given (checked, named ``option`` in errors),
    else ``build_root() / parts`` (both checked). Absolute; not created."""
    if out is not None and os.fspath(out) != "":
        return check_dir(out, option)
    root, source = _root()
    check_dir(root, source)
    if not parts:
        return root.expanduser().absolute()
    sub = root.joinpath(*parts)
    return check_dir(sub, f"{source} (sub-folder {Path(*parts).as_posix()!r})")


class OutputExistsError(OutputDirError):
    """A results folder that already exists: refused without ``--force``."""


def _previous_run(p: Path) -> str:
    try:
        rec = json.loads((p / "run.json").read_text())
        return f" (written by '{rec['command']}', started {rec['started']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def claim(path: str | os.PathLike, force: bool = False, source: str = "results folder") -> Path:
    """``path`` made absolute, if a results folder may be written there: its parent usable
    (:func:`check_dir`), and no folder of that name unless ``force``. Call it before the
    work, so that a run is never lost at the end; nothing is created."""
    p = check_dir(path, source)
    if p.exists() and not force:
        raise OutputExistsError(f"{source} {str(p)!r} exists{_previous_run(p)}; pass --force "
                                "to replace it, or choose another name (--run) or --out")
    return p


@contextlib.contextmanager
def writing(path: str | os.PathLike, force: bool = False, record: bool = True,
            **extra) -> Iterator[Path]:
    """``with writing(folder, force) as tmp:`` write the results into ``tmp``; when the block
    ends without an error, ``run.json`` is added (unless ``record`` is False; ``extra`` keys
    go into it) and ``tmp`` is renamed to ``folder`` (an existing one is replaced only with
    ``force``). On an error or an interruption ``tmp`` is removed and ``folder`` untouched,
    so a results folder is always complete."""
    final = claim(path, force)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if record:
            from . import runinfo
            (tmp / "run.json").write_text(json.dumps(runinfo.record(results=str(final), **extra),
                                                     indent=1) + "\n")
        _publish(tmp, final, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _publish(tmp: Path, final: Path, force: bool) -> None:
    """Rename ``tmp`` to ``final``; an old ``final`` (``force``) is moved aside first and
    removed after, so there is no moment without a complete folder of that name."""
    if final.exists():
        claim(final, force)                  # appeared while we worked: refuse again
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
