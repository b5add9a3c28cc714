"""Design-space exploration of the hub (``moehub explore``).

A grid over hub parameters (lanes, chunk bytes, tags per source, tile rows, experts per
GPU, GPUs = sources) and workloads (model, system, workload, tokens per GPU); every point
is synthesized (N5 area, deepest stage in FO4 and its verdict at 1.98 GHz) and
co-simulated (the hub's layer speedup over the best software baseline, its receive
memory), on Dask: a local cluster on this machine's cores by default, a scheduler
address, or a Slurm/PBS cluster through dask-jobqueue. Results are cached per point by a
hash of its configuration and the tool versions, so a run resumes where it stopped; the
Pareto set (area, speedup, memory) is marked in the table and drawn.

    >>> from moehub import explore
    >>> spec = explore.Spec()
    >>> spec.add_axis("lanes", [2, 4]); spec.add_axis("tags", [8, 32])
    >>> res = explore.run(spec, workers=2)          # ExploreResult
    >>> print(res.table()); res.pareto              # rows on the front

Modules: :mod:`.space` (axes, grid, points), :mod:`.evaluator` (synthesis + co-simulation
of a point, the cache), :mod:`.cluster` (Dask), :mod:`.pareto` (front and figure),
:mod:`.runner` (the run), :mod:`.cli` (the command).
"""
from .evaluator import cosimulate, evaluate, synthesize
from .runner import ExploreResult, run
from .space import AXES, Point, Spec, load_spec_file

__all__ = ["AXES", "ExploreResult", "Point", "Spec", "cosimulate", "evaluate", "load_spec_file",
           "run", "synthesize"]
