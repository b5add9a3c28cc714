"""Names of the cocotb tests in tb_hub.py, read without importing cocotb (for the testplan
check and the pytest wrapper)."""
import ast
from pathlib import Path

_SRC = Path(__file__).with_name("tb_hub.py")


def cocotb_tests(path: Path = _SRC) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if isinstance(target, ast.Attribute) and target.attr == "test":
                    names.append(node.name)
    return names


TEST_NAMES = cocotb_tests()
