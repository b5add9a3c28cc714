"""The mutation campaign on Dask (moehub.verif.mutate_dask): results cached by content and
an interrupted run resumed, the cache invalidated by what changes a result, survivors
proven equivalent or shown different by Yosys, the per-file and per-operator tables and
the projection, and the command's refusals. On the tiny Amaranth snippet of
test_mutate.py with its one-test kill suite (about a minute: one LocalCluster worker)."""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from moehub.verif import mutate, mutate_dask
from test_mutate import ELABORATE, SNIPPET, project  # noqa: F401  (the fixture)


def _mutants(root: Path) -> tuple:
    ms = {(m.operator, m.original, m.mutant): m
          for m in mutate.mutants_of(root / "snip" / "snippet.py", "snippet.py")}
    return ms["cmp", "self.a < 8", "(self.a <= 8)"], ms["cmp", "self.a < 16", "(self.a <= 16)"]


def _campaign(root: Path, out: Path, mutants, **kw):
    return mutate_dask.run_campaign(
        mutants, root=root, out=out, suite=["test_snippet.py"], elaborate=ELABORATE,
        netlist_tests=(), shared=set(), package="snip", markers="", env={}, timeout=120,
        workers=1, prove_configs=(), echo=lambda s: None, campaign=mutate.Campaign, **kw)


def test_cached_resumed_and_rerun_only_when_stale(project, tmp_path):  # noqa: F811
    """First run: the baseline and both mutants on the cluster (killed, survived). Second:
    everything from the cache, no cluster started. One record lost (an interrupted run):
    only that mutant runs again, the baseline stays cached. The checkout is untouched and
    the workers' trees are removed."""
    kill, equiv = _mutants(project)
    before = (project / "snip" / "snippet.py").read_bytes()
    out = tmp_path / "out"
    first = _campaign(project, out, [kill, equiv])
    assert first.ran == 2 and first.cached == 0 and not first.errors
    assert {k: r["result"] for k, r in first.results.items()} == {kill.id: "killed", equiv.id: "survived"}
    assert first.results[kill.id]["killer"] == "test_snippet::test_small_and_valid"
    assert first.baseline["result"] == "survived"
    records = sorted((out / "cache").glob("*.json"))
    assert len(records) == 3                                   # baseline + 2 mutants
    assert not (out / "trees").exists()

    second = _campaign(project, out, [kill, equiv])
    assert second.ran == 0 and second.cached == 2
    assert all(r["cached"] for r in second.results.values())
    assert second.wall_s < 10                                  # no cluster, no suite

    (out / "cache" / f"{first.keys[kill.id]}.json").unlink()
    third = _campaign(project, out, [kill, equiv])
    assert third.ran == 1 and third.cached == 1
    assert third.results[kill.id]["result"] == "killed" and not third.results[kill.id]["cached"]
    assert (project / "snip" / "snippet.py").read_bytes() == before


def test_identities_follow_the_rtl_and_the_suite(project, tmp_path):  # noqa: F811
    """The RTL hash moves with the package's source only; the suite's identity with a
    test, the suite's settings or its node ids, not with prose; the mutant key with the
    mutated text."""
    ident = lambda **kw: mutate_dask.identities(project, "snip", kw.get("suite", ["test_snippet.py"]),  # noqa: E731
                                                kw.get("settings", {"markers": ""}))
    rtl, suite = ident()
    (project / "NOTES.md").write_text("prose\n")
    assert ident() == (rtl, suite)
    (project / "test_snippet.py").write_text((project / "test_snippet.py").read_text() + "\n# x\n")
    rtl2, suite2 = ident()
    assert rtl2 == rtl and suite2 != suite
    assert ident(settings={"markers": "not slow"})[1] != suite2
    assert ident(suite=["test_snippet.py::test_small_and_valid"])[1] != suite2
    kill, equiv = _mutants(project)
    (project / "snip" / "snippet.py").write_text(SNIPPET + "\n")
    rtl3 = ident()[0]
    assert rtl3 != rtl
    k = mutate_dask.mutant_key(kill.file, kill.source, rtl, suite)
    assert k == mutate_dask.mutant_key(kill.file, kill.source, rtl, suite)
    assert k != mutate_dask.mutant_key(equiv.file, equiv.source, rtl, suite)
    assert k != mutate_dask.mutant_key(kill.file, kill.source, rtl3, suite)
    assert k != mutate_dask.mutant_key(kill.file, kill.source, rtl, suite2)


