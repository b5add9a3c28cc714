"""The hub testbench's cocotb module: the one the simulator loads for every hub config.

cocotb collects a module's tests when it imports it, so this module asks the registry for
the tests of its run -- the run's :class:`~moehub.verif.tb.context.TbContext`, written by
:func:`moehub.verif.cocotb_runner.run_hub_cocotb` -- and only the tests that apply to the
hub's protocol-v2 features become module attributes, cocotb tests. (The test code lives in
the suites, :mod:`moehub.verif.tb.suite_rules` and its siblings.)
"""
from .context import TbContext
from .registry import cocotb_tests

globals().update(cocotb_tests(TbContext.from_env(), __name__))
