"""Mutation testing of the hub RTL: inject one typical bug at a time into the Amaranth
source and report which mutants the fast set's RTL tests kill.

    python -m moehub.verif.mutate --list [--files rtl/allocator.py ...]
    python -m moehub.verif.mutate --sample 60 --seed 1 [--workers 2]   # or: moehub mutate ...
    python -m moehub.verif.mutate --only allocator-007 [--only ...]

**Operators** (:data:`OPERATORS`), applied to the parsed source (Python's ``ast``, never
a regular expression): ``cmp`` a compare operator swapped (``<``/``<=``, ``>``/``>=``,
``==``/``!=``); ``const`` an integer constant +-1 where it is an operand of a compare or
of arithmetic, or the value of an ``.eq()``; ``drop`` one term of a ``&``, ``|`` or ``+``
dropped; ``swap`` the sources of two sibling ``.eq()`` (``x.a.eq(p), x.b.eq(q)`` ->
``x.a.eq(q), x.b.eq(p)``, targets with the same base); ``init`` a reset value changed
(``init=``/``reset=`` an integer flipped between 0 and 1, an expression replaced by 0, or
``init=1`` added to a ``Signal`` that had none); ``cond`` the condition of ``m.If`` /
``m.Elif`` forced true (``1``) or false (``0``): an enable removed, or a branch never
taken; ``eq`` one ``.eq()`` assignment dropped (from its ``m.d.<domain> +=`` list, or the
whole statement); ``mux`` the arms of a ``Mux`` swapped; ``invert`` a ``~`` dropped.
Nothing inside f-strings, ``name=`` arguments, annotations, ``assert`` or ``raise`` is
mutated. Each mutant is the original text with one node's source span replaced by the
unparsed mutated node (parenthesised where needed), and is checked when enumerated: the
mutant's parse tree equals the original tree with that one node replaced. Ids are
``<file stem>-<n>`` in source order (line, column, operator, variant): deterministic for
a given source.

**Where a mutant runs.** Not in the checkout: the tool copies the repository's files
(``git ls-files``: tracked and untracked-not-ignored) once into
``<build>/mutation/tree/`` (the package folder ``moehub/`` and the tests) and runs every
step there with ``PYTHONPATH`` naming the copy, so ``import moehub`` finds the copy before the editable install's finder
(a meta-path hook consulted after ``sys.path``). A mutant is written into the copy and the
original bytes are written back afterwards (``finally``) and compared byte for byte. So an
interrupted run (Ctrl-C, a kill, a crash) can never leave the working tree mutated -- the
reason for the copy rather than an in-place edit under try/finally, which a SIGKILL would
defeat --, edits made in the checkout while a campaign runs do not reach it, and at the
end the tool checks that the mutated files in the checkout are byte for byte what they
were when it started. Python
never writes bytecode in the copy (``PYTHONDONTWRITEBYTECODE``): a mutant of the same size
written in the same second as the original could otherwise be run from a stale ``.pyc``.

**Each mutant** gets its own build folder, ``<build>/mutation/work/<id>/`` as
``$MOEHUB_BUILD`` (removed afterwards; the log stays), so no Verilog, simulator build or
coverage file of another run is ever reused. (Reuse would be safe anyway: the Verilog
stamp hashes the RTL sources and the config, and a simulator build is keyed by the hash of
the Verilog text, simulator and flags, so a mutant's differing Verilog cannot hit the
unmutated build; identical Verilog would simulate identically.) Then:

1. *elaboration*: the mutant is converted to Verilog for ``tiny`` (as ``moehub rtl``),
   and elaborated to RTLIL for each feature hub of :data:`KILL_HUBS` (tiny with count
   packets, with pages, with multicast, with all three); an exception there, or no end
   within :data:`ELABORATION_TIMEOUT` or four times the unmutated elaboration's time,
   whichever is longer (a generate loop that never ends), is **stillborn** (reported
   apart, not in the score). Each hub's hash (tiny's Verilog, the others' RTLIL digest)
   is compared with the unmutated one's: where equal (the mutant changes nothing that hub
   shows: code for other features or configs, or an equivalent rewrite), the tests that
   only simulate that hub (:data:`NETLIST_TESTS`) cannot kill it and are skipped --
   unless the mutated file is one the testbench or model imports too
   (:func:`testbench_files`: ``formats``, ``csr_map``, ``timing``), where a changed
   constant changes the scoreboard rather than the netlist.
2. *the kill suite* (:data:`KILL_SUITE`), ``pytest -x`` in the copy, cheapest first: the
   Amaranth-simulator unit tests and everything else of the fast set that reads rtl/
   without a simulator (units, the Verilog stamp, register model vs the CSR bank, formats/CSR map, timing
   constants, the C header, the testplan against the tables of docs/hub.md), then the cocotb
   regression on tiny (Icarus, every test of the hub testbench that applies to tiny,
   ``verif/tb/``: the protocol-v1 rules, stopped at its first failing
   test by ``COCOTB_MAX_FAILURES=1``, each test's limit of simulated time cut to 5 %
   by ``MOEHUB_TIMEOUT_SCALE=0.05`` so that a hung hub fails in 100k cycles, still 30x
   the longest test), the formal smoke jobs, the RTL-in-the-loop
   player on tiny, the feature hubs' directed tests (Icarus; count packets, pages,
   multicast, and all three together: the code tiny never builds), and last the unit
   tests of what no hub of the suite builds whole (the protocol-v2, multicast and relay
   units). Left out: the Verilator runs of the fast set (the same cocotb regression on
   tiny, and on mixtral-8gpu, a 1-2 minute C++ build per mutant), the tests that plant
   their own bug by text replacement (marked ``plants``: a mutant of that text makes
   them fail for the wrong reason), the co-simulation and progress tests (the same player
   as above, longer), and the slow set. A failure is **killed** (by the first failing
   test, and for the regression the first failing cocotb test); a run past the timeout
   (default four times the unmutated suite's time, at least 300 s) is a **timeout**; else
   **survived**.

**Where the mutants run**: on Dask (:mod:`moehub.verif.mutate_dask`, the cluster options
of ``moehub explore``: a LocalCluster by default, ``--workers N``; ``--scheduler``;
``--cluster slurm|pbs``), each result cached by content under ``<build>/mutation/cache/``
so that a rerun skips the mutants already run and an interrupted run resumes; survivors
are then proven equivalent on the same hubs (``--equiv-config``) by Yosys or shown different.

The report goes to ``<build>/mutation/report.md`` and ``report.json``: per mutant the id,
file:line, operator, original -> mutant, result, killing test or proof and seconds; the
counts and the mutation score killed / (killed + survived) per file and per operator,
where a timeout (a hang) counts as killed and is listed apart, and stillborn, proven
equivalent and failed (error) mutants are not scored; and the projected time of the whole
set on N workers (mutants x mean time / N). ``--sample N --seed S`` draws N
mutants over the files (at least one per file, the rest in proportion to the file's
weight, :data:`WEIGHTS`, times the square root of its mutant count: the packet manager,
allocator and tracker first).
"""
from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

