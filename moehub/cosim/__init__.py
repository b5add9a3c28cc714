"""The co-simulation: one MoE layer on a multi-GPU system, the hub against software baselines.

Python API: :func:`run` -> :class:`CosimResult` (``moehub.cosim.api``); the command line
is ``moehub cosim`` / ``moehub sweep`` (``moehub.cosim.cli``). Loaded on first use, so that
``import moehub.cosim.<module>`` stays light.
"""
_API = ("run", "CosimResult")


def __getattr__(name):
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'moehub.cosim' has no attribute {name!r}")
