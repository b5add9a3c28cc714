"""Where the published speedups come from: the hub against the papers' kind of baseline
and against today's best software, side by side, over tokens per GPU and the
compute-to-link ratio.

    python -m moehub.cosim.studies.paper_band                       # every default point
    python -m moehub.cosim.studies.paper_band --models mixtral-8x7b --tokens 256 --ratios 1

Each run adds its points to ``band.json`` in ``--out`` (default
``<build>/results/paper-band/``; a point run again replaces its row), each row with the
commit and the load before it, and the file the last run's record: ``moehub report
--collect paper-band`` records it for the docs' tables.

The seeds report MoE-Hub at 1.40-3.08x per layer (:data:`SEED_BAND`) "over
state-of-the-art systems"; Comet 1.96x over Megatron, FlashDMoE up to 6x over Megatron-TE /
-CUTLASS, FasterMoE and Comet. Those baselines are eager Megatron-style layers
(:data:`moehub.cosim.systems.PAPER_BASELINES`), not today's DeepEP / fused kernels
(:data:`~moehub.cosim.systems.BASELINES`). Every point runs all of them and the hub on one
routing (:func:`moehub.cosim.experiment.run_experiment`); the compute-to-link ratio
scales the GPU's dense peaks as the headline map does
(:func:`moehub.cosim.headline_grid.scale_compute_to_link`). Nothing here is fitted: a
point is in the band or not as the mechanisms fall.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..experiment import load_configs, run_experiment
from ..headline_grid import scale_compute_to_link
from ..systems import BASELINES, PAPER_BASELINES

#: MoE-Hub's published per-layer speedup range (the MoE-Hub paper's abstract)
SEED_BAND = (1.40, 3.08)
MODELS = ("mixtral-8x7b", "deepseek-v3")
SYSTEM = "h100x8"
TOKENS = (128, 1024, 4096)
RATIOS = (0.5, 1.0, 2.0, 4.0)


def point(system: str, model: str, tokens: int, ratio: float) -> dict:
    """One point's layer times and the hub's speedups over both kinds of baseline."""
    s, m, w = load_configs(system, model, "default", tokens)
    s = scale_compute_to_link(s, ratio)
    er = run_experiment(s, m, w, systems=(*BASELINES, *PAPER_BASELINES, "hub", "ideal"))
    lat = {n: r.latency_us for n, r in er.results.items()}
    hub = lat["hub"]
    today = min(BASELINES, key=lat.get)
    paper = min(PAPER_BASELINES, key=lat.get)
    return {"model": model, "system": system, "tokens": tokens, "ratio": ratio,
            "ideal_us": lat["ideal"], "hub_us": hub, "today": today,
            "vs_today": lat[today] / hub, "paper": paper, "vs_paper": lat[paper] / hub,
            **{f"vs_{n}": lat[n] / hub for n in PAPER_BASELINES},
            "in_band": SEED_BAND[0] <= lat[paper] / hub <= SEED_BAND[1]}


def table(rows: list) -> str:
    """The rows as Markdown: hub speedup over today's best and over the papers' kind."""
    head = ("| model | tokens/GPU | compute x | ideal µs | hub µs | vs today's best | "
            + " | ".join(f"vs {n}" for n in PAPER_BASELINES)
            + " | vs papers' fastest | in seeds' band |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        out.append(f"| {r['model']} | {r['tokens']} | {r['ratio']:g} | {r['ideal_us']:.0f} | "
                   f"{r['hub_us']:.0f} | {r['vs_today']:.2f}x {r['today']} | "
                   + " | ".join(f"{r['vs_' + n]:.2f}x" for n in PAPER_BASELINES)
                   + f" | {r['vs_paper']:.2f}x {r['paper']} | {'yes' if r['in_band'] else 'no'} |")
    return "\n".join(out)


#: the file of the rows in the output folder
ROWS_FILE = "band.json"


def _key(r: dict) -> tuple:
    return (r["model"], r["system"], int(r["tokens"]), float(r["ratio"]))


def save_rows(path: Path, new: list) -> None:
    """Add ``new`` to the rows at ``path`` with this run's record: a row of the same
    (model, system, tokens, ratio) replaces the older one, the others are kept, in the
    order of models, then tokens, then ratios."""
    from ... import runinfo
    path = Path(path)
    doc = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    redo = {_key(n) for n in new}
    rows = [r for r in doc.get("rows", []) if _key(r) not in redo] + new
    rank = {m: i for i, m in enumerate(MODELS)}
    rows.sort(key=lambda r: (rank.get(r["model"], len(rank)), r["model"], r["system"],
                             int(r["tokens"]), float(r["ratio"])))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"record": runinfo.record(), "rows": rows}, indent=1) + "\n")
    os.replace(tmp, path)


def summary(rows: list) -> str:
    """How many points fall in the seeds' band against the papers' kind, and the hub's
    range against today's best."""
    band = [r for r in rows if r["in_band"]]
    return (f"{len(band)} of {len(rows)} points in the seeds' band "
            f"{SEED_BAND[0]:.2f}-{SEED_BAND[1]:.2f}x against the papers' kind; against "
            f"today's best the hub's range is {min(r['vs_today'] for r in rows):.2f}-"
            f"{max(r['vs_today'] for r in rows):.2f}x")


def _floats(text: str, flag: str) -> tuple:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"{flag} = {text!r}: expected comma-separated numbers")
    if not vals or min(vals) <= 0:
        raise SystemExit(f"{flag} = {text!r}: expected numbers > 0")
    return vals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moehub.cosim.studies.paper_band",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default=SYSTEM)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--ratios", default=",".join(f"{r:g}" for r in RATIOS),
                    help="compute-to-link ratios (GPU peaks scaled by each)")
    ap.add_argument("--out", help=f"the folder of {ROWS_FILE} (default <build>/results/paper-band)")
    a = ap.parse_args(argv)
    from ... import runinfo
    from ...paths import output_dir
    runinfo.begin(["python -m moehub.cosim.studies.paper_band", *(sys.argv[1:] if argv is None else argv)])
    runinfo.git_describe()          # the commit at the start (cached), not after later edits
    tokens = tuple(int(t) for t in _floats(a.tokens, "--tokens"))
    ratios = _floats(a.ratios, "--ratios")
    out = output_dir("results", "paper-band", out=a.out) / ROWS_FILE
    rows, t0 = [], time.perf_counter()
    for model in [m.strip() for m in a.models.split(",") if m.strip()]:
        for t in tokens:
            for r in ratios:
                load = round(os.getloadavg()[0], 2)
                rows.append({**point(a.system, model, t, r), "load": load,
                             "git": runinfo.git_describe(), "command": runinfo.record()["command"]})
                print(f"# {model} {t} tok/GPU x{r:g}: hub {rows[-1]['hub_us']:.0f} us "
                      f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    save_rows(out, rows)
    print(table(rows))
    print(f"\n{summary(rows)}\n  {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
