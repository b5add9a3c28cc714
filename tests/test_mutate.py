"""The mutation tool itself (moehub.verif.mutate): deterministic enumeration, every mutant
exactly one AST change, the source restored byte for byte, and on a tiny Amaranth snippet
a real bug killed by a tiny test while an equivalent mutant survives. Fast (about 15 s)."""
from __future__ import annotations

import ast
import hashlib
import json
import textwrap
from pathlib import Path

import pytest

from moehub.verif import mutate

SNIPPET = textwrap.dedent('''\
    from amaranth import Module, Mux, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out


    class Snippet(wiring.Component):
        a: In(4)
        small: Out(1)
        valid: Out(1)
        count: Out(4)

        def elaborate(self, platform):
            m = Module()
            n = Signal(4, name="n")
            m.d.comb += [self.small.eq(self.a < 8), self.valid.eq(self.a < 16)]
            with m.If(self.a == 3):
                m.d.sync += n.eq(n + 1)
            m.d.comb += self.count.eq(Mux(self.small, n, ~n) | self.a)
            return m
    ''')

TEST = textwrap.dedent('''\
    from amaranth.sim import Simulator
    from snip.snippet import Snippet


    def test_small_and_valid():
        dut = Snippet()

        async def bench(ctx):
            for a in range(16):
                ctx.set(dut.a, a)
                assert ctx.get(dut.small) == (a < 8), a
                assert ctx.get(dut.valid) == 1, a
        sim = Simulator(dut)
        sim.add_testbench(bench)
        sim.run()
    ''')

ELABORATE = ("from amaranth.back import rtlil\nfrom snip.snippet import Snippet\n"
             "rtlil.convert(Snippet())\n")


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "snip").mkdir(parents=True)
    (root / "snip" / "__init__.py").write_text("")
    (root / "snip" / "snippet.py").write_text(SNIPPET)
    (root / "test_snippet.py").write_text(TEST)
    return root


