"""The hub configuration schema: defaults load, derived widths, errors name key and value."""
import dataclasses

import pytest

from moehub.spec.config import HUB_CONFIGS, ConfigError, HubConfig, load_hub_config


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_default_configs_load(name):
    cfg = load_hub_config(name)
    assert cfg.name == name
    assert cfg.chunks_per_row * cfg.chunk_bytes == cfg.row_bytes
    assert cfg.entries == cfg.sources * cfg.tags_per_source
    # every field of a packet can hold one value past its range (range checks testable)
    assert (1 << cfg.expert_bits) > cfg.experts and (1 << cfg.src_bits) > cfg.sources
    assert (1 << cfg.chunk_bits) > cfg.chunks_per_row and (1 << cfg.tag_bits) > cfg.tags_per_source


def test_realistic_configs_keep_up_with_nvlink4():
    """4 lanes x 128 B at the configured hub clock cover NVLink4's 450 GB/s (FACTS.md)."""
    for name in ("mixtral-8gpu", "deepseek-v3-8gpu"):
        assert load_hub_config(name).line_rate_GBps >= 450


def _tiny(**changes):
    return load_hub_config("tiny").replace(**changes)


@pytest.mark.parametrize("changes, key, value", [
    (dict(lanes=0), "lanes", "0"),
    (dict(chunk_bytes=24), "chunk_bytes", "24"),
    (dict(row_bytes=250), "row_bytes", "250"),
    (dict(tile_rows=3), "tile_rows", "3"),
    (dict(tile_rows=64), "tile_rows", "64"),
    (dict(max_rows_per_expert=100), "max_rows_per_expert", "100"),
    (dict(data_bits=1000), "data_bits", "1000"),
    (dict(addr_bits=8), "addr_bits", "8"),
    (dict(event_queue_depth=4), "event_queue_depth", "4"),
    (dict(row_bytes=16), "row_bytes", "16"),
    (dict(timeout_cycles=-1), "timeout_cycles", "-1"),
])
def test_bad_values_name_key_and_value(changes, key, value):
    with pytest.raises(ConfigError) as e:
        _tiny(**changes)
    msg = str(e.value)
    assert f".{key} = {value}" in msg, msg


def test_unknown_and_missing_keys(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("sources: 2\nlanez: 4\n")
    with pytest.raises(ConfigError, match=r"lanez = 4: unknown key"):
        load_hub_config(str(p))
    raw = dataclasses.asdict(load_hub_config("tiny"))
    del raw["lanes"]
    with pytest.raises(ConfigError, match=r"\.lanes: missing required key"):
        HubConfig.from_dict(raw)


def test_wrong_types_and_files(tmp_path):
    raw = dataclasses.asdict(load_hub_config("tiny"))
    raw["lanes"] = "four"
    with pytest.raises(ConfigError, match=r"lanes = 'four': must be an integer"):
        HubConfig.from_dict(raw)
    with pytest.raises(ConfigError, match="not found"):
        load_hub_config("no-such-config")
    p = tmp_path / "broken.yaml"
    p.write_text("lanes: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_hub_config(str(p))
