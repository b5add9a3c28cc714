"""Wall time of the synthesis flows, per configuration and step, printed as a table.

    .venv/bin/python scripts/bench_synth.py                 # tiny (ASIC)
    .venv/bin/python scripts/bench_synth.py --config mixtral-8gpu --config deepseek-v3-8gpu
    .venv/bin/python scripts/bench_synth.py --reuse          # read times of earlier runs

Times are measured by the flow around each tool (moehub.synth.tools.run_logged) and kept
in report.json; this script runs the flow (or reuses its report) and tabulates them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from moehub.spec.config import load_hub_config
from moehub.synth import flow


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", help="hub config (repeatable; default tiny)")
    p.add_argument("--target", choices=flow.TARGETS, default="asic")
    p.add_argument("--reuse", action="store_true", help="report the times of the last runs, run nothing")
    args = p.parse_args(argv)
    rows = []
    for name in args.config or ["tiny"]:
        cfg = flow.synth_config(load_hub_config(name))
        rep_path = flow.out_dir_for(cfg) / "report.json"
        if not args.reuse:
            flow.run(name, args.target)
        if not rep_path.exists():
            print(f"bench_synth: no report for {name} at {rep_path}", file=sys.stderr)
            return 1
        sec = json.loads(rep_path.read_text()).get(args.target)
        if not sec:
            print(f"bench_synth: {rep_path} has no {args.target} section", file=sys.stderr)
            return 1
        top = sec["modules"]["top"] if args.target == "asic" else sec
        size = f"{top['cells']} cells" if args.target == "asic" else f"{top['luts']} LUT4"
        rows.append((name, cfg.data_bits, size, sec["wall_s"]))
    steps = sorted({k for r in rows for k in r[3] if k != "total"}) + ["total"]
    head = ["config", "data bits", "size"] + [f"{s} s" for s in steps]
    table = [head] + [[n, str(d), s] + [f"{w.get(k, 0):.1f}" for k in steps] for n, d, s, w in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for k, r in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
