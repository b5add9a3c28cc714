"""Sphinx configuration of the moehub documentation (``make docs``).

The guides are MyST Markdown; the API reference is generated from the package's docstrings
by autodoc, so the package must import (``make venv`` installs it editable). ``make docs``
builds with ``-W --keep-going``: a broken cross-reference or a malformed docstring is an
error, not a warning.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import moehub  # noqa: E402  (after the path: the checkout's package, not another install)

project = "moehub"
author = "the moehub developers"
copyright = "the moehub developers"
release = moehub.__version__ if hasattr(moehub, "__version__") else "0.1.0"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# MyST: ``{doc}`` and ``{ref}`` roles, heading anchors for ``[text](page.md#section)``
# links (checked: a missing anchor is a warning, hence an error under -W), ``$...$`` not
# treated as math (the guides write shell variables such as ``$MOEHUB_BUILD``).
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4

# autodoc: members in source order, the signature's type hints in the description
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True

html_theme = "furo"
html_title = "moehub"


# ---- the command-line reference, generated from the parser itself --------------------
from docutils import nodes  # noqa: E402
from docutils.parsers.rst import Directive  # noqa: E402


class MoehubCli(Directive):
    """``.. moehub-cli::`` -- one rubric and the ``--help`` text per ``moehub`` command.

    Taken from ``moehub.scripts.cli.build_parser()`` when the docs are built, so the
    reference cannot drift from the options the command accepts.
    """

    has_content = False

    def run(self):
        import argparse
        import os

        os.environ["COLUMNS"] = "92"      # argparse wraps to this width
        from moehub.scripts.cli import build_parser

        def commands(parser, prefix):
            """``(name, parser)`` of every command under ``parser``, nested ones included."""
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for name, cmd in action.choices.items():
                        yield f"{prefix} {name}", cmd
                        yield from commands(cmd, f"{prefix} {name}")

        parser = build_parser()
        out = [nodes.literal_block(text=parser.format_help())]
        for name, cmd in commands(parser, "moehub"):
            out.append(nodes.rubric(text=name))
            out.append(nodes.literal_block(text=cmd.format_help()))
        return out


def setup(app):
    app.add_directive("moehub-cli", MoehubCli)
    return {"parallel_read_safe": True}
