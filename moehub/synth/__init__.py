"""Synthesis of the hub: ASIC (Yosys + ABC + OpenSTA, N5 projection), ECP5, equivalence.

Python API: :func:`run` -> :class:`SynthResult` (``moehub.synth.api``); the command line is
``moehub synth`` / ``synth-sweep`` / ``equiv`` (``moehub.synth.cli``). Loaded on first use,
so that ``import moehub.synth.<module>`` stays light.
"""
_API = ("run", "SynthResult")


def __getattr__(name):
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'moehub.synth' has no attribute {name!r}")