#: the package folder (mutant files are named relative to it: "rtl/allocator.py") and
#: the checkout around it (copied whole: the package and the tests the suite runs)
REPO = Path(__file__).resolve().parent.parent
CHECKOUT = REPO.parent

OPERATORS = {
    "cmp": "compare operator swapped (< <=, > >=, == !=)",
    "const": "integer constant +-1 (compare or arithmetic operand, .eq() value)",
    "drop": "one term of a & / | / + dropped",
    "swap": ".eq() sources swapped between two sibling targets",
    "init": "reset value changed (init= / reset=)",
    "cond": "m.If / m.Elif condition forced true or false",
    "eq": ".eq() assignment dropped",
    "mux": "Mux arms swapped",
    "invert": "~ dropped",
}
_OP_ORDER = {k: i for i, k in enumerate(OPERATORS)}

#: sampling weight per file (others 1): the packet manager, allocator and tracker first.
#: A file's share of a sample is its weight x the square root of its mutant count (the
#: packet manager alone has some 40 % of all mutants).
WEIGHTS = {"rtl/packet_manager.py": 4.0, "rtl/allocator.py": 6.0, "rtl/tracker.py": 4.0,
           "rtl/chunk_table.py": 2.0, "rtl/eos_tracker.py": 2.0, "rtl/reservations.py": 2.0,
           "rtl/write_buffer.py": 2.0, "rtl/event_queue.py": 2.0, "rtl/csr.py": 1.5,
           "rtl/hub.py": 1.5, "rtl/logic.py": 1.5}

#: The hubs the kill suite simulates: each one's config (a shipped name or a file of the
#: checkout) and the suite's tests that simulate only it, skipped for a mutant that leaves
#: its netlist unchanged. tiny (every protocol-v1 rule; the player), and tiny with each
#: protocol-v2 feature alone and all three together (tests/data/; their directed tests):
#: code that only a feature hub builds (count packets, pages, multicast) is simulated
#: there, not scored as a survivor of tiny's suite.
KILL_HUBS = {
    "tiny": ("tiny", ("tests/test_hub_cocotb.py::test_hub_regression[icarus-tiny]", "tests/test_player.py")),
    **{c: (f"tests/data/{c}.yaml", (f"tests/test_hub_cocotb.py::test_hub_directed[{c}]",))
       for c in ("tiny-counts", "tiny-paged", "tiny-multicast", "tiny-multicast-paged-counts")},
}

#: The kill suite: pytest node ids run with -x in this order (cheap first).
KILL_SUITE = (
    "tests/test_rtl_units.py",
    "tests/test_rtl_gen.py",
    "tests/test_register_model.py",
    "tests/test_formats_csr.py",
    "tests/test_timing.py",
    "tests/test_c_header.py",
    "tests/test_testplan.py",
    "tests/test_hub_cocotb.py::test_hub_regression[icarus-tiny]",
    "tests/test_formal.py::test_smoke",
    "tests/test_player.py",
    *(KILL_HUBS[c][1][0] for c in KILL_HUBS if c != "tiny"),
    # the units no hub of the suite builds whole, each in lock-step with its model: the
    # protocol-v2 units (the stand-alone per-expert counts among them), the multicast
    # allocators (the comparison ones too), the relay's units and its accumulate datapath
    "tests/test_rtl_v2_units.py",
    "tests/test_rtl_multicast_units.py",
    "tests/test_rtl_relay.py",
    "tests/test_rtl_relay_reduce.py",
    "tests/test_rtl_relay_accumulate.py",
    "tests/test_rtl_relay_hub.py",
)
#: the kill suite's marker selection: the fast set, plus slow tests marked ``mutation``
#: (tiny's cocotb regression on Icarus, slow since Verilator runs it in the fast set; the
#: feature hubs' directed tests that are not in the fast set), without the tests that
#: plant a bug by replacing source text (``plants``: a mutant of that text would fail them
#: for the wrong reason)
KILL_MARKERS = "(not slow or mutation) and not plants"
#: the suite's tests that simulate one hub's netlist only: test -> hub (skipped when that
#: hub's netlist is unchanged)
NETLIST_TESTS = {t: hub for hub, (_, tests) in KILL_HUBS.items() for t in tests}

#: converts tiny (as ``moehub rtl``: its Verilog is then the regression's) in
#: $MOEHUB_BUILD and prints ``NETLIST <hub> <hash>`` per hub of :data:`KILL_HUBS`: tiny's
#: Verilog's hash, the others' RTLIL digest (:func:`moehub.synth.digest.rtlil_digest`,
#: no Yosys run; their tests convert them)
ELABORATE = ("import hashlib, moehub\n"
             "print('PACKAGE', moehub.__file__)\n"
             "from moehub.spec.config import load_hub_config\n"
             "from moehub.rtl.gen import convert\n"
             "from moehub.synth.digest import hub_rtlil_digest\n"
             "v = convert(load_hub_config('tiny'))\n"
             "print('NETLIST tiny', hashlib.sha256(v.read_bytes()).hexdigest(), flush=True)\n"
             f"for hub, path in {[(h, c) for h, (c, _) in KILL_HUBS.items() if h != 'tiny']!r}:\n"
             "    print('NETLIST', hub, hub_rtlil_digest(load_hub_config(path)), flush=True)\n")

#: the kill suite's environment knobs (Icarus; the regression stopped at its first failing
#: cocotb test; each test's limit of simulated time cut to 5 %)
SUITE_ENV = {"MOEHUB_SIM": "icarus", "COCOTB_MAX_FAILURES": "1", "MOEHUB_TIMEOUT_SCALE": "0.05"}

#: seconds a mutant's elaboration may take at least (tiny converts in 8-20 s on an idle
#: machine); past it, and past four times the unmutated elaboration (a loaded machine):
#: stillborn. The unmutated elaboration itself gets the whole baseline limit.
ELABORATION_TIMEOUT = 180.0
#: the least time a mutant's suite gets, however little of its timeout the elaboration
#: left (pytest's start and collection alone take seconds)
SUITE_FLOOR_S = 10.0

CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
            ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
ARITH = (ast.Add, ast.Sub, ast.Mult, ast.LShift, ast.RShift, ast.FloorDiv, ast.Mod)
DROP = (ast.BitAnd, ast.BitOr, ast.Add)
_ATOMIC = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript, ast.List,
           ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.GeneratorExp)


# ------------------------------------------------------------------------ mutants
@dataclasses.dataclass
class Mutant:
    id: str
    file: str            # relative to the tree root, e.g. "rtl/allocator.py"
    line: int
    operator: str
    original: str        # what the report shows
    mutant: str
    source: bytes = dataclasses.field(repr=False, default=b"")   # the mutated file

    def row(self) -> dict:
        return {"id": self.id, "file": self.file, "line": self.line, "operator": self.operator,
                "original": self.original, "mutant": self.mutant}


