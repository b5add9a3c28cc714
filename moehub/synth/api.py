"""Synthesis from Python: one call per hub config, a result with table, dict and CSV.

    >>> import moehub.synth as synth
    >>> r = synth.run("tiny")                 # ASIC flow: Yosys + ABC + OpenSTA, N5 projection
    >>> print(r.table())                      # one line per hub block
    >>> r.to_dict()["modules"]["top"]["fo4"]  # what report.json's "asic" section holds
    >>> r.to_csv("tiny.csv")
    >>> a = synth.run("tiny", lib="asap7", corner="ss")   # mapped onto ASAP7 7 nm, timed at SS
    >>> a.to_dict()["line_rate"]["at_h100_clock"]["timing"]  # PASS / MARGINAL / FAIL at 1.98 GHz

The command line (``moehub synth``) and this API run the same :func:`moehub.synth.flow.run`;
files (netlists, logs, ``report.json``, ``report.md``, ``metrics.json``, ``moehub.sdc``) go
to ``out`` or ``synth/<config>/`` in the build folder. A missing tool raises
:class:`~moehub.synth.tools.ToolMissing` (``make tools`` installs them).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from . import flow

#: per-block columns of an ASIC result (keys of report.json's asic.modules.<block>)
ASIC_COLUMNS = ("cells", "flops", "area_um2", "gate_equivalents", "sram_bits", "critical_path_ns",
                "fo4", "fmax_MHz")
#: per-block columns of an ASAP7 result (report.json's asap7_<corner>.modules.<block>)
ASAP7_COLUMNS = ("cells", "flops", "area_um2", "seq_area_um2", "nand2_eq", "sram_bits", "critical_path_ns",
                 "fo4", "fmax_MHz")
#: columns of an ECP5 result (keys of report.json's ecp5 section)
ECP5_COLUMNS = ("luts", "flops", "brams", "fmax_MHz")


@dataclass
class SynthResult:
    """One synthesized hub config.

    Attributes
    ----------
    config : str
        The hub config's name.
    target : str
        ``asic`` or ``ecp5``.
    report : dict
        The target's section of ``report.json``.
    out_dir : Path
        Where the run's files are.
    """
    config: str
    target: str
    report: dict
    out_dir: Path

    def rows(self) -> list[dict]:
        """One dict per block (ASIC: the whole hub ``top`` first) or one for the FPGA."""
        if self.target == "asic":
            cols = ASAP7_COLUMNS if self.report.get("library") == "asap7" else ASIC_COLUMNS
            return [{"block": name, **{c: m.get(c) for c in cols}}
                    for name, m in self.report["modules"].items()]
        return [{"block": "top", **{c: self.report.get(c) for c in ECP5_COLUMNS}}]

    def table(self) -> str:
        """The rows as an aligned text table."""
        rows = self.rows()
        cols = list(rows[0])
        cells = [[_fmt(r[c]) for c in cols] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
        line = lambda vals: "  ".join(v.rjust(w) if i else v.ljust(w)   # noqa: E731
                                      for i, (v, w) in enumerate(zip(vals, widths)))
        return "\n".join([f"{self.config} ({self.target}): {self.out_dir}", line(cols),
                          *(line(r) for r in cells)])

    def to_dict(self) -> dict:
        """The target's section of ``report.json``."""
        return self.report

    def to_csv(self, path: str | Path | None = None) -> str:
        """:meth:`rows` as CSV; written to ``path`` when given."""
        rows = self.rows()
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        if path is not None:
            Path(path).write_text(buf.getvalue())
        return buf.getvalue()


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return "" if v is None else f"{v:,}" if isinstance(v, int) else str(v)


def run(config: str = "tiny", target: str = "asic", out: str | Path | None = None,
        data_bits: int | str | None = "chunk", **options) -> SynthResult:
    """Synthesize hub ``config`` (name or YAML path) for ``target`` (``asic`` or ``ecp5``).

    ``options`` are the flow's: ASIC ``lib`` (``osu018`` or ``asap7``), ``corner`` (ASAP7
    ``tt`` or ``ss``), ``period_ns``, ``sram_min_bits``, ``sram_min_depth``,
    ``sta_only``, ``abc_effort``; ECP5 ``target_MHz``, ``sta_only`` (``moehub synth --help``).
    """
    section = flow.run(config, target, out=out, data_bits=data_bits, **options)
    cfg = flow.synth_config(flow.load_hub_config(config), data_bits)
    return SynthResult(cfg.name, target, section, flow.out_dir_for(cfg, out))
