"""Where the points run: a Dask cluster.

* default: a ``LocalCluster`` on this machine, one single-threaded worker *process* per
  core (synthesis and the co-simulation are CPU-bound Python and tools: threads would
  share one interpreter), at most one per point;
* ``scheduler``: a running Dask scheduler (``tcp://host:port``), e.g. started by hand
  with ``dask scheduler`` and ``dask worker`` on other machines;
* ``cluster`` ``slurm`` or ``pbs``: a dask-jobqueue cluster (``pip install
  'moehub[explore-hpc]'``), its options (queue, account, cores, memory, walltime, ...)
  passed through as ``key=value``; it is scaled to ``workers`` workers.

Every mode needs the same moehub (and, for synthesis, the same tools) on every worker,
and the build folder on a file system the workers share, or their synthesis files stay in
a temporary folder on the worker (the figures come back either way).
"""
from __future__ import annotations

import contextlib
import logging
import json
import os
from pathlib import Path

import yaml

from .argcheck import UsageError

#: jobqueue cluster classes by --cluster name
JOBQUEUE = {"slurm": "SLURMCluster", "pbs": "PBSCluster"}
CLUSTERS = ("local", *JOBQUEUE)
HPC_PIP = "pip install 'moehub[explore-hpc]'  (or: pip install dask-jobqueue)"


def parse_options(items) -> dict:
    """``["queue=gpu", "cores=8"]`` -> {"queue": "gpu", "cores": 8} (values read as YAML
    scalars: numbers, booleans, strings; a list such as ``job_extra_directives=[--gres=x]``)."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError("--cluster-opt", item, "expected KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def jobqueue_class(kind: str):
    """The dask-jobqueue class of ``kind``; exit 2 naming the pip command when missing."""
    try:
        import dask_jobqueue
    except ImportError:
        raise UsageError("--cluster", kind, f"needs dask-jobqueue, which is not installed: "
                         f"{HPC_PIP}") from None
    return getattr(dask_jobqueue, JOBQUEUE[kind])


def check(scheduler: str | None, cluster: str, options: dict) -> None:
    """Refuse bad combinations before any work (a missing dask-jobqueue included)."""
    if scheduler and cluster != "local":
        raise UsageError("--scheduler", scheduler, f"give either --scheduler or --cluster {cluster}")
    if scheduler and "://" not in scheduler:
        raise UsageError("--scheduler", scheduler, "expected an address such as tcp://host:8786")
    if options and cluster == "local":
        raise UsageError("--cluster-opt", ", ".join(options), "only with --cluster slurm|pbs")
    if cluster in JOBQUEUE:
        jobqueue_class(cluster)


def _worker_plugin():
    """A plugin that, when a worker closes (the run ends or is interrupted), kills the tool
    processes its task started (Yosys, OpenSTA): they would otherwise run on, orphaned."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class KillTools(WorkerPlugin):
        name = "moehub-explore-kill-tools"

        def teardown(self, worker):
            import psutil
            for child in psutil.Process().children(recursive=True):
                try:
                    child.kill()
                except psutil.Error:
                    pass
    return KillTools()


def local_workers(workers: int | None, points: int) -> int:
    """Worker processes of the local cluster: ``workers``, else one per core; never more
    than there are points to run."""
    return max(1, min(workers or os.cpu_count() or 1, points))


@contextlib.contextmanager
def client(points: int, scheduler: str | None = None, cluster: str = "local",
           workers: int | None = None, options: dict | None = None, timeout_s: float = 30):
    """A ``distributed.Client`` for ``points`` points, closed (with its cluster) on exit."""
    from distributed import Client, LocalCluster
    if scheduler:
        try:
            c = Client(scheduler, timeout=timeout_s)
        except (OSError, TimeoutError) as e:
            raise UsageError("--scheduler", scheduler, f"no Dask scheduler answered ({e})") from None
        with c:
            yield c
        return
    if cluster in JOBQUEUE:
        cls = jobqueue_class(cluster)
        try:
            jq = cls(**(options or {}))
        except (TypeError, ValueError) as e:
            raise UsageError("--cluster-opt", ", ".join(f"{k}={v}" for k, v in (options or {}).items()),
                             f"{JOBQUEUE[cluster]} refused it: {e}") from None
        with jq:
            jq.scale(workers or min(points, 4))
            with Client(jq) as c:
                c.register_plugin(_worker_plugin())
                yield c
        return
    n = local_workers(workers, points)
    # the nanny's "still alive after 4 s, killing" at the end is routine on a busy machine
    logging.getLogger("distributed.nanny").setLevel(logging.ERROR)
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as lc, Client(lc) as c:
        c.register_plugin(_worker_plugin())
        yield c


class Cache:
    """Evaluated points as ``<folder>/<key>.json``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The record of ``key``, or None (missing, or unreadable: evaluated again)."""
        try:
            rec = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and rec.get("key") == key and "metrics" in rec else None

    def put(self, key: str, record: dict) -> Path:
        """Write ``record`` whole: a temporary file renamed into place."""
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.path(key)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({**record, "key": key}, indent=1, default=str) + "\n")
        os.replace(tmp, final)
        return final