def _short(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


def _is_eq_call(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "eq" and len(node.args) == 1)


def _is_domain(node) -> bool:
    """``m.d.<domain>`` (or ``m.d[...]``)."""
    if isinstance(node, ast.Attribute):
        node = node.value
    elif isinstance(node, ast.Subscript):
        node = node.value
    else:
        return False
    return isinstance(node, ast.Attribute) and node.attr == "d"


def _call_name(node) -> Optional[str]:
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _skipped(tree) -> set:
    """ids of nodes never mutated: f-strings, name= values, annotations, assert, raise,
    docstrings."""
    skip = set()

    def drop(n):
        if n is not None:
            skip.update(id(x) for x in ast.walk(n))
    for n in ast.walk(tree):
        if isinstance(n, (ast.JoinedStr, ast.Assert, ast.Raise)):
            drop(n)
        elif isinstance(n, ast.keyword) and n.arg == "name":
            drop(n.value)
        elif isinstance(n, ast.arg):
            drop(n.annotation)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            drop(n.returns)
        elif isinstance(n, ast.AnnAssign):
            drop(n.annotation)
    return skip


def _candidates(tree) -> Iterable[tuple]:
    """(operator, variant, target node, replacement node, original text, mutant text or
    None (then the unparsed replacement))."""
    skip = _skipped(tree)
    parent = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    sync = _sync_targets(tree)
    for n in ast.walk(tree):
        if id(n) in skip or not hasattr(n, "lineno"):
            continue
        if isinstance(n, ast.Compare):
            for i, op in enumerate(n.ops):
                if type(op) in CMP_SWAP:
                    new = copy.deepcopy(n)
                    new.ops[i] = CMP_SWAP[type(op)]()
                    yield "cmp", i, n, new, None, None
        elif isinstance(n, ast.Constant) and type(n.value) is int:
            p = parent.get(id(n))
            ok = (isinstance(p, ast.Compare) or (isinstance(p, ast.BinOp) and isinstance(p.op, ARITH))
                  or (_is_eq_call(p) and p.args[0] is n))
            if ok:
                for k, d in enumerate((1, -1)):
                    if n.value + d >= 0:
                        yield "const", k, n, ast.Constant(n.value + d), None, None
        elif isinstance(n, ast.BinOp) and isinstance(n.op, DROP):
            if not any(isinstance(x, ast.Constant) for x in (n.left, n.right)):
                yield "drop", 0, n, n.left, None, None
                yield "drop", 1, n, n.right, None, None
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Invert):
            yield "invert", 0, n, n.operand, None, None
        elif _call_name(n) == "Mux" and len(n.args) == 3 and not n.keywords:
            new = copy.deepcopy(n)
            new.args[1], new.args[2] = new.args[2], new.args[1]
            yield "mux", 0, n, new, None, None
        elif _call_name(n) in ("If", "Elif") and isinstance(n.func, ast.Attribute) and len(n.args) == 1:
            if id(n.args[0]) not in skip:
                for k, c in enumerate((1, 0)):
                    yield "cond", k, n.args[0], ast.Constant(c), None, None
        elif _call_name(n) == "Signal" and isinstance(n.func, ast.Name):
            kw = [k for k in n.keywords if k.arg in ("init", "reset")]
            if kw:
                v = kw[0].value
                new = ast.Constant(0 if not isinstance(v, ast.Constant) or v.value else 1)
                yield "init", 0, v, new, None, None
            elif _assigned_to(n, parent) & sync:
                new = copy.deepcopy(n)
                new.keywords.append(ast.keyword(arg="init", value=ast.Constant(1)))
                yield "init", 1, n, new, None, None
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and _is_domain(n.target):
            yield from _assignment_mutants(n)


def _assignment_mutants(n: ast.AugAssign):
    """``eq`` (drop one) and ``swap`` (sibling sources) on ``m.d.<domain> += ...``."""
    v = n.value
    if isinstance(v, (ast.List, ast.Tuple)) and len(v.elts) > 1:
        for i, e in enumerate(v.elts):
            new = copy.deepcopy(v)
            del new.elts[i]
            yield "eq", i, v, new, ast.unparse(e), "(dropped)"
        for i in range(len(v.elts) - 1):
            a, b = v.elts[i], v.elts[i + 1]
            if _is_eq_call(a) and _is_eq_call(b) and _siblings(a.func.value, b.func.value) \
                    and ast.dump(a.args[0]) != ast.dump(b.args[0]):
                new = copy.deepcopy(v)
                na, nb = new.elts[i], new.elts[i + 1]
                na.args[0], nb.args[0] = nb.args[0], na.args[0]
                yield ("swap", i, v, new, f"{ast.unparse(a)}, {ast.unparse(b)}",
                       f"{ast.unparse(na)}, {ast.unparse(nb)}")
    else:
        yield "eq", 0, n, ast.Pass(), ast.unparse(n), "pass"


def _dotted(node) -> set:
    """``self.errors[r].x`` -> {"self.errors.x", "self.errors", "self"}: the names a
    target may have been created under."""
    parts = []
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            break
        else:
            return set()
    parts.reverse()
    return {".".join(parts[:k]) for k in range(1, len(parts) + 1)}


