"""The comparison table: ASAP7 TT and SS against the OSU018 -> N5 projection, per hub.

Reads each synthesis folder's ``report.json`` (``asic`` from ``moehub synth``,
``asap7_tt``/``asap7_ss`` from ``moehub synth --lib asap7 [--corner ss]``) and
``deepest_paths.json`` (``scripts/sta_paths.py --json``, the projection's deepest family)
and writes one Markdown row per hub; a figure not yet run is a dash. Ratios are ASAP7 /
projection: area (ASAP7 NAND2 equivalents / OSU018 GE -- the cell mix) and logic depth
(ASAP7 FO4 / OSU018 FO4 of the deepest family).

    moehub synth-table --config mixtral-8gpu --config deepseek-v3-8gpu [--set count_packets=1]
"""
from __future__ import annotations

import json
from pathlib import Path

HEADER = ("| hub | ASAP7 TT µm² (seq. %) | NAND2 eq. / OSU GE | N5 mm²: ASAP7 / projection | "
          "deepest FO4: ASAP7 TT / projection | ASAP7 TT fmax GHz (wires) | ASAP7 SS fmax GHz | "
          "N5 fmax GHz: ASAP7 ÷ 1.15 / projection | 1.98 GHz: ASAP7 TT / at N5 / projection | deepest path (ASAP7 TT) |")
ALIGN = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"


def _get(d, *keys):
    for k in keys:
        if d is None:
            return None
        d = d.get(k)
    return d


def _n(x, spec):
    return "–" if x is None else f"{x:{spec}}"


def _projected_fmax(osu: dict | None, deepest_fo4: float | None) -> float | None:
    """The projection's N5 fmax (nominal): its worst-slack path's, unless that path starts
    at an SRAM macro -- the macro's access is launch time, which the projection's FO4 of
    logic leaves out (a 13 FO4 path behind a 15 FO4 access would read 3 GHz) -- where the
    deepest flop-to-flop family's is the projection's figure."""
    top = _get(osu, "modules", "top")
    if top is None:
        return None
    if "(SRAM" in ((top.get("path") or {}).get("from") or "") and deepest_fo4:
        from .project import fmax_n5_GHz
        return fmax_n5_GHz(deepest_fo4).nominal
    return _get(top, "n5", "fmax_n5_GHz", "nominal")


def row(name: str, folder: Path) -> str:
    """One table row from ``folder`` (a config's synthesis folder)."""
    rep = json.loads((folder / "report.json").read_text()) if (folder / "report.json").exists() else {}
    tt, ss, osu = rep.get("asap7_tt"), rep.get("asap7_ss"), rep.get("asic")
    fams = None
    if (folder / "deepest_paths.json").exists():
        fams = json.loads((folder / "deepest_paths.json").read_text())["families"]
    p_fo4 = fams[0]["fo4"] if fams else _get(osu, "modules", "top", "fo4")
    ge = _get(osu, "modules", "top", "gate_equivalents")
    a = _get(tt, "area")
    ratio_area = f"{a['nand2_eq']:.0f} / {ge:.0f} = {a['nand2_eq'] / ge:.2f}" if a and ge else "–"
    fo4_tt = _get(tt, "deepest_fo4")
    ratio_fo4 = (f"{fo4_tt:.2f} / {p_fo4:.2f} = {fo4_tt / p_fo4:.2f}" if fo4_tt and p_fo4 else
                 f"{_n(fo4_tt, '.2f')} / {_n(p_fo4, '.2f')}")
    area = f"{a['cell_area_um2']:.0f} ({100 * a['sequential_share']:.0f} %)" if a else "–"
    n5 = f"{_n(_get(a, 'n5_mm2', 'nominal'), '.4f')} / {_n(_get(osu, 'modules', 'top', 'n5', 'total_mm2', 'nominal'), '.4f')}"
    fmax_n5 = (f"{_n(_get(tt, 'line_rate', 'n5_scaled', 'fmax_GHz'), '.2f')} / "
               f"{_n(_projected_fmax(osu, p_fo4), '.2f')}")
    verdicts = " / ".join(v or "–" for v in (_get(tt, "line_rate", "at_h100_clock", "timing"),
                                             _get(tt, "line_rate", "n5_scaled", "timing"),
                                             _get(osu, "line_rate", "at_h100_clock", "timing")))
    deep = _get(tt, "deepest")
    path = f"`{deep[0]['from']}` → `{deep[0]['to']}`" if deep else "–"
    return (f"| {name} | {area} | {ratio_area} | {n5} | {ratio_fo4} | "
            f"{_n(_get(tt, 'line_rate', 'fmax_GHz', 'nominal'), '.2f')} | "
            f"{_n(_get(ss, 'line_rate', 'fmax_GHz', 'nominal'), '.2f')} | {fmax_n5} | {verdicts} | {path} |")


def table(folders: dict[str, Path]) -> str:
    """The Markdown table, one row per (name -> synthesis folder)."""
    return "\n".join([HEADER, ALIGN] + [row(n, Path(f)) for n, f in folders.items()]) + "\n"