def _digest(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_operators_on_the_snippet(project):
    """Every operator finds its sites; ids in source order, unique; each mutant parses
    and differs (mutants_of itself checks that it is the original tree with one node
    replaced); the changes are the expected ones."""
    ms = mutate.mutants_of(project / "snip" / "snippet.py", "snippet.py")
    ops = {m.operator for m in ms}
    assert {"cmp", "const", "drop", "swap", "init", "cond", "eq", "mux", "invert"} <= ops
    assert [m.id for m in ms] == [f"snippet-{k:03d}" for k in range(len(ms))]
    assert [m.line for m in ms] == sorted(m.line for m in ms)
    tree = ast.parse(SNIPPET)
    for m in ms:
        assert ast.dump(ast.parse(m.source)) != ast.dump(tree), m
    by = {(m.operator, m.original, m.mutant) for m in ms}
    assert ("cmp", "self.a < 8", "(self.a <= 8)") in by
    assert ("cond", "m.If(self.a == 3)", "m.If(1)") in by and ("cond", "m.If(self.a == 3)", "m.If(0)") in by
    assert ("const", "self.a < 8", "self.a < 9") in by
    assert ("mux", "Mux(self.small, n, ~n)", "Mux(self.small, ~n, n)") in by
    assert ("invert", "~n", "n") in by
    assert ("eq", "m.d.sync += n.eq(n + 1)", "pass") in by
    assert any(m.operator == "swap" and m.mutant == "self.small.eq(self.a < 16), self.valid.eq(self.a < 8)"
               for m in ms)
    assert any(m.operator == "init" and "init=1" in m.mutant for m in ms)   # n is a register


def test_enumeration_is_deterministic_and_checked():
    """The RTL's mutants: the same list twice; every file with logic (an ``elaborate``) has
    some (a file of payload layouts alone has none); sampling with a seed
    repeats and covers every file, weighted to the packet manager, allocator and tracker."""
    files = mutate.rtl_files()
    a = mutate.enumerate_mutants(files)
    again = files[::3]                               # (a third of the files again: the same list)
    b = mutate.enumerate_mutants(again)
    assert [(m.id, m.line, m.operator, m.original, m.mutant, m.source) for m in a if m.file in again] == \
           [(m.id, m.line, m.operator, m.original, m.mutant, m.source) for m in b] and b
    assert len({m.id for m in a}) == len(a) > 1000
    logic = {f for f in files if "def elaborate" in (mutate.REPO / f).read_text()}
    assert logic <= {m.file for m in a} <= set(files)
    s1, s2 = mutate.sample(a, 60, seed=5), mutate.sample(a, 60, seed=5)
    assert [m.id for m in s1] == [m.id for m in s2] and len(s1) == 60
    assert {m.file for m in s1} == {m.file for m in a}
    per = {f: sum(m.file == f for m in s1) for f in files}
    assert per["rtl/packet_manager.py"] > per["rtl/event_queue.py"]
    assert mutate.sample(a, 60, seed=6) != s1
    # the full-tree check on one file (enumeration checks the changed statement only)
    src = Path(mutate.REPO / "rtl/allocator.py").read_bytes()
    for m in mutate.mutants_of(mutate.REPO / "rtl/allocator.py", "rtl/allocator.py"):
        assert ast.parse(m.source) and m.source != src


def test_testbench_shares_no_rtl_file():
    """The checker (testbench, spec/) imports no rtl/ file, so no hardware mutant can move
    it; a planted import from rtl/ (and what that file imports in turn) is found."""
    assert mutate.testbench_files() == set()


def test_testbench_files_follow_imports_into_rtl(tmp_path):
    for d in ("verif/tb", "spec", "rtl"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "verif" / "tb" / "env.py").write_text("from ...rtl.layouts import X\nfrom ...spec import model\n")
    (tmp_path / "spec" / "model.py").write_text("from .config import C\n")
    (tmp_path / "spec" / "config.py").write_text("")
    (tmp_path / "rtl" / "layouts.py").write_text("from .formats import Y\nfrom . import logic\n")
    (tmp_path / "rtl" / "formats.py").write_text("")
    (tmp_path / "rtl" / "logic.py").write_text("")
    (tmp_path / "rtl" / "hub.py").write_text("")
    assert mutate.testbench_files(tmp_path) == {"rtl/layouts.py", "rtl/formats.py", "rtl/logic.py"}


def test_killed_survived_stillborn_and_restored(project, tmp_path):
    """On the snippet: ``a < 8`` -> ``a <= 8`` is killed by its test; ``a < 16`` ->
    ``a <= 16`` (4-bit ``a`` never reaches 16: equivalent) survives; a mutant that cannot
    elaborate is stillborn. The project and the copy are restored byte for byte."""
    before = _digest(project)
    ms = {(m.operator, m.original, m.mutant): m
          for m in mutate.mutants_of(project / "snip" / "snippet.py", "snippet.py")}
    kill = ms["cmp", "self.a < 8", "(self.a <= 8)"]
    equiv = ms["cmp", "self.a < 16", "(self.a <= 16)"]
    born_dead = mutate.Mutant("snippet-x", "snippet.py", 1, "test", "", "",
                              SNIPPET.replace("m = Module()", "m = Module(1)").encode())
    out = tmp_path / "out"
    camp = mutate.Campaign(project, out, suite=["test_snippet.py"], elaborate=ELABORATE,
                           netlist_tests=(), shared=set(), package="snip", timeout=120,
                           echo=lambda s: None)
    camp.prepare()
    assert camp.baseline().result == "survived"
    res = camp.run([kill, equiv, born_dead])
    assert [r.result for r in res] == ["killed", "survived", "stillborn"], res
    assert res[0].killer == "test_snippet::test_small_and_valid"
    assert _digest(project) == before
    assert _digest(camp.trees[0]) == before
    assert not (out / "work").exists() or not any((out / "work").iterdir())
    js, md = mutate.write_report(out, [kill, equiv, born_dead], res, {"seed": 1})
    data = json.loads(js.read_text())
    assert data["score"]["killed"] == 1 and data["score"]["survived"] == 1
    assert data["score"]["score"] == 0.5 and data["score"]["stillborn"] == 1
    text = md.read_text()
    assert "1 / 2 = 50.0 %" in text and "snippet.py:" in text and "## Survivors" in text


def test_tests_of_an_unchanged_hub_are_skipped(project, tmp_path):
    """Per hub: the elaboration prints a hash per hub, and a mutant runs only the tests of
    the hubs whose netlist it changed (hub "b" here never changes: its test is skipped,
    and the result says which netlists stayed)."""
    (project / "test_b.py").write_text("def test_b():\n    pass\n")
    elaborate = ("import hashlib\nfrom amaranth.back import rtlil\nfrom snip.snippet import Snippet\n"
                 "print('NETLIST a', hashlib.sha256(rtlil.convert(Snippet()).encode()).hexdigest())\n"
                 "print('NETLIST b', 'f' * 64)\n")
    ms = {(m.operator, m.original, m.mutant): m
          for m in mutate.mutants_of(project / "snip" / "snippet.py", "snippet.py")}
    camp = mutate.Campaign(project, tmp_path / "out", suite=["test_snippet.py", "test_b.py"],
                           elaborate=elaborate, netlist_tests={"test_snippet.py": "a", "test_b.py": "b"},
                           shared=set(), package="snip", timeout=120, echo=lambda s: None)
    camp.prepare()
    assert camp.baseline().result == "survived" and set(camp.base_netlist) == {"a", "b"}
    (r,) = camp.run([ms["cmp", "self.a < 16", "(self.a <= 16)"]])
    assert r.result == "survived" and r.skipped == ("test_b.py",) and r.netlist == "unchanged: b", r
    assert mutate.netlist_hashes("NETLIST x 12\nNETLIST 34\n") == {"x": "12", "": "34"}
    assert mutate.netlist_words({"a", "b"}, {"a", "b"}) == "unchanged"
    assert mutate.netlist_words(set(), {"a", "b"}) == "changed"


def test_a_hang_is_a_timeout(project, tmp_path, monkeypatch):
    """A mutant whose suite runs past the timeout is stopped (its process group killed)."""
    monkeypatch.setattr(mutate, "SUITE_FLOOR_S", 3.0)
    (project / "test_snippet.py").write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
    m = mutate.mutants_of(project / "snip" / "snippet.py", "snippet.py")[0]
    camp = mutate.Campaign(project, tmp_path / "out", suite=["test_snippet.py"], elaborate="",
                           netlist_tests=(), shared=set(), package="snip", timeout=3,
                           echo=lambda s: None)
    camp.prepare()
    (r,) = camp.run([m])
    assert r.result == "timeout" and r.seconds < 30


def test_kill_suite_selects_every_node():
    """Every node of the kill suite survives its marker selection: the Icarus regression on
    tiny is in the slow set, kept by its ``mutation`` mark; no test that plants a bug by
    replacing source text (``plants``) is selected."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", mutate.KILL_MARKERS, *mutate.KILL_SUITE],
                         cwd=mutate.CHECKOUT, capture_output=True, text=True).stdout
    for node in mutate.KILL_SUITE:
        assert node in out, f"{node} not selected by -m {mutate.KILL_MARKERS!r}"
    planted = [t for t in out.splitlines() if "planted" in t or "broken" in t]
    assert not planted, f"tests that plant a bug by text replacement in the kill suite: {planted}"


def test_survivors_are_proven_on_the_hubs_the_suite_simulates():
    """Every hub the kill suite simulates is a default equivalence config, and each exists."""
    from moehub.spec.config import load_hub_config
    from moehub.verif import mutate_dask
    assert mutate_dask.EQUIV_CONFIGS == tuple(mutate.KILL_HUBS)
    for hub, (config, tests) in mutate.KILL_HUBS.items():
        assert load_hub_config(str(mutate.CHECKOUT / config) if config.endswith(".yaml") else config).name
        assert set(tests) <= set(mutate.KILL_SUITE), hub


def test_first_failure_names_the_cocotb_test(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="tests.test_rtl_units" name="test_ok"/>'
        '<testcase classname="tests.test_hub_cocotb" name="test_hub_regression[icarus-tiny]">'
        "<failure message=\"AssertionError: tiny: failing cocotb tests ['test_latency', 'test_random_knobs'] (log)\"/>"
        "</testcase></testsuite></testsuites>")
    assert mutate.first_failure(junit) == "test_hub_cocotb::test_hub_regression[icarus-tiny] (test_latency)"


def test_list_and_bad_arguments(capsys):
    assert mutate.main(["--list", "--files", "rtl/allocator.py"]) == 0
    out = capsys.readouterr().out
    assert "allocator-000" in out and "rtl/allocator.py:" in out
    assert mutate.main(["--list", "--files", "rtl/nonesuch.py"]) == 2
    assert mutate.main(["--list", "--only", "allocator-999"]) == 2
