"""Studies beyond one co-simulated layer (``moehub study ...``).

Each study is one module with ``add_parser(subparsers)`` (its ``moehub study <name>``
sub-command) and writes its tables and figures under ``<build>/results/study-<name>/``:

* :mod:`.xmoe` -- the X-MoE half: activation memory per system, redundancy-bypassing
  hierarchical dispatch, sequence-sharded MoE blocks, and the hub's version of each.
* :mod:`.gps` -- the MoE-GPS half: expert duplication, prediction strategies (with a
  realized mode), the guideline map, and where the hub's exact counts and replica choice
  land on it.
* :mod:`.v2` -- hub protocol v2: multicast rows, per-expert count packets and
  the page pool, each switchable, against today's hub and the software systems.
"""


def publish(args, name: str, compute, write, report) -> int:
    """The common ending of a study command: claim ``<out or results>/name`` (refused if it
    holds another run unless ``--force``), compute, write the files into a scratch folder
    that replaces the results folder only when all are written (``paths.writing``), print
    the report and the files. ``compute()`` gives the results; ``write(res, folder,
    figures)`` the paths written; ``report(res)`` the text printed."""
    from ...paths import claim, writing
    from ..experiment import results_dir
    folder = claim(results_dir(args.out) / name, args.force)
    res = compute()
    with writing(folder, args.force, run=folder.name) as tmp:
        names = [p.name for p in write(res, tmp, not args.no_figure)]
    print(report(res))
    for n in names + ["run.json"]:
        print(f"  {folder / n}")
    return 0
