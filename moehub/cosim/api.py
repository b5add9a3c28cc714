"""The co-simulation from Python: one call per MoE layer, a result with table, dict and CSV.

    >>> import moehub.cosim as cosim
    >>> r = cosim.run(model="mixtral-8x7b", system="h100x8", tokens=1024)
    >>> print(r.table())                    # what ``moehub cosim`` prints
    >>> r.speedup("deepep")                 # the hub's speedup over one baseline
    >>> r.to_dict()["systems"]["hub"]["layer_us"]
    >>> r.to_csv("layer.csv")               # one line per system
    >>> r.write()                           # config.yaml, stats, phases, timeline figure

The command line (``moehub cosim``) and this API run the same :func:`run_experiment`;
the arguments mean what the command's options mean (``moehub cosim --help``) and bad
values raise :class:`~moehub.spec.config.ConfigError` naming the key and the value.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from ..spec.config import ConfigError
from .experiment import ExperimentResult, load_configs, run_experiment, stats, table, write_outputs
from .hub_stage import backend_available, known_backends
from .systems import SYSTEMS

#: columns of :meth:`CosimResult.to_csv` (and of ``stats.csv``)
CSV_COLUMNS = ("system", "label", "layer_us", "hub_speedup", "end_to_end_ms", "end_to_end_hub_speedup")


@dataclass
class CosimResult:
    """One co-simulated layer: every system on the same routing.

    Attributes
    ----------
    experiment : ExperimentResult
        Everything the run produced (configs, the layer, per-system phases).
    """
    experiment: ExperimentResult

    @property
    def systems(self) -> list[str]:
        """The systems that ran, the hub last."""
        return list(self.experiment.results)

    def latency_us(self, system: str) -> float:
        """Layer time of ``system`` in µs."""
        return self.experiment.latency(self._known(system))

    def speedup(self, system: str) -> float:
        """How much faster the hub is than ``system`` (its latency / the hub's)."""
        return self.experiment.speedup(self._known(system))

    def table(self) -> str:
        """The per-system table ``moehub cosim`` prints."""
        return table(self.experiment)

    def to_dict(self) -> dict:
        """What ``stats.json`` holds: configs in brief, routing, hub statistics, and per
        system the layer time, speedups, end-to-end estimate and phases."""
        return stats(self.experiment)

    def to_csv(self, path: str | Path | None = None) -> str:
        """One line per system (:data:`CSV_COLUMNS`); written to ``path`` when given."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for name, s in self.to_dict()["systems"].items():
            w.writerow([name, s["label"], f"{s['layer_us']:.3f}", f"{s['hub_speedup']:.4f}",
                        f"{s['end_to_end_ms']:.4f}", f"{s['end_to_end_hub_speedup']:.4f}"])
        if path is not None:
            Path(path).write_text(buf.getvalue())
        return buf.getvalue()

    def write(self, run: str = "api", out: str | Path | None = None, figure: bool = True) -> dict:
        """The files ``moehub cosim`` writes, into ``<out>/<run>/`` (``out`` defaults to
        ``results/`` in the build folder); returns their paths by kind."""
        return write_outputs(self.experiment, run, out, figure=figure)

    def _known(self, system: str) -> str:
        if system not in self.experiment.results:
            raise KeyError(f"system {system!r} did not run (ran: {', '.join(self.systems)})")
        return system


def run(model: str = "mixtral-8x7b", system: str = "h100x8", workload: str = "default", *,
        tokens: int | None = None, gpus: int | None = None, seed: int | None = None,
        systems: tuple | list | None = None, hub: str = "model", rtl_gpus: tuple = (),
        hub_order: str = "token", dispatch_dtype: str | None = None,
        combine_dtype: str | None = None) -> CosimResult:
    """Co-simulate one MoE layer of ``model`` on ``system`` under ``workload``.

    Parameters
    ----------
    model, system, workload : str
        Config names (``config/model``, ``config/system``, ``config/workload``) or YAML paths.
    tokens, gpus, seed : int, optional
        Overrides of tokens per GPU, GPU count and routing seed.
    systems : sequence of str, optional
        Subset of the systems (default all); the hub always runs.
    hub : str
        Hub stage backend: ``model`` (fast), ``reference`` (packet by packet) or ``rtl``.
    rtl_gpus : tuple of int
        Destination GPUs whose hub runs as RTL (cocotb + Verilator, or Icarus; ``MOEHUB_SIM``).
    hub_order : str
        ``token`` (rows sent right after routing) or ``expert`` (after a layout kernel).
    dispatch_dtype, combine_dtype : str, optional
        Wire datatypes of dispatch and combine rows.
    """
    s, m, w = load_configs(system, model, workload, tokens, gpus, seed,
                           dispatch_dtype=dispatch_dtype, combine_dtype=combine_dtype)
    _check(s, systems, hub, rtl_gpus, hub_order)
    er = run_experiment(s, m, w, tuple(systems) if systems else SYSTEMS, hub_backend=hub,
                        hub_order=hub_order, rtl_gpus=tuple(rtl_gpus))
    return CosimResult(er)


def _check(s, systems, hub: str, rtl_gpus, hub_order: str) -> None:
    """The arguments the configs do not check, refused before any work."""
    if not backend_available(hub):
        raise ConfigError(f"hub = {hub!r}: no such hub stage backend (known: {', '.join(known_backends())})")
    unknown = [x for x in systems or () if x not in SYSTEMS]
    if unknown:
        raise ConfigError(f"systems = {unknown[0]!r}: unknown (known: {', '.join(SYSTEMS)})")
    bad = [g for g in rtl_gpus if not (isinstance(g, int) and 0 <= g < s.gpus)]
    if bad:
        raise ConfigError(f"rtl_gpus = {bad[0]!r}: no such GPU (0..{s.gpus - 1})")
    if hub_order not in ("token", "expert"):
        raise ConfigError(f"hub_order = {hub_order!r}: must be 'token' or 'expert'")
