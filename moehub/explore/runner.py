"""Running an exploration: check everything, skip cached points, evaluate the rest on
Dask, then write the table, the Pareto set and the figure into a results folder.

Files: the cache ``<build>/explore/points/<key>.json`` (one per point, kept across runs),
synthesis work folders ``<build>/explore/synth/<key>/``, and the results folder
``<build>/results/explore-<name>/`` (``--out`` replaces ``<build>/results``):
``points.csv``, ``pareto.csv``, ``pareto.png`` and ``.svg``, ``spec.yaml`` and
``run.json``. The results folder is written whole or not at all and replaced only with
``force`` (:func:`moehub.paths.writing`); the cache is what makes a run resumable.
"""
from __future__ import annotations

import csv
import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .. import progress
from ..paths import claim, output_dir, writing
from .. import cluster as clusters
from . import pareto
from ..cluster import Cache
from .evaluator import cache_key, evaluate, evaluator_name, run_point, tool_versions
from .space import MAX_POINTS, Point, Spec, _short, features_text, points

#: columns of points.csv first (an evaluator's other metrics follow)
COLUMNS = ("point", "label", "workload", "model", "system", "sources", "experts", "tokens",
           "lanes", "chunk_bytes", "tags", "tile_rows", "features", "n5_mm2", "n5_mm2_low", "n5_mm2_high",
           "gate_equivalents", "fo4", "timing", "n5_fmax_GHz", "bandwidth_pass", "speedup",
           "best_baseline", "hub_us", "best_us", "speedup_e2e", "receive_bytes", "receive_MiB",
           "deepep_ll_receive_bytes", "tag_stalls", "pareto", "cached", "key", "synth_s",
           "cosim_s", "wall_s", "host")


@dataclass
class ExploreResult:
    """An exploration's rows (one per point, :data:`COLUMNS`), where they were written,
    and the points that failed (label, error)."""
    rows: list
    folder: Path | None
    evaluated: int = 0
    cached: int = 0
    failures: list = field(default_factory=list)

    @property
    def pareto(self) -> list:
        return [r for r in self.rows if r.get("pareto")]

    def table(self) -> str:
        return table(self.rows)


def default_name(spec: Spec) -> str:
    """``lanes2+4_tags8+16``: the swept axes and values (a digest when that is too long)."""
    name = "_".join(f"{k}{'+'.join(_short(v) for v in vals)}" for k, vals in spec.axes.items()) or "base"
    name = re.sub(r"[^A-Za-z0-9+._-]", "-", name)
    if len(name) > 80:
        name = name[:60] + "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def _row(i: int, p: Point, key: str, rec: dict, cached: bool) -> dict:
    m = rec["metrics"]
    h = p.hub
    row = {"point": i, "label": p.label, "workload": p.workload_label, "model": p.model.name,
           "system": p.system.name, "sources": h.sources, "experts": h.experts,
           "tokens": p.workload.tokens_per_gpu, "lanes": h.lanes, "chunk_bytes": h.chunk_bytes,
           "tags": h.tags_per_source, "tile_rows": h.tile_rows,
           "features": features_text(getattr(p, "hub_features", frozenset())), **m, "cached": cached,
           "key": key[:16], "wall_s": rec.get("wall_s"), "host": rec.get("host")}
    if row.get("receive_bytes") is not None:
        row["receive_MiB"] = round(row["receive_bytes"] / 2**20, 3)
    return row


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def table(rows: list) -> str:
    """The printed table: one line per point, the Pareto set starred."""
    cols = [("", lambda r: "*" if r.get("pareto") else ""), ("#", lambda r: r["point"]),
            ("point", lambda r: r["label"]), ("N5 mm2", lambda r: r.get("n5_mm2")),
            ("FO4", lambda r: r.get("fo4")), ("timing", lambda r: r.get("timing")),
            ("speedup", lambda r: r.get("speedup")), ("best", lambda r: r.get("best_baseline")),
            ("recv MiB", lambda r: r.get("receive_MiB")),
            ("cached", lambda r: "yes" if r.get("cached") else "")]
    if len({r["workload"] for r in rows}) > 1:
        cols.insert(3, ("workload", lambda r: r["workload"]))
    cells = [[_fmt(f(r)) for _, f in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, (h, _) in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w) if i < 3 else v.rjust(w)   # noqa: E731
                                  for i, (v, w) in enumerate(zip(vals, widths)))
    return "\n".join([line([h for h, _ in cols]), *(line(c) for c in cells)])


def write_csv(rows: list, path: Path) -> None:
    extra = [k for r in rows for k in r if k not in COLUMNS]
    cols = list(COLUMNS) + list(dict.fromkeys(extra))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def spec_document(spec: Spec, evaluator) -> dict:
    return {"name": spec.name, "axes": spec.axes, "fixed": spec.fixed,
            "synth_chunks": spec.synth_chunks, "data_bits": spec.data_bits,
            "clock_ns": spec.period_ns, "evaluator": evaluator_name(evaluator)}


