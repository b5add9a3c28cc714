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
"""
from __future__ import annotations

import os
from pathlib import Path

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