def _sync_targets(tree) -> set:
    """Names of what ``m.d.<domain> +=`` (not comb) assigns: registers, whose reset value
    matters (a comb signal's ``init`` is only its default when undriven). A comprehension
    variable stands for what it iterates over."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.AugAssign) and _is_domain(n.target) and not (
                isinstance(n.target, ast.Attribute) and n.target.attr == "comb"):
            alias = {}
            for c in ast.walk(n.value):
                if isinstance(c, ast.comprehension):
                    for t in ast.walk(c.target):
                        if isinstance(t, ast.Name):
                            alias[t.id] = _dotted(c.iter)
            for c in ast.walk(n.value):
                if _is_eq_call(c):
                    names = _dotted(c.func.value)
                    for x in list(names):
                        names |= alias.get(x, set())
                    out |= names
    return out


def _assigned_to(call, parent: dict) -> set:
    """The names a ``Signal(...)`` call is assigned to (``x = Signal()``, ``self.x = ...``,
    ``xs = [Signal() for ...]``, tuple assignments)."""
    node, p = call, parent.get(id(call))
    while isinstance(p, (ast.ListComp, ast.List, ast.Tuple, ast.GeneratorExp)) and \
            not isinstance(p, ast.Assign):
        node, p = p, parent.get(id(p))
    if not isinstance(p, ast.Assign):
        return set()
    names = set()
    for t in p.targets:
        if isinstance(t, ast.Tuple) and isinstance(p.value, ast.Tuple) and node in p.value.elts:
            t = t.elts[p.value.elts.index(node)] if len(t.elts) == len(p.value.elts) else t
        if isinstance(t, (ast.Name, ast.Attribute)):
            names.add(ast.unparse(t))
    return names


def _siblings(x, y) -> bool:
    """Two targets of the same base: ``b.valid`` / ``b.pre``, ``x[0]`` / ``x[1]``."""
    if isinstance(x, ast.Attribute) and isinstance(y, ast.Attribute):
        return x.attr != y.attr and ast.dump(x.value) == ast.dump(y.value)
    if isinstance(x, ast.Subscript) and isinstance(y, ast.Subscript):
        return ast.dump(x.slice) != ast.dump(y.slice) and ast.dump(x.value) == ast.dump(y.value)
    return False


def _line_starts(src: bytes) -> list:
    starts, pos = [0], 0
    for line in src.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _replace_node(tree, target, replacement) -> bool:
    """Put ``replacement`` where ``target`` is in ``tree`` (by identity); False if absent."""
    for p in ast.walk(tree):
        for field, value in ast.iter_fields(p):
            if value is target:
                setattr(p, field, replacement)
                return True
            if isinstance(value, list):
                for i, x in enumerate(value):
                    if x is target:
                        value[i] = replacement
                        return True
    return False


def _splice(src: bytes, starts: list, target, text: str) -> bytes:
    a = starts[target.lineno - 1] + target.col_offset        # (col offsets count UTF-8 bytes)
    b = starts[target.end_lineno - 1] + target.end_col_offset
    return src[:a] + text.encode() + src[b:]


def mutants_of(path: Path, rel: str) -> list[Mutant]:
    """Every mutant of one file, in source order, each verified (see the module doc)."""
    src = path.read_bytes()
    tree = ast.parse(src)
    starts = _line_starts(src)
    parent = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found = []
    for op, variant, target, new, before, after in _candidates(tree):
        text = "pass" if isinstance(new, ast.Pass) else ast.unparse(new)
        if not isinstance(new, (*_ATOMIC, ast.Pass)):
            text = f"({text})"
        mutated = _splice(src, starts, target, text)
        _check(src, starts, parent, target, new, mutated, f"{rel}:{target.lineno}: {op}")
        shown = target
        if op in ("const", "cond"):         # a bare number says little: show its expression
            shown = parent[id(target)]
        a = starts[shown.lineno - 1] + shown.col_offset
        b = starts[shown.end_lineno - 1] + shown.end_col_offset
        orig_text = src[a:b].decode()
        if shown is not target:
            text = mutated[a:b + len(mutated) - len(src)].decode()
        found.append(((target.lineno, target.col_offset, _OP_ORDER[op], variant),
                      Mutant("", rel, target.lineno, op, _short(before or orig_text),
                             _short(after or text), mutated)))
    found.sort(key=lambda x: x[0])
    stem = _id_stem(rel)
    out = []
    for k, (_, m) in enumerate(found):
        m.id = f"{stem}-{k:03d}"
        out.append(m)
    return out


def _check(src: bytes, starts: list, parent: dict, target, new, mutated: bytes, where: str) -> None:
    """The statement around the change, cut from the mutant, parses to the original
    statement with exactly ``target`` replaced by ``new``. (The text outside that
    statement is the original's byte for byte, so the rest of the tree is too; cutting
    the statement out keeps this check linear in the file's size.)"""
    stmt = target
    while not isinstance(stmt, ast.stmt):
        stmt = parent[id(stmt)]
    if stmt is target:
        want = ast.dump(new)
    else:
        assert _replace_node(stmt, target, new), f"{where}: target not in its statement"
        want = ast.dump(stmt)
        assert _replace_node(stmt, new, target)
    a = starts[stmt.lineno - 1]
    b = starts[stmt.end_lineno - 1] + stmt.end_col_offset + len(mutated) - len(src)
    code = mutated[a:b]
    if stmt.col_offset:                  # an indented statement: parse it inside a block
        code = b"if 1:\n" + code
    try:
        frag = ast.parse(code)
    except SyntaxError as e:
        raise AssertionError(f"{where}: the mutant does not parse ({e})") from None
    line = 2 if stmt.col_offset else 1
    got = [ast.dump(n) for n in ast.walk(frag) if isinstance(n, ast.stmt)
           and (n.lineno, n.col_offset) == (line, stmt.col_offset)]
    if got != [want]:
        raise AssertionError(f"{where}: the splice does not give the mutated tree")


def rtl_files(root: Path = REPO) -> list[str]:
    """The hardware sources: every .py under rtl/ (its feature sub-packages too) but the package markers."""
    return sorted(str(p.relative_to(root)) for p in (root / "rtl").rglob("*.py") if p.name != "__init__.py")


def enumerate_mutants(files: Sequence[str], root: Path = REPO) -> list[Mutant]:
    out = []
    for f in files:
        out += mutants_of(root / f, f)
    return out


def sample(mutants: Sequence[Mutant], n: int, seed: int, weights: dict = WEIGHTS) -> list[Mutant]:
    """``n`` mutants: at least one per file (while n allows), the rest in proportion to
    the file's weight x the square root of its mutant count, largest remainder; random
    within a file."""
    rng = random.Random(seed)
    by_file: dict = {}
    for m in mutants:
        by_file.setdefault(m.file, []).append(m)
    files = sorted(by_file)
    quota = {f: 0 for f in files}
    for f in sorted(files, key=lambda f: -weights.get(f, 1.0))[:n]:
        quota[f] = 1
    left = n - sum(quota.values())
    while left > 0:
        open_ = [f for f in files if quota[f] < len(by_file[f])]
        if not open_:
            break
        w = {f: len(by_file[f]) ** 0.5 * weights.get(f, 1.0) for f in open_}
        share = {f: left * w[f] / sum(w.values()) for f in open_}
        add = {f: min(int(share[f]), len(by_file[f]) - quota[f]) for f in open_}
        if sum(add.values()) == 0:     # largest remainder, one at a time
            f = max(open_, key=lambda f: (share[f] - int(share[f]), f))
            add[f] = 1
        for f, a in add.items():
            quota[f] += a
            left -= a
    chosen = []
    for f in files:
        chosen += rng.sample(by_file[f], quota[f])
    return sorted(chosen, key=lambda m: (m.file, int(m.id.rsplit("-", 1)[1])))


def testbench_files(root: Path = REPO) -> set:
    """rtl/ files the testbench, the reference model or the layer program import (with
    what they import from rtl/): a mutant there changes the scoreboard too. The hub's
    contract (formats, registers, timing, the model) lives in spec/, which imports no
    rtl/, so this is normally empty: a mutant of the hardware cannot move the checker."""
    start = sorted((root / "verif" / "tb").glob("*.py")) + \
        [root / "verif" / v for v in ("traffic.py", "count_traffic.py", "coverage.py", "knobs.py")] + \
        sorted((root / "spec").glob("*.py"))
    todo, seen = [p for p in start if p.exists()], set()
    while todo:
        path = todo.pop()
        for n in ast.walk(ast.parse(path.read_bytes())):
            if not (isinstance(n, ast.ImportFrom) and n.col_offset == 0):
                continue
            here = path.parent.relative_to(root).parts
            if n.level:
                parts = list(here[:len(here) - (n.level - 1)] if n.level > 1 else here)
            elif (n.module or "").startswith("moehub."):
                parts = []
            else:
                continue
            mod = (n.module or "").removeprefix("moehub.").split(".") if n.module else []
            for name in ([""] if n.module else [a.name for a in n.names]):
                target = root.joinpath(*parts, *mod, *([name] if name else []))
                f = target.with_suffix(".py")
                rel = f.relative_to(root).as_posix() if f.is_file() else None
                if rel and rel.startswith("rtl/") and rel not in seen:
                    seen.add(rel)
                    todo.append(f)
    return seen


# ------------------------------------------------------------------------ running
@dataclasses.dataclass
class Result:
    id: str
    result: str                # killed | survived | stillborn | timeout
    killer: str = ""           # the first failing test (and cocotb test)
    seconds: float = 0.0
    netlist: str = ""          # "changed" | "unchanged" | "unchanged: <hubs>" | "" (not known)
    detail: str = ""
    skipped: tuple = ()
    elaboration_s: float = 0.0   # the conversion's seconds


def repo_files(root: Path) -> list[str]:
    """The files of the checkout (tracked, and untracked but not ignored); outside a git
    checkout every file but caches."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        return [f for f in out.split("\0") if f and (root / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                      and "__pycache__" not in p.parts and ".git" not in p.parts)


def make_tree(root: Path, dest: Path) -> Path:
    """A copy of the checkout ``root``'s files (the package folder and the tests) in
    ``dest``; returns ``dest`` (it goes on PYTHONPATH, and the suite runs in it)."""
    tree = dest
    shutil.rmtree(dest, ignore_errors=True)
    for f in repo_files(root):
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / f, tree / f)
    return tree


def resolve_ref(root: Path, ref: str) -> str:
    """The full commit name of ``ref`` in the checkout ``root``; ValueError naming it when
    git does not know it (or ``root`` is no git checkout)."""
    p = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError(f"--ref {ref!r}: not a commit of the git checkout {root}")
    return p.stdout.strip()


def _id_stem(rel: str) -> str:
    """A mutant id's file part: the file under ``rtl/`` without ``.py``, folders joined
    by dots (``allocator``, ``relay.hub``): unique where two folders hold a file of one
    name (``rtl/hub.py``, ``rtl/relay/hub.py``)."""
    parts = Path(rel).with_suffix("").parts
    return ".".join(parts[1:] if parts and parts[0] == "rtl" else parts)


def export_ref(root: Path, ref: str, dest: Path) -> Path:
    """The files of commit ``ref`` of the checkout ``root`` in ``dest`` (``git archive``):
    a snapshot that does not move while others edit or commit in the checkout, so the
    cache's identities stay the same from one run to the next."""
    commit = resolve_ref(root, ref)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    from .. import runinfo
    return runinfo.git_extract(root, commit, dest)


def _run(cmd, cwd: Path, env: dict, timeout: float, log) -> tuple[Optional[int], str]:
    """Run ``cmd`` in its own process group; on timeout the group is killed. Returns
    (exit code or None on timeout, output)."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    text = out.decode(errors="replace")
    log.write(f"$ {' '.join(map(str, cmd))}\n{text}\n")
    return rc, text


def first_failure(junit: Path) -> str:
    """The first failing test of a pytest JUnit file, with the cocotb test when the
    regression names one."""
    if not junit.exists():
        return ""
    for case in ET.parse(junit).iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
            msg = (bad.get("message") or "") + (bad.text or "")
            m = re.search(r"failing cocotb tests \[([^\]]*)\]", msg)
            if m:
                # (after the first failure cocotb reports every test it did not run as
                # failed too: the first name is the one that failed)
                name += f" ({m.group(1).split(',')[0].strip().strip(chr(39))})"
            return name
    return ""


def netlist_hashes(text: str) -> dict:
    """The elaboration's printed hashes: hub -> hash (``NETLIST <hub> <hash>`` lines; one
    ``NETLIST <hash>`` line: the hub ``""``)."""
    out = {}
    for line in re.findall(r"^NETLIST (.+)$", text, re.M):
        parts = line.split()
        out[parts[0] if len(parts) > 1 else ""] = parts[-1]
    return out


def netlist_words(unchanged: set, hubs: set) -> str:
    """How a mutant's netlists compare with the unmutated ones: ``unchanged`` (all),
    ``changed`` (all), else ``unchanged: <the unchanged hubs>``."""
    if unchanged == hubs:
        return "unchanged"
    return "unchanged: " + ", ".join(sorted(unchanged)) if unchanged else "changed"


class Campaign:
    """Runs mutants of ``root`` in a copy of it (the steps of one mutant: :meth:`_run_one`;
    :mod:`moehub.verif.mutate_dask` runs them on Dask workers, each in its own copy).

    ``suite``: pytest node ids (run with -x in that order); ``elaborate``: Python code run
    first in the copy (an exception: stillborn; printed ``NETLIST <hub> <hash>`` lines, or
    one ``NETLIST <hash>``, enable the unchanged-netlist rule); ``netlist_tests``: the
    suite's tests skipped when their hub's netlist is unchanged (test -> hub; a list: all
    of the one netlist); ``shared``: files whose mutants keep those tests."""

    def __init__(self, root: Path, out: Path, *, suite: Sequence[str] = KILL_SUITE,
                 elaborate: str = ELABORATE, netlist_tests=NETLIST_TESTS,
                 shared: Optional[set] = None, package: str = "moehub",
                 timeout: Optional[float] = None, env: Optional[dict] = None,
                 echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)):
        self.root, self.out = Path(root).absolute(), Path(out).absolute()
        self.suite, self.elaborate = list(suite), elaborate
        from .mutate_dask import netlist_map
        self.netlist_tests = netlist_map(netlist_tests)
        self.shared = testbench_files(self.root / package) if shared is None else set(shared)
        self.package, self.timeout = package, timeout
        self.extra_env = dict(env or {})
        self.echo = echo
        self.trees: list = []
        self.base_netlist = None
        self.base_elaboration_s = self.last_elaboration_s = 0.0

    # -- for the Dask engine (moehub.verif.mutate_dask), which gets this class, not this module
    @staticmethod
    def snapshot(root: Path, dest: Path, ref: Optional[str] = None) -> Path:
        """The copy of ``root`` every worker's tree is copied from: its working tree
        (:func:`make_tree`), or with ``ref`` that git revision (:func:`export_ref`)."""
        return export_ref(root, ref, dest) if ref else make_tree(root, dest)

    @staticmethod
    def baseline_mutant() -> Mutant:
        """The unmutated run's stand-in (no source: nothing is written)."""
        return Mutant("baseline", "", 0, "", "", "")

    # -- set-up
    def prepare(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "logs").mkdir(exist_ok=True)
        self.trees = [make_tree(self.root, self.out / "tree")]

    def env(self, tree: Path, build: Path) -> dict:
        env = dict(os.environ)
        for k in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"):
            env.pop(k, None)
        env.update({"PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",
                    "MOEHUB_BUILD": str(build), **SUITE_ENV})
        env.update(self.extra_env)
        return env

    def baseline(self) -> Result:
        """The unmutated copy through the same steps: it must pass (else the suite is
        broken here); its time sets the default timeout."""
        r = self._run_one(self.trees[0], Mutant("baseline", "", 0, "", "", ""), None, timeout=3600)
        if r.result != "survived":
            raise RuntimeError(f"the kill suite fails on the unmutated source ({r.result}: {r.killer} "
                               f"{r.detail}); see {self.out / 'logs' / 'baseline.log'}")
        if self.timeout is None:
            self.timeout = max(300.0, 4 * r.seconds)
        return r

    # -- one mutant
    def _run_one(self, tree: Path, m: Mutant, source: Optional[bytes], timeout=None) -> Result:
        t0 = time.monotonic()
        timeout = timeout or self.timeout or 600.0
        build = self.out / "work" / m.id
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        path = tree / self.package / m.file if source is not None else None
        original = path.read_bytes() if path else None
        env = self.env(tree, build)
        try:
            if path:
                path.write_bytes(source)
            with open(self.out / "logs" / f"{m.id}.log", "w") as log:
                res = self._steps(tree, m, env, build, timeout, t0, log)
            res.elaboration_s = self.last_elaboration_s
        finally:
            if path:
                path.write_bytes(original)
                if path.read_bytes() != original:
                    raise RuntimeError(f"{path}: not restored")
            shutil.rmtree(build, ignore_errors=True)
        res.seconds = round(time.monotonic() - t0, 1)
        return res

    def _steps(self, tree, m, env, build, timeout, t0, log) -> Result:
        py = sys.executable
        netlist, unchanged = "", set()
        if self.elaborate:
            limit = timeout if m.id == "baseline" else \
                min(timeout, max(ELABORATION_TIMEOUT, 4 * self.base_elaboration_s))
            t_elab = time.monotonic()
            rc, text = _run([py, "-c", self.elaborate], tree, env, limit, log)
            self.last_elaboration_s = round(time.monotonic() - t_elab, 1)
            if m.id == "baseline":
                self.base_elaboration_s = self.last_elaboration_s
            if rc is None:          # (e.g. a generate loop that never ends: nothing to test)
                return Result(m.id, "stillborn", detail=f"elaboration hung (> {limit:.0f} s)")
            if rc != 0:
                lines = [x for x in text.strip().splitlines() if x.strip()]
                return Result(m.id, "stillborn", detail=_short(lines[-1] if lines else f"exit {rc}", 160))
            pkg = re.search(r"^PACKAGE (.+)$", text, re.M)
            if pkg and tree.absolute() not in Path(pkg.group(1)).absolute().parents:
                raise RuntimeError(f"the mutant ran {pkg.group(1)}, not the copy in {tree}")
            hashes = netlist_hashes(text)
            if m.id == "baseline":
                self.base_netlist = hashes or None
            elif self.base_netlist and hashes:
                unchanged = {h for h, v in hashes.items() if self.base_netlist.get(h) == v}
                netlist = netlist_words(unchanged, set(hashes))
        suite = self.suite
        skipped = ()
        if unchanged and m.file not in self.shared:
            skipped = tuple(t for t in suite if t in self.netlist_tests and self.netlist_tests[t] in unchanged)
            suite = [t for t in suite if t not in skipped]
        junit = build / "junit.xml"
        left = max(SUITE_FLOOR_S, timeout - (time.monotonic() - t0))
        cmd = [py, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", KILL_MARKERS,
               f"--junitxml={junit}", *suite]
        rc, text = _run(cmd, tree, env, left, log)
        if rc is None:
            return Result(m.id, "timeout", "", netlist=netlist, detail=f"suite past {left:.0f} s",
                          skipped=skipped)
        if rc == 0:
            return Result(m.id, "survived", netlist=netlist, skipped=skipped)
        killer = first_failure(junit)
        if not killer:           # pytest itself failed (collection, usage): the log says
            lines = [x for x in text.strip().splitlines() if x.strip()]
            killer = "pytest exit %d: %s" % (rc, _short(lines[-1] if lines else "", 100))
        return Result(m.id, "killed", killer, netlist=netlist, skipped=skipped)

    # -- many
    def run(self, mutants: Sequence[Mutant],
            on_result: Optional[Callable[[dict], None]] = None) -> list[Result]:
        """Every mutant, one after the other in this process (the command runs them on
        Dask instead: :mod:`moehub.verif.mutate_dask`); ``on_result(results so far, by
        id)`` after each."""
        results: dict = {}
        for done, m in enumerate(mutants, 1):
            r = results[m.id] = self._run_one(self.trees[0], m, m.source)
            if on_result:
                on_result(results)
            self.echo(f"[{done}/{len(mutants)}] {m.id} {m.file}:{m.line} {m.operator}: {r.result}"
                      f"{' by ' + r.killer if r.killer else ''} ({r.seconds:.0f} s)")
        return [results[m.id] for m in mutants]


