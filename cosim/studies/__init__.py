"""Studies beyond one co-simulated layer (``moehub study ...``).

Each study is one module with ``add_parser(subparsers)`` (its ``moehub study <name>``
sub-command) and writes its tables and figures under ``<build>/results/study-<name>/``:

* :mod:`.xmoe` -- the X-MoE half: activation memory per system, redundancy-bypassing
  hierarchical dispatch, sequence-sharded MoE blocks, and the hub's version of each.
* :mod:`.gps` -- the MoE-GPS half: expert duplication, prediction strategies (with a
  realized mode), the guideline map, and where the hub's exact counts and replica choice
  land on it.
* :mod:`.v2` -- hub protocol v2 (issue 14): multicast rows, per-expert count packets and
  the page pool, each switchable, against today's hub and the software systems.
"""