#: a stand-in for the hub package (``moehub.rtl.hub.MoEHub``, ``moehub.spec.config``):
#: the proof builds it as it builds the hub, by config name
FAKE_HUB = textwrap.dedent('''\
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out


    class MoEHub(wiring.Component):
        a: In(4)
        small: Out(1)
        valid: Out(1)
        count: Out(4)

        def __init__(self, cfg):
            self.cfg = cfg
            super().__init__()

        def elaborate(self, platform):
            from amaranth import Module
            m = Module()
            spare = 3
            if self.cfg == "wide":
                m.d.comb += self.small.eq(self.a < 12)
            else:
                m.d.comb += self.small.eq(self.a < 8)
            m.d.comb += self.valid.eq(self.a < 16)
            m.d.sync += self.count.eq(self.count + self.small)
            return m
    ''')


@pytest.fixture
def fake_hub(tmp_path):
    root = tmp_path / "fake"
    for d in ("moehub/rtl", "moehub/spec"):
        (root / d).mkdir(parents=True)
        (root / d / "__init__.py").write_text("")
    (root / "moehub" / "__init__.py").write_text("")
    (root / "moehub" / "spec" / "config.py").write_text("def load_hub_config(name):\n    return name\n")
    (root / "moehub" / "rtl" / "hub.py").write_text(FAKE_HUB)
    return root


def _changed(line: int, old: str, new: str) -> mutate.Mutant:
    text = FAKE_HUB.splitlines(keepends=True)
    assert old in text[line - 1], (line, text[line - 1])
    text[line - 1] = text[line - 1].replace(old, new)
    return mutate.Mutant(f"hub-{line}", "rtl/hub.py", line, "test", old, new, "".join(text).encode())


def test_emit_records_the_lines_that_ran(fake_hub, tmp_path):
    """The RTLIL comes from the tree's package, and the lines of rtl/ that ran building
    the config are recorded: the branch of another config is not among them, the class
    body (run at import) is."""
    lines = tmp_path / "lines.json"
    text = mutate_dask._emit("narrow", tmp_path / "n.il", fake_hub, lines)
    assert "module \\top" in text
    ran = set(json.loads(lines.read_text())["rtl/hub.py"])
    src = FAKE_HUB.splitlines()
    at = lambda s: next(i for i, t in enumerate(src, 1) if s in t)   # noqa: E731
    assert {at("a < 8"), at("a < 16"), at("spare = 3"), at("a: In(4)")} <= ran
    assert at("a < 12") not in ran


def test_survivor_proven_equivalent_or_shown_different(fake_hub, tmp_path):
    """On config "narrow": ``a < 16`` -> ``a <= 16`` (4-bit ``a``) proven equivalent by
    Yosys' induction; ``a < 8`` -> ``a <= 8`` not equivalent, naming the output; a dead
    assignment that runs (``spare``) equivalent by identical RTLIL; a change in the branch
    only config "wide" builds is *not elaborated*, not equivalent. The tree is restored."""
    src = FAKE_HUB.splitlines()
    at = lambda s: next(i for i, t in enumerate(src, 1) if s in t)   # noqa: E731
    job = {"campaign": mutate.Campaign, "snapshot": str(fake_hub), "out": str(tmp_path / "out"),
           "package": "moehub", "rtl_hash": "r" * 64, "suite_id": "s" * 64}
    p = mutate_dask.prove_task(job, _changed(at("a < 16"), "a < 16", "a <= 16"), ["narrow"])
    assert p["verdict"] == "equivalent" and p["configs"][0]["proof"] == "induction", p
    q = mutate_dask.prove_task(job, _changed(at("a < 8"), "a < 8", "a <= 8"), ["narrow"])
    assert q["verdict"] == "not equivalent" and any("small" in d for d in q["configs"][0]["differ"]), q
    r = mutate_dask.prove_task(job, _changed(at("spare = 3"), "3", "4"), ["narrow"])
    assert r["verdict"] == "equivalent" and r["configs"][0]["proof"] == "identical RTLIL", r
    w = mutate_dask.prove_task(job, _changed(at("a < 12"), "a < 12", "a <= 12"), ["narrow"])
    assert w["verdict"] == "not elaborated", w
    # proven on every config that builds the line ("wide"), the others left out
    e = mutate_dask.prove_task(job, _changed(at("a < 12"), "a < 12", "a <= 11"), ["narrow", "wide"])
    assert e["verdict"] == "equivalent", e
    assert [c["verdict"] for c in e["configs"]] == ["not elaborated", "equivalent"], e
    d = mutate_dask.prove_task(job, _changed(at("a < 12"), "a < 12", "a <= 12"), ["narrow", "wide"])
    assert d["verdict"] == "not equivalent", d
    tree = Path(mutate_dask._worker_tree(job))
    assert (tree / "moehub" / "rtl" / "hub.py").read_text() == FAKE_HUB


