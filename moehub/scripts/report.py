"""``moehub report``: the documentation's results tables, generated from records
(and the register table, from the spec).

A figure typed into a table goes stale the day its command is run again. Here every
results table of ``README.md`` and ``docs/**/*.md`` is written by this module from a
*record*: one JSON file per run a table rests on, committed under ``records/`` at the
repository root, holding the producing command, the git commit, the date, the machine
(cores, CPU model) and its load, the run's figures, and -- for hardware figures -- the
SHA-256 of the RTL sources they were made from (:func:`rtl_sources_hash`:
``rtl/**/*.py`` and ``spec/*.py``, what the hardware is generated from). A table whose
record was made from other RTL sources than the working tree's says so on its rows
("older RTL"); after a change of the RTL, ``moehub report --collect synth --write``
checks each synthesis report again and drops the mark where the hardware is unchanged,
and ``moehub report --recheck --write`` does the same from the records alone (no build
folder: the RTLIL generated again against the digest each record holds).

In a Markdown file a table sits between two marker lines, which this module owns::

    <!-- moehub-table: hub-verdicts -->
    (generated; rewritten by ``moehub report --write``)
    <!-- /moehub-table -->

``moehub report`` prints every table; ``--write`` rewrites the marked regions in place
(nothing outside them changes); ``--check`` exits 1 and prints a diff when a region
differs from what its records give (the test suite runs it on the repository's docs).
``--collect`` makes records from the commands' outputs in the build folder:

* ``synth``: ``synth/<config>/report.json`` of ``moehub synth`` (OSU018 and ASAP7);
  the synthesised RTLIL (``moehub.il``) is compared with the RTLIL the working tree
  generates for the same configuration, ``src`` attributes aside, so a report counts as
  current exactly when the hardware it measured is the hardware of these sources;
* ``validate``: ``results/validate/validation.csv`` of ``moehub validate`` (it writes no
  run record, so ``--rerun`` runs it here, ~3 CPU-minutes, and records that run);
* ``calibrate``: ``calibrate/calibration.csv`` of ``moehub calibrate`` (``--rerun`` too);
* ``headline``: every ``results/headline*/headline.json`` of ``moehub headline``;
* ``study-v2``: every ``results/study-v2*/ablation.csv`` of ``moehub study v2``;
* ``bench-scaling``: ``results/bench-scaling/scaling.json`` of ``bench_cosim.py --scaling``;
* ``bench-window``: ``results/bench-window/window.json`` of ``bench_cosim.py --window-error``;
* ``study-relay``: every ``results/study-relay*/relay.csv`` (and its ``run.json``) of
  ``python -m moehub.cosim.studies.relay``;
* ``synth-unit``: every ``synth/unit-*/unit.json`` of ``moehub synth-unit``;
* ``soak``: every ``soak/*/summary.json`` of ``moehub soak``;
* ``formal``: every ``formal/<set>-<mode>/result.json`` of ``moehub formal`` (one job each);
* ``bench-sim``: ``results/bench-sim/sim.json`` of ``bench_sim.py`` (Icarus against Verilator).
* ``explore``: every ``results/explore-*/points.csv`` (and its ``run.json``) of ``moehub explore``;
* ``coverage``: every ``coverage/run-<config>.json`` of ``moehub coverage``;
* ``equiv``: every ``synth/equiv/<config>/result.json`` of ``moehub equiv``;
* ``mutate``: ``mutation/report.json`` of a finished ``moehub mutate`` campaign;
* ``paper-band``: ``results/paper-band/band.json`` of ``python -m moehub.cosim.studies.paper_band``;
* ``study-xmoe``: every ``results/study-xmoe*/results.json`` (and its ``run.json``) of
  ``moehub study xmoe``.

Tables: ``hub-verdicts`` (per hub and flow: area, deepest stage, fmax, the verdict at
1.98 GHz), ``asap7`` (``moehub synth-table``'s rows), ``headline`` (the hub's speedup
over the best software per system, model and tokens/GPU: ``moehub headline``'s map),
``validation-summary`` (N of M validation cases within tolerance and the misses, N of M
calibration points), ``validation-misses`` (each miss with what the model lacks),
``validation-cases`` (every case) and ``calibration-summary`` (N of M calibration points
within tolerance, the misses and whether each was expected); ``v2-ablation-<model>-<system>``
(``moehub study v2``'s table of DeepSeek-V3 or Mixtral on h100x8 or h100x16-ib);
``cosim-scaling`` and ``cosim-scaling-costly`` (the co-simulation's cost from 8 to 256
GPUs, every system / the three whose networks cost most); ``cosim-window-error`` (the
coalesced network engine against the exact one: per point, each system's layer time
coalesced − exact in %, the largest, the window and each run's CPU seconds); ``relay-ablation`` (the relay
study's hub v2, + relay, + relay + reduce and DeepEP normal mode on 2 and 4 nodes, a row
short of its fixed point marked †); ``v2-hubs`` (protocol v2's whole hubs, one node and two:
area, N5 mm², the deepest stage and its verdict, from the synthesis records of
``moehub synth --config deepseek-v3-8gpu --set ...``; a variant without one says so);
``formal`` (per property set its jobs as run: k-induction, BMC, covers, result, time),
``verification-summary`` (the README's checks: the soaks, the formal jobs, and the checks
without a record named as such), ``coverage`` (per config the coverage run's bins hit, the
missed ones, what it played, its time), ``equiv`` (per config the equivalence proof against
the reference revision) and ``sim-speed`` (Icarus against Verilator: build,
cycles per second, identical outputs); ``explore-example`` and ``explore-experts`` (the
exploration guide's ``--axis lanes=1,2,4 --axis tags=4,8`` and ``--axis experts=1,2,4 --axis
lanes=2 --axis tags=8``: area, stage, speedup, memory, Pareto per point).

A table of the spec itself has no record: ``csr-map`` (the CSR registers of
``spec/csr_map.py``: word, access, width, reset, the features a register needs, its doc
and fields) is rendered from the register objects, so the guide's register list cannot
drift from the map the RTL, the model and the C header are made from.
"""
from __future__ import annotations

import csv
import difflib
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from .. import progress, runinfo
from ..synth.digest import hub_rtlil_digest, rtlil_digest  # noqa: F401 (re-exported)
from ..synth.units import unit_rtlil_digest
from ..paths import HELP, build_root

#: version of the record layout (a reader refuses another)
SCHEMA = 1
#: the repository root in a checkout (the folder holding the package)
ROOT = runinfo.PACKAGE_DIR.parent
#: where the committed records live
RECORDS = ROOT / "records"
#: the Markdown files whose marked regions are tables, relative to the root
DOC_GLOBS = ("README.md", "docs/**/*.md")
#: folders under docs/ that are build outputs, not sources
DOC_SKIP = ("_build",)

BEGIN = re.compile(r"^<!--\s*moehub-table:\s*(?P<name>.*?)\s*-->\s*$")
END = re.compile(r"^<!--\s*/moehub-table\s*-->\s*$")
END_LINE = "<!-- /moehub-table -->"
OLDER = "older RTL"
#: the clock the verdicts are given at (the H100's boost clock, as in ``moehub synth``)
H100_CLOCK_GHZ = 1.98

#: the report.json sections of ``moehub synth``, in table order, with their flow's name
SECTIONS = {"asic": "OSU018 → N5 projection", "asap7_tt": "ASAP7 TT", "asap7_ss": "ASAP7 SS"}
#: the keys every record has
RECORD_KEYS = ("schema", "source", "command", "commit", "date", "machine", "load", "data")


class ReportError(Exception):
    """A record or a marked region that cannot be used; ``moehub report`` exits 2 with it."""


# ----------------------------------------------------------------------------- provenance
rtl_sources, rtl_sources_hash, iso = runinfo.rtl_sources, runinfo.rtl_sources_hash, runinfo.iso


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """This machine: cores and CPU model (a record's timings are only comparable on it)."""
    return {"cores": os.cpu_count(), "model": _cpu_model(), "platform": platform.platform()}


load = runinfo.load_avg


def collected() -> dict:
    """Who made a record now: the collecting command, commit and date."""
    return {"command": runinfo.record()["command"], "commit": runinfo.git_describe(),
            "date": iso(time.time())}


def make_record(source: str, command: str, data: dict, *, commit, date: str, mach: dict,
                load_avg, rtl: dict | None = None, note: str = "") -> dict:
    """A record: what produced ``data`` (command, commit, date, machine, load) and, for
    hardware figures, ``rtl`` (per report section: the RTL sources' hash)."""
    rec = {"schema": SCHEMA, "source": source, "command": command, "commit": commit,
           "date": date, "machine": mach, "load": load_avg, "collected": collected()}
    if rtl is not None:
        rec["rtl"] = rtl
    if note:
        rec["note"] = note
    rec["data"] = data
    return rec


def read_record(path: Path) -> dict:
    """One record, checked: JSON, this schema, every key present."""
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"record {path}: cannot be read as JSON ({e})") from None
    if not isinstance(rec, dict):
        raise ReportError(f"record {path}: not a JSON object")
    missing = [k for k in RECORD_KEYS if k not in rec]
    if missing:
        raise ReportError(f"record {path}: no {missing[0]!r} (a record has {', '.join(RECORD_KEYS)})")
    if rec["schema"] != SCHEMA:
        raise ReportError(f"record {path}: schema = {rec['schema']!r}, this moehub reads {SCHEMA}")
    return rec


