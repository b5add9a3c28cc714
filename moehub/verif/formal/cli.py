"""``moehub formal``: run the formal property sets with SymbiYosys (registered by
scripts/cli.py). Exit codes: 0 every job passed, 1 one failed (or was not proven:
UNKNOWN, ERROR), 2 bad arguments, 3 yowasp-sby or a solver missing.

Each job also leaves ``result.json`` in its work folder (``<build>/formal/<set>-<mode>/``):
the set, config, mode, depth, status, wall and CPU seconds, the load before it and the
hash of the RTL sources it proved, with the command's run record: what ``moehub report
--collect formal`` records (the printed table is for people, not for the report)."""
from __future__ import annotations

import json
import os
import sys
import time

from ...paths import HELP


def add_parser(subparsers) -> None:
    from .sets import SETS
    p = subparsers.add_parser(
        "formal", help="formal proofs of the hub's components (SymbiYosys from PyPI)",
        description="Prove the allocator, queues, tracker and packet manager properties "
                    f"(BMC, k-induction, covers); work folders under <build>/formal/ (<build> is {HELP}).")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"property sets or components (default: all): {', '.join(SETS)}")
    p.add_argument("--mode", default="all", choices=["bmc", "prove", "cover", "all"],
                   help="one mode, or every mode a set lists (default)")
    p.add_argument("--depth", type=int, default=None, help="override every job's depth (cycles)")
    p.add_argument("--smoke", action="store_true", help="the fast smoke jobs only (< 30 s)")
    p.set_defaults(func=cmd_formal)


def cmd_formal(args) -> int:
    from .sby import ToolMissing, check_tools
    from .sets import jobs, run
    if args.depth is not None and args.depth < 1:
        print(f"moehub formal: --depth = {args.depth}: must be >= 1", file=sys.stderr)
        return 2
    try:
        todo = jobs(args.names, args.mode, args.depth, args.smoke)
    except KeyError as e:
        from .sets import SETS
        print(f"moehub formal: unknown property set {e}; known: {', '.join(SETS)}", file=sys.stderr)
        return 2
    try:
        check_tools()
    except ToolMissing as e:
        print(f"moehub formal: {e}", file=sys.stderr)
        return 3
    rows = []
    print(f"{'property set':<16} {'config':<32} {'mode':<6} {'depth':>5} {'result':<8} {'time':>7}")
    for s, mode, depth in todo:
        load0, started, cpu0 = [round(x, 2) for x in os.getloadavg()], time.time(), os.times()
        r = run(s, mode, depth)
        rows.append(r)
        write_result(s, r, smoke=args.smoke, load_avg=load0, started=started,
                     cpu_s=_children_cpu(cpu0))
        print(f"{s.name:<16} {s.config:<32} {mode:<6} {depth:>5} {r.status:<8} {r.seconds:>6.1f}s", flush=True)
        _details(r)
    bad = [r for r in rows if r.status != "PASS"]
    print(f"{len(rows) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


def _children_cpu(before) -> float:
    """CPU seconds of the sub-processes (sby, Yosys, the solvers) waited for since ``before``."""
    now = os.times()
    return round((now.children_user - before.children_user)
                 + (now.children_system - before.children_system), 1)


def write_result(s, r, *, smoke: bool, load_avg: list, started: float, cpu_s: float):
    """``result.json`` of one job beside its sby folder: what the job proved and how long it
    took, the RTL sources' hash (a later RTL edit leaves it older) and the run record."""
    from ... import runinfo
    from ...runinfo import iso, rtl_sources_hash
    out = r.workdir.parent / "result.json"
    doc = {"set": s.name, "component": s.component, "config": s.config, "mode": r.mode,
           "depth": r.depth, "full_depth": s.modes.get(r.mode), "smoke": smoke,
           "status": r.status, "seconds": round(r.seconds, 1), "cpu_s": cpu_s,
           "failed": r.failed, "step": r.step, "load": load_avg, "job_started": iso(started),
           "rtl_sha256": rtl_sources_hash(), "record": runinfo.record()}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return out


def _details(r) -> None:
    """Why a job did not pass: the properties, the trace, the log."""
    if r.status == "PASS":
        return
    what = ("unreached cover" if r.mode == "cover" else
            "not inductive (k-induction did not close)" if r.status == "UNKNOWN" else "failed")
    for f in dict.fromkeys(r.failed):
        print(f"    {what}: {f}")
    if r.trace:
        kind = "induction trace" if r.status == "UNKNOWN" else "counterexample"
        print(f"    {kind}{f' (step {r.step})' if r.step is not None else ''}: {r.trace}")
    print(f"    log: {r.log}")