# ------------------------------------------------------------------------ report
#: the outcomes a mutant can have, in table order: ``equivalent`` is a survivor proven
#: equivalent (not scored), ``error`` a task that failed (rerun next time, not scored)
OUTCOMES = ("killed", "timeout", "survived", "equivalent", "stillborn", "error")


def _as_dict(r) -> dict:
    if isinstance(r, dict):
        return r
    d = dataclasses.asdict(r)
    d["skipped"] = list(r.skipped)
    return d


def score(results: Sequence) -> dict:
    """Counts per outcome and the score killed / (killed + survived), a timeout (a hang)
    counted as killed; equivalent, stillborn and error mutants are not scored."""
    res = [_as_dict(r)["result"] for r in results]
    count = {k: res.count(k) for k in OUTCOMES}
    dead = count["killed"] + count["timeout"]
    count["total"] = len(res)
    count["score"] = round(dead / (dead + count["survived"]), 4) if dead + count["survived"] else None
    return count


def _pct(s: dict) -> str:
    return f"{100 * s['score']:.1f} %" if s["score"] is not None else "n/a"


def breakdown(rows: Sequence[dict], by: str) -> list[tuple[str, dict]]:
    """The score of each value of ``by`` (``file`` or ``operator``), then the total."""
    keys = sorted({r[by] for r in rows}, key=lambda k: _OP_ORDER.get(k, 0) if by == "operator" else k)
    return [(k, score([r for r in rows if r[by] == k])) for k in keys] + [("all", score(rows))]


