"""What one run of the hub testbench is for: the hub config, its protocol-v2 feature set,
the seeds and the run's settings -- one value, handed from the pytest side to the
simulator's Python in one environment variable.

The simulator runs the testbench in a process of its own, so whatever the test on the
pytest side chose has to cross a process boundary; :class:`TbContext` is that crossing,
written by :func:`moehub.verif.cocotb_runner.run_hub_cocotb` (:meth:`TbContext.to_env`)
and read once, by the testbench's entry module (:meth:`TbContext.from_env`), which then
collects the tests that apply to the hub's features (:mod:`moehub.verif.tb.library`).
Pure Python: the pytest side imports it without a simulator.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Mapping, Optional

from ...spec.config import HubConfig, load_hub_config

#: the environment variable that carries the context into the simulator's Python
ENV_VAR = "MOEHUB_TB"

#: protocol-v2 features a hub config may enable (spec/config.py): per-expert count
#: packets, rows in pages of a pool, rows to several experts of this GPU
COUNTS, PAGED, MULTICAST = "counts", "paged", "multicast"
FEATURES = (COUNTS, PAGED, MULTICAST)


def features_of(cfg: HubConfig) -> frozenset:
    """The protocol-v2 features ``cfg`` enables (the empty set: a protocol-v1 hub)."""
    on = {COUNTS: cfg.count_packets, PAGED: cfg.paged, MULTICAST: cfg.multicast}
    return frozenset(f for f in FEATURES if on[f])


def feature_label(features) -> str:
    """``{"paged", "counts"}`` -> ``"paged+counts"`` (feature order), ``"v1"`` for none."""
    return "+".join(f for f in FEATURES if f in features) or "v1"


#: tile sizes the tile-boundary test walks: "auto" (every size where three tiles of the
#: largest are cheap, else the smallest) or "all"
TILE_SIZES = ("auto", "all")


@dataclass(frozen=True)
class TbContext:
    """One testbench run's inputs (see the module docstring).

    config : a shipped config's name, or the path of a YAML file (tests/data/*.yaml)
    seed, seeds : the random tests run ``seeds`` consecutive seeds from ``seed``
    timeout_scale : scales every test's limit of simulated time (the mutation tool runs
        0.05, so that a hung mutant fails in 100k cycles instead of minutes of Icarus)
    knob_packets : packets per layer of the boundary-knob test
    tile_sizes : see :data:`TILE_SIZES`
    full_region : the fill test fills one expert's whole region (the coverage run)
    perf_out : a file the throughput tests append their JSON lines to (None: none)
    """
    config: str
    seed: int = 1
    seeds: int = 1
    timeout_scale: float = 1.0
    knob_packets: int = 1200
    tile_sizes: str = "auto"
    full_region: bool = False
    perf_out: Optional[str] = None

    def __post_init__(self):
        checks = {"seed": lambda v: isinstance(v, int) and v >= 0,
                  "seeds": lambda v: isinstance(v, int) and v >= 1,
                  "timeout_scale": lambda v: isinstance(v, (int, float)) and v > 0,
                  "knob_packets": lambda v: isinstance(v, int) and v > 0,
                  "tile_sizes": lambda v: v in TILE_SIZES,
                  "full_region": lambda v: isinstance(v, bool),
                  "config": lambda v: isinstance(v, str) and v != ""}
        for key, ok in checks.items():
            if not ok(getattr(self, key)):
                raise ValueError(f"testbench context: bad {key} = {getattr(self, key)!r}")

    @cached_property
    def cfg(self) -> HubConfig:
        """The hub config (loaded once)."""
        return load_hub_config(self.config)

    @property
    def features(self) -> frozenset:
        return features_of(self.cfg)

    def with_(self, **changes) -> "TbContext":
        """A copy with ``changes`` (unknown keys are an error naming them)."""
        _known(changes)
        return TbContext(**{**asdict(self), **changes})

    def to_env(self) -> dict:
        """``{ENV_VAR: json}`` for the simulator's environment."""
        return {ENV_VAR: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def from_env(cls, environ: Optional[Mapping] = None) -> "TbContext":
        """The context the runner wrote (a clear error when it is missing or malformed)."""
        environ = os.environ if environ is None else environ
        text = environ.get(ENV_VAR)
        if not text:
            raise RuntimeError(f"{ENV_VAR} is not set: run the hub testbench through "
                               "moehub.verif.cocotb_runner.run_hub_cocotb")
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{ENV_VAR} = {text!r} is not JSON: {e}") from None
        if not isinstance(values, dict) or "config" not in values:
            raise ValueError(f"{ENV_VAR} = {text!r}: expected an object with a 'config' key")
        _known(values)
        return cls(**values)


def _known(values: Mapping) -> None:
    """Every key of ``values`` is a setting of :class:`TbContext` (else an error naming it)."""
    names = {f.name for f in fields(TbContext)}
    bad = sorted(set(values) - names)
    if bad:
        raise ValueError(f"testbench context: unknown setting(s) {bad}; known: {sorted(names)}")
