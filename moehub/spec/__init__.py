"""The hub's contract, in pure Python: what every other part of the kit is built from.

* :mod:`.config` -- the configuration schema (``HubConfig``, loaded from ``moehub/config``);
* :mod:`.formats` -- packet, event and control-write formats, drop reasons;
* :mod:`.csr_map` -- the register map (bank, C header, JSON and the model's registers);
* :mod:`.timing` -- the hub's pipeline latencies in cycles;
* :mod:`.model` -- the reference model (``HubModel``), the scoreboard of every RTL test;
* :mod:`.program` -- the register program that configures a layer;
* :mod:`.relay` -- protocol v3's relay hub and reduce-on-combine reference model.

Nothing here imports Amaranth or another folder of the package (``tests/test_architecture.py``).
"""
