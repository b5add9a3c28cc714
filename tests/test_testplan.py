"""The testplan names only tests that exist, and every cocotb test is planned."""
import ast
import re
from pathlib import Path

import yaml

from moehub.verif.tb.registry import all_tests

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "moehub" / "verif" / "testplan.yaml"


def _cocotb_names() -> set:
    """Every cocotb test the testplan must plan: every test of every suite of the hub
    testbench, by name (names are unique across the suites)."""
    return set(all_tests())


def _pytest_names(path: Path) -> set:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def test_testplan_refers_to_existing_tests():
    plan = yaml.safe_load(PLAN.read_text())
    planned_cocotb = set()
    for tp in plan["testpoints"]:
        assert tp.get("name") and tp.get("desc") and tp.get("tests"), f"incomplete testpoint {tp}"
        for t in tp["tests"]:
            kind, _, ref = t.partition(":")
            if kind == "cocotb":
                assert ref in _cocotb_names(), f"testpoint {tp['name']}: no cocotb test {ref}"
                planned_cocotb.add(ref)
            elif kind == "pytest":
                file, _, name = ref.partition("::")
                assert (ROOT / file).exists(), f"testpoint {tp['name']}: no file {file}"
                assert name in _pytest_names(ROOT / file), f"testpoint {tp['name']}: no test {ref}"
            else:
                raise AssertionError(f"testpoint {tp['name']}: unknown test kind in {t!r}")
    assert _cocotb_names() <= planned_cocotb, f"unplanned cocotb tests: {_cocotb_names() - planned_cocotb}"


#: the guides that state the hub's rules: protocol v1 (bad input, CSR map) and protocol v2
RULE_DOCS = [ROOT / "docs" / "hub.md", ROOT / "docs" / "protocol-v2.md"]


def _rules_text() -> str:
    return "\n".join(p.read_text() for p in RULE_DOCS)


def _table_names(heading: str, present: str | None = None) -> set:
    """Names in the first column of the table under the guides' ``heading`` (backquoted, comma
    separated, array suffixes like ``[e]`` dropped); with ``present``, only the rows whose
    ``present`` column says so (the CSR map lists the feature registers too, each with the
    features it needs: protocol v1's rules are the registers present ``always``)."""
    text = _rules_text()
    start = text.index(heading)
    names, in_table, col = set(), False, None
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.split("|")[1:-1]]
            if not in_table and present is not None:
                col = cells.index("present")
            in_table = True
            if col is not None and cells[col] != present:
                continue
            names |= {n.split("[")[0] for n in re.findall(r"`([A-Z_][A-Z0-9_\[\]a-z]*)`", cells[0])}
        elif in_table:
            break
    return names


def _rules_required(plan: dict) -> set:
    reasons = _table_names("## Bad input")
    registers = _table_names("## CSR map", "always")
    return {f"reason:{r}" for r in reasons} | {f"csr:{r}" for r in registers} | \
        {r["id"] for r in plan.get("readme_rules", [])}


def test_readme_tables_match_the_code():
    """The guides' tables the rules are read from name exactly the hub's drop reasons and
    registers (so a rule added in the code but not in the guides fails here, and vice versa)."""
    from moehub.spec.config import load_hub_config
    from moehub.spec.csr_map import CsrMap
    from moehub.spec.formats import V2_REASONS, Reason, config_reasons
    tiny = load_hub_config("tiny")
    assert _table_names("## Bad input") == {r.name for r in config_reasons(tiny)}
    assert _table_names("## CSR map", "always") == set(CsrMap(tiny).registers)
    v2 = _table_names("## Bad input of protocol v2")
    assert {r.name for r in V2_REASONS} <= v2 <= {r.name for r in Reason}


def test_protocol_v2_reasons_are_planned():
    """Protocol v2's reasons (reference model first) each have a testpoint; until
    its RTL exists they are tested on the model (pytest), and such testpoints say so."""
    from moehub.spec.formats import V2_REASONS
    plan = yaml.safe_load(PLAN.read_text())
    named = set()
    for tp in plan["testpoints"]:
        rules = {r for r in tp.get("rules", []) if r.startswith("reason:")}
        v2 = {f"reason:{r.name}" for r in V2_REASONS} & rules
        if v2 and not any(t.startswith("cocotb:") for t in tp["tests"]):
            assert tp.get("stage") == "model", f"testpoint {tp['name']}: no cocotb test, not marked stage: model"
        named |= v2
    assert named == {f"reason:{r.name}" for r in V2_REASONS}


def test_every_readme_rule_has_a_testpoint():
    """Every row of the guides' bad-input table, every register of their CSR map and every rule
    quoted in the testplan's readme_rules (the phrase must still be in the guides) is named by a
    testpoint that has at least one cocotb test; no testpoint names an unknown rule."""
    plan = yaml.safe_load(PLAN.read_text())
    readme = " ".join(_rules_text().split())
    for r in plan.get("readme_rules", []):
        assert " ".join(r["readme"].split()) in readme, f"rule {r['id']}: phrase not in docs/hub.md or docs/protocol-v2.md: {r['readme']!r}"
    required = _rules_required(plan)
    # (protocol v2's reasons are rows of protocol-v2.md's own table: a testpoint whose RTL is
    # tested (stage: rtl) may name them; they are required once every v2 feature has RTL)
    v2 = {f"reason:{r}" for r in _table_names("## Bad input of protocol v2")}
    covered = {}
    for tp in plan["testpoints"]:
        for rule in tp.get("rules", []):
            assert rule in required or tp.get("stage") == "model" or \
                (tp.get("stage") == "rtl" and rule in v2), \
                f"testpoint {tp['name']}: unknown rule {rule!r}"
            if any(t.startswith("cocotb:") for t in tp["tests"]):
                covered.setdefault(rule, []).append(tp["name"])
    missing = sorted(required - set(covered))
    assert not missing, f"rules of the guides without a testpoint naming a cocotb test: {missing}"
