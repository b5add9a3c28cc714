"""Packet/CSR formats: one definition, consistent addresses, exported for software."""
import json

import pytest

from moehub.spec.config import HUB_CONFIGS, load_hub_config
from moehub.spec.csr_map import CsrMap
from moehub.spec.formats import HubFormats, Reason, config_reasons


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_csr_map_is_dense_and_unique(name):
    cfg = load_hub_config(name)
    cmap = CsrMap(cfg)
    used = []
    for r in cmap.registers.values():
        for i in range(r.count):
            for w in range(r.words):
                used.append(r.addr(i, w))
    assert sorted(used) == list(range(cmap.size_words)), "registers overlap or leave holes"
    assert cmap.size_words <= 1 << cmap.addr_bits
    assert cmap["REGION_BASE"].count == cfg.experts and cmap["DROPS"].count == len(config_reasons(cfg)) == len(Reason) - 3
    exported = json.loads(cmap.to_json())
    assert {r["name"]: r["offset"] for r in exported["registers"]} == \
        {r.name: r.offset for r in cmap.registers.values()}
    assert "#define MOEHUB_REGION_BASE" in cmap.to_c_header()


def test_packet_pack_roundtrip_and_range():
    cfg = load_hub_config("tiny")
    f = HubFormats(cfg).packet
    values = dict(kind=1, src=2, tag=1, expert=3, token=200, slot=1, chunk=15, count=77, data=0xBEEF)
    assert f.unpack(f.pack(**values)) == values
    assert f.width == sum(fl.width for fl in f.fields)
    with pytest.raises(ValueError, match="packet.src = 16 does not fit"):
        f.pack(src=16)