def write_record(path: Path, rec: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def load_records(root: Path, source: str) -> list:
    """``[(name, record)]`` of one source: ``<root>/<source>/*.json`` by name, or the one
    file ``<root>/<source>.json``; ``name`` is the path under ``root``."""
    root = Path(root)
    paths = sorted((root / source).glob("*.json")) if (root / source).is_dir() else []
    if (root / f"{source}.json").is_file():
        paths.append(root / f"{source}.json")
    out = []
    for p in paths:
        rec = read_record(p)
        if rec["source"] != source:
            raise ReportError(f"record {p}: source = {rec['source']!r}, expected {source!r}")
        out.append((p.relative_to(root).as_posix(), rec))
    return out


# ----------------------------------------------------------------------------- synth records


def current_rtlil_digest(cfg_dict: dict, unit: str | None = None) -> str:
    """:func:`rtlil_digest` of the RTLIL the working tree generates for a synthesised
    configuration (``config.json`` of the flow's folder), named as the flows name it; with
    ``unit``, of that unit alone for the config (``moehub synth-unit``)."""
    return unit_rtlil_digest(unit, cfg_dict) if unit else hub_rtlil_digest(cfg_dict)


def _section_dir(folder: Path, section: str, sec: dict) -> Path:
    """The folder holding the RTLIL a report section was synthesised from: the flow's
    folder (ASAP7 SS re-times the TT netlist: the TT folder; OSU018: the config's)."""
    if section == "asic":
        return folder
    if sec.get("mapped_at") and (folder / f"asap7-{sec['mapped_at']}").is_dir():
        return folder / f"asap7-{sec['mapped_at']}"
    return folder / sec.get("folder", "")


def synth_args(name: str) -> str:
    """``--config`` (and ``--set``) of the ``moehub synth`` run whose folder is ``name``: a
    shipped hub, or one with protocol-v2 changes, which the flow names
    ``<hub>_<key>-<value>_...`` (``synth.flow.with_changes``)."""
    from ..spec.config import HUB_CONFIGS
    base = max((c for c in HUB_CONFIGS if name.startswith(c + "_")), key=len, default=None)
    if name in HUB_CONFIGS or base is None:
        return f"--config {name}"
    sets = re.findall(r"([a-z][a-z_]*)-(\d+)", name[len(base) + 1:])
    return f"--config {base}" + "".join(f" --set {k}={v}" for k, v in sets)


def synth_command(name: str, rep: dict) -> str:
    """The ``moehub synth`` command lines that write a report's sections (the flow writes
    no run record; an SS run writes the TT section too)."""
    cmds, args = [], synth_args(name)
    if "asic" in rep:
        cmds.append(f"moehub synth {args}")
    if "asap7_ss" in rep:
        cmds.append(f"moehub synth {args} --lib asap7 --corner ss")
    elif "asap7_tt" in rep:
        cmds.append(f"moehub synth {args} --lib asap7")
    return "; ".join(cmds)


def synth_rtl(folder: Path, rep: dict, previous: dict | None, current: str, check=None) -> dict:
    """Per report section: the RTL sources' hash it was made from (``None`` when the
    synthesised RTLIL is not the working tree's) and the RTLIL digest it was checked by.

    A section whose RTLIL digest and report are unchanged since ``previous`` (the last
    record) keeps its verdict while the sources' hash is still the current one; otherwise
    the RTLIL is generated again from the working tree (``check``: the generator, for
    tests) and compared."""
    check = check or current_rtlil_digest
    out, fresh = {}, {}
    for section in (s for s in SECTIONS if s in rep):
        d = _section_dir(folder, section, rep[section])
        il, cfg_path = d / "moehub.il", d / "config.json"
        if not il.is_file():
            out[section] = {"sources_sha256": None, "rtlil_sha256": None,
                            "how": f"no moehub.il in {d.name}/: the synthesised RTL is unknown"}
            continue
        digest = rtlil_digest(il.read_text())
        old = ((previous or {}).get("rtl") or {}).get(section) or {}
        if old.get("rtlil_sha256") == digest and old.get("sources_sha256") == current:
            out[section] = old
            continue
        if not cfg_path.is_file():
            cfg_path = folder / "config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else rep["hub"]
        key = json.dumps(cfg, sort_keys=True)
        if key not in fresh:
            with progress.stage(f"report: RTLIL of {cfg.get('name')} from the working tree",
                                heartbeat=True):
                try:
                    fresh[key] = check(cfg)
                except Exception as e:          # the working tree's RTL does not build
                    fresh[key] = e
        got = fresh[key]
        if isinstance(got, Exception):
            out[section] = {"sources_sha256": None, "rtlil_sha256": digest,
                            "how": f"the working tree's RTLIL could not be generated "
                                   f"({type(got).__name__}: {got})"}
            continue
        same = got == digest
        out[section] = {"sources_sha256": current if same else None, "rtlil_sha256": digest,
                        "how": ("the working tree's RTLIL for this config equals the synthesised "
                                "one (src attributes aside)" if same else
                                "the synthesised RTLIL differs from the working tree's")}
    if fresh and rtl_sources_hash() != current:
        raise ReportError("the RTL sources changed while their RTLIL was generated for the "
                          f"check of {folder.name}; collect again")
    return out


def collect_synth(build: Path, records: Path, check=None, folders=None) -> list:
    """A record ``synth/<config>.json`` per ``<build>/synth/<config>/report.json`` or, with
    ``folders``, per ``<folder>/report.json`` (a run's ``--out``); returns the paths written."""
    current = rtl_sources_hash()
    default = Path(build, "synth")
    if folders:
        paths = [Path(f) / "report.json" for f in folders]
        for p in paths:
            if not p.is_file():
                raise ReportError(f"--synth-dir {p.parent}: no report.json of moehub synth there")
    else:
        paths = sorted(default.glob("*/report.json"))
    written = []
    for rp in paths:
        folder = rp.parent
        rep = json.loads(rp.read_text())
        if not any(s in rep for s in SECTIONS):
            continue
        name = rep.get("config") or folder.name
        command = synth_command(name, rep)
        if folder.absolute() != (default / name).absolute():
            command = "; ".join(f"{c} --out {folder}" for c in command.split("; "))
        dest = Path(records, "synth", f"{name}.json")
        prev = read_record(dest) if dest.is_file() else None
        deepest = folder / "deepest_paths.json"
        data = {"config": name, "report": rep,
                "deepest_paths": json.loads(deepest.read_text()) if deepest.is_file() else None}
        rtl = synth_rtl(folder, rep, prev, current, check)
        kept = _keep_sections(prev, rep, data, rtl)
        rec = make_record(
            "synth", command, data, commit=None,
            date=iso(rp.stat().st_mtime), mach=machine(), load_avg=None, rtl=rtl,
            note="moehub synth writes no run record: the command is read from the report's "
                 "sections, the date is report.json's, the machine the collecting one, the "
                 "load each section's load_at_start where the run recorded it; the RTL is "
                 "checked by regenerating its RTLIL"
                 + (f"; kept from the previous record (not in this report): {', '.join(kept)}, "
                    f"made by `{prev['command']}`" if kept else ""))
        written.append(write_record(dest, rec))
    return written


def _keep_sections(prev: dict | None, rep: dict, data: dict, rtl: dict) -> list:
    """A flow's section the new report lacks but the previous record of the same hub
    configuration holds (a build folder with only the ASAP7 run, the OSU018 one made
    earlier) is kept with its RTL verdict, as is the OSU018 run's deepest-path list; the
    report and ``rtl`` are completed in place. Returns the sections kept."""
    if not prev:
        return []
    old = (prev.get("data") or {}).get("report") or {}
    if old.get("hub") != rep.get("hub"):
        return []
    kept = [s for s in SECTIONS if s in old and s not in rep]
    for s in kept:
        rep[s] = old[s]
        rtl[s] = ((prev.get("rtl") or {}).get(s)
                  or {"sources_sha256": None, "rtlil_sha256": None, "how": "unknown"})
    if "asic" in kept and data.get("deepest_paths") is None:
        data["deepest_paths"] = prev["data"].get("deepest_paths")
    return kept


def recheck_synth(records: Path, check=None) -> list:
    """Check each synthesis record's hardware against the working tree without its
    build folder: per section, the RTLIL the working tree generates for the record's
    hub configuration against the digest the record holds of the synthesised RTLIL. A
    section whose hardware is unchanged (an edit to the sources that moves no gate) is
    current again; one whose hardware differs is marked as made from other RTL. Returns
    ``[(path, {section: verdict})]`` for the records it rewrote."""
    check = check or current_rtlil_digest
    current, fresh, out = rtl_sources_hash(), {}, []
    for name, rec in load_records(records, "synth"):
        cfg = (rec.get("data") or {}).get("report", {}).get("hub")
        if not isinstance(cfg, dict):
            raise ReportError(f"record {name}: data.report.hub is not a configuration: "
                              "collect it again from its synthesis folder")
        key = json.dumps(cfg, sort_keys=True)
        verdicts, changed = {}, False
        for section, rtl in (rec.get("rtl") or {}).items():
            if rtl.get("sources_sha256") == current or not rtl.get("rtlil_sha256"):
                continue
            if key not in fresh:
                with progress.stage(f"report: RTLIL of {cfg.get('name')} from the working tree",
                                    heartbeat=True):
                    fresh[key] = check(cfg)
            same = fresh[key] == rtl["rtlil_sha256"]
            rec["rtl"][section] = {
                "sources_sha256": current if same else None, "rtlil_sha256": rtl["rtlil_sha256"],
                "how": ("rechecked from the record: the working tree's RTLIL for this config "
                        "equals the synthesised one (src attributes aside)" if same else
                        "rechecked from the record: the synthesised RTLIL differs from the "
                        "working tree's")}
            verdicts[section], changed = ("current" if same else "older RTL"), True
        if changed:
            out.append((write_record(Path(records) / name, rec), verdicts))
    return out


# ----------------------------------------------------------------------------- validate records
VALIDATION_FIELDS = ("id", "use", "system", "metric", "model", "published", "ratio",
                     "tolerance", "ok", "hardware", "config", "source", "gap")


def _read_csv(path: Path, columns: tuple, flags: tuple) -> list:
    """``path`` (a CSV with a header) as typed rows: the four figures as floats, the
    ``flags`` columns as booleans; a missing column of ``columns`` is refused by name."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and set(columns) - set(rows[0]):
        raise ReportError(f"{path}: no column {sorted(set(columns) - set(rows[0]))[0]!r}")
    for r in rows:
        for k in ("model", "published", "ratio", "tolerance"):
            r[k] = float(r[k])
        for k in flags:
            r[k] = r[k] == "True"
    return rows


def read_validation_csv(path: Path) -> list:
    """``validation.csv`` of ``moehub validate`` as typed rows."""
    return _read_csv(path, VALIDATION_FIELDS, ("ok",))


def rerun(command: str, out: Path, about: str, extra: tuple = ()) -> dict:
    """Run ``moehub COMMAND [EXTRA...] --out OUT`` as a child process; return its run record
    (command, commit, start date, load at the start, wall and CPU seconds)."""
    out = Path(out).absolute()
    shown = os.path.relpath(out) if out.is_relative_to(Path.cwd()) else str(out)
    argv = ["moehub", command, *extra, "--out", shown]
    start, load0, t0, kids0 = time.time(), load(), time.monotonic(), os.times()
    with progress.stage(f"report: moehub {command} ({about})", heartbeat=True):
        proc = subprocess.run([sys.executable, "-m", "moehub.scripts.cli", *argv[1:]],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"moehub {command} exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-500:]}")
    kids1 = os.times()
    return {"command": " ".join(argv), "commit": runinfo.git_describe(), "date": iso(start),
            "load": load0, "wall_s": round(time.monotonic() - t0, 1),
            "cpu_s": round((kids1.children_user - kids0.children_user)
                           + (kids1.children_system - kids0.children_system), 1)}


def _csv_record(source: str, command: str, path: Path, rows: list, run: dict | None,
                dest: Path) -> Path:
    if run is None:
        run = {"command": command, "commit": None, "date": iso(path.stat().st_mtime), "load": None}
        note = (f"{command} writes no run record: the date is {path.name}'s, the commit and "
                "load unknown (--rerun records a run)")
    else:
        note = f"run by moehub report --rerun: {run['wall_s']} s wall, {run['cpu_s']} CPU s"
    rec = make_record(source, run["command"], {"rows": rows}, commit=run["commit"],
                      date=run["date"], mach=machine(), load_avg=run["load"], note=note)
    return write_record(dest, rec)


def _collect_csv(command: str, folder: Path, csv_name: str, reader, records: Path, about: str,
                 rerun_it: bool, extra: tuple = ()) -> list:
    """The record of ``moehub COMMAND``'s ``folder/csv_name`` (after running the command,
    with ``extra`` options, there with ``rerun_it``), read by ``reader``, written to
    ``records/COMMAND.json``."""
    run = rerun(command, folder, about, extra) if rerun_it else None
    path = folder / csv_name
    if not path.is_file():
        raise ReportError(f"{path}: not found (run 'moehub {command}', or "
                          f"'moehub report --collect {command} --rerun')")
    return [_csv_record(command, f"moehub {command}", path, reader(path), run,
                        Path(records, f"{command}.json"))]


def collect_validate(build: Path, records: Path, rerun_it: bool = False) -> list:
    """The record of ``<build>/results/validate/`` (after running ``moehub validate
    --slow`` there with ``rerun_it``: every case, the wide-EP ones too)."""
    return _collect_csv("validate", Path(build, "results", "validate"), "validation.csv",
                        read_validation_csv, records, "about 8 CPU-minutes", rerun_it,
                        extra=("--slow",))


CALIBRATION_FIELDS = ("id", "component", "what", "hardware", "system", "metric", "model",
                      "published", "unit", "ratio", "tolerance", "ok", "expected_miss",
                      "source", "reason")


def read_calibration_csv(path: Path) -> list:
    """``calibration.csv`` of ``moehub calibrate`` as typed rows."""
    return _read_csv(path, CALIBRATION_FIELDS, ("ok", "expected_miss"))


def collect_calibrate(build: Path, records: Path, rerun_it: bool = False) -> list:
    """The record of ``<build>/calibrate/`` (after running ``moehub calibrate`` there with
    ``rerun_it``)."""
    return _collect_csv("calibrate", Path(build, "calibrate"), "calibration.csv", read_calibration_csv,
                        records, "the component models against measurements", rerun_it)


# ----------------------------------------------------------------------------- headline records
def collect_headline(build: Path, records: Path) -> list:
    """A record per ``<build>/results/headline*/headline.json`` (its own run record gives
    the command, commit, date, machine and load)."""
    written = []
    for hp in sorted(Path(build, "results").glob("headline*/headline.json")):
        h = json.loads(hp.read_text())
        run = h.get("record") or {}
        ms = run.get("machine_start") or {}
        mach = {**machine(), "cores": ms.get("cpus", os.cpu_count())}
        data = {"grid": run.get("grid"), "rows": h.get("rows", []), "skipped": h.get("skipped", []),
                "wall_s": run.get("wall_s"), "cpu_s": run.get("cpu_s")}
        rec = make_record("headline", run.get("command", "moehub headline"), data,
                          commit=run.get("git"), date=run.get("started") or iso(hp.stat().st_mtime),
                          mach=mach, load_avg=ms.get("load_avg"))
        written.append(write_record(Path(records, "headline", f"{hp.parent.name}.json"), rec))
    return written


# ----------------------------------------------------------------------------- study records
def _json_number(x):
    """NaN (an empty cell of the study's CSV) as JSON null."""
    return None if isinstance(x, float) and x != x else x


def collect_study_v2(build: Path, records: Path) -> list:
    """A record per ``<build>/results/study-v2*/`` (``moehub study v2``: ``ablation.csv`` and
    its ``run.json``)."""
    from ..cosim.studies import v2
    written = []
    for cp in sorted(Path(build, "results").glob("study-v2*/ablation.csv")):
        folder = cp.parent
        run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
        rows = [{k: _json_number(v) for k, v in r.items()} for r in v2.read_rows(cp)]
        rec = make_record("study-v2", run.get("command", "moehub study v2"), {"rows": rows},
                          commit=run.get("git"), date=run.get("started") or iso(cp.stat().st_mtime),
                          mach=machine(), load_avg=None,
                          note="the load is not in the study's run.json; the hub rows' area and "
                               "deepest stage come from the synthesis reports the study read")
        written.append(write_record(Path(records, "study-v2", f"{folder.name}.json"), rec))
    return written


def collect_study_relay(build: Path, records: Path) -> list:
    """A record per ``<build>/results/study-relay*/`` (``python -m
    moehub.cosim.studies.relay``: ``relay.csv`` and its ``run.json``; the record is the last
    run's, with the points each run gave and the earlier runs whose points are kept)."""
    from ..cosim.studies import relay
    written = []
    for cp in sorted(Path(build, "results").glob("study-relay*/relay.csv")):
        folder = cp.parent
        run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
        rows = [{k: _json_number(v) for k, v in r.items()} for r in relay.read_rows(cp)]
        runs = [{k: r.get(k) for k in ("command", "git", "started", "wall_s", "cpu_s",
                                       "load_avg_1m", "points")}
                for r in run.get("earlier", []) + ([run] if run else [])]
        rec = make_record("study-relay", run.get("command", "python -m moehub.cosim.studies.relay"),
                          {"rows": rows, "runs": runs}, commit=run.get("git"),
                          date=run.get("started") or iso(cp.stat().st_mtime), mach=machine(),
                          load_avg=run.get("load_avg_1m"),
                          note="the load is the 1-minute load average before the (last) run; "
                               "data.runs: every run whose points are in the rows, each point "
                               "with the load before it")
        written.append(write_record(Path(records, "study-relay", f"{folder.name}.json"), rec))
    return written


# ----------------------------------------------------------------------------- simulator speed
def _collect_bench(source: str, path: Path, command: str, records: Path, note: str) -> list:
    """The record ``<records>/<source>.json`` of a benchmark's rows file ``path`` (its rows,
    each with the load before it, and the last run's record; ``command``: the producing
    command where the file has no run record)."""
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    run = doc.get("record") or {}
    rec = make_record(source, run.get("command", command), {"rows": doc.get("rows", [])},
                      commit=run.get("git"), date=run.get("started") or iso(path.stat().st_mtime),
                      mach=machine(), load_avg=None, note=note)
    return [write_record(Path(records, f"{source}.json"), rec)]


def collect_bench_scaling(build: Path, records: Path) -> list:
    """The record of ``<build>/results/bench-scaling/scaling.json`` (``bench_cosim.py
    --scaling``: its rows, each with the load before it, and the last run's record)."""
    return _collect_bench("bench-scaling", Path(build, "results", "bench-scaling", "scaling.json"),
                          "bench_cosim.py --scaling", records,
                          "rows of several runs of the benchmark (the record is the last's); "
                          "each row has the 1-minute load average before it")


def collect_bench_window(build: Path, records: Path) -> list:
    """The record of ``<build>/results/bench-window/window.json`` (``bench_cosim.py
    --window-error``: one row per point and system, each with the load before its point,
    and the last run's record)."""
    return _collect_bench("bench-window", Path(build, "results", "bench-window", "window.json"),
                          "bench_cosim.py --window-error", records,
                          "rows of several runs of the benchmark (the record is the last's), one "
                          "per point and system; each row has the 1-minute load average before "
                          "its point and the CPU seconds of its point's two whole runs")


def collect_paper_band(build: Path, records: Path) -> list:
    """The record of ``<build>/results/paper-band/band.json`` (``python -m
    moehub.cosim.studies.paper_band``: one row per model, tokens and compute-to-link ratio,
    each with the commit and load before it, and the last run's record)."""
    return _collect_bench("paper-band", Path(build, "results", "paper-band", "band.json"),
                          "python -m moehub.cosim.studies.paper_band", records,
                          "rows of one or more runs of the study (the record is the last's); "
                          "each row has its run's commit and the 1-minute load before it")


def collect_study_xmoe(build: Path, records: Path) -> list:
    """A record per ``<build>/results/study-xmoe*/`` (``moehub study xmoe``: its
    ``results.json``, every part's rows, and its ``run.json``)."""
    written = []
    for rp in sorted(Path(build, "results").glob("study-xmoe*/results.json")):
        folder = rp.parent
        run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
        rec = make_record("study-xmoe", run.get("command", "moehub study xmoe"),
                          json.loads(rp.read_text()), commit=run.get("git"),
                          date=run.get("started") or iso(rp.stat().st_mtime), mach=machine(),
                          load_avg=None, note="the load is not in the study's run.json")
        written.append(write_record(Path(records, "study-xmoe", f"{folder.name}.json"), rec))
    return written


def collect_bench_sim(build: Path, records: Path, check=None) -> list:
    """The record of ``<build>/results/bench-sim/sim.json`` (``bench_sim.py``: one row per
    config and simulator, each with the load before it, the hub and the RTL sources' hash
    it ran, and the last run's record); the hash at collection stands for rows without
    one. Rows of the working tree's sources get their hub's RTLIL digest
    (:func:`_fill_digests`, ``check``), which :func:`recheck_rows` compares after an edit."""
    paths = _collect_bench("bench-sim", Path(build, "results", "bench-sim", "sim.json"),
                           "python -m moehub.scripts.bench_sim", records,
                           "rows of one or more runs of the benchmark (the record is the last's), "
                           "one per config and simulator; each row has the 1-minute load average "
                           "before its simulation, the commit of its run and (rtl_sha256) the RTL "
                           "sources it simulated; sources_sha256: the RTL at collection")
    for p in paths:
        rec = read_record(p)
        _fill_digests(rec["data"]["rows"], check)
        rec["rtl"] = {"bench-sim": {"sources_sha256": rtl_sources_hash()}}
        write_record(p, rec)
    return paths


def _digest_of(check=None):
    """``digest(row)``: :func:`current_rtlil_digest` (or ``check``) of a row's hub config,
    or of its unit (``unit``: a ``moehub synth-unit`` row; ``check(hub, unit=...)``),
    computed once per config and unit (an elaboration each: seconds for tiny, minutes for
    the default configs)."""
    check, fresh = check or current_rtlil_digest, {}

    def digest(row: dict) -> str:
        hub, unit = row["hub"], row.get("unit")
        key = json.dumps([unit, hub], sort_keys=True)
        if key not in fresh:
            what = f"{unit} of {hub.get('name')}" if unit else hub.get("name")
            with progress.stage(f"report: RTLIL of {what} from the working tree", heartbeat=True):
                fresh[key] = check(hub, unit=unit) if unit else check(hub)
        return fresh[key]
    return digest


def _undigested(rows: list, current: str) -> list:
    """The rows of the working tree's RTL sources that name their hub but hold no digest."""
    return [r for r in rows if isinstance(r.get("hub"), dict) and r.get("rtl_sha256") == current
            and not r.get("rtlil_sha256")]


def _fill_digests(rows: list, check=None) -> None:
    """Each row of a per-config run that ran the working tree's RTL sources (its
    ``rtl_sha256``) and names its hub (``hub``) gets the digest of that hub's RTLIL
    (``rtlil_sha256``, :mod:`moehub.synth.digest`): what :func:`recheck_rows` later
    compares to tell an edit that moved none of its gates."""
    digest = _digest_of(check)
    for r in _undigested(rows, rtl_sources_hash()):
        r["rtlil_sha256"] = digest(r)


#: the per-config records whose rows carry their hub and its RTLIL's digest (a unit's
#: rows: the unit's RTLIL for that hub config)
ROW_RECHECKED = ("coverage", "soak", "equiv", "bench-sim", "synth-unit")


def recheck_rows(records: Path, check=None) -> list:
    """Check each row of the per-config records (:data:`ROW_RECHECKED`) made from other RTL
    sources than the working tree's against the working tree's hardware, from the record
    alone: the RTLIL the working tree generates for the row's hub against the digest the
    row holds. A row whose hardware is unchanged is current again (``rtl_sha256`` the
    working tree's, ``rtl_how`` saying why); one whose hardware differs, or that holds no
    digest, stays older. Rows of the working tree's sources get their digest if they lack
    it. Returns ``[(path, {config: verdict})]`` for the records it rewrote."""
    digest, current, out = _digest_of(check), rtl_sources_hash(), []
    for source in ROW_RECHECKED:
        for name, rec in load_records(records, source):
            rows, verdicts = rec["data"]["rows"], {}
            missing = _undigested(rows, current)
            for r in missing:
                r["rtlil_sha256"] = digest(r)
            for r in rows:
                if r.get("rtl_sha256") in (None, current) or not r.get("rtlil_sha256") \
                        or not isinstance(r.get("hub"), dict):
                    continue
                row = f"{r['unit']} {r['config']}" if r.get("unit") else r["config"]
                if digest(r) == r["rtlil_sha256"]:
                    r["rtl_sha256"] = current
                    r["rtl_how"] = ("rechecked from the record: the working tree's RTLIL for this "
                                    "config equals the one it ran (src attributes aside)")
                    verdicts[row] = "current"
                else:
                    verdicts[row] = OLDER
            if verdicts or missing:
                out.append((write_record(Path(records) / name, rec), verdicts))
    return out


def _record_summaries(source: str, paths: list, dest: Path, command: str, note: str,
                      section: str, drop=("out",), from_run=("git", "started", "command"),
                      last_command: bool = False, digests=False, check=None, keep=None) -> list:
    """One record of several runs' summary files (``paths``: JSON, each with its run's record
    under ``record``), one row per file with the run's ``from_run`` keys; a file without a
    run record (written before the command kept one) is left out. Dated and attributed by
    the last run (its command line too with ``last_command``, else ``command``); the RTL
    sources' digest at collection (``rtl.<section>``) marks rows an RTL edit later leaves
    older, where a row has no ``rtl_sha256`` of its own; with ``digests`` each row that
    names its hub gets its RTLIL's digest (:func:`_fill_digests`, ``check``). ``keep``
    (a row's key): the rows of the record already at ``dest`` whose key no new row has
    stay, each with the sources' hash it was made from (so a build folder holding some
    runs completes the record rather than replacing it)."""
    rows, runs = [], []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        run = doc.pop("record", None)
        if not run:
            continue
        for key in drop:
            doc.pop(key, None)
        rows.append({**doc, **{k: run.get(k) for k in from_run}})
        runs.append(run)
    if not rows:
        return []
    if digests:
        _fill_digests(rows, check)
    if keep and Path(dest).is_file():
        old = read_record(dest)
        made = _g(old, "rtl", section, "sources_sha256")
        new = {keep(r) for r in rows}
        rows = [{"rtl_sha256": made, **r} for r in old["data"]["rows"] if keep(r) not in new] + rows
    last = max(runs, key=lambda r: r.get("started") or "")
    rec = make_record(source, (last_command and last.get("command")) or command, {"rows": rows},
                      commit=last.get("git"), date=last.get("started"), mach=machine(),
                      load_avg=rows[-1].get("load"), note=note)
    rec["rtl"] = {section: {"sources_sha256": rtl_sources_hash()}}
    return [write_record(dest, rec)]


def collect_synth_unit(build: Path, records: Path, check=None) -> list:
    """The record of every ``<build>/synth/unit-*/unit.json`` (``moehub synth-unit``: one
    unit's area, deepest path and N5 projection, with its run's record, its hub config and
    the sources' hash), one row per unit and config; each row of the working tree's sources
    gets the digest of its unit's RTLIL (``check``), which :func:`recheck_rows` compares
    later. The record's rows of other units and configs stay (a unit is run at a time)."""
    from ..synth.units import SUMMARY_JSON
    return _record_summaries(
        "synth-unit", sorted(Path(build, "synth").glob(f"unit-*/{SUMMARY_JSON}")),
        Path(records, "synth-unit.json"), "moehub synth-unit UNIT ...",
        "one row per unit and config, each with its own run's command and commit, the hub "
        "config and the RTL sources' hash it synthesised (rtl_sha256); sources_sha256: the "
        "RTL at collection", "units", digests=True, check=check,
        keep=lambda r: (r["unit"], r["config"]))


def collect_soak(build: Path, records: Path, check=None) -> list:
    """The record of every ``<build>/soak/*/summary.json`` (``moehub soak``: one config and
    seed each, with its run's record and the load before it), one row per config and seed.
    The record's rows of other configs and seeds stay (a build folder holding some soaks
    completes the record)."""
    return _record_summaries(
        "soak", sorted(Path(build, "soak").glob("*/summary.json")), Path(records, "soak.json"),
        "moehub soak", "one row per config and seed, each with its own run's command, commit "
        "and the load before it; sources_sha256: the RTL at collection", "soak",
        drop=(), from_run=("git", "started", "command", "cpu_s"), last_command=True,
        digests=True, check=check, keep=lambda r: (r["config"], r["seed"]))


def collect_coverage(build: Path, records: Path, check=None) -> list:
    """The record of every ``<build>/coverage/run-<config>.json`` (``moehub coverage``: one
    config's coverage run, with its run's record, the load before it and the RTL sources'
    hash it simulated), one row per config. The record's rows of other configs stay (a
    build folder holding some runs completes the record)."""
    from ..verif.coverage_run import SUMMARY_PREFIX
    return _record_summaries(
        "coverage", sorted(Path(build, "coverage").glob(f"{SUMMARY_PREFIX}*.json")),
        Path(records, "coverage.json"), "moehub coverage",
        "one row per config, each with its own run's command and commit, the load before it "
        "and the RTL sources' hash it simulated (rtl_sha256); sources_sha256: the RTL at "
        "collection", "coverage", drop=(), from_run=("git", "started", "command"),
        last_command=True, digests=True, check=check, keep=lambda r: r["config"])


def collect_equiv(build: Path, records: Path, check=None) -> list:
    """The record of every ``<build>/synth/equiv/<config>/result.json`` (``moehub equiv``:
    one config's proof against a revision, with its run's record, the load before it and
    the RTL sources' hash of the working tree it proved), one row per config; a result
    written before proofs kept a run record is left out. The record's rows of other
    configs stay (a build folder holding some proofs completes the record)."""
    return _record_summaries(
        "equiv", sorted(Path(build, "synth", "equiv").glob("*/result.json")),
        Path(records, "equiv.json"), "moehub equiv",
        "one row per config, each with its own run's command and commit, the load before it "
        "and the RTL sources' hash it proved (rtl_sha256); sources_sha256: the RTL at "
        "collection", "equiv", drop=("out", "unproven", "notes", "tool"),
        from_run=("git", "started", "command"), last_command=True, digests=True, check=check,
        keep=lambda r: r["config"])


def collect_mutate(build: Path, records: Path) -> list:
    """The record of ``<build>/mutation/report.json`` (``moehub mutate``: a finished
    campaign's score per file and operator, its projection and run record; the survivors
    and proven-equivalent mutants kept, the others counted). A report of a campaign still
    running (or of one before reports kept a run record) is not recorded."""
    path = Path(build, "mutation", "report.json")
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    run = doc.get("record")
    if not run:
        return []
    kept = [m for m in doc.get("mutants", []) if m.get("result") in ("survived", "equivalent")]
    data = {k: doc.get(k) for k in ("meta", "score", "by_file", "by_operator", "mean_s",
                                    "projection_s", "full_set", "files")}
    data.update(kept=kept, rtl_sha256=run.get("rtl_sha256"), load=run.get("load"))
    rec = make_record("mutate", run.get("command", "moehub mutate"), data, commit=run.get("git"),
                      date=run.get("started"), mach=machine(), load_avg=(run.get("load") or [None])[0],
                      note="the load is the 1-minute load average before the campaign; data.kept: "
                           "the survivors and the mutants proven equivalent, the others counted in "
                           "the scores; rtl_sha256: the RTL the mutants were made from")
    return [write_record(Path(records, "mutate.json"), rec)]


def _csv_value(text: str):
    """A cell of a CSV the explorer wrote as JSON's value: empty -> None, True / False,
    integers and floats as numbers, anything else the text."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def collect_explore(build: Path, records: Path) -> list:
    """A record per ``<build>/results/explore-*/points.csv`` (``moehub explore``: one row per
    point, and its ``run.json``); the RTL sources' hash at collection marks the rows an RTL
    edit later leaves older (a point's cache key holds the sources it was evaluated on); the
    grid's axes (``spec.yaml``) name the points that failed."""
    import yaml
    written = []
    for cp in sorted(Path(build, "results").glob("explore-*/points.csv")):
        folder = cp.parent
        run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
        with open(cp, newline="") as f:
            rows = [{k: _csv_value(v) for k, v in r.items()} for r in csv.DictReader(f)]
        spec = folder / "spec.yaml"
        axes = (yaml.safe_load(spec.read_text()) or {}).get("axes") if spec.is_file() else None
        data = {"rows": rows, "axes": axes,
                **{k: run.get(k) for k in ("points", "evaluated", "cached", "failed", "cluster",
                                           "wall_s", "cpu_s")}}
        rec = make_record("explore", run.get("command", "moehub explore"), data,
                          commit=run.get("git"), date=run.get("started") or iso(cp.stat().st_mtime),
                          mach=machine(), load_avg=None,
                          note="the load is not in the exploration's run.json; each row has its "
                               "point's wall seconds (synthesis and co-simulation) and host")
        rec["rtl"] = {"explore": {"sources_sha256": rtl_sources_hash()}}
        written.append(write_record(Path(records, "explore", f"{folder.name}.json"), rec))
    return written


def _formal_job_now(path: Path) -> bool:
    """Whether a formal work folder's ``result.json`` is of a job of the full set as the
    property sets define it now (its set's mode, any depth)."""
    from ..verif.formal.sets import SETS
    doc = json.loads(Path(path).read_text())
    s = SETS.get(doc.get("set"))
    return s is not None and doc.get("mode") in s.modes


def collect_formal(build: Path, records: Path) -> list:
    """The record of every ``<build>/formal/<set>-<mode>/result.json`` (``moehub formal``:
    one job each, with its run's record, the load before it and the hash of the RTL sources
    it proved), one row per job; a work folder of a run before jobs wrote one is left out,
    and so is one of a job its set no longer has (a mode dropped, a set renamed: its folder
    stays in the build folder, its result is no job of the full set)."""
    return _record_summaries(
        "formal", [p for p in sorted(Path(build, "formal").glob("*/result.json")) if _formal_job_now(p)],
        Path(records, "formal.json"),
        "moehub formal", "one row per job (property set and mode), each with its own run's "
        "command and commit, the load before it and the RTL sources' hash it proved "
        "(rtl_sha256, what the table's older-RTL mark reads); sources_sha256: the RTL at "
        "collection", "formal", drop=(), from_run=("git", "command"), last_command=True)


COLLECTORS = ("synth", "validate", "calibrate", "headline", "study-v2", "bench-scaling",
              "bench-window", "study-relay", "synth-unit", "soak", "formal", "bench-sim", "explore",
              "coverage", "equiv", "mutate", "paper-band", "study-xmoe")


# ----------------------------------------------------------------------------- rendering
def _date(rec: dict) -> str:
    d = rec["date"] or ""
    try:
        return datetime.fromisoformat(d).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return d or "date unknown"


def caption(recs: list) -> str:
    """Each record a table rests on, once: file, command, date. The commit a record was made
    at stays in the record (``commit``; a table marks rows from older RTL): the guides carry
    no commit names: a revision a command names (``--ref <hash>``) reads ``--ref REV``."""
    parts = [f"`records/{name}`: `{_REF.sub('--ref REV', rec['command'])}`, {_date(rec)}"
             for name, rec in recs]
    return "*From " + "; ".join(parts) + ".*"


#: a command's ``--ref`` naming a commit by its hash
_REF = re.compile(r"--ref[ =][0-9a-f]{7,40}(?![0-9a-z])")


def older(rec: dict, section: str, current: str) -> bool:
    """Whether a record's section was made from other RTL sources than ``current``."""
    return ((rec.get("rtl") or {}).get(section) or {}).get("sources_sha256") != current


def row_older(row: dict, rec: dict, section: str, current: str) -> bool:
    """Whether a row was made from other RTL than ``current``: by its own ``rtl_sha256``
    (a per-config run's, which :func:`recheck_rows` keeps current while its hardware is
    unchanged), else by its record's section (:func:`older`)."""
    if row.get("rtl_sha256"):
        return row["rtl_sha256"] != current
    return older(rec, section, current)


def _cell(text) -> str:
    """Free text as one Markdown table cell (pipes escaped, one line)."""
    return " ".join(str(text).split()).replace("|", "\\|") if text else "–"


def _short(text, limit: int = 160) -> str:
    """The first clause of a free-text note (to ``;`` or a sentence's end), cut at a word
    before ``limit`` characters with an ellipsis; the whole note stays in the record."""
    text = " ".join(str(text or "").split())
    first, depth = text, 0
    for i, ch in enumerate(text):            # the first '; ' or sentence end outside brackets
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and (text.startswith("; ", i) or re.match(r"\. [A-Z]", text[i:i + 3])):
            first = text[:i]
            break
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0] + " …"
    return _cell(first + (" …" if len(first) < len(text) and not first.endswith("…") else ""))


def _g(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _rng(x, spec: str) -> str:
    if isinstance(x, dict) and "nominal" in x:
        return f"{x['nominal']:{spec}} ({x['low']:{spec}}–{x['high']:{spec}})"
    return "–" if x is None else f"{x:{spec}}"


def _verdict_cells(section: str, sec: dict, hub: dict) -> tuple:
    """(area, deepest stage, fmax, verdict at 1.98 GHz, link bandwidth at 1.98 GHz)."""
    top = _g(sec, "modules", "top") or {}
    path = top.get("path") or {}
    route = f" `{path['from']}` → `{path['to']}`" if path.get("from") else ""
    lanes_bw = (_g(sec, "line_rate", "at_h100_clock", "GBps")
                or hub["lanes"] * hub["chunk_bytes"] * H100_CLOCK_GHZ)
    target = hub.get("link_GBps")
    bw = (f"{lanes_bw:.0f} of {target:g} GB/s: " + ("PASS" if lanes_bw >= target else "FAIL")
          if target else "–")
    if section == "asic":
        n5 = top.get("n5") or {}
        area = (f"{top['gate_equivalents'] / 1e3:,.0f}k GE; "
                f"{_g(n5, 'total_mm2', 'nominal') or 0:.4f} mm² at N5")
        h = _g(sec, "line_rate", "at_h100_clock") or {}
        stage = f"{top['fo4']:.2f} FO4{route}"
        fmax = f"{_rng(n5.get('fmax_n5_GHz'), '.2f')} GHz at N5"
        budget = _g(h, "budget_fo4", "nominal")
        verdict = (f"**{h.get('timing', '–')}** ({top['fo4']:.2f} of "
                   + ("–" if budget is None else f"{budget:.2f}") + " FO4)")
        return area, stage, fmax, verdict, bw
    a = sec.get("area") or {}
    area = (f"{a['cell_area_um2']:,.0f} µm² ({a['nand2_eq'] / 1e3:.0f}k NAND2 eq.); "
            f"{_g(a, 'n5_mm2', 'nominal') or 0:.4f} mm² at N5")
    # the deepest family's FO4 with its own path (the top's path is the worst-slack one,
    # which a flop's setup can make another path than the deepest logic)
    deep = (sec.get("deepest") or [None])[0] or {}
    if "deepest_fo4" in sec and deep.get("from"):
        route = f" `{deep['from']}` → `{deep['to']}`"
    stage = f"{sec.get('deepest_fo4', top.get('fo4', 0)):.2f} FO4{route}"
    lr = sec.get("line_rate") or {}
    fmax = f"{_rng(lr.get('fmax_GHz'), '.2f')} GHz"
    h, n5 = lr.get("at_h100_clock") or {}, lr.get("n5_scaled") or {}
    verdict = f"**{h.get('timing', '–')}** ({1000 * h.get('margin_ns', 0):+.0f} ps)"
    if section == "asap7_tt" and n5:
        verdict += f"; at N5 (÷ {n5['factor']:g}): **{n5['timing']}** ({1000 * n5['margin_ns']:+.0f} ps)"
    return area, stage, fmax, verdict, bw


def _config_order(recs: list) -> list:
    from ..spec.config import HUB_CONFIGS
    order = {n: i for i, n in enumerate(HUB_CONFIGS)}
    return sorted(recs, key=lambda nr: (order.get(nr[1]["data"]["config"], len(order)),
                                        nr[1]["data"]["config"]))


def render_hub_verdicts(recs: list, current: str) -> str:
    """Per shipped hub config and synthesis flow: area, the deepest stage (FO4 and path),
    fmax, the timing verdict at the H100's 1.98 GHz and whether its lanes carry the
    config's link there (``moehub synth`` reports). A protocol-v2 variant's record
    (``--set``) is ``v2-hubs``' and ``asap7``'s row, not this table's."""
    from ..spec.config import HUB_CONFIGS, load_hub_config
    recs = [(n, r) for n, r in recs if r["data"]["config"] in HUB_CONFIGS]
    if not recs:
        raise ReportError("table 'hub-verdicts': no synth record (records/synth/*.json; "
                          "make them with 'moehub report --collect synth')")
    out = ["| hub | flow | area | deepest stage | fmax | at 1.98 GHz | lanes at 1.98 GHz vs link |",
           "|---|---|---|---|---|---|---|"]
    for name, rec in _config_order(recs):
        rep = rec["data"]["report"]
        for section, flow in SECTIONS.items():
            if section not in rep:
                continue
            h = rep["hub"]
            shape = (f" ({h['lanes']} lanes × {h['chunk_bytes']} B, {h['data_bits']}-bit)"
                     if {"lanes", "chunk_bytes", "data_bits"} <= set(h) else "")
            hub = (f"`{rec['data']['config']}`{shape}"
                   + (f" **{OLDER}**" if older(rec, section, current) else ""))
            cells = _verdict_cells(section, rep[section], rep["hub"])
            out.append(f"| {hub} | {flow} | " + " | ".join(cells) + " |")
    done = {rec["data"]["config"] for _, rec in recs}
    for name in HUB_CONFIGS:                 # every shipped hub has a row, run or not
        if name not in done:
            cfg = load_hub_config(name)
            out.append(f"| `{name}` ({cfg.lanes} lanes × {cfg.chunk_bytes} B) | no synthesis "
                       f"record: `moehub synth --config {name}`, then `moehub report --collect "
                       "synth` | – | – | – | – | – |")
    return "\n".join(out) + "\n\n" + caption(_config_order(recs)) + "\n"


def render_asap7(recs: list, current: str) -> str:
    """``moehub synth-table``'s table (ASAP7 TT/SS beside the OSU018 projection) on the
    recorded reports: its own row generator, fed the recorded report.json files."""
    from ..synth import asap7_table
    recs = [(n, r) for n, r in _config_order(recs)
            if "asap7_tt" in r["data"]["report"] or "asap7_ss" in r["data"]["report"]]
    if not recs:                # (a new synthesis of a config drops its stale ASAP7 sections)
        return ("*No synthesis record has an ASAP7 section: `moehub synth --config <hub> --lib "
                "asap7 [--corner ss]`, then `moehub report --collect synth`.*\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="moehub-report-") as tmp:
        for _, rec in recs:
            d = Path(tmp, rec["data"]["config"])
            d.mkdir()
            (d / "report.json").write_text(json.dumps(rec["data"]["report"]))
            if rec["data"].get("deepest_paths"):
                (d / "deepest_paths.json").write_text(json.dumps(rec["data"]["deepest_paths"]))
            row = asap7_table.row(rec["data"]["config"], d)
            if any(older(rec, s, current) for s in ("asap7_tt", "asap7_ss")
                   if s in rec["data"]["report"]):
                row = row.replace(f"| {rec['data']['config']} |",
                                  f"| {rec['data']['config']} ({OLDER}) |", 1)
            rows.append(row)
    return "\n".join([asap7_table.HEADER, asap7_table.ALIGN, *rows]) + "\n\n" + caption(recs) + "\n"


def _yosys_of(flow: str) -> str:
    """The Yosys build a section's flow line names: native or WebAssembly (YoWASP)."""
    return "Wasm" if "yowasp" in flow.lower() else "native"


def _wall_steps(w: dict, *keys) -> str:
    return " / ".join(f"{w[k]:,.0f}" if k in w else "–" for k in keys)


def render_synth_wall(recs: list, current: str) -> str:
    """Wall seconds of each recorded ``moehub synth`` run, per flow and step (the sections'
    ``wall_s``), with the 1-minute load as each run started (``load_at_start``; runs made
    before it was recorded show a dash): what a run of a hub costs on the recording
    machine. An SS run that re-timed the TT netlist reports its own OpenSTA and
    deepest-path steps only."""
    if not recs:
        raise ReportError("table 'synth-wall': no synth record (records/synth/*.json; "
                          "make them with 'moehub report --collect synth')")
    out = ["| hub | cells (OSU018) | OSU018 s: Verilog / Yosys / OpenSTA / total "
           "| ASAP7 TT s: Yosys / OpenSTA / deepest paths / total | ASAP7 SS s (re-timing) "
           "| load at start: OSU018 / TT / SS |",
           "|---|---:|---:|---:|---:|---:|"]
    machines = set()
    for name, rec in _config_order(recs):
        rep = rec["data"]["report"]
        hub = rec["data"]["config"] + (f" ({OLDER})" if any(older(rec, s, current) for s in SECTIONS
                                                            if s in rep) else "")
        a, tt, ss = rep.get("asic"), rep.get("asap7_tt"), rep.get("asap7_ss")
        cells = f"{a['modules']['top']['cells']:,}" if a else "–"
        osu = _wall_steps(a["wall_s"], "verilog", "yosys", "sta", "total") if a else "–"
        att = (_wall_steps(tt["wall_s"], "yosys", "sta", "sta_paths", "total") + f" ({_yosys_of(tt['flow'])} Yosys)"
               if tt else "–")
        ass = f"{ss['wall_s']['sta'] + ss['wall_s'].get('sta_paths', 0):,.0f}" if ss else "–"
        load = " / ".join(f"{sec['load_at_start'][0]:.1f}" if sec and sec.get("load_at_start") else "–"
                          for sec in (a, tt, ss))
        out.append(f"| {hub} | {cells} | {osu} | {att} | {ass} | {load} |")
        m = rec.get("machine") or {}
        machines.add(f"{m.get('cores', '?')} cores ({m.get('model', 'CPU unknown')})")
    return ("\n".join(out) + "\n\nMachine: " + "; ".join(sorted(machines)) + "; load: the 1-minute "
            "load average as the run started (other jobs beside it stretch its times). "
            + caption(_config_order(recs)) + "\n")


def _with_ep(r: dict) -> dict:
    """A headline row whose system names its expert-parallel width (the GPUs the layer
    spans: 64 of an NVL72's 72)."""
    return {**r, "system_config": f"{r['system_config']} (EP{r['gpus']})"} if r.get("gpus") else r


#: headline tables of one record each (table -> the record's name, ``records/headline/
#: <name>.json``); the ``headline`` map shows every other headline record
HEADLINE_APART = {"headline-ratio": "headline-ratio"}


def render_headline_of(table: str):
    """The renderer of the headline table ``table``: its own record (:data:`HEADLINE_APART`),
    or for ``headline`` every record no other table shows."""
    def render(recs: list, current: str) -> str:
        own = HEADLINE_APART.get(table)
        stem = {n: Path(n).stem for n, _ in recs}
        mine = [(n, r) for n, r in recs
                if (stem[n] == own if own else stem[n] not in HEADLINE_APART.values())]
        return render_headline(mine, current, table)
    return render


def render_headline(recs: list, current: str, table: str = "headline") -> str:
    """``moehub headline``'s map over the recorded grids ``recs``: per system, model and
    compute-to-link ratio, the hub's speedup over the best software of today (letter) and
    over the papers' kind of baseline, per tokens/GPU."""
    from ..cosim.headline import SHORT, pivot_md
    if not recs:
        name = HEADLINE_APART.get(table, "*")
        raise ReportError(f"table {table!r}: no headline record (records/headline/{name}.json; "
                          "'moehub report --collect headline')")
    recs = sorted(recs, key=lambda nr: (nr[1]["date"] or "", nr[0]))
    rows, skipped, seen = [], [], set()
    for _, rec in recs:
        for r in rec["data"]["rows"]:
            key = (r["system_config"], r["model"], r["compute_link_ratio"], r["tokens_per_gpu"])
            if key in seen:
                raise ReportError(f"table {table!r}: the point {key} is in two records")
            seen.add(key)
            rows.append(_with_ep(r))
        gpus = {r["system_config"]: r.get("gpus") for r in rec["data"]["rows"]}
        skipped += [_with_ep({"gpus": gpus.get(r["system_config"]), **r})
                    for r in rec["data"].get("skipped") or []]
    letters = ", ".join(f"{v} {k}" for k, v in SHORT.items())
    return (pivot_md(rows, skipped) + "\n\n" + f"Cells: the fastest hub variant's speedup over "
            f"the fastest software of today ({letters}) / over the fastest of the papers' kind "
            "(named); in brackets the hub variant (v1; ec early counts, mc multicast, pg paged, "
            "rl relay hubs, rd reduce on combine: across nodes only); "
            "skip: not run; —: not in the recorded grids; †: stopped unconverged at the pass limit, "
            "followed by the speedup's band over the last passes' layer times. "
            + caption(recs) + "\n")


def _validation(recs: list) -> tuple:
    if len(recs) != 1:
        raise ReportError("validation tables: no validate record (records/validate.json; "
                          "'moehub report --collect validate [--rerun]')")
    name, rec = recs[0]
    rows = rec["data"]["rows"]
    return rec, rows, [r for r in rows if r["use"] == "validation"]


def _pct(tols) -> str:
    """Tolerances as "±30 %" (one value) or "±20-30 %"."""
    lo, hi = min(tols), max(tols)
    return f"±{100 * lo:g} %" if lo == hi else f"±{100 * lo:g}-{100 * hi:g} %"


def render_validation_summary(recs: list, current: str, records: Path = RECORDS) -> str:
    """The co-simulation's score in one table: N of M published end-to-end figures within
    their tolerance and the misses (``moehub validate``), and, where its record exists,
    N of M component measurements (``moehub calibrate``)."""
    rec, rows, val = _validation(recs)
    miss = [r for r in val if not r["ok"]]
    misses = ", ".join(f"`{r['id']}` ×{r['ratio']:.2f}" for r in miss) or "none"
    out = ["| check | within tolerance | misses |", "|---|---|---|",
           f"| `moehub validate`: published end-to-end figures ({_pct([r['tolerance'] for r in val])}) "
           f"| **{len(val) - len(miss)} of {len(val)}** | {misses} |"]
    used = list(recs)
    cal = load_records(records, "calibrate")
    if cal:
        crows = cal[0][1]["data"]["rows"]
        cmiss = [r for r in crows if not r["ok"]]
        expected = sum(r["expected_miss"] for r in cmiss)
        out.append(f"| `moehub calibrate`: component measurements | **{len(crows) - len(cmiss)} of "
                   f"{len(crows)}** | {len(cmiss)}"
                   + ((", all expected" if expected == len(cmiss) else f", {expected} of them expected")
                      + ", each with its reason" if cmiss else "") + " |")
        used += cal
    return "\n".join(out) + "\n\n" + caption(used) + "\n"


def render_validation_misses(recs: list, current: str) -> str:
    """Each validation case outside its tolerance with what the model lacks (the first
    clause of the case's note; ``moehub validate``)."""
    rec, rows, val = _validation(recs)
    miss = [r for r in val if not r["ok"]]
    out = [f"{len(miss)} of {len(val)} validation cases outside their tolerance."]
    if miss:
        out += ["", "| missed case | system | metric | model / published | tolerance | what the model lacks |",
                "|---|---|---|---:|---:|---|"]
        out += [f"| `{r['id']}` | {r['system']} | {r['metric']} | {r['ratio']:.2f} | "
                f"±{r['tolerance']:g} | {_short(r['gap'])} |" for r in miss]
    return "\n".join(out) + "\n\n" + caption(recs) + "\n"


def render_validation_cases(recs: list, current: str) -> str:
    """Every case of ``moehub validate``: the model's figure beside the published one."""
    rec, rows, _ = _validation(recs)
    out = ["| case | use | system | metric | model | published | ratio | tolerance | verdict |",
           "|---|---|---|---|---:|---:|---:|---:|---|"]
    out += [f"| `{r['id']}` | {r['use']} | {r['system']} | {r['metric']} | {r['model']:.1f} | "
            f"{r['published']:g} | {r['ratio']:.2f} | ±{r['tolerance']:g} | "
            f"{'ok' if r['ok'] else '**miss**'} |" for r in rows]
    return "\n".join(out) + "\n\n" + caption(recs) + "\n"


def render_calibration_summary(recs: list, current: str) -> str:
    """N of M calibration points within tolerance; the misses, each expected or not, with
    the reason (``moehub calibrate``)."""
    if len(recs) != 1:
        raise ReportError("table 'calibration-summary': no calibrate record (records/calibrate.json; "
                          "'moehub report --collect calibrate [--rerun]')")
    rows = recs[0][1]["data"]["rows"]
    miss = [r for r in rows if not r["ok"]]
    unexpected = [r for r in miss if not r["expected_miss"]]
    out = [f"**{len(rows) - len(miss)} of {len(rows)} calibration points within their tolerance**; "
           f"{len(miss)} misses, {len(miss) - len(unexpected)} of them expected (the reason below)."]
    if miss:
        out += ["", "| missed point | component | hardware | model / published | tolerance | expected | why |",
                "|---|---|---|---:|---:|---|---|"]
        out += [f"| `{r['id']}` | {r['component']} | {_cell(r['hardware'])} | {r['ratio']:.2f} | "
                f"±{r['tolerance']:g} | {'yes' if r['expected_miss'] else '**no**'} | "
                f"{_short(r['reason'])} |" for r in miss]
    return "\n".join(out) + "\n\n" + caption(recs) + "\n"


#: the protocol-v2 ablation tables: name -> (model, system config) of ``moehub study v2``
ABLATIONS = {f"v2-ablation-{m.split('-')[0]}-{sc}": (m, sc)
             for m in ("deepseek-v3", "mixtral-8x7b") for sc in ("h100x8", "h100x16-ib")}


def _synthesis_name(text) -> str:
    """The synthesis folder a study row names (``name (synthesised with ...); FO4 ...``)."""
    return re.split(r"[ ;:(]", str(text or "").strip(), maxsplit=1)[0]


def render_ablation(model: str, system: str):
    """The renderer of one (model, system) of ``moehub study v2``: the study's own table;
    a hub row whose area and deepest stage come from a synthesis is marked "older RTL"
    unless ``records/synth/<that synthesis>.json`` has its OSU018 section at the working
    tree's RTL ("RTL unchecked" when there is no such record)."""
    def fn(recs: list, current: str, records: Path = RECORDS) -> str:
        from ..cosim.studies import v2
        rows, used, seen = [], [], set()
        for name, rec in sorted(recs, key=lambda nr: (nr[1]["date"] or "", nr[0])):
            mine = [r for r in rec["data"]["rows"] if (r["model"], r["system_config"]) == (model, system)]
            for r in mine:
                key = (r["tokens_per_gpu"], r["row"])
                if key in seen:
                    raise ReportError(f"table of {model} on {system}: the row {key} is in two records")
                seen.add(key)
            if mine:
                used.append((name, rec))
                rows += mine
        if not rows:
            raise ReportError(f"table of {model} on {system}: no study-v2 record with it "
                              "(records/study-v2/*.json; run 'moehub study v2', then "
                              "'moehub report --collect study-v2')")
        synth = dict(load_records(records, "synth"))
        out = []
        for r in rows:
            r = {k: (float("nan") if v is None else v) for k, v in r.items()}
            if r["area_mm2_n5"] == r["area_mm2_n5"]:          # figures from a synthesis
                srec = synth.get(f"synth/{_synthesis_name(r['synthesis'])}.json")
                mark = ("RTL unchecked" if srec is None else
                        OLDER if older(srec, "asic", current) else "")
                if mark:
                    r["row"] += f" **{mark}**"
            out.append(r)
        text = v2.table(out).rstrip("\n")
        if len({r["tokens_per_gpu"] for r in out}) == 1:   # the docs' heading says it
            text = "\n".join(ln for ln in text.splitlines() if not ln.startswith("### ")).strip("\n")
        return text + "\n\n" + caption(used) + "\n"
    fn.__doc__ = f"``moehub study v2``'s table of {model} on {system}."
    return fn


def _relay_model(r: dict) -> str:
    from ..cosim.studies import relay
    return r.get("model") or relay.DEFAULT_MODEL


def _relay_system(r: dict) -> str:
    """A relay study row's system cell: the config and its nodes x GPUs, and the model
    where it is not the study's default."""
    from ..cosim.studies import relay
    m = _relay_model(r)
    return f"{r['system_config']} ({r['nodes']}×{r['gpus'] // r['nodes']})" + \
        ("" if m == relay.DEFAULT_MODEL else f", {m}")


def _relay_order(r: dict) -> tuple:
    from ..cosim.studies import relay
    order = {n: i for i, (n, _, _) in enumerate(relay.ROWS)}
    return (r["gpus"], r["tokens_per_gpu"], _relay_model(r) != relay.DEFAULT_MODEL, _relay_model(r),
            order.get(r["row"], len(order)), r["row"])


def _relay_rows(recs: list, table: str) -> tuple:
    """(rows, records used) of the study-relay records, oldest record first; a row in two
    records is an error naming it."""
    rows, used, seen = [], [], set()
    for name, rec in sorted(recs, key=lambda nr: (nr[1]["date"] or "", nr[0])):
        for r in rec["data"]["rows"]:
            key = (r["system_config"], r["tokens_per_gpu"], _relay_model(r), r["row"])
            if key in seen:
                raise ReportError(f"{table}: the row {key} is in two records")
            seen.add(key)
        if rec["data"]["rows"]:
            used.append((name, rec))
            rows += rec["data"]["rows"]
    if not rows:
        raise ReportError(f"{table}: no study-relay record (records/study-relay/*.json; "
                          "run 'python -m moehub.cosim.studies.relay', then "
                          "'moehub report --collect study-relay')")
    return rows, used


def render_relay_critical(recs: list, current: str) -> str:
    """Where each ablation row's layer time goes on the GPU that ends last (the study's
    ``critical_*_us`` columns, rows of runs that recorded them): µs per phase kind, the
    first running at each instant; idle is waiting for other GPUs' rows or outputs."""
    from ..cosim.studies import relay
    rows, used = _relay_rows(recs, "relay-critical")
    rows = [r for r in rows if r.get("critical_gpu") is not None]
    if not rows:
        raise ReportError("relay-critical: no study-relay row with the critical GPU's breakdown "
                          "(rerun 'python -m moehub.cosim.studies.relay')")
    used = [(n, rec) for n, rec in used if any(r.get("critical_gpu") is not None for r in rec["data"]["rows"])]
    kinds = list(relay.CRITICAL.items())
    head = ["system (nodes×GPUs)", "tokens/GPU", "row", "layer µs", "GPU", *(k for k, _ in kinds)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=_relay_order):
        cells = [_relay_system(r), r["tokens_per_gpu"], _cell(r["row"]),
                 f"{r['layer_us']:.0f}", r["critical_gpu"],
                 *(f"{r[f'critical_{slug}_us'] or 0:.0f}" for _, slug in kinds)]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(out) + "\n\n" + caption(used) + "\n"


def render_relay_ablation(recs: list, current: str) -> str:
    """The relay-hub ablation (``python -m moehub.cosim.studies.relay``): per system config
    and tokens/GPU, the protocol-v2 hub, + relay, + relay + reduce and DeepEP normal mode;
    a row whose passes did not reach the fixed point is marked †; the study's default
    points no record holds are named under the table."""
    from ..cosim.studies import relay
    rows, used = _relay_rows(recs, "relay-ablation")
    head = ["system (nodes×GPUs)", "tokens/GPU", "row", "layer µs", "vs hub v2", "vs DeepEP",
            "NIC GB dispatch / combine", "NVLink GB dispatch / combine", "passes"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    unconverged = 0
    f = lambda x, spec, unit="": "–" if x is None else format(x, spec) + unit
    for r in sorted(rows, key=_relay_order):
        mark = ""
        if r["converged"] is not True:
            mark, unconverged = " †", unconverged + 1
        cells = [_relay_system(r), r["tokens_per_gpu"], _cell(r["row"]),
                 f(r["layer_us"], ".0f") + mark, f(r["vs_hub_v2"], ".2f", "×"),
                 f(r["vs_deepep"], ".2f", "×"),
                 f"{f(r['dispatch_nic_GB'], '.3f')} / {f(r['combine_nic_GB'], '.3f')}",
                 f"{f(r['dispatch_nvlink_GB'], '.3f')} / {f(r['combine_nvlink_GB'], '.3f')}",
                 f"{r['passes']}" + mark]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    notes = []
    if unconverged:
        from ..cosim.systems import MAX_PASSES
        notes.append(f"† not converged: the co-simulation's passes (at most {MAX_PASSES}) "
                     "ended before the layer reached its fixed point; the time and speedups "
                     "are the last pass's, which still moved a GPU's end time by more than "
                     "the tolerance (`residual_us` in the record).")
    have = {(r["system_config"], r["tokens_per_gpu"]) for r in rows if _relay_model(r) == relay.DEFAULT_MODEL}
    missing = [f"{s} at {t}" for s in relay.DEFAULT_SYSTEMS for t in relay.DEFAULT_TOKENS
               if (s, t) not in have]
    if missing:
        notes.append("Not run: " + ", ".join(missing) + " tokens/GPU.")
    runs = sum(len(rec["data"].get("runs") or [None]) for _, rec in used)
    if runs > 1:
        notes.append(f"The rows come from {runs} runs of the study (each record's `data.runs`: "
                     "command, commit, its points and the load before each).")
    return "\n".join(out) + "\n\n" + "".join(n + "\n\n" for n in notes) + caption(used) + "\n"


#: the scaling tables: which systems' rows each shows (``None``: every system)
SCALING_TABLES = {"cosim-scaling": None, "cosim-scaling-costly": ("bulk", "deepep_ll", "hub")}


def render_scaling(systems):
    """The simulator's cost as the layer widens (``bench_cosim.py --scaling``): the rows
    run with ``systems`` (every system when ``None``), by GPUs and tokens."""
    def render(recs: list, current: str) -> str:
        from ..cosim.systems import SYSTEMS
        want = list(SYSTEMS) if systems is None else list(systems)
        rows = [r for _, rec in recs for r in rec["data"]["rows"] if r["systems_run"] == want]
        if not rows:
            raise ReportError(f"no scaling rows of the systems {', '.join(want)} "
                              "(records/bench-scaling.json; run 'python -m "
                              "moehub.scripts.bench_cosim --scaling --systems "
                              f"{','.join(want)}', then 'moehub report --collect bench-scaling')")
        head = ["GPUs", "tokens/GPU", "largest network (flows)", "networks", "events",
                "rate steps", "rate changes", "drain window", "network CPU s", "layer CPU s",
                "layer wall s", "load"]
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in sorted(rows, key=lambda r: (r["gpus"], r["tokens"])):
            win = f"{r['window_us'] * 1000:g} ns" if r.get("window_us") else "exact"
            if r.get("window_us") and r.get("window_rel"):
                win = f"max({win}, {r['window_rel']:g} × t)"       # (as _window writes it)
            if r.get("stopped_after_s"):
                cells = [r["gpus"], r["tokens"], "", "", "", "", "", win, "", "",
                         f"stopped after {r['stopped_after_s']}", r["load"]]
            else:
                cells = [r["gpus"], r["tokens"], f"{r['largest_flows']:,}", r["networks"],
                         f"{r['events']:,}", f"{r['steps']:,}", f"{r['rate_changes']:,}", win,
                         f"{r['network_cpu_s']:.2f}", f"{r['layer_cpu_s']:.2f}",
                         f"{r['layer_wall_s']:.2f}", r["load"]]
            out.append("| " + " | ".join(str(c) for c in cells) + " |")
        return "\n".join(out) + "\n\n" + caption(recs) + "\n"
    return render


def _pct_diff(d) -> str:
    """A difference in % to 3 decimals, signed; an exact 0 (the same layer time) as 0."""
    return "–" if d is None else "0" if d == 0 else f"{d:+.3f} %"


def _window(r: dict) -> str:
    if not r.get("window_us"):
        return f"exact (≤ {r['exact_gpus']} GPUs)" if r.get("exact_gpus") else "exact"
    return f"max({r['window_const_us'] * 1000:g} ns, {r['window_rel']:g} × t)"


def render_window_error(recs: list, current: str) -> str:
    """The coalesced network engine against the exact one (``bench_cosim.py
    --window-error``): per point, each system's layer time coalesced − exact in %, the
    largest, the window and the CPU seconds of the exact and the coalesced run."""
    from ..cosim.systems import SYSTEMS
    rows = [r for _, rec in recs for r in rec["data"]["rows"]]
    if not rows:
        raise ReportError("table 'cosim-window-error': no window-error rows "
                          "(records/bench-window.json; run 'python -m moehub.scripts.bench_cosim "
                          "--window-error', then 'moehub report --collect bench-window')")
    points: dict = {}
    for r in rows:
        points.setdefault(r["point"], {})[r["system"]] = r
    shown = [s for s in SYSTEMS if any(s in per for per in points.values())]
    shown += sorted({s for per in points.values() for s in per} - set(shown))
    head = ["model", "system", "tokens/GPU", *shown, "largest \\|difference\\|", "window",
            "CPU s exact / coalesced", "load"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for point, per in points.items():
        first = next(iter(per.values()))
        runs = sorted({(r["cpu_exact_s"], r["cpu_coalesced_s"]) for r in per.values()})
        loads = sorted({r["load"] for r in per.values()})
        model = first["model"] + ("" if first["workload"] == "default" else f" ({first['workload']})")
        largest = max(abs(r["difference_pct"]) for r in per.values())
        out.append("| " + " | ".join([
            model, f"{first['system_config']} ({first['gpus']} GPUs)", str(first["tokens"]),
            *[_pct_diff(per[s]["difference_pct"]) if s in per else "–" for s in shown],
            "0" if largest == 0 else f"{largest:.3f} %", _window(first),
            "; ".join(f"{e:.1f} / {c:.1f}" for e, c in runs),
            "; ".join(f"{x:.1f}" for x in loads)]) + " |")
    return ("\n".join(out) + "\n\nEach system's layer time with coalesced queue drains "
            "minus the exact engine's (`MOEHUB_NETWORK_WINDOW_US=0`), in % of the exact; 0: "
            "the same time. CPU s: each whole run of the point (every system); load: the "
            "1-minute load average before the point.\n\n" + caption(recs) + "\n")


#: the simulators of the sim-speed table, in its order
SIMULATORS = {"icarus": "Icarus", "verilator": "Verilator"}


def render_sim_speed(recs: list, current: str) -> str:
    """Icarus against Verilator on RTL-in-the-loop runs (``bench_sim.py``): per config (in
    the benchmark's order) and simulator, the build from a cold cache, cycles, simulator
    seconds and cycles per second, whether the two simulators' outputs were identical and
    the load before the run; a row of other RTL sources than ``current`` is marked, a
    (config, simulator) without a row says how to measure it."""
    from .bench_sim import CONFIGS
    rows = {(r["config"], r["simulator"]): r for _, rec in recs for r in rec["data"]["rows"]}
    if not rows:
        raise ReportError("table 'sim-speed': no bench-sim rows (records/bench-sim.json; run "
                          "'python -m moehub.scripts.bench_sim', then 'moehub report --collect "
                          "bench-sim')")
    head = ["config", "schedule", "simulator", "build s", "cycles", "sim s", "cycles/s",
            "outputs", "load"]
    out = ["| " + " | ".join(head) + " |", "|---|---|---|---:|---:|---:|---:|---|---:|"]
    at_collection = {id(r): _g(rec, "rtl", "bench-sim", "sources_sha256")
                     for _, rec in recs for r in rec["data"]["rows"]}
    configs = list(CONFIGS) + sorted({c for c, _ in rows} - set(CONFIGS))
    for config in configs:
        for sim, label in SIMULATORS.items():
            r = rows.get((config, sim))
            if r is None:
                out.append(f"| {config} | not measured: `python -m moehub.scripts.bench_sim "
                           f"--configs {config} --sims {sim}` | {label} | | | | | | |")
                continue
            mark = f" ({OLDER})" if (r.get("rtl_sha256") or at_collection[id(r)]) != current else ""
            out.append("| " + " | ".join([
                config + mark, f"{r['schedule']}, {r['packets']:,} packets", label,
                f"{r['build_s']:.1f}" + (" (warm)" if r.get("warm") else ""), f"{r['cycles']:,}",
                f"{r['sim_s']:,.1f}", f"{r['cycles'] / max(r['sim_s'], 1e-9):,.0f}",
                r["outputs"] or "one simulator run", f"{r['load']:.1f}"]) + " |")
    return ("\n".join(out) + "\n\n\"sim s\": the simulator process, cocotb's start included; "
            "build s: the player's build from an empty cache; outputs: every control write, "
            "credit, data write, stall and the cycle count against the other simulator's run "
            "of the same schedule in the same benchmark run; load: the 1-minute load average "
            "before the run.\n\n" + caption(recs) + "\n")


#: the explorations the guide shows: table -> (the results folder ``moehub explore`` names
#: after its axes, the axes), on the defaults
EXPLORES = {"explore-example": ("explore-lanes1+2+4_tags4+8", "--axis lanes=1,2,4 --axis tags=4,8"),
            "explore-experts": ("explore-experts1+2+4_lanes2_tags8",
                                "--axis experts=1,2,4 --axis lanes=2 --axis tags=8")}
EXPLORE_EXAMPLE = EXPLORES["explore-example"][0]


def _explore_labels(axes: dict | None) -> list:
    """Every point's label of a grid (``lanes=1 tags=4`` ...), in the grid's order."""
    import itertools
    axes = axes or {}
    return [" ".join(f"{k}={v}" for k, v in zip(axes, combo))
            for combo in itertools.product(*axes.values())] if axes else []


def render_explore(table: str):
    """The renderer of the exploration table ``table`` (:data:`EXPLORES`)."""
    def fn(recs: list, current: str) -> str:
        return render_explore_example(recs, current, *EXPLORES[table], table)
    fn.__doc__ = f"The guide's exploration {EXPLORES[table][0]}."
    return fn


def render_explore_example(recs: list, current: str, folder: str = EXPLORE_EXAMPLE,
                           axes: str = EXPLORES["explore-example"][1],
                           table: str = "explore-example") -> str:
    """An exploration of the guide (``folder``, made with ``axes``; the example by default):
    per point the reduced hub's N5 area, its deepest stage and verdict, the layer speedup
    over the best software, the receive memory, the Pareto mark (or why a point is off
    the front) and its wall time."""
    hit = [(n, rec) for n, rec in recs if n == f"explore/{folder}.json"]
    if not hit:
        raise ReportError(f"table {table!r}: no record of {folder} (records/explore/; run "
                          f"'moehub explore {axes}', then 'moehub report --collect explore')")
    name, rec = hit[0]
    rows = rec["data"]["rows"]
    best = {r["best_baseline"] for r in rows}
    head = ["point", "N5 mm² (reduced)", "deepest stage",
            f"speedup (best: {next(iter(best))})" if len(best) == 1 else "speedup (best)",
            "receive MiB", "tag stalls", "Pareto", "wall s"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    mark = f" ({OLDER})" if older(rec, "explore", current) else ""
    by_label = {r["label"]: r for r in rows}
    labels = _explore_labels(rec["data"].get("axes"))
    for label in labels + [lb for lb in by_label if lb not in labels]:
        r = by_label.get(label)
        if r is None:
            out.append(f"| {label} | failed in the recorded run: not evaluated (its log under "
                       "`<build>/explore/synth/`) | | | | | | |")
            continue
        speed = f"{r['speedup']:.3f}" + ("" if len(best) == 1 else f" ({r['best_baseline']})")
        par = "*" if r["pareto"] else "(timing)" if r["timing"] == "FAIL" else ""
        out.append("| " + " | ".join([
            r["label"] + mark, f"{r['n5_mm2']:.4f}", f"{r['fo4']:.1f} FO4 {r['timing']}", speed,
            f"{r['receive_MiB']:.1f}", f"{r['tag_stalls']:,}", par,
            f"{r['wall_s']:.0f}" + (" (cached)" if r.get("cached") else "")]) + " |")
    d = rec["data"]
    run = (f"{d['points']} points, {d['evaluated']} evaluated, {d['cached']} from the cache"
           + (f", {d['failed']} failed" if d.get("failed") else "") + f" on {d['cluster']}" + (f", {_minutes(d['wall_s'])} of wall time" if d.get("wall_s") else ""))
    return ("\n".join(out) + f"\n\n{run}; wall s: the point's synthesis and co-simulation; "
            "tag stalls: rows that waited for a row tag's credit to return; Pareto: * on the front, (timing) off "
            "it for a timing FAIL.\n\n" + caption(hit) + "\n")


# ----------------------------------------------------------------------------- spec tables
#: the configuration the register table shows: the smallest protocol-v1 hub
CSR_CONFIG = "tiny"
#: the features whose registers the table adds, each as the change to CSR_CONFIG that
#: turns it on (a relay hub needs several nodes and multicast rows)
CSR_FEATURES = {
    "multicast": {"topk": 3, "max_targets": 3},
    "paged": {"pool_pages": 3},
    "count packets": {"count_packets": True},
    "relay": {"sources": 8, "nodes": 2, "gpus_per_node": 4, "relay": True, "forward_tags": 1,
              "topk": 3, "max_targets": 3},
}


def csr_maps() -> dict:
    """The register maps the table compares: ``None`` -> CSR_CONFIG's, then per feature
    the map of CSR_CONFIG with that feature on."""
    from ..spec.config import load_hub_config
    from ..spec.csr_map import CsrMap
    base = load_hub_config(CSR_CONFIG)
    return {None: CsrMap(base), **{f: CsrMap(base.replace(**kw)) for f, kw in CSR_FEATURES.items()}}


def csr_rows(maps: dict) -> list:
    """``[(register, features)]``: the base map's registers (no feature), then each register
    only a feature's map has, as that map places it, with every feature whose map has it."""
    rows = [(r, ()) for r in maps[None].registers.values()]
    seen = set(maps[None].registers)
    for m in maps.values():
        for r in m.registers.values():
            if r.name not in seen:
                seen.add(r.name)
                rows.append((r, tuple(f for f, o in maps.items() if f and r.name in o.registers)))
    return rows


def _or(names) -> str:
    """``a, b or c``: any one of the names will do."""
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def _csr_words(r) -> str:
    """The words a register takes: ``5``, ``8–9`` (wider than a word), ``13 + i, i < 3``
    (an array: element ``i`` starts there)."""
    if r.array:
        return f"{r.offset} + {r.words if r.words > 1 else ''}i, i < {r.count}"
    return str(r.offset) if r.words == 1 else f"{r.offset}–{r.offset + r.words - 1}"


def _csr_reset(r) -> str:
    """A stored register's or a constant's value after reset; ``–`` where the register
    stores nothing or reads the hub's state (after a reset that is the hub's, not the
    register object's ``reset``)."""
    if r.const:
        return f"`0x{r.reset:0{(r.width + 3) // 4}X}`"
    return str(r.reset) if r.access == "rw" else "–"


def _csr_meaning(r) -> str:
    """The register's ``doc``, its fields by bit (names only: each field's own doc is in
    the C header) and its clamp."""
    bits = [f"bit{f.lsb} {f.name}" if f.width == 1 else f"bits {f.msb}:{f.lsb} {f.name}"
            for f in sorted(r.fields, key=lambda f: f.lsb)]
    text = r.doc + (" — " + ", ".join(bits) if bits else "")
    return _cell(text + (f"; a write is clamped to {r.clamp[0]}..{r.clamp[1]}" if r.clamp else ""))


def _csr_features(names) -> str:
    """Each feature of ``names`` with the configuration keys that turn it on."""
    return "; ".join(f"{f}: `{', '.join(f'{k}: {json.dumps(v)}' for k, v in CSR_FEATURES[f].items())}`"
                     for f in names)


def _csr_caption(rows: list) -> str:
    """What the table shows: which configuration, which features, where another
    configuration's addresses come from."""
    adds = {f for _, fs in rows for f in fs}
    none = [f for f in CSR_FEATURES if f not in adds]
    feats = _csr_features(f for f in CSR_FEATURES if f in adds)
    return (f"*Generated from `spec/csr_map.py` for the `{CSR_CONFIG}` hub. A register only some "
            f"hubs have is placed as in `{CSR_CONFIG}` with the first feature its row names "
            f"({feats})" + (f"; {_or(none)} add{'s' if len(none) == 1 else ''} no register"
                            if none else "")
            + ". Words, bits and resets follow the configuration (sources, experts, reasons, "
            "address width): `moehub rtl` exports each configuration's map as `csr_map.json` "
            "and `moehub_csr.h`.*")


def render_csr_map() -> str:
    """The CSR registers as the guide lists them, from the register objects themselves (no
    record: the map is the spec), so the guide cannot name a register the hub lacks."""
    rows = csr_rows(csr_maps())
    head = ["register", "word", "access", "bits", "reset", "present", "meaning"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r, feats in rows:
        name = f"`{r.name}[i]`" if r.array else f"`{r.name}`"
        cells = [name, _csr_words(r), r.access, r.width, _csr_reset(r), _or(feats) or "always",
                 _csr_meaning(r)]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(out) + "\n\n" + _csr_caption(rows) + "\n"


#: the protocol-v2 units' table: (unit, label) in the table's order
V2_UNITS = (("page_pool", "page pool"), ("expert_counts", "expert counts"),
            ("target_decode", "target decode"), ("multicast_prerank", "multicast pre-rank"),
            ("multicast_allocator_admitted", "multicast allocator, the hub's (admitted)"),
            ("multicast_allocator", "multicast allocator, exact"))


def _unit_config(r: dict) -> str:
    f = r.get("features") or {}
    bits = [f"{f['pool_pages']} pages" if r["unit"] == "page_pool" else "",
            f"{f['max_targets']} targets" if r["unit"].startswith(("target", "multicast")) else "",
            f"{f['sources']} sources x {f['experts']} experts" if r["unit"] == "expert_counts" else ""]
    return ", ".join([f"`{r['config']}`"] + [b for b in bits if b])


def _unit_figures(r: dict) -> dict:
    """A ``moehub synth-unit`` row's figures as table cells: GE, flops, SRAM bits, N5 mm²,
    deepest path, its FO4 of logic, N5 fmax and the verdict at 1.98 GHz."""
    from ..synth.project import fo4_budget, timing_verdict
    budget = fo4_budget(H100_CLOCK_GHZ).nominal
    return {"GE": f"{r['gate_equivalents'] / 1e3:.1f}k", "flops": f"{r['flops']:,}",
            "SRAM bits": f"{r['sram_bits']:,}", "N5 mm²": f"{r['n5_mm2']:.5f}",
            "deepest path": _cell(f"`{r['path']}`"), "FO4": f"{r['fo4']:.1f}",
            "N5 fmax GHz": f"{r['n5_fmax_GHz']:.2f}",
            "at 1.98 GHz": f"**{timing_verdict(r['fo4'])}** ({r['fo4']:.2f} of {budget:.2f} FO4)"}


def _unit_table(head: list, rows: list, recs: list, shown: list, command: str | None = None) -> str:
    """A table of units: ``head`` and ``rows`` (lists of cells), the records' caption, each
    record dated by the latest run of the rows ``shown`` from it (``[(row, record)]``: the
    v2 and the relay units share one record, each table its own runs) and named by
    ``command`` where given (the record's generic command line, made specific)."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cells) + " |" for cells in rows]
    dated = []
    for name, rec in recs:
        runs = [r["started"] for r, of in shown if of is rec and r.get("started")]
        dated.append((name, {**rec, "date": max(runs) if runs else rec["date"],
                             "command": command or rec["command"]}))
    return "\n".join(out) + "\n\n" + caption(dated) + "\n"


def _no_unit_row(label: str, command: str, cells: int) -> list:
    """The row of a unit without a run: how to make one."""
    return [label, f"no record: `{command}`, then `moehub report --collect synth-unit`",
            *[""] * (cells - 2)]


def render_v2_units(recs: list, current: str) -> str:
    """Protocol v2's units synthesised alone (``moehub synth-unit``): area, deepest path,
    N5 projection; a row from older RTL than the tree's is marked."""
    rows = {r["unit"]: (r, rec) for _, rec in recs for r in rec["data"]["rows"]
            if not _g(r, "features", "relay")}
    head = ["unit", "config", "GE", "N5 mm²", "deepest path", "FO4 of logic", "N5 fmax GHz"]
    body = []
    for unit, label in V2_UNITS:
        if unit not in rows:
            body.append(_no_unit_row(label, f"moehub synth-unit {unit}", len(head)))
            continue
        r, rec = rows[unit]
        f = _unit_figures(r)
        mark = " (older RTL)" if row_older(r, rec, "units", current) else ""
        body.append([label + mark, _unit_config(r), f["GE"], f["N5 mm²"], f["deepest path"],
                     f["FO4"], f["N5 fmax GHz"]])
    return _unit_table(head, body, recs, [rows[u] for u, _ in V2_UNITS if u in rows])


#: protocol v3's relay units' table: (unit, label) in the table's order, and the node
#: counts every unit is synthesised for (the co-simulation's H100 systems of 2, 4, 8 nodes)
RELAY_UNIT_ROWS = (("relay_control", "relay control path"), ("forward_unit", "forward unit"),
                   ("forward_check", "forward check"), ("reduce_unit", "reduce unit"),
                   ("reduce_element", "accumulate datapath, one element"),
                   ("reduce_path", "reduce path (unit, engine), one element"),
                   ("relay_input", "relay input (every lane)"), ("relay_stage", "relay staging"),
                   ("forward_egress", "forward egress"), ("credit_join", "credit join"),
                   ("partial_stage", "partial staging"), ("partial_feed", "partial feed"),
                   ("relay_hub", "relay hub, whole"))
RELAY_NODES = (2, 4, 8)


def render_relay_units(recs: list, current: str) -> str:
    """Protocol v3's relay units synthesised alone (``moehub synth-unit UNIT --nodes N``),
    per unit and node count: area, flops, SRAM bits, the deepest path and its verdict at
    the H100's 1.98 GHz, N5 area and fmax; a row from older RTL is marked, a (unit, node
    count) without a run says how to make one."""
    if not recs:
        raise ReportError("table 'relay-units': no synth-unit record (records/synth-unit.json; "
                          "make one with 'moehub synth-unit UNIT --nodes N', then "
                          "'moehub report --collect synth-unit')")
    rows = {(r["unit"], r["features"]["nodes"]): (r, rec) for _, rec in recs
            for r in rec["data"]["rows"] if _g(r, "features", "relay")}
    head = ["unit", "nodes × GPUs", "config", "GE", "flops", "SRAM bits", "deepest path",
            "FO4 of logic", "N5 mm²", "N5 fmax GHz", "at 1.98 GHz"]
    body = []
    for unit, label in RELAY_UNIT_ROWS:
        for n in sorted(set(RELAY_NODES) | {k[1] for k in rows if k[0] == unit}):
            if (unit, n) not in rows:
                body.append(_no_unit_row(f"{label}, {n} nodes",
                                         f"moehub synth-unit {unit} --nodes {n}", len(head)))
                continue
            r, rec = rows[unit, n]
            f, feat = _unit_figures(r), r["features"]
            mark = " (older RTL)" if row_older(r, rec, "units", current) else ""
            body.append([label + mark, f"{n} × {feat['gpus_per_node']}",
                         f"`{r['config']}`: {feat['experts']} experts, {feat['max_targets']} "
                         f"targets, window {feat['relay_window']}",
                         f["GE"], f["flops"], f["SRAM bits"], f["deepest path"], f["FO4"],
                         f["N5 mm²"], f["N5 fmax GHz"], f["at 1.98 GHz"]])
    return _unit_table(head, body, recs, list(rows.values()), "moehub synth-unit UNIT --nodes N")


#: the whole hubs of protocol v2's timing table: (label, ``moehub synth --set`` changes) of
#: V2_HUB_BASE, each a record ``synth/<the folder's name>.json``; a two-node layer's hub
#: has 16 sources and 16 experts a GPU (what the co-simulation derives for h100x16-ib)
V2_HUB_BASE = "deepseek-v3-8gpu"
_TWO_NODES = {"sources": 16, "experts": 16}
_ALL_THREE = {"count_packets": True, "max_targets": 8}
V2_HUBS = (("protocol v1", {}),
           ("+ count packets", {"count_packets": True}),
           ("+ paged, 4,128 pages", {"pool_pages": 4128}),
           ("+ multicast, 8 targets", {"max_targets": 8}),
           ("all three (513-page arena)", {**_ALL_THREE, "pool_pages": 513}),
           ("two nodes (16 sources × 16 experts), v1", _TWO_NODES),
           ("two nodes + multicast", {**_TWO_NODES, "max_targets": 8}),
           ("two nodes + count packets", {**_TWO_NODES, "count_packets": True}),
           ("two nodes + paged, 8,208 pages", {**_TWO_NODES, "pool_pages": 8208}),
           ("two nodes, all three (1,025-page arena)", {**_TWO_NODES, **_ALL_THREE, "pool_pages": 1025}))


def v2_hub_name(changes: dict) -> str:
    """The folder ``moehub synth --config V2_HUB_BASE --set ...`` writes (and so its
    record's name): the synthesis flow's own naming."""
    from ..synth.flow import load_hub_config, with_changes
    return with_changes(load_hub_config(V2_HUB_BASE), changes).name


def _v2_hub_cells(rec: dict) -> list:
    """GE (and SRAM bits), N5 mm² (logic + SRAM), the deepest stage -- the deeper of the
    report's worst-slack path and sta_paths' deepest family, as ``moehub study v2`` takes
    it -- and its verdict at 1.98 GHz, from a synthesis record's OSU018 section."""
    from ..synth.project import timing_verdict
    top = rec["data"]["report"]["asic"]["modules"]["top"]
    path = top.get("path") or {}
    fo4, frm, to = top["fo4"], path.get("from"), path.get("to")
    fams = (rec["data"].get("deepest_paths") or {}).get("families") or []
    if fams and fams[0]["fo4"] > fo4:
        fo4, frm, to = fams[0]["fo4"], fams[0]["from"], fams[0]["to"]
    ge = f"{top['gate_equivalents'] / 1e3:,.1f}k" + (
        f" + {top['sram_bits']:,} SRAM bits" if top.get("sram_bits") else "")
    stage = f"{fo4:.2f}" + (f" (`{frm}` → `{to}`)" if frm else "")
    return [ge, f"{_g(top, 'n5', 'total_mm2', 'nominal') or 0:.3f}", stage,
            f"**{timing_verdict(fo4)}**"]


def render_v2_hubs(recs: list, current: str) -> str:
    """Protocol v2's whole hubs on OSU018 (``moehub synth --config deepseek-v3-8gpu --set
    ...``): per feature set, one node and two, area, N5 mm², the deepest stage and its
    verdict at 1.98 GHz; a row from older RTL is marked, a hub without a synthesis record
    says how to make one (its figures are not carried over by hand)."""
    by_name = {rec["data"]["config"]: (name, rec) for name, rec in recs
               if "asic" in rec["data"]["report"]}
    head = ["hub", "GE", "N5 mm² (logic + SRAM)", "deepest stage (FO4)", "at 1.98 GHz"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    used, missing = [], 0
    for label, changes in V2_HUBS:
        hit = by_name.get(v2_hub_name(changes))
        if hit is None:
            sets = "".join(f" --set {k}={int(v)}" for k, v in changes.items())
            out.append(f"| {label} | no synthesis record: `moehub synth --config {V2_HUB_BASE}{sets}`, "
                       "then `moehub report --collect synth` | – | – | – |")
            missing += 1
            continue
        used.append(hit)
        mark = f" **{OLDER}**" if older(hit[1], "asic", current) else ""
        out.append("| " + " | ".join([label + mark, *_v2_hub_cells(hit[1])]) + " |")
    if not used:
        raise ReportError("table 'v2-hubs': no synthesis record of its hubs (records/synth/"
                          f"{V2_HUB_BASE}*.json; 'moehub synth --config {V2_HUB_BASE} [--set ...]', "
                          "then 'moehub report --collect synth')")
    note = (f"{missing} of {len(V2_HUBS)} hubs have no synthesis record: their rows name the "
            "command that makes one. " if missing else "")
    return "\n".join(out) + "\n\n" + note + caption(used) + "\n"


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def _count(n: int) -> str:
    """10,000 and above as 12k / 1.2M, below as 1,234 (the soak table's drop counts)."""
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    if n >= 1e5:
        return f"{n / 1e3:.0f}k"
    if n >= 1e4:
        return f"{n / 1e3:.1f}k"
    return f"{n:,}"


def render_soak(recs: list, current: str) -> str:
    """``moehub soak``: per config (in the shipped configs' order) and seed, the layers,
    rows sent and placed, packets, cycles, wall and simulator time, the load before the
    run and the drops by reason; every layer of a recorded soak was equal to the model (a
    mismatch stops the soak and writes no summary). Rows from older RTL are marked."""
    from ..spec.config import HUB_CONFIGS
    rows = [(r, rec) for _, rec in recs for r in rec["data"]["rows"]]
    rank = {c: i for i, c in enumerate(HUB_CONFIGS)}
    rows.sort(key=lambda rr: (rank.get(rr[0]["config"], len(rank)), rr[0]["config"], rr[0]["seed"]))
    head = ["config", "seed", "layers", "rows (placed)", "packets", "cycles", "wall", "simulator",
            "load", "drops by reason"]
    out = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r, rec in rows:
        mark = " (older RTL)" if row_older(r, rec, "soak", current) else ""
        drops = ", ".join(f"{k} {_count(v)}" for k, v in sorted(r["drops"].items(), key=lambda x: -x[1]))
        load = r.get("load")
        out.append("| " + " | ".join([
            f"`{r['config']}`{mark}", str(r["seed"]), f"{r['layers']:,}",
            f"{r['rows']:,} ({r['rows_written']:,})", _count(r["packets"]), _count(r["cycles"]),
            _minutes(r["wall_s"]), f"{r['sim_s']:.{0 if r['sim_s'] >= 10 else 1}f} s ({r['sim']})",
            f"{load[0]:.1f}" if load else "–", drops or "none"]) + " |")
    return "\n".join(out) + "\n\n" + caption(recs) + "\n"


def _missed_bins(groups: dict) -> str:
    """The bins a coverage run missed, per group: a cross's missed bins counted by their
    first part (``drops``: ``POST_EOS × 3``), a plain bin named."""
    out = []
    for g, d in groups.items():
        heads = {}
        for label in d["missed"]:
            heads.setdefault(label.split("/")[0], []).append(label)
        if heads:
            out.append(f"`{g}`: " + ", ".join(ls[0] if len(ls) == 1 else f"{h} × {len(ls)}"
                                              for h, ls in heads.items()))
    return "; ".join(out) or "none"


def render_coverage(recs: list, current: str) -> str:
    """``moehub coverage``: per config (in the shipped configs' order) the bins hit of all,
    the goal, what was missed (per group), what the run played (tests, knob layers, the
    region filled) and its time and load. Rows from older RTL are marked."""
    if not recs:
        raise ReportError("table 'coverage': no coverage record (records/coverage.json; run 'moehub coverage', then "
                          "'moehub report --collect coverage')")
    from ..spec.config import HUB_CONFIGS
    rows = [(r, rec) for _, rec in recs for r in rec["data"]["rows"]]
    rank = {c: i for i, c in enumerate(HUB_CONFIGS)}
    rows.sort(key=lambda rr: (rank.get(rr[0]["config"], len(rank)), rr[0]["config"]))
    out = ["| config | bins hit | missed | the run | wall (CPU) | load |",
           "|---|---:|---|---|---:|---:|"]
    for r, rec in rows:
        mark = f" ({OLDER})" if r.get("rtl_sha256") != current else ""
        verdict = "" if r["percent"] >= r["goal"] else f", **below the {r['goal']:.0f} % goal**"
        run = (f"{r['tests']} tests, {r['knob_layers']} knob layers of {r['knob_packets']:,} "
               f"packets" + (", an expert's whole region filled" if r["full_region"] else "")
               + f" ({r['sim']})")
        load = r.get("load")
        out.append("| " + " | ".join([
            f"`{r['config']}`{mark}", f"{r['hit']} of {r['bins']} ({r['percent']:.1f} %){verdict}",
            _missed_bins(r["groups"]), run, f"{_minutes(r['wall_s'])} ({_minutes(r['cpu_s'])})",
            f"{load[0]:.1f}" if load else "–"]) + " |")
    return "\n".join(out) + "\n\n" + caption(recs) + "\n"


def _equiv_rows(recs: list) -> list:
    """The recorded proofs in the shipped configs' order (others after, by name)."""
    from ..spec.config import HUB_CONFIGS
    rank = {c: i for i, c in enumerate(HUB_CONFIGS)}
    return sorted((r for _, rec in recs for r in rec["data"]["rows"]),
                  key=lambda r: (rank.get(r["config"], len(rank)), r["config"]))


def _revision(commit: str) -> str:
    """A revision a record names, in words the docs can keep (no commit hash): the
    equivalence flow's reference revision, else a named ref, else "another revision"."""
    from ..synth.equiv import DEFAULT_REF
    if commit == DEFAULT_REF:
        return "the reference revision (`DEFAULT_REF`)"
    return "another revision" if re.fullmatch(r"[0-9a-f]{7,40}", str(commit)) else f"`{commit}`"


def _equiv_proof(r: dict) -> str:
    """A proof's kind in words (``synth.equiv.describe``'s, from the record)."""
    from ..synth.equiv import Result, describe
    return describe(Result(**{k: r.get(k) for k in ("config", "ref", "commit", "verdict",
                                                    "proof", "bmc_cycles")}))


def render_equiv(recs: list, current: str) -> str:
    """``moehub equiv``: per config the revision it was proven against, the verdict, the
    proof's kind, the equivalence points proven of all, the working tree's flip-flop bits
    (those no register of the revision pairs), the time and the load; a proof of other RTL
    than the working tree's marked."""
    if not recs:
        raise ReportError("table 'equiv': no equiv record (records/equiv.json; run 'moehub equiv CONFIG', then "
                          "'moehub report --collect equiv')")
    out = ["| config | against | verdict | proof | points proven | flip-flop bits (unpaired) | time | load |",
           "|---|---|---|---|---:|---:|---:|---:|"]
    for r in _equiv_rows(recs):
        mark = f" ({OLDER})" if r.get("rtl_sha256") != current else ""
        reg = r.get("registers") or {}
        verdict = f"**{r['verdict']}**" if r["verdict"] == "equivalent" else r["verdict"]
        load = r.get("load")
        out.append("| " + " | ".join([
            f"`{r['config']}`{mark}", _revision(r["commit"]), verdict, _equiv_proof(r),
            f"{r['proven']:,} of {r['equiv_cells']:,}",
            (f"{reg['gate']:,} ({reg.get('unpaired_gate_bits', 0):,})" if "gate" in reg else "–"),
            _wall((r.get("runtime_s") or {}).get("total", 0.0)),
            f"{load[0]:.1f}" if load else "–"]) + " |")
    return "\n".join(out) + "\n\n" + caption(recs) + "\n"


def _equiv_summary(recs: list, current: str) -> str:
    """The equivalence row: per config its verdict against the revision, the points."""
    return "; ".join(f"`{r['config']}` against {_revision(r['commit'])}: " +
                     (f"**{r['verdict']}**: {_equiv_proof(r)}, {r['proven']:,} of "
                      f"{r['equiv_cells']:,} points" if r["verdict"] == "equivalent"
                      else f"{r['verdict']} ({r['proven']:,} of {r['equiv_cells']:,} points)")
                     + (f" ({OLDER})" if r.get("rtl_sha256") != current else "")
                     for r in _equiv_rows(recs))


def _mutation_score(s: dict) -> str:
    dead = s["killed"] + s["timeout"]
    pct = "n/a" if s.get("score") is None else f"{100 * s['score']:.1f} %"
    return f"{dead} / {dead + s['survived']} = {pct}"


def render_mutation(recs: list, current: str) -> str:
    """``moehub mutate``: the campaign's outcomes and score per file (the score killed /
    (killed + survived), a timeout counted as killed), the total, the survivors, and what
    the campaign was (sample, seed, mean time per mutant, the whole set's projected time);
    a campaign of other RTL than the working tree's marked."""
    if not recs:
        raise ReportError("table 'mutation': no mutate record (records/mutate.json; run 'moehub mutate --sample N', then "
                          "'moehub report --collect mutate')")
    from ..verif.mutate import OUTCOMES
    (_, rec), = recs[-1:]
    d = rec["data"]
    out = ["| file | " + " | ".join(OUTCOMES) + " | score |", "|---|" + "---:|" * (len(OUTCOMES) + 1)]
    for name, sc in d["by_file"].items():
        cells = [f"**{name}**" if name == "all" else f"`{name}`"] + [str(sc[o]) for o in OUTCOMES]
        out.append("| " + " | ".join(cells + [_mutation_score(sc)]) + " |")
    m = d["meta"]
    mark = f" ({OLDER})" if d.get("rtl_sha256") != current else ""
    n = d["by_file"]["all"]["total"]
    what = (f"A sample of {n} mutants (seed {m['seed']}) of the whole set of {d['full_set']:,}"
            if m.get("sample") else f"{n} mutants") + mark
    proj = d.get("projection_s") or {}
    w, ref = m.get("workers"), str(m.get("ref"))
    ref = "a fixed revision, --ref" if re.fullmatch(r"[0-9a-f]{40}", ref) else ref
    text = (f"{what}, on {w or 'one per core'} Dask worker{'' if w == 1 else 's'} ({ref}): "
            f"{d['mean_s']:.0f} s per mutant on average, {_wall(m['wall_s'])} of wall time"
            + ("; the whole set projected at " + ", ".join(f"{float(v) / 3600:.0f} h on {n} workers"
                                                           for n, v in proj.items()) if proj else "")
            + ".")
    kept = [r for r in d.get("kept", []) if r["result"] == "survived"]
    if kept:
        text += " Survivors: " + "; ".join(f"`{r['id']}` ({r['file']}:{r['line']}, {r['operator']}: "
                                           f"`{r['original']}` → `{r['mutant']}`)" for r in kept) + "."
    return "\n".join(out) + "\n\n" + text + "\n\n" + caption(recs) + "\n"


def _mutation_summary(recs: list, current: str) -> str:
    d = recs[-1][1]["data"]
    m, s = d["meta"], d["by_file"]["all"]
    return (f"score **{_mutation_score(s)}** (killed / (killed + survived)) over a sample of "
            f"{s['total']} of the {d['full_set']:,} mutants, {s['equivalent']} proven equivalent"
            + (f" ({OLDER})" if d.get("rtl_sha256") != current else ""))


#: the paper-band tables: table name -> model
PAPER_BANDS = {"paper-band-mixtral": "mixtral-8x7b", "paper-band-deepseek": "deepseek-v3"}


def render_paper_band(model: str):
    """The renderer of the paper-band study's table of ``model``: the study's own table
    of its rows and its summary line (the points in the seeds' band against the papers'
    kind of baseline, the range against today's best)."""
    def fn(recs: list, current: str) -> str:
        from ..cosim.studies import paper_band
        rows = [r for _, rec in recs for r in rec["data"]["rows"] if r["model"] == model]
        if not rows:
            raise ReportError(f"table of the paper band of {model}: no paper-band record with it "
                              "(records/paper-band.json; run 'python -m moehub.cosim.studies."
                              "paper_band', then 'moehub report --collect paper-band')")
        runs = list(dict.fromkeys(r["command"] for r in rows if r.get("command")))
        made = (" The rows: " + "; ".join(f"`{c}`" for c in runs) + ".") if runs else ""
        return (paper_band.table(rows) + "\n\n" + paper_band.summary(rows) + "." + made
                + "\n\n" + caption(recs) + "\n")
    fn.__doc__ = f"The paper-band study's table of {model}."
    return fn


#: the X-MoE study's tables: table name -> (part of its results, the study's renderer)
XMOE_TABLES = {"xmoe-memory": ("memory", "memory_table"), "xmoe-traffic": ("rbd_traffic", "traffic_table"),
               "xmoe-time": ("rbd_time", "time_table"), "xmoe-ssmb": ("ssmb", "ssmb_table"),
               "xmoe-validation": ("validation", "validation_table")}
#: the X-MoE study's run the docs' tables show (its default values)
XMOE_RUN = "study-xmoe/study-xmoe.json"


def render_xmoe(name: str):
    """The renderer of one of the X-MoE study's tables: the study's own table
    (:mod:`moehub.cosim.studies.xmoe_report`) of its default run's rows."""
    part, fn_name = XMOE_TABLES[name]

    def fn(recs: list, current: str) -> str:
        from ..cosim.studies import xmoe_report
        mine = [(n, rec) for n, rec in recs if n == XMOE_RUN]
        if not mine:
            raise ReportError(f"table {name!r}: no record of the X-MoE study's default run "
                              f"(records/{XMOE_RUN}; run 'moehub study xmoe', then 'moehub "
                              "report --collect study-xmoe')")
        rows = mine[0][1]["data"][part]
        return getattr(xmoe_report, fn_name)(rows) + "\n\n" + caption(mine) + "\n"
    fn.__doc__ = f"The X-MoE study's {part} table."
    return fn


def _formal_job(r: dict) -> str:
    """One recorded formal job as a cell's clause: its mode and depth, what a pass means
    for it (k-induction: unbounded; a cover: every cover reached), the step of a failure,
    a depth other than the full set's, and its wall time."""
    mode, d = r["mode"], r["depth"]
    text = {"prove": f"k-induction, k = {d}", "bmc": f"BMC {d}", "cover": f"cover {d}"}[mode]
    if r["status"] == "PASS":
        text += {"prove": ": **unbounded**", "bmc": "", "cover": ": all reached"}[mode]
    else:
        text += f": **{r['status']}**" + (f" at step {r['step']}" if r.get("step") is not None else "")
    if r.get("full_depth") is not None and r["full_depth"] != d:
        text += f" (the full set runs {r['full_depth']})"
    return text + f", {_wall(r['seconds'])}"


def _wall(s: float) -> str:
    """Seconds as "95 s" up to 1,000, above as "21 min" (a proof's time in a clause)."""
    return f"{s:.0f} s" if s < 1000 else f"{s / 60:.0f} min"


def formal_rows(recs: list) -> dict:
    """``{(set, mode): (row, record)}`` of the formal records; a job in two is an error."""
    out = {}
    for _, rec in recs:
        for r in rec["data"]["rows"]:
            if (r["set"], r["mode"]) in out:
                raise ReportError(f"formal: the job {r['set']} {r['mode']} is in two records")
            out[r["set"], r["mode"]] = (r, rec)
    return out


def render_formal(recs: list, current: str) -> str:
    """``moehub formal``'s property sets (in the sets' order, :mod:`moehub.verif.formal.sets`):
    per set its config and each job of the full set as recorded -- k-induction (unbounded),
    BMC, covers, each with its depth, result and wall time -- and the load before its
    first job; a set proved on older RTL is marked, a job not in the record says so."""
    from ..verif.formal.sets import SETS
    if not recs:
        raise ReportError("table 'formal': no formal record (records/formal.json; run "
                          "'moehub formal [SET...]', then 'moehub report --collect formal')")
    jobs = formal_rows(recs)
    head = ["set", "component", "config", "jobs: result, wall time", "load"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    counts = {"jobs": 0, "recorded": 0, "failed": 0, "seconds": 0.0, "cpu_s": 0.0}
    for s in SETS.values():
        cells, loads, old = [], [], False
        for mode in s.modes:
            counts["jobs"] += 1
            hit = jobs.get((s.name, mode))
            if hit is None:
                cells.append(f"{mode} {s.modes[mode]}: not in the record")
                continue
            r = hit[0]
            counts["recorded"] += 1
            counts["failed"] += r["status"] != "PASS"
            counts["seconds"] += r["seconds"]
            counts["cpu_s"] += r.get("cpu_s") or 0.0
            old |= r.get("rtl_sha256") != current
            loads.append(r["load"][0])
            cells.append(_formal_job(r))
        if not loads:
            out.append(f"| `{s.name}` | {s.component} | {_cell(s.config)} | not in the record: "
                       f"`moehub formal {s.name}`, then `moehub report --collect formal` | – |")
            continue
        mark = f" ({OLDER})" if old else ""
        out.append(f"| `{s.name}`{mark} | {s.component} | {_cell(s.config)} | "
                   + "; ".join(cells) + f" | {loads[0]:.1f} |")
    c = counts
    summary = (f"{c['recorded']} of the full set's {c['jobs']} jobs recorded, "
               + (f"{c['failed']} of them not passed" if c["failed"] else "all passed")
               + f"; {_wall(c['seconds'])} of wall time, {_wall(c['cpu_s'])} of CPU, one job at "
               "a time. Load: the 1-minute load average before the set's first job.")
    return "\n".join(out) + "\n\n" + summary + "\n\n" + caption(recs) + "\n"


#: the README's verification checks without a record yet: (check, where its figures are
#: kept by hand, the command that runs it)
#: the README's checks, in order: (record source or None, what it checks and the command,
#: the guide's section, the command that makes its record); the summary of each is
#: :data:`CHECK_SUMMARIES`' function of its records
CHECKS = (
    ("soak", "soak: a million random rows per config, error injection, against the model "
     "(`moehub soak`)", "verification.md#soak-a-million-rows-per-config", "moehub soak"),
    ("formal", "formal proofs, SymbiYosys (`moehub formal`)", "verification.md#formal-proofs",
     "moehub formal"),
    (None, "cocotb regression, every shipped config, Icarus and Verilator",
     "verification.md#the-reference-model-and-the-cocotb-testbench", "make test; make test-slow"),
    ("coverage", "functional coverage: every cocotb test and many knob layers per config, on "
     "Icarus (`moehub coverage`)", "verification.md#functional-coverage-and-testpoints",
     "moehub coverage"),
    ("equiv", "equivalence proof of the RTL against the reference revision, cycle exact "
     "(`moehub equiv`)", "verification.md#refactoring-under-an-equivalence-proof", "moehub equiv"),
    ("mutate", "mutation testing of the RTL, on Dask (`moehub mutate`)",
     "verification.md#mutation-testing", "moehub mutate --sample N"),
)


def _coverage_summary(recs: list, current: str) -> str:
    """The coverage row: per config its bins hit of all (and the goal where missed)."""
    from ..spec.config import HUB_CONFIGS
    rows = sorted((r for _, rec in recs for r in rec["data"]["rows"]),
                  key=lambda r: (HUB_CONFIGS.index(r["config"]) if r["config"] in HUB_CONFIGS
                                 else len(HUB_CONFIGS), r["config"]))
    return ", ".join(f"`{r['config']}` {r['hit']}/{r['bins']} bins ({r['percent']:.1f} %"
                     + ("" if r["percent"] >= r["goal"] else f", below {r['goal']:.0f} %") + ")"
                     + (f" ({OLDER})" if r.get("rtl_sha256") != current else "")
                     for r in rows) + f" (goal {rows[0]['goal']:.0f} %)"


def _soak_summary(recs: list, current: str) -> str:
    """The soak row: per config its rows and layers, all equal to the model (a recorded
    soak is one that ran to its end: a mismatch writes no summary)."""
    from ..spec.config import HUB_CONFIGS
    rank = {c: i for i, c in enumerate(HUB_CONFIGS)}
    rows = sorted(((r, rec) for _, rec in recs for r in rec["data"]["rows"]),
                  key=lambda rr: (rank.get(rr[0]["config"], len(rank)), rr[0]["config"], rr[0]["seed"]))
    parts = [f"`{r['config']}` {r['rows']:,} rows ({r['layers']:,} layers, {r['sim']})"
             + (f" ({OLDER})" if row_older(r, rec, "soak", current) else "") for r, rec in rows]
    return "; ".join(parts) + ": **every layer equal to the model**"


def _formal_summary(recs: list, current: str) -> str:
    """The formal row: jobs passed of the full set, the sets proven unbounded, those
    bounded only (their BMC depth), the covers, jobs not recorded and older RTL."""
    from ..verif.formal.sets import SETS
    jobs = formal_rows(recs)
    total = sum(len(s.modes) for s in SETS.values())
    passed = sum(r["status"] == "PASS" for r, _ in jobs.values())
    proven = [s for s in SETS.values() if "prove" in s.modes
              and (jobs.get((s.name, "prove")) or ({},))[0].get("status") == "PASS"]
    bounded = [s for s in SETS.values() if "prove" not in s.modes and "bmc" in s.modes]
    covers = [jobs[s.name, "cover"][0] for s in SETS.values() if (s.name, "cover") in jobs]
    text = (f"**{passed} of {total} jobs pass**: {len(proven)} of {len(SETS)} sets unbounded "
            f"(k-induction); bounded (BMC only, each set's note says why): "
            + ", ".join(f"`{s.name}` (BMC {s.modes['bmc']})" for s in bounded)
            + f"; {sum(r['status'] == 'PASS' for r in covers)} of {len(covers)} cover runs reach "
            "every cover")
    if len(jobs) < total:
        text += f"; {total - len(jobs)} jobs not recorded"
    if any(r.get("rtl_sha256") != current for r, _ in jobs.values()):
        text += f" ({OLDER} for some)"
    return text


def render_verification_summary(recs: list, current: str, records: Path = RECORDS) -> str:
    """Does the hub work: the README's one table of the checks (:data:`CHECKS`), each from
    its record; a check without a record names the command that makes one and the
    guide's section where it is described."""
    summaries = {"soak": _soak_summary, "formal": _formal_summary, "coverage": _coverage_summary,
                 "equiv": _equiv_summary, "mutate": _mutation_summary}
    out, used = ["| check | result |", "|---|---|"], []
    for source, check, where, command in CHECKS:
        mine = [] if source is None else recs if source == "soak" else load_records(records, source)
        if mine:
            out.append(f"| {check} | {summaries[source](mine, current)} |")
            used += mine
        else:
            out.append(f"| {check} | no record yet (`{command}`): see [the guide](docs/{where}) |")
    if not used:
        raise ReportError("table 'verification-summary': no record of any check (records/soak.json, "
                          "records/formal.json, ...; 'moehub report --collect soak formal ...')")
    return "\n".join(out) + "\n\n" + caption(used) + "\n"


#: table name -> (record source, renderer); a source of ``None``: a table of the spec,
#: rendered without records
TABLES = {
    "hub-verdicts": ("synth", render_hub_verdicts),
    "asap7": ("synth", render_asap7),
    "synth-wall": ("synth", render_synth_wall),
    **{n: ("headline", render_headline_of(n)) for n in ("headline", *HEADLINE_APART)},
    "validation-summary": ("validate", render_validation_summary),
    "validation-misses": ("validate", render_validation_misses),
    "validation-cases": ("validate", render_validation_cases),
    "calibration-summary": ("calibrate", render_calibration_summary),
    **{n: ("study-v2", render_ablation(*ms)) for n, ms in ABLATIONS.items()},
    **{n: ("bench-scaling", render_scaling(sy)) for n, sy in SCALING_TABLES.items()},
    "cosim-window-error": ("bench-window", render_window_error),
    "relay-ablation": ("study-relay", render_relay_ablation),
    "relay-critical": ("study-relay", render_relay_critical),
    "v2-units": ("synth-unit", render_v2_units),
    "relay-units": ("synth-unit", render_relay_units),
    "v2-hubs": ("synth", render_v2_hubs),
    "soak": ("soak", render_soak),
    "coverage": ("coverage", render_coverage),
    "equiv": ("equiv", render_equiv),
    "mutation": ("mutate", render_mutation),
    **{n: ("paper-band", render_paper_band(m)) for n, m in PAPER_BANDS.items()},
    **{n: ("study-xmoe", render_xmoe(n)) for n in XMOE_TABLES},
    "formal": ("formal", render_formal),
    "sim-speed": ("bench-sim", render_sim_speed),
    **{n: ("explore", render_explore(n)) for n in EXPLORES},
    "verification-summary": ("soak", render_verification_summary),
    "csr-map": (None, render_csr_map),
}


def render(name: str, records: Path = RECORDS, current: str | None = None) -> str:
    """Table ``name`` as Markdown from the records under ``records`` (a table of the spec:
    from the spec alone)."""
    if name not in TABLES:
        raise ReportError(f"unknown table {name!r} (known: {', '.join(TABLES)})")
    source, fn = TABLES[name]
    if source is None:
        return fn()
    recs, current = load_records(records, source), current or rtl_sources_hash()
    takes_records = name in ABLATIONS or name in ("validation-summary", "verification-summary")
    return fn(recs, current, records) if takes_records else fn(recs, current)


# ----------------------------------------------------------------------------- marked regions
def regions(text: str, where: str) -> list:
    """``[(name, begin_line, end_line)]`` (0-based indexes of the marker lines) of the
    marked regions of a Markdown text; ``where`` names it in errors."""
    out, open_ = [], None
    for i, line in enumerate(text.splitlines()):
        b, e = BEGIN.match(line), END.match(line)
        if b:
            if open_:
                raise ReportError(f"{where}:{i + 1}: table {b['name']!r} begins inside table "
                                  f"{open_[0]!r} (line {open_[1] + 1}) -- '{END_LINE}' missing")
            if not b["name"] or not re.fullmatch(r"[\w.-]+", b["name"]):
                raise ReportError(f"{where}:{i + 1}: table name {b['name']!r}: letters, digits, "
                                  "'-', '_', '.' only")
            open_ = (b["name"], i)
        elif e:
            if not open_:
                raise ReportError(f"{where}:{i + 1}: '{END_LINE}' without a table begun")
            out.append((open_[0], open_[1], i))
            open_ = None
    if open_:
        raise ReportError(f"{where}:{open_[1] + 1}: table {open_[0]!r} is not closed by '{END_LINE}'")
    return out


def fill(text: str, where: str, tables: dict, only=None) -> str:
    """``text`` with every marked region's content replaced by its table from ``tables``
    (name -> Markdown) between blank lines; nothing outside the regions changes.
    ``only``: the names of the regions to fill (the others are left as they are)."""
    lines = text.splitlines(keepends=True)
    regs = [r for r in regions(text, where) if only is None or r[0] in only]
    for name, b, _ in regs:
        if name not in tables:
            raise ReportError(f"{where}:{b + 1}: unknown table {name!r} "
                              f"(known: {', '.join(TABLES)})")
    for name, b, e in reversed(regs):
        nl = "\r\n" if lines[b].endswith("\r\n") else "\n"
        body = nl.join(["", *tables[name].rstrip("\n").split("\n"), "", ""])
        lines[b + 1:e] = body.splitlines(keepends=True)
    return "".join(lines)


def doc_files(root: Path = ROOT) -> list:
    """README.md and docs/**/*.md under ``root`` (not docs/_build)."""
    root = Path(root)
    out = []
    for pattern in DOC_GLOBS:
        out += [p for p in sorted(root.glob(pattern))
                if p.is_file() and not set(p.relative_to(root).parts) & set(DOC_SKIP)]
    return out


def process(files: list, records: Path, root: Path | None = None, current: str | None = None,
            only=None) -> dict:
    """``{path: (old text, new text)}`` for every file with a marked region; each needed
    table is rendered once. ``only``: the table names to fill (default: every region,
    and a region of an unknown name is an error)."""
    current = current or rtl_sources_hash()
    cache, out = {}, {}
    for f in files:
        f = Path(f)
        where = f.relative_to(root).as_posix() if root and f.is_relative_to(root) else str(f)
        text = f.read_text()
        regs = [r for r in regions(text, where) if only is None or r[0] in only]
        if not regs:
            continue
        for name, b, _ in regs:
            if name not in TABLES:
                raise ReportError(f"{where}:{b + 1}: unknown table {name!r} "
                                  f"(known: {', '.join(TABLES)})")
            if name not in cache:
                cache[name] = render(name, records, current)
        out[f] = (text, fill(text, where, cache, only))
    return out


def diff(path, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"{path} (in the file)", f"{path} (from its records)"))


# ----------------------------------------------------------------------------- command
def cmd_report(args) -> int:
    try:
        return _run(args)
    except ReportError as e:
        print(f"moehub report: error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    records = Path(args.records)
    root = Path(args.root)
    if args.recheck:
        for path, verdicts in recheck_synth(records) + recheck_rows(records):
            print(f"{Path(path).relative_to(records).as_posix()}: "
                  + (", ".join(f"{k} {v}" for k, v in verdicts.items()) or "digests added"))
        if not (args.write or args.check or args.table or args.collect is not None):
            return 0
    if args.collect is not None:
        build = Path(args.build) if args.build else build_root()
        which = args.collect or list(COLLECTORS)
        collect = {
            "synth": lambda: collect_synth(build, records, folders=args.synth_dir),
            "validate": lambda: collect_validate(build, records, rerun_it=args.rerun),
            "calibrate": lambda: collect_calibrate(build, records, rerun_it=args.rerun),
            "headline": lambda: collect_headline(build, records),
            "study-v2": lambda: collect_study_v2(build, records),
            "bench-scaling": lambda: collect_bench_scaling(build, records),
            "bench-window": lambda: collect_bench_window(build, records),
            "study-relay": lambda: collect_study_relay(build, records),
            "synth-unit": lambda: collect_synth_unit(build, records),
            "soak": lambda: collect_soak(build, records),
            "formal": lambda: collect_formal(build, records),
            "bench-sim": lambda: collect_bench_sim(build, records),
            "explore": lambda: collect_explore(build, records),
            "coverage": lambda: collect_coverage(build, records),
            "equiv": lambda: collect_equiv(build, records),
            "mutate": lambda: collect_mutate(build, records),
            "paper-band": lambda: collect_paper_band(build, records),
            "study-xmoe": lambda: collect_study_xmoe(build, records),
        }
        assert set(collect) == set(COLLECTORS)
        for source in which:
            paths = collect[source]()
            if not paths:
                print(f"{source}: no outputs in {build} to record", file=sys.stderr)
            for p in paths:
                print(f"{source}: {p}")
        if not (args.write or args.check or args.table):
            return 0
    for n in args.table or ():
        if n not in TABLES:
            raise ReportError(f"--table {n!r}: unknown table (known: {', '.join(TABLES)})")
    files = [Path(f) for f in args.file] if args.file else doc_files(root)
    if args.write or args.check:
        changes = process(files, records, root, only=set(args.table) if args.table else None)
        stale = {f: (o, n) for f, (o, n) in changes.items() if o != n}
        if args.write:
            for f, (_, new) in stale.items():
                f.write_text(new)
                print(f"rewrote the tables of {f}")
            print(f"{len(changes)} file(s) with tables, {len(stale)} rewritten")
            return 0
        for f, (old, new) in stale.items():
            print(diff(f, old, new), end="")
        if stale:
            print(f"moehub report --check: {len(stale)} file(s) differ from their records: "
                  "'moehub report --write' rewrites them; after a change of the RTL, "
                  "'moehub report --recheck --write' (or '--collect synth --write' from "
                  "the synthesis folders) first checks whether the synthesised hardware is "
                  "still the working tree's", file=sys.stderr)
            return 1
        print(f"{len(changes)} file(s) with tables, all as their records give")
        return 0
    names = args.table or list(TABLES)
    current = rtl_sources_hash()
    for n in names:
        try:
            text = render(n, records, current)
        except ReportError as e:
            if args.table:                  # asked for by name: an error
                raise
            print(f"moehub report: {n}: skipped: {e}", file=sys.stderr)
            continue
        print(f"<!-- moehub-table: {n} -->\n\n{text}\n{END_LINE}\n")
    return 0


def add_parser(subparsers) -> None:
    r = subparsers.add_parser(
        "report", help="the docs' results tables from the records (records/): print them, "
        "--write them into README.md and docs/, --check them, --collect records from outputs")
    r.add_argument("--table", action="append", metavar="NAME",
                   help=f"only this table (repeatable; known: {', '.join(TABLES)}): print it, or "
                   "with --write / --check only its regions (the others are left as they are)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the marked regions "
                   "('<!-- moehub-table: NAME -->' ... '<!-- /moehub-table -->') of the docs")
    mode.add_argument("--check", action="store_true", help="exit 1 and print a diff when a marked "
                   "region differs from what its records give")
    r.add_argument("--collect", nargs="*", choices=COLLECTORS, metavar="SOURCE",
                   help=f"write records from the commands' outputs in the build folder "
                   f"(sources: {', '.join(COLLECTORS)}; none named: all)")
    r.add_argument("--rerun", action="store_true", help="with --collect validate / calibrate: "
                   "run 'moehub validate' (about 3 CPU-minutes) / 'moehub calibrate' first and "
                   "record that run (they write no run record of their own)")
    r.add_argument("--recheck", action="store_true", help="check each synthesis record's "
                   "hardware against the working tree without its build folder (the RTLIL "
                   "generated again against the record's digest of the synthesised one): after "
                   "an edit of rtl/ or spec/ that moves no gate, its rows are current again")
    r.add_argument("--synth-dir", action="append", metavar="DIR", help="with --collect synth: "
                   "this synthesis folder (a 'moehub synth --out DIR'; repeatable) instead of "
                   "every <build>/synth/<config>/")
    r.add_argument("--build", default=None, help=f"the build folder to collect from "
                   f"(default {HELP})")
    r.add_argument("--records", default=str(RECORDS), help="the records folder (default: "
                   "records/ at the repository root)")
    r.add_argument("--root", default=str(ROOT), help="the folder holding README.md and docs/ "
                   "(default: the repository root)")
    r.add_argument("--file", action="append", metavar="MD", help="only this Markdown file "
                   "(repeatable; default README.md and docs/**/*.md under --root)")
    r.set_defaults(func=cmd_report)