def test_report_per_file_per_operator_and_projection(tmp_path):
    """Counts and scores per file and per operator: a proven-equivalent, a stillborn and a
    failed mutant are not scored, a timeout is a kill; the projection is mutants x mean / N."""
    ms = [mutate.Mutant(f"f-{i}", f, i, op, "a", "b") for i, (f, op) in enumerate(
        [("rtl/a.py", "cmp"), ("rtl/a.py", "cmp"), ("rtl/a.py", "drop"), ("rtl/b.py", "drop"),
         ("rtl/b.py", "eq"), ("rtl/b.py", "eq"), ("rtl/b.py", "cmp")])]
    res = [{"result": r, "killer": "", "seconds": s, "netlist": "", "detail": "", "skipped": []}
           for r, s in [("killed", 10), ("survived", 50), ("timeout", 300), ("equivalent", 40),
                        ("stillborn", 5), ("error", 0), ("killed", 20)]]
    res[3]["proof"] = {"verdict": "equivalent", "configs": [{"config": "tiny", "verdict": "equivalent",
                                                            "proof": "induction"}]}
    js, md = mutate.write_report(tmp_path, ms, res, {"seed": 1}, full_set=2030, workers=(2, 100))
    data = json.loads(js.read_text())
    assert data["score"]["score"] == round(3 / 4, 4)
    assert data["by_file"]["rtl/a.py"]["score"] == round(2 / 3, 4)
    assert data["by_file"]["rtl/b.py"]["score"] == 1.0 and data["by_file"]["rtl/b.py"]["equivalent"] == 1
    assert data["by_operator"]["cmp"]["killed"] == 2 and data["by_operator"]["cmp"]["survived"] == 1
    mean = (10 + 50 + 300 + 40 + 5 + 20) / 6
    assert data["projection_s"] == {"2": round(2030 * mean / 2), "100": round(2030 * mean / 100)}
    text = md.read_text()
    assert "## Per file" in text and "## Per operator" in text and "## Proven equivalent" in text
    assert "| rtl/a.py | 1 | 1 | 1 | 0 | 0 | 0 | 66.7 % |" in text
    assert "tiny: equivalent (induction)" in text


@pytest.mark.parametrize("argv,says", [
    (["--workers", "0"], "--workers 0"),
    (["--cluster-opt", "queue=x"], "--cluster-opt"),
    (["--scheduler", "localhost:8786"], "--scheduler"),
    (["--timeout", "-1"], "--timeout"),
    (["--ref", "nonesuch"], "--ref 'nonesuch'"),
])
def test_bad_options_exit_2(argv, says, capsys, tmp_path):
    assert mutate.main(["--only", "allocator-000", "--out", str(tmp_path), *argv]) == 2
    assert says in capsys.readouterr().err


def test_snapshot_of_a_git_revision(project, tmp_path):  # noqa: F811
    """``--ref``: the snapshot holds the revision's files, not the working tree's edits or
    untracked files, so its identities do not move while the checkout changes; the working
    tree's snapshot holds the edits."""
    git = lambda *a: subprocess.run(["git", "-C", str(project), *a], check=True,  # noqa: E731
                                    capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    commit = git("rev-parse", "HEAD")
    (project / "snip" / "snippet.py").write_text(SNIPPET.replace("a < 8", "a < 9"))
    (project / "extra.py").write_text("x = 1\n")
    at_ref = mutate.Campaign.snapshot(project, tmp_path / "ref", commit)
    assert (at_ref / "snip" / "snippet.py").read_text() == SNIPPET and not (at_ref / "extra.py").exists()
    work = mutate.Campaign.snapshot(project, tmp_path / "work")
    assert "a < 9" in (work / "snip" / "snippet.py").read_text() and (work / "extra.py").exists()
    ident = lambda t: mutate_dask.identities(t, "snip", ["test_snippet.py"], {})  # noqa: E731
    assert ident(at_ref) == ident(mutate.Campaign.snapshot(project, tmp_path / "ref2", "HEAD"))
    assert ident(at_ref)[0] != ident(work)[0]
    with pytest.raises(ValueError, match="'nonesuch'"):
        mutate.resolve_ref(project, "nonesuch")