def breakdown_table(rows: Sequence[dict], by: str) -> list[str]:
    """A markdown table of :func:`breakdown`."""
    out = [f"| {by} | " + " | ".join(OUTCOMES) + " | score |",
           "|---|" + "---:|" * (len(OUTCOMES) + 1)]
    for k, s in breakdown(rows, by):
        name = f"**{k}**" if k == "all" else k
        out.append(f"| {name} | " + " | ".join(str(s[o]) for o in OUTCOMES) + f" | {_pct(s)} |")
    return out


def projection(n_mutants: int, mean_s: float, workers: Sequence[int]) -> dict:
    """Projected wall time of ``n_mutants`` on N workers: mutants x mean time / N (the
    cluster's start, the baseline and the proofs of survivors not counted)."""
    return {n: round(n_mutants * mean_s / n) for n in workers}


def write_report(out: Path, mutants: Sequence[Mutant], results: Sequence, meta: dict,
                 full_set: Optional[int] = None, workers: Sequence[int] = (2, 16, 64, 256),
                 record: Optional[dict] = None) -> tuple:
    """report.json and report.md in ``out`` (results: :class:`Result` or dicts of the Dask
    run); per mutant, per file and per operator, and -- with ``full_set`` (the whole
    set's size) -- the projected time of the whole set on N workers. ``record``: the
    finished campaign's run record (command, commit, load, the RTL's hash), which ``moehub
    report --collect mutate`` needs (a running campaign's report has none). Returns the
    paths."""
    rows = []
    for m, r in zip(mutants, results):
        row = m.row()
        row.update({k: v for k, v in _as_dict(r).items() if k != "id"})
        rows.append(row)
    s = score(rows)
    files = sorted({m.file for m in mutants})
    run = [r for r in rows if not r.get("cached") and r["result"] not in ("error",)]
    mean = sum(r["seconds"] for r in rows if r["result"] != "error") / max(1, sum(r["result"] != "error" for r in rows))
    proj = projection(full_set, mean, workers) if full_set else {}
    data = {"meta": meta, "score": s, "files": files, "by_file": dict(breakdown(rows, "file")),
            "by_operator": dict(breakdown(rows, "operator")), "mean_s": round(mean, 1),
            "projection_s": proj, "full_set": full_set, "mutants": rows,
            **({"record": record} if record else {})}
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    dead = s["killed"] + s["timeout"]
    lines = ["# Mutation report", "",
             f"Mutation score: **{dead} / {dead + s['survived']} = {_pct(s)}** (killed / (killed + "
             f"survived), a timeout counted as killed): {s['killed']} killed, {s['timeout']} "
             f"timeout, {s['survived']} survived, {s['equivalent']} proven equivalent, "
             f"{s['stillborn']} stillborn, {s['error']} error (the last three not scored); "
             f"{s['total']} mutants over {len(files)} files ({len(run)} run now, "
             f"{s['total'] - len(run)} from the cache or failed).", "",
             "Run: " + ", ".join(f"{k} {v}" for k, v in meta.items()), ""]
    if proj:
        lines += [f"Mean time per mutant {mean:.0f} s; the whole set of {full_set} mutants "
                  "(mutants x mean / N workers): " + ", ".join(
                      f"{n} workers {v / 3600:.1f} h" for n, v in proj.items()) + ".", ""]
    lines += ["## Per file", "", *breakdown_table(rows, "file"), "",
              "## Per operator", "", *breakdown_table(rows, "operator"), "",
              "## Mutants", "",
              "| id | file:line | operator | original | mutant | result | killing test / proof | s |",
              "|---|---|---|---|---|---|---|---:|"]
    for row in rows:
        note = row.get("killer") or row.get("detail") or ""
        if row.get("proof"):
            from .mutate_dask import describe_proof
            note = (note + "; " if note else "") + describe_proof(row["proof"])
        if (row.get("netlist") or "").startswith("unchanged"):
            note = (note + "; " if note else "") + ("netlists unchanged" if row["netlist"] == "unchanged"
                                                   else "netlist " + row["netlist"])
        if row.get("cached"):
            note = (note + "; " if note else "") + "cached"
        cells = [row["id"], f"{row['file']}:{row['line']}", row["operator"], f"`{row['original']}`",
                 f"`{row['mutant']}`", row["result"], note, f"{row['seconds']:.0f}"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    for title, kind in (("Survivors", "survived"), ("Proven equivalent", "equivalent")):
        sel = [r for r in rows if r["result"] == kind]
        if sel:
            lines += ["", f"## {title}", ""]
            lines += [f"* {r['id']} ({r['file']}:{r['line']}, {r['operator']}): `{r['original']}` -> "
                      f"`{r['mutant']}`" + (f": {_proof_words(r['proof'])}" if r.get("proof") else "")
                      for r in sel]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return out / "report.json", out / "report.md"


def _proof_words(p: dict) -> str:
    from .mutate_dask import describe_proof
    return describe_proof(p) or p.get("detail", "")


# ------------------------------------------------------------------------ command
def add_arguments(p: argparse.ArgumentParser) -> None:
    from .. import cluster as clusters
    from .mutate_dask import EQUIV_CONFIGS
    p.add_argument("--list", action="store_true", help="list the mutants (id, place, operator, change) and exit")
    p.add_argument("--only", action="append", default=[], metavar="ID", help="run these mutants (repeatable)")
    p.add_argument("--sample", type=int, default=None, metavar="N", help="run N mutants drawn over the files")
    p.add_argument("--seed", type=int, default=None, help="seed of --sample (default: random, printed)")
    p.add_argument("--files", nargs="+", default=None, metavar="FILE",
                   help="files to mutate, relative to the repository (default: every rtl/*.py)")
    p.add_argument("--tests", nargs="+", default=None, metavar="NODEID",
                   help="the kill suite: pytest node ids run with -x in order (default: KILL_SUITE)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per mutant (default: 4 x the unmutated suite's time, >= 300)")
    p.add_argument("--out", default=None, help="output folder, cache included (default <build>/mutation)")
    p.add_argument("--no-cache", action="store_true", help="run every mutant again (the cache is rewritten)")
    p.add_argument("--equiv-config", action="append", default=None, metavar="CONFIG",
                   help=f"prove survivors equivalent on this hub config (repeatable; default "
                        f"{', '.join(EQUIV_CONFIGS)})")
    p.add_argument("--no-prove", action="store_true", help="leave survivors unproven")
    p.add_argument("--ref", default=None, metavar="REV",
                   help="test this git revision's files instead of the working tree's (a snapshot "
                        "that does not move while the checkout changes; the mutants are still "
                        "enumerated from the working tree's rtl/ unless it matches)")
    c = p.add_argument_group("where the mutants run (Dask, as moehub explore)")
    c.add_argument("--workers", "--jobs", type=int, default=None, dest="workers",
                   help="local worker processes (default: one per core, at most one per mutant); "
                        "with --cluster, the workers to scale to")
    c.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="a running Dask scheduler")
    c.add_argument("--cluster", choices=clusters.CLUSTERS, default="local",
                   help=f"local (default), or a dask-jobqueue cluster: {clusters.HPC_PIP}")
    c.add_argument("--cluster-opt", action="append", metavar="KEY=VALUE",
                   help="dask-jobqueue option, repeatable (queue=, account=, cores=, memory=, walltime=, ...)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m moehub.verif.mutate", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run_command(p.parse_args(argv))


def run_command(args) -> int:
    from ..argcheck import UsageError
    from ..paths import build_root
    from .. import cluster as clusters
    from . import mutate_dask
    ref, src = None, REPO        # (src: the package the mutants are made from)
    if args.ref:
        try:
            ref = resolve_ref(CHECKOUT, args.ref)
        except ValueError as e:
            print(f"mutate: {e}", file=sys.stderr)
            return 2
        src = export_ref(CHECKOUT, ref, Path(tempfile.mkdtemp(prefix="moehub-mutate-ref-"))) / "moehub"
    files = args.files or rtl_files(src)
    bad = [f for f in files if not (src / f).is_file()]
    if bad:
        print(f"mutate: --files: {', '.join(bad)}: no such file under {src}", file=sys.stderr)
        return 2
    for name, value in (("--workers", args.workers), ("--sample", args.sample)):
        if value is not None and value < 1:
            print(f"mutate: {name} {value}: expected at least 1", file=sys.stderr)
            return 2
    if args.timeout is not None and args.timeout <= 0:
        print(f"mutate: --timeout {args.timeout}: expected seconds > 0", file=sys.stderr)
        return 2
    try:
        options = clusters.parse_options(args.cluster_opt)
        clusters.check(args.scheduler, args.cluster, options)
    except UsageError as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2
    all_mutants = enumerate_mutants(files, src)
    from .. import runinfo
    rtl_sha = runinfo.rtl_sources_hash(src)         # (the RTL the mutants are made from)
    if ref:
        shutil.rmtree(src.parent, ignore_errors=True)
    mutants = all_mutants
    seed = None
    if args.only:
        known = {m.id: m for m in mutants}
        missing = [i for i in args.only if i not in known]
        if missing:
            print(f"mutate: --only: unknown id(s) {', '.join(missing)} (see --list)", file=sys.stderr)
            return 2
        mutants = [known[i] for i in args.only]
    elif args.sample is not None:
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
        print(f"mutate: sample of {args.sample}, seed {seed}", file=sys.stderr)
        mutants = sample(mutants, args.sample, seed)
    if args.list:
        for m in mutants:
            print(f"{m.id:<22} {m.file}:{m.line:<5} {m.operator:<7} {m.original}  ->  {m.mutant}")
        print(f"{len(mutants)} mutants", file=sys.stderr)
        return 0
    out = Path(args.out) if args.out else build_root() / "mutation"
    before = {f: hashlib.sha256((REPO / f).read_bytes()).hexdigest() for f in files if (REPO / f).is_file()}
    suite = list(args.tests or KILL_SUITE)
    configs = [] if args.no_prove else list(args.equiv_config or mutate_dask.EQUIV_CONFIGS)
    t0 = time.monotonic()
    state = {}
    runinfo.git_describe()          # the commit at the start (cached), not after later edits
    load0 = [round(x, 2) for x in os.getloadavg()]

    def report(results: dict, final: bool = False):
        done = [m for m in mutants if m.id in results]
        res = [results[m.id] for m in done]
        base = state.get("baseline") or {}
        meta = {"mutants": f"{len(done)} of {len(mutants)}" + ("" if final else " (running)"),
                "files": len({m.file for m in done}), "seed": seed, "sample": args.sample,
                "baseline_s": base.get("seconds"), "timeout_s": round(state.get("timeout") or 0),
                "wall_s": round(time.monotonic() - t0), "cluster": args.scheduler or args.cluster,
                "workers": args.workers, "ref": ref or "working tree", "equiv_configs": " ".join(configs) or "none",
                "suite": " ".join(suite)}
        return write_report(out, done, res, meta, full_set=len(all_mutants) if not args.files else None,
                            record=runinfo.record(load=load0, rtl_sha256=rtl_sha) if final else None)

    try:
        outcome = mutate_dask.run_campaign(
            mutants, root=CHECKOUT, out=out, suite=suite, elaborate=ELABORATE,
            netlist_tests=NETLIST_TESTS, shared=testbench_files(REPO), package="moehub",
            markers=KILL_MARKERS, env=SUITE_ENV, campaign=Campaign, ref=ref, timeout=args.timeout,
            scheduler=args.scheduler,
            cluster=args.cluster, workers=args.workers, cluster_options=options,
            use_cache=not args.no_cache, prove_configs=configs, on_result=report)
    except UsageError as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2
    state.update(baseline=outcome.baseline, timeout=outcome.timeout)
    js, md = report(outcome.results, final=True)
    rows = [outcome.results[m.id] for m in mutants]
    s = score(rows)
    dead = s["killed"] + s["timeout"]
    print("\n".join(breakdown_table([{**m.row(), **r} for m, r in zip(mutants, rows)], "operator")))
    print(f"mutation score {dead}/{dead + s['survived']} = {_pct(s)} (timeouts count as killed); "
          f"killed {s['killed']}, timeout {s['timeout']}, survived {s['survived']}, proven equivalent "
          f"{s['equivalent']}, stillborn {s['stillborn']}, error {s['error']}; {len(rows)} mutants "
          f"({outcome.ran} run, {outcome.cached} cached) in {outcome.wall_s / 60:.1f} min")
    print(f"report: {md}\n        {js}")
    for mid, err in outcome.errors:
        print(f"mutate: {mid} failed: {err}", file=sys.stderr)
    after = {f: hashlib.sha256((REPO / f).read_bytes()).hexdigest() for f in files if (REPO / f).is_file()}
    if after != before:     # (the tool writes only in its copies: this would be a bug, or an edit)
        print(f"mutate: WARNING: changed in the checkout during the run: "
              f"{', '.join(f for f in files if after.get(f) != before.get(f))}", file=sys.stderr)
        return 1
    return 1 if outcome.errors else 0


def add_parser(subparsers) -> None:
    """``moehub mutate`` (registered by scripts/cli.py)."""
    p = subparsers.add_parser("mutate", help="mutation testing of the hub RTL against the fast set's RTL tests, on Dask",
                              description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(func=run_command)


if __name__ == "__main__":
    sys.exit(main())
