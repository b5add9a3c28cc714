"""The hub's cocotb testbench, one for every hub config, its tests chosen by the hub's
protocol-v2 features.

- :mod:`~moehub.verif.tb.context`: what a run is for (config, features, seeds, settings),
  handed from the pytest side to the simulator's Python.
- :mod:`~moehub.verif.tb.drivers`, :mod:`~moehub.verif.tb.monitors`,
  :mod:`~moehub.verif.tb.scoreboard`: the reusable pieces -- the register-bus master, the
  input lanes' source, the output ports' back-pressure, the output monitors, the
  scoreboard against the reference model; :mod:`~moehub.verif.tb.env` puts them together
  (:class:`~moehub.verif.tb.env.HubTB`, clock and reset).
- :mod:`~moehub.verif.tb.library`: the base of the test suites and the stimulus helpers;
  ``suite_rules`` (protocol v1's rules), ``suite_counts``, ``suite_paged``,
  ``suite_multicast`` and ``suite_combined`` (the features together): the tests, a class
  per feature set.
- :mod:`~moehub.verif.tb.registry`: which tests a hub's features collect;
  :mod:`~moehub.verif.tb.hub`: the cocotb module the simulator loads.

Run it through :func:`moehub.verif.cocotb_runner.run_hub_cocotb` (tests/test_hub_cocotb.py).
"""
