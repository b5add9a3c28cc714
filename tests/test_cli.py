"""The ``moehub`` command line: rtl writes Verilog and the CSR map; bad input is reported."""
import json

from moehub.rtl.csr_map import CsrMap
from moehub.config.schema import load_hub_config
from moehub.scripts.cli import main


def test_rtl_writes_verilog_and_csr_map(tmp_path, capsys):
    assert main(["rtl", "--config", "tiny", "--out", str(tmp_path)]) == 0
    v = (tmp_path / "moehub.v").read_text()
    assert "module moehub(" in v and "i__0__payload" in v and "always @*" not in v
    exported = json.loads((tmp_path / "csr_map.json").read_text())
    cmap = CsrMap(load_hub_config("tiny"))
    assert exported["size_words"] == cmap.size_words
    assert "MOEHUB_CTRL" in (tmp_path / "moehub_csr.h").read_text()
    assert "tiny:" in capsys.readouterr().out


def test_bad_config_is_a_clear_error(capsys):
    assert main(["rtl", "--config", "no-such-hub"]) == 2
    err = capsys.readouterr().err
    assert "hub config 'no-such-hub' not found" in err and "tiny" in err
