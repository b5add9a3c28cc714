"""The documentation site builds with no warning (``make docs``: Sphinx, MyST, Furo).

A broken cross-reference, a heading that skips a level, a malformed docstring in the API
reference or a guide left out of the table of contents is a warning, and ``-W`` turns it
into a failure here, as in ``make docs``. The test builds into a temporary folder with
Sphinx's ``dummy`` builder (every page read and every reference resolved, no HTML
written), so it costs the reading of the sources, not the theme; the build tests are
skipped where the ``docs`` extra is not installed. The other tests check what a build does
not: every guide listed, every results region closed, no commit or issue named.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: the build tests need the docs extra (make venv installs it); the other checks do not
needs_sphinx = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("sphinx", "myst_parser", "furo")),
    reason="the docs extra is not installed (pip install -e '.[docs]')")
# Sphinx 9 announces its next API changes to extensions (MyST) on every reference
quiet = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning", "ignore::DeprecationWarning")


def build(src: Path, out: Path) -> tuple[int, str]:
    """Run sphinx-build -W on ``src``; its exit status and the warnings it wrote."""
    from sphinx.cmd import build as sphinx_cmd

    log = out / "warnings.txt"
    rc = sphinx_cmd.build_main(["-W", "--keep-going", "-q", "-E", "-b", "dummy",
                                "-w", str(log), "-d", str(out / "doctrees"), str(src), str(out / "dummy")])
    return rc, log.read_text() if log.exists() else ""


@needs_sphinx
@quiet
def test_docs_build_without_warnings(tmp_path):
    rc, warnings = build(DOCS, tmp_path)
    assert rc == 0 and not warnings.strip(), f"sphinx-build -W failed:\n{warnings}"


@pytest.mark.slow
@needs_sphinx
@quiet
def test_a_broken_reference_fails_the_build(tmp_path):
    """The check itself: a guide linking to a section that does not exist fails it."""
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build"))
    (src / "conf.py").write_text((DOCS / "conf.py").read_text().replace(
        "ROOT = Path(__file__).resolve().parent.parent", f"ROOT = Path({str(ROOT)!r})"))
    guide = src / "hub.md"
    guide.write_text(guide.read_text() + "\nSee [the missing part](rtl.md#no-such-section).\n")
    rc, warnings = build(src, tmp_path / "out")
    assert rc != 0 and re.search(r"no-such-section", warnings), warnings


def test_every_guide_is_in_the_table_of_contents():
    """Each Markdown page of docs/ is listed by a toctree of index.md (an orphan page would
    be a warning too; this names it)."""
    index = (DOCS / "index.md").read_text()
    listed = set(re.findall(r"^([a-z0-9-]+)$", index, re.M))
    pages = {p.stem for p in DOCS.glob("*.md")} - {"index"}
    assert pages <= listed, f"pages not in index.md's toctree: {sorted(pages - listed)}"


def test_results_tables_are_in_marked_regions():
    """Every results region opened in the README and the guides is closed before the next
    opens, and its name is unique per file. Two kinds: ``moehub-table`` regions are
    rewritten by ``moehub report`` from records; ``moehub-results`` regions hold results
    that have no record and renderer yet (typed, to become ``moehub-table`` regions)."""
    marker = re.compile(r"^<!-- (/?)moehub-(table|results)(?:: ([a-z0-9-]+))? -->$")
    for path in [ROOT / "README.md", *DOCS.glob("*.md")]:
        names, open_ = [], None
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = marker.match(line)
            if not m:
                assert not (line.lstrip().startswith("<!--") and "moehub-" in line), \
                    f"{path.name}:{n}: malformed marker {line!r}"
                continue
            end, kind, name = m.groups()
            if end:
                assert open_ and open_[0] == kind and not name, f"{path.name}:{n}: {line!r} closes nothing"
                open_ = None
            else:
                assert not open_ and name, f"{path.name}:{n}: {line!r} inside another region or unnamed"
                open_ = (kind, name)
                names.append(name)
        assert open_ is None, f"{path.name}: region {open_[1]} not closed"
        assert len(names) == len(set(names)), f"{path.name}: a region name repeated: {names}"


#: a commit name (7 to 40 hex digits, with a letter and a digit) or an issue number
HISTORY = re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])"
                     r"|\b[Ii]ssues? #?\d+")


def history_references(text: str) -> list:
    return [m.group(0) for m in HISTORY.finditer(text)]


#: a region ``moehub report`` generates: its provenance line names the record's commit
GENERATED = re.compile(r"^<!-- moehub-table: .*?^<!-- /moehub-table -->$", re.M | re.S)


def prose(text: str) -> str:
    """``text`` without the generated regions (their provenance is data, not history)."""
    return GENERATED.sub("", text)


def test_the_docs_name_no_commit_and_no_issue():
    """The guides describe the design as it is; its history is in the commit messages."""
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.glob("*.md"),
             *(ROOT / "moehub").rglob("README.md")]
    found = {p.relative_to(ROOT).as_posix(): refs for p in pages
             if (refs := history_references(prose(p.read_text())))}
    assert not found, f"commit or issue references: {found}"


def test_the_history_pattern():
    # (the samples are put together here, so that this file names no commit or issue itself)
    rev, issue = "8a3" + "1299", "iss" + "ue 14"
    assert history_references(f"proven equal to {rev} ({issue})") == [rev, issue]
    assert history_references("1,000,000 rows, 0.0053 mm², page 1024, deadbeef") == []
    generated = f"<!-- moehub-table: headline -->\n*commit {rev}-dirty*\n<!-- /moehub-table -->"
    assert history_references(prose(f"a\n{generated}\nb")) == []
    assert history_references(prose(f"{generated}\nat {rev}")) == [rev]
