"""Command-line plumbing shared by every ``moehub`` sub-command: the parser class, value
checks and the one usage error.

Every bad value is refused before any work starts, with exit code 2 and one line naming
the flag, the value and what is allowed: ``moehub demo: error: argument --tokens: '0':
must be an integer >= 1``; a bad configuration (an unknown name, a bad key) is a
``configuration error`` naming the flag, also exit 2. Values that can be checked alone are checked by argparse
``type=`` functions below; values whose range depends on a configuration (a GPU number,
a token count that must fit the hub's token ids) raise :class:`UsageError` from the
command once the configuration is loaded, still before the work.
"""
from __future__ import annotations

import argparse
import re

from . import progress

_ROLE = re.compile(r":[\w:.-]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``")


def plain(text: str) -> str:
    """reST markup of docstrings removed for the terminal: ``x`` -> x, :mod:`a.b` -> a.b."""
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


class UsageError(ValueError):
    """A bad command-line value found after parsing; ``moehub`` exits 2 with this line."""

    def __init__(self, flag: str, value, why: str):
        super().__init__(f"argument {flag}: {str(value)!r}: {why}")


class PlainHelpFormatter(argparse.HelpFormatter):
    """Help texts without reST markup (descriptions are often built from docstrings)."""

    def _format_text(self, text):
        return super()._format_text(plain(text))

    def _expand_help(self, action):
        return plain(super()._expand_help(action))


class Parser(argparse.ArgumentParser):
    """argparse with plain help and one-line errors (exit 2); sub-parsers inherit it."""

    def __init__(self, *args, **kw):
        kw.setdefault("formatter_class", PlainHelpFormatter)
        super().__init__(*args, **kw)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {plain(message)} (see '{self.prog} --help')\n")


def int_at_least(low: int, what: str = "an integer"):
    """argparse type: an integer >= ``low`` (tokens, GPUs: >= 1; a seed: >= 0)."""
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what} >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what} >= {low}")
        return value
    check.__name__ = f"int>={low}"
    return check


def float_above(low: float):
    """argparse type: a number > ``low`` (a clock period)."""
    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not value > low:
            raise argparse.ArgumentTypeError(f"{text!r}: must be a number > {low:g}")
        return value
    return check


def load_config_flag(flag: str, loader, value):
    """``loader(value)`` (a config loader) with a ConfigError's message prefixed by the flag,
    so that an unknown name or a bad key says which option it came from (the error keeps
    its class: a ConfigError stays one)."""
    try:
        return loader(value)
    except ValueError as e:
        raise type(e)(f"argument {flag}: {e}") from None


def name_list(known, what: str):
    """argparse type: comma-separated names, each one of ``known`` (a sequence, or a
    function returning one, called only when needed); returns a tuple."""
    def check(text: str) -> tuple:
        names = tuple(n for n in text.split(",") if n)
        allowed = known() if callable(known) else known
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {'unknown ' + what + ' ' + repr(bad[0]) if bad else 'empty'} "
                f"(known: {', '.join(allowed)})")
        return names
    check.__name__ = what
    return check


def verbosity_flags(p, default) -> None:
    """-q/--quiet and -v/--verbose on parser ``p`` (``default``: the level without them)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=progress.QUIET,
                   default=default, help="no progress on stderr (results still on stdout)")
    g.add_argument("-v", "--verbose", dest="verbosity", action="store_const",
                   const=progress.VERBOSE, default=default,
                   help="more progress (sub-steps, log paths) and tracebacks of failures")


def add_command_modules(sub, modules) -> None:
    """Each module's ``add_parser(sub)``, then -q/-v after every sub-command's name too."""
    for module in modules:
        module.add_parser(sub)
    for sp in sub.choices.values():
        verbosity_flags(sp, argparse.SUPPRESS)
