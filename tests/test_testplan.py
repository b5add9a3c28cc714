"""The testplan names only tests that exist, and every cocotb test is planned."""
import ast
from pathlib import Path

import yaml

from moehub.verif.tb_hub_names import TEST_NAMES

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "verif" / "testplan.yaml"


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
                assert ref in TEST_NAMES, f"testpoint {tp['name']}: no cocotb test {ref}"
                planned_cocotb.add(ref)
            elif kind == "pytest":
                file, _, name = ref.partition("::")
                assert (ROOT / file).exists(), f"testpoint {tp['name']}: no file {file}"
                assert name in _pytest_names(ROOT / file), f"testpoint {tp['name']}: no test {ref}"
            else:
                raise AssertionError(f"testpoint {tp['name']}: unknown test kind in {t!r}")
    assert set(TEST_NAMES) <= planned_cocotb, f"unplanned cocotb tests: {set(TEST_NAMES) - planned_cocotb}"
