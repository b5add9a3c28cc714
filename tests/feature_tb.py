"""The protocol-v2 feature testbenches' pytest side (tests/test_hub_counts_cocotb.py,
test_hub_paged_cocotb.py, test_hub_paged_counts_cocotb.py): one cocotb module on one
feature config, on Icarus; the fast set runs its directed tests, the slow set its random
tests over many seeds."""
from pathlib import Path

from moehub.verif.tb_hub_names import cocotb_tests

DATA = Path(__file__).parent / "data"
VERIF = Path(__file__).parents[1] / "moehub" / "verif"


def run(config: str, testcases=None, **kw) -> dict:
    """The cocotb tests ``testcases`` (all of the module when None) of ``tests/data/<config>.yaml``
    on Icarus: none failed and some ran."""
    from moehub.verif.runner import run_hub_cocotb
    res = run_hub_cocotb(str(DATA / f"{config}.yaml"), testcases, sim="icarus", **kw)
    assert res["failed"] == 0, f"failing cocotb tests {res['failures']} (log next to {res['results']})"
    assert res["passed"] > 0, "no cocotb test ran"
    return res


def run_directed(config: str, module: str, tag: str) -> None:
    """Every test of ``verif/<module>.py`` but the random ones (``test_random*``), on the
    quick netlist (short tests: its generation saves more than its simulation costs)."""
    names = [n for n in cocotb_tests(VERIF / f"{module}.py") if not n.startswith("test_random")]
    res = run(config, names, module=module, tag=tag, quick=True)
    assert res["passed"] == len(names), f"expected {len(names)} tests, {res['passed']} passed"
