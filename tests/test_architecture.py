"""The package's shape: the hub's contract at the bottom, the command line on top.

Every ``import`` of the package (module level and inside functions alike: an import
hidden in a function is still a dependency) is read with ``ast``. The layers, bottom up:

* ground -- ``moehub/*.py``: paths, progress, run records, argument checks, the Dask
  cluster; they import only each other;
* ``spec/`` -- the hub's contract (config schema, formats, registers, timing, reference
  model, layer program): pure Python, no Amaranth, nothing of the project's folders;
* ``rtl/`` (Amaranth), then ``synth/``, ``verif/``, ``cosim/``, ``explore/``, and
  ``scripts/`` (the command line), each importing only layers below it or itself.

No module may import one of a higher layer, and the module graph has no cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "moehub"
#: the layers, bottom up; "" is the ground (modules directly in moehub/)
LAYERS = ["", "spec", "rtl", "synth", "verif", "cosim", "explore", "scripts"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    return {module_name(p): p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts}


def imports(path: Path, known: dict) -> set:
    """The package's modules that ``path`` imports (anywhere in it)."""
    here = module_name(path).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = (here[:len(here) - n.level + 1] if n.level else [])
            mod = ".".join(base + ([n.module] if n.module else []))
            # ``from pkg import mod`` depends on pkg.mod; ``from pkg import name`` on pkg
            names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in n.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("moehub"):
                out.add(name)
    out.discard(module_name(path))
    return out


def layer(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PKG / parts[1]).is_dir()) else ""


def graph() -> dict:
    known = modules()
    return {m: imports(p, known) for m, p in known.items()}


def upward_imports(g: dict) -> list:
    bad = []
    for m, targets in g.items():
        for t in targets:
            if t == "moehub":             # the package's __init__ (its version)
                continue
            if LAYERS.index(layer(t)) > LAYERS.index(layer(m)):
                bad.append(f"{m} -> {t}")
    return sorted(bad)


def cycles(g: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_folder_is_a_layer():
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS), f"package folders without a layer: {folders - set(LAYERS)}"


def test_no_upward_import():
    assert upward_imports(graph()) == []


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_spec_imports_no_amaranth_and_no_other_folder():
    for p in (PKG / "spec").glob("*.py"):
        tree = ast.parse(p.read_text())
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
                assert not any(x.split(".")[0] == "amaranth" for x in names), f"{p.name} imports Amaranth"
    g = graph()
    for m, targets in g.items():
        if layer(m) == "spec":
            others = {t for t in targets if layer(t) != "spec" and t != "moehub"}
            assert not others, f"{m} imports {others}"


def test_the_checks_catch_what_they_look_for():
    """The checker on planted graphs: an upward arrow and a cycle are reported."""
    g = {"moehub.rtl.hub": {"moehub.cosim.layer"}, "moehub.cosim.layer": {"moehub.rtl.hub"}}
    assert upward_imports(g) == ["moehub.rtl.hub -> moehub.cosim.layer"]
    assert cycles(g) == [["moehub.cosim.layer", "moehub.rtl.hub"]]
    # and the reader finds a function-level relative import
    known = modules()
    assert "moehub.rtl.hub" in imports(PKG / "synth" / "verilog.py", known) or \
        any(t.startswith("moehub.rtl") for t in imports(PKG / "synth" / "verilog.py", known))