def run(spec: Spec, *, evaluator=None, scheduler: str | None = None, cluster: str = "local",
        workers: int | None = None, cluster_options: dict | None = None, out=None,
        force: bool = False, use_cache: bool = True, max_points: int = MAX_POINTS,
        write: bool = True) -> ExploreResult:
    """Explore ``spec``; see :mod:`moehub.explore`. Everything that can be refused is
    refused before the first point runs (``ConfigError``, ``UsageError``,
    ``OutputDirError``, ``ToolMissing``)."""
    from ..cosim.experiment import results_dir
    evaluator = evaluator or evaluate
    spec.name = spec.name or default_name(spec)
    pts = points(spec, max_points)
    clusters.check(scheduler, cluster, cluster_options or {})
    folder = claim(results_dir(out) / f"explore-{spec.name}", force) if write else None
    cache = Cache(output_dir("explore", "points"))
    work_root = output_dir("explore", "synth")
    versions = tool_versions()
    keys = [cache_key(p, versions, evaluator) for p in pts]
    records = {k: cache.get(k) for k in keys} if use_cache else {}
    todo = {k: p for k, p in zip(keys, pts) if records.get(k) is None}
    if todo and evaluator is evaluate:
        from ..synth import tools
        missing = tools.asic_tools_missing()
        if missing:
            raise tools.ToolMissing(missing)
    n_cached = len(set(keys)) - len(todo)
    progress.info(f"explore {spec.name}: {len(pts)} points, {n_cached} cached "
                  f"({cache.folder}), {len(todo)} to evaluate")
    failures = []
    if todo:
        failures = _evaluate(todo, records, cache, work_root, evaluator, versions,
                             scheduler=scheduler, cluster=cluster, workers=workers,
                             options=cluster_options)
    rows = [_row(i, p, k, records[k], k not in todo) for i, (p, k) in enumerate(zip(pts, keys))
            if records.get(k) is not None]
    pareto.mark(rows)
    res = ExploreResult(rows, folder, len(todo) - len(failures), n_cached, failures)
    if write and rows:
        with writing(folder, force, run=folder.name, points=len(pts), evaluated=res.evaluated,
                     cached=n_cached, failed=len(failures), cluster=scheduler or cluster,
                     tools=versions) as tmp:
            write_csv(rows, tmp / "points.csv")
            write_csv(res.pareto, tmp / "pareto.csv")
            (tmp / "spec.yaml").write_text(yaml.safe_dump(spec_document(spec, evaluator),
                                                          sort_keys=False))
            pareto.figure(rows, tmp / "pareto.png",
                          f"moehub explore {spec.name}: {len(rows)} points, "
                          f"{len(res.pareto)} on the Pareto front (ringed)")
    return res


def _evaluate(todo: dict, records: dict, cache: Cache, work_root: Path, evaluator, versions,
              **where) -> list:
    """Evaluate ``todo`` (key -> point) on Dask; each result is cached as it arrives, so an
    interrupted run resumes from there. Returns the failures (label, error)."""
    from distributed import as_completed
    failures = []
    with clusters.client(len(todo), where["scheduler"], where["cluster"], where["workers"],
                         where["options"]) as c, \
            progress.stage("explore: points evaluated", total=len(todo), unit="points",
                           heartbeat=True) as st:
        futures = {c.submit(run_point, p, str(work_root / k), evaluator, key=f"explore-{k[:20]}",
                            pure=False): k for k, p in todo.items()}
        for i, fut in enumerate(as_completed(futures), 1):
            k = futures[fut]
            p = todo[k]
            try:
                res = fut.result()
            except Exception as e:         # a failed point is reported; the others go on
                failures.append((p.label, f"{type(e).__name__}: {e}"))
                print(f"[{i}/{len(todo)}] {p.label}: FAILED: {e}", flush=True)
                st.advance(note=f"{p.label} failed")
                continue
            rec = {"label": p.label, "values": dict(p.values), "workload": p.workload_label,
                   "evaluator": evaluator_name(evaluator), "tools": versions,
                   "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **res}
            cache.put(k, rec)
            records[k] = rec
            print(f"[{i}/{len(todo)}] {p.label}: {_summary(res['metrics'])}  "
                  f"({res['wall_s']:.0f} s on {res['host']})", flush=True)
            st.advance(note=p.label)
    return failures


def _summary(m: dict) -> str:
    parts = []
    if m.get("n5_mm2") is not None:
        parts.append(f"{m['n5_mm2']:.4f} mm2 N5")
    if m.get("fo4") is not None:
        parts.append(f"{m['fo4']:.1f} FO4 {m.get('timing', '')}".rstrip())
    if m.get("speedup") is not None:
        parts.append(f"speedup {m['speedup']:.3f} vs {m.get('best_baseline')}")
    if m.get("receive_bytes") is not None:
        parts.append(f"{m['receive_bytes'] / 2**20:.1f} MiB")
    return ", ".join(parts)
