"""The RTL's timing contract in plain Python (moehub.spec.timing), and a co-simulation that
runs without Amaranth."""
import inspect
import re
import subprocess
import sys

_IMPORT_ALL_COSIM = """
import importlib, pkgutil, sys
import moehub.cosim
names = [m.name for m in pkgutil.walk_packages(moehub.cosim.__path__, "moehub.cosim.")]
for name in names:
    importlib.import_module(name)
assert "moehub.cosim.systems.hub" in sys.modules and "moehub.cosim.hub_rtl" in sys.modules
print(len(names), "amaranth" in sys.modules)
"""


def test_cosim_imports_no_amaranth():
    """Every module of moehub.cosim (cosim.systems.* included) imports without Amaranth:
    the latencies and layouts it needs come from moehub.spec.timing."""
    run = subprocess.run([sys.executable, "-c", _IMPORT_ALL_COSIM], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = run.stdout.split()
    assert int(out[0]) >= 20 and out[1] == "False", f"amaranth imported by moehub.cosim ({out})"


def test_timing_matches_the_rtl():
    """The RTL builds with these very numbers (it imports them from moehub.spec.timing and
    defines none of its own), and the derived ones keep their definitions. (The cycles
    themselves are asserted by the cocotb regression: test_latency, test_throughput_*.)"""
    from moehub.spec.config import QUEUE_GROUPS
    from moehub.rtl import hub, layouts, packet_manager, reservations, tracker, write_buffer
    from moehub.spec import timing
    assert timing.IN_FLIGHT_GROUPS == QUEUE_GROUPS - 1
    assert timing.FLAG_LATENCY == timing.EVENT_LATENCY + 4
    assert timing.CREDIT_LATENCY == timing.EVENT_LATENCY + 1
    names = ("WRITE_LATENCY", "EVENT_LATENCY", "FLAG_LATENCY", "CREDIT_LATENCY", "WRITE_FIFO_DEPTH",
             "IN_FLIGHT_GROUPS", "GROUP_BITS", "GROUP_AGE_LIMIT")
    for mod in (hub, layouts, packet_manager, reservations, tracker, write_buffer):
        src = inspect.getsource(mod)
        assert not [n for n in names if re.search(rf"^{n}\s*=", src, re.M)], f"{mod.__name__} redefines a timing constant"
    assert packet_manager.GROUP_AGE_LIMIT == timing.GROUP_AGE_LIMIT
    assert write_buffer.WRITE_FIFO_DEPTH == reservations.WRITE_FIFO_DEPTH == timing.WRITE_FIFO_DEPTH
