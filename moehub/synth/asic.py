"""ASIC flow: Yosys (Debian 0.23) onto the OSU 0.18 um library, then OpenSTA.

Mapping follows TOOLCHAIN.md: plain ``abc -liberty`` leaves high-fan-out nets on X1
gates and reads about 3x too slow, so ABC runs a script that maps for delay (``&nf``)
and then buffers and sizes (``buffer -p; upsize; dnsize``) against the clock target
(:data:`ABC_EFFORTS`).
Large arrays become SRAM macro black boxes (:mod:`moehub.synth.sram`), the rest flops.
The hierarchy is kept so that area and timing can be reported per module; a flattened
copy of the netlist (``netlist_sim.v``, top ``moehub``, RTL port names) is written for
gate-level simulation.

Timing: every module is linked as its own top in OpenSTA and constrained by the run's
``moehub.sdc`` (:func:`sdc`): the clock on ``clk`` and, by default, ideal (zero-delay)
input and output ports (:data:`IO_PCT`), so a module's figure is its worst internal
path; the ``moehub`` figure is the whole hub, paths between modules included.
fmax = 1 / (period - worst slack) (OpenSTA 2.0.17 has no report_clock_min_period).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import progress
from . import sram, tools
from .verilog import MemoryArray, TOP

#: net load and driver ABC assumes on module ports while sizing
ABC_CONSTR = "set_driving_cell BUFX2\nset_load 0.02\n"


#: ABC effort levels. "normal" (default): AIG balancing (long AND/OR chains become trees),
#: then delay-oriented mapping (&nf) of the AIG as Yosys built it otherwise -- Brent-Kung
#: adders, muxes -- then buffering and gate sizing. An
#: area-oriented rewrite first (dc2, as this flow used before) turns the parallel-prefix
#: adders into ripple chains: a 32-bit registered add measured 3.38 ns with dc2 and 1.53 ns
#: without (OSU018, -D 3000). "high" adds SAT sweeping (&fraig -x) and delay-oriented
#: restructuring (&syn2, SOP balancing &if -g, &synch2): 1.35 ns on the same adder, several
#: times the ABC time on the large configs.
ABC_EFFORTS = ("normal", "high")


def abc_script(delay_ps: float, effort: str = "normal") -> str:
    """Delay-oriented mapping, then buffering and gate sizing (TOOLCHAIN.md pitfall 6)."""
    if effort not in ABC_EFFORTS:
        raise ValueError(f"effort = {effort!r}: must be one of {', '.join(ABC_EFFORTS)}")
    d = f"-D {int(delay_ps)}"
    pre = ("strash; &get -n; &fraig -x; &st; &syn2; &if -g; &st; &synch2; " if effort == "high"
           else "strash; balance; &get -n; ")
    return pre + f"&nf {d}; &put; buffer -p; upsize {d}; dnsize {d}; stime -p\n"


def generic_lines(macros: list[MemoryArray], has_macros: bool, blocks: list[str]) -> list[str]:
    """The library-independent part of the synthesis script: the RTL read, processes and
    memories turned into generic cells, the SRAM macros placed, each block's small
    components flattened into it (``stat_rtl.json``: array bits per module, counted before
    any mapping -- TOOLCHAIN.md pitfall 7)."""
    lines = [f"read_verilog {TOP}.v"]
    if has_macros:
        lines.append("read_verilog -lib sram_bb.v")
    lines += [
        f"hierarchy -check -top {TOP}",
        "proc",
        "tee -q -o stat_rtl.json stat -json",
        f"synth -top {TOP} -run :fine",
    ]
    if has_macros:
        sel = " ".join(f"{m.module}/{m.name}" for m in macros)
        lines += ["memory_libmap -lib sram.memlib " + sel,
                  "techmap -map sram_map.v t:$__MOEHUB_SRAM_*"]
    return lines + [
        f"synth -top {TOP} -run fine:check -noabc",
        f"setattr -mod -set keep_hierarchy 1 {' '.join(blocks)}",
        "flatten",
        f"hierarchy -top {TOP}",
        "setattr -mod -unset keep_hierarchy",
    ]


def yosys_script(lib, macros: list[MemoryArray], has_macros: bool, blocks: list[str],
                 work: Path | None = None, generic: GenericCheckpoint | None = None) -> str:
    """The synthesis script. ``blocks``: the hub's direct submodules, kept (area and timing
    per block); the small components inside a block are flattened into it before mapping,
    so that ABC sees each block whole. ``lib``: a Liberty path (OSU018, Yosys 0.23) or a
    :class:`~moehub.synth.library.CellLibrary`; for a library with several files and a
    do-not-use list (ASAP7) the files are named relative to ``work``, ABC and dfflibmap
    get the do-not-use list, flops are named after their register (``rename -wire``: the
    QN-only flops of ASAP7 leave no net named by the register) and constants go to tie
    cells (ORFS's ``hilomap``). ``generic``: the library-independent part
    (:func:`generic_lines`) is read from its checkpoint where that exists, else run and
    written there (:class:`GenericCheckpoint`)."""
    cells = lib if hasattr(lib, "liberty") else None
    if cells is None or not cells.modern_yosys:
        lib_path = cells.liberty[0] if cells else lib
        seq_arg = f"-liberty {lib_path}"
        libs = f"-liberty {lib_path}"
        dff_dont, abc_dont = "", ""
    else:
        work = work or Path(".")
        seq_arg = f"-liberty {cells.rel(cells.seq_liberty, work)}"
        libs = cells.liberty_args(work)
        dff_dont, abc_dont = cells.dont_use_args(extra=True), cells.dont_use_args()
    if generic is not None and generic.ready:
        lines = [f"read_rtlil {generic.rtlil}"]
    else:
        lines = generic_lines(macros, has_macros, blocks)
        if generic is not None:
            # (and the mapping starts from the netlist read back, as a later run's does:
            # ABC's result depends on the order of the cells it is given, which a
            # read_rtlil changes -- 0.1 % of tiny's gates -- so a run maps the same
            # whether or not the checkpoint existed before it)
            lines += [f"write_rtlil {generic.partial}", "design -reset",
                      f"read_rtlil {generic.partial}"]
    if cells is not None and cells.rename_flops:
        lines.append(f"rename -wire -suffix {REG_SUFFIX} t:$_*DFF*")
    lines += [
        f"dfflibmap{dff_dont} {seq_arg}",
        f"abc {libs}{abc_dont} -constr abc.constr -script abc.script",
        "setundef -zero",
    ]
    if cells is not None and cells.tie:
        hi, hp, lo, lp = cells.tie
        lines.append(f"hilomap -singleton -hicell {hi} {hp} -locell {lo} {lp}")
    lines += [
        "opt_clean -purge",
        f"tee -q -o stat.json stat -json {libs}",
        f"tee -q -o stat.txt stat {libs}",
        # OpenSTA 2.0.17 cannot parse concatenations on the left of an assign
        "write_verilog -noattr -noexpr -simple-lhs netlist.v",
        "flatten",
        "opt_clean -purge",
        "write_verilog -noattr -noexpr -simple-lhs netlist_sim.v",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class GenericCheckpoint:
    """The generic netlist of one design (:func:`generic_lines`' result), kept so that a
    second library mapped by the same Yosys starts from it: the OSU018 run of a hub and
    its ASAP7 run with the native Yosys share it, and on the large hubs that part is most
    of Yosys' time (``nvl72`` at OSU018: ``opt_clean`` and ``opt_expr`` alone 48 % of
    3,635 CPU s). Kept under ``<build>/synth/generic/<key>.il`` (with its
    ``stat_rtl.json``), the key the hash of the script part, the files it reads and the
    Yosys binary's version, so a checkpoint is only ever read by the run it stands for;
    the newest :data:`GENERIC_KEEP` are kept."""
    folder: Path
    key: str

    @property
    def rtlil(self) -> Path:
        return self.folder / f"{self.key}.il"

    @property
    def partial(self) -> Path:
        """Where Yosys writes it (renamed to :attr:`rtlil` once the run succeeded)."""
        return self.folder / f"{self.key}.il.partial"

    @property
    def stat_rtl(self) -> Path:
        return self.folder / f"{self.key}.stat_rtl.json"

    @property
    def ready(self) -> bool:
        return self.rtlil.exists() and self.stat_rtl.exists()

    def restore(self, work: Path) -> None:
        """Before a run from the checkpoint: the array counts its first part wrote."""
        shutil.copyfile(self.stat_rtl, work / "stat_rtl.json")

    def keep(self, work: Path) -> None:
        """After the run that wrote it: the netlist under its key, its array counts, and
        the oldest checkpoints beyond :data:`GENERIC_KEEP` gone."""
        if not self.partial.exists():
            return
        shutil.copyfile(work / "stat_rtl.json", self.stat_rtl)
        os.replace(self.partial, self.rtlil)
        old = sorted(self.folder.glob("*.il"), key=lambda f: f.stat().st_mtime)[:-GENERIC_KEEP]
        for f in old:
            f.unlink(missing_ok=True)
            f.with_suffix(".stat_rtl.json").unlink(missing_ok=True)


#: generic checkpoints kept (the large hubs' are a few hundred MB each)
GENERIC_KEEP = 6


def generic_checkpoint(work: Path, yosys_bin: str, macros: list[MemoryArray], has_macros: bool,
                       blocks: list[str]) -> GenericCheckpoint:
    """The checkpoint of the design in ``work`` for ``yosys_bin`` (the files the generic
    part reads must be written there already)."""
    from ..paths import build_root
    h = hashlib.sha256("\n".join(generic_lines(macros, has_macros, blocks)).encode())
    for name in (f"{TOP}.v", "sram_bb.v", "sram.memlib", "sram_map.v"):
        f = work / name
        h.update(name.encode() + b"\0" + (f.read_bytes() if f.exists() else b"(none)") + b"\0")
    h.update(tools.version_line(yosys_bin).encode())
    folder = build_root() / "synth" / "generic"
    folder.mkdir(parents=True, exist_ok=True)
    return GenericCheckpoint(folder, h.hexdigest()[:32])


def yosys_time_from_log(log: Path) -> float:
    """Total pass time of an earlier Yosys run, from its closing "Time spent: 54% 1x abc
    (219 sec), ..." line (the first pass's seconds over its share); 0 if absent."""
    m = re.search(r"^Time spent:\s*(\d+)%\s+\d+x\s+\S+\s+\((\d+) sec\)", log.read_text(errors="replace"), re.M)
    return 100.0 * int(m.group(2)) / int(m.group(1)) if m and int(m.group(1)) else 0.0


def sequential_cells(lib_text: str) -> set[str]:
    """Cells of a Liberty file that hold state (an ``ff`` or ``latch`` group)."""
    out, cur = set(), None
    for line in lib_text.splitlines():
        m = re.match(r"\s*cell\s*\(\s*\"?(\w+)\"?\s*\)", line)
        if m:
            cur = m.group(1)
        elif cur and re.match(r"\s*(ff|latch)\s*\(", line):
            out.add(cur)
    return out


@dataclass
class ModuleArea:
    module: str
    cells: int
    flops: int
    area_um2: float
    macros: dict = field(default_factory=dict)   # macro cell -> instances
    memory_bits: int = 0                          # array bits of the RTL (before mapping)
    seq_area_um2: float = 0.0                     # of which flops and latches (Yosys >= 0.3x's stat)


def parse_stat(stat_json: Path, stat_txt: Path, stat_rtl: Path, seq: set[str],
               seq_area: dict | None = None) -> dict[str, ModuleArea]:
    """Per-module cells, flops and area, each with the modules it instantiates (so that a
    block split into small components reports as before); ``__total__`` is the hierarchy
    under ``TOP``. ``seq_area`` (sequential cell -> area): the flops' area is counted too
    (per module from the cell counts: Yosys 0.70's ``sequential_area`` already includes
    the submodules, 0.23 has none)."""
    counts = tools.load_yosys_stat_json(stat_json)["modules"]
    rtl = tools.load_yosys_stat_json(stat_rtl)["modules"]
    text = stat_txt.read_text()
    areas = {m: float(a) for m, a in re.findall(r"Chip area for module '\\?(\S+?)':\s*([\d.]+)", text)}
    top_area = re.search(r"Chip area for top module '\\?\S+?':\s*([\d.]+)", text)
    names = {n.lstrip("\\") for n in counts}
    own, children = {}, {}
    for name, d in counts.items():
        name = name.lstrip("\\")
        by_type = d["num_cells_by_type"]
        children[name] = {t.lstrip("\\"): n for t, n in by_type.items() if t.lstrip("\\") in names}
        macros = {t: n for t, n in by_type.items() if t.startswith("moehub_sram_")}
        cells = sum(n for t, n in by_type.items() if t.lstrip("\\") not in names and t not in macros)
        flops = sum(n for t, n in by_type.items() if t in seq)
        own_seq = sum(n * seq_area.get(t, 0.0) for t, n in by_type.items() if t in seq) if seq_area else 0.0
        own[name] = ModuleArea(name, cells, flops, areas.get(name, 0.0), macros, rtl_memory_bits(rtl, name),
                               own_seq)

    def inclusive(name: str) -> ModuleArea:
        mod = own[name]
        total = ModuleArea(name, mod.cells, mod.flops, mod.area_um2, dict(mod.macros), mod.memory_bits,
                           mod.seq_area_um2)
        for child, n in children[name].items():
            sub = inclusive(child)
            total.cells += n * sub.cells
            total.flops += n * sub.flops
            total.area_um2 += n * sub.area_um2
            total.seq_area_um2 += n * sub.seq_area_um2
            for t, k in sub.macros.items():
                total.macros[t] = total.macros.get(t, 0) + n * k
        return total
    mods = {name: inclusive(name) for name in own}
    total = ModuleArea(**{**mods[TOP].__dict__, "module": TOP})
    if top_area:
        total.area_um2 = float(top_area.group(1))
    mods["__total__"] = total
    return mods


def instantiated(netlist: str, mod: str, names: set[str]) -> list[str]:
    """The modules of ``names`` that ``mod`` instantiates directly."""
    text = module_text(netlist, mod)
    return sorted(n for n in names if n != mod and re.search(rf"^\s*\\?{re.escape(n)}\s", text, re.M))


def rtl_memory_bits(rtl: dict, name: str) -> int:
    """Array bits of ``name`` and the modules it instantiated before mapping (the RTL's
    hierarchy: small components are flattened into their block later)."""
    mods = {n.lstrip("\\"): d for n, d in rtl.items()}
    d = mods.get(name, {})
    subs = {t.lstrip("\\"): k for t, k in d.get("num_cells_by_type", {}).items() if t.lstrip("\\") in mods}
    return d.get("num_memory_bits", 0) + sum(k * rtl_memory_bits(rtl, t) for t, k in subs.items())


def descendants(netlist: str, mod: str, names: set[str]) -> list[str]:
    """``mod`` and every module it instantiates, directly or not (each once)."""
    order, todo = [], [mod]
    while todo:
        m = todo.pop()
        if m not in order:
            order.append(m)
            todo += instantiated(netlist, m, names)
    return order


def module_text(netlist: str, mod: str) -> str:
    m = re.search(rf"^module\s+\\?{re.escape(mod)}\s*\(.*?^endmodule\s*$", netlist, re.M | re.S)
    if not m:
        raise RuntimeError(f"module {mod} not found in the netlist")
    return m.group(0)


# ------------------------------------------------------------------ OpenSTA
def split_modules(netlist: str, work: Path, modules: list[str], names: set[str]) -> None:
    """Write ``netlist_<module>.v`` holding one module's text and that of the modules (of
    ``names``) it instantiates: OpenSTA reads less per top, and a block's paths through its
    small components are timed whole."""
    for mod in modules:
        texts = [module_text(netlist, m) for m in descendants(netlist, mod, names)]
        (work / f"netlist_{mod}.v").write_text("\n".join(reversed(texts)) + "\n")


#: The constraints file of a run (beside the netlist), read by OpenSTA for every timed top.
SDC_NAME = f"{TOP}.sdc"
#: Clock port of the hub and of each of its blocks.
CLOCK_PORT = "clk"
#: ASSUMPTION: input and output delays as a fraction of the clock period (ORFS's
#: ``clk_io_pct``). 0: every port of the hub, and of each block timed on its own, is taken
#: as an ideal register -- an input switches at the clock edge and an output is captured
#: at the next one; the neighbour's clock-to-output and setup are charged to the
#: neighbour. This is the flow's timing method (docs/synthesis.md), so module rows are the
#: module's own worst path; ORFS's templates use 0.2 for a block between unknown logic.
IO_PCT = 0.0


def sdc(period_ns: float, io_pct: float = IO_PCT, header: str = "", lib=None) -> str:
    """SDC for the hub (and each block): the clock on :data:`CLOCK_PORT` with the target
    period, input/output delays of ``io_pct`` x period (ORFS's template, so that the file
    works in OpenROAD-flow-scripts and other Tcl-based tools as it is). The drivers and
    loads ABC assumed (:data:`ABC_CONSTR`, or ``lib``'s) are listed but not applied: the
    timing reported has ideal drivers and no port load. ``lib`` (a
    :class:`~moehub.synth.library.CellLibrary`): the period is written in its Liberty time
    unit (ASAP7: ps, as ORFS's asap7 constraints are), since OpenSTA reads SDC times in the
    unit of the first Liberty file; default OSU018 (ns)."""
    unit = lib.time_unit_name if lib else "ns"
    period = period_ns / lib.time_unit_ns if lib else period_ns
    period = round(period, 6)
    lines = [f"# {line}".rstrip() for line in header.splitlines()] + [
        f"# Units: {unit} (the {lib.name if lib else 'OSU018'} Liberty's time unit).",
        f"set clk_name {CLOCK_PORT}", f"set clk_port_name {CLOCK_PORT}",
        f"set clk_period {period:g}" if lib else f"set clk_period {period_ns}",
        "# ASSUMPTION (clk_io_pct): input and output delays as a fraction of the period.",
        "# 0, the flow's default: every port is an ideal register -- an input switches at the",
        "# clock edge, an output is captured at the next one; the clock-to-output and setup of",
        "# the neighbouring registers are the neighbours' own. ORFS's templates use 0.2.",
        f"set clk_io_pct {io_pct}", "",
        "set clk_port [get_ports $clk_port_name]",
        "create_clock -name $clk_name -period $clk_period $clk_port",
        "set non_clock_inputs [lsearch -inline -all -not -exact [all_inputs] $clk_port]",
        "set_input_delay [expr {$clk_period * $clk_io_pct}] -clock $clk_name $non_clock_inputs",
        "set_output_delay [expr {$clk_period * $clk_io_pct}] -clock $clk_name [all_outputs]", "",
        "# Not applied here (ideal drivers, no port load); ABC sized the ports for:"]
    drive, load = re.search(r"set_driving_cell (\S+)\nset_load (\S+)", lib.abc_constr if lib else ABC_CONSTR).groups()
    return "\n".join(lines + [f"#   set_driving_cell -lib_cell {drive} $non_clock_inputs",
                              f"#   set_load {load} [all_outputs]", ""])


def sta_script(lib, sram_lib: Path | None, modules: list[str], sdc_file: str = SDC_NAME) -> str:
    """One linked top per module, each constrained by the run's SDC file. ``lib``: one
    Liberty path or several (OpenSTA reads each with its own ``read_liberty``)."""
    libs = list(lib) if isinstance(lib, (list, tuple)) else [lib]
    lines = [f"read_liberty {p}" for p in libs]
    if sram_lib:
        lines.append(f"read_liberty {sram_lib}")
    for mod in modules:
        lines += [
            f'puts "@@@ MODULE {mod}"',
            # linking consumes the Verilog modules: read per top (a leaf module: only its own text)
            f"read_verilog {'netlist.v' if mod == TOP else f'netlist_{mod}.v'}",
            f"link_design {mod}",
            f"read_sdc {sdc_file}",
            "report_checks -path_delay max -digits 4",
            "report_wns -digits 4",
            "report_tns -digits 4",
        ]
    return "\n".join(lines + ["exit", ""])


@dataclass
class PathTiming:
    module: str
    period_ns: float
    slack_ns: float
    arrival_ns: float
    launch_ns: float        # clock-to-output of the launching flop or macro (a port: its input delay)
    setup_ns: float         # setup of the capturing flop or macro (a port: its output delay)
    startpoint: str
    endpoint: str
    start_kind: str
    end_kind: str
    cells: list             # (instance, cell, delay ns) along the path
    tns_ns: float = 0.0
    start_reg: str = ""     # the register (Q net) at each end, when the end is a flop
    end_reg: str = ""

    @property
    def min_period_ns(self) -> float:
        return self.period_ns - self.slack_ns

    @property
    def fmax_MHz(self) -> float:
        return 1e3 / self.min_period_ns

    @property
    def logic_ns(self) -> float:
        """Combinational part: arrival minus the launch clock-to-output (from a port: minus
        its input delay)."""
        return self.arrival_ns - self.launch_ns


def to_ns(t: PathTiming, unit_ns: float) -> PathTiming:
    """``t`` with its times (read in the Liberty's unit, ASAP7: ps) converted to ns."""
    if unit_ns == 1.0:
        return t
    k = unit_ns
    return PathTiming(t.module, t.period_ns * k, t.slack_ns * k, t.arrival_ns * k, t.launch_ns * k,
                      t.setup_ns * k, t.startpoint, t.endpoint, t.start_kind, t.end_kind,
                      [(i, c, d * k) for i, c, d in t.cells], t.tns_ns * k, t.start_reg, t.end_reg)


_PIN_RE = re.compile(r"^\s*(-?[\d.]+)\s+(-?[\d.]+)\s+[\^v]\s+(\S+)\s+\((\S+)\)\s*$")


def parse_sta(text: str, period_ns: float) -> dict[str, PathTiming]:
    out = {}
    for chunk in text.split("@@@ MODULE ")[1:]:
        mod = chunk.split(None, 1)[0]
        sp = re.search(r"^Startpoint:\s*(\S+)\s*\((.*)\)", chunk, re.M)
        ep = re.search(r"^Endpoint:\s*(\S+)\s*\((.*)\)", chunk, re.M)
        slack = re.search(r"^\s*(-?[\d.]+)\s+slack", chunk, re.M)
        arr = re.search(r"^\s*(-?[\d.]+)\s+data arrival time", chunk, re.M)
        if not (sp and ep and slack and arr):
            raise RuntimeError(f"OpenSTA: no timed path found for module {mod}")
        setup = re.search(r"^\s*(-?[\d.]+)\s+(-?[\d.]+)\s+(?:library setup time|output external delay)",
                          chunk, re.M)
        tns = re.search(r"^tns\s+(-?[\d.]+)", chunk, re.M)
        body = chunk[sp.start():arr.start()]
        pins = [(m.group(3), m.group(4), float(m.group(1))) for m in map(_PIN_RE.match, body.splitlines()) if m]
        launch = 0.0
        if "input port" in sp.group(2):  # the SDC's input delay is the port's launch
            ext = re.search(r"^\s*(-?[\d.]+)\s+-?[\d.]+\s+[\^v]\s+input external delay", body, re.M)
            launch = float(ext.group(1)) if ext else 0.0
        elif len(pins) >= 2:
            launch = pins[1][2]          # pins[0] is the clock pin of the launching element
        cells = [(p.rsplit("/", 1)[0], c, d) for p, c, d in pins[1:]]
        out[mod] = PathTiming(mod, period_ns, float(slack.group(1)), float(arr.group(1)), launch,
                              0.0 - float(setup.group(1)) if setup else 0.0,   # never -0.0
                              sp.group(1), ep.group(1), sp.group(2), ep.group(2), cells,
                              float(tns.group(1)) if tns else 0.0)
    return out


SYNTH_OUTPUTS = ("netlist.v", "netlist_sim.v", "stat.json", "stat.txt", "stat_rtl.json")


def run(work: Path, verilog: Path, mems: list[MemoryArray], macros: list[MemoryArray],
        fo4_ns: float, period_ns: float, abc_delay_ps: float | None = None,
        sta_only: bool = False, abc_effort: str = "normal", io_pct: float = IO_PCT,
        sdc_header: str = "", label: str = "synth", cells=None) -> dict:
    """Synthesize and time ``verilog`` (written by :mod:`moehub.synth.verilog`) in ``work``.

    ``sta_only``: keep the netlist of an earlier run in ``work`` and redo only the timing
    (a new clock constraint, or after an interrupted run). The constraints are written to
    ``work/moehub.sdc`` (:func:`sdc`; ``sdc_header``: its opening comment), which OpenSTA
    reads, so that the same file can be taken to another tool. ``label`` starts the
    progress lines of the Yosys and OpenSTA steps. ``cells``: the
    :class:`~moehub.synth.library.CellLibrary` to map onto (default OSU018); its times
    are read in its Liberty unit and returned in ns.
    """
    lib = tools.osu018_lib() if cells is None else cells.liberty
    if sta_only:
        missing = [f for f in SYNTH_OUTPUTS if not (work / f).exists()]
        if missing:
            raise RuntimeError(f"sta_only: {work} has no earlier synthesis ({', '.join(missing)} missing)")
        files = {"liberty": work / "sram.lib"}
        (work / "sram.lib").write_text(sram.liberty(macros, fo4_ns))
        t_yosys = yosys_time_from_log(work / "yosys.log")
    else:
        if verilog.resolve() != (work / f"{TOP}.v").resolve():
            (work / f"{TOP}.v").write_text(verilog.read_text())
        files = sram.write_files(macros, work, fo4_ns)
        (work / "abc.script").write_text(abc_script(abc_delay_ps or 1000 * period_ns, abc_effort))
        (work / "abc.constr").write_text(ABC_CONSTR if cells is None else cells.abc_constr)
        text = verilog.read_text()
        blocks = instantiated(text, TOP, set(re.findall(r"^module\s+\\?(\S+?)\s*\(", text, re.M)))
        t_yosys, cells = _map(work, cells, lib, macros, blocks, label)
        lib = tools.osu018_lib() if cells is None else cells.liberty
    seq = sequential_cells((cells.seq_liberty if cells else lib).read_text())
    seq_area = None
    if cells is not None:
        from .library import cell_areas
        seq_area = {c: a for c, a in cell_areas(cells, [cells.seq_liberty]).items() if c in seq}
    areas = parse_stat(work / "stat.json", work / "stat.txt", work / "stat_rtl.json", seq, seq_area)
    # memory_libmap maps an array only if its ports fit the 1R1W macro; the others (several
    # read or write ports, or asynchronous reads) are built from flops by memory_map, as
    # they must be. (The packet manager's row tables, read and written by every lane in the
    # same cycle, are registers in the RTL itself.)
    got = set(areas["__total__"].macros)
    unknown = got - {sram.macro_name(m) for m in macros}
    if unknown:
        raise RuntimeError(f"SRAM mapping: unexpected macros {sorted(unknown)}; see {work / 'yosys.log'}")
    mapped = [m for m in macros if sram.macro_name(m) in got]
    # (timed: the hub, and each block of it with the small components inside it)
    netlist = (work / "netlist.v").read_text()
    modules = [TOP] + instantiated(netlist, TOP, set(areas) - {"__total__"})
    split_modules(netlist, work, [m for m in modules if m != TOP], set(areas) - {"__total__"})
    (work / SDC_NAME).write_text(sdc(period_ns, io_pct, sdc_header, cells))
    (work / "sta.tcl").write_text(sta_script(lib, Path(files["liberty"].name) if macros else None, modules))
    with progress.stage(f"{label}: OpenSTA (timing of {len(modules)} modules)", heartbeat=True):
        t_sta = tools.run_logged([tools.sta(), "-no_splash", "-exit", "sta.tcl"], work / "sta.log",
                                 work)
    unit = cells.time_unit_ns if cells else 1.0
    timing = {m: to_ns(t, unit) for m, t in parse_sta((work / "sta.log").read_text(), period_ns / unit).items()}
    qnets, children = register_names((work / "netlist.v").read_text(), seq)
    for mod, t in timing.items():
        t.start_reg = describe_point(t.startpoint, mod, qnets, children)
        t.end_reg = describe_point(t.endpoint, mod, qnets, children)
    return {"areas": areas, "timing": timing, "wall_s": {"yosys": t_yosys, "sta": t_sta},
            "yosys": mapped_by(work),
            "files": files, "macros": mapped,
            "flop_arrays": [m for m in mems if m not in mapped]}


def mapped_by(work: Path) -> str:
    """The Yosys that mapped the netlist in ``work`` ("Yosys 0.70", from its ``stat.json``:
    an SS re-timing keeps the TT run's netlist, whichever Yosys made it)."""
    creator = tools.load_yosys_stat_json(work / "stat.json").get("creator", "Yosys")
    return creator.split(" (")[0]


def _yosys_run(work: Path, cells, lib, macros, blocks, label: str) -> float:
    """Write ``synth.ys`` for ``cells`` and run its Yosys; wall seconds. The native Yosys
    (Debian's 0.23: OSU018, and ASAP7 on the merged Liberty) starts from the design's
    generic checkpoint where one exists and writes it where none does
    (:class:`GenericCheckpoint`; the WebAssembly one always runs the whole script)."""
    binary = cells.yosys() if cells else tools.yosys()
    generic = None
    if cells is None or not cells.modern_yosys:
        generic = generic_checkpoint(work, binary, macros, bool(macros), blocks)
        if generic.ready:
            generic.restore(work)
    what = "from the generic checkpoint: ABC mapping" if generic and generic.ready else \
        "synthesis, ABC mapping"
    (work / "synth.ys").write_text(yosys_script(cells or lib, macros, bool(macros), blocks, work,
                                                generic))
    with progress.stage(f"{label}: Yosys ({what})", heartbeat=True) as st, \
            progress.Follower(work / "yosys.log", lambda lines: _yosys_pass(st, lines)):
        wall = tools.run_logged([binary, "-q", "-l", "yosys.log", "-s", "synth.ys"],
                                work / "yosys.stdout", work)
    if generic is not None:
        generic.keep(work)
    return wall


def _map(work: Path, cells, lib, macros, blocks, label: str) -> tuple:
    """Synthesis and mapping: (wall seconds, the library as mapped). A library for the
    WebAssembly Yosys runs there unless ``$MOEHUB_ASAP7_YOSYS`` says ``native``; with
    ``auto`` a run that ends in a Wasm trap (its 4 GB address space exhausted) is run
    again by the native Yosys on the merged Liberty (:meth:`CellLibrary.native`)."""
    if cells is None or not cells.modern_yosys:
        return _yosys_run(work, cells, lib, macros, blocks, label), cells
    from .library import asap7_yosys_choice
    choice = asap7_yosys_choice()
    if choice != "native":
        try:
            return _yosys_run(work, cells, lib, macros, blocks, label), cells
        except RuntimeError:
            out = (work / "yosys.stdout").read_text(errors="replace")
            if choice == "wasm" or "Wasm" not in out:
                raise
            print(f"{label}: the WebAssembly Yosys ran out of memory (its 4 GB); mapping again "
                  "with the native Yosys on the merged Liberty", flush=True)
    native = cells.native()
    return _yosys_run(work, native, native.liberty, macros, blocks, label), native


_PASS_RE = re.compile(r"^\d+(?:\.\d+)*\. Executing (\S+) pass")


def _yosys_pass(stage, lines: list) -> None:
    """The Yosys pass running now (the last 'N.M. Executing X pass' line of its log)."""
    for line in reversed(lines):
        m = _PASS_RE.match(line)
        if m:
            stage.update(note=f"{m.group(1)} pass")
            return


# ------------------------------------------------------------------ readable path ends
#: suffix of flop instances named after their register (``rename -wire -suffix``)
REG_SUFFIX = "_reg"
_INST_RE = re.compile(r"^\s*(\\?\S+)\s+(\\?\S+)\s*\((.*?)\);", re.M | re.S)


def register_names(netlist: str, seq: set[str]) -> tuple[dict, dict]:
    """(module, flop instance) -> the net its Q drives; (module, instance) -> child module.

    OpenSTA names path ends by instance (``pm/_31217_``); the Q net keeps the RTL
    register name (``inflight[3]``), which is what a designer can act on. A flop with
    only a QN output (ASAP7) drives an unnamed net; the flow names such flops after their
    register instead (``inflight[3]_reg``, :data:`REG_SUFFIX`).
    """
    qnets, children = {}, {}
    mods = re.split(r"^module\s+", netlist, flags=re.M)[1:]
    for body in mods:
        mod = body.split("(", 1)[0].strip().lstrip("\\")
        body = body.split("endmodule", 1)[0]
        for m in _INST_RE.finditer(body):
            cell, inst, conns = m.group(1).lstrip("\\"), m.group(2).lstrip("\\"), m.group(3)
            if cell.startswith("moehub_sram_"):
                qnets[(mod, inst)] = f"{inst} (SRAM {cell})"
            elif cell in seq:
                q = re.search(r"\.(?:Q|RD)\((.*?)\)\s*(?:,|$)", conns, re.S)
                if q:
                    qnets[(mod, inst)] = re.sub(r"\s+", "", q.group(1)).lstrip("\\")
                elif inst.endswith(REG_SUFFIX):     # a QN-only flop named by ``rename -wire``
                    qnets[(mod, inst)] = inst[:-len(REG_SUFFIX)]
            elif cell.startswith(TOP):
                children[(mod, inst)] = cell
    return qnets, children


def describe_point(point: str, top: str, qnets: dict, children: dict) -> str:
    """``pm/_31217_/D`` -> ``pm/inflight[3]`` (the register), else the point itself.
    OpenSTA escapes brackets in instance names (``inflight\\[3\\]_reg``): unescaped here."""
    parts = point.replace("\\", "").split("/")
    mod, path = top, []
    for inst in parts[:-1]:
        child = children.get((mod, inst))
        if child is None:
            name = qnets.get((mod, inst))
            return "/".join(path + [name]) if name else point
        path.append(inst)
        mod = child
    name = qnets.get((mod, parts[-1]))
    return "/".join(path + [name]) if name else point
